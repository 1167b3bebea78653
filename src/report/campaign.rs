//! `campaign analyze`'s I/O: gather the analysis input from a verified
//! campaign, and write `report.json` with its plots.
//!
//! Consumes the manifest, the selection and every selected run (each joined
//! and verified by [`crate::evidence::join`]). Produces an [`AnalysisInput`]
//! and an overlap excerpt of one GPU job; the statistics are in
//! [`crate::analysis`], the plots in [`crate::report::plots`]. Refuses a run
//! that does not join (naming it), and a report file of the same name with
//! other bytes (the same bytes are accepted).
//!
//! What the input holds: docs/METHODS.md, "Gathering the report input".
use crate::analysis::overlap::IntervalSource;
use crate::analysis::truth::TruthInput;
use crate::analysis::{
    inference, overlap, summary, AnalysisInput, ClaimContext, ControlsInput, DelayCounts, JobData, KnownBadInput,
    PhaseInput, Report, TimelineExcerpt, TraceClaim, TraceKindClaim,
};
use crate::campaign::chain::{load_manifest, read_attempts, verify_visiting, Selected, Selection, Verdict};
use crate::campaign::spec::{KnownBad, TraceCanary};
use crate::campaign::truth::{self, Better, TruthRecord};
use crate::core::clock::{ClockModel, WindowEstimate};
use crate::core::refusal::Code;
use crate::core::workload::Phase;
use crate::core::{fsutil, limits, stats};
use crate::evidence::commtrace;
use crate::evidence::join::{self, DelayControlReport, JoinedRun};
use crate::evidence::shard::{self, BackendKind, ShardHeader, TraceOrigin};
use crate::report::{html, plots};
use anyhow::{bail, Context, Result};
use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

/// Window of the overlap excerpt, in communication intervals (two tokens of 32 layers).
const EXCERPT_COLLECTIVES: usize = 64;

fn excerpt(j: &JoinedRun, run_id: &str, label: &str) -> Option<TimelineExcerpt> {
    let s = j.shards.first()?;
    if s.header.backend != BackendKind::Cuda {
        return None;
    }
    let phase = [Phase::Overlap, Phase::Fill, Phase::Async, Phase::Blocking]
        .into_iter()
        .find(|p| s.header.workload.phases.contains(p))?;
    let (source, compute, mut comm) = overlap::phase_intervals_ns(s, phase);
    if source == IntervalSource::Host {
        return None;
    }
    comm.sort_unstable();
    if comm.len() < 4 {
        return None;
    }
    // a window from the middle of the phase, clear of warm-up
    let start = (comm.len() / 2).min(comm.len().saturating_sub(EXCERPT_COLLECTIVES));
    let win = &comm[start..(start + EXCERPT_COLLECTIVES).min(comm.len())];
    let (t0, t1) = (win[0].0, win.iter().map(|x| x.1).max().unwrap_or(win[0].1));
    let rel = |(a, b): (u64, u64)| ((a.max(t0) - t0) as f64 / 1e3, (b.min(t1).max(a.max(t0)) - t0) as f64 / 1e3);
    Some(TimelineExcerpt {
        run_id: run_id.to_string(),
        label: label.to_string(),
        rank: s.header.rank,
        phase,
        source,
        compute_us: compute.into_iter().filter(|&(a, b)| b > t0 && a < t1).map(rel).collect(),
        comm_us: win.iter().copied().map(rel).collect(),
    })
}

/// What the analysis takes from one selected job, read from its joined run
/// (which is then dropped: a campaign's runs are never all held at once).
pub(crate) struct JobRead {
    /// The phases the job ran, with the job's samples in each
    /// ([`crate::analysis::summary::job_samples_us`]).
    samples_us: Vec<(Phase, Vec<f64>)>,
    /// The injected-delay control `join` saw.
    delay: Option<DelayControlReport>,
    /// Every rank's shard header.
    headers: Vec<ShardHeader>,
    /// Timed joined operations per kind in the phases that walked an imported trace.
    imported_joined: BTreeMap<shard::CollectiveKind, u64>,
    /// The job's overlap excerpt, if it has one.
    excerpt: Option<TimelineExcerpt>,
    /// The job's clock offsets per rank, if any rank recorded a model.
    clock: Option<crate::analysis::ClockExcerpt>,
}

/// The clock model of every rank of `j` that measured one against rank 0, on
/// rank 0's axis (rank 0 itself, the reference, has no windows of its own).
fn clock_excerpt(j: &JoinedRun, label: &str) -> Option<crate::analysis::ClockExcerpt> {
    let reference = ClockModel::reference();
    let models: Vec<(u32, &ClockModel)> = j
        .shards
        .iter()
        .filter_map(|s| s.header.clock.as_ref().map(|c| (s.header.rank, &c.model)))
        .filter(|(_, m)| **m != reference)
        .collect();
    let t0 = models.iter().map(|(_, m)| m.start.ref_ns).min()?;
    let at = |w: &WindowEstimate| (w.ref_ns.saturating_sub(t0) as f64 / 1e9, w.offset_ns / 1e3, w.bound_ns / 1e3);
    let mut ranks: Vec<crate::analysis::ClockRankWindows> = models
        .iter()
        .map(|(rank, m)| crate::analysis::ClockRankWindows {
            rank: *rank,
            start: at(&m.start),
            end: m.end.as_ref().map(at),
            shared_kernel_clock: m.shared_kernel_clock,
        })
        .collect();
    ranks.sort_by_key(|r| r.rank);
    Some(crate::analysis::ClockExcerpt { run_id: j.run.run_id.clone(), label: label.to_string(), ranks })
}

/// One job's excerpts for the report's plots.
#[derive(Default)]
pub(crate) struct Excerpts {
    /// Overlap timeline.
    pub(crate) overlap: Option<TimelineExcerpt>,
    /// Clock offsets.
    pub(crate) clock: Option<crate::analysis::ClockExcerpt>,
}

impl JobRead {
    fn of(j: &JoinedRun, attempt_id: &str, label: &str) -> Self {
        let imported: BTreeSet<Phase> = j
            .shards
            .iter()
            .flat_map(|s| &s.header.phases)
            .filter(|p| matches!(p.trace, Some(TraceOrigin::Imported { .. })))
            .map(|p| p.phase)
            .collect();
        let mut imported_joined = BTreeMap::new();
        for c in j.collectives.iter().filter(|c| imported.contains(&c.phase) && !c.warmup) {
            *imported_joined.entry(c.kind).or_default() += 1;
        }
        Self {
            samples_us: j.run.workload.phases.iter().map(|&p| (p, summary::job_samples_us(j, p))).collect(),
            delay: join::delay_control(j),
            headers: j.shards.iter().map(|s| s.header.clone()).collect(),
            imported_joined,
            excerpt: excerpt(j, attempt_id, label),
            clock: clock_excerpt(j, label),
        }
    }
}

/// The selected jobs `verify` joined, read once, by (attempt, run directory).
#[derive(Default)]
pub struct JobsRead(BTreeMap<(String, String), JobRead>);

/// `verify`, reading every selected job it joins for the analysis
/// ([`crate::campaign::chain::verify_visiting`]): `analyze` then joins each
/// run once, not once to verify and again to analyze.
pub fn verify_reading(dir: &Path) -> Result<(Verdict, JobsRead)> {
    let mut read = JobsRead::default();
    let v = verify_visiting(dir, &mut |c, e, j| {
        read.0.insert((e.attempt_id.clone(), e.run_dir.clone()), JobRead::of(j, &e.attempt_id, &c.label));
    })?;
    Ok((v, read))
}

/// Gather the analysis input of a verified campaign and one job's excerpts,
/// taking each job from `read` where `verify` read it (a job not there is
/// joined here).
pub(crate) fn collect_read(dir: &Path, mut read: JobsRead) -> Result<(AnalysisInput, Excerpts)> {
    let (m, sha) = load_manifest(dir)?;
    let sel_path = dir.join("selection.json");
    let sel: Selection = serde_json::from_slice(&limits::read_bounded(&sel_path, limits::MAX_JSON_BYTES)?)
        .with_context(|| format!("{}: not a selection", sel_path.display()))?;
    let label_of_name: BTreeMap<&str, &str> =
        m.configs.iter().map(|c| (c.config.name.as_str(), c.label.as_str())).collect();
    let lab = |n: &str| -> Result<String> {
        label_of_name
            .get(n)
            .map(|s| s.to_string())
            .with_context(|| format!("{n:?} is not a configuration of the manifest"))
    };
    let mut per: BTreeMap<Phase, BTreeMap<String, Vec<JobData>>> = BTreeMap::new();
    let mut delays: BTreeMap<String, Vec<(u32, DelayCounts)>> = BTreeMap::new();
    let (mut hosts, mut gpus, mut nccl, mut drivers, mut cpus, mut mpis) =
        (BTreeSet::new(), BTreeSet::new(), BTreeSet::new(), BTreeSet::new(), BTreeSet::new(), BTreeSet::new());
    let mut excerpt_out = None;
    let mut clock_out = None;
    let mut backend = String::new();
    let mut ran = TraceRan::default();
    // the truth cells' metric and every selected job's wall seconds (for the decision cost)
    let attempts = read_attempts(dir)?;
    let wall_s = |attempt_id: &str| {
        attempts
            .iter()
            .find(|a| a.attempt_id == attempt_id)
            .map(|a| a.finished_unix_ms.saturating_sub(a.started_unix_ms) as f64 / 1e3)
    };
    let mut truth_values: BTreeMap<String, Vec<(u32, f64)>> = BTreeMap::new();
    let mut truth_seconds: BTreeMap<String, Vec<(u32, f64)>> = BTreeMap::new();
    let mut proxy_seconds: BTreeMap<String, Vec<(u32, f64)>> = BTreeMap::new();
    for e in &sel.entries {
        let cell = m
            .schedule
            .iter()
            .find(|c| c.cell_id == e.cell_id)
            .with_context(|| format!("selection names cell {}, which the manifest lacks", e.cell_id))?;
        if cell.truth {
            let r = read_truth_record(dir, e)?;
            let metric =
                r.metric.with_context(|| format!("{}: a selected truth attempt without a metric", e.run_dir))?;
            truth_values.entry(cell.label.clone()).or_default().push((cell.round, metric.value));
            truth_seconds.entry(cell.label.clone()).or_default().push((cell.round, r.wall_s));
            continue;
        }
        if let Some(s) = wall_s(&e.attempt_id) {
            proxy_seconds.entry(cell.label.clone()).or_default().push((cell.round, s));
        }
        let j = match read.0.remove(&(e.attempt_id.clone(), e.run_dir.clone())) {
            Some(j) => j,
            None => {
                let run_dir = dir.join(&e.run_dir);
                let joined = join::join_dir(&run_dir).with_context(|| format!("joining {}", run_dir.display()))?;
                JobRead::of(&joined, &e.attempt_id, &cell.label)
            }
        };
        for (p, samples_us) in j.samples_us {
            per.entry(p)
                .or_default()
                .entry(cell.label.clone())
                .or_default()
                .push(JobData { round: cell.round, samples_us });
        }
        if let Some(d) = &j.delay {
            // beyond the design, the counts are the beyond-design ones and the skew test's are kept beside them
            let skew_counts = (d.delayed_detected, d.undelayed_false_alarms);
            let (detected, false_alarms) =
                d.beyond_design.as_ref().map_or(skew_counts, |b| (b.delayed_detected, b.undelayed_false_alarms));
            let counts = DelayCounts {
                delay_us: d.delay_us,
                delayed: d.delayed,
                detected,
                undelayed: d.undelayed,
                false_alarms,
                beyond_design: d.beyond_design.is_some(),
                skew_counts: d.beyond_design.as_ref().map(|_| skew_counts),
            };
            delays.entry(cell.label.clone()).or_default().push((cell.round, counts));
        }
        ran.add(&j.headers, &j.imported_joined);
        for h in &j.headers {
            hosts.insert(h.host.clone());
            backend = format!("{:?}", h.backend).to_lowercase();
            let fact = |k: &str| h.device.facts.iter().find(|(n, _)| n == k).map(|(_, v)| v.clone());
            if h.backend == BackendKind::Cuda {
                gpus.insert(h.device.name.clone());
                if let Some(v) = fact("nccl_version") {
                    nccl.insert(v);
                }
                if let Some(v) = fact("driver_version_start") {
                    drivers.insert(v);
                }
            } else {
                if let Some(c) = &h.identity.cpu_model {
                    cpus.insert(c.clone());
                }
                if let Some(v) = &h.identity.mpi_library {
                    mpis.insert(v.split([',', '\n']).next().unwrap_or("").trim().to_string());
                }
            }
        }
        excerpt_out = excerpt_out.or(j.excerpt);
        clock_out = clock_out.or(j.clock);
    }
    let labels: Vec<String> = m.configs.iter().map(|c| c.label.clone()).collect();
    let mut phases = Vec::new();
    for (phase, by_label) in per {
        if let Some(l) = labels.iter().find(|l| !by_label.contains_key(*l)) {
            bail!("phase {phase}: configuration {l} has no selected job");
        }
        phases.push(PhaseInput {
            phase,
            labels: labels.clone(),
            jobs: labels.iter().map(|l| by_label[l].clone()).collect(),
        });
    }
    let join = |s: &BTreeSet<String>| s.iter().cloned().collect::<Vec<_>>().join(", ");
    let on = format!("{} rank(s) per job on {} host(s)", m.spec.ranks, hosts.len());
    let hardware = if backend == "cuda" {
        let (g, d, n) = (join(&gpus), join(&drivers), join(&nccl));
        format!("{on}, one GPU per rank: {g} (driver {d}); NCCL {n} across configurations")
    } else {
        format!("{on}, CPU backend: {}; {}", join(&cpus), join(&mpis))
    };
    let w = &m.spec.workload;
    let trace = ran.claim(w.trace.as_deref());
    // the kinds a trace's passes ran on some rank, in words
    let ran_kinds = |t: &TraceClaim, words: fn(&TraceKindClaim) -> String| {
        let ran = t.kinds.iter().filter(|k| k.run_per_pass_by_rank.iter().any(|&n| n > 0));
        ran.map(words).collect::<Vec<_>>().join(", ")
    };
    let (workload, replay_semantics, what_ran) = match &trace {
        Some(t) => (
            format!(
                "imported trace {} (SHA-256 {}): per pass, {}; left out per pass: {}; {} timed passes (+{} warm-up) \
                    per job, phases {} ({} backend)",
                t.file,
                t.sha256,
                ran_kinds(t, kind_words),
                left_out_words(t),
                t.passes,
                t.warmup_passes,
                w.phases,
                m.spec.backend
            ),
            "each trace phase walks every rank's collectives of the imported trace once per token (pass) on the \
                trace's own process groups, with their recorded kinds, sizes, element types, roots and peers \
                (reductions are sums: the trace does not record the operation); replay paces each collective to the \
                gap the trace recorded before it (device interval where recorded, else host), counted from the moment \
                the host observes the previous collective's completion; fill runs the compute the trace recorded in \
                each gap as calibrated units before the collective (quantization residual carried); overlap issues \
                each world all-reduce, runs that compute, then waits, while a kind the backend runs to completion on \
                the host (every other kind on the cpu backend) runs after its gap's compute, as in fill; per-token \
                (per-pass) latency is measured on every rank"
                .to_string(),
            format!(
                "collectives other than the trace's ({}), at other sizes or element types than it records",
                ran_kinds(t, |k| k.kind.name().to_string())
            ),
        ),
        None => (
            format!(
                "{} tokens x {} layers, all-reduce sizes {} cycling per layer, phases {}, {} isolated iterations per \
                    size ({} backend)",
                w.tokens, w.layers, w.sizes, w.phases, w.iters, m.spec.backend
            ),
            "replay re-issues blocking's collectives with their recorded sizes, pacing each one to its recorded host \
                gap counted from the moment the host observes the previous collective's completion; fill replaces each \
                gap by calibrated compute units (quantization residual carried); per-token latency is measured on \
                every rank"
                .to_string(),
            format!("message sizes outside {}", w.sizes),
        ),
    };
    let mut not_represented = vec![
        if hosts.len() <= 1 {
            "more than one host (no inter-node network)".to_string()
        } else {
            format!("more than {} hosts", hosts.len())
        },
        format!("rank counts other than {}", m.spec.ranks),
        what_ran,
    ];
    match &trace {
        Some(t) if t.left_out_per_pass_by_rank.iter().any(|&n| n > 0) => {
            not_represented.push(format!("the trace's collectives left out of every pass ({})", left_out_words(t)))
        }
        Some(_) => {}
        None => {
            let dtypes = ran.dtypes.iter().copied().collect::<Vec<_>>().join(", ");
            not_represented.push(format!("collectives other than all-reduce ({dtypes} sum)"))
        }
    }
    not_represented.extend([
        "contention from other jobs or tenants".to_string(),
        format!(
            "time: {} rounds in one campaign (no thermal, firmware or driver drift across days)",
            m.spec.repetitions
        ),
    ]);
    if backend == "cuda" {
        not_represented.push(format!("GPU models other than {}", join(&gpus)));
        not_represented.push(format!("NCCL versions other than {}", join(&nccl)));
    } else {
        not_represented.push("GPUs and NCCL (CPU backend: MPI's own all-reduce)".to_string());
    }
    let canary = (m.spec.canary.as_ref())
        .map(|c| anyhow::Ok((lab(&c.candidate)?, lab(&c.baseline)?, c.phase.unwrap_or(Phase::Blocking))))
        .transpose()?;
    let mut controls = ControlsInput::default();
    if let Some(c) = &m.spec.controls {
        for [a, b] in &c.aa {
            controls.aa_pairs.push((lab(a)?, lab(b)?));
        }
        for k in &c.known_bad {
            controls.known_bad.push(match k {
                KnownBad::Name(n) => KnownBadInput { label: lab(n)?, graded: None },
                KnownBad::Graded(g) => KnownBadInput {
                    label: lab(&g.config)?,
                    graded: Some((lab(&g.reference)?, g.slowdown_pct, g.mechanism.clone())),
                },
            });
        }
    }
    controls.injected_skew = delays
        .into_iter()
        .map(|(l, mut v)| {
            v.sort_by_key(|x| x.0);
            (l, v)
        })
        .collect();
    let trace_canary = match &m.spec.trace_canary {
        None => None,
        Some(tc) => {
            let variant = |v: &str| -> Result<(String, Option<String>, Vec<String>)> {
                let names: Vec<String> = tc.configs.iter().map(|c| TraceCanary::config_name(v, c)).collect();
                let sha = names.first().and_then(|n| m.frozen_trace(n)).map(|(_, sha)| sha);
                Ok((v.to_string(), sha, names.iter().map(|n| lab(n)).collect::<Result<_>>()?))
            };
            Some(crate::analysis::TraceCanaryInput {
                phase: tc.phase(),
                configs: tc.configs.clone(),
                source: variant(&tc.source)?,
                variants: tc.variants.iter().map(|v| variant(v)).collect::<Result<_>>()?,
            })
        }
    };
    let truth = match &m.spec.truth {
        None => None,
        Some(t) => {
            let (metric, unit, better) = truth::metric_words(&t.metric);
            let labels: Vec<String> =
                m.configs.iter().filter(|c| t.runs_under(&c.config.name)).map(|c| c.label.clone()).collect();
            if let Some(l) = labels.iter().find(|l| !truth_values.contains_key(*l)) {
                bail!("truth: configuration {l} has no selected truth job");
            }
            let per = |mut map: BTreeMap<String, Vec<(u32, f64)>>| -> Vec<Vec<(u32, f64)>> {
                labels.iter().map(|l| map.remove(l).unwrap_or_default()).collect()
            };
            Some(TruthInput {
                metric,
                unit,
                higher_is_better: better == Better::Higher,
                labels: labels.clone(),
                values: per(truth_values),
                seconds: per(truth_seconds),
                proxy_seconds: per(proxy_seconds),
            })
        }
    };
    let input = AnalysisInput {
        phases,
        policy: m.spec.analysis.clone(),
        canary,
        trace_canary,
        truth,
        controls,
        context: ClaimContext {
            campaign_id: m.campaign_id.clone(),
            manifest_sha256: sha,
            hardware,
            workload,
            replay_semantics,
            not_represented,
            trace,
        },
    };
    Ok((input, Excerpts { overlap: excerpt_out, clock: clock_out }))
}

/// A selected truth attempt's record, read again against the selection's digest.
fn read_truth_record(dir: &Path, e: &Selected) -> Result<TruthRecord> {
    let p = dir.join(&e.run_dir).join(truth::TRUTH_FILE);
    let bytes = limits::read_bounded(&p, limits::MAX_JSON_BYTES)?;
    let got = fsutil::sha256_hex(&bytes);
    if got != e.run_json_sha256 {
        crate::refuse!(
            Code::Stale,
            "stale: {} hashes to {got}, the selection binds {}",
            p.display(),
            e.run_json_sha256
        );
    }
    serde_json::from_slice(&bytes).with_context(|| format!("{}: not a truth record", p.display()))
}

/// What the selected jobs ran, gathered from their shards and joined events.
#[derive(Default)]
struct TraceRan {
    /// The imported trace's SHA-256 and the phases that walked it.
    sha256: Option<String>,
    phases: BTreeSet<Phase>,
    /// (timed, warm-up) passes.
    passes: (u32, u32),
    /// Per kind: per rank (run, left out) per pass, dtypes, sizes.
    kinds: BTreeMap<shard::CollectiveKind, KindRan>,
    /// Per rank: left out per pass.
    left_out: BTreeMap<u32, u32>,
    /// Element types of the ranks' all-reduces.
    dtypes: BTreeSet<&'static str>,
}

#[derive(Default)]
struct KindRan {
    per_rank: BTreeMap<u32, (u32, u32)>,
    dtypes: BTreeSet<commtrace::TraceDtype>,
    sizes: BTreeSet<u64>,
    joined: u64,
}

impl TraceRan {
    /// One job: its ranks' headers and its timed joined operations per kind
    /// in the phases that walked an imported trace.
    fn add(&mut self, headers: &[ShardHeader], imported_joined: &BTreeMap<shard::CollectiveKind, u64>) {
        // the element type the ranks ran their all-reduces in (graph mode records no per-collective events)
        for h in headers {
            self.dtypes.insert(match h.workload.dtype {
                shard::Dtype::F32 => "float32",
                shard::Dtype::Bf16 => "bfloat16",
            });
        }
        for h in headers {
            for p in &h.phases {
                let Some(TraceOrigin::Imported { sha256, left_out_per_pass, kinds, .. }) = &p.trace else { continue };
                self.phases.insert(p.phase);
                self.sha256.get_or_insert_with(|| sha256.clone());
                self.passes = (h.workload.tokens, h.workload.warmup_tokens);
                self.left_out.insert(h.rank, *left_out_per_pass);
                for k in kinds {
                    let e = self.kinds.entry(k.kind).or_default();
                    e.per_rank.insert(h.rank, (k.run_per_pass, k.left_out_per_pass));
                    e.dtypes.extend(k.dtypes.iter().copied());
                    e.sizes.extend(k.sizes_bytes.iter().copied());
                }
            }
        }
        for (&kind, &n) in imported_joined {
            self.kinds.entry(kind).or_default().joined += n;
        }
    }

    /// The claim, where some phase walked an imported trace (`file`: the spec's name of it).
    fn claim(&self, file: Option<&str>) -> Option<TraceClaim> {
        let sha256 = self.sha256.clone()?;
        let ranks: Vec<u32> = self.left_out.keys().copied().collect();
        Some(TraceClaim {
            file: file.unwrap_or("(not named in the spec)").to_string(),
            sha256,
            passes: self.passes.0,
            warmup_passes: self.passes.1,
            phases: self.phases.iter().copied().collect(),
            left_out_per_pass_by_rank: self.left_out.values().copied().collect(),
            kinds: self
                .kinds
                .iter()
                .map(|(kind, k)| TraceKindClaim {
                    kind: *kind,
                    run_per_pass_by_rank: ranks.iter().map(|r| k.per_rank.get(r).map_or(0, |x| x.0)).collect(),
                    left_out_per_pass_by_rank: ranks.iter().map(|r| k.per_rank.get(r).map_or(0, |x| x.1)).collect(),
                    dtypes: k.dtypes.iter().copied().collect(),
                    sizes_bytes: k.sizes.iter().copied().collect(),
                    joined_operations: k.joined,
                })
                .collect(),
        })
    }
}

/// A per-rank count: one number where every rank has it, else each rank's.
fn by_rank(v: &[u32]) -> String {
    match v.first() {
        Some(&n) if v.iter().all(|&x| x == n) => n.to_string(),
        _ => format!("{} by rank", v.iter().map(|n| n.to_string()).collect::<Vec<_>>().join("/")),
    }
}

fn kind_words(k: &TraceKindClaim) -> String {
    let dtypes: Vec<&str> = k.dtypes.iter().map(|d| d.name()).collect();
    let sizes: Vec<String> = k.sizes_bytes.iter().map(|b| format!("{b} B")).collect();
    format!("{} {} ({}; {})", k.kind.name(), by_rank(&k.run_per_pass_by_rank), dtypes.join(", "), sizes.join(", "))
}

fn left_out_words(t: &TraceClaim) -> String {
    let out: Vec<String> = t
        .kinds
        .iter()
        .filter(|k| k.left_out_per_pass_by_rank.iter().any(|&n| n > 0))
        .map(|k| format!("{} {}", k.kind.name(), by_rank(&k.left_out_per_pass_by_rank)))
        .collect();
    match (out.is_empty(), t.left_out_per_pass_by_rank.iter().any(|&n| n > 0)) {
        (true, false) => "none".into(),
        (true, true) => format!("{} (kinds not recorded by this shard format)", by_rank(&t.left_out_per_pass_by_rank)),
        (false, _) => out.join(", "),
    }
}

fn write_same_or_new(path: &Path, bytes: &[u8]) -> Result<()> {
    match std::fs::read(path) {
        Ok(old) if old == bytes => Ok(()),
        Ok(_) => crate::refuse!(
            Code::AlreadyExists,
            "{} exists with other contents; a report is never replaced (pass another --report-dir)",
            path.display()
        ),
        Err(_) => fsutil::write_new_atomic(path, bytes),
    }
}

/// The producer and format of an existing `report.json`, to refuse a
/// comparison across versions: a seeded analysis regenerates a report byte
/// for byte only with the tool that wrote it.
fn existing_producer(path: &Path) -> Option<(u32, String)> {
    let v: serde_json::Value = serde_json::from_slice(&std::fs::read(path).ok()?).ok()?;
    let format = v.get("format_version")?.as_u64()? as u32;
    let producer = v
        .get("producer")
        .and_then(|p| p.as_str())
        .unwrap_or("a tool before report format 2 (no producer recorded)")
        .to_string();
    Some((format, producer))
}

/// Analyze a verified campaign and write `report.json` and the plots into `out_dir`.
pub(crate) fn analyze_and_write(dir: &Path, verdict: Verdict, read: JobsRead, out_dir: &Path) -> Result<Report> {
    let (input, excerpt) = collect_read(dir, read)?;
    let evidence =
        format!(
        "measured: verified campaign {} ({} of {} cells), every number from the selected jobs' shards{}; the job is \
            the unit of replication",
        input.context.campaign_id,
        verdict.cells_ok,
        verdict.cells_expected,
        if input.truth.is_some() { " and the truth cells' records (the metric read again from each job's kept \
            output)" } else { "" }
    );
    let mut report = crate::analysis::analyze(&input, verdict, &evidence)?;
    // from reading what the folder holds to its last file: one analyze at a time
    let _lock = crate::campaign::lock_report_dir(out_dir, &format!("analyze {}", dir.display()))?;
    if let Some((format, producer)) = existing_producer(&out_dir.join("report.json")) {
        if format != report.format_version || producer != report.producer {
            bail!(
                "{} was written by {producer} (report format {format}); this is {} (format {}): reports of different \
                    versions are not compared or replaced. \
                 Pass another --report-dir to write this version's report beside it",
                out_dir.join("report.json").display(),
                report.producer,
                report.format_version
            );
        }
    }
    report.overlap_excerpt = excerpt.overlap;
    report.clock_excerpt = excerpt.clock;
    let plots = plots::all(&report)?;
    report.plots = plots.iter().map(|(n, _)| n.clone()).collect();
    std::fs::create_dir_all(out_dir).with_context(|| format!("creating {}", out_dir.display()))?;
    for (name, svg) in &plots {
        write_same_or_new(&out_dir.join(name), svg.as_bytes())?;
    }
    let mut bytes = serde_json::to_vec_pretty(&report)?;
    bytes.push(b'\n');
    write_same_or_new(&out_dir.join("report.json"), &bytes)?;
    // the same page wherever the report folder is (a re-run reproduces the folder's bytes)
    let evidence = html::evidence_links();
    write_same_or_new(&out_dir.join("report.html"), html::page(&report, &plots, &evidence).as_bytes())?;
    Ok(report)
}

/// The verdict of `verify`, refused with `INCOMPLETE` unless the campaign
/// is complete, and the jobs it read ([`verify_reading`]).
pub fn verified(dir: &Path) -> Result<(Verdict, JobsRead)> {
    let (v, read) = verify_reading(dir)?;
    if !v.complete {
        crate::refuse!(
            Code::Incomplete,
            "{}: withheld-incomplete ({} refusals); verify the campaign first",
            dir.display(),
            v.refusals.len()
        );
    }
    Ok((v, read))
}

/// A campaign's analysis input, only once `verify` passes ([`verified`]).
pub(crate) fn verified_input(dir: &Path) -> Result<(Verdict, AnalysisInput)> {
    let (v, read) = verified(dir)?;
    Ok((v, collect_read(dir, read)?.0))
}

/// `campaign replicate A B`: both verified campaigns' reports (not written), their pairs matched by configuration
/// name ([`crate::analysis::replicate`]).
pub fn replicate(a: &Path, b: &Path) -> Result<crate::analysis::Replication> {
    let ((ra, na), (rb, nb)) = (analyze_for_replication(a)?, analyze_for_replication(b)?);
    let name = |m: &BTreeMap<String, String>, l: &str| m.get(l).cloned().unwrap_or_else(|| l.to_string());
    crate::analysis::replicate(&ra, &rb, &|l| name(&na, l), &|l| name(&nb, l))
}

/// A verified campaign's report (not written) and its label → configuration name map.
fn analyze_for_replication(dir: &Path) -> Result<(Report, BTreeMap<String, String>)> {
    let (v, read) = verified(dir)?;
    let (m, _) = load_manifest(dir)?;
    let (input, _) = collect_read(dir, read)?;
    let ev = format!("measured: verified campaign {}", input.context.campaign_id);
    let r = crate::analysis::analyze(&input, v, &ev)?;
    Ok((r, m.configs.iter().map(|c| (c.label.clone(), c.config.name.clone())).collect()))
}

/// `campaign power`: the power table from a verified pilot campaign's own noise in `phase` (default: its canary's,
/// else blocking) at `min_effect_pct` (default: its policy's).
pub fn power(dir: &Path, phase: Option<&str>, min_effect_pct: Option<f64>) -> Result<String> {
    use crate::analysis::inference::{approx_power, rounds_to_decide, rounds_words, two_way, COVERAGE, POWER};
    use std::fmt::Write;
    let (_, input) = &verified_input(dir)?;
    let phase: Phase = match phase {
        Some(p) => p.parse()?,
        None => input.canary.as_ref().map(|c| c.2).unwrap_or(Phase::Blocking),
    };
    let min_effect_pct = min_effect_pct.unwrap_or(input.policy.min_effect_pct);
    if min_effect_pct.is_nan() || min_effect_pct < 0.0 {
        bail!("--min-effect-pct {min_effect_pct}: must be non-negative");
    }
    let p = input
        .phases
        .iter()
        .find(|p| p.phase == phase)
        .with_context(|| format!("the pilot campaign has no phase {phase}"))?;
    let mut table: BTreeMap<u32, Vec<f64>> = BTreeMap::new();
    for (c, jobs) in p.jobs.iter().enumerate() {
        for j in jobs {
            let mut v = j.samples_us.clone();
            let med = stats::median(&mut v)
                .with_context(|| format!("{}, round {}: a job without events", p.labels[c], j.round))?;
            table.entry(j.round).or_insert_with(|| vec![f64::NAN; p.labels.len()])[c] = med;
        }
    }
    let rows: Vec<Vec<f64>> = table.into_values().collect();
    let (_, rss, df) = two_way(&rows)?;
    if df == 0 {
        bail!("the pilot needs at least 2 rounds and 2 configurations to measure its noise");
    }
    let sigma = (rss / df as f64).sqrt();
    let sd = sigma * 2f64.sqrt();
    let mut o = String::new();
    let _ = writeln!(
        o,
        "pilot {} phase {phase}: {} rounds x {} configurations; residual job noise {:.2}% (log sd, {df} degrees of \
            freedom), so a pair's per-round log-ratio has sd {:.2}%",
        input.context.campaign_id,
        rows.len(),
        p.labels.len(),
        sigma * 100.0,
        sd * 100.0
    );
    let _ = writeln!(
        o,
        "power to decide a true difference (95% interval beyond ±{min_effect_pct}%), approximate (paired t):"
    );
    let rounds = [3u32, 5, 10, 20, 50];
    let _ = writeln!(o, "{:>8} {}", "delta", rounds.map(|r| format!("{:>10}", format!("{r} rounds"))).join(""));
    for e in [1.0, 2.0, 5.0, 10.0] {
        let _ = writeln!(
            o,
            "{:>7}% {}",
            e,
            rounds.map(|r| format!("{:>9.0}%", approx_power(sd, e, min_effect_pct, COVERAGE, r) * 100.0)).join(" ")
        );
    }
    for e in [1.0, 2.0, 5.0, 10.0] {
        let need = if e <= min_effect_pct {
            format!("never: δ does not exceed the minimum effect {min_effect_pct}% (see --min-effect-pct)")
        } else {
            rounds_words(rounds_to_decide(sd, e, min_effect_pct, COVERAGE, POWER))
        };
        let _ = writeln!(o, "to resolve δ = {e}% with {:.0}% power you need {need}", POWER * 100.0);
    }
    let family = p.labels.len() * (p.labels.len() - 1) / 2;
    if family > 1 {
        // the pair table and the known-bad controls read simultaneous intervals: a pair there needs more rounds than
        // the canary (the A/A controls are judged at their own family's level, never below this one)
        let level = inference::simultaneous_coverage(COVERAGE, family);
        let need: Vec<String> = [1.0, 2.0, 5.0, 10.0]
            .into_iter()
            .filter(|&e| e > min_effect_pct)
            .map(|e| format!("δ = {e}%: {}", rounds_words(rounds_to_decide(sd, e, min_effect_pct, level, POWER))))
            .collect();
        let _ = writeln!(
            o,
            "in the pair table and the known-bad controls ({family} pairs, each interval at {:.3}% so that all hold \
                together at {:.0}%), {:.0}% power needs: {}",
            level * 100.0,
            COVERAGE * 100.0,
            POWER * 100.0,
            need.join("; ")
        );
    }
    let _ = writeln!(
        o,
        "(the noise estimate itself has {df} degrees of freedom: with few, treat these counts as \
        rough; method and its simulated check: docs/CAMPAIGNS.md, \"Calibration\")"
    );
    Ok(o)
}
