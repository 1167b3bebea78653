//! Service-time file parser (queue).
#![no_main]
libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    if let Ok(text) = std::str::from_utf8(data) {
        let _ = commcanary::analysis::queue::parse_service_times(text, "fuzz");
    }
});
