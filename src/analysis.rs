//! Campaign analysis: from per-job samples to the report (SPEC §7, §8), free of I/O.
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
//!   paired-by-round bootstrap and from the hierarchical one
//!   ([`crate::bootstrap`]);
//! - every pair's paired-bootstrap interval of the relative difference and
//!   its relation under the declared tie policy, on two metrics: the median
//!   and the p99 (each from per-job values paired by round) (strict, IQR, or bootstrap
//!   interval against the minimum effect, [`crate::ranking`]);
//! - each proxy phase against `blocking` (agreement, Kendall tau-b);
//! - the canary verdict with its claim, and the controls, each with what was
//!   predicted, what was observed and whether it behaved;
//! - a multiple-comparison warning when many intervals are reported.
//!
//! Refuses: a phase whose configurations ran in different rounds (pairing
//! is impossible), fewer than two jobs per configuration, a canary or
//! control naming an unknown configuration.
use crate::bootstrap::{self, CanaryAsk, CanaryResult, Verdict};
use crate::campaign::spec::{AnalysisPolicy, TiePolicy};
use crate::ranking::{self, ConfigSummary, Relation, TieRule};
use crate::stats;
use crate::workload::Phase;
use anyhow::{bail, Context, Result};
use serde::{Deserialize, Serialize};

/// Report format version.
pub const REPORT_FORMAT_VERSION: u32 = 1;

/// Interval coverage of every reported interval.
pub const COVERAGE: f64 = 0.95;

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

/// The controls a campaign declares (by label).
#[derive(Clone, Debug, Default)]
pub struct ControlsInput {
    /// Pairs of one configuration under two labels: predicted tied.
    pub aa_pairs: Vec<(String, String)>,
    /// Configurations predicted slower than every other one.
    pub known_bad: Vec<String>,
    /// Injected arrival delays seen by `join` per label: (delayed, detected, undelayed, false alarms).
    pub injected_skew: Vec<(String, DelayCounts)>,
}

/// Counts of the arrival-delay control summed over a configuration's jobs.
#[derive(Serialize, Deserialize, schemars::JsonSchema, Clone, Copy, Debug, Default, PartialEq)]
pub struct DelayCounts {
    /// Nominal delay, µs.
    pub delay_us: f64,
    /// Delayed timed collectives.
    pub delayed: u64,
    /// Of those, with skew >= delay − bound.
    pub detected: u64,
    /// Undelayed timed collectives.
    pub undelayed: u64,
    /// Of those, above the line (false alarms).
    pub false_alarms: u64,
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
    /// Controls.
    pub controls: ControlsInput,
    /// Claim context.
    pub context: ClaimContext,
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
    /// IQR of the job p99s (nearest-rank quartiles), µs (absent in reports written before it existed).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub p99_iqr_us: Option<f64>,
    /// Rank by median (1 = fastest; see `pairs` for what the tie policy distinguishes).
    pub rank: usize,
    /// P(best), paired-by-round bootstrap.
    pub p_best: f64,
    /// P(worst), paired-by-round bootstrap.
    pub p_worst: f64,
    /// P(best), hierarchical bootstrap (jobs, then events).
    pub p_best_hierarchical: f64,
    /// P(worst), hierarchical bootstrap.
    pub p_worst_hierarchical: f64,
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
    /// (median_a − median_b) / median_b, percent (medians over rounds).
    pub diff_pct: f64,
    /// Paired-bootstrap interval, low end, percent.
    pub ci_low_pct: f64,
    /// High end, percent.
    pub ci_high_pct: f64,
    /// Relation under the declared tie policy.
    pub relation: Relation,
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
    /// Rows by rank.
    pub rows: Vec<ConfigRow>,
    /// Every pair (n(n−1)/2), on the median.
    pub pairs: Vec<PairRow>,
    /// Every pair on the p99 (job p99s paired by round; the tie rule's IQR is that of the job p99s).
    #[serde(default)]
    pub pairs_p99: Vec<PairRow>,
}

/// A control's outcome.
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
    /// Whether the observation matches the prediction.
    pub behaved: bool,
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
    /// Paired by round (the verdict's basis).
    pub paired: CanaryResult,
    /// Hierarchical (jobs, then events), for comparison.
    pub hierarchical: CanaryResult,
    /// The controls the claim relies on (all of them; empty when none ran).
    pub controls_behaved: Option<bool>,
    /// The claim in words.
    pub statement: String,
}

/// `report.json`.
#[derive(Serialize, Deserialize, schemars::JsonSchema, Clone, Debug, PartialEq)]
pub struct Report {
    /// Format version.
    pub format_version: u32,
    /// What the numbers are and where they come from.
    pub evidence: String,
    /// Completeness verdict the report stands on.
    pub completeness: crate::campaign::chain::Verdict,
    /// Claim context.
    pub context: ClaimContext,
    /// The frozen policy applied.
    pub policy: AnalysisPolicy,
    /// Coverage of every interval.
    pub coverage: f64,
    /// Per phase.
    pub phases: Vec<PhaseReport>,
    /// Each proxy phase against `blocking`, under the declared policy.
    pub proxy_vs_blocking: Vec<ProxyAgreement>,
    /// Canary.
    pub canary: Option<CanaryClaim>,
    /// Controls.
    pub controls: Vec<ControlResult>,
    /// Warnings (multiple comparisons, missing pieces).
    pub warnings: Vec<String>,
    /// An excerpt of one job's overlap timeline (GPU runs with device intervals).
    pub overlap_excerpt: Option<TimelineExcerpt>,
    /// Plot files written beside the report.
    pub plots: Vec<String>,
}

/// One proxy phase against the truth.
#[derive(Serialize, Deserialize, schemars::JsonSchema, Clone, Debug, PartialEq)]
pub struct ProxyAgreement {
    /// Proxy phase.
    pub proxy: Phase,
    /// Truth phase.
    pub truth: Phase,
    /// The comparison.
    pub comparison: ranking::Comparison,
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
    pub source: crate::overlap::IntervalSource,
    /// Compute intervals, µs from the window start.
    pub compute_us: Vec<(f64, f64)>,
    /// Communication intervals, µs from the window start.
    pub comm_us: Vec<(f64, f64)>,
}

/// The ranking rule of a manifest's tie policy.
pub fn rule_of(p: TiePolicy) -> TieRule {
    match p {
        TiePolicy::Strict => TieRule::Strict,
        TiePolicy::Iqr => TieRule::Iqr,
        TiePolicy::Bootstrap => TieRule::Bootstrap,
    }
}

fn quantiles(all: &mut [f64]) -> Quantiles {
    let mut q = |p| stats::percentile_nearest_rank(all, p).unwrap_or(f64::NAN);
    let (p5, p25, p50, p75, p95, p99, max) = (q(5.0), q(25.0), q(50.0), q(75.0), q(95.0), q(99.0), q(100.0));
    Quantiles { events: all.len(), min: all.first().copied().unwrap_or(f64::NAN), p5, p25, p50, p75, p95, p99, max }
}

/// A phase's derived tables: job medians by round, per-job events.
struct PhaseTables {
    rounds: Vec<u32>,
    /// `table[round][config]` of job medians.
    table: Vec<Vec<f64>>,
    /// `table_p99[round][config]` of job nearest-rank p99s.
    table_p99: Vec<Vec<f64>>,
    /// `events[config][job]`.
    events: Vec<Vec<Vec<f64>>>,
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
    let events = p.jobs.iter().map(|js| js.iter().map(|j| j.samples_us.clone()).collect()).collect();
    Ok(PhaseTables { rounds, table, table_p99, events })
}

/// A phase's report and tables, and when `ask` is given the canary's paired
/// and hierarchical results (the same resamples that give P(best)).
fn analyze_phase(p: &PhaseInput, policy: &AnalysisPolicy, ask: Option<CanaryAsk>) -> Result<(PhaseReport, PhaseTables, Option<(CanaryResult, CanaryResult)>)> {
    let t = tables(p)?;
    let k = p.labels.len();
    let paired = bootstrap::paired_by_round(&t.table, policy.bootstrap_resamples, policy.bootstrap_seed, ask)?;
    let hier = bootstrap::hierarchical(&t.events, policy.bootstrap_resamples, policy.bootstrap_seed, ask)?;
    let canary = paired.canary.clone().zip(hier.canary.clone());
    let mut rows: Vec<ConfigRow> = (0..k)
        .map(|c| {
            let mut meds: Vec<f64> = t.table.iter().map(|r| r[c]).collect();
            let mut p99s: Vec<f64> = t.table_p99.iter().map(|r| r[c]).collect();
            let p99_iqr_us = stats::percentile_nearest_rank(&mut p99s, 75.0).zip(stats::percentile_nearest_rank(&mut p99s, 25.0)).map(|(a, b)| a - b);
            let mut pooled: Vec<f64> = p.jobs[c].iter().flat_map(|j| j.samples_us.iter().copied()).collect();
            let q1 = stats::percentile_nearest_rank(&mut meds, 25.0).unwrap_or(f64::NAN);
            let q3 = stats::percentile_nearest_rank(&mut meds, 75.0).unwrap_or(f64::NAN);
            ConfigRow {
                label: p.labels[c].clone(),
                jobs: p.jobs[c].len(),
                median_us: stats::median(&mut meds).unwrap_or(f64::NAN),
                iqr_us: q3 - q1,
                p99_us: stats::median(&mut p99s).unwrap_or(f64::NAN),
                p99_iqr_us,
                rank: 0,
                p_best: paired.p_best[c],
                p_worst: paired.p_worst[c],
                p_best_hierarchical: hier.p_best[c],
                p_worst_hierarchical: hier.p_worst[c],
                distribution: quantiles(&mut pooled),
            }
        })
        .collect();
    let medians: Vec<(f64, f64)> = rows.iter().map(|r| (r.median_us, r.iqr_us)).collect();
    let p99s: Vec<(f64, f64)> = rows.iter().map(|r| (r.p99_us, r.p99_iqr_us.unwrap_or(0.0))).collect();
    let pairs = pair_rows(&p.labels, &t.table, &medians, policy)?;
    let pairs_p99 = pair_rows(&p.labels, &t.table_p99, &p99s, policy)?;
    let mut order: Vec<usize> = (0..k).collect();
    order.sort_by(|&a, &b| rows[a].median_us.total_cmp(&rows[b].median_us));
    for (r, &c) in order.iter().enumerate() {
        rows[c].rank = r + 1;
    }
    rows.sort_by_key(|r| r.rank);
    let metric = if p.phase.has_tokens() { "token_latency_us" } else { "completion_us" };
    Ok((PhaseReport { phase: p.phase, metric: metric.into(), rounds: t.rounds.len(), rows, pairs, pairs_p99 }, t, canary))
}

/// Every pair's paired-bootstrap interval over `table[round][config]` and its
/// relation under the policy; `summary[config]` = (value over rounds, IQR).
fn pair_rows(labels: &[String], table: &[Vec<f64>], summary: &[(f64, f64)], policy: &AnalysisPolicy) -> Result<Vec<PairRow>> {
    let rule = rule_of(policy.tie_policy);
    let mut pairs = Vec::new();
    for i in 0..labels.len() {
        for j in i + 1..labels.len() {
            let sub: Vec<Vec<f64>> = table.iter().map(|r| vec![r[i], r[j]]).collect();
            let ask = CanaryAsk { candidate: 0, baseline: 1, min_effect_pct: policy.min_effect_pct, delta_pct: policy.delta_pct, coverage: COVERAGE };
            let c = bootstrap::paired_by_round(&sub, policy.bootstrap_resamples, policy.bootstrap_seed, Some(ask))?.canary.expect("asked");
            let relation = match rule {
                TieRule::Bootstrap => ranking::relation_from_interval(c.ci_low_pct, c.ci_high_pct, policy.min_effect_pct),
                r => {
                    let s = |x: usize| ConfigSummary { config: labels[x].clone(), median_us: summary[x].0, iqr_us: Some(summary[x].1) };
                    ranking::relation(&s(i), &s(j), r)
                }
            };
            pairs.push(PairRow { a: labels[i].clone(), b: labels[j].clone(), diff_pct: c.diff_pct, ci_low_pct: c.ci_low_pct, ci_high_pct: c.ci_high_pct, relation });
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
}

fn pair_relation(pr: &PhaseReport, a: &str, b: &str) -> Option<Relation> {
    pr.pairs.iter().find_map(|p| {
        if p.a == a && p.b == b {
            Some(p.relation)
        } else if p.a == b && p.b == a {
            Some(match p.relation {
                Relation::AFaster => Relation::BFaster,
                Relation::BFaster => Relation::AFaster,
                Relation::Tied => Relation::Tied,
            })
        } else {
            None
        }
    })
}

fn verdict_word(v: Verdict) -> &'static str {
    match v {
        Verdict::Pass => "pass",
        Verdict::Fail => "fail",
        Verdict::Tied => "tied",
        Verdict::InsufficientEvidence => "insufficient-evidence",
    }
}

/// Analyze. `completeness` is the verify verdict the caller obtained (the
/// caller refuses to analyze an incomplete campaign).
pub fn analyze(input: &AnalysisInput, completeness: crate::campaign::chain::Verdict, evidence: &str) -> Result<Report> {
    let policy = &input.policy;
    let mut phases = Vec::new();
    let mut tabs = Vec::new();
    let mut canary_results = None;
    for p in &input.phases {
        // the canary's phase answers the canary from its own resamples
        let ask = input.canary.as_ref().filter(|c| c.2 == p.phase).and_then(|(c, b, _)| {
            let col = |l: &String| p.labels.iter().position(|x| x == l);
            Some(CanaryAsk { candidate: col(c)?, baseline: col(b)?, min_effect_pct: policy.min_effect_pct, delta_pct: policy.delta_pct, coverage: COVERAGE })
        });
        let (r, t, c) = analyze_phase(p, policy, ask)?;
        canary_results = canary_results.or(c);
        phases.push(r);
        tabs.push((p, t));
    }
    // proxies against blocking
    let rule = rule_of(policy.tie_policy);
    let mut proxy_vs_blocking = Vec::new();
    if let Some(truth) = phases.iter().find(|p| p.phase == Phase::Blocking) {
        let labels: Vec<String> = input.phases.iter().find(|p| p.phase == Phase::Blocking).map(|p| p.labels.clone()).unwrap_or_default();
        let summaries = truth.summaries(&labels);
        let rels = |pr: &PhaseReport| -> Option<Vec<Relation>> {
            let mut v = Vec::new();
            for i in 0..labels.len() {
                for j in i + 1..labels.len() {
                    v.push(pair_relation(pr, &labels[i], &labels[j])?);
                }
            }
            Some(v)
        };
        let tr = rels(truth).context("blocking lacks a pair")?;
        for p in phases.iter().filter(|p| p.phase != Phase::Blocking) {
            let Some(pr) = rels(p) else { continue };
            let ev = format!("{evidence}; proxy phase {}, truth phase blocking", p.phase);
            proxy_vs_blocking.push(ProxyAgreement { proxy: p.phase, truth: Phase::Blocking, comparison: ranking::compare_relations(&summaries, &pr, &tr, rule, &ev)? });
        }
    }
    // controls
    let mut controls = Vec::new();
    let judge_phase = input.canary.as_ref().map(|c| c.2).or_else(|| phases.iter().any(|p| p.phase == Phase::Blocking).then_some(Phase::Blocking)).or_else(|| phases.first().map(|p| p.phase));
    let known = |l: &str| -> Result<()> {
        if input.phases.first().is_some_and(|p| !p.labels.iter().any(|x| x == l)) {
            bail!("a control names {l:?}, which is not a configuration of the campaign");
        }
        Ok(())
    };
    if let Some(jp) = judge_phase {
        let (pin, t) = tabs.iter().find(|(p, _)| p.phase == jp).with_context(|| format!("the judged phase {jp} was not run"))?;
        let col = |l: &str| pin.labels.iter().position(|x| x == l);
        let pr = phases.iter().find(|p| p.phase == jp).expect("analyzed");
        for (a, b) in &input.controls.aa_pairs {
            known(a)?;
            known(b)?;
            let (ca, cb) = (col(a).expect("known"), col(b).expect("known"));
            let ask = CanaryAsk { candidate: cb, baseline: ca, min_effect_pct: policy.min_effect_pct, delta_pct: policy.delta_pct, coverage: COVERAGE };
            let c = bootstrap::paired_by_round(&t.table, policy.bootstrap_resamples, policy.bootstrap_seed, Some(ask))?.canary.expect("asked");
            let rel = pair_relation(pr, a, b).expect("pair");
            controls.push(ControlResult {
                kind: "a-a".into(),
                subject: format!("{b} vs {a} (one configuration, two labels)"),
                phase: Some(jp),
                predicted: "verdict tied or insufficient-evidence, never pass or fail".into(),
                observed: format!(
                    "{:+.2}% [{:+.2}, {:+.2}]% → {}; relation under the {:?} policy: {:?}",
                    c.diff_pct,
                    c.ci_low_pct,
                    c.ci_high_pct,
                    verdict_word(c.verdict),
                    policy.tie_policy,
                    rel
                ),
                behaved: matches!(c.verdict, Verdict::Tied | Verdict::InsufficientEvidence),
            });
        }
        for bad in &input.controls.known_bad {
            known(bad)?;
            let others: Vec<&String> = pin.labels.iter().filter(|l| *l != bad && !input.controls.known_bad.contains(l)).collect();
            let slower_than_all = others.iter().filter(|o| pair_relation(pr, bad, o) == Some(Relation::BFaster)).count();
            let row = pr.rows.iter().find(|r| &r.label == bad).expect("row");
            controls.push(ControlResult {
                kind: "known-bad".into(),
                subject: bad.clone(),
                phase: Some(jp),
                predicted: format!("slower than each of the {} other configurations under the declared policy", others.len()),
                observed: format!("slower than {slower_than_all} of {}; rank {} of {}; P(worst) {:.3}", others.len(), row.rank, pr.rows.len(), row.p_worst),
                behaved: slower_than_all == others.len(),
            });
        }
    }
    for (label, d) in &input.controls.injected_skew {
        known(label)?;
        let rate = if d.delayed > 0 { d.detected as f64 / d.delayed as f64 } else { f64::NAN };
        let fa = if d.undelayed > 0 { d.false_alarms as f64 / d.undelayed as f64 } else { f64::NAN };
        controls.push(ControlResult {
            kind: "injected-skew".into(),
            subject: format!("{label}: {} µs arrival delay on one rank", d.delay_us),
            phase: None,
            predicted: "arrival skew >= delay − bound on at least 90% of delayed collectives, on at most 1% of the others".into(),
            observed: format!("{} of {} delayed detected ({:.1}%); {} of {} undelayed above the line ({:.2}%)", d.detected, d.delayed, rate * 100.0, d.false_alarms, d.undelayed, fa * 100.0),
            behaved: d.delayed > 0 && rate >= 0.9 && !(fa > 0.01),
        });
    }
    let controls_behaved = (!controls.is_empty()).then(|| controls.iter().all(|c| c.behaved));
    // canary
    let mut canary = None;
    if let Some((cand, base, phase)) = &input.canary {
        known(cand)?;
        known(base)?;
        let (_, t) = tabs.iter().find(|(p, _)| p.phase == *phase).with_context(|| format!("the canary phase {phase} was not run"))?;
        let (p, h) = canary_results.clone().expect("the canary phase was asked");
        let ctx = &input.context;
        let controls_text = match controls_behaved {
            None => "no controls ran in this campaign, so nothing checks that the instrument can tell A from A or see a known fault".to_string(),
            Some(true) => format!("the {} declared controls behaved as predicted ({})", controls.len(), controls.iter().map(|c| c.kind.as_str()).collect::<Vec<_>>().join(", ")),
            Some(false) => format!(
                "controls did NOT all behave as predicted ({} failed: {}); treat the verdict as unsupported",
                controls.iter().filter(|c| !c.behaved).count(),
                controls.iter().filter(|c| !c.behaved).map(|c| format!("{} {}", c.kind, c.subject)).collect::<Vec<_>>().join("; ")
            ),
        };
        let statement = format!(
            "Under manifest {} (campaign {}), on {}, with workload {} and replay semantics \"{}\", candidate {cand} vs baseline {base} in phase {phase} differs by {:+.2}% \
             (median over {} rounds of per-job median {}) with {:.0}% paired-bootstrap interval [{:+.2}, {:+.2}]% ({} resamples, seed {}; hierarchical interval [{:+.2}, {:+.2}]%); \
             verdict {} under the frozen thresholds (minimum effect {}%, slowdown delta {}%). Controls: {}. Dimensions not represented: {}.",
            &ctx.manifest_sha256[..12.min(ctx.manifest_sha256.len())],
            ctx.campaign_id,
            ctx.hardware,
            ctx.workload,
            ctx.replay_semantics,
            p.diff_pct,
            t.rounds.len(),
            if phase.has_tokens() { "token latency" } else { "completion time" },
            COVERAGE * 100.0,
            p.ci_low_pct,
            p.ci_high_pct,
            policy.bootstrap_resamples,
            policy.bootstrap_seed,
            h.ci_low_pct,
            h.ci_high_pct,
            verdict_word(p.verdict),
            policy.min_effect_pct,
            policy.delta_pct,
            controls_text,
            ctx.not_represented.join("; ")
        );
        canary = Some(CanaryClaim { candidate: cand.clone(), baseline: base.clone(), phase: *phase, paired: p, hierarchical: h, controls_behaved, statement });
    }
    let mut warnings = Vec::new();
    let per_phase = phases.first().map(|p| p.pairs.len() + p.pairs_p99.len()).unwrap_or(0);
    let total: usize = phases.iter().map(|p| p.pairs.len() + p.pairs_p99.len()).sum();
    if per_phase >= 10 || total >= 20 {
        warnings.push(format!(
            "multiple comparisons: {total} pairwise {:.0}% intervals are reported ({per_phase} per phase); about {:.0} would exclude the true difference by chance alone. \
             No family-wise correction is applied; for a family-wise {:.0}% statement read each interval at Bonferroni level 1 − {:.2}/{per_phase} per phase, and trust patterns over single pairs.",
            COVERAGE * 100.0,
            total as f64 * (1.0 - COVERAGE),
            COVERAGE * 100.0,
            1.0 - COVERAGE
        ));
    }
    if phases.iter().any(|p| p.rounds < 5) {
        warnings.push("fewer than 5 rounds: a paired bootstrap over so few rounds has a coarse resampling distribution (3 rounds give at most 10 distinct medians); intervals are indicative".into());
    }
    Ok(Report {
        format_version: REPORT_FORMAT_VERSION,
        evidence: evidence.to_string(),
        completeness,
        context: input.context.clone(),
        policy: policy.clone(),
        coverage: COVERAGE,
        phases,
        proxy_vs_blocking,
        canary,
        controls,
        warnings,
        overlap_excerpt: None,
        plots: Vec::new(),
    })
}

/// Terminal table: configs × phases with medians, IQR, p99, ranks, P(best).
pub fn render(r: &Report) -> String {
    use std::fmt::Write;
    let mut o = String::new();
    let _ = writeln!(
        o,
        "campaign {} (manifest {}), complete: {} cells; tie policy {:?}, min effect {}%, {} resamples, seed {}",
        r.context.campaign_id,
        &r.context.manifest_sha256[..12.min(r.context.manifest_sha256.len())],
        r.completeness.cells_ok,
        r.policy.tie_policy,
        r.policy.min_effect_pct,
        r.policy.bootstrap_resamples,
        r.policy.bootstrap_seed
    );
    let _ = writeln!(o, "{:<10} {:>4}  {:<24} {:>4} {:>11} {:>9} {:>11} {:>7} {:>7}  {}", "phase", "rank", "config", "jobs", "median us", "IQR us", "p99 us", "P(best)", "P(wrst)", "tied on the median (declared policy)");
    for p in &r.phases {
        for row in &p.rows {
            let tied: Vec<&str> = p
                .pairs
                .iter()
                .filter(|x| x.relation == Relation::Tied && (x.a == row.label || x.b == row.label))
                .map(|x| if x.a == row.label { x.b.as_str() } else { x.a.as_str() })
                .collect();
            let _ = writeln!(
                o,
                "{:<10} {:>4}  {:<24} {:>4} {:>11.1} {:>9.1} {:>11.1} {:>7.3} {:>7.3}  {}",
                p.phase.name(),
                row.rank,
                row.label,
                row.jobs,
                row.median_us,
                row.iqr_us,
                row.p99_us,
                row.p_best,
                row.p_worst,
                if tied.is_empty() { "-".to_string() } else { tied.join(",") }
            );
        }
        let _ = writeln!(o);
    }
    for a in &r.proxy_vs_blocking {
        let c = &a.comparison;
        let _ = writeln!(
            o,
            "proxy {:<9} vs blocking: agree on {}/{} pairs ({:.1}%), Kendall tau-b {}",
            a.proxy.name(),
            c.pairs_agree,
            c.pairs_total,
            c.agreement_pct,
            c.kendall_tau_b.map(|t| format!("{t:.3}")).unwrap_or_else(|| "undefined".into())
        );
    }
    for c in &r.controls {
        let _ = writeln!(o, "control {} {}: {} (predicted: {})", c.kind, if c.behaved { "behaved" } else { "DID NOT BEHAVE" }, c.observed, c.predicted);
    }
    if let Some(c) = &r.canary {
        let _ = writeln!(o, "canary {}: {}", verdict_word(c.paired.verdict), c.statement);
    }
    for w in &r.warnings {
        let _ = writeln!(o, "warning: {w}");
    }
    let _ = writeln!(o, "evidence: {}", r.evidence);
    o
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::{Rng, SeedableRng};

    fn policy(tie: TiePolicy) -> AnalysisPolicy {
        AnalysisPolicy { tie_policy: tie, min_effect_pct: 2.0, delta_pct: 5.0, bootstrap_resamples: 2000, bootstrap_seed: 1 }
    }

    fn input(means: &[f64], rounds: u32, tie: TiePolicy) -> AnalysisInput {
        let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(5);
        let labels: Vec<String> = (0..means.len()).map(|i| format!("c{i}")).collect();
        let mk = |phase, scale: f64, rng: &mut rand_chacha::ChaCha8Rng| PhaseInput {
            phase,
            labels: labels.clone(),
            jobs: means.iter().map(|m| (1..=rounds).map(|r| JobData { round: r, samples_us: (0..50).map(|_| m * scale * (1.0 + rng.gen_range(-0.01..0.01))).collect() }).collect()).collect(),
        };
        AnalysisInput {
            phases: vec![mk(Phase::Isolated, 0.01, &mut rng), mk(Phase::Blocking, 1.0, &mut rng)],
            policy: policy(tie),
            canary: Some(("c1".into(), "c0".into(), Phase::Blocking)),
            controls: ControlsInput { aa_pairs: vec![("c0".into(), "c2".into())], known_bad: vec!["c3".into()], injected_skew: vec![] },
            context: ClaimContext { campaign_id: "t".into(), manifest_sha256: "0123456789abcdef".into(), hardware: "h".into(), workload: "w".into(), replay_semantics: "r".into(), not_represented: vec!["x".into()] },
        }
    }

    fn verdict() -> crate::campaign::chain::Verdict {
        crate::campaign::chain::Verdict { complete: true, manifest_sha256: String::new(), cells_expected: 0, cells_ok: 0, refusals: vec![] }
    }

    #[test]
    fn controls_and_canary_behave_on_synthetic_data() {
        for tie in [TiePolicy::Strict, TiePolicy::Iqr, TiePolicy::Bootstrap] {
            let r = analyze(&input(&[100.0, 150.0, 100.0, 300.0], 5, tie), verdict(), "synthetic").unwrap();
            let b = r.phases.iter().find(|p| p.phase == Phase::Blocking).unwrap();
            assert_eq!(b.pairs.len(), 6);
            assert_eq!(b.pairs_p99.len(), 6);
            assert!(b.pairs_p99.iter().filter(|x| x.a == "c3" || x.b == "c3").all(|x| x.relation != Relation::Tied), "{tie:?}: the slow one differs on p99 too");
            assert_eq!(b.rows.last().unwrap().label, "c3");
            assert!(b.rows.iter().find(|x| x.label == "c3").unwrap().p_worst > 0.99);
            let aa = r.controls.iter().find(|c| c.kind == "a-a").unwrap();
            assert!(aa.behaved, "{tie:?}: {aa:?}");
            let kb = r.controls.iter().find(|c| c.kind == "known-bad").unwrap();
            assert!(kb.behaved, "{tie:?}: {kb:?}");
            let c = r.canary.as_ref().unwrap();
            assert_eq!(c.paired.verdict, Verdict::Fail, "c1 is 50% slower than c0");
            assert_eq!(c.controls_behaved, Some(true));
            assert!(c.statement.contains("Dimensions not represented: x"));
            assert_eq!(r.proxy_vs_blocking.len(), 1);
            if tie != TiePolicy::Strict {
                assert_eq!(pair_relation(b, "c0", "c2"), Some(Relation::Tied), "{tie:?}: A/A is tied");
            }
        }
    }

    #[test]
    fn a_known_bad_that_is_not_bad_is_reported_as_misbehaving() {
        let mut i = input(&[100.0, 150.0, 100.0, 300.0], 5, TiePolicy::Iqr);
        i.controls.known_bad = vec!["c0".into()];
        let r = analyze(&i, verdict(), "synthetic").unwrap();
        assert!(!r.controls.iter().find(|c| c.kind == "known-bad").unwrap().behaved);
        assert_eq!(r.canary.unwrap().controls_behaved, Some(false));
    }

    #[test]
    fn refuses_unpaired_rounds_and_unknown_labels() {
        let mut i = input(&[100.0, 110.0], 3, TiePolicy::Iqr);
        i.controls = ControlsInput::default();
        i.canary = None;
        i.phases[1].jobs[1][0].round = 9;
        assert!(analyze(&i, verdict(), "s").unwrap_err().to_string().contains("cannot be paired"));
        let mut i = input(&[100.0, 110.0, 120.0, 130.0], 3, TiePolicy::Iqr);
        i.controls.known_bad = vec!["nope".into()];
        assert!(analyze(&i, verdict(), "s").unwrap_err().to_string().contains("\"nope\""));
    }
}
