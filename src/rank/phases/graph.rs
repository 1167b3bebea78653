//! Graph mode (`--graph`, cuda backend): one token of blocking, async, fill,
//! overlap or membound-fill captured once into a CUDA graph and launched per
//! token; only token boundaries are timed, and `--check` validates the last
//! collective of the last launch. Refuses a source trace with collectives other
//! than world all-reduces.
use super::traced::quantize;
use super::{Fault, Runner, Work};
use crate::backend::{Backend, Call, Checked, GraphStep, Timing};
use crate::core::workload::Phase;
use crate::evidence::shard::{CollectiveKind, ComputeKind, Dtype, GraphRun};
use crate::evidence::trace::SourceTrace;
use anyhow::{bail, Context, Result};

impl<B: Backend> Runner<'_, B> {
    /// One token's device work as [`Self::blocking`] or [`Self::async_phase`]
    /// issues it, without records (inside a graph capture, or as the eager
    /// warm-up before one). Returns the last collective's size.
    fn token_work(&mut self, phase: Phase) -> Result<u64> {
        let per_token = self.spec.collectives_per_token();
        let dtype = self.spec.dtype;
        let mut last = 0;
        if phase == Phase::Async {
            let first = self.spec.step(0);
            self.compute(Work::Layer(first.gemms, first.layer))?;
        }
        for i in 0..per_token {
            let s = self.spec.step(i);
            if phase == Phase::Blocking {
                self.compute(Work::Layer(s.gemms, s.layer))?;
            }
            self.backend
                .enqueue(Call::World { kind: CollectiveKind::AllReduce, bytes: s.bytes, dtype }, Timing::Async)?;
            if phase == Phase::Async && i + 1 < per_token {
                let next = self.spec.step(i + 1);
                self.compute(Work::Layer(next.gemms, next.layer))?;
            }
            self.backend.wait()?;
            last = s.bytes;
        }
        Ok(last)
    }

    /// Graph mode: one eager warm-up token (libraries set up outside the
    /// capture), then one token captured into a graph, then one launch per
    /// token with device marks at the token boundaries only. The captured
    /// token is identical to every token of the model shape (a step's sizes
    /// and GEMMs depend only on its position in the token). `--check`
    /// validates the last collective after the last launch.
    pub(super) fn graph_phase(&mut self, phase: Phase) -> Result<GraphRun> {
        let per_token = self.spec.collectives_per_token();
        let gemms = (0..per_token).map(|i| self.spec.step(i).gemms.len() as u64).sum();
        let dtype = self.spec.dtype;
        let timing = "token boundaries: events on the compute stream before and after each graph launch".to_string();
        self.captured_tokens(phase, per_token, gemms, timing, &mut |s: &mut Self| Ok((s.token_work(phase)?, dtype)))
    }

    /// Graph mode for fill, overlap and membound-fill: the source trace's
    /// first timed token (all of it where the trace has no tokens), its gaps
    /// quantized to compute units as [`Self::traced`] does, captured into one
    /// graph and launched per token. Fill runs each gap's units and then the
    /// collective; overlap issues the collective, runs the units beside it,
    /// then waits.
    pub(super) fn graph_traced(&mut self, phase: Phase, trace: &SourceTrace, quantum_ns: u64) -> Result<GraphRun> {
        if trace.ops.is_some() {
            bail!("internal: graph mode with trace collectives other than world all-reduces");
        }
        let pick = trace.entries.iter().find(|e| !e.warmup).or(trace.entries.first()).map(|e| e.token);
        let Some(pick) = pick else { bail!("the source trace has no collectives") };
        let kind = if phase == Phase::MemboundFill { ComputeKind::Membound } else { ComputeKind::Gemm };
        let mut residual_ns: i64 = 0;
        let mut work = Vec::new();
        for e in trace.entries.iter().filter(|e| e.token == pick) {
            let (units, _) =
                quantize(e.compute_ns.unwrap_or(e.gap_ns), quantum_ns, &mut residual_ns, self.spec.fill_residual);
            let dtype = Dtype::try_from(e.dtype).context("internal: graph mode with a world all-reduce")?;
            work.push((units, e.bytes, dtype));
        }
        let units_per_token: u64 = work.iter().map(|w| w.0 as u64).sum();
        let timing = format!(
            "token boundaries: events on the compute stream before and after each graph launch; the token is the \
                source trace's {} ({} collectives, {units_per_token} compute units of {quantum_ns} ns)",
            pick.map_or("whole pass".to_string(), |t| format!("token {t}")),
            work.len()
        );
        let overlap = phase == Phase::Overlap;
        let mut token = |s: &mut Self| -> Result<(u64, Dtype)> {
            let mut last = (0, s.spec.dtype);
            for &(units, bytes, dtype) in &work {
                if !overlap && units > 0 {
                    s.compute(Work::Unit(kind, units))?;
                }
                s.backend.enqueue(Call::World { kind: CollectiveKind::AllReduce, bytes, dtype }, Timing::Async)?;
                if overlap && units > 0 {
                    s.compute(Work::Unit(kind, units))?;
                }
                s.backend.wait()?;
                last = (bytes, dtype);
            }
            Ok(last)
        };
        let n = work.len() as u64;
        self.captured_tokens(phase, n, units_per_token, timing, &mut token)
    }

    /// The graph-mode pass shared by every phase that runs as a graph: one
    /// eager warm-up of `token` (libraries set up outside the capture), one
    /// capture, one launch per token with device marks at the token
    /// boundaries, and `--check` on the last collective of the last launch
    /// (`token` returns its size and dtype).
    fn captured_tokens(
        &mut self,
        phase: Phase,
        collectives_per_token: u64,
        gemms_per_token: u64,
        timing: String,
        token: &mut dyn FnMut(&mut Self) -> Result<(u64, Dtype)>,
    ) -> Result<GraphRun> {
        token(self)?;
        self.backend.synchronize()?;
        // the warm-up token is no part of the pass
        let _ = self.backend.finish_pass()?;
        self.backend.graph(GraphStep::Begin)?;
        let captured = token(self);
        let ended = self.backend.graph(GraphStep::End);
        let (last_bytes, dtype) = captured?;
        ended?;
        let mut launches = 0u64;
        for (t, warmup) in self.tokens().collect::<Vec<_>>() {
            let open = self.begin_token(t, warmup)?;
            self.backend.graph(GraphStep::Launch)?;
            launches += 1;
            let end = self.clock.now_ns();
            self.end_token(phase, open, end)?;
        }
        let mut checked = 0;
        if self.spec.check > 0 {
            self.backend.synchronize()?;
            let corrupt = self.fault == Some(Fault::WrongSum { rank: self.rank });
            let last = Checked::Last { kind: CollectiveKind::AllReduce, bytes: last_bytes, dtype };
            if let Some(why) = self.backend.check(last, corrupt)?.first_wrong {
                bail!(
                    "result check failed on rank {}, phase {phase} (graph mode, last collective of the last launch, \
                        {last_bytes} bytes of {}): {why}",
                    self.rank,
                    dtype.name()
                );
            }
            checked = 1;
        }
        Ok(GraphRun { collectives_per_token, gemms_per_token, launches, timing, checked })
    }
}
