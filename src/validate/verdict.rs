//! Verdicts of `validate`, free of I/O: a node-under-test's rounds against a
//! recorded reference's rounds, under a threshold declared by the site.
//!
//! Consumes, per check, one statistic per round from the node under test and
//! from the reference (over the reference's jobs for [`job_check`]). Produces
//! an interval of the ratio node/reference and a pass, fail or inconclusive
//! verdict against the site threshold, with the rounds or reference jobs that
//! would resolve an inconclusive one. Refuses: fewer than 2 pairs, values that
//! are not finite and positive.
//!
//! Method: docs/METHODS.md, "Validate verdicts".
use crate::analysis::inference::{paired, t_quantile, MAX_ROUNDS};
use anyhow::Result;
use serde::{Deserialize, Serialize};

/// A check's verdict.
#[derive(schemars::JsonSchema, Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
#[serde(rename_all = "kebab-case")]
pub enum CheckVerdict {
    /// Within the site's threshold across the interval.
    Pass,
    /// Insufficient evidence: the interval straddles the threshold, or a reading is missing.
    Inconclusive,
    /// Beyond the threshold across the interval, or a health finding.
    Fail,
}

impl CheckVerdict {
    /// The word printed.
    pub fn word(self) -> &'static str {
        match self {
            CheckVerdict::Pass => "pass",
            CheckVerdict::Fail => "fail",
            CheckVerdict::Inconclusive => "inconclusive",
        }
    }

    /// Exit code of a validation with this overall verdict.
    pub fn exit_code(self) -> i32 {
        match self {
            CheckVerdict::Pass => 0,
            CheckVerdict::Fail => 1,
            CheckVerdict::Inconclusive => 2,
        }
    }
}

/// The overall verdict: any fail fails, else any inconclusive, else pass.
pub(crate) fn overall(verdicts: impl IntoIterator<Item = CheckVerdict>) -> CheckVerdict {
    verdicts.into_iter().max().unwrap_or(CheckVerdict::Inconclusive)
}

/// Which side of the threshold is good.
#[derive(schemars::JsonSchema, Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq)]
#[serde(rename_all = "kebab-case")]
pub enum Direction {
    /// The ratio must be at least the threshold (bandwidth).
    AtLeast,
    /// The ratio must be at most the threshold (latency).
    AtMost,
}

/// How a ratio check's interval was formed.
#[derive(schemars::JsonSchema, Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq)]
#[serde(rename_all = "kebab-case")]
pub enum IntervalMethod {
    /// Student-t interval of the mean per-round log-ratio (a reference of one job): round-to-round variation only.
    PairedRounds,
    /// Prediction interval of a new job's mean from the reference's K job means: job-to-job variation included.
    JobPrediction,
}

/// The ratio node/reference of one check, its interval and verdict.
#[derive(schemars::JsonSchema, Serialize, Deserialize, Clone, Debug, PartialEq)]
pub struct RatioCheck {
    /// How the interval was formed.
    pub method: IntervalMethod,
    /// Jobs in the reference.
    pub reference_jobs: usize,
    /// Whether the interval carries job-to-job variation (false for a reference of one job).
    pub job_variation: bool,
    /// Rounds compared per job: paired rounds (one job), or the rounds each job mean is taken over.
    pub pairs: usize,
    /// exp(mean per-round log-ratio): the typical ratio node/reference.
    pub ratio: f64,
    /// Low end of the Student-t interval of the ratio.
    pub ratio_low: f64,
    /// High end.
    pub ratio_high: f64,
    /// Nominal two-sided coverage of the interval.
    pub coverage: f64,
    /// Paired rounds: sample standard deviation of the per-round log-ratios;
    /// job prediction: of the reference's job means (log scale), s_J.
    pub sd_log: f64,
    /// Job prediction: pooled standard deviation of the log statistic between
    /// rounds within the reference's jobs (σ_w), to compare with `sd_log`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sd_log_within_jobs: Option<f64>,
    /// Job prediction: the standard deviation of one job's mean the interval
    /// used, max(s_J, σ_w/√n) (see the module documentation). Absent for
    /// paired rounds and in reports before it was kept.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sd_log_job_mean: Option<f64>,
    /// The site's threshold ratio.
    pub threshold: f64,
    /// Which side of the threshold passes.
    pub direction: Direction,
    /// The verdict under the rule of the module documentation.
    pub verdict: CheckVerdict,
    /// Inconclusive only: rounds that would resolve it at the measured mean and
    /// spread; `None` when the mean sits on the threshold or more than the
    /// largest count the tool suggests would be needed.
    pub rounds_to_resolve: Option<u32>,
    /// Job prediction, inconclusive only: reference jobs that would resolve it at
    /// the measured mean and spread; `None` when no number of jobs would.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub jobs_to_resolve: Option<u32>,
    /// The verdict before the cap of a single-job reference (a FAIL reported INCONCLUSIVE).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub capped_from: Option<CheckVerdict>,
}

fn judge(lo: f64, hi: f64, threshold: f64, direction: Direction) -> CheckVerdict {
    match direction {
        Direction::AtLeast if lo >= threshold => CheckVerdict::Pass,
        Direction::AtLeast if hi < threshold => CheckVerdict::Fail,
        Direction::AtMost if hi <= threshold => CheckVerdict::Pass,
        Direction::AtMost if lo > threshold => CheckVerdict::Fail,
        _ => CheckVerdict::Inconclusive,
    }
}

/// Coverage of each of `checks` ratio checks judged as one family: a
/// validation FAILs when any check fails, so each is held at
/// 1 − (1 − `family`)/`checks` (Bonferroni), and an unchanged node FAILs
/// some check with probability at most (1 − `family`)/2 under the model
/// (each FAIL is one-sided).
pub fn check_coverage(family: f64, checks: usize) -> f64 {
    1.0 - (1.0 - family) / checks.max(1) as f64
}

/// Largest reference job count [`jobs_to_resolve`] suggests.
pub(crate) const MAX_JOBS: u32 = 100;

/// Compare one job of `node` rounds with a reference of several jobs, each a
/// list of its rounds' statistics, by the prediction interval of a new job
/// (see the module documentation). Refuses fewer than 2 reference jobs,
/// fewer than 2 rounds in some job, and values that are not finite and positive.
pub fn job_check(
    node: &[f64],
    reference_jobs: &[Vec<f64>],
    threshold: f64,
    direction: Direction,
    coverage: f64,
) -> Result<RatioCheck> {
    if !(threshold.is_finite() && threshold > 0.0) {
        anyhow::bail!("threshold ratio {threshold} is not a positive number");
    }
    if !(0.0 < coverage && coverage < 1.0) {
        anyhow::bail!("coverage {coverage} is not in (0, 1)");
    }
    let k = reference_jobs.len();
    if k < 2 {
        anyhow::bail!("a prediction interval over jobs needs at least 2 reference jobs, got {k}");
    }
    let n = reference_jobs.iter().map(Vec::len).chain([node.len()]).min().unwrap_or(0);
    if n < 2 {
        anyhow::bail!("every job compared needs at least 2 rounds, one has {n}");
    }
    let logs = |v: &[f64]| -> Result<Vec<f64>> {
        v[..n]
            .iter()
            .map(|x| {
                if x.is_finite() && *x > 0.0 {
                    Ok(x.ln())
                } else {
                    anyhow::bail!("value {x} is not finite and positive")
                }
            })
            .collect()
    };
    let mean = |v: &[f64]| v.iter().sum::<f64>() / v.len() as f64;
    let y = mean(&logs(node)?);
    let mut job_means = Vec::with_capacity(k);
    let (mut within_ss, mut within_df) = (0.0, 0usize);
    for j in reference_jobs {
        let l = logs(j)?;
        let m = mean(&l);
        within_ss += l.iter().map(|x| (x - m).powi(2)).sum::<f64>();
        within_df += l.len() - 1;
        job_means.push(m);
    }
    let mbar = mean(&job_means);
    let s_j = (job_means.iter().map(|m| (m - mbar).powi(2)).sum::<f64>() / (k - 1) as f64).sqrt();
    let s_w = (within_df > 0).then(|| (within_ss / within_df as f64).sqrt());
    // the variance of one job's mean, σ_b² + σ_w²/n, with σ_b² estimated
    // truncated at zero: never below what the rounds alone imply
    let s_mean = s_j.max(s_w.map_or(0.0, |w| w / (n as f64).sqrt()));
    let q = 1.0 - (1.0 - coverage) / 2.0;
    let half = t_quantile(q, (k - 1) as f64) * s_mean * (1.0 + 1.0 / k as f64).sqrt();
    let d = y - mbar;
    let (lo, hi) = ((d - half).exp(), (d + half).exp());
    let verdict = judge(lo, hi, threshold, direction);
    let gap = (d - threshold.ln()).abs();
    let jobs_to_resolve = (verdict == CheckVerdict::Inconclusive && gap > 0.0 && gap.is_finite())
        .then(|| {
            ((k as u32 + 1)..=MAX_JOBS)
                .find(|&kk| t_quantile(q, f64::from(kk - 1)) * s_mean * (1.0 + 1.0 / f64::from(kk)).sqrt() < gap)
        })
        .flatten();
    Ok(RatioCheck {
        method: IntervalMethod::JobPrediction,
        reference_jobs: k,
        job_variation: true,
        pairs: n,
        ratio: d.exp(),
        ratio_low: lo,
        ratio_high: hi,
        coverage,
        sd_log: s_j,
        sd_log_within_jobs: s_w,
        sd_log_job_mean: Some(s_mean),
        threshold,
        direction,
        verdict,
        rounds_to_resolve: None,
        jobs_to_resolve,
        capped_from: None,
    })
}

/// Compare `node` rounds with `reference` rounds of one job (see the module
/// documentation): the paired round interval, without the single-job cap
/// ([`single_job_check`] applies it).
pub fn ratio_check(
    node: &[f64],
    reference: &[f64],
    threshold: f64,
    direction: Direction,
    coverage: f64,
) -> Result<RatioCheck> {
    if !(threshold.is_finite() && threshold > 0.0) {
        anyhow::bail!("threshold ratio {threshold} is not a positive number");
    }
    let n = node.len().min(reference.len());
    let iv = paired(&node[..n], &reference[..n], coverage)?;
    let (lo, hi) = (1.0 + iv.ci_low_pct / 100.0, 1.0 + iv.ci_high_pct / 100.0);
    let verdict = judge(lo, hi, threshold, direction);
    let rounds_to_resolve = (verdict == CheckVerdict::Inconclusive)
        .then(|| rounds_to_resolve(iv.mean_log(), iv.sd_log, threshold, coverage))
        .flatten();
    Ok(RatioCheck {
        method: IntervalMethod::PairedRounds,
        reference_jobs: 1,
        job_variation: false,
        pairs: n,
        ratio: 1.0 + iv.diff_pct / 100.0,
        ratio_low: lo,
        ratio_high: hi,
        coverage,
        sd_log: iv.sd_log,
        sd_log_within_jobs: None,
        sd_log_job_mean: None,
        threshold,
        direction,
        verdict,
        rounds_to_resolve,
        jobs_to_resolve: None,
        capped_from: None,
    })
}

/// [`ratio_check`] for a reference of a single job: a FAIL is reported as
/// INCONCLUSIVE (`capped_from`), since the interval cannot carry job-to-job variation.
pub fn single_job_check(
    node: &[f64],
    reference: &[f64],
    threshold: f64,
    direction: Direction,
    coverage: f64,
) -> Result<RatioCheck> {
    let mut c = ratio_check(node, reference, threshold, direction, coverage)?;
    if c.verdict == CheckVerdict::Fail {
        c.capped_from = Some(CheckVerdict::Fail);
        c.verdict = CheckVerdict::Inconclusive;
    }
    Ok(c)
}

/// Smallest n ≥ 2 whose interval half-width at spread `sd_log` is below the
/// distance from `mean_log` to ln `threshold`.
pub(crate) fn rounds_to_resolve(mean_log: f64, sd_log: f64, threshold: f64, coverage: f64) -> Option<u32> {
    let gap = (mean_log - threshold.ln()).abs();
    if gap == 0.0 || !sd_log.is_finite() || !gap.is_finite() {
        return None;
    }
    if sd_log == 0.0 {
        return Some(2);
    }
    (2..=MAX_ROUNDS)
        .find(|&n| t_quantile(1.0 - (1.0 - coverage) / 2.0, (n - 1) as f64) * sd_log / (n as f64).sqrt() < gap)
}

/// Geometric mean of positive values; `None` for an empty slice or a value that is not finite and positive.
pub(crate) fn geometric_mean(v: &[f64]) -> Option<f64> {
    if v.is_empty() || v.iter().any(|x| !(x.is_finite() && *x > 0.0)) {
        return None;
    }
    Some((v.iter().map(|x| x.ln()).sum::<f64>() / v.len() as f64).exp())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bandwidth_well_above_threshold_passes_and_far_below_fails_but_not_against_a_single_job_reference() {
        let reference = [100.0, 102.0, 98.0, 101.0, 99.0];
        let same = [99.0, 101.0, 100.0, 98.5, 101.5];
        let c = ratio_check(&same, &reference, 0.95, Direction::AtLeast, 0.95).unwrap();
        assert_eq!(c.verdict, CheckVerdict::Pass, "{c:?}");
        let slow = [50.0, 51.0, 49.0, 50.5, 49.5];
        let c = ratio_check(&slow, &reference, 0.95, Direction::AtLeast, 0.95).unwrap();
        assert_eq!(c.verdict, CheckVerdict::Fail, "{c:?}");
        assert!((c.ratio - 0.5).abs() < 0.02);
        // a single-job reference never fails a ratio: the FAIL is reported inconclusive
        let c = single_job_check(&slow, &reference, 0.95, Direction::AtLeast, 0.95).unwrap();
        assert_eq!(
            (c.verdict, c.capped_from, c.job_variation),
            (CheckVerdict::Inconclusive, Some(CheckVerdict::Fail), false)
        );
        let c = single_job_check(&same, &reference, 0.95, Direction::AtLeast, 0.95).unwrap();
        assert_eq!((c.verdict, c.capped_from), (CheckVerdict::Pass, None));
    }

    #[test]
    fn latency_rule_is_the_mirror_image() {
        let reference = [10.0, 10.2, 9.9, 10.1];
        let c = ratio_check(&[10.0, 10.1, 10.0, 9.9], &reference, 1.05, Direction::AtMost, 0.95).unwrap();
        assert_eq!(c.verdict, CheckVerdict::Pass, "{c:?}");
        let c = ratio_check(&[30.0, 31.0, 29.0, 30.5], &reference, 1.05, Direction::AtMost, 0.95).unwrap();
        assert_eq!(c.verdict, CheckVerdict::Fail, "{c:?}");
    }

    #[test]
    fn a_straddling_interval_is_inconclusive_and_says_how_many_rounds() {
        // ratio near 0.93 with a spread that straddles 0.95 at 3 pairs
        let reference = [100.0, 100.0, 100.0];
        let node = [88.0, 99.0, 93.0];
        let c = ratio_check(&node, &reference, 0.95, Direction::AtLeast, 0.95).unwrap();
        assert_eq!(c.verdict, CheckVerdict::Inconclusive, "{c:?}");
        let n = c.rounds_to_resolve.expect("a finite count");
        assert!(n > 3, "{n}");
        // at that many rounds with the same mean and spread, the half-width is below the gap
        let half = t_quantile(0.975, (n - 1) as f64) * c.sd_log / (n as f64).sqrt();
        assert!(half < (c.ratio.ln() - 0.95f64.ln()).abs());
    }

    #[test]
    fn refuses_one_pair_and_non_positive_values() {
        assert!(ratio_check(&[1.0], &[1.0], 0.95, Direction::AtLeast, 0.95).is_err());
        assert!(ratio_check(&[1.0, 0.0], &[1.0, 1.0], 0.95, Direction::AtLeast, 0.95).is_err());
        assert!(ratio_check(&[1.0, 1.0], &[1.0, 1.0], 0.0, Direction::AtLeast, 0.95).is_err());
    }

    #[test]
    fn job_prediction_interval_carries_the_job_spread() {
        // three reference jobs whose rounds agree tightly but whose means differ by ~20%
        let jobs =
            vec![vec![100.0, 101.0, 99.0, 100.0], vec![120.0, 121.0, 119.0, 120.0], vec![85.0, 86.0, 84.0, 85.0]];
        // a node job at 0.8 of the middle: the round interval alone would call it a FAIL
        let node = [80.0, 81.0, 79.0, 80.0];
        let paired = ratio_check(&node, &jobs[0], 0.95, Direction::AtLeast, 0.95).unwrap();
        assert_eq!(paired.verdict, CheckVerdict::Fail, "{paired:?}");
        let c = job_check(&node, &jobs, 0.95, Direction::AtLeast, 0.95).unwrap();
        assert_eq!(c.verdict, CheckVerdict::Inconclusive, "{c:?}");
        assert_eq!((c.method, c.reference_jobs, c.pairs, c.job_variation), (IntervalMethod::JobPrediction, 3, 4, true));
        assert!(c.sd_log > 5.0 * c.sd_log_within_jobs.unwrap(), "{c:?}");
        // the half-width is t_{0.975,2} s_J sqrt(1 + 1/3): the job spread is above the rounds' floor
        assert_eq!(c.sd_log_job_mean, Some(c.sd_log));
        let half = t_quantile(0.975, 2.0) * c.sd_log * (4.0f64 / 3.0).sqrt();
        assert!((c.ratio_high.ln() - c.ratio.ln() - half).abs() < 1e-12);
        // a node far below every job fails; one inside passes a loose threshold
        let slow = [20.0, 20.5, 19.5, 20.0];
        assert_eq!(job_check(&slow, &jobs, 0.95, Direction::AtLeast, 0.95).unwrap().verdict, CheckVerdict::Fail);
        assert_eq!(
            job_check(&[100.0, 100.0, 101.0], &jobs, 0.2, Direction::AtLeast, 0.95).unwrap().verdict,
            CheckVerdict::Pass
        );
        // each job mean is over the fewest rounds any job compared has (3 here)
        assert_eq!(job_check(&[100.0, 100.0, 101.0], &jobs, 0.2, Direction::AtLeast, 0.95).unwrap().pairs, 3);
        assert!(c.jobs_to_resolve.is_none() || c.jobs_to_resolve.unwrap() > 3);
        assert!(job_check(&node, &jobs[..1], 0.95, Direction::AtLeast, 0.95).is_err(), "one job has no job spread");
        assert!(job_check(&[1.0], &jobs, 0.95, Direction::AtLeast, 0.95).is_err());
    }

    #[test]
    fn job_means_that_agree_by_chance_do_not_narrow_the_interval_below_the_rounds() {
        // three jobs whose means agree closely while their rounds spread by ~10%
        let jobs =
            vec![vec![90.0, 110.0, 100.0, 100.0], vec![110.0, 90.0, 100.0, 100.5], vec![100.0, 100.0, 90.5, 110.0]];
        let c = job_check(&[100.0, 95.0, 105.0, 100.0], &jobs, 0.95, Direction::AtLeast, 0.95).unwrap();
        let w = c.sd_log_within_jobs.unwrap();
        assert!(c.sd_log < w / 2.0 / 2.0, "the job means agree far better than the rounds imply: {c:?}");
        // the interval uses s_w / sqrt(n), n = 4 rounds
        assert_eq!(c.sd_log_job_mean, Some(w / 2.0));
        let half = t_quantile(0.975, 2.0) * (w / 2.0) * (4.0f64 / 3.0).sqrt();
        assert!((c.ratio_high.ln() - c.ratio.ln() - half).abs() < 1e-12, "{c:?}");
    }

    /// One simulated job of an unchanged node, 6 rounds around 100 on the log
    /// scale: a job effect N(0, sd_job) shared by its rounds, plus round noise
    /// N(0, sd_round) each.
    fn simulated_job(rng: &mut rand_chacha::ChaCha8Rng, sd_job: f64, sd_round: f64) -> Vec<f64> {
        use rand_distr::{Distribution, Normal};
        let job: f64 = Normal::new(0.0, sd_job).unwrap().sample(rng);
        let round = Normal::new(0.0, sd_round).unwrap();
        (0..6).map(|_| (job + round.sample(rng)).exp() * 100.0).collect()
    }

    #[test]
    fn the_three_checks_share_one_family_level() {
        assert!((check_coverage(0.95, 3) - (1.0 - 0.05 / 3.0)).abs() < 1e-15);
        assert_eq!(check_coverage(0.9, 1), 0.9);
        // simulated unchanged node, three independent checks per validation, a
        // small job effect (sd 0.02) under round noise (sd 0.1), 3 reference jobs
        // of 6 rounds: s_J alone often falls far below the job mean's spread
        use rand::SeedableRng;
        let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(7);
        let job = |rng: &mut rand_chacha::ChaCha8Rng| simulated_job(rng, 0.02, 0.1);
        let trials = 3000;
        let mut fails = 0;
        for _ in 0..trials {
            let failed = (0..3).any(|_| {
                let reference: Vec<Vec<f64>> = (0..3).map(|_| job(&mut rng)).collect();
                let node = job(&mut rng);
                job_check(&node, &reference, 1.0, Direction::AtLeast, check_coverage(0.95, 3)).unwrap().verdict
                    == CheckVerdict::Fail
            });
            fails += usize::from(failed);
        }
        let rate = fails as f64 / trials as f64;
        // nominal at most (1 - 0.95)/2 = 2.5% per validation
        assert!(rate < 0.035, "validation false-fail rate {rate}");
    }

    #[test]
    fn job_prediction_false_fail_rate_is_at_most_half_the_miss() {
        // simulated unchanged node: job effect sd 0.3, round sd 0.05 (log scale), 3 reference jobs of 6 rounds
        use rand::SeedableRng;
        let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(31);
        let job = |rng: &mut rand_chacha::ChaCha8Rng| simulated_job(rng, 0.3, 0.05);
        let trials = 4000;
        let (mut fails_job, mut fails_round) = (0, 0);
        for _ in 0..trials {
            let reference: Vec<Vec<f64>> = (0..3).map(|_| job(&mut rng)).collect();
            let node = job(&mut rng);
            let fails = |c: RatioCheck| usize::from(c.verdict == CheckVerdict::Fail);
            fails_job += fails(job_check(&node, &reference, 1.0, Direction::AtLeast, 0.95).unwrap());
            fails_round += fails(ratio_check(&node, &reference[0], 1.0, Direction::AtLeast, 0.95).unwrap());
        }
        let (fj, fr) = (fails_job as f64 / trials as f64, fails_round as f64 / trials as f64);
        // nominal (1 - 0.95)/2 = 2.5% for the job interval; the round interval cries wolf about half the time
        assert!(fj < 0.035, "job prediction false-fail rate {fj}");
        assert!(fr > 0.3, "paired round interval false-fail rate {fr}");
    }

    #[test]
    fn overall_takes_the_worst() {
        use CheckVerdict::*;
        assert_eq!(overall([Pass, Inconclusive, Pass]), Inconclusive);
        assert_eq!(overall([Pass, Fail, Inconclusive]), Fail);
        assert_eq!(overall([Pass, Pass]), Pass);
        assert_eq!(geometric_mean(&[1.0, 4.0]), Some(2.0));
        assert_eq!(geometric_mean(&[1.0, 0.0]), None);
    }
}
