//! Shard body decoder alone (versions 1-3, chosen by the first byte), so
//! mutations reach bincode without first having to match a SHA-256 trailer.
#![no_main]
libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    let Some((&v, body)) = data.split_first() else { return };
    let _ = commcanary::evidence::shard::decode_shard_body(1 + (v % 3) as u32, body, "fuzz");
});
