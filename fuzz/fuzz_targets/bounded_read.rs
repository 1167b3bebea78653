//! The bounded file readers every input goes through (`core::limits`):
//! whatever the bytes and the limit, `read_bounded`, `read_text_bounded` and
//! `sha256_bounded` return the file whole when it is within the limit, refuse
//! it (`OVER_LIMIT`) when it is over, and never read past limit + 1 bytes.
#![no_main]
use std::io::Write;

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    use commcanary::core::limits::{read_bounded, read_text_bounded, sha256_bounded};
    use commcanary::core::refusal::code_of;
    if data.len() < 2 {
        return;
    }
    // the first two bytes pick the limit, the rest is the file
    let limit = u16::from_le_bytes([data[0], data[1]]) as u64 % 4096;
    let body = &data[2..];
    let path = std::env::temp_dir().join(format!("commcanary-fuzz-bounded-{}", std::process::id()));
    std::fs::File::create(&path).and_then(|mut f| f.write_all(body)).expect("temp file");
    let within = body.len() as u64 <= limit;
    match read_bounded(&path, limit) {
        Ok(b) => assert!(within && b == body, "read {} bytes of {} under limit {limit}", b.len(), body.len()),
        Err(e) => assert!(!within && code_of(&e).map(|c| c.as_str()) == Some("OVER_LIMIT"), "{e:#}"),
    }
    match sha256_bounded(&path, limit) {
        Ok(h) => assert!(within && h == commcanary::core::fsutil::sha256_hex(body)),
        Err(e) => assert!(!within, "{e:#}"),
    }
    match read_text_bounded(&path, limit) {
        Ok(t) => assert!(within && t.as_bytes() == body),
        Err(e) => assert!(!within || std::str::from_utf8(body).is_err(), "{e:#}"),
    }
});
