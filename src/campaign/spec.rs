//! The campaign spec (TOML, written by a person) and the frozen manifest.
//!
//! Consumes a spec file. Produces, with `plan`, a manifest: the normalized
//! spec, the labels (blinded or not), the repository identity, and the
//! schedule: `repetitions` rounds, each running every configuration once in an
//! order drawn from the recorded seed (ChaCha8), never one configuration's
//! repetitions back to back. The manifest's SHA-256 is the campaign's identity.
//! Refuses: unknown fields, empty or repeated configuration names, names
//! outside `[A-Za-z0-9._-]`, zero ranks or repetitions, one repetition
//! (never analyzable) unless the spec declares `join_part = true` (a part
//! for `campaign join`), unknown phases or sizes, a canary naming an unknown
//! configuration, an existing manifest.
use crate::core::clock::{self, ClockInjection};
use crate::core::identity::ToolIdentity;
use crate::core::refusal::{self, Code};
use crate::core::workload::{self, DelayInjection, Phase};
use crate::core::{fsutil, limits, ranges, units};
use crate::evidence::run;
use crate::evidence::shard::BackendKind;
use anyhow::{bail, Context, Result};
use rand::seq::SliceRandom;
use rand::SeedableRng;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::path::Path;

/// Manifest format version, written only with `[truth]` (other manifests stay 5; a manifest
/// before 5 is held to [`HardwareContract::default`]); its history: docs/ARCHITECTURE.md §11.
pub(crate) const MANIFEST_FORMAT_VERSION: u32 = 6;

pub use super::hardware::{HardwareContract, HardwareField, HardwareSpec};

/// The fewest rounds `analyze` accepts: its intervals over rounds have
/// rounds - 1 degrees of freedom. `plan` refuses fewer unless the spec is a
/// declared `join_part`.
pub(crate) const MIN_ANALYZED_ROUNDS: u32 = 2;

/// How each job is launched.
#[derive(schemars::JsonSchema, Serialize, Deserialize, Clone, Debug, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct Launcher {
    /// `mpirun` or `srun`.
    pub kind: LauncherKind,
    /// Extra launcher arguments (e.g. `--oversubscribe`, `--mpi=pmix`).
    #[serde(default)]
    pub args: Vec<String>,
}

/// Launcher kind.
#[derive(schemars::JsonSchema, Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
pub enum LauncherKind {
    /// OpenMPI's mpirun (environment forwarded with `-x`).
    Mpirun,
    /// Slurm's srun (inside an allocation).
    Srun,
}

/// Workload knobs passed to `commcanary rank`.
#[derive(schemars::JsonSchema, Serialize, Deserialize, Clone, Debug, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct CampaignWorkload {
    /// Phases, comma-separated.
    pub phases: String,
    /// Timed tokens.
    pub tokens: u32,
    /// Model shape passed as `rank --model` (a preset name); absent: the
    /// synthetic loop with `sizes`, as in campaigns written before model shapes.
    #[serde(default)]
    pub model: Option<String>,
    /// Layers per token (with `model`: overrides the model's own layer count).
    pub layers: u32,
    /// Message sizes, comma-separated (synthetic loop only).
    #[serde(default = "default_sizes")]
    pub sizes: String,
    /// Isolated iterations per size.
    #[serde(default = "default_iters")]
    pub iters: u32,
    /// Further `rank` arguments common to every configuration.
    #[serde(default)]
    pub extra_args: Vec<String>,
    /// A workload's own trace (`commcanary import`), relative to the spec
    /// file: `plan` copies it into the campaign as `trace.json` and freezes its
    /// SHA-256, and every job's replay, fill and overlap walk it (`rank
    /// --trace`). A trace with kinds other than all-reduce needs
    /// `--trace-allreduce-only` in `extra_args`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub trace: Option<String>,
}

fn default_sizes() -> String {
    "64KiB,128KiB,256KiB".into()
}
fn default_iters() -> u32 {
    50
}

pub use crate::analysis::ranking::TiePolicy;

pub use crate::analysis::policy::AnalysisPolicy;

/// A canary comparison.
#[derive(schemars::JsonSchema, Serialize, Deserialize, Clone, Debug, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct Canary {
    /// Candidate configuration name.
    pub candidate: String,
    /// Baseline configuration name.
    pub baseline: String,
    /// Phase the verdict is judged on (default `blocking`, the workload truth).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub phase: Option<Phase>,
}

/// Trace variants compared with a source trace (what `canary verify` plans):
/// configuration `VARIANT.CONFIG` walks variant VARIANT's frozen trace under
/// configuration CONFIG, and the report ranks CONFIG within every variant and
/// sets each variant's ranking against the source variant's.
#[derive(schemars::JsonSchema, Serialize, Deserialize, Clone, Debug, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct TraceCanary {
    /// The variant whose ranking is the truth (the whole trace).
    pub source: String,
    /// The other variants (the canary, baselines, samples), in report order.
    pub variants: Vec<String>,
    /// The configurations ranked within every variant.
    pub configs: Vec<String>,
    /// The phase ranked (default `replay`, the phase that walks each trace).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub phase: Option<Phase>,
}

impl TraceCanary {
    /// The configuration name of `config` under `variant`.
    pub fn config_name(variant: &str, config: &str) -> String {
        format!("{variant}.{config}")
    }
    /// The phase ranked.
    pub fn phase(&self) -> Phase {
        self.phase.unwrap_or(Phase::Replay)
    }
}

/// Controls declared before anything runs (docs/ARCHITECTURE.md §9, §12): what the analysis must
/// see for its other claims to be believed.
#[derive(schemars::JsonSchema, Serialize, Deserialize, Clone, Debug, PartialEq, Default)]
#[serde(deny_unknown_fields)]
pub struct Controls {
    /// Pairs of configuration names that are one configuration under two
    /// names (A/A): predicted tied, never pass or fail.
    #[serde(default)]
    pub aa: Vec<[String; 2]>,
    /// Configurations predicted slower: a bare name is predicted slower than
    /// every other configuration; a graded entry declares its slowdown
    /// against a reference configuration and the mechanism that causes it.
    #[serde(default)]
    pub known_bad: Vec<KnownBad>,
}

/// A known-bad control.
#[derive(schemars::JsonSchema, Serialize, Deserialize, Clone, Debug, PartialEq)]
#[serde(untagged)]
pub enum KnownBad {
    /// Predicted slower than every other configuration.
    Name(String),
    /// Predicted slower than `reference` by at least `slowdown_pct`.
    Graded(GradedBad),
}

/// A graded known-bad control.
#[derive(schemars::JsonSchema, Serialize, Deserialize, Clone, Debug, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct GradedBad {
    /// The slowed configuration.
    pub config: String,
    /// The configuration it is a slowed copy of.
    pub reference: String,
    /// Declared slowdown, percent of the reference (nominal: what the mechanism was sized to add).
    pub slowdown_pct: f64,
    /// How the slowdown is made and sized (stated in the report).
    pub mechanism: String,
}

impl KnownBad {
    /// The slowed configuration's name.
    pub fn config(&self) -> &str {
        match self {
            KnownBad::Name(n) => n,
            KnownBad::Graded(g) => &g.config,
        }
    }
}

/// One configuration.
#[derive(schemars::JsonSchema, Serialize, Deserialize, Clone, Debug, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct ConfigSpec {
    /// Name (`[A-Za-z0-9._-]`).
    pub name: String,
    /// Environment variables set for this configuration's jobs.
    #[serde(default)]
    pub env: BTreeMap<String, String>,
    /// NCCL library (cuda backend).
    #[serde(default)]
    pub nccl_lib: Option<String>,
    /// Further `rank` arguments for this configuration only.
    #[serde(default)]
    pub args: Vec<String>,
    /// This configuration's own workload trace (`commcanary import`), relative
    /// to the spec file, in place of `workload.trace`: `plan` freezes it as
    /// `traces/NAME.json` with its SHA-256. `canary verify` uses it to run a
    /// trace and its canary under every configuration in one campaign.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub trace: Option<String>,
}

/// The campaign spec.
#[derive(schemars::JsonSchema, Serialize, Deserialize, Clone, Debug, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct CampaignSpec {
    /// Campaign name.
    pub name: String,
    /// `cpu` or `cuda`.
    pub backend: String,
    /// Ranks per job.
    pub ranks: u32,
    /// Rounds (each runs every configuration once).
    pub repetitions: u32,
    /// Schedule seed.
    pub seed: u64,
    /// Analysis sees `config-NN` labels; the mapping is stored apart.
    #[serde(default)]
    pub blind: bool,
    /// This campaign is one part of a later `campaign join`, not analyzed on
    /// its own: only then may `repetitions` be 1 (one round gives no interval
    /// over rounds; the joined campaign's rounds are the parts' together).
    /// Written in the manifest only where declared.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub join_part: bool,
    /// Launcher.
    pub launcher: Launcher,
    /// Workload.
    pub workload: CampaignWorkload,
    /// Analysis policy.
    pub analysis: AnalysisPolicy,
    /// Optional canary pair.
    #[serde(default)]
    pub canary: Option<Canary>,
    /// Optional trace variants compared with a source (`canary verify`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub trace_canary: Option<TraceCanary>,
    /// Optional controls.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub controls: Option<Controls>,
    /// What every cell's hardware must share (absent: the default contract,
    /// every recorded identity field but the host alike across cells).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub hardware: Option<HardwareSpec>,
    /// The user's own job, run as truth cells under every configuration in
    /// the same rounds (`campaign::truth`); absent: proxies only. Written in
    /// the manifest only where declared (manifest format 6).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub truth: Option<super::truth::TruthSpec>,
    /// Configurations.
    pub configs: Vec<ConfigSpec>,
}

fn valid_name(s: &str) -> bool {
    !s.is_empty() && s.chars().all(|c| c.is_ascii_alphanumeric() || "._-".contains(c))
}

impl CampaignSpec {
    /// `rank` and its arguments for one configuration of a spec (without the
    /// executable, run id and output directory): what `exec` runs and what `plan`
    /// test-parses.
    pub fn rank_arguments(&self, cfg: &ConfigSpec) -> Vec<String> {
        let w = &self.workload;
        let mut a: Vec<String> = vec!["rank".into(), "-q".into()];
        for (flag, v) in [
            ("--backend", self.backend.clone()),
            ("--phases", w.phases.clone()),
            ("--tokens", w.tokens.to_string()),
            ("--layers", w.layers.to_string()),
            ("--iters", w.iters.to_string()),
        ] {
            a.extend([flag.into(), v]);
        }
        match &w.model {
            Some(model) => a.extend(["--model".into(), model.clone()]),
            None => a.extend(["--model".into(), "synthetic".into(), "--sizes".into(), w.sizes.clone()]),
        }
        a.extend(w.extra_args.iter().cloned());
        if let Some(lib) = &cfg.nccl_lib {
            a.extend(["--nccl-lib".into(), lib.clone()]);
        }
        a.extend(cfg.args.iter().cloned());
        a
    }

    /// Whether `flag` appears in `workload.extra_args` or any configuration's `args`.
    fn extra_args_name(&self, flag: &str) -> bool {
        self.workload
            .extra_args
            .iter()
            .chain(self.configs.iter().flat_map(|c| c.args.iter()))
            .any(|a| a == flag || a.starts_with(&format!("{flag}=")))
    }

    /// Parse and validate a spec file; errors name the file.
    pub fn load(path: &Path) -> Result<Self> {
        let text = limits::read_text_bounded(path, limits::MAX_SPEC_BYTES).map_err(|e| {
            let missing = e.chain().any(|c| {
                c.downcast_ref::<std::io::Error>().is_some_and(|io| io.kind() == std::io::ErrorKind::NotFound)
            });
            if missing {
                refusal::refuse(Code::NoSuchInput, format!("campaign spec {}: no such file", path.display()))
            } else {
                refusal::or_code(Code::BadSpec)(e.context(format!("reading campaign spec {}", path.display())))
            }
        })?;
        let spec: CampaignSpec =
            toml::from_str(&text).map_err(|e| refusal::refuse(Code::BadSpec, format!("{}: {e}", path.display())))?;
        let spec_dir = path.parent().filter(|p| !p.as_os_str().is_empty()).unwrap_or(Path::new("."));
        if let Some(t) = &spec.truth {
            t.validate(spec_dir, spec.launcher.kind == LauncherKind::Mpirun)
                .map_err(|e| e.context(format!("{}: invalid campaign spec", path.display())))?;
        }
        spec.validate().map_err(|e| {
            if refusal::code_of(&e).is_some() {
                e.context(format!("{}: invalid campaign spec", path.display()))
            } else {
                refusal::refuse(Code::BadSpec, format!("{}: invalid campaign spec: {e:#}", path.display()))
            }
        })?;
        Ok(spec)
    }

    /// Check everything that can be checked before running.
    pub fn validate(&self) -> Result<()> {
        if !valid_name(&self.name) {
            bail!("name {:?}: use letters, digits, '.', '_' and '-'", self.name);
        }
        if self.backend != "cpu" && self.backend != "cuda" {
            bail!("backend {:?}: expected \"cpu\" or \"cuda\"", self.backend);
        }
        if self.ranks == 0 || self.repetitions == 0 {
            bail!("ranks and repetitions must be at least 1");
        }
        if self.configs.is_empty() {
            bail!("at least one [[configs]] entry is required");
        }
        let mut seen = std::collections::BTreeSet::new();
        for c in &self.configs {
            if !valid_name(&c.name) {
                bail!("configs: name {:?}: use letters, digits, '.', '_' and '-'", c.name);
            }
            if !seen.insert(&c.name) {
                bail!("configs: name {:?} is used twice", c.name);
            }
            if c.env.keys().any(|k| k.is_empty() || k.contains('=')) {
                bail!("configs.{}: environment variable names must be non-empty and contain no '='", c.name);
            }
            // POSIX.1-2017 §8.1: names of letters, digits and '_', not starting with a digit;
            // a value is a C string, so a NUL byte would cut it (exec fails for every cell)
            if let Some(k) = c.env.keys().find(|k| {
                !k.starts_with(|ch: char| ch.is_ascii_alphabetic() || ch == '_')
                    || !k.chars().all(|ch| ch.is_ascii_alphanumeric() || ch == '_')
            }) {
                bail!(
                    "configs.{}.env: {k:?} is not an environment variable name (letters, digits and '_', not \
                    starting with a digit)",
                    c.name
                );
            }
            if let Some(k) = c.env.iter().find(|(_, v)| v.contains('\0')).map(|(k, _)| k) {
                bail!("configs.{}.env.{k}: the value holds a NUL byte, which no environment can carry", c.name);
            }
        }
        let phases = workload::parse_phases(&self.workload.phases).context("workload.phases")?;
        let any_trace = self.workload.trace.is_some() || self.configs.iter().any(|c| c.trace.is_some());
        if any_trace && !phases.iter().any(|p| !matches!(p, Phase::Isolated | Phase::Blocking | Phase::Async)) {
            bail!(
                "workload.trace is walked by replay, fill, overlap and the ablations; workload.phases {:?} has none \
                of them",
                self.workload.phases
            );
        }
        if any_trace && self.extra_args_name("--trace") {
            bail!(
                "workload.trace and a --trace in extra_args or a configuration's args: name the trace once, in \
                workload.trace"
            );
        }
        units::parse_size_list(&self.workload.sizes).context("workload.sizes")?;
        if self.workload.tokens == 0 || self.workload.layers == 0 {
            bail!("workload.tokens and workload.layers must be at least 1");
        }
        if let Some(c) = &self.canary {
            for n in [&c.candidate, &c.baseline] {
                if !self.configs.iter().any(|x| &x.name == n) {
                    bail!("canary names {n:?}, which is not a configuration");
                }
            }
        }
        if let Some(tc) = &self.trace_canary {
            if !phases.contains(&tc.phase()) {
                bail!("trace_canary.phase {} is not among workload.phases", tc.phase());
            }
            if tc.configs.len() < 2 {
                bail!("trace_canary.configs has {} configuration(s); a ranking needs at least 2", tc.configs.len());
            }
            let mut seen = std::collections::BTreeSet::new();
            for v in std::iter::once(&tc.source).chain(&tc.variants) {
                if !seen.insert(v) {
                    bail!("trace_canary names variant {v:?} twice");
                }
                for c in &tc.configs {
                    let n = TraceCanary::config_name(v, c);
                    match self.configs.iter().find(|x| x.name == n) {
                        None => bail!("trace_canary: variant {v:?} under {c:?} needs a configuration named {n:?}"),
                        Some(x) if x.trace.is_none() => {
                            bail!("trace_canary: configuration {n:?} names no trace of its own")
                        }
                        Some(_) => {}
                    }
                }
            }
        }
        if let Some(c) = &self.controls {
            let refs = c.known_bad.iter().filter_map(|k| match k {
                KnownBad::Graded(g) => Some(&g.reference),
                KnownBad::Name(_) => None,
            });
            for n in
                c.aa.iter()
                    .flatten()
                    .map(String::as_str)
                    .chain(c.known_bad.iter().map(KnownBad::config))
                    .chain(refs.map(String::as_str))
            {
                if !self.configs.iter().any(|x| x.name == n) {
                    bail!("controls name {n:?}, which is not a configuration");
                }
            }
            for k in &c.known_bad {
                if let KnownBad::Graded(g) = k {
                    if g.config == g.reference {
                        bail!("controls.known_bad {:?} names itself as its reference", g.config);
                    }
                    if !(g.slowdown_pct.is_finite() && g.slowdown_pct > self.analysis.min_effect_pct) {
                        bail!(
                            "controls.known_bad {:?}: slowdown_pct {} must exceed analysis.min_effect_pct {} (a \
                                smaller slowdown can never be decided)",
                            g.config,
                            g.slowdown_pct,
                            self.analysis.min_effect_pct
                        );
                    }
                }
            }
            if let Some(p) = c.aa.iter().find(|p| p[0] == p[1]) {
                bail!("controls.aa pairs {:?} with itself; an A/A pair is two names for one configuration", p[0]);
            }
        }
        if let Some(h) = &self.hardware {
            h.validate_for(&self.backend)?;
        }
        if let Some(names) = self.truth.as_ref().and_then(|t| t.configs.as_ref()) {
            if names.len() < 2 {
                bail!("truth.configs names {} configuration(s); the truth ranks at least 2", names.len());
            }
            if let Some(n) = names.iter().find(|n| !self.configs.iter().any(|c| &c.name == *n)) {
                bail!("truth.configs names {n:?}, which is not a configuration");
            }
        }
        if let Some(p) = self.canary.as_ref().and_then(|c| c.phase).filter(|p| !phases.contains(p)) {
            bail!("canary.phase {p} is not among workload.phases");
        }
        if !(self.analysis.min_effect_pct >= 0.0 && self.analysis.delta_pct >= 0.0) {
            bail!("analysis.min_effect_pct and delta_pct must be non-negative");
        }
        // what `analyze` would refuse after every cell ran (analysis::analyze)
        if self.analysis.tie_policy != TiePolicy::Interval {
            bail!(
                "analysis.tie_policy = {:?}: a campaign's relations come from its intervals over rounds; plan it with \
                    tie_policy = \"interval\" (strict and iqr are for `compare` on summary tables)",
                format!("{:?}", self.analysis.tie_policy).to_lowercase()
            );
        }
        // the launcher's rank count is `ranks`, which exec passes itself
        let own_count = |a: &str| {
            a.strip_prefix("-n").is_some_and(|r| !r.is_empty() && r.chars().all(|ch| ch.is_ascii_digit()))
                || match self.launcher.kind {
                    LauncherKind::Mpirun => {
                        matches!(a, "-n" | "-np" | "--np" | "--n" | "-c")
                            || a.starts_with("--np=")
                            || a.starts_with("--n=")
                    }
                    LauncherKind::Srun => matches!(a, "-n" | "--ntasks") || a.starts_with("--ntasks="),
                }
        };
        if let Some(a) = self.launcher.args.iter().find(|a| own_count(a)) {
            bail!(
                "launcher.args: {a:?} sets the launcher's rank count, which exec sets from ranks = {} (-n {}); remove \
                    it and set ranks",
                self.ranks,
                self.ranks
            );
        }
        self.validate_ranges()
    }

    /// Ranges and rank arguments: everything `exec` and `analyze` would
    /// otherwise refuse only after cells ran.
    fn validate_ranges(&self) -> Result<()> {
        let r = ranges::int;
        r("repetitions", self.repetitions, 1, 10_000)?;
        // every interval of the analysis is over rounds (Student-t with
        // rounds - 1 degrees of freedom, analysis::inference): one round alone
        // can never be analyzed, only joined with other rounds
        if self.repetitions < MIN_ANALYZED_ROUNDS && !self.join_part {
            crate::refuse!(
                Code::BadSpec,
                "repetitions = {}: analyze needs at least {MIN_ANALYZED_ROUNDS} rounds (every interval is over rounds, \
                    with rounds - 1 degrees of freedom), so this campaign could run but never be analyzed; plan \
                    repetitions >= {MIN_ANALYZED_ROUNDS}, or declare join_part = true for a part meant only for \
                    `campaign join`",
                self.repetitions
            );
        }
        r("ranks", self.ranks, 1, limits::MAX_WORLD_SIZE)?;
        ranges::int("configs (count)", self.configs.len(), 1, 1_000)?;
        // a name becomes part of file names (CELL-aN.stdout): keep it well under NAME_MAX
        for n in std::iter::once(&self.name).chain(self.configs.iter().map(|c| &c.name)) {
            if n.len() > 64 {
                crate::refuse!(
                    Code::BadSpec,
                    "name {:?}... is {} characters; at most 64 (it becomes part of file names)",
                    n.chars().take(16).collect::<String>(),
                    n.len()
                );
            }
        }
        for (what, v) in
            [("analysis.min_effect_pct", self.analysis.min_effect_pct), ("analysis.delta_pct", self.analysis.delta_pct)]
        {
            if !v.is_finite() || v > 1e6 {
                crate::refuse!(Code::BadSpec, "{what} = {v}: must be a finite percentage (at most 1e6)");
            }
        }
        r("analysis.bootstrap_resamples", self.analysis.bootstrap_resamples, 1, 10_000_000)?;
        for c in &self.configs {
            let parsed = self.parse_rank_arguments(c, None)?;
            crate::rank::check_ranges(&parsed)
                .map_err(|e| refusal::refuse(Code::BadSpec, format!("configs.{}: {e:#}", c.name)))?;
            let backend = match parsed.backend {
                crate::backend::BackendChoice::Cpu => "cpu",
                crate::backend::BackendChoice::Cuda => "cuda",
                crate::backend::BackendChoice::Auto => "auto",
            };
            if backend != self.backend {
                crate::refuse!(
                    Code::BadSpec,
                    "configs.{}: its arguments select --backend {backend} in a spec of backend = {:?}; set backend \
                        once, at the top",
                    c.name,
                    self.backend
                );
            }
            if parsed.inject_repeat.is_some_and(|n| n > 1) && self.backend != "cpu" {
                crate::refuse!(
                    Code::BadSpec,
                    "configs.{}: --inject-repeat needs backend = \"cpu\" (the cuda backend times one NCCL call per \
                        recorded collective)",
                    c.name
                );
            }
            // a rank outside the job would be refused by every cell
            let delayed = parsed
                .inject_delay
                .as_deref()
                .map(DelayInjection::parse)
                .transpose()?
                .map(|d| ("--inject-delay", d.rank));
            let skewed = parsed
                .inject_clock
                .iter()
                .map(|s| ClockInjection::parse(s).map(|c| ("--inject-clock", c.rank)))
                .collect::<Result<Vec<_>>>()?;
            if let Some((flag, r)) = delayed.into_iter().chain(skewed).find(|(_, r)| *r >= self.ranks) {
                crate::refuse!(
                    Code::BadSpec,
                    "configs.{}: {flag} names rank {r}, outside the job's ranks 0 to {} (ranks = {})",
                    c.name,
                    self.ranks - 1,
                    self.ranks
                );
            }
        }
        Ok(())
    }

    /// A configuration's rank arguments (with `--trace TRACE` where given) as `rank` parses them.
    fn parse_rank_arguments(&self, c: &ConfigSpec, trace: Option<&String>) -> Result<crate::rank::RankOptions> {
        let mut argv: Vec<String> = std::iter::once("commcanary".to_string()).chain(self.rank_arguments(c)).collect();
        if let Some(t) = trace {
            argv.extend(["--trace".into(), t.clone()]);
        }
        crate::rank::RankOptions::parse_argv(&argv).map_err(|e| {
            let first = e.to_string().lines().next().unwrap_or("").to_string();
            refusal::refuse(Code::BadSpec, format!("configs.{}: its rank arguments do not parse: {first}", c.name))
        })
    }

    /// Each configuration's rank arguments through `rank`'s own checks before
    /// MPI starts (the phases against the trace a job gets, the sweep and the
    /// model against `ranks`), so that a spec whose cells `rank` would all
    /// refuse is refused before anything runs, naming the configuration.
    /// Separate from [`CampaignSpec::validate`]: `canary verify` loads a spec
    /// as a template whose configurations get their traces afterwards.
    pub fn check_rank_plans(&self) -> Result<()> {
        let backend = match self.backend.as_str() {
            "cuda" => BackendKind::Cuda,
            _ => BackendKind::Cpu,
        };
        for c in &self.configs {
            // exec passes the frozen copy; only its presence matters before the launch
            let parsed = self.parse_rank_arguments(c, c.trace.as_ref().or(self.workload.trace.as_ref()))?;
            crate::rank::check_before_launch(&parsed, backend, self.ranks).map_err(|e| {
                refusal::refuse(
                    Code::BadSpec,
                    format!(
                        "configs.{}: rank would refuse every cell of this configuration before MPI starts: {e:#}; \
                        nothing was run",
                        c.name
                    ),
                )
            })?;
        }
        Ok(())
    }
}

/// One cell of the schedule: a configuration in a round.
#[derive(schemars::JsonSchema, Serialize, Deserialize, Clone, Debug, PartialEq, Eq)]
pub struct Cell {
    /// `rNN-LABEL` (a truth cell: `rNN-LABEL@truth`).
    pub cell_id: String,
    /// Round (1-based).
    pub round: u32,
    /// Position within the round (1-based).
    pub position: u32,
    /// Configuration label (blinded or the name).
    pub label: String,
    /// A truth cell: the spec's `[truth]` command under this configuration (written only when true).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub truth: bool,
}

/// A labelled configuration in the manifest.
#[derive(schemars::JsonSchema, Serialize, Deserialize, Clone, Debug, PartialEq)]
pub struct LabelledConfig {
    /// Label analysis sees.
    pub label: String,
    /// The configuration (its name is visible here; blinding governs analysis output).
    pub config: ConfigSpec,
}

/// Git commit plus digests of dirty files: a commit does not identify uncommitted bytes.
#[derive(schemars::JsonSchema, Serialize, Deserialize, Clone, Debug, PartialEq)]
pub struct RepoIdentity {
    /// `git rev-parse HEAD`, where the planning directory is a checkout.
    pub commit: Option<String>,
    /// Modified or untracked files (git status) with their SHA-256 (`deleted` when gone).
    pub dirty: Vec<(String, String)>,
    /// The tool that planned.
    pub tool: ToolIdentity,
}

impl RepoIdentity {
    /// Identity of the git checkout containing the current directory.
    pub fn current() -> Self {
        let git = |args: &[&str]| {
            std::process::Command::new("git")
                .args(args)
                .output()
                .ok()
                .filter(|o| o.status.success())
                .map(|o| String::from_utf8_lossy(&o.stdout).to_string())
        };
        let commit = git(&["rev-parse", "HEAD"]).map(|s| s.trim().to_string());
        let top = git(&["rev-parse", "--show-toplevel"]).map(|s| std::path::PathBuf::from(s.trim()));
        let mut dirty = Vec::new();
        if let (Some(status), Some(top)) = (git(&["status", "--porcelain", "--untracked-files=all"]), top) {
            for line in status.lines().filter(|l| l.len() > 3) {
                let path = line[3..].rsplit(" -> ").next().unwrap_or("").to_string();
                let digest = fsutil::sha256_file(&top.join(&path)).unwrap_or_else(|_| "deleted".into());
                dirty.push((path, digest));
            }
            dirty.sort();
        }
        let mut tool = ToolIdentity::current();
        tool.binary_sha256 = None; // the binary is identified per attempt; the repository here
        Self { commit, dirty, tool }
    }
}

/// The frozen manifest.
#[derive(schemars::JsonSchema, Serialize, Deserialize, Clone, Debug, PartialEq)]
pub struct Manifest {
    /// Format version.
    pub format_version: u32,
    /// Campaign id: name, UTC time, random suffix.
    pub campaign_id: String,
    /// The spec as validated.
    pub spec: CampaignSpec,
    /// Labels per configuration, in spec order.
    pub configs: Vec<LabelledConfig>,
    /// Cells in execution order.
    pub schedule: Vec<Cell>,
    /// Repository identity at planning time.
    pub repository: RepoIdentity,
    /// Wall-clock planning time (Unix ms).
    pub planned_unix_ms: u64,
    /// SHA-256 of the campaign's copy of `workload.trace` (`trace.json`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub trace_sha256: Option<String>,
    /// Per configuration name, the SHA-256 of its own frozen trace (`traces/NAME.json`).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub config_traces: BTreeMap<String, String>,
    /// The hardware contract `verify` holds every cell to (format 5; a
    /// manifest before it is held to the default contract).
    #[serde(default)]
    pub hardware: HardwareContract,
    /// Per truth input file name, the SHA-256 of its frozen copy (`truth-inputs/NAME`).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub truth_inputs: BTreeMap<String, String>,
}

impl Manifest {
    /// The frozen trace a configuration's jobs walk: its file name in the
    /// campaign directory and its SHA-256 (its own, else `workload.trace`'s).
    pub fn frozen_trace(&self, config: &str) -> Option<(String, String)> {
        match self.config_traces.get(config) {
            Some(sha) => Some((format!("{}/{config}.json", super::CONFIG_TRACES_DIR), sha.clone())),
            None => self.trace_sha256.as_ref().map(|sha| (super::TRACE_FILE.to_string(), sha.clone())),
        }
    }
}

/// The schedule for `labels` over `rounds`, drawn from `seed`.
pub fn schedule(labels: &[String], rounds: u32, seed: u64) -> Vec<Cell> {
    let items: Vec<(String, bool)> = labels.iter().map(|l| (l.clone(), false)).collect();
    schedule_items(&items, rounds, seed)
}

/// The schedule of (label, truth cell) items: every round runs every item
/// once, in an order drawn from `seed` (proxy-only item lists draw the same
/// orders as [`schedule`] always did).
pub fn schedule_items(items: &[(String, bool)], rounds: u32, seed: u64) -> Vec<Cell> {
    let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(seed);
    let mut out = Vec::new();
    for round in 1..=rounds {
        let mut order: Vec<&(String, bool)> = items.iter().collect();
        order.shuffle(&mut rng);
        for (i, (l, truth)) in order.into_iter().enumerate() {
            let suffix = if *truth { super::truth::TRUTH_CELL_SUFFIX } else { "" };
            out.push(Cell {
                cell_id: format!("r{round:02}-{l}{suffix}"),
                round,
                position: i as u32 + 1,
                label: l.clone(),
                truth: *truth,
            });
        }
    }
    out
}

/// Build a manifest (and, when blind, the label → name map).
pub fn plan(spec: CampaignSpec) -> (Manifest, Option<BTreeMap<String, String>>) {
    let blinding: Option<BTreeMap<String, String>> = spec.blind.then(|| {
        // labels are assigned in an order drawn from the seed, so position reveals nothing
        let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(spec.seed ^ 0x5eed_b11d);
        let mut idx: Vec<usize> = (0..spec.configs.len()).collect();
        idx.shuffle(&mut rng);
        idx.iter().enumerate().map(|(k, &i)| (format!("config-{:02}", k + 1), spec.configs[i].name.clone())).collect()
    });
    let label_of = |name: &str| match &blinding {
        Some(m) => {
            m.iter().find(|(_, n)| n.as_str() == name).map(|(l, _)| l.clone()).expect("every config is labelled")
        }
        None => name.to_string(),
    };
    let configs: Vec<LabelledConfig> =
        spec.configs.iter().map(|c| LabelledConfig { label: label_of(&c.name), config: c.clone() }).collect();
    let labels: Vec<String> = configs.iter().map(|c| c.label.clone()).collect();
    // truth cells share the rounds and the shuffle with the proxy cells
    let proxies = !spec.truth.as_ref().is_some_and(|t| t.only);
    let items: Vec<(String, bool)> = labels
        .iter()
        .filter(|_| proxies)
        .map(|l| (l.clone(), false))
        .chain(
            configs
                .iter()
                .filter(|c| spec.truth.as_ref().is_some_and(|t| t.runs_under(&c.config.name)))
                .map(|c| (c.label.clone(), true)),
        )
        .collect();
    let schedule = schedule_items(&items, spec.repetitions, spec.seed);
    let campaign_id = format!("{}-{}", spec.name, run::new_run_id());
    let spec_hardware = spec.hardware.clone();
    let m = Manifest {
        // a manifest without truth cells is read by builds before truth cells as it always was
        format_version: if spec.truth.is_some() { MANIFEST_FORMAT_VERSION } else { 5 },
        campaign_id,
        spec,
        configs,
        schedule,
        repository: RepoIdentity::current(),
        planned_unix_ms: clock::unix_ms(),
        trace_sha256: None,
        config_traces: BTreeMap::new(),
        hardware: HardwareContract::resolve(spec_hardware.as_ref()),
        truth_inputs: BTreeMap::new(),
    };
    (m, blinding)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn graded_known_bad_controls_are_parsed_and_checked() {
        let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("examples/gpu-aa-ten.toml");
        let spec = CampaignSpec::load(&path).unwrap();
        let c = spec.controls.clone().unwrap();
        assert!(matches!(&c.known_bad[2], KnownBad::Graded(g) if g.slowdown_pct == 5.0 && g.reference == "aa-1"));
        let mut low = spec.clone();
        low.analysis.min_effect_pct = 2.0;
        let e = low.validate().unwrap_err().to_string();
        assert!(e.contains("slowdown_pct 1 must exceed analysis.min_effect_pct 2"), "{e}");
        let mut bad = spec;
        if let Some(KnownBad::Graded(g)) = bad.controls.as_mut().and_then(|c| c.known_bad.first_mut()) {
            g.reference = "nope".into();
        }
        assert!(bad.validate().unwrap_err().to_string().contains("\"nope\""));
    }

    #[test]
    fn schedule_is_round_robin_and_seeded() {
        let labels: Vec<String> = ["a", "b", "c"].iter().map(|s| s.to_string()).collect();
        let s1 = schedule(&labels, 3, 42);
        assert_eq!(s1.len(), 9);
        for r in 1..=3 {
            let mut round: Vec<&str> = s1.iter().filter(|c| c.round == r).map(|c| c.label.as_str()).collect();
            round.sort();
            assert_eq!(round, ["a", "b", "c"], "every round runs every configuration once");
        }
        assert_eq!(s1, schedule(&labels, 3, 42), "same seed, same schedule");
        let differs = (0..20).any(|seed| schedule(&labels, 3, seed) != s1);
        assert!(differs, "another seed gives another schedule");
    }

    #[test]
    fn truth_cells_share_the_rounds_and_the_shuffle() {
        let items: Vec<(String, bool)> =
            ["a", "b"].iter().flat_map(|l| [(l.to_string(), false), (l.to_string(), true)]).collect();
        let s = schedule_items(&items, 4, 9);
        assert_eq!(s.len(), 16);
        for r in 1..=4 {
            let mut round: Vec<&str> =
                s.iter().filter(|c| c.round == r).map(|c| c.cell_id.split_once('-').unwrap().1).collect();
            round.sort();
            assert_eq!(round, ["a", "a@truth", "b", "b@truth"], "every round runs every proxy and truth cell once");
        }
        // the truth cells are not all at one end of every round
        let first: Vec<bool> = (1..=4).map(|r| s.iter().find(|c| c.round == r).unwrap().truth).collect();
        assert!(first.contains(&true) || s.iter().filter(|c| c.position == 2).any(|c| c.truth), "{s:?}");
        // a proxy-only item list draws what `schedule` always drew
        let labels: Vec<String> = ["a", "b", "c"].iter().map(|s| s.to_string()).collect();
        let plain: Vec<(String, bool)> = labels.iter().map(|l| (l.clone(), false)).collect();
        assert_eq!(schedule_items(&plain, 3, 42), schedule(&labels, 3, 42));
        assert!(
            serde_json::to_string(&schedule(&labels, 1, 1)).unwrap().find("truth").is_none(),
            "no truth key in a proxy cell"
        );
    }
}
