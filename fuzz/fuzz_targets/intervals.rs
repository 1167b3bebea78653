//! Interval file decoder and the overlap computation it feeds.
#![no_main]
libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    if let Ok(iv) = serde_json::from_slice::<commcanary::analysis::overlap::IntervalFile>(data) {
        let _ = commcanary::analysis::overlap::overlap(&iv.compute, &iv.comm);
    }
});
