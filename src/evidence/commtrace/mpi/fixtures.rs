//! Capture files and folders that the stages' tests build from records, as the capture library
//! writes them (layout: `capture/src/format.rs`).
use super::frame_capture_version;
use super::rank_capture::{CALL_LEN, CAPTURE_FORMAT_VERSION, NONE, REC_CALL, REC_COMM, REC_DONE, REC_DTYPE, REC_OP};

/// A capture file as the library writes it (layout: capture/src/format.rs), from records.
pub(super) fn file(rank: u32, world: u32, run: &str, blocks: &[Vec<(u8, Vec<u8>)>], trailer: bool) -> Vec<u8> {
    file_v(CAPTURE_FORMAT_VERSION, &["Allreduce", "Iallreduce", "Wait"], rank, world, run, blocks, trailer)
}

/// [`file`] at layout `version`, with the header naming `calls`.
pub(super) fn file_v(
    version: u32,
    calls: &[&str],
    rank: u32,
    world: u32,
    run: &str,
    blocks: &[Vec<(u8, Vec<u8>)>],
    trailer: bool,
) -> Vec<u8> {
    let h = serde_json::json!({
        "format_version": version, "tool": "t", "run_id": run, "world_rank": rank, "world_size": world,
        "host": "h", "pid": 1, "argv": [], "clock": "CLOCK_MONOTONIC", "init_monotonic_ns": 0,
        "init_realtime_ns": 0, "calls": calls
    })
    .to_string();
    let payloads: Vec<(u32, Vec<u8>)> = blocks
        .iter()
        .map(|recs| {
            let mut payload = Vec::new();
            for (ty, p) in recs {
                payload.push(*ty);
                payload.push(0);
                payload.extend_from_slice(&(p.len() as u16).to_le_bytes());
                payload.extend_from_slice(p);
            }
            (recs.len() as u32, payload)
        })
        .collect();
    let framed: Vec<(u32, &[u8])> = payloads.iter().map(|(n, p)| (*n, p.as_slice())).collect();
    frame_capture_version(version, h.as_bytes(), &framed, trailer)
}

/// An all-reduce of 4 doubles on communicator 1 (the world of 2), as the library writes it.
pub(super) fn allreduce_block(kind: u16, request: u64) -> Vec<(u8, Vec<u8>)> {
    let mut comm = Vec::new();
    comm.extend_from_slice(&1u32.to_le_bytes());
    comm.push(0);
    comm.extend_from_slice(&0u32.to_le_bytes());
    comm.extend_from_slice(&0u32.to_le_bytes());
    comm.extend_from_slice(&1u32.to_le_bytes());
    let mut dt = 1u16.to_le_bytes().to_vec();
    dt.extend_from_slice(&8i32.to_le_bytes());
    dt.extend_from_slice(b"MPI_DOUBLE");
    let mut op = 1u16.to_le_bytes().to_vec();
    op.extend_from_slice(b"sum");
    vec![(REC_COMM, comm), (REC_DTYPE, dt), (REC_OP, op), call(kind, (4, 4), 1, None, request)]
}

/// A call record of kind `kind` on communicator 1 with datatype 1 and op `op`, entered at 100
/// and returned at 150.
pub(super) fn call(kind: u16, (send, recv): (u64, u64), op: u16, root: Option<i32>, request: u64) -> (u8, Vec<u8>) {
    let mut c = vec![0u8; CALL_LEN];
    c[0..2].copy_from_slice(&kind.to_le_bytes());
    c[4..8].copy_from_slice(&1u32.to_le_bytes());
    c[8..16].copy_from_slice(&100u64.to_le_bytes());
    c[16..24].copy_from_slice(&150u64.to_le_bytes());
    c[24..32].copy_from_slice(&send.to_le_bytes());
    c[32..40].copy_from_slice(&recv.to_le_bytes());
    c[40..42].copy_from_slice(&1u16.to_le_bytes());
    c[42..44].copy_from_slice(&1u16.to_le_bytes());
    c[44..46].copy_from_slice(&op.to_le_bytes());
    for o in [48, 52, 72, 76] {
        c[o..o + 4].copy_from_slice(&NONE.to_le_bytes());
    }
    if let Some(r) = root {
        c[48..52].copy_from_slice(&r.to_le_bytes());
    }
    c[56..64].copy_from_slice(&request.to_le_bytes());
    (REC_CALL, c)
}

/// The completion record of nonblocking request `request`, completed at `done_ns`.
pub(super) fn done(request: u64, done_ns: u64) -> (u8, Vec<u8>) {
    let mut d = vec![0u8; 32];
    d[0..8].copy_from_slice(&request.to_le_bytes());
    d[8..16].copy_from_slice(&done_ns.to_le_bytes());
    (REC_DONE, d)
}

pub(super) fn write_dir(files: &[(u32, Vec<u8>)]) -> tempfile::TempDir {
    let d = tempfile::tempdir().unwrap();
    for (r, b) in files {
        std::fs::write(d.path().join(format!("rank-{r:05}.mpicap")), b).unwrap();
    }
    d
}
