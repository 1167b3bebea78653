//! One phase's numbers: per-job medians and p99s by round, a row per configuration and
//! every pair's interval with the relation read off it.
//! Consumes a [`PhaseInput`] and the frozen policy; produces its [`PhaseReport`] and the
//! [`PhaseTables`] that the controls, the canary and the proxies read. Refuses unpaired
//! rounds, fewer than two jobs per configuration, empty jobs and non-positive statistics.
use crate::analysis::inference::{self, PairedInterval, COVERAGE};
use crate::analysis::model::{ConfigRow, PairRow, PhaseInput, PhaseReport, Quantiles, RankModel, ECDF_STEP_PCT};
use crate::analysis::policy::AnalysisPolicy;
use crate::analysis::ranking;
use crate::core::stats;
use anyhow::{bail, Result};

fn quantiles(all: &mut [f64]) -> Quantiles {
    let (n, min) = (all.len(), all.iter().copied().fold(f64::NAN, f64::min));
    let mut q = |p| stats::percentile_nearest_rank(all, p).unwrap_or(f64::NAN);
    let (p5, p25, p50, p75, p95, p99, max) = (q(5.0), q(25.0), q(50.0), q(75.0), q(95.0), q(99.0), q(100.0));
    let steps = (100.0 / ECDF_STEP_PCT) as usize;
    let ecdf_us =
        if n == 0 { Vec::new() } else { (0..=steps).map(|i| q((i as f64 * ECDF_STEP_PCT).max(1e-9))).collect() };
    Quantiles { events: n, min, p5, p25, p50, p75, p95, p99, max, ecdf_us }
}

/// A phase's derived tables: job medians and p99s by round.
pub(super) struct PhaseTables {
    /// `table[round][config]` of job medians.
    pub(super) table: Vec<Vec<f64>>,
    /// `table_p99[round][config]` of job nearest-rank p99s.
    pub(super) table_p99: Vec<Vec<f64>>,
}

pub(super) fn tables(p: &PhaseInput) -> Result<PhaseTables> {
    let mut rounds: Vec<u32> = p.jobs.first().map(|j| j.iter().map(|x| x.round).collect()).unwrap_or_default();
    rounds.sort_unstable();
    for (c, js) in p.jobs.iter().enumerate() {
        let (phase, label) = (p.phase, &p.labels[c]);
        let mut r: Vec<u32> = js.iter().map(|x| x.round).collect();
        r.sort_unstable();
        if r != rounds {
            bail!(
                "phase {phase}: configuration {label} ran in rounds {r:?}, {} in {rounds:?}: rounds cannot be paired",
                p.labels[0]
            );
        }
        if js.len() < 2 {
            bail!("phase {phase}: configuration {label} has {} job(s); the analysis needs at least 2", js.len());
        }
        if let Some(j) = js.iter().find(|j| j.samples_us.is_empty()) {
            bail!("phase {phase}: configuration {label}, round {}: the job has no events", j.round);
        }
    }
    let mut table = vec![vec![0.0; p.labels.len()]; rounds.len()];
    let mut table_p99 = table.clone();
    for (c, js) in p.jobs.iter().enumerate() {
        for j in js {
            let r = rounds.iter().position(|&x| x == j.round).expect("same rounds");
            let mut v = j.samples_us.clone();
            table[r][c] = stats::median(&mut v).expect("non-empty");
            table_p99[r][c] = stats::percentile_nearest_rank(&mut v, 99.0).expect("non-empty");
        }
    }
    if let Some((r, c)) = (0..rounds.len())
        .flat_map(|r| (0..p.labels.len()).map(move |c| (r, c)))
        .find(|&(r, c)| !(table[r][c] > 0.0 && table_p99[r][c] > 0.0))
    {
        bail!(
            "phase {}: configuration {}, round {}: a job statistic is not positive; intervals are over log-ratios",
            p.phase,
            p.labels[c],
            rounds[r]
        );
    }
    Ok(PhaseTables { table, table_p99 })
}

pub(super) fn column(t: &[Vec<f64>], c: usize) -> Vec<f64> {
    t.iter().map(|r| r[c]).collect()
}

/// The interval of column `a` against column `b` at level `coverage`.
pub(super) fn pair_interval(t: &[Vec<f64>], a: usize, b: usize, coverage: f64) -> Result<PairedInterval> {
    inference::paired(&column(t, a), &column(t, b), coverage)
}

pub(super) fn analyze_phase(p: &PhaseInput, policy: &AnalysisPolicy) -> Result<(PhaseReport, PhaseTables)> {
    let t = tables(p)?;
    let k = p.labels.len();
    let probs = inference::rank_probabilities(
        &t.table,
        policy.bootstrap_resamples,
        policy.bootstrap_seed,
        policy.min_effect_pct,
    )?;
    let iqr = |v: &mut Vec<f64>| {
        stats::percentile_nearest_rank(v, 75.0)
            .zip(stats::percentile_nearest_rank(v, 25.0))
            .map(|(a, b)| a - b)
            .unwrap_or(f64::NAN)
    };
    let mut rows: Vec<ConfigRow> = (0..k)
        .map(|c| {
            let mut meds = column(&t.table, c);
            let mut p99s = column(&t.table_p99, c);
            let mut pooled: Vec<f64> = p.jobs[c].iter().flat_map(|j| j.samples_us.iter().copied()).collect();
            ConfigRow {
                label: p.labels[c].clone(),
                jobs: p.jobs[c].len(),
                iqr_us: iqr(&mut meds),
                median_us: stats::median(&mut meds).unwrap_or(f64::NAN),
                p99_iqr_us: iqr(&mut p99s),
                p99_us: stats::median(&mut p99s).unwrap_or(f64::NAN),
                rank: 0,
                p_best: probs.p_best[c],
                p_worst: probs.p_worst[c],
                distribution: quantiles(&mut pooled),
            }
        })
        .collect();
    let family_pairs = k * (k - 1) / 2;
    let pair_coverage = inference::simultaneous_coverage(COVERAGE, family_pairs);
    let pairs = pair_rows(&p.labels, &t.table, policy, pair_coverage)?;
    let pairs_p99 = pair_rows(&p.labels, &t.table_p99, policy, pair_coverage)?;
    let mut order: Vec<usize> = (0..k).collect();
    order.sort_by(|&a, &b| rows[a].median_us.total_cmp(&rows[b].median_us));
    for (r, &c) in order.iter().enumerate() {
        rows[c].rank = r + 1;
    }
    rows.sort_by_key(|r| r.rank);
    Ok((
        PhaseReport {
            phase: p.phase,
            metric: if p.phase.has_tokens() { "token_latency_us" } else { "completion_us" }.into(),
            rounds: t.table.len(),
            rank_model: RankModel {
                draws: probs.draws,
                seed: probs.seed,
                mc_se: probs.mc_se,
                sigma_log: probs.sigma_log,
                sigma_df: probs.sigma_df,
                tau_median_log: probs.tau_median,
                equivalence_pct: probs.equivalence_pct,
            },
            rows,
            pairs,
            pairs_p99,
            family_pairs,
            pair_coverage,
        },
        t,
    ))
}

/// Every pair's interval over `table[round][config]` at level `coverage` and the relation read off it.
pub(super) fn pair_rows(
    labels: &[String],
    table: &[Vec<f64>],
    policy: &AnalysisPolicy,
    coverage: f64,
) -> Result<Vec<PairRow>> {
    let mut pairs = Vec::new();
    for i in 0..labels.len() {
        for j in i + 1..labels.len() {
            let c = pair_interval(table, i, j, coverage)?;
            pairs.push(PairRow {
                a: labels[i].clone(),
                b: labels[j].clone(),
                diff_pct: c.diff_pct,
                ci_low_pct: c.ci_low_pct,
                ci_high_pct: c.ci_high_pct,
                relation: ranking::relation_from_interval(c.ci_low_pct, c.ci_high_pct, policy.min_effect_pct),
            });
        }
    }
    Ok(pairs)
}
