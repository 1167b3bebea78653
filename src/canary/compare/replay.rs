//! The behavioural checks (state `behaviorally-verified`) on paired replay
//! jobs: kinds replayed, latency statistics per kind (a maximum at the
//! candidate's own count), hidden communication, and tail recall from [`super::tail`].
//! Consumes [`Paired`] measures; every tolerance is the larger of its declared
//! floor and the source's own job-to-job range. Use [`replay_checks`].
use super::tail::tail_recall_check;
use super::{Check, JobMeasure, Paired, Unjudged, HIDDEN_SHARE_FLOOR};
use crate::canary::Assurance;
use crate::core::stats::percentile_nearest_rank as pct;
use std::collections::BTreeSet;

/// A statistic of a sample.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Stat {
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

/// The largest range of `f` (of its positive values' logs where `log`) over one configuration's jobs.
fn range_noise(jobs: &[Vec<JobMeasure>], f: &dyn Fn(&JobMeasure) -> Option<f64>, log: bool) -> f64 {
    let ranges: Vec<f64> = jobs
        .iter()
        .filter_map(|js| {
            let v: Vec<f64> = js.iter().filter_map(f).filter(|x| !log || *x > 0.0).collect();
            let v: Vec<f64> = if log { v.into_iter().map(f64::ln).collect() } else { v };
            (v.len() >= 2)
                .then(|| v.iter().copied().fold(f64::MIN, f64::max) - v.iter().copied().fold(f64::MAX, f64::min))
        })
        .collect();
    // the largest: a candidate is held to what the source itself varies by, no tighter
    ranges.into_iter().fold(0.0, f64::max)
}

/// Median over (configuration, round) of `d(source's job, candidate's job of that round)`.
fn paired_median(p: &Paired, d: &dyn Fn(&JobMeasure, &JobMeasure) -> Option<f64>) -> Option<f64> {
    let pairs = p.source.iter().zip(p.candidate);
    let mut v: Vec<f64> =
        pairs.flat_map(|(s, c)| s.iter().filter_map(|js| d(js, c.iter().find(|x| x.round == js.round)?))).collect();
    pct(&mut v, 50.0)
}

/// Median over (configuration, round) of log(candidate / source) of a job
/// statistic (`fs` of the source's job, `fc` of the candidate's).
fn paired_log_ratio(
    p: &Paired,
    fs: &dyn Fn(&JobMeasure) -> Option<f64>,
    fc: &dyn Fn(&JobMeasure) -> Option<f64>,
) -> Option<f64> {
    paired_median(p, &|js, jc| {
        let (a, b) = (fs(js)?, fc(jc)?);
        (a > 0.0 && b > 0.0).then(|| (b / a).ln())
    })
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

/// `latency.KIND.max`, like with like: the candidate's maximum against the source's median maximum
/// over blocks of the candidate's own count (docs/METHODS.md, "The maximum over blocks").
fn max_check(p: &Paired, k: &str, f: &dyn Fn(&JobMeasure) -> Option<f64>) -> Check {
    let mut counts: Vec<f64> = p
        .candidate
        .iter()
        .flatten()
        .filter_map(|j| j.per_kind_us.get(k))
        .map(|v| v.len() as f64)
        .filter(|n| *n > 0.0)
        .collect();
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
    let noise = range_noise(p.source, &fs, true);
    let tol = Stat::Max.floor().ln_1p().max(noise).max(spread);
    let blocks = n < largest_source;
    let (passed, measured) = match paired_log_ratio(p, &fs, f) {
        Some(d) => (
            d.abs() <= tol,
            if blocks {
                format!(
                    "candidate/source {:.3} (the source's median maximum over blocks of {n} collectives, the \
                        candidate's count per job; median over paired jobs)",
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
            "within ×{:.3} either way (the largest of the declared {:.0}%, the source's job-to-job range and the \
                10–90% spread of its block maxima)",
            tol.exp(),
            Stat::Max.floor() * 100.0
        ),
    }
}

/// The behavioural checks (state `behaviorally-verified`): kinds replayed,
/// latency statistics per kind, hidden communication, tail recall.
pub(crate) fn replay_checks(p: &Paired) -> (Vec<Check>, Vec<Unjudged>) {
    let mut out = Vec::new();
    let mut unjudged = Vec::new();
    let kinds = |jobs: &[Vec<JobMeasure>]| -> BTreeSet<String> {
        jobs.iter()
            .flatten()
            .flat_map(|j| j.per_kind_us.iter().filter(|(_, v)| !v.is_empty()).map(|(k, _)| k.clone()))
            .collect()
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
            format!(
                "kinds the source's replay ran and the candidate's did not: {}",
                missing.iter().map(|s| s.as_str()).collect::<Vec<_>>().join(", ")
            )
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
            let noise = range_noise(p.source, &f, true);
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
                    "within ×{:.3} either way (the larger of the declared {:.0}% and the source's own job-to-job \
                        range)",
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
        let tol = HIDDEN_SHARE_FLOOR.max(range_noise(p.source, &f, false));
        // candidate − source on a linear scale (a share, where a ratio would blow up near 0)
        let (passed, measured) = match (share(p.candidate), paired_median(p, &|js, jc| Some(f(jc)? - f(js)?))) {
            (Some(b), Some(d)) => (
                d.abs() <= tol,
                format!(
                    "candidate − source {:+.1} points (median over paired jobs); source {:.1}%, candidate {:.1}% of \
                        communication hidden under compute",
                    d * 100.0,
                    a * 100.0,
                    b * 100.0
                ),
            ),
            (Some(_), None) => (
                false,
                "no job of the candidate's overlap phase pairs with one of the source's (same configuration and round)"
                    .into(),
            ),
            (None, _) => (false, "the candidate's overlap phase did not run".into()),
        };
        out.push(Check {
            name: "hidden-communication".into(),
            guards: Assurance::BehaviorallyVerified,
            passed,
            measured,
            tolerance: format!(
                "within {:.1} points (the larger of {:.0} points and the source's job-to-job range)",
                tol * 100.0,
                HIDDEN_SHARE_FLOOR * 100.0
            ),
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

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeMap;

    fn job(round: u32, scale: f64) -> JobMeasure {
        let us = (0..200).map(|i| scale * (10.0 + (i % 7) as f64 + if i % 100 == 50 { 500.0 } else { 0.0 }));
        let per_kind = BTreeMap::from([("all_reduce".to_string(), us.collect())]);
        JobMeasure {
            round,
            pass_us: vec![scale * 1000.0, scale * 1010.0],
            per_kind_recurring_us: per_kind.clone(),
            per_kind_us: per_kind,
            replay_s: 0.01,
            hidden_share: Some(0.5),
        }
    }

    #[test]
    fn a_copy_passes_and_a_sample_without_the_tail_fails_named_checks() {
        let configs = vec!["a".to_string(), "b".to_string()];
        let src: Vec<Vec<JobMeasure>> =
            vec![(1..=3).map(|r| job(r, 1.0)).collect(), (1..=3).map(|r| job(r, 2.0)).collect()];
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
        assert!(
            failed.contains(&"latency.all_reduce.max".to_string())
                && failed.contains(&"tail-recall.all_reduce".to_string()),
            "{failed:?}"
        );
    }

    /// Two configurations hiding 20% and 40%: a candidate with one job
    /// fewer in the first moves the pooled median from one mode to the
    /// other (20 points), while every paired job agrees exactly.
    #[test]
    fn hidden_share_is_compared_job_by_job_not_pooled() {
        let configs: Vec<String> = ["a", "b"].iter().map(|s| s.to_string()).collect();
        let jobs = |share: f64, rounds: &[u32]| -> Vec<JobMeasure> {
            rounds.iter().map(|&r| JobMeasure { hidden_share: Some(share), ..job(r, 1.0) }).collect()
        };
        let src = vec![jobs(0.2, &[1, 2, 3]), jobs(0.4, &[1, 2, 3])];
        let hidden = |candidate: &[Vec<JobMeasure>]| {
            let (checks, _) = replay_checks(&Paired { configs: &configs, source: &src, candidate, controls: &[] });
            checks.into_iter().find(|c| c.name == "hidden-communication").unwrap()
        };
        let c = hidden(&[jobs(0.2, &[1, 2]), jobs(0.4, &[1, 2, 3])]);
        assert!(c.passed && c.measured.contains("+0.0 points"), "{c:?}");
        // a real shift, 10 points in every paired job, still fails
        let c = hidden(&[jobs(0.3, &[1, 2, 3]), jobs(0.5, &[1, 2, 3])]);
        assert!(!c.passed && c.measured.contains("+10.0 points"), "{c:?}");
    }

    /// A canary replaying 100 collectives is not held to the maximum of its
    /// source's 10,000 (a rare spike it cannot be expected to draw), but to the
    /// maximum of the source's blocks of 100; a slower canary still fails.
    #[test]
    fn the_maximum_is_compared_at_the_candidate_s_count() {
        let configs = vec!["a".to_string()];
        let series = |n: usize, scale: f64, spikes: bool| -> Vec<f64> {
            (0..n)
                .map(|i| scale * (10.0 + (i % 13) as f64 + if spikes && i % 2_000 == 1_000 { 2_000.0 } else { 0.0 }))
                .collect()
        };
        let job = |round, v: Vec<f64>| JobMeasure {
            round,
            pass_us: vec![1.0],
            per_kind_us: BTreeMap::from([("all_reduce".to_string(), v)]),
            ..Default::default()
        };
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
}
