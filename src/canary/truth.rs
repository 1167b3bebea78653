//! `canary verify` with the user's real job: the source's and every
//! candidate's pick judged by its regret on the job (`truth.regret`).
//!
//! Consumes the verify campaign's report (its truth section, run under the
//! source variant's configurations) and each variant's replay jobs. Produces
//! per variant its pick (the configuration its replays rank first by median),
//! the regret of that pick on the job with its interval, and the rounds and
//! replay seconds it took to decide what the job decides. Judges; never
//! changes a candidate's assurance state (the ladder keeps its meaning).
use super::compare::JobMeasure;
pub use super::compare::TruthJudgement;
use crate::analysis::agreement;
use crate::analysis::policy::AnalysisPolicy;
use crate::analysis::ranking::Relation;
use crate::analysis::truth::{regret_from_pairs, TruthReport};
use crate::core::stats;
use anyhow::Result;
use serde::{Deserialize, Serialize};

/// The real job's side of `canary verify`.
#[derive(schemars::JsonSchema, Serialize, Deserialize, Clone, Debug, PartialEq)]
pub struct VerifyTruth {
    /// The metric in words, its unit and which way is better.
    pub metric: String,
    /// Unit.
    pub unit: String,
    /// `lower` or `higher`.
    pub better: String,
    /// Configurations no other is decided better than on the job.
    pub best_set: Vec<String>,
    /// Pairs the job decides.
    pub decided_pairs: usize,
    /// Rounds and seconds the job took to decide them.
    pub truth_rounds: Option<usize>,
    /// Job seconds over those rounds, every configuration.
    pub truth_s: Option<f64>,
    /// The source trace's pick judged on the job.
    pub source: TruthJudgement,
}

/// The job's label of configuration `config` (its truth cells run under the source variant).
fn label(config: &str) -> String {
    format!("source.{config}")
}

/// A configuration's name from the job's label.
fn unlabel(s: &str) -> String {
    s.strip_prefix("source.").unwrap_or(s).to_string()
}

/// Judge one variant's jobs (`jobs[config]`, configurations in `configs` order) on the job.
pub(crate) fn judge(
    t: &TruthReport,
    configs: &[String],
    jobs: &[Vec<JobMeasure>],
    policy: &AnalysisPolicy,
) -> Result<Option<TruthJudgement>> {
    let med = |v: &[f64]| {
        let mut v = v.to_vec();
        stats::median(&mut v)
    };
    let per_config: Vec<Option<f64>> =
        jobs.iter().map(|js| med(&js.iter().filter_map(|j| med(&j.pass_us)).collect::<Vec<_>>())).collect();
    let Some(pick) = per_config
        .iter()
        .enumerate()
        .filter_map(|(i, m)| m.map(|m| (i, m)))
        .min_by(|a, b| a.1.total_cmp(&b.1))
        .map(|(i, _)| i)
    else {
        return Ok(None);
    };
    let Some(mut regret) = regret_from_pairs(&t.pairs, &label(&configs[pick]), t.pair_coverage, policy.min_effect_pct)
    else {
        return Ok(None);
    };
    regret.pick = unlabel(&regret.pick);
    regret.trails = regret.trails.as_deref().map(unlabel);
    // the job's relations in configuration order (its labels are the source variant's, in that order)
    let truth_rel: Vec<Relation> = t.pairs.iter().map(|p| p.relation).collect();
    let decided = truth_rel.iter().any(|r| *r != Relation::NotDistinguished);
    let pin = super::compare::phase_input(configs, jobs);
    let rounds = if decided { agreement::rounds_to_decide(&pin, policy, &truth_rel)? } else { None };
    let secs = rounds.map(|r| {
        let mut all: Vec<u32> = jobs.iter().flatten().map(|j| j.round).collect();
        all.sort_unstable();
        all.dedup();
        let keep: Vec<u32> = all.into_iter().take(r).collect();
        jobs.iter().flatten().filter(|j| keep.contains(&j.round)).map(|j| j.replay_s).sum::<f64>()
    });
    Ok(Some(TruthJudgement {
        pick: configs[pick].clone(),
        regret,
        rounds_to_truth: rounds,
        replay_s_to_truth: secs,
        truth_per_variant: t.truth_decide_s.zip(secs).filter(|(_, s)| *s > 0.0).map(|(a, b)| a / b),
    }))
}

/// The job's side, with the source's judgement.
pub(crate) fn verify_truth(
    t: &TruthReport,
    configs: &[String],
    source_jobs: &[Vec<JobMeasure>],
    policy: &AnalysisPolicy,
) -> Result<Option<VerifyTruth>> {
    let Some(source) = judge(t, configs, source_jobs, policy)? else { return Ok(None) };
    Ok(Some(VerifyTruth {
        metric: t.metric.clone(),
        unit: t.unit.clone(),
        better: t.better.clone(),
        best_set: t.best_set.iter().map(|l| unlabel(l)).collect(),
        decided_pairs: t.pairs.iter().filter(|p| p.relation != Relation::NotDistinguished).count(),
        truth_rounds: t.truth_rounds_to_decide,
        truth_s: t.truth_decide_s,
        source,
    }))
}

/// `truth.regret` in words, for the text report.
pub(crate) fn words(j: &TruthJudgement) -> String {
    let cost = match (j.rounds_to_truth, j.replay_s_to_truth) {
        (Some(r), Some(s)) => format!(
            "reaches the job's decisions in {r} rounds ({s:.2} s of replay{})",
            j.truth_per_variant.map(|x| format!(", {x:.1}x cheaper than the job")).unwrap_or_default()
        ),
        _ => "does not reach the job's decisions in these rounds (or the job decides none)".into(),
    };
    format!("truth.regret: pick {}: {}; {cost}", j.pick, crate::analysis::regret_words(&j.regret))
}
