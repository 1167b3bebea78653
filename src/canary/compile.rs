//! `canary compile`: a communication trace to a canary artifact.
//!
//! Consumes a [`CommTrace`] (from `import kineto|et|run` or `synth`) with
//! the bytes it was read from. Produces a [`Canary`]: the operation
//! identities, folded into loops ([`crate::canary::fold`]), per leaf and rank
//! the gap, compute and span values within the declared error budget, and the
//! main loop's iterations the declared statistic needs
//! ([`iterations_for_median`]); every approximation is listed, point-to-point
//! operations are counted as left out ([`LeftOutP2p`]). Refuses a trace whose
//! ranks record different numbers of collectives, and one with no collective.
//! Method: docs/METHODS.md, "Canary compilation".
use crate::canary::artifact::*;
use crate::canary::fold::{self, FoldNode, Node};
use crate::core::fsutil;
use crate::evidence::commtrace::mpi::MpiP2p;
use crate::evidence::commtrace::{exec, CommTrace, TraceCollective};
use anyhow::{Context, Result};
use std::collections::{BTreeMap, HashMap};
use std::path::Path;

/// Options of one compilation.
#[derive(Clone, Debug)]
pub struct CompileOptions {
    /// Keep every value and the source's full count (no histograms, no fewer iterations).
    pub lossless: bool,
    /// Iterations of the main loop to replay (default: [`iterations_for_median`]).
    pub iterations: Option<u64>,
    /// Significant digits of the histograms (1 to 5).
    pub significant_digits: u8,
    /// Seed of the stratified expansion.
    pub seed: u64,
    /// Path recorded as the source's.
    pub source_path: String,
}

impl Default for CompileOptions {
    fn default() -> Self {
        CompileOptions { lossless: false, iterations: None, significant_digits: 2, seed: 1, source_path: String::new() }
    }
}

/// Confidence of the per-job median interval the default iteration count is sized for.
pub(crate) const MEDIAN_CONFIDENCE: f64 = 0.90;
/// The interval must lie within these quantiles of the per-iteration distribution.
pub(crate) const MEDIAN_BAND: (f64, f64) = (0.25, 0.75);

/// The smallest number of iterations whose distribution-free interval for the median reaches
/// `confidence` within the band (docs/METHODS.md, "The canary's iteration count").
pub fn iterations_for_median(confidence: f64, band_low: f64) -> u64 {
    for n in 1u64..10_000 {
        // largest l with coverage 1 - 2 P(Bin(n,1/2) <= l-1) >= confidence
        let mut cdf = 0.0f64;
        let mut pmf = 0.5f64.powi(n as i32);
        let mut best_l = 0;
        for k in 0..n {
            // P(Bin <= k)
            cdf += pmf;
            let coverage = 1.0 - 2.0 * cdf;
            if coverage >= confidence {
                best_l = k + 1;
            } else {
                break;
            }
            pmf = pmf * (n - k) as f64 / (k + 1) as f64;
        }
        if best_l >= 1 && best_l as f64 / (n + 1) as f64 >= band_low {
            return n;
        }
    }
    10_000
}

/// The operation identity of a collective (the phase from a `PHASE:kind` source name).
pub(crate) fn identity_of(c: &TraceCollective) -> Identity {
    let phase = phase_of(c);
    Identity {
        phase,
        kind: c.kind,
        source_name: c.source_name.clone(),
        dtype: c.dtype,
        in_elems: c.in_elems,
        out_elems: c.out_elems,
        in_split_elems: c.in_split_elems.clone(),
        out_split_elems: c.out_split_elems.clone(),
        group: c.group.clone(),
        root: c.root,
        peer: c.peer,
        stream: c.stream,
        op: c.op,
    }
}

/// The phase a collective came from, where the source is a CommCanary run
/// (`import run` names it in the source name as `PHASE:kind`).
fn phase_of(c: &TraceCollective) -> Option<String> {
    c.source_name.split_once(':').map(|(p, _)| p.to_string())
}

/// The binding of an artifact to the trace it was made from.
pub(crate) fn bind_source(t: &CommTrace, bytes: &[u8], path: &str) -> Result<SourceBinding> {
    let mut per_kind: BTreeMap<String, u64> = BTreeMap::new();
    for r in &t.ranks {
        for c in &r.collectives {
            *per_kind.entry(c.kind.name().to_string()).or_insert(0) += 1;
        }
    }
    Ok(SourceBinding {
        path: path.to_string(),
        file_sha256: fsutil::sha256_hex(bytes),
        canonical_sha256: canonical_sha256(t)?,
        // the source kind's serde name (`kineto`, `execution-trace`, `mpi-capture`, ...)
        origin: serde_json::to_value(t.source.kind)?.as_str().unwrap_or_default().to_string(),
        world_size: t.world_size,
        collectives_per_rank: t.ranks.iter().map(|r| r.collectives.len() as u64).collect(),
        collectives_per_kind: per_kind,
        file_bytes: bytes.len() as u64,
        unknown: t.unknown.clone(),
    })
}

/// Per rank: gap, compute and span of every collective (`None` where unknown).
pub(crate) struct Timings {
    /// Per rank, per collective.
    pub gap_ns: Vec<Vec<Option<u64>>>,
    /// Per rank, per collective.
    pub compute_ns: Vec<Vec<Option<u64>>>,
    /// Per rank, per collective.
    pub span_ns: Vec<Vec<Option<u64>>>,
}

/// The timings of a trace, as the replay reads them.
pub(crate) fn timings(t: &CommTrace) -> Timings {
    // the recorded compute before a collective (its kernels' summed durations), and its own span
    let compute = |c: &TraceCollective| {
        c.compute_before.iter().try_fold(0u64, |acc, k| k.duration_ns.and_then(|d| acc.checked_add(d)))
    };
    let span = |c: &TraceCollective| {
        c.device.as_ref().map_or(c.host_duration_ns, |d| Some(d.end_ns.saturating_sub(d.start_ns)))
    };
    let mut out = Timings { gap_ns: Vec::new(), compute_ns: Vec::new(), span_ns: Vec::new() };
    for r in &t.ranks {
        let gaps = exec::gaps_ns(&r.collectives);
        out.gap_ns.push((0..r.collectives.len()).map(|i| gaps.as_ref().map(|g| g[i])).collect());
        out.compute_ns.push(r.collectives.iter().map(compute).collect());
        out.span_ns.push(r.collectives.iter().map(span).collect());
    }
    out
}

/// Bucket values under `digits` significant digits.
pub(crate) fn histogram(values: &[u64], digits: u8) -> Result<Histogram> {
    let mut h = hdrhistogram::Histogram::<u64>::new(digits).context("histogram")?;
    for &v in values {
        h.record(v).context("recording a value")?;
    }
    let buckets =
        h.iter_recorded().map(|it| (h.median_equivalent(it.value_iterated_to()), it.count_at_value())).collect();
    Ok(Histogram { buckets })
}

fn values(v: &[Option<u64>], lossless: bool, digits: u8) -> Result<Values> {
    let known: Option<Vec<u64>> = v.iter().copied().collect();
    Ok(match known {
        None => Values::Unknown,
        Some(k) if lossless => Values::Exact(k),
        Some(k) => Values::Histogram(histogram(&k, digits)?),
    })
}

/// Walk folded nodes: `f(leaf id, position)` for every position they expand to,
/// in order. Leaf ids number the leaves in tree order.
fn walk(nodes: &[FoldNode], shift: usize, leaf_ids: &HashMap<*const FoldNode, u32>, f: &mut dyn FnMut(u32, usize)) {
    for n in nodes {
        match n {
            FoldNode::Leaf(p) => f(leaf_ids[&(n as *const FoldNode)], p + shift),
            FoldNode::Loop { period, count, body, .. } => {
                for k in 0..*count {
                    walk(body, shift + k * period, leaf_ids, f);
                }
            }
        }
    }
}

fn number_leaves(nodes: &[FoldNode], ids: &mut HashMap<*const FoldNode, u32>) -> Vec<Node> {
    nodes
        .iter()
        .map(|n| match n {
            FoldNode::Leaf(_) => {
                let id = ids.len() as u32;
                ids.insert(n as *const FoldNode, id);
                Node::Op(id)
            }
            FoldNode::Loop { count, body, .. } => Node::Loop { count: *count as u64, body: number_leaves(body, ids) },
        })
        .collect()
}

/// A trace file and its bytes as read; an unreadable or malformed one is refused.
pub(crate) fn read_trace(p: &Path) -> Result<(CommTrace, Vec<u8>)> {
    use crate::core::{limits, refusal};
    let bytes =
        limits::read_bounded(p, limits::MAX_TEXT_TABLE_BYTES).with_context(|| format!("reading {}", p.display()))?;
    let t = CommTrace::from_slice(&bytes)
        .map_err(|e| refusal::refuse(refusal::Code::BadInput, format!("{}: {e:#}", p.display())))?;
    Ok((t, bytes))
}

/// What [`run`] compiled and wrote.
pub struct Compiled {
    /// The artifact written.
    pub canary: Canary,
    /// Bytes of the source trace and of the artifact written.
    pub bytes: (u64, u64),
    /// Time the compilation took (reading and writing excluded).
    pub took: std::time::Duration,
}

/// `canary compile`: read the trace at `trace`, compile it and write the artifact to `out` (never overwritten).
pub fn run(trace: &Path, out: &Path, opts: &CompileOptions) -> Result<Compiled> {
    let (t, bytes) = read_trace(trace)?;
    let started = std::time::Instant::now();
    let canary = compile(&t, &bytes, opts)?;
    let took = started.elapsed();
    canary.write(out)?;
    let art = std::fs::metadata(out).with_context(|| format!("reading the size of {}", out.display()))?.len();
    Ok(Compiled { canary, bytes: (bytes.len() as u64, art), took })
}

/// Compile a trace (read from `bytes`) into a canary.
pub fn compile(t: &CommTrace, bytes: &[u8], opts: &CompileOptions) -> Result<Canary> {
    use crate::core::refusal::Code;
    if !(1..=5).contains(&opts.significant_digits) {
        crate::refuse!(Code::OutOfRange, "--significant-digits {}: expected 1 to 5", opts.significant_digits);
    }
    if let (true, Some(k)) = (opts.lossless, opts.iterations) {
        // lossless keeps the source's full count: an iteration count would be silently ignored
        crate::refuse!(
            Code::BadArgument,
            "--lossless --iterations {k}: a lossless canary replays the source's full count; drop one of the two"
        );
    }
    let n = t.ranks.first().map_or(0, |r| r.collectives.len());
    if n == 0 {
        crate::refuse!(Code::BadInput, "{}: the trace has no collective to compile", opts.source_path);
    }
    if let Some(r) = t.ranks.iter().find(|r| r.collectives.len() != n) {
        crate::refuse!(
            Code::BadInput,
            "{}: rank {} records {} collectives, rank {} records {n}; compile folds positions across ranks and needs \
                equal counts",
            opts.source_path,
            r.rank,
            r.collectives.len(),
            t.ranks[0].rank
        );
    }
    let source = bind_source(t, bytes, &opts.source_path)?;
    // identities, and one symbol per position: the tuple of every rank's identity
    let mut identities: Vec<Identity> = Vec::new();
    let mut id_of: HashMap<Identity, u32> = HashMap::new();
    let mut per_rank_ids: Vec<Vec<u32>> = Vec::with_capacity(t.ranks.len());
    for r in &t.ranks {
        let mut ids = Vec::with_capacity(n);
        for c in &r.collectives {
            let ident = identity_of(c);
            let next = identities.len() as u32;
            let id = *id_of.entry(ident.clone()).or_insert_with(|| {
                identities.push(ident);
                next
            });
            ids.push(id);
        }
        per_rank_ids.push(ids);
    }
    let mut sym_of: HashMap<Vec<u32>, u64> = HashMap::new();
    let symbols: Vec<u64> = (0..n)
        .map(|i| {
            let key: Vec<u32> = per_rank_ids.iter().map(|ids| ids[i]).collect();
            let next = sym_of.len() as u64;
            *sym_of.entry(key).or_insert(next)
        })
        .collect();
    let folded = fold::fold(&symbols);
    let mut leaf_ids = HashMap::new();
    let body = number_leaves(&folded, &mut leaf_ids);
    let nslots = leaf_ids.len();
    // positions of each slot, in order
    let mut positions: Vec<Vec<usize>> = vec![Vec::new(); nslots];
    walk(&folded, 0, &leaf_ids, &mut |leaf, p| positions[leaf as usize].push(p));
    let tm = timings(t);
    let digits = opts.significant_digits;
    let mut slots = Vec::with_capacity(nslots);
    for pos in &positions {
        let mut ranks = Vec::with_capacity(t.ranks.len());
        for (ri, r) in t.ranks.iter().enumerate() {
            let pick = |v: &Vec<Option<u64>>| pos.iter().map(|&p| v[p]).collect::<Vec<_>>();
            ranks.push(RankSlot {
                rank: r.rank,
                identity: per_rank_ids[ri][pos[0]],
                gap_ns: values(&pick(&tm.gap_ns[ri]), opts.lossless, digits)?,
                compute_ns: values(&pick(&tm.compute_ns[ri]), opts.lossless, digits)?,
                span_ns: values(&pick(&tm.span_ns[ri]), opts.lossless, digits)?,
            });
        }
        slots.push(Slot { occurrences: pos.len() as u64, ranks });
    }
    // the main loop: the top-level loop that covers the most collectives
    let main = folded
        .iter()
        .enumerate()
        .filter(|(_, f)| matches!(f, FoldNode::Loop { .. }))
        .max_by_key(|(i, f)| (fold::covered(f), std::cmp::Reverse(*i)));
    let source_iterations = match main {
        Some((_, FoldNode::Loop { count, .. })) => *count as u64,
        _ => 1,
    };
    let (iterations, rule) = match (opts.lossless, opts.iterations, main) {
        (_, _, None) => (1, "the source has no repeated block: replayed whole, once".to_string()),
        (true, _, Some(_)) => (source_iterations, "lossless: the source's full count".to_string()),
        (false, Some(k), Some(_)) => {
            if k == 0 || k > source_iterations {
                crate::refuse!(
                    Code::OutOfRange,
                    "--iterations {k}: the main loop runs 1 to {source_iterations} times in the source"
                );
            }
            (k, format!("--iterations {k}, as asked"))
        }
        (false, None, Some((mi, _))) => {
            let k = iterations_for_median(MEDIAN_CONFIDENCE, MEDIAN_BAND.0).min(source_iterations);
            // and enough that what runs once per pass (a prologue, an epilogue) keeps every identity's share
            let k = (k..=source_iterations)
                .find(|&k| mix_within(&body, mi, k, n as u64, &per_rank_ids, MIX_SHARE_MAX / 2.0))
                .unwrap_or(source_iterations);
            (
                k,
                format!(
                    "the fewest iterations whose distribution-free {:.0}% interval for one job's median iteration time \
                        lies within the quartiles (order statistics, Conover 1999 §3.2), and that keep every \
                        identity's share of a pass within {:.1} points of the source's, at most the source's \
                        {source_iterations}",
                    MEDIAN_CONFIDENCE * 100.0,
                    MIX_SHARE_MAX / 2.0 * 100.0
                ),
            )
        }
    };
    let main_loop = main.map(|(i, _)| vec![i as u32]);
    let collectives_per_pass = expanded_len(&body, main_loop.as_deref(), iterations);
    let world = t.ranks.len() as u64;
    let source_events = n as u64 * world;
    let artifact_events = nslots as u64 * world;
    let replayed_events = collectives_per_pass * world;
    let mut approximations = Vec::new();
    if !opts.lossless {
        approximations.push(Approximation {
            what: "gap_ns, compute_ns, span_ns".into(),
            detail: format!(
                "per slot and rank as HdrHistogram buckets at {digits} significant digits (each stored value within \
                    {}% of a recorded one); the replay draws them stratified (quantiles (j+0.5)/m) in a seeded order",
                100.0 * 10f64.powi(-(digits as i32))
            ),
        });
        approximations.push(Approximation {
            what: "cross-rank dependence".into(),
            detail: "one shared draw order per slot for every rank (comonotone): ranks that paused together in the \
                source pause together, a rank's own outlier is paired with the others' upper quantiles"
                .into(),
        });
    }
    if iterations < source_iterations {
        approximations.push(Approximation {
            what: "iterations".into(),
            detail: format!(
                "the main loop replays {iterations} of its {source_iterations} iterations per pass ({rule}); its \
                    stratified draws reach each distribution's {:.1}% quantile at most, so what the source did rarer \
                    than once in {} iterations (a rare stall or arrival skew) is not replayed",
                100.0 * (iterations as f64 - 0.5) / iterations as f64,
                2 * iterations
            ),
        });
    }
    approximations.push(Approximation {
        what: "compute".into(),
        detail:
            "the kernels of one gap are replayed as one operation of their summed duration on the first kernel's stream"
                .into(),
    });
    approximations.push(Approximation {
        what: "times".into(),
        detail: "absolute times are rebuilt from gaps and spans (host times from 0 per rank); device intervals of the \
            source are kept as span durations only"
            .into(),
    });
    let c = Canary {
        format_version: CANARY_FORMAT_VERSION,
        method: if opts.lossless { Method::Lossless } else { Method::Compiled },
        label: if opts.lossless { "canary (lossless)".into() } else { "canary".into() },
        source,
        groups: t.groups.clone(),
        identities,
        body,
        main_loop,
        slots,
        budget: ErrorBudget {
            significant_digits: if opts.lossless { 0 } else { digits },
            max_relative_error_ppm: if opts.lossless { 0 } else { 10u64.pow(6 - digits as u32) },
        },
        replay: ReplayPlan {
            iterations,
            source_iterations,
            rule,
            collectives_per_pass: vec![collectives_per_pass; t.ranks.len()],
            seed: opts.seed,
        },
        approximations,
        sizes: Sizes { source_events, artifact_events, replayed_events },
        left_out_p2p: left_out_p2p(t),
        digest: String::new(),
    };
    c.seal()
}

/// The source's point-to-point operations (an MPI capture's `mpi.p2p`),
/// which the folding does not keep, counted per rank; `None` where it has none.
pub(crate) fn left_out_p2p(t: &CommTrace) -> Option<LeftOutP2p> {
    let m = t.mpi.as_ref().filter(|m| m.p2p.iter().any(|r| !r.is_empty()))?;
    let bytes = |o: &MpiP2p| o.elems.saturating_mul(u64::try_from(o.dtype_bytes).unwrap_or(0));
    Some(LeftOutP2p {
        operations_per_rank: m.p2p.iter().map(|r| r.len() as u64).collect(),
        bytes_sent_per_rank: m
            .p2p
            .iter()
            .map(|r| r.iter().filter(|o| o.direction == "send").map(bytes).sum())
            .collect(),
        consequence: "the canary's pick sees only the collectives' transport; the source trace's phases run these \
            operations, so a pick that depends on point-to-point settings (OMPI_MCA_btl, its buffer sizes) can differ \
            from the source's"
            .into(),
    })
}

/// The largest identity-share difference `verify` accepts (its `mix.identities` check).
pub(crate) const MIX_SHARE_MAX: f64 = 0.05;

/// Whether a pass with the main loop (top-level node `main`) at `k`
/// iterations keeps every identity's share of rank 0's collectives within
/// `tol` of the source's.
fn mix_within(body: &[Node], main: usize, k: u64, n: u64, ids: &[Vec<u32>], tol: f64) -> bool {
    // counts per identity over one pass: positions of leaves weighted by their repetitions
    fn count(nodes: &[Node], weight: u64, top: Option<(usize, u64)>, out: &mut std::collections::HashMap<u32, u64>) {
        for (i, nd) in nodes.iter().enumerate() {
            match nd {
                Node::Op(s) => *out.entry(*s).or_insert(0) += weight,
                Node::Loop { count: c, body } => {
                    let c = match top {
                        Some((m, k)) if m == i => k,
                        _ => *c,
                    };
                    count(body, weight * c, None, out);
                }
            }
        }
    }
    let Some(rank0) = ids.first() else { return true };
    let mut per_slot = std::collections::HashMap::new();
    count(body, 1, Some((main, k)), &mut per_slot);
    let mut src_slot = std::collections::HashMap::new();
    count(body, 1, None, &mut src_slot);
    // slot -> identity on rank 0: the first position of each slot in source order
    let mut first = std::collections::HashMap::new();
    fn firsts(nodes: &[Node], pos: &mut u64, first: &mut std::collections::HashMap<u32, u64>) {
        for nd in nodes {
            match nd {
                Node::Op(s) => {
                    first.entry(*s).or_insert(*pos);
                    *pos += 1;
                }
                Node::Loop { count, body } => {
                    let before = *pos;
                    firsts(body, pos, first);
                    let one = *pos - before;
                    *pos = before + one * count;
                }
            }
        }
    }
    firsts(body, &mut 0, &mut first);
    let total: u64 = per_slot.values().sum();
    let mut share_c: std::collections::HashMap<u32, f64> = std::collections::HashMap::new();
    let mut share_s: std::collections::HashMap<u32, f64> = std::collections::HashMap::new();
    for (s, c) in &per_slot {
        let id = rank0[first[s] as usize];
        *share_c.entry(id).or_insert(0.0) += *c as f64 / total.max(1) as f64;
        *share_s.entry(id).or_insert(0.0) += src_slot[s] as f64 / n.max(1) as f64;
    }
    share_s.iter().all(|(id, a)| (a - share_c.get(id).copied().unwrap_or(0.0)).abs() <= tol)
}

/// Collectives one pass issues per rank, with the main loop at `iterations`.
pub(crate) fn expanded_len(body: &[Node], main_loop: Option<&[u32]>, iterations: u64) -> u64 {
    body.iter()
        .enumerate()
        .map(|(i, n)| match (n, main_loop) {
            (Node::Loop { body, .. }, Some([m])) if *m as usize == i => {
                iterations.saturating_mul(body.iter().map(Node::len).sum::<u64>())
            }
            _ => n.len(),
        })
        .sum()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::canary::synth;
    use crate::core::refusal::{self, Code};

    #[test]
    fn lossless_with_an_iteration_count_is_refused_not_ignored() {
        let t = synth::synth(60, 2, 1).unwrap();
        let bytes = serde_json::to_vec(&t).unwrap();
        for k in [1u64, 2, 1000] {
            let e = compile(&t, &bytes, &CompileOptions { lossless: true, iterations: Some(k), ..Default::default() })
                .unwrap_err();
            assert_eq!(refusal::code_of(&e), Some(Code::BadArgument), "{e:#}");
        }
        compile(&t, &bytes, &CompileOptions { lossless: true, ..Default::default() }).unwrap();
    }

    #[test]
    fn the_median_rule_needs_about_a_dozen_iterations() {
        let n = iterations_for_median(0.90, 0.25);
        assert!((8..=16).contains(&n), "{n}");
        // a stricter confidence needs more
        assert!(iterations_for_median(0.95, 0.25) > n);
    }

    #[test]
    fn histograms_keep_values_within_their_budget() {
        let vals: Vec<u64> = (1..2000).map(|i| i * 997).collect();
        let h = histogram(&vals, 2).unwrap();
        assert_eq!(h.count(), vals.len() as u64);
        for q in [0.0, 0.1, 0.5, 0.9, 0.99, 1.0] {
            let got = h.quantile(q).unwrap() as f64;
            let want = vals[((q * vals.len() as f64).ceil() as usize).clamp(1, vals.len()) - 1] as f64;
            assert!((got - want).abs() / want <= 0.011, "q {q}: {got} vs {want}");
        }
    }
}
