//! Communication traces imported from a workload's own profiles.
//!
//! Consumes one file per rank from PyTorch: the profiler's Kineto trace
//! ([`kineto`]) or the execution trace ([`et`]), gzip-compressed or not.
//! Both record every collective through the `record_param_comms` operator
//! (PyTorch `torch/csrc/distributed/c10d/ParamCommsUtils.hpp`: collective
//! name, message element counts in and out, dtype, split sizes, process
//! group name and description, group-local rank, global rank start/stride,
//! group size). Produces a [`CommTrace`]: per rank the ordered collectives
//! with kind, process group (name and global member ranks), dtype, element
//! counts, split sizes for all-to-all-v, root or peer, stream, host start,
//! device kernel interval where the trace has one, and the compute between
//! collectives. What a source cannot know stays absent (`None`) and is listed
//! in [`CommTrace::unknown`]; it is never written as zero.
//!
//! Refuses, naming the file and the cause: files from different runs or rank
//! sets (their world size, NCCL version or process-group descriptions
//! differ), two files for one rank, a rank missing, an unknown collective
//! name (listing the known ones), a group used but never described, counts
//! that disagree within one record or across a group's members (the k-th
//! collective of a group must have the same kind, dtype, root and counts on
//! every member, after Thakur, Rabenseifner & Gropp, "Optimization of
//! Collective Communication Operations in MPICH", IJHPCA 2005, for each
//! operation's buffer relations), and sends and receives that do not pair up;
//! a group that lists a rank twice or one outside the world, a count whose
//! bytes pass [`MAX_COLLECTIVE_BYTES`], a record whose own rank contradicts
//! its file's rank, and files whose recordings lie more than
//! [`SAME_RUN_SLACK_NS`] apart (two runs of one shape).
//! Decoders stop at the explicit [`Limits`] (file and decompressed sizes,
//! events, collectives, group size) rather than exhaust memory.
//!
//! Export ([`export`]) writes PARAM comms-replay JSON and Chakra-style
//! execution-trace JSON of the communication nodes.
pub mod cpu_exec;
pub mod et;
pub mod export;
pub mod from_run;
pub mod kineto;
pub mod workload_plan;

pub use crate::core::collective::{classify_name, TraceDtype, TraceKind, KNOWN_COLLECTIVES, SKIPPED_RECORDS};
use anyhow::{bail, Context, Result};
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, BTreeSet};
use std::io::Read;
use std::path::Path;

/// Current on-disk version of the communication-trace format.
pub const COMM_TRACE_FORMAT_VERSION: u32 = 1;

/// Which tool wrote the source files.
#[derive(schemars::JsonSchema, Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq)]
#[serde(rename_all = "kebab-case")]
pub enum SourceKind {
    /// PyTorch profiler (Kineto) Chrome-trace JSON.
    Kineto,
    /// PyTorch execution trace (Chakra host ET JSON).
    ExecutionTrace,
    /// A verified CommCanary run (`import run`): its joined collectives.
    Run,
    /// `commcanary synth`: a deterministic synthetic trace for tests.
    Synthetic,
    /// A canary artifact expanded for replay (`canary verify`).
    Canary,
}

/// One source file.
#[derive(schemars::JsonSchema, Serialize, Deserialize, Clone, Debug, PartialEq)]
pub struct SourceFile {
    /// Path as given on the command line.
    pub path: String,
    /// SHA-256 of the file's bytes as read (compressed, if it was).
    pub sha256: String,
    /// World rank that recorded it.
    pub rank: u32,
}

/// Where the trace came from.
#[derive(schemars::JsonSchema, Serialize, Deserialize, Clone, Debug, PartialEq)]
pub struct TraceSource {
    /// Tool that wrote the files.
    pub kind: SourceKind,
    /// Format version the files declare (Kineto `schemaVersion`, ET `schema`).
    pub schema: Option<String>,
    /// NCCL version the files declare, where they do.
    pub nccl_version: Option<String>,
    /// The files, one per rank, in rank order.
    pub files: Vec<SourceFile>,
}

/// Clock contract of every `*_ns` time in the trace.
#[derive(schemars::JsonSchema, Serialize, Deserialize, Clone, Debug, PartialEq)]
pub struct TraceClock {
    /// Which clock the times are on.
    pub domain: ClockDomain,
    /// Whether a time on one rank can be compared with a time on another.
    pub aligned_across_ranks: bool,
    /// What the times mean, in words.
    pub note: String,
}

/// Clock domain of a trace's times.
#[derive(schemars::JsonSchema, Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq)]
#[serde(rename_all = "kebab-case")]
pub enum ClockDomain {
    /// Each rank's own host clock as its profiler read it (device times
    /// converted onto it by the profiler), in ns.
    HostPerRank,
    /// The source records no times; every time field is absent.
    None,
}

/// A field the source cannot provide, and why.
#[derive(schemars::JsonSchema, Serialize, Deserialize, Clone, Debug, PartialEq)]
pub struct UnknownField {
    /// Field name as in [`TraceCollective`] or [`ComputeOp`].
    pub field: String,
    /// Why it is unknown.
    pub reason: String,
}

/// A process group as the trace describes it.
#[derive(schemars::JsonSchema, Serialize, Deserialize, Clone, Debug, PartialEq, Eq)]
pub struct TraceGroup {
    /// Name (PyTorch's `pg_name`).
    pub name: String,
    /// Description (PyTorch's `pg_desc`), where recorded.
    pub desc: Option<String>,
    /// Global ranks of the members, in group-rank order.
    pub members: Vec<u32>,
}

/// A device interval on the rank's clock.
#[derive(schemars::JsonSchema, Serialize, Deserialize, Clone, Debug, PartialEq)]
pub struct DeviceSpan {
    /// First kernel start, ns on the trace clock.
    pub start_ns: u64,
    /// Last kernel end, ns on the trace clock.
    pub end_ns: u64,
    /// Name of the (first) kernel.
    pub kernel: String,
}

/// One compute operation between collectives.
#[derive(schemars::JsonSchema, Serialize, Deserialize, Clone, Debug, PartialEq)]
pub struct ComputeOp {
    /// Kernel name (Kineto) or operator name (ET).
    pub name: String,
    /// Device stream, where recorded.
    pub stream: Option<u64>,
    /// Device start on the trace clock, where recorded.
    pub device_start_ns: Option<u64>,
    /// Device duration, where recorded.
    pub duration_ns: Option<u64>,
}

/// One collective as one rank recorded it.
#[derive(schemars::JsonSchema, Serialize, Deserialize, Clone, Debug, PartialEq)]
pub struct TraceCollective {
    /// Kind.
    pub kind: TraceKind,
    /// The name the source recorded (`allreduce`, `_allgather_base`, ...).
    pub source_name: String,
    /// Process group name (see [`CommTrace::groups`]).
    pub group: String,
    /// Position among this rank's collectives on this group (point-to-point:
    /// among its operations with the same peer and direction on this group), from 0.
    pub seq: u64,
    /// Element type.
    pub dtype: TraceDtype,
    /// Elements in the input buffer on this rank.
    pub in_elems: u64,
    /// Elements in the output buffer on this rank.
    pub out_elems: u64,
    /// All-to-all: elements sent to each member, in group-rank order; `None`
    /// where the source recorded no split sizes (PyTorch then splits evenly).
    pub in_split_elems: Option<Vec<u64>>,
    /// All-to-all: elements received from each member; `None` as above.
    pub out_split_elems: Option<Vec<u64>>,
    /// Broadcast and reduce: the root's global rank.
    pub root: Option<u32>,
    /// Send and receive: the peer's global rank.
    pub peer: Option<u32>,
    /// Device stream of its kernel, where recorded.
    pub stream: Option<u64>,
    /// Host time the operator started, ns on the trace clock, where recorded.
    pub host_start_ns: Option<u64>,
    /// Host duration of the operator, where recorded.
    pub host_duration_ns: Option<u64>,
    /// Device interval of its kernels, where recorded.
    pub device: Option<DeviceSpan>,
    /// Compute launched after the previous collective and before this one, in launch order.
    pub compute_before: Vec<ComputeOp>,
}

impl TraceCollective {
    /// A record of its communication fields (`seq` 0 until [`number_sequences`]);
    /// stream, times, device and compute empty for the importer to fill from what its source has.
    #[allow(clippy::too_many_arguments)]
    pub fn new(
        kind: TraceKind,
        source_name: &str,
        group: &str,
        dtype: TraceDtype,
        (in_elems, out_elems): (u64, u64),
        (in_split_elems, out_split_elems): (Option<Vec<u64>>, Option<Vec<u64>>),
        (root, peer): (Option<u32>, Option<u32>),
    ) -> Self {
        TraceCollective {
            kind,
            source_name: source_name.to_string(),
            group: group.to_string(),
            seq: 0,
            dtype,
            in_elems,
            out_elems,
            in_split_elems,
            out_split_elems,
            root,
            peer,
            stream: None,
            host_start_ns: None,
            host_duration_ns: None,
            device: None,
            compute_before: Vec::new(),
        }
    }

    /// Input bytes.
    pub fn in_bytes(&self) -> u64 {
        self.in_elems.saturating_mul(self.dtype.size_bytes())
    }
}

/// One rank's part of the trace.
#[derive(schemars::JsonSchema, Serialize, Deserialize, Clone, Debug, PartialEq)]
pub struct RankTrace {
    /// World rank.
    pub rank: u32,
    /// Collectives in issue order.
    pub collectives: Vec<TraceCollective>,
    /// Compute after the last collective.
    pub trailing_compute: Vec<ComputeOp>,
}

/// An imported communication trace (`commcanary import`), one file for all ranks.
#[derive(schemars::JsonSchema, Serialize, Deserialize, Clone, Debug, PartialEq)]
pub struct CommTrace {
    /// On-disk format version ([`COMM_TRACE_FORMAT_VERSION`]).
    pub format_version: u32,
    /// Provenance.
    pub source: TraceSource,
    /// Ranks in the recorded job.
    pub world_size: u32,
    /// Clock contract of the `*_ns` times.
    pub clock: TraceClock,
    /// Fields this source cannot provide (absent in every record), and why.
    pub unknown: Vec<UnknownField>,
    /// Every process group the sources describe (each one a collective references among them), in name order.
    pub groups: Vec<TraceGroup>,
    /// Per rank, in rank order.
    pub ranks: Vec<RankTrace>,
}

impl CommTrace {
    /// The group of that name.
    pub fn group(&self, name: &str) -> Option<&TraceGroup> {
        self.groups.iter().find(|g| g.name == name)
    }

    /// Read and check a trace written by `commcanary import`.
    pub fn read(path: &Path) -> Result<Self> {
        Ok(Self::read_with_sha256(path)?.0)
    }

    /// [`CommTrace::read`], with the SHA-256 of exactly the bytes decoded.
    pub fn read_with_sha256(path: &Path) -> Result<(Self, String)> {
        let bytes = crate::core::limits::read_bounded(path, Limits::default().max_json_bytes)?;
        let t = Self::from_slice(&bytes).with_context(|| path.display().to_string())?;
        Ok((t, crate::core::fsutil::sha256_hex(&bytes)))
    }

    /// Refuse a job of another size than the trace was recorded on (`BAD_ARGUMENT`).
    pub fn check_world_size(&self, world_size: u32) -> Result<()> {
        if world_size != self.world_size {
            crate::refuse!(
                crate::core::refusal::Code::BadArgument,
                "the trace was recorded on {} ranks; this job has {world_size}: run it under mpirun -n {}",
                self.world_size,
                self.world_size
            );
        }
        Ok(())
    }

    /// Decode and check.
    pub fn from_slice(bytes: &[u8]) -> Result<Self> {
        let t: CommTrace = serde_json::from_slice(bytes).context("not a CommCanary communication trace")?;
        if t.format_version != COMM_TRACE_FORMAT_VERSION {
            bail!("communication trace format version {} (this build reads {COMM_TRACE_FORMAT_VERSION})", t.format_version);
        }
        let names: Vec<String> = t.source.files.iter().map(|f| f.path.clone()).collect();
        check_ranks(t.world_size, &t.ranks.iter().map(|r| r.rank).collect::<Vec<_>>(), &names)?;
        check_groups(&t.groups, t.world_size)?;
        check_consistency(&t.groups, &t.ranks, &names)?;
        Ok(t)
    }
}

/// Bounds on what the decoders accept. A file past one is refused, naming the bound.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Limits {
    /// Bytes of a file as stored (compressed or not).
    pub max_file_bytes: u64,
    /// Bytes of JSON after decompression.
    pub max_json_bytes: u64,
    /// Events (Kineto) or nodes (ET) in one file.
    pub max_events: usize,
    /// Collectives on one rank.
    pub max_collectives: usize,
    /// World size, and members of one group.
    pub max_ranks: u32,
    /// Process groups described in one file.
    pub max_groups: usize,
    /// Bytes of one name (kernels, operators, groups).
    pub max_name_bytes: usize,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            max_file_bytes: 2 << 30,
            max_json_bytes: 2 << 30,
            max_events: 50_000_000,
            max_collectives: 10_000_000,
            max_ranks: 1 << 20,
            max_groups: 100_000,
            max_name_bytes: 64 << 10,
        }
    }
}

/// Read a file, decompressing gzip (detected by its magic bytes, RFC 1952),
/// within `limits`. Returns the JSON bytes and the SHA-256 of the stored bytes.
pub fn read_source(path: &Path, limits: &Limits) -> Result<(Vec<u8>, String)> {
    // a FIFO or device is refused, and the read stops at the limit whatever the size said
    let raw = crate::core::limits::read_bounded(path, limits.max_file_bytes)?;
    let sha = crate::core::fsutil::sha256_hex(&raw);
    let json = decompress(&raw, limits).with_context(|| path.display().to_string())?;
    Ok((json, sha))
}

/// Gunzip `raw` when it starts with the gzip magic, else return it; refuses
/// output past `limits.max_json_bytes`.
pub fn decompress(raw: &[u8], limits: &Limits) -> Result<Vec<u8>> {
    if raw.len() as u64 > limits.max_json_bytes && !raw.starts_with(&[0x1f, 0x8b]) {
        bail!("{} bytes of JSON, over the {}-byte limit", raw.len(), limits.max_json_bytes);
    }
    if !raw.starts_with(&[0x1f, 0x8b]) {
        return Ok(raw.to_vec());
    }
    let mut out = Vec::new();
    flate2::read::MultiGzDecoder::new(raw)
        .take(limits.max_json_bytes.saturating_add(1))
        .read_to_end(&mut out)
        .context("gzip stream is corrupt or truncated")?;
    if out.len() as u64 > limits.max_json_bytes {
        bail!("decompresses past the {}-byte limit on trace JSON", limits.max_json_bytes);
    }
    Ok(out)
}

/// What one source file contributes before the cross-rank checks.
#[derive(Clone, Debug)]
pub struct RankRecord {
    /// The file.
    pub file: SourceFile,
    /// Ranks in the job, as this file tells it.
    pub world_size: u32,
    /// Facts every file of one run must share (key, canonical value).
    pub run_facts: Vec<(String, String)>,
    /// Groups this file describes.
    pub groups: Vec<TraceGroup>,
    /// Its collectives in order (`seq` filled by [`number_sequences`]).
    pub collectives: Vec<TraceCollective>,
    /// Compute after the last collective.
    pub trailing_compute: Vec<ComputeOp>,
    /// Source schema string.
    pub schema: Option<String>,
    /// NCCL version, where declared.
    pub nccl_version: Option<String>,
    /// Wall-clock interval the file's recording covers, ns since the Unix
    /// epoch (Kineto: its first and last collective; an execution trace: its
    /// start time, to the second); `None` where the file records none.
    pub wall_span_ns: Option<(u64, u64)>,
}

/// How far apart (ns) the wall-clock spans of two files of one run may lie:
/// the ranks of one job record at the same time, on clocks that agree far
/// better than this; files whose spans lie further apart come from
/// different runs, even of the same shape.
pub const SAME_RUN_SLACK_NS: u64 = 60_000_000_000;

/// Largest buffer one collective record may describe, in bytes: MPI's
/// `MPI_Count` is a signed 64-bit integer (MPI 4.0, §2.5.8 "Counts") and
/// NCCL's `count` a `size_t`; a count whose bytes pass `i64::MAX` is no
/// buffer any collective holds.
pub const MAX_COLLECTIVE_BYTES: u64 = i64::MAX as u64;

/// Every group's members distinct and inside the world of `world` ranks.
fn check_groups(groups: &[TraceGroup], world: u32) -> Result<()> {
    for g in groups {
        if let Some(&m) = g.members.iter().find(|&&m| m >= world) {
            bail!("group {:?} names rank {m}, outside the world of {world} ranks", g.name);
        }
        let mut seen = BTreeSet::new();
        if let Some(&m) = g.members.iter().find(|&&m| !seen.insert(m)) {
            bail!("group {:?} lists rank {m} twice (members {:?}): a process group holds each rank once", g.name, g.members);
        }
    }
    Ok(())
}

/// Fill each collective's `seq`: per group for collectives, per (group, peer,
/// direction) for point-to-point.
pub fn number_sequences(colls: &mut [TraceCollective]) {
    let mut next: BTreeMap<(String, Option<(TraceKind, u32)>), u64> = BTreeMap::new();
    for c in colls.iter_mut() {
        let key = (c.group.clone(), if c.kind.is_p2p() { c.peer.map(|p| (c.kind, p)) } else { None });
        let n = next.entry(key).or_insert(0);
        c.seq = *n;
        *n += 1;
    }
}

/// Members of a group after resolving a group-local rank; refuses one outside the group.
pub fn global_rank(group: &TraceGroup, local: i64, what: &str) -> Result<u32> {
    usize::try_from(local)
        .ok()
        .and_then(|i| group.members.get(i).copied())
        .with_context(|| format!("{what} {local} is not a rank of group {:?} (members {:?})", group.name, group.members))
}

/// Check one record's own buffer relations (the counts a collective of this
/// kind must have on one rank of a group of `n`).
pub fn check_record_counts(c: &TraceCollective, n: u64) -> Result<()> {
    let (i, o) = (c.in_elems, c.out_elems);
    for (what, e) in [("in", i), ("out", o)] {
        if e.checked_mul(c.dtype.size_bytes()).is_none_or(|b| b > MAX_COLLECTIVE_BYTES) {
            bail!(
                "{} on group {:?} (#{}) records {e} {:?} elements {what}: over {MAX_COLLECTIVE_BYTES} bytes, more than any collective's buffer holds",
                c.source_name,
                c.group,
                c.seq,
                c.dtype
            );
        }
    }
    use crate::core::collective::Buffers;
    let ok = match c.kind.row().buffers {
        Buffers::Same => i == o,
        Buffers::OutIsNTimesIn => Some(o) == i.checked_mul(n),
        Buffers::InIsNTimesOut => Some(i) == o.checked_mul(n),
        Buffers::Splits => match (&c.in_split_elems, &c.out_split_elems) {
            (Some(a), Some(b)) => a.len() as u64 == n && b.len() as u64 == n && a.iter().sum::<u64>() == i && b.iter().sum::<u64>() == o,
            (None, None) => i == o && n > 0 && i % n == 0,
            _ => false,
        },
        Buffers::Free => true,
    };
    if !ok {
        bail!(
            "{} on group {:?} (#{}) records {i} elements in and {o} out{} on a group of {n}: counts disagree with the operation",
            c.source_name,
            c.group,
            c.seq,
            match (&c.in_split_elems, &c.out_split_elems) {
                (None, None) => String::new(),
                (a, b) => format!(" with splits {a:?}/{b:?}"),
            }
        );
    }
    Ok(())
}

/// Every rank of `0..world` present once.
fn check_ranks(world: u32, ranks: &[u32], names: &[String]) -> Result<()> {
    let mut seen: BTreeMap<u32, usize> = BTreeMap::new();
    for (i, &r) in ranks.iter().enumerate() {
        if r >= world {
            bail!("{}: rank {r} is outside the world of {world} ranks: files from different runs or rank sets", name_of(names, i));
        }
        if let Some(j) = seen.insert(r, i) {
            bail!("{} and {} both record rank {r}: files from different runs or rank sets", name_of(names, j), name_of(names, i));
        }
    }
    if let Some(missing) = (0..world).find(|r| !seen.contains_key(r)) {
        let given: Vec<u32> = seen.keys().copied().collect();
        bail!("rank {missing} missing: the trace's world has {world} ranks and the files given record ranks {given:?} (give one file per rank)");
    }
    Ok(())
}

fn name_of(names: &[String], i: usize) -> &str {
    names.get(i).map(|s| s.as_str()).unwrap_or("?")
}

/// Cross-rank checks: groups described, members agree per collective, point-to-point pairs.
fn check_consistency(groups: &[TraceGroup], ranks: &[RankTrace], names: &[String]) -> Result<()> {
    let file_of = |rank: u32| -> &str { ranks.iter().position(|r| r.rank == rank).map(|i| name_of(names, i)).unwrap_or("?") };
    let by_name: BTreeMap<&str, &TraceGroup> = groups.iter().map(|g| (g.name.as_str(), g)).collect();
    // (group, member) -> that member's non-p2p collectives on the group.
    let mut per_member: BTreeMap<(&str, u32), Vec<&TraceCollective>> = BTreeMap::new();
    // (src, dst, group) -> sends / recvs.
    let mut sends: BTreeMap<(u32, u32, &str), Vec<&TraceCollective>> = BTreeMap::new();
    let mut recvs: BTreeMap<(u32, u32, &str), Vec<&TraceCollective>> = BTreeMap::new();
    for r in ranks {
        for c in &r.collectives {
            let g = by_name.get(c.group.as_str()).with_context(|| {
                let described: Vec<&str> = by_name.keys().copied().collect();
                format!("{}: rank {} uses process group {:?}, which no file describes (described: {described:?})", file_of(r.rank), r.rank, c.group)
            })?;
            if !g.members.contains(&r.rank) {
                bail!("{}: rank {} issues {} on group {:?} whose members are {:?}", file_of(r.rank), r.rank, c.source_name, g.name, g.members);
            }
            check_record_counts(c, g.members.len() as u64).with_context(|| format!("{}: rank {}", file_of(r.rank), r.rank))?;
            match c.kind {
                TraceKind::Send => {
                    let p = c.peer.with_context(|| format!("{}: send #{} has no peer", file_of(r.rank), c.seq))?;
                    sends.entry((r.rank, p, &c.group)).or_default().push(c);
                }
                TraceKind::Recv => {
                    let p = c.peer.with_context(|| format!("{}: recv #{} has no peer", file_of(r.rank), c.seq))?;
                    recvs.entry((p, r.rank, &c.group)).or_default().push(c);
                }
                _ => per_member.entry((g.name.as_str(), r.rank)).or_default().push(c),
            }
        }
    }
    for g in groups {
        let lists: Vec<(u32, &[&TraceCollective])> =
            g.members.iter().map(|&m| (m, per_member.get(&(g.name.as_str(), m)).map(|v| v.as_slice()).unwrap_or(&[]))).collect();
        let Some(&(first_rank, first)) = lists.first() else { continue };
        for &(m, list) in &lists[1..] {
            if list.len() != first.len() {
                bail!(
                    "group {:?}: rank {first_rank} ({}) issues {} collectives on it, rank {m} ({}) issues {}: counts disagree across the group's members",
                    g.name,
                    file_of(first_rank),
                    first.len(),
                    file_of(m),
                    list.len()
                );
            }
            for (k, (a, b)) in first.iter().zip(list.iter()).enumerate() {
                let same = a.kind == b.kind
                    && a.dtype == b.dtype
                    && a.root == b.root
                    && (a.kind == TraceKind::AllToAll && a.in_split_elems.is_some() || (a.in_elems == b.in_elems && a.out_elems == b.out_elems));
                if !same {
                    bail!(
                        "group {:?} collective #{k}: rank {first_rank} ({}) records {} of {} {:?} elements in, {} out{}; rank {m} ({}) records {} of {} {:?} in, {} out{}: counts disagree across the group's members",
                        g.name,
                        file_of(first_rank),
                        a.kind.name(), a.in_elems, a.dtype, a.out_elems, root_text(a.root),
                        file_of(m),
                        b.kind.name(), b.in_elems, b.dtype, b.out_elems, root_text(b.root),
                    );
                }
            }
        }
        // All-to-all with explicit splits: what i sends to j is what j receives from i.
        for k in 0..first.len() {
            if first[k].kind != TraceKind::AllToAll {
                continue;
            }
            for (i, &(ri, li)) in lists.iter().enumerate() {
                for (j, &(rj, lj)) in lists.iter().enumerate() {
                    let send = li[k].in_split_elems.as_ref().map(|s| s[j]).unwrap_or(li[k].in_elems / g.members.len() as u64);
                    let recv = lj[k].out_split_elems.as_ref().map(|s| s[i]).unwrap_or(lj[k].out_elems / g.members.len() as u64);
                    if send != recv {
                        bail!(
                            "group {:?} all-to-all #{k}: rank {ri} sends {send} elements to rank {rj}, which expects {recv} from it: counts disagree across the group's members",
                            g.name
                        );
                    }
                }
            }
        }
    }
    let pairs: BTreeSet<(u32, u32, &str)> = sends.keys().chain(recvs.keys()).copied().collect();
    for key in pairs {
        let (s, r) = (sends.get(&key).map(|v| v.as_slice()).unwrap_or(&[]), recvs.get(&key).map(|v| v.as_slice()).unwrap_or(&[]));
        let (src, dst, g) = key;
        if s.len() != r.len() {
            bail!(
                "group {g:?}: rank {src} ({}) sends {} times to rank {dst}, which ({}) receives {} times from it: point-to-point operations do not pair up",
                file_of(src),
                s.len(),
                file_of(dst),
                r.len()
            );
        }
        for (k, (a, b)) in s.iter().zip(r.iter()).enumerate() {
            if a.in_elems != b.out_elems || a.dtype != b.dtype {
                bail!(
                    "group {g:?}: send #{k} from rank {src} carries {} {:?} elements, the matching recv on rank {dst} expects {} {:?}: counts disagree",
                    a.in_elems,
                    a.dtype,
                    b.out_elems,
                    b.dtype
                );
            }
        }
    }
    Ok(())
}

fn root_text(root: Option<u32>) -> String {
    root.map(|r| format!(" (root {r})")).unwrap_or_default()
}

/// Put per-file records together: same run, one file per rank, every rank
/// present, groups described alike, counts agreeing across members.
pub fn assemble(kind: SourceKind, mut recs: Vec<RankRecord>, clock: TraceClock, unknown: Vec<UnknownField>) -> Result<CommTrace> {
    let Some(first) = recs.first() else { bail!("no trace files given") };
    let (first_path, first_facts, world) = (first.file.path.clone(), first.run_facts.clone(), first.world_size);
    for r in &recs[1..] {
        for ((k, a), (k2, b)) in first_facts.iter().zip(r.run_facts.iter()) {
            if k != k2 || a != b {
                bail!("{} and {first_path} come from different runs or rank sets: {k} is {b} in {} but {a} in {first_path}", r.file.path, r.file.path);
            }
        }
        if r.run_facts.len() != first_facts.len() || r.world_size != world {
            bail!("{} and {first_path} come from different runs or rank sets: world size {} vs {world}", r.file.path, r.world_size);
        }
    }
    // one run's ranks record at the same time: spans further apart are two runs of one shape
    let spans: Vec<(&str, (u64, u64))> = recs.iter().filter_map(|r| r.wall_span_ns.map(|s| (r.file.path.as_str(), s))).collect();
    if let (Some(late), Some(early)) = (spans.iter().max_by_key(|s| s.1 .0), spans.iter().min_by_key(|s| s.1 .1)) {
        if late.1 .0 > early.1 .1.saturating_add(SAME_RUN_SLACK_NS) {
            bail!(
                "{} and {} come from different runs: {} starts recording {:.0} s after {} stopped (the ranks of one run record at the same time)",
                late.0,
                early.0,
                late.0,
                (late.1 .0 - early.1 .1) as f64 / 1e9,
                early.0
            );
        }
    }
    recs.sort_by_key(|r| r.file.rank);
    let names: Vec<String> = recs.iter().map(|r| r.file.path.clone()).collect();
    check_ranks(world, &recs.iter().map(|r| r.file.rank).collect::<Vec<_>>(), &names)?;
    // Groups: the union of what the files describe; one name, one membership.
    let mut groups: Vec<TraceGroup> = Vec::new();
    for r in &recs {
        for g in &r.groups {
            match groups.iter().find(|h| h.name == g.name) {
                Some(h) if h.members != g.members => bail!(
                    "{} describes group {:?} with members {:?}, another file with {:?}: files from different runs or rank sets",
                    r.file.path,
                    g.name,
                    g.members,
                    h.members
                ),
                Some(_) => {}
                None => groups.push(g.clone()),
            }
        }
    }
    check_groups(&groups, world)?;
    let ranks: Vec<RankTrace> =
        recs.iter().map(|r| RankTrace { rank: r.file.rank, collectives: r.collectives.clone(), trailing_compute: r.trailing_compute.clone() }).collect();
    check_consistency(&groups, &ranks, &names)?;
    // Every described group is kept (the world group carries the world size
    // even where no collective uses it), in name order.
    groups.sort_by(|a, b| a.name.cmp(&b.name));
    let first = &recs[0];
    Ok(CommTrace {
        format_version: COMM_TRACE_FORMAT_VERSION,
        source: TraceSource {
            kind,
            schema: first.schema.clone(),
            nccl_version: first.nccl_version.clone(),
            files: recs.iter().map(|r| r.file.clone()).collect(),
        },
        world_size: world,
        clock,
        unknown,
        groups,
        ranks,
    })
}

/// Import one file per rank of `kind` and put them together.
pub fn import_files(kind: SourceKind, paths: &[std::path::PathBuf], limits: &Limits) -> Result<CommTrace> {
    if !matches!(kind, SourceKind::Kineto | SourceKind::ExecutionTrace) {
        bail!("import_files reads profiler files (kineto, et); a run is imported with `import run`");
    }
    let recs = paths
        .iter()
        .map(|p| match kind {
            SourceKind::Kineto => kineto::import_file(p, limits),
            _ => et::import_file(p, limits),
        })
        .collect::<Result<Vec<_>>>()?;
    let (clock, unknown) = match kind {
        SourceKind::Kineto => (kineto::clock(), kineto::unknown()),
        _ => (et::clock(), et::unknown()),
    };
    assemble(kind, recs, clock, unknown)
}

/// Executor of a whole trace on one rank (a backend's `replay`).
pub type ReplayRun<'a> = dyn FnMut(&mpi::topology::SimpleCommunicator, &CommTrace) -> Result<cpu_exec::ReplayOutput> + 'a;

/// Involuntary context switches of this process so far (`getrusage`'s
/// `ru_nivcsw`): the times the kernel took the core away from it.
fn involuntary_switches() -> Option<i64> {
    // SAFETY: getrusage writes one rusage into the zeroed struct we own.
    let mut u: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: RUSAGE_SELF and a valid pointer to that struct.
    (unsafe { libc::getrusage(libc::RUSAGE_SELF, &mut u) } == 0).then_some(u.ru_nivcsw)
}

/// A gap this far off its target is a scheduling event, not pacing error.
const GAP_OFF_NS: u64 = 1_000_000;

/// Format version of `replay-trace.rank-N.json` (1: a bare array of records;
/// 2: a header that binds the records to the trace, rank and settings).
pub const REPLAY_FORMAT_VERSION: u32 = 2;
/// Rank 0's index of a replay's files with their digests.
pub const REPLAY_INDEX_FILE: &str = "replay-trace.json";

/// What a replay's records are of.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct ReplayHeader {
    /// The tool that wrote it (version, commit, dirty state).
    pub tool: String,
    /// The trace as named on the command line.
    pub trace_path: String,
    /// SHA-256 of the trace file's bytes.
    pub trace_sha256: String,
    /// This rank.
    pub rank: u32,
    /// Ranks in the job.
    pub world_size: u32,
    /// Host name.
    pub host: String,
    /// `cpu` (MPI) or `cuda` (NCCL).
    pub backend: String,
    /// How the replay was paced and checked (`--pace`, `--op`, `--check`, ...).
    pub settings: Vec<String>,
    /// Wall-clock start and end of this rank's replay (Unix ms).
    pub started_unix_ms: u64,
    /// See `started_unix_ms`.
    pub finished_unix_ms: u64,
}

/// `replay-trace.rank-N.json`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct ReplayFile {
    /// [`REPLAY_FORMAT_VERSION`].
    pub format_version: u32,
    /// What the records are of.
    pub header: ReplayHeader,
    /// One record per collective of the timed pass.
    pub records: Vec<cpu_exec::ExecRecord>,
}

/// One rank's files in [`ReplayIndex`].
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct ReplayIndexRank {
    /// Rank.
    pub rank: u32,
    /// Host name.
    pub host: String,
    /// File name and SHA-256 of every file the rank wrote.
    pub files: Vec<(String, String)>,
}

/// `replay-trace.json`: rank 0's index of every rank's files and digests, so
/// a replay directory is verified like a run (`commcanary inspect` reads it).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct ReplayIndex {
    /// Format version (1).
    pub format_version: u32,
    /// SHA-256 of the trace file replayed.
    pub trace_sha256: String,
    /// Ranks in the job.
    pub world_size: u32,
    /// Every rank.
    pub ranks: Vec<ReplayIndexRank>,
}

/// Refuse, before MPI starts, an output directory that already holds a replay's files.
fn refuse_existing_replay(out: &Path, world_size: u32) -> Result<()> {
    let names = std::iter::once(REPLAY_INDEX_FILE.to_string())
        .chain((0..world_size).flat_map(|r| [format!("replay-trace.rank-{r}.json"), format!("replay-trace.rank-{r}.workload.json")]));
    for n in names {
        let p = out.join(n);
        if p.symlink_metadata().is_ok() {
            crate::refuse!(crate::core::refusal::Code::AlreadyExists, "{} exists; replay-trace never overwrites a replay: choose another --out", p.display());
        }
    }
    Ok(())
}

/// Gather every rank's (host, file digests) at rank 0 and write the index there.
fn write_replay_index(world: &mpi::topology::SimpleCommunicator, out: &Path, trace_sha256: &str, files: &[(String, String)]) -> Result<()> {
    use mpi::traits::*;
    const SLOT: usize = 4096;
    let host = crate::core::identity::hostname();
    let mine = serde_json::to_vec(&(host, files))?;
    if mine.len() > SLOT {
        bail!("a rank's file list is {} bytes, more than the {SLOT} of its slot", mine.len());
    }
    let mut send = vec![0u8; SLOT];
    send[..mine.len()].copy_from_slice(&mine);
    let n = world.size() as usize;
    let root = world.process_at_rank(0);
    if world.rank() != 0 {
        root.gather_into(&send[..]);
        return Ok(());
    }
    let mut all = vec![0u8; SLOT * n];
    root.gather_into_root(&send[..], &mut all[..]);
    let mut ranks = Vec::new();
    for (r, slot) in all.chunks(SLOT).enumerate() {
        let end = slot.iter().position(|b| *b == 0).unwrap_or(SLOT);
        let (host, files): (String, Vec<(String, String)>) = serde_json::from_slice(&slot[..end]).with_context(|| format!("rank {r}'s file list"))?;
        ranks.push(ReplayIndexRank { rank: r as u32, host, files });
    }
    let index = ReplayIndex { format_version: 1, trace_sha256: trace_sha256.to_string(), world_size: n as u32, ranks };
    crate::core::fsutil::write_json_new(&out.join(REPLAY_INDEX_FILE), &index)
}

/// `replay-trace`: run this rank's collectives of an imported trace through
/// `run` (MPI or NCCL), write `OUT/replay-trace.rank-N.json` (a header binding
/// the records to the trace's SHA-256, the rank and the settings; rank 0 then
/// writes `OUT/replay-trace.json`, every rank's files with their digests;
/// an `OUT` that already holds a replay is refused before MPI starts); every rank
/// prints its summary (per kind: count, checks, time p50/p99; the pacing
/// error; the gaps more than 1 ms off and the involuntary context switches
/// during the replay, which say the host took the core away). A replay
/// `paced` by the trace (gaps, device gaps or the recorded workload) is
/// refused before MPI starts when a rank's gap passes the one bound of every
/// replay ([`crate::core::limits::check_replay_gaps`]).
pub fn replay_command(trace: &Path, out: &Path, paced: bool, backend: &str, settings: Vec<String>, run: &mut ReplayRun) -> Result<()> {
    let path = trace;
    // the header's digest is of exactly the bytes replayed
    let (trace, trace_sha256) = CommTrace::read_with_sha256(trace)?;
    refuse_existing_replay(out, trace.world_size)?;
    if paced {
        for r in &trace.ranks {
            if let Some(gaps) = cpu_exec::gaps_ns(&r.collectives) {
                crate::core::limits::check_replay_gaps(gaps, &|i| {
                    let c = &r.collectives[i];
                    format!("{}: rank {}'s {} #{} on group {:?}", path.display(), r.rank, c.kind.name(), c.seq, c.group)
                })?;
            }
        }
    }
    let universe = mpi::initialize().context("MPI could not be initialised")?;
    let world = mpi::topology::Communicator::duplicate(&universe.world());
    let rank = mpi::topology::Communicator::rank(&world) as u32;
    let switches_before = involuntary_switches();
    let started_unix_ms = crate::core::clock::unix_ms();
    // A failing rank aborts the whole job (its peers may be blocked in a collective).
    let (records, workload) = match run(&world, &trace).and_then(|r| {
        std::fs::create_dir_all(out).with_context(|| format!("creating {}", out.display()))?;
        let header = ReplayHeader {
            tool: format!("commcanary {}", crate::core::identity::VERSION_LONG),
            trace_path: path.display().to_string(),
            trace_sha256: trace_sha256.clone(),
            rank,
            world_size: mpi::topology::Communicator::size(&world) as u32,
            host: crate::core::identity::hostname(),
            backend: backend.to_string(),
            settings: settings.clone(),
            started_unix_ms,
            finished_unix_ms: crate::core::clock::unix_ms(),
        };
        let file = ReplayFile { format_version: REPLAY_FORMAT_VERSION, header, records: r.records };
        let mut files = Vec::new();
        let name = format!("replay-trace.rank-{rank}.json");
        crate::core::fsutil::write_json_new(&out.join(&name), &file)?;
        files.push((name.clone(), crate::core::fsutil::sha256_file(&out.join(&name))?));
        if let Some(w) = &r.workload {
            let name = format!("replay-trace.rank-{rank}.workload.json");
            crate::core::fsutil::write_json_new(&out.join(&name), w)?;
            files.push((name.clone(), crate::core::fsutil::sha256_file(&out.join(&name))?));
        }
        write_replay_index(&world, out, &trace_sha256, &files)?;
        Ok((file.records, r.workload))
    }) {
        Ok(r) => r,
        Err(e) => {
            eprintln!("commcanary replay-trace rank {rank}: error: {e:#}");
            mpi::topology::Communicator::abort(&world, 2)
        }
    };
    let switches = switches_before.zip(involuntary_switches()).map(|(a, b)| b - a);
    {
        let mut by: BTreeMap<(TraceKind, String, TraceDtype), (u64, Vec<f64>)> = BTreeMap::new();
        for r in &records {
            let e = by.entry((r.kind, r.group.clone(), r.dtype)).or_insert((0, Vec::new()));
            e.0 += r.checked as u64;
            e.1.push(r.elapsed_ns as f64 / 1e3);
        }
        for ((k, g, d), (checked, times)) in &mut by {
            let n = times.len();
            let p50 = crate::core::stats::percentile_nearest_rank(times, 50.0).unwrap_or(f64::NAN);
            let p99 = crate::core::stats::percentile_nearest_rank(times, 99.0).unwrap_or(f64::NAN);
            println!("rank {rank}: {n} x {} {d} on {g:?}, {checked} checked; time p50 {p50:.1} µs, p99 {p99:.1} µs", k.name());
        }
        let mut err: Vec<f64> = records.iter().skip(1).filter_map(|r| r.target_gap_ns.map(|t| r.actual_gap_ns.abs_diff(t) as f64)).collect();
        let off = err.iter().filter(|e| **e > GAP_OFF_NS as f64).count();
        if off > 0 {
            eprintln!(
                "commcanary replay-trace rank {rank}: warning: {off} of {} gaps were more than {} ms off their target; the kernel took the core from this process {} times during the run (involuntary context switches){}",
                err.len(),
                GAP_OFF_NS / 1_000_000,
                switches.map_or("an unknown number of".to_string(), |n| n.to_string()),
                if switches.is_some_and(|n| n > 0) {
                    ": the host was descheduling it (other load on its cores), and a descheduled wait overshoots its gap; on GPUs --pace device-gaps is immune"
                } else {
                    ""
                }
            );
        }
        if let Some(p99) = crate::core::stats::percentile_nearest_rank(&mut err, 99.0) {
            let what = match &workload {
                Some(w) if w.backend == "cuda" && w.stands_for == "gaps" => "device gap after the previous collective vs the recorded gap (device-paced)",
                Some(w) if w.backend == "cuda" => "device gap after the previous collective vs the compute recorded between them on its stream",
                Some(_) => "host gap vs the compute recorded before the collective",
                None => "replay gap",
            };
            println!("rank {rank}: {what}: error |actual - target| p99 {:.1} µs over {} gaps", p99 / 1e3, err.len());
        }
        if let Some(w) = &workload {
            let us = |ns: u64| format!("{:.1} µs", ns as f64 / 1e3);
            println!(
                "rank {rank}: workload pass: {} {} ({} recorded{}) and {} collectives on {} stream(s), {} cross-stream waits; pass {}{}{}; the source's device span {}",
                w.compute_ops,
                if w.stands_for == "gaps" { "gaps" } else { "compute kernels" },
                us(w.compute_recorded_ns),
                w.compute_launches.map_or(String::new(), |n| format!(", {n} launches")),
                w.collectives,
                w.streams.len(),
                w.cross_stream_waits,
                w.pass_device_ns.map_or_else(|| format!("{} (host)", us(w.pass_host_ns)), |d| format!("{} (device)", us(d))),
                w.spin.as_ref().map_or(String::new(), |s| format!(", spin launch excess {:.0} ns corrected, floor {:.0} ns", s.excess_ns, s.floor_ns)),
                match (&w.gap_transition, &w.spin) {
                    (Some(t), _) => format!(", gap transition {} ns taken off each gap (warm-up median {:.0} ns over {} gaps)", t.applied_ns, t.warmup_median_ns, t.gaps),
                    (None, Some(_)) => ", gap transition not corrected (no warm-up pass, or no gap to measure it on)".to_string(),
                    (None, None) => String::new(),
                },
                w.trace_span_ns.map_or("unknown (times missing)".to_string(), us)
            );
        }
    }
    if let Some(mine) = trace.ranks.iter().find(|r| r.rank == rank) {
        if let Some(k) = compare_kernels(&mine.collectives, &records) {
            let diff: Vec<String> = k.differing.iter().map(|(i, want, got)| format!("#{i}: trace {want}, replay {got}")).collect();
            println!(
                "rank {rank}: CUPTI kernel family matches the trace in {} of {} collectives ({} with no replay kernel){}{}",
                k.same_family,
                k.compared,
                k.missing_in_replay,
                if diff.is_empty() { "" } else { "; differing: " },
                diff.join("; ")
            );
        }
    }
    Ok(())
}

/// Tokens of an NCCL kernel name that name the algorithm or protocol NCCL
/// chose (NCCL's `NCCL_ALGO` and `NCCL_PROTO` values as they appear in kernel
/// names, e.g. `COLLNET_DIRECT`, `NVLS_TREE`, `LL128`).
const ALGO_PROTO_TOKENS: [&str; 10] = ["RING", "TREE", "COLLNET", "DIRECT", "CHAIN", "NVLS", "PAT", "LL", "LL128", "SIMPLE"];

/// The NCCL kernel family of a kernel name, mangled (CUPTI:
/// `_Z39ncclDevKernel_AllReduce_Sum_f32_RING_LL24ncclDevKernelArgs...`) or
/// demangled (Kineto: `ncclDevKernel_AllReduce_Sum_bf16_RING_LL(ncclDev...)`):
/// the function's identifier without its arguments and without the
/// algorithm and protocol, which NCCL picks per size, machine and version
/// (`ncclDevKernel_AllReduce_Sum_bf16`). The identifier of a mangled name is
/// read as the Itanium C++ ABI writes a plain function name: `_Z`, its length
/// in decimal, the identifier.
pub fn kernel_family(name: &str) -> String {
    let mangled = name.strip_prefix("_Z").and_then(|rest| {
        let digits = rest.bytes().take_while(u8::is_ascii_digit).count();
        let len: usize = rest[..digits].parse().ok()?;
        rest.get(digits..digits + len)
    });
    let ident = mangled.unwrap_or_else(|| name.split('(').next().unwrap_or(name));
    ident.split('_').filter(|t| !ALGO_PROTO_TOKENS.contains(t)).collect::<Vec<_>>().join("_")
}

/// How the kernels a replay ran compare with the kernels the trace recorded.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct KernelComparison {
    /// Collectives with a kernel both in the trace and in the replay.
    pub compared: usize,
    /// Of those, the ones whose first kernels have the same family.
    pub same_family: usize,
    /// Collectives whose trace records a kernel but whose replay recorded none.
    pub missing_in_replay: usize,
    /// The first differing collectives: (index, trace family, replay family).
    pub differing: Vec<(u32, String, String)>,
}

/// Compare, collective by collective, the family of the first kernel the
/// replay recorded with the family of the kernel the trace recorded.
/// `None` when the replay recorded no kernels at all.
pub fn compare_kernels(colls: &[TraceCollective], records: &[cpu_exec::ExecRecord]) -> Option<KernelComparison> {
    if records.iter().all(|r| r.kernels.is_none()) {
        return None;
    }
    let mut k = KernelComparison::default();
    for r in records {
        let Some(want) = colls.get(r.index as usize).and_then(|c| c.device.as_ref()).map(|d| kernel_family(&d.kernel)) else { continue };
        match r.kernels.as_ref().and_then(|v| v.first()) {
            None => k.missing_in_replay += 1,
            Some(got) => {
                k.compared += 1;
                let got = kernel_family(got);
                if got == want {
                    k.same_family += 1;
                } else if k.differing.len() < 5 {
                    k.differing.push((r.index, want, got));
                }
            }
        }
    }
    Some(k)
}

/// Collectives per kind on each rank, one line per rank (for the import's report).
pub fn render_counts(t: &CommTrace) -> String {
    let mut s = String::new();
    for r in &t.ranks {
        let mut by: BTreeMap<(TraceKind, String, TraceDtype, u64), u64> = BTreeMap::new();
        for c in &r.collectives {
            *by.entry((c.kind, c.group.clone(), c.dtype, c.in_elems)).or_insert(0) += 1;
        }
        let parts: Vec<String> = by.iter().map(|((k, g, d, n), count)| format!("{count} x {} {n} {d} on {g:?}", k.name())).collect();
        s += &format!("rank {}: {}\n", r.rank, parts.join(", "));
    }
    s
}

/// A JSON list decoded element by element with a count limit: each element is
/// counted as the parser reaches it and the list is refused at the first one
/// past `max`, before it is built, so a small compressed file of a hundred
/// million tiny events stops at the limit instead of building every event
/// first (serde's `DeserializeSeed`, serde.rs "Stateful deserialization").
/// Only the elements `keep` accepts are stored, with their position in the list.
pub(crate) struct CountedSeq<'a, T> {
    /// Elements allowed.
    pub max: usize,
    /// Set when the list had more than `max` elements.
    pub over: &'a std::cell::Cell<bool>,
    /// Which elements are kept.
    pub keep: fn(&T) -> bool,
}

impl<'de, T: Deserialize<'de>> serde::de::DeserializeSeed<'de> for CountedSeq<'_, T> {
    type Value = Vec<(usize, T)>;
    fn deserialize<D: serde::Deserializer<'de>>(self, d: D) -> std::result::Result<Self::Value, D::Error> {
        d.deserialize_seq(self)
    }
}

impl<'de, T: Deserialize<'de>> serde::de::Visitor<'de> for CountedSeq<'_, T> {
    type Value = Vec<(usize, T)>;
    fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        write!(f, "a list of at most {} elements", self.max)
    }
    fn visit_seq<A: serde::de::SeqAccess<'de>>(self, mut seq: A) -> std::result::Result<Self::Value, A::Error> {
        let mut out = Vec::new();
        let mut i = 0usize;
        loop {
            if i == self.max {
                // one more element (skipped, not built) is one too many
                if seq.next_element::<serde::de::IgnoredAny>()?.is_some() {
                    self.over.set(true);
                    return Err(serde::de::Error::custom(format!("more than {} elements, over the limit", self.max)));
                }
                return Ok(out);
            }
            match seq.next_element::<T>()? {
                Some(e) => {
                    if (self.keep)(&e) {
                        out.push((i, e));
                    }
                    i += 1;
                }
                None => return Ok(out),
            }
        }
    }
}

/// Helpers shared by the JSON decoders.
pub(crate) mod json {
    use anyhow::{bail, Context, Result};
    use serde_json::Value;

    /// A non-negative integer field.
    pub fn u64_of(v: &Value, what: &str) -> Result<u64> {
        if let Some(n) = v.as_u64() {
            return Ok(n);
        }
        match v.as_f64() {
            Some(f) if (0.0..1.8e19).contains(&f) && f.fract() == 0.0 => Ok(f as u64),
            _ => bail!("{what} is {v}, expected a non-negative integer"),
        }
    }

    /// A rank or rank count: a non-negative integer that fits 32 bits (named
    /// in the error, never Rust's own conversion text).
    pub fn u32_of(v: &Value, what: &str) -> Result<u32> {
        let n = u64_of(v, what)?;
        u32::try_from(n).ok().with_context(|| format!("{what} is {n}, over the largest rank number {}", u32::MAX))
    }

    /// An integer field, possibly negative.
    pub fn i64_of(v: &Value, what: &str) -> Result<i64> {
        v.as_i64().with_context(|| format!("{what} is {v}, expected an integer"))
    }

    /// A string field, bounded.
    pub fn str_of<'a>(v: &'a Value, what: &str, max: usize) -> Result<&'a str> {
        let s = v.as_str().with_context(|| format!("{what} is {v}, expected a string"))?;
        if s.len() > max {
            bail!("{what} is {} bytes long, over the {max}-byte limit", s.len());
        }
        Ok(s)
    }

    /// A JSON list of integers written as a string (`"[0, 1]"`), as PyTorch records ranks and splits.
    pub fn int_list_in_string(v: &Value, what: &str, max_len: usize) -> Result<Vec<i64>> {
        let s = v.as_str().with_context(|| format!("{what} is {v}, expected a string holding a list"))?;
        let parsed: Vec<i64> = serde_json::from_str(s).with_context(|| format!("{what} is {s:?}, expected a list of integers"))?;
        if parsed.len() > max_len {
            bail!("{what} has {} entries, over the limit of {max_len}", parsed.len());
        }
        Ok(parsed)
    }

    /// Microseconds with a fraction (Chrome trace `ts`/`dur`) to whole ns.
    pub fn us_to_ns(v: &Value, what: &str) -> Result<u64> {
        match v.as_f64() {
            Some(f) if (0.0..1.8e16).contains(&f) => Ok((f * 1000.0).round() as u64),
            _ => bail!("{what} is {v}, expected a non-negative time in µs"),
        }
    }

    /// Non-negative split sizes.
    pub fn splits(list: Vec<i64>, what: &str) -> Result<Option<Vec<u64>>> {
        if list.is_empty() {
            return Ok(None);
        }
        list.into_iter().map(|x| u64::try_from(x).with_context(|| format!("{what} holds {x}, expected element counts"))).collect::<Result<Vec<u64>>>().map(Some)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kernel_families_drop_arguments_algorithm_and_protocol_mangled_or_not() {
        let kineto = "ncclDevKernel_AllReduce_Sum_bf16_RING_LL(ncclDevKernelArgsStorage<4096ul>)";
        let cupti = "_Z43ncclDevKernel_AllReduce_Sum_bf16_TREE_LL12824ncclDevKernelArgsStorageILm4096EE";
        assert_eq!(kernel_family(kineto), "ncclDevKernel_AllReduce_Sum_bf16");
        assert_eq!(kernel_family(cupti), "ncclDevKernel_AllReduce_Sum_bf16");
        assert_eq!(kernel_family("_Z22ncclDevKernel_SendRecv24ncclDevKernelArgsStorageILm4096EE"), "ncclDevKernel_SendRecv");
        assert_eq!(kernel_family("ncclDevKernel_AllGather_COLLNET_DIRECT_SIMPLE(x)"), "ncclDevKernel_AllGather");
        assert_ne!(kernel_family("ncclDevKernel_AllReduce_Sum_f32_RING_LL"), kernel_family(kineto), "the dtype is part of the family");
        // a length past the name's end is not a mangled identifier: the name is kept
        assert_eq!(kernel_family("_Z99short"), "_Z99short");
    }

    #[test]
    fn kernel_comparison_counts_matches_differences_and_missing_kernels() {
        let mut c = TraceCollective::new(TraceKind::AllReduce, "allreduce", "0", TraceDtype::Bf16, (8, 8), (None, None), (None, None));
        c.device = Some(DeviceSpan { start_ns: 0, end_ns: 1, kernel: "ncclDevKernel_AllReduce_Sum_bf16_RING_LL(x)".into() });
        let colls = vec![c.clone(), c.clone(), c];
        let rec = |i: u32, k: Option<Vec<&str>>| cpu_exec::ExecRecord {
            index: i,
            kind: TraceKind::AllReduce,
            group: "0".into(),
            seq: i as u64,
            dtype: TraceDtype::Bf16,
            in_elems: 8,
            out_elems: 8,
            wire_bytes: 16,
            op: None,
            op_source: None,
            target_gap_ns: None,
            actual_gap_ns: 0,
            elapsed_ns: 1,
            checked: false,
            kernels: k.map(|v| v.into_iter().map(String::from).collect()),
            compute_ops: None,
            compute_recorded_ns: None,
            device_start_ns: None,
            device_end_ns: None,
        };
        assert_eq!(compare_kernels(&colls, &[rec(0, None)]), None, "nothing recorded: nothing compared");
        let got = compare_kernels(
            &colls,
            &[
                rec(0, Some(vec!["_Z40ncclDevKernel_AllReduce_Sum_bf16_TREE_LL24ncclDevKernelArgsStorageILm4096EE"])),
                rec(1, Some(vec!["ncclDevKernel_AllReduce_Max_bf16_RING_LL"])),
                rec(2, Some(vec![])),
            ],
        )
        .unwrap();
        assert_eq!((got.compared, got.same_family, got.missing_in_replay), (2, 1, 1));
        assert_eq!(got.differing, vec![(1, "ncclDevKernel_AllReduce_Sum_bf16".to_string(), "ncclDevKernel_AllReduce_Max_bf16".to_string())]);
    }

    #[test]
    fn unknown_names_are_refused_with_the_known_list() {
        let e = classify_name("allreduce_fancy").unwrap_err().to_string();
        assert!(e.contains("allreduce_fancy") && e.contains("_allgather_base") && e.contains("all_to_allv"), "{e}");
        assert_eq!(classify_name("wait").unwrap(), None);
        assert_eq!(classify_name("_reduce_scatter_base").unwrap(), Some(TraceKind::ReduceScatter));
    }

    #[test]
    fn gzip_is_bounded() {
        use std::io::Write;
        let mut enc = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
        enc.write_all(&vec![b' '; 10_000]).unwrap();
        let gz = enc.finish().unwrap();
        let small = Limits { max_json_bytes: 9_999, ..Limits::default() };
        assert!(decompress(&gz, &small).unwrap_err().to_string().contains("limit"));
        assert_eq!(decompress(&gz, &Limits::default()).unwrap().len(), 10_000);
        assert!(decompress(&gz[..gz.len() / 2], &Limits::default()).is_err());
    }

    #[test]
    fn record_counts_follow_the_operation() {
        let c = |kind: TraceKind, i, o| TraceCollective::new(kind, kind.pytorch_name(), "0", TraceDtype::Bf16, (i, o), (None, None), (None, None));
        assert!(check_record_counts(&c(TraceKind::AllGather, 4, 8), 2).is_ok());
        assert!(check_record_counts(&c(TraceKind::AllGather, 4, 4), 2).is_err());
        assert!(check_record_counts(&c(TraceKind::ReduceScatter, 8, 4), 2).is_ok());
        assert!(check_record_counts(&c(TraceKind::AllReduce, 8, 4), 2).is_err());
        assert!(check_record_counts(&c(TraceKind::AllToAll, 9, 9), 2).is_err());
    }
}

#[cfg(test)]
mod counted_tests {
    use super::*;
    use crate::core::refusal::{code_of, Code};

    /// `n` tiny elements, then `tail` (after the limit the decoder must not read on).
    fn doc(key: &str, elem: &str, n: usize, tail: &str) -> Vec<u8> {
        let mut s = format!("{{\"{key}\":[");
        for i in 0..n {
            if i > 0 {
                s.push(',');
            }
            s.push_str(elem);
        }
        s.push_str(tail);
        s.into_bytes()
    }

    #[test]
    fn kineto_events_are_counted_while_decoded_and_refused_at_the_first_past_the_limit() {
        let limits = Limits { max_events: 100, ..Limits::default() };
        // 101 events, then garbage: refused at event 101, never reading the garbage
        let e = kineto::parse(&doc("traceEvents", "{}", 101, ",[[[ not json"), "k", String::new(), &limits).unwrap_err();
        assert_eq!(code_of(&e), Some(Code::OverLimit), "{e:#}");
        assert!(format!("{e:#}").contains("more than 100 events"), "{e:#}");
        // exactly the limit is read (and then refused for what it lacks, not for its size)
        let e = kineto::parse(&doc("traceEvents", "{}", 100, "]}"), "k", String::new(), &limits).unwrap_err();
        assert_eq!(code_of(&e), None, "{e:#}");
        assert!(format!("{e:#}").contains("distributedInfo"), "{e:#}");
    }

    #[test]
    fn et_nodes_are_counted_while_decoded_and_refused_at_the_first_past_the_limit() {
        let limits = Limits { max_events: 100, ..Limits::default() };
        let e = et::parse(&doc("nodes", r#"{"id":1,"name":"x"}"#, 101, ",[[[ not json"), "e", String::new(), &limits).unwrap_err();
        assert_eq!(code_of(&e), Some(Code::OverLimit), "{e:#}");
        assert!(format!("{e:#}").contains("more than 100 nodes"), "{e:#}");
        let e = et::parse(&doc("nodes", r#"{"id":1,"name":"x"}"#, 100, "]}"), "e", String::new(), &limits).unwrap_err();
        assert_eq!(code_of(&e), None, "{e:#}");
    }
}
