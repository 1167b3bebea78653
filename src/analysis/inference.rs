//! Inference over rounds, free of I/O: the intervals, verdicts, rank
//! probabilities and round counts every campaign claim is made from.
//!
//! Consumes a rounds × configurations table of per-job statistics (one job per
//! configuration per round). Produces [`paired`] intervals of the per-round
//! log-ratio, their [`simultaneous_coverage`] level, the one decision rule
//! [`decide`], [`rank_probabilities`], and [`rounds_to_decide`] and
//! [`rounds_to_show_equivalence`]. Refuses: fewer than 2 rounds, rows of
//! unequal length, values that are not finite and positive.
//!
//! Method: docs/METHODS.md, "Inference over rounds".
use anyhow::{bail, Result};
use rand::{Rng, SeedableRng};
use rand_distr::{ChiSquared, Distribution, StandardNormal};
use serde::{Deserialize, Serialize};
use statrs::distribution::{ContinuousCDF, StudentsT};
use std::f64::consts;

/// Nominal coverage of every interval.
pub const COVERAGE: f64 = 0.95;

/// Target power of the round counts the tool suggests.
pub const POWER: f64 = 0.8;

/// Largest round count the tool will suggest (beyond it: "more than").
pub const MAX_ROUNDS: u32 = 1000;

/// Canary (and pairwise) verdict.
#[derive(schemars::JsonSchema, Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq)]
#[serde(rename_all = "kebab-case")]
pub enum Verdict {
    /// Candidate faster by more than the minimum effect, across the interval.
    Pass,
    /// Candidate slower by more than the minimum effect, across the interval.
    Fail,
    /// The interval lies within ± the minimum effect (equivalent).
    Tied,
    /// None of the above.
    InsufficientEvidence,
}

impl Verdict {
    /// The word printed and stored.
    pub fn word(self) -> &'static str {
        match self {
            Verdict::Pass => "pass",
            Verdict::Fail => "fail",
            Verdict::Tied => "tied",
            Verdict::InsufficientEvidence => "insufficient-evidence",
        }
    }
}

/// Level of each of `family` intervals that hold together at `coverage`
/// (Bonferroni–Dunn; see the module documentation). A family of 0 or 1 is
/// one interval at `coverage`.
pub fn simultaneous_coverage(coverage: f64, family: usize) -> f64 {
    1.0 - (1.0 - coverage) / family.max(1) as f64
}

/// The one decision rule (see the module documentation).
pub fn decide(lo_pct: f64, hi_pct: f64, min_effect_pct: f64) -> Verdict {
    if hi_pct < -min_effect_pct {
        Verdict::Pass
    } else if lo_pct > min_effect_pct {
        Verdict::Fail
    } else if lo_pct >= -min_effect_pct && hi_pct <= min_effect_pct {
        Verdict::Tied
    } else {
        Verdict::InsufficientEvidence
    }
}

/// Student-t quantile with `df` degrees of freedom.
pub(crate) fn t_quantile(p: f64, df: f64) -> f64 {
    StudentsT::new(0.0, 1.0, df).map_or(f64::NAN, |t| t.inverse_cdf(p))
}

fn t_cdf(x: f64, df: f64) -> f64 {
    StudentsT::new(0.0, 1.0, df).map_or(f64::NAN, |t| t.cdf(x))
}

/// The paired interval of a against b.
#[derive(schemars::JsonSchema, Serialize, Deserialize, Clone, Debug, PartialEq)]
pub struct PairedInterval {
    /// Rounds paired.
    pub rounds: usize,
    /// 100·(exp(mean ln(a/b)) − 1): the typical per-round difference, percent of b.
    pub diff_pct: f64,
    /// Lower end of the Student-t interval, percent.
    pub ci_low_pct: f64,
    /// Upper end, percent.
    pub ci_high_pct: f64,
    /// Nominal coverage.
    pub coverage: f64,
    /// Sample standard deviation of the per-round log-ratios.
    pub sd_log: f64,
}

impl PairedInterval {
    /// Mean per-round log-ratio.
    pub fn mean_log(&self) -> f64 {
        (self.diff_pct / 100.0).ln_1p()
    }
    /// Standard error of the mean log-ratio.
    pub fn se_log(&self) -> f64 {
        self.sd_log / (self.rounds as f64).sqrt()
    }
    /// Posterior P(true log-ratio < x) under the flat prior of the t interval
    /// (the interval's one-sided confidence levels).
    pub fn p_below_pct(&self, x_pct: f64) -> f64 {
        let x = (x_pct / 100.0).ln_1p();
        let se = self.se_log();
        if se == 0.0 {
            return if self.mean_log() < x { 1.0 } else { 0.0 };
        }
        t_cdf((x - self.mean_log()) / se, self.rounds as f64 - 1.0)
    }
}

/// Per-round log-ratios ln(a_r / b_r).
pub(crate) fn log_ratios(a: &[f64], b: &[f64]) -> Result<Vec<f64>> {
    if a.len() != b.len() {
        bail!("paired rounds differ in number ({} and {})", a.len(), b.len());
    }
    if let Some(v) = a.iter().chain(b).find(|v| !(v.is_finite() && **v > 0.0)) {
        bail!("a log-ratio needs finite positive values, got {v}");
    }
    Ok(a.iter().zip(b).map(|(x, y)| (x / y).ln()).collect())
}

/// Student-t interval of the mean of `d` (log scale), reported in percent.
pub fn interval_of_logs(d: &[f64], coverage: f64) -> Result<PairedInterval> {
    let n = d.len();
    if n < 2 {
        bail!("an interval over rounds needs at least 2 rounds, got {n}");
    }
    if !(0.0 < coverage && coverage < 1.0) {
        bail!("coverage {coverage} is not in (0, 1)");
    }
    let mean = d.iter().sum::<f64>() / n as f64;
    let sd = (d.iter().map(|x| (x - mean).powi(2)).sum::<f64>() / (n - 1) as f64).sqrt();
    let half = t_quantile(1.0 - (1.0 - coverage) / 2.0, (n - 1) as f64) * sd / (n as f64).sqrt();
    let pct = |x: f64| x.exp_m1() * 100.0;
    Ok(PairedInterval {
        rounds: n,
        diff_pct: pct(mean),
        ci_low_pct: pct(mean - half),
        ci_high_pct: pct(mean + half),
        coverage,
        sd_log: sd,
    })
}

/// The paired interval of a against b over rounds (`a[r]`, `b[r]` from round r).
pub fn paired(a: &[f64], b: &[f64], coverage: f64) -> Result<PairedInterval> {
    interval_of_logs(&log_ratios(a, b)?, coverage)
}

fn pct_to_log(p: f64) -> f64 {
    (p / 100.0).ln_1p()
}

/// Smallest round count (≥ 2) at which a true difference of `effect_pct`
/// gets a decided verdict (beyond ± `min_effect_pct`) with probability
/// `power`, for per-round log-ratios of standard deviation `sd_log`.
/// `None`: never (the effect is within the minimum effect) or more than
/// [`MAX_ROUNDS`].
pub fn rounds_to_decide(sd_log: f64, effect_pct: f64, min_effect_pct: f64, coverage: f64, power: f64) -> Option<u32> {
    let e = pct_to_log(effect_pct);
    let thr = if effect_pct >= 0.0 { pct_to_log(min_effect_pct) } else { pct_to_log(-min_effect_pct) };
    let gap = (e - thr).abs();
    if effect_pct.abs() <= min_effect_pct || !sd_log.is_finite() || gap == 0.0 {
        return None;
    }
    if sd_log == 0.0 {
        return Some(2);
    }
    (2..=MAX_ROUNDS).find(|&n| {
        let df = (n - 1) as f64;
        (n as f64).sqrt() * gap / sd_log >= t_quantile(1.0 - (1.0 - coverage) / 2.0, df) + t_quantile(power, df)
    })
}

/// Approximate probability that `rounds` rounds decide a true difference of
/// `effect_pct` beyond ± `min_effect_pct` (the same approximation as
/// [`rounds_to_decide`]: the t distribution shifted by the standardized gap).
pub(crate) fn approx_power(sd_log: f64, effect_pct: f64, min_effect_pct: f64, coverage: f64, rounds: u32) -> f64 {
    let e = pct_to_log(effect_pct);
    let thr = if effect_pct >= 0.0 { pct_to_log(min_effect_pct) } else { pct_to_log(-min_effect_pct) };
    if effect_pct.abs() <= min_effect_pct || rounds < 2 {
        return 0.0;
    }
    if sd_log == 0.0 {
        return 1.0;
    }
    let df = (rounds - 1) as f64;
    t_cdf((rounds as f64).sqrt() * (e - thr).abs() / sd_log - t_quantile(1.0 - (1.0 - coverage) / 2.0, df), df)
}

/// Smallest round count at which two identical configurations come out
/// `tied` (interval within ± `min_effect_pct`) with probability `power`.
pub fn rounds_to_show_equivalence(sd_log: f64, min_effect_pct: f64, coverage: f64, power: f64) -> Option<u32> {
    let thr = pct_to_log(min_effect_pct).min(-pct_to_log(-min_effect_pct));
    if thr.is_nan() || thr <= 0.0 || !sd_log.is_finite() {
        return None;
    }
    if sd_log == 0.0 {
        return Some(2);
    }
    (2..=MAX_ROUNDS).find(|&n| {
        let df = (n - 1) as f64;
        (n as f64).sqrt() * thr / sd_log
            >= t_quantile(1.0 - (1.0 - coverage) / 2.0, df) + t_quantile(1.0 - (1.0 - power) / 2.0, df)
    })
}

/// Words for a suggested round count.
pub(crate) fn rounds_words(n: Option<u32>) -> String {
    match n {
        Some(n) => format!("{n} rounds"),
        None => format!("more than {MAX_ROUNDS} rounds (or never, for an effect within the minimum effect)"),
    }
}

/// P(best) and P(worst) per configuration.
#[derive(schemars::JsonSchema, Serialize, Deserialize, Clone, Debug, PartialEq)]
pub struct RankProbabilities {
    /// Posterior draws.
    pub draws: u32,
    /// Seed (ChaCha8).
    pub seed: u64,
    /// P(best) per configuration, input order (ties split evenly; sums to 1).
    pub p_best: Vec<f64>,
    /// P(worst) per configuration.
    pub p_worst: Vec<f64>,
    /// Largest Monte Carlo standard error of any probability here.
    pub mc_se: f64,
    /// Minimum effect, percent, within which configurations tie for best or worst in a draw.
    #[serde(default)]
    pub equivalence_pct: f64,
    /// Posterior median of the between-configuration spread τ (log scale).
    pub tau_median: f64,
    /// Residual standard deviation of the two-way layout (log scale): the job noise that rounds do not explain.
    pub sigma_log: f64,
    /// Its degrees of freedom, (rounds − 1)(configurations − 1).
    pub sigma_df: u32,
}

/// Two-way decomposition of `ln table[r][c]`: (config means, residual SS, df).
pub(crate) fn two_way(table: &[Vec<f64>]) -> Result<(Vec<f64>, f64, u32)> {
    let n = table.len();
    if n < 2 {
        bail!("rank probabilities need at least 2 rounds, got {n}");
    }
    let k = table[0].len();
    if k == 0 || table.iter().any(|r| r.len() != k) {
        bail!("every round must hold one value per configuration");
    }
    if let Some(v) = table.iter().flatten().find(|v| !(v.is_finite() && **v > 0.0)) {
        bail!("the table holds {v}; the log scale needs finite positive values");
    }
    let y: Vec<Vec<f64>> = table.iter().map(|r| r.iter().map(|v| v.ln()).collect()).collect();
    let grand = y.iter().flatten().sum::<f64>() / (n * k) as f64;
    let row: Vec<f64> = y.iter().map(|r| r.iter().sum::<f64>() / k as f64).collect();
    let col: Vec<f64> = (0..k).map(|c| y.iter().map(|r| r[c]).sum::<f64>() / n as f64).collect();
    let rss: f64 = (0..n)
        .flat_map(|r| (0..k).map(move |c| (r, c)))
        .map(|(r, c)| (y[r][c] - row[r] - col[c] + grand).powi(2))
        .sum();
    Ok((col, rss, ((n - 1) * (k.max(1) - 1)) as u32))
}

/// Points of the τ grid.
const TAU_GRID: usize = 96;

/// Prior probability that every configuration is the same (τ = 0), when the
/// campaign has a minimum effect (even prior odds; module documentation).
pub const SPIKE_PRIOR: f64 = 0.5;

/// P(best)/P(worst) of `table[round][config]` (smaller is better) from
/// `draws` posterior draws of the hierarchical model, configurations within
/// `equivalence_pct` percent of the fastest (slowest) sharing best (worst)
/// in each draw (module documentation).
pub fn rank_probabilities(
    table: &[Vec<f64>],
    draws: u32,
    seed: u64,
    equivalence_pct: f64,
) -> Result<RankProbabilities> {
    if draws == 0 {
        bail!("draws must be at least 1");
    }
    if !(equivalence_pct.is_finite() && equivalence_pct >= 0.0) {
        bail!("the equivalence margin must be a finite non-negative percentage, got {equivalence_pct}");
    }
    let margin_log = (equivalence_pct / 100.0).ln_1p();
    let (mu_hat, rss, df) = two_way(table)?;
    let (n, k) = (table.len() as f64, mu_hat.len());
    let sigma_log = if df > 0 { (rss / df as f64).sqrt() } else { f64::NAN };
    if k == 1 {
        return Ok(RankProbabilities {
            draws,
            seed,
            p_best: vec![1.0],
            p_worst: vec![1.0],
            mc_se: 0.0,
            equivalence_pct,
            tau_median: 0.0,
            sigma_log,
            sigma_df: df,
        });
    }
    let kf = k as f64;
    let m_bar = mu_hat.iter().sum::<f64>() / kf;
    let s = mu_hat.iter().map(|m| (m - m_bar).powi(2)).sum::<f64>();
    let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(seed);
    let chi = ChiSquared::new(df as f64).map_err(|e| anyhow::anyhow!("χ² with {df} degrees of freedom: {e}"))?;
    let (mut best, mut worst) = (vec![0.0f64; k], vec![0.0f64; k]);
    let mut taus = Vec::with_capacity(draws as usize);
    let mut logp = vec![0.0f64; TAU_GRID];
    let mut weight = vec![0.0f64; TAU_GRID];
    let mut mu = vec![0.0f64; k];
    for _ in 0..draws {
        // σ² | residuals ~ scaled inverse-χ²
        let v = if rss > 0.0 { rss / chi.sample(&mut rng) / n } else { 0.0 };
        // half-Cauchy scale of the slab: the minimum effect, else this draw's job noise σ
        // (Jeffreys' Cauchy scale); none (a uniform τ, no spike) when the rounds agree exactly
        let prior_scale = if margin_log > 0.0 {
            margin_log
        } else if v > 0.0 {
            (v * n).sqrt()
        } else {
            f64::INFINITY
        };
        // τ | σ, config means: eq. 5.21 on a grid up to well past the observed spread
        // (and at least to the slab's scale, so that half its mass or more lies on the grid)
        let tau_max = (10.0 * (v + s / (kf - 1.0)).sqrt()).max(if prior_scale.is_finite() { prior_scale } else { 0.0 });
        let tau = if tau_max > 0.0 {
            // log marginal likelihood of τ (eq. 5.21, flat μ₀), up to a constant shared by every τ
            let lik = |t2: f64| {
                let w = v + t2;
                if w > 0.0 {
                    0.5 * (w / kf).ln() - 0.5 * kf * w.ln() - s / (2.0 * w)
                } else {
                    f64::NEG_INFINITY
                }
            };
            // slab: the prior mass of each grid cell (exact for the half-Cauchy, so a scale
            // narrower than a cell is not over- or under-weighted), times (1 − π₀)
            let step = tau_max / (TAU_GRID - 1) as f64;
            for (g, lp) in logp.iter_mut().enumerate() {
                let tg = step * g as f64;
                let mass = if prior_scale.is_finite() {
                    let cdf = |t: f64| consts::FRAC_2_PI * (t.max(0.0) / prior_scale).atan();
                    ((1.0 - SPIKE_PRIOR) * (cdf(tg + step / 2.0) - cdf(tg - step / 2.0))).ln()
                } else {
                    0.0
                };
                *lp = mass + lik(tg * tg);
            }
            // spike at τ = 0 (only with a proper slab: a uniform τ has no Bayes factor)
            let spike = if prior_scale.is_finite() { SPIKE_PRIOR.ln() + lik(0.0) } else { f64::NEG_INFINITY };
            let top = logp.iter().copied().fold(spike, f64::max);
            // each cell's weight once, summed and then walked (the same values in the same order)
            for (wt, l) in weight.iter_mut().zip(&logp) {
                *wt = (l - top).exp();
            }
            let total: f64 = weight.iter().copied().sum::<f64>() + (spike - top).exp();
            let mut u: f64 = rng.gen::<f64>() * total - (spike - top).exp();
            if u < 0.0 {
                0.0
            } else {
                let mut g = TAU_GRID - 1;
                for (i, wt) in weight.iter().enumerate() {
                    u -= wt;
                    if u <= 0.0 {
                        g = i;
                        break;
                    }
                }
                step * g as f64
            }
        } else {
            0.0
        };
        taus.push(tau);
        let t2 = tau * tau;
        let w = v + t2;
        let m = m_bar + (if w > 0.0 { (w / kf).sqrt() } else { 0.0 }) * rng.sample::<f64, _>(StandardNormal);
        for (c, out) in mu.iter_mut().enumerate() {
            *out = if t2 == 0.0 {
                m
            } else if v == 0.0 {
                mu_hat[c]
            } else {
                let mean = (mu_hat[c] * t2 + m * v) / w;
                mean + (v * t2 / w).sqrt() * rng.sample::<f64, _>(StandardNormal)
            };
        }
        let lo = mu.iter().copied().fold(f64::INFINITY, f64::min);
        let hi = mu.iter().copied().fold(f64::NEG_INFINITY, f64::max);
        let n_lo = mu.iter().filter(|&&x| x - lo <= margin_log).count() as f64;
        let n_hi = mu.iter().filter(|&&x| hi - x <= margin_log).count() as f64;
        for c in 0..k {
            if mu[c] - lo <= margin_log {
                best[c] += 1.0 / n_lo;
            }
            if hi - mu[c] <= margin_log {
                worst[c] += 1.0 / n_hi;
            }
        }
    }
    let d = draws as f64;
    let p_best: Vec<f64> = best.into_iter().map(|b| b / d).collect();
    let p_worst: Vec<f64> = worst.into_iter().map(|w| w / d).collect();
    let mc_se = p_best.iter().chain(&p_worst).map(|p| (p * (1.0 - p) / d).sqrt()).fold(0.0, f64::max);
    taus.sort_by(|a, b| a.total_cmp(b));
    Ok(RankProbabilities {
        draws,
        seed,
        p_best,
        p_worst,
        mc_se,
        equivalence_pct,
        tau_median: taus[taus.len() / 2],
        sigma_log,
        sigma_df: df,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn interval_matches_a_hand_computation() {
        // d = ln 1.02, ln 1.04, ln 1.03: mean, sd by hand; t(0.975, 2) = 4.302653
        let a = [102.0, 104.0, 103.0];
        let b = [100.0; 3];
        let r = paired(&a, &b, 0.95).unwrap();
        let d: Vec<f64> = a.iter().map(|x| (x / 100.0f64).ln()).collect();
        let mean = d.iter().sum::<f64>() / 3.0;
        let sd = (d.iter().map(|x| (x - mean).powi(2)).sum::<f64>() / 2.0).sqrt();
        let half = 4.302_652_729_911_275 * sd / 3f64.sqrt();
        assert!((r.ci_low_pct - ((mean - half).exp() - 1.0) * 100.0).abs() < 1e-9);
        assert!((r.ci_high_pct - ((mean + half).exp() - 1.0) * 100.0).abs() < 1e-9);
        assert!((r.diff_pct - (mean.exp() - 1.0) * 100.0).abs() < 1e-12);
        assert!(paired(&[1.0], &[1.0], 0.95).is_err());
        assert!(paired(&[1.0, 0.0], &[1.0, 1.0], 0.95).is_err());
    }

    #[test]
    fn the_rule_is_symmetric_and_matches_its_interval() {
        assert_eq!(decide(-9.0, -3.0, 2.0), Verdict::Pass);
        assert_eq!(decide(3.0, 9.0, 2.0), Verdict::Fail);
        assert_eq!(decide(-1.0, 1.5, 2.0), Verdict::Tied);
        assert_eq!(decide(-9.0, -1.0, 2.0), Verdict::InsufficientEvidence);
        assert_eq!(decide(0.5, 3.0, 0.0), Verdict::Fail, "with no minimum effect, excluding 0 decides");
        for (lo, hi) in [(-7.0, -2.5), (-3.0, 1.0), (-1.0, 1.0), (0.1, 0.2)] {
            let flip = |v| match v {
                Verdict::Pass => Verdict::Fail,
                Verdict::Fail => Verdict::Pass,
                x => x,
            };
            assert_eq!(decide(-hi, -lo, 2.0), flip(decide(lo, hi, 2.0)));
        }
    }

    #[test]
    fn round_counts_grow_as_the_effect_shrinks_and_refuse_the_impossible() {
        let n5 = rounds_to_decide(0.02, 5.0, 1.0, 0.95, 0.8).unwrap();
        let n2 = rounds_to_decide(0.02, 2.0, 1.0, 0.95, 0.8).unwrap();
        assert!(n2 > n5 && n5 >= 2, "{n2} {n5}");
        assert_eq!(
            rounds_to_decide(0.02, 1.0, 1.0, 0.95, 0.8),
            None,
            "an effect at the minimum effect is never decided"
        );
        assert_eq!(rounds_to_decide(0.02, -5.0, 1.0, 0.95, 0.8).map(|n| n.abs_diff(n5) <= 1), Some(true));
        assert!(
            rounds_to_show_equivalence(0.02, 2.0, 0.95, 0.8).unwrap()
                > rounds_to_show_equivalence(0.01, 2.0, 0.95, 0.8).unwrap()
        );
        assert_eq!(rounds_to_show_equivalence(0.02, 0.0, 0.95, 0.8), None);
    }

    #[test]
    fn a_clear_winner_and_identical_configurations() {
        let t: Vec<Vec<f64>> = (0..5).map(|r| vec![100.0 + r as f64, 130.0 + r as f64 * 1.1, 160.0, 190.0]).collect();
        let p = rank_probabilities(&t, 4000, 1, 0.0).unwrap();
        assert!(p.p_best[0] > 0.99 && p.p_worst[3] > 0.99, "{p:?}");
        assert_eq!(p, rank_probabilities(&t, 4000, 1, 0.0).unwrap(), "seeded");
        // every column the same (up to rounding): each gets about 1/k
        let same: Vec<Vec<f64>> = (0..4).map(|r| vec![50.0 + r as f64; 4]).collect();
        let p = rank_probabilities(&same, 4000, 0, 0.0).unwrap();
        assert!(p.p_best.iter().chain(&p.p_worst).all(|x| (x - 0.25).abs() < 0.03), "{p:?}");
    }

    #[test]
    fn configurations_within_the_minimum_effect_share_best() {
        // columns 0 and 1 differ by 0.5% in every round, column 2 is 30% slower: with a 2% minimum
        // effect 0 and 1 tie for best in (nearly) every draw, strictly the faster one wins without it
        let t: Vec<Vec<f64>> =
            (0..6).map(|r| vec![100.0 + r as f64, (100.0 + r as f64) * 1.005, 130.0 + r as f64]).collect();
        let strict = rank_probabilities(&t, 4000, 2, 0.0).unwrap();
        let tied = rank_probabilities(&t, 4000, 2, 2.0).unwrap();
        assert!(strict.p_best[0] > 0.9, "{strict:?}");
        assert!((tied.p_best[0] - 0.5).abs() < 0.05 && (tied.p_best[1] - 0.5).abs() < 0.05, "{tied:?}");
        assert!(tied.p_worst[2] > 0.99, "a real gap is still resolved under the margin prior: {tied:?}");
        assert!(rank_probabilities(&t, 10, 2, f64::NAN).is_err() && rank_probabilities(&t, 10, 2, -1.0).is_err());
    }

    proptest! {
        #[test]
        fn probabilities_sum_to_one(
            rounds in 2usize..7,
            k in 1usize..7,
            seed in 0u64..1000,
            margin in 0.0f64..5.0,
            vals in proptest::collection::vec(1.0f64..100.0, 42),
        ) {
            let t: Vec<Vec<f64>> = (0..rounds)
                .map(|r| (0..k).map(|c| vals[(r * k + c) % vals.len()].round()).collect())
                .collect();
            let p = rank_probabilities(&t, 300, seed, margin).unwrap();
            prop_assert!((p.p_best.iter().sum::<f64>() - 1.0).abs() < 1e-9);
            prop_assert!((p.p_worst.iter().sum::<f64>() - 1.0).abs() < 1e-9);
        }

        #[test]
        fn the_interval_holds_its_point_and_swapping_sides_mirrors_it(
            v in proptest::collection::vec((100.0f64..200.0, 100.0f64..200.0), 2..12),
        ) {
            let (a, b): (Vec<f64>, Vec<f64>) = v.into_iter().unzip();
            let x = paired(&a, &b, 0.95).unwrap();
            let y = paired(&b, &a, 0.95).unwrap();
            prop_assert!(x.ci_low_pct <= x.diff_pct + 1e-9 && x.diff_pct <= x.ci_high_pct + 1e-9);
            // ln-scale mirror: ln(1 + lo_x) = −ln(1 + hi_y)
            prop_assert!(((x.ci_low_pct / 100.0).ln_1p() + (y.ci_high_pct / 100.0).ln_1p()).abs() < 1e-9);
        }
    }
}
