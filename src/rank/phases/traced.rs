//! The phases that walk a source trace: replay (paced to the trace's gaps),
//! fill and membound-fill (each gap as compute units, then the collective),
//! overlap (the units beside the collective) and host-delay (the gap spun on
//! the host). Consumes the trace and the calibrated unit; records each
//! collective's fill or replay timing. [`quantize`] turns a gap into units.
//! An MPI capture's point-to-point program ([`TraceP2p`]) runs between the
//! collectives in recorded call order, each step to completion on the host:
//! replay paces each by its recorded gap (so a collective's gap starts at
//! the last step before it and the steps' time is never gap), the other
//! phases run them back to back before the collective's own gap work. Each
//! pass's steps are recorded in the phase record ([`P2pPassRecord`]); the
//! pass's token ends after its last step, so its latency includes them.
use super::{Between, OpenToken, Position, Runner, Work};
use crate::backend::{Backend, Call, Timing};
use crate::core::workload::{Dtype, FillResidual, Phase};
use crate::evidence::shard::{ComputeKind, FillRecord, P2pPassRecord, ReplayTiming};
use crate::evidence::trace::{GapEntry, SourceTrace, TraceP2p};
use anyhow::{Context, Result};

/// Where a pass's point-to-point program stands.
struct P2pCursor<'t> {
    p2p: &'t TraceP2p,
    /// The next step.
    next: usize,
    /// The pass's record so far.
    pass: Option<P2pPassRecord>,
}

impl<B: Backend> Runner<'_, B> {
    /// Replay, fill, overlap and the ablations: walk the source trace (an
    /// entry with a [`TraceOp`](crate::evidence::trace::TraceOp) through [`Self::trace_op`], its overlap
    /// compute or host-delay spin before it).
    pub(super) fn traced(&mut self, phase: Phase, trace: &SourceTrace, quantum_ns: Option<u64>) -> Result<()> {
        let mut residual_ns: i64 = 0;
        let mut prev_end = self.clock.now_ns();
        let mut open_token: Option<OpenToken> = None;
        let mut p2p = trace.p2p.as_ref().map(|p2p| P2pCursor { p2p, next: 0, pass: None });
        for e in &trace.entries {
            let GapEntry { token, layer, warmup, bytes, dtype, gap_ns, compute_ns, op } = *e;
            if let Some(t) = token {
                match open_token {
                    Some(cur) if cur.token == t => {}
                    _ => {
                        if let Some(o) = open_token.take() {
                            prev_end = self.end_p2p_pass(phase, p2p.as_mut(), prev_end)?;
                            self.end_token(phase, o, prev_end)?;
                            self.check_p2p_pass(p2p.as_mut())?;
                        }
                        open_token = Some(self.begin_token(t, warmup)?);
                        if let Some(c) = p2p.as_mut() {
                            c.pass = Some(P2pPassRecord {
                                token: t,
                                warmup,
                                operations: 0,
                                calls: 0,
                                host_ns: 0,
                                target_gap_ns: (phase == Phase::Replay).then_some(0),
                                actual_gap_ns: (phase == Phase::Replay).then_some(0),
                                receives_checked: None,
                            });
                        }
                    }
                }
            }
            if let Some(c) = p2p.as_mut() {
                // the steps the capture made before this collective
                let at = layer.context("internal: an imported trace's collective without its position")? as usize;
                prev_end = self.p2p_steps(phase, c, at, prev_end)?;
            }
            let pos = Position { token, layer, iter: None, warmup };
            let mut fill = None;
            let mut paced_at = 0u64;
            let between = match phase {
                Phase::Replay => {
                    // Pace from the moment the host knows the previous
                    // collective completed (on GPU the host would otherwise
                    // run ahead of the device and the gap would be fiction).
                    self.backend.synchronize()?;
                    prev_end = prev_end.max(self.clock.now_ns());
                    self.clock.sleep_until(prev_end + gap_ns);
                    paced_at = self.clock.now_ns();
                    Between::Nothing
                }
                Phase::HostDelay => Between::HostSpin(gap_ns, token, layer),
                _ => {
                    let q = quantum_ns.expect("calibrated");
                    // the source's own compute where it recorded it, else the whole gap
                    let gap_ns = compute_ns.unwrap_or(gap_ns);
                    let (units, err) = quantize(gap_ns, q, &mut residual_ns, self.spec.fill_residual);
                    fill = Some(FillRecord { gap_ns, units, quantum_ns: q, quantization_error_ns: err });
                    let kind = if phase == Phase::MemboundFill { ComputeKind::Membound } else { ComputeKind::Gemm };
                    if phase == Phase::Overlap {
                        Between::Compute(Work::Unit(kind, units), token, layer)
                    } else {
                        self.timed_compute(phase, Work::Unit(kind, units), token, layer)?;
                        Between::Nothing
                    }
                }
            };
            let idx = match op {
                Some(op) => self.trace_op(phase, op, (bytes, dtype), pos, between)?,
                None => {
                    let dtype =
                        Dtype::try_from(dtype).context("internal: a world all-reduce outside the trace executor")?;
                    self.collective(phase, bytes, dtype, pos, between)?
                }
            };
            let ev = &mut self.body.collectives[idx];
            ev.fill = fill;
            if phase == Phase::Replay {
                // the gap ends where the pacing ended, read there: before any
                // injected delay, whose arrival the control must see
                ev.replay =
                    Some(ReplayTiming { target_gap_ns: gap_ns, actual_gap_ns: paced_at.saturating_sub(prev_end) });
            }
            prev_end = ev.wait_end_ns;
        }
        if let Some(o) = open_token {
            prev_end = self.end_p2p_pass(phase, p2p.as_mut(), prev_end)?;
            self.end_token(phase, o, prev_end)?;
            self.check_p2p_pass(p2p.as_mut())?;
        }
        Ok(())
    }

    /// Run the pass's point-to-point steps that precede collective `at` of
    /// the pass (`usize::MAX`: every step left), each paced by its recorded
    /// gap in the replay phase; returns when the last ended (`prev_end`
    /// where none ran).
    fn p2p_steps(&mut self, phase: Phase, c: &mut P2pCursor<'_>, at: usize, mut prev_end: u64) -> Result<u64> {
        let pass = c.pass.as_mut().context("internal: point-to-point steps outside a pass")?;
        while c.next < c.p2p.before.len() && c.p2p.before[c.next] <= at {
            let k = c.next;
            if phase == Phase::Replay {
                self.backend.synchronize()?;
                prev_end = prev_end.max(self.clock.now_ns());
                let gap = c.p2p.gap_ns[k];
                self.clock.sleep_until(prev_end + gap);
                let paced_at = self.clock.now_ns();
                pass.target_gap_ns = pass.target_gap_ns.map(|t| t + gap);
                pass.actual_gap_ns = pass.actual_gap_ns.map(|t| t + paced_at.saturating_sub(prev_end));
            }
            let t0 = self.clock.now_ns();
            self.backend
                .enqueue(Call::P2pStep(k), Timing::HostWait)
                .with_context(|| format!("rank {}, phase {phase}, pass {}", self.rank, pass.token))?;
            prev_end = self.clock.now_ns();
            pass.host_ns += prev_end.saturating_sub(t0);
            pass.calls += 1;
            pass.operations += c.p2p.started[k];
            c.next += 1;
        }
        Ok(prev_end)
    }

    /// Run what is left of the pass's point-to-point program (after its last
    /// collective, and the waits of what never completed) and record the
    /// pass; returns when the pass ended.
    fn end_p2p_pass(&mut self, phase: Phase, c: Option<&mut P2pCursor<'_>>, prev_end: u64) -> Result<u64> {
        let Some(c) = c else { return Ok(prev_end) };
        let end = self.p2p_steps(phase, c, usize::MAX, prev_end)?;
        Ok(end)
    }

    /// After the pass's token closed: check its receives (a timed pass, with
    /// `--check`), record the pass, and clear it for the next.
    fn check_p2p_pass(&mut self, c: Option<&mut P2pCursor<'_>>) -> Result<()> {
        let Some(c) = c else { return Ok(()) };
        let mut pass = c.pass.take().context("internal: a point-to-point pass without its record")?;
        let check = !pass.warmup && self.spec.check > 0;
        pass.receives_checked = self
            .backend
            .end_p2p_pass(check)
            .with_context(|| format!("rank {}, point-to-point pass {}", self.rank, pass.token))?;
        c.next = 0;
        self.p2p_passes.push(pass);
        Ok(())
    }
}

/// A gap of `gap_ns` as whole compute units of `quantum_ns`, rounded to the
/// nearest, with the rounding carried into the next gap (`Carry`, so errors
/// do not accumulate) or dropped. Returns the units and this gap's
/// quantization error (units' time minus the time wanted, carry included).
pub(super) fn quantize(gap_ns: u64, quantum_ns: u64, residual_ns: &mut i64, policy: FillResidual) -> (u32, i64) {
    let want = gap_ns as i64 + *residual_ns;
    let units = if want <= 0 { 0 } else { (want as f64 / quantum_ns as f64).round() as u32 };
    let err = units as i64 * quantum_ns as i64 - want;
    *residual_ns = match policy {
        FillResidual::Carry => -err,
        FillResidual::Drop => 0,
    };
    (units, err)
}
