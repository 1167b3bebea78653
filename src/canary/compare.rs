//! One candidate (a canary, a baseline, a reduced trace) against its source:
//! the checks, the assurance state, the decision cost (no I/O).
//!
//! Consumes the static facts of both traces ([`TraceFacts`]) and, per
//! variant, configuration and round, the measures of one replay job
//! ([`JobMeasure`]). Produces a [`CandidateVerdict`]: every check with its
//! measured value, its tolerance and whether it held, the highest state
//! whose checks all held, and the replay seconds each side needed to reach
//! the decided relations.
//!
//! Tail recall is about the workload's tail, not the machine's: a position of
//! the pass is slow when its median over the job's passes is (one-off stalls
//! of a loaded machine drop out), and the tail is what lies beyond Tukey's far
//! fence of the source's positions ([`tail_recall_check`]). It is judged
//! only where the source's tail recurs (at least one position per source job
//! on average); below that it is left out, not passed or failed on noise.
//! A maximum is compared at the candidate's own count of collectives (the
//! source's block maxima, [`max_check`]), since the largest of n draws grows
//! with n. Tolerances are never tighter than the source's own job-to-job spread:
//! for a statistic, the largest range of its log across the rounds of one
//! configuration of the source (two jobs of one configuration differed by
//! that much with nothing changed), or the declared floor, whichever is larger.
//! Ranking: the pair intervals and relations of the campaign report
//! ([`crate::analysis::agreement`]), Kendall τ-b with its interval from
//! resampling rounds.
use crate::analysis::agreement;
use crate::analysis::policy::AnalysisPolicy;
use crate::analysis::ranking::Relation;
use crate::analysis::{JobData, PhaseInput, ProxyAgreement};
use crate::canary::Assurance;
use crate::core::stats::percentile_nearest_rank as pct;
use crate::core::workload::Phase;
use anyhow::Result;
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, BTreeSet};

/// Static facts of a trace (the source, or a candidate's expansion).
#[derive(Clone, Debug, Default)]
pub struct TraceFacts {
    /// Collectives per identity key (`kind dtype bytes group`), all ranks.
    pub identities: BTreeMap<String, u64>,
    /// Collectives per kind, all ranks.
    pub kinds: BTreeMap<String, u64>,
    /// Every gap, all ranks, ns.
    pub gaps_ns: Vec<u64>,
}

/// What one replay job measured.
#[derive(Clone, Debug, Default)]
pub struct JobMeasure {
    /// Round.
    pub round: u32,
    /// Per-pass latency of the replay phase (warm-ups excluded), µs.
    pub pass_us: Vec<f64>,
    /// Per kind: each timed collective's latency (the slowest rank's issue to wait return), µs.
    pub per_kind_us: BTreeMap<String, Vec<f64>>,
    /// Per kind: each position of a pass, the median of its latency over the
    /// job's timed passes, µs ([`recurring_by_position`]).
    pub per_kind_recurring_us: BTreeMap<String, Vec<f64>>,
    /// Wall time of the replay phase on rank 0, warm-ups included, s.
    pub replay_s: f64,
    /// Share of communication hidden under compute in the overlap phase (mean over ranks), where it ran.
    pub hidden_share: Option<f64>,
}

/// One check.
#[derive(schemars::JsonSchema, Serialize, Deserialize, Clone, Debug, PartialEq)]
pub struct Check {
    /// Name (`coverage.identities`, `latency.all_reduce.p99`, `ranking`, ...).
    pub name: String,
    /// The state this check guards.
    pub guards: Assurance,
    /// Whether it held.
    pub passed: bool,
    /// What was measured, in words, with numbers.
    pub measured: String,
    /// The tolerance, in words.
    pub tolerance: String,
}

/// A check left out, and why: what the data could not support (never
/// counted as held or failed; printed beside the checks).
#[derive(schemars::JsonSchema, Serialize, Deserialize, Clone, Debug, PartialEq)]
pub struct Unjudged {
    /// Name of the check left out.
    pub name: String,
    /// Why, with numbers.
    pub reason: String,
}

/// The decision cost: replay seconds to reach the decided relations.
#[derive(schemars::JsonSchema, Serialize, Deserialize, Clone, Debug, PartialEq)]
pub struct DecisionCost {
    /// Rounds from which on the source decides every pair it decides with all its rounds.
    pub source_rounds: Option<usize>,
    /// Rounds from which on the candidate decides those pairs as the source does (absent when it never did); pairs the source leaves undecided do not count.
    pub candidate_rounds: Option<usize>,
    /// Replay seconds of the source over those rounds, all configurations.
    pub source_replay_s: Option<f64>,
    /// Replay seconds of the candidate over its rounds, all configurations.
    pub candidate_replay_s: Option<f64>,
    /// source_replay_s / candidate_replay_s (how many times cheaper the candidate decides).
    pub source_per_candidate: Option<f64>,
    /// Mean replay seconds of one source job and one candidate job.
    pub per_job_s: (f64, f64),
}

/// One candidate's verdict.
#[derive(schemars::JsonSchema, Serialize, Deserialize, Clone, Debug, PartialEq)]
pub struct CandidateVerdict {
    /// Variant name (`canary`, `random`, ...).
    pub variant: String,
    /// How it was made (`compiled`, `random`, `reduced`, ...).
    pub method: String,
    /// Its label (reduced: `decision-preserving, not source-verified`).
    pub label: String,
    /// The highest state whose checks all held.
    pub state: Assurance,
    /// Every check.
    pub checks: Vec<Check>,
    /// Checks left out, and why.
    #[serde(default)]
    pub unjudged: Vec<Unjudged>,
    /// The ranking of configurations against the source's.
    pub ranking: Option<ProxyAgreement>,
    /// The decision cost.
    pub cost: Option<DecisionCost>,
    /// Events stored in the artifact, and the ratio source/artifact.
    pub events: (u64, f64),
    /// Collectives one replay pass issues, and the ratio source/candidate.
    pub replayed: (u64, f64),
    /// Artifact bytes, and the ratio source/artifact (below 1: the artifact is larger than its source).
    pub bytes: (u64, f64),
}

/// A statistic of a sample.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Stat {
    /// Median.
    P50,
    /// 95th percentile.
    P95,
    /// 99th percentile.
    P99,
    /// Maximum.
    Max,
    /// Mean.
    Mean,
}

impl Stat {
    fn name(self) -> &'static str {
        match self {
            Stat::P50 => "median",
            Stat::P95 => "p95",
            Stat::P99 => "p99",
            Stat::Max => "max",
            Stat::Mean => "mean",
        }
    }
    fn of(self, v: &[f64]) -> Option<f64> {
        let mut v = v.to_vec();
        match self {
            Stat::P50 => pct(&mut v, 50.0),
            Stat::P95 => pct(&mut v, 95.0),
            Stat::P99 => pct(&mut v, 99.0),
            Stat::Max => v.iter().copied().reduce(f64::max),
            Stat::Mean => (!v.is_empty()).then(|| v.iter().sum::<f64>() / v.len() as f64),
        }
    }
    /// The declared floor of its tolerance (relative).
    fn floor(self) -> f64 {
        match self {
            Stat::P50 | Stat::Mean => 0.10,
            Stat::P95 => 0.15,
            Stat::P99 => 0.25,
            Stat::Max => 0.50,
        }
    }
}

/// Declared tolerances.
pub const HIDDEN_SHARE_FLOOR: f64 = 0.05;
/// Smallest tail-event recall that passes.
pub const TAIL_RECALL_MIN: f64 = 0.5;
/// Tukey's far-out fence: beyond the third quartile by this many
/// interquartile ranges (Tukey, *Exploratory Data Analysis*, 1977, ch. 2).
pub const TAIL_FENCE_IQR: f64 = 3.0;
/// Smallest share of source collectives whose identity the candidate has.
pub const IDENTITY_COVERAGE_MIN: f64 = 0.99;
/// Largest difference of one identity's share of collectives.
pub const IDENTITY_SHARE_MAX: f64 = crate::canary::compile::MIX_SHARE_MAX;

/// Measures of the source and of one candidate, by configuration (same labels, same rounds).
pub struct Paired<'a> {
    /// Configuration labels.
    pub configs: &'a [String],
    /// `source[config]` jobs.
    pub source: &'a [Vec<JobMeasure>],
    /// `candidate[config]` jobs.
    pub candidate: &'a [Vec<JobMeasure>],
    /// `controls[config]`: a control that adds latency of its own (a
    /// known-bad, an injected delay or clock offset), left out of the tail
    /// recall, which is about the workload's tail. Empty: none.
    pub controls: &'a [bool],
}

fn log_range_noise(jobs: &[Vec<JobMeasure>], f: &dyn Fn(&JobMeasure) -> Option<f64>) -> f64 {
    let ranges: Vec<f64> = jobs
        .iter()
        .filter_map(|js| {
            let v: Vec<f64> = js.iter().filter_map(f).filter(|x| *x > 0.0).map(f64::ln).collect();
            (v.len() >= 2).then(|| v.iter().copied().fold(f64::MIN, f64::max) - v.iter().copied().fold(f64::MAX, f64::min))
        })
        .collect();
    // the largest: a candidate is held to what the source itself varies by, no tighter
    ranges.into_iter().fold(0.0, f64::max)
}

/// Median over (configuration, round) of log(candidate / source) of a job
/// statistic (`fs` of the source's job, `fc` of the candidate's).
fn paired_log_ratio(p: &Paired, fs: &dyn Fn(&JobMeasure) -> Option<f64>, fc: &dyn Fn(&JobMeasure) -> Option<f64>) -> Option<f64> {
    let mut d = Vec::new();
    for (s, c) in p.source.iter().zip(p.candidate) {
        for js in s {
            if let Some(jc) = c.iter().find(|x| x.round == js.round) {
                if let (Some(a), Some(b)) = (fs(js), fc(jc)) {
                    if a > 0.0 && b > 0.0 {
                        d.push((b / a).ln());
                    }
                }
            }
        }
    }
    pct(&mut d, 50.0)
}

/// Median over (configuration, round) of candidate − source of a job
/// statistic on a linear scale (a share, where a ratio would blow up near 0).
fn paired_difference(p: &Paired, f: &dyn Fn(&JobMeasure) -> Option<f64>) -> Option<f64> {
    let mut d = Vec::new();
    for (s, c) in p.source.iter().zip(p.candidate) {
        for js in s {
            if let Some(jc) = c.iter().find(|x| x.round == js.round) {
                if let (Some(a), Some(b)) = (f(js), f(jc)) {
                    d.push(b - a);
                }
            }
        }
    }
    pct(&mut d, 50.0)
}

/// The maxima of consecutive blocks of `n` values (a shorter series: its own maximum).
fn block_maxima(v: &[f64], n: usize) -> Vec<f64> {
    if n == 0 || v.is_empty() {
        return Vec::new();
    }
    if v.len() <= n {
        return vec![v.iter().copied().fold(f64::MIN, f64::max)];
    }
    v.chunks_exact(n).map(|b| b.iter().copied().fold(f64::MIN, f64::max)).collect()
}

/// `latency.KIND.max`, like with like: the largest of n draws grows with n,
/// so a candidate replaying fewer collectives than its source is held to the
/// source's maximum over blocks of the candidate's own count (the block-maxima
/// approach of extreme-value statistics: Gumbel, *Statistics of Extremes*,
/// 1958; Coles, *An Introduction to Statistical Modeling of Extreme Values*,
/// 2001, ch. 3): the median block maximum of each source job, its tolerance
/// widened by the 10–90% spread of those block maxima (one draw of a block
/// maximum varies that much) as well as by the job-to-job range.
fn max_check(p: &Paired, k: &str, f: &dyn Fn(&JobMeasure) -> Option<f64>) -> Check {
    let mut counts: Vec<f64> = p.candidate.iter().flatten().filter_map(|j| j.per_kind_us.get(k)).map(|v| v.len() as f64).filter(|n| *n > 0.0).collect();
    let name = format!("latency.{k}.max");
    let Some(n) = pct(&mut counts, 50.0).map(|n| n.round().max(1.0) as usize) else {
        return Check {
            name,
            guards: Assurance::BehaviorallyVerified,
            passed: false,
            measured: "the candidate's replay has no such collectives".into(),
            tolerance: "a maximum to compare".into(),
        };
    };
    let fs = |j: &JobMeasure| -> Option<f64> { j.per_kind_us.get(k).and_then(|v| pct(&mut block_maxima(v, n), 50.0)) };
    let mut spread: f64 = 0.0;
    let mut largest_source = 0usize;
    for j in p.source.iter().flatten() {
        if let Some(v) = j.per_kind_us.get(k) {
            largest_source = largest_source.max(v.len());
            let mut b = block_maxima(v, n);
            if let (Some(lo), Some(mid), Some(hi)) = (pct(&mut b, 10.0), pct(&mut b, 50.0), pct(&mut b, 90.0)) {
                if lo > 0.0 && mid > 0.0 {
                    spread = spread.max((mid / lo).ln()).max((hi / mid).ln());
                }
            }
        }
    }
    let noise = log_range_noise(p.source, &fs);
    let tol = Stat::Max.floor().ln_1p().max(noise).max(spread);
    let blocks = n < largest_source;
    let (passed, measured) = match paired_log_ratio(p, &fs, f) {
        Some(d) => (
            d.abs() <= tol,
            if blocks {
                format!(
                    "candidate/source {:.3} (the source's median maximum over blocks of {n} collectives, the candidate's count per job; median over paired jobs)",
                    d.exp()
                )
            } else {
                format!("candidate/source {:.3} (median over paired jobs)", d.exp())
            },
        ),
        None => (false, "the candidate's replay has no such collectives".into()),
    };
    Check {
        name,
        guards: Assurance::BehaviorallyVerified,
        passed,
        measured,
        tolerance: format!(
            "within ×{:.3} either way (the largest of the declared {:.0}%, the source's job-to-job range and the 10–90% spread of its block maxima)",
            tol.exp(),
            Stat::Max.floor() * 100.0
        ),
    }
}

/// The static checks (state `source-verified`).
pub fn static_checks(source: &TraceFacts, cand: &TraceFacts) -> Vec<Check> {
    let mut out = Vec::new();
    let total: u64 = source.identities.values().sum();
    let covered: u64 = source.identities.iter().filter(|(k, _)| cand.identities.contains_key(*k)).map(|(_, n)| n).sum();
    let share = covered as f64 / total.max(1) as f64;
    let missing: Vec<&String> = source.identities.keys().filter(|k| !cand.identities.contains_key(*k)).take(5).collect();
    out.push(Check {
        name: "coverage.identities".into(),
        guards: Assurance::SourceVerified,
        passed: share >= IDENTITY_COVERAGE_MIN,
        measured: format!(
            "{:.2}% of the source's collectives have an identity the candidate replays ({} of {} identities){}",
            share * 100.0,
            source.identities.keys().filter(|k| cand.identities.contains_key(*k)).count(),
            source.identities.len(),
            if missing.is_empty() { String::new() } else { format!("; missing e.g. {}", missing.iter().map(|s| s.as_str()).collect::<Vec<_>>().join("; ")) }
        ),
        tolerance: format!("at least {:.0}%", IDENTITY_COVERAGE_MIN * 100.0),
    });
    let kinds_missing: Vec<&String> = source.kinds.keys().filter(|k| !cand.kinds.contains_key(*k)).collect();
    out.push(Check {
        name: "coverage.kinds".into(),
        guards: Assurance::SourceVerified,
        passed: kinds_missing.is_empty(),
        measured: if kinds_missing.is_empty() {
            format!("every kind of the source ({})", source.kinds.keys().cloned().collect::<Vec<_>>().join(", "))
        } else {
            format!("kinds missing: {}", kinds_missing.iter().map(|s| s.as_str()).collect::<Vec<_>>().join(", "))
        },
        tolerance: "every kind".into(),
    });
    let ctotal: u64 = cand.identities.values().sum();
    let worst = source
        .identities
        .iter()
        .map(|(k, n)| {
            let a = *n as f64 / total.max(1) as f64;
            let b = cand.identities.get(k).copied().unwrap_or(0) as f64 / ctotal.max(1) as f64;
            (k, (a - b).abs())
        })
        .max_by(|a, b| a.1.total_cmp(&b.1));
    if let Some((k, d)) = worst {
        out.push(Check {
            name: "mix.identities".into(),
            guards: Assurance::SourceVerified,
            passed: d <= IDENTITY_SHARE_MAX,
            measured: format!("largest difference of an identity's share of collectives: {:.1} points ({k})", d * 100.0),
            tolerance: format!("at most {:.0} points", IDENTITY_SHARE_MAX * 100.0),
        });
    }
    out
}

/// The behavioural checks (state `behaviorally-verified`): kinds replayed,
/// latency statistics per kind, hidden communication, tail recall.
pub fn replay_checks(p: &Paired) -> (Vec<Check>, Vec<Unjudged>) {
    let mut out = Vec::new();
    let mut unjudged = Vec::new();
    let kinds = |jobs: &[Vec<JobMeasure>]| -> BTreeSet<String> {
        jobs.iter().flatten().flat_map(|j| j.per_kind_us.iter().filter(|(_, v)| !v.is_empty()).map(|(k, _)| k.clone())).collect()
    };
    let (ks, kc) = (kinds(p.source), kinds(p.candidate));
    let missing: Vec<&String> = ks.difference(&kc).collect();
    out.push(Check {
        name: "replay.kinds".into(),
        guards: Assurance::BehaviorallyVerified,
        passed: missing.is_empty() && !ks.is_empty(),
        measured: if missing.is_empty() {
            format!("every kind the source's replay ran ({})", ks.iter().cloned().collect::<Vec<_>>().join(", "))
        } else {
            format!("kinds the source's replay ran and the candidate's did not: {}", missing.iter().map(|s| s.as_str()).collect::<Vec<_>>().join(", "))
        },
        tolerance: "every kind".into(),
    });
    for k in &ks {
        for stat in [Stat::P50, Stat::P95, Stat::P99, Stat::Max, Stat::Mean] {
            let f = |j: &JobMeasure| j.per_kind_us.get(k).and_then(|v| stat.of(v));
            if stat == Stat::Max {
                out.push(max_check(p, k, &f));
                continue;
            }
            let noise = log_range_noise(p.source, &f);
            let tol = stat.floor().ln_1p().max(noise);
            let (passed, measured) = match paired_log_ratio(p, &f, &f) {
                Some(d) => (d.abs() <= tol, format!("candidate/source {:.3} (median over paired jobs)", d.exp())),
                None => (false, "the candidate's replay has no such collectives".into()),
            };
            out.push(Check {
                name: format!("latency.{k}.{}", stat.name()),
                guards: Assurance::BehaviorallyVerified,
                passed,
                measured,
                tolerance: format!(
                    "within ×{:.3} either way (the larger of the declared {:.0}% and the source's own job-to-job range)",
                    tol.exp(),
                    stat.floor() * 100.0
                ),
            });
        }
    }
    // hidden communication: paired like the latencies, configuration by
    // configuration and round by round, so that configurations hiding
    // different shares do not move a pooled median between two modes
    let f = |j: &JobMeasure| j.hidden_share;
    let share = |jobs: &[Vec<JobMeasure>]| {
        let mut v: Vec<f64> = jobs.iter().flatten().filter_map(f).collect();
        pct(&mut v, 50.0)
    };
    if let Some(a) = share(p.source) {
        let noise = {
            let r: Vec<f64> = p
                .source
                .iter()
                .filter_map(|js| {
                    let v: Vec<f64> = js.iter().filter_map(f).collect();
                    (v.len() >= 2).then(|| v.iter().copied().fold(f64::MIN, f64::max) - v.iter().copied().fold(f64::MAX, f64::min))
                })
                .collect();
            r.into_iter().fold(0.0, f64::max)
        };
        let tol = HIDDEN_SHARE_FLOOR.max(noise);
        let (passed, measured) = match (share(p.candidate), paired_difference(p, &f)) {
            (Some(b), Some(d)) => (
                d.abs() <= tol,
                format!(
                    "candidate − source {:+.1} points (median over paired jobs); source {:.1}%, candidate {:.1}% of communication hidden under compute",
                    d * 100.0,
                    a * 100.0,
                    b * 100.0
                ),
            ),
            (Some(_), None) => (false, "no job of the candidate's overlap phase pairs with one of the source's (same configuration and round)".into()),
            (None, _) => (false, "the candidate's overlap phase did not run".into()),
        };
        out.push(Check {
            name: "hidden-communication".into(),
            guards: Assurance::BehaviorallyVerified,
            passed,
            measured,
            tolerance: format!("within {:.1} points (the larger of {:.0} points and the source's job-to-job range)", tol * 100.0, HIDDEN_SHARE_FLOOR * 100.0),
        });
    }
    // tail recall: the source's recurring tail (positions slow in their pass's median,
    // beyond Tukey's far fence), and how much of it the candidate reaches
    for k in &ks {
        match tail_recall_check(p, k) {
            Ok(c) => out.push(c),
            Err(u) => unjudged.push(u),
        }
    }
    (out, unjudged)
}

/// Per kind, each position of a pass (its index in the pass, in sequence
/// order), the median of that position's latency over the passes given
/// (`passes[t]`: pass t's collectives as (seq, kind, µs), in sequence order).
/// What recurs at one point of the trace stays; a stall that hit one pass
/// at one point (the machine's, not the workload's) drops out once there are
/// three passes or more.
pub fn recurring_by_position(passes: &[Vec<(u64, String, f64)>]) -> BTreeMap<String, Vec<f64>> {
    let mut out: BTreeMap<String, Vec<f64>> = BTreeMap::new();
    let n = passes.iter().map(Vec::len).max().unwrap_or(0);
    for i in 0..n {
        let Some(kind) = passes.iter().find_map(|p| p.get(i)).map(|x| x.1.clone()) else { continue };
        let mut v: Vec<f64> = passes.iter().filter_map(|p| p.get(i)).filter(|x| x.1 == kind).map(|x| x.2).collect();
        if let Some(m) = crate::core::stats::median(&mut v) {
            out.entry(kind).or_default().push(m);
        }
    }
    out
}

/// Tukey's far fence of a sample: Q3 + [`TAIL_FENCE_IQR`] × (Q3 − Q1).
fn far_fence(v: &[f64]) -> Option<f64> {
    let mut w = v.to_vec();
    // the second call sorts what the first sorted
    let (q1, q3) = (pct(&mut w, 25.0)?, pct(&mut w, 75.0)?);
    Some(q3 + TAIL_FENCE_IQR * (q3 - q1))
}

/// `tail-recall.KIND`: the share of the candidate's recurring latencies
/// (per position, [`recurring_by_position`], each over its job's median)
/// beyond the source's far fence,
/// over the source's own share, capped at 1; held to [`TAIL_RECALL_MIN`] of
/// what the source's odd rounds reach of its even rounds' tail (the same
/// measure with nothing changed). Configurations marked as controls are left
/// out: an injected delay recurs by count, not at a point of the trace, and
/// is the control's latency, not the workload's (the ranking judges it).
/// Left out ([`Unjudged`]) where the source's tail holds fewer positions
/// than the source has jobs (a tail that does not recur in every job is the
/// machine's), or is rarer than one position of the candidate's pass (a
/// candidate that short cannot hold it at the source's rate: the same reason
/// a p99 is not asked of fewer than 100 draws).
pub fn tail_recall_check(p: &Paired, k: &str) -> Result<Check, Unjudged> {
    fn workload<'j>(jobs: &'j [Vec<JobMeasure>], controls: &[bool]) -> Vec<&'j JobMeasure> {
        jobs.iter().enumerate().filter(|(i, _)| !controls.get(*i).copied().unwrap_or(false)).flat_map(|(_, js)| js).collect()
    }
    let (src_jobs, cand_jobs) = (workload(p.source, p.controls), workload(p.candidate, p.controls));
    // each job's recurring latencies over that job's median: a job slower as a
    // whole (a busier machine, another clock speed) moves no position into the tail
    let pooled = |jobs: &[&JobMeasure], keep: &dyn Fn(u32) -> bool| -> Vec<f64> {
        jobs.iter()
            .filter(|j| keep(j.round))
            .flat_map(|j| {
                let v = j.per_kind_recurring_us.get(k).map_or(&[][..], Vec::as_slice);
                let m = crate::core::stats::median(&mut v.to_vec()).filter(|m| *m > 0.0);
                v.iter().filter_map(move |x| m.map(|m| x / m))
            })
            .collect()
    };
    let share_beyond = |v: &[f64], fence: f64| -> f64 {
        if v.is_empty() {
            0.0
        } else {
            v.iter().filter(|&&x| x > fence).count() as f64 / v.len() as f64
        }
    };
    let name = format!("tail-recall.{k}");
    let left_out = |reason: String| Unjudged { name: name.clone(), reason };
    let (s, c) = (pooled(&src_jobs, &|_| true), pooled(&cand_jobs, &|_| true));
    let Some(fence) = far_fence(&s) else { return Err(left_out("the source's workload configurations ran no such collective".into())) };
    let beyond = s.iter().filter(|&&x| x > fence).count();
    let source_jobs = src_jobs.iter().filter(|j| j.per_kind_recurring_us.contains_key(k)).count();
    if beyond == 0 || beyond < source_jobs {
        return Err(left_out(format!(
            "the source has no recurring tail: {beyond} positions beyond its far fence ({fence:.2}x its job's median) over {source_jobs} jobs, fewer than one per job"
        )));
    }
    let ss = beyond as f64 / s.len() as f64;
    // a tail rarer than one position of the candidate's pass cannot be held at the source's rate
    let mut per_pass: Vec<f64> = cand_jobs.iter().filter_map(|j| j.per_kind_recurring_us.get(k)).map(|v| v.len() as f64).collect();
    let cand_positions = pct(&mut per_pass, 50.0).unwrap_or(0.0);
    if ss * cand_positions < 1.0 {
        return Err(left_out(format!(
            "the source's recurring tail is {:.3}% of its positions (beyond its far fence, {fence:.2}x its job's median): fewer than one of the candidate's {cand_positions:.0} positions per pass at that rate, so a candidate this short cannot hold it; the tail is one of the candidate's approximations",
            ss * 100.0
        )));
    }
    let cs = share_beyond(&c, fence);
    let recall = (cs / ss).min(1.0);
    let own = {
        let (even, odd) = (pooled(&src_jobs, &|r| r % 2 == 0), pooled(&src_jobs, &|r| r % 2 == 1));
        match far_fence(&even) {
            Some(f) => match share_beyond(&even, f) {
                e if e > 0.0 => (share_beyond(&odd, f) / e).min(1.0),
                _ => 1.0,
            },
            None => 1.0,
        }
    };
    let min = TAIL_RECALL_MIN * own;
    Ok(Check {
        name,
        guards: Assurance::BehaviorallyVerified,
        passed: recall >= min,
        measured: format!(
            "{recall:.2} of the source's recurring tail reached by the candidate ({:.2}% of the source's positions beyond its far fence, {fence:.2}x its job's median, {:.2}% of the candidate's); the source's odd rounds reach {own:.2} of its even rounds'",
            ss * 100.0,
            cs * 100.0
        ),
        tolerance: format!("at least {TAIL_RECALL_MIN} of what the source reaches against itself ({min:.2})"),
    })
}

/// The phase inputs of the replay's per-pass latency, by configuration.
pub fn phase_input(configs: &[String], jobs: &[Vec<JobMeasure>]) -> PhaseInput {
    PhaseInput {
        phase: Phase::Replay,
        labels: configs.to_vec(),
        jobs: jobs.iter().map(|js| js.iter().map(|j| JobData { round: j.round, samples_us: j.pass_us.clone() }).collect()).collect(),
    }
}

/// The ranking check and the decision cost.
pub fn ranking_check(p: &Paired, policy: &AnalysisPolicy, evidence: &str) -> Result<(Check, ProxyAgreement, DecisionCost)> {
    let (si, ci) = (phase_input(p.configs, p.source), phase_input(p.configs, p.candidate));
    let (cand_rep, src_rep, agreement) = agreement::proxy_against_truth(&ci, &si, policy, evidence)?;
    let m = policy.min_effect_pct;
    let mut contradictions = Vec::new();
    let mut unmatched = Vec::new();
    let mut unconfirmed = Vec::new();
    let mut not_reached = Vec::new();
    let mut marginal = 0;
    for (a, b) in cand_rep.pairs.iter().zip(&src_rep.pairs) {
        if a.relation == b.relation {
            continue;
        }
        let name = format!("{} vs {}", a.a, a.b);
        if a.relation != Relation::NotDistinguished && b.relation != Relation::NotDistinguished {
            contradictions.push(name);
            continue;
        }
        let only_candidate = a.relation != Relation::NotDistinguished;
        // decided on one side only: marginal when the deciding interval's edge nearest 0 is within twice the minimum effect
        let (decided, other) = if only_candidate { (a, b) } else { (b, a) };
        let edge = decided.ci_low_pct.abs().min(decided.ci_high_pct.abs());
        let what = format!(
            "{name} ({} {:+.1}% [{:+.1}, {:+.1}], {} {:+.1}% [{:+.1}, {:+.1}])",
            if only_candidate { "the candidate decides" } else { "the source decides" },
            decided.diff_pct,
            decided.ci_low_pct,
            decided.ci_high_pct,
            if only_candidate { "the source cannot tell:" } else { "the candidate cannot tell:" },
            other.diff_pct,
            other.ci_low_pct,
            other.ci_high_pct
        );
        if edge <= 2.0 * m {
            marginal += 1;
        } else if other.ci_low_pct <= decided.diff_pct && decided.diff_pct <= other.ci_high_pct {
            // the undecided side's interval holds what the deciding side measured: one side
            // is noisier in these rounds (a long source on a busy machine, or the same
            // trace twice), not a different ranking; listed, never counted as agreement
            if only_candidate {
                unconfirmed.push(what);
            } else {
                not_reached.push(what);
            }
        } else {
            unmatched.push(what);
        }
    }
    let shared = cand_rep.pairs.iter().zip(&src_rep.pairs).filter(|(a, b)| a.relation == b.relation && b.relation != Relation::NotDistinguished).count();
    let c = &agreement.comparison;
    // nothing decided on the source: there is no decision to preserve, and agreement would be vacuous
    let source_decided = src_rep.pairs.iter().filter(|x| x.relation != Relation::NotDistinguished).count();
    let passed = contradictions.is_empty() && unmatched.is_empty() && source_decided > 0 && shared > 0;
    let tau = |t: &crate::analysis::TauEstimate| match (t.tau_b, t.interval) {
        (Some(v), Some((lo, hi))) => format!("{v:.2} [{lo:.2}, {hi:.2}]"),
        (Some(v), None) => format!("{v:.2}"),
        (None, _) => "undefined".into(),
    };
    let check = Check {
        name: "ranking".into(),
        guards: Assurance::BehaviorallyVerified,
        passed,
        measured: format!(
            "{}{} of {} pairs agree ({:.0}%), {shared} decided alike, τ-b {}; contradictions: {}; decided on one side only, outside the other side's interval: {}; decided by the candidate alone, within the source's interval (unconfirmed): {}; decided by the source alone, within the candidate's interval (not reached in these rounds): {}; marginal: {marginal}",
            if source_decided == 0 {
                "the source decided no pair, so there is no decision to preserve (more rounds, or a known-bad control, would give one); "
            } else {
                ""
            },
            c.pairs_agree,
            c.pairs_total,
            c.agreement_pct,
            tau(&agreement.tau_policy),
            if contradictions.is_empty() { "none".into() } else { contradictions.join(", ") },
            if unmatched.is_empty() { "none".into() } else { unmatched.join("; ") },
            if unconfirmed.is_empty() { "none".into() } else { unconfirmed.join("; ") },
            if not_reached.is_empty() { "none".into() } else { not_reached.join("; ") }
        ),
        tolerance: format!(
            "the source decides at least one pair and the candidate decides at least one of those alike; no contradiction; a pair decided on one side only lies within the other side's interval, or its deciding interval reaches within {:.0}% of a tie",
            2.0 * m
        ),
    };
    // decision cost
    let target: Vec<Relation> = src_rep.pairs.iter().map(|x| x.relation).collect();
    let sr = agreement::rounds_to_decide(&si, policy, &target)?;
    let cr = agreement::rounds_to_decide(&ci, policy, &target)?;
    let secs = |jobs: &[Vec<JobMeasure>], r: Option<usize>| -> Option<f64> {
        let r = r?;
        let mut rounds: Vec<u32> = jobs.first()?.iter().map(|j| j.round).collect();
        rounds.sort_unstable();
        let keep: BTreeSet<u32> = rounds.into_iter().take(r).collect();
        Some(jobs.iter().flatten().filter(|j| keep.contains(&j.round)).map(|j| j.replay_s).sum())
    };
    let mean = |jobs: &[Vec<JobMeasure>]| {
        let v: Vec<f64> = jobs.iter().flatten().map(|j| j.replay_s).collect();
        v.iter().sum::<f64>() / v.len().max(1) as f64
    };
    let (ss, cs) = (secs(p.source, sr), secs(p.candidate, cr));
    let cost = DecisionCost {
        source_rounds: sr,
        candidate_rounds: cr,
        source_replay_s: ss,
        candidate_replay_s: cs,
        source_per_candidate: ss.zip(cs).filter(|(_, c)| *c > 0.0).map(|(s, c)| s / c),
        per_job_s: (mean(p.source), mean(p.candidate)),
    };
    Ok((check, agreement, cost))
}

/// The highest state whose checks all held, given the checks and what the run could show.
pub fn state_of(checks: &[Check], hardware_ok: bool) -> Assurance {
    let all = |s: Assurance| checks.iter().filter(|c| c.guards == s).all(|c| c.passed);
    let mut state = Assurance::IntegrityBound;
    for s in [Assurance::SourceVerified, Assurance::BehaviorallyVerified] {
        if all(s) && checks.iter().any(|c| c.guards == s) {
            state = s;
        } else {
            return state;
        }
    }
    if hardware_ok && all(Assurance::HardwareValidated) && checks.iter().any(|c| c.guards == Assurance::HardwareValidated) {
        state = Assurance::HardwareValidated;
    }
    state
}

#[cfg(test)]
mod tests {
    use super::*;

    fn job(round: u32, scale: f64) -> JobMeasure {
        let mut per_kind = BTreeMap::new();
        per_kind.insert("all_reduce".to_string(), (0..200).map(|i| scale * (10.0 + (i % 7) as f64 + if i % 100 == 50 { 500.0 } else { 0.0 })).collect());
        JobMeasure {
            round,
            pass_us: vec![scale * 1000.0, scale * 1010.0],
            per_kind_recurring_us: per_kind.clone(),
            per_kind_us: per_kind,
            replay_s: 0.01,
            hidden_share: Some(0.5),
        }
    }

    fn pass_jobs(medians_us: &[f64]) -> Vec<JobMeasure> {
        medians_us
            .iter()
            .enumerate()
            .map(|(i, &m)| JobMeasure { round: i as u32 + 1, pass_us: vec![m * 0.99, m, m * 1.01], replay_s: m / 1e6 * 3.0, ..Default::default() })
            .collect()
    }

    fn policy() -> AnalysisPolicy {
        AnalysisPolicy {
            tie_policy: crate::analysis::policy::TiePolicy::Interval,
            min_effect_pct: 2.0,
            delta_pct: 5.0,
            bootstrap_resamples: 2000,
            bootstrap_seed: 1,
        }
    }

    /// A pair the source is too noisy to decide, decided by a quieter
    /// candidate inside the source's interval, is unconfirmed, not failed;
    /// one decided outside the source's (narrow, undecided) interval fails.
    #[test]
    fn a_pair_only_the_candidate_decides_must_lie_within_the_source_s_interval() {
        let configs: Vec<String> = ["a", "b", "bad"].iter().map(|s| s.to_string()).collect();
        let noisy_a = [617.0, 600.0, 664.0, 1049.0, 1069.0, 641.0];
        let noisy_b = [749.0, 743.0, 1153.0, 1292.0, 810.0, 792.0];
        let bad: Vec<f64> = noisy_b.iter().map(|x| x * 4.0).collect();
        let src = vec![pass_jobs(&noisy_a), pass_jobs(&noisy_b), pass_jobs(&bad)];
        let quiet =
            |a: f64| vec![pass_jobs(&[a, a * 1.01, a * 0.99, a * 1.02, a, a * 0.98]), pass_jobs(&[2.9, 2.93, 2.88, 2.9, 2.95, 2.87]), pass_jobs(&[11.6; 6])];
        let cand = quiet(2.54);
        let (chk, _, cost) = ranking_check(&Paired { configs: &configs, source: &src, candidate: &cand, controls: &[] }, &policy(), "test").unwrap();
        assert!(chk.passed && chk.measured.contains("(unconfirmed): a vs b"), "{chk:?}");
        assert!(cost.candidate_rounds.is_some(), "the candidate reaches the source's decided pairs: {cost:?}");
        // a tight source that cannot separate a from b, and a candidate that puts a 20% ahead
        let tight_a = [700.0, 702.0, 698.0, 701.0, 699.0, 700.5];
        let tight_b = [701.0, 699.0, 700.0, 702.0, 700.0, 699.5];
        let src = vec![pass_jobs(&tight_a), pass_jobs(&tight_b), pass_jobs(&[2800.0; 6])];
        let cand = quiet(2.32);
        let (chk, _, _) = ranking_check(&Paired { configs: &configs, source: &src, candidate: &cand, controls: &[] }, &policy(), "test").unwrap();
        assert!(!chk.passed && chk.measured.contains("outside the other side's interval: a vs b"), "{chk:?}");
        // the other way round: a source that decides a ahead, a noisier candidate that cannot tell
        // (the same trace on a busier machine): not reached in these rounds, not failed
        let src = vec![pass_jobs(&[700.0, 702.0, 698.0, 701.0, 699.0, 700.5]), pass_jobs(&[800.0, 801.0, 799.0, 802.0, 800.0, 798.0]), pass_jobs(&[3200.0; 6])];
        let cand = vec![pass_jobs(&noisy_a), pass_jobs(&noisy_b), pass_jobs(&bad)];
        let (chk, _, cost) = ranking_check(&Paired { configs: &configs, source: &src, candidate: &cand, controls: &[] }, &policy(), "test").unwrap();
        assert!(chk.passed && chk.measured.contains("(not reached in these rounds): a vs b"), "{chk:?}");
        assert_eq!(cost.candidate_rounds, None, "the candidate never decides every pair the source decides: {cost:?}");
        // but one that decides none of the source's pairs alike fails
        let flat = vec![pass_jobs(&noisy_a), pass_jobs(&noisy_b), pass_jobs(&noisy_a)];
        let (chk, _, _) = ranking_check(&Paired { configs: &configs, source: &src, candidate: &flat, controls: &[] }, &policy(), "test").unwrap();
        assert!(!chk.passed && chk.measured.contains(" 0 decided alike"), "{chk:?}");
    }

    /// A stall that hit one pass at one point drops out of the recurring
    /// latencies; a slow point of every pass stays.
    #[test]
    fn one_off_stalls_drop_out_of_the_recurring_tail() {
        let pass = |stall_at: Option<usize>| -> Vec<(u64, String, f64)> {
            (0..8)
                .map(|i| {
                    (
                        i as u64,
                        "all_reduce".to_string(),
                        if i == 5 {
                            900.0
                        } else if Some(i) == stall_at {
                            4000.0
                        } else {
                            50.0 + i as f64
                        },
                    )
                })
                .collect()
        };
        let r = recurring_by_position(&[pass(Some(2)), pass(None), pass(Some(7))]);
        let v = &r["all_reduce"];
        assert_eq!(v.len(), 8);
        assert_eq!(v[5], 900.0);
        assert!(v.iter().enumerate().all(|(i, &x)| i == 5 || x < 100.0), "{v:?}");
        // a source whose only tail is one-off stalls has no recurring tail to judge
        let configs = vec!["a".to_string()];
        let job = |round| JobMeasure {
            round,
            per_kind_recurring_us: recurring_by_position(&[pass(Some(1)), pass(None), pass(Some(3))])
                .into_iter()
                .map(|(k, v)| (k, v.into_iter().filter(|x| *x < 500.0).collect()))
                .collect(),
            ..Default::default()
        };
        let src = vec![(1..=4).map(job).collect::<Vec<_>>()];
        let u = tail_recall_check(&Paired { configs: &configs, source: &src, candidate: &src, controls: &[] }, "all_reduce").unwrap_err();
        assert!(u.reason.contains("no recurring tail"), "{u:?}");
        // a recurring tail of 1 position in 1,000, against a candidate of 100 positions a pass: left out, not failed
        let long = |round| JobMeasure {
            round,
            per_kind_recurring_us: BTreeMap::from([(
                "all_reduce".to_string(),
                (0..1000).map(|i| if i == 500 { 900.0 } else { 50.0 + (i % 9) as f64 }).collect(),
            )]),
            ..Default::default()
        };
        let short = |round| JobMeasure {
            round,
            per_kind_recurring_us: BTreeMap::from([("all_reduce".to_string(), (0..100).map(|i| 50.0 + (i % 9) as f64).collect())]),
            ..Default::default()
        };
        let (src, cand) = (vec![(1..=4).map(long).collect::<Vec<_>>()], vec![(1..=4).map(short).collect::<Vec<_>>()]);
        let u = tail_recall_check(&Paired { configs: &configs, source: &src, candidate: &cand, controls: &[] }, "all_reduce").unwrap_err();
        assert!(u.reason.contains("cannot hold it"), "{u:?}");
        // the same tail against a candidate of 1,000 positions without it: judged, and failed
        let flat = |round| JobMeasure {
            round,
            per_kind_recurring_us: BTreeMap::from([("all_reduce".to_string(), (0..1000).map(|i| 50.0 + (i % 9) as f64).collect())]),
            ..Default::default()
        };
        let cand = vec![(1..=4).map(flat).collect::<Vec<_>>()];
        let c = tail_recall_check(&Paired { configs: &configs, source: &src, candidate: &cand, controls: &[] }, "all_reduce").unwrap();
        assert!(!c.passed, "{c:?}");
    }

    #[test]
    fn a_copy_passes_and_a_sample_without_the_tail_fails_named_checks() {
        let configs = vec!["a".to_string(), "b".to_string()];
        let src: Vec<Vec<JobMeasure>> = vec![(1..=3).map(|r| job(r, 1.0)).collect(), (1..=3).map(|r| job(r, 2.0)).collect()];
        let p = Paired { configs: &configs, source: &src, candidate: &src, controls: &[] };
        assert!(replay_checks(&p).0.iter().all(|c| c.passed), "{:?}", replay_checks(&p));
        // a candidate that lost the one slow collective
        let mut cut = src.clone();
        for j in cut.iter_mut().flatten() {
            j.per_kind_us.get_mut("all_reduce").unwrap().retain(|&x| x < 400.0);
            j.per_kind_recurring_us.get_mut("all_reduce").unwrap().retain(|&x| x < 400.0);
        }
        let p = Paired { configs: &configs, source: &src, candidate: &cut, controls: &[] };
        let failed: Vec<String> = replay_checks(&p).0.into_iter().filter(|c| !c.passed).map(|c| c.name).collect();
        assert!(failed.contains(&"latency.all_reduce.max".to_string()) && failed.contains(&"tail-recall.all_reduce".to_string()), "{failed:?}");
    }

    /// A canary replaying 100 collectives is not held to the maximum of its
    /// source's 10,000 (a rare spike it cannot be expected to draw), but to the
    /// maximum of the source's blocks of 100; a slower canary still fails.
    /// Two configurations hiding 20% and 40%: a candidate with one job
    /// fewer in the first moves the pooled median from one mode to the
    /// other (20 points), while every paired job agrees exactly.
    #[test]
    fn hidden_share_is_compared_job_by_job_not_pooled() {
        let configs: Vec<String> = ["a", "b"].iter().map(|s| s.to_string()).collect();
        let jobs =
            |share: f64, rounds: &[u32]| -> Vec<JobMeasure> { rounds.iter().map(|&r| JobMeasure { hidden_share: Some(share), ..job(r, 1.0) }).collect() };
        let src = vec![jobs(0.2, &[1, 2, 3]), jobs(0.4, &[1, 2, 3])];
        let cand = vec![jobs(0.2, &[1, 2]), jobs(0.4, &[1, 2, 3])];
        let (checks, _) = replay_checks(&Paired { configs: &configs, source: &src, candidate: &cand, controls: &[] });
        let c = checks.iter().find(|c| c.name == "hidden-communication").unwrap();
        assert!(c.passed && c.measured.contains("+0.0 points"), "{c:?}");
        // a real shift, 10 points in every paired job, still fails
        let cand = vec![jobs(0.3, &[1, 2, 3]), jobs(0.5, &[1, 2, 3])];
        let (checks, _) = replay_checks(&Paired { configs: &configs, source: &src, candidate: &cand, controls: &[] });
        let c = checks.iter().find(|c| c.name == "hidden-communication").unwrap();
        assert!(!c.passed && c.measured.contains("+10.0 points"), "{c:?}");
    }

    #[test]
    fn the_maximum_is_compared_at_the_candidate_s_count() {
        let configs = vec!["a".to_string()];
        let series = |n: usize, scale: f64, spikes: bool| -> Vec<f64> {
            (0..n).map(|i| scale * (10.0 + (i % 13) as f64 + if spikes && i % 2_000 == 1_000 { 2_000.0 } else { 0.0 })).collect()
        };
        let job =
            |round, v: Vec<f64>| JobMeasure { round, pass_us: vec![1.0], per_kind_us: BTreeMap::from([("all_reduce".to_string(), v)]), ..Default::default() };
        let src = vec![(1..=3).map(|r| job(r, series(10_000, 1.0, true))).collect::<Vec<_>>()];
        let max = |cand: &[Vec<JobMeasure>]| {
            max_check(&Paired { configs: &configs, source: &src, candidate: cand, controls: &[] }, "all_reduce", &|j| {
                j.per_kind_us.get("all_reduce").and_then(|v| Stat::Max.of(v))
            })
        };
        let alike = vec![(1..=3).map(|r| job(r, series(100, 1.0, false))).collect::<Vec<_>>()];
        let c = max(&alike);
        assert!(c.passed && c.measured.contains("blocks of 100"), "{c:?}");
        let slower = vec![(1..=3).map(|r| job(r, series(100, 10.0, false))).collect::<Vec<_>>()];
        assert!(!max(&slower).passed);
        assert_eq!(block_maxima(&[1.0, 5.0, 2.0, 3.0, 9.0], 2), vec![5.0, 3.0]);
        assert_eq!(block_maxima(&[1.0, 5.0], 4), vec![5.0]);
    }

    #[test]
    fn the_state_stops_at_the_first_failed_level() {
        let c = |g, passed| Check { name: "x".into(), guards: g, passed, measured: String::new(), tolerance: String::new() };
        assert_eq!(state_of(&[c(Assurance::SourceVerified, true), c(Assurance::BehaviorallyVerified, true)], false), Assurance::BehaviorallyVerified);
        assert_eq!(state_of(&[c(Assurance::SourceVerified, false), c(Assurance::BehaviorallyVerified, true)], true), Assurance::IntegrityBound);
        assert_eq!(
            state_of(&[c(Assurance::SourceVerified, true), c(Assurance::BehaviorallyVerified, true), c(Assurance::HardwareValidated, true)], true),
            Assurance::HardwareValidated
        );
        assert_eq!(
            state_of(&[c(Assurance::SourceVerified, true), c(Assurance::BehaviorallyVerified, true), c(Assurance::HardwareValidated, true)], false),
            Assurance::BehaviorallyVerified
        );
    }
}
