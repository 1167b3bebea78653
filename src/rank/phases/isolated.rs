//! The isolated phase: every size of the sweep, warm-ups then timed
//! iterations, with nothing between collectives (as nccl-tests times them).
//! Three paths, chosen per backend and spec: issue and wait one at a time,
//! back to back on a GPU (optionally one CUDA graph per size), or another
//! kind or reduction through the backend's trace executor on the sweep's
//! group. Wrong results are recorded here and fail the rank after its shard.
use super::{Between, EventExtra, Fault, HostTimes, Position, Recorded, Runner};
use crate::backend::{Backend, Call, Checked, GraphStep, Timing};
use crate::core::collective::Lands;
use crate::core::workload::Phase;
use crate::evidence::shard::{CheckRecord, CollectiveKind};
use crate::rank::sweep;
use anyhow::{Context, Result};

impl<B: Backend> Runner<'_, B> {
    pub(super) fn isolated(&mut self) -> Result<()> {
        let spec = self.spec;
        if spec.sweep_uses_executor() {
            return self.isolated_executor();
        }
        if self.backend.info().back_to_back {
            return self.isolated_back_to_back();
        }
        for &bytes in spec.isolated_sizes() {
            // --check N checks N timed iterations of every size, as nccl-tests
            // -c checks every size (the back-to-back path checks each size once)
            self.checked_in_phase = 0;
            for i in 0..spec.warmup_iters + spec.iters {
                let warmup = i < spec.warmup_iters;
                let iter = if warmup { i } else { i - spec.warmup_iters };
                let pos = Position { token: None, layer: None, iter: Some(iter), warmup };
                self.collective(Phase::Isolated, bytes, spec.dtype, pos, Between::Nothing)?;
            }
        }
        Ok(())
    }

    /// The isolated sweep of another kind (or reduction) than the sum
    /// all-reduce, through the backend's trace executor
    /// ([`crate::rank::sweep`]): per size, the warm-ups, then the timed
    /// iterations, each run to completion on the host and recorded with its
    /// host times on the sweep's group; `--check N` checks N timed
    /// iterations of every size, counting every wrong element, and a wrong
    /// result fails the rank after its shard is written, as in [`Self::check`].
    /// A reduce's result lands on its root only: the other ranks check nothing.
    fn isolated_executor(&mut self) -> Result<()> {
        let spec = self.spec;
        let (kind, op) = (spec.sweep_kind(), spec.sweep_op());
        let group = self.sweep_group.context("internal: an isolated sweep without its group")?;
        let (trace, colls) = sweep::sweep_collectives(spec, self.world_size)?;
        // collective over the world (communicator splits): every rank is here
        self.backend.prepare(&trace, &colls, None)?;
        // an imported trace's collectives, if any, are prepared again before its first phase
        self.ops_prepared = false;
        let rank = self.rank;
        // a reduce's result lands on its root only: the other ranks check nothing
        let has_result = kind.kind().row().lands != Lands::OnRoot || kind.root() == Some(rank);
        let corrupt = self.fault == Some(Fault::WrongSum { rank });
        let collective_kind = kind.kind();
        self.body.collectives.reserve(colls.len() * (spec.warmup_iters + spec.iters) as usize);
        for (i, c) in colls.iter().enumerate() {
            // the shard's convention: one member's input
            let bytes = c.in_elems * spec.dtype.size_bytes();
            self.checked_in_phase = 0;
            for it in 0..spec.warmup_iters + spec.iters {
                let warmup = it < spec.warmup_iters;
                let iter = if warmup { it } else { it - spec.warmup_iters };
                let checked = has_result && !warmup && self.checked_in_phase < spec.check;
                let counter = self.op_seq.entry((group, None)).or_insert(0);
                let seq = *counter;
                *counter += 1;
                let host_issue_ns = self.clock.now_ns();
                self.backend.enqueue(Call::Trace { index: i, c, op, check: checked }, Timing::HostWait)?;
                let end_ns = self.clock.now_ns();
                // the check reads the result back after the timed call, never inside it
                let found = if checked { Some(self.backend.check(Checked::Trace { index: i, c, op }, corrupt)?) } else { None };
                if let Some(f) = found {
                    self.checked_in_phase += 1;
                    self.checks.push(CheckRecord { phase: Phase::Isolated, group, seq, bytes, wrong_elements: f.wrong_elements, first_wrong: f.first_wrong });
                }
                let r = Recorded { phase: Phase::Isolated, kind: collective_kind, group, seq, bytes, dtype: spec.dtype.into(), root: kind.root(), peer: None };
                let pos = Position { token: None, layer: None, iter: Some(iter), warmup };
                self.push_event(r, pos, HostTimes::blocking(host_issue_ns, end_ns), EventExtra { checked, ..Default::default() });
            }
        }
        Ok(())
    }

    /// The isolated phase where collectives can run back to back (GPU), as
    /// nccl-tests times them (`-I 1`): per size, the warm-ups, then a
    /// synchronization and a barrier, then the timed iterations enqueued with
    /// nothing between them but the host clock reads and one boundary event,
    /// so the device queue stays ahead of the host as far as the host's cost
    /// allows. With `--graph` the timed iterations are one CUDA graph, launched
    /// once. The result is validated once per size after its loop, as
    /// nccl-tests does; every iteration's result equals it (same inputs, same
    /// output buffer).
    fn isolated_back_to_back(&mut self) -> Result<()> {
        let spec = self.spec;
        let per_size = (spec.warmup_iters + spec.iters) as usize;
        self.body.collectives.reserve(per_size * spec.isolated_sizes().len());
        for &bytes in spec.isolated_sizes() {
            for i in 0..spec.warmup_iters {
                self.back_to_back_one(bytes, i, true)?;
            }
            self.backend.synchronize()?;
            self.barrier("barrier before a size's timed iterations", Phase::Isolated)?;
            if spec.graph {
                self.isolated_graph(bytes)?;
            } else {
                for i in 0..spec.iters {
                    self.back_to_back_one(bytes, i, false)?;
                }
            }
            self.backend.end_back_to_back()?;
            if spec.check > 0 && spec.iters > 0 {
                let last = self.body.collectives.len() - 1;
                self.body.collectives[last].checked = true;
                let seq = self.body.collectives[last].seq;
                self.check(Phase::Isolated, seq, bytes, spec.dtype)?;
            }
        }
        Ok(())
    }

    /// One collective of the isolated loop: the hot path.
    fn back_to_back_one(&mut self, bytes: u64, iter: u32, warmup: bool) -> Result<()> {
        let (seq, injected) = self.next_arrival();
        let host_issue_ns = self.clock.now_ns();
        self.backend.enqueue(Call::World { kind: CollectiveKind::AllReduce, bytes, dtype: self.spec.dtype }, Timing::BackToBack)?;
        let host_return_ns = self.clock.now_ns();
        self.push_isolated(bytes, seq, iter, warmup, (host_issue_ns, host_return_ns), injected);
        Ok(())
    }

    /// The timed iterations of one size as one CUDA graph: one launch for all
    /// of them (delays and faults cannot act inside a graph).
    fn isolated_graph(&mut self, bytes: u64) -> Result<()> {
        let step = GraphStep::Calls { kind: CollectiveKind::AllReduce, bytes, dtype: self.spec.dtype, n: self.spec.iters };
        let host = self.backend.graph(step)?.context("internal: a graph of all-reduces without its launch times")?;
        for i in 0..self.spec.iters {
            let seq = self.seq;
            self.seq += 1;
            self.push_isolated(bytes, seq, i, false, host, None);
        }
        Ok(())
    }

    fn push_isolated(&mut self, bytes: u64, seq: u64, iter: u32, warmup: bool, (host_issue_ns, host_return_ns): (u64, u64), injected: Option<u64>) {
        let r =
            Recorded { phase: Phase::Isolated, kind: CollectiveKind::AllReduce, group: 0, seq, bytes, dtype: self.spec.dtype.into(), root: None, peer: None };
        let pos = Position { token: None, layer: None, iter: Some(iter), warmup };
        let t = HostTimes::blocking(host_issue_ns, host_return_ns);
        self.push_event(r, pos, t, EventExtra { injected_ns: injected, ..Default::default() });
    }
}
