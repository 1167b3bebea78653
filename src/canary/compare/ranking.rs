//! The ranking check and the decision cost: the candidate's pair relations
//! of configurations against the source's, from the replay's per-pass latency
//! ([`phase_input`]), and the replay seconds each side needs to decide them.
//! Fails on a contradiction, on a pair decided outside the other side's
//! interval, or when the source decides nothing. Use [`ranking_check`].
use super::{Check, DecisionCost, JobMeasure, Paired, Undecided};
use crate::analysis::agreement;
use crate::analysis::policy::AnalysisPolicy;
use crate::analysis::ranking::Relation;
use crate::analysis::{JobData, PhaseInput, ProxyAgreement};
use crate::canary::Assurance;
use crate::core::stats;
use crate::core::workload::Phase;
use anyhow::Result;
use std::collections::BTreeSet;

/// The phase inputs of the replay's per-pass latency, by configuration.
pub(crate) fn phase_input(configs: &[String], jobs: &[Vec<JobMeasure>]) -> PhaseInput {
    PhaseInput {
        phase: Phase::Replay,
        labels: configs.to_vec(),
        jobs: jobs
            .iter()
            .map(|js| js.iter().map(|j| JobData { round: j.round, samples_us: j.pass_us.clone() }).collect())
            .collect(),
    }
}

/// The ranking check, the agreement it rests on, the decision cost, and why
/// it failed where it failed for want of a decision alone.
pub(crate) struct RankingOutcome {
    /// The `ranking` check.
    pub check: Check,
    /// The candidate's relations against the source's.
    pub agreement: ProxyAgreement,
    /// The decision cost (none where the source decided nothing).
    pub cost: Option<DecisionCost>,
    /// Set only where the check failed and nothing but a missing decision failed it.
    pub undecided: Option<Undecided>,
}

/// The largest job-to-job spread of one configuration's jobs: the sample
/// standard deviation of the logs of the jobs' median pass latencies.
fn job_spread_log_sd(jobs: &[Vec<JobMeasure>]) -> f64 {
    jobs.iter()
        .filter_map(|js| {
            let v: Vec<f64> = js
                .iter()
                .filter_map(|j| stats::median(&mut j.pass_us.clone()))
                .filter(|m| *m > 0.0)
                .map(f64::ln)
                .collect();
            (v.len() >= 2).then(|| {
                let mean = v.iter().sum::<f64>() / v.len() as f64;
                (v.iter().map(|x| (x - mean).powi(2)).sum::<f64>() / (v.len() - 1) as f64).sqrt()
            })
        })
        .fold(0.0, f64::max)
}

/// The ranking check and the decision cost.
pub(crate) fn ranking_check(p: &Paired, policy: &AnalysisPolicy, evidence: &str) -> Result<RankingOutcome> {
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
        // decided on one side only: marginal when the deciding interval's edge nearest 0 is within twice the minimum
        // effect
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
    let shared = cand_rep
        .pairs
        .iter()
        .zip(&src_rep.pairs)
        .filter(|(a, b)| a.relation == b.relation && b.relation != Relation::NotDistinguished)
        .count();
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
            "{}{} of {} pairs agree ({:.0}%), {shared} decided alike, τ-b {}; contradictions: {}; decided on one side \
                only, outside the other side's interval: {}; decided by the candidate alone, within the source's \
                interval (unconfirmed): {}; decided by the source alone, within the candidate's interval (not reached \
                in these rounds): {}; marginal: {marginal}",
            if source_decided == 0 {
                "the source decided no pair, so there is no decision to preserve (more rounds, or a known-bad control, \
                    would give one); "
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
            "the source decides at least one pair and the candidate decides at least one of those alike; no \
                contradiction; a pair decided on one side only lies within the other side's interval, or its deciding \
                interval reaches within {:.0}% of a tie",
            2.0 * m
        ),
    };
    // failed with no contradiction and nothing decided outside the other side's interval: only a
    // decision is missing, which more rounds (or a quieter machine) can give; said apart, with the spread
    let undecided = (!passed && contradictions.is_empty() && unmatched.is_empty()).then(|| Undecided {
        reason: if source_decided == 0 {
            "the source decided no pair of configurations in these rounds".to_string()
        } else {
            format!(
                "the candidate decided none of the {source_decided} pair(s) the source decided in these rounds, \
                    and contradicted none{}",
                if not_reached.is_empty() {
                    String::new()
                } else {
                    format!(" (not reached: {})", not_reached.join("; "))
                }
            )
        },
        job_spread_log_sd: job_spread_log_sd(p.source).max(job_spread_log_sd(p.candidate)),
    });
    // decision cost: none where the source decided nothing (there is no decision to reach)
    if source_decided == 0 {
        return Ok(RankingOutcome { check, agreement, cost: None, undecided });
    }
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
    Ok(RankingOutcome { check, agreement, cost: Some(cost), undecided })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::analysis::policy::TiePolicy;

    fn pass_jobs(medians_us: &[f64]) -> Vec<JobMeasure> {
        medians_us
            .iter()
            .enumerate()
            .map(|(i, &m)| JobMeasure {
                round: i as u32 + 1,
                pass_us: vec![m * 0.99, m, m * 1.01],
                replay_s: m / 1e6 * 3.0,
                ..Default::default()
            })
            .collect()
    }

    /// The ranking check of `candidate` against `source`, under the interval policy at a 2% minimum effect.
    fn rank(configs: &[String], source: &[Vec<JobMeasure>], candidate: &[Vec<JobMeasure>]) -> RankingOutcome {
        let policy = AnalysisPolicy {
            tie_policy: TiePolicy::Interval,
            min_effect_pct: 2.0,
            delta_pct: 5.0,
            bootstrap_resamples: 2000,
            bootstrap_seed: 1,
        };
        ranking_check(&Paired { configs, source, candidate, controls: &[] }, &policy, "test").unwrap()
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
        let quiet = |a: f64| {
            vec![
                pass_jobs(&[a, a * 1.01, a * 0.99, a * 1.02, a, a * 0.98]),
                pass_jobs(&[2.9, 2.93, 2.88, 2.9, 2.95, 2.87]),
                pass_jobs(&[11.6; 6]),
            ]
        };
        let cand = quiet(2.54);
        let RankingOutcome { check: chk, cost, undecided, .. } = rank(&configs, &src, &cand);
        assert!(chk.passed && chk.measured.contains("(unconfirmed): a vs b"), "{chk:?}");
        assert!(cost.unwrap().candidate_rounds.is_some(), "the candidate reaches the source's decided pairs");
        assert_eq!(undecided, None, "a check that held is not undecided");
        // a tight source that cannot separate a from b, and a candidate that puts a 20% ahead
        let tight_a = [700.0, 702.0, 698.0, 701.0, 699.0, 700.5];
        let tight_b = [701.0, 699.0, 700.0, 702.0, 700.0, 699.5];
        let src = vec![pass_jobs(&tight_a), pass_jobs(&tight_b), pass_jobs(&[2800.0; 6])];
        let cand = quiet(2.32);
        let RankingOutcome { check: chk, undecided, .. } = rank(&configs, &src, &cand);
        assert!(!chk.passed && chk.measured.contains("outside the other side's interval: a vs b"), "{chk:?}");
        assert_eq!(
            undecided, None,
            "a pair decided outside the other side's interval is a disagreement, not undecided"
        );
        // the other way round: a source that decides a ahead, a noisier candidate that cannot tell
        // (the same trace on a busier machine): not reached in these rounds, not failed
        let src = vec![
            pass_jobs(&[700.0, 702.0, 698.0, 701.0, 699.0, 700.5]),
            pass_jobs(&[800.0, 801.0, 799.0, 802.0, 800.0, 798.0]),
            pass_jobs(&[3200.0; 6]),
        ];
        let cand = vec![pass_jobs(&noisy_a), pass_jobs(&noisy_b), pass_jobs(&bad)];
        let RankingOutcome { check: chk, cost, undecided, .. } = rank(&configs, &src, &cand);
        assert!(chk.passed && chk.measured.contains("(not reached in these rounds): a vs b"), "{chk:?}");
        assert_eq!(cost.unwrap().candidate_rounds, None, "the candidate never decides every pair the source decides");
        assert_eq!(undecided, None);
        // but one that decides none of the source's pairs alike fails
        let flat = vec![pass_jobs(&noisy_a), pass_jobs(&noisy_b), pass_jobs(&noisy_a)];
        let RankingOutcome { check: chk, undecided, .. } = rank(&configs, &src, &flat);
        assert!(!chk.passed && chk.measured.contains(" 0 decided alike"), "{chk:?}");
        // it decides a and b against bad outside the candidate's intervals: a disagreement, not undecided
        assert_eq!(undecided, None, "{chk:?}");
        // a candidate too noisy in these rounds to decide the source's one pair, whose interval holds the
        // source's estimate: failed for want of a decision alone, said apart with the noisy side's spread
        let two = &configs[..2];
        let (src2, noisy2) = (src[..2].to_vec(), vec![pass_jobs(&noisy_a), pass_jobs(&noisy_b)]);
        let RankingOutcome { check: chk, undecided, .. } = rank(two, &src2, &noisy2);
        assert!(!chk.passed && chk.measured.contains("(not reached in these rounds): a vs b"), "{chk:?}");
        let u = undecided.expect("no contradiction and nothing decided outside an interval: undecided");
        assert!(u.reason.contains("decided none of the 1 pair(s) the source decided"), "{u:?}");
        assert!(u.job_spread_log_sd > 0.2, "its rounds vary by 1.7x: {u:?}");
        // a candidate that contradicts the source's decided pair is wrong, never undecided, however noisy
        let swapped = vec![pass_jobs(&[3200.0; 6]), pass_jobs(&noisy_b), pass_jobs(&[700.0; 6])];
        let RankingOutcome { check: chk, undecided, .. } = rank(&configs, &src, &swapped);
        assert!(!chk.passed && !chk.measured.contains("contradictions: none"), "{chk:?}");
        assert_eq!(undecided, None, "{chk:?}");
    }

    /// A source that decides no pair (identical configurations, two or
    /// three of them, quiet or noisy) has no decision and no decision cost,
    /// whatever the candidate decides.
    #[test]
    fn no_decision_on_the_source_has_no_cost() {
        let noisy = [617.0, 600.0, 664.0, 1049.0, 1069.0, 641.0];
        let quiet = [700.0, 702.0, 698.0, 701.0, 699.0, 700.5];
        for (n, base) in [(2usize, &noisy), (3, &noisy), (2, &quiet), (3, &quiet)] {
            let configs: Vec<String> = (0..n).map(|i| format!("c{i}")).collect();
            let src: Vec<Vec<JobMeasure>> = (0..n).map(|_| pass_jobs(base)).collect();
            let cand: Vec<Vec<JobMeasure>> = (0..n).map(|i| pass_jobs(&[2.0 + i as f64; 6])).collect();
            let RankingOutcome { check: chk, cost, undecided, .. } = rank(&configs, &src, &cand);
            assert!(!chk.passed && chk.measured.contains("no decision to preserve"), "{chk:?}");
            assert!(cost.is_none(), "{n} configurations: no decision, no cost: {cost:?}");
            // the candidate decides pairs far outside the source's intervals: not merely undecided
            assert_eq!(undecided, None, "{chk:?}");
            // the source against itself: nothing decided on either side, said apart with a spread that
            // tells a quiet source (every round alike) from a noisy one
            let RankingOutcome { check: chk, undecided, .. } = rank(&configs, &src, &src);
            assert!(!chk.passed, "{chk:?}");
            let u = undecided.expect("the source decided nothing: undecided");
            assert!(u.reason.contains("the source decided no pair"), "{u:?}");
            assert_eq!(u.job_spread_log_sd > 0.2, base == &noisy, "{u:?}");
        }
    }
}
