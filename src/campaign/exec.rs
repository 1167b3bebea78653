//! `exec`: consumes the frozen manifest and the attempt log, runs one fresh job per cell without
//! a clean success (retrying failures) and appends one terminal record per attempt, its stdout and
//! stderr kept under `attempts/`. An in-flight note under `inflight/` names each running job, so the
//! next `exec` records an interrupted one as failed and refuses one still alive. Refuses before any
//! launch a host that cannot run the jobs (`preflight`) and, before each job, a changed frozen trace.
use super::attempts::{
    accepted_manifests, append_attempt, load_manifest, next_attempt_number, overlapping, read_attempts, AttemptRecord,
    AttemptStatus,
};
use super::lock::{lock_campaign, INFLIGHT_FILE};
use super::spec::{CampaignSpec, Cell, ConfigSpec, LauncherKind, Manifest};
use crate::backend::cuda;
use crate::core::fsutil::{sha256_file, sha256_hex, write_json_new, write_new_atomic};
use crate::core::refusal::{refuse, Code};
use crate::core::{clock, identity, limits};
use crate::evidence::commtrace::Limits;
use crate::evidence::run::{RunRecord, RUN_FILE};
use anyhow::{bail, Context, Result};
use serde::{Deserialize, Serialize};
use std::io::Write;
use std::path::{Path, PathBuf};

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
    pgid > 1
        && (unsafe { libc::kill(-pgid, 0) } == 0 || std::io::Error::last_os_error().raw_os_error() == Some(libc::EPERM))
}

/// Settle attempts an interrupted `exec` left in flight (only `cell`'s when
/// given): a job still running after a grace period is refused by name; a
/// finished one gets a failed record ending now, so nothing later may overlap it unseen.
fn settle_inflight(dir: &Path, cell: Option<&str>, attempts: &mut Vec<AttemptRecord>) -> Result<()> {
    let d = dir.join(INFLIGHT_FILE);
    let Ok(rd) = std::fs::read_dir(&d) else { return Ok(()) };
    let mut notes: Vec<PathBuf> =
        rd.flatten().map(|e| e.path()).filter(|p| p.extension().is_some_and(|x| x == "json")).collect();
    notes.sort();
    for p in notes {
        let bytes = limits::read_bounded(&p, limits::MAX_JSON_BYTES)?;
        let Ok(n) = serde_json::from_slice::<InFlight>(&bytes) else {
            eprintln!("campaign: {}: unreadable in-flight note (torn write) left in place", p.display());
            continue;
        };
        if cell.is_some_and(|c| c != n.cell_id) {
            continue;
        }
        if !attempts.iter().any(|a| a.attempt_id == n.attempt_id) {
            if n.host == identity::hostname() {
                let t0 = std::time::Instant::now();
                while group_alive(n.pgid) && t0.elapsed() < std::time::Duration::from_secs(15) {
                    std::thread::sleep(std::time::Duration::from_millis(100));
                }
                if group_alive(n.pgid) {
                    crate::refuse!(
                        Code::OrphanJob,
                        "attempt {} of an interrupted exec is still running as process group {} (stop it: kill -- \
                            -{}); a new attempt would overlap it",
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
                failure: Some(
                    "interrupted: the exec that ran it ended before the job did (recorded by the next exec; end time \
                        is when that was noticed)"
                        .into(),
                ),
                argv: n.argv.clone(),
                started_unix_ms: n.started_unix_ms,
                finished_unix_ms: clock::unix_ms(),
                stdout_sha256: sha256_hex(b""),
                stderr_sha256: sha256_hex(b""),
                run_dir: format!("runs/{}", n.attempt_id),
                host: Some(n.host.clone()),
                ..Default::default()
            };
            append_attempt(dir, &rec)?;
            eprintln!("campaign: {}: recorded as interrupted", n.attempt_id);
            attempts.push(rec);
        }
        std::fs::remove_file(&p).with_context(|| format!("removing {}", p.display()))?;
    }
    Ok(())
}

/// Check a frozen trace against the digest the manifest froze: a missing file
/// is `NO_SUCH_INPUT`, a FIFO, device or directory (also behind a symbolic
/// link) is refused without being opened for a blocking read, and at most
/// the import limit is hashed, so the check can neither hang nor read for
/// ever before the job starts.
fn check_frozen_trace(trace: &Path, want: &str) -> Result<()> {
    if std::fs::metadata(trace).is_err() {
        return Err(refuse(Code::NoSuchInput, format!("{} is missing (the manifest froze a trace)", trace.display())));
    }
    let got = limits::sha256_bounded(trace, Limits::default().max_json_bytes)
        .with_context(|| format!("the frozen trace {}", trace.display()))?;
    if got != want {
        let why = format!("stale: {} hashes to {got}, the manifest froze {want}", trace.display());
        return Err(refuse(Code::Stale, why));
    }
    Ok(())
}

/// A job's program, its arguments and its environment.
type JobCommand = (String, Vec<String>, Vec<(String, String)>);

/// The launcher's program and arguments for `ranks` ranks with `env` forwarded.
fn launcher_prefix(m: &Manifest, env: &[(String, String)]) -> (String, Vec<String>) {
    let mut args = vec!["-n".to_string(), m.spec.ranks.to_string()];
    let prog = match m.spec.launcher.kind {
        // mpirun forwards each variable named with -x
        LauncherKind::Mpirun => {
            args.extend(env.iter().flat_map(|(k, _)| ["-x".to_string(), k.clone()]));
            "mpirun"
        }
        LauncherKind::Srun => "srun",
    };
    args.extend(m.spec.launcher.args.iter().cloned());
    (prog.to_string(), args)
}

/// The configuration a cell runs, and its environment as (name, value) pairs.
fn config_of<'m>(m: &'m Manifest, cell: &Cell) -> Result<(&'m ConfigSpec, Vec<(String, String)>)> {
    let cfg = &m
        .configs
        .iter()
        .find(|c| c.label == cell.label)
        .with_context(|| format!("cell {}: unknown label", cell.cell_id))?
        .config;
    Ok((cfg, cfg.env.iter().map(|(k, v)| (k.clone(), v.clone())).collect()))
}

/// A truth cell's job: the spec's command under the campaign's launcher (or
/// as it is, for `launch = "self"`) with the configuration's environment.
fn truth_command_for<'m>(m: &'m Manifest, cell: &Cell) -> Result<(JobCommand, &'m super::truth::TruthSpec)> {
    let t = m
        .spec
        .truth
        .as_ref()
        .with_context(|| format!("cell {} is a truth cell, and the manifest has no [truth]", cell.cell_id))?;
    let (_, env) = config_of(m, cell)?;
    if m.spec.launcher.kind == LauncherKind::Mpirun || t.launch == super::truth::TruthLaunch::OwnLauncher {
        super::truth::program_present(t)?;
    }
    Ok(match t.launch {
        super::truth::TruthLaunch::Campaign => {
            let (prog, mut args) = launcher_prefix(m, &env);
            args.extend(t.command.iter().cloned());
            ((prog, args, env), t)
        }
        super::truth::TruthLaunch::OwnLauncher => ((t.command[0].clone(), t.command[1..].to_vec(), env), t),
    })
}

fn command_for(m: &Manifest, cell: &Cell, attempt_id: &str, runs: &Path) -> Result<JobCommand> {
    let (cfg, env) = config_of(m, cell)?;
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
    let (prog, mut args) = launcher_prefix(m, &env);
    args.extend(rank_args);
    Ok((prog, args, env))
}

/// Refuses, before any cell is launched, a campaign that cannot run on this
/// host: with the `mpirun` launcher every job runs here, so a `cuda` backend
/// without a usable GPU, or no `mpirun` on `PATH`, would fail every cell
/// with the same error (`srun` jobs run on the allocation's nodes, which
/// this host cannot check). `what` names the campaign or spec in the message.
pub(crate) fn preflight(spec: &CampaignSpec, what: &str) -> Result<()> {
    if spec.launcher.kind != LauncherKind::Mpirun {
        return Ok(());
    }
    let on_path =
        std::env::var_os("PATH").is_some_and(|p| std::env::split_paths(&p).any(|d| d.join("mpirun").is_file()));
    if !on_path {
        crate::refuse!(
            Code::BadArgument,
            "{what}: the launcher is mpirun, and no mpirun is on PATH; no cell was launched (install OpenMPI 4.x or \
                load its module)"
        );
    }
    if spec.backend == "cuda" {
        if let Some(why) = cuda::unavailable_reason() {
            crate::refuse!(
                Code::BadArgument,
                "{what}: backend cuda cannot run on this host ({why}); no cell was launched. With the mpirun launcher \
                    every job runs here: run it on a host with GPUs, or use the srun launcher inside an allocation"
            );
        }
    }
    Ok(())
}

/// The scheduled cells (or only the one at 1-based position `only`) with no
/// successful attempt under an `accepted` manifest that `counts`, in schedule order.
fn cells_left<'m>(
    m: &'m Manifest,
    only: Option<usize>,
    attempts: &[AttemptRecord],
    accepted: &[String],
    counts: impl Fn(&AttemptRecord) -> bool,
) -> Vec<&'m Cell> {
    let success = |a: &AttemptRecord| a.status == AttemptStatus::Succeeded && accepted.contains(&a.manifest_sha256);
    m.schedule
        .iter()
        .enumerate()
        .filter(|(i, _)| only.is_none_or(|n| n == i + 1))
        .map(|(_, c)| c)
        .filter(|c| !attempts.iter().any(|a| a.cell_id == c.cell_id && success(a) && counts(a)))
        .collect()
}

/// The cells [`cells_left`] names, every success counting.
fn cells_without_success(dir: &Path, only: Option<usize>) -> Result<Vec<String>> {
    let (m, sha) = load_manifest(dir)?;
    let attempts = read_attempts(dir)?;
    let accepted = accepted_manifests(dir, &m, &sha)?;
    Ok(cells_left(&m, only, &attempts, &accepted, |_| true).into_iter().map(|c| c.cell_id.clone()).collect())
}

/// [`exec`], then its line on `out`: the cells that succeeded and the failed attempts recorded.
pub fn exec_logged(
    dir: &Path,
    retries: u32,
    only: Option<usize>,
    timeout_s: Option<u64>,
    out: &mut dyn Write,
) -> Result<()> {
    let (ok, failed) = exec(dir, retries, only, timeout_s.map(std::time::Duration::from_secs))?;
    writeln!(
        out,
        "exec: {ok} cells succeeded in this invocation, {failed} failed attempts recorded (all in attempts.jsonl)"
    )?;
    Ok(())
}

/// `campaign exec`: [`exec_logged`], then a refusal (exit 1) naming the cells left without a successful attempt.
pub fn exec_all(
    dir: &Path,
    retries: u32,
    only: Option<usize>,
    timeout_s: Option<u64>,
    out: &mut dyn Write,
) -> Result<()> {
    exec_logged(dir, retries, only, timeout_s, out)?;
    let left = cells_without_success(dir, only)?;
    if !left.is_empty() {
        crate::refuse!(
            Code::FailedAttempt,
            "{}: {} cell(s) have no successful attempt after this exec: {} (their failures are in attempts.jsonl; \
                exec again to retry them)",
            dir.display(),
            left.len(),
            left.join(", ")
        );
    }
    Ok(())
}

/// Run every cell without a successful attempt, in schedule order (or only
/// the cell at 1-based position `only`); each failure is retried up to
/// `retries` times. Returns (succeeded, failed attempts). Records are single
/// `O_APPEND` lines, so concurrent array tasks on a local or POSIX-append
/// file system do not interleave them.
pub fn exec(
    dir: &Path,
    retries: u32,
    only: Option<usize>,
    cell_timeout: Option<std::time::Duration>,
) -> Result<(usize, usize)> {
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
    let host = identity::hostname();
    // a success that overlapped another attempt on its host is no evidence: the cell runs again
    let todo = cells_left(&m, only, &attempts, &accepted, |a| overlapping(a, &attempts).is_none());
    let bar = indicatif::ProgressBar::new(todo.len() as u64);
    bar.set_style(
        indicatif::ProgressStyle::with_template("{prefix} [{bar:30}] {pos}/{len} cells, ETA {eta} {msg}")
            .expect("valid template")
            .progress_chars("=> "),
    );
    bar.set_prefix(m.campaign_id.clone());
    let (mut ok, mut failed) = (0, 0);
    let configs = m.configs.len();
    let mut streak = LauncherStreak::default();
    let total = todo.len();
    for (done, cell) in todo.into_iter().enumerate() {
        for _try in 0..=retries {
            // attempt numbers count records and any directory an interrupted attempt left
            let attempt_id = format!("{}-a{}", cell.cell_id, next_attempt_number(&cell.cell_id, &attempts, &runs));
            // --cell-timeout-s covers the work before the job starts (the frozen trace's check) too
            let cell_started = std::time::Instant::now();
            let truth_mark = if cell.truth { ", truth" } else { "" };
            bar.set_message(format!("round {} {} ({attempt_id}{truth_mark})", cell.round, cell.label));
            let run_dir = runs.join(&attempt_id);
            let remaining = cell_timeout.map(|t| t.saturating_sub(cell_started.elapsed()));
            let (prog, args, env, truth, timeout, cwd) = if cell.truth {
                let ((prog, args, env), t) = truth_command_for(&m, cell)?;
                // the job runs in its own folder, holding the frozen inputs
                std::fs::create_dir_all(&run_dir).with_context(|| format!("creating {}", run_dir.display()))?;
                let inputs = super::truth::place_inputs(dir, &m.truth_inputs, &run_dir)?;
                let own = std::time::Duration::from_secs(t.timeout_s);
                (prog, args, env, Some((t, inputs)), Some(remaining.map_or(own, |r| r.min(own))), Some(run_dir.clone()))
            } else {
                let (prog, args, env) = command_for(&m, cell, &attempt_id, &runs)?;
                (prog, args, env, None, remaining, None)
            };
            let started = clock::unix_ms();
            let note_path = dir.join(INFLIGHT_FILE).join(format!("{attempt_id}.json"));
            let argv: Vec<String> = std::iter::once(prog.clone()).chain(args.iter().cloned()).collect();
            let wall = std::time::Instant::now();
            let out = run_job(&prog, &args, &env, cwd.as_deref(), timeout, |pgid| {
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
                write_json_new(&note_path, &note)
            });
            let wall_s = wall.elapsed().as_secs_f64();
            let finished = clock::unix_ms();
            let timed_out = matches!(out, Ok((_, true)));
            let limit = if truth.is_some() { "truth.timeout_s or --cell-timeout-s" } else { "--cell-timeout-s" };
            let limit_s = timeout.map_or(0.0, |t| t.as_secs_f64());
            let stopped = format!("cell timeout: the job ran longer than {limit_s:.0} s ({limit}) and was stopped");
            let (code, stdout, stderr, spawn_err) = match out {
                Ok((o, timed_out)) => (o.status.code(), o.stdout, o.stderr, timed_out.then_some(stopped)),
                Err(e) => (None, Vec::new(), Vec::new(), Some(format!("could not start {prog}: {e}"))),
            };
            write_new_atomic(&logs.join(format!("{attempt_id}.stdout")), &stdout)?;
            write_new_atomic(&logs.join(format!("{attempt_id}.stderr")), &stderr)?;
            let launch_failure = |c: Option<i32>| {
                format!(
                    "launcher exited {}; {}",
                    c.map(|c| c.to_string()).unwrap_or_else(|| "by signal".into()),
                    failure_line(&stderr)
                )
            };
            let (record_path, record, failure): (PathBuf, Option<RunRecord>, Option<String>) = match truth {
                Some((t, inputs)) => {
                    let metric = super::truth::read_metric(&t.metric, wall_s, &stdout, &stderr, &run_dir);
                    let failure = match (&spawn_err, code, &metric) {
                        (Some(e), _, _) => Some(e.clone()),
                        (None, Some(0), Ok(_)) => None,
                        (None, Some(0), Err(why)) => Some(why.clone()),
                        (None, c, _) => Some(launch_failure(c)),
                    };
                    let (reading, metric_files) = match metric {
                        Ok((r, f)) => (Some(r), f),
                        Err(_) => (None, Vec::new()),
                    };
                    let (cfg, _) = config_of(&m, cell)?;
                    let rec = super::truth::TruthRecord {
                        format_version: super::truth::TRUTH_RECORD_FORMAT_VERSION,
                        attempt_id: attempt_id.clone(),
                        cell_id: cell.cell_id.clone(),
                        label: cell.label.clone(),
                        round: cell.round,
                        argv: argv.clone(),
                        config_env: cfg.env.clone(),
                        env: super::truth::recorded_env(&cfg.env),
                        cwd: format!("runs/{attempt_id}"),
                        inputs,
                        exit_code: code,
                        timed_out,
                        wall_s,
                        started_unix_ms: started,
                        finished_unix_ms: finished,
                        host: host.clone(),
                        stdout_sha256: sha256_hex(&stdout),
                        stderr_sha256: sha256_hex(&stderr),
                        metric_files,
                        metric: reading,
                        failure: failure.clone(),
                    };
                    let p = run_dir.join(super::truth::TRUTH_FILE);
                    write_json_new(&p, &rec)?;
                    (p, None, failure)
                }
                None => {
                    let run_json = run_dir.join(RUN_FILE);
                    let record: Option<RunRecord> =
                        std::fs::read(&run_json).ok().and_then(|b| serde_json::from_slice(&b).ok());
                    let failure = match (&spawn_err, code, &record) {
                        (Some(e), _, _) => Some(e.clone()),
                        (None, Some(0), Some(_)) => None,
                        (None, Some(0), None) => Some("exit 0 but no run.json was written".into()),
                        (None, c, _) => Some(launch_failure(c)),
                    };
                    (run_json, record, failure)
                }
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
                run_json_sha256: sha256_file(&record_path).ok(),
                shards: record.as_ref().map(|r| r.shards.clone()).unwrap_or_default(),
                identity_sha256: record.as_ref().map(|r| r.rank0_identity_sha256.clone()),
                host: Some(host.clone()),
            };
            append_attempt(dir, &rec)?;
            let _ = std::fs::remove_file(&note_path);
            let succeeded = rec.status == AttemptStatus::Succeeded;
            // the job never reached rank 0's run directory and left no error of a program it started:
            // the launcher itself failed (or could not be started)
            let launcher_failed = !cell.truth
                && !timed_out
                && rec.failure.is_some()
                && (spawn_err.is_some()
                    || (!run_dir.exists() && telling_line(&String::from_utf8_lossy(&stderr)).is_none()));
            // a truth cell runs the spec's own command: its failures neither count nor break the streak
            let every_config = !cell.truth
                && streak.note(cell.round, &cell.label, rec.failure.as_deref().filter(|_| launcher_failed), configs);
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
            if every_config {
                bar.finish_and_clear();
                crate::refuse!(
                    Code::LauncherFailed,
                    "campaign {}: stopped in round {}: the launcher failed the same way for every configuration ({}); \
                     the {} cell(s) left would fail the same way and were not run. Every attempt so far is recorded in \
                     attempts.jsonl; fix the launcher and run exec again",
                    dir.display(),
                    cell.round,
                    streak.failure,
                    total - done - 1
                );
            }
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
    cwd: Option<&Path>,
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
        .current_dir(cwd.unwrap_or(Path::new(".")))
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

/// Whether stderr holds an error line of a program the launcher started (an
/// "error:" with words after it): CommCanary's own, or srun's.
fn telling_line(text: &str) -> Option<&str> {
    text.lines().find(|l| l.split_once("error:").is_some_and(|(_, rest)| rest.chars().any(|c| c.is_alphanumeric())))
}

/// The most telling stderr line: CommCanary's own error if there is one,
/// else the first line that explains (a launcher's banner opens with what
/// went wrong and ends with advice; its rules of dashes say nothing).
fn failure_line(stderr: &[u8]) -> String {
    let text = String::from_utf8_lossy(stderr);
    let rule = |l: &str| {
        let t = l.trim();
        t.is_empty() || t.chars().all(|c| "-=*_#".contains(c))
    };
    let first = text.lines().find(|l| !rule(l));
    match telling_line(&text).or(first) {
        Some(l) => format!("stderr: {}", l.trim()),
        None => "no stderr".into(),
    }
}

/// Consecutive launcher failures of one round: the failure text and the
/// configurations it hit. When it has hit every configuration, the launcher
/// (not a configuration) is what fails, and every later cell would too.
#[derive(Default)]
struct LauncherStreak {
    round: u32,
    failure: String,
    labels: std::collections::BTreeSet<String>,
}

impl LauncherStreak {
    /// Note one attempt; true when `failure` has now hit every one of `configs` in this round.
    fn note(&mut self, round: u32, label: &str, launcher_failure: Option<&str>, configs: usize) -> bool {
        match launcher_failure {
            Some(f) if self.round == round && self.failure == f => {
                self.labels.insert(label.to_string());
            }
            Some(f) => {
                *self = LauncherStreak {
                    round,
                    failure: f.to_string(),
                    labels: std::iter::once(label.to_string()).collect(),
                };
            }
            None => *self = LauncherStreak::default(),
        }
        configs > 0 && self.labels.len() >= configs
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn failure_line_is_the_first_explanatory_line_of_a_banner() {
        let banner =
            b"--------------------------------------------------------------------------\nmpirun has detected \
            an attempt to run as root.\n\nRunning as root is *strongly* discouraged.\nWe reiterate our advice against \
                doing so - please proceed at your own \
                    risk.\n--------------------------------------------------------------------------\n";
        assert_eq!(failure_line(banner), "stderr: mpirun has detected an attempt to run as root.");
        assert_eq!(
            failure_line(b"noise\ncommcanary: error: refused[BAD_ARGUMENT]: x\n"),
            "stderr: commcanary: error: refused[BAD_ARGUMENT]: x"
        );
        assert_eq!(failure_line(b"\n====\n\n"), "no stderr");
    }

    #[test]
    fn a_streak_stops_only_when_every_configuration_of_a_round_failed_the_same_way() {
        let mut s = LauncherStreak::default();
        assert!(!s.note(1, "a", Some("x"), 3));
        assert!(!s.note(1, "a", Some("x"), 3)); // a retry of the same cell adds nothing
        assert!(!s.note(1, "b", Some("x"), 3));
        assert!(s.note(1, "c", Some("x"), 3));
        // another failure text, a success, or a new round starts over
        let mut s = LauncherStreak::default();
        for (round, label, f) in [
            (1, "a", Some("x")),
            (1, "b", Some("y")),
            (1, "c", Some("y")),
            (2, "a", Some("y")),
            (2, "b", None),
            (2, "c", Some("y")),
        ] {
            assert!(!s.note(round, label, f, 3), "{round} {label}");
        }
    }
}
