//! A backend that runs nothing and logs every call, so that the phase runner
//! can be driven in unit tests without MPI, a GPU or a second process.
//! Consumes the runner's calls; produces a log of them, one interval per
//! timed world call (each a fixed width on a fake device clock, or none, as a
//! CPU has), and checks that find no wrong element unless told to corrupt.
//! Refuses what the real backends refuse: a wait with nothing outstanding, a
//! second outstanding call, a point-to-point step or trace call unprepared.
use crate::backend::{Backend, BackendError, BackendInfo, BackendResult, Call, CheckOutcome, Checked, Compute};
use crate::backend::{DeviceInterval, GraphStep, PassTimings, Timing};
use crate::core::workload::{GemmShape, Phase, WorkloadSpec};
use crate::evidence::commtrace::p2p::P2pPlan;
use crate::evidence::commtrace::{CommTrace, TraceCollective};
use crate::evidence::shard::{BackendKind, DeviceIdentity, Unmeasured};
use std::time::Duration;

/// One call the runner made, as the log records it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Logged {
    /// A world call: kind name, bytes, timing.
    World(&'static str, u64, Timing),
    /// A trace call: index, timing.
    Trace(usize, Timing),
    /// A point-to-point step.
    P2p(usize),
    /// The completion of a posted trace call.
    Complete(usize),
    /// A trace call's result emptied before a checked call.
    Clear(usize),
    /// A world call's result emptied before a checked call or run: kind name, bytes.
    ClearWorld(&'static str, u64),
    Wait,
    EndBackToBack,
    Gemm {
        shape: usize,
        layer: u32,
        units: u32,
    },
    Membound(u32),
    Mark,
    Synchronize,
    FinishPass(usize),
    /// A check: of the last world call (`true`) or of a trace call, and whether corrupted.
    Check(bool, bool),
    Barrier(String),
    Prepare(usize),
    Graph(GraphStep),
}

/// The mock: `back_to_back` chooses the isolated phase's path, `device` whether
/// world calls get device intervals (a GPU's) and marks.
#[derive(Default)]
pub(crate) struct MockBackend {
    pub log: Vec<Logged>,
    back_to_back: bool,
    device: bool,
    outstanding: bool,
    timed_in_pass: usize,
    marks_in_pass: usize,
    prepared: usize,
    /// Posted trace calls not yet completed.
    posted: Vec<usize>,
    p2p: bool,
    rank: u32,
    world_size: u32,
    capturing: bool,
}

impl MockBackend {
    pub fn new(back_to_back: bool, device: bool) -> Self {
        Self { back_to_back, device, world_size: 1, ..Default::default() }
    }

    /// The mock as rank `rank` of `world_size` (it still runs nothing).
    pub fn with_rank(mut self, rank: u32, world_size: u32) -> Self {
        (self.rank, self.world_size) = (rank, world_size);
        self
    }
}

impl Backend for MockBackend {
    fn info(&self) -> BackendInfo {
        let kind = if self.device { BackendKind::Cuda } else { BackendKind::Cpu };
        BackendInfo { kind, rank: self.rank, world_size: self.world_size, back_to_back: self.back_to_back }
    }

    fn device(&self) -> DeviceIdentity {
        DeviceIdentity { backend: self.info().kind, name: "mock".into(), facts: Vec::new() }
    }

    fn unmeasured(&self) -> Vec<Unmeasured> {
        Vec::new()
    }

    fn prepare(&mut self, _trace: &CommTrace, colls: &[TraceCollective], p2p: Option<&P2pPlan>) -> BackendResult<()> {
        self.prepared = colls.len();
        self.p2p = p2p.is_some();
        self.log.push(Logged::Prepare(colls.len()));
        Ok(())
    }

    fn enqueue(&mut self, call: Call<'_>, timing: Timing) -> BackendResult<()> {
        if self.outstanding {
            return Err(BackendError::Misuse("internal: a collective is already outstanding".into()));
        }
        match call {
            Call::World { kind, bytes, .. } => {
                self.log.push(Logged::World(kind.name(), bytes, timing));
                self.outstanding = timing == Timing::Async;
                if timing != Timing::Untimed && !self.capturing {
                    self.timed_in_pass += 1;
                }
            }
            Call::Trace { index, .. } if index < self.prepared => {
                if timing == Timing::Async {
                    self.posted.push(index);
                }
                self.log.push(Logged::Trace(index, timing))
            }
            Call::Clear(index) if index < self.prepared && !self.posted.contains(&index) => {
                self.log.push(Logged::Clear(index))
            }
            Call::ClearWorld { kind, bytes, .. } if !self.capturing => {
                self.log.push(Logged::ClearWorld(kind.name(), bytes))
            }
            Call::Complete(index) if self.posted.contains(&index) => {
                self.posted.retain(|&i| i != index);
                self.log.push(Logged::Complete(index))
            }
            Call::P2pStep(k) if self.p2p => self.log.push(Logged::P2p(k)),
            _ => return Err(BackendError::Misuse("internal: not prepared".into())),
        }
        Ok(())
    }

    fn wait(&mut self) -> BackendResult<Option<DeviceInterval>> {
        if !std::mem::take(&mut self.outstanding) {
            return Err(BackendError::Misuse("internal: wait without an outstanding collective".into()));
        }
        self.log.push(Logged::Wait);
        Ok(None)
    }

    fn end_back_to_back(&mut self) -> BackendResult<()> {
        self.log.push(Logged::EndBackToBack);
        Ok(())
    }

    fn collectives_on_compute_stream(&mut self, _on: bool) -> BackendResult<()> {
        Ok(())
    }

    fn compute(&mut self, work: Compute) -> BackendResult<()> {
        self.log.push(match work {
            Compute::Gemm { shape, layer, units } => Logged::Gemm { shape, layer, units },
            Compute::Membound(units) => Logged::Membound(units),
        });
        Ok(())
    }

    fn mark(&mut self) -> BackendResult<Option<usize>> {
        if !self.device {
            return Ok(None);
        }
        self.log.push(Logged::Mark);
        self.marks_in_pass += 1;
        Ok(Some(self.marks_in_pass - 1))
    }

    fn synchronize(&mut self) -> BackendResult<()> {
        self.outstanding = false;
        self.log.push(Logged::Synchronize);
        Ok(())
    }

    fn finish_pass(&mut self) -> BackendResult<PassTimings> {
        let n = std::mem::take(&mut self.timed_in_pass);
        let marks = std::mem::take(&mut self.marks_in_pass);
        self.log.push(Logged::FinishPass(n));
        // each call 1 µs on the fake device clock, one after another
        let iv = |i: usize| {
            self.device.then_some(DeviceInterval { start_ns: 1_000 * i as u64, end_ns: 1_000 * (i as u64 + 1) })
        };
        Ok(PassTimings {
            collectives: (0..n).map(iv).collect(),
            marks_ns: (0..marks as u64).map(|m| 500 * m).collect(),
            ..Default::default()
        })
    }

    fn check(&mut self, what: Checked<'_>, corrupt: bool) -> BackendResult<CheckOutcome> {
        self.log.push(Logged::Check(matches!(what, Checked::Last { .. }), corrupt));
        Ok(if corrupt {
            CheckOutcome { wrong_elements: 1, first_wrong: Some("element 0: 2 instead of 1".into()) }
        } else {
            CheckOutcome { wrong_elements: 0, first_wrong: None }
        })
    }

    fn end_p2p_pass(&mut self, check: bool, _corrupt: bool) -> BackendResult<Option<u64>> {
        Ok(check.then_some(0))
    }

    fn graph(&mut self, step: GraphStep) -> BackendResult<Option<(u64, u64)>> {
        if !self.device {
            return Err(BackendError::Unsupported("the mock backend has graphs only as a device".into()));
        }
        self.log.push(Logged::Graph(step));
        self.capturing = match step {
            GraphStep::Begin => true,
            GraphStep::End => false,
            _ => self.capturing,
        };
        Ok(match step {
            GraphStep::Calls { n, .. } => {
                self.timed_in_pass += n as usize;
                Some((1, 2))
            }
            _ => None,
        })
    }

    fn barrier(&mut self, what: &str, _phase: &str, _timeout: Option<Duration>) -> anyhow::Result<()> {
        self.log.push(Logged::Barrier(what.into()));
        Ok(())
    }
}

/// A small spec of `phases` for the runner's tests: two sizes, `iters` timed
/// iterations after one warm-up, one check; two tokens of two layers after a warm-up token.
pub(crate) fn spec(phases: &[Phase], iters: u32) -> WorkloadSpec {
    let mut s = WorkloadSpec::isolated_only(64, iters, GemmShape { m: 4, n: 4, k: 4 });
    s.phases = phases.to_vec();
    (s.sizes_bytes, s.warmup_iters, s.check) = (vec![64, 128], 1, 1);
    (s.tokens, s.warmup_tokens, s.layers) = (2, 1, 2);
    s
}

#[cfg(test)]
mod tests {
    use super::{Logged, MockBackend};
    use crate::backend::Timing;
    use crate::core::clock::RankClock;
    use crate::core::workload::{Phase, ReduceOp, SweepKind, WorkloadSpec};
    use crate::rank::phases::{Fault, Runner, RunnerControls};

    fn spec(phases: &[Phase]) -> WorkloadSpec {
        super::spec(phases, 3)
    }

    /// Per recorded collective: bytes, warm-up, device start.
    type Events = Vec<(u64, bool, Option<u64>)>;

    fn run(
        back_to_back: bool,
        device: bool,
        s: &WorkloadSpec,
        fault: Option<Fault>,
    ) -> (anyhow::Result<()>, MockBackend, Events) {
        let mut b = MockBackend::new(back_to_back, device);
        let clock = RankClock::new(0, &[]);
        let mut r = Runner::new(&mut b, &clock, s, RunnerControls { fault, ..Default::default() });
        let res = r.run_all();
        let events = r.body.collectives.iter().map(|e| (e.bytes, e.warmup, e.device_start_ns)).collect();
        (res, b, events)
    }

    /// The log's entries that `f` names, space-separated.
    fn trail(log: &[Logged], f: impl Fn(&Logged) -> Option<String>) -> String {
        log.iter().filter_map(f).collect::<Vec<_>>().join(" ")
    }

    fn worlds(log: &[Logged]) -> Vec<(u64, Timing)> {
        log.iter().filter_map(|l| if let Logged::World(_, b, t) = l { Some((*b, *t)) } else { None }).collect()
    }

    /// The isolated sweep without back-to-back runs: per size, a warm-up and
    /// three timed iterations, each started and waited for, the first timed
    /// one checked; every call recorded once, in order, between two barriers.
    #[test]
    fn isolated_waits_for_each_call_and_checks_per_size() {
        let s = spec(&[Phase::Isolated]);
        let (res, b, ev) = run(false, false, &s, None);
        res.unwrap();
        let want: Vec<(u64, Timing)> = [64u64, 128].iter().flat_map(|&x| [(x, Timing::Async); 4]).collect();
        assert_eq!(worlds(&b.log), want);
        assert_eq!(
            ev.iter().map(|e| (e.0, e.1)).collect::<Vec<_>>(),
            [64, 64, 64, 64, 128, 128, 128, 128]
                .iter()
                .zip([true, false, false, false].iter().cycle())
                .map(|(&x, &w)| (x, w))
                .collect::<Vec<_>>()
        );
        assert_eq!(b.log.iter().filter(|l| **l == Logged::Wait).count(), 8);
        assert_eq!(b.log.iter().filter(|l| matches!(l, Logged::Check(true, false))).count(), 2);
        assert_eq!(b.log.first(), Some(&Logged::Barrier("barrier before the phase".into())));
        assert_eq!(b.log.last(), Some(&Logged::Barrier("barrier after the phase".into())));
    }

    /// Back to back (a GPU): warm-ups, a synchronization and a barrier, the
    /// timed iterations enqueued with no wait, closed, one check per size;
    /// the device intervals land on the records in issue order.
    #[test]
    fn isolated_back_to_back_enqueues_without_waits() {
        let s = spec(&[Phase::Isolated]);
        let (res, b, ev) = run(true, true, &s, None);
        res.unwrap();
        assert!(worlds(&b.log).iter().all(|w| w.1 == Timing::BackToBack), "{:?}", b.log);
        assert_eq!(worlds(&b.log).len(), 8);
        assert!(!b.log.contains(&Logged::Wait));
        assert_eq!(b.log.iter().filter(|l| **l == Logged::EndBackToBack).count(), 2);
        assert_eq!(b.log.iter().filter(|l| matches!(l, Logged::Check(true, false))).count(), 2);
        assert_eq!(ev.iter().map(|e| e.2).collect::<Vec<_>>(), (0..8).map(|i| Some(1_000 * i)).collect::<Vec<_>>());
    }

    /// Another kind of the sweep (all-gather) runs back to back through the
    /// same world calls as the all-reduce: recorded on the sweep's group with
    /// one member's input as its bytes, its device intervals on the records,
    /// one check per size; without back-to-back calls the same world calls
    /// are started and waited for; another reduction runs on the trace
    /// executor, prepared once.
    #[test]
    fn another_kind_sweeps_back_to_back_through_world_calls() {
        let mut s = spec(&[Phase::Isolated]);
        s.isolated_collective = Some(<SweepKind as clap::ValueEnum>::from_str("all_gather", false).unwrap());
        let mut b = MockBackend::new(true, true);
        let clock = RankClock::new(0, &[]);
        let mut r = Runner::new(&mut b, &clock, &s, RunnerControls::default()).with_sweep_group(7);
        r.run_all().unwrap();
        let ev: Vec<_> =
            r.body.collectives.iter().map(|e| (e.group, e.bytes, e.device_start_ns.is_some(), e.checked)).collect();
        assert_eq!(ev.len(), 8);
        assert!(ev.iter().all(|e| e.0 == 7 && e.2), "{ev:?}");
        assert_eq!(ev.iter().filter(|e| e.3).count(), 2, "one check per size");
        assert_eq!(r.checks.iter().map(|c| (c.group, c.bytes)).collect::<Vec<_>>(), [(7, 64), (7, 128)]);
        assert_eq!(worlds(&b.log), [64u64, 128].iter().flat_map(|&x| [(x, Timing::BackToBack); 4]).collect::<Vec<_>>());
        assert!(b.log.iter().all(|l| !matches!(l, Logged::World(k, ..) if *k != "all_gather")));
        let mut b = MockBackend::new(false, false);
        let mut r = Runner::new(&mut b, &clock, &s, RunnerControls::default()).with_sweep_group(7);
        r.run_all().unwrap();
        assert_eq!(worlds(&b.log), [64u64, 128].iter().flat_map(|&x| [(x, Timing::Async); 4]).collect::<Vec<_>>());
        assert!(!b.log.iter().any(|l| matches!(l, Logged::Prepare(_) | Logged::Trace(..))));
        // another reduction than the sum runs on the trace executor, prepared once
        s.isolated_op = Some(<ReduceOp as clap::ValueEnum>::from_str("max", false).unwrap());
        s.isolated_collective = None;
        let mut b = MockBackend::new(true, true);
        let mut r = Runner::new(&mut b, &clock, &s, RunnerControls::default()).with_sweep_group(7);
        r.run_all().unwrap();
        assert!(worlds(&b.log).is_empty());
        assert_eq!(b.log.iter().filter(|l| matches!(l, Logged::Prepare(2))).count(), 1);
        assert_eq!(b.log.iter().filter(|l| matches!(l, Logged::Trace(_, Timing::HostWait))).count(), 8);
    }

    /// Blocking runs each step's GEMM before its all-reduce and waits; async
    /// issues, runs the next step's GEMM, then waits; sizes cycle per step;
    /// a warm-up token comes first.
    #[test]
    fn blocking_and_async_order_compute_around_the_collective() {
        let s = spec(&[Phase::Blocking, Phase::Async]);
        let (res, b, ev) = run(false, false, &s, None);
        res.unwrap();
        let steps = trail(&b.log, |l| match l {
            Logged::World(_, bytes, _) => Some(format!("C{bytes}")),
            Logged::Gemm { layer, .. } => Some(format!("G{layer}")),
            Logged::Wait => Some("W".into()),
            _ => None,
        });
        let blocking = "G0 C64 W G1 C128 W ".repeat(3);
        let asynchronous = "G0 C64 G1 W C128 W ".repeat(3);
        assert_eq!(steps + " ", blocking + &asynchronous);
        assert_eq!(ev.len(), 12);
        assert_eq!(ev.iter().filter(|e| e.1).count(), 4, "one warm-up token of two collectives per phase");
    }

    /// The negative control `--fault wrong-sum`: the isolated phase records the
    /// wrong result and goes on; a workload phase fails at once, naming it.
    #[test]
    fn a_corrupted_result_is_recorded_in_isolated_and_fails_a_workload_phase() {
        let fault = Some(Fault::WrongSum { rank: 0 });
        let (res, b, _) = run(false, false, &spec(&[Phase::Isolated]), fault);
        res.unwrap();
        assert_eq!(b.log.iter().filter(|l| matches!(l, Logged::Check(true, true))).count(), 2);
        let (res, _, _) = run(false, false, &spec(&[Phase::Blocking]), fault);
        let e = format!("{:#}", res.unwrap_err());
        assert!(e.contains("result check failed on rank 0, phase blocking"), "{e}");
    }

    /// `replay-trace`'s walk: the warm-up pass unchecked, then the timed
    /// pass's prepared call checked right after it, or at the pass's end
    /// (after the point-to-point step that follows it) with
    /// `with_checks_at_pass_end`.
    #[test]
    fn checks_at_a_pass_s_end_follow_its_last_call() {
        use crate::evidence::trace::{tests as traces, walk_comm_trace, ReplayPace, TraceWalk};
        let w = TraceWalk::Replay { op: None, pace: ReplayPace::None };
        let st = walk_comm_trace(&traces::mpi_trace(), std::path::Path::new("t"), "sha".into(), (0, 2), (1, 1), &w);
        let mut s = spec(&[Phase::Replay]);
        s.check = u32::MAX;
        for (at_end, timed) in [(false, "P0 P1 P2 T0 C P3"), (true, "P0 P1 P2 T0 P3 C")] {
            let mut b = MockBackend::new(false, false);
            let clock = RankClock::new(0, &[]);
            {
                let controls = RunnerControls { file_trace: Some(st.as_ref().unwrap().clone()), ..Default::default() };
                let r = Runner::new(&mut b, &clock, &s, controls);
                let mut r = if at_end { r.with_checks_at_pass_end() } else { r };
                r.run_all().unwrap();
                assert_eq!(r.checks.len(), 1);
            }
            let order = trail(&b.log, |l| match l {
                Logged::Trace(i, _) => Some(format!("T{i}")),
                Logged::P2p(k) => Some(format!("P{k}")),
                Logged::Check(false, _) => Some("C".into()),
                _ => None,
            });
            assert_eq!(order, format!("P0 P1 P2 T0 P3 {timed}"));
        }
    }

    /// A checked world result starts empty, so that an earlier call of the
    /// same size (which writes the same values) cannot pass for the checked
    /// one: cleared right before a started call that will be checked, before
    /// a checked back-to-back run's synchronization (after its warm-ups),
    /// and in graph mode after the eager token, before the capture.
    #[test]
    fn a_checked_world_result_starts_empty() {
        let order = |log: &[Logged]| {
            trail(log, |l| match l {
                Logged::World(_, b, _) => Some(format!("W{b}")),
                Logged::ClearWorld(_, b) => Some(format!("X{b}")),
                Logged::Check(true, _) => Some("C".into()),
                Logged::Synchronize => Some("S".into()),
                Logged::Graph(g) => Some(format!("{g:?}")),
                _ => None,
            })
        };
        let (res, b, _) = run(false, false, &spec(&[Phase::Isolated]), None);
        res.unwrap();
        let per_size = |x| format!("W{x} S X{x} W{x} C W{x} W{x}");
        assert_eq!(order(&b.log), format!("{} {} S", per_size(64), per_size(128)));
        let (res, b, _) = run(true, true, &spec(&[Phase::Isolated]), None);
        res.unwrap();
        let per_size = |x| format!("W{x} X{x} S W{x} W{x} W{x} C");
        assert_eq!(order(&b.log), format!("{} {} S", per_size(64), per_size(128)));
        // the model workload: the first timed call of the phase, after a warm-up token of two
        let (res, b, _) = run(false, false, &spec(&[Phase::Blocking]), None);
        res.unwrap();
        assert!(order(&b.log).starts_with("W64 W128 X64 W64 C W128 W64 W128"), "{}", order(&b.log));
        let mut s = spec(&[Phase::Blocking]);
        s.graph = true;
        let (res, b, _) = run(false, true, &s, None);
        res.unwrap();
        assert_eq!(order(&b.log), "W64 W128 X128 S Begin W64 W128 End Launch Launch Launch S C S");
        // unchecked: nothing is cleared
        let mut s = spec(&[Phase::Isolated, Phase::Blocking]);
        s.check = 0;
        for back_to_back in [false, true] {
            let (res, b, _) = run(back_to_back, back_to_back, &s, None);
            res.unwrap();
            assert!(!b.log.iter().any(|l| matches!(l, Logged::ClearWorld(..))));
        }
    }

    /// `--inject-repeat` runs the extra all-reduces untimed, inside the
    /// recorded one: the pass reports one interval per recorded call.
    #[test]
    fn repeats_are_untimed_and_not_recorded() {
        let s = spec(&[Phase::Blocking]);
        let mut b = MockBackend::new(false, true);
        let clock = RankClock::new(0, &[]);
        let mut r = Runner::new(&mut b, &clock, &s, RunnerControls::default()).with_repeat(3);
        r.run_all().unwrap();
        assert_eq!(r.body.collectives.len(), 6);
        assert!(r.body.collectives.iter().all(|e| e.device_start_ns.is_some()));
        assert_eq!(worlds(&b.log).iter().filter(|w| w.1 == Timing::Untimed).count(), 12);
    }
}
