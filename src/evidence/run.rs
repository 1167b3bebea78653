//! The run record `run.json`, written by rank 0 after every rank's shard.
//!
//! Consumes the shard digests gathered over MPI; produces the record that
//! `join` checks shards against (a shard whose bytes differ from the digest
//! recorded here is stale or replaced).
use crate::core::workload::WorkloadSpec;
use crate::core::{clock, fsutil, limits};
use crate::evidence::shard::BackendKind;
use serde::{Deserialize, Serialize};

/// Current run record format version. 2 added the workload's model shape and
/// element types (absent fields read as the synthetic f32 workload of version 1,
/// which is still read).
pub(crate) const RUN_FORMAT_VERSION: u32 = 2;
/// File name of the run record inside a run directory.
pub(crate) const RUN_FILE: &str = "run.json";

/// One rank's shard as recorded by rank 0.
#[derive(schemars::JsonSchema, Serialize, Deserialize, Clone, Debug, PartialEq)]
pub struct ShardRef {
    /// World rank.
    pub rank: u32,
    /// File name inside the run directory.
    pub file: String,
    /// SHA-256 of the whole file.
    pub sha256: String,
    /// File size.
    pub size_bytes: u64,
    /// Host the rank ran on.
    pub host: String,
}

/// The run record.
#[derive(schemars::JsonSchema, Serialize, Deserialize, Clone, Debug, PartialEq)]
pub struct RunRecord {
    /// Format version.
    pub format_version: u32,
    /// Run id.
    pub run_id: String,
    /// World size.
    pub world_size: u32,
    /// Backend used.
    pub backend: BackendKind,
    /// Workload as run.
    pub workload: WorkloadSpec,
    /// Command line of rank 0.
    pub argv: Vec<String>,
    /// Identity digest of rank 0's environment.
    pub rank0_identity_sha256: String,
    /// Every rank's shard.
    pub shards: Vec<ShardRef>,
    /// Wall-clock start (Unix ms).
    pub started_unix_ms: u64,
    /// Wall-clock end (Unix ms).
    pub finished_unix_ms: u64,
}

/// Read and check a run record: size-bounded, a known format version, a
/// world size of 1 to [`crate::core::limits::MAX_WORLD_SIZE`] ranks, and one shard
/// entry per rank, each rank once.
pub fn read_run_record(path: &std::path::Path) -> anyhow::Result<RunRecord> {
    let bytes = limits::read_bounded(path, limits::MAX_JSON_BYTES)?;
    parse_run_record(&bytes, &path.display().to_string())
}

/// [`read_run_record`] on bytes; `name` names the file in errors.
pub fn parse_run_record(bytes: &[u8], name: &str) -> anyhow::Result<RunRecord> {
    use crate::core::refusal::{refuse, Code};
    let run: RunRecord = serde_json::from_slice(bytes)
        .map_err(|e| refuse(Code::BadFormat, format!("{name}: not a valid run record: {e}")))?;
    if !(1..=RUN_FORMAT_VERSION).contains(&run.format_version) {
        return Err(refuse(
            Code::UnsupportedVersion,
            format!(
                "{name}: run format version {} is not supported (this build reads versions 1 to {RUN_FORMAT_VERSION})",
                run.format_version
            ),
        ));
    }
    if run.world_size == 0 || run.world_size > limits::MAX_WORLD_SIZE {
        return Err(refuse(
            Code::BadStructure,
            format!("{name}: world_size {} is outside 1 to {}", run.world_size, limits::MAX_WORLD_SIZE),
        ));
    }
    let mut ranks: Vec<u32> = run.shards.iter().map(|s| s.rank).collect();
    ranks.sort_unstable();
    if ranks.len() != run.world_size as usize || ranks.iter().enumerate().any(|(i, &r)| r as usize != i) {
        return Err(refuse(
            Code::BadStructure,
            format!(
                "{name}: {} shard entries for a world of {} ranks; each rank 0 to {} must appear once",
                run.shards.len(),
                run.world_size,
                run.world_size - 1
            ),
        ));
    }
    Ok(run)
}

/// The run record writer: `dir/run.json`, atomically, never replacing one
/// (written by rank 0 after every shard, and by `synth-shards`).
pub fn write_run_record(dir: &std::path::Path, record: &RunRecord) -> anyhow::Result<()> {
    fsutil::write_json_new(&dir.join(RUN_FILE), record)
}

/// A fresh run id: UTC date-time plus 8 random hex digits.
pub(crate) fn new_run_id() -> String {
    let now = std::time::UNIX_EPOCH + std::time::Duration::from_secs(clock::unix_ms() / 1000);
    let r: u32 = rand::random();
    run_id_at(now, r)
}

/// The run id for a time (whole seconds, UTC) and a random suffix:
/// `YYYYMMDDTHHMMSSZ-xxxxxxxx`.
fn run_id_at(t: std::time::SystemTime, r: u32) -> String {
    // RFC 3339 `YYYY-MM-DDTHH:MM:SSZ` with its separators removed.
    let stamp: String =
        humantime::format_rfc3339_seconds(t).to_string().chars().filter(|c| !matches!(c, '-' | ':')).collect();
    format!("{stamp}-{r:08x}")
}

#[cfg(test)]
mod tests {
    #[test]
    fn run_ids_are_compact_utc_stamps() {
        // 2026-11-30T19:08:09Z
        let t = std::time::UNIX_EPOCH + std::time::Duration::from_secs(1_796_065_689);
        assert_eq!(super::run_id_at(t, 42), "20261130T190809Z-0000002a");
    }
}
