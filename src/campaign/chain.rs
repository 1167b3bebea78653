//! The chain of evidence after planning: attempts (append-only), selection,
//! completeness verification (docs/ARCHITECTURE.md §7).
//!
//! `exec` consumes the manifest and appends one terminal record per attempt
//! to `attempts.jsonl` (fsynced line by line; nothing is rewritten), keeping
//! each attempt's stdout/stderr beside it. `select` names exactly one attempt
//! per expected cell and binds its digests. `verify` refuses, naming the
//! cell: a missing, duplicated, failed, stale (bytes changed since the
//! attempt was recorded) or unexpected cell, a shard that does not join, and
//! identity contradictions with the manifest (backend, world size, a
//! configuration's environment or NCCL library), and hardware that breaks the
//! manifest's hardware contract (`campaign::hardware`). A success that overlapped
//! another attempt on its host is refused by `verify`, passed over by
//! `select` when the cell has a clean one, and run again by `exec`.
use super::spec::{Cell, LauncherKind, Manifest};
use crate::core::fsutil::{sha256_file, sha256_hex, write_new_atomic};
use crate::core::refusal::Code;
use crate::evidence::run::{RunRecord, ShardRef};
use anyhow::{bail, Context, Result};
use serde::{Deserialize, Serialize};
use std::io::Write;
use std::path::{Path, PathBuf};

/// Attempt outcome.
#[derive(schemars::JsonSchema, Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
pub enum AttemptStatus {
    /// Exit code 0 and a run record with every shard.
    Succeeded,
    /// Anything else.
    Failed,
}

/// One attempt's terminal record.
#[derive(schemars::JsonSchema, Serialize, Deserialize, Clone, Debug, PartialEq)]
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
pub const ATTEMPTS: &str = "attempts.jsonl";

/// Read every attempt record. A line that ends before its record does (an
/// append torn by a full disk or a crash: the JSON ends early) is reported on
/// stderr and skipped, never rewritten; any other line that does not parse is
/// an error naming it.
pub fn read_attempts(dir: &Path) -> Result<Vec<AttemptRecord>> {
    let (records, torn) = read_attempts_with_torn(dir)?;
    for (line, len) in torn {
        eprintln!("campaign: {}:{line}: torn record ({len} bytes, an interrupted append) skipped; the log is never rewritten", dir.join(ATTEMPTS).display());
    }
    Ok(records)
}

/// (line, bytes) of each torn line of the attempts log that was skipped.
pub type TornLines = Vec<(usize, usize)>;

/// [`read_attempts`] without printing: the records, and (line, bytes) of each torn line skipped.
pub fn read_attempts_with_torn(dir: &Path) -> Result<(Vec<AttemptRecord>, TornLines)> {
    let p = dir.join(ATTEMPTS);
    if !p.exists() {
        return Ok((Vec::new(), Vec::new()));
    }
    let bytes = crate::core::limits::read_bounded(&p, crate::core::limits::MAX_ATTEMPTS_LOG_BYTES)?;
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
fn append_attempt(dir: &Path, rec: &AttemptRecord) -> Result<()> {
    use std::io::{Read, Seek, SeekFrom};
    let p = dir.join(ATTEMPTS);
    let mut f = std::fs::OpenOptions::new().create(true).read(true).append(true).open(&p).with_context(|| format!("opening {}", p.display()))?;
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

/// Lock file of a campaign directory (advisory `flock`).
pub const LOCK_FILE: &str = "campaign.lock";
/// Directory of in-flight attempt notes (one per running job, removed once its record is appended).
pub const INFLIGHT_FILE: &str = "inflight";

/// A held advisory lock; released when dropped (or when the process dies).
pub struct CampaignLock {
    _files: Vec<std::fs::File>,
}

/// A lock file, created if missing, never truncated.
fn open_lock(path: &Path) -> Result<std::fs::File> {
    std::fs::OpenOptions::new().create(true).truncate(false).read(true).write(true).open(path).with_context(|| format!("opening lock {}", path.display()))
}

fn flock(path: &Path, exclusive: bool, what: &str) -> Result<std::fs::File> {
    use std::os::fd::AsRawFd;
    let f = open_lock(path)?;
    let op = if exclusive { libc::LOCK_EX } else { libc::LOCK_SH } | libc::LOCK_NB;
    // SAFETY: flock on a file descriptor we own; no memory is passed.
    if unsafe { libc::flock(f.as_raw_fd(), op) } != 0 {
        let e = std::io::Error::last_os_error();
        if e.raw_os_error() == Some(libc::EWOULDBLOCK) {
            crate::refuse!(
                crate::core::refusal::Code::Locked,
                "{what}: another campaign command (exec, select or archive) holds {}; wait for it to finish",
                path.display()
            );
        }
        return Err(e).with_context(|| format!("locking {}", path.display()));
    }
    Ok(f)
}

/// Lock a campaign: exclusively (whole `exec`, `select`, `archive`), or
/// shared plus an exclusive lock on one cell (`exec --cell`, so Slurm array
/// tasks of different cells run side by side but never one cell twice).
/// flock(2) semantics: advisory, released by the kernel when the process
/// dies; on NFS it needs a lock manager (Linux maps flock to POSIX locks there).
///
/// `exec --cell` then waits for an exclusive lock of its host
/// (`inflight/host-HOSTNAME.lock`): two cells on one host would contaminate
/// each other's timings (`verify` refuses such attempts as
/// `OVERLAPPING_ATTEMPTS`), so array tasks that land on one node run one
/// after the other, and tasks on different nodes side by side.
pub fn lock_campaign(dir: &Path, cell: Option<&str>, what: &str) -> Result<CampaignLock> {
    let mut files = vec![flock(&dir.join(LOCK_FILE), cell.is_none(), what)?];
    if let Some(c) = cell {
        let d = dir.join(INFLIGHT_FILE);
        std::fs::create_dir_all(&d)?;
        files.push(flock(&d.join(format!("{c}.lock")), true, what)?);
        let host: String =
            crate::core::identity::hostname().chars().map(|ch| if ch.is_ascii_alphanumeric() || "._-".contains(ch) { ch } else { '_' }).collect();
        files.push(flock_wait(&d.join(format!("host-{host}.lock")), what)?);
    }
    Ok(CampaignLock { _files: files })
}

/// The lock `archive` takes: [`lock_campaign`]'s exclusive lock where the
/// campaign can be written; on a campaign this process cannot write (a
/// read-only mount, another user's published results) the existing lock file
/// opened read-only (flock(2) needs no write access), or no lock at all where
/// there is no lock file to open: then no command of ours can be changing
/// it, and `archive` checks every member it wrote against the campaign's
/// records anyway.
pub fn lock_campaign_for_reading(dir: &Path, what: &str) -> Result<Option<CampaignLock>> {
    let path = dir.join(LOCK_FILE);
    match open_lock(&path) {
        Ok(_) => lock_campaign(dir, None, what).map(Some),
        Err(e) if e.downcast_ref::<std::io::Error>().is_some_and(|io| matches!(io.raw_os_error(), Some(libc::EACCES | libc::EROFS | libc::EPERM))) => {
            use std::os::fd::AsRawFd;
            let Ok(f) = std::fs::File::open(&path) else {
                eprintln!("{what}: {} cannot be written and holds no lock file; reading it unlocked", dir.display());
                return Ok(None);
            };
            // SAFETY: flock on a file descriptor we own; no memory is passed.
            if unsafe { libc::flock(f.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) } != 0 {
                crate::refuse!(
                    crate::core::refusal::Code::Locked,
                    "{what}: another campaign command (exec, select or archive) holds {}; wait for it to finish",
                    path.display()
                );
            }
            Ok(Some(CampaignLock { _files: vec![f] }))
        }
        Err(e) => Err(e),
    }
}

/// An exclusive lock, waited for (saying so) when another process holds it.
fn flock_wait(path: &Path, what: &str) -> Result<std::fs::File> {
    use std::os::fd::AsRawFd;
    let f = open_lock(path)?;
    // SAFETY: flock on a file descriptor we own; no memory is passed.
    if unsafe { libc::flock(f.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) } == 0 {
        return Ok(f);
    }
    eprintln!("{what}: another cell of this campaign runs on this host; waiting for it ({})", path.display());
    loop {
        // SAFETY: as above.
        if unsafe { libc::flock(f.as_raw_fd(), libc::LOCK_EX) } == 0 {
            return Ok(f);
        }
        let e = std::io::Error::last_os_error();
        if e.kind() != std::io::ErrorKind::Interrupted {
            return Err(e).with_context(|| format!("locking {}", path.display()));
        }
    }
}

/// What `exec` writes before it starts a job, so a later `exec` can tell an
/// interrupted attempt (and a job that outlived its `exec`).
#[derive(Serialize, Deserialize, Clone, Debug)]
struct InFlight {
    attempt_id: String,
    cell_id: String,
    label: String,
    round: u32,
    manifest_sha256: String,
    argv: Vec<String>,
    started_unix_ms: u64,
    host: String,
    /// Process group of the launcher (its own group; the ranks it starts locally inherit it).
    pgid: i32,
}

fn group_alive(pgid: i32) -> bool {
    // SAFETY: signal 0 only checks that the group exists and may be signalled.
    pgid > 1 && (unsafe { libc::kill(-pgid, 0) } == 0 || std::io::Error::last_os_error().raw_os_error() == Some(libc::EPERM))
}

/// Settle attempts an interrupted `exec` left in flight (only `cell`'s when
/// given): a job still running after a grace period is refused by name; a
/// finished one gets a failed record ending now, so nothing later may overlap it unseen.
fn settle_inflight(dir: &Path, cell: Option<&str>, attempts: &mut Vec<AttemptRecord>) -> Result<()> {
    let d = dir.join(INFLIGHT_FILE);
    let Ok(rd) = std::fs::read_dir(&d) else { return Ok(()) };
    let mut notes: Vec<PathBuf> = rd.flatten().map(|e| e.path()).filter(|p| p.extension().is_some_and(|x| x == "json")).collect();
    notes.sort();
    for p in notes {
        let bytes = crate::core::limits::read_bounded(&p, crate::core::limits::MAX_JSON_BYTES)?;
        let Ok(n) = serde_json::from_slice::<InFlight>(&bytes) else {
            eprintln!("campaign: {}: unreadable in-flight note (torn write) left in place", p.display());
            continue;
        };
        if cell.is_some_and(|c| c != n.cell_id) {
            continue;
        }
        if !attempts.iter().any(|a| a.attempt_id == n.attempt_id) {
            if n.host == crate::core::identity::hostname() {
                let t0 = std::time::Instant::now();
                while group_alive(n.pgid) && t0.elapsed() < std::time::Duration::from_secs(15) {
                    std::thread::sleep(std::time::Duration::from_millis(100));
                }
                if group_alive(n.pgid) {
                    crate::refuse!(
                        crate::core::refusal::Code::OrphanJob,
                        "attempt {} of an interrupted exec is still running as process group {} (stop it: kill -- -{}); a new attempt would overlap it",
                        n.attempt_id,
                        n.pgid,
                        n.pgid
                    );
                }
            }
            let rec = AttemptRecord {
                attempt_id: n.attempt_id.clone(),
                cell_id: n.cell_id.clone(),
                label: n.label.clone(),
                round: n.round,
                manifest_sha256: n.manifest_sha256.clone(),
                status: AttemptStatus::Failed,
                exit_code: None,
                failure: Some(
                    "interrupted: the exec that ran it ended before the job did (recorded by the next exec; end time is when that was noticed)".into(),
                ),
                argv: n.argv.clone(),
                started_unix_ms: n.started_unix_ms,
                finished_unix_ms: crate::core::clock::unix_ms(),
                stdout_sha256: sha256_hex(b""),
                stderr_sha256: sha256_hex(b""),
                run_dir: format!("runs/{}", n.attempt_id),
                run_json_sha256: None,
                shards: Vec::new(),
                identity_sha256: None,
                host: Some(n.host.clone()),
            };
            append_attempt(dir, &rec)?;
            eprintln!("campaign: {}: recorded as interrupted", n.attempt_id);
            attempts.push(rec);
        }
        std::fs::remove_file(&p).with_context(|| format!("removing {}", p.display()))?;
    }
    Ok(())
}

/// Next attempt number of `cell`: one past the highest `CELL-aN` among
/// records and run directories (exact match on the cell id, digits only after `-a`).
fn next_attempt_number(cell: &str, attempts: &[AttemptRecord], runs: &Path) -> u64 {
    let number = |id: &str| -> Option<u64> {
        let n = id.strip_prefix(cell)?.strip_prefix("-a")?;
        if n.is_empty() || !n.bytes().all(|b| b.is_ascii_digit()) {
            return None;
        }
        n.parse().ok()
    };
    let dirs: Vec<String> = std::fs::read_dir(runs).map(|rd| rd.flatten().map(|e| e.file_name().to_string_lossy().into_owned()).collect()).unwrap_or_default();
    attempts.iter().map(|a| a.attempt_id.as_str()).chain(dirs.iter().map(|s| s.as_str())).filter_map(number).max().unwrap_or(0) + 1
}

/// Manifest identities whose attempts count for this campaign: its own, and
/// for a joined campaign (`campaign join`) those of its two sources kept in
/// `sources/`, only when the joined manifest's id names exactly those sources.
pub fn accepted_manifests(dir: &Path, m: &Manifest, sha: &str) -> Result<Vec<String>> {
    let mut out = vec![sha.to_string()];
    let src = dir.join("sources");
    let (a, b) = (src.join("a.manifest.json"), src.join("b.manifest.json"));
    if a.exists() && b.exists() {
        let ids: Vec<(String, String)> = [a, b]
            .iter()
            .map(|p| -> Result<(String, String)> {
                let bytes = crate::core::limits::read_bounded(p, crate::core::limits::MAX_JSON_BYTES)?;
                let sm: Manifest = serde_json::from_slice(&bytes).with_context(|| format!("{}: not a manifest", p.display()))?;
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
pub fn load_manifest(dir: &Path) -> Result<(Manifest, String)> {
    let mp = dir.join("manifest.json");
    let bytes = crate::core::limits::read_bounded(&mp, crate::core::limits::MAX_JSON_BYTES)?;
    let actual = sha256_hex(&bytes);
    let recorded =
        crate::core::limits::read_text_bounded(&dir.join("manifest.sha256"), 4096).with_context(|| format!("reading {}/manifest.sha256", dir.display()))?;
    if recorded.trim() != actual {
        crate::refuse!(
            crate::core::refusal::Code::DigestMismatch,
            "{}: SHA-256 is {actual} but manifest.sha256 says {}: the frozen manifest was changed",
            mp.display(),
            recorded.trim()
        );
    }
    let m: Manifest = serde_json::from_slice(&bytes).with_context(|| format!("{}: not a manifest", mp.display()))?;
    Ok((m, actual))
}

/// Check a frozen trace against the digest the manifest froze: a missing file
/// is `NO_SUCH_INPUT`, a FIFO, device or directory (also behind a symbolic
/// link) is refused without being opened for a blocking read, and at most
/// the import limit is hashed, so the check can neither hang nor read for
/// ever before the job starts.
fn check_frozen_trace(trace: &Path, want: &str) -> Result<()> {
    if std::fs::metadata(trace).is_err() {
        return Err(crate::core::refusal::refuse(Code::NoSuchInput, format!("{} is missing (the manifest froze a trace)", trace.display())));
    }
    let got = crate::core::limits::sha256_bounded(trace, crate::evidence::commtrace::Limits::default().max_json_bytes)
        .with_context(|| format!("the frozen trace {}", trace.display()))?;
    if got != want {
        return Err(crate::core::refusal::refuse(Code::Stale, format!("stale: {} hashes to {got}, the manifest froze {want}", trace.display())));
    }
    Ok(())
}

/// A job's program, its arguments and its environment.
type JobCommand = (String, Vec<String>, Vec<(String, String)>);

fn command_for(m: &Manifest, cell: &Cell, attempt_id: &str, runs: &Path) -> Result<JobCommand> {
    let cfg = &m.configs.iter().find(|c| c.label == cell.label).with_context(|| format!("cell {}: unknown label", cell.cell_id))?.config;
    let exe = std::env::current_exe().context("locating the commcanary executable")?.display().to_string();
    let mut rank_args: Vec<String> = vec![exe];
    rank_args.extend(m.spec.rank_arguments(cfg));
    rank_args.extend(["--run-id".into(), attempt_id.into(), "--out".into(), runs.display().to_string()]);
    if let Some((file, want)) = m.frozen_trace(&cfg.name) {
        // the frozen copy, checked before every job: a changed trace is another workload
        let trace = runs.parent().context("campaign directory")?.join(file);
        check_frozen_trace(&trace, &want)?;
        rank_args.extend(["--trace".into(), trace.display().to_string()]);
    }
    let env: Vec<(String, String)> = cfg.env.iter().map(|(k, v)| (k.clone(), v.clone())).collect();
    let (prog, mut args) = match m.spec.launcher.kind {
        LauncherKind::Mpirun => {
            let mut a = vec!["-n".to_string(), m.spec.ranks.to_string()];
            for (k, _) in &env {
                a.extend(["-x".into(), k.clone()]);
            }
            ("mpirun".to_string(), a)
        }
        LauncherKind::Srun => ("srun".to_string(), vec!["-n".to_string(), m.spec.ranks.to_string()]),
    };
    args.extend(m.spec.launcher.args.iter().cloned());
    args.extend(rank_args);
    Ok((prog, args, env))
}

/// Refuses, before any cell is launched, a campaign that cannot run on this
/// host: with the `mpirun` launcher every job runs here, so a `cuda` backend
/// without a usable GPU, or no `mpirun` on `PATH`, would fail every cell
/// with the same error (`srun` jobs run on the allocation's nodes, which
/// this host cannot check). `what` names the campaign or spec in the message.
pub fn preflight(spec: &crate::campaign::spec::CampaignSpec, what: &str) -> Result<()> {
    if spec.launcher.kind != LauncherKind::Mpirun {
        return Ok(());
    }
    let on_path = std::env::var_os("PATH").is_some_and(|p| std::env::split_paths(&p).any(|d| d.join("mpirun").is_file()));
    if !on_path {
        crate::refuse!(
            Code::BadArgument,
            "{what}: the launcher is mpirun, and no mpirun is on PATH; no cell was launched (install OpenMPI 4.x or load its module)"
        );
    }
    if spec.backend == "cuda" {
        if let Some(why) = crate::backend::cuda::unavailable_reason() {
            crate::refuse!(
                Code::BadArgument,
                "{what}: backend cuda cannot run on this host ({why}); no cell was launched. With the mpirun launcher every job runs here: run it on a host with GPUs, or use the srun launcher inside an allocation"
            );
        }
    }
    Ok(())
}

/// The scheduled cells (or only the one at 1-based position `only`) with no
/// successful attempt under this campaign's accepted manifests, in schedule order.
pub fn cells_without_success(dir: &Path, only: Option<usize>) -> Result<Vec<String>> {
    let (m, sha) = load_manifest(dir)?;
    let attempts = read_attempts(dir)?;
    let accepted = accepted_manifests(dir, &m, &sha)?;
    Ok(m.schedule
        .iter()
        .enumerate()
        .filter(|(i, _)| only.is_none_or(|n| n == i + 1))
        .map(|(_, c)| c)
        .filter(|c| !attempts.iter().any(|a| a.cell_id == c.cell_id && a.status == AttemptStatus::Succeeded && accepted.contains(&a.manifest_sha256)))
        .map(|c| c.cell_id.clone())
        .collect())
}

/// Run every cell without a successful attempt, in schedule order (or only
/// the cell at 1-based position `only`); each failure is retried up to
/// `retries` times. Returns (succeeded, failed attempts). Records are single
/// `O_APPEND` lines, so concurrent array tasks on a local or POSIX-append
/// file system do not interleave them.
pub fn exec(dir: &Path, retries: u32, only: Option<usize>, cell_timeout: Option<std::time::Duration>) -> Result<(usize, usize)> {
    let (m, manifest_sha) = load_manifest(dir)?;
    preflight(&m.spec, &format!("campaign {}", dir.display()))?;
    if let Some(n) = only {
        if n == 0 || n > m.schedule.len() {
            bail!("--cell {n}: the schedule has cells 1 to {}", m.schedule.len());
        }
    }
    let only_cell = only.map(|n| m.schedule[n - 1].cell_id.clone());
    let _lock = lock_campaign(dir, only_cell.as_deref(), &format!("exec {}", dir.display()))?;
    let runs = dir.join("runs");
    let logs = dir.join("attempts");
    std::fs::create_dir_all(&runs)?;
    std::fs::create_dir_all(&logs)?;
    std::fs::create_dir_all(dir.join(INFLIGHT_FILE))?;
    let mut attempts = read_attempts(dir)?;
    settle_inflight(dir, only_cell.as_deref(), &mut attempts)?;
    let accepted = accepted_manifests(dir, &m, &manifest_sha)?;
    let host = crate::core::identity::hostname();
    let todo: Vec<&Cell> = m
        .schedule
        .iter()
        .enumerate()
        .filter(|(i, _)| only.is_none_or(|n| n == i + 1))
        .map(|(_, c)| c)
        // a success that overlapped another attempt on its host is no evidence: the cell runs again
        .filter(|c| {
            !attempts.iter().any(|a| {
                a.cell_id == c.cell_id && a.status == AttemptStatus::Succeeded && accepted.contains(&a.manifest_sha256) && overlapping(a, &attempts).is_none()
            })
        })
        .collect();
    let bar = indicatif::ProgressBar::new(todo.len() as u64);
    bar.set_style(
        indicatif::ProgressStyle::with_template("{prefix} [{bar:30}] {pos}/{len} cells, ETA {eta} {msg}").expect("valid template").progress_chars("=> "),
    );
    bar.set_prefix(m.campaign_id.clone());
    let (mut ok, mut failed) = (0, 0);
    for cell in todo {
        for _try in 0..=retries {
            // attempt numbers count records and any directory an interrupted attempt left
            let attempt_id = format!("{}-a{}", cell.cell_id, next_attempt_number(&cell.cell_id, &attempts, &runs));
            // --cell-timeout-s covers the work before the job starts (the frozen trace's check) too
            let cell_started = std::time::Instant::now();
            bar.set_message(format!("round {} {} ({attempt_id})", cell.round, cell.label));
            let (prog, args, env) = command_for(&m, cell, &attempt_id, &runs)?;
            let started = crate::core::clock::unix_ms();
            let note_path = dir.join(INFLIGHT_FILE).join(format!("{attempt_id}.json"));
            let argv: Vec<String> = std::iter::once(prog.clone()).chain(args.iter().cloned()).collect();
            let out = run_job(&prog, &args, &env, cell_timeout.map(|t| t.saturating_sub(cell_started.elapsed())), |pgid| {
                let note = InFlight {
                    attempt_id: attempt_id.clone(),
                    cell_id: cell.cell_id.clone(),
                    label: cell.label.clone(),
                    round: cell.round,
                    manifest_sha256: manifest_sha.clone(),
                    argv: argv.clone(),
                    started_unix_ms: started,
                    host: host.clone(),
                    pgid,
                };
                crate::core::fsutil::write_json_new(&note_path, &note)
            });
            let finished = crate::core::clock::unix_ms();
            let (code, stdout, stderr, spawn_err) = match out {
                Ok((o, false)) => (o.status.code(), o.stdout, o.stderr, None),
                Ok((o, true)) => (
                    o.status.code(),
                    o.stdout,
                    o.stderr,
                    Some(format!(
                        "cell timeout: the job ran longer than {:.0} s (--cell-timeout-s) and was stopped",
                        cell_timeout.map_or(0.0, |t| t.as_secs_f64())
                    )),
                ),
                Err(e) => (None, Vec::new(), Vec::new(), Some(format!("could not start {prog}: {e}"))),
            };
            write_new_atomic(&logs.join(format!("{attempt_id}.stdout")), &stdout)?;
            write_new_atomic(&logs.join(format!("{attempt_id}.stderr")), &stderr)?;
            let run_dir = runs.join(&attempt_id);
            let run_json = run_dir.join(crate::evidence::run::RUN_FILE);
            let record: Option<RunRecord> = std::fs::read(&run_json).ok().and_then(|b| serde_json::from_slice(&b).ok());
            let failure = match (&spawn_err, code, &record) {
                (Some(e), _, _) => Some(e.clone()),
                (None, Some(0), Some(_)) => None,
                (None, Some(0), None) => Some("exit 0 but no run.json was written".into()),
                (None, c, _) => Some(format!("launcher exited {}; {}", c.map(|c| c.to_string()).unwrap_or_else(|| "by signal".into()), failure_line(&stderr))),
            };
            let rec = AttemptRecord {
                attempt_id: attempt_id.clone(),
                cell_id: cell.cell_id.clone(),
                label: cell.label.clone(),
                round: cell.round,
                manifest_sha256: manifest_sha.clone(),
                status: if failure.is_none() { AttemptStatus::Succeeded } else { AttemptStatus::Failed },
                exit_code: code,
                failure,
                argv,
                started_unix_ms: started,
                finished_unix_ms: finished,
                stdout_sha256: sha256_hex(&stdout),
                stderr_sha256: sha256_hex(&stderr),
                run_dir: format!("runs/{attempt_id}"),
                run_json_sha256: sha256_file(&run_json).ok(),
                shards: record.as_ref().map(|r| r.shards.clone()).unwrap_or_default(),
                identity_sha256: record.as_ref().map(|r| r.rank0_identity_sha256.clone()),
                host: Some(host.clone()),
            };
            append_attempt(dir, &rec)?;
            let _ = std::fs::remove_file(&note_path);
            let succeeded = rec.status == AttemptStatus::Succeeded;
            let line = match &rec.failure {
                None => format!("{attempt_id}: succeeded in {:.1} s", (finished - started) as f64 / 1e3),
                Some(f) => format!("{attempt_id}: failed: {f}"),
            };
            if bar.is_hidden() {
                eprintln!("campaign: {line}");
            } else if !succeeded {
                bar.println(line);
            }
            if !succeeded {
                failed += 1;
            }
            attempts.push(rec);
            if succeeded {
                ok += 1;
                break;
            }
        }
        bar.inc(1);
    }
    bar.finish_and_clear();
    Ok((ok, failed))
}

/// Run the launcher in its own process group, asked to die with its parent
/// (`PR_SET_PDEATHSIG`, prctl(2)) so that a killed `exec` takes its job with
/// it; `started(pgid)` records the job before it is waited for. A job running
/// longer than `timeout` has its group sent SIGTERM, then SIGKILL after 10 s.
/// Returns its output and whether it timed out.
fn run_job(
    prog: &str,
    args: &[String],
    env: &[(String, String)],
    timeout: Option<std::time::Duration>,
    started: impl FnOnce(i32) -> Result<()>,
) -> std::io::Result<(std::process::Output, bool)> {
    use std::io::Read;
    use std::os::unix::process::CommandExt;
    let parent = std::process::id() as libc::pid_t;
    let mut cmd = std::process::Command::new(prog);
    cmd.args(args)
        .envs(env.iter().cloned())
        .process_group(0)
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped());
    // SAFETY: only async-signal-safe calls (prctl, getppid, _exit) between fork and exec.
    unsafe {
        cmd.pre_exec(move || {
            if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGTERM) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            if libc::getppid() != parent {
                libc::_exit(1);
            }
            Ok(())
        });
    }
    let mut child = cmd.spawn()?;
    let pgid = child.id() as i32;
    // SAFETY: signalling the process group this function created.
    let signal_group = |sig| unsafe { libc::kill(-pgid, sig) };
    if let Err(e) = started(pgid) {
        signal_group(libc::SIGTERM);
        let _ = child.wait_with_output();
        return Err(std::io::Error::other(format!("{e:#}")));
    }
    let drain = |r: Option<Box<dyn Read + Send>>| {
        std::thread::spawn(move || {
            let mut buf = Vec::new();
            if let Some(mut r) = r {
                let _ = r.read_to_end(&mut buf);
            }
            buf
        })
    };
    let out_t = drain(child.stdout.take().map(|r| Box::new(r) as Box<dyn Read + Send>));
    let err_t = drain(child.stderr.take().map(|r| Box::new(r) as Box<dyn Read + Send>));
    let t0 = std::time::Instant::now();
    let mut timed_out = false;
    let status = loop {
        if let Some(s) = child.try_wait()? {
            break s;
        }
        if !timed_out && timeout.is_some_and(|t| t0.elapsed() > t) {
            // the whole job: the launcher and the ranks it started in its group
            timed_out = true;
            signal_group(libc::SIGTERM);
            let grace = std::time::Instant::now();
            while child.try_wait()?.is_none() && grace.elapsed() < std::time::Duration::from_secs(10) {
                std::thread::sleep(std::time::Duration::from_millis(50));
            }
            signal_group(libc::SIGKILL);
        }
        std::thread::sleep(std::time::Duration::from_millis(50));
    };
    let stdout = out_t.join().unwrap_or_default();
    let stderr = err_t.join().unwrap_or_default();
    Ok((std::process::Output { status, stdout, stderr }, timed_out))
}

/// The most telling stderr line: CommCanary's own error if there is one,
/// else the last line that is not a launcher's banner rule.
fn failure_line(stderr: &[u8]) -> String {
    let text = String::from_utf8_lossy(stderr);
    // a line that says what went wrong: an "error:" with words after it
    let telling = |l: &&str| l.split_once("error:").is_some_and(|(_, rest)| rest.chars().any(|c| c.is_alphanumeric()));
    let ours = text.lines().find(telling);
    let last = text.lines().rev().find(|l| !l.trim().is_empty() && !l.trim_start().starts_with("---"));
    match ours.or(last) {
        Some(l) => format!("stderr: {}", l.trim()),
        None => "no stderr".into(),
    }
}

/// Selection policy.
#[derive(schemars::JsonSchema, Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
#[serde(rename_all = "kebab-case")]
pub enum SelectPolicy {
    /// The first successful attempt of each cell.
    FirstSuccess,
    /// The last successful attempt of each cell.
    LastSuccess,
}

/// One selected attempt.
#[derive(schemars::JsonSchema, Serialize, Deserialize, Clone, Debug, PartialEq)]
pub struct Selected {
    /// Cell.
    pub cell_id: String,
    /// Attempt.
    pub attempt_id: String,
    /// Run directory (relative).
    pub run_dir: String,
    /// run.json digest.
    pub run_json_sha256: String,
    /// Shard digests.
    pub shards: Vec<ShardRef>,
}

/// The selection file.
#[derive(schemars::JsonSchema, Serialize, Deserialize, Clone, Debug, PartialEq)]
pub struct Selection {
    /// Format version.
    pub format_version: u32,
    /// Manifest it selects for.
    pub manifest_sha256: String,
    /// Policy used.
    pub policy: SelectPolicy,
    /// Entries.
    pub entries: Vec<Selected>,
}

/// Select one attempt per cell; cells without a success are left out (verify will say so).
pub fn select(dir: &Path, policy: SelectPolicy) -> Result<(Selection, Vec<String>)> {
    let (m, sha) = load_manifest(dir)?;
    let attempts = read_attempts(dir)?;
    let accepted = accepted_manifests(dir, &m, &sha)?;
    let mut entries = Vec::new();
    let mut missing = Vec::new();
    for c in &m.schedule {
        // an attempt made under another manifest is never this campaign's evidence
        let ok: Vec<&AttemptRecord> =
            attempts.iter().filter(|a| a.cell_id == c.cell_id && a.status == AttemptStatus::Succeeded && accepted.contains(&a.manifest_sha256)).collect();
        // one that overlapped another attempt on its host only when there is no other (verify then says why it is refused)
        let clean: Vec<&AttemptRecord> = ok.iter().copied().filter(|a| overlapping(a, &attempts).is_none()).collect();
        let from = if clean.is_empty() { &ok } else { &clean };
        let pick = match policy {
            SelectPolicy::FirstSuccess => from.first().copied(),
            SelectPolicy::LastSuccess => from.last().copied(),
        };
        match pick {
            Some(a) => entries.push(Selected {
                cell_id: c.cell_id.clone(),
                attempt_id: a.attempt_id.clone(),
                run_dir: a.run_dir.clone(),
                run_json_sha256: a.run_json_sha256.clone().unwrap_or_default(),
                shards: a.shards.clone(),
            }),
            None => missing.push(c.cell_id.clone()),
        }
    }
    Ok((Selection { format_version: 1, manifest_sha256: sha, policy, entries }, missing))
}

pub use crate::analysis::policy::Verdict;

/// Verify completeness of the selection against the manifest.
pub fn verify(dir: &Path) -> Result<Verdict> {
    verify_visiting(dir, &mut |_, _, _| {})
}

/// [`verify`], handing each cell that passed its own checks to `visit` with
/// its selection entry and the run `verify` joined (before the checks across
/// cells, so the verdict still decides whether the campaign is complete): a
/// reader that needs the runs (the analysis) joins each one once.
pub fn verify_visiting(dir: &Path, visit: &mut dyn FnMut(&Cell, &Selected, &crate::evidence::join::JoinedRun)) -> Result<Verdict> {
    let (m, sha) = load_manifest(dir)?;
    let sp = dir.join("selection.json");
    if !sp.exists() {
        crate::refuse!(crate::core::refusal::Code::NoSuchInput, "reading {} (run `campaign select` first): no such file", sp.display());
    }
    let sel: Selection = serde_json::from_slice(&crate::core::limits::read_bounded(&sp, crate::core::limits::MAX_JSON_BYTES)?)
        .with_context(|| format!("{}: not a selection", sp.display()))?;
    let attempts = read_attempts(dir)?;
    let accepted = accepted_manifests(dir, &m, &sha)?;
    let mut refusals: Vec<(String, String)> = Vec::new();
    if sel.manifest_sha256 != sha {
        refusals.push(("(selection)".into(), coded(Code::StaleManifest, format!("selection was made for manifest {}, not {sha}", sel.manifest_sha256))));
    }
    for e in &sel.entries {
        if !m.schedule.iter().any(|c| c.cell_id == e.cell_id) {
            refusals.push((e.cell_id.clone(), coded(Code::UnexpectedCell, "unexpected: the manifest has no such cell".into())));
        }
    }
    let mut passed: Vec<(String, String, Option<String>)> = Vec::new();
    let mut hardware: Vec<(String, String, crate::campaign::hardware::CellHardware)> = Vec::new();
    for c in &m.schedule {
        let picked: Vec<&Selected> = sel.entries.iter().filter(|e| e.cell_id == c.cell_id).collect();
        let e = match picked.as_slice() {
            [] => {
                refusals.push((c.cell_id.clone(), coded(Code::MissingCell, "missing: no selected attempt".into())));
                continue;
            }
            [one] => *one,
            many => {
                refusals.push((c.cell_id.clone(), coded(Code::DuplicateCell, format!("duplicate: {} attempts selected", many.len()))));
                continue;
            }
        };
        match check_cell(dir, &m, &accepted, c, e, &attempts) {
            Ok((walked, hw, joined)) => {
                visit(c, e, &joined);
                passed.push((c.cell_id.clone(), c.label.clone(), walked));
                hardware.push((c.cell_id.clone(), c.label.clone(), hw));
            }
            Err(why) => refusals.push((c.cell_id.clone(), why)),
        }
    }
    // configurations are ranked on one workload: every cell walked the same
    // unfrozen trace file, or every cell none
    let mut refused: Vec<(String, String)> =
        other_trace_files(&passed).into_iter().map(|(cell, why)| (cell, coded(Code::IdentityContradiction, why))).collect();
    // and on one kind of hardware: every cell recorded what most cells did on the contract's fields
    refused.extend(m.hardware.disagreeing(&hardware).into_iter().map(|(cell, why)| (cell, coded(Code::HardwareContract, why))));
    let refused_cells: std::collections::BTreeSet<&str> = refused.iter().map(|(c, _)| c.as_str()).collect();
    let ok = passed.len() - refused_cells.len();
    refusals.extend(refused);
    Ok(Verdict { complete: refusals.is_empty(), manifest_sha256: sha, cells_expected: m.schedule.len(), cells_ok: ok, refusals })
}

/// Where a phase that walks a trace walked another than the manifest froze
/// (the frozen imported trace, by digest), or walked an imported trace where
/// the manifest froze none: the first such phase, in words.
fn walked_another_trace(shards: &[crate::evidence::shard::Shard], frozen_sha256: Option<&str>) -> Option<String> {
    for sh in shards {
        for p in &sh.header.phases {
            let got = match &p.trace {
                Some(crate::evidence::shard::TraceOrigin::Imported { sha256, .. }) => Some(sha256.as_str()),
                _ => None,
            };
            if p.trace.is_some() && got != frozen_sha256 {
                return Some(format!("rank {} phase {} walked trace {:?}; the manifest froze {:?}", sh.header.rank, p.phase, got, frozen_sha256));
            }
        }
    }
    None
}

/// A refusal as the text `verify` lists for a cell: `refused[CODE]: why`.
fn coded(code: Code, message: String) -> String {
    crate::core::refusal::Refusal { code, message }.to_string()
}

/// One cell's refusal, if any; else the digest of the joined-trace file its
/// phases walked (`rank --trace` in the arguments), if they walked one,
/// what it recorded on the hardware contract's fields, and its joined run.
fn check_cell(
    dir: &Path,
    m: &Manifest,
    accepted: &[String],
    c: &Cell,
    e: &Selected,
    attempts: &[AttemptRecord],
) -> std::result::Result<(Option<String>, crate::campaign::hardware::CellHardware, crate::evidence::join::JoinedRun), String> {
    let a = attempts
        .iter()
        .find(|a| a.attempt_id == e.attempt_id)
        .ok_or_else(|| coded(Code::SelectionMismatch, format!("selected attempt {} has no record", e.attempt_id)))?;
    let stale = |what: String| coded(Code::StaleManifest, what);
    if !accepted.contains(&a.manifest_sha256) {
        return Err(stale(format!("attempt {} ran under manifest {}, not this campaign's manifest {}", a.attempt_id, a.manifest_sha256, accepted[0])));
    }
    if a.status != AttemptStatus::Succeeded {
        return Err(coded(Code::FailedAttempt, format!("selected attempt {} failed: {}", a.attempt_id, a.failure.clone().unwrap_or_default())));
    }
    if let Some((b, host)) = overlapping(a, attempts) {
        return Err(coded(
            Code::OverlappingAttempts,
            format!(
                "attempt {} ({}..{} ms) overlapped attempt {} ({}..{} ms) on the same host ({host}): their timings contaminate each other",
                a.attempt_id, a.started_unix_ms, a.finished_unix_ms, b.attempt_id, b.started_unix_ms, b.finished_unix_ms
            ),
        ));
    }
    if a.cell_id != c.cell_id || a.run_dir != e.run_dir || a.shards != e.shards || a.run_json_sha256.as_deref() != Some(e.run_json_sha256.as_str()) {
        return Err(coded(Code::SelectionMismatch, format!("selection entry disagrees with attempt record {}", a.attempt_id)));
    }
    let run: PathBuf = dir.join(&e.run_dir);
    let rj = run.join(crate::evidence::run::RUN_FILE);
    match sha256_file(&rj) {
        Ok(d) if d == e.run_json_sha256 => {}
        Ok(d) => return Err(coded(Code::Stale, format!("stale: {} hashes to {d}, recorded {}", rj.display(), e.run_json_sha256))),
        Err(_) => return Err(coded(Code::NoSuchInput, format!("{} is missing", rj.display()))),
    }
    for s in &e.shards {
        let p = run.join(&s.file);
        match sha256_file(&p) {
            Ok(d) if d == s.sha256 => {}
            Ok(d) => return Err(coded(Code::Stale, format!("stale: rank {} shard {} hashes to {d}, recorded {}", s.rank, p.display(), s.sha256))),
            Err(_) => return Err(coded(Code::MissingRank, format!("rank {} shard {} is missing", s.rank, p.display()))),
        }
    }
    let joined = crate::evidence::join::join_dir(&run).map_err(|e| coded(Code::NotJoinable, format!("does not join: {e:#}")))?;
    // generated shards are not measurements: the refusal's own code, not NOT_JOINABLE
    joined.refuse_synthetic("campaign verify").map_err(|e| format!("{e:#}"))?;
    // identity contradictions
    let want_backend = &m.spec.backend;
    let cfg = &m.configs.iter().find(|x| x.label == c.label).ok_or_else(|| coded(Code::SelectionMismatch, "unknown label".into()))?.config;
    let w = &joined.run.workload;
    let want_phases = crate::core::workload::parse_phases(&m.spec.workload.phases).map_err(|e| coded(Code::BadSpec, format!("manifest phases: {e:#}")))?;
    let ran = [("tokens", w.tokens, m.spec.workload.tokens), ("layers", w.layers, m.spec.workload.layers), ("iters", w.iters, m.spec.workload.iters)];
    for (what, got, want) in ran {
        if got != want {
            return Err(stale(format!("run {} ran {what} = {got}, the manifest says {want}", joined.run.run_id)));
        }
    }
    if w.phases != want_phases {
        return Err(stale(format!("run {} ran phases {:?}, the manifest says {}", joined.run.run_id, w.phases, m.spec.workload.phases)));
    }
    if let Some(why) = walked_another_trace(&joined.shards, m.frozen_trace(&cfg.name).map(|t| t.1).as_deref()) {
        return Err(coded(Code::IdentityContradiction, why));
    }
    let file_trace = file_trace_walked(&joined.shards).map_err(|why| coded(Code::IdentityContradiction, why))?;
    if joined.run.world_size != m.spec.ranks {
        return Err(coded(Code::IdentityContradiction, format!("ran with {} ranks, the manifest says {}", joined.run.world_size, m.spec.ranks)));
    }
    for sh in &joined.shards {
        let h = &sh.header;
        let got = serde_json::to_value(h.backend).ok().and_then(|v| v.as_str().map(String::from)).unwrap_or_default();
        if &got != want_backend {
            return Err(coded(Code::IdentityContradiction, format!("rank {} ran backend {got}, the manifest says {want_backend}", h.rank)));
        }
        for (k, v) in &cfg.env {
            let recorded = crate::core::identity::RECORDED_ENV_PREFIXES.iter().any(|p| k.starts_with(p));
            if recorded && !h.identity.env.iter().any(|(ek, ev)| ek == k && ev == v) {
                return Err(coded(
                    Code::IdentityContradiction,
                    format!("rank {}: {k}={v} is in the configuration but not in the recorded environment", h.rank),
                ));
            }
        }
        if let Some(lib) = &cfg.nccl_lib {
            let mapped = h.device.facts.iter().find(|f| f.0 == "nccl_mapped_path").map(|f| f.1.clone());
            let want = std::fs::canonicalize(lib).map(|p| p.display().to_string()).unwrap_or_else(|_| lib.clone());
            if mapped.as_deref() != Some(want.as_str()) {
                return Err(coded(Code::IdentityContradiction, format!("rank {}: NCCL mapped {:?}, the configuration names {want}", h.rank, mapped)));
            }
        }
    }
    let headers: Vec<&crate::evidence::shard::ShardHeader> = joined.shards.iter().map(|s| &s.header).collect();
    let hw = m.hardware.check_cell(&headers).map_err(|why| coded(Code::HardwareContract, why))?;
    Ok((file_trace, hw, joined))
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
fn overlapping<'a>(a: &AttemptRecord, attempts: &'a [AttemptRecord]) -> Option<(&'a AttemptRecord, String)> {
    let mine = attempt_hosts(a);
    attempts.iter().filter(|b| b.attempt_id != a.attempt_id && b.started_unix_ms < a.finished_unix_ms && a.started_unix_ms < b.finished_unix_ms).find_map(|b| {
        if a.host.is_none() && b.host.is_none() {
            return Some((b, "unrecorded".to_string()));
        }
        attempt_hosts(b).intersection(&mine).next().map(|h| (b, h.to_string()))
    })
}

/// Of cells that passed, as (cell, configuration label, unfrozen trace file
/// walked), those that walked another file (or none, or one) than most cells
/// did (the first such group in order on a tie), each with the reason in
/// words, naming what every configuration walked.
fn other_trace_files(passed: &[(String, String, Option<String>)]) -> Vec<(String, String)> {
    let name = |d: &Option<String>| d.as_deref().map_or("no trace file".to_string(), |d| format!("trace file {d}"));
    let mut groups: Vec<(&Option<String>, usize)> = Vec::new();
    for (_, _, d) in passed {
        match groups.iter_mut().find(|(g, _)| *g == d) {
            Some(g) => g.1 += 1,
            None => groups.push((d, 1)),
        }
    }
    if groups.len() < 2 {
        return Vec::new();
    }
    let most = groups.iter().fold(groups[0], |best, g| if g.1 > best.1 { *g } else { best }).0;
    let mut by_label: Vec<String> = Vec::new();
    for (_, label, d) in passed {
        let line = format!("{label}: {}", name(d));
        if !by_label.contains(&line) {
            by_label.push(line);
        }
    }
    passed
        .iter()
        .filter(|(_, _, d)| d != most)
        .map(|(cell, _, d)| {
            (
                cell.clone(),
                format!(
                    "walked {}, most cells walked {}: the configurations would be compared on different workloads ({})",
                    name(d),
                    name(most),
                    by_label.join("; ")
                ),
            )
        })
        .collect()
}

/// The digest of the joined-trace file (`rank --trace`, not frozen by the
/// manifest) that a cell's phases walked, `None` where they walked none; a
/// refusal, in words, where its ranks or phases walked different files.
fn file_trace_walked(shards: &[crate::evidence::shard::Shard]) -> std::result::Result<Option<String>, String> {
    let mut seen: Option<(&str, u32, crate::core::workload::Phase)> = None;
    for sh in shards {
        for p in &sh.header.phases {
            if let Some(crate::evidence::shard::TraceOrigin::File { sha256, .. }) = &p.trace {
                match seen {
                    None => seen = Some((sha256, sh.header.rank, p.phase)),
                    Some((first, r, ph)) if first != sha256 => {
                        return Err(format!("rank {} phase {} walked trace file {sha256}, rank {r} phase {ph} walked {first}", sh.header.rank, p.phase));
                    }
                    Some(_) => {}
                }
            }
        }
    }
    Ok(seen.map(|(d, _, _)| d.to_string()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn verify_refuses_a_phase_that_walked_another_trace_than_the_frozen_one() {
        let phase = |trace: serde_json::Value| {
            let h = crate::evidence::shard::test_header(
                "cpu",
                serde_json::json!([{"phase": "replay", "start_ns": 0, "end_ns": 1, "device_anchor_error_ns": null,
                    "quantum_ns": null, "trace": trace, "collectives": 1}]),
            );
            vec![crate::evidence::shard::Shard { header: h, body: Default::default() }]
        };
        let imported = |sha: &str| {
            serde_json::json!({"Imported": {"path": "trace.json", "sha256": sha, "source_rank": 0,
            "collectives_per_pass": 32, "left_out_per_pass": 0}})
        };
        assert_eq!(walked_another_trace(&phase(imported("aa")), Some("aa")), None);
        let why = walked_another_trace(&phase(imported("bb")), Some("aa")).expect("another digest is refused");
        assert!(why.contains("rank 0 phase replay walked trace Some(\"bb\")") && why.contains("froze Some(\"aa\")"), "{why}");
        assert!(walked_another_trace(&phase(serde_json::json!("ThisRunBlocking")), Some("aa")).is_some(), "its own blocking phase instead of the frozen trace");
        assert!(walked_another_trace(&phase(imported("aa")), None).is_some(), "an imported trace the manifest did not freeze");
        assert_eq!(walked_another_trace(&phase(serde_json::json!("ThisRunBlocking")), None), None);
        assert_eq!(walked_another_trace(&phase(serde_json::Value::Null), Some("aa")), None, "phases without a trace are not concerned");
    }

    #[test]
    fn a_cell_names_the_one_trace_file_its_phases_walked() {
        let shard = |rank: u32, traces: &[serde_json::Value]| {
            let phases: Vec<serde_json::Value> = traces
                .iter()
                .zip(["replay", "fill"])
                .map(|(t, p)| {
                    serde_json::json!({"phase": p, "start_ns": 0, "end_ns": 1, "device_anchor_error_ns": null,
                        "quantum_ns": null, "trace": t, "collectives": 1})
                })
                .collect();
            let mut h = crate::evidence::shard::test_header("cpu", serde_json::Value::Array(phases));
            h.rank = rank;
            crate::evidence::shard::Shard { header: h, body: Default::default() }
        };
        let file = |sha: &str| serde_json::json!({"File": {"path": "t.jsonl", "sha256": sha, "source_rank": 0}});
        let blocking = serde_json::json!("ThisRunBlocking");
        assert_eq!(file_trace_walked(&[shard(0, &[file("aa"), file("aa")]), shard(1, &[file("aa")])]), Ok(Some("aa".into())));
        assert_eq!(file_trace_walked(&[shard(0, &[blocking.clone(), serde_json::Value::Null])]), Ok(None));
        let why = file_trace_walked(&[shard(0, &[file("aa")]), shard(1, &[file("bb")])]).unwrap_err();
        assert!(why.contains("rank 1 phase replay walked trace file bb") && why.contains("rank 0 phase replay walked aa"), "{why}");
        assert!(file_trace_walked(&[shard(0, &[file("aa"), file("bb")])]).is_err(), "two phases of one rank");
    }

    #[test]
    fn cells_that_walked_another_trace_file_than_most_are_named() {
        let cell = |id: &str, label: &str, d: Option<&str>| (id.to_string(), label.to_string(), d.map(String::from));
        assert!(other_trace_files(&[cell("r1-a", "a", Some("x")), cell("r1-b", "b", Some("x"))]).is_empty());
        assert!(other_trace_files(&[cell("r1-a", "a", None), cell("r1-b", "b", None)]).is_empty());
        let refused = other_trace_files(&[cell("r1-a", "a", Some("x")), cell("r2-a", "a", Some("x")), cell("r1-b", "b", Some("y"))]);
        assert_eq!(refused.len(), 1);
        assert_eq!(refused[0].0, "r1-b");
        assert!(
            refused[0].1.contains("walked trace file y, most cells walked trace file x") && refused[0].1.contains("a: trace file x; b: trace file y"),
            "{}",
            refused[0].1
        );
        // a configuration replaying its own blocking phase against others walking a file
        let refused = other_trace_files(&[cell("r1-a", "a", Some("x")), cell("r1-c", "c", None), cell("r1-b", "b", Some("x"))]);
        assert_eq!(refused.iter().map(|r| r.0.as_str()).collect::<Vec<_>>(), vec!["r1-c"]);
        assert!(refused[0].1.contains("walked no trace file"), "{}", refused[0].1);
        // a tie: the first group stands
        let refused = other_trace_files(&[cell("r1-b", "b", Some("y")), cell("r1-a", "a", Some("x"))]);
        assert_eq!(refused.iter().map(|r| r.0.as_str()).collect::<Vec<_>>(), vec!["r1-a"]);
    }

    fn rec(id: &str) -> AttemptRecord {
        AttemptRecord {
            attempt_id: id.into(),
            cell_id: id.rsplit_once("-a").map(|x| x.0).unwrap_or(id).into(),
            label: String::new(),
            round: 1,
            manifest_sha256: String::new(),
            status: AttemptStatus::Failed,
            exit_code: None,
            failure: None,
            argv: vec![],
            started_unix_ms: 0,
            finished_unix_ms: 0,
            stdout_sha256: String::new(),
            stderr_sha256: String::new(),
            run_dir: String::new(),
            run_json_sha256: None,
            shards: vec![],
            identity_sha256: None,
            host: None,
        }
    }

    /// Issue 27: with the srun launcher exec's host is not where the ranks
    /// ran; attempts overlapping in time on a node their ranks shared are
    /// refused even when their execs ran on different hosts.
    #[test]
    fn attempts_overlapping_on_a_rank_host_are_found_across_exec_hosts() {
        let shard =
            |rank: u32, host: &str| crate::evidence::run::ShardRef { rank, file: String::new(), sha256: String::new(), size_bytes: 0, host: host.into() };
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
