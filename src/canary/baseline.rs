//! Baselines a canary must beat: deliberately simple samples of the source
//! at equal size, each made as an artifact and verified exactly like one.
//!
//! Consumes the source trace, the number of events `k` to keep (the canary's
//! stored operations per rank) and the collectives per pass to replay (the
//! canary's). Produces a [`Canary`] per method (`random`, `head`, `frequency`,
//! `cluster`, `stratified-gap`), the same k positions on every rank, each with
//! its exact recorded values. Refuses nothing. The methods: docs/METHODS.md,
//! "Baselines".
use crate::canary::artifact::*;
use crate::canary::compile::{bind_source, identity_of, left_out_p2p, timings};
use crate::canary::fold::Node;
use crate::evidence::commtrace::CommTrace;
use anyhow::Result;
use rand::seq::SliceRandom;
use rand::{Rng, SeedableRng};
use std::collections::HashMap;

/// The baseline methods, in report order.
pub(crate) const METHODS: [Method; 4] =
    [Method::RandomSample, Method::FrequencySample, Method::ClusterSample, Method::StratifiedGapSample];

/// Per position: the largest gap over ranks (ns; 0 when unknown).
fn max_gaps(t: &CommTrace) -> Vec<u64> {
    let tm = timings(t);
    let n = t.ranks.first().map_or(0, |r| r.collectives.len());
    (0..n).map(|i| tm.gap_ns.iter().filter_map(|g| g[i]).max().unwrap_or(0)).collect()
}

/// Per position: the identity tuple across ranks, as a symbol.
fn symbols(t: &CommTrace) -> Vec<u64> {
    let n = t.ranks.first().map_or(0, |r| r.collectives.len());
    let mut of: HashMap<String, u64> = HashMap::new();
    (0..n)
        .map(|i| {
            let key: Vec<String> = t
                .ranks
                .iter()
                .map(|r| {
                    let c = &r.collectives[i];
                    format!(
                        "{:?}|{:?}|{}|{}|{}|{:?}|{:?}",
                        c.kind, c.dtype, c.in_elems, c.out_elems, c.group, c.root, c.peer
                    )
                })
                .collect();
            let next = of.len() as u64;
            *of.entry(key.join(";")).or_insert(next)
        })
        .collect()
}

/// The k positions a method keeps, in trace order.
pub(crate) fn positions(t: &CommTrace, method: Method, k: usize, seed: u64) -> Vec<usize> {
    let n = t.ranks.first().map_or(0, |r| r.collectives.len());
    let k = k.clamp(1, n.max(1));
    let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(seed);
    let mut out: Vec<usize> = match method {
        Method::HeadSample => (0..k).collect(),
        Method::RandomSample => {
            let mut all: Vec<usize> = (0..n).collect();
            all.shuffle(&mut rng);
            all.truncate(k);
            all
        }
        Method::FrequencySample => {
            let sym = symbols(t);
            let mut count: HashMap<u64, Vec<usize>> = HashMap::new();
            for (i, s) in sym.iter().enumerate() {
                count.entry(*s).or_default().push(i);
            }
            let mut by: Vec<(u64, Vec<usize>)> = count.into_iter().collect();
            by.sort_by(|a, b| b.1.len().cmp(&a.1.len()).then(a.0.cmp(&b.0)));
            // largest remainder shares of k
            let share = |v: &Vec<usize>| k as f64 * v.len() as f64 / n as f64;
            let mut shares: Vec<(usize, f64)> = by.iter().map(|(_, v)| (share(v).floor() as usize, share(v))).collect();
            let mut left = k - shares.iter().map(|s| s.0).sum::<usize>();
            let mut order: Vec<usize> = (0..shares.len()).collect();
            order.sort_by(|&a, &b| {
                (shares[b].1 - shares[b].0 as f64).total_cmp(&(shares[a].1 - shares[a].0 as f64)).then(a.cmp(&b))
            });
            for &i in &order {
                if left == 0 {
                    break;
                }
                shares[i].0 += 1;
                left -= 1;
            }
            let mut picked = Vec::new();
            for ((_, occ), (take, _)) in by.iter().zip(&shares) {
                let take = (*take).min(occ.len());
                // evenly spaced occurrences
                for j in 0..take {
                    picked.push(occ[j * occ.len() / take.max(1)]);
                }
            }
            picked
        }
        Method::StratifiedGapSample => {
            let g = max_gaps(t);
            let mut idx: Vec<usize> = (0..n).collect();
            idx.sort_by_key(|&i| (g[i], i));
            (0..k).map(|s| idx[(s * n / k + (s + 1) * n / k) / 2]).collect()
        }
        Method::ClusterSample => {
            let g = max_gaps(t);
            let feat: Vec<(f64, f64)> = (0..n)
                .map(|i| ((t.ranks[0].collectives[i].in_bytes() as f64 + 1.0).log2(), (g[i] as f64 + 1.0).log2()))
                .collect();
            kmeans_representatives(&feat, k, &mut rng)
        }
        _ => (0..k).collect(),
    };
    out.sort_unstable();
    out.dedup();
    out
}

fn d2(a: (f64, f64), b: (f64, f64)) -> f64 {
    (a.0 - b.0).powi(2) + (a.1 - b.1).powi(2)
}

/// k-means++ seeding, then Lloyd's iterations; the member nearest each centre.
fn kmeans_representatives(x: &[(f64, f64)], k: usize, rng: &mut rand_chacha::ChaCha8Rng) -> Vec<usize> {
    let n = x.len();
    let mut centres = vec![x[rng.gen_range(0..n)]];
    while centres.len() < k {
        let w: Vec<f64> = x.iter().map(|p| centres.iter().map(|c| d2(*p, *c)).fold(f64::MAX, f64::min)).collect();
        let total: f64 = w.iter().sum();
        if total <= 0.0 {
            break;
        }
        let mut r = rng.gen::<f64>() * total;
        let mut pick = n - 1;
        for (i, wi) in w.iter().enumerate() {
            r -= wi;
            if r <= 0.0 {
                pick = i;
                break;
            }
        }
        centres.push(x[pick]);
    }
    let mut assign = vec![0usize; n];
    for _ in 0..25 {
        for (i, p) in x.iter().enumerate() {
            assign[i] =
                (0..centres.len()).min_by(|&a, &b| d2(*p, centres[a]).total_cmp(&d2(*p, centres[b]))).unwrap_or(0);
        }
        for (c, centre) in centres.iter_mut().enumerate() {
            let m: Vec<&(f64, f64)> = x.iter().zip(&assign).filter(|(_, a)| **a == c).map(|(p, _)| p).collect();
            if !m.is_empty() {
                *centre = (
                    m.iter().map(|p| p.0).sum::<f64>() / m.len() as f64,
                    m.iter().map(|p| p.1).sum::<f64>() / m.len() as f64,
                );
            }
        }
    }
    let mut reps: Vec<usize> = (0..centres.len())
        .filter_map(|c| {
            (0..n).filter(|&i| assign[i] == c).min_by(|&a, &b| d2(x[a], centres[c]).total_cmp(&d2(x[b], centres[c])))
        })
        .collect();
    // empty clusters: fill with the points farthest from their centre
    let mut rest: Vec<usize> = (0..n).filter(|i| !reps.contains(i)).collect();
    rest.sort_by(|&a, &b| d2(x[b], centres[assign[b]]).total_cmp(&d2(x[a], centres[assign[a]])));
    reps.extend(rest.into_iter().take(k.saturating_sub(reps.len())));
    reps
}

/// An artifact of the events at `pos` (the same on every rank), repeated to `replayed` collectives per pass.
pub(crate) fn from_positions(
    t: &CommTrace,
    bytes: &[u8],
    path: &str,
    pos: &[usize],
    method: Method,
    replayed: u64,
    seed: u64,
) -> Result<Canary> {
    let source = bind_source(t, bytes, path)?;
    let tm = timings(t);
    let mut identities: Vec<Identity> = Vec::new();
    let mut slots = Vec::new();
    for &p in pos {
        let mut ranks = Vec::new();
        for (ri, r) in t.ranks.iter().enumerate() {
            let id = identity_of(&r.collectives[p]);
            let idx = identities.iter().position(|x| *x == id).unwrap_or_else(|| {
                identities.push(id);
                identities.len() - 1
            }) as u32;
            let one = |v: Option<u64>| v.map_or(Values::Unknown, |x| Values::Exact(vec![x]));
            ranks.push(RankSlot {
                rank: r.rank,
                identity: idx,
                gap_ns: one(tm.gap_ns[ri][p]),
                compute_ns: one(tm.compute_ns[ri][p]),
                span_ns: one(tm.span_ns[ri][p]),
            });
        }
        slots.push(Slot { occurrences: 1, ranks });
    }
    let k = pos.len().max(1) as u64;
    let iterations = replayed.div_ceil(k).max(1);
    let world = t.ranks.len() as u64;
    let source_events = source.collectives_per_rank.iter().sum::<u64>();
    let body = vec![Node::Loop { count: iterations, body: (0..pos.len() as u32).map(Node::Op).collect() }];
    let c = Canary {
        format_version: CANARY_FORMAT_VERSION,
        method,
        label: format!("baseline ({} sample of {} events)", method.name(), pos.len()),
        source,
        groups: t.groups.clone(),
        identities,
        body,
        main_loop: Some(vec![0]),
        slots,
        budget: ErrorBudget { significant_digits: 0, max_relative_error_ppm: 0 },
        replay: ReplayPlan {
            iterations,
            source_iterations: iterations,
            rule: format!("the {} sampled events repeated to the canary's {replayed} collectives per pass", pos.len()),
            collectives_per_pass: vec![iterations * k; t.ranks.len()],
            seed,
        },
        approximations: vec![Approximation {
            what: "everything but the sampled events".into(),
            detail: format!("{} of the source's positions kept, by {} sampling", pos.len(), method.name()),
        }],
        sizes: Sizes { source_events, artifact_events: k * world, replayed_events: iterations * k * world },
        left_out_p2p: left_out_p2p(t),
        digest: String::new(),
    };
    c.seal()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::canary::synth;
    #[test]
    fn every_method_keeps_k_positions_in_order() {
        let t = synth::synth(100, 4, 7).unwrap();
        for m in METHODS.into_iter().chain([Method::HeadSample]) {
            let p = positions(&t, m, 10, 3);
            assert!(!p.is_empty() && p.len() <= 10, "{m:?}: {p:?}");
            assert!(p.windows(2).all(|w| w[0] < w[1]), "{m:?}: {p:?}");
            assert_eq!(p, positions(&t, m, 10, 3), "{m:?} is seeded");
        }
        assert_eq!(positions(&t, Method::HeadSample, 2, 0), vec![0, 1]);
    }
}
