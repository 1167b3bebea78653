//! `canary verify`: the source and its candidates replayed as one real
//! campaign, and every candidate judged against the source.
//!
//! Consumes the source trace, the canary artifact (and further artifacts) and
//! a campaign spec, run as `campaign run` does. Produces `inputs/`,
//! `verify-spec.toml`, `campaign/`, `canary-verify.json` (schema
//! `canary-verify`) and its page `report.html` in the output directory. Refuses before anything runs: a
//! broken binding (`binding`), an output directory that exists, and a compiled
//! candidate failing a check that needs no replay (`statics`; `STATIC_CHECK`,
//! unless `--replay-failed`). Details: docs/METHODS.md, "Canary verification".
mod binding;
mod measure;
mod oracle;
mod page;
mod render;
mod statics;

pub(crate) use binding::check_binding;
pub(crate) use measure::job_measure;
pub(crate) use oracle::oracle_from;
pub use render::{render, render_short};
pub use statics::facts;
pub(crate) use statics::structure_checks;

use crate::analysis::agreement;
use crate::analysis::ranking::{pair_index, Relation};
use crate::analysis::truth::TruthReport;
use crate::campaign::chain::{self, Selection};
use crate::campaign::spec::{CampaignSpec, ConfigSpec, Controls, KnownBad, TraceCanary};
use crate::canary::artifact::{self, Canary, Method};
use crate::canary::compare::{self, CandidateVerdict, Check, JobMeasure, Paired};
use crate::canary::{baseline, expand, Assurance};
use crate::core::refusal::{code_of, refuse, Code};
use crate::core::workload::{self, Phase};
use crate::core::{fsutil, limits};
use crate::evidence::commtrace::{self, CommTrace};
use crate::evidence::join;
use crate::report::run::{self, RunOptions};
use anyhow::{Context, Result};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// Format version of `canary-verify.json` (2 added `unjudged`; a version 1
/// report reads with none).
pub const VERIFY_FORMAT_VERSION: u32 = 2;

/// What to verify and how: `canary verify`'s options (its clap parser lives here, with the stage).
#[derive(clap::Args, Clone, Debug, Default)]
pub struct VerifyOptions {
    /// The source trace.
    #[arg(id = "trace", value_name = "TRACE")]
    pub source: PathBuf,
    /// The canary artifact.
    #[arg(id = "artifact", value_name = "ARTIFACT")]
    pub canary: PathBuf,
    /// Campaign spec whose configurations, launcher, rounds, policy and controls are used (ranks come from the trace).
    #[arg(long)]
    pub configs: PathBuf,
    /// Backend, in place of the spec's.
    #[arg(long, value_parser = ["cpu", "cuda"])]
    pub backend: Option<String>,
    /// Rounds, in place of the spec's repetitions.
    #[arg(long)]
    pub rounds: Option<u32>,
    /// Timed passes over each trace per job (one warm-up pass before them).
    #[arg(long, default_value_t = 3)]
    pub passes: u32,
    /// Phases each job runs: replay, and overlap for the hidden-communication check.
    #[arg(long, default_value = "replay,overlap")]
    pub phases: String,
    /// Verify the baselines at equal size too (random, frequency, cluster, stratified-gap).
    #[arg(long)]
    pub baselines: bool,
    /// Also verify the first N events of the source as a sample.
    #[arg(long)]
    pub head_sample: Option<usize>,
    /// Further artifacts judged the same way (e.g. a reduced one).
    #[arg(long)]
    pub also: Vec<PathBuf>,
    /// Output directory (must not exist).
    #[arg(short = 'o', long = "out", alias = "output")]
    pub out: PathBuf,
    /// Replay a canary even when a check that needs no replay (coverage, mix, structure, values) already fails it.
    #[arg(long)]
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

fn variant_config(variant: &str, config: &str) -> String {
    TraceCanary::config_name(variant, config)
}

struct Candidate {
    variant: String,
    artifact: Canary,
    artifact_bytes: u64,
    trace: CommTrace,
    /// The checks that need no measurement (filled by `static_checks`).
    statics: Vec<Check>,
}

/// The source (its bytes and trace), the user's spec, and every candidate, the canary first.
struct Inputs {
    src_bytes: Vec<u8>,
    t: CommTrace,
    spec_in: CampaignSpec,
    cands: Vec<Candidate>,
}

/// The verify campaign's spec, its variants (the source first), the user's configurations and bare known-bads.
struct VerifySpec {
    spec: CampaignSpec,
    variants: Vec<String>,
    config_names: Vec<String>,
    bare_known_bad: Vec<String>,
}

/// The campaign as run: directory, manifest SHA-256, backend, evidence class, job measures per variant, report.
struct Campaign {
    dir: PathBuf,
    manifest_sha: String,
    backend: String,
    evidence: String,
    measures: BTreeMap<String, Vec<Vec<JobMeasure>>>,
    report: Option<crate::analysis::Report>,
}

/// What the campaign's measures judged: the controls, every candidate (the canary first), the real job's ranking.
struct Judged {
    controls: ControlsOutcome,
    verdicts: Vec<CandidateVerdict>,
    truth: Option<super::truth::VerifyTruth>,
}

/// Run the verification; its campaign runs as `campaign run` does, printing to stderr (stdout keeps the verdict).
pub fn verify(o: &VerifyOptions, log: &mut dyn std::io::Write) -> Result<VerifyReport> {
    let mut i = read_inputs(o, log)?;
    static_checks(o, &mut i, log)?;
    let vs = verify_spec(o, &i)?;
    let camp = collect(&vs, run_campaign(o, &i, &vs, log)?)?;
    let judged = judge(&i, &vs, &camp, controls_outcome(&i, &vs, &camp)?)?;
    final_report(o, &i, vs, camp, judged)
}

/// Reads the source, the artifacts (each bound to it) and the spec; produces every candidate, baselines included.
fn read_inputs(o: &VerifyOptions, log: &mut dyn std::io::Write) -> Result<Inputs> {
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
        cands.push(Candidate { variant: name, artifact: c, artifact_bytes: b, trace, statics: vec![] });
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
        let artifact_bytes = serde_json::to_vec_pretty(&c)?.len() as u64;
        match expand::expand(&c) {
            Ok(trace) => cands.push(Candidate { variant: name, artifact: c, artifact_bytes, trace, statics: vec![] }),
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
    Ok(Inputs { src_bytes, t, spec_in, cands })
}

/// Each candidate's checks that need no measurement, before anything runs; refuses a compiled or lossless one
/// failing any (unless `--replay-failed`).
fn static_checks(o: &VerifyOptions, i: &mut Inputs, log: &mut dyn std::io::Write) -> Result<()> {
    let sfacts = facts(&i.t);
    for c in &mut i.cands {
        let mut checks: Vec<Check> = compare::static_checks(&sfacts, &facts(&c.trace));
        checks.extend(structure_checks(&i.t, &c.artifact));
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
        c.statics = checks;
    }
    Ok(())
}

/// The verify campaign's spec from the user's spec and the options, checked whole before anything is written.
fn verify_spec(o: &VerifyOptions, i: &Inputs) -> Result<VerifySpec> {
    let (t, spec_in) = (&i.t, &i.spec_in);
    // the campaign spec (checked whole before anything is written), then the inputs
    let variants: Vec<String> =
        std::iter::once("source".to_string()).chain(i.cands.iter().map(|c| c.variant.clone())).collect();
    let mut spec = spec_in.clone();
    spec.name = format!("{}-canary-verify", spec_in.name).chars().take(64).collect();
    spec.backend = o.backend.clone().unwrap_or_else(|| spec_in.backend.clone());
    spec.ranks = t.world_size;
    spec.repetitions = o.rounds.unwrap_or(spec_in.repetitions);
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
    let spec_dir = o.configs.parent().filter(|p| !p.as_os_str().is_empty()).unwrap_or(Path::new("."));
    spec.truth = match &spec_in.truth {
        None => None,
        Some(t) => {
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
    let config_names: Vec<String> = spec_in.configs.iter().map(|c| c.name.clone()).collect();
    Ok(VerifySpec { spec, variants, config_names, bare_known_bad })
}

/// Writes the inputs and the verify spec into the new output directory and runs the campaign; produces its directory.
fn run_campaign(o: &VerifyOptions, i: &Inputs, vs: &VerifySpec, log: &mut dyn std::io::Write) -> Result<PathBuf> {
    let inputs = o.out.join("inputs");
    std::fs::create_dir_all(&inputs).with_context(|| format!("creating {}", inputs.display()))?;
    fsutil::write_new_atomic(&inputs.join("source.json"), &i.src_bytes)?;
    for c in &i.cands {
        fsutil::write_json_new(&inputs.join(format!("{}.json", c.variant)), &c.trace)?;
        c.artifact.write(&inputs.join(format!("{}.canary.json", c.variant)))?;
    }
    let spec_path = o.out.join("verify-spec.toml");
    let text = format!(
        "# canary verify: the source and each candidate under every configuration of {}, one campaign\n{}",
        o.configs.display(),
        toml::to_string(&vs.spec).context("writing the verify spec")?
    );
    fsutil::write_new_atomic(&spec_path, text.as_bytes())?;
    let campaign_dir = o.out.join("campaign");
    let (n_variants, n_configs, rounds) = (vs.variants.len(), vs.config_names.len(), vs.spec.repetitions);
    writeln!(
        log,
        "canary verify: {n_variants} variants x {n_configs} configurations x {rounds} rounds = {} jobs",
        n_variants * n_configs * rounds as usize
    )?;
    let run = RunOptions { retries: 1, ..Default::default() };
    run::run(&spec_path, &campaign_dir, &run, &mut std::io::stderr())?;
    Ok(campaign_dir)
}

/// Reads the campaign's manifest, selection and report; produces the job measures per variant and configuration.
fn collect(vs: &VerifySpec, campaign_dir: PathBuf) -> Result<Campaign> {
    let (m, manifest_sha) = chain::load_manifest(&campaign_dir)?;
    let sel_path = campaign_dir.join("selection.json");
    let sel: Selection = serde_json::from_slice(&limits::read_bounded(&sel_path, limits::MAX_JSON_BYTES)?)
        .with_context(|| format!("{}: not a selection", sel_path.display()))?;
    let mut measures: BTreeMap<String, Vec<Vec<JobMeasure>>> =
        vs.variants.iter().map(|v| (v.clone(), vec![Vec::new(); vs.config_names.len()])).collect();
    let mut backend = vs.spec.backend.clone();
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
        let ci = vs.config_names.iter().position(|c| c == cfg).with_context(|| format!("configuration {cfg}"))?;
        let j = join::join_dir(&campaign_dir.join(&e.run_dir))?;
        j.refuse_synthetic("canary verify")?;
        if let Some(s) = j.shards.first() {
            backend = serde_json::to_value(s.header.backend)?.as_str().unwrap_or("").to_string();
        }
        measures.get_mut(v).with_context(|| format!("variant {v}"))?[ci].push(job_measure(&j, cell.round)?);
    }
    // the campaign's own report, read through its type (absent: analyze wrote none; unreadable: an error)
    let report_path = campaign_dir.join("report").join("report.json");
    let report: Option<crate::analysis::Report> = match report_path.try_exists() {
        Ok(false) => None,
        _ => Some(
            serde_json::from_slice(&limits::read_bounded(&report_path, limits::MAX_JSON_BYTES)?)
                .with_context(|| format!("{}: not a campaign report", report_path.display()))?,
        ),
    };
    let evidence = format!(
        "measured: real replays on the {backend} backend, one {} job per cell, {} rounds interleaved",
        serde_json::to_value(vs.spec.launcher.kind)?.as_str().unwrap_or_default(),
        vs.spec.repetitions
    );
    Ok(Campaign { dir: campaign_dir, manifest_sha, backend, evidence, measures, report })
}

/// The controls (the campaign report's, bare known-bads per variant) as judged, and whether each one behaved.
fn controls_outcome(i: &Inputs, vs: &VerifySpec, camp: &Campaign) -> Result<(ControlsOutcome, Vec<bool>)> {
    let (config_names, policy, n) = (&vs.config_names, &i.spec_in.analysis, vs.config_names.len());
    let mut details = Vec::new();
    let mut behaved = Vec::new();
    let mut tally: Vec<(String, crate::analysis::ControlOutcome)> = Vec::new();
    for c in camp.report.iter().flat_map(|r| &r.controls) {
        behaved.push(c.outcome == crate::analysis::ControlOutcome::Behaved);
        tally.push((c.kind.clone(), c.outcome));
        let outcome = serde_json::to_value(c.outcome)?;
        details.push(format!("{} {}: {}", c.kind, c.subject, outcome.as_str().unwrap_or("?")));
    }
    for kb in &vs.bare_known_bad {
        for v in &vs.variants {
            let jobs = &camp.measures[v];
            let p = compare::phase_input(config_names, jobs);
            let rels = agreement::relations_in_first_rounds(&p, policy, jobs.first().map_or(0, |j| j.len()));
            let ki = config_names.iter().position(|c| c == kb);
            let ok = match (rels, ki) {
                // decided slower in every pair it is in (`pair_index` order)
                (Ok(rels), Some(ki)) => (0..n).filter(|&c| c != ki).all(|c| match c < ki {
                    true => rels[pair_index(n, c, ki)] == Relation::AFaster,
                    false => rels[pair_index(n, ki, c)] == Relation::BFaster,
                }),
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
    let declared = !behaved.is_empty();
    Ok((ControlsOutcome { declared, behaved: declared.then(|| behaved.iter().all(|b| *b)), details, summary }, behaved))
}

/// Judges every candidate (replay, ranking, hardware and truth checks) on the campaign's measures and the controls.
fn judge(i: &Inputs, vs: &VerifySpec, camp: &Campaign, controls: (ControlsOutcome, Vec<bool>)) -> Result<Judged> {
    let ((controls, behaved), t, spec_in, policy) = (controls, &i.t, &i.spec_in, &i.spec_in.analysis);
    let (config_names, backend) = (&vs.config_names, &camp.backend);
    let src_jobs = camp.measures.get("source").cloned().unwrap_or_default();
    // the real job's ranking, from the campaign report's truth section
    let truth_section: Option<TruthReport> = match (&vs.spec.truth, &camp.report) {
        (None, _) => None,
        (Some(_), Some(r)) => r.truth.clone(),
        (Some(_), None) => crate::refuse!(
            Code::Incomplete,
            "{}: the campaign wrote no report, so its truth section is missing",
            camp.dir.join("report").join("report.json").display()
        ),
    };
    let truth = truth_section.as_ref().map(|t| super::truth::verify_truth(t, config_names, &src_jobs, policy));
    let truth = truth.transpose()?.flatten();
    // configurations that add latency of their own: the tail recall leaves them out
    let control_configs: Vec<bool> = spec_in
        .configs
        .iter()
        .map(|c| {
            c.args.iter().any(|a| a.starts_with("--inject-"))
                || spec_in.controls.as_ref().is_some_and(|ctl| ctl.known_bad.iter().any(|k| k.config() == c.name))
        })
        .collect();
    let check = |name: &str, guards, passed, measured, tolerance: &str| Check {
        name: name.into(),
        guards,
        passed,
        measured,
        tolerance: tolerance.into(),
    };
    // the strongest state needs GPUs, controls that behaved, and a source that knows what the replay reproduces
    let ctl = match controls.behaved {
        None => "the spec declares no control".into(),
        Some(_) => format!("{} of {} controls behaved", behaved.iter().filter(|b| **b).count(), behaved.len()),
    };
    let unknown: Vec<&str> = t.unknown.iter().map(|u| u.field.as_str()).collect();
    let known = match unknown.is_empty() {
        true => "the source knows every field".into(),
        false => format!("the source does not know: {}", unknown.join(", ")),
    };
    let (hw, unknowns_never) =
        (Assurance::HardwareValidated, "an artifact built over unknowns can never be hardware-validated");
    let hardware = [
        check("hardware.backend", hw, backend == "cuda", format!("backend {backend}"), "GPU replays (cuda)"),
        check("hardware.controls", hw, controls.behaved == Some(true), ctl, "declared controls, every one behaved"),
        check("source.unknowns", hw, unknown.is_empty(), known, unknowns_never),
    ];
    let mut verdicts = Vec::new();
    let src_events: u64 = t.ranks.iter().map(|r| r.collectives.len() as u64).sum();
    for c in &i.cands {
        let mut checks = c.statics.clone();
        let jobs = camp.measures.get(&c.variant).cloned().unwrap_or_default();
        let p = Paired { configs: config_names, source: &src_jobs, candidate: &jobs, controls: &control_configs };
        let (replay, unjudged) = compare::replay_checks(&p);
        checks.extend(replay);
        let (ranking, cost, ranking_undecided) = match compare::ranking_check(&p, policy, &camp.evidence) {
            Ok(compare::RankingOutcome { check, agreement, cost, undecided }) => {
                checks.push(check);
                // no decision on the source: no cost of reaching it
                (Some(agreement), cost, undecided)
            }
            Err(e) => {
                let measured = format!("could not be computed: {e:#}");
                checks.push(check("ranking", Assurance::BehaviorallyVerified, false, measured, "no contradiction"));
                (None, None, None)
            }
        };
        checks.extend(hardware.iter().cloned());
        let state = compare::state_of(&checks, true);
        let a = &c.artifact;
        let src_bytes_n = i.src_bytes.len() as f64;
        let truth_judged = truth_section.as_ref().map(|t| super::truth::judge(t, config_names, &jobs, policy));
        let truth_judged = truth_judged.transpose()?.flatten();
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
            ranking_undecided,
            cost,
            // recomputed: what the artifact stores and what its expansion replays, against the source read
            events: (stored, src_events as f64 / stored.max(1) as f64),
            replayed: (replayed, src_events as f64 / replayed.max(1) as f64),
            bytes: (c.artifact_bytes, src_bytes_n / c.artifact_bytes.max(1) as f64),
        });
    }
    Ok(Judged { controls, verdicts, truth })
}

/// The report of what was judged (the canary against the baselines), written as `canary-verify.json`.
fn final_report(o: &VerifyOptions, i: &Inputs, vs: VerifySpec, camp: Campaign, j: Judged) -> Result<VerifyReport> {
    let (cands, verdicts) = (&i.cands, &j.verdicts);
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
        evidence: camp.evidence,
        source: artifact::SourceBinding { path: o.source.display().to_string(), ..cands[0].artifact.source.clone() },
        spec: (o.configs.display().to_string(), fsutil::sha256_file(&o.configs)?),
        backend: camp.backend,
        rounds: vs.spec.repetitions,
        configs: vs.config_names,
        campaign: (camp.dir.display().to_string(), camp.manifest_sha),
        controls: j.controls,
        candidates: j.verdicts,
        canary_beats_baselines,
        truth: j.truth,
        never_granted:
            "production-representative: only the workload's owner can know whether the traced run represents production"
                .into(),
    };
    fsutil::write_json_new(&o.out.join("canary-verify.json"), &report)?;
    fsutil::write_new_atomic(&o.out.join("report.html"), page::page(&report).as_bytes())?;
    Ok(report)
}
