//! Truth cells: the user's own job run as cells of the campaign.
//!
//! Consumes the spec's `[truth]` table (the command, how its metric is read,
//! its time limit, how it is launched, input files to freeze). Produces, per
//! truth attempt, `truth.json` in the attempt's run directory: the command and
//! environment it ran under, its exit code and wall time, the metric's value
//! with the raw text it was read from, and the digests of stdout, stderr and
//! every file read. Refuses at plan: a command not found, a regex that does not
//! compile or has more than one capture group, a JSON metric path outside the
//! cell's folder, a unit or field left empty, missing inputs. A job whose metric
//! cannot be read is a failed attempt (retried like any cell), never dropped.
use crate::core::fsutil::{sha256_file, sha256_hex, write_new_atomic};
use crate::core::refusal::{refuse, Code};
use crate::core::{identity, limits, ranges};
use anyhow::{bail, Context, Result};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// `truth.json`'s format version.
pub const TRUTH_RECORD_FORMAT_VERSION: u32 = 1;

/// The record a truth attempt leaves in its run directory.
pub const TRUTH_FILE: &str = "truth.json";

/// The folder of the frozen truth inputs in a campaign directory.
pub(crate) const TRUTH_INPUTS_DIR: &str = "truth-inputs";

/// Marks a truth cell's id: `rNN-LABEL@truth` (no configuration name holds `@`).
pub const TRUTH_CELL_SUFFIX: &str = "@truth";

/// The user's real job, run under every configuration.
#[derive(schemars::JsonSchema, Serialize, Deserialize, Clone, Debug, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct TruthSpec {
    /// The job's command line (program first), run in the cell's own folder.
    pub command: Vec<String>,
    /// How the job's cost is read: `"wall"` (the job's wall time), a regex over
    /// its output, or a field of a JSON file it writes.
    pub metric: MetricSpec,
    /// Stop a job after this many seconds and record the attempt failed (1 to 604800).
    #[serde(default = "default_timeout_s")]
    pub timeout_s: u64,
    /// `campaign`: under the campaign's launcher with `ranks` ranks; `self`:
    /// run as it is (a command that starts its own ranks: torchrun, srun inside).
    #[serde(default)]
    pub launch: TruthLaunch,
    /// Files (relative to the spec) the job reads: frozen into the campaign with
    /// their SHA-256 at plan, copied into each truth cell's folder before it runs.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub inputs: Vec<String>,
    /// Run only the truth cells (no proxy cells): a campaign that ranks the job alone.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub only: bool,
    /// The configurations the job runs under (absent: every configuration).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub configs: Option<Vec<String>>,
}

impl TruthSpec {
    /// Whether the job runs under configuration `name`.
    pub fn runs_under(&self, name: &str) -> bool {
        self.configs.as_ref().is_none_or(|c| c.iter().any(|x| x == name))
    }
}

fn default_timeout_s() -> u64 {
    600
}

/// How a truth job is started.
#[derive(schemars::JsonSchema, Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, Default)]
#[serde(rename_all = "lowercase")]
pub enum TruthLaunch {
    /// Under the campaign's launcher (`mpirun -n RANKS`, `srun -n RANKS`).
    #[default]
    Campaign,
    /// As it is: the command starts its own ranks.
    #[serde(rename = "self")]
    OwnLauncher,
}

/// Which way is better.
#[derive(schemars::JsonSchema, Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
pub enum Better {
    /// A time or cost.
    Lower,
    /// A rate (throughput): ranked by its reciprocal.
    Higher,
}

/// Where the metric comes from.
#[derive(schemars::JsonSchema, Serialize, Deserialize, Clone, Debug, PartialEq)]
#[serde(untagged)]
pub enum MetricSpec {
    /// `"wall"`: the job's wall time in seconds, measured by `exec` around the launcher.
    Named(String),
    /// A number the job prints.
    Regex(RegexMetric),
    /// A number in a JSON file the job writes.
    Json(JsonMetric),
}

/// A number the job prints, captured by a regular expression.
#[derive(schemars::JsonSchema, Serialize, Deserialize, Clone, Debug, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct RegexMetric {
    /// Regular expression (Rust `regex` syntax); its one capture group, or the whole match, is the number.
    pub regex: String,
    /// Unit of the number (`s`, `ms`, `steps/s`, ...).
    pub unit: String,
    /// Which way is better.
    pub better: Better,
    /// Which output is searched.
    #[serde(default)]
    pub stream: Stream,
    /// With several matches: `last` (default), `first` or `sum`.
    #[serde(default)]
    pub pick: Pick,
}

/// A number in a JSON file the job writes.
#[derive(schemars::JsonSchema, Serialize, Deserialize, Clone, Debug, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct JsonMetric {
    /// The file, relative to the cell's folder.
    pub json: String,
    /// Dotted path to the number (`a.b.0.c`; digits index arrays).
    pub field: String,
    /// Unit of the number.
    pub unit: String,
    /// Which way is better.
    pub better: Better,
}

/// Output stream searched by a regex metric.
#[derive(schemars::JsonSchema, Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, Default)]
#[serde(rename_all = "lowercase")]
pub enum Stream {
    /// Standard output.
    #[default]
    Stdout,
    /// Standard error.
    Stderr,
}

/// Which of several matches counts.
#[derive(schemars::JsonSchema, Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, Default)]
#[serde(rename_all = "lowercase")]
pub enum Pick {
    /// The last match.
    #[default]
    Last,
    /// The first match.
    First,
    /// The sum of every match.
    Sum,
}

/// The metric in words and its direction: (name, unit, better).
pub fn metric_words(m: &MetricSpec) -> (String, String, Better) {
    match m {
        MetricSpec::Named(_) => ("wall time".into(), "s".into(), Better::Lower),
        MetricSpec::Regex(r) => (format!("/{}/ on {}", r.regex, stream_name(r.stream)), r.unit.clone(), r.better),
        MetricSpec::Json(j) => (format!("{} in {}", j.field, j.json), j.unit.clone(), j.better),
    }
}

fn stream_name(s: Stream) -> &'static str {
    match s {
        Stream::Stdout => "stdout",
        Stream::Stderr => "stderr",
    }
}

fn bad_spec(field: &str, why: impl std::fmt::Display) -> anyhow::Error {
    refuse(Code::BadSpec, format!("{field}: {why}"))
}

/// Where `program` would be found: a path with a `/` as it is (relative to
/// `base`), else the first executable file of that name on `PATH`.
pub(crate) fn find_program(program: &str, base: &Path) -> Option<PathBuf> {
    use std::os::unix::fs::PermissionsExt;
    let executable = |p: &Path| std::fs::metadata(p).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0);
    if program.contains('/') {
        let p = base.join(program);
        return executable(&p).then_some(p);
    }
    std::env::split_paths(&std::env::var_os("PATH")?).map(|d| d.join(program)).find(|p| executable(p))
}

impl TruthSpec {
    /// Everything `plan` can check before a job runs; `spec_dir` resolves inputs
    /// and a program named by a relative path.
    pub fn validate(&self, spec_dir: &Path, launcher_on_this_host: bool) -> Result<()> {
        let Some(program) = self.command.first() else {
            return Err(bad_spec("truth.command", "is empty; name the job's program first"));
        };
        if program.is_empty() || self.command.iter().any(|a| a.contains('\0')) {
            return Err(bad_spec("truth.command", "an empty program name or an argument holding a NUL byte"));
        }
        // the job runs on this host under mpirun or as it is; srun's nodes cannot be checked from here
        if (launcher_on_this_host || self.launch == TruthLaunch::OwnLauncher)
            && find_program(program, spec_dir).is_none()
        {
            let on_path = if program.contains('/') { "" } else { " on PATH" };
            let why = format!("program {program:?} is not found{on_path} (install it, or name it by its path)");
            return Err(bad_spec("truth.command", why));
        }
        if program.contains('/') && !Path::new(program).is_absolute() {
            let why = format!(
                "{program:?} is a relative path, and the job runs in its cell's own folder: name the program \
                    by an absolute path or on PATH"
            );
            return Err(bad_spec("truth.command", why));
        }
        ranges::int("truth.timeout_s", self.timeout_s, 1, 604_800)
            .map_err(|e| bad_spec("truth.timeout_s", format!("{e:#}")))?;
        match &self.metric {
            MetricSpec::Named(n) if n == "wall" => {}
            MetricSpec::Named(n) => {
                let why = format!(
                    "{n:?}: expected \"wall\", {{ regex = ..., unit = ..., better = ... }} or \
                        {{ json = ..., field = ..., unit = ..., better = ... }}"
                );
                return Err(bad_spec("truth.metric", why));
            }
            MetricSpec::Regex(r) => {
                let re = regex::Regex::new(&r.regex)
                    .map_err(|e| bad_spec("truth.metric.regex", format!("{:?} does not compile: {e}", r.regex)))?;
                if re.captures_len() > 2 {
                    let why = format!(
                        "{:?} has {} capture groups; use one (the number) or none",
                        r.regex,
                        re.captures_len() - 1
                    );
                    return Err(bad_spec("truth.metric.regex", why));
                }
                if r.unit.trim().is_empty() {
                    let why = "is empty; say what the number measures (s, ms, steps/s)";
                    return Err(bad_spec("truth.metric.unit", why));
                }
            }
            MetricSpec::Json(j) => {
                let p = Path::new(&j.json);
                if j.json.is_empty() || !p.components().all(|c| matches!(c, std::path::Component::Normal(_))) {
                    let why = format!("{:?}: name a file inside the cell's folder (relative, no '..')", j.json);
                    return Err(bad_spec("truth.metric.json", why));
                }
                if j.field.is_empty() || j.field.split('.').any(str::is_empty) {
                    return Err(bad_spec("truth.metric.field", format!("{:?}: a dotted path such as a.b.0", j.field)));
                }
                if j.unit.trim().is_empty() {
                    return Err(bad_spec("truth.metric.unit", "is empty; say what the number measures"));
                }
            }
        }
        let mut names = std::collections::BTreeSet::new();
        for i in &self.inputs {
            let name = input_name(i).ok_or_else(|| bad_spec("truth.inputs", format!("{i:?} names no file")))?;
            if !names.insert(name.to_string()) {
                let why =
                    format!("two inputs are named {name:?}; each is copied into the cell's folder under its own name");
                return Err(bad_spec("truth.inputs", why));
            }
            let src = spec_dir.join(i);
            if !std::fs::metadata(&src).is_ok_and(|m| m.is_file()) {
                return Err(bad_spec("truth.inputs", format!("{} is not a file", src.display())));
            }
        }
        Ok(())
    }
}

/// The name an input is copied under (its file name).
pub(crate) fn input_name(rel: &str) -> Option<&str> {
    Path::new(rel).file_name().and_then(|n| n.to_str()).filter(|n| !n.is_empty())
}

/// Read, bound and freeze every truth input: (name, bytes, SHA-256).
pub(crate) fn read_inputs(t: &TruthSpec, spec_dir: &Path) -> Result<Vec<(String, Vec<u8>, String)>> {
    t.inputs
        .iter()
        .map(|i| {
            let src = spec_dir.join(i);
            let bytes = limits::read_bounded(&src, limits::MAX_TEXT_TABLE_BYTES)
                .map_err(|e| bad_spec("truth.inputs", format!("{}: {e:#}", src.display())))?;
            let sha = sha256_hex(&bytes);
            Ok((input_name(i).expect("validated").to_string(), bytes, sha))
        })
        .collect()
}

/// The metric as read from one job.
#[derive(schemars::JsonSchema, Serialize, Deserialize, Clone, Debug, PartialEq)]
pub struct MetricReading {
    /// Where it was read: `wall clock`, `stdout`, `stderr` or `file NAME`.
    pub source: String,
    /// The text it was read from: the matched lines (up to 4 KiB), the JSON field, or the seconds.
    pub raw: String,
    /// Matches found (regex), else 1.
    pub matches: usize,
    /// The value, in `unit`.
    pub value: f64,
    /// Unit.
    pub unit: String,
    /// Which way is better.
    pub better: Better,
}

impl MetricReading {
    /// The value as a cost (lower is better): the value itself, or its reciprocal for a rate.
    pub fn cost(&self) -> f64 {
        match self.better {
            Better::Lower => self.value,
            Better::Higher => 1.0 / self.value,
        }
    }
}

/// One truth attempt's record (`truth.json`).
#[derive(schemars::JsonSchema, Serialize, Deserialize, Clone, Debug, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct TruthRecord {
    /// Format version.
    pub format_version: u32,
    /// Attempt.
    pub attempt_id: String,
    /// Cell.
    pub cell_id: String,
    /// Label (blinded or the name).
    pub label: String,
    /// Round.
    pub round: u32,
    /// Program and arguments as launched.
    pub argv: Vec<String>,
    /// The configuration's environment, as set for the job.
    pub config_env: BTreeMap<String, String>,
    /// Every recorded variable (NCCL_, OMPI_MCA_, UCX_, CUDA_ prefixes, PATH, LD_*) of the job's environment.
    pub env: Vec<(String, String)>,
    /// Folder it ran in (relative to the campaign).
    pub cwd: String,
    /// Frozen inputs copied into the folder: (name, SHA-256).
    pub inputs: Vec<(String, String)>,
    /// Exit code (absent when killed by a signal).
    pub exit_code: Option<i32>,
    /// Stopped at the time limit.
    pub timed_out: bool,
    /// Wall time of the launcher, seconds (monotonic clock).
    pub wall_s: f64,
    /// Start (Unix ms).
    pub started_unix_ms: u64,
    /// End (Unix ms).
    pub finished_unix_ms: u64,
    /// Host `exec` ran on.
    pub host: String,
    /// SHA-256 of stdout (kept as `attempts/ATTEMPT.stdout`).
    pub stdout_sha256: String,
    /// SHA-256 of stderr.
    pub stderr_sha256: String,
    /// Files the metric was read from: (name relative to the cell's folder, SHA-256).
    pub metric_files: Vec<(String, String)>,
    /// The metric, when it could be read.
    pub metric: Option<MetricReading>,
    /// Why the attempt failed, when it did.
    pub failure: Option<String>,
}

/// The most text of matched lines kept in a reading.
const RAW_MAX_BYTES: usize = 4096;

/// Read the metric of one job from its output and folder. `Err` says why it
/// cannot be read; the value must be a finite positive number.
pub fn read_metric(
    m: &MetricSpec,
    wall_s: f64,
    stdout: &[u8],
    stderr: &[u8],
    cell_dir: &Path,
) -> std::result::Result<(MetricReading, Vec<(String, String)>), String> {
    let positive = |v: f64, raw: &str| -> std::result::Result<f64, String> {
        if v.is_finite() && v > 0.0 {
            Ok(v)
        } else {
            Err(format!("metric: read {v} from {raw:?}; a cost or rate must be a positive number"))
        }
    };
    match m {
        MetricSpec::Named(_) => Ok((
            MetricReading {
                source: "wall clock".into(),
                raw: format!("{wall_s:.6}"),
                matches: 1,
                value: positive(wall_s, "wall clock")?,
                unit: "s".into(),
                better: Better::Lower,
            },
            Vec::new(),
        )),
        MetricSpec::Regex(r) => {
            let re = regex::Regex::new(&r.regex)
                .map_err(|e| format!("metric: regex {:?} does not compile: {e}", r.regex))?;
            let text = String::from_utf8_lossy(match r.stream {
                Stream::Stdout => stdout,
                Stream::Stderr => stderr,
            });
            let mut values = Vec::new();
            let mut raw = String::new();
            for c in re.captures_iter(&text) {
                let whole = c.get(0).expect("group 0");
                let got = c.get(1).unwrap_or(whole).as_str();
                let v = (got.trim().parse::<f64>().ok().filter(|v| v.is_finite()))
                    .ok_or_else(|| format!("metric: /{}/ matched {:?}, which is not a number", r.regex, got))?;
                values.push(v);
                if raw.len() < RAW_MAX_BYTES {
                    if !raw.is_empty() {
                        raw.push('\n');
                    }
                    raw.push_str(whole.as_str());
                }
            }
            let value = match (r.pick, values.first(), values.last()) {
                (_, None, _) => {
                    return Err(format!(
                        "metric: /{}/ matched nothing in {} ({} bytes)",
                        r.regex,
                        stream_name(r.stream),
                        text.len()
                    ))
                }
                (Pick::First, Some(v), _) => *v,
                (Pick::Last, _, Some(v)) => *v,
                (Pick::Sum, _, _) => values.iter().sum(),
                (Pick::Last, _, None) => unreachable!("a first match is a last match"),
            };
            raw.truncate(RAW_MAX_BYTES);
            let value = positive(value, &raw)?;
            Ok((
                MetricReading {
                    source: stream_name(r.stream).into(),
                    raw,
                    matches: values.len(),
                    value,
                    unit: r.unit.clone(),
                    better: r.better,
                },
                Vec::new(),
            ))
        }
        MetricSpec::Json(j) => {
            let p = cell_dir.join(&j.json);
            let bytes =
                limits::read_bounded(&p, limits::MAX_JSON_BYTES).map_err(|e| format!("metric: {}: {e:#}", j.json))?;
            let doc: serde_json::Value =
                serde_json::from_slice(&bytes).map_err(|e| format!("metric: {} is not JSON: {e}", j.json))?;
            let mut at = &doc;
            for key in j.field.split('.') {
                let next = match at {
                    serde_json::Value::Object(o) => o.get(key),
                    serde_json::Value::Array(a) => key.parse::<usize>().ok().and_then(|i| a.get(i)),
                    _ => None,
                };
                at = next.ok_or_else(|| format!("metric: {} has no field {} (stopped at {key:?})", j.json, j.field))?;
            }
            let raw = at.to_string();
            let v = at.as_f64().ok_or_else(|| format!("metric: {}.{} is {raw}, not a number", j.json, j.field))?;
            Ok((
                MetricReading {
                    source: format!("file {}", j.json),
                    raw: raw.clone(),
                    matches: 1,
                    value: positive(v, &raw)?,
                    unit: j.unit.clone(),
                    better: j.better,
                },
                vec![(j.json.clone(), sha256_hex(&bytes))],
            ))
        }
    }
}

/// The environment a truth job runs under, as recorded: the recorded
/// prefixes and names of this process's environment with the configuration's over them.
pub(crate) fn recorded_env(config_env: &BTreeMap<String, String>) -> Vec<(String, String)> {
    use crate::core::identity::is_recorded;
    let mut env: BTreeMap<String, String> = identity::recorded_env().into_iter().collect();
    env.extend(config_env.iter().filter(|(k, _)| is_recorded(k)).map(|(k, v)| (k.clone(), v.clone())));
    env.into_iter().collect()
}

/// Copy the frozen inputs into a truth cell's folder, each checked against its digest.
pub(crate) fn place_inputs(
    campaign: &Path,
    frozen: &BTreeMap<String, String>,
    cell_dir: &Path,
) -> Result<Vec<(String, String)>> {
    let mut out = Vec::new();
    for (name, want) in frozen {
        let src = campaign.join(TRUTH_INPUTS_DIR).join(name);
        let bytes = limits::read_bounded(&src, limits::MAX_TEXT_TABLE_BYTES)
            .with_context(|| format!("the frozen truth input {}", src.display()))?;
        let got = sha256_hex(&bytes);
        if &got != want {
            crate::refuse!(Code::Stale, "stale: {} hashes to {got}, the manifest froze {want}", src.display());
        }
        write_new_atomic(&cell_dir.join(name), &bytes)?;
        out.push((name.clone(), got));
    }
    Ok(out)
}

/// What the attempt log says of a truth attempt, as `verify` checks its record against it.
pub(crate) struct AttemptFacts<'a> {
    /// Attempt id (its stdout and stderr are `attempts/ID.stdout|stderr`).
    pub(crate) attempt_id: &'a str,
    /// Label.
    pub(crate) label: &'a str,
    /// Command line launched.
    pub(crate) argv: &'a [String],
    /// Digest of stdout.
    pub(crate) stdout_sha256: &'a str,
    /// Digest of stderr.
    pub(crate) stderr_sha256: &'a str,
}

/// Check a selected truth attempt's record against what is kept beside it:
/// its digest, its cell, stdout and stderr as stored, the metric read again
/// from them (or from the files it names), the configuration's environment.
/// Returns the record.
pub(crate) fn check_record(
    campaign: &Path,
    run_dir: &str,
    want_sha256: &str,
    attempt: &AttemptFacts<'_>,
    truth: &TruthSpec,
    config_env: &BTreeMap<String, String>,
) -> std::result::Result<TruthRecord, (Code, String)> {
    let p = campaign.join(run_dir).join(TRUTH_FILE);
    let bytes = limits::read_bounded(&p, limits::MAX_JSON_BYTES)
        .map_err(|e| (Code::NoSuchInput, format!("{}: {e:#}", p.display())))?;
    let got = sha256_hex(&bytes);
    if got != want_sha256 {
        return Err((Code::Stale, format!("stale: {} hashes to {got}, recorded {want_sha256}", p.display())));
    }
    let r: TruthRecord = serde_json::from_slice(&bytes)
        .map_err(|e| (Code::BadFormat, format!("{}: not a truth record: {e}", p.display())))?;
    if r.format_version != TRUTH_RECORD_FORMAT_VERSION {
        return Err((
            Code::UnsupportedVersion,
            format!("{}: format {} (this build reads {TRUTH_RECORD_FORMAT_VERSION})", p.display(), r.format_version),
        ));
    }
    let contra = |why: String| (Code::IdentityContradiction, format!("{}: {why}", p.display()));
    // ids and rounds are renumbered by `campaign join`; the label, the command and the
    // digests of what the job printed bind the record to its attempt
    if r.label != attempt.label {
        return Err(contra(format!("names label {}, the attempt log says {}", r.label, attempt.label)));
    }
    if r.argv != attempt.argv || !r.argv.ends_with(&truth.command) {
        return Err(contra(format!(
            "ran {:?}; the attempt log and the manifest's truth.command say otherwise",
            r.argv
        )));
    }
    if &r.config_env != config_env {
        return Err(contra(format!("ran under {:?}, the configuration sets {:?}", r.config_env, config_env)));
    }
    if r.stdout_sha256 != attempt.stdout_sha256 || r.stderr_sha256 != attempt.stderr_sha256 {
        return Err(contra("its stdout or stderr digest differs from the attempt log's".into()));
    }
    let logs = campaign.join("attempts");
    let read_log = |ext: &str, want: &str| -> std::result::Result<Vec<u8>, (Code, String)> {
        let lp = logs.join(format!("{}.{ext}", attempt.attempt_id));
        let b = limits::read_bounded(&lp, limits::MAX_ATTEMPTS_LOG_BYTES)
            .map_err(|e| (Code::NoSuchInput, format!("{}: {e:#}", lp.display())))?;
        if sha256_hex(&b) != want {
            return Err((Code::Stale, format!("stale: {} does not hash to the recorded {want}", lp.display())));
        }
        Ok(b)
    };
    let stdout = read_log("stdout", &r.stdout_sha256)?;
    let stderr = read_log("stderr", &r.stderr_sha256)?;
    let cell_dir = campaign.join(run_dir);
    for (name, sha) in &r.metric_files {
        let p = cell_dir.join(name);
        if sha256_file(&p).ok().as_ref() != Some(sha) {
            return Err((Code::Stale, format!("stale: the metric file {} no longer hashes to {sha}", p.display())));
        }
    }
    let Some(m) = &r.metric else {
        return Err((
            Code::FailedAttempt,
            format!("{}: no metric: {}", p.display(), r.failure.clone().unwrap_or_default()),
        ));
    };
    let (again, _) = read_metric(&truth.metric, r.wall_s, &stdout, &stderr, &cell_dir)
        .map_err(|e| (Code::IdentityContradiction, format!("{}: read again, {e}", p.display())))?;
    if again.value.to_bits() != m.value.to_bits() || again.unit != m.unit || again.better != m.better {
        return Err(contra(format!(
            "records {} {}, its kept output reads {} {}",
            m.value, m.unit, again.value, again.unit
        )));
    }
    if r.exit_code != Some(0) || r.timed_out || r.failure.is_some() {
        return Err((
            Code::FailedAttempt,
            format!(
                "{}: exit {:?}, timed out {}, {}",
                p.display(),
                r.exit_code,
                r.timed_out,
                r.failure.clone().unwrap_or_default()
            ),
        ));
    }
    Ok(r)
}

/// Refuse a program that is not there, at exec time too (an installed
/// application removed after plan fails every cell the same way).
pub(crate) fn program_present(t: &TruthSpec) -> Result<()> {
    let program = &t.command[0];
    if find_program(program, Path::new("/")).is_none() {
        bail!("truth.command: program {program:?} is not found on this host");
    }
    Ok(())
}
