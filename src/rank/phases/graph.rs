//! Graph mode (`--graph`, cuda backend): one token of blocking, async, fill,
//! overlap or membound-fill captured once into a CUDA graph and launched per
//! token; only token boundaries are timed, and `--check` validates the last
//! collective of the last launch. Refuses a source trace with collectives other
//! than world all-reduces.
use super::drive::quantize;
use super::Runner;
use crate::backend::{Backend, Call, Checked, GraphStep, Timing};
use crate::core::workload::Phase;
use crate::evidence::schedule::{Schedule, Step};
use crate::evidence::shard::{CollectiveKind, Dtype, GraphRun};
use anyhow::{bail, Result};

/// One token's steps of `s`: its first timed token (the first token where
/// all are warm-ups), or all of it where it has no tokens; and that token.
fn one_token(s: &Schedule) -> (&[Step], Option<u32>) {
    let tokens = || {
        s.steps.iter().enumerate().filter_map(|(i, t)| match *t {
            Step::Token { token, warmup } => Some((i, token, warmup)),
            _ => None,
        })
    };
    let Some((start, token, _)) = tokens().find(|t| !t.2).or_else(|| tokens().next()) else { return (&s.steps, None) };
    let len = s.steps[start..].iter().position(|t| *t == Step::TokenEnd).unwrap_or(s.steps.len() - start);
    (&s.steps[start..start + len], Some(token))
}

impl<B: Backend> Runner<'_, B> {
    /// Graph mode for blocking and async: one token of the model shape, which
    /// is identical to every other (a step's sizes and GEMMs depend only on its
    /// position in the token), run by [`Self::captured_tokens`].
    pub(super) fn graph_phase(&mut self, phase: Phase, s: &Schedule) -> Result<GraphRun> {
        let (steps, _) = one_token(s);
        let calls = steps.iter().filter(|t| matches!(t, Step::Call(_))).count() as u64;
        let gemms =
            steps.iter().map(|t| if let Step::Compute { gemms, .. } = t { gemms.len() as u64 } else { 0 }).sum();
        let timing = "token boundaries: events on the compute stream before and after each graph launch".to_string();
        self.captured_tokens(phase, calls, gemms, timing, &mut |r: &mut Self| r.play(phase, steps, &[]))
    }

    /// Graph mode for fill, overlap and membound-fill: the source trace's first
    /// timed token (all of it where the trace has no tokens), its gaps quantized
    /// as the driver does (fill's units before each call, overlap's beside it),
    /// run by [`Self::captured_tokens`].
    pub(super) fn graph_traced(&mut self, phase: Phase, s: &Schedule, quantum_ns: u64) -> Result<GraphRun> {
        if s.prepared.is_some() {
            bail!("internal: graph mode with trace collectives other than world all-reduces");
        }
        let (steps, pick) = one_token(s);
        let mut residual_ns: i64 = 0;
        let units: Vec<u32> = steps
            .iter()
            .filter_map(|t| if let Step::Gap { ns, compute_ns } = *t { Some(compute_ns.unwrap_or(ns)) } else { None })
            .map(|gap| quantize(gap, quantum_ns, &mut residual_ns, self.spec.fill_residual).0)
            .collect();
        if units.is_empty() {
            bail!("the source trace has no collectives");
        }
        let units_per_token: u64 = units.iter().map(|&u| u as u64).sum();
        let timing = format!(
            "token boundaries: events on the compute stream before and after each graph launch; the token is the \
                source trace's {} ({} collectives, {units_per_token} compute units of {quantum_ns} ns)",
            pick.map_or("whole pass".to_string(), |t| format!("token {t}")),
            units.len()
        );
        let n = units.len() as u64;
        self.captured_tokens(phase, n, units_per_token, timing, &mut |r: &mut Self| r.play(phase, steps, &units))
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
        let (bytes, dtype) = token(self)?;
        if self.spec.check > 0 {
            // the check reads what a launch left, not what this eager token did
            self.backend.enqueue(Call::ClearWorld { kind: CollectiveKind::AllReduce, bytes, dtype }, Timing::Async)?;
        }
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
            let last = Checked::Last { kind: CollectiveKind::AllReduce, bytes: last_bytes, dtype };
            if let Some(why) = self.backend.check(last, self.corrupts())?.first_wrong {
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
