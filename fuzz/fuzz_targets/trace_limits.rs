//! The counted trace decoders (`import kineto`, `import et`) under small
//! limits picked by the input: every limit (decompressed bytes, events,
//! collectives, ranks, groups, name bytes) is reached by inputs of a few
//! kilobytes, so the paths that stop at a limit are exercised, not only the
//! ones that accept.
#![no_main]
libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    use commcanary::evidence::commtrace::{decompress, et, kineto, Limits};
    if data.len() < 6 {
        return;
    }
    let limits = Limits {
        max_file_bytes: 1 << 20,
        max_json_bytes: 64 + (data[0] as u64) * 256,
        max_events: 1 + data[1] as usize % 64,
        max_nodes: 1 + data[1] as usize % 64,
        max_collectives: 1 + data[2] as usize % 32,
        max_ranks: 1 + data[3] as u32 % 16,
        max_groups: 1 + data[4] as usize % 8,
        max_name_bytes: 1 + data[5] as usize,
    };
    let body = &data[6..];
    if let Ok(json) = decompress(body, &limits) {
        assert!(json.len() as u64 <= limits.max_json_bytes, "decompressed {} bytes past the limit", json.len());
        let _ = kineto::parse(&json, "fuzz", String::new(), &limits);
        let _ = et::parse(&json, "fuzz", String::new(), &limits);
    }
});
