//! Bootstrap with a recorded seed, free of I/O: paired by round, and
//! hierarchical (jobs, then events within jobs; see [`hierarchical`]).
//!
//! Not used by `campaign analyze` since report format 2: with 3 rounds the
//! paired percentile interval is the min–max of the rounds (about 75%
//! coverage in simulation) and its P(best) counts rounds won. The analysis
//! uses [`crate::analysis::inference`], whose coverage is measured in
//! [`crate::analysis::calibration`]. Kept for its benchmark and for comparison.
//!
//! The paired design consumes a rounds × configurations table of per-job statistics (one job
//! per configuration per round: the randomized round-robin design). Produces,
//! from `resamples` resamplings of whole rounds with replacement (paired:
//! every configuration's job of a drawn round comes along, which keeps drift
//! common to a round out of the differences), P(best) and P(worst) per
//! configuration (ties split evenly, so each sums to 1), and for a candidate
//! against a baseline: the distribution of the relative difference
//! (candidate − baseline, percent of baseline), its percentile interval,
//! P(candidate faster), P(slowdown > delta), and a verdict.
//!
//! Method: the nonparametric percentile bootstrap (Efron and Tibshirani, "An
//! Introduction to the Bootstrap", 1993, ch. 13) with the statistic taken as
//! the median over the resampled rounds. Same table, resamples and seed give
//! the same output bit for bit (ChaCha8).
//!
//! Verdict: the symmetric rule of [`crate::analysis::inference::decide`].
use anyhow::{bail, Result};
use rand::{Rng, SeedableRng};
use serde::{Deserialize, Serialize};

pub use crate::analysis::inference::Verdict;

/// Candidate against baseline.
#[derive(schemars::JsonSchema, Serialize, Deserialize, Clone, Debug, PartialEq)]
pub struct CanaryResult {
    /// Point estimate of (candidate − baseline) / baseline, percent (medians over all rounds).
    pub diff_pct: f64,
    /// Lower end of the percentile interval, percent.
    pub ci_low_pct: f64,
    /// Upper end, percent.
    pub ci_high_pct: f64,
    /// Coverage of the interval (e.g. 0.95).
    pub coverage: f64,
    /// P(candidate faster than baseline).
    pub p_candidate_faster: f64,
    /// P(slowdown > delta).
    pub p_slowdown_beyond_delta: f64,
    /// Verdict.
    pub verdict: Verdict,
}

/// Bootstrap output.
#[derive(schemars::JsonSchema, Serialize, Deserialize, Clone, Debug, PartialEq)]
pub struct BootstrapResult {
    /// Resamples drawn.
    pub resamples: u32,
    /// Seed used.
    pub seed: u64,
    /// P(best) per configuration, in input order.
    pub p_best: Vec<f64>,
    /// P(worst) per configuration.
    pub p_worst: Vec<f64>,
    /// Candidate against baseline, when asked.
    pub canary: Option<CanaryResult>,
}

fn median_of(idx: &[usize], table: &[Vec<f64>], config: usize, scratch: &mut Vec<f64>) -> f64 {
    scratch.clear();
    scratch.extend(idx.iter().map(|&r| table[r][config]));
    scratch.sort_by(|a, b| a.total_cmp(b));
    let n = scratch.len();
    if n % 2 == 1 {
        scratch[n / 2]
    } else {
        (scratch[n / 2 - 1] + scratch[n / 2]) / 2.0
    }
}

/// Thresholds of a canary comparison.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct CanaryAsk {
    /// Candidate's column.
    pub candidate: usize,
    /// Baseline's column.
    pub baseline: usize,
    /// Minimum effect, percent.
    pub min_effect_pct: f64,
    /// Operational slowdown threshold, percent.
    pub delta_pct: f64,
    /// Interval coverage (0.95).
    pub coverage: f64,
}

fn check_canary(canary: Option<CanaryAsk>, k: usize) -> Result<()> {
    if let Some(c) = canary {
        if c.candidate >= k || c.baseline >= k || c.candidate == c.baseline || !(0.0 < c.coverage && c.coverage < 1.0) {
            bail!("canary columns or coverage out of range");
        }
    }
    Ok(())
}

/// The resampling loop shared by both designs: `draw` fills one resample's
/// statistic per configuration; `point` holds the statistics of the data.
fn accumulate(
    k: usize,
    resamples: u32,
    seed: u64,
    canary: Option<CanaryAsk>,
    point: &[f64],
    mut draw: impl FnMut(&mut rand_chacha::ChaCha8Rng, &mut [f64]),
) -> Result<BootstrapResult> {
    if resamples == 0 {
        bail!("resamples must be at least 1");
    }
    check_canary(canary, k)?;
    let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(seed);
    let mut best = vec![0.0f64; k];
    let mut worst = vec![0.0f64; k];
    let mut diffs = Vec::with_capacity(if canary.is_some() { resamples as usize } else { 0 });
    let mut stat = vec![0.0f64; k];
    for _ in 0..resamples {
        draw(&mut rng, &mut stat);
        let lo = stat.iter().copied().fold(f64::INFINITY, f64::min);
        let hi = stat.iter().copied().fold(f64::NEG_INFINITY, f64::max);
        let n_lo = stat.iter().filter(|&&s| s == lo).count() as f64;
        let n_hi = stat.iter().filter(|&&s| s == hi).count() as f64;
        for c in 0..k {
            if stat[c] == lo {
                best[c] += 1.0 / n_lo;
            }
            if stat[c] == hi {
                worst[c] += 1.0 / n_hi;
            }
        }
        if let Some(c) = canary {
            diffs.push((stat[c.candidate] - stat[c.baseline]) / stat[c.baseline] * 100.0);
        }
    }
    let n = resamples as f64;
    let canary = canary.map(|c| {
        diffs.sort_by(|a, b| a.total_cmp(b));
        let q = |p: f64| {
            let rank = ((p * diffs.len() as f64).ceil() as usize).clamp(1, diffs.len());
            diffs[rank - 1]
        };
        let alpha = (1.0 - c.coverage) / 2.0;
        let (lo, hi) = (q(alpha), q(1.0 - alpha));
        CanaryResult {
            diff_pct: (point[c.candidate] - point[c.baseline]) / point[c.baseline] * 100.0,
            ci_low_pct: lo,
            ci_high_pct: hi,
            coverage: c.coverage,
            p_candidate_faster: diffs.iter().filter(|&&d| d < 0.0).count() as f64 / n,
            p_slowdown_beyond_delta: diffs.iter().filter(|&&d| d > c.delta_pct).count() as f64 / n,
            verdict: verdict(lo, hi, c.min_effect_pct, c.delta_pct),
        }
    });
    Ok(BootstrapResult { resamples, seed, p_best: best.into_iter().map(|b| b / n).collect(), p_worst: worst.into_iter().map(|w| w / n).collect(), canary })
}

/// The verdict of an interval [lo, hi] of (candidate − baseline) in percent:
/// the symmetric rule of [`crate::analysis::inference::decide`] (`delta_pct` only sets
/// P(slowdown > delta)).
pub fn verdict(lo: f64, hi: f64, min_effect_pct: f64, _delta_pct: f64) -> Verdict {
    crate::analysis::inference::decide(lo, hi, min_effect_pct)
}

/// Paired-by-round bootstrap of `table[round][config]`.
pub fn paired_by_round(table: &[Vec<f64>], resamples: u32, seed: u64, canary: Option<CanaryAsk>) -> Result<BootstrapResult> {
    let rounds = table.len();
    if rounds < 2 {
        bail!("bootstrap needs at least 2 rounds, got {rounds}");
    }
    let k = table[0].len();
    if k == 0 || table.iter().any(|r| r.len() != k) {
        bail!("every round must hold one value per configuration");
    }
    if table.iter().flatten().any(|v| !v.is_finite()) {
        bail!("the table holds a non-finite value");
    }
    let all: Vec<usize> = (0..rounds).collect();
    let mut scratch = Vec::with_capacity(rounds);
    let point: Vec<f64> = (0..k).map(|c| median_of(&all, table, c, &mut scratch)).collect();
    let mut idx = vec![0usize; rounds];
    accumulate(k, resamples, seed, canary, &point, |rng, stat| {
        for i in idx.iter_mut() {
            *i = rng.gen_range(0..rounds);
        }
        for (c, s) in stat.iter_mut().enumerate() {
            *s = median_of(&idx, table, c, &mut scratch);
        }
    })
}

/// The exact resampling law of one job's nearest-rank median.
///
/// For a sample sorted as x(1) <= … <= x(n), the nearest-rank median of a
/// with-replacement resample of size n is its m-th order statistic,
/// m = ceil(n/2), and P(median* <= x(j)) = P(Binomial(n, j/n) >= m)
/// = I_{j/n}(m, n − m + 1), the regularized incomplete beta function
/// (Efron, "Bootstrap methods: another look at the jackknife", Ann. Statist.
/// 1979, §3; Maritz and Jarrett, JASA 1978). Drawing from this law by
/// inversion gives the same distribution as drawing n events and taking
/// their median, at O(log n) per draw instead of O(n).
#[derive(Clone, Debug)]
pub struct JobMedianLaw {
    sorted: Vec<f64>,
    cdf: Vec<f64>,
}

impl JobMedianLaw {
    /// The law of `samples` (at least one finite value).
    pub fn new(samples: &[f64]) -> Result<Self> {
        if samples.is_empty() {
            bail!("a job without events has no median");
        }
        if samples.iter().any(|v| !v.is_finite()) {
            bail!("a job's events hold a non-finite value");
        }
        let mut sorted = samples.to_vec();
        sorted.sort_by(|a, b| a.total_cmp(b));
        let n = sorted.len();
        let m = n.div_ceil(2);
        let cdf = (1..=n).map(|j| if j == n { 1.0 } else { statrs::function::beta::beta_reg(m as f64, (n - m + 1) as f64, j as f64 / n as f64) }).collect();
        Ok(Self { sorted, cdf })
    }

    /// Nearest-rank median of the sample itself.
    pub fn point(&self) -> f64 {
        self.sorted[self.sorted.len().div_ceil(2) - 1]
    }

    /// One draw of the resampled median, from a uniform `u` in [0, 1).
    pub fn draw(&self, u: f64) -> f64 {
        let i = self.cdf.partition_point(|&c| c <= u);
        self.sorted[i.min(self.sorted.len() - 1)]
    }
}

/// Hierarchical (two-stage) bootstrap of `jobs[config][job] = events`:
/// each resample draws, per configuration independently, that
/// configuration's jobs with replacement and then the events of every drawn
/// job with replacement (through [`JobMedianLaw`]); the configuration's
/// statistic is the median over the drawn jobs of their nearest-rank
/// medians. Two-stage resampling of clustered data: Davison and Hinkley,
/// "Bootstrap Methods and their Application", 1997, §3.8 (resampling both
/// stages, their strategy 2). Use it when rounds cannot be paired, and to
/// see how much the events inside a job add to the job-level spread.
pub fn hierarchical(jobs: &[Vec<Vec<f64>>], resamples: u32, seed: u64, canary: Option<CanaryAsk>) -> Result<BootstrapResult> {
    let k = jobs.len();
    if k == 0 {
        bail!("no configurations");
    }
    let laws: Vec<Vec<JobMedianLaw>> = jobs
        .iter()
        .enumerate()
        .map(|(c, js)| {
            if js.len() < 2 {
                bail!("configuration {c}: the bootstrap needs at least 2 jobs, got {}", js.len());
            }
            js.iter().map(|e| JobMedianLaw::new(e)).collect::<Result<Vec<_>>>()
        })
        .collect::<Result<_>>()?;
    let mid = |v: &mut Vec<f64>| {
        v.sort_by(|a, b| a.total_cmp(b));
        let n = v.len();
        if n % 2 == 1 {
            v[n / 2]
        } else {
            (v[n / 2 - 1] + v[n / 2]) / 2.0
        }
    };
    let mut scratch = Vec::new();
    let point: Vec<f64> = laws
        .iter()
        .map(|ls| {
            scratch.clear();
            scratch.extend(ls.iter().map(JobMedianLaw::point));
            mid(&mut scratch)
        })
        .collect();
    accumulate(k, resamples, seed, canary, &point, |rng, stat| {
        for (c, ls) in laws.iter().enumerate() {
            scratch.clear();
            for _ in 0..ls.len() {
                let j = rng.gen_range(0..ls.len());
                scratch.push(ls[j].draw(rng.gen::<f64>()));
            }
            stat[c] = mid(&mut scratch);
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use rand::Rng;

    fn table(rounds: usize, means: &[f64], noise: f64, seed: u64) -> Vec<Vec<f64>> {
        let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(seed);
        (0..rounds)
            .map(|_| {
                let drift = rng.gen_range(-noise..noise); // common to the round
                means.iter().map(|m| m * (1.0 + drift) + rng.gen_range(-noise..noise) * m).collect()
            })
            .collect()
    }

    fn ask(c: usize, b: usize) -> Option<CanaryAsk> {
        Some(CanaryAsk { candidate: c, baseline: b, min_effect_pct: 2.0, delta_pct: 5.0, coverage: 0.95 })
    }

    #[test]
    fn well_separated_fastest_wins_with_high_probability() {
        let t = table(5, &[100.0, 130.0, 160.0, 190.0, 220.0, 250.0, 280.0, 310.0], 0.02, 1);
        let r = paired_by_round(&t, 10_000, 7, ask(1, 0)).unwrap();
        assert!(r.p_best[0] >= 0.99, "{:?}", r.p_best);
        assert!(r.p_worst[7] >= 0.99, "{:?}", r.p_worst);
        assert_eq!(r.canary.unwrap().verdict, Verdict::Fail, "30% slower than baseline beyond delta 5%");
        let r = paired_by_round(&t, 10_000, 7, ask(0, 1)).unwrap();
        assert_eq!(r.canary.unwrap().verdict, Verdict::Pass);
    }

    #[test]
    fn a_a_is_never_pass_or_fail() {
        for seed in 0..20 {
            let mut t = table(5, &[100.0, 100.0], 0.03, seed);
            // A/A: the same configuration under two labels
            for row in t.iter_mut() {
                row[1] = row[0] * (1.0 + 0.005 * ((seed % 3) as f64 - 1.0));
            }
            let v = paired_by_round(&t, 2_000, seed, ask(1, 0)).unwrap().canary.unwrap().verdict;
            assert!(matches!(v, Verdict::Tied | Verdict::InsufficientEvidence), "seed {seed}: {v:?}");
        }
    }

    #[test]
    fn the_exact_median_law_matches_brute_force_resampling() {
        let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(3);
        for n in [1usize, 2, 5, 8, 31] {
            let x: Vec<f64> = (0..n).map(|_| (rng.gen_range(0..6) as f64) * 1.5).collect(); // ties included
            let law = JobMedianLaw::new(&x).unwrap();
            let mut sorted = x.clone();
            sorted.sort_by(|a, b| a.total_cmp(b));
            let m = n.div_ceil(2);
            assert_eq!(law.point(), sorted[m - 1]);
            let draws = 40_000;
            let (mut exact, mut brute) = (std::collections::BTreeMap::new(), std::collections::BTreeMap::new());
            let mut buf = vec![0.0; n];
            for _ in 0..draws {
                *exact.entry(law.draw(rng.gen::<f64>()).to_bits()).or_insert(0u32) += 1;
                for b in buf.iter_mut() {
                    *b = x[rng.gen_range(0..n)];
                }
                buf.sort_by(|a, b| a.total_cmp(b));
                *brute.entry(buf[m - 1].to_bits()).or_insert(0u32) += 1;
            }
            for v in exact.keys().chain(brute.keys()) {
                let (a, b) = (*exact.get(v).unwrap_or(&0) as f64 / draws as f64, *brute.get(v).unwrap_or(&0) as f64 / draws as f64);
                assert!((a - b).abs() < 0.015, "n={n} value {}: exact {a} brute {b}", f64::from_bits(*v));
            }
        }
        assert!(JobMedianLaw::new(&[]).is_err());
    }

    fn jobs(means: &[f64], jobs: usize, events: usize, noise: f64, seed: u64) -> Vec<Vec<Vec<f64>>> {
        let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(seed);
        means
            .iter()
            .map(|m| {
                (0..jobs)
                    .map(|_| {
                        let shift = rng.gen_range(-noise..noise) * m;
                        (0..events).map(|_| m + shift + rng.gen_range(-noise..noise) * m).collect()
                    })
                    .collect()
            })
            .collect()
    }

    #[test]
    fn hierarchical_separates_and_keeps_a_a_undecided() {
        let j = jobs(&[100.0, 130.0, 160.0, 190.0, 220.0, 250.0, 280.0, 310.0], 5, 64, 0.02, 1);
        let r = hierarchical(&j, 10_000, 7, ask(1, 0)).unwrap();
        assert!(r.p_best[0] >= 0.99 && r.p_worst[7] >= 0.99, "{:?} {:?}", r.p_best, r.p_worst);
        assert_eq!(r.canary.unwrap().verdict, Verdict::Fail);
        for seed in 0..20 {
            let mut j = jobs(&[100.0, 100.0], 5, 64, 0.03, seed);
            j[1] = j[0].iter().map(|e| e.iter().map(|v| v * 1.002).collect()).collect();
            let v = hierarchical(&j, 2_000, seed, ask(1, 0)).unwrap().canary.unwrap().verdict;
            assert!(matches!(v, Verdict::Tied | Verdict::InsufficientEvidence), "seed {seed}: {v:?}");
        }
        assert!(hierarchical(&[vec![vec![1.0]]], 10, 0, None).is_err(), "one job is not a sample of jobs");
    }

    #[test]
    fn refuses_bad_tables() {
        assert!(paired_by_round(&[vec![1.0]], 10, 0, None).is_err());
        assert!(paired_by_round(&[vec![1.0, 2.0], vec![1.0]], 10, 0, None).is_err());
        assert!(paired_by_round(&[vec![f64::NAN], vec![1.0]], 10, 0, None).is_err());
    }

    proptest! {
        #[test]
        fn probabilities_sum_to_one_and_the_seed_reproduces(
            rounds in 2usize..7, k in 1usize..6, seed in 0u64..1000, vals in proptest::collection::vec(1.0f64..100.0, 42)
        ) {
            let t: Vec<Vec<f64>> = (0..rounds).map(|r| (0..k).map(|c| vals[(r * k + c) % vals.len()].round()).collect()).collect();
            let a = paired_by_round(&t, 300, seed, None).unwrap();
            let b = paired_by_round(&t, 300, seed, None).unwrap();
            prop_assert_eq!(&a, &b);
            prop_assert!((a.p_best.iter().sum::<f64>() - 1.0).abs() < 1e-9);
            prop_assert!((a.p_worst.iter().sum::<f64>() - 1.0).abs() < 1e-9);
        }

        #[test]
        fn hierarchical_probabilities_sum_to_one_and_the_seed_reproduces(
            k in 1usize..5, jobs_n in 2usize..5, seed in 0u64..1000, vals in proptest::collection::vec(1.0f64..100.0, 60)
        ) {
            let j: Vec<Vec<Vec<f64>>> = (0..k).map(|c| (0..jobs_n).map(|i| (0..(3 + i)).map(|e| vals[(c * 13 + i * 5 + e) % vals.len()].round()).collect()).collect()).collect();
            let a = hierarchical(&j, 300, seed, None).unwrap();
            prop_assert_eq!(&a, &hierarchical(&j, 300, seed, None).unwrap());
            prop_assert!((a.p_best.iter().sum::<f64>() - 1.0).abs() < 1e-9);
            prop_assert!((a.p_worst.iter().sum::<f64>() - 1.0).abs() < 1e-9);
        }
    }
}
