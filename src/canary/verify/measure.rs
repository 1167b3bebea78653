//! What one verified replay job measured. Consumes a joined run of the verify
//! campaign and its round; produces a `JobMeasure`: the timed passes, each
//! kind's latencies (all and per recurring position in a pass), the replay
//! phase's seconds and, where the job ran the overlap phase, the share of
//! communication hidden under compute. Refuses nothing.
use crate::analysis::{overlap, summary};
use crate::canary::compare::{self, JobMeasure};
use crate::core::workload::Phase;
use crate::evidence::join::JoinedRun;
use anyhow::Result;
use std::collections::BTreeMap;

/// What one verified run measured.
pub(crate) fn job_measure(j: &JoinedRun, round: u32) -> Result<JobMeasure> {
    let mut per_kind: BTreeMap<String, Vec<f64>> = BTreeMap::new();
    // per pass (token), its collectives in sequence order: (seq, kind, latency)
    let mut passes: BTreeMap<Option<u32>, Vec<(u64, String, f64)>> = BTreeMap::new();
    for c in j.collectives.iter().filter(|c| c.phase == Phase::Replay && !c.warmup) {
        let kind = serde_json::to_value(c.kind)?.as_str().unwrap_or("?").to_string();
        let worst = c.ranks.iter().map(|r| r.wait_end_ns.saturating_sub(r.host_issue_ns)).max().unwrap_or(0);
        let us = worst as f64 / 1e3;
        per_kind.entry(kind.clone()).or_default().push(us);
        passes.entry(c.token).or_default().push((c.seq, kind, us));
    }
    let passes: Vec<Vec<(u64, String, f64)>> = passes
        .into_values()
        .map(|mut v| {
            v.sort_by_key(|x| x.0);
            v
        })
        .collect();
    let per_kind_recurring_us = compare::recurring_by_position(&passes);
    let replay_s = j
        .shards
        .first()
        .and_then(|s| s.header.phases.iter().find(|p| p.phase == Phase::Replay))
        .map(|p| p.end_ns.saturating_sub(p.start_ns) as f64 / 1e9)
        .unwrap_or(0.0);
    let mut shares = Vec::new();
    for s in &j.shards {
        if s.header.workload.phases.contains(&Phase::Overlap) {
            let (_, compute, comm) = overlap::phase_intervals_ns(s, Phase::Overlap);
            let us =
                |v: Vec<(u64, u64)>| v.into_iter().map(|(a, b)| (a as f64 / 1e3, b as f64 / 1e3)).collect::<Vec<_>>();
            if let Some(x) = overlap::overlap(&us(compute), &us(comm)).ok().and_then(|r| r.overlap_of_comm) {
                shares.push(x);
            }
        }
    }
    Ok(JobMeasure {
        round,
        pass_us: summary::job_samples_us(j, Phase::Replay),
        per_kind_us: per_kind,
        per_kind_recurring_us,
        replay_s,
        hidden_share: (!shares.is_empty()).then(|| shares.iter().sum::<f64>() / shares.len() as f64),
    })
}
