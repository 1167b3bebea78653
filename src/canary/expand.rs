//! A canary's replay trace: the artifact expanded back into a
//! communication trace that `rank --trace` and `replay-trace` walk.
//!
//! Consumes a [`Canary`]. Produces a [`CommTrace`] of the folded body with the main loop at the
//! artifact's `replay.iterations`: every collective with its identity, per rank host times rebuilt
//! from the slot's values (docs/METHODS.md, "Canary expansion"). The result is checked like any
//! imported trace (group consistency, pairs) before it is returned.
use crate::canary::artifact::{check_consistency, Canary, Values};
use crate::canary::fold::Node;
use crate::evidence::commtrace::{
    self, ClockDomain, CommTrace, ComputeOp, RankTrace, SourceFile, SourceKind, TraceClock, TraceCollective,
    TraceSource, UnknownField,
};
use anyhow::{Context, Result};
use rand::seq::SliceRandom;
use rand::SeedableRng;

/// The slots `nodes` visit, in order, each loop at its count but the top-level one `main` names
/// (its index, its iterations).
pub(crate) fn slot_sequence(nodes: &[Node], main: Option<(usize, u64)>, out: &mut Vec<u32>) {
    for (i, n) in nodes.iter().enumerate() {
        match n {
            Node::Op(s) => out.push(*s),
            Node::Loop { count, body } => {
                for _ in 0..main.filter(|m| m.0 == i).map_or(*count, |m| m.1) {
                    slot_sequence(body, None, out);
                }
            }
        }
    }
}

/// Slot visits of one pass, in order.
pub(crate) fn visits(c: &Canary) -> Vec<u32> {
    let main = match c.main_loop.as_deref() {
        Some([m]) => Some((*m as usize, c.replay.iterations)),
        _ => None,
    };
    let mut out = Vec::new();
    slot_sequence(&c.body, main, &mut out);
    out
}

/// The value of a field at visit `j` (of `m`) in draw position `pos`.
fn value_at(v: &Values, j: usize, pos: usize, m: usize) -> Option<u64> {
    match v {
        Values::Exact(x) if !x.is_empty() => Some(x[j % x.len()]),
        Values::Exact(_) | Values::Unknown => None,
        Values::Histogram(h) => h.quantile((pos as f64 + 0.5) / m as f64),
    }
}

/// Expand an artifact into the trace its replay walks.
pub fn expand(c: &Canary) -> Result<CommTrace> {
    // what the expansion will hold, from the body's own counts, bounded before anything is built
    check_consistency(c)?;
    let order = visits(c);
    let nslots = c.slots.len();
    let mut m = vec![0usize; nslots];
    for &s in &order {
        *m.get_mut(s as usize).with_context(|| format!("the body names slot {s}; the artifact has {nslots}"))? += 1;
    }
    // one seeded draw order per slot, shared by every rank
    let perms: Vec<Vec<usize>> = (0..nslots)
        .map(|s| {
            let mut rng =
                rand_chacha::ChaCha8Rng::seed_from_u64(c.replay.seed ^ (s as u64).wrapping_mul(0x9e3779b97f4a7c15));
            let mut p: Vec<usize> = (0..m[s]).collect();
            p.shuffle(&mut rng);
            p
        })
        .collect();
    let world = c.source.world_size as usize;
    let mut timed = true;
    let mut ranks = Vec::with_capacity(world);
    for ri in 0..world {
        let mut seen = vec![0usize; nslots];
        let mut t = 0u64;
        let mut colls = Vec::with_capacity(order.len());
        for &s in &order {
            let slot = &c.slots[s as usize];
            let rs = slot.ranks.get(ri).with_context(|| format!("slot {s} has no rank {ri}"))?;
            let id = c
                .identities
                .get(rs.identity as usize)
                .with_context(|| format!("slot {s} names identity {}", rs.identity))?;
            let j = seen[s as usize];
            seen[s as usize] += 1;
            let pos = perms[s as usize][j];
            let ms = m[s as usize];
            let mut tc = TraceCollective::new(
                id.kind,
                &id.source_name,
                &id.group,
                id.dtype,
                (id.in_elems, id.out_elems),
                (id.in_split_elems.clone(), id.out_split_elems.clone()),
                (id.root, id.peer),
            );
            tc.stream = id.stream;
            tc.op = id.op;
            let (gap, span, compute) = (
                value_at(&rs.gap_ns, j, pos, ms),
                value_at(&rs.span_ns, j, pos, ms),
                value_at(&rs.compute_ns, j, pos, ms),
            );
            match (gap, span) {
                (Some(g), Some(d)) => {
                    let start = t.saturating_add(g);
                    tc.host_start_ns = Some(start);
                    tc.host_duration_ns = Some(d);
                    if let Some(k) = compute.filter(|&k| k > 0) {
                        tc.compute_before.push(ComputeOp {
                            name: "canary-compute".into(),
                            stream: None,
                            device_start_ns: Some(start.saturating_sub(k)),
                            duration_ns: Some(k),
                        });
                    }
                    t = start.saturating_add(d);
                }
                _ => timed = false,
            }
            colls.push(tc);
        }
        commtrace::number_sequences(&mut colls);
        ranks.push(RankTrace {
            rank: c.slots.first().and_then(|s| s.ranks.get(ri)).map_or(ri as u32, |r| r.rank),
            collectives: colls,
            trailing_compute: Vec::new(),
        });
    }
    if !timed {
        for r in &mut ranks {
            for tc in &mut r.collectives {
                tc.host_start_ns = None;
                tc.host_duration_ns = None;
                tc.compute_before.clear();
            }
        }
    }
    let mut unknown: Vec<UnknownField> = c.source.unknown.clone();
    unknown.push(UnknownField {
        field: "device".into(),
        reason: "a canary replay trace carries host spans rebuilt from the artifact, no device intervals".into(),
    });
    let t = CommTrace {
        format_version: commtrace::COMM_TRACE_FORMAT_VERSION,
        source: TraceSource {
            kind: SourceKind::Canary,
            schema: Some(format!("canary {} {}", c.method.name(), c.digest)),
            nccl_version: None,
            files: (0..world as u32)
                .map(|r| SourceFile { path: format!("canary:{}", c.digest), sha256: c.digest.clone(), rank: r })
                .collect(),
        },
        world_size: c.source.world_size,
        clock: TraceClock {
            domain: if timed { ClockDomain::HostPerRank } else { ClockDomain::None },
            aligned_across_ranks: false,
            note: "rebuilt from the canary's gaps and spans, from 0 on each rank".into(),
        },
        unknown,
        groups: c.groups.clone(),
        ranks,
        mpi: None,
    };
    // the same checks as an imported trace
    let bytes = serde_json::to_vec(&t)?;
    CommTrace::from_slice(&bytes).context("the canary's expansion is not a consistent trace")
}
