//! `import run`: a verified CommCanary run as a communication trace, so the
//! tool's own evidence becomes a source for canaries.
//!
//! Consumes a run directory, joined and verified by [`crate::evidence::join`].
//! Produces a [`CommTrace`] of one phase's collectives per rank in issue order
//! (warm-ups included), with their times less any injected delay and the
//! compute timed between them; source names are `PHASE:NAME`. A run of
//! generated shards becomes a trace of source kind `synthetic`. Refuses a run
//! that does not verify and a phase it did not run. Details: docs/METHODS.md,
//! "Runs as traces".
use super::{
    ClockDomain, CollectiveKind, CommTrace, ComputeOp, DeviceSpan, RankTrace, SourceFile, SourceKind, TraceClock,
    TraceCollective, TraceGroup, TraceSource, UnknownField,
};
use crate::core::workload::Phase;
use crate::evidence::join;
use crate::evidence::shard::ComputeEvent;
use anyhow::{Context, Result};
use std::path::Path;

/// The trace of `phase` in the verified run at `dir`.
pub(crate) fn import_run(dir: &Path, phase: Phase) -> Result<CommTrace> {
    use crate::core::refusal::Code;
    let j = join::join_dir(dir).with_context(|| format!("import run {}", dir.display()))?;
    if !j.run.workload.phases.contains(&phase) {
        crate::refuse!(
            Code::BadInput,
            "{}: the run ran phases {:?}, not {phase}",
            dir.display(),
            j.run.workload.phases
        );
    }
    let first = j.shards.first().context("a verified run has shards")?;
    let groups: Vec<TraceGroup> = first
        .header
        .groups
        .iter()
        .map(|g| TraceGroup {
            name: g.id.to_string(),
            desc: Some(if g.id == 0 { "world".into() } else { format!("group {}", g.id) }),
            members: g.members.clone(),
        })
        .collect();
    let mut device_seen = false;
    let mut ranks = Vec::with_capacity(j.shards.len());
    for s in &j.shards {
        let mut compute: Vec<&ComputeEvent> = s.body.compute.iter().filter(|c| c.phase == phase).collect();
        compute.sort_by_key(|c| c.start_ns);
        let mut ci = 0;
        let mut prev_end = 0u64;
        let mut colls = Vec::new();
        for e in s.body.collectives.iter().filter(|e| e.phase == phase) {
            let kind_name = serde_json::to_value(e.kind)?.as_str().unwrap_or("all_reduce").to_string();
            let kind: CollectiveKind = serde_json::from_value(serde_json::Value::String(kind_name.clone()))
                .with_context(|| format!("collective kind {kind_name}"))?;
            let dtype = e.dtype;
            let elems = e.bytes / dtype.size_bytes();
            let mut c = TraceCollective::new(
                kind,
                &format!("{phase}:{}", kind.pytorch_name()),
                &e.group.to_string(),
                dtype,
                (elems, elems),
                (None, None),
                (e.root, e.peer),
            );
            let issue = e.host_issue_ns.saturating_sub(e.injected_delay_ns.unwrap_or(0));
            c.host_start_ns = Some(issue);
            c.host_duration_ns = Some(e.wait_end_ns.saturating_sub(issue));
            if let (Some(a), Some(b)) = (e.device_start_ns, e.device_end_ns) {
                device_seen = true;
                c.device = Some(DeviceSpan { start_ns: a, end_ns: b, kernel: "nccl".into() });
            }
            while ci < compute.len() && compute[ci].start_ns < issue {
                let k = compute[ci];
                if k.start_ns >= prev_end {
                    c.compute_before.push(ComputeOp {
                        name: serde_json::to_value(k.kind)?.as_str().unwrap_or("compute").to_string(),
                        stream: None,
                        device_start_ns: Some(k.start_ns),
                        duration_ns: Some(k.end_ns.saturating_sub(k.start_ns)),
                    });
                }
                ci += 1;
            }
            prev_end = e.wait_end_ns;
            colls.push(c);
        }
        super::number_sequences(&mut colls);
        ranks.push(RankTrace { rank: s.header.rank, collectives: colls, trailing_compute: Vec::new() });
    }
    let mut unknown = vec![UnknownField {
        field: "cross-rank time alignment".into(),
        reason: "each rank's times are its own host clock (the run's clock model is not applied)".into(),
    }];
    if !device_seen {
        unknown.push(UnknownField {
            field: "device".into(),
            reason: "the run measured no device intervals (CPU backend)".into(),
        });
    }
    let files = j
        .run
        .shards
        .iter()
        .map(|r| SourceFile { path: dir.join(&r.file).display().to_string(), sha256: r.sha256.clone(), rank: r.rank })
        .collect();
    // generated shards stay generated: the trace is synthetic, never a measured run
    let (kind, schema) = match j.shards.iter().find_map(|s| s.header.synthetic.as_ref()) {
        Some(m) => {
            unknown.push(UnknownField {
                field: "measurement".into(),
                reason: format!(
                    "the run's shards are synthetic (generated by {}, seed {}): nothing in this trace was measured",
                    m.generator, m.seed
                ),
            });
            (
                SourceKind::Synthetic,
                format!(
                    "commcanary synthetic run {} phase {phase} (generated by {}, seed {})",
                    j.run.run_id, m.generator, m.seed
                ),
            )
        }
        None => (SourceKind::Run, format!("commcanary run {} phase {phase}", j.run.run_id)),
    };
    let t = CommTrace {
        format_version: super::COMM_TRACE_FORMAT_VERSION,
        source: TraceSource { kind, schema: Some(schema), nccl_version: None, files },
        world_size: j.run.world_size,
        clock: TraceClock {
            domain: ClockDomain::HostPerRank,
            aligned_across_ranks: false,
            note: "each rank's CLOCK_MONOTONIC as its shard recorded it".into(),
        },
        unknown,
        groups,
        ranks,
        mpi: None,
    };
    // the checks every imported trace passes
    CommTrace::from_slice(&serde_json::to_vec(&t)?)
        .with_context(|| format!("{}: the run's collectives do not form a consistent trace", dir.display()))
}
