//! Run record (run.json) decoder and structure checks.
#![no_main]
libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    let _ = commcanary::evidence::run::parse_run_record(data, "fuzz");
});
