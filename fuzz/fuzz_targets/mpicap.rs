//! `import mpi`'s per-rank capture decoder (`rank-NNNNN.mpicap`), then the
//! trace made from a decoded rank. The first byte chooses: even, the rest is
//! a whole file; odd, the rest is split into up to three block payloads
//! (record counts from its first bytes) framed with a valid header, digests
//! and trailer, so the record decoder behind the digests is reached.
#![no_main]
libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    use commcanary::evidence::commtrace::{mpi, Limits};
    let Some((mode, rest)) = data.split_first() else { return };
    let limits = Limits::default();
    let file = if mode % 2 == 0 {
        rest.to_vec()
    } else {
        if rest.len() < 5 {
            return;
        }
        let (counts, body) = rest.split_at(5);
        let world = 1 + u32::from(counts[4] % 2);
        let header = format!(
            "{{\"format_version\":1,\"tool\":\"fuzz\",\"run_id\":\"r\",\"world_rank\":0,\"world_size\":{world},\"host\":\"h\",\"pid\":1,\"argv\":[],\
             \"clock\":\"CLOCK_MONOTONIC\",\"init_monotonic_ns\":0,\"init_realtime_ns\":0,\
             \"calls\":[\"MPI_Allreduce\",\"MPI_Iallreduce\",\"MPI_Wait\",\"MPI_Bcast\",\"MPI_Send\",\"MPI_Recv\",\"MPI_Barrier\",\"MPI_Waitall\"]}}"
        );
        let cut1 = (usize::from(counts[3]) * body.len() / 255).min(body.len());
        let (a, b) = body.split_at(cut1);
        let cut2 = b.len() / 2;
        let (b, c) = b.split_at(cut2);
        let blocks = [(u32::from(counts[0]), a), (u32::from(counts[1]), b), (u32::from(counts[2]), c)];
        mpi::frame_capture(header.as_bytes(), &blocks, mode % 4 == 1)
    };
    if let Ok(r) = mpi::parse_rank(&file, "fuzz", &limits) {
        let _ = r.calls_by_kind();
        if r.header.world_size == 1 {
            let _ = mpi::to_trace(&mpi::MpiCapture { ranks: vec![r] });
        }
    }
});
