//! Summary-table CSV parser (compare).
#![no_main]
libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    if let Ok(text) = std::str::from_utf8(data) {
        let _ = commcanary::analysis::ranking::parse_csv(text, "fuzz");
    }
});
