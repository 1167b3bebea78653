//! The pick in the form the user deploys, and its confirmation on new rounds.
//!
//! `export-pick` consumes an analyzed campaign (its manifest, its
//! `report/report.json` read through the report type, its blinding) and
//! produces a sourceable env file of the winning configuration: the truth's
//! best when the campaign ran its job, else the named phase's rank 1.
//! `confirm` consumes the campaign and such a file, and produces a new
//! truth-only campaign beside it: the job under the file's environment
//! against the default (no variable set) in N new interleaved rounds, and
//! the gain with its interval. Refuses: a campaign never analyzed, a phase it
//! did not run, a file line that is not `export NAME='VALUE'`, a campaign
//! without `[truth]` to confirm with, fewer than 2 rounds.
use crate::analysis::Report;
use crate::campaign::spec::{CampaignSpec, ConfigSpec, MIN_ANALYZED_ROUNDS};
use crate::campaign::{chain, truth};
use crate::core::refusal::{refuse, Code};
use crate::core::workload::Phase;
use crate::core::{clock, fsutil, limits, ranges};
use crate::report::campaign;
use anyhow::{Context, Result};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// First line of every exported file.
const HEADER: &str = "# commcanary export-pick";

/// A value in single quotes for a POSIX shell (`'` becomes `'\''`).
fn shell_quote(v: &str) -> String {
    format!("'{}'", v.replace('\'', "'\\''"))
}

/// Read the campaign's report through its type.
fn read_report(dir: &Path) -> Result<Report> {
    let p = dir.join("report").join("report.json");
    if !p.exists() {
        crate::refuse!(
            Code::NoSuchInput,
            "{} is missing: run `campaign analyze {}` first (a pick is read from the analysis)",
            p.display(),
            dir.display()
        );
    }
    let bytes = limits::read_bounded(&p, limits::MAX_JSON_BYTES)?;
    serde_json::from_slice(&bytes)
        .map_err(|e| refuse(Code::BadFormat, format!("{}: not a campaign report: {e}", p.display())))
}

/// What was picked, and why, in words.
pub struct Picked {
    /// Configuration name.
    pub name: String,
    /// Its environment.
    pub env: BTreeMap<String, String>,
    /// How it was chosen.
    pub why: String,
}

/// The winner: the truth's rank 1 (`by` = None or `truth`), or a phase's rank 1.
pub fn pick(dir: &Path, by: Option<&str>) -> Result<Picked> {
    let (m, sha) = chain::load_manifest(dir)?;
    let r = read_report(dir)?;
    if r.context.manifest_sha256 != sha {
        crate::refuse!(
            Code::StaleManifest,
            "{}/report/report.json was made for manifest {}, not {sha}",
            dir.display(),
            r.context.manifest_sha256
        );
    }
    let (label, why) = match (by, &r.truth) {
        (None | Some("truth"), Some(t)) => {
            let row = t.rows.iter().find(|x| x.rank == 1).context("the truth ranks no configuration")?;
            let best = if t.best_set.len() == 1 {
                "alone in the best set".to_string()
            } else {
                format!("best set {}", t.best_set.join(", "))
            };
            (
                row.label.clone(),
                format!(
                    "the real job's rank 1 ({} median {:.4} {}, P(best) {:.2}; {best})",
                    t.metric, row.median, t.unit, row.p_best
                ),
            )
        }
        (Some("truth"), None) => {
            crate::refuse!(Code::BadArgument, "--by truth: campaign {} ran no [truth]; name a phase", dir.display())
        }
        (by, _) => {
            let phase: Phase = by.unwrap_or("blocking").parse()?;
            let p = r
                .phases
                .iter()
                .find(|p| p.phase == phase)
                .with_context(|| format!("campaign {} did not run phase {phase}", dir.display()))?;
            let row = p.rows.iter().find(|x| x.rank == 1).context("the phase ranks no configuration")?;
            (
                row.label.clone(),
                format!(
                    "phase {phase} rank 1 (median {:.1} us, P(best) {:.2}; a proxy, not the real job)",
                    row.median_us, row.p_best
                ),
            )
        }
    };
    let cfg = &m
        .configs
        .iter()
        .find(|c| c.label == label)
        .with_context(|| format!("the report names label {label}, which the manifest lacks"))?
        .config;
    Ok(Picked {
        name: cfg.name.clone(),
        env: cfg.env.clone(),
        why: format!("{why}; campaign {} (manifest {})", m.campaign_id, &sha[..12]),
    })
}

/// The env file's text.
pub fn env_file(p: &Picked) -> String {
    let mut o = format!(
        "{HEADER}: configuration {}\n# picked by {}\n# source it before launching the job: . FILE\n",
        p.name,
        p.why.replace('\n', " ")
    );
    if p.env.is_empty() {
        o.push_str("# the pick sets no variable: the default environment\n");
    }
    for (k, v) in &p.env {
        o.push_str(&format!("export {k}={}\n", shell_quote(v)));
    }
    o
}

/// Parse an exported env file: comments, blank lines and `export NAME='VALUE'` only.
pub fn parse_env_file(path: &Path) -> Result<(String, BTreeMap<String, String>)> {
    let text = limits::read_text_bounded(path, 1 << 20)?;
    let bad = |line: usize, why: &str| {
        refuse(
            Code::BadInput,
            format!("{}:{line}: {why} (expected what export-pick writes: export NAME='VALUE')", path.display()),
        )
    };
    if !text.starts_with(HEADER) {
        return Err(bad(1, "not a file written by commcanary export-pick"));
    }
    let name = text.lines().next().and_then(|l| l.split("configuration ").nth(1)).unwrap_or("pick").trim().to_string();
    let mut env = BTreeMap::new();
    for (i, line) in text.lines().enumerate() {
        let l = line.trim();
        if l.is_empty() || l.starts_with('#') {
            continue;
        }
        let rest = l.strip_prefix("export ").ok_or_else(|| bad(i + 1, "not an export line"))?;
        let (k, v) = rest.split_once('=').ok_or_else(|| bad(i + 1, "no '='"))?;
        if k.is_empty()
            || k.starts_with(|c: char| c.is_ascii_digit())
            || !k.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
        {
            return Err(bad(i + 1, "not a variable name"));
        }
        let unq = unquote(v).ok_or_else(|| bad(i + 1, "a value that is not one single-quoted word"))?;
        if env.insert(k.to_string(), unq).is_some() {
            return Err(bad(i + 1, "a variable set twice"));
        }
    }
    Ok((name, env))
}

/// The value of one single-quoted shell word (with `'\''` escapes), or None.
fn unquote(v: &str) -> Option<String> {
    let mut out = String::new();
    let mut rest = v.strip_prefix('\'')?;
    loop {
        let end = rest.find('\'')?;
        out.push_str(&rest[..end]);
        rest = &rest[end + 1..];
        if rest.is_empty() {
            return Some(out);
        }
        rest = rest.strip_prefix("\\''")?;
        out.push('\'');
    }
}

/// The confirmation's result.
pub struct Confirmation {
    /// The new campaign's directory.
    pub dir: PathBuf,
    /// gain = cost(default) / cost(pick) − 1, percent, with its 95% interval (one planned comparison).
    pub gain_pct: f64,
    /// Lower end.
    pub low_pct: f64,
    /// Upper end.
    pub high_pct: f64,
    /// Rounds run.
    pub rounds: usize,
    /// The minimum effect of the campaign's policy.
    pub min_effect_pct: f64,
    /// Recommended: the interval holds no loss beyond the minimum effect.
    pub recommended: bool,
    /// The confirming campaign's report.
    pub report: Report,
}

impl Confirmation {
    /// What `campaign confirm` prints: the real job's medians, the pick's gain and the verdict.
    pub fn text(&self) -> Result<String> {
        use std::fmt::Write;
        let (c, mut out) = (self, String::new());
        let t = c.report.truth.as_ref().context("truth section")?;
        for row in &t.rows {
            writeln!(out, "  {:<28} median {:.4} {} over {} jobs", row.label, row.median, t.unit, row.jobs)?;
        }
        writeln!(
            out,
            "confirm: the pick's gain over the default on the real job is {:+.1}% [{:+.1}, {:+.1}] (95% Student-t \
                interval over {} paired rounds, cost(default)/cost(pick) - 1)",
            c.gain_pct, c.low_pct, c.high_pct, c.rounds
        )?;
        let m = c.min_effect_pct;
        let verdict = if !c.recommended {
            format!("NOT RECOMMENDED: the interval holds a loss beyond the minimum effect of {m}% ({:+.1}%)", c.low_pct)
        } else if c.low_pct > m {
            format!("recommended: decided faster than the default by more than the minimum effect of {m}%")
        } else {
            format!("recommended: no loss beyond the minimum effect of {m}%, and no gain decided either")
        };
        writeln!(out, "{verdict}; evidence in {}", c.dir.display())?;
        Ok(out)
    }
}

/// Plan, run and analyze the confirmation campaign in `out` (new).
pub fn confirm(dir: &Path, pick_file: &Path, rounds: u32, out: &Path) -> Result<Confirmation> {
    let (m, _) = chain::load_manifest(dir)?;
    let Some(truth) = m.spec.truth.clone() else {
        crate::refuse!(
            Code::BadSpec,
            "campaign {} has no [truth]: confirm runs the job it names against the default",
            dir.display()
        );
    };
    ranges::int("--rounds", rounds, MIN_ANALYZED_ROUNDS, 10_000)?;
    let (name, env) = parse_env_file(pick_file)?;
    if out.exists() {
        crate::refuse!(Code::AlreadyExists, "{} already exists; a confirmation is a new campaign", out.display());
    }
    // the spec of the confirming campaign, beside it, with the frozen inputs of the first
    let spec_dir = out.join("spec");
    std::fs::create_dir_all(&spec_dir).with_context(|| format!("creating {}", spec_dir.display()))?;
    let mut spec: CampaignSpec = m.spec.clone();
    spec.name = format!("{}-confirm", m.spec.name).chars().take(64).collect();
    spec.repetitions = rounds;
    spec.seed = clock::unix_ms();
    spec.blind = false;
    spec.join_part = false;
    spec.canary = None;
    spec.trace_canary = None;
    spec.controls = None;
    let mut t = truth;
    t.only = true;
    t.inputs = Vec::new();
    for (input, sha) in &m.truth_inputs {
        let src = dir.join(truth::TRUTH_INPUTS_DIR).join(input);
        let bytes = limits::read_bounded(&src, limits::MAX_TEXT_TABLE_BYTES)?;
        if &fsutil::sha256_hex(&bytes) != sha {
            crate::refuse!(Code::Stale, "stale: {} no longer hashes to the {sha} its manifest froze", src.display());
        }
        fsutil::write_new_atomic(&spec_dir.join(input), &bytes)?;
        t.inputs.push(input.clone());
    }
    spec.truth = Some(t);
    let safe = |n: &str| {
        n.chars().map(|c| if c.is_ascii_alphanumeric() || "._-".contains(c) { c } else { '_' }).collect::<String>()
    };
    let mut pick_name = format!("pick-{}", safe(&name)).chars().take(64).collect::<String>();
    if pick_name == "default" {
        pick_name = "pick".into();
    }
    spec.configs = vec![
        ConfigSpec { name: "default".into(), env: BTreeMap::new(), nccl_lib: None, args: Vec::new(), trace: None },
        ConfigSpec { name: pick_name, env, nccl_lib: None, args: Vec::new(), trace: None },
    ];
    let spec_path = spec_dir.join("confirm.toml");
    fsutil::write_new_atomic(&spec_path, toml::to_string(&spec).context("writing the confirmation spec")?.as_bytes())?;
    let cdir = out.join("campaign");
    crate::campaign::plan(&spec_path, &cdir)?;
    chain::exec(&cdir, 1, None, None)?;
    {
        let _lock = chain::lock_campaign(&cdir, None, &format!("select {}", cdir.display()))?;
        let (sel, _) = chain::select(&cdir, chain::SelectPolicy::FirstSuccess)?;
        fsutil::write_json_new(&cdir.join("selection.json"), &sel)?;
    }
    let (v, read) = campaign::verify_reading(&cdir)?;
    if !v.complete {
        crate::refuse!(
            Code::Incomplete,
            "the confirmation campaign {} is incomplete ({} refusals: {})",
            cdir.display(),
            v.refusals.len(),
            v.refusals.first().map(|r| r.1.as_str()).unwrap_or("")
        );
    }
    let report = campaign::analyze_and_write(&cdir, v, read, &cdir.join("report"))?;
    let t = report.truth.as_ref().context("the confirmation's report has no truth section")?;
    let pair = t.pairs.first().context("the confirmation compares two configurations")?;
    // pair a = default, b = pick: diff is cost(default)/cost(pick) - 1, the pick's gain
    let (gain_pct, low_pct, high_pct) = (pair.diff_pct, pair.ci_low_pct, pair.ci_high_pct);
    let min_effect_pct = m.spec.analysis.min_effect_pct;
    Ok(Confirmation {
        dir: cdir,
        gain_pct,
        low_pct,
        high_pct,
        rounds: t.rounds,
        min_effect_pct,
        recommended: low_pct >= -min_effect_pct,
        report,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn env_files_round_trip_through_shell_quoting() {
        let mut env = BTreeMap::new();
        env.insert("OMPI_MCA_btl".to_string(), "self,vader".to_string());
        env.insert("NCCL_ALGO".to_string(), "it's ring; $HOME `x`".to_string());
        let p = Picked { name: "cfg".into(), env: env.clone(), why: "test".into() };
        let dir = tempfile::tempdir().unwrap();
        let f = dir.path().join("pick.env");
        std::fs::write(&f, env_file(&p)).unwrap();
        let (name, back) = parse_env_file(&f).unwrap();
        assert_eq!((name.as_str(), back), ("cfg", env));
        std::fs::write(&f, format!("{HEADER}: configuration x\nexport A=$(rm -rf /)\n")).unwrap();
        assert!(parse_env_file(&f).unwrap_err().to_string().contains(":2:"));
        std::fs::write(&f, "export A='1'\n").unwrap();
        assert!(parse_env_file(&f).unwrap_err().to_string().contains("not a file written by commcanary export-pick"));
    }
}
