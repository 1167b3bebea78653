//! The collective sweep of `validate`: all-reduce and all-gather over
//! sizes, timed as nccl-tests times them, with busbw per size.
//!
//! Consumes a backend, the world communicator and the sizes, and runs them as
//! the isolated phase does. Produces, per collective and size, the mean time
//! per iteration of the slowest rank, algbw and busbw, and the elements a
//! result check found wrong. Refuses nothing itself.
//!
//! Timing, bandwidths and sizes: docs/METHODS.md, "Validate sweep timing".
use crate::backend::Backend;
use crate::core::clock::RankClock;
use crate::core::collective::CollectiveKind;
use crate::core::workload::{GemmShape, SweepKind, WorkloadSpec};
use crate::evidence::shard::Dtype;
use crate::rank::phases::{Runner, RunnerControls};
use anyhow::{Context, Result};
use mpi::collective::{CommunicatorCollectives, SystemOperation};
use mpi::topology::{Communicator, SimpleCommunicator};
use serde::{Deserialize, Serialize};

/// The kinds validate sweeps, in its order: the sum all-reduce (`rank`'s
/// default sweep) and the all-gather.
pub fn kinds() -> [SweepKind; 2] {
    [SweepKind::default(), SweepKind::of(CollectiveKind::AllGather).expect("all-gather has a bus-bandwidth factor")]
}

/// validate's name of a kind, kebab case, in its checks, tables and reports
/// (`all-reduce`; the shard's and `rank --collective`'s is `all_reduce`).
pub fn name(kind: SweepKind) -> String {
    kind.name().replace('_', "-")
}

/// nccl-tests' bus-bandwidth factor for `n` ranks: the kind table's, also at
/// one rank (where [`SweepKind::busbw_factor`] is 1).
pub fn busbw_factor(kind: SweepKind, n: u32) -> f64 {
    kind.kind().row().bus_bw.map_or(1.0, |b| b.factor(n))
}

/// The size actually run for a requested `bytes`: the sweep's element
/// count ([`SweepKind::count`]), at least one element per rank.
pub fn bytes_for(kind: SweepKind, bytes: u64, dtype: Dtype, n: u32) -> u64 {
    let least = if kind.splits() { u64::from(n.max(1)) } else { 1 };
    kind.count(bytes, dtype.size_bytes(), n.max(1)).unwrap_or(least) * dtype.size_bytes()
}

/// A [`SweepKind`] in validate's files, by its [`name`]: `#[serde(with =
/// "sweep::by_name")]`, `#[schemars(with = "sweep::by_name::Schema")]`.
pub mod by_name {
    use super::{kinds, name, SweepKind};
    use serde::{de::Error, Deserialize, Deserializer, Serializer};

    /// Writes [`name`].
    pub fn serialize<S: Serializer>(kind: &SweepKind, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&name(*kind))
    }

    /// Reads a name of [`kinds`]; refuses another, listing them.
    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<SweepKind, D::Error> {
        let s = String::deserialize(d)?;
        kinds().into_iter().find(|k| name(*k) == s).ok_or_else(|| {
            let known: Vec<String> = kinds().into_iter().map(name).collect();
            D::Error::custom(format!("unknown collective {s:?} (validate sweeps {})", known.join(", ")))
        })
    }

    /// The JSON Schema of the names: one constant per kind of [`kinds`].
    pub struct Schema;

    impl schemars::JsonSchema for Schema {
        fn schema_name() -> std::borrow::Cow<'static, str> {
            "Collective".into()
        }

        fn json_schema(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
            let one_of: Vec<serde_json::Value> = kinds()
                .into_iter()
                .map(|k| {
                    serde_json::json!({
                        "description": format!("{}.", k.kind().row().sweep_help.unwrap_or_default()),
                        "type": "string",
                        "const": name(k)
                    })
                })
                .collect();
            schemars::json_schema!({"description": "A swept collective, by validate's kebab-case name of the \
                kind.", "oneOf": one_of})
        }
    }
}

/// One size of one collective in one round.
#[derive(schemars::JsonSchema, Serialize, Deserialize, Clone, Debug, PartialEq)]
pub struct SizeResult {
    /// Size run, bytes (an all-gather's gathered total).
    pub bytes: u64,
    /// Mean time per iteration of the slowest rank, µs.
    pub time_us: f64,
    /// bytes / time, GB/s (10^9 bytes per second).
    pub algbw_gbps: f64,
    /// algbw × nccl-tests' bus factor, GB/s.
    pub busbw_gbps: f64,
    /// Wrong elements in the result of the last iteration, summed over ranks;
    /// absent in rounds that did not check (the first round checks every size).
    pub wrong_elements: Option<u64>,
}

/// What one sweep runs: the sizes, their element type and iteration counts
/// (a reference's settings), and whether the last iteration of every size
/// is checked.
pub struct SweepLoop<'a> {
    /// Requested sizes, bytes.
    pub sizes_bytes: &'a [u64],
    /// Element type.
    pub dtype: Dtype,
    /// Timed iterations per size.
    pub iters: u32,
    /// Warm-up iterations per size.
    pub warmup_iters: u32,
    /// Check the last iteration of every size.
    pub check: bool,
}

/// Sweep the sizes of `l` of `kind` once as the isolated phase runs it ([`crate::rank::phases`]),
/// every rank in step; returns the rows on every rank (docs/METHODS.md, "Validate sweep timing").
pub fn sweep<B: Backend>(
    backend: &mut B,
    world: &SimpleCommunicator,
    clock: &RankClock,
    kind: SweepKind,
    l: &SweepLoop,
) -> Result<Vec<SizeResult>> {
    let n = world.size() as u32;
    let sizes: Vec<u64> = l.sizes_bytes.iter().map(|&b| bytes_for(kind, b, l.dtype, n)).collect();
    // the isolated phase computes nothing: the GEMM shape is the backend's own concern
    let mut spec =
        WorkloadSpec::isolated_only(sizes.first().copied().unwrap_or(0), l.iters, GemmShape { m: 1, n: 1, k: 1 });
    (spec.isolated_sizes_bytes, spec.warmup_iters, spec.check, spec.dtype) =
        (sizes.clone(), l.warmup_iters, u32::from(l.check), l.dtype);
    spec.isolated_collective = Some(kind);
    let mut runner = Runner::new(backend, clock, &spec, RunnerControls::default()).with_sweep_group(1);
    runner.run_all()?;
    let per_size = (l.warmup_iters + l.iters) as usize;
    let mut rows = Vec::with_capacity(sizes.len());
    for (i, &bytes) in sizes.iter().enumerate() {
        let recs =
            runner.body.collectives.get(i * per_size..(i + 1) * per_size).context("internal: a size unrecorded")?;
        let timed = &recs[l.warmup_iters as usize..];
        let span = |a: Option<u64>, b: Option<u64>| b.zip(a).map(|(b, a)| b.saturating_sub(a));
        let elapsed_ns = match (timed.first(), timed.last()) {
            (Some(f), Some(e)) => span(f.device_start_ns, e.device_end_ns)
                .filter(|_| timed.iter().all(|r| r.device_end_ns.is_some()))
                .unwrap_or(e.wait_end_ns.saturating_sub(f.host_issue_ns)),
            _ => 0,
        };
        let mut slowest_ns = 0u64;
        world.all_reduce_into(&elapsed_ns, &mut slowest_ns, SystemOperation::max());
        let wrong_elements = l.check.then(|| {
            let found = runner.checks.iter().filter(|c| recs.iter().any(|r| (r.group, r.seq) == (c.group, c.seq)));
            let mine: u64 = found.map(|c| c.wrong_elements).sum();
            let mut wrong = 0u64;
            world.all_reduce_into(&mine, &mut wrong, SystemOperation::sum());
            wrong
        });
        let time_us = slowest_ns as f64 / 1e3 / f64::from(l.iters.max(1));
        let algbw = if time_us > 0.0 { bytes as f64 / (time_us * 1e3) } else { f64::NAN };
        rows.push(SizeResult {
            bytes,
            time_us,
            algbw_gbps: algbw,
            busbw_gbps: algbw * busbw_factor(kind, n),
            wrong_elements,
        });
    }
    Ok(rows)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn factors_are_nccl_tests() {
        let [ar, ag] = kinds();
        assert_eq!(busbw_factor(ar, 8), 1.75);
        assert_eq!(busbw_factor(ag, 8), 0.875);
        assert_eq!(busbw_factor(ar, 2), 1.0);
    }

    #[test]
    fn kinds_are_named_in_kebab_case_and_read_back() {
        let [ar, ag] = kinds();
        assert_eq!((ar.kind(), ag.kind()), (CollectiveKind::AllReduce, CollectiveKind::AllGather));
        #[derive(Serialize, Deserialize)]
        struct Row(#[serde(with = "by_name")] SweepKind);
        for (k, n) in [(ar, "all-reduce"), (ag, "all-gather")] {
            assert_eq!(name(k), n);
            assert_eq!(serde_json::to_string(&Row(k)).unwrap(), format!("\"{n}\""));
            assert_eq!(serde_json::from_str::<Row>(&format!("\"{n}\"")).unwrap().0, k);
        }
        let e = serde_json::from_str::<Row>("\"all_reduce\"").err().unwrap().to_string();
        assert!(e.contains("all-reduce, all-gather"), "{e}");
    }

    #[test]
    fn gather_sizes_split_into_whole_elements() {
        let [ar, ag] = kinds();
        assert_eq!(bytes_for(ag, 8, Dtype::Bf16, 4), 8);
        assert_eq!(bytes_for(ag, 8, Dtype::Bf16, 8), 16);
        assert_eq!(bytes_for(ag, 100, Dtype::F32, 3), 96);
        assert_eq!(bytes_for(ar, 8, Dtype::Bf16, 8), 8);
        // the sweep's count rule: whole elements, split kinds a multiple of n, never empty
        for n in 1..=9u32 {
            for bytes in 0..300u64 {
                for dtype in [Dtype::Bf16, Dtype::F32] {
                    let e = dtype.size_bytes();
                    assert_eq!(bytes_for(ar, bytes, dtype, n), (bytes / e).max(1) * e);
                    let unit = e * u64::from(n);
                    assert_eq!(bytes_for(ag, bytes, dtype, n), (bytes / unit).max(1) * unit, "{bytes} B over {n}");
                }
            }
        }
    }
}
