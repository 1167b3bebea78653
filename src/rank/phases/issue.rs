//! The runner's primitives, shared by every phase: calibrate a compute unit,
//! run a timed compute interval, and issue one collective (a world all-reduce,
//! or an imported trace's collective on its group) with whatever runs between
//! issue and wait, then validate and record it. Applies the negative controls
//! (`--inject-delay`, `--inject-repeat`, `--fault`) at each arrival; a wrong
//! result fails the phase at once, except in the isolated phase (recorded).
use super::{Between, EventExtra, Fault, HostTimes, MarkTarget, Position, Recorded, Runner, Work};
use crate::backend::{Backend, Call, Checked, Compute, Timing};
use crate::core::collective::{self, Lands};
use crate::core::workload::{Phase, ReduceOp};
use crate::evidence::commtrace::exec;
use crate::evidence::shard::{CheckRecord, CollectiveKind, ComputeEvent, ComputeKind, Dtype};
use crate::evidence::trace::TraceOp;
use anyhow::{bail, Context, Result};

impl<B: Backend> Runner<'_, B> {
    /// Duration of one unit of `kind`, after warm-up.
    pub(super) fn calibrate(&mut self, kind: ComputeKind) -> Result<u64> {
        // Each sample times a batch of 1 and a batch of 1 + BATCH units, each
        // fenced by device synchronization (so that an asynchronous backend
        // is timed on execution, not on enqueue), and takes the difference
        // over BATCH: the fence's fixed cost (tens of µs on a GPU, more than
        // a small GEMM) cancels. The median of 9 samples after 2 warm-ups: on
        // ranks that share cores that is the unit's typical wall time there,
        // which is what a gap is filled with. A preempted batch of 1 can
        // outlast its batch of 9, and where most samples are such the median
        // difference collapses toward 1 ns, turning each gap into millions of
        // units (a CI job hung so); the unit is therefore never below an
        // eighth of the batch of 9's median time per unit (which includes
        // the fence, so it binds only on a collapse).
        const BATCH: u32 = 8;
        let (mut diffs, mut manys) = (Vec::with_capacity(9), Vec::with_capacity(9));
        self.backend.synchronize()?;
        for i in 0..11 {
            let mut timed = |units: u32| -> Result<u64> {
                let t0 = self.clock.now_ns();
                self.compute(Work::Unit(kind, units))?;
                self.backend.synchronize()?;
                Ok(self.clock.now_ns().saturating_sub(t0))
            };
            let one = timed(1)?;
            let many = timed(1 + BATCH)?;
            if i >= 2 {
                diffs.push((many.saturating_sub(one) / BATCH as u64).max(1));
                manys.push(many);
            }
        }
        // calibration work is not part of the pass
        let _ = self.backend.finish_pass()?;
        Ok(unit_from_samples(&mut diffs, &mut manys, BATCH))
    }

    pub(super) fn compute(&mut self, work: Work) -> Result<()> {
        match work {
            Work::Unit(ComputeKind::Gemm, units) => {
                Ok(self.backend.compute(Compute::Gemm { shape: 0, layer: 0, units })?)
            }
            Work::Unit(ComputeKind::Membound, units) => Ok(self.backend.compute(Compute::Membound(units))?),
            Work::Unit(ComputeKind::HostDelay, _) => bail!("internal: host delay is not a compute kernel"),
            Work::Layer(gemms, layer) => Ok(gemms
                .iter()
                .try_for_each(|&shape| self.backend.compute(Compute::Gemm { shape, layer, units: 1 }))?),
        }
    }

    pub(super) fn timed_compute(
        &mut self,
        phase: Phase,
        work: Work,
        token: Option<u32>,
        layer: Option<u32>,
    ) -> Result<()> {
        let (kind, units) = match work {
            Work::Unit(kind, units) => (kind, units),
            Work::Layer(gemms, _) => (ComputeKind::Gemm, gemms.len() as u32),
        };
        if units == 0 {
            return Ok(());
        }
        let m0 = self.backend.mark()?;
        let start_ns = self.clock.now_ns();
        self.compute(work)?;
        let end_ns = self.clock.now_ns();
        let m1 = self.backend.mark()?;
        let idx = self.body.compute.len();
        self.body.compute.push(ComputeEvent { phase, kind, token, layer, units, start_ns, end_ns });
        if let (Some(a), Some(b)) = (m0, m1) {
            self.pending_marks.push((MarkTarget::ComputeStart(idx), a));
            self.pending_marks.push((MarkTarget::ComputeEnd(idx), b));
        }
        Ok(())
    }

    /// Issue, do `between`, wait, validate, record.
    pub(super) fn collective(
        &mut self,
        phase: Phase,
        bytes: u64,
        dtype: Dtype,
        pos: Position,
        between: Between,
    ) -> Result<usize> {
        let (seq, injected) = self.next_arrival();
        let host_issue_ns = self.clock.now_ns();
        let call = Call::World { kind: CollectiveKind::AllReduce, bytes, dtype };
        for _ in 1..self.repeat {
            self.backend.enqueue(call, Timing::Untimed)?;
        }
        self.backend.enqueue(call, Timing::Async)?;
        let host_return_ns = self.clock.now_ns();
        self.between(phase, between)?;
        let wait_start_ns = self.clock.now_ns();
        let device = self.backend.wait()?;
        let wait_end_ns = self.clock.now_ns();
        let checked = !pos.warmup && self.checked_in_phase < self.spec.check;
        if checked {
            self.checked_in_phase += 1;
            self.check(phase, seq, bytes, dtype)?;
        }
        let r = Recorded {
            phase,
            kind: CollectiveKind::AllReduce,
            group: 0,
            seq,
            bytes,
            dtype: dtype.into(),
            root: None,
            peer: None,
        };
        let t = HostTimes { issue_ns: host_issue_ns, return_ns: host_return_ns, wait_start_ns, wait_end_ns };
        Ok(self.push_event(r, pos, t, EventExtra { timed: true, device, injected_ns: injected, checked }))
    }

    /// Run what lies between a collective's issue and its wait.
    fn between(&mut self, phase: Phase, between: Between) -> Result<()> {
        match between {
            Between::Nothing => {}
            Between::Compute(work, token, layer) => self.timed_compute(phase, work, token, layer)?,
            Between::HostSpin(ns, token, layer) => {
                let s = self.clock.now_ns();
                self.clock.spin_until(s + ns);
                let e = self.clock.now_ns();
                self.body.compute.push(ComputeEvent {
                    phase,
                    kind: ComputeKind::HostDelay,
                    token,
                    layer,
                    units: 1,
                    start_ns: s,
                    end_ns: e,
                });
            }
        }
        Ok(())
    }

    /// An imported trace's collective other than a world all-reduce: `before`
    /// (the work `between` would place inside it: the backend runs it to
    /// completion on the host, so overlap's compute and host-delay's spin run
    /// before it, as fill's does), then the collective on its group through
    /// the backend's trace executor, validated where `--check` still asks.
    /// The negative controls that act on arrivals (`--inject-delay`, `--fault
    /// hang`) act on group 0's collectives only; `--fault wrong-sum` spoils
    /// a checked result here too.
    pub(super) fn trace_op(
        &mut self,
        phase: Phase,
        op: TraceOp,
        (bytes, dtype): (u64, collective::TraceDtype),
        pos: Position,
        before: Between,
    ) -> Result<usize> {
        self.between(phase, before)?;
        let (kind, rank) = (op.kind, self.rank);
        // a point-to-point pair is keyed (sender, receiver)
        let pair = match (kind.row().lands, op.peer) {
            (Lands::AtPeer, Some(p)) => Some((rank, p)),
            (Lands::Here, Some(p)) => Some((p, rank)),
            _ if kind.is_p2p() => bail!("internal: {} without a peer", kind.name()),
            _ => None,
        };
        let counter = self.op_seq.entry((op.group, pair)).or_insert(0);
        let seq = *counter;
        *counter += 1;
        // a result lands on every member, except a send's (its receiver checks), a barrier's and a reduce's off the
        // root
        let has_result = match kind.row().lands {
            Lands::AtPeer | Lands::Nowhere => false,
            Lands::OnRoot => op.root == Some(rank),
            Lands::Everywhere | Lands::Here => true,
        };
        let checked = has_result && !pos.warmup && self.checked_in_phase < self.spec.check;
        let corrupt = self.fault == Some(Fault::WrongSum { rank });
        let c = &self
            .file_trace
            .as_ref()
            .and_then(|t| t.ops.as_ref())
            .context("internal: a trace collective without the trace")?
            .colls[op.index];
        // the recorded reduction (an MPI capture's max, min, prod; the trace the shard names holds it), else a sum
        let reduce = c.op.and_then(exec::replay_op).unwrap_or(ReduceOp::Sum);
        let host_issue_ns = self.clock.now_ns();
        self.backend.enqueue(Call::Trace { index: op.index, c, op: reduce, check: checked }, Timing::HostWait)?;
        let wait_end_ns = self.clock.now_ns();
        // the check reads the result back after the timed call, never inside it
        let found = if checked {
            Some(self.backend.check(Checked::Trace { index: op.index, c, op: reduce }, corrupt)?)
        } else {
            None
        };
        if checked {
            self.checked_in_phase += 1;
            if let Some(why) = found.and_then(|f| f.first_wrong) {
                bail!(
                    "result check failed on rank {rank}, phase {phase}, group {} seq {seq} ({} of {bytes} bytes): \
                    {why}",
                    op.group,
                    kind.name()
                );
            }
            self.checks.push(CheckRecord { phase, group: op.group, seq, bytes, wrong_elements: 0, first_wrong: None });
        }
        let r = Recorded { phase, kind, group: op.group, seq, bytes, dtype, root: op.root, peer: op.peer };
        Ok(self.push_event(
            r,
            pos,
            HostTimes::blocking(host_issue_ns, wait_end_ns),
            EventExtra { checked, ..Default::default() },
        ))
    }

    /// The next collective's sequence number, after the negative controls
    /// that act before an arrival (a hang fault, an injected delay); returns
    /// the sequence number and the delay achieved, if any.
    pub(super) fn next_arrival(&mut self) -> (u64, Option<u64>) {
        let seq = self.seq;
        self.seq += 1;
        if self.fault == Some(Fault::Hang { rank: self.rank, seq }) {
            eprintln!("commcanary rank {}: fault injection: hanging before group 0 seq {seq}", self.rank);
            std::thread::sleep(std::time::Duration::from_secs(24 * 3600));
        }
        (seq, self.inject_delay(seq))
    }

    /// The negative control's delay before collective `seq`, if any; returns
    /// the delay actually achieved. A delay shorter than 1 ms spins where the
    /// node has a core for every local rank (a sleep of 20 µs lasts ~80 µs
    /// under Linux timer slack, so a sleeping control would be four times the
    /// declared size); elsewhere, and for longer delays, it sleeps, since a
    /// spinning rank on an oversubscribed node would delay a co-scheduled rank
    /// too and confound the control. Sleep only overshoots, and the achieved
    /// delay is what is recorded.
    fn inject_delay(&self, seq: u64) -> Option<u64> {
        let d = self.delay.and_then(|d| d.delay_for(self.rank, seq))?;
        let t = self.clock.now_ns();
        if d < 1_000_000 && self.spin_short_delays {
            self.clock.spin_until(t + d);
        } else {
            std::thread::sleep(std::time::Duration::from_nanos(d));
        }
        Some(self.clock.now_ns() - t)
    }

    /// Validate the last all-reduce of `bytes` and record what was found. A
    /// wrong result fails the job at once in the workload phases; the isolated
    /// phase records it (nccl-tests' `#wrong`) and goes on, and the rank
    /// fails after its shard is written (see `rank`), so the evidence of the
    /// fault is kept and no wrong run is ever ranked.
    pub(super) fn check(&mut self, phase: Phase, seq: u64, bytes: u64, dtype: Dtype) -> Result<()> {
        let corrupt = self.fault == Some(Fault::WrongSum { rank: self.rank });
        let outcome = self.backend.check(Checked::Last { kind: CollectiveKind::AllReduce, bytes, dtype }, corrupt)?;
        self.checks.push(CheckRecord {
            phase,
            group: 0,
            seq,
            bytes,
            wrong_elements: outcome.wrong_elements,
            first_wrong: outcome.first_wrong.clone(),
        });
        if let Some(why) = outcome.first_wrong {
            if phase != Phase::Isolated {
                bail!(
                    "result check failed on rank {}, phase {phase}, group 0 seq {seq} ({bytes} bytes of {}): {why}",
                    self.rank,
                    dtype.name()
                );
            }
        }
        Ok(())
    }
}

/// One unit's time from per-sample differences over `batch` (`diffs`) and
/// the batch of 1 + `batch` units' times (`manys`): the median difference,
/// never below an eighth of the larger batch's median time per unit; never 0.
fn unit_from_samples(diffs: &mut [u64], manys: &mut [u64], batch: u32) -> u64 {
    let median = |v: &mut [u64]| {
        v.sort_unstable();
        v.get(v.len() / 2).copied().unwrap_or(0)
    };
    let floor = median(manys) / u64::from(batch + 1) / 8;
    median(diffs).max(floor).max(1)
}

#[cfg(test)]
mod tests {
    use super::unit_from_samples;

    #[test]
    fn the_unit_is_the_median_difference_and_never_collapses() {
        // fence 40 µs, unit 10 µs: 1 unit 50 µs, 9 units 130 µs; one noisy sample
        let (mut d, mut m) = (vec![10_000, 10_000, 9_000, 11_000, 10_000, 1, 10_000, 10_500, 9_500], vec![130_000; 9]);
        assert_eq!(unit_from_samples(&mut d, &mut m, 8), 10_000);
        // most batches of 1 preempted past their batch of 9: the differences collapse to 1 ns,
        // the unit stays within 8x of the batch of 9's time per unit
        let (mut d, mut m) = (vec![1, 1, 1, 1, 1, 10_000, 10_000, 10_000, 10_000], vec![130_000; 9]);
        assert_eq!(unit_from_samples(&mut d, &mut m, 8), 130_000 / 9 / 8);
        assert_eq!(unit_from_samples(&mut [], &mut [], 8), 1);
    }
}
