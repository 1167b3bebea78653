//! PyTorch profiler (Kineto) JSON decoder of `import kineto`, gzip included.
#![no_main]
libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    use commcanary::evidence::commtrace::{decompress, kineto, Limits};
    let limits = Limits::default();
    if let Ok(json) = decompress(data, &limits) {
        let _ = kineto::parse(&json, "fuzz", String::new(), &limits);
    }
});
