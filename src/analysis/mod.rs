//! Campaign analysis: from per-job samples to the report, free of I/O.
//!
//! Consumes, per phase, every configuration's jobs (the unit of replication)
//! with the round each ran in and the job's events (per-token latencies for
//! workload phases, per-collective completion times on every rank for
//! `isolated`), the frozen analysis policy, the canary pair and the declared
//! controls, plus the context a claim must name (manifest, hardware,
//! workload, replay semantics). Produces the [`Report`]:
//! - per configuration and phase: median over jobs of per-job medians, IQR of
//!   the job medians (nearest-rank quartiles), median of per-job p99, rank by
//!   median, pooled event quantiles (for plots), and P(best)/P(worst) from the
//!   hierarchical posterior of [`crate::analysis::inference::rank_probabilities`];
//! - every pair's Student-t interval of the per-round log-ratio of job
//!   medians (and of job p99s), simultaneous over the phase's pairs
//!   ([`crate::analysis::inference::simultaneous_coverage`]), and its
//!   relation read off that same interval
//!   ([`crate::analysis::inference::decide`]: the one decision rule); the
//!   controls read these intervals, the canary (one planned comparison) has
//!   its own at the nominal level;
//! - each proxy phase against `blocking`: agreement and Kendall tau-b under
//!   the interval policy and on plain medians, each with a percentile
//!   interval from resampling whole rounds (Efron and Tibshirani, "An
//!   Introduction to the Bootstrap", 1993, ch. 13; rounds are the unit, so
//!   proxy and truth are resampled together);
//! - the canary verdict with its claim, and the controls (A/A in every
//!   phase, known-bad, injected skew per job), each `behaved`, `misbehaved`
//!   or `inconclusive` with the rounds that would resolve it, and the level
//!   of the interval it was judged on;
//! - the campaign's A/A controls (every declared A/A pair in every phase)
//!   judged as one family ([`aa_level`]): with K of them, each interval is
//!   made at level 1 − α/K (α = 1 − [`COVERAGE`]), or at its phase's pair
//!   level when that is higher, so that a campaign whose A/A labels are truly
//!   one configuration shows a misbehaved A/A control with probability at
//!   most α whatever the dependence between phases (the Bonferroni
//!   inequality: Dunn, "Multiple comparisons among means", JASA 56, 1961).
//!   Holm's step-down procedure (Holm, "A simple sequentially rejective
//!   multiple test procedure", Scand. J. Statist. 6, 1979) flags at least one
//!   control exactly when this does, so it gives the same per-campaign rate;
//!   it was not used because it would make one control's level depend on the
//!   other controls' data. The floor at the phase's pair level keeps every
//!   misbehaved A/A control a decided pair of its phase's table;
//! - warnings (multiple comparisons, few rounds).
//!
//! Refuses: a phase whose configurations ran in different rounds (pairing
//! is impossible), fewer than two jobs per configuration, values that are not
//! positive, a canary or control naming an unknown configuration, and a tie
//! policy other than `interval` (a campaign's relations come from its
//! printed intervals).
pub mod agreement;
pub mod bootstrap;
pub mod calibration;
pub mod capacity;
pub mod inference;
pub mod overlap;
pub mod policy;
pub mod queue;
pub mod ranking;
pub mod summary;
use crate::analysis::inference::{PairedInterval, Verdict};
use crate::analysis::policy::AnalysisPolicy;
use crate::analysis::ranking::{ConfigSummary, Relation, TiePolicy};
use crate::core::stats;
use crate::core::workload::Phase;
use anyhow::{bail, Context, Result};
use rand::{Rng, SeedableRng};
use serde::{Deserialize, Serialize};

/// Report format version (2: Student-t intervals over rounds, hierarchical P(best), three-outcome controls;
/// 3: P(best)/P(worst) share ties within the minimum effect, half-Cauchy prior on the spread;
/// 4: a phase's pair intervals are simultaneous, Bonferroni–Dunn over its pairs, and the controls read them;
/// P(best)/P(worst) put prior mass 1/2 on "all configurations the same"; 5: `context.trace`;
/// 6: `canary` is a section holding the verdict's fields and, under `trace`, trace canaries against their source;
/// 7: the A/A controls are one family (`aa_family`), and every control says the `level` it was judged at).
pub const REPORT_FORMAT_VERSION: u32 = 7;

pub use crate::analysis::inference::COVERAGE;

/// How every interval of the report is made, and what its coverage was measured to be.
pub const INTERVAL_METHOD: &str = "Student-t interval (n-1 degrees of freedom) of the mean per-round log-ratio of per-job statistics, \
     the pairs of a phase and metric simultaneous at 95% (each at 1 - 0.05/pairs, Bonferroni-Dunn), the campaign's K A/A controls one family at 95% \
     (each at 1 - 0.05/K, or its phase's pair level when higher), the canary a single planned 95% interval; simulated coverage at 3, 5, 10 and 20 rounds under Gaussian, Student-t3, skewed and round-drift job noise \
     is in results/2026-11-30-calibration-simultaneous/ (lowest cell 94.9%); with 2 rounds only the Gaussian case is exact";

/// One job's events in one phase.
#[derive(Clone, Debug)]
pub struct JobData {
    /// Round the job ran in.
    pub round: u32,
    /// Events, µs.
    pub samples_us: Vec<f64>,
}

/// One phase's input.
#[derive(Clone, Debug)]
pub struct PhaseInput {
    /// Phase.
    pub phase: Phase,
    /// Configuration labels.
    pub labels: Vec<String>,
    /// `jobs[config]`, any order.
    pub jobs: Vec<Vec<JobData>>,
}

/// A known-bad control by label.
#[derive(Clone, Debug, PartialEq)]
pub struct KnownBadInput {
    /// The slowed configuration.
    pub label: String,
    /// Graded: (reference label, declared slowdown percent, mechanism).
    pub graded: Option<(String, f64, String)>,
}

/// The controls a campaign declares (by label).
#[derive(Clone, Debug, Default)]
pub struct ControlsInput {
    /// Pairs of one configuration under two labels: predicted tied.
    pub aa_pairs: Vec<(String, String)>,
    /// Configurations predicted slower.
    pub known_bad: Vec<KnownBadInput>,
    /// Injected arrival delays seen by `join`, per label, per job (round, counts).
    pub injected_skew: Vec<(String, Vec<(u32, DelayCounts)>)>,
}

/// Counts of the arrival-delay control of one job.
#[derive(Serialize, Deserialize, schemars::JsonSchema, Clone, Copy, Debug, Default, PartialEq)]
pub struct DelayCounts {
    /// Nominal delay, µs.
    pub delay_us: f64,
    /// Delayed timed collectives.
    pub delayed: u64,
    /// Of those, with skew >= delay/2 − bound (skew beyond the replay's
    /// design where `beyond_design`).
    pub detected: u64,
    /// Undelayed timed collectives.
    pub undelayed: u64,
    /// Of those, above the line (false alarms).
    pub false_alarms: u64,
    /// Whether `detected` and `false_alarms` count skew beyond the replay's
    /// design (arrival less paced gap, `join`'s `beyond_design`); false in
    /// older reports, which counted the skew itself.
    #[serde(default)]
    pub beyond_design: bool,
    /// The same two counts on the skew itself, where `beyond_design`.
    #[serde(default)]
    pub skew_counts: Option<(u64, u64)>,
}

/// What a claim has to name.
#[derive(Serialize, Deserialize, schemars::JsonSchema, Clone, Debug, PartialEq)]
pub struct ClaimContext {
    /// Campaign id.
    pub campaign_id: String,
    /// Manifest SHA-256.
    pub manifest_sha256: String,
    /// Hardware, as recorded by the ranks.
    pub hardware: String,
    /// Workload.
    pub workload: String,
    /// Replay semantics.
    pub replay_semantics: String,
    /// Dimensions the campaign did not vary or represent.
    pub not_represented: Vec<String>,
    /// A campaign whose phases walked an imported trace: which trace, and
    /// what of it ran, from the selected jobs' shards (format 5; absent for
    /// other campaigns and in older reports).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub trace: Option<TraceClaim>,
}

/// What a trace campaign ran of its imported trace, from its shards.
#[derive(Serialize, Deserialize, schemars::JsonSchema, Clone, Debug, PartialEq)]
pub struct TraceClaim {
    /// The trace file as the spec names it (`workload.trace`).
    pub file: String,
    /// SHA-256 of the trace every selected job's phases walked (their shards' record).
    pub sha256: String,
    /// Timed passes (tokens) per job.
    pub passes: u32,
    /// Warm-up passes per job, excluded from every statistic.
    pub warmup_passes: u32,
    /// Phases that walked it.
    pub phases: Vec<crate::core::workload::Phase>,
    /// The trace's collectives left out per pass, by rank (`--trace-allreduce-only`).
    pub left_out_per_pass_by_rank: Vec<u32>,
    /// Per collective kind of the trace.
    pub kinds: Vec<TraceKindClaim>,
}

/// One collective kind of a trace campaign's trace.
#[derive(Serialize, Deserialize, schemars::JsonSchema, Clone, Debug, PartialEq)]
pub struct TraceKindClaim {
    /// Kind.
    pub kind: crate::evidence::shard::CollectiveKind,
    /// Collectives of this kind each rank ran per pass, by rank.
    pub run_per_pass_by_rank: Vec<u32>,
    /// Collectives of this kind each rank left out per pass, by rank.
    pub left_out_per_pass_by_rank: Vec<u32>,
    /// Element types the trace records for it.
    pub dtypes: Vec<crate::evidence::commtrace::TraceDtype>,
    /// Input sizes the trace records for it, bytes, ascending.
    pub sizes_bytes: Vec<u64>,
    /// Operations of this kind joined across ranks in the selected jobs'
    /// trace phases, timed passes only, summed over jobs (a send and its
    /// receive are one operation).
    pub joined_operations: u64,
}

/// The whole input.
#[derive(Clone, Debug)]
pub struct AnalysisInput {
    /// Per phase.
    pub phases: Vec<PhaseInput>,
    /// Frozen policy.
    pub policy: AnalysisPolicy,
    /// Canary (candidate label, baseline label, phase).
    pub canary: Option<(String, String, Phase)>,
    /// Trace variants ranked against a source variant (`canary verify`'s campaign).
    pub trace_canary: Option<TraceCanaryInput>,
    /// Controls.
    pub controls: ControlsInput,
    /// Claim context.
    pub context: ClaimContext,
}

/// Trace variants of one campaign, each ranked against the source variant.
#[derive(Clone, Debug, PartialEq)]
pub struct TraceCanaryInput {
    /// Phase ranked.
    pub phase: Phase,
    /// The configurations ranked within every variant.
    pub configs: Vec<String>,
    /// The source variant: name, its frozen trace's SHA-256, and per
    /// configuration its label in the campaign's phase inputs.
    pub source: (String, Option<String>, Vec<String>),
    /// The other variants, the same way.
    pub variants: Vec<(String, Option<String>, Vec<String>)>,
}

/// Pooled event quantiles (nearest-rank), µs.
#[derive(Serialize, Deserialize, schemars::JsonSchema, Clone, Debug, PartialEq)]
pub struct Quantiles {
    /// Events pooled over jobs.
    pub events: usize,
    /// Smallest.
    pub min: f64,
    /// 5th percentile.
    pub p5: f64,
    /// 25th.
    pub p25: f64,
    /// 50th.
    pub p50: f64,
    /// 75th.
    pub p75: f64,
    /// 95th.
    pub p95: f64,
    /// 99th.
    pub p99: f64,
    /// Largest.
    pub max: f64,
}

/// One configuration in one phase.
#[derive(Serialize, Deserialize, schemars::JsonSchema, Clone, Debug, PartialEq)]
pub struct ConfigRow {
    /// Label (blinded where the campaign is).
    pub label: String,
    /// Jobs.
    pub jobs: usize,
    /// Median over jobs of per-job medians, µs.
    pub median_us: f64,
    /// IQR of the job medians (nearest-rank quartiles), µs.
    pub iqr_us: f64,
    /// Median over jobs of per-job nearest-rank p99, µs.
    pub p99_us: f64,
    /// IQR of the job p99s (nearest-rank quartiles), µs.
    pub p99_iqr_us: f64,
    /// Rank by median (1 = fastest; see `pairs` for what the intervals distinguish).
    pub rank: usize,
    /// P(best): posterior probability that this configuration's typical job median is the smallest or
    /// within the minimum effect of the smallest (configurations tied within it share a posterior draw).
    pub p_best: f64,
    /// P(worst).
    pub p_worst: f64,
    /// Pooled event distribution.
    pub distribution: Quantiles,
}

/// One pair in one phase.
#[derive(Serialize, Deserialize, schemars::JsonSchema, Clone, Debug, PartialEq)]
pub struct PairRow {
    /// First label.
    pub a: String,
    /// Second label.
    pub b: String,
    /// 100·(exp(mean over rounds of ln(a/b)) − 1), percent of b.
    pub diff_pct: f64,
    /// Interval, low end, percent.
    pub ci_low_pct: f64,
    /// High end, percent.
    pub ci_high_pct: f64,
    /// Relation read off this interval.
    pub relation: Relation,
}

/// The model behind a phase's P(best)/P(worst).
#[derive(Serialize, Deserialize, schemars::JsonSchema, Clone, Debug, PartialEq)]
pub struct RankModel {
    /// Posterior draws.
    pub draws: u32,
    /// Seed.
    pub seed: u64,
    /// Largest Monte Carlo standard error of any P(best)/P(worst) of the phase.
    pub mc_se: f64,
    /// Residual job noise (log scale) after round and configuration effects.
    pub sigma_log: f64,
    /// Its degrees of freedom.
    pub sigma_df: u32,
    /// Posterior median of the between-configuration spread (log scale); near 0 means the data cannot tell the configurations apart.
    pub tau_median_log: f64,
    /// Percent within which configurations share best/worst in a draw (the minimum effect); also the scale of the
    /// half-Cauchy prior on the spread, ln(1 + this/100) (a uniform prior when 0).
    pub equivalence_pct: f64,
}

/// One phase.
#[derive(Serialize, Deserialize, schemars::JsonSchema, Clone, Debug, PartialEq)]
pub struct PhaseReport {
    /// Phase.
    pub phase: Phase,
    /// Metric (`token_latency_us` or `completion_us`).
    pub metric: String,
    /// Rounds paired.
    pub rounds: usize,
    /// The model behind P(best)/P(worst).
    pub rank_model: RankModel,
    /// Rows by rank.
    pub rows: Vec<ConfigRow>,
    /// Every pair (n(n−1)/2), on the per-job median.
    pub pairs: Vec<PairRow>,
    /// Every pair on the per-job p99.
    pub pairs_p99: Vec<PairRow>,
    /// Pairs in the family of each metric (k(k−1)/2).
    pub family_pairs: usize,
    /// Level of each pair interval, so that the family's intervals hold together at the report's `coverage`.
    pub pair_coverage: f64,
}

/// A control's outcome.
#[derive(Serialize, Deserialize, schemars::JsonSchema, Clone, Copy, Debug, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
pub enum ControlOutcome {
    /// The observation matches the prediction.
    Behaved,
    /// The observation contradicts the prediction.
    Misbehaved,
    /// Too few rounds to tell (see `rounds_to_resolve`).
    Inconclusive,
}

impl ControlOutcome {
    /// Printed word.
    pub fn word(self) -> &'static str {
        match self {
            ControlOutcome::Behaved => "behaved",
            ControlOutcome::Misbehaved => "MISBEHAVED",
            ControlOutcome::Inconclusive => "inconclusive",
        }
    }
}

/// A control's result.
#[derive(Serialize, Deserialize, schemars::JsonSchema, Clone, Debug, PartialEq)]
pub struct ControlResult {
    /// `a-a`, `known-bad` or `injected-skew`.
    pub kind: String,
    /// What it is about.
    pub subject: String,
    /// Phase judged (absent for the skew detector, which reads every phase).
    pub phase: Option<Phase>,
    /// What was predicted.
    pub predicted: String,
    /// What was observed.
    pub observed: String,
    /// Behaved, misbehaved or inconclusive.
    pub outcome: ControlOutcome,
    /// When inconclusive: rounds that would resolve it with 80% power at the noise observed (absent: more than the tool suggests, or never).
    pub rounds_to_resolve: Option<u32>,
    /// Two-sided level of the interval the control was judged on (A/A: [`AaFamily`]'s rule;
    /// known-bad: its phase's pair level; absent for the injected-skew detector, which reads no interval).
    pub level: Option<f64>,
}

/// The campaign's A/A controls, judged as one family (see the module documentation).
#[derive(Serialize, Deserialize, schemars::JsonSchema, Clone, Debug, PartialEq)]
pub struct AaFamily {
    /// A/A controls in the family: declared A/A pairs × phases.
    pub controls: u32,
    /// Probability, at least, that no control of the family misbehaves when every A/A pair is truly one configuration.
    pub family_coverage: f64,
    /// 1 − (1 − family_coverage)/controls; each control is judged at the larger of this and its phase's pair level.
    pub level: f64,
    /// The rule in words.
    pub method: String,
}

/// Candidate against baseline.
#[derive(schemars::JsonSchema, Serialize, Deserialize, Clone, Debug, PartialEq)]
pub struct CanaryResult {
    /// The interval of (candidate − baseline) / baseline.
    pub interval: PairedInterval,
    /// P(candidate faster), from the interval's t distribution (flat prior).
    pub p_candidate_faster: f64,
    /// P(slowdown > delta), likewise.
    pub p_slowdown_beyond_delta: f64,
    /// Verdict read off the interval.
    pub verdict: Verdict,
    /// When insufficient-evidence: rounds that would decide the observed difference (or show
    /// equivalence, when it lies within the minimum effect) with 80% power.
    pub rounds_to_resolve: Option<u32>,
}

/// The canary verdict and the claim it supports.
#[derive(Serialize, Deserialize, schemars::JsonSchema, Clone, Debug, PartialEq)]
pub struct CanaryClaim {
    /// Candidate label.
    pub candidate: String,
    /// Baseline label.
    pub baseline: String,
    /// Phase judged.
    pub phase: Phase,
    /// The result.
    pub result: CanaryResult,
    /// Whether every control behaved (absent when none ran; false when any misbehaved or was inconclusive).
    pub controls_behaved: Option<bool>,
    /// The claim in words.
    pub statement: String,
}

/// One trace variant's ranking against the source variant's.
#[derive(Serialize, Deserialize, schemars::JsonSchema, Clone, Debug, PartialEq)]
pub struct TraceVariantAgreement {
    /// Variant name (`canary`, a baseline, a sample).
    pub variant: String,
    /// SHA-256 of the frozen trace its jobs walked.
    pub trace_sha256: Option<String>,
    /// Its ranking (proxy) against the source's (truth), pairs simultaneous within each.
    pub agreement: ProxyAgreement,
}

/// Trace canaries against their source, in one campaign: every variant's
/// configurations ranked on their own and compared with the source's ranking.
#[derive(Serialize, Deserialize, schemars::JsonSchema, Clone, Debug, PartialEq)]
pub struct TraceCanaryReport {
    /// Phase ranked.
    pub phase: Phase,
    /// The configurations ranked within every variant.
    pub configs: Vec<String>,
    /// The source variant.
    pub source: String,
    /// SHA-256 of the source's frozen trace.
    pub source_trace_sha256: Option<String>,
    /// The source's own ranking (phase report over its configurations).
    pub source_ranking: PhaseReport,
    /// Every other variant against the source.
    pub variants: Vec<TraceVariantAgreement>,
    /// What this section does not check (the rest is `canary verify`'s).
    pub scope: String,
}

/// The report's `canary` section: the verdict of a spec's `[canary]`
/// (candidate against baseline, its fields at the top), and the trace
/// canaries of a spec's `[trace_canary]` under `trace`.
#[derive(Serialize, Deserialize, schemars::JsonSchema, Clone, Debug, PartialEq)]
pub struct CanarySection {
    /// The candidate-against-baseline verdict.
    #[serde(flatten)]
    pub verdict: Option<CanaryClaim>,
    /// Trace variants against their source.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub trace: Option<TraceCanaryReport>,
}

/// `report.json`.
#[derive(Serialize, Deserialize, schemars::JsonSchema, Clone, Debug, PartialEq)]
pub struct Report {
    /// Format version.
    pub format_version: u32,
    /// The tool that wrote it (version, commit, dirty state): a report is regenerated byte for byte only by the same.
    pub producer: String,
    /// What the numbers are and where they come from.
    pub evidence: String,
    /// Completeness verdict the report stands on.
    pub completeness: crate::analysis::policy::Verdict,
    /// Claim context.
    pub context: ClaimContext,
    /// The frozen policy applied.
    pub policy: AnalysisPolicy,
    /// Nominal coverage of every interval.
    pub coverage: f64,
    /// How the intervals are made and their measured coverage.
    pub interval_method: String,
    /// Per phase.
    pub phases: Vec<PhaseReport>,
    /// Each proxy phase against `blocking`.
    pub proxy_vs_blocking: Vec<ProxyAgreement>,
    /// Canary: the candidate-against-baseline verdict and trace canaries against their source.
    pub canary: Option<CanarySection>,
    /// Controls.
    pub controls: Vec<ControlResult>,
    /// The A/A controls as one family (absent when the spec declares no A/A pair).
    pub aa_family: Option<AaFamily>,
    /// Warnings (multiple comparisons, few rounds).
    pub warnings: Vec<String>,
    /// An excerpt of one job's overlap timeline (GPU runs with device intervals).
    pub overlap_excerpt: Option<TimelineExcerpt>,
    /// Plot files written beside the report.
    pub plots: Vec<String>,
}

/// Kendall tau-b with its interval.
#[derive(Serialize, Deserialize, schemars::JsonSchema, Clone, Debug, PartialEq)]
pub struct TauEstimate {
    /// Tau-b of the data (absent when undefined: every pair tied on one side).
    pub tau_b: Option<f64>,
    /// Percentile interval over round resamples (absent when too few resamples define tau).
    pub interval: Option<(f64, f64)>,
    /// Resamples in which tau was defined.
    pub resamples_defined: u32,
}

/// One proxy phase against the truth.
#[derive(Serialize, Deserialize, schemars::JsonSchema, Clone, Debug, PartialEq)]
pub struct ProxyAgreement {
    /// Proxy phase.
    pub proxy: Phase,
    /// Truth phase.
    pub truth: Phase,
    /// The comparison under the interval policy (relations of the pairs' intervals).
    pub comparison: ranking::Comparison,
    /// Tau-b under the interval policy, with its interval.
    pub tau_policy: TauEstimate,
    /// Tau-b on plain medians (every difference counts), with its interval.
    pub tau_plain: TauEstimate,
}

/// A window of one rank's compute and communication intervals.
#[derive(Serialize, Deserialize, schemars::JsonSchema, Clone, Debug, PartialEq)]
pub struct TimelineExcerpt {
    /// Run (attempt) id.
    pub run_id: String,
    /// Label of its configuration.
    pub label: String,
    /// World rank.
    pub rank: u32,
    /// Phase.
    pub phase: Phase,
    /// Interval source.
    pub source: crate::analysis::overlap::IntervalSource,
    /// Compute intervals, µs from the window start.
    pub compute_us: Vec<(f64, f64)>,
    /// Communication intervals, µs from the window start.
    pub comm_us: Vec<(f64, f64)>,
}

fn quantiles(all: &mut [f64]) -> Quantiles {
    let mut q = |p| stats::percentile_nearest_rank(all, p).unwrap_or(f64::NAN);
    let (p5, p25, p50, p75, p95, p99, max) = (q(5.0), q(25.0), q(50.0), q(75.0), q(95.0), q(99.0), q(100.0));
    Quantiles { events: all.len(), min: all.first().copied().unwrap_or(f64::NAN), p5, p25, p50, p75, p95, p99, max }
}

/// A phase's derived tables: job medians and p99s by round.
struct PhaseTables {
    /// `table[round][config]` of job medians.
    table: Vec<Vec<f64>>,
    /// `table_p99[round][config]` of job nearest-rank p99s.
    table_p99: Vec<Vec<f64>>,
}

fn tables(p: &PhaseInput) -> Result<PhaseTables> {
    let mut rounds: Vec<u32> = p.jobs.first().map(|j| j.iter().map(|x| x.round).collect()).unwrap_or_default();
    rounds.sort_unstable();
    for (c, js) in p.jobs.iter().enumerate() {
        let mut r: Vec<u32> = js.iter().map(|x| x.round).collect();
        r.sort_unstable();
        if r != rounds {
            bail!("phase {}: configuration {} ran in rounds {r:?}, {} in {rounds:?}: rounds cannot be paired", p.phase, p.labels[c], p.labels[0]);
        }
        if js.len() < 2 {
            bail!("phase {}: configuration {} has {} job(s); the analysis needs at least 2", p.phase, p.labels[c], js.len());
        }
        if let Some(j) = js.iter().find(|j| j.samples_us.is_empty()) {
            bail!("phase {}: configuration {}, round {}: the job has no events", p.phase, p.labels[c], j.round);
        }
    }
    let mut table = vec![vec![0.0; p.labels.len()]; rounds.len()];
    let mut table_p99 = table.clone();
    for (c, js) in p.jobs.iter().enumerate() {
        for j in js {
            let r = rounds.iter().position(|&x| x == j.round).expect("same rounds");
            let mut v = j.samples_us.clone();
            table[r][c] = stats::median(&mut v).expect("non-empty");
            table_p99[r][c] = stats::percentile_nearest_rank(&mut v, 99.0).expect("non-empty");
        }
    }
    if let Some((r, c)) = (0..rounds.len()).flat_map(|r| (0..p.labels.len()).map(move |c| (r, c))).find(|&(r, c)| !(table[r][c] > 0.0 && table_p99[r][c] > 0.0))
    {
        bail!("phase {}: configuration {}, round {}: a job statistic is not positive; intervals are over log-ratios", p.phase, p.labels[c], rounds[r]);
    }
    Ok(PhaseTables { table, table_p99 })
}

fn column(t: &[Vec<f64>], c: usize) -> Vec<f64> {
    t.iter().map(|r| r[c]).collect()
}

/// The interval of column `a` against column `b` at level `coverage`.
fn pair_interval(t: &[Vec<f64>], a: usize, b: usize, coverage: f64) -> Result<PairedInterval> {
    inference::paired(&column(t, a), &column(t, b), coverage)
}

fn analyze_phase(p: &PhaseInput, policy: &AnalysisPolicy) -> Result<(PhaseReport, PhaseTables)> {
    let t = tables(p)?;
    let k = p.labels.len();
    let probs = inference::rank_probabilities(&t.table, policy.bootstrap_resamples, policy.bootstrap_seed, policy.min_effect_pct)?;
    let iqr = |v: &mut Vec<f64>| stats::percentile_nearest_rank(v, 75.0).zip(stats::percentile_nearest_rank(v, 25.0)).map(|(a, b)| a - b).unwrap_or(f64::NAN);
    let mut rows: Vec<ConfigRow> = (0..k)
        .map(|c| {
            let mut meds = column(&t.table, c);
            let mut p99s = column(&t.table_p99, c);
            let mut pooled: Vec<f64> = p.jobs[c].iter().flat_map(|j| j.samples_us.iter().copied()).collect();
            ConfigRow {
                label: p.labels[c].clone(),
                jobs: p.jobs[c].len(),
                iqr_us: iqr(&mut meds),
                median_us: stats::median(&mut meds).unwrap_or(f64::NAN),
                p99_iqr_us: iqr(&mut p99s),
                p99_us: stats::median(&mut p99s).unwrap_or(f64::NAN),
                rank: 0,
                p_best: probs.p_best[c],
                p_worst: probs.p_worst[c],
                distribution: quantiles(&mut pooled),
            }
        })
        .collect();
    let family_pairs = k * (k - 1) / 2;
    let pair_coverage = inference::simultaneous_coverage(COVERAGE, family_pairs);
    let pairs = pair_rows(&p.labels, &t.table, policy, pair_coverage)?;
    let pairs_p99 = pair_rows(&p.labels, &t.table_p99, policy, pair_coverage)?;
    let mut order: Vec<usize> = (0..k).collect();
    order.sort_by(|&a, &b| rows[a].median_us.total_cmp(&rows[b].median_us));
    for (r, &c) in order.iter().enumerate() {
        rows[c].rank = r + 1;
    }
    rows.sort_by_key(|r| r.rank);
    let metric = if p.phase.has_tokens() { "token_latency_us" } else { "completion_us" };
    let rank_model = RankModel {
        draws: probs.draws,
        seed: probs.seed,
        mc_se: probs.mc_se,
        sigma_log: probs.sigma_log,
        sigma_df: probs.sigma_df,
        tau_median_log: probs.tau_median,
        equivalence_pct: probs.equivalence_pct,
    };
    Ok((PhaseReport { phase: p.phase, metric: metric.into(), rounds: t.table.len(), rank_model, rows, pairs, pairs_p99, family_pairs, pair_coverage }, t))
}

/// Every pair's interval over `table[round][config]` at level `coverage` and the relation read off it.
fn pair_rows(labels: &[String], table: &[Vec<f64>], policy: &AnalysisPolicy, coverage: f64) -> Result<Vec<PairRow>> {
    let mut pairs = Vec::new();
    for i in 0..labels.len() {
        for j in i + 1..labels.len() {
            let c = pair_interval(table, i, j, coverage)?;
            let relation = ranking::relation_from_interval(c.ci_low_pct, c.ci_high_pct, policy.min_effect_pct);
            pairs.push(PairRow {
                a: labels[i].clone(),
                b: labels[j].clone(),
                diff_pct: c.diff_pct,
                ci_low_pct: c.ci_low_pct,
                ci_high_pct: c.ci_high_pct,
                relation,
            });
        }
    }
    Ok(pairs)
}

impl PhaseReport {
    /// Median and IQR per configuration, in `labels` order (every label must have a row).
    pub fn summaries(&self, labels: &[String]) -> Vec<ConfigSummary> {
        labels
            .iter()
            .map(|l| {
                let r = self.rows.iter().find(|r| &r.label == l).expect("row per label");
                ConfigSummary { config: l.clone(), median_us: r.median_us, iqr_us: Some(r.iqr_us) }
            })
            .collect()
    }

    /// The relation of `a` and `b` (either order).
    pub fn relation(&self, a: &str, b: &str) -> Option<Relation> {
        self.pairs.iter().find_map(|p| {
            if p.a == a && p.b == b {
                Some(p.relation)
            } else if p.a == b && p.b == a {
                Some(flip(p.relation))
            } else {
                None
            }
        })
    }
}

fn flip(r: Relation) -> Relation {
    match r {
        Relation::AFaster => Relation::BFaster,
        Relation::BFaster => Relation::AFaster,
        Relation::NotDistinguished => Relation::NotDistinguished,
    }
}

/// `f` over `items` on up to `std::thread::available_parallelism` threads,
/// the results in `items`' order: the same values as a plain map, since each
/// item is computed alone and deterministically (the analysis seeds its own
/// draws per item). A panic in `f` is resumed here.
fn parallel_map<T: Sync, R: Send>(items: &[T], f: impl Fn(&T) -> R + Sync) -> Vec<R> {
    let threads = std::thread::available_parallelism().map_or(1, |n| n.get()).min(items.len());
    if threads <= 1 {
        return items.iter().map(f).collect();
    }
    let next = std::sync::atomic::AtomicUsize::new(0);
    let mut out: Vec<Option<R>> = (0..items.len()).map(|_| None).collect();
    std::thread::scope(|s| {
        let workers: Vec<_> = (0..threads)
            .map(|_| {
                s.spawn(|| {
                    let mut mine = Vec::new();
                    loop {
                        let i = next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                        let Some(item) = items.get(i) else { break };
                        mine.push((i, f(item)));
                    }
                    mine
                })
            })
            .collect();
        for w in workers {
            for (i, r) in w.join().unwrap_or_else(|e| std::panic::resume_unwind(e)) {
                out[i] = Some(r);
            }
        }
    });
    out.into_iter().map(|r| r.expect("every item was computed")).collect()
}

/// Relations of every pair over resampled rounds `idx` of a log table (`logt[round][config]`).
fn relations_over(logt: &[Vec<f64>], idx: &[usize], tq: f64, min_effect_pct: f64) -> Vec<Relation> {
    let k = logt.first().map_or(0, Vec::len);
    let n = idx.len() as f64;
    let mut out = Vec::with_capacity(k * k.saturating_sub(1) / 2);
    let rel = LogRelation::new(min_effect_pct);
    for i in 0..k {
        for j in i + 1..k {
            let mean = idx.iter().map(|&r| logt[r][i] - logt[r][j]).sum::<f64>() / n;
            let sd = (idx.iter().map(|&r| (logt[r][i] - logt[r][j] - mean).powi(2)).sum::<f64>() / (n - 1.0)).sqrt();
            let h = tq * sd / n.sqrt();
            out.push(rel.of(mean - h, mean + h));
        }
    }
    out
}

/// [`ranking::relation_from_interval`] of an interval given by its ends on
/// the log scale, `(lo.exp_m1() * 100, hi.exp_m1() * 100)`, with the same
/// result bit for bit and, away from the thresholds, without the two
/// `exp_m1` (the τ-b resampling reads thousands of intervals): an end
/// farther than `SLACK` from the log of a threshold is on the same side of
/// it as its percentage is of the threshold (`exp_m1` is increasing and off
/// by a few units in the last place at most); an end closer, any value that
/// is not finite, and a minimum effect above 50% (where `exp_m1`'s slope at
/// the lower threshold, 1 − m/100, shrinks the margin toward the rounding)
/// are decided exactly as before.
struct LogRelation {
    min_effect_pct: f64,
    /// Whether the thresholds on the log scale are used (0 ≤ m ≤ 50).
    fast: bool,
    /// ln(1 − m/100) and ln(1 + m/100): where `hi_pct < −m` and `lo_pct > m` change.
    below: f64,
    above: f64,
}

impl LogRelation {
    /// Far more than the rounding of `exp_m1`, `* 100` and `ln_1p` together (a few 1e-16).
    const SLACK: f64 = 1e-9;

    fn new(min_effect_pct: f64) -> Self {
        Self { min_effect_pct, fast: (0.0..=50.0).contains(&min_effect_pct), below: (-min_effect_pct / 100.0).ln_1p(), above: (min_effect_pct / 100.0).ln_1p() }
    }

    fn of(&self, lo: f64, hi: f64) -> Relation {
        let exact = || ranking::relation_from_interval(lo.exp_m1() * 100.0, hi.exp_m1() * 100.0, self.min_effect_pct);
        if !(self.fast && lo.is_finite() && hi.is_finite()) {
            return exact();
        }
        let slack = |t: f64| Self::SLACK * t.abs().max(1.0);
        // hi_pct < -m (a faster)?
        if hi < self.below - slack(self.below) {
            return Relation::AFaster;
        }
        if hi <= self.below + slack(self.below) {
            return exact();
        }
        // lo_pct > m (b faster)?
        if lo > self.above + slack(self.above) {
            return Relation::BFaster;
        }
        if lo >= self.above - slack(self.above) {
            return exact();
        }
        Relation::NotDistinguished
    }
}

fn medians_over(t: &[Vec<f64>], idx: &[usize]) -> Vec<f64> {
    let k = t.first().map_or(0, Vec::len);
    (0..k).map(|c| stats::median(&mut idx.iter().map(|&r| t[r][c]).collect::<Vec<f64>>()).unwrap_or(f64::NAN)).collect()
}

/// Tau-b of a proxy against the truth (both `table[round][config]`, the same
/// jobs), under the interval policy (pair intervals at `pair_coverage`, as in
/// the phase's pair table) and on plain medians, with percentile intervals
/// from resampling whole rounds.
fn tau_estimates(proxy: &[Vec<f64>], truth: &[Vec<f64>], policy: &AnalysisPolicy, pair_coverage: f64) -> (TauEstimate, TauEstimate) {
    let n = truth.len();
    let logs = |t: &[Vec<f64>]| -> Vec<Vec<f64>> { t.iter().map(|r| r.iter().map(|v| v.ln()).collect()).collect() };
    let (lp, lt) = (logs(proxy), logs(truth));
    let tq = inference::t_quantile(1.0 - (1.0 - pair_coverage) / 2.0, (n - 1) as f64);
    let all: Vec<usize> = (0..n).collect();
    let policy_tau = |idx: &[usize]| ranking::tau_b(&relations_over(&lp, idx, tq, policy.min_effect_pct), &relations_over(&lt, idx, tq, policy.min_effect_pct));
    let plain_tau =
        |idx: &[usize]| ranking::tau_b(&ranking::strict_relations(&medians_over(proxy, idx)), &ranking::strict_relations(&medians_over(truth, idx)));
    let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(policy.bootstrap_seed);
    let (mut dp, mut dq) = (Vec::new(), Vec::new());
    let mut idx = vec![0usize; n];
    for _ in 0..policy.bootstrap_resamples {
        for i in idx.iter_mut() {
            *i = rng.gen_range(0..n);
        }
        if let Some(t) = policy_tau(&idx) {
            dp.push(t);
        }
        if let Some(t) = plain_tau(&idx) {
            dq.push(t);
        }
    }
    let est = |point: Option<f64>, mut d: Vec<f64>| {
        d.sort_by(|a, b| a.total_cmp(b));
        let q = |p: f64| d[((p * d.len() as f64).ceil() as usize).clamp(1, d.len()) - 1];
        let interval = (d.len() >= 20).then(|| (q((1.0 - COVERAGE) / 2.0), q(1.0 - (1.0 - COVERAGE) / 2.0)));
        TauEstimate { tau_b: point, interval, resamples_defined: d.len() as u32 }
    };
    (est(policy_tau(&all), dp), est(plain_tau(&all), dq))
}

/// The canary-style result of column `cand` against `base`, with an interval at level `coverage`.
fn canary_result(t: &[Vec<f64>], cand: usize, base: usize, policy: &AnalysisPolicy, coverage: f64) -> Result<CanaryResult> {
    let interval = pair_interval(t, cand, base, coverage)?;
    let verdict = inference::decide(interval.ci_low_pct, interval.ci_high_pct, policy.min_effect_pct);
    let rounds_to_resolve = match verdict {
        Verdict::InsufficientEvidence if interval.diff_pct.abs() <= policy.min_effect_pct => {
            inference::rounds_to_show_equivalence(interval.sd_log, policy.min_effect_pct, coverage, inference::POWER)
        }
        Verdict::InsufficientEvidence => inference::rounds_to_decide(interval.sd_log, interval.diff_pct, policy.min_effect_pct, coverage, inference::POWER),
        _ => None,
    };
    Ok(CanaryResult {
        p_candidate_faster: interval.p_below_pct(0.0),
        p_slowdown_beyond_delta: 1.0 - interval.p_below_pct(policy.delta_pct),
        verdict,
        rounds_to_resolve,
        interval,
    })
}

fn interval_words(i: &PairedInterval) -> String {
    format!("{:+.2}% [{:+.2}, {:+.2}]%", i.diff_pct, i.ci_low_pct, i.ci_high_pct)
}

fn resolve_words(n: Option<u32>) -> String {
    match n {
        Some(n) => format!("; about {n} rounds would resolve it at the noise observed (80% power)"),
        None => format!(
            "; more than {} rounds would be needed at the noise observed (or no number of rounds, for an effect within the minimum effect)",
            inference::MAX_ROUNDS
        ),
    }
}

/// Rounds words where `None` can only mean "beyond the tool's range".
fn resolve_words_bounded(n: Option<u32>) -> String {
    match n {
        Some(_) => resolve_words(n),
        None => format!("; more than {} rounds would be needed at the noise observed", inference::MAX_ROUNDS),
    }
}

/// Level of each A/A control's interval in a campaign of `family` A/A
/// controls (declared pairs × phases), for a control whose phase makes its
/// pair intervals at `pair_coverage`: 1 − (1 − [`COVERAGE`])/family
/// (Bonferroni–Dunn over the campaign's A/A controls), or `pair_coverage`
/// when that is higher. See the module documentation.
pub fn aa_level(family: usize, pair_coverage: f64) -> f64 {
    inference::simultaneous_coverage(COVERAGE, family).max(pair_coverage)
}

/// An A/A control's outcome from the verdict of its interval (at [`aa_level`])
/// under the minimum effect `min_effect_pct`: decided (`pass`/`fail`) is
/// misbehaved; `tied` behaved; otherwise behaved when m = 0 (equivalence
/// cannot be shown, not different is all one can ask), else inconclusive.
pub fn aa_outcome(verdict: Verdict, min_effect_pct: f64) -> ControlOutcome {
    match verdict {
        Verdict::Pass | Verdict::Fail => ControlOutcome::Misbehaved,
        Verdict::Tied => ControlOutcome::Behaved,
        Verdict::InsufficientEvidence if min_effect_pct == 0.0 => ControlOutcome::Behaved,
        Verdict::InsufficientEvidence => ControlOutcome::Inconclusive,
    }
}

/// An A/A pair in one phase, judged on its own interval at `level` ([`aa_level`]).
#[allow(clippy::too_many_arguments)]
fn aa_control(
    a: &str,
    b: &str,
    phase: Phase,
    t: &[Vec<f64>],
    ca: usize,
    cb: usize,
    policy: &AnalysisPolicy,
    level: f64,
    family: usize,
) -> Result<ControlResult> {
    let r = canary_result(t, cb, ca, policy, level)?;
    let m = policy.min_effect_pct;
    let outcome = aa_outcome(r.verdict, m);
    let rounds_to_resolve =
        if outcome == ControlOutcome::Inconclusive { inference::rounds_to_show_equivalence(r.interval.sd_log, m, level, inference::POWER) } else { None };
    let tail = if outcome == ControlOutcome::Inconclusive { resolve_words_bounded(rounds_to_resolve) } else { String::new() };
    Ok(ControlResult {
        kind: "a-a".into(),
        subject: format!("{b} vs {a} (one configuration, two labels)"),
        phase: Some(phase),
        predicted: format!("never pass, fail or a decided relation; tied (interval within ±{m}%) once the rounds suffice"),
        observed: format!(
            "{} (one of {family} A/A controls judged together at {:.0}%) → {}{tail}",
            interval_words(&r.interval),
            COVERAGE * 100.0,
            r.verdict.word()
        ),
        outcome,
        rounds_to_resolve,
        level: Some(level),
    })
}

/// A known-bad control in the judged phase, read off the phase's pair intervals (level `coverage`).
fn known_bad_control(
    kb: &KnownBadInput,
    pin: &PhaseInput,
    t: &[Vec<f64>],
    all_bad: &[String],
    policy: &AnalysisPolicy,
    coverage: f64,
) -> Result<ControlResult> {
    let col = |l: &str| pin.labels.iter().position(|x| x == l).with_context(|| format!("a control names {l:?}, which is not a configuration of the campaign"));
    let bad = col(&kb.label)?;
    let m = policy.min_effect_pct;
    if let Some((reference, slowdown, mechanism)) = &kb.graded {
        let r = canary_result(t, bad, col(reference)?, policy, coverage)?;
        let i = &r.interval;
        let (outcome, rounds) = if r.verdict == Verdict::Fail {
            (ControlOutcome::Behaved, None)
        } else if i.ci_high_pct < *slowdown {
            (ControlOutcome::Misbehaved, None)
        } else {
            (ControlOutcome::Inconclusive, inference::rounds_to_decide(i.sd_log, *slowdown, m, coverage, inference::POWER))
        };
        let tail = match outcome {
            ControlOutcome::Inconclusive => resolve_words_bounded(rounds),
            ControlOutcome::Misbehaved => format!("; the interval excludes the declared {slowdown}%"),
            ControlOutcome::Behaved => String::new(),
        };
        return Ok(ControlResult {
            kind: "known-bad".into(),
            subject: format!("{} = {reference} slowed by a declared {slowdown}% ({mechanism})", kb.label),
            phase: Some(pin.phase),
            predicted: format!("slower than {reference}: interval above +{m}% (fail)"),
            observed: format!("{} vs {reference}: {} → {}{tail}", kb.label, interval_words(i), r.verdict.word()),
            outcome,
            rounds_to_resolve: rounds,
            level: Some(coverage),
        });
    }
    let others: Vec<usize> = (0..pin.labels.len()).filter(|&c| c != bad && !all_bad.contains(&pin.labels[c])).collect();
    let mut slower = 0;
    let mut wrong = Vec::new();
    let mut need: Vec<Option<u32>> = Vec::new();
    for &o in &others {
        let r = canary_result(t, bad, o, policy, coverage)?;
        match r.verdict {
            Verdict::Fail => slower += 1,
            Verdict::Pass => wrong.push(pin.labels[o].clone()),
            _ => need.push(inference::rounds_to_decide(r.interval.sd_log, r.interval.diff_pct, m, coverage, inference::POWER)),
        }
    }
    let (outcome, rounds) = if !wrong.is_empty() {
        (ControlOutcome::Misbehaved, None)
    } else if slower == others.len() {
        (ControlOutcome::Behaved, None)
    } else {
        // the pair that needs the most rounds sets the count (None: more than suggested, or never)
        (ControlOutcome::Inconclusive, need.iter().copied().collect::<Option<Vec<u32>>>().and_then(|v| v.into_iter().max()))
    };
    let tail = match outcome {
        ControlOutcome::Misbehaved => format!("; decided FASTER than {}", wrong.join(", ")),
        ControlOutcome::Inconclusive => resolve_words(rounds),
        ControlOutcome::Behaved => String::new(),
    };
    Ok(ControlResult {
        kind: "known-bad".into(),
        subject: kb.label.clone(),
        phase: Some(pin.phase),
        predicted: format!("slower than each of the {} other configurations: every interval above +{m}% (fail)", others.len()),
        observed: format!("decided slower than {slower} of {}{tail}", others.len()),
        outcome,
        rounds_to_resolve: rounds,
        level: Some(coverage),
    })
}

/// The injected-skew control of one job.
fn skew_control(label: &str, round: u32, d: &DelayCounts) -> ControlResult {
    let rate = if d.delayed > 0 { d.detected as f64 / d.delayed as f64 } else { f64::NAN };
    let fa = if d.undelayed > 0 { d.false_alarms as f64 / d.undelayed as f64 } else { f64::NAN };
    ControlResult {
        kind: "injected-skew".into(),
        subject: format!("{label} round {round}: {} µs arrival delay on one rank", d.delay_us),
        phase: None,
        predicted: if d.beyond_design {
            "arrival skew beyond the replay's design (the skew itself outside replay) >= delay/2 − bound on at least 90% of delayed collectives, on at most 1% of the others"
        } else {
            "arrival skew >= delay/2 − bound on at least 90% of delayed collectives, on at most 1% of the others"
        }
        .into(),
        observed: if d.delayed == 0 {
            "no delayed collective in a judged phase (on GPUs only replay is judged: elsewhere the device queue may run ahead of the host)".into()
        } else {
            format!(
                "{} of {} delayed detected ({:.1}%); {} of {} undelayed above the line ({:.2}%){}",
                d.detected,
                d.delayed,
                rate * 100.0,
                d.false_alarms,
                d.undelayed,
                fa * 100.0,
                match (d.beyond_design, d.skew_counts) {
                    (true, Some((det, fals))) => format!(", on skew beyond the replay's design (on the skew itself: {det} and {fals})"),
                    _ => String::new(),
                }
            )
        },
        outcome: if d.delayed > 0 && rate >= 0.9 && (fa.is_nan() || fa <= 0.01) {
            ControlOutcome::Behaved
        } else if d.delayed == 0 {
            ControlOutcome::Inconclusive
        } else {
            ControlOutcome::Misbehaved
        },
        rounds_to_resolve: None,
        level: None,
    }
}

/// Each trace variant's ranking against the source variant's, from the
/// phase's jobs (the same computation as [`agreement::proxy_against_truth`]).
fn trace_canary_report(input: &AnalysisInput, tc: &TraceCanaryInput, evidence: &str) -> Result<TraceCanaryReport> {
    let pin = input.phases.iter().find(|p| p.phase == tc.phase).with_context(|| format!("the trace canary phase {} was not run", tc.phase))?;
    let sub = |labels: &[String]| -> Result<PhaseInput> {
        if labels.len() != tc.configs.len() {
            bail!("a trace variant names {} labels for {} configurations", labels.len(), tc.configs.len());
        }
        let mut jobs = Vec::new();
        for l in labels {
            let i =
                pin.labels.iter().position(|x| x == l).with_context(|| format!("trace_canary names {l:?}, which is not a configuration of the campaign"))?;
            jobs.push(pin.jobs[i].clone());
        }
        Ok(PhaseInput { phase: tc.phase, labels: tc.configs.clone(), jobs })
    };
    let truth = sub(&tc.source.2)?;
    let mut variants = Vec::new();
    let mut source_ranking = None;
    for (v, sha, labels) in &tc.variants {
        let ev = format!("{evidence}; variant {v} (proxy) against {} (truth) in phase {}", tc.source.0, tc.phase);
        let (_, tr, a) = agreement::proxy_against_truth(&sub(labels)?, &truth, &input.policy, &ev)?;
        source_ranking.get_or_insert(tr);
        variants.push(TraceVariantAgreement { variant: v.clone(), trace_sha256: sha.clone(), agreement: a });
    }
    let source_ranking = match source_ranking {
        Some(r) => r,
        None => analyze_phase(&truth, &input.policy)?.0,
    };
    Ok(TraceCanaryReport {
        phase: tc.phase,
        configs: tc.configs.clone(),
        source: tc.source.0.clone(),
        source_trace_sha256: tc.source.1.clone(),
        source_ranking,
        variants,
        scope: "the ranking only; coverage, latency quantiles per kind, hidden communication, tail recall, structure, decision cost \
                and the assurance state are canary verify's (canary-verify.json beside the campaign)"
            .into(),
    })
}

/// Analyze. `completeness` is the verify verdict the caller obtained (the
/// caller refuses to analyze an incomplete campaign).
pub fn analyze(input: &AnalysisInput, completeness: crate::analysis::policy::Verdict, evidence: &str) -> Result<Report> {
    let policy = &input.policy;
    if policy.tie_policy != TiePolicy::Interval {
        bail!(
            "tie_policy {:?}: a campaign's relations come from their printed intervals since report format 2; \
             plan the campaign with tie_policy = \"interval\" (strict and iqr remain for `compare` on summary tables)",
            policy.tie_policy
        );
    }
    let known = |l: &str| -> Result<()> {
        if input.phases.first().is_some_and(|p| !p.labels.iter().any(|x| x == l)) {
            bail!("a control or canary names {l:?}, which is not a configuration of the campaign");
        }
        Ok(())
    };
    let mut phases = Vec::new();
    let mut tabs = Vec::new();
    // the phases are independent (each its own seeded draws): computed side by side, kept in order
    for (p, done) in input.phases.iter().zip(parallel_map(&input.phases, |p| analyze_phase(p, policy))) {
        let (r, t) = done?;
        phases.push(r);
        tabs.push((p, t));
    }
    // proxies against blocking
    let mut proxy_vs_blocking = Vec::new();
    if let Some(bi) = phases.iter().position(|p| p.phase == Phase::Blocking) {
        let labels = input.phases[bi].labels.clone();
        let summaries = phases[bi].summaries(&labels);
        let tr: Vec<Relation> = phases[bi].pairs.iter().map(|p| p.relation).collect();
        let proxies: Vec<usize> = (0..phases.len()).filter(|&pi| phases[pi].phase != Phase::Blocking && input.phases[pi].labels == labels).collect();
        // each proxy's resampled τ-b is independent of the others' (each its own seeded draws)
        let taus = parallel_map(&proxies, |&pi| tau_estimates(&tabs[pi].1.table, &tabs[bi].1.table, policy, phases[pi].pair_coverage));
        for (&pi, (tau_policy, tau_plain)) in proxies.iter().zip(taus) {
            let p = &phases[pi];
            let pr: Vec<Relation> = p.pairs.iter().map(|x| x.relation).collect();
            let ev = format!("{evidence}; proxy phase {}, truth phase blocking", p.phase);
            proxy_vs_blocking.push(ProxyAgreement {
                proxy: p.phase,
                truth: Phase::Blocking,
                comparison: ranking::compare_relations(&summaries, &pr, &tr, policy.tie_policy, &ev)?,
                tau_policy,
                tau_plain,
            });
        }
    }
    // controls: A/A in every phase; known-bad in the judged phase; skew per job
    let mut controls = Vec::new();
    let aa_count = input.controls.aa_pairs.len() * tabs.len();
    for (a, b) in &input.controls.aa_pairs {
        known(a)?;
        known(b)?;
        for ((pin, t), pr) in tabs.iter().zip(&phases) {
            let col = |l: &str| pin.labels.iter().position(|x| x == l).expect("known");
            controls.push(aa_control(a, b, pin.phase, &t.table, col(a), col(b), policy, aa_level(aa_count, pr.pair_coverage), aa_count)?);
        }
    }
    let aa_family = (aa_count > 0).then(|| {
        let level = inference::simultaneous_coverage(COVERAGE, aa_count);
        AaFamily {
            controls: aa_count as u32,
            family_coverage: COVERAGE,
            level,
            method: format!(
                "the {aa_count} A/A controls (declared A/A pairs x phases) are one family: each is judged on its own Student-t interval at {:.3}% \
                 (1 - 0.05/{aa_count}, Bonferroni-Dunn), or at its phase's pair level when that is higher, so that an instrument that cannot tell \
                 a configuration from itself shows a misbehaved A/A control in at most {:.0}% of campaigns; simulated per-control and per-campaign \
                 rates are in results/2026-12-02-calibration-aa-family/",
                level * 100.0,
                (1.0 - COVERAGE) * 100.0
            ),
        }
    });
    let judge_phase = input
        .canary
        .as_ref()
        .map(|c| c.2)
        .or_else(|| phases.iter().any(|p| p.phase == Phase::Blocking).then_some(Phase::Blocking))
        .or_else(|| phases.first().map(|p| p.phase));
    if let Some(jp) = judge_phase {
        let i = tabs.iter().position(|(p, _)| p.phase == jp).with_context(|| format!("the judged phase {jp} was not run"))?;
        let (pin, t) = &tabs[i];
        let all_bad: Vec<String> = input.controls.known_bad.iter().map(|k| k.label.clone()).collect();
        for kb in &input.controls.known_bad {
            controls.push(known_bad_control(kb, pin, &t.table, &all_bad, policy, phases[i].pair_coverage)?);
        }
    }
    for (label, jobs) in &input.controls.injected_skew {
        known(label)?;
        for (round, d) in jobs {
            controls.push(skew_control(label, *round, d));
        }
    }
    let controls_behaved = (!controls.is_empty()).then(|| controls.iter().all(|c| c.outcome == ControlOutcome::Behaved));
    // canary
    let mut canary = None;
    if let Some((cand, base, phase)) = &input.canary {
        known(cand)?;
        known(base)?;
        let (pin, t) = tabs.iter().find(|(p, _)| p.phase == *phase).with_context(|| format!("the canary phase {phase} was not run"))?;
        let col = |l: &str| pin.labels.iter().position(|x| x == l).expect("known");
        let r = canary_result(&t.table, col(cand), col(base), policy, COVERAGE)?;
        let ctx = &input.context;
        let not_ok = |o: ControlOutcome| controls.iter().filter(|c| c.outcome == o).map(|c| format!("{} {}", c.kind, c.subject)).collect::<Vec<_>>();
        let (bad, unsure) = (not_ok(ControlOutcome::Misbehaved), not_ok(ControlOutcome::Inconclusive));
        let controls_text = match controls_behaved {
            None => "no controls ran in this campaign, so nothing checks that the instrument can tell A from A or see a known fault".to_string(),
            Some(true) => format!("the {} declared control results behaved as predicted", controls.len()),
            Some(false) if !bad.is_empty() => format!("{} control result(s) MISBEHAVED ({}); treat the verdict as unsupported", bad.len(), bad.join("; ")),
            Some(false) => format!(
                "{} control result(s) inconclusive for want of rounds ({}); the verdict is only as good as the controls that resolved",
                unsure.len(),
                unsure.join("; ")
            ),
        };
        let resolve = match (r.verdict, r.rounds_to_resolve) {
            (Verdict::InsufficientEvidence, Some(n)) => format!(" About {n} rounds would resolve it at this noise (80% power)."),
            (Verdict::InsufficientEvidence, None) => format!(
                " More than {} rounds would be needed at this noise (or no number of rounds, for a difference within the minimum effect).",
                inference::MAX_ROUNDS
            ),
            _ => String::new(),
        };
        let statement = format!(
            "Under manifest {} (campaign {}), on {}, with workload {} and replay semantics \"{}\", candidate {cand} vs baseline {base} in phase {phase} differs by {} \
             (per-round log-ratio of per-job median {}, {} rounds, {:.0}% Student-t interval, the one planned comparison); P(candidate faster) {:.3}, P(slowdown > {}%) {:.3}; \
             verdict {} under the frozen minimum effect {}%.{resolve} Controls: {}. Dimensions not represented: {}.",
            &ctx.manifest_sha256[..12.min(ctx.manifest_sha256.len())],
            ctx.campaign_id,
            ctx.hardware,
            ctx.workload,
            ctx.replay_semantics,
            interval_words(&r.interval),
            if phase.has_tokens() { "token latency" } else { "completion time" },
            r.interval.rounds,
            COVERAGE * 100.0,
            r.p_candidate_faster,
            policy.delta_pct,
            r.p_slowdown_beyond_delta,
            r.verdict.word(),
            policy.min_effect_pct,
            controls_text,
            ctx.not_represented.join("; ")
        );
        canary = Some(CanaryClaim { candidate: cand.clone(), baseline: base.clone(), phase: *phase, result: r, controls_behaved, statement });
    }
    for kb in &input.controls.known_bad {
        known(&kb.label)?;
    }
    let trace = match &input.trace_canary {
        Some(tc) => Some(trace_canary_report(input, tc, evidence)?),
        None => None,
    };
    let canary = (canary.is_some() || trace.is_some()).then_some(CanarySection { verdict: canary, trace });
    let mut warnings = Vec::new();
    let families = phases.iter().filter(|p| p.family_pairs > 1).count() * 2;
    if families > 1 {
        warnings.push(format!(
            "multiple comparisons: the pair intervals of each phase and metric hold together at {:.0}% (each at {}), so a family shows a false \
             decided pair with probability at most {:.0}%; this report has {families} such families (median and p99 per phase), so across all of them \
             the bound is {:.0}%. The canary's interval is a single planned comparison at {:.0}%",
            COVERAGE * 100.0,
            phases.iter().filter(|p| p.family_pairs > 1).map(|p| format!("{:.3}% in {}", p.pair_coverage * 100.0, p.phase)).collect::<Vec<_>>().join(", "),
            (1.0 - COVERAGE) * 100.0,
            (families as f64 * (1.0 - COVERAGE) * 100.0).min(100.0),
            COVERAGE * 100.0
        ));
    }
    if let Some(n) = phases.iter().map(|p| p.rounds).min().filter(|&n| n < 5) {
        let t = inference::t_quantile(1.0 - (1.0 - COVERAGE) / 2.0, (n - 1) as f64);
        warnings.push(format!(
            "{n} rounds: each interval is ±{t:.2} standard errors of the per-round log-ratio ({} degree(s) of freedom), so only large differences are decided; \
             P(best) stays close to 1/k unless a configuration stands apart in every round. Inconclusive controls say how many rounds would resolve them",
            n - 1
        ));
    }
    Ok(Report {
        format_version: REPORT_FORMAT_VERSION,
        producer: format!("commcanary {}", crate::core::identity::VERSION_LONG),
        evidence: evidence.to_string(),
        completeness,
        context: input.context.clone(),
        policy: policy.clone(),
        coverage: COVERAGE,
        interval_method: INTERVAL_METHOD.to_string(),
        phases,
        proxy_vs_blocking,
        canary,
        controls,
        aa_family,
        warnings,
        overlap_excerpt: None,
        plots: Vec::new(),
    })
}

/// Terminal table: configs × phases with medians, IQR, p99, ranks, P(best),
/// the pairs the intervals decide, proxies, controls, canary, warnings.
pub fn render(r: &Report) -> String {
    use std::fmt::Write;
    let mut o = String::new();
    let _ = writeln!(
        o,
        "campaign {} (manifest {}), complete: {} cells; {}; decided only beyond ±{}% (minimum effect); P(best) from {} posterior draws, seed {}",
        r.context.campaign_id,
        &r.context.manifest_sha256[..12.min(r.context.manifest_sha256.len())],
        r.completeness.cells_ok,
        r.interval_method.split(';').next().unwrap_or(""),
        r.policy.min_effect_pct,
        r.policy.bootstrap_resamples,
        r.policy.bootstrap_seed
    );
    let _ = writeln!(
        o,
        "{:<10} {:>4}  {:<24} {:>4} {:>11} {:>9} {:>11} {:>7} {:>7}  decided faster than (interval beyond the minimum effect)",
        "phase", "rank", "config", "jobs", "median us", "IQR us", "p99 us", "P(best)", "P(wrst)"
    );
    for p in &r.phases {
        for row in &p.rows {
            let faster: Vec<&str> = p.rows.iter().filter(|x| p.relation(&row.label, &x.label) == Some(Relation::AFaster)).map(|x| x.label.as_str()).collect();
            let _ = writeln!(
                o,
                "{:<10} {:>4}  {:<24} {:>4} {:>11.1} {:>9.1} {:>11.1} {:>7.2} {:>7.2}  {}",
                p.phase.name(),
                row.rank,
                row.label,
                row.jobs,
                row.median_us,
                row.iqr_us,
                row.p99_us,
                row.p_best,
                row.p_worst,
                if faster.is_empty() { "-".to_string() } else { faster.join(",") }
            );
        }
        let _ = writeln!(
            o,
            "{:<10} {} rounds; {} pairs, each interval at {:.3}% (simultaneous {:.0}%); residual job noise {:.2}% (log sd, {} df); P(best)/P(worst) Monte Carlo error <= {:.3}\n",
            "",
            p.rounds,
            p.family_pairs,
            p.pair_coverage * 100.0,
            r.coverage * 100.0,
            p.rank_model.sigma_log * 100.0,
            p.rank_model.sigma_df,
            p.rank_model.mc_se
        );
    }
    let tau = |t: &TauEstimate| match (t.tau_b, t.interval) {
        (Some(v), Some((lo, hi))) => format!("{v:+.2} [{lo:+.2}, {hi:+.2}]"),
        (Some(v), None) => format!("{v:+.2} [interval undefined]"),
        (None, _) => "undefined".to_string(),
    };
    for a in &r.proxy_vs_blocking {
        let c = &a.comparison;
        let _ = writeln!(
            o,
            "proxy {:<9} vs blocking: agree on {}/{} pairs ({:.1}%); Kendall tau-b under the interval policy {}, on plain medians {}",
            a.proxy.name(),
            c.pairs_agree,
            c.pairs_total,
            c.agreement_pct,
            tau(&a.tau_policy),
            tau(&a.tau_plain)
        );
    }
    if r.proxy_vs_blocking.len() >= 2 {
        let mut sep = Vec::new();
        for x in &r.proxy_vs_blocking {
            for y in &r.proxy_vs_blocking {
                if let (Some((_, xhi)), Some((ylo, _))) = (x.tau_plain.interval, y.tau_plain.interval) {
                    if ylo > xhi {
                        sep.push(format!("{} tracks blocking better than {}", y.proxy.name(), x.proxy.name()));
                    }
                }
            }
        }
        let _ = writeln!(
            o,
            "{}",
            if sep.is_empty() {
                "no proxy's plain-median tau interval separates from another's: no proxy is shown to track blocking better than another".to_string()
            } else {
                format!("tau intervals separate: {}", sep.join("; "))
            }
        );
    }
    if let Some(f) = &r.aa_family {
        let _ = writeln!(o, "A/A family: {}", f.method);
    }
    for c in &r.controls {
        let _ = writeln!(
            o,
            "control {} {}{}{}: {} (predicted: {})",
            c.kind,
            c.outcome.word(),
            c.phase.map(|p| format!(" [{}]", p.name())).unwrap_or_default(),
            c.level.map(|l| format!(" at {:.3}%", l * 100.0)).unwrap_or_default(),
            c.observed,
            c.predicted
        );
    }
    if let Some(c) = r.canary.as_ref().and_then(|c| c.verdict.as_ref()) {
        let _ = writeln!(o, "canary {}: {}", c.result.verdict.word(), c.statement);
    }
    if let Some(t) = r.canary.as_ref().and_then(|c| c.trace.as_ref()) {
        let decided = t.source_ranking.pairs.iter().filter(|p| p.relation != Relation::NotDistinguished).count();
        let _ = writeln!(
            o,
            "trace canary: {} configurations ranked in phase {} within every variant; the source {} decides {decided} of {} pairs",
            t.configs.len(),
            t.phase.name(),
            t.source,
            t.source_ranking.pairs.len()
        );
        for v in &t.variants {
            let c = &v.agreement.comparison;
            let _ = writeln!(
                o,
                "trace canary {:<14} vs {}: agree on {}/{} pairs ({:.1}%); Kendall tau-b under the interval policy {}, on plain medians {}",
                v.variant,
                t.source,
                c.pairs_agree,
                c.pairs_total,
                c.agreement_pct,
                tau(&v.agreement.tau_policy),
                tau(&v.agreement.tau_plain)
            );
        }
    }
    for w in &r.warnings {
        let _ = writeln!(o, "warning: {w}");
    }
    let _ = writeln!(o, "evidence: {}", r.evidence);
    o
}

/// How a pair decided in one campaign fared in the other.
#[derive(Serialize, Deserialize, schemars::JsonSchema, Clone, Copy, Debug, PartialEq, Eq)]
#[serde(rename_all = "kebab-case")]
pub enum ReplicationOutcome {
    /// Both campaigns decide the same direction.
    Reproduced,
    /// The campaigns decide opposite directions.
    Contradicted,
    /// One campaign decides it, the other does not.
    NotConfirmed,
}

/// One pair decided in at least one of two campaigns.
#[derive(Serialize, Deserialize, schemars::JsonSchema, Clone, Debug, PartialEq)]
pub struct PairReplication {
    /// Phase.
    pub phase: Phase,
    /// First configuration (name).
    pub a: String,
    /// Second configuration (name).
    pub b: String,
    /// Relation and interval (percent) in the first campaign.
    pub first: (Relation, f64, f64),
    /// In the second.
    pub second: (Relation, f64, f64),
    /// Outcome.
    pub outcome: ReplicationOutcome,
}

/// `campaign replicate A B`.
#[derive(Serialize, Deserialize, schemars::JsonSchema, Clone, Debug, PartialEq)]
pub struct Replication {
    /// The two campaign ids.
    pub campaigns: (String, String),
    /// Every pair that either campaign decides.
    pub pairs: Vec<PairReplication>,
    /// Per phase: Kendall tau-b between the two campaigns' plain medians.
    pub tau_b_medians: Vec<(Phase, Option<f64>)>,
    /// Counts: reproduced, contradicted, not confirmed.
    pub reproduced: usize,
    /// Contradicted.
    pub contradicted: usize,
    /// Not confirmed.
    pub not_confirmed: usize,
}

/// Compare the decided pairs of two reports of the same experiment; labels
/// are mapped to configuration names by `name_a`/`name_b` (blinding may
/// differ). Refuses different configuration sets or minimum effects.
pub fn replicate(a: &Report, b: &Report, name_a: &dyn Fn(&str) -> String, name_b: &dyn Fn(&str) -> String) -> Result<Replication> {
    if a.policy.min_effect_pct != b.policy.min_effect_pct || a.format_version != b.format_version {
        bail!(
            "the campaigns differ in minimum effect ({}% vs {}%) or report format: their decisions are not comparable",
            a.policy.min_effect_pct,
            b.policy.min_effect_pct
        );
    }
    let mut pairs = Vec::new();
    let mut taus = Vec::new();
    for pa in &a.phases {
        let Some(pb) = b.phases.iter().find(|p| p.phase == pa.phase) else { continue };
        let mut na: Vec<String> = pa.rows.iter().map(|r| name_a(&r.label)).collect();
        let mut nb: Vec<String> = pb.rows.iter().map(|r| name_b(&r.label)).collect();
        na.sort();
        nb.sort();
        if na != nb {
            bail!("phase {}: the campaigns hold different configurations ({na:?} vs {nb:?})", pa.phase);
        }
        let find = |p: &PhaseReport, name: &dyn Fn(&str) -> String, x: &str, y: &str| {
            p.pairs.iter().find_map(|r| {
                let (ra, rb) = (name(&r.a), name(&r.b));
                if ra == x && rb == y {
                    Some((r.relation, r.ci_low_pct, r.ci_high_pct))
                } else if ra == y && rb == x {
                    // the interval of (b − a)/a mirrors on the log scale
                    let m = |v: f64| (1.0 / (1.0 + v / 100.0) - 1.0) * 100.0;
                    Some((flip(r.relation), m(r.ci_high_pct), m(r.ci_low_pct)))
                } else {
                    None
                }
            })
        };
        for r in &pa.pairs {
            let (x, y) = (name_a(&r.a), name_a(&r.b));
            let first = (r.relation, r.ci_low_pct, r.ci_high_pct);
            let second = find(pb, name_b, &x, &y).context("pair missing in the second campaign")?;
            if first.0 == Relation::NotDistinguished && second.0 == Relation::NotDistinguished {
                continue;
            }
            let outcome = if first.0 == second.0 {
                ReplicationOutcome::Reproduced
            } else if first.0 == Relation::NotDistinguished || second.0 == Relation::NotDistinguished {
                ReplicationOutcome::NotConfirmed
            } else {
                ReplicationOutcome::Contradicted
            };
            pairs.push(PairReplication { phase: pa.phase, a: x, b: y, first, second, outcome });
        }
        let med = |p: &PhaseReport, name: &dyn Fn(&str) -> String| -> Vec<f64> {
            na.iter().map(|n| p.rows.iter().find(|r| &name(&r.label) == n).map_or(f64::NAN, |r| r.median_us)).collect()
        };
        taus.push((pa.phase, ranking::tau_b(&ranking::strict_relations(&med(pa, name_a)), &ranking::strict_relations(&med(pb, name_b)))));
    }
    if taus.is_empty() {
        bail!("the campaigns share no phase");
    }
    let count = |o| pairs.iter().filter(|p: &&PairReplication| p.outcome == o).count();
    Ok(Replication {
        campaigns: (a.context.campaign_id.clone(), b.context.campaign_id.clone()),
        reproduced: count(ReplicationOutcome::Reproduced),
        contradicted: count(ReplicationOutcome::Contradicted),
        not_confirmed: count(ReplicationOutcome::NotConfirmed),
        pairs,
        tau_b_medians: taus,
    })
}

/// Terminal text of a replication.
pub fn render_replication(r: &Replication) -> String {
    use std::fmt::Write;
    let mut o = String::new();
    let _ = writeln!(o, "replication of {} by {}: pairs either campaign decides (interval beyond the minimum effect)", r.campaigns.0, r.campaigns.1);
    let rel = |x: &(Relation, f64, f64)| format!("{:?} [{:+.2}, {:+.2}]%", x.0, x.1, x.2);
    for p in &r.pairs {
        let _ = writeln!(o, "  {:<9} {} vs {}: first {}, second {} → {:?}", p.phase.name(), p.a, p.b, rel(&p.first), rel(&p.second), p.outcome);
    }
    for (ph, t) in &r.tau_b_medians {
        let _ = writeln!(
            o,
            "  {:<9} Kendall tau-b of the plain-median orders between campaigns: {}",
            ph.name(),
            t.map(|t| format!("{t:+.2}")).unwrap_or_else(|| "undefined".into())
        );
    }
    let _ = writeln!(o, "{} reproduced, {} contradicted, {} not confirmed", r.reproduced, r.contradicted, r.not_confirmed);
    if r.contradicted + r.not_confirmed > 0 {
        let _ = writeln!(o, "FLAG: {} decided pair(s) did not reproduce; a ranking built on them is not established", r.contradicted + r.not_confirmed);
    }
    o
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The log-scale shortcut decides every interval as the percentage rule does.
    #[test]
    fn log_relations_match_the_percentage_rule() {
        let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(27);
        for m in [0.0, 0.5, 2.0, 5.0, 49.0, 50.0, 60.0, 99.0, 100.0, 150.0] {
            let rel = LogRelation::new(m);
            let (below, above) = ((-m / 100.0f64).ln_1p(), (m / 100.0f64).ln_1p());
            let mut ends: Vec<f64> = vec![0.0, -0.0, f64::NAN, f64::INFINITY, f64::NEG_INFINITY, 1e-300, -1e-300, 700.0, 710.0, -800.0];
            for t in [below, above] {
                if t.is_finite() {
                    // the thresholds themselves and their neighbours, a few units in the last place away
                    // (the bit patterns one by one on either side; 0 has its neighbours among the subnormals)
                    for k in 1..=8u64 {
                        ends.push(f64::from_bits(t.to_bits() + k));
                        match t.to_bits().checked_sub(k) {
                            Some(b) => ends.push(f64::from_bits(b)),
                            None => ends.push(-f64::from_bits(k)),
                        }
                    }
                    ends.extend([t, t + 1e-10, t - 1e-10, t + 1e-8, t - 1e-8]);
                }
            }
            for _ in 0..20_000 {
                ends.push(rng.gen_range(-0.3..0.3));
            }
            for (i, &lo) in ends.iter().enumerate() {
                for &hi in ends.iter().skip(i % 7).step_by(97) {
                    let want = ranking::relation_from_interval(lo.exp_m1() * 100.0, hi.exp_m1() * 100.0, m);
                    assert_eq!(rel.of(lo, hi), want, "m {m}, interval ({lo:e}, {hi:e})");
                }
            }
        }
    }
    use rand::{Rng, SeedableRng};

    fn policy() -> AnalysisPolicy {
        AnalysisPolicy { tie_policy: TiePolicy::Interval, min_effect_pct: 2.0, delta_pct: 5.0, bootstrap_resamples: 2000, bootstrap_seed: 1 }
    }

    /// Every job of a round shares a drift of up to ±20%; job noise ±`noise`.
    fn input(means: &[f64], rounds: u32, noise: f64) -> AnalysisInput {
        let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(5);
        let labels: Vec<String> = (0..means.len()).map(|i| format!("c{i}")).collect();
        let drift: Vec<f64> = (0..rounds).map(|_| rng.gen_range(-0.2..0.2)).collect();
        let mut mk = |phase, scale: f64| PhaseInput {
            phase,
            labels: labels.clone(),
            jobs: means
                .iter()
                .map(|m| {
                    (1..=rounds)
                        .map(|r| {
                            let job = 1.0 + drift[r as usize - 1] + rng.gen_range(-noise..noise);
                            JobData { round: r, samples_us: (0..50).map(|_| m * scale * job * (1.0 + rng.gen_range(-0.001..0.001))).collect() }
                        })
                        .collect()
                })
                .collect(),
        };
        let phases = vec![mk(Phase::Isolated, 0.01), mk(Phase::Blocking, 1.0)];
        AnalysisInput {
            phases,
            policy: policy(),
            canary: Some(("c1".into(), "c0".into(), Phase::Blocking)),
            trace_canary: None,
            controls: ControlsInput {
                aa_pairs: vec![("c0".into(), "c2".into())],
                known_bad: vec![KnownBadInput { label: "c3".into(), graded: None }],
                injected_skew: vec![],
            },
            context: ClaimContext {
                campaign_id: "t".into(),
                manifest_sha256: "0123456789abcdef".into(),
                hardware: "h".into(),
                workload: "w".into(),
                replay_semantics: "r".into(),
                not_represented: vec!["x".into()],
                trace: None,
            },
        }
    }

    fn verdict() -> crate::analysis::policy::Verdict {
        crate::analysis::policy::Verdict { complete: true, manifest_sha256: String::new(), cells_expected: 0, cells_ok: 0, refusals: vec![] }
    }

    #[test]
    fn controls_and_canary_behave_on_synthetic_data() {
        let r = analyze(&input(&[100.0, 150.0, 100.0, 300.0], 5, 0.002), verdict(), "synthetic").unwrap();
        let b = r.phases.iter().find(|p| p.phase == Phase::Blocking).unwrap();
        assert_eq!((b.pairs.len(), b.pairs_p99.len()), (6, 6));
        assert_eq!(b.rows.last().unwrap().label, "c3");
        assert!(b.rows.iter().find(|x| x.label == "c3").unwrap().p_worst > 0.99);
        let aa: Vec<&ControlResult> = r.controls.iter().filter(|c| c.kind == "a-a").collect();
        assert_eq!(aa.len(), 2, "A/A judged in every phase");
        assert!(aa.iter().all(|c| c.outcome == ControlOutcome::Behaved), "{aa:?}");
        let kb = r.controls.iter().find(|c| c.kind == "known-bad").unwrap();
        assert_eq!(kb.outcome, ControlOutcome::Behaved, "{kb:?}");
        let c = r.canary.as_ref().unwrap().verdict.as_ref().unwrap();
        assert_eq!(c.result.verdict, Verdict::Fail, "c1 is 50% slower than c0");
        assert_eq!(c.controls_behaved, Some(true));
        assert!(c.statement.contains("Dimensions not represented: x"));
        assert_eq!(r.proxy_vs_blocking.len(), 1);
        assert_eq!(b.relation("c0", "c2"), Some(Relation::NotDistinguished), "A/A is tied");
        // one decision rule: every printed relation is its printed interval's
        for p in r.phases.iter().flat_map(|p| p.pairs.iter().chain(&p.pairs_p99)) {
            assert_eq!(p.relation, ranking::relation_from_interval(p.ci_low_pct, p.ci_high_pct, 2.0), "{p:?}");
        }
        // simultaneous: 6 pairs, each interval at 1 - 0.05/6, and the controls print those same intervals
        assert_eq!(b.family_pairs, 6);
        assert!((b.pair_coverage - (1.0 - 0.05 / 6.0)).abs() < 1e-12);
        let t = input(&[100.0, 150.0, 100.0, 300.0], 5, 0.002);
        let tb = tables(t.phases.iter().find(|p| p.phase == Phase::Blocking).unwrap()).unwrap();
        let want = inference::paired(&column(&tb.table, 2), &column(&tb.table, 0), b.pair_coverage).unwrap();
        let blocking_aa = aa.iter().find(|c| c.phase == Some(Phase::Blocking)).unwrap();
        assert!(blocking_aa.observed.starts_with(&interval_words(&want)), "{blocking_aa:?} vs {want:?}");
        // two A/A controls: the family level 1 - 0.05/2 is below the pair level, so the pair level holds
        assert_eq!(blocking_aa.level, Some(b.pair_coverage));
        let fam = r.aa_family.as_ref().unwrap();
        assert_eq!((fam.controls, fam.family_coverage), (2, COVERAGE));
        assert!((fam.level - 0.975).abs() < 1e-12, "{fam:?}");
        assert_eq!(kb.level, Some(b.pair_coverage));
        let narrower = inference::paired(&column(&tb.table, 2), &column(&tb.table, 0), COVERAGE).unwrap();
        assert!(narrower.ci_high_pct - narrower.ci_low_pct < want.ci_high_pct - want.ci_low_pct);
        let t = &r.proxy_vs_blocking[0];
        assert!(t.tau_plain.tau_b.is_some() && t.tau_plain.interval.is_some(), "{t:?}");
        assert!(render(&r).contains("Kendall tau-b under the interval policy"));
    }

    #[test]
    fn a_campaigns_aa_controls_are_judged_as_one_family() {
        // 3 configurations (3 pairs, each at 1 - 0.05/3) and 2 A/A pairs in 2 phases: 4 A/A controls,
        // so each is judged at 1 - 0.05/4, above the pair level, on its own interval at that level
        let mut i = input(&[100.0, 100.0, 100.0], 5, 0.01);
        i.controls.aa_pairs = vec![("c0".into(), "c1".into()), ("c0".into(), "c2".into())];
        i.controls.known_bad.clear();
        i.canary = None;
        let r = analyze(&i, verdict(), "synthetic").unwrap();
        let want = 1.0 - 0.05 / 4.0;
        assert!((aa_level(4, 1.0 - 0.05 / 3.0) - want).abs() < 1e-12);
        assert!((aa_level(4, 0.995) - 0.995).abs() < 1e-12, "never below the phase's pair level");
        let aa: Vec<&ControlResult> = r.controls.iter().filter(|c| c.kind == "a-a").collect();
        assert_eq!(aa.len(), 4);
        let fam = r.aa_family.as_ref().unwrap();
        assert_eq!(fam.controls, 4);
        assert!((fam.level - want).abs() < 1e-12, "{fam:?}");
        let tb = tables(i.phases.iter().find(|p| p.phase == Phase::Blocking).unwrap()).unwrap();
        let at = inference::paired(&column(&tb.table, 1), &column(&tb.table, 0), want).unwrap();
        let c = aa.iter().find(|c| c.phase == Some(Phase::Blocking) && c.subject.starts_with("c1 vs c0")).unwrap();
        assert_eq!(c.level, Some(want), "{c:?}");
        assert!(c.observed.starts_with(&interval_words(&at)) && c.observed.contains("one of 4 A/A controls"), "{c:?} vs {at:?}");
        let text = render(&r);
        assert!(text.contains("A/A family: the 4 A/A controls") && text.contains(&format!("[blocking] at {:.3}%", want * 100.0)), "{text}");
        // the outcome rule: decided misbehaves; tied behaves; undecided behaves only with no minimum effect
        assert_eq!(aa_outcome(Verdict::Pass, 2.0), ControlOutcome::Misbehaved);
        assert_eq!(aa_outcome(Verdict::Fail, 0.0), ControlOutcome::Misbehaved);
        assert_eq!(aa_outcome(Verdict::Tied, 2.0), ControlOutcome::Behaved);
        assert_eq!(aa_outcome(Verdict::InsufficientEvidence, 0.0), ControlOutcome::Behaved);
        assert_eq!(aa_outcome(Verdict::InsufficientEvidence, 2.0), ControlOutcome::Inconclusive);
        // no A/A pair declared: no family
        i.controls.aa_pairs.clear();
        assert!(analyze(&i, verdict(), "synthetic").unwrap().aa_family.is_none());
    }

    #[test]
    fn noisy_few_rounds_make_controls_inconclusive_with_rounds_to_resolve() {
        let mut i = input(&[100.0, 100.0, 100.0, 103.0], 3, 0.03);
        i.controls.known_bad = vec![KnownBadInput { label: "c3".into(), graded: Some(("c0".into(), 3.0, "test".into())) }];
        let r = analyze(&i, verdict(), "synthetic").unwrap();
        let kb = r.controls.iter().find(|c| c.kind == "known-bad").unwrap();
        assert_eq!(kb.outcome, ControlOutcome::Inconclusive, "{kb:?}");
        assert!(kb.rounds_to_resolve.is_some_and(|n| n > 3) && kb.observed.contains("would resolve"), "{kb:?}");
        for c in r.controls.iter().filter(|c| c.kind == "a-a") {
            assert_ne!(c.outcome, ControlOutcome::Misbehaved, "{c:?}");
        }
    }

    #[test]
    fn a_known_bad_that_is_not_bad_misbehaves() {
        let mut i = input(&[100.0, 150.0, 100.0, 300.0], 5, 0.002);
        i.controls.known_bad = vec![KnownBadInput { label: "c0".into(), graded: None }];
        let r = analyze(&i, verdict(), "synthetic").unwrap();
        assert_eq!(r.controls.iter().find(|c| c.kind == "known-bad").unwrap().outcome, ControlOutcome::Misbehaved);
        assert_eq!(r.canary.unwrap().verdict.unwrap().controls_behaved, Some(false));
        let mut i = input(&[100.0, 150.0, 100.0, 300.0], 5, 0.002);
        i.controls.known_bad = vec![KnownBadInput { label: "c2".into(), graded: Some(("c0".into(), 10.0, "test".into())) }];
        let r = analyze(&i, verdict(), "synthetic").unwrap();
        let kb = r.controls.iter().find(|c| c.kind == "known-bad").unwrap();
        assert_eq!(kb.outcome, ControlOutcome::Misbehaved, "the interval excludes the declared 10%: {kb:?}");
    }

    #[test]
    fn replication_flags_what_did_not_reproduce() {
        let a = analyze(&input(&[100.0, 150.0, 100.0, 300.0], 5, 0.002), verdict(), "a").unwrap();
        let same = replicate(&a, &a, &|l| l.to_string(), &|l| l.to_string()).unwrap();
        assert_eq!((same.contradicted, same.not_confirmed), (0, 0));
        assert!(same.reproduced >= 5, "{same:?}");
        // the second campaign's c3 is the fastest: every decided c3 pair is contradicted
        let b = analyze(&input(&[100.0, 150.0, 100.0, 30.0], 5, 0.002), verdict(), "b").unwrap();
        let r = replicate(&a, &b, &|l| l.to_string(), &|l| l.to_string()).unwrap();
        assert!(r.contradicted >= 3, "{r:?}");
        assert!(render_replication(&r).contains("FLAG"));
        // labels are matched by name: a relabelled copy reproduces
        let swap = |l: &str| match l {
            "c0" => "c2".to_string(),
            "c2" => "c0".to_string(),
            x => x.to_string(),
        };
        let r = replicate(&a, &a, &|l| l.to_string(), &swap).unwrap();
        assert_eq!(r.contradicted, 0, "c0 and c2 are the same configuration: {r:?}");
    }

    #[test]
    fn refuses_unpaired_rounds_unknown_labels_and_summary_policies() {
        let mut i = input(&[100.0, 110.0], 3, 0.01);
        i.controls = ControlsInput::default();
        i.canary = None;
        i.phases[1].jobs[1][0].round = 9;
        assert!(analyze(&i, verdict(), "s").unwrap_err().to_string().contains("cannot be paired"));
        let mut i = input(&[100.0, 110.0, 120.0, 130.0], 3, 0.01);
        i.controls.known_bad = vec![KnownBadInput { label: "nope".into(), graded: None }];
        assert!(analyze(&i, verdict(), "s").unwrap_err().to_string().contains("\"nope\""));
        let mut i = input(&[100.0, 110.0, 120.0, 130.0], 3, 0.01);
        i.policy.tie_policy = TiePolicy::Iqr;
        assert!(analyze(&i, verdict(), "s").unwrap_err().to_string().contains("tie_policy = \"interval\""));
    }
}
