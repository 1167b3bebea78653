//! The append-only attempt log (`attempts.jsonl`) and the frozen manifest it is held to.
//! Consumes a campaign directory; produces its attempt records (a torn line is reported and
//! skipped, never rewritten), the manifest checked against `manifest.sha256` (a changed one is
//! refused), the manifest identities whose attempts count, and which attempts overlapped on a host.
//! `exec` appends with `append_attempt`; every reader starts from `load_manifest` and `read_attempts`.
use super::spec::Manifest;
use crate::core::fsutil::sha256_hex;
use crate::core::limits;
use crate::core::refusal::Code;
use crate::evidence::run::ShardRef;
use anyhow::{Context, Result};
use serde::{Deserialize, Serialize};
use std::io::Write;
use std::path::Path;

/// Attempt outcome.
#[derive(schemars::JsonSchema, Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, Default)]
#[serde(rename_all = "lowercase")]
pub enum AttemptStatus {
    /// Exit code 0 and a run record with every shard.
    Succeeded,
    /// Anything else.
    #[default]
    Failed,
}

/// One attempt's terminal record.
#[derive(schemars::JsonSchema, Serialize, Deserialize, Clone, Debug, PartialEq, Default)]
pub struct AttemptRecord {
    /// `CELL-aN`.
    pub attempt_id: String,
    /// Cell.
    pub cell_id: String,
    /// Configuration label.
    pub label: String,
    /// Round.
    pub round: u32,
    /// Manifest identity it ran under.
    pub manifest_sha256: String,
    /// Outcome.
    pub status: AttemptStatus,
    /// Launcher exit code (absent when killed by a signal).
    pub exit_code: Option<i32>,
    /// Why it failed, when it did.
    pub failure: Option<String>,
    /// Command line.
    pub argv: Vec<String>,
    /// Start and end (Unix ms).
    pub started_unix_ms: u64,
    /// End (Unix ms).
    pub finished_unix_ms: u64,
    /// Files holding stdout and stderr, and their digests.
    pub stdout_sha256: String,
    /// Digest of stderr.
    pub stderr_sha256: String,
    /// Run directory (relative to the campaign directory).
    pub run_dir: String,
    /// SHA-256 of run.json, when written.
    pub run_json_sha256: Option<String>,
    /// Shard digests from run.json.
    pub shards: Vec<ShardRef>,
    /// Rank 0's environment identity digest.
    pub identity_sha256: Option<String>,
    /// Host `exec` ran on (absent in records written before it was kept):
    /// attempts on one host must not overlap in time.
    #[serde(default)]
    pub host: Option<String>,
}

/// Attempts file name.
pub(crate) const ATTEMPTS: &str = "attempts.jsonl";

/// Read every attempt record. A line that ends before its record does (an
/// append torn by a full disk or a crash: the JSON ends early) is reported on
/// stderr and skipped, never rewritten; any other line that does not parse is
/// an error naming it.
pub fn read_attempts(dir: &Path) -> Result<Vec<AttemptRecord>> {
    let (records, torn) = read_attempts_with_torn(dir)?;
    for (line, len) in torn {
        eprintln!(
            "campaign: {}:{line}: torn record ({len} bytes, an interrupted append) skipped; the log is never rewritten",
            dir.join(ATTEMPTS).display()
        );
    }
    Ok(records)
}

/// (line, bytes) of each torn line of the attempts log that was skipped.
pub(crate) type TornLines = Vec<(usize, usize)>;

/// [`read_attempts`] without printing: the records, and (line, bytes) of each torn line skipped.
pub(crate) fn read_attempts_with_torn(dir: &Path) -> Result<(Vec<AttemptRecord>, TornLines)> {
    let p = dir.join(ATTEMPTS);
    if !p.exists() {
        return Ok((Vec::new(), Vec::new()));
    }
    let bytes = limits::read_bounded(&p, limits::MAX_ATTEMPTS_LOG_BYTES)?;
    parse_attempts(&bytes, &p.display().to_string())
}

/// Parse attempts-log bytes (`name` for messages): see [`read_attempts`].
pub fn parse_attempts(bytes: &[u8], name: &str) -> Result<(Vec<AttemptRecord>, TornLines)> {
    let mut records = Vec::new();
    let mut torn = Vec::new();
    for (i, line) in bytes.split(|&b| b == b'\n').enumerate() {
        if line.iter().all(|b| b.is_ascii_whitespace()) {
            continue;
        }
        match serde_json::from_slice::<AttemptRecord>(line) {
            Ok(r) => records.push(r),
            Err(e) if e.is_eof() || std::str::from_utf8(line).is_err() => torn.push((i + 1, line.len())),
            Err(e) => return Err(anyhow::anyhow!("{name}:{}: not an attempt record: {e}", i + 1)),
        }
    }
    Ok((records, torn))
}

/// Append one record as one line. A torn line left by an earlier failed append
/// is sealed with a newline first (so the new record starts its own line); the
/// newline and the record go out in one write and are fsynced.
pub(super) fn append_attempt(dir: &Path, rec: &AttemptRecord) -> Result<()> {
    use std::io::{Read, Seek, SeekFrom};
    let p = dir.join(ATTEMPTS);
    let mut f = std::fs::OpenOptions::new()
        .create(true)
        .read(true)
        .append(true)
        .open(&p)
        .with_context(|| format!("opening {}", p.display()))?;
    let len = f.metadata()?.len();
    let mut line = Vec::new();
    if len > 0 {
        let mut last = [0u8; 1];
        f.seek(SeekFrom::Start(len - 1))?;
        f.read_exact(&mut last).with_context(|| format!("reading {}", p.display()))?;
        if last[0] != b'\n' {
            line.push(b'\n');
        }
    }
    line.extend(serde_json::to_vec(rec)?);
    line.push(b'\n');
    f.write_all(&line).with_context(|| format!("appending to {}", p.display()))?;
    f.sync_all().with_context(|| format!("fsync {}", p.display()))
}

/// Next attempt number of `cell`: one past the highest `CELL-aN` among
/// records and run directories (exact match on the cell id, digits only after `-a`).
pub(super) fn next_attempt_number(cell: &str, attempts: &[AttemptRecord], runs: &Path) -> u64 {
    let number = |id: &str| -> Option<u64> {
        let n = id.strip_prefix(cell)?.strip_prefix("-a")?;
        if n.is_empty() || !n.bytes().all(|b| b.is_ascii_digit()) {
            return None;
        }
        n.parse().ok()
    };
    let dirs: Vec<String> = std::fs::read_dir(runs)
        .map(|rd| rd.flatten().map(|e| e.file_name().to_string_lossy().into_owned()).collect())
        .unwrap_or_default();
    attempts
        .iter()
        .map(|a| a.attempt_id.as_str())
        .chain(dirs.iter().map(|s| s.as_str()))
        .filter_map(number)
        .max()
        .unwrap_or(0)
        + 1
}

/// Manifest identities whose attempts count for this campaign: its own, and
/// for a joined campaign (`campaign join`) those of its two sources kept in
/// `sources/`, only when the joined manifest's id names exactly those sources.
pub(crate) fn accepted_manifests(dir: &Path, m: &Manifest, sha: &str) -> Result<Vec<String>> {
    let mut out = vec![sha.to_string()];
    let src = dir.join("sources");
    let (a, b) = (src.join("a.manifest.json"), src.join("b.manifest.json"));
    if a.exists() && b.exists() {
        let ids: Vec<(String, String)> = [a, b]
            .iter()
            .map(|p| -> Result<(String, String)> {
                let bytes = limits::read_bounded(p, limits::MAX_JSON_BYTES)?;
                let sm: Manifest =
                    serde_json::from_slice(&bytes).with_context(|| format!("{}: not a manifest", p.display()))?;
                Ok((sm.campaign_id, sha256_hex(&bytes)))
            })
            .collect::<Result<_>>()?;
        if m.campaign_id == format!("{}+{}", ids[0].0, ids[1].0) {
            out.extend(ids.into_iter().map(|x| x.1));
        }
    }
    Ok(out)
}

/// Load the manifest and check it against its recorded digest.
pub(crate) fn load_manifest(dir: &Path) -> Result<(Manifest, String)> {
    let mp = dir.join("manifest.json");
    let bytes = limits::read_bounded(&mp, limits::MAX_JSON_BYTES)?;
    let actual = sha256_hex(&bytes);
    let recorded = limits::read_text_bounded(&dir.join("manifest.sha256"), 4096)
        .with_context(|| format!("reading {}/manifest.sha256", dir.display()))?;
    if recorded.trim() != actual {
        crate::refuse!(
            Code::DigestMismatch,
            "{}: SHA-256 is {actual} but manifest.sha256 says {}: the frozen manifest was changed",
            mp.display(),
            recorded.trim()
        );
    }
    let m: Manifest = serde_json::from_slice(&bytes).with_context(|| format!("{}: not a manifest", mp.display()))?;
    Ok((m, actual))
}

/// The hosts an attempt used: the one its `exec` ran on and, where its
/// shards were recorded, every one a rank ran on. With the `srun` launcher
/// these differ (exec runs on a login node or the allocation's first node,
/// the ranks on the allocation's nodes), so two attempts started by execs on
/// different hosts can still have measured on the same nodes at once.
fn attempt_hosts(a: &AttemptRecord) -> std::collections::BTreeSet<&str> {
    a.host.iter().map(String::as_str).chain(a.shards.iter().map(|s| s.host.as_str())).collect()
}

/// Another attempt that overlapped `a` in time on a host both used (see
/// [`attempt_hosts`]; two records without an exec host count as one host,
/// as records written before it was kept), with that host.
pub(super) fn overlapping<'a>(a: &AttemptRecord, attempts: &'a [AttemptRecord]) -> Option<(&'a AttemptRecord, String)> {
    let mine = attempt_hosts(a);
    attempts
        .iter()
        .filter(|b| {
            b.attempt_id != a.attempt_id
                && b.started_unix_ms < a.finished_unix_ms
                && a.started_unix_ms < b.finished_unix_ms
        })
        .find_map(|b| {
            if a.host.is_none() && b.host.is_none() {
                return Some((b, "unrecorded".to_string()));
            }
            attempt_hosts(b).intersection(&mine).next().map(|h| (b, h.to_string()))
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rec(id: &str) -> AttemptRecord {
        let cell_id = id.rsplit_once("-a").map(|x| x.0).unwrap_or(id).into();
        AttemptRecord { attempt_id: id.into(), cell_id, round: 1, status: AttemptStatus::Failed, ..Default::default() }
    }

    /// Issue 27: with the srun launcher exec's host is not where the ranks
    /// ran; attempts overlapping in time on a node their ranks shared are
    /// refused even when their execs ran on different hosts.
    #[test]
    fn attempts_overlapping_on_a_rank_host_are_found_across_exec_hosts() {
        let shard = |rank: u32, host: &str| ShardRef {
            rank,
            file: String::new(),
            sha256: String::new(),
            size_bytes: 0,
            host: host.into(),
        };
        let at = |id: &str, exec: Option<&str>, ranks: &[&str], t: (u64, u64)| AttemptRecord {
            host: exec.map(String::from),
            shards: ranks.iter().enumerate().map(|(r, h)| shard(r as u32, h)).collect(),
            started_unix_ms: t.0,
            finished_unix_ms: t.1,
            ..rec(id)
        };
        // exec --resume on the login node while an array task's exec (on sim-n1) ran a cell on sim-n1..2
        let on_login = at("r01-x-a2", Some("login"), &["sim-n1", "sim-n1", "sim-n2", "sim-n2"], (100, 200));
        let in_array = at("r01-x-a1", Some("sim-n1"), &["sim-n1", "sim-n1", "sim-n2", "sim-n2"], (150, 250));
        let elsewhere = at("r02-y-a1", Some("sim-n3"), &["sim-n3", "sim-n4"], (100, 250));
        let later = at("r03-z-a1", Some("login"), &["sim-n1", "sim-n2"], (250, 300));
        let all = [on_login.clone(), in_array.clone(), elsewhere.clone(), later.clone()];
        let (b, host) = overlapping(&on_login, &all).expect("shared sim-n1 at 150..200 ms");
        assert_eq!((b.attempt_id.as_str(), host.as_str()), ("r01-x-a1", "sim-n1"));
        assert_eq!(overlapping(&in_array, &all).map(|x| x.0.attempt_id.clone()), Some("r01-x-a2".into()));
        assert!(overlapping(&elsewhere, &all).is_none(), "other nodes, other exec hosts");
        assert!(overlapping(&later, &all).is_none(), "touching ends do not overlap");
        // a failed attempt without shards still counts by its exec host, as before
        let failed = at("r04-w-a1", Some("sim-n3"), &[], (120, 130));
        assert_eq!(overlapping(&failed, &[failed.clone(), elsewhere.clone()]).map(|x| x.1), Some("sim-n3".into()));
        // records without an exec host (older campaigns) count as one host
        let (old_a, old_b) = (at("r05-v-a1", None, &[], (0, 10)), at("r05-v-a2", None, &[], (5, 15)));
        assert!(overlapping(&old_a, &[old_a.clone(), old_b]).is_some());
    }

    /// Item 6 of issue 13: `r01-nbc-ring-again-a1` is not an attempt of `r01-nbc-ring`.
    #[test]
    fn attempt_numbers_count_only_the_exact_cell() {
        let d = tempfile::tempdir().unwrap();
        for dir in ["r01-nbc-ring-a1", "r01-nbc-ring-again-a1", "r01-nbc-ring-again-a2", "r01-nbc-ring-a1x"] {
            std::fs::create_dir(d.path().join(dir)).unwrap();
        }
        let recs = [rec("r01-nbc-ring-a1"), rec("r01-nbc-ring-again-a1"), rec("r01-nbc-ring-again-a2")];
        assert_eq!(next_attempt_number("r01-nbc-ring", &recs, d.path()), 2);
        assert_eq!(next_attempt_number("r01-nbc-ring-again", &recs, d.path()), 3);
        assert_eq!(next_attempt_number("r02-x", &recs, d.path()), 1);
    }

    /// Item 3 of issue 13: a torn line is skipped and reported; a syntax error elsewhere is not.
    #[test]
    fn torn_lines_are_skipped_and_reported() {
        let good = serde_json::to_string(&rec("c-a1")).unwrap();
        let text = format!("{good}\n{}\n{good}\n{}", &good[..40], &good[..10]);
        let (r, torn) = parse_attempts(text.as_bytes(), "t").unwrap();
        assert_eq!(r.len(), 2);
        assert_eq!(torn, vec![(2, 40), (4, 10)]);
        assert!(parse_attempts(b"{\"attempt_id\": 3}\n", "t").is_err(), "a complete but wrong record is an error");
        // appending after a torn line seals it: the new record is readable
        let d = tempfile::tempdir().unwrap();
        std::fs::write(d.path().join(ATTEMPTS), format!("{good}\n{}", &good[..30])).unwrap();
        append_attempt(d.path(), &rec("c-a2")).unwrap();
        let (r, torn) = read_attempts_with_torn(d.path()).unwrap();
        assert_eq!(r.iter().map(|a| a.attempt_id.as_str()).collect::<Vec<_>>(), ["c-a1", "c-a2"]);
        assert_eq!(torn, vec![(2, 30)]);
    }
}
