//! The one driver: walks a phase's [`Schedule`] step by step on the backend and records what ran.
//!
//! Consumes the schedule (isolated sweep, model workload, source trace) and, for the trace phases,
//! the calibrated unit. A [`Step::Gap`] becomes what the phase makes of it: paced on the rank clock
//! (replay), filled with units before the call (fill, membound-fill, async-wait-immediate), run
//! beside it (overlap) or spun on the host (host-delay). Applies the negative controls at each
//! world arrival; point-to-point steps run in recorded order and their pass is recorded at the
//! token's end. A wrong result fails the phase at once, except in the isolated phase (recorded,
//! and the rank fails after its shard). Method: docs/METHODS.md, "Phase runner".
use super::{EventExtra, Fault, HostTimes, OpenToken, Runner, Work};
use crate::backend::{mpi_deadline, Backend, Call, Checked, GraphStep, Timing};
use crate::core::collective::{CollectiveKind, Lands};
use crate::core::workload::{Dtype, FillResidual, Phase, ReduceOp};
use crate::evidence::schedule::{CallStep, Issue, Schedule, Step, Target};
use crate::evidence::shard::{
    CheckRecord, CollectiveEvent, ComputeEvent, ComputeKind, FillRecord, P2pPassRecord, ReplayTiming,
};
use anyhow::{bail, Context, Result};

/// Work a gap places beside the next call: between issue and wait for a
/// started call, before one that completes on the host.
#[derive(Clone, Copy)]
enum Beside {
    Compute(Work),
    Spin(u64),
}

/// A started call waiting for its [`Step::Wait`].
struct InFlight {
    call: CallStep,
    seq: u64,
    injected: Option<u64>,
    issue_ns: u64,
    return_ns: u64,
}

/// A posted prepared call waiting for its [`Step::Complete`]: recorded at its
/// post (so records keep issue order), its wait filled in when it completes.
struct Posted {
    index: usize,
    event: usize,
    call: CallStep,
    seq: u64,
    checked: bool,
}

/// What the driver carries from one step to the next.
struct Walk {
    phase: Phase,
    quantum_ns: Option<u64>,
    residual_ns: i64,
    /// When the last call (or point-to-point step) completed, host ns.
    prev_end: u64,
    /// The last call was a world call the device may still run after its
    /// host end (replay's pacing then waits for the device).
    device_behind: bool,
    open: Option<OpenToken>,
    gap: Option<(u64, Option<u64>)>,
    beside: Option<Beside>,
    fill: Option<FillRecord>,
    replay: Option<ReplayTiming>,
    in_flight: Option<InFlight>,
    /// Posted prepared calls, in post order.
    posted: Vec<Posted>,
    /// When the last posted call completed, host ns (a pass ends after it).
    completed_ns: u64,
    /// The open pass's point-to-point record, where the schedule has a program.
    p2p: Option<P2pPassRecord>,
    /// The last back-to-back call, for its size's check.
    last: Option<CallStep>,
    /// Checks of the open pass's prepared calls left to its end ([`Runner::with_checks_at_pass_end`]).
    deferred: Vec<Deferred>,
}

/// A prepared call's check left to its pass's end: the call, its sequence number, index and reduction.
type Deferred = (CallStep, u64, usize, ReduceOp);

impl<B: Backend> Runner<'_, B> {
    /// Run `s`'s steps for `phase` (`quantum_ns`: the fill phases' unit).
    pub(super) fn drive(&mut self, phase: Phase, s: &Schedule, quantum_ns: Option<u64>) -> Result<()> {
        let mut w = Walk {
            phase,
            quantum_ns,
            residual_ns: 0,
            prev_end: self.clock.now_ns(),
            device_behind: false,
            open: None,
            gap: None,
            beside: None,
            fill: None,
            replay: None,
            in_flight: None,
            posted: Vec::new(),
            completed_ns: 0,
            p2p: None,
            last: None,
            deferred: Vec::new(),
        };
        let has_p2p = s.prepared.as_ref().is_some_and(|p| p.p2p.is_some());
        let calls = s.calls().count();
        // a test hook: a rank may stop halfway through the blocking phase's steps
        let halfway = (phase == Phase::Blocking).then_some(calls / 2);
        let mut computes = 0;
        self.body.collectives.reserve(calls);
        for (i, step) in s.steps.iter().enumerate() {
            match *step {
                Step::Token { token, warmup } => {
                    w.open = Some(self.begin_token(token, warmup)?);
                    let replay = (phase == Phase::Replay).then_some(0);
                    w.p2p = has_p2p.then_some(P2pPassRecord {
                        token,
                        warmup,
                        operations: 0,
                        calls: 0,
                        host_ns: 0,
                        target_gap_ns: replay,
                        actual_gap_ns: replay,
                        receives_checked: None,
                    });
                }
                Step::TokenEnd => {
                    let open = w.open.take().context("internal: a token end without its start")?;
                    if !w.posted.is_empty() {
                        bail!("internal: a token ends with {} posted calls not completed", w.posted.len());
                    }
                    // a trace's pass ends at its last call's completion, a model token at the host's clock
                    let end = if s.source.is_some() { w.prev_end.max(w.completed_ns) } else { self.clock.now_ns() };
                    self.end_token(phase, open, end)?;
                    if let Some(mut pass) = w.p2p.take() {
                        let check = !pass.warmup && self.spec.check > 0;
                        let corrupt = self.corrupts();
                        pass.receives_checked = self
                            .backend
                            .end_p2p_pass(check, corrupt)
                            .with_context(|| format!("rank {}, point-to-point pass {}", self.rank, pass.token))?;
                        self.p2p_passes.push(pass);
                    }
                    for (c, seq, index, op) in std::mem::take(&mut w.deferred) {
                        self.check_prepared(phase, s, &c, seq, (index, op), true)?;
                    }
                }
                Step::Compute { gemms, layer } => {
                    if halfway == Some(computes) {
                        mpi_deadline::test_stop_point("mid-blocking", self.rank);
                    }
                    computes += 1;
                    let token = w.open.map(|t| t.token);
                    self.timed_compute(phase, Work::Layer(gemms, layer), token, Some(layer))?;
                }
                Step::Gap { ns, compute_ns } => w.gap = Some((ns, compute_ns)),
                Step::Call(c) => self.call(&mut w, s, c)?,
                Step::Wait => self.wait_call(&mut w)?,
                Step::Complete { index } => self.complete(&mut w, s, index)?,
                Step::P2p { index, gap_ns, started } => self.p2p_step(&mut w, index, gap_ns, started)?,
                Step::Size => self.checked_in_phase = 0,
                Step::Settle => {
                    // a checked back-to-back run starts from an empty result: a warm-up's cannot pass for its last call
                    if let Some(Step::Call(c) | Step::Graph { call: c, .. }) = s.steps.get(i + 1) {
                        if let (Target::World { bytes, dtype }, Issue::BackToBack) = (c.target, c.issue) {
                            if self.spec.check > 0 && self.has_result(c) {
                                let clear = Call::ClearWorld { kind: c.kind, bytes, dtype };
                                self.backend.enqueue(clear, Timing::HostWait)?;
                            }
                        }
                    }
                    self.backend.synchronize()?;
                    self.barrier("barrier before a size's timed iterations", phase)?;
                }
                Step::Graph { n, call } => self.graph_calls(&mut w, n, call)?,
                Step::EndBackToBack { check } => {
                    self.backend.end_back_to_back()?;
                    if check {
                        let last = w.last.context("internal: a back-to-back run without calls")?;
                        self.check_last(last)?;
                    }
                }
            }
        }
        if !w.deferred.is_empty() {
            bail!("internal: {} checks left to a pass's end that never came", w.deferred.len());
        }
        Ok(())
    }

    /// What the phase makes of the gap before call `c`: pace it, fill it, or
    /// leave work to run beside the call.
    fn apply_gap(&mut self, w: &mut Walk, c: &CallStep, (gap_ns, compute_ns): (u64, Option<u64>)) -> Result<()> {
        let phase = w.phase;
        match phase {
            Phase::Replay => {
                // the gap ends where the pacing ended, before any injected
                // delay, whose arrival the control must see
                let actual_gap_ns = self.pace(w, gap_ns)?;
                w.replay = Some(ReplayTiming { target_gap_ns: gap_ns, actual_gap_ns });
            }
            Phase::HostDelay => w.beside = Some(Beside::Spin(gap_ns)),
            _ => {
                let q = w.quantum_ns.context("internal: a filled gap without its unit")?;
                // the source's own compute where it recorded it, else the whole gap
                let gap_ns = compute_ns.unwrap_or(gap_ns);
                let (units, err) = quantize(gap_ns, q, &mut w.residual_ns, self.spec.fill_residual);
                w.fill = Some(FillRecord { gap_ns, units, quantum_ns: q, quantization_error_ns: err });
                let kind = if phase == Phase::MemboundFill { ComputeKind::Membound } else { ComputeKind::Gemm };
                if phase == Phase::Overlap {
                    w.beside = Some(Beside::Compute(Work::Unit(kind, units)));
                } else {
                    self.timed_compute(phase, Work::Unit(kind, units), c.token, c.layer)?;
                }
            }
        }
        Ok(())
    }

    /// Replay's pacing of a gap on the rank clock, from the previous call's end
    /// (or, where the device may still run a world call, from when the host knows
    /// it completed); returns the gap achieved (docs/METHODS.md, "Replay pacing").
    fn pace(&mut self, w: &mut Walk, gap_ns: u64) -> Result<u64> {
        self.backend.synchronize()?;
        if w.device_behind {
            w.prev_end = w.prev_end.max(self.clock.now_ns());
        }
        if self.spin_short_delays {
            self.clock.spin_until(w.prev_end + gap_ns);
        } else {
            self.clock.sleep_until(w.prev_end + gap_ns);
        }
        Ok(self.clock.now_ns().saturating_sub(w.prev_end))
    }

    /// Run what a gap left beside a call.
    fn beside(&mut self, w: &mut Walk, c: &CallStep) -> Result<()> {
        match w.beside.take() {
            None => {}
            Some(Beside::Compute(work)) => self.timed_compute(w.phase, work, c.token, c.layer)?,
            Some(Beside::Spin(ns)) => {
                let s = self.clock.now_ns();
                self.clock.spin_until(s + ns);
                let e = self.clock.now_ns();
                self.body.compute.push(ComputeEvent {
                    phase: w.phase,
                    kind: ComputeKind::HostDelay,
                    token: c.token,
                    layer: c.layer,
                    units: 1,
                    start_ns: s,
                    end_ns: e,
                });
            }
        }
        Ok(())
    }

    fn call(&mut self, w: &mut Walk, s: &Schedule, c: CallStep) -> Result<()> {
        // a checked prepared call's result is emptied before its gap: pacing absorbs it, and a post's on the
        // device is ordered before the post without waiting for earlier posts
        let prepared_timing = if c.issue == Issue::Post { Timing::Async } else { Timing::HostWait };
        if self.wants_check(&c) {
            match (c.target, c.issue) {
                (Target::Prepared { index, .. }, _) => self.backend.enqueue(Call::Clear(index), prepared_timing)?,
                // a started world call's result: ordered before it; a back-to-back run's is cleared at its Settle
                (Target::World { bytes, dtype }, Issue::Async) => {
                    self.backend.enqueue(Call::ClearWorld { kind: c.kind, bytes, dtype }, Timing::Async)?
                }
                _ => {}
            }
        }
        if let Some(gap) = w.gap.take() {
            self.apply_gap(w, &c, gap)?;
        }
        match (c.target, c.issue) {
            (Target::World { bytes, dtype }, Issue::Async | Issue::BackToBack) => {
                let (seq, injected) =
                    if c.group == 0 { self.next_arrival() } else { (self.group_seq(c.group, None), None) };
                let issue_ns = self.clock.now_ns();
                let call = Call::World { kind: c.kind, bytes, dtype };
                if c.issue == Issue::BackToBack {
                    self.backend.enqueue(call, Timing::BackToBack)?;
                    let return_ns = self.clock.now_ns();
                    w.last = Some(c);
                    let extra = EventExtra { timed: true, injected_ns: injected, ..Default::default() };
                    self.record(w, &c, seq, HostTimes::blocking(issue_ns, return_ns), extra);
                    return Ok(());
                }
                for _ in 1..self.repeat {
                    self.backend.enqueue(call, Timing::Untimed)?;
                }
                self.backend.enqueue(call, Timing::Async)?;
                let return_ns = self.clock.now_ns();
                self.beside(w, &c)?;
                w.in_flight = Some(InFlight { call: c, seq, injected, issue_ns, return_ns });
                Ok(())
            }
            (Target::Prepared { index, op }, Issue::HostWait | Issue::Post) => {
                // the work beside a call that completes on the host runs before it
                self.beside(w, &c)?;
                let rank = self.rank;
                // a point-to-point pair is keyed (sender, receiver)
                let pair = match (c.kind.row().lands, c.peer) {
                    (Lands::AtPeer, Some(p)) => Some((rank, p)),
                    (Lands::Here, Some(p)) => Some((p, rank)),
                    _ if c.kind.is_p2p() => bail!("internal: {} without a peer", c.kind.name()),
                    _ => None,
                };
                let seq = self.group_seq(c.group, pair);
                let checked = self.wants_check(&c);
                let tc = &s.prepared.as_ref().context("internal: a prepared call without its trace")?.colls[index];
                let issue_ns = self.clock.now_ns();
                self.backend.enqueue(Call::Trace { index, c: tc, op }, prepared_timing)?;
                let t = HostTimes::blocking(issue_ns, self.clock.now_ns());
                let extra = EventExtra { checked, ..Default::default() };
                if c.issue == Issue::Post {
                    self.checked_in_phase += checked as u32;
                    // the next call's gap runs from the post's return, as the source's did
                    let event = self.record(w, &c, seq, t, extra);
                    w.posted.push(Posted { index, event, call: c, seq, checked });
                    return Ok(());
                }
                // the check reads the result back after the timed call, never inside it
                if checked {
                    self.checked_in_phase += 1;
                    self.check_or_defer(w, s, c, seq, (index, op))?;
                }
                self.record(w, &c, seq, t, extra);
                Ok(())
            }
            (t, i) => bail!("internal: {t:?} issued as {i:?}"),
        }
    }

    /// Wait for the started call, check it where `--check` still asks, record it.
    fn wait_call(&mut self, w: &mut Walk) -> Result<()> {
        let f = w.in_flight.take().context("internal: a wait without a started call")?;
        let wait_start_ns = self.clock.now_ns();
        let device = self.backend.wait()?;
        let wait_end_ns = self.clock.now_ns();
        let checked = self.wants_check(&f.call);
        if checked {
            self.checked_in_phase += 1;
            self.check_world(w.phase, &f.call, f.seq)?;
        }
        let t = HostTimes { issue_ns: f.issue_ns, return_ns: f.return_ns, wait_start_ns, wait_end_ns };
        self.record(w, &f.call, f.seq, t, EventExtra { timed: true, device, injected_ns: f.injected, checked });
        Ok(())
    }

    /// Complete posted call `index`, check it where its post asked, and fill in
    /// its record's wait. The completion lies inside the next call's gap, as
    /// the source's wait did: the walk's last call end stays where it was.
    fn complete(&mut self, w: &mut Walk, s: &Schedule, index: usize) -> Result<()> {
        let k = w.posted.iter().position(|p| p.index == index).context("internal: a completion without its post")?;
        let p = w.posted.remove(k);
        let wait_start_ns = self.clock.now_ns();
        self.backend.enqueue(Call::Complete(index), Timing::HostWait)?;
        let wait_end_ns = self.clock.now_ns();
        if p.checked {
            let Target::Prepared { op, .. } = p.call.target else { bail!("internal: a posted world call") };
            self.check_or_defer(w, s, p.call, p.seq, (index, op))?;
        }
        let ev = &mut self.body.collectives[p.event];
        (ev.wait_start_ns, ev.wait_end_ns) = (wait_start_ns, wait_end_ns);
        w.completed_ns = wait_end_ns;
        Ok(())
    }

    /// Record call `c` in the shard's body with what the phase measured beyond the host times (`extra`) and the
    /// gap's fill or replay timing, if any; the call's end is the walk's last completion. Returns its index.
    fn record(&mut self, w: &mut Walk, c: &CallStep, seq: u64, t: HostTimes, extra: EventExtra) -> usize {
        self.body.collectives.push(CollectiveEvent {
            phase: w.phase,
            kind: c.kind,
            group: c.group,
            seq,
            bytes: c.bytes,
            dtype: c.dtype,
            token: c.token,
            layer: c.layer,
            iter: c.iter,
            warmup: c.warmup,
            host_issue_ns: t.issue_ns,
            host_return_ns: t.return_ns,
            wait_start_ns: t.wait_start_ns,
            wait_end_ns: t.wait_end_ns,
            device_start_ns: extra.device.map(|d| d.start_ns),
            device_end_ns: extra.device.map(|d| d.end_ns),
            injected_delay_ns: extra.injected_ns,
            replay: w.replay.take(),
            fill: w.fill.take(),
            checked: extra.checked,
            root: c.root,
            peer: c.peer,
        });
        let i = self.body.collectives.len() - 1;
        if extra.timed {
            self.timed.push(i);
        }
        w.prev_end = t.wait_end_ns;
        w.device_behind = extra.timed;
        i
    }

    /// Step `k` of the point-to-point program, paced by its recorded gap in the replay phase.
    fn p2p_step(&mut self, w: &mut Walk, k: usize, gap_ns: u64, started: u32) -> Result<()> {
        if w.phase == Phase::Replay {
            let actual_gap_ns = self.pace(w, gap_ns)?;
            let pass = w.p2p.as_mut().context("internal: point-to-point steps outside a pass")?;
            pass.target_gap_ns = pass.target_gap_ns.map(|t| t + gap_ns);
            pass.actual_gap_ns = pass.actual_gap_ns.map(|t| t + actual_gap_ns);
        }
        let pass = w.p2p.as_mut().context("internal: point-to-point steps outside a pass")?;
        let t0 = self.clock.now_ns();
        self.backend
            .enqueue(Call::P2pStep(k), Timing::HostWait)
            .with_context(|| format!("rank {}, phase {}, pass {}", self.rank, w.phase, pass.token))?;
        w.prev_end = self.clock.now_ns();
        w.device_behind = false;
        pass.host_ns += w.prev_end.saturating_sub(t0);
        pass.calls += 1;
        pass.operations += started;
        Ok(())
    }

    /// `n` timed iterations as one CUDA graph: one launch for all of them
    /// (delays and faults cannot act inside a graph).
    fn graph_calls(&mut self, w: &mut Walk, n: u32, c: CallStep) -> Result<()> {
        let Target::World { bytes, dtype } = c.target else { bail!("internal: a graph of prepared calls") };
        let step = GraphStep::Calls { kind: c.kind, bytes, dtype, n };
        let host = self.backend.graph(step)?.context("internal: a graph of collectives without its launch times")?;
        for i in 0..n {
            let seq = self.group_seq(c.group, None);
            let call = CallStep { iter: Some(i), warmup: false, ..c };
            let extra = EventExtra { timed: true, ..Default::default() };
            self.record(w, &call, seq, HostTimes::blocking(host.0, host.1), extra);
        }
        w.last = Some(c);
        Ok(())
    }

    /// Check the last call of a back-to-back size where its result lands here, and mark it checked.
    fn check_last(&mut self, c: CallStep) -> Result<()> {
        if !self.has_result(&c) {
            return Ok(());
        }
        let last = self.body.collectives.len() - 1;
        self.body.collectives[last].checked = true;
        let seq = self.body.collectives[last].seq;
        self.check_world(Phase::Isolated, &c, seq)
    }

    /// Whether call `c`'s result lands on this rank: on every member, except
    /// a send's (its receiver checks), a barrier's, a reduce's off the root
    /// and an exclusive scan's on its group's first member (left undefined).
    fn has_result(&self, c: &CallStep) -> bool {
        match c.kind.row().lands {
            Lands::AtPeer | Lands::Nowhere => false,
            Lands::OnRoot => c.root == Some(self.rank),
            Lands::Everywhere | Lands::Here if c.kind == CollectiveKind::Exscan => {
                let group = c.group.checked_sub(1).and_then(|g| self.prepared.as_ref()?.groups.get(g as usize));
                group.and_then(|g| g.members.first()) != Some(&self.rank)
            }
            Lands::Everywhere | Lands::Here => true,
        }
    }

    /// Whether this rank's results are spoiled before their checks (the `wrong-sum` negative control).
    pub(super) fn corrupts(&self) -> bool {
        self.fault == Some(Fault::WrongSum { rank: self.rank })
    }

    /// Check prepared call `c` now, or at its pass's end ([`Self::with_checks_at_pass_end`]).
    fn check_or_defer(
        &mut self,
        w: &mut Walk,
        s: &Schedule,
        c: CallStep,
        seq: u64,
        (index, op): (usize, ReduceOp),
    ) -> Result<()> {
        if self.checks_at_pass_end {
            w.deferred.push((c, seq, index, op));
            Ok(())
        } else {
            self.check_prepared(w.phase, s, &c, seq, (index, op), false)
        }
    }

    /// Validate prepared call `c` (`index` of the schedule's, reducing with
    /// `op`), as [`Self::check_call`] does; one checked at its pass's end
    /// (`at_pass_end`) names its position in the pass.
    fn check_prepared(
        &mut self,
        phase: Phase,
        s: &Schedule,
        c: &CallStep,
        seq: u64,
        (index, op): (usize, ReduceOp),
        at_pass_end: bool,
    ) -> Result<()> {
        let tc = &s.prepared.as_ref().context("internal: a prepared call without its trace")?.colls[index];
        let checked = self.check_call(phase, c, seq, Checked::Trace { index, c: tc, op });
        match c.layer.filter(|_| at_pass_end) {
            Some(i) => checked.with_context(|| {
                format!(
                    "rank {}, collective {i}: --check: {} #{} on group {:?}",
                    self.rank,
                    tc.kind.name(),
                    tc.seq,
                    tc.group
                )
            }),
            None => checked,
        }
    }

    /// Validate world call `c`, the last completed ([`Self::check_call`]).
    fn check_world(&mut self, phase: Phase, c: &CallStep, seq: u64) -> Result<()> {
        let Target::World { bytes, dtype } = c.target else {
            bail!("internal: a prepared call checked as a world call")
        };
        self.check_call(phase, c, seq, Checked::Last { kind: c.kind, bytes, dtype })
    }

    /// Validate call `c` as `what` reads it and record what was found. A
    /// wrong result fails the job at once in the workload phases; the
    /// isolated phase records it (nccl-tests' `#wrong`) and goes on, and the
    /// rank fails after its shard is written (see `rank`), so the evidence of
    /// the fault is kept and no wrong run is ever ranked.
    fn check_call(&mut self, phase: Phase, c: &CallStep, seq: u64, what: Checked<'_>) -> Result<()> {
        let f = self.backend.check(what, self.corrupts())?;
        let (group, bytes) = (c.group, c.bytes);
        let first_wrong = f.first_wrong.clone();
        self.checks.push(CheckRecord { phase, group, seq, bytes, wrong_elements: f.wrong_elements, first_wrong });
        match f.first_wrong {
            Some(why) if phase != Phase::Isolated => bail!(
                "result check failed on rank {}, phase {phase}, group {group} seq {seq} ({} of {bytes} bytes of {}): \
                    {why}",
                self.rank,
                c.kind.name(),
                c.dtype.name()
            ),
            _ => Ok(()),
        }
    }

    /// Whether call `c`'s result is checked: it lands here, the call is timed,
    /// and `--check` still asks in this size or phase.
    fn wants_check(&self, c: &CallStep) -> bool {
        self.has_result(c) && !c.warmup && self.checked_in_phase < self.spec.check
    }

    /// The next sequence number of `group` (the world, 0, and every other
    /// group count their own), per (sender, receiver) `pair` for point-to-point.
    pub(super) fn group_seq(&mut self, group: u32, pair: Option<(u32, u32)>) -> u64 {
        let counter = self.op_seq.entry((group, pair)).or_insert(0);
        *counter += 1;
        *counter - 1
    }

    /// One token's device work as the driver runs it, without records (inside
    /// a graph capture, or as the eager warm-up before one): each gap as
    /// `units` (one per gap, in order) before the call, or beside it in
    /// overlap. Returns the last call's size and element type.
    pub(super) fn play(&mut self, phase: Phase, steps: &[Step], units: &[u32]) -> Result<(u64, Dtype)> {
        let kind = if phase == Phase::MemboundFill { ComputeKind::Membound } else { ComputeKind::Gemm };
        let (mut gaps, mut beside, mut last) = (units.iter(), 0, (0, self.spec.dtype));
        for step in steps {
            match *step {
                Step::Compute { gemms, layer } => self.compute(Work::Layer(gemms, layer))?,
                Step::Gap { .. } => {
                    let u = *gaps.next().context("internal: a gap without its units")?;
                    if phase == Phase::Overlap {
                        beside = u;
                    } else if u > 0 {
                        self.compute(Work::Unit(kind, u))?;
                    }
                }
                Step::Call(CallStep {
                    target: Target::World { bytes, dtype }, issue: Issue::Async, kind: k, ..
                }) => {
                    self.backend.enqueue(Call::World { kind: k, bytes, dtype }, Timing::Async)?;
                    let u = std::mem::take(&mut beside);
                    if u > 0 {
                        self.compute(Work::Unit(kind, u))?;
                    }
                    last = (bytes, dtype);
                }
                Step::Wait => {
                    self.backend.wait()?;
                }
                Step::Token { .. } | Step::TokenEnd => {}
                other => bail!("internal: {other:?} in a graph's token"),
            }
        }
        Ok(last)
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
