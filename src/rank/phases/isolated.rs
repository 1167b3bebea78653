//! The isolated phase: every size of the sweep, warm-ups then timed
//! iterations, with nothing between collectives (as nccl-tests times them).
//! Three paths, chosen per backend and spec: issue and wait one at a time;
//! back to back on a GPU, every kind of the sweep through the same world
//! calls (optionally one CUDA graph per size); or, on a backend without
//! back-to-back calls, another kind, and another reduction anywhere, through
//! the backend's trace executor on the sweep's group. Wrong results are
//! recorded here and fail the rank after its shard.
use super::{Between, EventExtra, Fault, HostTimes, Position, Recorded, Runner};
use crate::backend::{Backend, Call, Checked, GraphStep, Timing};
use crate::core::collective::Lands;
use crate::core::workload::{Phase, ReduceOp};
use crate::evidence::commtrace::TraceCollective;
use crate::evidence::shard::{CheckRecord, CollectiveKind};
use crate::rank::sweep;
use anyhow::{Context, Result};

impl<B: Backend> Runner<'_, B> {
    pub(super) fn isolated(&mut self) -> Result<()> {
        let spec = self.spec;
        let back_to_back = self.backend.info().back_to_back;
        // the world calls reduce by sum: another reduction runs on the executor
        if spec.sweep_uses_executor() && !(back_to_back && spec.sweep_op() == ReduceOp::Sum) {
            return self.isolated_executor();
        }
        if back_to_back {
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
                let seq = self.group_seq(group);
                let host_issue_ns = self.clock.now_ns();
                self.backend.enqueue(Call::Trace { index: i, c, op, check: checked }, Timing::HostWait)?;
                let end_ns = self.clock.now_ns();
                // the check reads the result back after the timed call, never inside it
                let found =
                    if checked { Some(self.backend.check(Checked::Trace { index: i, c, op }, corrupt)?) } else { None };
                if let Some(f) = found {
                    self.checked_in_phase += 1;
                    self.checks.push(CheckRecord {
                        phase: Phase::Isolated,
                        group,
                        seq,
                        bytes,
                        wrong_elements: f.wrong_elements,
                        first_wrong: f.first_wrong,
                    });
                }
                let r = Recorded {
                    phase: Phase::Isolated,
                    kind: collective_kind,
                    group,
                    seq,
                    bytes,
                    dtype: spec.dtype.into(),
                    root: kind.root(),
                    peer: None,
                };
                let pos = Position { token: None, layer: None, iter: Some(iter), warmup };
                self.push_event(
                    r,
                    pos,
                    HostTimes::blocking(host_issue_ns, end_ns),
                    EventExtra { checked, ..Default::default() },
                );
            }
        }
        Ok(())
    }

    /// The isolated phase where collectives can run back to back (GPU), as
    /// nccl-tests times them (`-I 1`), for the sum all-reduce and every other
    /// kind of the sweep alike: per size, the warm-ups, then a
    /// synchronization and a barrier, then the timed iterations enqueued with
    /// nothing between them but the host clock reads and one boundary event,
    /// so the device queue stays ahead of the host as far as the host's cost
    /// allows. With `--graph` the timed iterations are one CUDA graph, launched
    /// once. The result is validated once per size after its loop, as
    /// nccl-tests does; every iteration's result equals it (same inputs, same
    /// output buffer).
    fn isolated_back_to_back(&mut self) -> Result<()> {
        let spec = self.spec;
        let sizes = self.swept_sizes()?;
        let per_size = (spec.warmup_iters + spec.iters) as usize;
        self.body.collectives.reserve(per_size * sizes.len());
        for s in sizes {
            for i in 0..spec.warmup_iters {
                self.back_to_back_one(s, i, true)?;
            }
            self.backend.synchronize()?;
            self.barrier("barrier before a size's timed iterations", Phase::Isolated)?;
            if spec.graph {
                self.isolated_graph(s)?;
            } else {
                for i in 0..spec.iters {
                    self.back_to_back_one(s, i, false)?;
                }
            }
            self.backend.end_back_to_back()?;
            if spec.check > 0 && spec.iters > 0 {
                self.check_swept(s)?;
            }
        }
        Ok(())
    }

    /// The sizes of the back-to-back sweep: the world call of each and how it
    /// is recorded (another kind than the all-reduce: on the sweep's group,
    /// its bytes one member's input, as the executor's path records it).
    fn swept_sizes(&self) -> Result<Vec<Swept>> {
        let spec = self.spec;
        if !spec.sweep_uses_executor() {
            let all_reduce =
                |b| Swept { kind: CollectiveKind::AllReduce, world_bytes: b, bytes: b, group: 0, root: None };
            return Ok(spec.isolated_sizes().iter().map(|&b| all_reduce(b)).collect());
        }
        let kind = spec.sweep_kind();
        let group = self.sweep_group.context("internal: an isolated sweep without its group")?;
        let (_, colls) = sweep::sweep_collectives(spec, self.world_size)?;
        let e = spec.dtype.size_bytes();
        let swept = |(&b, c): (&u64, &TraceCollective)| {
            let count =
                kind.count(b, e, self.world_size).context("internal: a swept size without a whole element per rank")?;
            Ok(Swept { kind: kind.kind(), world_bytes: count * e, bytes: c.in_elems * e, group, root: kind.root() })
        };
        spec.isolated_sizes().iter().zip(&colls).map(swept).collect()
    }

    /// The next sequence number of `group` (the sweep's group counts its own).
    fn group_seq(&mut self, group: u32) -> u64 {
        let counter = self.op_seq.entry((group, None)).or_insert(0);
        *counter += 1;
        *counter - 1
    }

    /// One collective of the isolated loop: the hot path. The negative
    /// controls that act on arrivals act on the world all-reduce only.
    fn back_to_back_one(&mut self, s: Swept, iter: u32, warmup: bool) -> Result<()> {
        let (seq, injected) = if s.group == 0 { self.next_arrival() } else { (self.group_seq(s.group), None) };
        let host_issue_ns = self.clock.now_ns();
        self.backend
            .enqueue(Call::World { kind: s.kind, bytes: s.world_bytes, dtype: self.spec.dtype }, Timing::BackToBack)?;
        let host_return_ns = self.clock.now_ns();
        self.push_isolated(s, seq, iter, warmup, (host_issue_ns, host_return_ns), injected);
        Ok(())
    }

    /// The timed iterations of one size as one CUDA graph: one launch for all
    /// of them (delays and faults cannot act inside a graph).
    fn isolated_graph(&mut self, s: Swept) -> Result<()> {
        let step = GraphStep::Calls { kind: s.kind, bytes: s.world_bytes, dtype: self.spec.dtype, n: self.spec.iters };
        let host = self.backend.graph(step)?.context("internal: a graph of collectives without its launch times")?;
        for i in 0..self.spec.iters {
            let seq = if s.group == 0 {
                self.seq += 1;
                self.seq - 1
            } else {
                self.group_seq(s.group)
            };
            self.push_isolated(s, seq, i, false, host, None);
        }
        Ok(())
    }

    fn push_isolated(
        &mut self,
        s: Swept,
        seq: u64,
        iter: u32,
        warmup: bool,
        (host_issue_ns, host_return_ns): (u64, u64),
        injected: Option<u64>,
    ) {
        let r = Recorded {
            phase: Phase::Isolated,
            kind: s.kind,
            group: s.group,
            seq,
            bytes: s.bytes,
            dtype: self.spec.dtype.into(),
            root: s.root,
            peer: None,
        };
        let pos = Position { token: None, layer: None, iter: Some(iter), warmup };
        let t = HostTimes::blocking(host_issue_ns, host_return_ns);
        self.push_event(r, pos, t, EventExtra { timed: true, injected_ns: injected, ..Default::default() });
    }

    /// Check the last iteration of a size (marked checked): the all-reduce
    /// as every phase checks it; another kind where its result lands here
    /// (a reduce's on its root only), recorded on the sweep's group.
    fn check_swept(&mut self, s: Swept) -> Result<()> {
        let last = self.body.collectives.len() - 1;
        let seq = self.body.collectives[last].seq;
        if s.group == 0 {
            self.body.collectives[last].checked = true;
            return self.check(Phase::Isolated, seq, s.bytes, self.spec.dtype);
        }
        let rank = self.rank;
        if s.kind.row().lands == Lands::OnRoot && s.root != Some(rank) {
            return Ok(());
        }
        self.body.collectives[last].checked = true;
        let corrupt = self.fault == Some(Fault::WrongSum { rank });
        let f = self
            .backend
            .check(Checked::Last { kind: s.kind, bytes: s.world_bytes, dtype: self.spec.dtype }, corrupt)?;
        let (wrong_elements, first_wrong) = (f.wrong_elements, f.first_wrong);
        self.checks.push(CheckRecord {
            phase: Phase::Isolated,
            group: s.group,
            seq,
            bytes: s.bytes,
            wrong_elements,
            first_wrong,
        });
        Ok(())
    }
}

/// One size of a back-to-back sweep: the world call, and how it is recorded.
#[derive(Clone, Copy)]
struct Swept {
    kind: CollectiveKind,
    /// The call's size in nccl-tests' convention ([`crate::backend::own::OwnOp`]).
    world_bytes: u64,
    /// The record's size: one member's input.
    bytes: u64,
    group: u32,
    root: Option<u32>,
}
