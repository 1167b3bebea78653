//! The evidence of `validate` on disk, the site's thresholds, and the
//! refusal of a reference that does not describe this node.
//!
//! Consumes a reference directory (one job, or one per subdirectory:
//! [`read_set`]) and, optionally, a site TOML. Refuses, naming the file and
//! the fault: a file missing or whose size or SHA-256 differs from the
//! descriptor; an unknown format version; a site TOML with unknown keys,
//! thresholds that are not positive, or an unknown `allow` entry; a reference
//! from another backend, GPU SKU, GPU count, rank count, driver major version
//! or NCCL version, unless the site allows that change.
//!
//! Layout and versions: docs/METHODS.md, "Validation evidence on disk".
use super::health::HealthReport;
use super::sweep::SizeResult;
use super::topology::Topology;
use crate::analysis::inference;
use crate::core::identity::ToolIdentity;
use crate::core::refusal::Code;
use crate::core::workload::SweepKind;
use crate::core::{collective, fsutil, limits, ranges};
use crate::evidence::shard::{BackendKind, Dtype};
use anyhow::{Context, Result};
use serde::{Deserialize, Serialize};
use std::path::Path;

/// Format version of every file of a validation directory.
pub const VALIDATE_FORMAT_VERSION: u32 = 2;

/// Format versions this tool reads.
pub(crate) const READABLE_FORMAT_VERSIONS: [u32; 2] = [1, 2];

/// Files of a validation directory, in writing order (the descriptor last).
pub(crate) const MANIFEST: &str = "manifest.json";
/// Per-round measurements.
pub const ROUNDS: &str = "rounds.json";
/// Health snapshots.
pub(crate) const HEALTH: &str = "health.json";
/// Topology.
pub(crate) const TOPOLOGY: &str = "topology.json";
/// The verdicts (validations against a reference).
pub(crate) const REPORT: &str = "report.json";
/// Sizes and digests of the others.
pub(crate) const DESCRIPTOR: &str = "descriptor.json";

/// What the node is, as far as a reference must match it.
#[derive(schemars::JsonSchema, Serialize, Deserialize, Clone, Debug, PartialEq)]
pub struct NodeFacts {
    /// Host name.
    pub host: String,
    /// Backend.
    pub backend: BackendKind,
    /// Ranks (one per GPU on cuda).
    pub ranks: u32,
    /// GPU product name of rank 0's device (cuda) or the CPU model.
    pub sku: String,
    /// GPUs NVML enumerates (cuda).
    pub gpu_count: Option<u32>,
    /// NVIDIA driver version (cuda).
    pub driver_version: Option<String>,
    /// NCCL version loaded (cuda).
    pub nccl_version: Option<String>,
    /// MPI library.
    pub mpi_library: Option<String>,
}

/// What was run: a validation against a reference runs the reference's settings.
#[derive(schemars::JsonSchema, Serialize, Deserialize, Clone, Debug, PartialEq)]
pub struct Settings {
    /// Requested sweep sizes, bytes (nccl-tests' `-b/-e/-f` sequence).
    pub sizes_bytes: Vec<u64>,
    /// Timed iterations per size.
    pub iters: u32,
    /// Warm-up iterations per size.
    pub warmup_iters: u32,
    /// Element type of the sweep and the workload's all-reduces.
    pub dtype: Dtype,
    /// Workload model preset.
    pub model: String,
    /// Sequences per decode step.
    pub batch: u32,
    /// Timed tokens per round.
    pub tokens: u32,
    /// Warm-up tokens per round.
    pub warmup_tokens: u32,
}

impl Settings {
    /// The sweep these settings run, checking every size when `check`.
    pub fn sweep_loop(&self, check: bool) -> super::sweep::SweepLoop<'_> {
        super::sweep::SweepLoop {
            sizes_bytes: &self.sizes_bytes,
            dtype: self.dtype,
            iters: self.iters,
            warmup_iters: self.warmup_iters,
            check,
        }
    }
}

/// `manifest.json`.
#[derive(schemars::JsonSchema, Serialize, Deserialize, Clone, Debug, PartialEq)]
pub struct ValidateManifest {
    /// [`VALIDATE_FORMAT_VERSION`].
    pub format_version: u32,
    /// `reference` or `validation`.
    pub kind: String,
    /// Start, Unix ms.
    pub started_unix_ms: u64,
    /// The tool (version, commit, binary digest).
    pub tool: ToolIdentity,
    /// The node.
    pub node: NodeFacts,
    /// The settings.
    pub settings: Settings,
    /// Rounds run.
    pub rounds: u32,
    /// Seed of the per-round order.
    pub seed: u64,
    /// The reference compared with, as given, and its digest: its manifest's
    /// SHA-256 for a reference of one job; for a reference of several jobs,
    /// the SHA-256 of the lines "NAME SHA256\n" of its jobs in name order.
    pub reference: Option<(String, String)>,
    /// The reference's jobs: each job directory's name and its manifest's SHA-256 (format 2).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub reference_jobs: Vec<(String, String)>,
    /// Injected delay (a test and control knob), if any.
    pub inject_delay: Option<String>,
    /// Command line of rank 0.
    pub argv: Vec<String>,
    /// Recorded `NCCL_*`, `OMPI_MCA_*`, `CUDA_*`, `UCX_*` variables.
    pub env: Vec<(String, String)>,
}

/// One round's measurements (the slowest rank's, see [`super::sweep`]).
#[derive(schemars::JsonSchema, Serialize, Deserialize, Clone, Debug, PartialEq)]
pub struct RoundRecord {
    /// Round index.
    pub round: u32,
    /// Order the measurements ran in this round.
    pub order: Vec<String>,
    /// All-reduce sweep.
    pub all_reduce: Vec<SizeResult>,
    /// All-gather sweep.
    pub all_gather: Vec<SizeResult>,
    /// Per rank: median per-token latency of the round's timed tokens, µs.
    pub token_latency_median_us_per_rank: Vec<f64>,
}

impl RoundRecord {
    /// The sweep of `kind` (empty for a kind validate does not sweep, [`super::sweep::kinds`]).
    pub fn sweep(&self, kind: SweepKind) -> &[SizeResult] {
        match kind.kind() {
            collective::CollectiveKind::AllReduce => &self.all_reduce,
            collective::CollectiveKind::AllGather => &self.all_gather,
            _ => &[],
        }
    }

    /// The workload statistic of the round: the slowest rank's median per-token latency, µs.
    pub fn token_latency_us(&self) -> f64 {
        self.token_latency_median_us_per_rank.iter().copied().fold(f64::NAN, f64::max)
    }
}

/// `rounds.json`.
#[derive(schemars::JsonSchema, Serialize, Deserialize, Clone, Debug, PartialEq)]
pub struct RoundsFile {
    /// [`VALIDATE_FORMAT_VERSION`].
    pub format_version: u32,
    /// Every round.
    pub rounds: Vec<RoundRecord>,
}

/// One file in the descriptor.
#[derive(schemars::JsonSchema, Serialize, Deserialize, Clone, Debug, PartialEq)]
pub(crate) struct DescribedFile {
    /// File name in the directory.
    pub name: String,
    /// Size, bytes.
    pub size_bytes: u64,
    /// SHA-256, hex.
    pub sha256: String,
}

/// `descriptor.json`.
#[derive(schemars::JsonSchema, Serialize, Deserialize, Clone, Debug, PartialEq)]
pub(crate) struct ValidateDescriptor {
    /// [`VALIDATE_FORMAT_VERSION`].
    pub format_version: u32,
    /// The files, each with its digest.
    pub files: Vec<DescribedFile>,
}

/// A whole validation directory, in memory.
#[derive(Clone, Debug, PartialEq)]
pub struct Evidence {
    /// `manifest.json`.
    pub manifest: ValidateManifest,
    /// `rounds.json`.
    pub rounds: RoundsFile,
    /// `health.json`.
    pub health: HealthReport,
    /// `topology.json`.
    pub topology: Topology,
}

/// Write `ev` (and `report`, if any) into the new directory `dir`, the
/// descriptor last; built in a temporary sibling and renamed whole, so a full
/// disk half-way leaves no manifest-only directory behind.
pub fn write(dir: &Path, ev: &Evidence, report: Option<&super::ValidationReport>) -> Result<()> {
    fsutil::build_dir_new(dir, |stage| write_into(stage, ev, report))
}

fn write_into(dir: &Path, ev: &Evidence, report: Option<&super::ValidationReport>) -> Result<()> {
    let mut files = Vec::new();
    let mut put = |name: &str, bytes: Vec<u8>| -> Result<()> {
        fsutil::write_new_atomic(&dir.join(name), &bytes)?;
        files.push(DescribedFile {
            name: name.into(),
            size_bytes: bytes.len() as u64,
            sha256: fsutil::sha256_hex(&bytes),
        });
        Ok(())
    };
    put(MANIFEST, serde_json::to_vec_pretty(&ev.manifest)?)?;
    put(ROUNDS, serde_json::to_vec_pretty(&ev.rounds)?)?;
    put(HEALTH, serde_json::to_vec_pretty(&ev.health)?)?;
    put(TOPOLOGY, serde_json::to_vec_pretty(&ev.topology)?)?;
    if let Some(r) = report {
        put(REPORT, serde_json::to_vec_pretty(r)?)?;
    }
    fsutil::write_json_new(
        &dir.join(DESCRIPTOR),
        &ValidateDescriptor { format_version: VALIDATE_FORMAT_VERSION, files },
    )
}

fn parse<T: serde::de::DeserializeOwned>(dir: &Path, name: &str, bytes: &[u8]) -> Result<T> {
    serde_json::from_slice(bytes).with_context(|| {
        format!(
            "{}: not a validation {name} of a format this tool reads ({READABLE_FORMAT_VERSIONS:?})",
            dir.join(name).display()
        )
    })
}

/// Read a validation directory, verifying every file against the descriptor.
/// Returns the evidence and the manifest's SHA-256.
pub fn read(dir: &Path) -> Result<(Evidence, String)> {
    let dpath = dir.join(DESCRIPTOR);
    let dbytes = limits::read_bounded(&dpath, limits::MAX_JSON_BYTES).with_context(|| {
        format!(
            "reading {} (a reference directory is written by `validate --record-reference -o DIR`)",
            dpath.display()
        )
    })?;
    let desc: ValidateDescriptor = parse(dir, DESCRIPTOR, &dbytes)?;
    if !READABLE_FORMAT_VERSIONS.contains(&desc.format_version) {
        crate::refuse!(
            Code::UnsupportedVersion,
            "{}: format version {} (this tool reads {READABLE_FORMAT_VERSIONS:?})",
            dpath.display(),
            desc.format_version
        );
    }
    let get = |name: &str| -> Result<Vec<u8>> {
        let f = desc
            .files
            .iter()
            .find(|f| f.name == name)
            .with_context(|| format!("{}: lists no {name}", dpath.display()))?;
        let p = dir.join(name);
        let bytes = limits::read_bounded(&p, limits::MAX_SHARD_BYTES)?;
        let sha = fsutil::sha256_hex(&bytes);
        if bytes.len() as u64 != f.size_bytes || sha != f.sha256 {
            crate::refuse!(
                Code::DigestMismatch,
                "{}: {} bytes with SHA-256 {sha}, but the descriptor records {} bytes with {}: the reference was \
                    changed after it was recorded",
                p.display(),
                bytes.len(),
                f.size_bytes,
                f.sha256
            );
        }
        Ok(bytes)
    };
    let mbytes = get(MANIFEST)?;
    let manifest: ValidateManifest = parse(dir, MANIFEST, &mbytes)?;
    let rounds: RoundsFile = parse(dir, ROUNDS, &get(ROUNDS)?)?;
    let health: HealthReport = parse(dir, HEALTH, &get(HEALTH)?)?;
    let topology: Topology = parse(dir, TOPOLOGY, &get(TOPOLOGY)?)?;
    if !READABLE_FORMAT_VERSIONS.contains(&manifest.format_version) || rounds.format_version != manifest.format_version
    {
        crate::refuse!(
            Code::UnsupportedVersion,
            "{}: format version {} with rounds.json of version {} (this tool reads {READABLE_FORMAT_VERSIONS:?}, one \
                version per directory)",
            dir.join(MANIFEST).display(),
            manifest.format_version,
            rounds.format_version
        );
    }
    if rounds.rounds.len() < 2 {
        crate::refuse!(
            Code::BadInput,
            "{}: {} rounds; a reference needs at least 2",
            dir.join(ROUNDS).display(),
            rounds.rounds.len()
        );
    }
    check_recorded(&manifest.settings, &rounds, dir)?;
    Ok((Evidence { manifest, rounds, health, topology }, fsutil::sha256_hex(&mbytes)))
}

/// One job of a reference.
#[derive(Clone, Debug, PartialEq)]
pub struct ReferenceJob {
    /// The job directory's name in the set ("." for a reference of one job).
    pub name: String,
    /// Its evidence.
    pub evidence: Evidence,
    /// Its manifest's SHA-256.
    pub manifest_sha: String,
}

/// A reference: one job, or several recorded on the trusted node(s).
#[derive(Clone, Debug, PartialEq)]
pub struct ReferenceSet {
    /// The jobs, in name order.
    pub jobs: Vec<ReferenceJob>,
    /// The digest recorded in a validation's manifest (see [`ValidateManifest::reference`]).
    pub digest: String,
}

impl ReferenceSet {
    /// The first job (every job agrees on the settings and the node kind).
    pub fn first(&self) -> &Evidence {
        &self.jobs[0].evidence
    }
}

/// Read a reference: `dir` itself a validation directory (one job), or a
/// directory of them (several jobs, subdirectories whose names do not start
/// with '.'; files beside them are ignored). Refuses, naming the directory:
/// a subdirectory that is not a validation directory, a set with no job, and
/// jobs that differ in settings or node kind (backend, ranks, SKU, GPU count,
/// driver major version, NCCL version).
pub fn read_set(dir: &Path) -> Result<ReferenceSet> {
    if dir.join(DESCRIPTOR).exists() || !dir.is_dir() {
        let (evidence, sha) = read(dir)?;
        return Ok(ReferenceSet {
            jobs: vec![ReferenceJob { name: ".".into(), evidence, manifest_sha: sha.clone() }],
            digest: sha,
        });
    }
    let mut names: Vec<String> = Vec::new();
    for e in std::fs::read_dir(dir).with_context(|| format!("reading {}", dir.display()))? {
        let e = e.with_context(|| format!("reading {}", dir.display()))?;
        let name = e.file_name().to_string_lossy().into_owned();
        if name.starts_with('.') || !e.path().is_dir() {
            continue;
        }
        if !e.path().join(DESCRIPTOR).exists() {
            crate::refuse!(
                Code::BadInput,
                "{}: not a validation directory (no {DESCRIPTOR}); a reference of several jobs holds only job \
                    directories written by `validate --record-reference -o {}/JOB`",
                e.path().display(),
                dir.display()
            );
        }
        names.push(name);
    }
    names.sort();
    if names.is_empty() {
        crate::refuse!(
            Code::BadInput,
            "{}: neither a reference directory (no {DESCRIPTOR}) nor a directory of reference jobs (no subdirectory \
                holds one); a reference is written by `validate --record-reference -o DIR`",
            dir.display()
        );
    }
    let mut jobs = Vec::new();
    for name in names {
        let (evidence, manifest_sha) = read(&dir.join(&name))?;
        jobs.push(ReferenceJob { name, evidence, manifest_sha });
    }
    let (first, rest) = jobs.split_first().expect("at least one job");
    for j in rest {
        let mut why = contradictions(&j.evidence.manifest.node, &first.evidence.manifest.node, &Site::default());
        if j.evidence.manifest.settings != first.evidence.manifest.settings {
            why.push(format!(
                "settings {:?}, job {}'s {:?}",
                j.evidence.manifest.settings, first.name, first.evidence.manifest.settings
            ));
        }
        if !why.is_empty() {
            crate::refuse!(
                Code::BadInput,
                "{}: the jobs of one reference must agree; this job differs from {}: {}",
                dir.join(&j.name).display(),
                dir.join(&first.name).display(),
                why.join("; ")
            );
        }
    }
    let lines: String = jobs.iter().map(|j| format!("{} {}\n", j.name, j.manifest_sha)).collect();
    let digest = fsutil::sha256_hex(lines.as_bytes());
    Ok(ReferenceSet { jobs, digest })
}

/// What a resealed reference could claim and no recording writes: settings
/// outside the ranges `validate` itself accepts (zero iterations would time
/// nothing), rounds whose sweeps do not hold the same sizes (averages over
/// different size sets), and wrong results (a reference computes right).
fn check_recorded(settings: &Settings, rounds: &RoundsFile, dir: &Path) -> Result<()> {
    let at = |name: &str| dir.join(name).display().to_string();
    ranges::int("settings.iters", settings.iters, 1, 1_000_000).with_context(|| at(MANIFEST))?;
    ranges::int("settings.warmup_iters", settings.warmup_iters, 0, 100_000).with_context(|| at(MANIFEST))?;
    if settings.sizes_bytes.is_empty() {
        crate::refuse!(
            Code::BadInput,
            "{}: settings.sizes_bytes is empty: a reference sweeps at least one size",
            at(MANIFEST)
        );
    }
    let sizes = |v: &[super::sweep::SizeResult]| v.iter().map(|r| r.bytes).collect::<Vec<u64>>();
    let first = &rounds.rounds[0];
    for r in &rounds.rounds {
        for (kind, got, want) in
            [("all_reduce", &r.all_reduce, &first.all_reduce), ("all_gather", &r.all_gather, &first.all_gather)]
        {
            if got.is_empty() || sizes(got) != sizes(want) {
                crate::refuse!(
                    Code::BadInput,
                    "{}: round {} holds {kind} sizes {:?}, round {} {:?}: every round holds exactly the same sizes",
                    at(ROUNDS),
                    r.round,
                    sizes(got),
                    first.round,
                    sizes(want)
                );
            }
            if let Some(w) = got.iter().find(|x| x.wrong_elements.is_some_and(|w| w > 0)) {
                crate::refuse!(
                    Code::BadInput,
                    "{}: round {} records {} wrong elements in its {kind} of {} bytes: a reference computed wrong \
                        results",
                    at(ROUNDS),
                    r.round,
                    w.wrong_elements.unwrap_or(0),
                    w.bytes
                );
            }
        }
    }
    Ok(())
}

/// Changes a site may allow between the reference and the node.
pub(crate) const ALLOWABLE: [&str; 5] = ["sku", "gpu_count", "ranks", "driver", "nccl"];

/// The site's thresholds and allowed changes (`--site FILE`, TOML).
#[derive(schemars::JsonSchema, Serialize, Deserialize, Clone, Debug, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct Site {
    /// Each collective's geometric-mean busbw over the sweep must be at least
    /// this fraction of the reference's (default 0.95).
    #[serde(default = "default_busbw_min_ratio")]
    pub busbw_min_ratio: f64,
    /// The workload's per-token latency must be at most this multiple of the
    /// reference's (default 1.05).
    #[serde(default = "default_token_latency_max_ratio")]
    pub token_latency_max_ratio: f64,
    /// Two-sided coverage of the ratio checks as one family (default 0.95):
    /// each interval at 1 − (1 − coverage)/3 (see [`super::verdict::check_coverage`]).
    #[serde(default = "default_coverage")]
    pub coverage: f64,
    /// Largest growth of one NVLink's CRC (flit + data) error counters during a
    /// validation that health accepts; absent (the default): reported, not judged.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub nvlink_crc_errors_max: Option<u64>,
    /// Differences from the reference that are accepted instead of refused:
    /// any of `sku`, `gpu_count`, `ranks`, `driver`, `nccl` (default none).
    #[serde(default)]
    pub allow: Vec<String>,
}

fn default_busbw_min_ratio() -> f64 {
    0.95
}
fn default_token_latency_max_ratio() -> f64 {
    1.05
}
fn default_coverage() -> f64 {
    inference::COVERAGE
}

impl Default for Site {
    fn default() -> Self {
        Site {
            busbw_min_ratio: default_busbw_min_ratio(),
            token_latency_max_ratio: default_token_latency_max_ratio(),
            coverage: default_coverage(),
            nvlink_crc_errors_max: None,
            allow: Vec::new(),
        }
    }
}

/// Every key a site file may hold, in the order the documentation lists them.
pub(crate) const SITE_KEYS: [&str; 5] =
    ["busbw_min_ratio", "token_latency_max_ratio", "coverage", "nvlink_crc_errors_max", "allow"];

impl Site {
    /// Parse and check a site TOML. Refuses with `BAD_INPUT` naming `origin` and the key: not TOML,
    /// an unknown key, a value of the wrong type or out of range, and an inverted threshold (a
    /// minimum ratio above 1 or a maximum below 1, which the reference itself could not pass).
    pub fn parse(text: &str, origin: &str) -> Result<Self> {
        use crate::core::refusal::{refuse, Code::BadInput};
        let table: toml::Table = match toml::from_str(text) {
            Ok(t) => t,
            Err(e) => {
                let line = e.span().map(|r| text[..r.start.min(text.len())].matches('\n').count() + 1).unwrap_or(1);
                crate::refuse!(
                    BadInput,
                    "{origin}:{line}: not a site file (not TOML): {}",
                    e.message().replace('\n', " ")
                )
            }
        };
        if let Some(k) = table.keys().find(|k| !SITE_KEYS.contains(&k.as_str())) {
            crate::refuse!(BadInput, "{origin}: unknown key {k:?} (a site file holds only {})", SITE_KEYS.join(", "));
        }
        // one key at a time, so that a wrong type names its key
        for (k, v) in &table {
            let one = toml::Table::from_iter([(k.clone(), v.clone())]);
            if let Err(e) = toml::Value::Table(one).try_into::<Site>() {
                crate::refuse!(BadInput, "{origin}: {k} = {v}: {}", e.message());
            }
        }
        let s: Site = toml::Value::Table(table)
            .try_into()
            .map_err(|e| refuse(BadInput, format!("{origin}: not a site file: {}", e.message())))?;
        for (k, v) in [("busbw_min_ratio", s.busbw_min_ratio), ("token_latency_max_ratio", s.token_latency_max_ratio)] {
            if !(v.is_finite() && v > 0.0) {
                crate::refuse!(BadInput, "{origin}: {k} = {v} must be a positive number");
            }
        }
        if s.busbw_min_ratio > 1.0 {
            crate::refuse!(
                BadInput,
                "{origin}: busbw_min_ratio = {} is inverted: a minimum busbw ratio above 1 fails a node as fast as the \
                    reference, and the reference itself; it must be at most 1",
                s.busbw_min_ratio
            );
        }
        if s.token_latency_max_ratio < 1.0 {
            crate::refuse!(
                BadInput,
                "{origin}: token_latency_max_ratio = {} is inverted: a maximum latency ratio below 1 fails a node as \
                    fast as the reference, and the reference itself; it must be at least 1",
                s.token_latency_max_ratio
            );
        }
        if !(s.coverage > 0.0 && s.coverage < 1.0) {
            crate::refuse!(BadInput, "{origin}: coverage = {} must be in (0, 1)", s.coverage);
        }
        if let Some(a) = s.allow.iter().find(|a| !ALLOWABLE.contains(&a.as_str())) {
            crate::refuse!(BadInput, "{origin}: allow = {a:?} is not one of {}", ALLOWABLE.join(", "));
        }
        Ok(s)
    }

    /// Read `path`.
    pub fn read(path: &Path) -> Result<Self> {
        let text = limits::read_text_bounded(path, limits::MAX_SPEC_BYTES)
            .with_context(|| format!("reading site file {}", path.display()))?;
        Self::parse(&text, &path.display().to_string())
    }
}

fn driver_major(v: &str) -> &str {
    v.split('.').next().unwrap_or(v)
}

/// A backend as the user spells it (`cpu`, `cuda`: the serde name), not its Rust name.
pub(crate) fn backend_name(b: BackendKind) -> String {
    format!("{b:?}").to_lowercase()
}

/// Why `reference` does not describe `node`, each contradiction named; the
/// site's `allow` list lets the listed changes through. The backend must always match.
pub fn contradictions(node: &NodeFacts, reference: &NodeFacts, site: &Site) -> Vec<String> {
    let allowed = |k: &str| site.allow.iter().any(|a| a == k);
    let mut v = Vec::new();
    if node.backend != reference.backend {
        v.push(format!("backend {}, the reference's {}", backend_name(node.backend), backend_name(reference.backend)));
        return v;
    }
    if node.ranks != reference.ranks && !allowed("ranks") {
        v.push(format!(
            "rank count {} (the reference ran {} ranks); allow = [\"ranks\"] in the site file accepts this",
            node.ranks, reference.ranks
        ));
    }
    if node.sku != reference.sku && !allowed("sku") {
        v.push(format!("SKU {:?}, the reference's {:?}; allow = [\"sku\"] accepts this", node.sku, reference.sku));
    }
    if node.gpu_count != reference.gpu_count && !allowed("gpu_count") {
        v.push(format!(
            "GPU count {:?}, the reference's {:?}; allow = [\"gpu_count\"] accepts this",
            node.gpu_count, reference.gpu_count
        ));
    }
    if node.driver_version.as_deref().map(driver_major) != reference.driver_version.as_deref().map(driver_major)
        && !allowed("driver")
    {
        v.push(format!(
            "driver {:?}, the reference's {:?} (major versions differ); allow = [\"driver\"] accepts this",
            node.driver_version, reference.driver_version
        ));
    }
    if node.nccl_version != reference.nccl_version && !allowed("nccl") {
        v.push(format!(
            "NCCL {:?}, the reference's {:?}; allow = [\"nccl\"] accepts this",
            node.nccl_version, reference.nccl_version
        ));
    }
    v
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::refusal::{self, Code};

    fn facts() -> NodeFacts {
        NodeFacts {
            host: "a".into(),
            backend: BackendKind::Cuda,
            ranks: 8,
            sku: "NVIDIA H200".into(),
            gpu_count: Some(8),
            driver_version: Some("570.86.15".into()),
            nccl_version: Some("2.27.3".into()),
            mpi_library: None,
        }
    }

    #[test]
    fn refusals_name_the_contradiction_unless_allowed() {
        let site = Site::default();
        assert!(contradictions(&facts(), &facts(), &site).is_empty());
        let mut n = facts();
        n.driver_version = Some("570.99.1".into());
        assert!(contradictions(&n, &facts(), &site).is_empty(), "same driver major");
        n.driver_version = Some("575.1".into());
        n.ranks = 4;
        let c = contradictions(&n, &facts(), &site);
        assert_eq!(c.len(), 2, "{c:?}");
        assert!(c[0].starts_with("rank count 4") && c[1].starts_with("driver"), "{c:?}");
        let allow = Site { allow: vec!["driver".into(), "ranks".into()], ..Site::default() };
        assert!(contradictions(&n, &facts(), &allow).is_empty());
    }

    #[test]
    fn site_files_are_checked() {
        let s = Site::parse("busbw_min_ratio = 0.9\nallow = [\"nccl\"]\n", "site.toml").unwrap();
        assert_eq!((s.busbw_min_ratio, s.token_latency_max_ratio), (0.9, 1.05));
        let all = Site::parse(
            "busbw_min_ratio = 1\ntoken_latency_max_ratio = 1\ncoverage = 0.9\nnvlink_crc_errors_max = 0\nallow = []\n",
            "s",
        )
        .unwrap();
        assert_eq!(
            (all.busbw_min_ratio, all.token_latency_max_ratio, all.nvlink_crc_errors_max),
            (1.0, 1.0, Some(0)),
            "parity is allowed"
        );
        // every fault is BAD_INPUT, naming the file and the key
        for (text, key) in [
            ("busbw_min = 0.9\n", "busbw_min"),
            ("token_latency_max_ratio = -1\n", "token_latency_max_ratio"),
            ("allow = [\"kernel\"]\n", "kernel"),
            ("busbw_min_ratio = 1.2\n", "busbw_min_ratio"),
            ("token_latency_max_ratio = 0.9\n", "token_latency_max_ratio"),
            ("nvlink_crc_errors_max = -1\n", "nvlink_crc_errors_max"),
            ("nvlink_crc_errors_max = \"many\"\n", "nvlink_crc_errors_max"),
            ("coverage = 1.5\n", "coverage"),
            ("[busbw_min_ratio]\n", "busbw_min_ratio"),
            ("coverage = 0.9\nbusbw_min_ratio = \n", "site.toml:2"),
        ] {
            let e = Site::parse(text, "site.toml").unwrap_err();
            assert_eq!(refusal::code_of(&e), Some(Code::BadInput), "{text}: {e:#}");
            let msg = format!("{e:#}");
            assert!(msg.contains("site.toml") && msg.contains(key), "{text}: {msg}");
        }
        let e = format!("{:#}", Site::parse("busbw_min_ratio = 1.2\n", "s").unwrap_err());
        assert!(e.contains("inverted"), "{e}");
    }

    #[test]
    fn recorded_numbers_read_back_bit_for_bit() {
        // a reference re-read must give the verdict it gave when written: serde_json's default
        // parser may land one ulp off (98.50612467092249 read as ...247), so exact parsing is on
        let mut rng = <rand_chacha::ChaCha8Rng as rand::SeedableRng>::seed_from_u64(48);
        for _ in 0..20_000 {
            let x: f64 = rand::Rng::gen_range(&mut rng, 1e-3..1e6);
            let back: f64 = parse(Path::new("ref"), "x", serde_json::to_string(&x).unwrap().as_bytes()).unwrap();
            assert_eq!(back.to_bits(), x.to_bits(), "{x}");
        }
        assert_eq!(parse::<f64>(Path::new("ref"), "x", b"98.50612467092249").unwrap(), 98.50612467092249);
    }

    #[test]
    fn the_committed_site_file_parses() {
        let text = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/slurm/site-h200-vm.toml")).unwrap();
        assert_eq!(Site::parse(&text, "slurm/site-h200-vm.toml").unwrap().busbw_min_ratio, 0.90);
    }

    #[test]
    fn every_site_key_is_documented_with_its_meaning() {
        let doc = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/docs/VALIDATION.md")).unwrap();
        for k in SITE_KEYS {
            assert!(doc.contains(&format!("| `{k}` |")), "docs/VALIDATION.md: a row of the site-key table for {k}");
        }
    }
}
