//! `canary redact`: a communication trace without what identifies the site.
//!
//! Consumes a [`CommTrace`]. Produces the trace built by allow-list, without
//! file paths and their digests, group names and descriptions, absolute ranks
//! and times (optionally quantized, and without kernel names with
//! `drop_names`), every transform recorded in an [`AuditLog`] written beside
//! the output; `export param|et --redact` applies the same transforms. Refuses
//! a redacted trace that does not check like any imported trace. The
//! transforms: docs/METHODS.md, "Redaction".
use crate::evidence::commtrace::{
    CommTrace, ComputeOp, DeviceSpan, RankTrace, SourceFile, TraceClock, TraceCollective, TraceGroup, TraceSource,
    UnknownField,
};
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

/// `v` to the nearest multiple of `step` (halves up), never wrapping: a
/// value whose rounding up would pass 2^64 rounds down instead.
fn q(v: u64, step: u64) -> u64 {
    if step <= 1 {
        return v;
    }
    let r = v % step;
    let down = v - r;
    if r >= step - r {
        down.checked_add(step).unwrap_or(down)
    } else {
        down
    }
}

/// Whether free text from the input may pass as is: a short name of the
/// characters collective and kernel names use, nothing that could hold a
/// path, a user, a host or a time.
fn plain_name(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= 64
        && s.bytes().all(|b| b.is_ascii_alphanumeric() || b"_:.-".contains(&b))
        && !s.bytes().any(|b| b.is_ascii_digit())
}

/// Redact a trace; returns it with the audit transforms. Every field of the
/// output is built here from an allow-list: copied because it is known safe
/// (kinds, counts, sizes, dtypes, sequence numbers, streams), or transformed
/// and logged. The input is destructured field by field, so a field added
/// to the trace format fails to compile here until it is placed in one of
/// the two.
pub fn redact(t: &CommTrace, o: &RedactOptions) -> Result<(CommTrace, Vec<Transform>)> {
    let CommTrace { format_version, source, world_size, clock, unknown, groups, ranks, mpi } = t;
    let TraceSource { kind, schema, nccl_version, files } = source;
    let TraceClock { domain, aligned_across_ranks, note: _ } = clock;
    let mut log = Vec::new();
    let mut push = |field: &str, action: &str, count: u64| {
        log.push(Transform { field: field.into(), action: action.into(), count })
    };
    // ranks to local indices
    let mut order: Vec<u32> = ranks.iter().map(|r| r.rank).collect();
    order.sort_unstable();
    let local: BTreeMap<u32, u32> = order.iter().enumerate().map(|(i, r)| (*r, i as u32)).collect();
    let map = |r: u32| local.get(&r).copied().unwrap_or(r);
    let moved = order.iter().enumerate().filter(|(i, r)| *i as u32 != **r).count() as u64;
    push("ranks, group members, roots, peers", "mapped to local indices 0..N in rank order", moved);
    let out_files: Vec<SourceFile> = files
        .iter()
        .map(|f| SourceFile { path: format!("rank-{}", map(f.rank)), sha256: String::new(), rank: map(f.rank) })
        .collect();
    push(
        "source.files[].path",
        "replaced by rank-N (paths carry user names, job ids and host names)",
        files.len() as u64,
    );
    push("source.files[].sha256", "dropped (it identifies the original files)", files.len() as u64);
    // the schema text of a run holds its run id (job id, user, host, start time); of other sources, whatever the file
    // said
    push(
        "source.schema",
        "dropped (a run's holds its run id: job id, user, host or start time)",
        schema.is_some() as u64,
    );
    let nccl_ok =
        nccl_version.as_deref().is_some_and(|v| v.len() <= 32 && v.bytes().all(|b| b.is_ascii_digit() || b == b'.'));
    let out_nccl = if nccl_ok { nccl_version.clone() } else { None };
    push(
        "source.nccl_version",
        "kept where it is a plain version number (digits and dots), else dropped",
        (nccl_version.is_some() && !nccl_ok) as u64,
    );
    let gname: BTreeMap<String, String> =
        groups.iter().enumerate().map(|(i, g)| (g.name.clone(), format!("g{i}"))).collect();
    let out_groups: Vec<TraceGroup> = groups
        .iter()
        .map(|g| TraceGroup {
            name: gname[&g.name].clone(),
            desc: None,
            members: g.members.iter().map(|&m| map(m)).collect(),
        })
        .collect();
    push("groups[].name", "replaced by gN", groups.len() as u64);
    push("groups[].desc", "dropped", groups.iter().filter(|g| g.desc.is_some()).count() as u64);
    let out_unknown: Vec<UnknownField> = unknown
        .iter()
        .map(|u| UnknownField {
            field: if plain_name(&u.field.replace(' ', "_").replace(['[', ']'], "")) {
                u.field.clone()
            } else {
                "field".into()
            },
            reason: "not recorded by the source (the reason is not kept: it is the input's own text)".into(),
        })
        .collect();
    push("unknown[].reason", "replaced by a fixed text (free text of the input)", unknown.len() as u64);
    push(
        "unknown[].field",
        "kept where it is a plain field name, else replaced by \"field\"",
        out_unknown.iter().zip(unknown).filter(|(a, b)| a.field != b.field).count() as u64,
    );
    let mut times = 0u64;
    let mut durations = 0u64;
    // kernel and operator names: replaced by their kind with `drop_names`, else kept
    let mut names = 0u64;
    let mut source_names = 0u64;
    let mut out_ranks = Vec::with_capacity(ranks.len());
    let op = |k: &ComputeOp, t0: u64, times: &mut u64, durations: &mut u64, names: &mut u64| {
        let ComputeOp { name, stream, device_start_ns, duration_ns } = k;
        *times += device_start_ns.is_some() as u64;
        *durations += duration_ns.is_some() as u64;
        *names += 1;
        let name = if o.drop_names { "compute".to_string() } else { name.clone() };
        ComputeOp {
            name,
            stream: *stream,
            device_start_ns: device_start_ns.map(|v| q(v.saturating_sub(t0), o.quantize_ns)),
            duration_ns: duration_ns.map(|d| q(d, o.quantize_ns)),
        }
    };
    for r in ranks {
        let RankTrace { rank, collectives, trailing_compute } = r;
        // the rank's earliest time (0 where it has none, or only u64::MAX)
        let t0 = collectives
            .iter()
            .flat_map(|c| {
                let compute = c.compute_before.iter().map(|k| k.device_start_ns);
                [c.host_start_ns, c.device.as_ref().map(|d| d.start_ns)].into_iter().chain(compute)
            })
            .chain(trailing_compute.iter().map(|k| k.device_start_ns))
            .flatten()
            .min()
            .filter(|&t| t != u64::MAX)
            .unwrap_or(0);
        let mut out_colls = Vec::with_capacity(collectives.len());
        for c in collectives {
            let TraceCollective {
                kind,
                source_name,
                group,
                seq,
                dtype,
                in_elems,
                out_elems,
                in_split_elems,
                out_split_elems,
                root,
                peer,
                stream,
                host_start_ns,
                host_duration_ns,
                device,
                compute_before,
                op: reduce_op,
            } = c;
            let source_name = if plain_name(source_name) {
                source_name.clone()
            } else {
                source_names += 1;
                kind.pytorch_name().to_string()
            };
            times += host_start_ns.is_some() as u64;
            durations += host_duration_ns.is_some() as u64;
            let device = device.as_ref().map(|d| {
                times += 2;
                names += 1;
                let kernel = if o.drop_names { "kernel".to_string() } else { d.kernel.clone() };
                DeviceSpan {
                    start_ns: q(d.start_ns.saturating_sub(t0), o.quantize_ns),
                    end_ns: q(d.end_ns.saturating_sub(t0), o.quantize_ns),
                    kernel,
                }
            });
            out_colls.push(TraceCollective {
                kind: *kind,
                source_name,
                group: gname.get(group).cloned().context("a collective names a group the trace does not describe")?,
                seq: *seq,
                dtype: *dtype,
                in_elems: *in_elems,
                out_elems: *out_elems,
                in_split_elems: in_split_elems.clone(),
                out_split_elems: out_split_elems.clone(),
                root: root.map(map),
                peer: peer.map(map),
                stream: *stream,
                host_start_ns: host_start_ns.map(|v| q(v.saturating_sub(t0), o.quantize_ns)),
                host_duration_ns: host_duration_ns.map(|d| q(d, o.quantize_ns)),
                device,
                compute_before: compute_before
                    .iter()
                    .map(|k| op(k, t0, &mut times, &mut durations, &mut names))
                    .collect(),
                op: *reduce_op,
            });
        }
        let trailing = trailing_compute.iter().map(|k| op(k, t0, &mut times, &mut durations, &mut names)).collect();
        out_ranks.push(RankTrace { rank: map(*rank), collectives: out_colls, trailing_compute: trailing });
    }
    push("every time", "rebased: each rank's first time is 0", times);
    if o.quantize_ns > 1 {
        push(
            "every time and duration",
            &format!("quantized to {} ns (never wrapping)", o.quantize_ns),
            times + durations,
        );
    }
    push("collectives[].source_name", "kept where it is a plain name, else replaced by the kind's name", source_names);
    let how = if o.drop_names { "replaced by their kind" } else { "kept as recorded (--drop-names replaces them)" };
    push("kernel and operator names", how, names);
    push("clock.note", "replaced", 1);
    if mpi.is_some() {
        // a capture's point-to-point log and per-call counts carry times, peers and tags: not redacted field by field
        push("mpi (an MPI capture's point-to-point operations and call counts)", "dropped", 1);
    }
    let out = CommTrace {
        format_version: *format_version,
        source: TraceSource { kind: *kind, schema: None, nccl_version: out_nccl, files: out_files },
        world_size: *world_size,
        clock: TraceClock {
            domain: *domain,
            aligned_across_ranks: *aligned_across_ranks,
            note: "redacted: each rank's times rebased to 0".into(),
        },
        unknown: out_unknown,
        groups: out_groups,
        ranks: out_ranks,
        mpi: None,
    };
    let checked = CommTrace::from_slice(&serde_json::to_vec(&out)?).context("the redacted trace is not consistent")?;
    Ok((checked, log))
}

#[cfg(test)]
mod tests {
    #[test]
    fn quantizing_never_wraps() {
        for step in [2u64, 3, 1000, 1 << 40] {
            for v in [u64::MAX, u64::MAX - 1, u64::MAX - step / 2, u64::MAX / step * step] {
                let r = super::q(v, step);
                assert!(r % step == 0, "{v} by {step}: {r}");
                assert!(r.abs_diff(v) <= step, "{v} by {step}: {r} (wrapped)");
            }
        }
        assert_eq!(super::q(1500, 1000), 2000);
        assert_eq!(super::q(1499, 1000), 1000);
    }
}
