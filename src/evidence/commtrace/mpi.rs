//! `import mpi`: an MPI application's calls as `commcanary capture` recorded them.
//!
//! Consumes a capture folder, one `rank-NNNNN.mpicap` per rank (layout:
//! `capture/src/format.rs`), recomputing every digest and count. Produces per
//! rank the calls per kind ([`MpiCapture::calls_by_kind`]) and a
//! [`CommTrace`] of every collective, blocking or not, with its counts and
//! reduction; point-to-point calls go to `mpi.p2p`, every other call is counted
//! in [`MpiSummary::left_out`] with the reason. Refuses with a code: no capture
//! (`NOT_MPI`), a rank missing or twice, files of two runs, a rank without
//! trailer (unless allowed), bad layout, another version, a digest mismatch.
//! What is read: docs/METHODS.md, "MPI capture import".
use super::{
    number_sequences, ClockDomain, CollectiveKind, CommTrace, Limits, RankTrace, SourceFile, SourceKind, TraceClock,
    TraceCollective, TraceDtype, TraceGroup, TraceSource, UnknownField,
};
use crate::core::clock::{fit_rank_model, ClockModel, PingSample};
use crate::core::refusal::{self, Code};
use crate::core::{fsutil, limits};
use crate::refuse;
use anyhow::{Context, Result};
use sha2::{Digest, Sha256};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// Capture file layout version this build writes (in [`frame_capture`]) and reads, with every earlier one.
pub const CAPTURE_FORMAT_VERSION: u32 = 2;
/// The oldest capture layout this build reads (version 1 has no per-member counts of v-calls).
pub const MIN_CAPTURE_FORMAT_VERSION: u32 = 1;
const MAGIC: &[u8; 8] = b"CCMPICAP";
const BLOCK_MAGIC: &[u8; 8] = b"CCBLOCK\0";
const TRAILER_MAGIC: &[u8; 8] = b"CCTRAIL\0";
/// Largest header and block payload read (the writer uses 64 KiB blocks; a
/// larger declared length is refused before it is read).
const MAX_HEADER_BYTES: u32 = 1 << 20;
const MAX_BLOCK_BYTES: u32 = 16 << 20;
const REC_CALL: u8 = 1;
const REC_DONE: u8 = 2;
const REC_DTYPE: u8 = 3;
const REC_OP: u8 = 4;
const REC_COMM: u8 = 5;
const REC_COMM_FREE: u8 = 6;
const REC_ABORT: u8 = 7;
const REC_CLOCK: u8 = 8;
/// Version 2: a v-call's per-member counts, after its call record (side u8, then u32 each).
const REC_COUNTS: u8 = 9;
const CALL_LEN: usize = 80;
const NONE: i32 = i32::MIN;

/// The header a rank's capture file starts with.
#[derive(serde::Deserialize, Clone, Debug)]
pub struct CaptureHeader {
    /// Layout version.
    pub format_version: u32,
    /// Library name and version.
    pub tool: String,
    /// Shared by every rank of one run (rank 0's, broadcast at `MPI_Init`).
    pub run_id: String,
    /// World rank.
    pub world_rank: u32,
    /// World size.
    pub world_size: u32,
    /// Host name.
    pub host: String,
    /// Process id.
    pub pid: u32,
    /// The `commcanary capture` process it ran under (absent when started otherwise).
    #[serde(default)]
    pub capture_pid: Option<u32>,
    /// Command line of the process.
    pub argv: Vec<String>,
    /// Clock of every time (`CLOCK_MONOTONIC`).
    pub clock: String,
    /// That clock at `MPI_Init`.
    pub init_monotonic_ns: u64,
    /// The wall clock at `MPI_Init`, ns since the Unix epoch.
    pub init_realtime_ns: u64,
    /// Call kind names, by number.
    pub calls: Vec<String>,
    /// Which `CLOCK_MONOTONIC` the process read (boot id and time namespace), where readable.
    #[serde(default)]
    pub kernel_clock: Option<String>,
}

/// One recorded call.
#[derive(Clone, Debug, PartialEq)]
pub struct CallRecord {
    /// Index into the header's `calls`.
    pub kind: u16,
    /// Bit 0: Fortran caller; bit 1: the library returned an error.
    pub flags: u16,
    /// Communicator id (0: none).
    pub comm: u32,
    /// Entry time, ns (`CLOCK_MONOTONIC`).
    pub t_issue_ns: u64,
    /// Return time, ns.
    pub t_done_ns: u64,
    /// Elements sent.
    pub count_send: u64,
    /// Elements received.
    pub count_recv: u64,
    /// Send datatype id.
    pub dt_send: u16,
    /// Receive datatype id.
    pub dt_recv: u16,
    /// Op id.
    pub op: u16,
    /// Root or peer (world rank, or MPI's negative value); `None` if the call has none.
    pub peer: Option<i32>,
    /// Tag.
    pub tag: Option<i32>,
    /// Request created, or waited on.
    pub request: u64,
    /// Return value.
    pub ret: i32,
    /// Array length (wait and test families).
    pub n: u32,
    /// Matched source (receive side).
    pub peer2: Option<i32>,
    /// Matched tag.
    pub tag2: Option<i32>,
    /// A v-call's per-member send counts, where significant and recorded (capture version 2).
    pub send_counts: Option<Vec<u64>>,
    /// A v-call's per-member receive counts, as above.
    pub recv_counts: Option<Vec<u64>>,
}

/// One request's completion.
#[derive(Clone, Debug, PartialEq)]
pub struct DoneRecord {
    /// Request id.
    pub request: u64,
    /// Time of the completing call's return.
    pub t_ns: u64,
    /// Source (world rank), where known.
    pub source: Option<i32>,
    /// Tag, where known.
    pub tag: Option<i32>,
    /// Index (among the rank's calls) of the wait or test call that completed it.
    pub call: u64,
}

/// One rank's decoded capture.
#[derive(Clone, Debug)]
pub struct RankCapture {
    /// The file.
    pub file: SourceFile,
    /// Its layout version ([`MIN_CAPTURE_FORMAT_VERSION`]..=[`CAPTURE_FORMAT_VERSION`]).
    pub version: u32,
    /// Its header.
    pub header: CaptureHeader,
    /// Calls in order.
    pub calls: Vec<CallRecord>,
    /// Completions, by request id.
    pub done: BTreeMap<u64, DoneRecord>,
    /// Datatypes: id → (size in bytes, name).
    pub dtypes: BTreeMap<u16, (i32, String)>,
    /// Ops: id → name.
    pub ops: BTreeMap<u16, String>,
    /// Communicators: id → (members as world ranks, ordinal among those with these members).
    pub comms: BTreeMap<u32, (Vec<u32>, u32)>,
    /// Why the capture is incomplete (no trailer, torn block, `MPI_Abort`), if it is.
    pub incomplete: Option<String>,
    /// Ping-pong samples against rank 0 at `MPI_Init` and at `MPI_Finalize` (empty on rank 0).
    pub clock_windows: [Vec<PingSample>; 2],
}

/// A whole capture folder, checked.
#[derive(Clone, Debug)]
pub struct MpiCapture {
    /// Ranks in rank order.
    pub ranks: Vec<RankCapture>,
}

fn u16_at(b: &[u8], o: usize) -> u16 {
    u16::from_le_bytes([b[o], b[o + 1]])
}
fn u32_at(b: &[u8], o: usize) -> u32 {
    u32::from_le_bytes(b[o..o + 4].try_into().unwrap_or_default())
}
fn i32_at(b: &[u8], o: usize) -> i32 {
    u32_at(b, o) as i32
}
fn u64_at(b: &[u8], o: usize) -> u64 {
    u64::from_le_bytes(b[o..o + 8].try_into().unwrap_or_default())
}
fn opt(v: i32) -> Option<i32> {
    (v != NONE).then_some(v)
}

/// Only the header of a capture file (checked against its digest).
pub fn read_header(path: &Path) -> Result<CaptureHeader> {
    use std::io::Read;
    let mut f = std::fs::File::open(path).with_context(|| path.display().to_string())?;
    let mut head = [0u8; 16];
    f.read_exact(&mut head).with_context(|| path.display().to_string())?;
    let known = MIN_CAPTURE_FORMAT_VERSION..=CAPTURE_FORMAT_VERSION;
    if &head[..8] != MAGIC || !known.contains(&u32_at(&head, 8)) || u32_at(&head, 12) > MAX_HEADER_BYTES {
        refuse!(
            Code::BadFormat,
            "{}: not a capture file of format {MIN_CAPTURE_FORMAT_VERSION} to {CAPTURE_FORMAT_VERSION}",
            path.display()
        );
    }
    let mut rest = vec![0u8; u32_at(&head, 12) as usize + 32];
    f.read_exact(&mut rest).with_context(|| path.display().to_string())?;
    let (json, digest) = rest.split_at(rest.len() - 32);
    if Sha256::digest(json).as_slice() != digest {
        refuse!(Code::DigestMismatch, "{}: the header does not hash to its recorded SHA-256", path.display());
    }
    serde_json::from_slice(json)
        .map_err(|e| refusal::refuse(Code::BadFormat, format!("{}: header: {e}", path.display())))
}

/// Decode and check one rank's file. A file that ends without its trailer,
/// or inside a block, is returned marked incomplete (every whole block kept).
pub fn read_rank(path: &Path, limits: &Limits) -> Result<RankCapture> {
    let bytes = limits::read_bounded(path, limits.max_file_bytes)?;
    parse_rank(&bytes, &path.display().to_string(), limits)
}

/// [`read_rank`] on bytes already read (`name` names them in messages): the
/// per-rank decoder of `import mpi`, which the fuzz target drives.
pub fn parse_rank(bytes: &[u8], name: &str, limits: &Limits) -> Result<RankCapture> {
    let name = name.to_string();
    if bytes.len() < 16 || &bytes[..8] != MAGIC {
        refuse!(Code::BadFormat, "{name}: not a CommCanary MPI capture file (no CCMPICAP magic)");
    }
    let version = u32_at(bytes, 8);
    if !(MIN_CAPTURE_FORMAT_VERSION..=CAPTURE_FORMAT_VERSION).contains(&version) {
        refuse!(
            Code::UnsupportedVersion,
            "{name}: capture format version {version} (this build reads {MIN_CAPTURE_FORMAT_VERSION} to \
                {CAPTURE_FORMAT_VERSION})"
        );
    }
    let hlen = u32_at(bytes, 12);
    if hlen > MAX_HEADER_BYTES {
        refuse!(Code::OverLimit, "{name}: header of {hlen} bytes, over the {MAX_HEADER_BYTES}-byte limit");
    }
    let hend = 16 + hlen as usize;
    if bytes.len() < hend + 32 {
        refuse!(Code::Truncated, "{name}: truncated inside its header ({} bytes, header declares {hlen})", bytes.len());
    }
    let hjson = &bytes[16..hend];
    if Sha256::digest(hjson).as_slice() != &bytes[hend..hend + 32] {
        refuse!(Code::DigestMismatch, "{name}: the header does not hash to the SHA-256 recorded after it");
    }
    let header: CaptureHeader =
        serde_json::from_slice(hjson).map_err(|e| refusal::refuse(Code::BadFormat, format!("{name}: header: {e}")))?;
    if header.world_size == 0 || header.world_size > limits.max_ranks || header.world_rank >= header.world_size {
        refuse!(Code::BadStructure, "{name}: rank {} of a world of {} ranks", header.world_rank, header.world_size);
    }
    let mut r = RankCapture {
        file: SourceFile { path: name.clone(), sha256: fsutil::sha256_hex(bytes), rank: header.world_rank },
        version,
        header,
        calls: Vec::new(),
        done: BTreeMap::new(),
        dtypes: BTreeMap::new(),
        ops: BTreeMap::new(),
        comms: BTreeMap::new(),
        incomplete: None,
        clock_windows: [Vec::new(), Vec::new()],
    };
    let mut pos = hend + 32;
    let (mut blocks, mut records) = (0u64, 0u64);
    let mut chain = Sha256::new();
    loop {
        if pos == bytes.len() {
            r.incomplete.get_or_insert_with(|| {
                format!("{name}: ends after {blocks} blocks without a trailer: the rank did not reach MPI_Finalize")
            });
            break;
        }
        if bytes.len() - pos < 8 {
            r.incomplete = Some(format!(
                "{name}: torn after {blocks} blocks ({} stray bytes): the rank stopped while writing",
                bytes.len() - pos
            ));
            break;
        }
        let magic = &bytes[pos..pos + 8];
        if magic == TRAILER_MAGIC {
            if bytes.len() - pos != 56 {
                if bytes.len() - pos < 56 {
                    r.incomplete = Some(format!("{name}: torn trailer: the rank stopped while finishing"));
                    break;
                }
                refuse!(Code::BadFormat, "{name}: {} bytes after the trailer", bytes.len() - pos - 56);
            }
            let (tb, tr) = (u64_at(bytes, pos + 8), u64_at(bytes, pos + 16));
            if tb != blocks || tr != records || chain.clone().finalize().as_slice() != &bytes[pos + 24..pos + 56] {
                refuse!(
                    Code::DigestMismatch,
                    "{name}: the trailer records {tb} blocks and {tr} records, the file holds {blocks} and {records}, \
                        or its digest over the blocks differs"
                );
            }
            break;
        }
        if magic != BLOCK_MAGIC {
            refuse!(Code::BadFormat, "{name}: byte {pos}: neither a block nor the trailer");
        }
        if bytes.len() - pos < 24 {
            r.incomplete = Some(format!("{name}: torn block header after {blocks} blocks"));
            break;
        }
        let (seq, nrec, plen) = (u64_at(bytes, pos + 8), u32_at(bytes, pos + 16), u32_at(bytes, pos + 20));
        if seq != blocks {
            refuse!(Code::BadFormat, "{name}: block {seq} where block {blocks} belongs (a block lost or repeated)");
        }
        if plen > MAX_BLOCK_BYTES {
            refuse!(
                Code::OverLimit,
                "{name}: block {seq} declares {plen} bytes, over the {MAX_BLOCK_BYTES}-byte limit"
            );
        }
        let end = pos + 24 + plen as usize;
        if bytes.len() < end + 32 {
            r.incomplete = Some(format!(
                "{name}: block {seq} torn (the rank stopped while writing it); {blocks} whole blocks kept"
            ));
            break;
        }
        let mut d = Sha256::new();
        d.update(&bytes[pos + 8..pos + 24]);
        d.update(&bytes[pos + 24..end]);
        let digest = d.finalize();
        if digest.as_slice() != &bytes[end..end + 32] {
            refuse!(Code::DigestMismatch, "{name}: block {seq} does not hash to its recorded SHA-256");
        }
        chain.update(digest);
        let got =
            decode_block(&mut r, &bytes[pos + 24..end], limits).with_context(|| format!("{name}: block {seq}"))?;
        if got != nrec {
            refuse!(Code::BadFormat, "{name}: block {seq} declares {nrec} records and holds {got}");
        }
        records += u64::from(nrec);
        blocks += 1;
        pos = end + 32;
    }
    Ok(r)
}

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

fn decode_block(r: &mut RankCapture, mut p: &[u8], limits: &Limits) -> Result<u32> {
    let mut n = 0u32;
    while !p.is_empty() {
        if p.len() < 4 {
            refuse!(Code::BadFormat, "a record header runs past the block");
        }
        let (ty, len) = (p[0], u16_at(p, 2) as usize);
        if p.len() < 4 + len {
            refuse!(Code::BadFormat, "a record of {len} bytes runs past the block");
        }
        let b = &p[4..4 + len];
        match ty {
            REC_CALL => {
                if len != CALL_LEN {
                    refuse!(Code::BadFormat, "a call record of {len} bytes (expected {CALL_LEN})");
                }
                if r.calls.len() >= limits.max_events {
                    refuse!(Code::OverLimit, "more than {} calls on one rank", limits.max_events);
                }
                let kind = u16_at(b, 0);
                if kind as usize >= r.header.calls.len() {
                    refuse!(Code::BadFormat, "call kind {kind}, but the header names {} kinds", r.header.calls.len());
                }
                r.calls.push(CallRecord {
                    kind,
                    flags: u16_at(b, 2),
                    comm: u32_at(b, 4),
                    t_issue_ns: u64_at(b, 8),
                    t_done_ns: u64_at(b, 16),
                    count_send: u64_at(b, 24),
                    count_recv: u64_at(b, 32),
                    dt_send: u16_at(b, 40),
                    dt_recv: u16_at(b, 42),
                    op: u16_at(b, 44),
                    peer: opt(i32_at(b, 48)),
                    tag: opt(i32_at(b, 52)),
                    request: u64_at(b, 56),
                    ret: i32_at(b, 64),
                    n: u32_at(b, 68),
                    peer2: opt(i32_at(b, 72)),
                    tag2: opt(i32_at(b, 76)),
                    send_counts: None,
                    recv_counts: None,
                });
            }
            REC_COUNTS if r.version >= 2 && len >= 1 && (len - 1) % 4 == 0 && b[0] < 2 => {
                let k = (len - 1) / 4;
                if k > limits.max_ranks as usize {
                    refuse!(
                        Code::OverLimit,
                        "per-member counts of {k} members, over the limit of {} ranks",
                        limits.max_ranks
                    );
                }
                let Some(call) = r.calls.last_mut() else {
                    refuse!(Code::BadFormat, "per-member counts before any call")
                };
                let counts: Vec<u64> =
                    b[1..].chunks_exact(4).map(|c| u64::from(u32::from_le_bytes([c[0], c[1], c[2], c[3]]))).collect();
                let slot = if b[0] == 0 { &mut call.send_counts } else { &mut call.recv_counts };
                if slot.is_some() {
                    refuse!(
                        Code::BadFormat,
                        "per-member {} counts recorded twice for one call",
                        if b[0] == 0 { "send" } else { "receive" }
                    );
                }
                *slot = Some(counts);
            }
            REC_DONE if len == 32 => {
                let flags = u32_at(b, 28);
                let known = flags & 1 == 0;
                let d = DoneRecord {
                    request: u64_at(b, 0),
                    t_ns: u64_at(b, 8),
                    source: if known { opt(i32_at(b, 16)) } else { None },
                    tag: if known { opt(i32_at(b, 20)) } else { None },
                    // the completion follows the record of the call that found it
                    call: r.calls.len().saturating_sub(1) as u64,
                };
                if d.request != 0 {
                    r.done.insert(d.request, d);
                }
            }
            REC_DTYPE if len >= 6 => {
                r.dtypes.insert(u16_at(b, 0), (i32_at(b, 2), String::from_utf8_lossy(&b[6..]).into_owned()));
            }
            REC_OP if len >= 2 => {
                r.ops.insert(u16_at(b, 0), String::from_utf8_lossy(&b[2..]).into_owned());
            }
            REC_COMM if len >= 9 && (len - 9) % 4 == 0 => {
                let members: Vec<u32> =
                    b[9..].chunks_exact(4).map(|c| u32::from_le_bytes([c[0], c[1], c[2], c[3]])).collect();
                if members.len() > limits.max_ranks as usize {
                    refuse!(Code::OverLimit, "a communicator of {} members", members.len());
                }
                if r.comms.len() >= limits.max_groups {
                    refuse!(Code::OverLimit, "more than {} communicators on one rank", limits.max_groups);
                }
                r.comms.insert(u32_at(b, 0), (members, u32_at(b, 5)));
            }
            REC_COMM_FREE if len == 12 => {}
            REC_CLOCK if len >= 1 && (len - 1) % 24 == 0 && b[0] < 2 => {
                let w = &mut r.clock_windows[b[0] as usize];
                if !w.is_empty() {
                    refuse!(Code::BadFormat, "clock window {} recorded twice", b[0]);
                }
                *w = b[1..]
                    .chunks_exact(24)
                    .map(|c| PingSample {
                        t_send_local_ns: u64_at(c, 0),
                        t_ref_ns: u64_at(c, 8),
                        t_recv_local_ns: u64_at(c, 16),
                    })
                    .collect();
            }
            REC_ABORT if len == 12 => {
                r.incomplete =
                    Some(format!("{}: the application called MPI_Abort (error code {})", r.file.path, i32_at(b, 0)));
            }
            REC_DONE..=REC_CLOCK => refuse!(Code::BadFormat, "a record of type {ty} with {len} bytes"),
            REC_COUNTS if r.version >= 2 => refuse!(Code::BadFormat, "a counts record of {len} bytes"),
            _ => refuse!(Code::BadFormat, "unknown record type {ty}"),
        }
        n += 1;
        p = &p[4 + len..];
    }
    Ok(n)
}

/// Read every rank of a capture folder and check that they make one whole run.
/// With `allow_incomplete`, ranks without a trailer are kept (and said so).
pub fn read_dir(dir: &Path, allow_incomplete: bool, limits: &Limits) -> Result<MpiCapture> {
    let entries =
        std::fs::read_dir(dir).map_err(|e| refusal::refuse(Code::NoSuchInput, format!("{}: {e}", dir.display())))?;
    let mut paths: Vec<PathBuf> = Vec::new();
    for e in entries {
        let p = e.with_context(|| dir.display().to_string())?.path();
        if p.extension().is_some_and(|x| x == "mpicap") {
            paths.push(p);
        }
    }
    paths.sort();
    if paths.is_empty() {
        refuse!(
            Code::NotMpi,
            "{}: no rank wrote a capture file (rank-NNNNN.mpicap): the program never initialized MPI (not an MPI \
                program?), or it did not run under `commcanary capture`",
            dir.display()
        );
    }
    let ranks = paths.iter().map(|p| read_rank(p, limits)).collect::<Result<Vec<_>>>()?;
    let first = &ranks[0];
    for r in &ranks[1..] {
        if r.header.run_id != first.header.run_id || r.header.world_size != first.header.world_size {
            refuse!(
                Code::ForeignShard,
                "{} and {} come from two runs: run {} of {} ranks and run {} of {} ranks; capture each run into its \
                    own folder",
                r.file.path,
                first.file.path,
                r.header.run_id,
                r.header.world_size,
                first.header.run_id,
                first.header.world_size
            );
        }
    }
    let world = first.header.world_size;
    let mut by_rank: BTreeMap<u32, RankCapture> = BTreeMap::new();
    for r in ranks {
        let rank = r.header.world_rank;
        if let Some(o) = by_rank.get(&rank) {
            refuse!(Code::DuplicateRank, "{} and {} both hold rank {rank}", o.file.path, r.file.path);
        }
        by_rank.insert(rank, r);
    }
    if let Some(missing) = (0..world).find(|k| !by_rank.contains_key(k)) {
        refuse!(
            Code::MissingRank,
            "{}: rank {missing} of the run's {world} has no capture file (expected rank-{missing:05}.mpicap; {} of \
                {world} present)",
            dir.display(),
            by_rank.len()
        );
    }
    let ranks: Vec<RankCapture> = by_rank.into_values().collect();
    if !allow_incomplete {
        if let Some(r) = ranks.iter().find(|r| r.incomplete.is_some()) {
            refuse!(
                Code::IncompleteCapture,
                "{} (and {} ranks in all): the capture is incomplete; `import mpi --allow-incomplete` keeps what was \
                    recorded and marks the trace incomplete",
                r.incomplete.as_deref().unwrap_or_default(),
                ranks.iter().filter(|r| r.incomplete.is_some()).count()
            );
        }
    }
    Ok(MpiCapture { ranks })
}

impl RankCapture {
    /// Calls per kind name (every call, as the application made it).
    pub fn calls_by_kind(&self) -> BTreeMap<String, u64> {
        let mut m = BTreeMap::new();
        for c in &self.calls {
            *m.entry(self.header.calls[c.kind as usize].clone()).or_insert(0) += 1;
        }
        m
    }

    fn kind_name(&self, c: &CallRecord) -> &str {
        &self.header.calls[c.kind as usize]
    }
}

/// What `import mpi` adds to a trace (format version 2): every call as
/// captured, and what the trace leaves out.
#[derive(schemars::JsonSchema, serde::Serialize, serde::Deserialize, Clone, Debug, PartialEq)]
pub struct MpiSummary {
    /// Run id the ranks share.
    pub run_id: String,
    /// Per rank (in rank order): every call the application made, by MPI name without `MPI_`.
    pub calls: Vec<BTreeMap<String, u64>>,
    /// Per rank: calls the trace does not hold, by name.
    pub left_out: Vec<BTreeMap<String, u64>>,
    /// Why those kinds are left out.
    pub left_out_reasons: BTreeMap<String, String>,
    /// Why the capture is incomplete (per rank that is), where imported with `--allow-incomplete`.
    pub incomplete: Vec<String>,
    /// Per rank, its clock against rank 0's, fitted from the ping-pong
    /// windows the capture recorded at `MPI_Init` and `MPI_Finalize` (rank 0:
    /// the reference); absent where a window is missing (an incomplete rank).
    pub clock_models: Vec<Option<ClockModel>>,
    /// Why the times are not on rank 0's clock, where they are not.
    pub clock_unaligned: Option<String>,
    /// Per rank: the index among its captured calls of each record of
    /// `ranks[].collectives`, in order (orders them against `p2p`).
    pub collective_calls: Vec<Vec<u64>>,
    /// Per rank (format version 3): for each record of
    /// `ranks[].collectives`, the index among its captured calls of the wait
    /// or test that completed it where it was posted nonblocking
    /// (`MPI_Iallreduce`, ...); absent for a blocking one, and for a
    /// nonblocking one never seen complete (an incomplete capture). Empty in version 2.
    #[serde(default)]
    pub collective_completions: Vec<Vec<Option<u64>>>,
    /// Per rank (format version 3): for each record, whether it was posted nonblocking. Empty in version 2.
    #[serde(default)]
    pub collective_nonblocking: Vec<Vec<bool>>,
    /// Per rank: every point-to-point operation, in call order (a
    /// `Sendrecv` is a send and a receive of one call). `replay-trace` and
    /// the trace phases (cpu backend) run them between the collectives in
    /// call order.
    pub p2p: Vec<Vec<MpiP2p>>,
}

/// One point-to-point operation as captured (format version 2, `mpi.p2p`).
#[derive(schemars::JsonSchema, serde::Serialize, serde::Deserialize, Clone, Debug, PartialEq)]
pub struct MpiP2p {
    /// Index among the rank's captured calls.
    pub call: u64,
    /// The MPI name without `MPI_` (`Isend`, `Recv`, `Sendrecv`, ...).
    pub name: String,
    /// `send` or `recv`.
    pub direction: String,
    /// The communicator, as a trace group name (see `groups`), where described.
    pub group: Option<String>,
    /// The peer as posted: a world rank, or MPI's negative value (-1 any source, -2 no process).
    pub peer: i32,
    /// The tag as posted (-1: any tag).
    pub tag: i32,
    /// A receive's matched source (world rank) and tag, where the status was read (C callers).
    pub matched: Option<(i32, i32)>,
    /// Elements, and the datatype's name and size in bytes.
    pub elems: u64,
    /// Datatype name.
    pub dtype: String,
    /// Datatype size in bytes, as the library reported it.
    pub dtype_bytes: i32,
    /// The request of a nonblocking operation.
    pub request: Option<u64>,
    /// The call's entry, ns (on rank 0's clock where `clock.aligned_across_ranks`).
    pub post_ns: u64,
    /// When it completed: the call's return (blocking) or the completing wait or test's, where seen.
    pub complete_ns: Option<u64>,
    /// Index of the call that completed a nonblocking operation, where seen.
    pub completed_by_call: Option<u64>,
}

/// The trace's element type of an MPI datatype, by its name (`MPI_DOUBLE`,
/// Fortran's `MPI_DOUBLE_PRECISION`) and checked against its size.
fn trace_dtype(name: &str, size: i32) -> Option<TraceDtype> {
    let d = match name {
        "MPI_DOUBLE" | "MPI_DOUBLE_PRECISION" | "MPI_REAL8" => TraceDtype::F64,
        "MPI_FLOAT" | "MPI_REAL" | "MPI_REAL4" => TraceDtype::F32,
        "MPI_INT" | "MPI_INTEGER" | "MPI_INT32_T" | "MPI_INTEGER4" => TraceDtype::I32,
        "MPI_LONG" | "MPI_LONG_LONG" | "MPI_LONG_LONG_INT" | "MPI_INT64_T" | "MPI_INTEGER8" => TraceDtype::I64,
        "MPI_CHAR" | "MPI_SIGNED_CHAR" | "MPI_INT8_T" => TraceDtype::I8,
        "MPI_BYTE" | "MPI_UNSIGNED_CHAR" | "MPI_UINT8_T" | "MPI_CHARACTER" | "MPI_PACKED" => TraceDtype::U8,
        "MPI_C_BOOL" => TraceDtype::Bool,
        _ => return None,
    };
    (i64::from(size) == d.size_bytes() as i64).then_some(d)
}

/// The trace's name of a communicator: the same on every member (its members
/// and how many communicators with those members each member saw before).
fn group_name(members: &[u32], ordinal: u32) -> String {
    let mut h = Sha256::new();
    for m in members {
        h.update(m.to_le_bytes());
    }
    format!("mpi-{}-n{}-{ordinal}", &hex::encode(h.finalize())[..12], members.len())
}

/// Build the trace: every collective, per rank in call order.
pub fn to_trace(cap: &MpiCapture) -> Result<CommTrace> {
    to_trace_with(cap, false)
}

/// [`to_trace`]; with `for_phases` only the collectives the phases run
/// (`rank --trace`, campaigns, `canary verify`: not gather, scatter, the
/// scans, the v-variants of all-gather and reduce-scatter, logical and
/// bitwise reductions), the others left out with the reason (`import mpi --for-phases`).
pub fn to_trace_with(cap: &MpiCapture, for_phases: bool) -> Result<CommTrace> {
    let world = cap.ranks[0].header.world_size;
    let mut groups: BTreeMap<String, TraceGroup> = BTreeMap::new();
    let mut ranks = Vec::new();
    let mut summary = MpiSummary {
        run_id: cap.ranks[0].header.run_id.clone(),
        calls: Vec::new(),
        left_out: Vec::new(),
        left_out_reasons: BTreeMap::new(),
        incomplete: cap.ranks.iter().filter_map(|r| r.incomplete.clone()).collect(),
        clock_models: Vec::new(),
        clock_unaligned: None,
        collective_calls: Vec::new(),
        collective_completions: Vec::new(),
        collective_nonblocking: Vec::new(),
        p2p: Vec::new(),
    };
    let reference = &cap.ranks[0].header.kernel_clock;
    for r in &cap.ranks {
        let m = if r.header.world_rank == 0 {
            Ok(ClockModel::reference())
        } else if r.clock_windows.iter().any(Vec::is_empty) {
            Err(format!(
                "rank {} recorded no {} clock window",
                r.header.world_rank,
                if r.clock_windows[0].is_empty() { "MPI_Init" } else { "MPI_Finalize" }
            ))
        } else {
            let not_same = match (&r.header.kernel_clock, reference) {
                (Some(a), Some(b)) if a == b => None,
                _ => Some(format!(
                    "rank {} does not read rank 0's kernel clock (boot id and time namespace differ or are unknown)",
                    r.header.world_rank
                )),
            };
            fit_rank_model(&r.clock_windows[0], &r.clock_windows[1], not_same)
                .map(|f| f.model)
                .map_err(|e| format!("rank {}: clock fit: {e}", r.header.world_rank))
        };
        match m {
            Ok(m) => summary.clock_models.push(Some(m)),
            Err(why) => {
                summary.clock_models.push(None);
                summary.clock_unaligned.get_or_insert(why);
            }
        }
    }
    let models: Option<Vec<ClockModel>> = summary.clock_models.iter().copied().collect();
    for (k, r) in cap.ranks.iter().enumerate() {
        let model = models.as_ref().map(|m| &m[k]);
        let mut colls = Vec::new();
        let mut coll_calls = Vec::new();
        let (mut completions, mut nonblocking) = (Vec::new(), Vec::new());
        let mut p2p = Vec::new();
        let mut left: BTreeMap<String, u64> = BTreeMap::new();
        for (i, c) in r.calls.iter().enumerate() {
            let name = r.kind_name(c).to_string();
            let ops = p2p_of(r, i as u64, c, model);
            // a communicator only point-to-point operations use is a group too: the replay runs them on it
            if let (false, Some((members, ordinal))) = (ops.is_empty(), r.comms.get(&c.comm)) {
                let gname = group_name(members, *ordinal);
                groups.entry(gname.clone()).or_insert_with(|| TraceGroup {
                    name: gname,
                    desc: Some(format!("MPI communicator of {} ranks", members.len())),
                    members: members.clone(),
                });
            }
            p2p.extend(ops);
            let kept = collective_of(r, c, model, &mut groups)?.and_then(|t| {
                match super::exec::phases_cannot_run(&t, false).filter(|_| for_phases) {
                    Some(why) => Err(format!("left out for the phases (--for-phases): {why}")),
                    None => Ok(t),
                }
            });
            match kept {
                Ok(t) => {
                    colls.push(t);
                    coll_calls.push(i as u64);
                    nonblocking.push(c.request != 0);
                    completions.push(if c.request != 0 { r.done.get(&c.request).map(|d| d.call) } else { None });
                }
                Err(reason) => {
                    *left.entry(name.clone()).or_insert(0) += 1;
                    summary.left_out_reasons.entry(name).or_insert(reason);
                }
            }
        }
        number_sequences(&mut colls);
        summary.collective_calls.push(coll_calls);
        summary.collective_completions.push(completions);
        summary.collective_nonblocking.push(nonblocking);
        summary.p2p.push(p2p);
        summary.calls.push(r.calls_by_kind());
        summary.left_out.push(left);
        ranks.push(RankTrace { rank: r.header.world_rank, collectives: colls, trailing_compute: Vec::new() });
    }
    let mut groups: Vec<TraceGroup> = groups.into_values().collect();
    groups.sort_by(|a, b| a.name.cmp(&b.name));
    if !summary.incomplete.is_empty() {
        cut_to_common_prefix(&groups, &mut ranks, &mut summary);
    }
    let names: Vec<String> = cap.ranks.iter().map(|r| r.file.path.clone()).collect();
    super::check::check_ranks(world, &ranks.iter().map(|r| r.rank).collect::<Vec<_>>(), &names)?;
    super::check::check_groups(&groups, world)?;
    super::check::check_consistency(&groups, &ranks, &names)?;
    let mut t = CommTrace {
        format_version: super::COMM_TRACE_MPI_FORMAT_VERSION,
        source: TraceSource {
            kind: SourceKind::MpiCapture,
            schema: Some(format!("mpicap {CAPTURE_FORMAT_VERSION} ({})", cap.ranks[0].header.tool)),
            nccl_version: None,
            files: cap.ranks.iter().map(|r| r.file.clone()).collect(),
        },
        world_size: world,
        clock: TraceClock {
            domain: ClockDomain::HostPerRank,
            aligned_across_ranks: models.is_some(),
            note: match &models {
                Some(m) => format!(
                    "CLOCK_MONOTONIC in ns as the capture library read it on entry to each call, mapped onto rank 0's \
                        clock by each rank's model fitted from ping-pong windows at MPI_Init and MPI_Finalize \
                            (mpi.clock_models); largest error bound {:.0} ns",
                    m.iter().map(|m| m.bound_ns).fold(0.0, f64::max)
                ),
                None => format!(
                    "each rank's own CLOCK_MONOTONIC in ns, as the capture library read it on entry to each call; not \
                        aligned across ranks: {}",
                    summary.clock_unaligned.as_deref().unwrap_or("no clock model")
                ),
            },
        },
        unknown: vec![
            UnknownField { field: "device".into(), reason: "an MPI capture records host calls only".into() },
            UnknownField { field: "stream".into(), reason: "an MPI capture records host calls only".into() },
            UnknownField {
                field: "compute_before".into(),
                reason: "the capture records no compute operations; the gap between calls is the host time between \
                    them"
                    .into(),
            },
        ],
        groups,
        ranks,
        mpi: Some(summary),
    };
    if for_phases {
        leave_out_uneven(&mut t);
    }
    Ok(t)
}

/// `--for-phases`: leave out, on every member alike, the collectives whose
/// members disagree on what a shard records of them
/// ([`super::exec::uneven_members`]: an all-to-all-v of uneven totals),
/// counted by name with the reason; the rest are numbered again.
fn leave_out_uneven(t: &mut CommTrace) {
    let uneven = super::exec::uneven_members(t);
    let CommTrace { ranks, mpi: Some(summary), .. } = t else { return };
    for (k, r) in ranks.iter_mut().enumerate() {
        let mask: Vec<bool> = (0..r.collectives.len()).map(|i| !uneven.contains_key(&(r.rank, i))).collect();
        if mask.iter().all(|&b| b) {
            continue;
        }
        for (i, c) in r.collectives.iter().enumerate().filter(|&(i, _)| !mask[i]) {
            let name = c.source_name.strip_prefix("MPI_").unwrap_or(&c.source_name).to_string();
            *summary.left_out[k].entry(name.clone()).or_insert(0) += 1;
            let why = format!("left out for the phases (--for-phases): {}", uneven[&(r.rank, i)]);
            summary.left_out_reasons.entry(name).or_insert(why);
        }
        retain_masked(r, summary, k, &mask);
        number_sequences(&mut r.collectives);
    }
}

/// Keep rank `k`'s collectives where `mask` says, with their call, completion and nonblocking entries.
fn retain_masked(r: &mut RankTrace, summary: &mut MpiSummary, k: usize, mask: &[bool]) {
    let mut m = mask.iter();
    r.collectives.retain(|_| *m.next().unwrap_or(&true));
    let mut m = mask.iter();
    summary.collective_calls[k].retain(|_| *m.next().unwrap_or(&true));
    let mut m = mask.iter();
    summary.collective_completions[k].retain(|_| *m.next().unwrap_or(&true));
    let mut m = mask.iter();
    summary.collective_nonblocking[k].retain(|_| *m.next().unwrap_or(&true));
}

/// An incomplete capture: ranks stopped at different points, so each
/// group keeps the collectives every member recorded (the first k on each,
/// k the fewest any member has); what is cut is said in `incomplete`.
fn cut_to_common_prefix(groups: &[TraceGroup], ranks: &mut [RankTrace], summary: &mut MpiSummary) {
    for g in groups {
        let have = |r: &RankTrace| r.collectives.iter().filter(|c| c.group == g.name).count();
        let keep = ranks.iter().filter(|r| g.members.contains(&r.rank)).map(have).min().unwrap_or(0);
        for (k, r) in ranks.iter_mut().enumerate().filter(|(_, r)| g.members.contains(&r.rank)) {
            let had = have(r);
            if had > keep {
                let mut seen = 0usize;
                let mask: Vec<bool> = r
                    .collectives
                    .iter()
                    .map(|c| {
                        if c.group != g.name {
                            return true;
                        }
                        seen += 1;
                        seen <= keep
                    })
                    .collect();
                retain_masked(r, summary, k, &mask);
                summary.incomplete.push(format!(
                    "rank {}: the last {} collectives on group {:?} are cut (another member recorded only {keep})",
                    r.rank,
                    had - keep,
                    g.name
                ));
            }
        }
    }
}

/// The point-to-point operations of one call (none for other calls).
fn p2p_of(r: &RankCapture, i: u64, c: &CallRecord, model: Option<&ClockModel>) -> Vec<MpiP2p> {
    let name = r.kind_name(c);
    let on_ref = |ns: u64| model.map_or(ns, |m| m.to_reference(ns).max(0.0).round() as u64);
    let group = r.comms.get(&c.comm).map(|(m, o)| group_name(m, *o));
    let dt = |id: u16| r.dtypes.get(&id).cloned().unwrap_or((-1, String::new()));
    let done = |req: u64| r.done.get(&req);
    let op = |direction: &str,
              peer: Option<i32>,
              tag: Option<i32>,
              elems: u64,
              dtype: u16,
              matched: Option<(i32, i32)>| {
        let (dtype_bytes, dtype) = dt(dtype);
        let nonblocking = c.request != 0;
        MpiP2p {
            call: i,
            name: name.to_string(),
            direction: direction.into(),
            group: group.clone(),
            peer: peer.unwrap_or(NONE),
            tag: tag.unwrap_or(NONE),
            matched,
            elems,
            dtype,
            dtype_bytes,
            request: nonblocking.then_some(c.request),
            post_ns: on_ref(c.t_issue_ns),
            complete_ns: if nonblocking { done(c.request).map(|d| on_ref(d.t_ns)) } else { Some(on_ref(c.t_done_ns)) },
            completed_by_call: if nonblocking { done(c.request).map(|d| d.call) } else { None },
        }
    };
    let both = |a: Option<i32>, b: Option<i32>| a.zip(b);
    match name {
        "Send" | "Ssend" | "Bsend" | "Rsend" | "Isend" | "Issend" | "Ibsend" | "Irsend" => {
            vec![op("send", c.peer, c.tag, c.count_send, c.dt_send, None)]
        }
        "Recv" => vec![op("recv", c.peer, c.tag, c.count_recv, c.dt_recv, both(c.peer2, c.tag2))],
        "Irecv" => {
            let m = done(c.request).and_then(|d| both(d.source, d.tag));
            vec![op("recv", c.peer, c.tag, c.count_recv, c.dt_recv, m)]
        }
        "Sendrecv" | "Sendrecv_replace" => {
            vec![
                op("send", c.peer, c.tag, c.count_send, c.dt_send, None),
                op("recv", c.peer2, c.tag2, c.count_recv, c.dt_recv, both(c.peer2, c.tag2)),
            ]
        }
        _ => Vec::new(),
    }
}

/// The trace collective of one call, or why it has none.
fn collective_of(
    r: &RankCapture,
    c: &CallRecord,
    model: Option<&ClockModel>,
    groups: &mut BTreeMap<String, TraceGroup>,
) -> Result<std::result::Result<TraceCollective, String>> {
    let name = r.kind_name(c);
    // a nonblocking form (`Iallreduce`) is its blocking kind (`Allreduce`) posted early
    let blocking = name.strip_prefix('I').and_then(|b| Some(format!("{}{}", b.get(..1)?.to_uppercase(), b.get(1..)?)));
    let base = match &blocking {
        Some(b) if r.header.calls.iter().any(|k| k == b) => b.as_str(),
        _ => name,
    };
    let kind = match base {
        "Allreduce" => CollectiveKind::AllReduce,
        "Reduce" => CollectiveKind::Reduce,
        "Bcast" => CollectiveKind::Broadcast,
        "Allgather" | "Allgatherv" => CollectiveKind::AllGather,
        "Gather" | "Gatherv" => CollectiveKind::Gather,
        "Scatter" | "Scatterv" => CollectiveKind::Scatter,
        "Reduce_scatter_block" | "Reduce_scatter" => CollectiveKind::ReduceScatter,
        "Alltoall" | "Alltoallv" => CollectiveKind::AllToAll,
        "Barrier" => CollectiveKind::Barrier,
        "Scan" => CollectiveKind::Scan,
        "Exscan" => CollectiveKind::Exscan,
        "Send" | "Ssend" | "Bsend" | "Rsend" | "Recv" | "Sendrecv" | "Sendrecv_replace" => {
            return Ok(Err(
                "point-to-point: kept in mpi.p2p with its post, completion, peer and tag; replay-trace and \
                the trace phases (rank --trace, campaigns; cpu backend) run it in recorded call order, so MPI matches \
                    it as it matched the application's"
                    .into(),
            ))
        }
        "Probe" | "Iprobe" => return Ok(Err("a probe moves no data: not replayed".into())),
        "Wait" | "Waitall" | "Waitany" | "Waitsome" | "Test" | "Testall" | "Testany" | "Testsome" => {
            return Ok(Err("completion call: it completes a nonblocking operation, whose record keeps the completing \
                call (mpi.collective_completions, mpi.p2p)"
                .into()))
        }
        "Comm_split" | "Comm_split_type" | "Comm_dup" | "Comm_create" | "Comm_free" => {
            return Ok(Err("communicator management: the trace holds the communicators as groups".into()))
        }
        _ => return Ok(Err(format!("MPI_{base} has no kind in the trace format yet"))),
    };
    if c.flags & 2 != 0 {
        return Ok(Err("the library returned an error for this call".into()));
    }
    let Some((members, ordinal)) = r.comms.get(&c.comm) else {
        return Ok(Err("on a communicator the capture never described".into()));
    };
    let gname = group_name(members, *ordinal);
    groups.entry(gname.clone()).or_insert_with(|| TraceGroup {
        name: gname.clone(),
        desc: Some(format!("MPI communicator of {} ranks", members.len())),
        members: members.clone(),
    });
    let dtype = if kind == CollectiveKind::Barrier {
        TraceDtype::U8
    } else {
        if c.dt_send != c.dt_recv && c.count_send > 0 && c.count_recv > 0 {
            return Ok(Err("different send and receive datatypes".into()));
        }
        let dt = if c.count_send > 0 { c.dt_send } else { c.dt_recv };
        let Some((size, dname)) = r.dtypes.get(&dt) else {
            return Ok(Err("a datatype the capture never described".into()));
        };
        match trace_dtype(dname, *size) {
            Some(d) => d,
            None => {
                return Ok(Err(format!("datatype {dname:?} ({size} bytes) has no element type in the trace format")))
            }
        }
    };
    // the recorded reduction: absent for a sum, so that a trace of sums reads as before
    let op = if kind.row().reduces {
        let name = r.ops.get(&c.op).map(String::as_str).unwrap_or("unknown");
        match super::TraceReduceOp::from_name(name) {
            Some(super::TraceReduceOp::Sum) => None,
            Some(o) => Some(o),
            None => {
                return Ok(Err(format!(
                    "reduction {name:?} (user-defined, or a pair type's MAXLOC/MINLOC) has no \
                element-wise form in the trace"
                )))
            }
        }
    } else {
        None
    };
    // a v-call's per-member counts (capture format 2), where significant on this rank
    let is_v = matches!(base, "Allgatherv" | "Gatherv" | "Scatterv" | "Alltoallv" | "Reduce_scatter");
    // the root is recorded as a world rank
    let at_root = c.peer.is_some_and(|p| i64::from(p) == i64::from(r.header.world_rank));
    let (in_split, out_split) = match base {
        "Allgatherv" => (None, c.recv_counts.clone()),
        "Gatherv" => (None, if at_root { c.recv_counts.clone() } else { None }),
        "Scatterv" => (if at_root { c.send_counts.clone() } else { None }, None),
        "Alltoallv" => (c.send_counts.clone(), c.recv_counts.clone()),
        "Reduce_scatter" => (c.recv_counts.clone(), None),
        _ => (None, None),
    };
    let needs_in = matches!(base, "Alltoallv" | "Reduce_scatter") || (base == "Scatterv" && at_root);
    let needs_out = matches!(base, "Allgatherv" | "Alltoallv") || (base == "Gatherv" && at_root);
    // a version-1 capture has no counts on any member: every v-call is left out alike (not only where they matter)
    if is_v && (r.version < 2 || (needs_in && in_split.is_none()) || (needs_out && out_split.is_none())) {
        return Ok(Err(if r.version < 2 {
            format!(
                "a v-call in a capture of format {}, which records only its summed counts: capture again with this \
                build (format {CAPTURE_FORMAT_VERSION} records the per-member counts)",
                r.version
            )
        } else {
            "a v-call whose per-member counts were not recorded (a communicator too large for one record)".into()
        }));
    }
    for v in [&in_split, &out_split].into_iter().flatten() {
        if v.len() != members.len() {
            return Ok(Err(format!("{} per-member counts on a communicator of {} members", v.len(), members.len())));
        }
    }
    let root = if kind.is_rooted() {
        match c.peer {
            Some(p) if p >= 0 => Some(p as u32),
            _ => return Ok(Err("a rooted call without a root rank".into())),
        }
    } else {
        None
    };
    let (ins, outs) = if kind == CollectiveKind::Barrier { (0, 0) } else { (c.count_send, c.count_recv) };
    let mut t = TraceCollective::new(
        kind,
        &format!("MPI_{name}"),
        &gname,
        dtype,
        (ins, outs),
        (in_split, out_split),
        (root, None),
    );
    t.op = op;
    // on rank 0's clock where every rank's was fitted
    let on_ref = |ns: u64| model.map_or(ns, |m| m.to_reference(ns).max(0.0).round() as u64);
    t.host_start_ns = Some(on_ref(c.t_issue_ns));
    let end = if c.request != 0 { r.done.get(&c.request).map(|d| d.t_ns) } else { Some(c.t_done_ns) };
    t.host_duration_ns = end.map(|e| on_ref(e).saturating_sub(on_ref(c.t_issue_ns)));
    Ok(Ok(t))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::refusal::code_of;

    /// A capture file as the library writes it (layout: capture/src/format.rs), from records.
    fn file(rank: u32, world: u32, run: &str, blocks: &[Vec<(u8, Vec<u8>)>], trailer: bool) -> Vec<u8> {
        file_v(CAPTURE_FORMAT_VERSION, &["Allreduce", "Iallreduce", "Wait"], rank, world, run, blocks, trailer)
    }

    /// [`file`] at layout `version`, with the header naming `calls`.
    fn file_v(
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
    fn allreduce_block(kind: u16, request: u64) -> Vec<(u8, Vec<u8>)> {
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
        let mut c = vec![0u8; CALL_LEN];
        c[0..2].copy_from_slice(&kind.to_le_bytes());
        c[4..8].copy_from_slice(&1u32.to_le_bytes());
        c[8..16].copy_from_slice(&100u64.to_le_bytes());
        c[16..24].copy_from_slice(&150u64.to_le_bytes());
        c[24..32].copy_from_slice(&4u64.to_le_bytes());
        c[32..40].copy_from_slice(&4u64.to_le_bytes());
        c[40..42].copy_from_slice(&1u16.to_le_bytes());
        c[42..44].copy_from_slice(&1u16.to_le_bytes());
        c[44..46].copy_from_slice(&1u16.to_le_bytes());
        for o in [48, 52, 72, 76] {
            c[o..o + 4].copy_from_slice(&NONE.to_le_bytes());
        }
        c[56..64].copy_from_slice(&request.to_le_bytes());
        vec![(REC_COMM, comm), (REC_DTYPE, dt), (REC_OP, op), (REC_CALL, c)]
    }

    fn write_dir(files: &[(u32, Vec<u8>)]) -> tempfile::TempDir {
        let d = tempfile::tempdir().unwrap();
        for (r, b) in files {
            std::fs::write(d.path().join(format!("rank-{r:05}.mpicap")), b).unwrap();
        }
        d
    }

    #[test]
    fn a_whole_capture_imports_with_its_times_and_a_nonblocking_completion() {
        let mut blk = allreduce_block(1, 7);
        let mut done = vec![0u8; 32];
        done[0..8].copy_from_slice(&7u64.to_le_bytes());
        done[8..16].copy_from_slice(&400u64.to_le_bytes());
        blk.push((REC_DONE, done));
        let d =
            write_dir(&[(0, file(0, 2, "r", std::slice::from_ref(&blk), true)), (1, file(1, 2, "r", &[blk], true))]);
        let cap = read_dir(d.path(), false, &Limits::default()).unwrap();
        let t = to_trace(&cap).unwrap();
        let c = &t.ranks[1].collectives[0];
        assert_eq!(
            (c.kind, c.dtype, c.in_elems, c.source_name.as_str()),
            (CollectiveKind::AllReduce, TraceDtype::F64, 4, "MPI_Iallreduce")
        );
        // posted at 100, completed by the wait that returned at 400
        assert_eq!((c.host_start_ns, c.host_duration_ns), (Some(100), Some(300)));
        assert_eq!(t.mpi.as_ref().unwrap().calls[0]["Iallreduce"], 1);
        // the written trace reads back (format version 2)
        let back = CommTrace::from_slice(&serde_json::to_vec(&t).unwrap()).unwrap();
        assert_eq!(back, t);
    }

    /// A call record of kind `kind` on communicator 1 with datatype 1 and op `op`.
    fn call(kind: u16, (send, recv): (u64, u64), op: u16, root: Option<i32>, request: u64) -> (u8, Vec<u8>) {
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

    fn counts(side: u8, v: &[u32]) -> (u8, Vec<u8>) {
        let mut p = vec![side];
        v.iter().for_each(|k| p.extend_from_slice(&k.to_le_bytes()));
        (REC_COUNTS, p)
    }

    /// Every v-variant with its per-member counts, a scan, and a reduction other than a sum, on 2 ranks.
    fn v_calls(rank: u32) -> Vec<(u8, Vec<u8>)> {
        let mut b = allreduce_block(0, 0);
        b.pop(); // keep the communicator, datatype and sum op; drop the all-reduce
        let mut max = 2u16.to_le_bytes().to_vec();
        max.extend_from_slice(b"max");
        b.push((REC_OP, max));
        let mine = u64::from(rank) + 1;
        // Allgatherv: each sends rank + 1, receives [1, 2]
        b.push(call(0, (mine, 3), 0, None, 0));
        b.push(counts(1, &[1, 2]));
        // Exscan with MPI_MAX
        b.push(call(1, (2, 2), 2, None, 0));
        // Reduce_scatter of blocks [1, 2]: in 3, out this member's
        b.push(call(2, (3, mine), 1, None, 0));
        b.push(counts(1, &[1, 2]));
        // Igatherv to rank 0: only the root has (and records) the counts; completed by the Wait after it
        b.push(call(3, (mine, if rank == 0 { 3 } else { 0 }), 0, Some(0), 9));
        if rank == 0 {
            b.push(counts(1, &[1, 2]));
        }
        b.push(call(4, (0, 0), 0, None, 9));
        let mut done = vec![0u8; 32];
        done[0..8].copy_from_slice(&9u64.to_le_bytes());
        done[8..16].copy_from_slice(&400u64.to_le_bytes());
        b.push((REC_DONE, done));
        b
    }

    const V_KINDS: [&str; 6] = ["Allgatherv", "Exscan", "Reduce_scatter", "Igatherv", "Wait", "Gatherv"];

    #[test]
    fn v_variants_scans_and_other_reductions_import_with_their_counts_and_op() {
        let files: Vec<(u32, Vec<u8>)> =
            (0..2).map(|r| (r, file_v(2, &V_KINDS, r, 2, "r", &[v_calls(r)], true))).collect();
        let d = write_dir(&files);
        let t = to_trace(&read_dir(d.path(), false, &Limits::default()).unwrap()).unwrap();
        assert_eq!(t.format_version, super::super::COMM_TRACE_MPI_FORMAT_VERSION);
        let m = t.mpi.as_ref().unwrap();
        assert!(m.left_out.iter().all(|l| l.keys().all(|k| k == "Wait")), "{:?} {:?}", m.left_out, m.left_out_reasons);
        let c = &t.ranks[1].collectives;
        assert_eq!(
            (c[0].kind, c[0].in_elems, c[0].out_split_elems.clone()),
            (CollectiveKind::AllGather, 2, Some(vec![1, 2]))
        );
        assert_eq!((c[1].kind, c[1].op), (CollectiveKind::Exscan, Some(super::super::TraceReduceOp::Max)));
        assert_eq!(
            (c[2].kind, c[2].in_split_elems.clone(), c[2].out_elems, c[2].op),
            (CollectiveKind::ReduceScatter, Some(vec![1, 2]), 2, None)
        );
        assert_eq!(
            (c[3].kind, c[3].root, c[3].out_elems, c[3].out_split_elems.clone()),
            (CollectiveKind::Gather, Some(0), 0, None)
        );
        assert_eq!(t.ranks[0].collectives[3].out_split_elems, Some(vec![1, 2]));
        // the nonblocking gather: posted at call 3, completed by the wait, call 4
        assert_eq!(
            (m.collective_calls[0][3], m.collective_nonblocking[0].clone(), m.collective_completions[0][3]),
            (3, vec![false, false, false, true], Some(4))
        );
        // a sum stays unwritten: the record reads as a trace of sums always did
        assert!(!serde_json::to_string(&c[2]).unwrap().contains("\"op\""));
        assert_eq!(CommTrace::from_slice(&serde_json::to_vec(&t).unwrap()).unwrap(), t);
        // members that disagree on what they send and receive are refused
        let mut bad = t.clone();
        bad.ranks[0].collectives[0].out_split_elems = Some(vec![2, 1]);
        let e = CommTrace::from_slice(&serde_json::to_vec(&bad).unwrap()).unwrap_err();
        assert!(format!("{e:#}").contains("counts disagree"), "{e:#}");
    }

    #[test]
    fn v_calls_of_a_version_1_capture_are_left_out_saying_why() {
        // version 1 has no counts record: the same calls without them
        let strip = |r: u32| v_calls(r).into_iter().filter(|(ty, _)| *ty != REC_COUNTS).collect::<Vec<_>>();
        let files: Vec<(u32, Vec<u8>)> =
            (0..2).map(|r| (r, file_v(1, &V_KINDS, r, 2, "r", &[strip(r)], true))).collect();
        let d = write_dir(&files);
        let t = to_trace(&read_dir(d.path(), false, &Limits::default()).unwrap()).unwrap();
        let m = t.mpi.as_ref().unwrap();
        assert_eq!(
            (m.left_out[0]["Allgatherv"], m.left_out[0]["Reduce_scatter"], m.left_out[0]["Igatherv"]),
            (1, 1, 1),
            "{:?}",
            m.left_out
        );
        assert!(m.left_out_reasons["Allgatherv"].contains("format 1"), "{:?}", m.left_out_reasons);
        // the exscan needs no counts and is kept; off the root a gather-v has none to record
        assert_eq!(t.ranks[0].collectives.iter().map(|c| c.kind).collect::<Vec<_>>(), vec![CollectiveKind::Exscan]);
        assert!(!m.left_out[1].contains_key("Exscan"));
        // a counts record in a version-1 file is refused as an unknown record
        let files = [(0, file_v(1, &V_KINDS, 0, 1, "r", &[v_calls(0)], true))];
        let d = write_dir(&files);
        assert_eq!(code_of(&read_dir(d.path(), false, &Limits::default()).unwrap_err()), Some(Code::BadFormat));
    }

    #[test]
    fn damaged_files_are_refused_with_their_codes() {
        let good = file(0, 1, "r", &[allreduce_block(0, 0)], true);
        let code = |b: &[u8]| {
            let d = write_dir(&[(0, b.to_vec())]);
            code_of(&read_dir(d.path(), false, &Limits::default()).unwrap_err())
        };
        let mut bad = good.clone();
        bad[0] = b'X';
        assert_eq!(code(&bad), Some(Code::BadFormat));
        let mut bad = good.clone();
        bad[8] = 9;
        assert_eq!(code(&bad), Some(Code::UnsupportedVersion));
        let mut bad = good.clone();
        bad[20] ^= 1; // inside the header JSON
        assert_eq!(code(&bad), Some(Code::DigestMismatch));
        let mut bad = good.clone();
        let k = bad.len() - 56 - 32 - 10; // inside the block's last record
        bad[k] ^= 1;
        assert_eq!(code(&bad), Some(Code::DigestMismatch));
        // a block cut short, and a file without trailer: incomplete, the whole blocks kept when allowed
        assert_eq!(code(&good[..good.len() - 60]), Some(Code::IncompleteCapture));
        let open = file(0, 1, "r", &[allreduce_block(0, 0)], false);
        assert_eq!(code(&open), Some(Code::IncompleteCapture));
        let d = write_dir(&[(0, open)]);
        let cap = read_dir(d.path(), true, &Limits::default()).unwrap();
        assert_eq!(cap.ranks[0].calls.len(), 1);
        assert!(cap.ranks[0].incomplete.as_deref().unwrap().contains("without a trailer"));
        // a call kind past the header's list
        let mut blk = allreduce_block(0, 0);
        blk[3].1[0..2].copy_from_slice(&9u16.to_le_bytes());
        assert_eq!(code(&file(0, 1, "r", &[blk], true)), Some(Code::BadFormat));
        // bytes after the trailer
        let mut bad = good.clone();
        bad.push(0);
        assert_eq!(code(&bad), Some(Code::BadFormat));
    }

    #[test]
    fn a_folder_of_two_runs_a_missing_rank_or_no_file_is_refused() {
        let b = allreduce_block(0, 0);
        let two = write_dir(&[
            (0, file(0, 2, "a", std::slice::from_ref(&b), true)),
            (1, file(1, 2, "b", std::slice::from_ref(&b), true)),
        ]);
        assert_eq!(code_of(&read_dir(two.path(), false, &Limits::default()).unwrap_err()), Some(Code::ForeignShard));
        let missing =
            write_dir(&[(0, file(0, 3, "a", std::slice::from_ref(&b), true)), (2, file(2, 3, "a", &[b], true))]);
        let e = read_dir(missing.path(), false, &Limits::default()).unwrap_err();
        assert_eq!(code_of(&e), Some(Code::MissingRank), "{e:#}");
        assert!(format!("{e:#}").contains("rank 1"), "{e:#}");
        let none = write_dir(&[]);
        assert_eq!(code_of(&read_dir(none.path(), false, &Limits::default()).unwrap_err()), Some(Code::NotMpi));
    }
}
