//! The phase runner: executes the phases of docs/ARCHITECTURE.md §4 over any [`Backend`].
//!
//! Consumes a validated [`WorkloadSpec`], a backend and this rank's clock; barriers go through the
//! backend, so the runner holds no communicator and a mock backend drives it in unit tests.
//! Produces the shard body (collective, compute and token events) and one [`PhaseRun`] per phase.
//! Refuses a trace-consuming phase without a source trace, and any collective whose checked result
//! is wrong, naming rank, phase and sequence. An imported trace's other collectives and its
//! point-to-point steps run as [`crate::backend::Call::Trace`] and [`crate::backend::Call::P2pStep`],
//! prepared once before the first trace phase (graph mode refuses them). Blocking vocabulary (host
//! blocking, stream dependency, device synchronization): docs/METHODS.md, "Phase runner".
mod drive;
#[cfg(test)]
mod golden;
mod graph;
mod issue;
#[cfg(test)]
mod mock;
use crate::backend::{mpi_deadline, Backend};
use crate::core::clock::RankClock;
use crate::core::ranges;
use crate::core::refusal::Code;
use crate::core::workload::{CommStream, DelayInjection, Phase, WorkloadSpec};
use crate::evidence::commtrace::CommTrace;
use crate::evidence::schedule::Schedule;
use crate::evidence::shard::{
    CheckRecord, CollectiveEvent, ComputeKind, DeviceWait, KernelAnchor, KernelEvent, P2pPassRecord, PhaseRun,
    ShardBody, TokenEvent,
};
use crate::evidence::trace::from_blocking_events;
use crate::rank::sweep;
use anyhow::{bail, Context, Result};
use std::sync::Arc;

/// Negative-control faults (hidden `--fault`), for tests of the failure paths.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Fault {
    /// Corrupt rank `rank`'s reduced results so that `--check` must catch it.
    WrongSum { rank: u32 },
    /// Rank `rank` stops (sleeps) before issuing the collective with sequence
    /// number `seq`, so its peers' collectives never complete.
    Hang { rank: u32, seq: u64 },
}

impl Fault {
    /// Parse `wrong-sum:R` or `hang:R:SEQ`.
    pub fn parse(s: &str) -> anyhow::Result<Self> {
        let parts: Vec<&str> = s.split(':').collect();
        let num = |x: &str| x.parse::<u64>().map_err(|_| anyhow::anyhow!("--fault {s:?}: {x:?} is not a number"));
        let rank = |x: &str| -> anyhow::Result<u32> {
            let r = num(x)?;
            ranges::int("--fault rank", r, 0, ranges::MAX_RANK as u64)?;
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

/// A recorded collective's host times: issued, returned, waited from and to.
#[derive(Clone, Copy)]
struct HostTimes {
    issue_ns: u64,
    return_ns: u64,
    wait_start_ns: u64,
    wait_end_ns: u64,
}

/// What a phase measured of a collective beyond its host times.
#[derive(Clone, Copy, Default)]
struct EventExtra {
    /// A world call the backend times: its interval comes from the pass's end.
    timed: bool,
    device: Option<crate::backend::DeviceInterval>,
    injected_ns: Option<u64>,
    checked: bool,
}

impl HostTimes {
    /// A collective the host ran to completion in one call: it returned
    /// done, so its wait is empty at its return.
    fn blocking(issue_ns: u64, end_ns: u64) -> Self {
        HostTimes { issue_ns, return_ns: end_ns, wait_start_ns: end_ns, wait_end_ns: end_ns }
    }
}

/// What a [`Runner`] runs with besides its backend, clock, world and spec:
/// the negative controls, the source trace and progress output. The default
/// is a plain run: no injection, no fault, no file trace, quiet.
#[derive(Default)]
pub(crate) struct RunnerControls {
    /// Delay injected on one rank (`--inject-delay`), if any.
    pub delay: Option<DelayInjection>,
    /// Negative-control fault (hidden `--fault`), if any.
    pub fault: Option<Fault>,
    /// The shared source trace (`--trace`), if any; else the trace-consuming
    /// phases use this run's blocking phase.
    pub file_trace: Option<Schedule>,
    /// Print one line per phase on stderr (rank 0 only).
    pub progress: bool,
}

/// Runs phases on one rank.
pub(crate) struct Runner<'a, B: Backend> {
    backend: &'a mut B,
    clock: &'a RankClock,
    rank: u32,
    world_size: u32,
    spec: &'a WorkloadSpec,
    delay: Option<DelayInjection>,
    /// Runs of every group-0 all-reduce (`--inject-repeat`; 1 without it).
    repeat: u32,
    fault: Option<Fault>,
    file_trace: Option<Schedule>,
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
    /// A core for every local rank: injected delays under 1 ms and replay's
    /// pacing spin on the clock rather than sleep (a sleeping thread wakes
    /// late, and its next launch starts cold).
    spin_short_delays: bool,
    /// Barriers give up after this long (`--collective-timeout-s`), if set.
    barrier_timeout: Option<std::time::Duration>,
    /// Sequence numbers of the trace executor's groups: per group for
    /// collectives (`None`), per (sender, receiver) for point-to-point.
    op_seq: std::collections::BTreeMap<(u32, Option<(u32, u32)>), u64>,
    /// The trace whose groups and collectives the backend has prepared, if any.
    prepared: Option<Arc<CommTrace>>,
    /// The current phase's point-to-point passes, for its record.
    p2p_passes: Vec<P2pPassRecord>,
    /// The group id of the isolated sweep of another kind than the sum
    /// all-reduce ([`crate::rank::sweep`]), declared in the shard header.
    sweep_group: Option<u32>,
    /// Indices (into the body's collectives) of the pass's world calls, which
    /// the backend times, in issue order.
    timed: Vec<usize>,
    /// Check prepared calls at their pass's end ([`Self::with_checks_at_pass_end`]).
    checks_at_pass_end: bool,
}

/// A phase that walks a source trace, with neither `--trace` nor a blocking
/// phase before it (or under `--graph`, which records no per-collective gaps).
pub(crate) fn check_trace_phases(spec: &WorkloadSpec, has_trace: bool) -> Result<()> {
    if has_trace {
        return Ok(());
    }
    for (i, &phase) in spec.phases.iter().enumerate() {
        if !phase.needs_trace() {
            continue;
        }
        if spec.graph {
            crate::refuse!(
                Code::BadArgument,
                "phase {phase} under --graph needs --trace FILE: graph mode records no per-collective gaps of this \
                    run's blocking phase"
            );
        }
        if !spec.phases[..i].contains(&Phase::Blocking) {
            crate::refuse!(
                Code::BadArgument,
                "phase {phase} needs a source trace: list blocking before it in --phases, or pass --trace FILE"
            );
        }
    }
    Ok(())
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
    /// New runner; `controls` are the injections, the shared source trace
    /// and the progress flag ([`RunnerControls::default`]: none of them).
    pub fn new(backend: &'a mut B, clock: &'a RankClock, spec: &'a WorkloadSpec, controls: RunnerControls) -> Self {
        let RunnerControls { delay, fault, file_trace, progress } = controls;
        let info = backend.info();
        Self {
            rank: info.rank,
            world_size: info.world_size,
            backend,
            clock,
            spec,
            delay,
            repeat: 1,
            fault,
            file_trace,
            checked_in_phase: 0,
            pending_marks: Vec::new(),
            current_phase: None,
            body: ShardBody::default(),
            phase_runs: Vec::new(),
            checks: Vec::new(),
            progress,
            spin_short_delays: node_has_core_per_rank(info.world_size),
            barrier_timeout: None,
            op_seq: std::collections::BTreeMap::new(),
            prepared: None,
            p2p_passes: Vec::new(),
            sweep_group: None,
            timed: Vec::new(),
            checks_at_pass_end: false,
        }
    }

    /// Check a trace pass's prepared calls at its end, not after each call
    /// (`replay-trace`): only the pacing wait then lies between two calls. A
    /// checked call's result is cleared before it, and no call of a pass
    /// shares another's buffers, so a later check reads that call's result.
    pub fn with_checks_at_pass_end(mut self) -> Self {
        self.checks_at_pass_end = true;
        self
    }

    /// Run the isolated sweep of another kind than the sum all-reduce on
    /// group `id` (every rank; the caller declares it in the shard header).
    pub fn with_sweep_group(mut self, id: u32) -> Self {
        self.sweep_group = Some(id);
        self
    }

    /// Run every group-0 all-reduce `n` times back to back (`--inject-repeat`,
    /// cpu backend only), the extra runs [`crate::backend::Timing::Untimed`] inside
    /// the recorded one (docs/METHODS.md, "Calibrated units and injected delays").
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

    /// A barrier of the world's ranks, bounded when a timeout is set.
    fn barrier(&mut self, what: &str, phase: Phase) -> Result<()> {
        self.backend.barrier(what, &format!("phase {phase}"), self.barrier_timeout)
    }

    /// Run every phase of the spec in order.
    pub fn run_all(&mut self) -> Result<()> {
        check_trace_phases(self.spec, self.file_trace.is_some())?;
        for &phase in &self.spec.phases.clone() {
            self.run_phase(phase).with_context(|| format!("phase {phase}"))?;
        }
        Ok(())
    }

    fn source_trace(&self) -> Result<Schedule> {
        match &self.file_trace {
            Some(t) => Ok(t.clone()),
            None => {
                let run = self.phase_runs.iter().find(|p| p.phase == Phase::Blocking).expect("checked in run_all");
                from_blocking_events(run, &self.body.collectives)
            }
        }
    }

    fn run_phase(&mut self, phase: Phase) -> Result<()> {
        let before = self.body.collectives.len();
        self.checked_in_phase = 0;
        let (quantum_ns, schedule) = match phase {
            Phase::Fill | Phase::Overlap | Phase::AsyncWaitImmediate => {
                (Some(self.calibrate(ComputeKind::Gemm)?), self.source_trace()?)
            }
            Phase::MemboundFill => (Some(self.calibrate(ComputeKind::Membound)?), self.source_trace()?),
            Phase::Replay | Phase::HostDelay => (None, self.source_trace()?),
            Phase::Isolated => {
                let b2b = self.backend.info().back_to_back;
                (None, sweep::schedule(self.spec, self.world_size, self.sweep_group, b2b)?)
            }
            Phase::Blocking | Phase::Async => (None, Schedule::model(self.spec, phase)),
        };
        if let Some(p) = &schedule.prepared {
            if self.spec.graph && phase.needs_trace() {
                crate::refuse!(
                    Code::BadArgument,
                    "phase {phase} under --graph walks only world all-reduces: pass --trace-allreduce-only, or leave \
                        out --graph to run every kind of the trace"
                );
            }
            if !self.prepared.as_ref().is_some_and(|t| Arc::ptr_eq(t, &p.trace)) {
                // collective over the world (communicator splits): every rank is here, before the phase; the
                // point-to-point program runs on the same communicators
                self.backend.prepare(&p.trace, &p.colls, p.p2p.as_ref())?;
                self.prepared = Some(p.trace.clone());
            }
        }
        if self.phase_runs.is_empty() {
            mpi_deadline::test_stop_point("phase", self.rank);
        }
        self.barrier("barrier before the phase", phase)?;
        self.current_phase = Some(phase);
        // a blocking collective on the compute stream (PyTorch's synchronous
        // collective) or on its own; every other phase issues asynchronously
        let on_compute = phase == Phase::Blocking && self.spec.comm_stream == CommStream::Current;
        self.backend.collectives_on_compute_stream(on_compute)?;
        let start_ns = self.clock.now_ns();
        let mut graph = None;
        match phase {
            Phase::Blocking | Phase::Async if self.spec.graph => graph = Some(self.graph_phase(phase, &schedule)?),
            Phase::Fill | Phase::Overlap | Phase::MemboundFill if self.spec.graph => {
                let q = quantum_ns.expect("fill phases are calibrated");
                graph = Some(self.graph_traced(phase, &schedule, q)?)
            }
            _ => self.drive(phase, &schedule, quantum_ns)?,
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
            trace_timeline: schedule.source.as_ref().map(|t| t.1),
            trace: schedule.source.map(|t| t.0),
            collectives: n,
            graph,
            kernel_anchor,
            p2p: std::mem::take(&mut self.p2p_passes),
        });
        if self.progress && self.rank == 0 {
            eprintln!(
                "commcanary: phase {phase:<20} {n:>6} collectives  {:>10.3} ms (rank 0)",
                (end_ns - start_ns) as f64 / 1e6
            );
        }
        Ok(())
    }

    /// Put the pass's device intervals and marks onto its events; returns the
    /// pass's anchor error and how its kernel records were anchored.
    fn resolve_device_times(&mut self, first_collective: usize) -> Result<(Option<u64>, Option<KernelAnchor>)> {
        let t = self.backend.finish_pass()?;
        // the backend times its world calls (the trace executor's run to completion on the host)
        let timed = std::mem::take(&mut self.timed);
        if timed.iter().any(|&i| i < first_collective) {
            bail!("internal: a timed collective of an earlier pass");
        }
        let mut events: Vec<&mut CollectiveEvent> = self
            .body
            .collectives
            .iter_mut()
            .enumerate()
            .filter(|(i, _)| timed.binary_search(i).is_ok())
            .map(|(_, e)| e)
            .collect();
        if t.collectives.len() != events.len() {
            bail!(
                "internal: backend reported {} device intervals for {} collectives",
                t.collectives.len(),
                events.len()
            );
        }
        for (e, iv) in events.iter_mut().zip(&t.collectives) {
            e.device_start_ns = iv.map(|d| d.start_ns);
            e.device_end_ns = iv.map(|d| d.end_ns);
        }
        if !t.waits.is_empty() {
            if t.waits.len() != events.len() {
                bail!("internal: backend reported {} device waits for {} collectives", t.waits.len(), events.len());
            }
            let waits: Vec<DeviceWait> = events
                .iter()
                .zip(&t.waits)
                .filter_map(|(e, w)| {
                    w.map(|w| DeviceWait { group: e.group, seq: e.seq, start_ns: w.start_ns, end_ns: w.end_ns })
                })
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
                self.body.kernels.push(KernelEvent {
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
        self.body.tokens.push(TokenEvent {
            phase,
            token: t.token,
            warmup: t.warmup,
            start_ns: t.start_ns,
            end_ns: host_end_ns,
        });
        if let (Some(s), Some(e)) = (t.start_mark, end_mark) {
            self.pending_marks.push((MarkTarget::TokenStart(idx), s));
            self.pending_marks.push((MarkTarget::TokenEnd(idx), e));
        }
        Ok(())
    }

    fn tokens(&self) -> impl Iterator<Item = (u32, bool)> {
        let w = self.spec.warmup_tokens;
        (0..w + self.spec.tokens).map(move |t| (t, t < w))
    }
}
