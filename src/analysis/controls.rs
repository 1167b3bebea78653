//! Judging one pair on a phase's table: the candidate-against-baseline [`CanaryResult`]
//! the canary and the controls read, and the controls themselves: A/A pairs (one family,
//! each at [`aa_level`]), known-bad configurations (at the phase's pair level) and the
//! injected skew of each job (from its delay counts). Each control is a [`ControlResult`]:
//! behaved, misbehaved or inconclusive with the rounds that would resolve it, and the level
//! it was judged at. Refuses a known-bad control naming an unknown configuration.
use crate::analysis::inference::{self, PairedInterval, Verdict, COVERAGE};
use crate::analysis::model::{CanaryResult, ControlOutcome, ControlResult, DelayCounts, KnownBadInput, PhaseInput};
use crate::analysis::phase::pair_interval;
use crate::analysis::policy::AnalysisPolicy;
use crate::core::workload::Phase;
use anyhow::{Context, Result};

/// The canary-style result of column `cand` against `base`, with an interval at level `coverage`.
pub(super) fn canary_result(
    t: &[Vec<f64>],
    cand: usize,
    base: usize,
    policy: &AnalysisPolicy,
    coverage: f64,
) -> Result<CanaryResult> {
    let interval = pair_interval(t, cand, base, coverage)?;
    let verdict = inference::decide(interval.ci_low_pct, interval.ci_high_pct, policy.min_effect_pct);
    let rounds_to_resolve = match verdict {
        Verdict::InsufficientEvidence if interval.diff_pct.abs() <= policy.min_effect_pct => {
            inference::rounds_to_show_equivalence(interval.sd_log, policy.min_effect_pct, coverage, inference::POWER)
        }
        Verdict::InsufficientEvidence => inference::rounds_to_decide(
            interval.sd_log,
            interval.diff_pct,
            policy.min_effect_pct,
            coverage,
            inference::POWER,
        ),
        _ => None,
    };
    Ok(CanaryResult {
        p_candidate_faster: interval.p_below_pct(0.0),
        p_slowdown_beyond_delta: 1.0 - interval.p_below_pct(policy.delta_pct),
        verdict,
        rounds_to_resolve,
        interval,
    })
}

pub(super) fn interval_words(i: &PairedInterval) -> String {
    format!("{:+.2}% [{:+.2}, {:+.2}]%", i.diff_pct, i.ci_low_pct, i.ci_high_pct)
}

fn resolve_words(n: Option<u32>) -> String {
    match n {
        Some(n) => format!("; about {n} rounds would resolve it at the noise observed (80% power)"),
        None => format!(
            "; more than {} rounds would be needed at the noise observed (or no number of rounds, for an effect within \
                the minimum effect)",
            inference::MAX_ROUNDS
        ),
    }
}

/// Rounds words where `None` can only mean "beyond the tool's range".
fn resolve_words_bounded(n: Option<u32>) -> String {
    match n {
        Some(_) => resolve_words(n),
        None => format!("; more than {} rounds would be needed at the noise observed", inference::MAX_ROUNDS),
    }
}

/// Level of each A/A control's interval in a campaign of `family` A/A
/// controls (declared pairs × phases), for a control whose phase makes its
/// pair intervals at `pair_coverage`: 1 − (1 − [`COVERAGE`])/family
/// (Bonferroni–Dunn over the campaign's A/A controls), or `pair_coverage`
/// when that is higher. See the module documentation.
pub fn aa_level(family: usize, pair_coverage: f64) -> f64 {
    inference::simultaneous_coverage(COVERAGE, family).max(pair_coverage)
}

/// An A/A control's outcome from the verdict of its interval (at [`aa_level`])
/// under the minimum effect `min_effect_pct`: decided (`pass`/`fail`) is
/// misbehaved; `tied` behaved; otherwise behaved when m = 0 (equivalence
/// cannot be shown, not different is all one can ask), else inconclusive.
pub fn aa_outcome(verdict: Verdict, min_effect_pct: f64) -> ControlOutcome {
    match verdict {
        Verdict::Pass | Verdict::Fail => ControlOutcome::Misbehaved,
        Verdict::Tied => ControlOutcome::Behaved,
        Verdict::InsufficientEvidence if min_effect_pct == 0.0 => ControlOutcome::Behaved,
        Verdict::InsufficientEvidence => ControlOutcome::Inconclusive,
    }
}

/// An A/A pair as one phase's table holds it: two labels of one configuration and their columns.
pub(super) struct AaPair<'a> {
    /// The first label (the baseline).
    pub(super) a: &'a str,
    /// The second label (the candidate).
    pub(super) b: &'a str,
    /// Column of `a` in the table.
    pub(super) ca: usize,
    /// Column of `b` in the table.
    pub(super) cb: usize,
}

/// An A/A pair in one phase, judged on its own interval at `level` ([`aa_level`]),
/// one of the `family` A/A controls of the campaign.
pub(super) fn aa_control(
    pair: &AaPair<'_>,
    phase: Phase,
    t: &[Vec<f64>],
    policy: &AnalysisPolicy,
    level: f64,
    family: usize,
) -> Result<ControlResult> {
    let AaPair { a, b, ca, cb } = *pair;
    let r = canary_result(t, cb, ca, policy, level)?;
    let m = policy.min_effect_pct;
    let outcome = aa_outcome(r.verdict, m);
    let (rounds_to_resolve, tail) = if outcome == ControlOutcome::Inconclusive {
        let n = inference::rounds_to_show_equivalence(r.interval.sd_log, m, level, inference::POWER);
        (n, resolve_words_bounded(n))
    } else {
        (None, String::new())
    };
    Ok(ControlResult {
        kind: "a-a".into(),
        subject: format!("{b} vs {a} (one configuration, two labels)"),
        phase: Some(phase),
        predicted: format!(
            "never pass, fail or a decided relation; tied (interval within ±{m}%) once the rounds suffice"
        ),
        observed: format!(
            "{} (one of {family} A/A controls judged together at {:.0}%) → {}{tail}",
            interval_words(&r.interval),
            COVERAGE * 100.0,
            r.verdict.word()
        ),
        outcome,
        rounds_to_resolve,
        level: Some(level),
    })
}

/// A known-bad control in the judged phase, read off the phase's pair intervals (level `coverage`).
pub(super) fn known_bad_control(
    kb: &KnownBadInput,
    pin: &PhaseInput,
    t: &[Vec<f64>],
    all_bad: &[String],
    policy: &AnalysisPolicy,
    coverage: f64,
) -> Result<ControlResult> {
    let col = |l: &str| {
        pin.labels
            .iter()
            .position(|x| x == l)
            .with_context(|| format!("a control names {l:?}, which is not a configuration of the campaign"))
    };
    let bad = col(&kb.label)?;
    let m = policy.min_effect_pct;
    if let Some((reference, slowdown, mechanism)) = &kb.graded {
        let r = canary_result(t, bad, col(reference)?, policy, coverage)?;
        let i = &r.interval;
        let (outcome, rounds) = if r.verdict == Verdict::Fail {
            (ControlOutcome::Behaved, None)
        } else if i.ci_high_pct < *slowdown {
            (ControlOutcome::Misbehaved, None)
        } else {
            (
                ControlOutcome::Inconclusive,
                inference::rounds_to_decide(i.sd_log, *slowdown, m, coverage, inference::POWER),
            )
        };
        let tail = match outcome {
            ControlOutcome::Inconclusive => resolve_words_bounded(rounds),
            ControlOutcome::Misbehaved => format!("; the interval excludes the declared {slowdown}%"),
            ControlOutcome::Behaved => String::new(),
        };
        return Ok(ControlResult {
            kind: "known-bad".into(),
            subject: format!("{} = {reference} slowed by a declared {slowdown}% ({mechanism})", kb.label),
            phase: Some(pin.phase),
            predicted: format!("slower than {reference}: interval above +{m}% (fail)"),
            observed: format!("{} vs {reference}: {} → {}{tail}", kb.label, interval_words(i), r.verdict.word()),
            outcome,
            rounds_to_resolve: rounds,
            level: Some(coverage),
        });
    }
    let others: Vec<usize> = (0..pin.labels.len()).filter(|&c| c != bad && !all_bad.contains(&pin.labels[c])).collect();
    let (mut slower, mut wrong, mut need) = (0, Vec::new(), Vec::<Option<u32>>::new());
    for &o in &others {
        let r = canary_result(t, bad, o, policy, coverage)?;
        match r.verdict {
            Verdict::Fail => slower += 1,
            Verdict::Pass => wrong.push(pin.labels[o].clone()),
            _ => need.push(inference::rounds_to_decide(
                r.interval.sd_log,
                r.interval.diff_pct,
                m,
                coverage,
                inference::POWER,
            )),
        }
    }
    let (outcome, rounds) = if !wrong.is_empty() {
        (ControlOutcome::Misbehaved, None)
    } else if slower == others.len() {
        (ControlOutcome::Behaved, None)
    } else {
        // the pair that needs the most rounds sets the count (None: more than suggested, or never)
        (
            ControlOutcome::Inconclusive,
            need.iter().copied().collect::<Option<Vec<u32>>>().and_then(|v| v.into_iter().max()),
        )
    };
    let tail = match outcome {
        ControlOutcome::Misbehaved => format!("; decided FASTER than {}", wrong.join(", ")),
        ControlOutcome::Inconclusive => resolve_words(rounds),
        ControlOutcome::Behaved => String::new(),
    };
    Ok(ControlResult {
        kind: "known-bad".into(),
        subject: kb.label.clone(),
        phase: Some(pin.phase),
        predicted: format!(
            "slower than each of the {} other configurations: every interval above +{m}% (fail)",
            others.len()
        ),
        observed: format!("decided slower than {slower} of {}{tail}", others.len()),
        outcome,
        rounds_to_resolve: rounds,
        level: Some(coverage),
    })
}

/// The injected-skew control of one job.
pub(super) fn skew_control(label: &str, round: u32, d: &DelayCounts) -> ControlResult {
    let rate = if d.delayed > 0 { d.detected as f64 / d.delayed as f64 } else { f64::NAN };
    let fa = if d.undelayed > 0 { d.false_alarms as f64 / d.undelayed as f64 } else { f64::NAN };
    ControlResult {
        kind: "injected-skew".into(),
        subject: format!("{label} round {round}: {} µs arrival delay on one rank", d.delay_us),
        phase: None,
        predicted: if d.beyond_design {
            "arrival skew beyond the replay's design (the skew itself outside replay) >= delay/2 − bound on at least \
                90% of delayed collectives, on at most 1% of the others"
        } else {
            "arrival skew >= delay/2 − bound on at least 90% of delayed collectives, on at most 1% of the others"
        }
        .into(),
        observed: if d.delayed == 0 {
            "no delayed collective in a judged phase (on GPUs only replay is judged: elsewhere the device queue may \
                run ahead of the host)"
                .into()
        } else {
            format!(
                "{} of {} delayed detected ({:.1}%); {} of {} undelayed above the line ({:.2}%){}",
                d.detected,
                d.delayed,
                rate * 100.0,
                d.false_alarms,
                d.undelayed,
                fa * 100.0,
                match (d.beyond_design, d.skew_counts) {
                    (true, Some((det, fals))) =>
                        format!(", on skew beyond the replay's design (on the skew itself: {det} and {fals})"),
                    _ => String::new(),
                }
            )
        },
        outcome: if d.delayed > 0 && rate >= 0.9 && (fa.is_nan() || fa <= 0.01) {
            ControlOutcome::Behaved
        } else if d.delayed == 0 {
            ControlOutcome::Inconclusive
        } else {
            ControlOutcome::Misbehaved
        },
        rounds_to_resolve: None,
        level: None,
    }
}
