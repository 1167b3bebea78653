//! The truth section: the user's real job ranks the configurations, and every
//! proxy's pick is judged by what it costs that job (free of I/O).
//!
//! Consumes the truth cells' costs per configuration and round (the metric,
//! or its reciprocal when higher is better), their wall seconds, the proxy
//! jobs' wall seconds, and the proxy phases' own inputs and reports. Produces
//! the [`TruthReport`]: the truth's ranking with the campaign's statistics;
//! per proxy its agreement and τ-b against the truth, the regret of its pick
//! with an interval, and the decision cost; the controls judged on the truth.
//! Refuses: truth jobs in other rounds than the proxies', fewer than two
//! rounds, a non-positive cost. Method: docs/CAMPAIGNS.md ("Regret").
use super::inference::{self, PairedInterval};
use super::model::{ControlsInput, PairRow, PhaseInput, PhaseReport};
pub use super::model::{ProxyJudged, Regret, TruthDecisionCost, TruthInput, TruthReport, TruthRow};
use super::phase::{analyze_phase, column, tables};
use super::policy::AnalysisPolicy;
use super::ranking::{self, Relation};
use crate::core::stats;
use anyhow::{bail, Result};

/// The regret of `pick` (a column of `table[round][config]` of costs), read
/// off the pair intervals at `coverage`: with every interval of the pick
/// against another covering at once, max(0, max of the lower ends) and
/// max(0, max of the upper ends) bound the true regret (the maximum is
/// monotone in each argument).
pub fn regret_of(
    table: &[Vec<f64>],
    labels: &[String],
    pick: usize,
    coverage: f64,
    min_effect_pct: f64,
) -> Result<Regret> {
    let mut against = Vec::new();
    for c in (0..labels.len()).filter(|&c| c != pick) {
        let i: PairedInterval = inference::paired(&column(table, pick), &column(table, c), coverage)?;
        against.push((labels[c].clone(), i.diff_pct, i.ci_low_pct, i.ci_high_pct));
    }
    Ok(combine(&labels[pick], &against, coverage, min_effect_pct))
}

/// [`regret_of`] from a report's pair rows (`pick` against every other label
/// of `pairs`; a row the other way round is turned: on the log scale the
/// interval is symmetric, so its ends swap and change sign).
pub fn regret_from_pairs(pairs: &[PairRow], pick: &str, level: f64, min_effect_pct: f64) -> Option<Regret> {
    let turn = |x: f64| 100.0 * (1.0 / (1.0 + x / 100.0) - 1.0);
    let against: Vec<(String, f64, f64, f64)> = pairs
        .iter()
        .filter_map(|p| {
            if p.a == pick {
                Some((p.b.clone(), p.diff_pct, p.ci_low_pct, p.ci_high_pct))
            } else if p.b == pick {
                Some((p.a.clone(), turn(p.diff_pct), turn(p.ci_high_pct), turn(p.ci_low_pct)))
            } else {
                None
            }
        })
        .collect();
    (!against.is_empty()).then(|| combine(pick, &against, level, min_effect_pct))
}

/// The regret from the pick's intervals against each other configuration: (label, diff, low, high) in percent.
fn combine(pick: &str, against: &[(String, f64, f64, f64)], level: f64, min_effect_pct: f64) -> Regret {
    let mut out = Regret {
        pick: pick.to_string(),
        regret_pct: 0.0,
        low_pct: 0.0,
        high_pct: 0.0,
        level,
        within_best_set: true,
        trails: None,
    };
    for (label, diff, lo, hi) in against {
        if *diff > out.regret_pct {
            out.regret_pct = *diff;
            out.trails = Some(label.clone());
        }
        out.low_pct = out.low_pct.max(*lo);
        out.high_pct = out.high_pct.max(*hi);
        if ranking::relation_from_interval(*lo, *hi, min_effect_pct) == Relation::BFaster {
            out.within_best_set = false;
        }
    }
    out
}

/// Seconds of the first `rounds` rounds (in round order) over every label.
fn seconds_over(per_label: &[Vec<(u32, f64)>], rounds: usize) -> Option<f64> {
    let mut all: Vec<u32> = per_label.iter().flatten().map(|x| x.0).collect();
    all.sort_unstable();
    all.dedup();
    let keep: Vec<u32> = all.into_iter().take(rounds).collect();
    let s: f64 = per_label.iter().flatten().filter(|x| keep.contains(&x.0)).map(|x| x.1).sum();
    (!per_label.iter().all(Vec::is_empty)).then_some(s)
}

/// The truth section. `proxies` are the campaign's proxies over the truth's
/// labels: a name, its input and its report.
pub(super) fn truth_report(
    t: &TruthInput,
    proxies: &[(String, &PhaseInput, &PhaseReport)],
    controls: &ControlsInput,
    policy: &AnalysisPolicy,
    evidence: &str,
) -> Result<TruthReport> {
    if t.labels.len() < 2 {
        bail!("truth: {} configuration(s); a ranking needs at least 2", t.labels.len());
    }
    let pin = t.phase_input();
    let (rep, tab) = analyze_phase(&pin, policy)?;
    let m = policy.min_effect_pct;
    let truth_rel: Vec<Relation> = rep.pairs.iter().map(|p| p.relation).collect();
    let decided = truth_rel.iter().filter(|r| **r != Relation::NotDistinguished).count();
    let value_of = |label: &str| -> (f64, f64) {
        let i = t.labels.iter().position(|l| l == label).expect("label");
        let mut v: Vec<f64> = t.values[i].iter().map(|x| x.1).collect();
        let med = stats::median(&mut v).unwrap_or(f64::NAN);
        let mut q = |p| stats::percentile_nearest_rank(&mut v, p).unwrap_or(f64::NAN);
        (med, q(75.0) - q(25.0))
    };
    let rows: Vec<TruthRow> = rep
        .rows
        .iter()
        .map(|r| {
            let (median, iqr) = value_of(&r.label);
            TruthRow {
                label: r.label.clone(),
                jobs: r.jobs,
                median,
                iqr,
                rank: r.rank,
                p_best: r.p_best,
                p_worst: r.p_worst,
            }
        })
        .collect();
    // no other label decided faster: (l, x) is never b-faster
    let best_set: Vec<String> = t
        .labels
        .iter()
        .filter(|l| t.labels.iter().all(|x| rep.relation(l, x) != Some(Relation::BFaster)))
        .cloned()
        .collect();
    let truth_rounds = if decided > 0 { super::agreement::rounds_to_decide(&pin, policy, &truth_rel)? } else { None };
    let summaries = rep.summaries(&t.labels);
    let mut judged = Vec::new();
    for (name, ppin, prep) in proxies {
        if ppin.labels != t.labels {
            continue;
        }
        let ptab = tables(ppin)?;
        if ptab.table.len() != tab.table.len() {
            bail!(
                "truth: {} rounds, proxy {name} {} rounds; they run in the same rounds",
                tab.table.len(),
                ptab.table.len()
            );
        }
        let pick_label = prep.rows.iter().find(|r| r.rank == 1).map(|r| r.label.clone()).unwrap_or_default();
        let pick = t.labels.iter().position(|l| *l == pick_label).expect("same labels");
        let prel: Vec<Relation> = prep.pairs.iter().map(|p| p.relation).collect();
        let comparison = ranking::compare_relations(
            &summaries,
            &prel,
            &truth_rel,
            policy.tie_policy,
            &format!("{evidence}; proxy {name} against the truth"),
        )?;
        let (tau_policy, tau_plain) = super::tau::tau_estimates(&ptab.table, &tab.table, policy, prep.pair_coverage);
        let regret = regret_of(&tab.table, &t.labels, pick, rep.pair_coverage, m)?;
        let decision_cost = if decided == 0 {
            TruthDecisionCost::default()
        } else {
            let proxy_rounds = super::agreement::rounds_to_decide(ppin, policy, &truth_rel)?;
            let truth_s = truth_rounds.and_then(|r| seconds_over(&t.seconds, r));
            let proxy_s = proxy_rounds.and_then(|r| seconds_over(&t.proxy_seconds, r));
            TruthDecisionCost {
                truth_decided_pairs: decided,
                truth_rounds,
                proxy_rounds,
                truth_s,
                proxy_s,
                truth_per_proxy: truth_s.zip(proxy_s).filter(|(_, p)| *p > 0.0).map(|(a, b)| a / b),
            }
        };
        judged.push(ProxyJudged {
            proxy: name.clone(),
            pick: pick_label,
            comparison,
            tau_policy,
            tau_plain,
            regret,
            decision_cost,
        });
    }
    // the controls, read on the truth's own pair intervals
    let mut ctl = Vec::new();
    let col = |l: &str| t.labels.iter().position(|x| x == l);
    let family = controls.aa_pairs.len();
    for (a, b) in &controls.aa_pairs {
        let (Some(ca), Some(cb)) = (col(a), col(b)) else { continue };
        let level = super::controls::aa_level(family, rep.pair_coverage);
        ctl.push(super::controls::aa_control(
            &super::controls::AaPair { a: a.as_str(), b: b.as_str(), ca, cb },
            pin.phase,
            &tab.table,
            policy,
            level,
            family,
        )?);
    }
    let all_bad: Vec<String> = controls.known_bad.iter().map(|k| k.label.clone()).collect();
    for kb in controls.known_bad.iter().filter(|k| col(&k.label).is_some()) {
        ctl.push(super::controls::known_bad_control(kb, &pin, &tab.table, &all_bad, policy, rep.pair_coverage)?);
    }
    // judged on the truth, not on a phase
    ctl.iter_mut().for_each(|c| c.phase = None);
    let mut notes = Vec::new();
    if decided == 0 {
        notes.push(format!(
            "the truth decides no pair of configurations in {} rounds (every pair interval reaches within ±{m}% or \
                across 0): there is no decision to preserve, so no decision cost; the regret intervals say how close \
                the picks are",
            rep.rounds
        ));
    }
    let benign_decided = rep
        .pairs
        .iter()
        .filter(|p| p.relation != Relation::NotDistinguished && !all_bad.contains(&p.a) && !all_bad.contains(&p.b))
        .count();
    if decided > 0 && benign_decided == 0 && !all_bad.is_empty() {
        notes.push(
            "the truth decides only pairs with a known-bad control: no two benign configurations are told apart on \
                this machine"
                .into(),
        );
    }
    Ok(TruthReport {
        metric: t.metric.clone(),
        unit: t.unit.clone(),
        better: if t.higher_is_better { "higher" } else { "lower" }.into(),
        rounds: rep.rounds,
        rows,
        pairs: rep.pairs,
        pair_coverage: rep.pair_coverage,
        rank_model: rep.rank_model,
        best_set,
        proxies: judged,
        truth_rounds_to_decide: truth_rounds,
        truth_decide_s: truth_rounds.and_then(|r| seconds_over(&t.seconds, r)),
        truth_total_s: t.seconds.iter().flatten().map(|x| x.1).sum(),
        controls: ctl,
        notes,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn labels(n: usize) -> Vec<String> {
        (0..n).map(|i| format!("c{i}")).collect()
    }

    #[test]
    fn regret_is_zero_for_the_best_and_bounded_for_the_rest() {
        // c0 best, c1 10% slower, c2 tied with c0; 6 rounds with a little noise
        let table: Vec<Vec<f64>> = (0..6)
            .map(|r| {
                let e = 1.0 + 0.002 * (r as f64 - 2.5);
                vec![100.0 * e, 110.0 * e * (1.0 + 0.001 * r as f64), 100.0 * e * (1.0 - 0.001 * (r % 2) as f64)]
            })
            .collect();
        let l = labels(3);
        let best = regret_of(&table, &l, 0, 0.983, 1.0).unwrap();
        assert!(best.within_best_set && best.low_pct == 0.0 && best.high_pct < 1.0, "{best:?}");
        let slow = regret_of(&table, &l, 1, 0.983, 1.0).unwrap();
        assert!(!slow.within_best_set, "{slow:?}");
        assert!(slow.low_pct > 8.0 && slow.high_pct < 12.5 && (slow.regret_pct - 10.2).abs() < 0.6, "{slow:?}");
        assert!(slow.trails.is_some());
        // the same regret from the report's pair rows, whichever way round a row is
        let policy = AnalysisPolicy {
            tie_policy: ranking::TiePolicy::Interval,
            min_effect_pct: 1.0,
            delta_pct: 5.0,
            bootstrap_resamples: 100,
            bootstrap_seed: 1,
        };
        let pairs = super::super::phase::pair_rows(&l, &table, &policy, 0.983).unwrap();
        for (i, want) in [(0, &best), (1, &slow)] {
            let got = regret_from_pairs(&pairs, &l[i], 0.983, 1.0).unwrap();
            assert_eq!(got.within_best_set, want.within_best_set);
            for (a, b) in
                [(got.regret_pct, want.regret_pct), (got.low_pct, want.low_pct), (got.high_pct, want.high_pct)]
            {
                assert!((a - b).abs() < 1e-9, "{got:?} vs {want:?}");
            }
        }
    }
}
