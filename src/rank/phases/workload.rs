//! The blocking and async phases: the workload's tokens, each a sequence of
//! steps (GEMMs and one all-reduce), recorded per token, step and collective.
//! Blocking waits for each all-reduce before the next step's GEMMs; async runs
//! the next step's GEMMs between issue and wait. Graph mode runs these phases
//! in `graph` instead.
use super::{Between, Position, Runner, Work};
use crate::backend::{mpi_deadline, Backend};
use crate::core::workload::Phase;
use anyhow::Result;

impl<B: Backend> Runner<'_, B> {
    /// Each step: its GEMMs, then its all-reduce; the next step's GEMMs wait
    /// for the collective (a stream dependency on GPUs).
    pub(super) fn blocking(&mut self) -> Result<()> {
        let per_token = self.spec.collectives_per_token();
        let dtype = self.spec.dtype;
        let mut index = 0u64;
        let tokens = self.tokens().collect::<Vec<_>>();
        let halfway = tokens.len() as u64 * per_token / 2;
        for (token, warmup) in tokens {
            let open = self.begin_token(token, warmup)?;
            for _ in 0..per_token {
                if index == halfway {
                    mpi_deadline::test_stop_point("mid-blocking", self.rank);
                }
                let s = self.spec.step(index);
                index += 1;
                self.timed_compute(Phase::Blocking, Work::Layer(s.gemms, s.layer), Some(token), Some(s.layer))?;
                let pos = Position { token: Some(token), layer: Some(s.layer), iter: None, warmup };
                self.collective(Phase::Blocking, s.bytes, dtype, pos, Between::Nothing)?;
            }
            let end = self.clock.now_ns();
            self.end_token(Phase::Blocking, open, end)?;
        }
        Ok(())
    }

    /// The first step's GEMMs, then per step: issue its all-reduce, run the
    /// next step's GEMMs, wait.
    pub(super) fn async_phase(&mut self) -> Result<()> {
        let per_token = self.spec.collectives_per_token();
        let dtype = self.spec.dtype;
        let mut index = 0u64;
        for (token, warmup) in self.tokens().collect::<Vec<_>>() {
            let open = self.begin_token(token, warmup)?;
            let first = self.spec.step(index);
            self.timed_compute(Phase::Async, Work::Layer(first.gemms, first.layer), Some(token), Some(first.layer))?;
            for j in 0..per_token {
                let s = self.spec.step(index);
                index += 1;
                let between = if j + 1 < per_token {
                    let next = self.spec.step(index);
                    Between::Compute(Work::Layer(next.gemms, next.layer), Some(token), Some(next.layer))
                } else {
                    Between::Nothing
                };
                let pos = Position { token: Some(token), layer: Some(s.layer), iter: None, warmup };
                self.collective(Phase::Async, s.bytes, dtype, pos, between)?;
            }
            let end = self.clock.now_ns();
            self.end_token(Phase::Async, open, end)?;
        }
        Ok(())
    }
}
