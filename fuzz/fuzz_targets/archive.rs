//! Archive descriptor decoder (first byte even) and tar member inspection (odd).
#![no_main]
libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    let Some((&sel, rest)) = data.split_first() else { return };
    if sel % 2 == 0 {
        let _ = serde_json::from_slice::<commcanary::campaign::ArchiveDescriptor>(rest);
    } else {
        let _ = commcanary::campaign::inspect_members(rest, "fuzz");
    }
});
