//! The phase runner: executes the phases of docs/ARCHITECTURE.md §4 over any [`Backend`].
//!
//! Consumes a validated [`WorkloadSpec`], a backend, this rank's clock and the
//! world communicator (for phase barriers only). Produces the shard body
//! (collective, compute and token events) and one [`PhaseRun`] per phase.
//! Refuses: a trace-consuming phase without a source trace, and any collective
//! whose validated result is wrong (the error names rank, phase and sequence:
//! a fast configuration that computes the wrong answer must never be ranked).
//! An imported trace's collectives other than world all-reduces (every kind,
//! on the trace's groups) run through [`Backend::run_trace_op`], prepared
//! once before the first trace phase; a backend without a trace executor
//! refuses, and graph mode refuses them.
//!
//! Blocking vocabulary, kept apart: *host blocking* (the thread cannot return),
//! *stream dependency* (later device work cannot pass an event), *device
//! synchronization* (the host waits for all earlier work). `wait_allreduce` is
//! a stream dependency on GPUs and a host wait on CPU; `synchronize` is only
//! called at the end of a pass.
use crate::backend::Backend;
use crate::core::clock::RankClock;
use crate::core::workload::{DelayInjection, FillResidual, Phase, WorkloadSpec};
use crate::evidence::shard::{
    CheckRecord, CollectiveEvent, CollectiveKind, ComputeEvent, ComputeKind, Dtype, FillRecord, PhaseRun, ReplayTiming, ShardBody, TokenEvent,
};
use crate::evidence::trace::{GapEntry, SourceTrace, TraceOp};
use anyhow::{bail, Context, Result};
use mpi::collective::CommunicatorCollectives;
use mpi::topology::{Communicator, SimpleCommunicator};

/// Negative-control faults (hidden `--fault`), for tests of the failure paths.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Fault {
    /// Corrupt this rank's reduced results so that `--check` must catch it.
    WrongSum {
        /// Rank.
        rank: u32,
    },
    /// This rank stops (sleeps) before issuing the collective with this
    /// sequence number, so its peers' collectives never complete.
    Hang {
        /// Rank.
        rank: u32,
        /// Sequence number.
        seq: u64,
    },
}

impl Fault {
    /// Parse `wrong-sum:R` or `hang:R:SEQ`.
    pub fn parse(s: &str) -> anyhow::Result<Self> {
        let parts: Vec<&str> = s.split(':').collect();
        let num = |x: &str| x.parse::<u64>().map_err(|_| anyhow::anyhow!("--fault {s:?}: {x:?} is not a number"));
        let rank = |x: &str| -> anyhow::Result<u32> {
            let r = num(x)?;
            crate::core::ranges::int("--fault rank", r, 0, crate::core::ranges::MAX_RANK as u64)?;
            Ok(r as u32)
        };
        match parts.as_slice() {
            ["wrong-sum", r] => Ok(Fault::WrongSum { rank: rank(r)? }),
            ["hang", r, q] => Ok(Fault::Hang { rank: rank(r)?, seq: num(q)? }),
            _ => bail!("--fault {s:?}: expected wrong-sum:RANK or hang:RANK:SEQ"),
        }
    }
}

/// Device work of one compute interval.
#[derive(Clone, Copy)]
enum Work {
    /// `units` unit GEMMs (`--gemm`) or memory-bound copies: the synthetic
    /// layer's product and the fill quantum.
    Unit(ComputeKind, u32),
    /// One step's GEMMs (indices into the workload's shapes) with `layer`'s weights.
    Layer(&'static [usize], u32),
}

/// What happens between issue and wait.
enum Between {
    Nothing,
    Compute(Work, Option<u32>, Option<u32>),
    HostSpin(u64, Option<u32>, Option<u32>),
}

/// Where a device mark's time goes once the pass is resolved.
#[derive(Clone, Copy)]
enum MarkTarget {
    ComputeStart(usize),
    ComputeEnd(usize),
    TokenStart(usize),
    TokenEnd(usize),
}

/// A token being executed: host start time and device mark, if any.
#[derive(Clone, Copy)]
struct OpenToken {
    token: u32,
    warmup: bool,
    start_ns: u64,
    start_mark: Option<usize>,
}

struct Position {
    token: Option<u32>,
    layer: Option<u32>,
    iter: Option<u32>,
    warmup: bool,
}

/// Runs phases on one rank.
pub struct Runner<'a, B: Backend> {
    backend: &'a mut B,
    clock: &'a RankClock,
    world: &'a SimpleCommunicator,
    rank: u32,
    spec: &'a WorkloadSpec,
    delay: Option<DelayInjection>,
    /// Runs of every group-0 all-reduce (`--inject-repeat`; 1 without it).
    repeat: u32,
    fault: Option<Fault>,
    file_trace: Option<SourceTrace>,
    seq: u64,
    checked_in_phase: u32,
    pending_marks: Vec<(MarkTarget, usize)>,
    current_phase: Option<Phase>,
    /// Recorded events.
    pub body: ShardBody,
    /// Per-phase records.
    pub phase_runs: Vec<PhaseRun>,
    /// Every result check and what it found.
    pub checks: Vec<CheckRecord>,
    progress: bool,
    spin_short_delays: bool,
    /// Barriers give up after this long (`--collective-timeout-s`), if set.
    barrier_timeout: Option<std::time::Duration>,
    /// Sequence numbers of the trace executor's groups: per group for
    /// collectives (`None`), per (sender, receiver) for point-to-point.
    op_seq: std::collections::BTreeMap<(u32, Option<(u32, u32)>), u64>,
    /// Whether the backend has prepared the source trace's [`TraceOp`]s.
    ops_prepared: bool,
    /// The group id of the isolated sweep of another kind than the sum
    /// all-reduce ([`crate::rank::sweep`]), declared in the shard header.
    sweep_group: Option<u32>,
}

/// Whether this node has a core for every local rank (the launcher's local
/// size, else the world size, against the cores this process may use).
fn node_has_core_per_rank(world_size: u32) -> bool {
    let local = ["OMPI_COMM_WORLD_LOCAL_SIZE", "MPI_LOCALNRANKS", "SLURM_NTASKS_PER_NODE"]
        .iter()
        .find_map(|k| std::env::var(k).ok()?.parse::<usize>().ok())
        .unwrap_or(world_size as usize);
    std::thread::available_parallelism().map(|c| c.get() >= local).unwrap_or(false)
}

impl<'a, B: Backend> Runner<'a, B> {
    /// New runner. `file_trace` is the shared source trace (`--trace`), if any.
    #[allow(clippy::too_many_arguments)]
    pub fn new(
        backend: &'a mut B,
        clock: &'a RankClock,
        world: &'a SimpleCommunicator,
        spec: &'a WorkloadSpec,
        delay: Option<DelayInjection>,
        fault: Option<Fault>,
        file_trace: Option<SourceTrace>,
        progress: bool,
    ) -> Self {
        Self {
            rank: world.rank() as u32,
            backend,
            clock,
            world,
            spec,
            delay,
            repeat: 1,
            fault,
            file_trace,
            seq: 0,
            checked_in_phase: 0,
            pending_marks: Vec::new(),
            current_phase: None,
            body: ShardBody::default(),
            phase_runs: Vec::new(),
            checks: Vec::new(),
            progress,
            spin_short_delays: node_has_core_per_rank(world.size() as u32),
            barrier_timeout: None,
            op_seq: std::collections::BTreeMap::new(),
            ops_prepared: false,
            sweep_group: None,
        }
    }

    /// Run the isolated sweep of another kind than the sum all-reduce on
    /// group `id` (every rank; the caller declares it in the shard header).
    pub fn with_sweep_group(mut self, id: u32) -> Self {
        self.sweep_group = Some(id);
        self
    }

    /// Run every group-0 all-reduce `n` times back to back (the negative
    /// control `--inject-repeat`): the `n - 1` extra runs
    /// ([`Backend::extra_allreduce`]) complete inside the recorded collective,
    /// between its issue time and the real issue, so the event spans all `n`,
    /// and `--check` validates the last (the all-reduce is out of place: a
    /// repeat leaves the result as one run does). Trace collectives other
    /// than the world's all-reduce run once; `rank` accepts `--inject-repeat`
    /// on the cpu backend only.
    pub fn with_repeat(mut self, n: u32) -> Self {
        self.repeat = n.max(1);
        self
    }

    /// Bound every barrier by `t` (a stopped peer then fails the job with
    /// `refused[COLLECTIVE_TIMEOUT]` instead of blocking it forever).
    pub fn with_barrier_timeout(mut self, t: std::time::Duration) -> Self {
        self.barrier_timeout = Some(t);
        self
    }

    /// A barrier on the world, bounded when a timeout is set.
    fn barrier(&self, what: &str, phase: Phase) -> Result<()> {
        match self.barrier_timeout {
            Some(limit) => {
                let phase = format!("phase {phase}");
                crate::backend::mpi_deadline::barrier(self.world, limit, crate::backend::mpi_deadline::Op { what, phase: &phase, peer: None })
            }
            None => {
                self.world.barrier();
                Ok(())
            }
        }
    }

    /// Run every phase of the spec in order.
    pub fn run_all(&mut self) -> Result<()> {
        for &phase in &self.spec.phases.clone() {
            if phase.needs_trace() && self.file_trace.is_none() && self.spec.graph {
                crate::refuse!(
                    crate::core::refusal::Code::BadArgument,
                    "phase {phase} under --graph needs --trace FILE: graph mode records no per-collective gaps of this run's blocking phase"
                );
            }
            if phase.needs_trace() && self.file_trace.is_none() && !self.phase_runs.iter().any(|p| p.phase == Phase::Blocking) {
                crate::refuse!(
                    crate::core::refusal::Code::BadArgument,
                    "phase {phase} needs a source trace: list blocking before it in --phases, or pass --trace FILE"
                );
            }
            self.run_phase(phase).with_context(|| format!("phase {phase}"))?;
        }
        Ok(())
    }

    fn source_trace(&self) -> SourceTrace {
        match &self.file_trace {
            Some(t) => t.clone(),
            None => {
                let run = self.phase_runs.iter().find(|p| p.phase == Phase::Blocking).expect("checked in run_all");
                crate::evidence::trace::from_blocking_events(run, &self.body.collectives)
            }
        }
    }

    fn run_phase(&mut self, phase: Phase) -> Result<()> {
        let before = self.body.collectives.len();
        self.checked_in_phase = 0;
        let (quantum_ns, trace) = match phase {
            Phase::Fill | Phase::Overlap | Phase::AsyncWaitImmediate => (Some(self.calibrate(ComputeKind::Gemm)?), Some(self.source_trace())),
            Phase::MemboundFill => (Some(self.calibrate(ComputeKind::Membound)?), Some(self.source_trace())),
            Phase::Replay | Phase::HostDelay => (None, Some(self.source_trace())),
            _ => (None, None),
        };
        if let Some(ops) = trace.as_ref().and_then(|t| t.ops.as_ref()) {
            if self.spec.graph {
                crate::refuse!(
                    crate::core::refusal::Code::BadArgument,
                    "phase {phase} under --graph walks only world all-reduces: pass --trace-allreduce-only, or leave out --graph to run every kind of the trace"
                );
            }
            if !self.ops_prepared {
                // collective over the world (communicator splits): every rank is here, before its first trace phase
                self.backend.prepare_trace_ops(&ops.trace, &ops.colls)?;
                self.ops_prepared = true;
            }
        }
        if self.phase_runs.is_empty() {
            crate::backend::mpi_deadline::test_stop_point("phase", self.rank);
        }
        self.barrier("barrier before the phase", phase)?;
        self.current_phase = Some(phase);
        // a blocking collective on the compute stream (PyTorch's synchronous
        // collective) or on its own; every other phase issues asynchronously
        let on_compute = phase == Phase::Blocking && self.spec.comm_stream == crate::core::workload::CommStream::Current;
        self.backend.collectives_on_compute_stream(on_compute)?;
        let start_ns = self.clock.now_ns();
        let mut graph = None;
        match phase {
            Phase::Isolated => self.isolated()?,
            Phase::Blocking | Phase::Async if self.spec.graph => graph = Some(self.graph_phase(phase)?),
            Phase::Fill | Phase::Overlap | Phase::MemboundFill if self.spec.graph => {
                let q = quantum_ns.expect("fill phases are calibrated");
                graph = Some(self.graph_traced(phase, trace.as_ref().expect("trace phases have a trace"), q)?)
            }
            Phase::Blocking => self.blocking()?,
            Phase::Async => self.async_phase()?,
            _ => self.traced(phase, trace.as_ref().expect("trace phases have a trace"), quantum_ns)?,
        }
        self.backend.synchronize()?;
        let end_ns = self.clock.now_ns();
        let (anchor_error_ns, kernel_anchor) = self.resolve_device_times(before)?;
        self.barrier("barrier after the phase", phase)?;
        let n = (self.body.collectives.len() - before) as u64;
        self.phase_runs.push(PhaseRun {
            phase,
            start_ns,
            end_ns,
            device_anchor_error_ns: anchor_error_ns,
            quantum_ns,
            trace_timeline: trace.as_ref().map(|t| t.timeline),
            trace: trace.map(|t| t.origin),
            collectives: n,
            graph,
            kernel_anchor,
        });
        if self.progress && self.rank == 0 {
            eprintln!("commcanary: phase {phase:<20} {n:>6} collectives  {:>10.3} ms (rank 0)", (end_ns - start_ns) as f64 / 1e6);
        }
        Ok(())
    }

    /// Put the pass's device intervals and marks onto its events; returns the
    /// pass's anchor error and how its kernel records were anchored.
    fn resolve_device_times(&mut self, first_collective: usize) -> Result<(Option<u64>, Option<crate::evidence::shard::KernelAnchor>)> {
        let t = self.backend.finish_pass()?;
        // the backend times what it issued: group 0's collectives (the trace executor's run to completion on the host)
        let mut events: Vec<&mut CollectiveEvent> = self.body.collectives[first_collective..].iter_mut().filter(|e| e.group == 0).collect();
        if t.collectives.len() != events.len() {
            bail!("internal: backend reported {} device intervals for {} collectives", t.collectives.len(), events.len());
        }
        for (e, iv) in events.iter_mut().zip(&t.collectives) {
            e.device_start_ns = iv.map(|d| d.start_ns);
            e.device_end_ns = iv.map(|d| d.end_ns);
        }
        if !t.waits.is_empty() {
            if t.waits.len() != events.len() {
                bail!("internal: backend reported {} device waits for {} collectives", t.waits.len(), events.len());
            }
            let waits: Vec<crate::evidence::shard::DeviceWait> = events
                .iter()
                .zip(&t.waits)
                .filter_map(|(e, w)| w.map(|w| crate::evidence::shard::DeviceWait { group: e.group, seq: e.seq, start_ns: w.start_ns, end_ns: w.end_ns }))
                .collect();
            self.body.device_waits.extend(waits);
        }
        let phase = self.current_phase;
        for k in t.kernels {
            let name = match self.body.kernel_names.iter().position(|n| *n == k.name) {
                Some(i) => i as u32,
                None => {
                    self.body.kernel_names.push(k.name);
                    (self.body.kernel_names.len() - 1) as u32
                }
            };
            if let Some(phase) = phase {
                self.body.kernels.push(crate::evidence::shard::KernelEvent {
                    phase,
                    kind: k.kind,
                    name,
                    start_ns: k.start_ns,
                    end_ns: k.end_ns,
                    stream: k.stream,
                    correlation: k.correlation,
                });
            }
        }
        for (target, id) in std::mem::take(&mut self.pending_marks) {
            let ns = *t.marks_ns.get(id).ok_or_else(|| anyhow::anyhow!("internal: mark {id} was not resolved"))?;
            match target {
                MarkTarget::ComputeStart(i) => self.body.compute[i].start_ns = ns,
                MarkTarget::ComputeEnd(i) => self.body.compute[i].end_ns = ns,
                MarkTarget::TokenStart(i) => self.body.tokens[i].start_ns = ns,
                MarkTarget::TokenEnd(i) => self.body.tokens[i].end_ns = ns,
            }
        }
        Ok((t.anchor_error_ns, t.kernel_anchor))
    }

    fn begin_token(&mut self, token: u32, warmup: bool) -> Result<OpenToken> {
        let start_mark = self.backend.mark()?;
        Ok(OpenToken { token, warmup, start_ns: self.clock.now_ns(), start_mark })
    }

    /// Close a token. `host_end_ns` is the host-side end (the last completion
    /// known to the host); a device mark replaces both ends where the backend has one.
    fn end_token(&mut self, phase: Phase, t: OpenToken, host_end_ns: u64) -> Result<()> {
        let end_mark = self.backend.mark()?;
        let idx = self.body.tokens.len();
        self.body.tokens.push(TokenEvent { phase, token: t.token, warmup: t.warmup, start_ns: t.start_ns, end_ns: host_end_ns });
        if let (Some(s), Some(e)) = (t.start_mark, end_mark) {
            self.pending_marks.push((MarkTarget::TokenStart(idx), s));
            self.pending_marks.push((MarkTarget::TokenEnd(idx), e));
        }
        Ok(())
    }

    /// Median duration of one unit of `kind`, after warm-up.
    fn calibrate(&mut self, kind: ComputeKind) -> Result<u64> {
        // Each sample times a batch of 1 and a batch of 1 + BATCH units, each
        // fenced by device synchronization (so that an asynchronous backend
        // is timed on execution, not on enqueue), and takes the difference
        // over BATCH: the fence's fixed cost (tens of µs on a GPU, more than
        // a small GEMM) cancels. The median of 9 samples after 2 warm-ups.
        const BATCH: u32 = 8;
        let mut v = Vec::with_capacity(9);
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
                v.push((many.saturating_sub(one) / BATCH as u64).max(1));
            }
        }
        // calibration work is not part of the pass
        let _ = self.backend.finish_pass()?;
        v.sort_unstable();
        Ok(v[v.len() / 2].max(1))
    }

    fn compute(&mut self, work: Work) -> Result<()> {
        match work {
            Work::Unit(ComputeKind::Gemm, units) => Ok(self.backend.gemm(0, 0, units)?),
            Work::Unit(ComputeKind::Membound, units) => Ok(self.backend.membound(units)?),
            Work::Unit(ComputeKind::HostDelay, _) => bail!("internal: host delay is not a compute kernel"),
            Work::Layer(gemms, layer) => Ok(gemms.iter().try_for_each(|&g| self.backend.gemm(g, layer, 1))?),
        }
    }

    fn timed_compute(&mut self, phase: Phase, work: Work, token: Option<u32>, layer: Option<u32>) -> Result<()> {
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
    fn collective(&mut self, phase: Phase, bytes: u64, dtype: Dtype, pos: Position, between: Between) -> Result<usize> {
        let (seq, injected) = self.next_arrival();
        let host_issue_ns = self.clock.now_ns();
        for _ in 1..self.repeat {
            self.backend.extra_allreduce(bytes, dtype)?;
        }
        self.backend.issue_allreduce(bytes, dtype)?;
        let host_return_ns = self.clock.now_ns();
        self.between(phase, between)?;
        let wait_start_ns = self.clock.now_ns();
        let device = self.backend.wait_allreduce()?;
        let wait_end_ns = self.clock.now_ns();
        let checked = !pos.warmup && self.checked_in_phase < self.spec.check;
        if checked {
            self.checked_in_phase += 1;
            self.check(phase, seq, bytes, dtype)?;
        }
        self.body.collectives.push(CollectiveEvent {
            phase,
            kind: CollectiveKind::AllReduce,
            group: 0,
            seq,
            bytes,
            dtype,
            token: pos.token,
            layer: pos.layer,
            iter: pos.iter,
            warmup: pos.warmup,
            host_issue_ns,
            host_return_ns,
            wait_start_ns,
            wait_end_ns,
            device_start_ns: device.map(|d| d.start_ns),
            device_end_ns: device.map(|d| d.end_ns),
            injected_delay_ns: injected,
            replay: None,
            fill: None,
            checked,
            root: None,
            peer: None,
        });
        Ok(self.body.collectives.len() - 1)
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
                self.body.compute.push(ComputeEvent { phase, kind: ComputeKind::HostDelay, token, layer, units: 1, start_ns: s, end_ns: e });
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
    fn trace_op(&mut self, phase: Phase, op: TraceOp, (bytes, dtype): (u64, Dtype), pos: Position, before: Between) -> Result<usize> {
        self.between(phase, before)?;
        let (kind, rank) = (op.kind, self.rank);
        let pair = match (kind, op.peer) {
            (CollectiveKind::Send, Some(p)) => Some((rank, p)),
            (CollectiveKind::Recv, Some(p)) => Some((p, rank)),
            (CollectiveKind::Send | CollectiveKind::Recv, None) => bail!("internal: {} without a peer", kind.name()),
            _ => None,
        };
        let counter = self.op_seq.entry((op.group, pair)).or_insert(0);
        let seq = *counter;
        *counter += 1;
        // a result lands on every member, except a send's (its receiver checks), a barrier's and a reduce's off the root
        let has_result = match kind {
            CollectiveKind::Send | CollectiveKind::Barrier => false,
            CollectiveKind::Reduce => op.root == Some(rank),
            _ => true,
        };
        let checked = has_result && !pos.warmup && self.checked_in_phase < self.spec.check;
        let corrupt = self.fault == Some(Fault::WrongSum { rank });
        let c = &self.file_trace.as_ref().and_then(|t| t.ops.as_ref()).context("internal: a trace collective without the trace")?.colls[op.index];
        let host_issue_ns = self.clock.now_ns();
        self.backend.run_trace_op(op.index, c, crate::core::workload::ReduceOp::Sum, checked)?;
        let wait_end_ns = self.clock.now_ns();
        // the check reads the result back after the timed call, never inside it
        let found = if checked { Some(self.backend.check_trace_op(op.index, c, crate::core::workload::ReduceOp::Sum, corrupt)?) } else { None };
        if checked {
            self.checked_in_phase += 1;
            if let Some(why) = found.and_then(|f| f.first_wrong) {
                bail!("result check failed on rank {rank}, phase {phase}, group {} seq {seq} ({} of {bytes} bytes): {why}", op.group, kind.name());
            }
            self.checks.push(CheckRecord { phase, group: op.group, seq, bytes, wrong_elements: 0, first_wrong: None });
        }
        self.body.collectives.push(CollectiveEvent {
            phase,
            kind,
            group: op.group,
            seq,
            bytes,
            dtype,
            token: pos.token,
            layer: pos.layer,
            iter: pos.iter,
            warmup: pos.warmup,
            host_issue_ns,
            host_return_ns: wait_end_ns,
            wait_start_ns: wait_end_ns,
            wait_end_ns,
            device_start_ns: None,
            device_end_ns: None,
            injected_delay_ns: None,
            replay: None,
            fill: None,
            checked,
            root: op.root,
            peer: op.peer,
        });
        Ok(self.body.collectives.len() - 1)
    }

    /// The next collective's sequence number, after the negative controls
    /// that act before an arrival (a hang fault, an injected delay); returns
    /// the sequence number and the delay achieved, if any.
    fn next_arrival(&mut self) -> (u64, Option<u64>) {
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
    fn check(&mut self, phase: Phase, seq: u64, bytes: u64, dtype: Dtype) -> Result<()> {
        if self.fault == Some(Fault::WrongSum { rank: self.rank }) {
            self.backend.corrupt_last_result();
        }
        let outcome = self.backend.check_last_allreduce(bytes, dtype)?;
        self.checks.push(CheckRecord { phase, group: 0, seq, bytes, wrong_elements: outcome.wrong_elements, first_wrong: outcome.first_wrong.clone() });
        if let Some(why) = outcome.first_wrong {
            if phase != Phase::Isolated {
                bail!("result check failed on rank {}, phase {phase}, group 0 seq {seq} ({bytes} bytes of {}): {why}", self.rank, dtype.name());
            }
        }
        Ok(())
    }

    fn isolated(&mut self) -> Result<()> {
        let spec = self.spec;
        if spec.sweep_uses_executor() {
            return self.isolated_executor();
        }
        if self.backend.back_to_back() {
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
        let (trace, colls) = crate::rank::sweep::sweep_collectives(spec, self.world.size() as u32)?;
        // collective over the world (communicator splits): every rank is here
        self.backend.prepare_trace_ops(&trace, &colls)?;
        // an imported trace's collectives, if any, are prepared again before its first phase
        self.ops_prepared = false;
        let rank = self.rank;
        let has_result = kind.root().is_none_or(|r| kind != crate::core::workload::SweepKind::Reduce || r == rank);
        let corrupt = self.fault == Some(Fault::WrongSum { rank });
        let collective_kind = match kind {
            crate::core::workload::SweepKind::AllReduce => CollectiveKind::AllReduce,
            crate::core::workload::SweepKind::AllGather => CollectiveKind::AllGather,
            crate::core::workload::SweepKind::ReduceScatter => CollectiveKind::ReduceScatter,
            crate::core::workload::SweepKind::Broadcast => CollectiveKind::Broadcast,
            crate::core::workload::SweepKind::Reduce => CollectiveKind::Reduce,
            crate::core::workload::SweepKind::AllToAll => CollectiveKind::AllToAll,
        };
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
                self.backend.run_trace_op(i, c, op, checked)?;
                let end_ns = self.clock.now_ns();
                // the check reads the result back after the timed call, never inside it
                let found = if checked { Some(self.backend.check_trace_op(i, c, op, corrupt)?) } else { None };
                if let Some(f) = found {
                    self.checked_in_phase += 1;
                    self.checks.push(CheckRecord { phase: Phase::Isolated, group, seq, bytes, wrong_elements: f.wrong_elements, first_wrong: f.first_wrong });
                }
                self.body.collectives.push(CollectiveEvent {
                    phase: Phase::Isolated,
                    kind: collective_kind,
                    group,
                    seq,
                    bytes,
                    dtype: spec.dtype,
                    token: None,
                    layer: None,
                    iter: Some(iter),
                    warmup,
                    host_issue_ns,
                    host_return_ns: end_ns,
                    wait_start_ns: end_ns,
                    wait_end_ns: end_ns,
                    device_start_ns: None,
                    device_end_ns: None,
                    injected_delay_ns: None,
                    replay: None,
                    fill: None,
                    checked,
                    root: kind.root(),
                    peer: None,
                });
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
        self.backend.allreduce_back_to_back(bytes, self.spec.dtype)?;
        let host_return_ns = self.clock.now_ns();
        self.push_isolated(bytes, seq, iter, warmup, (host_issue_ns, host_return_ns), injected);
        Ok(())
    }

    /// The timed iterations of one size as one CUDA graph: one launch for all
    /// of them (delays and faults cannot act inside a graph).
    fn isolated_graph(&mut self, bytes: u64) -> Result<()> {
        let host = self.backend.allreduce_graph(bytes, self.spec.dtype, self.spec.iters)?;
        for i in 0..self.spec.iters {
            let seq = self.seq;
            self.seq += 1;
            self.push_isolated(bytes, seq, i, false, host, None);
        }
        Ok(())
    }

    fn push_isolated(&mut self, bytes: u64, seq: u64, iter: u32, warmup: bool, (host_issue_ns, host_return_ns): (u64, u64), injected: Option<u64>) {
        self.body.collectives.push(CollectiveEvent {
            phase: Phase::Isolated,
            kind: CollectiveKind::AllReduce,
            group: 0,
            seq,
            bytes,
            dtype: self.spec.dtype,
            token: None,
            layer: None,
            iter: Some(iter),
            warmup,
            host_issue_ns,
            host_return_ns,
            wait_start_ns: host_return_ns,
            wait_end_ns: host_return_ns,
            device_start_ns: None,
            device_end_ns: None,
            injected_delay_ns: injected,
            replay: None,
            fill: None,
            checked: false,
            root: None,
            peer: None,
        });
    }

    fn tokens(&self) -> impl Iterator<Item = (u32, bool)> {
        let w = self.spec.warmup_tokens;
        (0..w + self.spec.tokens).map(move |t| (t, t < w))
    }

    /// Each step: its GEMMs, then its all-reduce; the next step's GEMMs wait
    /// for the collective (a stream dependency on GPUs).
    fn blocking(&mut self) -> Result<()> {
        let per_token = self.spec.collectives_per_token();
        let dtype = self.spec.dtype;
        let mut index = 0u64;
        let tokens = self.tokens().collect::<Vec<_>>();
        let halfway = tokens.len() as u64 * per_token / 2;
        for (token, warmup) in tokens {
            let open = self.begin_token(token, warmup)?;
            for _ in 0..per_token {
                if index == halfway {
                    crate::backend::mpi_deadline::test_stop_point("mid-blocking", self.rank);
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
    fn async_phase(&mut self) -> Result<()> {
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
            self.backend.issue_allreduce(s.bytes, dtype)?;
            if phase == Phase::Async && i + 1 < per_token {
                let next = self.spec.step(i + 1);
                self.compute(Work::Layer(next.gemms, next.layer))?;
            }
            self.backend.wait_allreduce()?;
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
    fn graph_phase(&mut self, phase: Phase) -> Result<crate::evidence::shard::GraphRun> {
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
    fn graph_traced(&mut self, phase: Phase, trace: &SourceTrace, quantum_ns: u64) -> Result<crate::evidence::shard::GraphRun> {
        if trace.ops.is_some() {
            bail!("internal: graph mode with trace collectives other than world all-reduces");
        }
        let pick = trace.entries.iter().find(|e| !e.warmup).or(trace.entries.first()).map(|e| e.token);
        let Some(pick) = pick else { bail!("the source trace has no collectives") };
        let kind = if phase == Phase::MemboundFill { ComputeKind::Membound } else { ComputeKind::Gemm };
        let mut residual_ns: i64 = 0;
        let mut work = Vec::new();
        for e in trace.entries.iter().filter(|e| e.token == pick) {
            let (units, _) = quantize(e.compute_ns.unwrap_or(e.gap_ns), quantum_ns, &mut residual_ns, self.spec.fill_residual);
            work.push((units, e.bytes, e.dtype));
        }
        let units_per_token: u64 = work.iter().map(|w| w.0 as u64).sum();
        let timing = format!(
            "token boundaries: events on the compute stream before and after each graph launch; the token is the source trace's {} ({} collectives, {units_per_token} compute units of {quantum_ns} ns)",
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
                s.backend.issue_allreduce(bytes, dtype)?;
                if overlap && units > 0 {
                    s.compute(Work::Unit(kind, units))?;
                }
                s.backend.wait_allreduce()?;
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
    ) -> Result<crate::evidence::shard::GraphRun> {
        token(self)?;
        self.backend.synchronize()?;
        // the warm-up token is no part of the pass
        let _ = self.backend.finish_pass()?;
        self.backend.begin_graph()?;
        let captured = token(self);
        let ended = self.backend.end_graph();
        let (last_bytes, dtype) = captured?;
        ended?;
        let mut launches = 0u64;
        for (t, warmup) in self.tokens().collect::<Vec<_>>() {
            let open = self.begin_token(t, warmup)?;
            self.backend.launch_graph()?;
            launches += 1;
            let end = self.clock.now_ns();
            self.end_token(phase, open, end)?;
        }
        let mut checked = 0;
        if self.spec.check > 0 {
            self.backend.synchronize()?;
            if self.fault == Some(Fault::WrongSum { rank: self.rank }) {
                self.backend.corrupt_last_result();
            }
            if let Some(why) = self.backend.check_last_allreduce(last_bytes, dtype)?.first_wrong {
                bail!(
                    "result check failed on rank {}, phase {phase} (graph mode, last collective of the last launch, {last_bytes} bytes of {}): {why}",
                    self.rank,
                    dtype.name()
                );
            }
            checked = 1;
        }
        Ok(crate::evidence::shard::GraphRun { collectives_per_token, gemms_per_token, launches, timing, checked })
    }

    /// Replay, fill, overlap and the ablations: walk the source trace (an
    /// entry with a [`TraceOp`] through [`Self::trace_op`], its overlap
    /// compute or host-delay spin before it).
    fn traced(&mut self, phase: Phase, trace: &SourceTrace, quantum_ns: Option<u64>) -> Result<()> {
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
                None => self.collective(phase, bytes, dtype, pos, between)?,
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
fn quantize(gap_ns: u64, quantum_ns: u64, residual_ns: &mut i64, policy: FillResidual) -> (u32, i64) {
    let want = gap_ns as i64 + *residual_ns;
    let units = if want <= 0 { 0 } else { (want as f64 / quantum_ns as f64).round() as u32 };
    let err = units as i64 * quantum_ns as i64 - want;
    *residual_ns = match policy {
        FillResidual::Carry => -err,
        FillResidual::Drop => 0,
    };
    (units, err)
}
