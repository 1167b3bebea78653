//! Verdicts of `validate`, free of I/O: a node-under-test's rounds against a
//! recorded reference's rounds, under a threshold declared by the site.
//!
//! Consumes, per check, one statistic per round from the node under test
//! and one per round from the reference (for bandwidth: the geometric mean
//! of busbw over the sweep's sizes; for the workload: the slowest rank's
//! median per-token latency). Produces an interval of the ratio
//! node/reference and a verdict against the site threshold. Refuses: fewer
//! than 2 pairs, values that are not finite and positive.
//!
//! Method. Round i of the node under test is paired with round i of the
//! reference and the per-round log-ratio d_i = ln(x_test,i / x_ref,i) is
//! formed; the interval is the Student-t interval of the mean of d_i with
//! n − 1 degrees of freedom (Student, "The probable error of a mean",
//! Biometrika 1908; [`crate::analysis::inference::interval_of_logs`], the interval every
//! campaign claim uses), reported as a ratio exp(·). The reference node is
//! elsewhere and was measured earlier, so no round shares its conditions
//! with a round of the reference: the pairing removes nothing. The interval
//! is valid under the stated assumption that rounds are exchangeable within
//! each node (each round's statistic an independent draw of that node's
//! round distribution); then d_i are independent with the mean of interest
//! and a variance the sample variance of d_i estimates (the sum of the two
//! nodes' round variances). Drift of either node over time, or a reference
//! taken under different load, breaks the assumption and is not detected.
//!
//! Rule (one-sided thresholds; `t` is the threshold ratio):
//! - at least `t` (bandwidth): pass when the interval's low end ≥ t, fail
//!   when its high end < t, otherwise inconclusive;
//! - at most `t` (latency): pass when the high end ≤ t, fail when the low end
//!   > t, otherwise inconclusive.
//!
//! With a node identical to the reference, each of pass-or-inconclusive
//! holds with probability at least (1 + coverage)/2 for a threshold at or
//! beyond ratio 1. An inconclusive check says how many rounds would, at the
//! measured spread and mean, bring the interval's half-width below the
//! distance to the threshold: the smallest n ≥ 2 with
//! t_{1−α/2, n−1} · s / √n < |mean − ln t| (the precision-based sample size
//! of e.g. Julious, "Sample Sizes for Clinical Trials", 2010, §3.2).
use crate::analysis::inference::{interval_of_logs, log_ratios, t_quantile, MAX_ROUNDS};
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
pub fn overall(verdicts: impl IntoIterator<Item = CheckVerdict>) -> CheckVerdict {
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

/// The ratio node/reference of one check, its interval and verdict.
#[derive(schemars::JsonSchema, Serialize, Deserialize, Clone, Debug, PartialEq)]
pub struct RatioCheck {
    /// Rounds paired (the smaller of the two round counts).
    pub pairs: usize,
    /// exp(mean per-round log-ratio): the typical ratio node/reference.
    pub ratio: f64,
    /// Low end of the Student-t interval of the ratio.
    pub ratio_low: f64,
    /// High end.
    pub ratio_high: f64,
    /// Nominal two-sided coverage of the interval.
    pub coverage: f64,
    /// Sample standard deviation of the per-round log-ratios.
    pub sd_log: f64,
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
}

/// Compare `node` rounds with `reference` rounds (see the module documentation).
pub fn ratio_check(node: &[f64], reference: &[f64], threshold: f64, direction: Direction, coverage: f64) -> Result<RatioCheck> {
    if !(threshold.is_finite() && threshold > 0.0) {
        anyhow::bail!("threshold ratio {threshold} is not a positive number");
    }
    let n = node.len().min(reference.len());
    let d = log_ratios(&node[..n], &reference[..n])?;
    let iv = interval_of_logs(&d, coverage)?;
    let (lo, hi) = (1.0 + iv.ci_low_pct / 100.0, 1.0 + iv.ci_high_pct / 100.0);
    let verdict = match direction {
        Direction::AtLeast if lo >= threshold => CheckVerdict::Pass,
        Direction::AtLeast if hi < threshold => CheckVerdict::Fail,
        Direction::AtMost if hi <= threshold => CheckVerdict::Pass,
        Direction::AtMost if lo > threshold => CheckVerdict::Fail,
        _ => CheckVerdict::Inconclusive,
    };
    let rounds_to_resolve = (verdict == CheckVerdict::Inconclusive).then(|| rounds_to_resolve(iv.mean_log(), iv.sd_log, threshold, coverage)).flatten();
    Ok(RatioCheck {
        pairs: n,
        ratio: 1.0 + iv.diff_pct / 100.0,
        ratio_low: lo,
        ratio_high: hi,
        coverage,
        sd_log: iv.sd_log,
        threshold,
        direction,
        verdict,
        rounds_to_resolve,
    })
}

/// Smallest n ≥ 2 whose interval half-width at spread `sd_log` is below the
/// distance from `mean_log` to ln `threshold`.
pub fn rounds_to_resolve(mean_log: f64, sd_log: f64, threshold: f64, coverage: f64) -> Option<u32> {
    let gap = (mean_log - threshold.ln()).abs();
    if gap == 0.0 || !sd_log.is_finite() || !gap.is_finite() {
        return None;
    }
    if sd_log == 0.0 {
        return Some(2);
    }
    (2..=MAX_ROUNDS).find(|&n| t_quantile(1.0 - (1.0 - coverage) / 2.0, (n - 1) as f64) * sd_log / (n as f64).sqrt() < gap)
}

/// Geometric mean of positive values; `None` for an empty slice or a value that is not finite and positive.
pub fn geometric_mean(v: &[f64]) -> Option<f64> {
    if v.is_empty() || v.iter().any(|x| !(x.is_finite() && *x > 0.0)) {
        return None;
    }
    Some((v.iter().map(|x| x.ln()).sum::<f64>() / v.len() as f64).exp())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bandwidth_well_above_threshold_passes_and_far_below_fails() {
        let reference = [100.0, 102.0, 98.0, 101.0, 99.0];
        let same = [99.0, 101.0, 100.0, 98.5, 101.5];
        let c = ratio_check(&same, &reference, 0.95, Direction::AtLeast, 0.95).unwrap();
        assert_eq!(c.verdict, CheckVerdict::Pass, "{c:?}");
        let slow = [50.0, 51.0, 49.0, 50.5, 49.5];
        let c = ratio_check(&slow, &reference, 0.95, Direction::AtLeast, 0.95).unwrap();
        assert_eq!(c.verdict, CheckVerdict::Fail, "{c:?}");
        assert!((c.ratio - 0.5).abs() < 0.02);
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
    fn overall_takes_the_worst() {
        use CheckVerdict::*;
        assert_eq!(overall([Pass, Inconclusive, Pass]), Inconclusive);
        assert_eq!(overall([Pass, Fail, Inconclusive]), Fail);
        assert_eq!(overall([Pass, Pass]), Pass);
        assert_eq!(geometric_mean(&[1.0, 4.0]), Some(2.0));
        assert_eq!(geometric_mean(&[1.0, 0.0]), None);
    }
}
