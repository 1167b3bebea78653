//! `canary verify`: the source and its candidates replayed as one real
//! campaign, and every candidate judged against the source.
//!
//! Consumes the source trace, the canary artifact (and further artifacts), a
//! campaign spec and a function that runs a spec into a directory (the
//! command layer's `campaign run`). Produces `inputs/`, `verify-spec.toml`,
//! `campaign/` and `canary-verify.json` (format version 1, schema
//! `canary-verify`) in the output directory. Refuses before anything runs: an
//! artifact whose digest does not hold or whose content contradicts itself, a
//! source other than the one compiled, an output directory that exists, and a
//! candidate that a check needing no measurement already fails (`STATIC_CHECK`,
//! unless `--replay-failed`). Details: docs/METHODS.md, "Canary verification".
use crate::analysis::ranking::Relation;
use crate::analysis::truth::TruthReport;
use crate::analysis::{agreement, overlap, summary};
use crate::campaign::chain::{self, Selection};
use crate::campaign::spec::{CampaignSpec, ConfigSpec, Controls, KnownBad, LauncherKind, TraceCanary};
use crate::canary::artifact::{self, Canary, Method};
use crate::canary::compare::{self, CandidateVerdict, Check, JobMeasure, Paired, TraceFacts};
use crate::canary::fold::Node;
use crate::canary::reduce::Oracle;
use crate::canary::{baseline, compile, expand, Assurance};
use crate::core::refusal::{code_of, refuse, Code};
use crate::core::workload::{self, Phase};
use crate::core::{fsutil, limits, stats};
use crate::evidence::commtrace::{self, CommTrace};
use crate::evidence::join::{self, JoinedRun};
use crate::report::run::{self, RunOptions};
use anyhow::{Context, Result};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// Format version of `canary-verify.json` (2 added `unjudged`; a version 1
/// report reads with none).
pub const VERIFY_FORMAT_VERSION: u32 = 2;

/// What to verify and how.
#[derive(Clone, Debug)]
pub struct VerifyOptions {
    /// The source trace.
    pub source: PathBuf,
    /// The canary artifact.
    pub canary: PathBuf,
    /// Further artifacts judged the same way (a reduced one, another canary).
    pub also: Vec<PathBuf>,
    /// The campaign spec.
    pub configs: PathBuf,
    /// Backend, in place of the spec's.
    pub backend: Option<String>,
    /// Rounds, in place of the spec's repetitions.
    pub rounds: Option<u32>,
    /// Timed passes over each trace per job.
    pub passes: u32,
    /// Phases each job runs (`replay`, and `overlap` for the hidden-communication check).
    pub phases: String,
    /// Verify the baselines at equal size too.
    pub baselines: bool,
    /// Also verify the first N events as a sample.
    pub head_sample: Option<usize>,
    /// Output directory (must not exist).
    pub out: PathBuf,
    /// Replay a canary (or a further compiled artifact) even when a check
    /// that needs no measurement already fails it.
    pub replay_failed: bool,
}

/// The controls as judged.
#[derive(schemars::JsonSchema, Serialize, Deserialize, Clone, Debug, PartialEq)]
pub struct ControlsOutcome {
    /// Whether the spec declares any control.
    pub declared: bool,
    /// Whether every control behaved (absent when none was declared).
    pub behaved: Option<bool>,
    /// Each control: variant, what, outcome.
    pub details: Vec<String>,
    /// The controls counted per kind ("injected-skew: 24 of 24 behaved; …"); empty when none.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub summary: String,
}

/// `canary-verify.json`.
#[derive(schemars::JsonSchema, Serialize, Deserialize, Clone, Debug, PartialEq)]
pub struct VerifyReport {
    /// Format version ([`VERIFY_FORMAT_VERSION`]).
    pub format_version: u32,
    /// Evidence class of the numbers.
    pub evidence: String,
    /// The source: path, file SHA-256, canonical SHA-256, collectives.
    pub source: artifact::SourceBinding,
    /// The spec used, with its SHA-256.
    pub spec: (String, String),
    /// Backend.
    pub backend: String,
    /// Rounds run.
    pub rounds: u32,
    /// Configurations ranked.
    pub configs: Vec<String>,
    /// The campaign directory and its manifest SHA-256.
    pub campaign: (String, String),
    /// The controls.
    pub controls: ControlsOutcome,
    /// Every candidate, the canary first.
    pub candidates: Vec<CandidateVerdict>,
    /// Whether the canary beat every baseline (absent without baselines).
    pub canary_beats_baselines: Option<bool>,
    /// The real job's ranking and the source's pick judged on it (specs with `[truth]`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub truth: Option<super::truth::VerifyTruth>,
    /// The state never granted by the tool, and why.
    pub never_granted: String,
}

/// Static facts of a trace.
pub fn facts(t: &CommTrace) -> TraceFacts {
    let mut f = TraceFacts::default();
    let tm = compile::timings(t);
    for r in &t.ranks {
        for c in &r.collectives {
            let key = format!("{} {} {}B group {}", c.kind.name(), c.dtype.pytorch_name(), c.in_bytes(), c.group);
            *f.identities.entry(key).or_insert(0) += 1;
            *f.kinds.entry(c.kind.name().to_string()).or_insert(0) += 1;
        }
    }
    for g in &tm.gap_ns {
        f.gaps_ns.extend(g.iter().skip(1).flatten());
    }
    f
}

/// Check the artifact against the source bytes: refused on any mismatch.
pub(crate) fn check_binding(
    c: &Canary,
    art_path: &Path,
    t: &CommTrace,
    src_bytes: &[u8],
    src_path: &Path,
) -> Result<()> {
    let sha = fsutil::sha256_hex(src_bytes);
    if sha == c.source.file_sha256 {
        return Ok(());
    }
    let canonical = artifact::canonical_sha256(t)?;
    let counts: Vec<u64> = t.ranks.iter().map(|r| r.collectives.len() as u64).collect();
    if t.world_size != c.source.world_size || counts != c.source.collectives_per_rank {
        crate::refuse!(
            Code::IdentityMismatch,
            "{} is another trace than the one {} was compiled from ({} ranks with {:?} collectives; the canary's \
                source had {} ranks with {:?}, SHA-256 {})",
            src_path.display(),
            art_path.display(),
            t.world_size,
            counts,
            c.source.world_size,
            c.source.collectives_per_rank,
            c.source.file_sha256
        );
    }
    crate::refuse!(
        Code::DigestMismatch,
        "{}: SHA-256 {sha}, but {} was compiled from a file with SHA-256 {} ({}): the source changed since, or it is \
            another trace",
        src_path.display(),
        art_path.display(),
        c.source.file_sha256,
        if canonical == c.source.canonical_sha256 { "the same content written differently" } else { "other content" }
    );
}

fn variant_config(variant: &str, config: &str) -> String {
    TraceCanary::config_name(variant, config)
}

struct Candidate {
    variant: String,
    artifact: Canary,
    artifact_bytes: u64,
    trace: CommTrace,
}

/// Run the verification; its campaign runs as `campaign run` does, printing to stderr (stdout keeps the verdict).
pub fn verify(o: &VerifyOptions, log: &mut dyn std::io::Write) -> Result<VerifyReport> {
    // integrity first: nothing runs on a broken chain
    let src_bytes = limits::read_bounded(&o.source, limits::MAX_TEXT_TABLE_BYTES)
        .with_context(|| format!("reading source {}", o.source.display()))?;
    let t = CommTrace::from_slice(&src_bytes)
        .map_err(|e| refuse(Code::BadInput, format!("{}: {e:#}", o.source.display())))?;
    let mut arts: Vec<(String, Canary, u64)> = Vec::new();
    for (i, p) in std::iter::once(&o.canary).chain(&o.also).enumerate() {
        let (c, bytes) = artifact::read(p)?;
        check_binding(&c, p, &t, &src_bytes, &o.source)?;
        let name = if i == 0 { "canary".to_string() } else { format!("also{i}-{}", c.method.name()) };
        arts.push((name, c, bytes.len() as u64));
    }
    if o.out.symlink_metadata().is_ok() {
        crate::refuse!(Code::AlreadyExists, "{} exists; canary verify writes a new directory", o.out.display());
    }
    let spec_in = CampaignSpec::load(&o.configs)?;
    // baselines at the canary's size
    let (k, replayed, seed) = (
        arts[0].1.slots.len(),
        arts[0].1.replay.collectives_per_pass.first().copied().unwrap_or(0),
        arts[0].1.replay.seed,
    );
    let mut cands: Vec<Candidate> = Vec::new();
    for (name, c, b) in arts {
        let trace = expand::expand(&c).with_context(|| format!("expanding {name}"))?;
        cands.push(Candidate { variant: name, artifact: c, artifact_bytes: b, trace });
    }
    let src_path = o.source.display().to_string();
    let mut extra: Vec<(String, Method, usize)> = Vec::new();
    if o.baselines {
        extra.extend(baseline::METHODS.iter().map(|m| (m.name().to_string(), *m, k)));
    }
    if let Some(n) = o.head_sample {
        extra.push((format!("head{n}"), Method::HeadSample, n));
    }
    for (name, m, kk) in extra {
        let pos = baseline::positions(&t, m, kk, seed);
        let c = baseline::from_positions(&t, &src_bytes, &src_path, &pos, m, replayed, seed)?;
        let bytes = serde_json::to_vec_pretty(&c)?.len() as u64;
        match expand::expand(&c) {
            Ok(trace) => cands.push(Candidate { variant: name, artifact: c, artifact_bytes: bytes, trace }),
            Err(e) => writeln!(
                log,
                "canary verify: baseline {name} could not be made into a consistent trace ({e:#}); left out"
            )?,
        }
    }
    // the source's phases run its point-to-point operations; the canary's cannot: said before anything runs
    if let Some(l) = cands.first().and_then(|c| c.artifact.left_out_p2p.as_ref()) {
        writeln!(log, "canary verify: the canary and the baselines: {}", l.line())?;
    }
    // every check that needs no measurement, before anything runs
    let sfacts = facts(&t);
    let mut statics: Vec<Vec<Check>> = Vec::new();
    for c in &cands {
        let mut checks: Vec<Check> = compare::static_checks(&sfacts, &facts(&c.trace));
        checks.extend(structure_checks(&t, &c.artifact));
        let failed: Vec<String> = checks
            .iter()
            .filter(|k| !k.passed)
            .map(|k| format!("{}: {} (tolerance {})", k.name, k.measured, k.tolerance))
            .collect();
        // a baseline or a reduced artifact is a sample by design; a compiled one claims to be its source folded
        if !failed.is_empty() && matches!(c.artifact.method, Method::Compiled | Method::Lossless) && !o.replay_failed {
            crate::refuse!(
                Code::StaticCheck,
                "{} ({}) fails checks that need no replay, so no replay can verify it: {}; nothing was run \
                    (--replay-failed replays it anyway)",
                c.variant,
                if c.variant == "canary" { o.canary.display().to_string() } else { c.artifact.source.path.clone() },
                failed.join("; ")
            );
        }
        if !failed.is_empty() {
            writeln!(
                log,
                "canary verify: {} fails {} static check(s) before any replay: {}",
                c.variant,
                failed.len(),
                failed.join("; ")
            )?;
        }
        statics.push(checks);
    }
    // the campaign spec (checked whole before anything is written), then the inputs
    let variants: Vec<String> =
        std::iter::once("source".to_string()).chain(cands.iter().map(|c| c.variant.clone())).collect();
    let mut spec = spec_in.clone();
    spec.name = format!("{}-canary-verify", spec_in.name).chars().take(64).collect();
    if let Some(b) = &o.backend {
        spec.backend = b.clone();
    }
    spec.ranks = t.world_size;
    if let Some(r) = o.rounds {
        spec.repetitions = r;
    }
    spec.blind = false;
    // verify analyzes its campaign itself: never a part for `campaign join`
    // (plan then refuses a single round)
    spec.join_part = false;
    spec.canary = None;
    spec.workload.phases = o.phases.clone();
    spec.workload.tokens = o.passes;
    spec.workload.trace = None;
    spec.workload.extra_args.retain(|a| !a.starts_with("--trace"));
    spec.workload.extra_args.extend(["--warmup-tokens".to_string(), "1".to_string()]);
    // the phases' world all-reduces run in the trace's element type (those of
    // another than f32/bf16 run through the trace executor, in their own)
    let world: Vec<u32> = (0..t.world_size).collect();
    let ar_dtype = t.ranks.iter().flat_map(|r| &r.collectives).find_map(|c| {
        let dtype = workload::Dtype::try_from(c.dtype).ok()?;
        (c.kind == commtrace::CollectiveKind::AllReduce && t.group(&c.group).is_some_and(|g| g.members == world))
            .then_some(dtype)
    });
    if let Some(dtype) = ar_dtype {
        spec.workload.extra_args.extend(["--dtype".to_string(), dtype.name().to_string()]);
    }
    let mut configs = Vec::new();
    for v in &variants {
        for c in &spec_in.configs {
            configs.push(ConfigSpec {
                name: variant_config(v, &c.name),
                trace: Some(format!("inputs/{v}.json")),
                ..c.clone()
            });
        }
    }
    spec.configs = configs;
    spec.trace_canary = Some(TraceCanary {
        source: variants[0].clone(),
        variants: variants[1..].to_vec(),
        configs: spec_in.configs.iter().map(|c| c.name.clone()).collect(),
        phase: Some(Phase::Replay),
    });
    // the real job, where the spec names one: run once per configuration, under the source variant
    spec.truth = match &spec_in.truth {
        None => None,
        Some(t) => {
            let spec_dir = o.configs.parent().filter(|p| !p.as_os_str().is_empty()).unwrap_or(Path::new("."));
            let mut t = t.clone();
            t.only = false;
            t.configs = Some(
                spec_in
                    .configs
                    .iter()
                    .filter(|c| t.runs_under(&c.name))
                    .map(|c| variant_config(&variants[0], &c.name))
                    .collect(),
            );
            t.inputs = t
                .inputs
                .iter()
                .map(|i| std::path::absolute(spec_dir.join(i)).map(|p| p.display().to_string()))
                .collect::<std::io::Result<_>>()?;
            Some(t)
        }
    };
    let mut bare_known_bad: Vec<String> = Vec::new();
    spec.controls = spec_in.controls.as_ref().map(|c| {
        let mut aa = Vec::new();
        let mut kb = Vec::new();
        for v in &variants {
            for p in &c.aa {
                aa.push([variant_config(v, &p[0]), variant_config(v, &p[1])]);
            }
            for k in &c.known_bad {
                if let KnownBad::Graded(g) = k {
                    let mut g = g.clone();
                    g.config = variant_config(v, &g.config);
                    g.reference = variant_config(v, &g.reference);
                    kb.push(KnownBad::Graded(g));
                }
            }
        }
        bare_known_bad =
            c.known_bad.iter().filter(|&k| matches!(k, KnownBad::Name(_))).map(|k| k.config().to_string()).collect();
        Controls { aa, known_bad: kb }
    });
    // every option and the spec they make, checked before the first file: a refusal leaves nothing to block the retry
    spec.validate().and_then(|()| spec.check_rank_plans()).map_err(|e| match code_of(&e) {
        Some(_) => e.context(format!("{} with these options makes an invalid campaign", o.configs.display())),
        None => refuse(
            Code::BadSpec,
            format!("{} with these options makes an invalid campaign: {e:#}", o.configs.display()),
        ),
    })?;
    let inputs = o.out.join("inputs");
    std::fs::create_dir_all(&inputs).with_context(|| format!("creating {}", inputs.display()))?;
    fsutil::write_new_atomic(&inputs.join("source.json"), &src_bytes)?;
    for c in &cands {
        fsutil::write_json_new(&inputs.join(format!("{}.json", c.variant)), &c.trace)?;
        c.artifact.write(&inputs.join(format!("{}.canary.json", c.variant)))?;
    }
    let spec_path = o.out.join("verify-spec.toml");
    let text = format!(
        "# canary verify: the source and each candidate under every configuration of {}, one campaign\n{}",
        o.configs.display(),
        toml::to_string(&spec).context("writing the verify spec")?
    );
    fsutil::write_new_atomic(&spec_path, text.as_bytes())?;
    let campaign_dir = o.out.join("campaign");
    writeln!(
        log,
        "canary verify: {} variants x {} configurations x {} rounds = {} jobs",
        variants.len(),
        spec_in.configs.len(),
        spec.repetitions,
        variants.len() * spec_in.configs.len() * spec.repetitions as usize
    )?;
    let run = RunOptions { retries: 1, ..Default::default() };
    run::run(&spec_path, &campaign_dir, &run, &mut std::io::stderr())?;
    // collect
    let (m, manifest_sha) = chain::load_manifest(&campaign_dir)?;
    let sel_path = campaign_dir.join("selection.json");
    let sel: Selection = serde_json::from_slice(&limits::read_bounded(&sel_path, limits::MAX_JSON_BYTES)?)
        .with_context(|| format!("{}: not a selection", sel_path.display()))?;
    let config_names: Vec<String> = spec_in.configs.iter().map(|c| c.name.clone()).collect();
    let mut measures: BTreeMap<String, Vec<Vec<JobMeasure>>> =
        variants.iter().map(|v| (v.clone(), vec![Vec::new(); config_names.len()])).collect();
    let mut backend = spec.backend.clone();
    for e in &sel.entries {
        let cell = m
            .schedule
            .iter()
            .find(|c| c.cell_id == e.cell_id)
            .with_context(|| format!("selection names cell {}", e.cell_id))?;
        if cell.truth {
            continue; // the job's cells: read through the campaign report's truth section
        }
        let (v, cfg) = cell.label.split_once('.').with_context(|| format!("label {}", cell.label))?;
        let ci = config_names.iter().position(|c| c == cfg).with_context(|| format!("configuration {cfg}"))?;
        let j = join::join_dir(&campaign_dir.join(&e.run_dir))?;
        j.refuse_synthetic("canary verify")?;
        if let Some(s) = j.shards.first() {
            backend = serde_json::to_value(s.header.backend)?.as_str().unwrap_or("").to_string();
        }
        measures.get_mut(v).with_context(|| format!("variant {v}"))?[ci].push(job_measure(&j, cell.round)?);
    }
    // controls: the campaign report's, and bare known-bads within each variant
    let report_path = campaign_dir.join("report").join("report.json");
    let mut details = Vec::new();
    let mut behaved = Vec::new();
    let mut tally: Vec<(String, crate::analysis::ControlOutcome)> = Vec::new();
    // the campaign's own report, read through its type (absent: analyze wrote none)
    let report: Option<crate::analysis::Report> = match limits::read_bounded(&report_path, limits::MAX_JSON_BYTES) {
        Ok(bytes) => Some(
            serde_json::from_slice(&bytes)
                .with_context(|| format!("{}: not a campaign report", report_path.display()))?,
        ),
        Err(_) => None,
    };
    for c in report.iter().flat_map(|r| &r.controls) {
        behaved.push(c.outcome == crate::analysis::ControlOutcome::Behaved);
        tally.push((c.kind.clone(), c.outcome));
        let outcome = serde_json::to_value(c.outcome)?;
        details.push(format!("{} {}: {}", c.kind, c.subject, outcome.as_str().unwrap_or("?")));
    }
    let policy = &spec_in.analysis;
    let src_jobs = measures.get("source").cloned().unwrap_or_default();
    // the real job's ranking, from the campaign report's truth section
    let truth_section: Option<TruthReport> = match &spec.truth {
        None => None,
        Some(_) => match &report {
            Some(r) => r.truth.clone(),
            None => crate::refuse!(
                Code::Incomplete,
                "{}: the campaign wrote no report, so its truth section is missing",
                report_path.display()
            ),
        },
    };
    let truth = match &truth_section {
        Some(t) => super::truth::verify_truth(t, &config_names, &src_jobs, policy)?,
        None => None,
    };
    for kb in &bare_known_bad {
        for v in &variants {
            let jobs = &measures[v];
            let p = compare::phase_input(&config_names, jobs);
            let rels = agreement::relations_in_first_rounds(&p, policy, jobs.first().map_or(0, |j| j.len()));
            let ki = config_names.iter().position(|c| c == kb);
            let ok = match (rels, ki) {
                (Ok(rels), Some(ki)) => {
                    let n = config_names.len();
                    let mut idx = 0;
                    let mut all = true;
                    for a in 0..n {
                        for b in a + 1..n {
                            let r = rels[idx];
                            idx += 1;
                            if a == ki {
                                all &= r == Relation::BFaster;
                            } else if b == ki {
                                all &= r == Relation::AFaster;
                            }
                        }
                    }
                    all
                }
                _ => false,
            };
            behaved.push(ok);
            use crate::analysis::ControlOutcome::{Behaved, Misbehaved};
            tally.push(("known-bad".into(), if ok { Behaved } else { Misbehaved }));
            details.push(format!(
                "known-bad {kb} in {v}: {}",
                if ok {
                    "behaved (decided slower than every other configuration)"
                } else {
                    "not decided slower than every other configuration"
                }
            ));
        }
    }
    let summary = crate::analysis::control_counts(tally.iter().map(|(k, o)| (k.as_str(), *o)));
    let controls = ControlsOutcome {
        declared: !behaved.is_empty(),
        behaved: (!behaved.is_empty()).then(|| behaved.iter().all(|b| *b)),
        details,
        summary,
    };
    // configurations that add latency of their own: the tail recall leaves them out
    let control_configs: Vec<bool> = spec_in
        .configs
        .iter()
        .map(|c| {
            c.args.iter().any(|a| a.starts_with("--inject-"))
                || spec_in.controls.as_ref().is_some_and(|ctl| ctl.known_bad.iter().any(|k| k.config() == c.name))
        })
        .collect();
    // judge every candidate
    let evidence = format!(
        "measured: real replays on the {backend} backend, one {} job per cell, {} rounds interleaved",
        launcher_name(&spec),
        spec.repetitions
    );
    let mut verdicts = Vec::new();
    let src_events: u64 = t.ranks.iter().map(|r| r.collectives.len() as u64).sum();
    for (c, mut checks) in cands.iter().zip(statics) {
        let jobs = measures.get(&c.variant).cloned().unwrap_or_default();
        let p = Paired { configs: &config_names, source: &src_jobs, candidate: &jobs, controls: &control_configs };
        let (replay, unjudged) = compare::replay_checks(&p);
        checks.extend(replay);
        let (ranking, cost) = match compare::ranking_check(&p, policy, &evidence) {
            Ok((chk, agreement, cost)) => {
                checks.push(chk);
                // no decision on the source: no cost of reaching it
                (Some(agreement), cost)
            }
            Err(e) => {
                checks.push(Check {
                    name: "ranking".into(),
                    guards: Assurance::BehaviorallyVerified,
                    passed: false,
                    measured: format!("could not be computed: {e:#}"),
                    tolerance: "no contradiction".into(),
                });
                (None, None)
            }
        };
        // the strongest state needs GPUs, controls that behaved, and a source that knows what the replay reproduces
        checks.push(Check {
            name: "hardware.backend".into(),
            guards: Assurance::HardwareValidated,
            passed: backend == "cuda",
            measured: format!("backend {backend}"),
            tolerance: "GPU replays (cuda)".into(),
        });
        checks.push(Check {
            name: "hardware.controls".into(),
            guards: Assurance::HardwareValidated,
            passed: controls.behaved == Some(true),
            measured: match controls.behaved {
                None => "the spec declares no control".into(),
                Some(_) => format!("{} of {} controls behaved", behaved.iter().filter(|b| **b).count(), behaved.len()),
            },
            tolerance: "declared controls, every one behaved".into(),
        });
        checks.push(Check {
            name: "source.unknowns".into(),
            guards: Assurance::HardwareValidated,
            passed: t.unknown.is_empty(),
            measured: if t.unknown.is_empty() {
                "the source knows every field".into()
            } else {
                format!(
                    "the source does not know: {}",
                    t.unknown.iter().map(|u| u.field.as_str()).collect::<Vec<_>>().join(", ")
                )
            },
            tolerance: "an artifact built over unknowns can never be hardware-validated".into(),
        });
        let state = compare::state_of(&checks, true);
        let a = &c.artifact;
        let src_bytes_n = src_bytes.len() as f64;
        let truth_judged = match &truth_section {
            Some(t) => super::truth::judge(t, &config_names, &jobs, policy)?,
            None => None,
        };
        let stored = a.slots.len() as u64 * c.trace.ranks.len() as u64;
        let replayed: u64 = c.trace.ranks.iter().map(|r| r.collectives.len() as u64).sum();
        verdicts.push(CandidateVerdict {
            truth: truth_judged,
            variant: c.variant.clone(),
            method: a.method.name().into(),
            label: if a.is_reduced() { artifact::REDUCED_LABEL.into() } else { a.label.clone() },
            state,
            checks,
            unjudged,
            ranking,
            cost,
            // recomputed: what the artifact stores and what its expansion replays, against the source read
            events: (stored, src_events as f64 / stored.max(1) as f64),
            replayed: (replayed, src_events as f64 / replayed.max(1) as f64),
            bytes: (c.artifact_bytes, src_bytes_n / c.artifact_bytes.max(1) as f64),
        });
    }
    let canary_state = verdicts.first().map(|v| v.state);
    let baselines: Vec<&CandidateVerdict> = verdicts
        .iter()
        .filter(|v| cands.iter().any(|c| c.variant == v.variant && c.artifact.method.is_baseline()))
        .collect();
    let failed_checks = |v: &CandidateVerdict| v.checks.iter().filter(|c| !c.passed).count();
    // beating the baselines means deciding what the source decided: with no decision, there is no comparison
    let source_decided = verdicts.first().is_some_and(|v| v.cost.is_some());
    let canary_beats_baselines = (!baselines.is_empty() && source_decided).then(|| {
        let cv = &verdicts[0];
        baselines.iter().all(|b| {
            canary_state > Some(b.state) || (canary_state == Some(b.state) && failed_checks(cv) < failed_checks(b))
        })
    });
    let report = VerifyReport {
        format_version: VERIFY_FORMAT_VERSION,
        evidence,
        source: artifact::SourceBinding { path: o.source.display().to_string(), ..cands[0].artifact.source.clone() },
        spec: (o.configs.display().to_string(), fsutil::sha256_file(&o.configs)?),
        backend,
        rounds: spec.repetitions,
        configs: config_names,
        campaign: (campaign_dir.display().to_string(), manifest_sha),
        controls,
        candidates: verdicts,
        canary_beats_baselines,
        truth,
        never_granted:
            "production-representative: only the workload's owner can know whether the traced run represents production"
                .into(),
    };
    fsutil::write_json_new(&o.out.join("canary-verify.json"), &report)?;
    Ok(report)
}

/// Per rank, the slot of every position when the body is walked at the source's counts.
fn walk_at_source_counts(c: &Canary) -> Vec<u32> {
    fn go(nodes: &[Node], out: &mut Vec<u32>) {
        for n in nodes {
            match n {
                Node::Op(s) => out.push(*s),
                Node::Loop { count, body } => {
                    for _ in 0..*count {
                        go(body, out);
                    }
                }
            }
        }
    }
    let mut out = Vec::new();
    go(&c.body, &mut out);
    out
}

/// `structure.lossless`: the body at the source's counts is the source's
/// identity sequence on every rank; `values.budget`: every stored value is
/// within the declared budget of the source's values at its positions.
pub(crate) fn structure_checks(t: &CommTrace, c: &Canary) -> Vec<Check> {
    // the length at the stored counts first, from the body itself: nothing longer than the source is walked
    let mut why = match artifact::check_consistency(c) {
        Err(e) => Some(format!("the artifact contradicts itself: {e:#}")),
        Ok(shape) => t.ranks.iter().find(|r| r.collectives.len() as u64 != shape.at_counts).map(|r| {
            format!(
                "the body at its counts has {} collectives, rank {} of the source {}",
                shape.at_counts,
                r.rank,
                r.collectives.len()
            )
        }),
    };
    let seq = if why.is_none() { walk_at_source_counts(c) } else { Vec::new() };
    let tm = compile::timings(t);
    for (ri, r) in t.ranks.iter().enumerate() {
        if why.is_some() {
            break;
        }
        if seq.len() != r.collectives.len() {
            why = Some(format!(
                "the body at its counts has {} collectives, rank {} of the source {}",
                seq.len(),
                r.rank,
                r.collectives.len()
            ));
            break;
        }
        if let Some(p) = seq.iter().zip(&r.collectives).position(|(s, col)| {
            c.slots
                .get(*s as usize)
                .and_then(|sl| sl.ranks.get(ri))
                .and_then(|rs| c.identities.get(rs.identity as usize))
                != Some(&compile::identity_of(col))
        }) {
            why = Some(format!("rank {} position {p}: the body's operation is not the source's", r.rank));
            break;
        }
    }
    let mut out = vec![Check {
        name: "structure.lossless".into(),
        guards: Assurance::SourceVerified,
        passed: why.is_none(),
        measured: why.clone().unwrap_or_else(|| {
            format!(
                "the folded body at the source's counts is the source's operation sequence on all {} ranks",
                t.ranks.len()
            )
        }),
        tolerance: "exactly the source's sequence".into(),
    }];
    if why.is_some() {
        return out;
    }
    // the tolerance is the tool's policy for this kind of artifact, never the budget it declares
    let budget = match artifact::budget_ppm(c.method, c.budget.significant_digits) {
        Ok(ppm) => ppm as f64 / 1e6,
        Err(e) => {
            out.push(Check {
                name: "values.budget".into(),
                guards: Assurance::SourceVerified,
                passed: false,
                measured: format!("{e:#}"),
                tolerance: "the tool's budget for the artifact's method".into(),
            });
            return out;
        }
    };
    let mut positions: Vec<Vec<usize>> = vec![Vec::new(); c.slots.len()];
    for (p, s) in seq.iter().enumerate() {
        positions[*s as usize].push(p);
    }
    let mut worst = (0.0f64, String::new());
    for (si, slot) in c.slots.iter().enumerate() {
        for (ri, rs) in slot.ranks.iter().enumerate() {
            for (field, stored, src) in [
                ("gap_ns", &rs.gap_ns, &tm.gap_ns[ri]),
                ("compute_ns", &rs.compute_ns, &tm.compute_ns[ri]),
                ("span_ns", &rs.span_ns, &tm.span_ns[ri]),
            ] {
                let mut vals: Vec<u64> = positions[si].iter().filter_map(|&p| src[p]).collect();
                vals.sort_unstable();
                let err = match stored {
                    artifact::Values::Unknown => 0.0,
                    artifact::Values::Exact(x) => {
                        let mut x = x.clone();
                        x.sort_unstable();
                        if x == vals {
                            0.0
                        } else {
                            f64::INFINITY
                        }
                    }
                    artifact::Values::Histogram(h) => [0.01, 0.1, 0.25, 0.5, 0.75, 0.9, 0.99]
                        .iter()
                        .filter_map(|&q| {
                            let want = *vals
                                .get(((q * vals.len() as f64).ceil() as usize).clamp(1, vals.len().max(1)) - 1)?
                                as f64;
                            let got = h.quantile(q)? as f64;
                            Some((got - want).abs() / want.max(1.0))
                        })
                        .fold(0.0, f64::max),
                };
                if err > worst.0 {
                    worst = (err, format!("slot {si} rank {} {field}", rs.rank));
                }
            }
        }
    }
    out.push(Check {
        name: "values.budget".into(),
        guards: Assurance::SourceVerified,
        passed: worst.0 <= budget + 1e-9,
        measured: if worst.0 == 0.0 {
            "every stored value is the source's".into()
        } else {
            format!("largest relative error of a stored quantile: {:.3}% ({})", worst.0 * 100.0, worst.1)
        },
        tolerance: format!(
            "within the tool's budget for a {} artifact at {} significant digits ({:.3}%)",
            c.method.name(),
            c.budget.significant_digits,
            budget * 100.0
        ),
    });
    out
}

fn launcher_name(s: &CampaignSpec) -> &'static str {
    match s.launcher.kind {
        LauncherKind::Mpirun => "mpirun",
        LauncherKind::Srun => "srun",
    }
}

/// What one verified run measured.
pub(crate) fn job_measure(j: &JoinedRun, round: u32) -> Result<JobMeasure> {
    let mut per_kind: BTreeMap<String, Vec<f64>> = BTreeMap::new();
    // per pass (token), its collectives in sequence order: (seq, kind, latency)
    let mut passes: BTreeMap<Option<u32>, Vec<(u64, String, f64)>> = BTreeMap::new();
    for c in j.collectives.iter().filter(|c| c.phase == Phase::Replay && !c.warmup) {
        let kind = serde_json::to_value(c.kind)?.as_str().unwrap_or("?").to_string();
        let worst = c.ranks.iter().map(|r| r.wait_end_ns.saturating_sub(r.host_issue_ns)).max().unwrap_or(0);
        let us = worst as f64 / 1e3;
        per_kind.entry(kind.clone()).or_default().push(us);
        passes.entry(c.token).or_default().push((c.seq, kind, us));
    }
    let passes: Vec<Vec<(u64, String, f64)>> = passes
        .into_values()
        .map(|mut v| {
            v.sort_by_key(|x| x.0);
            v
        })
        .collect();
    let per_kind_recurring_us = compare::recurring_by_position(&passes);
    let replay_s = j
        .shards
        .first()
        .and_then(|s| s.header.phases.iter().find(|p| p.phase == Phase::Replay))
        .map(|p| p.end_ns.saturating_sub(p.start_ns) as f64 / 1e9)
        .unwrap_or(0.0);
    let mut shares = Vec::new();
    for s in &j.shards {
        if s.header.workload.phases.contains(&Phase::Overlap) {
            let (_, compute, comm) = overlap::phase_intervals_ns(s, Phase::Overlap);
            let us =
                |v: Vec<(u64, u64)>| v.into_iter().map(|(a, b)| (a as f64 / 1e3, b as f64 / 1e3)).collect::<Vec<_>>();
            if let Some(x) = overlap::overlap(&us(compute), &us(comm)).ok().and_then(|r| r.overlap_of_comm) {
                shares.push(x);
            }
        }
    }
    Ok(JobMeasure {
        round,
        pass_us: summary::job_samples_us(j, Phase::Replay),
        per_kind_us: per_kind,
        per_kind_recurring_us,
        replay_s,
        hidden_share: (!shares.is_empty()).then(|| shares.iter().sum::<f64>() / shares.len() as f64),
    })
}

/// The report as text.
pub fn render(r: &VerifyReport) -> String {
    use std::fmt::Write;
    let mut s = String::new();
    let _ = writeln!(
        s,
        "canary verify: source {} ({} ranks, {} collectives, SHA-256 {})",
        r.source.path,
        r.source.world_size,
        r.source.collectives_per_rank.iter().sum::<u64>(),
        r.source.file_sha256
    );
    let _ = writeln!(
        s,
        "  {} configurations x {} rounds on {}; campaign {} (manifest {})",
        r.configs.len(),
        r.rounds,
        r.backend,
        r.campaign.0,
        r.campaign.1
    );
    let _ = writeln!(s, "  evidence: {}", r.evidence);
    match r.controls.behaved {
        None => {
            let _ = writeln!(s, "  controls: none declared");
        }
        Some(b) => {
            let _ = writeln!(s, "  controls: {}", if b { "every one behaved" } else { "NOT all behaved" });
            for d in &r.controls.details {
                let _ = writeln!(s, "    {d}");
            }
        }
    }
    if let Some(t) = &r.truth {
        let _ = writeln!(
            s,
            "  the real job: {} ({}, {} is better) decides {} pair(s); best set {}; the source's {}",
            t.metric,
            t.unit,
            t.better,
            t.decided_pairs,
            t.best_set.join(", "),
            super::truth::words(&t.source)
        );
    }
    for v in &r.candidates {
        let _ = writeln!(s);
        let _ = writeln!(s, "{} [{}] — {}: {}", v.variant, v.method, v.label, v.state);
        if let Some(j) = &v.truth {
            let _ = writeln!(s, "  {}", super::truth::words(j));
        }
        let _ = writeln!(
            s,
            "  size: {} events stored (source/artifact {:.1}x), {} collectives per pass (source/candidate {:.1}x), {} \
                bytes (source/artifact {:.2}x{})",
            v.events.0,
            v.events.1,
            v.replayed.0,
            v.replayed.1,
            v.bytes.0,
            v.bytes.1,
            if v.bytes.1 < 1.0 { ": the artifact is LARGER than its source" } else { "" }
        );
        if v.cost.is_none() && v.ranking.is_some() {
            let _ = writeln!(
                s,
                "  decision cost: none: the source decided no pair of configurations, so there is no \
                decision to preserve"
            );
        }
        if let Some(c) = &v.cost {
            let _ = writeln!(
                s,
                "  decision cost: source {} in {} rounds, candidate {} in {} rounds: {}",
                c.source_replay_s.map_or("n/a".into(), |x| format!("{x:.2} s")),
                c.source_rounds.map_or("n/a".into(), |x| x.to_string()),
                c.candidate_replay_s.map_or("n/a".into(), |x| format!("{x:.2} s")),
                c.candidate_rounds.map_or("never".into(), |x| x.to_string()),
                c.source_per_candidate
                    .map_or("not reached (the candidate never decided the source's relations)".into(), |x| format!(
                        "{x:.1}x cheaper (source/candidate)"
                    ))
            );
        }
        let failed: Vec<&Check> = v.checks.iter().filter(|c| !c.passed).collect();
        let _ = writeln!(s, "  checks: {} of {} held", v.checks.len() - failed.len(), v.checks.len());
        for c in &failed {
            let _ = writeln!(
                s,
                "    FAILED {} (guards {}): {} \
                 — tolerance {}",
                c.name, c.guards, c.measured, c.tolerance
            );
        }
        for u in &v.unjudged {
            let _ = writeln!(s, "    not judged {}: {}", u.name, u.reason);
        }
        if let Some(c) = v.checks.iter().find(|c| c.name == "ranking") {
            if c.passed {
                let _ = writeln!(s, "    ranking: {}", c.measured);
            }
        }
    }
    if let Some(b) = r.canary_beats_baselines {
        let _ = writeln!(s);
        let _ = writeln!(s, "canary {} every baseline at equal size", if b { "beats" } else { "does NOT beat" });
    } else if r
        .candidates
        .iter()
        .skip(1)
        .any(|c| matches!(c.method.as_str(), "random" | "frequency" | "cluster" | "stratified-gap" | "head"))
    {
        let _ = writeln!(s);
        let _ = writeln!(s, "canary and baselines: no comparison (the source decided no pair of configurations)");
    }
    let _ = writeln!(s, "never granted: {}", r.never_granted);
    s
}

/// The short answer (`canary verify` without `-v`): the source, the controls
/// counted per kind, the real job, then one line per candidate with its
/// state, the check that stops it from the next state, its ranking against
/// the source and its decision cost; [`render`] and the JSON hold every check.
pub fn render_short(r: &VerifyReport) -> String {
    use std::fmt::Write;
    let mut s = String::new();
    let _ = writeln!(
        s,
        "canary verify: source {} ({} ranks, {} collectives); {} configurations x {} rounds on {}",
        r.source.path,
        r.source.world_size,
        r.source.collectives_per_rank.iter().sum::<u64>(),
        r.configs.len(),
        r.rounds,
        r.backend
    );
    let _ = match r.controls.behaved {
        None => writeln!(s, "controls: none declared"),
        Some(b) => writeln!(s, "controls: {}{}", r.controls.summary, if b { "" } else { " (NOT all behaved)" }),
    };
    if let Some(t) = &r.truth {
        let _ = writeln!(
            s,
            "the real job: {} decides {} pair(s), best set {}; the source's {}",
            t.metric,
            t.decided_pairs,
            t.best_set.join(", "),
            super::truth::words(&t.source)
        );
    }
    for v in &r.candidates {
        let failed: Vec<&Check> = v.checks.iter().filter(|c| !c.passed).collect();
        let stop = match failed.iter().min_by_key(|c| c.guards) {
            None => "every check held".to_string(),
            Some(c) => {
                let more = if failed.len() > 1 {
                    format!(" (and {} more failed checks)", failed.len() - 1)
                } else {
                    String::new()
                };
                format!("stopped by {}: {}{more}", c.name, c.measured)
            }
        };
        let ranking = v.ranking.as_ref().map(|a| {
            let c = &a.comparison;
            format!("; ranking {}/{} pairs agree", c.pairs_agree, c.pairs_total)
        });
        let cost = v
            .cost
            .as_ref()
            .and_then(|c| c.source_per_candidate)
            .map(|x| format!("; {x:.1}x cheaper to decide"))
            .unwrap_or_default();
        let _ = writeln!(s, "{} [{}]: {}; {stop}{}{cost}", v.variant, v.method, v.state, ranking.unwrap_or_default());
        if let Some(j) = &v.truth {
            let _ = writeln!(s, "  {}", super::truth::words(j));
        }
    }
    if let Some(b) = r.canary_beats_baselines {
        let _ = writeln!(s, "canary {} every baseline at equal size", if b { "beats" } else { "does NOT beat" });
    }
    let _ = writeln!(s, "-v prints every check and control; canary-verify.json has everything");
    s
}

/// The oracle of `canary reduce`: the source replays of a `canary verify`
/// directory of this trace (refused when the directory verified another trace).
pub(crate) fn oracle_from(dir: &Path, t: &CommTrace, src_bytes: &[u8], src_path: &Path) -> Result<Oracle> {
    let rp = dir.join("canary-verify.json");
    let bytes =
        limits::read_bounded(&rp, limits::MAX_JSON_BYTES).with_context(|| format!("reading {}", rp.display()))?;
    let r: VerifyReport = serde_json::from_slice(&bytes)
        .map_err(|e| refuse(Code::BadFormat, format!("{}: not a canary-verify report: {e}", rp.display())))?;
    let sha = fsutil::sha256_hex(src_bytes);
    if r.source.file_sha256 != sha {
        crate::refuse!(
            Code::DigestMismatch,
            "{} verified a source with SHA-256 {}; {} has {sha}",
            dir.display(),
            r.source.file_sha256,
            src_path.display()
        );
    }
    let campaign_dir = dir.join("campaign");
    let (m, _) = chain::load_manifest(&campaign_dir)?;
    let v = chain::verify(&campaign_dir)?;
    if !v.complete {
        crate::refuse!(
            Code::Incomplete,
            "{}: the campaign does not verify ({} of {} cells)",
            campaign_dir.display(),
            v.cells_ok,
            v.cells_expected
        );
    }
    let sel: Selection =
        serde_json::from_slice(&limits::read_bounded(&campaign_dir.join("selection.json"), limits::MAX_JSON_BYTES)?)?;
    let mut lat: Vec<BTreeMap<String, Vec<f64>>> = vec![BTreeMap::new(); r.configs.len()];
    for e in &sel.entries {
        let cell = m.schedule.iter().find(|c| c.cell_id == e.cell_id).with_context(|| format!("cell {}", e.cell_id))?;
        let Some(cfg) = cell.label.strip_prefix("source.").filter(|_| !cell.truth) else { continue };
        let ci = r.configs.iter().position(|c| c == cfg).with_context(|| format!("configuration {cfg}"))?;
        let j = join::join_dir(&campaign_dir.join(&e.run_dir))?;
        j.refuse_synthetic("canary verify")?;
        for c in j.collectives.iter().filter(|c| c.phase == Phase::Replay && !c.warmup) {
            let kind = serde_json::to_value(c.kind)?.as_str().unwrap_or("?").to_string();
            let worst = c.ranks.iter().map(|r| r.wait_end_ns.saturating_sub(r.host_issue_ns)).max().unwrap_or(0);
            lat[ci].entry(format!("{kind} {}B", c.bytes)).or_default().push(worst as f64 / 1e3);
        }
    }
    let cost_us = lat
        .into_iter()
        .map(|m| m.into_iter().map(|(k, mut v)| (k, stats::median(&mut v).unwrap_or(0.0))).collect())
        .collect();
    let keys = t
        .ranks
        .first()
        .map(|r| r.collectives.iter().map(|c| format!("{} {}B", c.kind.name(), c.in_bytes())).collect())
        .unwrap_or_default();
    let spec = CampaignSpec::load(&campaign_dir.join("..").join("verify-spec.toml")).ok();
    let min_effect_pct = spec.map_or(2.0, |s| s.analysis.min_effect_pct);
    // the order to preserve is what the source's replays decided, pair by pair, and nothing else
    let ranking = r.candidates.first().and_then(|c| c.ranking.as_ref()).ok_or_else(|| {
        refuse(Code::NoDecision, format!("{}: the verify report has no ranking of the source's replays", rp.display()))
    })?;
    let idx = |n: &str| r.configs.iter().position(|c| c == n);
    let mut decided = Vec::new();
    for p in &ranking.comparison.relations {
        let (Some(a), Some(b)) = (idx(&p.a), idx(&p.b)) else {
            crate::refuse!(
                Code::BadFormat,
                "{}: its ranking names a configuration it does not list ({} vs {})",
                rp.display(),
                p.a,
                p.b
            );
        };
        match p.truth {
            Relation::AFaster => decided.push((a, b)),
            Relation::BFaster => decided.push((b, a)),
            Relation::NotDistinguished => {}
        }
    }
    Ok(Oracle { configs: r.configs.clone(), cost_us, keys, min_effect_pct, decided })
}
