//! `summarize`: descriptive per-configuration results over verified runs.
//!
//! Consumes `LABEL=RUN_DIR` pairs; every run is verified by [`crate::evidence::join`]
//! first (a run that does not join is refused, naming it). Produces, per
//! configuration and phase, the median over jobs of each job's median (the
//! job is the unit of replication, docs/ARCHITECTURE.md §9: events inside a job are not
//! independent samples), the spread of job medians (min, max), and a rank per
//! phase. The metric is per-token latency for workload phases and
//! issue-to-completion time for `isolated`. Descriptive only: no uncertainty
//! analysis, no tie policy, and the output says so.
use crate::core::refusal::Code;
use crate::core::stats::median;
use crate::core::workload::Phase;
use crate::evidence::join::{join_dir, JoinedRun};
use anyhow::{bail, Context, Result};
use serde::Serialize;
use std::collections::BTreeMap;
use std::path::PathBuf;

/// One configuration in one phase.
#[derive(schemars::JsonSchema, Serialize, Clone, Debug)]
pub struct ConfigPhase {
    /// Configuration label.
    pub config: String,
    /// Phase.
    pub phase: Phase,
    /// Metric name (`token_latency_us` or `completion_us`).
    pub metric: &'static str,
    /// Jobs (runs) contributing.
    pub jobs: usize,
    /// Median over jobs of per-job medians, µs.
    pub median_of_job_medians_us: f64,
    /// Smallest job median, µs.
    pub job_median_min_us: f64,
    /// Largest job median, µs.
    pub job_median_max_us: f64,
    /// Rank within the phase (1 = fastest).
    pub rank: usize,
}

/// The whole summary.
#[derive(schemars::JsonSchema, Serialize, Clone, Debug)]
pub struct Summary {
    /// Evidence class of these numbers.
    pub evidence: &'static str,
    /// Rows, grouped by phase then rank.
    pub rows: Vec<ConfigPhase>,
}

/// One job's sample of the phase's metric, µs: per-token latencies for
/// workload phases, per-collective completion times (every rank) for
/// `isolated`; warm-ups excluded.
pub(crate) fn job_samples_us(j: &JoinedRun, phase: Phase) -> Vec<f64> {
    if phase.has_tokens() {
        j.shards
            .iter()
            .flat_map(|s| s.body.tokens.iter())
            .filter(|t| t.phase == phase && !t.warmup)
            .map(|t| (t.end_ns - t.start_ns) as f64 / 1e3)
            .collect()
    } else {
        j.collectives
            .iter()
            .filter(|c| c.phase == phase && !c.warmup)
            .flat_map(|c| c.ranks.iter().map(|t| t.completion_ns() as f64 / 1e3))
            .collect()
    }
}

/// Per-job median of the phase's metric.
pub(crate) fn job_median(j: &JoinedRun, phase: Phase) -> Option<f64> {
    median(&mut job_samples_us(j, phase))
}

/// Parse `LABEL=DIR`.
pub(crate) fn parse_labelled(s: &str) -> Result<(String, PathBuf)> {
    let (l, d) = s.split_once('=').with_context(|| format!("{s:?}: expected LABEL=RUN_DIR"))?;
    if l.is_empty() {
        bail!("{s:?}: empty label");
    }
    Ok((l.to_string(), PathBuf::from(d)))
}

/// Build the summary from labelled run directories.
pub fn summarize(runs: &[(String, PathBuf)]) -> Result<Summary> {
    let mut per: BTreeMap<(Phase, String), Vec<f64>> = BTreeMap::new();
    // a run is one job: the same directory (by any path) or run id twice would count it twice
    let mut seen: BTreeMap<String, PathBuf> = BTreeMap::new();
    for (label, dir) in runs {
        let j = join_dir(dir).with_context(|| format!("run {} ({label}) does not verify", dir.display()))?;
        j.refuse_synthetic("summarize")?;
        let real = std::fs::canonicalize(dir).unwrap_or_else(|_| dir.clone());
        for key in [format!("dir:{}", real.display()), format!("id:{}", j.run.run_id)] {
            if let Some(prev) = seen.insert(key, dir.clone()) {
                crate::refuse!(
                    Code::DuplicateRun,
                    "{} and {} are the same run ({}); a run is one job and is given once",
                    prev.display(),
                    dir.display(),
                    j.run.run_id
                );
            }
        }
        if let Some(c) = j.shards.iter().flat_map(|s| s.header.checks.iter()).find(|c| c.wrong_elements > 0) {
            anyhow::bail!(
                "run {} ({label}) computed wrong results ({} wrong elements in {} group {} seq {}): it is never ranked",
                dir.display(),
                c.wrong_elements,
                c.phase,
                c.group,
                c.seq
            );
        }
        for &p in &j.run.workload.phases {
            if let Some(m) = job_median(&j, p) {
                per.entry((p, label.clone())).or_default().push(m);
            }
        }
    }
    let mut rows = Vec::new();
    for p in per.keys().map(|k| k.0).collect::<std::collections::BTreeSet<_>>() {
        let mut group: Vec<ConfigPhase> = per
            .iter_mut()
            .filter(|(k, _)| k.0 == p)
            .map(|((_, label), v)| ConfigPhase {
                config: label.clone(),
                phase: p,
                metric: if p.has_tokens() { "token_latency_us" } else { "completion_us" },
                jobs: v.len(),
                job_median_min_us: v.iter().copied().fold(f64::INFINITY, f64::min),
                job_median_max_us: v.iter().copied().fold(f64::NEG_INFINITY, f64::max),
                median_of_job_medians_us: median(v).expect("non-empty"),
                rank: 0,
            })
            .collect();
        group.sort_by(|a, b| a.median_of_job_medians_us.total_cmp(&b.median_of_job_medians_us));
        for (i, r) in group.iter_mut().enumerate() {
            r.rank = i + 1;
        }
        rows.extend(group);
    }
    Ok(Summary {
        evidence:
            "descriptive: median over jobs of per-job medians; ranks are by point estimate with no tie policy or \
                interval",
        rows,
    })
}

/// Human rendering.
pub fn render(s: &Summary) -> String {
    use std::fmt::Write;
    let mut o = String::new();
    let _ = writeln!(
        o,
        "{:<21} {:>4}  {:<28} {:>5} {:>14} {:>22}",
        "phase", "rank", "config", "jobs", "median us", "job medians min..max"
    );
    let mut last = None;
    for r in &s.rows {
        if last != Some(r.phase) && last.is_some() {
            let _ = writeln!(o);
        }
        last = Some(r.phase);
        let _ = writeln!(
            o,
            "{:<21} {:>4}  {:<28} {:>5} {:>14.1} {:>10.1}..{:<10.1}",
            r.phase.name(),
            r.rank,
            r.config,
            r.jobs,
            r.median_of_job_medians_us,
            r.job_median_min_us,
            r.job_median_max_us
        );
    }
    let _ = writeln!(o, "({})", s.evidence);
    o
}
