//! Seeded simulations that measure what [`crate::analysis::inference`]
//! claims, free of I/O.
//!
//! Consumes a noise model ([`Noise`]), a round count and a seed. Produces the
//! rates the calibration tables hold: interval coverage, A/A false verdicts
//! (per control, and per campaign: [`aa_family_false`]), the null
//! distribution of the top P(best), and achieved power. Unit tests run small
//! versions; `cargo bench --bench calibration` runs the long one.
//!
//! Method: docs/METHODS.md, "Calibration simulations".
use crate::analysis::inference::{self, Verdict};
use crate::analysis::truth;
use anyhow::Result;
use rand::SeedableRng;
use rand_chacha::ChaCha8Rng;
use rand_distr::{Distribution, Exp1, StandardNormal, StudentT};

/// Job noise models of the calibration.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Noise {
    /// Gaussian on the log scale.
    Gaussian,
    /// Student-t, 3 degrees of freedom.
    StudentT3,
    /// Exp(1) − 1: right-skewed.
    Skewed,
    /// Gaussian job noise plus a round drift of 4 × scale shared by the round.
    RoundDrift,
}

impl Noise {
    /// Every model.
    pub const ALL: [Noise; 4] = [Noise::Gaussian, Noise::StudentT3, Noise::Skewed, Noise::RoundDrift];

    /// Name in the tables.
    pub fn name(self) -> &'static str {
        match self {
            Noise::Gaussian => "gaussian",
            Noise::StudentT3 => "student-t3",
            Noise::Skewed => "skewed-exponential",
            Noise::RoundDrift => "round-drift",
        }
    }

    fn job(self, rng: &mut ChaCha8Rng, scale: f64) -> f64 {
        match self {
            Noise::Gaussian | Noise::RoundDrift => scale * rng.sample::<f64, _>(StandardNormal),
            Noise::StudentT3 => scale * StudentT::new(3.0).expect("df 3").sample(rng) / 3f64.sqrt(),
            Noise::Skewed => scale * (rng.sample::<f64, _>(Exp1) - 1.0),
        }
    }
}

use rand::Rng;

/// The simulated campaigns of [`family_false_different`], [`aa_family_false`]
/// and [`null_p_best`]: `sims` campaigns of `k` configurations (or A/A
/// controls) over `rounds` rounds, drawn from one seed.
#[derive(Clone, Copy, Debug)]
pub struct SimulationSetup {
    /// Job noise model.
    pub noise: Noise,
    /// Rounds per campaign.
    pub rounds: usize,
    /// Configurations per campaign ([`aa_family_false`]: A/A controls per campaign).
    pub k: usize,
    /// The campaign's minimum effect, percent.
    pub min_effect_pct: f64,
    /// Job noise scale: the log-scale standard deviation of a job.
    pub scale: f64,
    /// Campaigns simulated.
    pub sims: u32,
    /// Seed of the generator.
    pub seed: u64,
}

/// One simulated campaign: `table[round][config]` for true `means`.
pub fn campaign(rng: &mut ChaCha8Rng, noise: Noise, rounds: usize, means: &[f64], scale: f64) -> Vec<Vec<f64>> {
    (0..rounds)
        .map(|_| {
            let drift =
                if noise == Noise::RoundDrift { 4.0 * scale * rng.sample::<f64, _>(StandardNormal) } else { 0.0 };
            means.iter().map(|m| m * (drift + noise.job(rng, scale)).exp()).collect()
        })
        .collect()
}

fn column(t: &[Vec<f64>], c: usize) -> Vec<f64> {
    t.iter().map(|r| r[c]).collect()
}

/// Share of `sims` intervals (a 1 + effect slower than b) that contain the true difference.
pub fn coverage(noise: Noise, rounds: usize, effect_pct: f64, scale: f64, sims: u32, seed: u64) -> Result<f64> {
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    let mut hit = 0u32;
    for _ in 0..sims {
        let t = campaign(&mut rng, noise, rounds, &[1.0 + effect_pct / 100.0, 1.0], scale);
        let i = inference::paired(&column(&t, 0), &column(&t, 1), inference::COVERAGE)?;
        if i.ci_low_pct <= effect_pct && effect_pct <= i.ci_high_pct {
            hit += 1;
        }
    }
    Ok(hit as f64 / sims as f64)
}

/// A regret scenario of the calibration: true means of the configurations and the pick.
#[derive(Clone, Copy, Debug)]
pub struct RegretScenario {
    /// Name in the tables.
    pub name: &'static str,
    /// True means (multiplicative, the best at 1).
    pub means: &'static [f64],
    /// The picked configuration (chosen before the truth's data, as a proxy's pick is).
    pub pick: usize,
}

/// The scenarios of the regret table: ties, a pick behind the best, a pick
/// tied with the best beside slower ones, a near tie, a far-off pick.
pub const REGRET_SCENARIOS: [RegretScenario; 5] = [
    RegretScenario { name: "4 tied, regret 0", means: &[1.0, 1.0, 1.0, 1.0], pick: 0 },
    RegretScenario { name: "pick 5% behind the best of 4", means: &[1.0, 1.05, 1.05, 1.10], pick: 1 },
    RegretScenario { name: "pick tied with the best, 2 slower", means: &[1.0, 1.0, 1.03, 1.2], pick: 1 },
    RegretScenario { name: "pick 1% behind, 3 configurations", means: &[1.0, 1.01, 1.01], pick: 2 },
    RegretScenario { name: "pick the worst of 5, 20% behind", means: &[1.0, 1.02, 1.04, 1.1, 1.2], pick: 4 },
];

/// Share of `sims` campaigns whose regret interval for `sc.pick`
/// ([`crate::analysis::truth::regret_of`], at the report's simultaneous pair
/// level) contains the true regret, max(0, max over c of m_pick / m_c − 1).
pub fn regret_coverage(
    sc: &RegretScenario,
    noise: Noise,
    rounds: usize,
    scale: f64,
    sims: u32,
    seed: u64,
) -> Result<f64> {
    let k = sc.means.len();
    let labels: Vec<String> = (0..k).map(|i| format!("c{i}")).collect();
    let level = inference::simultaneous_coverage(inference::COVERAGE, k * (k - 1) / 2);
    let truth = sc.means.iter().map(|m| 100.0 * (sc.means[sc.pick] / m - 1.0)).fold(0.0, f64::max);
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    let mut hit = 0u32;
    for _ in 0..sims {
        let t = campaign(&mut rng, noise, rounds, sc.means, scale);
        let r = truth::regret_of(&t, &labels, sc.pick, level, 0.0)?;
        // the bounds are exact at 0 (no regret): compare with a rounding slack
        if r.low_pct <= truth + 1e-9 && truth <= r.high_pct + 1e-9 {
            hit += 1;
        }
    }
    Ok(hit as f64 / sims as f64)
}

/// Verdict rates over `sims` campaigns with a true effect (0 for A/A): (pass, fail, tied, insufficient).
pub fn verdict_rates(
    noise: Noise,
    rounds: usize,
    effect_pct: f64,
    min_effect_pct: f64,
    scale: f64,
    sims: u32,
    seed: u64,
) -> Result<[f64; 4]> {
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    let mut n = [0u32; 4];
    for _ in 0..sims {
        let t = campaign(&mut rng, noise, rounds, &[1.0 + effect_pct / 100.0, 1.0], scale);
        let i = inference::paired(&column(&t, 0), &column(&t, 1), inference::COVERAGE)?;
        n[match inference::decide(i.ci_low_pct, i.ci_high_pct, min_effect_pct) {
            Verdict::Pass => 0,
            Verdict::Fail => 1,
            Verdict::Tied => 2,
            Verdict::InsufficientEvidence => 3,
        }] += 1;
    }
    Ok(n.map(|x| x as f64 / sims as f64))
}

/// Share of `sims` campaigns of `k` identical configurations in which at least one pair is decided:
/// the family-wise false "different" rate, each interval at the report's per-pair level where
/// `simultaneous` ([`inference::simultaneous_coverage`]), else at the nominal 95%.
pub fn family_false_different(setup: &SimulationSetup, simultaneous: bool) -> Result<f64> {
    let SimulationSetup { noise, rounds, k, min_effect_pct, scale, sims, seed } = *setup;
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    let level = if simultaneous {
        inference::simultaneous_coverage(inference::COVERAGE, k * (k - 1) / 2)
    } else {
        inference::COVERAGE
    };
    let mut any = 0u32;
    for _ in 0..sims {
        let t = campaign(&mut rng, noise, rounds, &vec![1.0; k], scale);
        let mut decided = false;
        'pairs: for a in 0..k {
            for b in a + 1..k {
                let i = inference::paired(&column(&t, a), &column(&t, b), level)?;
                if matches!(
                    inference::decide(i.ci_low_pct, i.ci_high_pct, min_effect_pct),
                    Verdict::Pass | Verdict::Fail
                ) {
                    decided = true;
                    break 'pairs;
                }
            }
        }
        any += u32::from(decided);
    }
    Ok(any as f64 / sims as f64)
}

/// A/A false verdicts of a campaign of `controls` independent A/A controls, each judged as
/// [`crate::analysis::analyze`] does: at [`crate::analysis::aa_level`] with `family`, else at 95%
/// (docs/METHODS.md, "Simulated A/A families"). Returns (share of controls that misbehaved,
/// share of campaigns with at least one).
pub fn aa_family_false(setup: &SimulationSetup, family: bool) -> Result<(f64, f64)> {
    let SimulationSetup { noise, rounds, k: controls, min_effect_pct, scale, sims, seed } = *setup;
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    let level = if family { crate::analysis::aa_level(controls, inference::COVERAGE) } else { inference::COVERAGE };
    let (mut bad, mut any) = (0u64, 0u32);
    for _ in 0..sims {
        let mut here = 0u64;
        for _ in 0..controls {
            let t = campaign(&mut rng, noise, rounds, &[1.0, 1.0], scale);
            let i = inference::paired(&column(&t, 1), &column(&t, 0), level)?;
            if crate::analysis::aa_outcome(
                inference::decide(i.ci_low_pct, i.ci_high_pct, min_effect_pct),
                min_effect_pct,
            ) == crate::analysis::ControlOutcome::Misbehaved
            {
                here += 1;
            }
        }
        bad += here;
        any += u32::from(here > 0);
    }
    Ok((bad as f64 / (sims as f64 * controls.max(1) as f64), any as f64 / sims as f64))
}

/// Null P(best) over `sims` campaigns of `k` identical configurations, ties
/// within `min_effect_pct` shared (the campaign's minimum effect):
/// (mean P(best) of each position, share of campaigns whose top P(best) ≥ 0.9, largest top P(best) seen).
pub fn null_p_best(setup: &SimulationSetup, draws: u32) -> Result<(Vec<f64>, f64, f64)> {
    let SimulationSetup { noise, rounds, k, min_effect_pct, scale, sims, seed } = *setup;
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    let mut mean = vec![0.0; k];
    let (mut high, mut top_max) = (0u32, 0.0f64);
    for s in 0..sims {
        let t = campaign(&mut rng, noise, rounds, &vec![1.0; k], scale);
        let p = inference::rank_probabilities(&t, draws, seed.wrapping_add(s as u64), min_effect_pct)?;
        for (m, x) in mean.iter_mut().zip(&p.p_best) {
            *m += x / sims as f64;
        }
        let top = p.p_best.iter().copied().fold(0.0, f64::max);
        top_max = top_max.max(top);
        if top >= 0.9 {
            high += 1;
        }
    }
    Ok((mean, high as f64 / sims as f64, top_max))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A setup at job noise scale 0.03.
    fn setup(noise: Noise, rounds: usize, k: usize, min_effect_pct: f64, sims: u32, seed: u64) -> SimulationSetup {
        SimulationSetup { noise, rounds, k, min_effect_pct, scale: 0.03, sims, seed }
    }

    // Small seeded versions of the committed tables: the claims hold in CI too.
    #[test]
    fn regret_intervals_cover_at_their_level_in_a_small_run() {
        for sc in &REGRET_SCENARIOS {
            for noise in [Noise::Gaussian, Noise::RoundDrift] {
                let c = regret_coverage(sc, noise, 5, 0.03, 400, 11).unwrap();
                assert!(c >= 0.92, "{} {:?}: {c}", sc.name, noise);
            }
        }
    }

    #[test]
    fn coverage_is_at_least_93_percent_at_every_round_count() {
        for noise in Noise::ALL {
            for rounds in [3, 5, 10, 20] {
                let c = coverage(noise, rounds, 3.0, 0.03, 3000, 11).unwrap();
                assert!(c >= 0.93, "{} at {rounds} rounds: {c}", noise.name());
            }
        }
    }

    #[test]
    fn a_a_gets_pass_or_fail_in_at_most_5_percent() {
        for noise in Noise::ALL {
            for rounds in [2, 3, 5, 10, 20] {
                let r = verdict_rates(noise, rounds, 0.0, 0.0, 0.03, 3000, 5).unwrap();
                assert!(r[0] + r[1] <= 0.05 + 0.012, "{} at {rounds} rounds: {r:?}", noise.name());
                // symmetric: neither side takes the whole error
                assert!((r[0] - r[1]).abs() < 0.02, "{} at {rounds} rounds: {r:?}", noise.name());
            }
        }
    }

    #[test]
    fn simultaneous_pair_tables_rarely_decide_a_pair_among_identical_configurations() {
        for noise in Noise::ALL {
            for (k, rounds) in [(4, 3), (4, 10), (7, 5), (7, 20)] {
                let fw = family_false_different(&setup(noise, rounds, k, 0.0, 2000, 17), true).unwrap();
                assert!(fw <= 0.05 + 0.015, "{} k={k} {rounds} rounds: {fw}", noise.name());
            }
        }
        // the simulation can fail: unadjusted 95% intervals decide some pair far more often
        let raw = family_false_different(&setup(Noise::Gaussian, 10, 4, 0.0, 2000, 17), false).unwrap();
        assert!(raw > 0.12, "unadjusted family-wise rate {raw}");
    }

    #[test]
    fn a_campaigns_aa_controls_show_a_false_verdict_in_at_most_5_percent_of_campaigns() {
        // six phases, one A/A pair: 2500 campaigns a cell, Monte Carlo standard error about 0.44 points at 5%
        for noise in Noise::ALL {
            for rounds in [3, 5, 10] {
                let (each, fw) = aa_family_false(&setup(noise, rounds, 6, 0.0, 2500, 23), true).unwrap();
                assert!(
                    fw <= 0.05 + 0.013,
                    "{} at {rounds} rounds: per campaign {fw}, per control {each}",
                    noise.name()
                );
                assert!(each <= 0.05 / 6.0 + 0.004, "{} at {rounds} rounds: per control {each}", noise.name());
            }
        }
        // the simulation can fail: six controls each at 95% show a false A/A verdict in about one campaign in four
        let (each, fw) = aa_family_false(&setup(Noise::Gaussian, 5, 6, 0.0, 2500, 23), false).unwrap();
        assert!(fw > 0.18 && each <= 0.05 + 0.01, "unadjusted: per campaign {fw}, per control {each}");
    }

    #[test]
    fn two_identical_configurations_rarely_look_best_with_a_minimum_effect() {
        // the case a uniform spread prior and strict "best" failed: k = 2 reached 0.9 in 12-16%
        for rounds in [3, 5] {
            let (mean, high, _) = null_p_best(&setup(Noise::Gaussian, rounds, 2, 2.0, 400, 5), 300).unwrap();
            assert!(high <= 0.05, "{rounds} rounds: top P(best) >= 0.9 in {high}");
            assert!(mean.iter().all(|m| (m - 0.5).abs() < 0.05), "{mean:?}");
        }
    }

    #[test]
    fn identical_configurations_share_p_best() {
        for (k, rounds) in [(4, 3), (6, 5), (4, 10)] {
            let (mean, high, _) = null_p_best(&setup(Noise::Gaussian, rounds, k, 0.0, 150, 3), 300).unwrap();
            assert!(high <= 0.05, "k={k}, {rounds} rounds: top P(best) >= 0.9 in {high}");
            assert!(mean.iter().all(|m| (m - 1.0 / k as f64).abs() < 0.08), "k={k}: {mean:?}");
        }
    }

    #[test]
    fn the_suggested_round_count_reaches_its_power() {
        // at the suggested n, simulated power is near 80% (the approximation is slightly conservative)
        let scale = 0.02;
        let sd = scale * 2f64.sqrt();
        let n = inference::rounds_to_decide(sd, 3.0, 1.0, 0.95, 0.8).unwrap() as usize;
        let r = verdict_rates(Noise::Gaussian, n, 3.0, 1.0, scale, 3000, 9).unwrap();
        assert!(r[1] >= 0.75, "n={n}: decided-slower share {}", r[1]);
        let r = verdict_rates(Noise::Gaussian, n - 1, 3.0, 1.0, scale, 3000, 9).unwrap();
        assert!(r[1] < 0.85, "n-1={}: {}", n - 1, r[1]);
    }
}
