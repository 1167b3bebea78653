//! `import mpi`'s per-rank capture decoder (`rank-NNNNN.mpicap`), then the
//! trace made from a decoded rank. The first byte chooses: even, the rest is
//! a whole file; odd, the rest is split into up to three block payloads
//! (record counts from its first bytes) framed with a valid header, digests
//! and trailer, so the record decoder behind the digests is reached.
#![no_main]
libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    use commcanary::evidence::commtrace::{mpi, Limits};
    let Some(file) = mpi::capture_from_fuzz_input(data) else { return };
    let limits = Limits::default();
    if let Ok(r) = mpi::parse_rank(&file, "fuzz", &limits) {
        let _ = r.calls_by_kind();
        if r.header.world_size == 1 {
            let _ = mpi::to_trace(&mpi::MpiCapture { ranks: vec![r] });
        }
    }
});
