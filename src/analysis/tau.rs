//! Kendall τ-b of a proxy's ranking against the truth's, from their tables of job medians
//! by round (the same jobs): under the interval policy (relations of pair intervals at the
//! phase's pair level) and on plain medians, each with a percentile interval from resampling
//! whole rounds, seeded by the policy. Produces two [`TauEstimate`]s; refuses nothing (a τ
//! that is undefined, or an interval with too few defined resamples, is absent).
use crate::analysis::inference::{self, COVERAGE};
use crate::analysis::model::TauEstimate;
use crate::analysis::policy::AnalysisPolicy;
use crate::analysis::ranking::{self, Relation};
use crate::core::stats;
use rand::{Rng, SeedableRng};

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

/// [`ranking::relation_from_interval`] of an interval given by its ends on the log scale, bit for
/// bit, skipping the two `exp_m1` away from the thresholds (docs/METHODS.md, "Relations on the log scale").
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
        Self {
            min_effect_pct,
            fast: (0.0..=50.0).contains(&min_effect_pct),
            below: (-min_effect_pct / 100.0).ln_1p(),
            above: (min_effect_pct / 100.0).ln_1p(),
        }
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
pub(super) fn tau_estimates(
    proxy: &[Vec<f64>],
    truth: &[Vec<f64>],
    policy: &AnalysisPolicy,
    pair_coverage: f64,
) -> (TauEstimate, TauEstimate) {
    let n = truth.len();
    let logs = |t: &[Vec<f64>]| -> Vec<Vec<f64>> { t.iter().map(|r| r.iter().map(|v| v.ln()).collect()).collect() };
    let (lp, lt) = (logs(proxy), logs(truth));
    let tq = inference::t_quantile(1.0 - (1.0 - pair_coverage) / 2.0, (n - 1) as f64);
    let all: Vec<usize> = (0..n).collect();
    let policy_tau = |idx: &[usize]| {
        ranking::tau_b(
            &relations_over(&lp, idx, tq, policy.min_effect_pct),
            &relations_over(&lt, idx, tq, policy.min_effect_pct),
        )
    };
    let plain_tau = |idx: &[usize]| {
        ranking::tau_b(
            &ranking::strict_relations(&medians_over(proxy, idx)),
            &ranking::strict_relations(&medians_over(truth, idx)),
        )
    };
    let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(policy.bootstrap_seed);
    let (mut dp, mut dq) = (Vec::new(), Vec::new());
    let mut idx = vec![0usize; n];
    for _ in 0..policy.bootstrap_resamples {
        idx.iter_mut().for_each(|i| *i = rng.gen_range(0..n));
        dp.extend(policy_tau(&idx));
        dq.extend(plain_tau(&idx));
    }
    let est = |point: Option<f64>, mut d: Vec<f64>| {
        d.sort_by(|a, b| a.total_cmp(b));
        let q = |p: f64| d[((p * d.len() as f64).ceil() as usize).clamp(1, d.len()) - 1];
        let interval = (d.len() >= 20).then(|| (q((1.0 - COVERAGE) / 2.0), q(1.0 - (1.0 - COVERAGE) / 2.0)));
        TauEstimate { tau_b: point, interval, resamples_defined: d.len() as u32 }
    };
    (est(policy_tau(&all), dp), est(plain_tau(&all), dq))
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
            let mut ends: Vec<f64> =
                vec![0.0, -0.0, f64::NAN, f64::INFINITY, f64::NEG_INFINITY, 1e-300, -1e-300, 700.0, 710.0, -800.0];
            for t in [below, above] {
                if t.is_finite() {
                    // the thresholds themselves and their neighbours, a few units in the last place away
                    // (the bit patterns one by one on either side; 0 has its neighbours among the subnormals)
                    for k in 1..=8u64 {
                        ends.push(f64::from_bits(t.to_bits() + k));
                        ends.push(t.to_bits().checked_sub(k).map_or(-f64::from_bits(k), f64::from_bits));
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
}
