//! Selection file decoder.
#![no_main]
libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    let _ = serde_json::from_slice::<commcanary::campaign::chain::Selection>(data);
});
