//! What a trace replay records and how its results are checked, for every
//! backend's executor. Consumes a rank's [`TraceCollective`]s; produces the
//! pace ([`Pace`]), the records ([`ExecRecord`], [`WorkloadReport`],
//! [`ReplayOutput`]), the target gaps ([`gaps_ns`]) and the check's patterns
//! ([`contribution`], [`payload`]) with what a result must hold. Refuses
//! pacing by a trace without times ([`paced_gaps_ns`]). Runs nothing.
use super::{CollectiveKind, CommTrace, TraceCollective, TraceDtype};
use crate::core::refusal::Code;
use crate::core::workload::ReduceOp;
use anyhow::{Context, Result};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// How collectives are paced.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum Pace {
    /// Wait the trace's gap before each collective.
    Gaps,
    /// Back to back.
    None,
    /// Re-create the trace's compute kernels as device work of their
    /// recorded durations on their recorded streams, with the collectives
    /// between them (cuda: one gated asynchronous pass, docs/WORKLOADS.md;
    /// cpu: the compute is spun on the rank's one thread, in launch order,
    /// before each collective).
    Workload,
    /// The trace's gaps (recorded device gaps where the trace has device
    /// times) as device work before each collective, in the workload pace's
    /// gated asynchronous pass: the host's scheduling no longer moves a gap
    /// (cuda only).
    DeviceGaps,
}

/// What one collective did on this rank.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct ExecRecord {
    /// Position in this rank's trace order.
    pub index: u32,
    /// Kind.
    pub kind: CollectiveKind,
    /// Group name.
    pub group: String,
    /// Sequence number from the trace.
    pub seq: u64,
    /// Dtype.
    pub dtype: TraceDtype,
    /// Input elements.
    pub in_elems: u64,
    /// Output elements.
    pub out_elems: u64,
    /// Bytes this rank handed to MPI as input (f32 for bf16/f16 reductions).
    pub wire_bytes: u64,
    /// Reduction, for reducing kinds.
    pub op: Option<ReduceOp>,
    /// Where the reduction came from (`trace`: recorded, `--op`, or `default`: sum, the trace not recording it).
    pub op_source: Option<String>,
    /// Gap the trace asks for, where paced.
    pub target_gap_ns: Option<u64>,
    /// Gap achieved: this issue minus the end of the call before it where
    /// paced (a point-to-point step's included), else minus the previous collective's return.
    pub actual_gap_ns: u64,
    /// Host time of the blocking call (a nonblocking post's: the post alone).
    pub elapsed_ns: u64,
    /// Whether the result was validated (and passed: a failure stops the run).
    pub checked: bool,
    /// Kernels CUPTI recorded starting within this collective's timed call,
    /// in start order (cuda backend with `--cupti`; names as CUPTI gives
    /// them, mangled). Absent when not recorded.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kernels: Option<Vec<String>>,
    /// Workload pace: compute kernels of the trace re-created before this
    /// collective (after the previous one), and their recorded durations' sum.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub compute_ops: Option<u32>,
    /// Workload pace: the recorded durations of those kernels, summed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub compute_recorded_ns: Option<u64>,
    /// Workload pace on the cuda backend: the collective's device interval,
    /// ns after the pass's gate opened (CUDA events on its stream). With
    /// these, `elapsed_ns` is the device interval and `actual_gap_ns` the
    /// device gap after the previous collective, not host times.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub device_start_ns: Option<u64>,
    /// Workload pace on the cuda backend: end of the device interval, as above.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub device_end_ns: Option<u64>,
}

impl ExecRecord {
    /// Collective `i` of rank `rank` as run with reduction `op` (from
    /// `op_source`; recorded for reducing kinds only), `check` asked for and
    /// `wire_bytes` handed to the library; its timing left empty (0, absent)
    /// for the executor to fill. A check covers every kind's result where it
    /// lands: not a send's (its receiver checks), a barrier's, or a reduce's
    /// off the root.
    pub fn untimed(
        i: usize,
        c: &TraceCollective,
        rank: u32,
        (op, op_source): (ReduceOp, &str),
        check: bool,
        wire_bytes: u64,
    ) -> Self {
        let reducing = c.kind.row().reduces;
        use crate::core::collective::Lands;
        let lands = match c.kind.row().lands {
            Lands::OnRoot => c.root == Some(rank),
            Lands::AtPeer | Lands::Nowhere => false,
            Lands::Everywhere | Lands::Here => true,
        };
        ExecRecord {
            index: i as u32,
            kind: c.kind,
            group: c.group.clone(),
            seq: c.seq,
            dtype: c.dtype,
            in_elems: c.in_elems,
            out_elems: c.out_elems,
            wire_bytes,
            op: reducing.then_some(op),
            op_source: reducing.then(|| op_source.to_string()),
            target_gap_ns: None,
            actual_gap_ns: 0,
            elapsed_ns: 0,
            checked: check && lands,
            kernels: None,
            compute_ops: None,
            compute_recorded_ns: None,
            device_start_ns: None,
            device_end_ns: None,
        }
    }
}

/// Format version of [`WorkloadReport`] (2 added `compute_launches`, 3 `stands_for`, 4 `gap_transition`).
pub(crate) const WORKLOAD_REPORT_FORMAT_VERSION: u32 = 4;

/// What one rank's workload pass (`--pace workload`) did as a whole,
/// written beside its records as `replay-trace.rank-N.workload.json`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct WorkloadReport {
    /// Format version of this record (4; 4 added `gap_transition`).
    pub format_version: u32,
    /// What the device work before each collective stands for: `compute`
    /// (`--pace workload`: the recorded kernels) or `gaps` (`--pace
    /// device-gaps`: the recorded gap between collectives). Format 1 and 2
    /// records are `compute`.
    #[serde(default = "stands_for_compute")]
    pub stands_for: String,
    /// World rank.
    pub rank: u32,
    /// `cpu` or `cuda`.
    pub backend: String,
    /// What stands in for the trace's compute kernels, in words.
    pub compute_model: String,
    /// The trace's streams this rank used, in first-use order
    /// (`unrecorded` for operations the source gave none).
    pub streams: Vec<String>,
    /// Whether every cross-stream dependency came from the recorded device
    /// timeline (`false`: some came from launch order, times being missing).
    pub dependencies_from_timeline: bool,
    /// Cross-stream waits the plan inserted.
    pub cross_stream_waits: u32,
    /// Compute kernels re-created in the pass.
    pub compute_ops: u32,
    /// Their recorded durations, summed.
    pub compute_recorded_ns: u64,
    /// cuda: launches standing for them (consecutive kernels of a stream
    /// with nothing waiting between them are one launch of their summed
    /// duration; a launch cannot be shorter than the spin's floor). Absent
    /// on cpu and in format 1.
    #[serde(default)]
    pub compute_launches: Option<u32>,
    /// Collectives in the pass.
    pub collectives: u32,
    /// cuda: whether the pass was enqueued behind a gate the host opened
    /// after enqueuing `gate_lookahead_ops` operations, so that the device
    /// ran them back to back as the source's device did.
    pub gated: Option<bool>,
    /// cuda: operations enqueued before the gate opened (at most 192, of
    /// them at most 32 collectives; all of a shorter pass).
    pub gate_lookahead_ops: Option<u32>,
    /// cuda: calibration of the device work standing in for compute.
    pub spin: Option<SpinCalibration>,
    /// cuda: the collective-to-compute transition measured in the warm-up
    /// pass and taken off each gap of the timed pass. Absent on cpu, in
    /// formats 1 to 3, with `--no-warmup` (the gaps then carry it) and where
    /// no two consecutive collectives of a stream have compute between them.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gap_transition: Option<GapTransition>,
    /// cuda: device time from the gate opening to the end of the last
    /// stream's work (CUDA events). Absent on cpu.
    pub pass_device_ns: Option<u64>,
    /// Host time of the pass: cuda from the gate's opening to every stream's
    /// completion seen by the host; cpu from the first collective's pacing
    /// start to the last collective's return.
    pub pass_host_ns: u64,
    /// The same work on the source's device timeline: the first operation's
    /// recorded start to the last one's recorded end (this rank's trace
    /// clock). Absent where a time is missing.
    pub trace_span_ns: Option<u64>,
}

fn stands_for_compute() -> String {
    "compute".into()
}

/// What a device gap between two collectives costs beyond the compute in
/// it: the previous collective's end event, the compute's launch after a
/// collective kernel rather than after a spin (which the spin's own
/// calibration does not see), the next collective's start event.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct GapTransition {
    /// Median over the warm-up pass's gaps (consecutive collectives of one
    /// stream with compute between them and no cross-stream wait) of the
    /// device gap less what its spins take back to back (calibrated, each
    /// at least the launch floor), ns; negative where the gaps came out short.
    pub warmup_median_ns: f64,
    /// Gaps it is the median of.
    pub gaps: u32,
    /// Taken off the compute of every gap between consecutive collectives of
    /// one stream in the timed pass (the median where positive, else 0), no
    /// launch going below the floor: a gap too short to lose it all stays long.
    pub applied_ns: u64,
}

/// How a spinning kernel's duration was matched to recorded durations.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct SpinCalibration {
    /// Thread blocks per launch (one per multiprocessor).
    pub blocks: u32,
    /// Threads per block.
    pub threads_per_block: u32,
    /// Device time per launch of a zero-length spin, back to back on one
    /// stream (the launch's own cost): the shortest kernel it can stand for.
    pub floor_ns: f64,
    /// Device time a spin of `d` ns takes beyond `d`, back to back (median
    /// over the calibration lengths); subtracted from every request.
    pub excess_ns: f64,
    /// Check after correction: recorded length, spin requested, device time
    /// per launch achieved (back to back, 32 launches).
    pub points: Vec<SpinPoint>,
}

/// One calibration check.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct SpinPoint {
    /// Duration to stand for.
    pub recorded_ns: u64,
    /// Spin requested after the correction.
    pub requested_ns: u64,
    /// Device time per launch achieved.
    pub achieved_ns: f64,
}

/// What a replay produced on one rank.
#[derive(Clone, Debug, PartialEq)]
pub struct ReplayOutput {
    /// One record per collective of the timed pass.
    pub records: Vec<ExecRecord>,
    /// The workload pace's pass as a whole.
    pub workload: Option<WorkloadReport>,
    /// The point-to-point operations of an MPI capture (`mpi.p2p`), where replayed.
    pub p2p: Option<P2pReport>,
    /// The collectives an MPI capture posted nonblocking, where any were replayed so.
    pub nonblocking: Option<NonblockingReport>,
}

/// One rank's nonblocking collectives (`MPI_Iallreduce`, ...) in the timed
/// pass: each posted with its `MPI_I*` call at its post and completed with
/// `MPI_Waitall` at the call that completed it in the capture, in recorded
/// call order with the point-to-point program.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct NonblockingReport {
    /// Collectives posted nonblocking.
    pub posted: u64,
    /// Waits issued (one per completing call of the capture).
    pub waits: u64,
    /// Posted ones the capture never saw complete: waited for at the end of the pass.
    pub never_completed: u64,
}

/// Why NCCL cannot run `c` (the cuda backend), or `None`: NCCL has no
/// gather, scatter, scan or exclusive scan, no all-gather or reduce-scatter
/// with per-member counts, and reduces with sum, prod, max, min and avg only.
pub fn nccl_cannot_run(c: &TraceCollective) -> Option<String> {
    match c.kind {
        k if k.row().replay_only => Some(format!("{} has no NCCL operation", k.label())),
        CollectiveKind::AllGather | CollectiveKind::ReduceScatter
            if c.in_split_elems.is_some() || c.out_split_elems.is_some() =>
        {
            Some(format!("{} with per-member counts ({}) has no NCCL operation", c.kind.label(), c.source_name))
        }
        _ => {
            c.op.filter(|o| !o.in_nccl())
                .map(|o| format!("reduction {} has no NCCL operation (sum, prod, max, min, avg)", o.name()))
        }
    }
}

/// Why the phases (`rank --trace`, campaigns, `canary verify`) cannot run
/// `c` as recorded, or `None`: they run the kinds a shard records (not
/// gather, scatter, scan or exscan), all-gathers and reduce-scatters of
/// equal blocks (not their v-variants), and the reductions sum, prod, max
/// and min (a recorded one runs as a trace operation; the shard names the
/// trace that holds it). With `allreduce_only` only the all-reduces run, as
/// the world all-reduce, which sums: another reduction is refused.
pub fn phases_cannot_run(c: &TraceCollective, allreduce_only: bool) -> Option<String> {
    use CollectiveKind as K;
    if allreduce_only && c.kind != K::AllReduce {
        return None;
    }
    let phases = "the phases (rank --trace, campaigns, canary verify) cannot run it";
    match c.kind {
        k if k.row().replay_only => Some(format!("{} is not a kind a shard records: {phases}", k.label())),
        K::AllGather | K::ReduceScatter if c.in_split_elems.is_some() || c.out_split_elems.is_some() => {
            Some(format!("{} with per-member counts (a v-variant): {phases}", c.kind.label()))
        }
        _ if allreduce_only => c.op.map(|o| {
            format!(
                "all-reduce with reduction {}: with --trace-allreduce-only the phases run world all-reduces as sums",
                o.name()
            )
        }),
        _ => c
            .op
            .filter(|&o| replay_op(o).is_none())
            .map(|o| format!("{} with reduction {}: {phases} (sum, prod, max and min run)", c.kind.label(), o.name())),
    }
}

/// The collectives of `t` whose members disagree on what a shard records of
/// them (kind, input bytes, dtype, root: an all-to-all-v whose members send
/// different totals), per (rank, index), each with why: the join refuses a
/// run whose members disagree, so the phases cannot run them. Matched across
/// ranks as the phases number them: by group and position among the rank's
/// calls on it (not by the sequence numbers the file carries); point-to-point
/// kinds pair up, and are not here.
pub fn uneven_members(t: &CommTrace) -> BTreeMap<(u32, usize), String> {
    type Seen = (u32, usize, (CollectiveKind, u64, TraceDtype, Option<u32>));
    let mut by: BTreeMap<(&str, u64), Vec<Seen>> = BTreeMap::new();
    for r in &t.ranks {
        let mut next: BTreeMap<&str, u64> = BTreeMap::new();
        for (i, c) in r.collectives.iter().enumerate().filter(|(_, c)| !c.kind.is_p2p()) {
            let n = next.entry(c.group.as_str()).or_insert(0);
            let what = (c.kind, c.in_elems.saturating_mul(c.dtype.size_bytes()), c.dtype, c.root);
            by.entry((c.group.as_str(), *n)).or_default().push((r.rank, i, what));
            *n += 1;
        }
    }
    let mut out = BTreeMap::new();
    let say =
        |(k, b, d, _): (CollectiveKind, u64, TraceDtype, Option<u32>)| format!("{} of {b} bytes of {d}", k.name());
    for ((group, n), v) in by {
        let (ra, _, a) = v[0];
        if let Some(&(rb, _, b)) = v.iter().find(|x| x.2 != a) {
            let why = format!(
                "its members disagree on it (call {n} on group {group:?}: rank {ra} has {}, rank {rb} {}, e.g. an \
                    all-to-all-v whose members send different totals), and a shard records one size per collective: \
                    the phases cannot run it",
                say(a),
                say(b)
            );
            out.extend(v.iter().map(|&(r, i, _)| ((r, i), why.clone())));
        }
    }
    out
}

/// The replay's reduction of a recorded one: sum, prod, max and min run as
/// themselves; the logical and bitwise ones have none (`None`).
pub fn replay_op(o: super::TraceReduceOp) -> Option<ReduceOp> {
    use super::TraceReduceOp as T;
    match o {
        T::Sum => Some(ReduceOp::Sum),
        T::Prod => Some(ReduceOp::Prod),
        T::Max => Some(ReduceOp::Max),
        T::Min => Some(ReduceOp::Min),
        T::Land | T::Lor | T::Lxor | T::Band | T::Bor | T::Bxor => None,
    }
}

/// How `replay-trace` replays a trace: its settings, as its runner and the cuda workload pass take them.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ReplayOptions {
    /// Reduction of the reducing kinds (`--op`; `None`: sum, the traces not recording it).
    pub op: Option<ReduceOp>,
    /// How collectives are paced (`--pace`).
    pub pace: Pace,
    /// Validate every collective's result (`--check`).
    pub check: bool,
    /// One untimed pass of the whole trace before the timed one (unless `--no-warmup`).
    pub warmup: bool,
    /// Negative control: the rank whose every result is corrupted before its check (`--corrupt-rank`).
    pub corrupt_rank: Option<u32>,
}

/// The reduction a replayed collective runs, and where it came from: the
/// recorded one (`trace`: an MPI capture's), else `op` (`--op`), else a sum
/// (`default`; docs/METHODS.md, "Replay conventions").
pub fn reduction(c: &TraceCollective, op: Option<ReduceOp>) -> (ReduceOp, &'static str) {
    match (c.op.and_then(replay_op), op) {
        (Some(o), _) => (o, "trace"),
        (None, Some(o)) => (o, "--op"),
        (None, None) => (ReduceOp::Sum, "default"),
    }
}

/// Refuse (`UNSUPPORTED_OPERATION`, before launch) the first collective of
/// any rank of `trace` that `cannot` says the `backend` cannot run; every
/// rank checks the whole trace, so all refuse alike and none waits in a collective.
pub fn refuse_unsupported(
    trace: &super::CommTrace,
    backend: &str,
    cannot: &dyn Fn(&TraceCollective) -> Option<String>,
) -> Result<()> {
    for r in &trace.ranks {
        for (i, c) in r.collectives.iter().enumerate() {
            if let Some(why) = cannot(c) {
                crate::refuse!(
                    Code::UnsupportedOperation,
                    "rank {}, collective {i} ({} on group {:?}): {why}: the {backend} backend cannot replay it",
                    r.rank,
                    c.source_name,
                    c.group
                );
            }
        }
    }
    Ok(())
}

/// One rank's replay of its point-to-point operations (`mpi.p2p`) in the timed pass.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct P2pReport {
    /// Operations replayed (a `Sendrecv` is two).
    pub operations: u64,
    /// Sends among them.
    pub sends: u64,
    /// Receives among them.
    pub receives: u64,
    /// Nonblocking operations among them.
    pub nonblocking: u64,
    /// Waits issued (one per completing call of the capture, `MPI_Waitall` on its operations).
    pub waits: u64,
    /// Nonblocking operations the capture never saw complete: waited for at the end of the pass.
    pub never_completed: u64,
    /// Bytes sent.
    pub bytes_sent: u64,
    /// Receives whose length and bytes were checked against their matching send (`--check`); absent without it.
    pub receives_checked: Option<u64>,
    #[doc = concat!(
        "Receives not checked: a wildcard whose match the capture did not read (Fortran callers), ",
        "and every later receive of the rank."
    )]
    pub receives_unmatched: u64,
    /// Nonblocking receives that completed with an empty status (cancelled,
    /// or without a message): counted among the receives, not replayed.
    #[serde(default)]
    pub receives_empty: u64,
    /// Host time inside the point-to-point calls, ns.
    pub host_ns: u64,
}

/// Value rank `r` contributes at element `i` of a reducing collective: small
/// integers, exact in bf16 and f16, so that a check compares exactly.
pub fn contribution(r: u32, i: usize) -> f32 {
    (r + 1) as f32 + (i % 3) as f32
}

/// Byte rank `src` sends to rank `dst` at byte `i` of a data-movement collective.
pub fn payload(src: u32, dst: u32, i: usize) -> u8 {
    ((src as usize * 131 + dst as usize * 17 + i) % 251) as u8
}

/// Wrong elements found by a check, and the first of them described.
#[derive(Default)]
pub(crate) struct Tally {
    /// How many.
    pub wrong: u64,
    /// The first, described.
    pub first: Option<String>,
}

impl Tally {
    /// Count one more; describe it if it is the first.
    pub fn add(&mut self, describe: impl FnOnce() -> String) {
        self.wrong += 1;
        if self.first.is_none() {
            self.first = Some(describe());
        }
    }
}

/// Byte counts and offsets of an all-to-all(v), per member of the group (in
/// group order), from the recorded split sizes, else an even split.
pub(crate) struct AllToAllLayout {
    /// Bytes sent to each member.
    pub send_bytes: Vec<usize>,
    /// Bytes received from each member.
    pub recv_bytes: Vec<usize>,
    /// Offset of each member's block in the send buffer.
    pub send_at: Vec<usize>,
    /// Offset of each member's block in the receive buffer.
    pub recv_at: Vec<usize>,
}

impl AllToAllLayout {
    /// The layout of `c` in a group of `n`.
    pub fn of(c: &TraceCollective, n: usize) -> Result<Self> {
        let esize = c.dtype.size_bytes() as usize;
        let ins = c.in_split_elems.clone().unwrap_or_else(|| vec![c.in_elems / n as u64; n]);
        let outs = c.out_split_elems.clone().unwrap_or_else(|| vec![c.out_elems / n as u64; n]);
        let to_bytes = |v: &[u64]| {
            v.iter()
                .map(|&e| usize::try_from(e)?.checked_mul(esize).context("message size overflows"))
                .collect::<Result<Vec<usize>>>()
        };
        let (send_bytes, recv_bytes) = (to_bytes(&ins)?, to_bytes(&outs)?);
        let offsets = |v: &[usize]| {
            v.iter().scan(0usize, |acc, &x| Some(std::mem::replace(acc, *acc + x))).collect::<Vec<usize>>()
        };
        Ok(Self { send_at: offsets(&send_bytes), recv_at: offsets(&recv_bytes), send_bytes, recv_bytes })
    }

    /// What `rank` sends: [`payload`]`(rank, member, i)` in each member's block.
    pub fn send_buffer(&self, rank: u32, members: &[u32]) -> Vec<u8> {
        let mut buf = vec![0u8; self.send_bytes.iter().sum()];
        for (j, &dst) in members.iter().enumerate() {
            for i in 0..self.send_bytes[j] {
                buf[self.send_at[j] + i] = payload(rank, dst, i);
            }
        }
        buf
    }

    /// Every byte `rank` received wrong, in order: (byte within its block, source member).
    pub fn wrong<'a>(
        &'a self,
        out: &'a [u8],
        rank: u32,
        members: &'a [u32],
    ) -> impl Iterator<Item = (usize, u32)> + 'a {
        members.iter().enumerate().flat_map(move |(j, &src)| {
            (0..self.recv_bytes[j])
                .filter(move |&i| out[self.recv_at[j] + i] != payload(src, rank, i))
                .map(move |i| (i, src))
        })
    }
}

/// What element `i` of a reduction over `members`' contributions must be, in `dtype`.
pub(crate) fn expected_reduction(dtype: TraceDtype, members: &[u32], i: usize, op: ReduceOp) -> f32 {
    let vals = members.iter().map(|&r| round_to(dtype, contribution(r, i)));
    let want = match op {
        ReduceOp::Sum => vals.sum::<f32>(),
        ReduceOp::Avg => vals.sum::<f32>() / members.len() as f32,
        ReduceOp::Max => vals.fold(f32::MIN, f32::max),
        ReduceOp::Min => vals.fold(f32::MAX, f32::min),
        ReduceOp::Prod => vals.product::<f32>(),
    };
    round_to(dtype, want)
}

/// Round an f32 to the nearest value of `dtype` (identity for f32).
pub(crate) fn round_to(dtype: TraceDtype, x: f32) -> f32 {
    match dtype {
        TraceDtype::Bf16 => half::bf16::from_f32(x).to_f32(),
        TraceDtype::F16 => half::f16::from_f32(x).to_f32(),
        _ => x,
    }
}

/// Target gap before each of this rank's collectives: from the previous
/// collective's end to this one's start (device interval where recorded, else
/// the host operator); the first is 0. `None` when the trace has no times.
pub fn gaps_ns(colls: &[TraceCollective]) -> Option<Vec<u64>> {
    let span = |c: &TraceCollective| -> Option<(u64, u64)> {
        match &c.device {
            Some(d) => Some((d.start_ns, d.end_ns)),
            None => Some((c.host_start_ns?, c.host_start_ns? + c.host_duration_ns?)),
        }
    };
    let spans: Vec<(u64, u64)> = colls.iter().map(span).collect::<Option<_>>()?;
    Some(spans.iter().enumerate().map(|(i, s)| if i == 0 { 0 } else { s.0.saturating_sub(spans[i - 1].1) }).collect())
}

/// [`gaps_ns`] for a replay paced by them, refused (naming the way out)
/// where the trace records no times.
pub fn paced_gaps_ns(colls: &[TraceCollective]) -> Result<Vec<u64>> {
    gaps_ns(colls).context(
        "this trace records no times (an execution trace): pace with --pace none, or import the \
        profiler (Kineto) trace",
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn patterns_are_exact_in_half_types() {
        for r in 0..64 {
            for i in 0..3 {
                let v = contribution(r, i);
                assert_eq!(round_to(TraceDtype::Bf16, v), v);
                assert_eq!(round_to(TraceDtype::F16, v), v);
            }
        }
    }
}
