//! The checks that need no replay (state `source-verified`). Consumes the
//! source trace and a candidate's artifact; produces the static facts of a
//! trace for `compare`'s coverage checks, and the `structure.lossless` and
//! `values.budget` checks: the folded body at the source's counts against the
//! source's sequence, every stored value against the tool's budget for the
//! artifact's method. Refuses nothing: a failure is a failed check, and
//! `verify` decides whether it stops the replay.
use crate::canary::artifact::{self, Canary};
use crate::canary::compare::{Check, TraceFacts};
use crate::canary::{compile, expand, Assurance};
use crate::evidence::commtrace::CommTrace;

/// Static facts of a trace.
pub fn facts(t: &CommTrace) -> TraceFacts {
    let mut f = TraceFacts::default();
    let tm = compile::timings(t);
    for r in &t.ranks {
        for c in &r.collectives {
            let key = format!("{} {} {}B group {}", c.kind.name(), c.dtype.pytorch_name(), c.in_bytes(), c.group);
            *f.identities.entry(key).or_insert(0) += 1;
            *f.kinds.entry(c.kind.name().to_string()).or_insert(0) += 1;
        }
    }
    for g in &tm.gap_ns {
        f.gaps_ns.extend(g.iter().skip(1).flatten());
    }
    f
}

/// `structure.lossless`: the body at the source's counts is the source's
/// identity sequence on every rank; `values.budget`: every stored value is
/// within the declared budget of the source's values at its positions.
pub(crate) fn structure_checks(t: &CommTrace, c: &Canary) -> Vec<Check> {
    // the length at the stored counts first, from the body itself: nothing longer than the source is walked
    let mut why = match artifact::check_consistency(c) {
        Err(e) => Some(format!("the artifact contradicts itself: {e:#}")),
        Ok(shape) => t.ranks.iter().find(|r| r.collectives.len() as u64 != shape.at_counts).map(|r| {
            format!(
                "the body at its counts has {} collectives, rank {} of the source {}",
                shape.at_counts,
                r.rank,
                r.collectives.len()
            )
        }),
    };
    // per rank, the slot of every position when the body is walked at the source's counts
    let mut seq = Vec::new();
    if why.is_none() {
        expand::slot_sequence(&c.body, None, &mut seq);
    }
    let tm = compile::timings(t);
    for (ri, r) in t.ranks.iter().enumerate() {
        if why.is_some() {
            break;
        }
        if seq.len() != r.collectives.len() {
            why = Some(format!(
                "the body at its counts has {} collectives, rank {} of the source {}",
                seq.len(),
                r.rank,
                r.collectives.len()
            ));
            break;
        }
        if let Some(p) = seq.iter().zip(&r.collectives).position(|(s, col)| {
            c.slots
                .get(*s as usize)
                .and_then(|sl| sl.ranks.get(ri))
                .and_then(|rs| c.identities.get(rs.identity as usize))
                != Some(&compile::identity_of(col))
        }) {
            why = Some(format!("rank {} position {p}: the body's operation is not the source's", r.rank));
            break;
        }
    }
    let mut out = vec![Check {
        name: "structure.lossless".into(),
        guards: Assurance::SourceVerified,
        passed: why.is_none(),
        measured: why.clone().unwrap_or_else(|| {
            format!(
                "the folded body at the source's counts is the source's operation sequence on all {} ranks",
                t.ranks.len()
            )
        }),
        tolerance: "exactly the source's sequence".into(),
    }];
    if why.is_some() {
        return out;
    }
    // the tolerance is the tool's policy for this kind of artifact, never the budget it declares
    let budget = match artifact::budget_ppm(c.method, c.budget.significant_digits) {
        Ok(ppm) => ppm as f64 / 1e6,
        Err(e) => {
            out.push(Check {
                name: "values.budget".into(),
                guards: Assurance::SourceVerified,
                passed: false,
                measured: format!("{e:#}"),
                tolerance: "the tool's budget for the artifact's method".into(),
            });
            return out;
        }
    };
    let mut positions: Vec<Vec<usize>> = vec![Vec::new(); c.slots.len()];
    for (p, s) in seq.iter().enumerate() {
        positions[*s as usize].push(p);
    }
    let mut worst = (0.0f64, String::new());
    for (si, slot) in c.slots.iter().enumerate() {
        for (ri, rs) in slot.ranks.iter().enumerate() {
            for (field, stored, src) in [
                ("gap_ns", &rs.gap_ns, &tm.gap_ns[ri]),
                ("compute_ns", &rs.compute_ns, &tm.compute_ns[ri]),
                ("span_ns", &rs.span_ns, &tm.span_ns[ri]),
            ] {
                let mut vals: Vec<u64> = positions[si].iter().filter_map(|&p| src[p]).collect();
                vals.sort_unstable();
                let err = match stored {
                    artifact::Values::Unknown => 0.0,
                    artifact::Values::Exact(x) => {
                        let mut x = x.clone();
                        x.sort_unstable();
                        if x == vals {
                            0.0
                        } else {
                            f64::INFINITY
                        }
                    }
                    artifact::Values::Histogram(h) => [0.01, 0.1, 0.25, 0.5, 0.75, 0.9, 0.99]
                        .iter()
                        .filter_map(|&q| {
                            let want = *vals
                                .get(((q * vals.len() as f64).ceil() as usize).clamp(1, vals.len().max(1)) - 1)?
                                as f64;
                            let got = h.quantile(q)? as f64;
                            Some((got - want).abs() / want.max(1.0))
                        })
                        .fold(0.0, f64::max),
                };
                if err > worst.0 {
                    worst = (err, format!("slot {si} rank {} {field}", rs.rank));
                }
            }
        }
    }
    out.push(Check {
        name: "values.budget".into(),
        guards: Assurance::SourceVerified,
        passed: worst.0 <= budget + 1e-9,
        measured: if worst.0 == 0.0 {
            "every stored value is the source's".into()
        } else {
            format!("largest relative error of a stored quantile: {:.3}% ({})", worst.0 * 100.0, worst.1)
        },
        tolerance: format!(
            "within the tool's budget for a {} artifact at {} significant digits ({:.3}%)",
            c.method.name(),
            c.budget.significant_digits,
            budget * 100.0
        ),
    });
    out
}
