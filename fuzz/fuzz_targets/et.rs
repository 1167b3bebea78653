//! PyTorch execution-trace (Chakra ET) JSON decoder of `import et`, gzip included.
#![no_main]
libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    use commcanary::evidence::commtrace::{decompress, et, Limits};
    let limits = Limits::default();
    if let Ok(json) = decompress(data, &limits) {
        let _ = et::parse(&json, "fuzz", String::new(), &limits);
    }
});
