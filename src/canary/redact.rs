//! `canary redact`: a communication trace without what identifies the site.
//!
//! Consumes a [`CommTrace`]. Produces the trace with: source file paths
//! replaced by `rank-N` (paths carry user names, job ids and host names) and
//! their digests dropped (they would identify the original files); group
//! names replaced by `gN` and descriptions dropped; ranks mapped to local
//! indices `0..N` in order; every time rebased so each rank's first time is 0;
//! optionally every time and duration quantized to a multiple of
//! `quantize_ns`; kernel and operator names kept unless `drop_names`. Every
//! transform is recorded in an [`AuditLog`] written beside the output. The
//! redacted trace is checked like any imported trace before it is returned.
//! `export param|et --redact` applies the same transforms before exporting.
use crate::evidence::commtrace::{CommTrace, SourceFile};
use anyhow::{Context, Result};
use serde::Serialize;
use std::collections::BTreeMap;

/// One transform.
#[derive(schemars::JsonSchema, Serialize, Clone, Debug, PartialEq)]
pub struct Transform {
    /// Field.
    pub field: String,
    /// What was done.
    pub action: String,
    /// How many values it touched.
    pub count: u64,
}

/// The audit log of a redaction (`OUT.audit.json`).
#[derive(schemars::JsonSchema, Serialize, Clone, Debug, PartialEq)]
pub struct AuditLog {
    /// Format version.
    pub format_version: u32,
    /// SHA-256 of the input file's bytes (the link back, kept by the site that redacted).
    pub input_sha256: String,
    /// SHA-256 of the redacted output: the file's bytes for `canary redact`, the
    /// redacted trace's canonical JSON for `export param|et --redact` (whose
    /// output is one file per rank).
    pub output_sha256: String,
    /// Every transform, in order.
    pub transforms: Vec<Transform>,
    /// Whether the configuration ranking survives the transform: absent until re-verified.
    pub decision_survives: Option<String>,
}

/// Options.
#[derive(Clone, Debug, Default)]
pub struct RedactOptions {
    /// Quantize times and durations to this many ns (0: no quantization).
    pub quantize_ns: u64,
    /// Replace kernel and operator names by their kind.
    pub drop_names: bool,
}

fn q(v: u64, step: u64) -> u64 {
    if step <= 1 {
        v
    } else {
        (v + step / 2) / step * step
    }
}

/// Redact a trace; returns it with the audit transforms.
pub fn redact(t: &CommTrace, o: &RedactOptions) -> Result<(CommTrace, Vec<Transform>)> {
    let mut out = t.clone();
    let mut log = Vec::new();
    let mut push = |field: &str, action: &str, count: u64| log.push(Transform { field: field.into(), action: action.into(), count });
    // ranks to local indices
    let mut order: Vec<u32> = t.ranks.iter().map(|r| r.rank).collect();
    order.sort_unstable();
    let local: BTreeMap<u32, u32> = order.iter().enumerate().map(|(i, r)| (*r, i as u32)).collect();
    let map = |r: u32| local.get(&r).copied().unwrap_or(r);
    let moved = order.iter().enumerate().filter(|(i, r)| *i as u32 != **r).count() as u64;
    push("ranks, group members, roots, peers", "mapped to local indices 0..N in rank order", moved);
    out.source.files = t.source.files.iter().map(|f| SourceFile { path: format!("rank-{}", map(f.rank)), sha256: String::new(), rank: map(f.rank) }).collect();
    push("source.files[].path", "replaced by rank-N (paths carry user names, job ids and host names)", t.source.files.len() as u64);
    push("source.files[].sha256", "dropped (it identifies the original files)", t.source.files.len() as u64);
    let gname: BTreeMap<String, String> = t.groups.iter().enumerate().map(|(i, g)| (g.name.clone(), format!("g{i}"))).collect();
    for g in &mut out.groups {
        g.name = gname[&g.name].clone();
        g.desc = None;
        g.members = g.members.iter().map(|&m| map(m)).collect();
    }
    push("groups[].name", "replaced by gN", t.groups.len() as u64);
    push("groups[].desc", "dropped", t.groups.iter().filter(|g| g.desc.is_some()).count() as u64);
    let mut times = 0u64;
    let mut names = 0u64;
    for r in &mut out.ranks {
        r.rank = map(r.rank);
        // the rank's earliest time
        let mut t0 = u64::MAX;
        for c in &r.collectives {
            for v in [c.host_start_ns, c.device.as_ref().map(|d| d.start_ns)].into_iter().flatten() {
                t0 = t0.min(v);
            }
            for k in &c.compute_before {
                if let Some(v) = k.device_start_ns {
                    t0 = t0.min(v);
                }
            }
        }
        for k in &r.trailing_compute {
            if let Some(v) = k.device_start_ns {
                t0 = t0.min(v);
            }
        }
        let t0 = if t0 == u64::MAX { 0 } else { t0 };
        let rb = |v: &mut u64, times: &mut u64| {
            *v = q(v.saturating_sub(t0), o.quantize_ns);
            *times += 1;
        };
        for c in &mut r.collectives {
            c.group = gname.get(&c.group).cloned().context("a collective names a group the trace does not describe")?;
            c.root = c.root.map(map);
            c.peer = c.peer.map(map);
            if let Some(v) = c.host_start_ns.as_mut() {
                rb(v, &mut times);
            }
            if let Some(d) = c.host_duration_ns.as_mut() {
                *d = q(*d, o.quantize_ns);
            }
            if let Some(d) = c.device.as_mut() {
                rb(&mut d.start_ns, &mut times);
                rb(&mut d.end_ns, &mut times);
                if o.drop_names {
                    d.kernel = "kernel".into();
                    names += 1;
                }
            }
            for k in c.compute_before.iter_mut() {
                if let Some(v) = k.device_start_ns.as_mut() {
                    rb(v, &mut times);
                }
                if let Some(d) = k.duration_ns.as_mut() {
                    *d = q(*d, o.quantize_ns);
                }
                if o.drop_names {
                    k.name = "compute".into();
                    names += 1;
                }
            }
        }
        for k in r.trailing_compute.iter_mut() {
            if let Some(v) = k.device_start_ns.as_mut() {
                rb(v, &mut times);
            }
            if o.drop_names {
                k.name = "compute".into();
            }
        }
    }
    push("every time", "rebased: each rank's first time is 0", times);
    if o.quantize_ns > 1 {
        push("every time and duration", &format!("quantized to {} ns", o.quantize_ns), times);
    }
    if o.drop_names {
        push("kernel and operator names", "replaced by their kind", names);
    }
    out.clock.note = "redacted: each rank's times rebased to 0".into();
    let checked = CommTrace::from_slice(&serde_json::to_vec(&out)?).context("the redacted trace is not consistent")?;
    Ok((checked, log))
}
