//! Seeded simulations that measure what [`commcanary::analysis::inference`]
//! claims, free of I/O. Only the calibration bench and its tests use them, so
//! they live beside the bench, not in the library.
//!
//! Consumes a noise model ([`Noise`]), a round count and a seed. Produces the
//! rates the calibration tables hold: interval coverage, A/A false verdicts
//! (per control, and per campaign: [`aa_family_false`]), the null
//! distribution of the top P(best), and achieved power. `tests/calibration.rs`
//! runs small versions; `cargo bench --bench calibration` runs the long one.
//!
//! Method: docs/METHODS.md, "Calibration simulations".
use anyhow::Result;
use commcanary::analysis::inference::{self, Verdict};
use commcanary::analysis::truth;
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
/// ([`commcanary::analysis::truth::regret_of`], at the report's simultaneous pair
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
/// [`commcanary::analysis::analyze`] does: at [`commcanary::analysis::aa_level`] with `family`, else at 95%
/// (docs/METHODS.md, "Simulated A/A families"). Returns (share of controls that misbehaved,
/// share of campaigns with at least one).
pub fn aa_family_false(setup: &SimulationSetup, family: bool) -> Result<(f64, f64)> {
    let SimulationSetup { noise, rounds, k: controls, min_effect_pct, scale, sims, seed } = *setup;
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    let level =
        if family { commcanary::analysis::aa_level(controls, inference::COVERAGE) } else { inference::COVERAGE };
    let (mut bad, mut any) = (0u64, 0u32);
    for _ in 0..sims {
        let mut here = 0u64;
        for _ in 0..controls {
            let t = campaign(&mut rng, noise, rounds, &[1.0, 1.0], scale);
            let i = inference::paired(&column(&t, 1), &column(&t, 0), level)?;
            if commcanary::analysis::aa_outcome(
                inference::decide(i.ci_low_pct, i.ci_high_pct, min_effect_pct),
                min_effect_pct,
            ) == commcanary::analysis::ControlOutcome::Misbehaved
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
