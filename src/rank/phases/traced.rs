//! The phases that walk a source trace: replay (paced to the trace's gaps),
//! fill and membound-fill (each gap as compute units, then the collective),
//! overlap (the units beside the collective) and host-delay (the gap spun on
//! the host). Consumes the trace and the calibrated unit; records each
//! collective's fill or replay timing. [`quantize`] turns a gap into units.
use super::{Between, OpenToken, Position, Runner, Work};
use crate::backend::Backend;
use crate::core::workload::{FillResidual, Phase};
use crate::evidence::shard::{ComputeKind, FillRecord, ReplayTiming};
use crate::evidence::trace::{GapEntry, SourceTrace};
use anyhow::{Context, Result};

impl<B: Backend> Runner<'_, B> {
    /// Replay, fill, overlap and the ablations: walk the source trace (an
    /// entry with a [`TraceOp`](crate::evidence::trace::TraceOp) through [`Self::trace_op`], its overlap
    /// compute or host-delay spin before it).
    pub(super) fn traced(&mut self, phase: Phase, trace: &SourceTrace, quantum_ns: Option<u64>) -> Result<()> {
        let mut residual_ns: i64 = 0;
        let mut prev_end = self.clock.now_ns();
        let mut open_token: Option<OpenToken> = None;
        for e in &trace.entries {
            let GapEntry { token, layer, warmup, bytes, dtype, gap_ns, compute_ns, op } = *e;
            if let Some(t) = token {
                match open_token {
                    Some(cur) if cur.token == t => {}
                    _ => {
                        if let Some(o) = open_token.take() {
                            self.end_token(phase, o, prev_end)?;
                        }
                        open_token = Some(self.begin_token(t, warmup)?);
                    }
                }
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
                    let dtype = dtype.workload().with_context(|| format!("internal: a world all-reduce of {dtype} outside the trace executor"))?;
                    self.collective(phase, bytes, dtype, pos, between)?
                }
            };
            let ev = &mut self.body.collectives[idx];
            ev.fill = fill;
            if phase == Phase::Replay {
                // the gap ends where the pacing ended, read there: before any
                // injected delay, whose arrival the control must see
                ev.replay = Some(ReplayTiming { target_gap_ns: gap_ns, actual_gap_ns: paced_at.saturating_sub(prev_end) });
            }
            prev_end = ev.wait_end_ns;
        }
        if let Some(o) = open_token {
            self.end_token(phase, o, prev_end)?;
        }
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
