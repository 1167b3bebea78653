//! One rank's capture file, decoded and checked ([`RankCapture`]): header, calls, completions,
//! datatypes, ops, communicators and clock windows, every digest, sequence and count recomputed.
//! Consumes the file (or its bytes); a file that ends without its trailer or inside a block is kept,
//! marked incomplete, with every whole block. Refuses with a code: bad magic or layout
//! (`BAD_FORMAT`), another format version (`UNSUPPORTED_VERSION`), a digest or count that does not
//! match (`DIGEST_MISMATCH`), what passes the [`Limits`] (`OVER_LIMIT`).
use crate::core::clock::PingSample;
use crate::core::refusal::{self, Code};
use crate::core::{fsutil, limits};
use crate::evidence::commtrace::{Limits, SourceFile};
use crate::refuse;
use anyhow::{Context, Result};
use sha2::{Digest, Sha256};
use std::collections::BTreeMap;
use std::path::Path;

/// Capture file layout version this build writes (in [`super::frame_capture`]) and reads, with every earlier one.
pub const CAPTURE_FORMAT_VERSION: u32 = 2;
/// The oldest capture layout this build reads (version 1 has no per-member counts of v-calls).
pub const MIN_CAPTURE_FORMAT_VERSION: u32 = 1;
pub(super) const MAGIC: &[u8; 8] = b"CCMPICAP";
pub(super) const BLOCK_MAGIC: &[u8; 8] = b"CCBLOCK\0";
pub(super) const TRAILER_MAGIC: &[u8; 8] = b"CCTRAIL\0";
/// Largest header and block payload read (the writer uses 64 KiB blocks; a
/// larger declared length is refused before it is read).
const MAX_HEADER_BYTES: u32 = 1 << 20;
const MAX_BLOCK_BYTES: u32 = 16 << 20;
pub(super) const REC_CALL: u8 = 1;
pub(super) const REC_DONE: u8 = 2;
pub(super) const REC_DTYPE: u8 = 3;
pub(super) const REC_OP: u8 = 4;
pub(super) const REC_COMM: u8 = 5;
const REC_COMM_FREE: u8 = 6;
const REC_ABORT: u8 = 7;
const REC_CLOCK: u8 = 8;
/// Version 2: a v-call's per-member counts, after its call record (side u8, then u32 each).
pub(super) const REC_COUNTS: u8 = 9;
pub(super) const CALL_LEN: usize = 80;
pub(super) const NONE: i32 = i32::MIN;

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

impl RankCapture {
    /// Calls per kind name (every call, as the application made it).
    pub fn calls_by_kind(&self) -> BTreeMap<String, u64> {
        let mut m = BTreeMap::new();
        for c in &self.calls {
            *m.entry(self.header.calls[c.kind as usize].clone()).or_insert(0) += 1;
        }
        m
    }

    pub(super) fn kind_name(&self, c: &CallRecord) -> &str {
        &self.header.calls[c.kind as usize]
    }
}

#[cfg(test)]
mod tests {
    use super::super::fixtures::{allreduce_block, file, write_dir};
    use super::super::read_dir;
    use crate::core::refusal::{code_of, Code};
    use crate::evidence::commtrace::Limits;

    #[test]
    fn damaged_files_are_refused_with_their_codes() {
        let good = file(0, 1, "r", &[allreduce_block(0, 0)], true);
        let code = |b: &[u8]| {
            let d = write_dir(&[(0, b.to_vec())]);
            code_of(&read_dir(d.path(), false, &Limits::default()).unwrap_err())
        };
        let edited = |edit: &dyn Fn(&mut Vec<u8>)| {
            let mut bad = good.clone();
            edit(&mut bad);
            code(&bad)
        };
        assert_eq!(edited(&|b| b[0] = b'X'), Some(Code::BadFormat));
        assert_eq!(edited(&|b| b[8] = 9), Some(Code::UnsupportedVersion));
        assert_eq!(edited(&|b| b[20] ^= 1), Some(Code::DigestMismatch), "inside the header JSON");
        let last_record = good.len() - 56 - 32 - 10;
        assert_eq!(edited(&|b| b[last_record] ^= 1), Some(Code::DigestMismatch), "inside the block's last record");
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
        assert_eq!(edited(&|b| b.push(0)), Some(Code::BadFormat), "bytes after the trailer");
    }
}
