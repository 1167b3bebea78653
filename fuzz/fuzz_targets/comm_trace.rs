//! Communication trace (`commcanary import` output) decoder, and what reads a
//! decoded one: the replay pacing and both exports.
#![no_main]
libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    use commcanary::evidence::commtrace::{exec, export, CommTrace};
    if let Ok(t) = CommTrace::from_slice(data) {
        for r in &t.ranks {
            let _ = exec::gaps_ns(&r.collectives);
        }
        let _ = export::param(&t);
        let _ = export::et(&t);
    }
});
