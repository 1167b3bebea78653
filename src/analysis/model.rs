//! The analysis's data: what [`crate::analysis::analyze`] consumes (per phase, every
//! configuration's jobs by round; the frozen policy, canary and controls; the claim context)
//! and the [`Report`] it produces, written as `report.json` at [`REPORT_FORMAT_VERSION`].
//! Plain data, nothing computed or refused here beyond reading a pair's relation off the
//! pair rows ([`PhaseReport::relation`]). Build the inputs, analyze, then read or serialize.
use crate::analysis::inference::{PairedInterval, Verdict};
use crate::analysis::overlap::IntervalSource;
use crate::analysis::policy::{self, AnalysisPolicy};
use crate::analysis::ranking::{self, Comparison, ConfigSummary, Relation};
use crate::core::workload::Phase;
use crate::evidence::{commtrace, shard};
use serde::{Deserialize, Serialize};

/// Report format version (2: Student-t intervals over rounds, hierarchical P(best), three-outcome controls;
/// 3: P(best)/P(worst) share ties within the minimum effect, half-Cauchy prior on the spread;
/// 4: a phase's pair intervals are simultaneous, Bonferroni–Dunn over its pairs, and the controls read them;
/// P(best)/P(worst) put prior mass 1/2 on "all configurations the same"; 5: `context.trace`;
/// 6: `canary` is a section holding the verdict's fields and, under `trace`, trace canaries against their source;
/// 7: the A/A controls are one family (`aa_family`), and every control says the `level` it was judged at).
pub const REPORT_FORMAT_VERSION: u32 = 7;

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
    pub phases: Vec<Phase>,
    /// The trace's collectives left out per pass, by rank (`--trace-allreduce-only`).
    pub left_out_per_pass_by_rank: Vec<u32>,
    /// Per collective kind of the trace.
    pub kinds: Vec<TraceKindClaim>,
}

/// One collective kind of a trace campaign's trace.
#[derive(Serialize, Deserialize, schemars::JsonSchema, Clone, Debug, PartialEq)]
pub struct TraceKindClaim {
    /// Kind.
    pub kind: shard::CollectiveKind,
    /// Collectives of this kind each rank ran per pass, by rank.
    pub run_per_pass_by_rank: Vec<u32>,
    /// Collectives of this kind each rank left out per pass, by rank.
    pub left_out_per_pass_by_rank: Vec<u32>,
    /// Element types the trace records for it.
    pub dtypes: Vec<commtrace::TraceDtype>,
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
    /// The user's real job under every configuration (the campaign's truth cells).
    pub truth: Option<TruthInput>,
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
    /// The empirical distribution: the nearest-rank percentiles 0, 5, …, 100
    /// ([`ECDF_STEP_PCT`] apart), µs; empty in reports written before it was kept.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub ecdf_us: Vec<f64>,
}

/// Spacing of [`Quantiles::ecdf_us`], percent.
pub const ECDF_STEP_PCT: f64 = 5.0;

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
    #[doc = concat!(
        "Posterior median of the between-configuration spread (log scale); ",
        "near 0 means the data cannot tell the configurations apart."
    )]
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
    #[doc = concat!(
        "When inconclusive: rounds that would resolve it with 80% power at the noise observed ",
        "(absent: more than the tool suggests, or never)."
    )]
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
    pub completeness: policy::Verdict,
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
    /// One job's clock offsets against rank 0 with their bounds (absent in older reports).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub clock_excerpt: Option<ClockExcerpt>,
    /// Plot files written beside the report.
    pub plots: Vec<String>,
    /// The real job's ranking and every proxy's pick judged on it (campaigns with `[truth]`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub truth: Option<TruthReport>,
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

/// One job's clock model per rank: the offset against rank 0 and its bound
/// at the start and end calibration windows, on rank 0's time axis.
#[derive(Serialize, Deserialize, schemars::JsonSchema, Clone, Debug, PartialEq)]
pub struct ClockExcerpt {
    /// The job's run id.
    pub run_id: String,
    /// Its configuration's label.
    pub label: String,
    /// One entry per rank that measured its clock against rank 0, in rank order.
    pub ranks: Vec<ClockRankWindows>,
}

/// One rank's calibration windows ([`ClockExcerpt`]).
#[derive(Serialize, Deserialize, schemars::JsonSchema, Clone, Debug, PartialEq)]
pub struct ClockRankWindows {
    /// Rank.
    pub rank: u32,
    /// Start window: seconds after the job's first window, offset and its bound, µs.
    pub start: (f64, f64, f64),
    /// End window, the same; absent when only one window was measured.
    pub end: Option<(f64, f64, f64)>,
    /// The rank reads rank 0's own kernel clock (offset and bound exactly 0).
    pub shared_kernel_clock: bool,
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
    pub source: IntervalSource,
    /// Compute intervals, µs from the window start.
    pub compute_us: Vec<(f64, f64)>,
    /// Communication intervals, µs from the window start.
    pub comm_us: Vec<(f64, f64)>,
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

    /// The labels `label` is decided faster than, in row order.
    pub fn decided_faster_than(&self, label: &str) -> Vec<&str> {
        self.rows
            .iter()
            .filter(|x| self.relation(label, &x.label) == Some(Relation::AFaster))
            .map(|x| x.label.as_str())
            .collect()
    }
}

pub(super) fn flip(r: Relation) -> Relation {
    match r {
        Relation::AFaster => Relation::BFaster,
        Relation::BFaster => Relation::AFaster,
        Relation::NotDistinguished => Relation::NotDistinguished,
    }
}

/// The truth cells of a campaign.
#[derive(Clone, Debug, PartialEq)]
pub struct TruthInput {
    /// What the metric is (`wall time`, `/regex/ on stdout`, `field in file`).
    pub metric: String,
    /// Its unit.
    pub unit: String,
    /// Higher values are better (the cost is the reciprocal).
    pub higher_is_better: bool,
    /// Labels, in the campaign's order.
    pub labels: Vec<String>,
    /// Per label, per job: the round and the metric's value.
    pub values: Vec<Vec<(u32, f64)>>,
    /// Per label, per truth job: the round and its wall seconds.
    pub seconds: Vec<Vec<(u32, f64)>>,
    /// Per label, per proxy job: the round and its wall seconds (absent in a truth-only campaign).
    pub proxy_seconds: Vec<Vec<(u32, f64)>>,
}

impl TruthInput {
    /// The cost of one value: lower is better.
    pub fn cost(&self, v: f64) -> f64 {
        if self.higher_is_better {
            1.0 / v
        } else {
            v
        }
    }

    /// The truth as a phase input of costs (one event per job).
    pub(super) fn phase_input(&self) -> PhaseInput {
        PhaseInput {
            // the placeholder phase never reaches the report: the truth section has its own types
            phase: Phase::Blocking,
            labels: self.labels.clone(),
            jobs: self
                .values
                .iter()
                .map(|js| js.iter().map(|&(round, v)| JobData { round, samples_us: vec![self.cost(v)] }).collect())
                .collect(),
        }
    }
}

/// One configuration in the truth's ranking.
#[derive(Serialize, Deserialize, schemars::JsonSchema, Clone, Debug, PartialEq)]
pub struct TruthRow {
    /// Label.
    pub label: String,
    /// Jobs.
    pub jobs: usize,
    /// Median of the metric over jobs, in the metric's unit.
    pub median: f64,
    /// Interquartile range of the metric over jobs (nearest-rank quartiles).
    pub iqr: f64,
    /// Rank by median cost (1 = best).
    pub rank: usize,
    /// P(best) from the campaign's hierarchical posterior.
    pub p_best: f64,
    /// P(worst).
    pub p_worst: f64,
}

/// The regret of a pick: how much more the real job costs on it than on the best configuration.
#[derive(Serialize, Deserialize, schemars::JsonSchema, Clone, Debug, PartialEq)]
pub struct Regret {
    /// The picked label.
    pub pick: String,
    /// max(0, max over the others of the pick's cost over theirs − 1), percent: point estimate.
    pub regret_pct: f64,
    /// Lower end of its interval, percent.
    pub low_pct: f64,
    /// Upper end, percent.
    pub high_pct: f64,
    /// Level of the pair intervals it is read from (the truth's simultaneous pair level).
    pub level: f64,
    /// No configuration is decided faster than the pick in the truth.
    pub within_best_set: bool,
    /// The configuration the pick trails most (point estimate), when it trails one.
    pub trails: Option<String>,
}

/// Proxy and truth seconds to reach the truth's decided relations.
#[derive(Serialize, Deserialize, schemars::JsonSchema, Clone, Debug, Default, PartialEq)]
pub struct TruthDecisionCost {
    /// Pairs the truth decides (none: no decision to preserve, every other field absent).
    pub truth_decided_pairs: usize,
    /// Leading rounds from which on the truth decides every pair it decides with all its rounds.
    pub truth_rounds: Option<usize>,
    /// Leading rounds from which on the proxy decides those pairs as the truth does (absent: never in these rounds).
    pub proxy_rounds: Option<usize>,
    /// Truth jobs' wall seconds over those rounds, every configuration.
    pub truth_s: Option<f64>,
    /// Proxy jobs' wall seconds over its rounds, every configuration (a whole job: its phases run in one launch).
    pub proxy_s: Option<f64>,
    /// truth_s / proxy_s: how many times cheaper the proxy reached the truth's decisions.
    pub truth_per_proxy: Option<f64>,
}

/// One proxy judged by the truth.
#[derive(Serialize, Deserialize, schemars::JsonSchema, Clone, Debug, PartialEq)]
pub struct ProxyJudged {
    /// What the proxy is: `phase NAME` or `trace variant NAME`.
    pub proxy: String,
    /// Its pick: the label it ranks first by median.
    pub pick: String,
    /// Its relations against the truth's (interval policy).
    pub comparison: Comparison,
    /// τ-b under the interval policy, with its round-resampling interval.
    pub tau_policy: TauEstimate,
    /// τ-b on plain medians.
    pub tau_plain: TauEstimate,
    /// The regret of its pick on the real job.
    pub regret: Regret,
    /// What it cost to reach the truth's decisions.
    pub decision_cost: TruthDecisionCost,
}

/// The truth section of the report.
#[derive(Serialize, Deserialize, schemars::JsonSchema, Clone, Debug, PartialEq)]
pub struct TruthReport {
    /// The metric in words.
    pub metric: String,
    /// Its unit.
    pub unit: String,
    /// `lower` or `higher` is better.
    pub better: String,
    /// Rounds.
    pub rounds: usize,
    /// The truth's ranking.
    pub rows: Vec<TruthRow>,
    /// Every pair's interval of the per-round log-ratio of costs, simultaneous at the report's coverage.
    pub pairs: Vec<PairRow>,
    /// Level of each pair interval.
    pub pair_coverage: f64,
    /// The rank model behind P(best).
    pub rank_model: RankModel,
    /// The best set: labels no other configuration is decided faster than.
    pub best_set: Vec<String>,
    /// Each proxy against the truth.
    pub proxies: Vec<ProxyJudged>,
    /// The truth's own decision: leading rounds and seconds to decide what it decides.
    pub truth_rounds_to_decide: Option<usize>,
    /// Truth seconds over those rounds, every configuration.
    pub truth_decide_s: Option<f64>,
    /// Truth seconds over all its rounds, every configuration.
    pub truth_total_s: f64,
    /// Controls judged on the truth (A/A and known-bad).
    pub controls: Vec<ControlResult>,
    /// What the truth could not tell (no decided pair, few rounds).
    pub notes: Vec<String>,
}
