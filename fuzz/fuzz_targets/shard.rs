//! Shard header + body decoder (bincode under size limits).
#![no_main]
libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    let _ = commcanary::evidence::shard::Shard::decode(data, "fuzz");
});
