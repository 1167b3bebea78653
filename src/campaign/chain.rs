//! The chain of evidence after planning: attempts (append-only), selection,
//! completeness verification (SPEC §5).
//!
//! `exec` consumes the manifest and appends one terminal record per attempt
//! to `attempts.jsonl` (fsynced line by line; nothing is rewritten), keeping
//! each attempt's stdout/stderr beside it. `select` names exactly one attempt
//! per expected cell and binds its digests. `verify` refuses, naming the
//! cell: a missing, duplicated, failed, stale (bytes changed since the
//! attempt was recorded) or unexpected cell, a shard that does not join, and
//! identity contradictions with the manifest (backend, world size, a
//! configuration's environment or NCCL library).
use super::spec::{Cell, LauncherKind, Manifest};
use crate::fsutil::{sha256_file, sha256_hex, write_new_atomic};
use crate::run::{RunRecord, ShardRef};
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
}

/// Attempts file name.
pub const ATTEMPTS: &str = "attempts.jsonl";

/// Read every attempt record; a line that does not parse is an error naming it.
pub fn read_attempts(dir: &Path) -> Result<Vec<AttemptRecord>> {
    let p = dir.join(ATTEMPTS);
    if !p.exists() {
        return Ok(Vec::new());
    }
    let text = std::fs::read_to_string(&p).with_context(|| format!("reading {}", p.display()))?;
    text.lines()
        .enumerate()
        .filter(|(_, l)| !l.trim().is_empty())
        .map(|(i, l)| serde_json::from_str(l).with_context(|| format!("{}:{}: not an attempt record", p.display(), i + 1)))
        .collect()
}

fn append_attempt(dir: &Path, rec: &AttemptRecord) -> Result<()> {
    let p = dir.join(ATTEMPTS);
    let mut f = std::fs::OpenOptions::new().create(true).append(true).open(&p).with_context(|| format!("opening {}", p.display()))?;
    let mut line = serde_json::to_vec(rec)?;
    line.push(b'\n');
    f.write_all(&line).with_context(|| format!("appending to {}", p.display()))?;
    f.sync_all().with_context(|| format!("fsync {}", p.display()))
}

/// Load the manifest and check it against its recorded digest.
pub fn load_manifest(dir: &Path) -> Result<(Manifest, String)> {
    let mp = dir.join("manifest.json");
    let bytes = std::fs::read(&mp).with_context(|| format!("reading {}", mp.display()))?;
    let actual = sha256_hex(&bytes);
    let recorded = std::fs::read_to_string(dir.join("manifest.sha256")).with_context(|| format!("reading {}/manifest.sha256", dir.display()))?;
    if recorded.trim() != actual {
        bail!("{}: SHA-256 is {actual} but manifest.sha256 says {}: the frozen manifest was changed", mp.display(), recorded.trim());
    }
    let m: Manifest = serde_json::from_slice(&bytes).with_context(|| format!("{}: not a manifest", mp.display()))?;
    Ok((m, actual))
}

fn command_for(m: &Manifest, cell: &Cell, attempt_id: &str, runs: &Path) -> Result<(String, Vec<String>, Vec<(String, String)>)> {
    let cfg = &m.configs.iter().find(|c| c.label == cell.label).with_context(|| format!("cell {}: unknown label", cell.cell_id))?.config;
    let exe = std::env::current_exe().context("locating the commcanary executable")?.display().to_string();
    let w = &m.spec.workload;
    let mut rank_args: Vec<String> = vec![
        exe,
        "rank".into(),
        "-q".into(),
        "--backend".into(),
        m.spec.backend.clone(),
        "--phases".into(),
        w.phases.clone(),
        "--tokens".into(),
        w.tokens.to_string(),
        "--layers".into(),
        w.layers.to_string(),
        "--iters".into(),
        w.iters.to_string(),
    ];
    match &w.model {
        Some(model) => rank_args.extend(["--model".into(), model.clone()]),
        None => rank_args.extend(["--model".into(), "synthetic".into(), "--sizes".into(), w.sizes.clone()]),
    }
    rank_args.extend(w.extra_args.iter().cloned());
    if let Some(lib) = &cfg.nccl_lib {
        rank_args.extend(["--nccl-lib".into(), lib.clone()]);
    }
    rank_args.extend(cfg.args.iter().cloned());
    rank_args.extend(["--run-id".into(), attempt_id.into(), "--out".into(), runs.display().to_string()]);
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

/// Run every cell without a successful attempt, in schedule order (or only
/// the cell at 1-based position `only`); each failure is retried up to
/// `retries` times. Returns (succeeded, failed attempts). Records are single
/// `O_APPEND` lines, so concurrent array tasks on a local or POSIX-append
/// file system do not interleave them.
pub fn exec(dir: &Path, retries: u32, only: Option<usize>) -> Result<(usize, usize)> {
    let (m, manifest_sha) = load_manifest(dir)?;
    let runs = dir.join("runs");
    let logs = dir.join("attempts");
    std::fs::create_dir_all(&runs)?;
    std::fs::create_dir_all(&logs)?;
    let mut attempts = read_attempts(dir)?;
    if let Some(n) = only {
        if n == 0 || n > m.schedule.len() {
            bail!("--cell {n}: the schedule has cells 1 to {}", m.schedule.len());
        }
    }
    let todo: Vec<&Cell> = m
        .schedule
        .iter()
        .enumerate()
        .filter(|(i, _)| only.is_none_or(|n| n == i + 1))
        .map(|(_, c)| c)
        .filter(|c| !attempts.iter().any(|a| a.cell_id == c.cell_id && a.status == AttemptStatus::Succeeded))
        .collect();
    let bar = indicatif::ProgressBar::new(todo.len() as u64);
    bar.set_style(
        indicatif::ProgressStyle::with_template("{prefix} [{bar:30}] {pos}/{len} cells, ETA {eta} {msg}")
            .expect("valid template")
            .progress_chars("=> "),
    );
    bar.set_prefix(m.campaign_id.clone());
    let (mut ok, mut failed) = (0, 0);
    for cell in todo {
        for _try in 0..=retries {
            // attempt numbers count records and any directory an interrupted attempt left
            let n = attempts.iter().filter(|a| a.cell_id == cell.cell_id).count()
                + std::fs::read_dir(&runs).map(|rd| rd.flatten().filter(|e| e.file_name().to_string_lossy().starts_with(&format!("{}-a", cell.cell_id))).count()).unwrap_or(0);
            let attempt_id = format!("{}-a{}", cell.cell_id, n + 1);
            bar.set_message(format!("round {} {} ({attempt_id})", cell.round, cell.label));
            let (prog, args, env) = command_for(&m, cell, &attempt_id, &runs)?;
            let started = crate::run::unix_ms();
            let out = std::process::Command::new(&prog).args(&args).envs(env.iter().cloned()).output();
            let finished = crate::run::unix_ms();
            let (code, stdout, stderr, spawn_err) = match out {
                Ok(o) => (o.status.code(), o.stdout, o.stderr, None),
                Err(e) => (None, Vec::new(), Vec::new(), Some(format!("could not start {prog}: {e}"))),
            };
            write_new_atomic(&logs.join(format!("{attempt_id}.stdout")), &stdout)?;
            write_new_atomic(&logs.join(format!("{attempt_id}.stderr")), &stderr)?;
            let run_dir = runs.join(&attempt_id);
            let run_json = run_dir.join(crate::run::RUN_FILE);
            let record: Option<RunRecord> = std::fs::read(&run_json).ok().and_then(|b| serde_json::from_slice(&b).ok());
            let failure = match (&spawn_err, code, &record) {
                (Some(e), _, _) => Some(e.clone()),
                (None, Some(0), Some(_)) => None,
                (None, Some(0), None) => Some("exit 0 but no run.json was written".into()),
                (None, c, _) => Some(format!(
                    "launcher exited {}; {}",
                    c.map(|c| c.to_string()).unwrap_or_else(|| "by signal".into()),
                    failure_line(&stderr)
                )),
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
                argv: std::iter::once(prog.clone()).chain(args.iter().cloned()).collect(),
                started_unix_ms: started,
                finished_unix_ms: finished,
                stdout_sha256: sha256_hex(&stdout),
                stderr_sha256: sha256_hex(&stderr),
                run_dir: format!("runs/{attempt_id}"),
                run_json_sha256: sha256_file(&run_json).ok(),
                shards: record.as_ref().map(|r| r.shards.clone()).unwrap_or_default(),
                identity_sha256: record.as_ref().map(|r| r.rank0_identity_sha256.clone()),
            };
            append_attempt(dir, &rec)?;
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

/// The most telling stderr line: CommCanary's own error if there is one,
/// else the last line that is not a launcher's banner rule.
fn failure_line(stderr: &[u8]) -> String {
    let text = String::from_utf8_lossy(stderr);
    // a line that says what went wrong: an "error:" with words after it
    let telling = |l: &&str| {
        l.split_once("error:").is_some_and(|(_, rest)| rest.chars().any(|c| c.is_alphanumeric()))
    };
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
    let mut entries = Vec::new();
    let mut missing = Vec::new();
    for c in &m.schedule {
        let mut ok = attempts.iter().filter(|a| a.cell_id == c.cell_id && a.status == AttemptStatus::Succeeded);
        let pick = match policy {
            SelectPolicy::FirstSuccess => ok.next(),
            SelectPolicy::LastSuccess => ok.last(),
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

/// Completeness verdict.
#[derive(schemars::JsonSchema, Serialize, Deserialize, Clone, Debug, PartialEq)]
pub struct Verdict {
    /// True only when every check passed.
    pub complete: bool,
    /// Manifest identity.
    pub manifest_sha256: String,
    /// Cells expected.
    pub cells_expected: usize,
    /// Cells that passed every check.
    pub cells_ok: usize,
    /// Each refusal: (cell, reason).
    pub refusals: Vec<(String, String)>,
}

/// Verify completeness of the selection against the manifest.
pub fn verify(dir: &Path) -> Result<Verdict> {
    let (m, sha) = load_manifest(dir)?;
    let sp = dir.join("selection.json");
    let sel: Selection = serde_json::from_slice(&std::fs::read(&sp).with_context(|| format!("reading {} (run `campaign select` first)", sp.display()))?)
        .with_context(|| format!("{}: not a selection", sp.display()))?;
    let attempts = read_attempts(dir)?;
    let mut refusals: Vec<(String, String)> = Vec::new();
    if sel.manifest_sha256 != sha {
        refusals.push(("(selection)".into(), format!("selection was made for manifest {}, not {sha}", sel.manifest_sha256)));
    }
    for e in &sel.entries {
        if !m.schedule.iter().any(|c| c.cell_id == e.cell_id) {
            refusals.push((e.cell_id.clone(), "unexpected: the manifest has no such cell".into()));
        }
    }
    let mut ok = 0;
    for c in &m.schedule {
        let picked: Vec<&Selected> = sel.entries.iter().filter(|e| e.cell_id == c.cell_id).collect();
        let e = match picked.as_slice() {
            [] => {
                refusals.push((c.cell_id.clone(), "missing: no selected attempt".into()));
                continue;
            }
            [one] => *one,
            many => {
                refusals.push((c.cell_id.clone(), format!("duplicate: {} attempts selected", many.len())));
                continue;
            }
        };
        match check_cell(dir, &m, c, e, &attempts) {
            Ok(()) => ok += 1,
            Err(why) => refusals.push((c.cell_id.clone(), why)),
        }
    }
    Ok(Verdict { complete: refusals.is_empty(), manifest_sha256: sha, cells_expected: m.schedule.len(), cells_ok: ok, refusals })
}

fn check_cell(dir: &Path, m: &Manifest, c: &Cell, e: &Selected, attempts: &[AttemptRecord]) -> std::result::Result<(), String> {
    let a = attempts.iter().find(|a| a.attempt_id == e.attempt_id).ok_or_else(|| format!("selected attempt {} has no record", e.attempt_id))?;
    if a.status != AttemptStatus::Succeeded {
        return Err(format!("selected attempt {} failed: {}", a.attempt_id, a.failure.clone().unwrap_or_default()));
    }
    if a.cell_id != c.cell_id || a.run_dir != e.run_dir || a.shards != e.shards || a.run_json_sha256.as_deref() != Some(e.run_json_sha256.as_str()) {
        return Err(format!("selection entry disagrees with attempt record {}", a.attempt_id));
    }
    let run: PathBuf = dir.join(&e.run_dir);
    let rj = run.join(crate::run::RUN_FILE);
    match sha256_file(&rj) {
        Ok(d) if d == e.run_json_sha256 => {}
        Ok(d) => return Err(format!("stale: {} hashes to {d}, recorded {}", rj.display(), e.run_json_sha256)),
        Err(_) => return Err(format!("{} is missing", rj.display())),
    }
    for s in &e.shards {
        let p = run.join(&s.file);
        match sha256_file(&p) {
            Ok(d) if d == s.sha256 => {}
            Ok(d) => return Err(format!("stale: rank {} shard {} hashes to {d}, recorded {}", s.rank, p.display(), s.sha256)),
            Err(_) => return Err(format!("rank {} shard {} is missing", s.rank, p.display())),
        }
    }
    let joined = crate::join::join_dir(&run).map_err(|e| format!("does not join: {e:#}"))?;
    // identity contradictions
    let want_backend = &m.spec.backend;
    let cfg = &m.configs.iter().find(|x| x.label == c.label).ok_or("unknown label")?.config;
    if joined.run.world_size != m.spec.ranks {
        return Err(format!("ran with {} ranks, the manifest says {}", joined.run.world_size, m.spec.ranks));
    }
    for sh in &joined.shards {
        let h = &sh.header;
        let got = serde_json::to_value(h.backend).ok().and_then(|v| v.as_str().map(String::from)).unwrap_or_default();
        if &got != want_backend {
            return Err(format!("rank {} ran backend {got}, the manifest says {want_backend}", h.rank));
        }
        for (k, v) in &cfg.env {
            let recorded = crate::identity::RECORDED_ENV_PREFIXES.iter().any(|p| k.starts_with(p));
            if recorded && !h.identity.env.iter().any(|(ek, ev)| ek == k && ev == v) {
                return Err(format!("rank {}: {k}={v} is in the configuration but not in the recorded environment", h.rank));
            }
        }
        if let Some(lib) = &cfg.nccl_lib {
            let mapped = h.device.facts.iter().find(|f| f.0 == "nccl_mapped_path").map(|f| f.1.clone());
            let want = std::fs::canonicalize(lib).map(|p| p.display().to_string()).unwrap_or_else(|_| lib.clone());
            if mapped.as_deref() != Some(want.as_str()) {
                return Err(format!("rank {}: NCCL mapped {:?}, the configuration names {want}", h.rank, mapped));
            }
        }
    }
    Ok(())
}
