//! Attempts log (attempts.jsonl) reader, torn lines included.
#![no_main]
libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    let _ = commcanary::campaign::chain::parse_attempts(data, "fuzz");
});
