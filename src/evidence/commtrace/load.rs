//! Building and reading a [`CommTrace`]: consumes the per-file records of a
//! decoder ([`assemble`], [`import_files`]) or a trace file written by
//! `commcanary import` ([`CommTrace::read`]) and produces the checked trace.
//! Refuses an unknown format version, files of different runs or rank sets,
//! a rank missing or recorded twice, groups described two ways, whatever the
//! rules of `check` refuse, and a job of another size ([`CommTrace::check_world_size`]).
use super::check::{check_consistency, check_groups, check_ranks};
use super::{et, kineto};
use super::{
    CommTrace, Limits, RankRecord, RankTrace, SourceKind, TraceClock, TraceGroup, TraceSource, UnknownField,
    COMM_TRACE_FORMAT_VERSION,
};
use crate::core::refusal::Code;
use crate::core::{fsutil, limits};
use anyhow::{bail, Context, Result};
use std::path::Path;

impl CommTrace {
    /// Read and check a trace written by `commcanary import`.
    pub fn read(path: &Path) -> Result<Self> {
        Ok(Self::read_with_sha256(path)?.0)
    }

    /// [`CommTrace::read`], with the SHA-256 of exactly the bytes decoded.
    pub fn read_with_sha256(path: &Path) -> Result<(Self, String)> {
        let bytes = limits::read_bounded(path, Limits::default().max_json_bytes)?;
        let t = Self::from_slice(&bytes).with_context(|| path.display().to_string())?;
        Ok((t, fsutil::sha256_hex(&bytes)))
    }

    /// Refuse a job of another size than the trace was recorded on (`BAD_ARGUMENT`).
    pub fn check_world_size(&self, world_size: u32) -> Result<()> {
        if world_size != self.world_size {
            crate::refuse!(
                Code::BadArgument,
                "the trace was recorded on {} ranks; this job has {world_size}: run it under mpirun -n {}",
                self.world_size,
                self.world_size
            );
        }
        Ok(())
    }

    /// Decode and check.
    pub fn from_slice(bytes: &[u8]) -> Result<Self> {
        let t: CommTrace = serde_json::from_slice(bytes).map_err(|e| {
            if json_shape(bytes) == Some(JsonShape::CanaryArtifact) {
                anyhow::anyhow!(
                    "a canary artifact (what `canary compile` or `canary reduce` writes), not a communication trace: \
                        pass the trace it was compiled from (its source.path)"
                )
            } else {
                anyhow::Error::new(e).context("not a CommCanary communication trace")
            }
        })?;
        if !(COMM_TRACE_FORMAT_VERSION..=super::COMM_TRACE_MPI_FORMAT_VERSION).contains(&t.format_version) {
            bail!(
                "communication trace format version {} (this build reads {COMM_TRACE_FORMAT_VERSION} to {})",
                t.format_version,
                super::COMM_TRACE_MPI_FORMAT_VERSION
            );
        }
        if (t.format_version >= 2) != (t.source.kind == SourceKind::MpiCapture && t.mpi.is_some()) {
            bail!(
                "communication trace format version {} with source {:?}: versions 2 and 3 are `import mpi` traces with \
                    their `mpi` section, and only those",
                t.format_version,
                t.source.kind
            );
        }
        let names: Vec<String> = t.source.files.iter().map(|f| f.path.clone()).collect();
        check_ranks(t.world_size, &t.ranks.iter().map(|r| r.rank).collect::<Vec<_>>(), &names)?;
        check_groups(&t.groups, t.world_size)?;
        check_consistency(&t.groups, &t.ranks, &names)?;
        Ok(t)
    }
}

/// How far apart (ns) the wall-clock spans of two files of one run may lie:
/// the ranks of one job record at the same time, on clocks that agree far
/// better than this; files whose spans lie further apart come from
/// different runs, even of the same shape.
pub const SAME_RUN_SLACK_NS: u64 = 60_000_000_000;

/// Put per-file records together: same run, one file per rank, every rank
/// present, groups described alike, counts agreeing across members.
pub(crate) fn assemble(
    kind: SourceKind,
    mut recs: Vec<RankRecord>,
    clock: TraceClock,
    unknown: Vec<UnknownField>,
) -> Result<CommTrace> {
    let Some(first) = recs.first() else { bail!("no trace files given") };
    let (first_path, first_facts, world) = (first.file.path.clone(), first.run_facts.clone(), first.world_size);
    for r in &recs[1..] {
        for ((k, a), (k2, b)) in first_facts.iter().zip(r.run_facts.iter()) {
            if k != k2 || a != b {
                bail!(
                    "{} and {first_path} come from different runs or rank sets: {k} is {b} in {} but {a} in \
                    {first_path}",
                    r.file.path,
                    r.file.path
                );
            }
        }
        if r.run_facts.len() != first_facts.len() || r.world_size != world {
            bail!(
                "{} and {first_path} come from different runs or rank sets: world size {} vs {world}",
                r.file.path,
                r.world_size
            );
        }
    }
    // one run's ranks record at the same time: spans further apart are two runs of one shape
    let spans: Vec<(&str, (u64, u64))> =
        recs.iter().filter_map(|r| r.wall_span_ns.map(|s| (r.file.path.as_str(), s))).collect();
    if let (Some(late), Some(early)) = (spans.iter().max_by_key(|s| s.1 .0), spans.iter().min_by_key(|s| s.1 .1)) {
        if late.1 .0 > early.1 .1.saturating_add(SAME_RUN_SLACK_NS) {
            bail!(
                "{} and {} come from different runs: {} starts recording {:.0} s after {} stopped (the ranks of one \
                    run record at the same time)",
                late.0,
                early.0,
                late.0,
                (late.1 .0 - early.1 .1) as f64 / 1e9,
                early.0
            );
        }
    }
    recs.sort_by_key(|r| r.file.rank);
    let names: Vec<String> = recs.iter().map(|r| r.file.path.clone()).collect();
    check_ranks(world, &recs.iter().map(|r| r.file.rank).collect::<Vec<_>>(), &names)?;
    // Groups: the union of what the files describe; one name, one membership.
    let mut groups: Vec<TraceGroup> = Vec::new();
    for r in &recs {
        for g in &r.groups {
            match groups.iter().find(|h| h.name == g.name) {
                Some(h) if h.members != g.members => bail!(
                    "{} describes group {:?} with members {:?}, another file with {:?}: files from different runs or \
                        rank sets",
                    r.file.path,
                    g.name,
                    g.members,
                    h.members
                ),
                Some(_) => {}
                None => groups.push(g.clone()),
            }
        }
    }
    check_groups(&groups, world)?;
    let ranks: Vec<RankTrace> = recs
        .iter()
        .map(|r| RankTrace {
            rank: r.file.rank,
            collectives: r.collectives.clone(),
            trailing_compute: r.trailing_compute.clone(),
        })
        .collect();
    check_consistency(&groups, &ranks, &names)?;
    // Every described group is kept (the world group carries the world size
    // even where no collective uses it), in name order.
    groups.sort_by(|a, b| a.name.cmp(&b.name));
    let first = &recs[0];
    Ok(CommTrace {
        format_version: COMM_TRACE_FORMAT_VERSION,
        source: TraceSource {
            kind,
            schema: first.schema.clone(),
            nccl_version: first.nccl_version.clone(),
            files: recs.iter().map(|r| r.file.clone()).collect(),
        },
        world_size: world,
        clock,
        unknown,
        groups,
        ranks,
        mpi: None,
    })
}

/// Import one file per rank of `kind` and put them together.
pub(crate) fn import_files(kind: SourceKind, paths: &[std::path::PathBuf], limits: &Limits) -> Result<CommTrace> {
    if !matches!(kind, SourceKind::Kineto | SourceKind::ExecutionTrace) {
        bail!("import_files reads profiler files (kineto, et); a run is imported with `import run`");
    }
    let recs = paths
        .iter()
        .map(|p| match kind {
            SourceKind::Kineto => kineto::import_file(p, limits),
            _ => et::import_file(p, limits),
        })
        .collect::<Result<Vec<_>>>()?;
    let (clock, unknown) = match kind {
        SourceKind::Kineto => (kineto::clock(), kineto::unknown()),
        _ => (et::clock(), et::unknown()),
    };
    assemble(kind, recs, clock, unknown)
}

/// What a JSON document holds, judged by its top-level fields only: for the
/// advice of an error when one kind of input is given where another is read.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum JsonShape {
    /// A communication trace (`ranks`, `groups`, `world_size`).
    CommTrace,
    /// A canary artifact (`slots`, `body`, `replay`, `digest`).
    CanaryArtifact,
}

/// The shape of `bytes` where they are a JSON object with a shape's telling fields.
pub fn json_shape(bytes: &[u8]) -> Option<JsonShape> {
    let v: serde_json::Value = serde_json::from_slice(bytes).ok()?;
    let o = v.as_object()?;
    let has = |keys: &[&str]| keys.iter().all(|k| o.contains_key(*k));
    if has(&["slots", "body", "replay"]) {
        Some(JsonShape::CanaryArtifact)
    } else if has(&["ranks", "groups", "world_size"]) {
        Some(JsonShape::CommTrace)
    } else {
        None
    }
}
