//! `export chrome`: a joined run as a Chrome/Perfetto trace (Trace Event Format JSON).
//!
//! Consumes a verified run. Produces one process per rank with rows (threads)
//! for phases, tokens, host calls (issue and wait), the compute stream and
//! the communication stream, on one time axis: every rank's times are mapped
//! onto rank 0's timebase through its clock model (local clock where a run
//! has none, which the metadata says), then rebased to the earliest event.
//! Kernel rows (compute kernels, NCCL kernels) come from CUPTI kernel records
//! only; where a rank has none they stay empty and the metadata says why:
//! event-bracketed stream intervals are never relabelled as kernels.
use crate::evidence::join::JoinedRun;
use crate::evidence::shard::{self, ComputeKind, KernelKind};
use serde_json::{json, Value};

const ROWS: [(u32, &str); 7] = [
    (0, "phases"),
    (1, "tokens"),
    (2, "host calls"),
    (3, "compute stream"),
    (4, "comm stream"),
    (5, "GEMM kernels (CUPTI)"),
    (6, "NCCL kernels (CUPTI)"),
];

/// Build the trace JSON for a joined run.
pub(crate) fn chrome_trace(j: &JoinedRun) -> Value {
    // (rank, row, name, start_ns on the reference timebase, end_ns, args)
    let mut spans: Vec<(u32, u32, String, f64, f64, Value)> = Vec::new();
    let mut calibrated = true;
    for s in &j.shards {
        let r = s.header.rank;
        let model = s.header.clock.as_ref().map(|c| c.model);
        calibrated &= model.is_some();
        let to_ref = |t: u64| model.map(|m| m.to_reference(t)).unwrap_or(t as f64);
        let mut span = |row: u32, name: String, a: u64, b: u64, args: Value| {
            spans.push((r, row, name, to_ref(a), to_ref(b), args));
        };
        for p in &s.header.phases {
            span(0, p.phase.name().into(), p.start_ns, p.end_ns, json!({"collectives": p.collectives}));
        }
        for t in &s.body.tokens {
            span(1, format!("token {}", t.token), t.start_ns, t.end_ns, json!({"phase": t.phase, "warmup": t.warmup}));
        }
        for e in &s.body.collectives {
            let mut args = json!({"phase": e.phase, "seq": e.seq, "bytes": e.bytes, "warmup": e.warmup});
            // an imported trace's other kinds (shard format 6) run on their own groups, with a root or peer
            if e.group != 0 {
                args["group"] = json!(e.group);
            }
            for (k, v) in [("root", e.root), ("peer", e.peer)] {
                if let Some(v) = v {
                    args[k] = json!(v);
                }
            }
            let kind = match e.kind {
                shard::CollectiveKind::AllReduce => "allreduce",
                k => k.name(),
            };
            span(2, format!("{kind} issue"), e.host_issue_ns, e.host_return_ns, args.clone());
            span(2, format!("{kind} wait"), e.wait_start_ns, e.wait_end_ns, args.clone());
            let (a, b, device) = e.execution_interval_ns();
            let name = if device {
                format!("{kind} {}B", e.bytes)
            } else {
                format!("{kind} {}B (issue..wait return)", e.bytes)
            };
            span(4, name, a, b, args);
        }
        for k in &s.body.kernels {
            let row = match k.kind {
                KernelKind::Compute => 5,
                KernelKind::Nccl => 6,
            };
            let name =
                s.body.kernel_names.get(k.name as usize).cloned().unwrap_or_else(|| format!("kernel #{}", k.name));
            span(
                row,
                name,
                k.start_ns,
                k.end_ns,
                json!({"phase": k.phase, "stream": k.stream, "correlation": k.correlation}),
            );
        }
        for c in &s.body.compute {
            let (row, name) = match c.kind {
                ComputeKind::Gemm => (3, format!("gemm x{}", c.units)),
                ComputeKind::Membound => (3, format!("copy x{}", c.units)),
                ComputeKind::HostDelay => (2, "host delay".to_string()),
            };
            span(row, name, c.start_ns, c.end_ns, json!({"phase": c.phase, "token": c.token, "layer": c.layer}));
        }
    }
    let t0 = spans.iter().map(|s| s.3).fold(f64::INFINITY, f64::min);
    let t0 = if t0.is_finite() { t0 } else { 0.0 };
    let kernels_absent: Vec<String> = j
        .shards
        .iter()
        .filter(|s| s.body.kernels.is_empty())
        .map(|s| {
            let why =
                s.header.unmeasured.iter().find(|u| u.field == "kernels").map(|u| u.reason.clone()).unwrap_or_else(
                    || {
                        format!(
                            "no CUPTI kernel records ({} backend)",
                            serde_json::to_value(s.header.backend)
                                .ok()
                                .and_then(|v| v.as_str().map(String::from))
                                .unwrap_or_default()
                        )
                    },
                );
            format!("rank {}: {why}", s.header.rank)
        })
        .collect();
    let mut events: Vec<Value> = Vec::with_capacity(spans.len() + 16 * j.shards.len());
    for s in &j.shards {
        let r = s.header.rank;
        events.push(
            json!({"ph": "M", "name": "process_name", "pid": r, "tid": 0, "args": {"name": format!("rank {r} ({}, \
                {})", s.header.host, s.header.device.name)}}),
        );
        for (tid, name) in ROWS {
            events.push(json!({"ph": "M", "name": "thread_name", "pid": r, "tid": tid, "args": {"name": name}}));
            events.push(
                json!({"ph": "M", "name": "thread_sort_index", "pid": r, "tid": tid, "args": {"sort_index": tid}}),
            );
        }
    }
    for (r, tid, name, a, b, args) in spans {
        let (ts, dur) = ((a - t0) / 1e3, ((b - a) / 1e3).max(0.0));
        events.push(json!({"ph": "X", "name": name, "pid": r, "tid": tid, "ts": ts, "dur": dur, "args": args}));
    }
    json!({
        "traceEvents": events,
        "displayTimeUnit": "ns",
        "otherData": {
            "run_id": j.run.run_id,
            "timebase": if calibrated { "rank 0's clock; other ranks mapped through their clock \
                models" } else { "each rank's local clock (run without clock calibration)" },
            "comm_stream_rows": "device intervals from CUDA events where measured; on CPU, issue to wait return",
            "kernel_rows": if kernels_absent.is_empty() { "CUPTI kernel activity records on every \
                rank".to_string() } else { format!("empty where no CUPTI records exist: \
                    {}", kernels_absent.join("; ")) },
        }
    })
}

#[cfg(test)]
mod tests {
    #[test]
    fn rows_are_the_documented_five() {
        let names: Vec<&str> = super::ROWS.iter().map(|r| r.1).collect();
        assert_eq!(names[..5], ["phases", "tokens", "host calls", "compute stream", "comm stream"]);
        assert!(names[5].contains("GEMM kernels") && names[6].contains("NCCL kernels"));
    }
}
