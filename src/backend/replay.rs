//! The replay driver both backends' trace executors share: consumes a trace,
//! the [`ReplayOptions`] and a backend's [`TraceRunner`]; produces this
//! rank's [`ExecRecord`]s of the timed pass (pacing wait, reduction choice,
//! optional warm-up pass first) and that pass's host time. Refuses pacing by
//! the gaps of a trace without times. A backend's `replay` calls [`replay_with`].
use crate::core::collective;
use crate::core::refusal::Code;
use crate::core::workload::ReduceOp;
use crate::evidence::commtrace::exec::{paced_gaps_ns, replay_op, ExecRecord, Pace};
use crate::evidence::commtrace::workload_plan::WorkloadPlan;
use crate::evidence::commtrace::{CommTrace, TraceCollective};
use anyhow::{bail, Context, Result};
use mpi::topology::{Communicator, SimpleCommunicator};
use mpi::traits::CommunicatorCollectives;
use std::time::Instant;

/// How a trace is replayed: the settings every backend's `replay` takes.
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

/// A backend's executor of prepared trace collectives. As on every backend,
/// every buffer is allocated and filled before the replay, a checked call's
/// result is cleared before its call (the warm-up pass's cannot pass for it)
/// and the checks run after the timed pass, so that only the pacing wait lies
/// between two collectives.
pub trait TraceRunner {
    /// Run collective `i` (blocking): `before_issue` (the pacing wait) just
    /// before the call. Returns (host time, input bytes, completion).
    fn run(
        &mut self,
        i: usize,
        c: &TraceCollective,
        op: ReduceOp,
        check: bool,
        before_issue: &mut dyn FnMut(),
    ) -> Result<(u64, u64, Instant)>;
    /// Between the warm-up and the timed pass: start the runner's own
    /// program over (the cpu backend's point-to-point operations).
    fn between_passes(&mut self) -> Result<()> {
        Ok(())
    }
    /// After a pass's last collective, before the ranks meet: what of the
    /// pass is left (the cpu backend's point-to-point operations after it);
    /// returns when that ended, if there was any.
    fn end_of_pass(&mut self) -> Result<Option<Instant>> {
        Ok(None)
    }
}

/// This rank's collectives of `trace` in order through `run` (a backend's
/// executor), with the pacing, reduction choice and records shared by every
/// backend (`plan`: the workload pace's, for it alone); also returns the
/// timed pass's host time. With `warmup`, one untimed pass of the whole trace, back to back
/// and unchecked, comes first: NCCL and MPI set up a connection or an
/// algorithm's resources on first use (the first GPU replay spent 150-200 ms
/// in the first all-gather and all-to-all), which is not what the trace
/// recorded in its steady state (nccl-tests' warm-up iterations, `-w`, serve
/// the same purpose). Pacing (`--pace gaps`) waits, before each collective,
/// the trace's gap from the previous collective's completion (device interval
/// where recorded, else host operator) by spinning on the monotonic clock; an
/// execution trace has no times and is refused for pacing. The reduction is
/// the recorded one (an MPI capture's; logical and bitwise ones are refused
/// before the first collective), else `--op`, else sum, and each record names
/// which one applied and its source.
pub fn replay_with(
    world: &SimpleCommunicator,
    trace: &CommTrace,
    o: &ReplayOptions,
    plan: Option<&WorkloadPlan>,
    runner: &mut dyn TraceRunner,
) -> Result<(Vec<ExecRecord>, u64)> {
    let ReplayOptions { op, pace, check, warmup, .. } = *o;
    let rank = world.rank() as u32;
    let mine = trace.ranks.iter().find(|r| r.rank == rank).with_context(|| format!("the trace has no rank {rank}"))?;
    if (pace == Pace::Workload) != plan.is_some() {
        bail!("internal: the workload pace, and only it, comes with its plan");
    }
    let compute: Option<Vec<(u32, u64)>> =
        plan.as_ref().map(|p| (0..mine.collectives.len()).map(|i| p.compute_before_ns(i)).collect());
    let gaps = match pace {
        Pace::None => None,
        Pace::Gaps => Some(paced_gaps_ns(&mine.collectives)?),
        // one thread: the compute before a collective is spun in full before it
        Pace::Workload => compute.as_ref().map(|v| v.iter().map(|&(_, ns)| ns).collect()),
        Pace::DeviceGaps => {
            bail!("internal: the device-gaps pace runs as the cuda workload pass, not through replay_with")
        }
    };
    // The traces do not record the reduction, and NCCL's kernel names do not
    // show it: since NCCL 2.19 every reduction kernel is built as the `Sum`
    // specialisation and dispatches the operation inside (NCCL's
    // src/device/generate.py, `best_kernel`).
    // An MPI capture records each reduction (`op`, absent for sums): that one runs.
    for (i, c) in mine.collectives.iter().enumerate() {
        if let Some(o) = c.op.filter(|&o| replay_op(o).is_none()) {
            crate::refuse!(
                Code::UnsupportedOperation,
                "rank {rank}, collective {i} ({} on group {:?}): reduction {} is not replayed (sum, prod, max and min \
                    are)",
                c.source_name,
                c.group,
                o.name()
            );
        }
    }
    let choose = |c: &TraceCollective| match (c.op.and_then(replay_op), op) {
        (Some(o), _) => (o, "trace"),
        (None, Some(o)) => (o, "--op"),
        (None, None) => (ReduceOp::Sum, "default"),
    };
    if warmup {
        world.barrier();
        for (i, c) in mine.collectives.iter().enumerate() {
            runner
                .run(i, c, choose(c).0, false, &mut || {})
                .with_context(|| format!("rank {rank}, warm-up pass, collective {i}"))?;
        }
        runner.end_of_pass().with_context(|| format!("rank {rank}, warm-up pass"))?;
        runner.between_passes().with_context(|| format!("rank {rank}, clearing the warm-up pass's results"))?;
    }
    world.barrier();
    let mut out = Vec::with_capacity(mine.collectives.len());
    let pass_start = Instant::now();
    let mut prev_end = pass_start;
    for (i, c) in mine.collectives.iter().enumerate() {
        let (use_op, source) = choose(c);
        let target = gaps.as_ref().map(|g| g[i]);
        let mut actual_gap_ns = 0;
        let mut wait = || {
            if let Some(t) = target {
                while (prev_end.elapsed().as_nanos() as u64) < t {
                    std::hint::spin_loop();
                }
            }
            actual_gap_ns = prev_end.elapsed().as_nanos() as u64;
        };
        let (elapsed_ns, wire_bytes, done) =
            runner.run(i, c, use_op, check, &mut wait).with_context(|| format!("rank {rank}, collective {i}"))?;
        prev_end = done;
        let mut rec = ExecRecord {
            target_gap_ns: target,
            actual_gap_ns,
            elapsed_ns,
            compute_ops: compute.as_ref().map(|v| v[i].0),
            compute_recorded_ns: compute.as_ref().map(|v| v[i].1),
            ..ExecRecord::untimed(i, c, rank, (use_op, source), check, wire_bytes)
        };
        // an exclusive scan leaves its first member's result undefined: nothing is checked there
        if c.kind == collective::CollectiveKind::Exscan
            && trace.group(&c.group).and_then(|g| g.members.first()) == Some(&rank)
        {
            rec.checked = false;
        }
        out.push(rec);
    }
    if let Some(end) = runner.end_of_pass().with_context(|| format!("rank {rank}, timed pass"))? {
        prev_end = prev_end.max(end);
    }
    let pass_ns = (prev_end - pass_start).as_nanos() as u64;
    world.barrier();
    Ok((out, pass_ns))
}
