//! A validation site file (`validate --site`): refused with a message or
//! accepted with thresholds a reference can pass against itself.
#![no_main]
libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    if let Ok(text) = std::str::from_utf8(data) {
        if let Ok(s) = commcanary::validate::reference::Site::parse(text, "fuzz.toml") {
            assert!(s.busbw_min_ratio > 0.0 && s.busbw_min_ratio <= 1.0 && s.token_latency_max_ratio >= 1.0);
            assert!(s.coverage > 0.0 && s.coverage < 1.0);
        }
    }
});
