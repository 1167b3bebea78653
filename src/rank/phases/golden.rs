//! The runner's walk of every phase over the mock backend, written out as
//! text and compared with a reviewed snapshot: the calls it makes, in order,
//! and what it records (times and calibrated unit counts masked). A change
//! to the phases' drivers that keeps this text keeps their behaviour.
use super::mock::{Logged, MockBackend};
use super::{Fault, Runner, RunnerControls};
use crate::core::clock::RankClock;
use crate::core::workload::{Phase, ReduceOp, SweepKind, WorkloadSpec};
use crate::evidence::commtrace::TraceDtype;
use crate::evidence::schedule::Schedule;
use crate::evidence::trace::{comm_trace_schedule, tests as traces};
use std::fmt::Write;
use std::path::Path;

fn spec(phases: &[Phase]) -> WorkloadSpec {
    super::mock::spec(phases, 2)
}

struct Case<'a> {
    name: &'a str,
    back_to_back: bool,
    device: bool,
    rank: u32,
    world: u32,
    spec: WorkloadSpec,
    controls: RunnerControls,
    sweep_group: Option<u32>,
    /// The fill phases' unit counts depend on the calibrated unit: masked.
    mask_units: bool,
}

fn walk(c: Case<'_>) -> String {
    let mut b = MockBackend::new(c.back_to_back, c.device).with_rank(c.rank, c.world);
    let clock = RankClock::new(c.rank, &[]);
    let exact_gaps = c.controls.file_trace.is_some();
    let mut r = Runner::new(&mut b, &clock, &c.spec, c.controls);
    if let Some(g) = c.sweep_group {
        r = r.with_sweep_group(g);
    }
    let res = r.run_all();
    let mut o = String::new();
    let units = |u: u32| if c.mask_units { "?".to_string() } else { u.to_string() };
    writeln!(o, "== {}: {}", c.name, res.as_ref().map_or_else(|e| format!("error: {e:#}"), |_| "ok".into())).unwrap();
    for e in &r.body.collectives {
        writeln!(
            o,
            "C {} {} g{} s{} {}B {:?} t{:?} l{:?} i{:?} w{} dev{} inj{} chk{} root{:?} peer{:?} replay{:?} fill{:?}",
            e.phase,
            e.kind.name(),
            e.group,
            e.seq,
            e.bytes,
            e.dtype,
            e.token,
            e.layer,
            e.iter,
            e.warmup as u8,
            e.device_start_ns.is_some() as u8,
            e.injected_delay_ns.is_some() as u8,
            e.checked as u8,
            e.root,
            e.peer,
            e.replay.map(|p| if exact_gaps { p.target_gap_ns.to_string() } else { "?".into() }),
            e.fill.map(|f| (if exact_gaps { f.gap_ns.to_string() } else { "?".into() }, units(f.units))),
        )
        .unwrap();
    }
    for k in &r.body.compute {
        writeln!(o, "K {} {:?} t{:?} l{:?} u{}", k.phase, k.kind, k.token, k.layer, units(k.units)).unwrap();
    }
    for t in &r.body.tokens {
        writeln!(o, "T {} {} w{}", t.phase, t.token, t.warmup as u8).unwrap();
    }
    for k in &r.checks {
        writeln!(o, "V {} g{} s{} {}B wrong{} {:?}", k.phase, k.group, k.seq, k.bytes, k.wrong_elements, k.first_wrong)
            .unwrap();
    }
    for p in &r.phase_runs {
        let passes: Vec<_> = p
            .p2p
            .iter()
            .map(|x| (x.token, x.warmup, x.operations, x.calls, x.target_gap_ns, x.receives_checked))
            .collect();
        writeln!(
            o,
            "P {} n{} q{} tl{:?} origin{:?} graph{:?} p2p{:?}",
            p.phase,
            p.collectives,
            p.quantum_ns.is_some() as u8,
            p.trace_timeline,
            p.trace.as_ref().map(|t| format!("{t:?}").chars().take(60).collect::<String>()),
            p.graph.as_ref().map(|g| (g.collectives_per_token, g.gemms_per_token, g.launches, g.checked)),
            passes
        )
        .unwrap();
    }
    drop(r);
    for l in &b.log {
        let line = match l {
            Logged::Gemm { shape, layer, units: u } => format!("Gemm {shape} {layer} {}", units(*u)),
            Logged::Membound(u) => format!("Membound {}", units(*u)),
            other => format!("{other:?}"),
        };
        writeln!(o, "> {line}").unwrap();
    }
    o
}

fn case(name: &str, back_to_back: bool, device: bool, spec: WorkloadSpec) -> Case<'_> {
    let mask_units = spec.phases.iter().any(|p| p.needs_trace() && *p != Phase::Replay && *p != Phase::HostDelay);
    Case {
        name,
        back_to_back,
        device,
        rank: 0,
        world: 1,
        spec,
        controls: RunnerControls::default(),
        sweep_group: None,
        mask_units,
    }
}

/// [`case`] as rank `rank` of `world`, walking `trace`.
fn traced(name: &str, b2b: bool, spec: WorkloadSpec, (rank, world): (u32, u32), trace: Schedule) -> Case<'_> {
    let mut c = case(name, b2b, b2b, spec);
    (c.rank, c.world, c.controls.file_trace) = (rank, world, Some(trace));
    c
}

const TRACED: [Phase; 6] =
    [Phase::Replay, Phase::Fill, Phase::Overlap, Phase::AsyncWaitImmediate, Phase::HostDelay, Phase::MemboundFill];

#[test]
fn every_phase_walk_is_unchanged() {
    let mut out = String::new();
    let mut all = vec![Phase::Isolated, Phase::Blocking, Phase::Async];
    all.extend(TRACED);
    for (name, b2b, dev) in [("host", false, false), ("device", true, true)] {
        out += &walk(case(name, b2b, dev, spec(&all)));
    }
    let mut graph = spec(&[Phase::Isolated, Phase::Blocking, Phase::Async, Phase::Fill, Phase::Overlap]);
    graph.graph = true;
    // graph mode's trace phases need a trace file: the 4-rank trace's world all-reduces only
    let mut t = traces::four_rank_trace();
    for r in &mut t.ranks {
        r.collectives.remove(0);
        r.collectives[0].dtype = TraceDtype::F32;
    }
    let only = comm_trace_schedule(&t, Path::new("t.json"), "sha".into(), 1, 4, (1, 1), true).unwrap();
    out += &walk(traced("graph", true, graph, (1, 4), only));
    for (op, b2b) in [(None, true), (None, false), (Some("max"), true)] {
        let mut s = spec(&[Phase::Isolated]);
        s.isolated_collective = Some(<SweepKind as clap::ValueEnum>::from_str("all_gather", false).unwrap());
        if let Some(op) = op {
            s.isolated_collective = Some(<SweepKind as clap::ValueEnum>::from_str("all_reduce", false).unwrap());
            s.isolated_op = Some(<ReduceOp as clap::ValueEnum>::from_str(op, false).unwrap());
        }
        let name = format!("sweep {op:?} b2b {b2b}");
        let mut c = case(&name, b2b, b2b, s.clone());
        c.sweep_group = Some(5);
        out += &walk(c);
        if b2b && op.is_none() {
            let mut s = s;
            s.graph = true;
            let mut c = case("sweep graph", true, true, s);
            c.sweep_group = Some(5);
            out += &walk(c);
        }
    }
    // every kind on its group, and an MPI capture's point-to-point program, through the traced phases
    for (name, t, rank, world) in [("four", traces::four_rank_trace(), 2, 4), ("mpi", traces::mpi_trace(), 0, 2)] {
        let st = comm_trace_schedule(&t, Path::new("t.json"), "sha".into(), rank, world, (1, 2), false).unwrap();
        out += &walk(traced(name, false, spec(&TRACED), (rank, world), st));
    }
    // an MPI capture's nonblocking all-reduce: posted, the Sendrecv, then its completion
    let mut t = traces::mpi_trace();
    let m = t.mpi.as_mut().unwrap();
    (m.collective_nonblocking, m.collective_completions) = (vec![vec![true]; 2], vec![vec![Some(5)]; 2]);
    let st = comm_trace_schedule(&t, Path::new("t.json"), "sha".into(), 0, 2, (1, 2), false).unwrap();
    out += &walk(traced("mpi nonblocking", false, spec(&TRACED), (0, 2), st));
    // the negative controls
    let mut c = case("wrong-sum device", true, true, spec(&[Phase::Isolated, Phase::Blocking]));
    c.controls.fault = Some(Fault::WrongSum { rank: 0 });
    out += &walk(c);
    let st = comm_trace_schedule(&traces::mpi_trace(), Path::new("t.json"), "sha".into(), 0, 2, (0, 1), false).unwrap();
    let mut c = traced("wrong-sum trace", false, spec(&[Phase::Replay]), (0, 2), st);
    c.controls.fault = Some(Fault::WrongSum { rank: 0 });
    out += &walk(c);
    // kept with the other reviewed snapshots, out of src/
    insta::with_settings!({ snapshot_path => "../../../tests/snapshots", prepend_module_to_snapshot => false }, {
        insta::assert_snapshot!("phase_walks", out);
    });
}
