//! `synth`: a deterministic synthetic communication trace for tests.
//!
//! Produces a [`CommTrace`] of `events` all-reduces per rank on the whole world, gaps and compute
//! drawn from a seeded ChaCha8 stream, with special *skew* and *overlap* events that a sample of a
//! few ordinary events visibly loses. The same seed gives the same bytes. The pattern:
//! docs/METHODS.md, "Synthetic traces".
use crate::evidence::commtrace::{
    self, ClockDomain, CollectiveKind, CommTrace, ComputeOp, RankTrace, SourceFile, SourceKind, TraceClock,
    TraceCollective, TraceDtype, TraceGroup, TraceSource, UnknownField,
};
use anyhow::Result;
use rand::{Rng, SeedableRng};

/// Sizes of the repeated pattern, bytes.
pub(crate) const PATTERN_BYTES: [u64; 5] = [64 << 10, 256 << 10, 64 << 10, 1 << 20, 16 << 10];
/// Extra gap of the late rank at a skew event.
pub(crate) const SKEW_NS: u64 = 6_000_000;
/// Gap and compute of an overlap event.
pub(crate) const OVERLAP_NS: u64 = 3_000_000;

/// What kind of event a position is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Special {
    /// An ordinary event.
    None,
    /// One rank is late by [`SKEW_NS`].
    Skew {
        /// The late rank.
        rank: u32,
    },
    /// Every rank computes [`OVERLAP_NS`] before it.
    Overlap,
}

/// The special events of a synthetic trace, by position.
pub(crate) fn specials(events: usize, ranks: u32, seed: u64) -> Vec<Special> {
    let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(seed ^ 0x5eed);
    let mut out = vec![Special::None; events];
    if events <= 5 {
        return out;
    }
    let n = (events / 25).max(2);
    let mut placed = 0;
    while placed < n {
        let p = rng.gen_range(5..events);
        if out[p] != Special::None {
            continue;
        }
        out[p] = if placed % 2 == 0 { Special::Skew { rank: rng.gen_range(0..ranks) } } else { Special::Overlap };
        placed += 1;
    }
    out
}

/// A synthetic trace of `events` collectives per rank on `ranks` ranks.
pub fn synth(events: usize, ranks: u32, seed: u64) -> Result<CommTrace> {
    use crate::core::refusal::Code;
    if events == 0 || events > 10_000_000 {
        crate::refuse!(Code::OutOfRange, "--events {events}: expected 1 to 10000000");
    }
    if !(1..=4096).contains(&ranks) {
        crate::refuse!(Code::OutOfRange, "--ranks {ranks}: expected 1 to 4096");
    }
    let sp = specials(events, ranks, seed);
    let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(seed);
    // per position and rank: gap, compute, span
    let mut rows: Vec<Vec<(u64, u64, u64)>> = Vec::with_capacity(events);
    for s in &sp {
        let row = (0..ranks)
            .map(|r| {
                let gap = rng.gen_range(150_000..250_000u64);
                let span = rng.gen_range(40_000..60_000u64);
                match *s {
                    Special::Overlap => (OVERLAP_NS, OVERLAP_NS, span),
                    Special::Skew { rank } if rank == r => (gap + SKEW_NS, gap * 4 / 5, span),
                    _ => (gap, gap * 4 / 5, span),
                }
            })
            .collect();
        rows.push(row);
    }
    let members: Vec<u32> = (0..ranks).collect();
    let mut rank_traces = Vec::with_capacity(ranks as usize);
    for r in 0..ranks {
        let mut t = 0u64;
        let mut colls = Vec::with_capacity(events);
        for (i, row) in rows.iter().enumerate() {
            let (gap, compute, span) = row[r as usize];
            let bytes = PATTERN_BYTES[i % PATTERN_BYTES.len()];
            let elems = bytes / 4;
            let mut c = TraceCollective::new(
                CollectiveKind::AllReduce,
                "allreduce",
                "0",
                TraceDtype::F32,
                (elems, elems),
                (None, None),
                (None, None),
            );
            c.stream = Some(13);
            let start = t + gap;
            c.host_start_ns = Some(start);
            c.host_duration_ns = Some(span);
            c.compute_before.push(ComputeOp {
                name: "synthetic_gemm".into(),
                stream: Some(7),
                device_start_ns: Some(start - compute),
                duration_ns: Some(compute),
            });
            t = start + span;
            colls.push(c);
        }
        commtrace::number_sequences(&mut colls);
        rank_traces.push(RankTrace { rank: r, collectives: colls, trailing_compute: Vec::new() });
    }
    Ok(CommTrace {
        format_version: commtrace::COMM_TRACE_FORMAT_VERSION,
        source: TraceSource {
            kind: SourceKind::Synthetic,
            schema: Some(format!("synth events={events} ranks={ranks} seed={seed}")),
            nccl_version: None,
            files: (0..ranks)
                .map(|r| SourceFile { path: format!("synth:{seed}"), sha256: String::new(), rank: r })
                .collect(),
        },
        world_size: ranks,
        clock: TraceClock {
            domain: ClockDomain::HostPerRank,
            aligned_across_ranks: false,
            note: "synthetic host times from 0 on each rank".into(),
        },
        unknown: vec![UnknownField { field: "device".into(), reason: "a synthetic trace has host times only".into() }],
        groups: vec![TraceGroup { name: "0".into(), desc: Some("default_pg".into()), members }],
        ranks: rank_traces,
        mpi: None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    #[test]
    fn the_same_seed_gives_the_same_trace_and_specials_are_placed() {
        let a = serde_json::to_vec(&synth(100, 4, 7).unwrap()).unwrap();
        let b = serde_json::to_vec(&synth(100, 4, 7).unwrap()).unwrap();
        assert_eq!(a, b);
        let c = serde_json::to_vec(&synth(100, 4, 8).unwrap()).unwrap();
        assert_ne!(a, c);
        let s = specials(100, 4, 7);
        assert_eq!(s.iter().filter(|x| **x != Special::None).count(), 4);
        assert!(s[..5].iter().all(|x| *x == Special::None));
        let t = synth(100, 4, 7).unwrap();
        assert!(CommTrace::from_slice(&serde_json::to_vec(&t).unwrap()).is_ok());
    }
}
