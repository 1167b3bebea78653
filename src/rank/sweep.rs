//! The isolated phase's sweep of one collective kind, as nccl-tests'
//! `*_perf` programs run it (`rank --phases isolated --collective KIND`).
//!
//! Consumes the kind, sizes ([`SweepKind`]), op and backend. Produces the
//! sweep's table, each result checked and every wrong element counted
//! (nccl-tests' `#wrong`); `-J FILE` writes it as [`SweepReport`]. Refuses,
//! before any collective: `--collective` or `--op` without the isolated phase;
//! a reduction on a kind that has none; `avg` on cpu; `--graph` with a reduction
//! other than the sum; a size with no whole element per rank; a `--check` whose
//! expected values would not be exact in the element type. Method:
//! docs/METHODS.md, "Isolated sweep of one kind".
use crate::core::refusal::Code;
use crate::core::workload::{Dtype, Phase, ReduceOp, SweepKind, WorkloadSpec};
use crate::evidence::commtrace::{self, CommTrace, TraceCollective, TraceDtype};
use crate::evidence::join::{CompletionSource, IsolatedSizeRow, JoinedRun};
use crate::evidence::schedule::{CallStep, Issue, Prepared, Schedule, Step, Target};
use crate::evidence::shard::BackendKind;
use anyhow::{Context, Result};
use serde::{Deserialize, Serialize};
use std::sync::Arc;

/// Name of the process group the executor's sweep runs on (every rank).
pub(crate) const SWEEP_GROUP_NAME: &str = "isolated-sweep";

/// Version of [`SweepReport`].
pub const SWEEP_REPORT_FORMAT_VERSION: u32 = 2;

/// The sweep's own refusals that need no world size: a kind or reduction
/// without the isolated phase, a reduction on a kind without one, `avg` on
/// the cpu backend, graph mode on the executor's path.
pub(crate) fn check_options(spec: &WorkloadSpec, backend: BackendKind, op_given: bool) -> Result<()> {
    let (kind, op) = (spec.sweep_kind(), spec.sweep_op());
    if !spec.phases.contains(&Phase::Isolated) && (kind != SweepKind::default() || op_given) {
        crate::refuse!(
            Code::BadArgument,
            "--collective and --op choose what the isolated phase sweeps: add isolated to --phases"
        );
    }
    if op_given && !kind.reduces() {
        crate::refuse!(
            Code::BadArgument,
            "--op: {kind} has no reduction (nccl-tests prints redop none for it); leave out --op"
        );
    }
    if op == ReduceOp::Avg && backend == BackendKind::Cpu {
        crate::refuse!(
            Code::BadArgument,
            "--op avg: MPI has no average operation, so the cpu backend would run a sum and call it avg; avg runs on \
                the cuda backend (ncclAvg, NCCL 2.10 or later)"
        );
    }
    if spec.graph && spec.phases.contains(&Phase::Isolated) && op != ReduceOp::Sum {
        crate::refuse!(
            Code::BadArgument,
            "--graph captures sums only (world calls); the {kind} sweep's {} reduction runs without it",
            op.name()
        );
    }
    Ok(())
}

/// Largest integer every value of `dtype` up to which is exact (2^24 for
/// f32, 2^8 for bf16: their significands' bits).
fn exact_integers(dtype: Dtype) -> u128 {
    match dtype {
        Dtype::F32 => 1 << 24,
        Dtype::Bf16 => 1 << 8,
    }
}

/// The refusals that need the world size `n`: a size with no whole element
/// per rank (naming the smallest `-b` that has one), and a `--check` whose
/// expected values are not exact in the element type whatever order the
/// library reduces in (docs/METHODS.md, "Exact sweep checks").
pub(crate) fn check_world(spec: &WorkloadSpec, n: u32) -> Result<()> {
    if !spec.phases.contains(&Phase::Isolated) || !spec.sweep_has_own_group() {
        return Ok(());
    }
    let (kind, op, dtype) = (spec.sweep_kind(), spec.sweep_op(), spec.dtype);
    let e = dtype.size_bytes();
    for &b in spec.isolated_sizes() {
        if kind.count(b, e, n).is_none() {
            let least = if kind.splits() { e * n as u64 } else { e };
            crate::refuse!(
                Code::BadArgument,
                "--collective {kind} over {n} ranks: a size of {b} bytes leaves no whole {} element per rank \
                    (nccl-tests rounds the count down to a multiple of the ranks); pass -b {least} or more",
                dtype.name()
            );
        }
    }
    if spec.check == 0 || !kind.reduces() {
        return Ok(());
    }
    let limit = exact_integers(dtype);
    let largest = (0..n as u128).map(|r| r + 3);
    let sum = largest.clone().fold(0u128, u128::saturating_add);
    let product = largest.fold(1u128, u128::saturating_mul);
    let (exact, why) = match op {
        ReduceOp::Sum => (sum <= limit, "its sums"),
        ReduceOp::Prod => (product <= limit, "its products"),
        ReduceOp::Avg => (n.is_power_of_two() && sum <= limit, "its averages"),
        ReduceOp::Min | ReduceOp::Max => (true, ""),
    };
    if !exact {
        crate::refuse!(
            Code::BadArgument,
            "--check with --collective {kind} --op {} over {n} ranks in {}: {why} of the check's values are not exact \
                in {} whatever order the library reduces in, so #wrong could count rounding; pass --check 0, fewer \
                    ranks{}",
            op.name(),
            dtype.name(),
            dtype.name(),
            if dtype == Dtype::Bf16 { ", or --dtype f32" } else { "" }
        );
    }
    Ok(())
}

/// The executor's trace of the sweep over `n` ranks (never written: the
/// executors read only its world size and groups) and one collective per
/// size, in size order, with nccl-tests' counts ([`SweepKind::count`]).
pub(crate) fn sweep_collectives(spec: &WorkloadSpec, n: u32) -> Result<(CommTrace, Vec<TraceCollective>)> {
    check_world(spec, n)?;
    let kind = spec.sweep_kind();
    let dtype = TraceDtype::from(spec.dtype);
    let e = spec.dtype.size_bytes();
    let mut colls = Vec::with_capacity(spec.isolated_sizes().len());
    for (i, &b) in spec.isolated_sizes().iter().enumerate() {
        let count = kind.count(b, e, n).expect("check_world refused sizes without a whole element per rank");
        let elems = kind.elements(count, n);
        let mut c = TraceCollective::new(
            kind.kind(),
            kind.name(),
            SWEEP_GROUP_NAME,
            dtype,
            elems,
            (None, None),
            (kind.root(), None),
        );
        c.seq = i as u64;
        colls.push(c);
    }
    let trace = CommTrace {
        format_version: commtrace::COMM_TRACE_FORMAT_VERSION,
        source: commtrace::TraceSource {
            kind: commtrace::SourceKind::Synthetic,
            schema: Some(format!("rank --phases isolated --collective {kind}")),
            nccl_version: None,
            files: Vec::new(),
        },
        world_size: n,
        clock: commtrace::TraceClock {
            domain: commtrace::ClockDomain::HostPerRank,
            aligned_across_ranks: false,
            note: "an isolated sweep: no recorded times".into(),
        },
        unknown: Vec::new(),
        groups: vec![commtrace::TraceGroup {
            name: SWEEP_GROUP_NAME.into(),
            desc: Some("every rank, in rank order".into()),
            members: (0..n).collect(),
        }],
        ranks: Vec::new(),
        mpi: None,
    };
    Ok((trace, colls))
}

/// The isolated phase's [`Schedule`] over `n` ranks, as nccl-tests times it
/// (docs/METHODS.md, "Isolated sweep of one kind"); `--check N` checks N timed
/// iterations of every size, or the last of a back-to-back run.
pub(crate) fn schedule(spec: &WorkloadSpec, n: u32, group: Option<u32>, back_to_back: bool) -> Result<Schedule> {
    let (kind, op, dtype) = (spec.sweep_kind(), spec.sweep_op(), spec.dtype);
    let e = dtype.size_bytes();
    let group = if spec.sweep_has_own_group() { group.context("internal: a sweep without its group")? } else { 0 };
    let call = |target, issue, bytes: u64, (iter, warmup): (u32, bool)| CallStep {
        target,
        issue,
        kind: kind.kind(),
        group,
        bytes,
        dtype: dtype.into(),
        root: kind.root(),
        peer: None,
        token: None,
        layer: None,
        iter: Some(iter),
        warmup,
    };
    let its = |n: u32, warmup: bool| (0..n).map(move |i| (i, warmup));
    let (w, t) = (spec.warmup_iters, spec.iters);
    let mut steps = Vec::with_capacity((2 * (w + t) as usize + 4) * spec.isolated_sizes().len());
    if op != ReduceOp::Sum {
        let (trace, colls) = sweep_collectives(spec, n)?;
        for (index, c) in colls.iter().enumerate() {
            let at = |it| Step::Call(call(Target::Prepared { index, op }, Issue::HostWait, c.in_elems * e, it));
            steps.push(Step::Size);
            steps.extend(its(w, true).map(at));
            steps.push(Step::Settle);
            steps.extend(its(t, false).map(at));
        }
        let prepared = Prepared { trace: Arc::new(trace), colls, groups: Vec::new(), p2p: None };
        return Ok(Schedule { source: None, prepared: Some(prepared), steps });
    }
    check_world(spec, n)?;
    for &b in spec.isolated_sizes() {
        // the world call's size in nccl-tests' convention, and the record's: one member's input
        let (world_bytes, bytes) = if group == 0 {
            (b, b)
        } else {
            let count = kind.count(b, e, n).context("internal: a swept size without a whole element per rank")?;
            (count * e, kind.elements(count, n).0 * e)
        };
        let target = Target::World { bytes: world_bytes, dtype };
        steps.push(Step::Size);
        let timed = |it| call(target, if back_to_back { Issue::BackToBack } else { Issue::Async }, bytes, it);
        let with_wait = |it| [Some(Step::Call(timed(it))), (!back_to_back).then_some(Step::Wait)].into_iter().flatten();
        steps.extend(its(w, true).flat_map(with_wait));
        steps.push(Step::Settle);
        if back_to_back && spec.graph {
            steps.push(Step::Graph { n: t, call: timed((0, false)) });
        } else {
            steps.extend(its(t, false).flat_map(with_wait));
        }
        if back_to_back {
            steps.push(Step::EndBackToBack { check: spec.check > 0 && t > 0 });
        }
    }
    Ok(Schedule { steps, ..Default::default() })
}

/// `rank -J FILE`: the isolated sweep's table as JSON with nccl-tests'
/// own fields (its `-J` file, JSON file version 3: `config`, `results` with
/// `out_of_place` `{time, alg_bw, bus_bw, nwrong}` per size,
/// `out_of_bounds`, `average_bus_bandwidth`), so one parser
/// ([`crate::evidence::nccl_tests`]) reads both; what only this tool has
/// (the run, per-iteration percentiles, what the times measure) is in
/// `commcanary` and in each result's `out_of_place_per_iter`.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, schemars::JsonSchema)]
pub struct SweepReport {
    /// nccl-tests' JSON file version this file follows ([`NCCL_TESTS_JSON_VERSION`]).
    pub version: u32,
    /// The command line of rank 0.
    pub args: Vec<String>,
    /// The settings (nccl-tests' `config`).
    pub config: SweepConfig,
    /// One row per size, in size order.
    pub results: Vec<SweepRow>,
    /// Wrong elements over every checked size and rank (nccl-tests' "Out of
    /// bounds values"); absent when no size was checked.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub out_of_bounds: Option<OutOfBounds>,
    /// nccl-tests' "Avg bus bandwidth": the arithmetic mean of `bus_bw` over the sizes.
    pub average_bus_bandwidth: AverageBusBandwidth,
    /// What nccl-tests' file has no field for.
    pub commcanary: SweepRun,
}

/// nccl-tests' JSON file version whose fields [`SweepReport`] carries.
pub const NCCL_TESTS_JSON_VERSION: u32 = 3;

/// The run behind a [`SweepReport`].
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, schemars::JsonSchema)]
pub struct SweepRun {
    /// [`SWEEP_REPORT_FORMAT_VERSION`].
    pub format_version: u32,
    /// The run the table comes from (verify it with `commcanary join RUN_DIR`).
    pub run_id: String,
    /// The collective swept.
    pub collective: SweepKind,
    /// Backend.
    pub backend: BackendKind,
    /// Ranks.
    pub world_size: u32,
    /// Element type in this tool's words (nccl-tests' `type` is in each result).
    pub dtype: Dtype,
    /// Reduction of a reducing kind; absent for the others (nccl-tests' redop `none`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub redop: Option<ReduceOp>,
    /// What the times measure: `device-events` (the sum all-reduce on GPUs)
    /// or `host-issue-to-wait-return`.
    pub time_source: CompletionSource,
    /// The bus-bandwidth factor of the kind at this rank count ([`SweepKind::busbw_factor`]).
    pub bus_bw_factor: f64,
    /// Run start, Unix ms (rank 0's clock).
    pub started_unix_ms: u64,
    /// Run end, Unix ms.
    pub finished_unix_ms: u64,
}

/// The sweep's settings, as nccl-tests' `config` names them.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, schemars::JsonSchema)]
pub struct SweepConfig {
    /// Threads per process (always 1 here).
    pub nthreads: u32,
    /// GPUs (or CPU ranks) per process (always 1 here).
    pub ngpus: u32,
    /// Smallest size, bytes.
    pub minimum_bytes: u64,
    /// Largest size, bytes.
    pub maximum_bytes: u64,
    /// Warm-up iterations per size.
    pub warmup_iters: u32,
    /// Timed iterations per size.
    pub iterations: u32,
    /// Collectives per timed iteration (always 1 here).
    pub aggregated_iterations: u32,
    /// Checked iterations per size (`-c`).
    pub validation: u32,
    /// CUDA-graph launches (0: none).
    pub graph: u32,
    /// Whether per-iteration times are reported (always: `out_of_place_per_iter`).
    pub per_iter_timing: bool,
    /// Every size run, bytes, in order (nccl-tests gives only the bounds and step).
    pub sizes_bytes: Vec<u64>,
}

/// One size (nccl-tests' result object).
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, schemars::JsonSchema)]
pub struct SweepRow {
    /// nccl-tests' size, bytes ([`SweepKind`]'s convention).
    pub size: u64,
    /// Elements of that size.
    pub count: u64,
    /// Element type in nccl-tests' words (`float`, `bfloat16`).
    #[serde(rename = "type")]
    pub dtype: String,
    /// Reduction, or `none`.
    pub redop: String,
    /// Root rank, or -1 for kinds without one.
    pub root: i64,
    /// The timing (the sweep runs out of place only).
    pub out_of_place: SweepTiming,
    /// Always null: the sweep has no in-place run (nccl-tests' trace-replay rows have none either).
    pub in_place: Option<SweepTiming>,
    /// Per-iteration percentiles (nccl-tests' `-I 1` object, the fields measured here).
    pub out_of_place_per_iter: SweepPerIter,
    /// Timed iterations.
    pub actual_iterations: u64,
    /// nccl-tests' experiment name (empty, as its sweeps write it).
    pub experiment_name: String,
}

/// nccl-tests' `{time, alg_bw, bus_bw, nwrong}`.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, schemars::JsonSchema)]
pub struct SweepTiming {
    /// Mean time per iteration (mean over ranks of each rank's mean), µs.
    pub time: f64,
    /// size / time, GB/s.
    pub alg_bw: f64,
    /// alg_bw × the kind's factor, GB/s.
    pub bus_bw: f64,
    /// Wrong elements found by this size's checks over every rank; null when unchecked.
    pub nwrong: Option<u64>,
}

/// The per-iteration statistics measured here (a subset of nccl-tests' `-I 1` object).
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, schemars::JsonSchema)]
pub struct SweepPerIter {
    /// Median per-iteration time (largest over ranks), µs.
    pub p50_us: f64,
    /// 99th percentile (nearest rank) of the same, µs.
    pub p99_us: f64,
}

/// nccl-tests' `out_of_bounds`.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, schemars::JsonSchema)]
pub struct OutOfBounds {
    /// Wrong elements over every checked size and rank.
    pub count: u64,
    /// No wrong element.
    pub okay: bool,
}

/// nccl-tests' `average_bus_bandwidth` (no threshold is checked: `okay` is "unchecked").
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, schemars::JsonSchema)]
pub struct AverageBusBandwidth {
    /// Mean bus bandwidth over the sizes, GB/s; absent with no size.
    pub bandwidth: Option<f64>,
    /// Always "unchecked" (nccl-tests' value without `-a`'s threshold).
    pub okay: String,
}

/// nccl-tests' name of an element type.
fn nccl_tests_type(d: Dtype) -> &'static str {
    match d {
        Dtype::F32 => "float",
        Dtype::Bf16 => "bfloat16",
    }
}

/// The report of joined run `j`, from its isolated rows.
pub fn report(j: &JoinedRun, rows: &[IsolatedSizeRow]) -> SweepReport {
    let spec = &j.run.workload;
    let kind = spec.sweep_kind();
    let results: Vec<SweepRow> = rows
        .iter()
        .map(|r| SweepRow {
            size: r.bytes,
            count: r.count.unwrap_or(r.bytes / spec.dtype.size_bytes()),
            // the isolated phase runs the run's own dtype (f32 or bf16)
            dtype: nccl_tests_type(r.dtype.and_then(|d| Dtype::try_from(d).ok()).unwrap_or(spec.dtype)).into(),
            redop: r.redop.clone().unwrap_or_else(|| "none".into()),
            root: r.root.map_or(-1, i64::from),
            out_of_place: SweepTiming {
                time: r.time_us,
                alg_bw: r.algbw_gbps,
                bus_bw: r.busbw_gbps,
                nwrong: r.wrong_elements,
            },
            in_place: None,
            out_of_place_per_iter: SweepPerIter { p50_us: r.p50_us, p99_us: r.p99_us },
            actual_iterations: r.iterations,
            experiment_name: String::new(),
        })
        .collect();
    let checked: Vec<u64> = results.iter().filter_map(|r| r.out_of_place.nwrong).collect();
    let sizes: Vec<u64> = results.iter().map(|r| r.size).collect();
    SweepReport {
        version: NCCL_TESTS_JSON_VERSION,
        args: j.run.argv.clone(),
        config: SweepConfig {
            nthreads: 1,
            ngpus: 1,
            minimum_bytes: sizes.iter().copied().min().unwrap_or(0),
            maximum_bytes: sizes.iter().copied().max().unwrap_or(0),
            warmup_iters: spec.warmup_iters,
            iterations: spec.iters,
            aggregated_iterations: 1,
            validation: spec.check,
            graph: u32::from(spec.graph),
            per_iter_timing: true,
            sizes_bytes: sizes,
        },
        average_bus_bandwidth: AverageBusBandwidth {
            bandwidth: (!results.is_empty())
                .then(|| results.iter().map(|r| r.out_of_place.bus_bw).sum::<f64>() / results.len() as f64),
            okay: "unchecked".into(),
        },
        out_of_bounds: (!checked.is_empty()).then(|| {
            let count = checked.iter().sum();
            OutOfBounds { count, okay: count == 0 }
        }),
        results,
        commcanary: SweepRun {
            format_version: SWEEP_REPORT_FORMAT_VERSION,
            run_id: j.run.run_id.clone(),
            collective: kind,
            backend: j.run.backend,
            world_size: j.run.world_size,
            dtype: spec.dtype,
            redop: kind.reduces().then(|| spec.sweep_op()),
            time_source: rows.first().map_or(CompletionSource::HostIssueToWaitReturn, |r| r.source),
            bus_bw_factor: kind.busbw_factor(j.run.world_size),
            started_unix_ms: j.run.started_unix_ms,
            finished_unix_ms: j.run.finished_unix_ms,
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::collective::CollectiveKind;
    use crate::core::workload::GemmShape;
    use crate::evidence::shard::BackendKind;

    fn sk(kind: CollectiveKind) -> SweepKind {
        SweepKind::of(kind).unwrap()
    }

    fn spec(kind: SweepKind, op: ReduceOp, dtype: Dtype, sizes: Vec<u64>) -> WorkloadSpec {
        let mut s = WorkloadSpec::isolated_only(8, 1, GemmShape { m: 1, n: 1, k: 1 });
        s.isolated_sizes_bytes = sizes;
        s.isolated_collective = Some(kind);
        s.isolated_op = Some(op);
        s.dtype = dtype;
        s.check = 1;
        s
    }

    /// The steps of a schedule as text: `S` size, `~` settle, `E` end of a
    /// back-to-back run (`E!` checked), `w`/`t` a warm-up or timed call with
    /// its record's bytes and group, `W` a wait, `G` a graph.
    fn steps(s: &Schedule) -> String {
        let t: Vec<String> = s
            .steps
            .iter()
            .map(|x| match x {
                Step::Size => "S".into(),
                Step::Settle => "~".into(),
                Step::EndBackToBack { check } => if *check { "E!" } else { "E" }.into(),
                Step::Call(c) => format!("{}{}g{}", if c.warmup { "w" } else { "t" }, c.bytes, c.group),
                Step::Wait => "W".into(),
                Step::Graph { n, call } => format!("G{n}x{}", call.bytes),
                other => format!("{other:?}"),
            })
            .collect();
        t.join(" ")
    }

    /// Today's order and sizes: per size the warm-ups, a settle, the timed
    /// iterations; back to back (closed and checked), started and waited for,
    /// or as one graph; another kind on the sweep's group with one member's
    /// input as its bytes; another reduction prepared on the executor.
    #[test]
    fn the_sweep_schedule_keeps_its_order_and_sizes() {
        let mut s = spec(SweepKind::default(), ReduceOp::Sum, Dtype::F32, vec![8, 16]);
        (s.warmup_iters, s.iters) = (1, 2);
        assert_eq!(steps(&schedule(&s, 2, None, true).unwrap()), "S w8g0 ~ t8g0 t8g0 E! S w16g0 ~ t16g0 t16g0 E!");
        assert_eq!(
            steps(&schedule(&s, 2, None, false).unwrap()),
            "S w8g0 W ~ t8g0 W t8g0 W S w16g0 W ~ t16g0 W t16g0 W"
        );
        s.graph = true;
        assert_eq!(steps(&schedule(&s, 2, None, true).unwrap()), "S w8g0 ~ G2x8 E! S w16g0 ~ G2x16 E!");
        let mut g = spec(sk(CollectiveKind::AllGather), ReduceOp::Sum, Dtype::F32, vec![16]);
        (g.warmup_iters, g.iters, g.check) = (0, 1, 0);
        let sched = schedule(&g, 2, Some(3), true).unwrap();
        assert_eq!(steps(&sched), "S ~ t8g3 E");
        let Some(Step::Call(c)) = sched.steps.get(2) else { panic!("{sched:?}") };
        assert_eq!(c.target, Target::World { bytes: 16, dtype: Dtype::F32 }, "the world call's size is gathered");
        assert!(schedule(&g, 2, None, true).is_err(), "another kind needs its group");
        let m = spec(SweepKind::default(), ReduceOp::Max, Dtype::F32, vec![8]);
        let sched = schedule(&m, 2, Some(3), true).unwrap();
        assert_eq!(steps(&sched), "S ~ t8g3");
        assert_eq!(sched.prepared.as_ref().map(|p| p.colls.len()), Some(1));
        assert!(sched
            .calls()
            .all(|c| c.issue == Issue::HostWait && c.target == Target::Prepared { index: 0, op: ReduceOp::Max }));
    }

    #[test]
    fn collectives_follow_nccl_tests_counts() {
        let s = spec(sk(CollectiveKind::AllGather), ReduceOp::Sum, Dtype::F32, vec![8, 32, 40]);
        let (t, c) = sweep_collectives(&s, 2).unwrap();
        assert_eq!(t.groups[0].members, vec![0, 1]);
        // all-gather: the size is the gathered buffer; each rank sends half
        assert_eq!(c.iter().map(|c| (c.in_elems, c.out_elems)).collect::<Vec<_>>(), vec![(1, 2), (4, 8), (5, 10)]);
        let s = spec(sk(CollectiveKind::ReduceScatter), ReduceOp::Max, Dtype::F32, vec![40]);
        let (_, c) = sweep_collectives(&s, 4).unwrap();
        // 10 elements round down to 8 over 4 ranks: 2 per rank
        assert_eq!((c[0].in_elems, c[0].out_elems), (8, 2));
        let s = spec(sk(CollectiveKind::Broadcast), ReduceOp::Sum, Dtype::F32, vec![8]);
        assert_eq!(sweep_collectives(&s, 3).unwrap().1[0].root, Some(0));
    }

    #[test]
    fn refusals_name_the_fix() {
        let s = spec(sk(CollectiveKind::AllGather), ReduceOp::Sum, Dtype::F32, vec![8]);
        let e = check_world(&s, 3).unwrap_err().to_string();
        assert!(e.starts_with("refused[BAD_ARGUMENT]") && e.contains("pass -b 12 or more"), "{e}");
        // products of up to 4 ranks' contributions: 3 x 4 x 5 x 6 = 360 > 256 in bf16
        let s = spec(sk(CollectiveKind::AllReduce), ReduceOp::Prod, Dtype::Bf16, vec![8]);
        assert!(check_world(&s, 3).is_ok());
        let e = check_world(&s, 4).unwrap_err().to_string();
        assert!(e.contains("--dtype f32"), "{e}");
        let s = spec(sk(CollectiveKind::AllReduce), ReduceOp::Avg, Dtype::F32, vec![8]);
        assert!(check_world(&s, 4).is_ok() && check_world(&s, 3).is_err());
        let s = spec(sk(CollectiveKind::Reduce), ReduceOp::Min, Dtype::Bf16, vec![8]);
        assert!(check_world(&s, 1000).is_ok());
        let s = spec(sk(CollectiveKind::AllReduce), ReduceOp::Avg, Dtype::F32, vec![8]);
        let e = check_options(&s, BackendKind::Cpu, true).unwrap_err().to_string();
        assert!(e.contains("MPI has no average"), "{e}");
        let s = spec(sk(CollectiveKind::AllGather), ReduceOp::Sum, Dtype::F32, vec![8]);
        assert!(check_options(&s, BackendKind::Cpu, true).unwrap_err().to_string().contains("has no reduction"));
        assert!(check_options(&s, BackendKind::Cpu, false).is_ok());
    }
}
