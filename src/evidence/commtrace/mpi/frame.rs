//! Capture files framed from records, as the capture library frames them: magic, version, header
//! with its SHA-256, blocks each with its SHA-256, the chain over them and the trailer. Consumes a
//! header's JSON and block payloads, or a fuzz input; produces the file's bytes, so that tests and
//! the fuzz target reach the record decoder behind the digests. Checks nothing, refuses nothing.
use super::rank_capture::{BLOCK_MAGIC, CAPTURE_FORMAT_VERSION, MAGIC, TRAILER_MAGIC};
use sha2::{Digest, Sha256};

/// A capture file around `header` (its JSON) and `blocks` (each block's
/// declared record count and payload), the trailer last where `trailer`: the
/// framing the capture library writes (magic, lengths, each block's SHA-256
/// and the chain over them) at [`CAPTURE_FORMAT_VERSION`], for tests and the
/// fuzz target to reach the record decoder behind the digests.
pub fn frame_capture(header: &[u8], blocks: &[(u32, &[u8])], trailer: bool) -> Vec<u8> {
    frame_capture_version(CAPTURE_FORMAT_VERSION, header, blocks, trailer)
}

/// [`frame_capture`] declaring layout `version` (a test of an older capture).
pub fn frame_capture_version(version: u32, header: &[u8], blocks: &[(u32, &[u8])], trailer: bool) -> Vec<u8> {
    let mut b = Vec::new();
    b.extend_from_slice(MAGIC);
    b.extend_from_slice(&version.to_le_bytes());
    b.extend_from_slice(&(header.len() as u32).to_le_bytes());
    b.extend_from_slice(header);
    b.extend_from_slice(&Sha256::digest(header));
    let (mut chain, mut records) = (Sha256::new(), 0u64);
    for (seq, (nrec, payload)) in blocks.iter().enumerate() {
        let mut head = Vec::new();
        head.extend_from_slice(&(seq as u64).to_le_bytes());
        head.extend_from_slice(&nrec.to_le_bytes());
        head.extend_from_slice(&(payload.len() as u32).to_le_bytes());
        let digest = Sha256::new().chain_update(&head).chain_update(payload).finalize();
        chain.update(digest);
        records += u64::from(*nrec);
        b.extend_from_slice(BLOCK_MAGIC);
        b.extend_from_slice(&head);
        b.extend_from_slice(payload);
        b.extend_from_slice(&digest);
    }
    if trailer {
        b.extend_from_slice(TRAILER_MAGIC);
        b.extend_from_slice(&(blocks.len() as u64).to_le_bytes());
        b.extend_from_slice(&records.to_le_bytes());
        b.extend_from_slice(&chain.finalize());
    }
    b
}

/// The capture file a fuzz input stands for (the fuzz target `mpicap` and
/// the seed test read inputs so): a mode byte, then a whole file (even), or
/// (odd) five bytes (three blocks' record counts, where to cut the rest, the
/// world size) and the rest cut into up to three block payloads, framed with
/// a valid header, digests and (mode % 4 == 1) the trailer. `None`: too
/// short for its mode.
pub fn capture_from_fuzz_input(data: &[u8]) -> Option<Vec<u8>> {
    let (mode, rest) = data.split_first()?;
    if mode % 2 == 0 {
        return Some(rest.to_vec());
    }
    if rest.len() < 5 {
        return None;
    }
    let (counts, body) = rest.split_at(5);
    let world = 1 + u32::from(counts[4] % 2);
    let header = serde_json::json!({
        "format_version": CAPTURE_FORMAT_VERSION, "tool": "fuzz", "run_id": "r", "world_rank": 0, "world_size": world,
        "host": "h", "pid": 1, "argv": [], "clock": "CLOCK_MONOTONIC", "init_monotonic_ns": 0, "init_realtime_ns": 0,
        "calls": [
            "MPI_Allreduce", "MPI_Iallreduce", "MPI_Wait", "MPI_Bcast", "MPI_Send", "MPI_Recv", "MPI_Barrier",
            "MPI_Waitall", "Allgatherv", "Alltoallv", "Gatherv", "Scatterv", "Reduce_scatter", "Scan", "Iexscan", "Wait"
        ]
    })
    .to_string();
    let cut1 = (usize::from(counts[3]) * body.len() / 255).min(body.len());
    let (a, b) = body.split_at(cut1);
    let (b, c) = b.split_at(b.len() / 2);
    Some(frame_capture(
        header.as_bytes(),
        &[(u32::from(counts[0]), a), (u32::from(counts[1]), b), (u32::from(counts[2]), c)],
        mode % 4 == 1,
    ))
}
