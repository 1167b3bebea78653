//! Campaigns: frozen manifest, randomized round-robin jobs, append-only
//! attempts, selection, completeness, analysis gate and hashed archives (docs/ARCHITECTURE.md §7).
//!
//! Files in a campaign directory: `manifest.json` + `manifest.sha256`
//! (frozen by `plan`), `blinding.json` (label → name, only for blind
//! campaigns), `attempts.jsonl` (one terminal record per attempt, appended)
//! with `attempts/ATTEMPT.{stdout,stderr}`, `runs/ATTEMPT/` (shards and run
//! record), `selection.json`. Each command consumes what the previous one
//! wrote and refuses to go on when the chain is broken.
mod attempts;
pub mod chain;
mod exec;
pub mod hardware;
mod lock;
pub(crate) use lock::lock_report_dir;
mod select;
pub mod spec;
pub mod truth;
mod verify;

use crate::analysis::summary;
use crate::core::fsutil::{build_dir_new, sha256_file, sha256_hex, write_json_new, write_new_atomic};
use crate::core::refusal::{refuse, Code};
use crate::core::workload::Phase;
use crate::core::{clock, limits, stats};
use crate::evidence::commtrace::{p2p, CommTrace};
use crate::evidence::join::{self, JoinedRun};
use crate::evidence::{run, trace};
use anyhow::{Context, Result};
use chain::{load_manifest, Selection, Verdict};
use serde::{Deserialize, Serialize};
use std::path::Path;

/// Every name a campaign directory may hold; `plan` refuses a directory holding any of them.
pub const CAMPAIGN_STATE: &[&str] = &[
    "manifest.json",
    "manifest.sha256",
    "blinding.json",
    chain::ATTEMPTS,
    "attempts",
    "runs",
    "selection.json",
    "report",
    "sources",
    TRACE_FILE,
    CONFIG_TRACES_DIR,
    truth::TRUTH_INPUTS_DIR,
    chain::LOCK_FILE,
    chain::INFLIGHT_FILE,
];

/// The campaign's frozen copy of `workload.trace`.
pub(crate) const TRACE_FILE: &str = "trace.json";

/// The folder of the configurations' own frozen traces (`traces/NAME.json`).
pub(crate) const CONFIG_TRACES_DIR: &str = "traces";

/// Read a spec's trace and refuse, once at plan time, what every job would
/// refuse (the world size, the kinds, the groups): its bytes and SHA-256.
fn checked_trace(spec: &spec::CampaignSpec, spec_path: &Path, field: &str, rel: &str) -> Result<(Vec<u8>, String)> {
    let src = spec_path.parent().unwrap_or(Path::new(".")).join(rel);
    let bad_spec = |e: anyhow::Error| refuse(Code::BadSpec, format!("{field}: {e:#}"));
    let bytes = limits::read_bounded(&src, limits::MAX_TEXT_TABLE_BYTES)
        .map_err(|e| refuse(Code::BadSpec, format!("{field} {}: {e:#}", src.display())))?;
    let t = CommTrace::from_slice(&bytes).map_err(|e| {
        refuse(Code::BadSpec, format!("{field} {}: {e:#} (write one with commcanary import)", src.display()))
    })?;
    let allreduce_only = spec.workload.extra_args.iter().any(|a| a == "--trace-allreduce-only");
    let sha256 = sha256_hex(&bytes);
    // only the cpu backend runs an MPI capture's point-to-point program: refused before any job launches
    if spec.backend == "cuda" && !allreduce_only {
        p2p::refuse_on_backend_without_p2p(&t, &src, "cuda")
            .map_err(|e| refuse(Code::BadSpec, format!("{field}: {e:#}")))?;
    }
    for rank in 0..spec.ranks {
        trace::comm_trace_schedule(&t, &src, sha256.clone(), rank, spec.ranks, (0, 1), allreduce_only)
            .map_err(bad_spec)?;
    }
    Ok((bytes, sha256))
}

/// `plan`: validate a spec, freeze the manifest into `dir` (which must not hold one).
pub fn plan(spec_path: &Path, dir: &Path) -> Result<spec::Manifest> {
    let spec = spec::CampaignSpec::load(spec_path)?;
    spec.check_rank_plans().map_err(|e| e.context(format!("{}: invalid campaign spec", spec_path.display())))?;
    if dir.join("manifest.json").exists() {
        crate::refuse!(
            Code::CampaignState,
            "{} already holds a manifest; a frozen manifest is never replaced",
            dir.display()
        );
    }
    // runs, attempts or a selection of an earlier plan would be counted as this one's
    let state: Vec<&str> = CAMPAIGN_STATE.iter().copied().filter(|n| dir.join(n).symlink_metadata().is_ok()).collect();
    if !state.is_empty() {
        crate::refuse!(
            Code::CampaignState,
            "{} holds campaign state ({}); plan into a new directory (old runs are never adopted by a new manifest)",
            dir.display(),
            state.join(", ")
        );
    }
    // the workload's trace and the configurations' own, read and checked before anything is written
    let trace =
        spec.workload.trace.as_ref().map(|t| checked_trace(&spec, spec_path, "workload.trace", t)).transpose()?;
    let mut config_traces = Vec::new();
    for c in &spec.configs {
        if let Some(t) = &c.trace {
            let (bytes, sha) = checked_trace(&spec, spec_path, &format!("configs.{}.trace", c.name), t)?;
            config_traces.push((c.name.clone(), bytes, sha));
        }
    }
    let spec_dir = spec_path.parent().filter(|p| !p.as_os_str().is_empty()).unwrap_or(Path::new("."));
    let truth_inputs = spec.truth.as_ref().map(|t| truth::read_inputs(t, spec_dir)).transpose()?.unwrap_or_default();
    std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    let (mut m, blinding) = spec::plan(spec);
    if !truth_inputs.is_empty() {
        std::fs::create_dir_all(dir.join(truth::TRUTH_INPUTS_DIR))
            .with_context(|| format!("creating {}/{}", dir.display(), truth::TRUTH_INPUTS_DIR))?;
        for (name, bytes, sha) in truth_inputs {
            write_new_atomic(&dir.join(truth::TRUTH_INPUTS_DIR).join(&name), &bytes)?;
            m.truth_inputs.insert(name, sha);
        }
    }
    if let Some((bytes, sha256)) = trace {
        write_new_atomic(&dir.join(TRACE_FILE), &bytes)?;
        m.trace_sha256 = Some(sha256);
    }
    if !config_traces.is_empty() {
        std::fs::create_dir_all(dir.join(CONFIG_TRACES_DIR))
            .with_context(|| format!("creating {}/{CONFIG_TRACES_DIR}", dir.display()))?;
        for (name, bytes, sha) in config_traces {
            write_new_atomic(&dir.join(CONFIG_TRACES_DIR).join(format!("{name}.json")), &bytes)?;
            m.config_traces.insert(name, sha);
        }
    }
    let mut bytes = serde_json::to_vec_pretty(&m)?;
    bytes.push(b'\n');
    write_new_atomic(&dir.join("manifest.json"), &bytes)?;
    write_new_atomic(&dir.join("manifest.sha256"), format!("{}\n", sha256_hex(&bytes)).as_bytes())?;
    if let Some(b) = blinding {
        write_json_new(&dir.join("blinding.json"), &b)?;
    }
    Ok(m)
}

/// Per-configuration, per-phase result over jobs.
#[derive(schemars::JsonSchema, Serialize, Deserialize, Clone, Debug, PartialEq)]
pub struct ConfigPhaseResult {
    /// Configuration label (blinded where the campaign is).
    pub label: String,
    /// Phase.
    pub phase: Phase,
    /// Jobs.
    pub jobs: usize,
    /// Median over jobs of per-job medians, µs.
    pub median_us: f64,
    /// Interquartile range of the job medians (nearest-rank quartiles), µs.
    pub iqr_us: f64,
    /// Median over jobs of per-job 99th percentiles, µs.
    pub p99_us: f64,
    /// Rank within the phase by median (1 = fastest; no tie rule applied yet).
    pub rank: usize,
}

fn per_job(j: &JoinedRun, phase: Phase) -> Option<(f64, f64)> {
    let mut v = summary::job_samples_us(j, phase);
    let p99 = stats::percentile_nearest_rank(&mut v, 99.0)?;
    Some((stats::median(&mut v)?, p99))
}

/// Results over the selected runs (the caller has verified completeness).
pub fn results(dir: &Path) -> Result<Vec<ConfigPhaseResult>> {
    let (m, _) = load_manifest(dir)?;
    let sel: Selection =
        serde_json::from_slice(&limits::read_bounded(&dir.join("selection.json"), limits::MAX_JSON_BYTES)?)?;
    let mut per: std::collections::BTreeMap<(Phase, String), (Vec<f64>, Vec<f64>)> = Default::default();
    for e in &sel.entries {
        let Some(cell) = m.schedule.iter().find(|c| c.cell_id == e.cell_id) else { continue };
        if cell.truth {
            continue; // a truth cell has no shards; its metric is the truth section's
        }
        let label = cell.label.clone();
        let j = join::join_dir(&dir.join(&e.run_dir))?;
        j.refuse_synthetic("campaign results")?;
        for &p in &j.run.workload.phases {
            if let Some((med, p99)) = per_job(&j, p) {
                let slot = per.entry((p, label.clone())).or_default();
                slot.0.push(med);
                slot.1.push(p99);
            }
        }
    }
    let mut out = Vec::new();
    let phases: std::collections::BTreeSet<Phase> = per.keys().map(|k| k.0).collect();
    for p in phases {
        let mut rows: Vec<ConfigPhaseResult> = per
            .iter_mut()
            .filter(|(k, _)| k.0 == p)
            .map(|((_, label), (meds, p99s))| {
                let q1 = stats::percentile_nearest_rank(meds, 25.0).unwrap_or(f64::NAN);
                let q3 = stats::percentile_nearest_rank(meds, 75.0).unwrap_or(f64::NAN);
                ConfigPhaseResult {
                    label: label.clone(),
                    phase: p,
                    jobs: meds.len(),
                    median_us: stats::median(meds).unwrap_or(f64::NAN),
                    iqr_us: q3 - q1,
                    p99_us: stats::median(p99s).unwrap_or(f64::NAN),
                    rank: 0,
                }
            })
            .collect();
        rows.sort_by(|a, b| a.median_us.total_cmp(&b.median_us));
        for (i, r) in rows.iter_mut().enumerate() {
            r.rank = i + 1;
        }
        out.extend(rows);
    }
    Ok(out)
}

/// Human table of results.
pub(crate) fn render_results(rows: &[ConfigPhaseResult]) -> String {
    use std::fmt::Write;
    let mut o = String::new();
    let _ = writeln!(
        o,
        "{:<21} {:>4}  {:<24} {:>5} {:>12} {:>10} {:>12}",
        "phase", "rank", "config", "jobs", "median us", "IQR us", "p99 us"
    );
    let mut last = None;
    for r in rows {
        if last.is_some() && last != Some(r.phase) {
            let _ = writeln!(o);
        }
        last = Some(r.phase);
        let _ = writeln!(
            o,
            "{:<21} {:>4}  {:<24} {:>5} {:>12.1} {:>10.1} {:>12.1}",
            r.phase.name(),
            r.rank,
            r.label,
            r.jobs,
            r.median_us,
            r.iqr_us,
            r.p99_us
        );
    }
    o
}

/// The archive descriptor.
#[derive(schemars::JsonSchema, Serialize, Deserialize, Clone, Debug, PartialEq)]
pub struct ArchiveDescriptor {
    /// Format version.
    pub format_version: u32,
    /// Archive file name.
    pub archive_file: String,
    /// Its size.
    pub archive_size_bytes: u64,
    /// Its SHA-256.
    pub archive_sha256: String,
    /// Campaign id.
    pub campaign_id: String,
    /// Manifest identity.
    pub manifest_sha256: String,
    /// Selection digest.
    pub selection_sha256: Option<String>,
    /// Selected run ids.
    pub run_ids: Vec<String>,
    /// Repository identity at planning time.
    pub planned_at: spec::RepoIdentity,
    /// Repository identity at archiving time.
    pub archived_at: spec::RepoIdentity,
    /// Completeness verdict at archiving time.
    pub verdict: Verdict,
}

/// Every regular file under `root`, sorted. Symbolic links and special files
/// are refused (a link could pull files from outside the campaign into its
/// archive, or loop); nothing is followed.
fn files_sorted(root: &Path) -> Result<Vec<std::path::PathBuf>> {
    let mut out = Vec::new();
    let mut stack = vec![root.to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).with_context(|| format!("listing {}", d.display()))? {
            let p = e?.path();
            let t = std::fs::symlink_metadata(&p).with_context(|| format!("reading {}", p.display()))?.file_type();
            if t.is_symlink() {
                crate::refuse!(
                    Code::ArchiveLink,
                    "{} is a symbolic link; a campaign holds only regular files and directories (a link could bring in \
                        files from outside it)",
                    p.display()
                );
            } else if t.is_dir() {
                stack.push(p);
            } else if t.is_file() {
                out.push(p);
            } else {
                crate::refuse!(Code::ArchiveLink, "{} is neither a regular file nor a directory", p.display());
            }
        }
    }
    out.sort();
    Ok(out)
}

/// `path`'s absolute form (its parent resolved, so it may not exist yet).
fn resolved(path: &Path) -> Result<std::path::PathBuf> {
    let parent = path.parent().filter(|p| !p.as_os_str().is_empty()).unwrap_or_else(|| Path::new("."));
    let name = path.file_name().with_context(|| format!("{} has no file name", path.display()))?;
    match std::fs::canonicalize(parent) {
        Ok(p) => Ok(p.join(name)),
        // created here, the directory could land inside the campaign before that check refuses it
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => crate::refuse!(
            Code::BadArgument,
            "{}: its directory {} does not exist; create it first (mkdir -p {}) or write the archive elsewhere",
            path.display(),
            parent.display(),
            parent.display()
        ),
        Err(e) => Err(anyhow::Error::new(e).context(format!("resolving the directory of {}", path.display()))),
    }
}

/// Append one regular file, opened without following links, to the archive.
fn append_regular(b: &mut tar::Builder<std::fs::File>, p: &Path, name: &Path) -> Result<()> {
    use std::os::unix::fs::OpenOptionsExt;
    let mut f = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NOFOLLOW)
        .open(p)
        .with_context(|| format!("opening {}", p.display()))?;
    let meta = f.metadata()?;
    if !meta.is_file() {
        crate::refuse!(Code::ArchiveLink, "{} changed into something other than a regular file", p.display());
    }
    let mut h = tar::Header::new_gnu();
    h.set_metadata_in_mode(&meta, tar::HeaderMode::Deterministic);
    b.append_data(&mut h, name, &mut f).with_context(|| format!("adding {}", p.display()))
}

/// `archive`: tar the campaign directory to `out` and write `descriptor`.
/// Holds the campaign lock; only regular files go in (links refused); the
/// archive and descriptor must lie outside the campaign.
pub fn archive(dir: &Path, out: &Path, descriptor: &Path) -> Result<ArchiveDescriptor> {
    let (m, sha) = load_manifest(dir)?;
    let root = std::fs::canonicalize(dir).with_context(|| format!("resolving {}", dir.display()))?;
    for p in [out, descriptor] {
        if resolved(p)?.starts_with(&root) {
            crate::refuse!(
                Code::ArchiveOutputInside,
                "{} lies inside the campaign {}; write the archive and its descriptor elsewhere",
                p.display(),
                dir.display()
            );
        }
    }
    if out.exists() || descriptor.exists() {
        crate::refuse!(
            Code::AlreadyExists,
            "{} or {} already exists; archives are never overwritten",
            out.display(),
            descriptor.display()
        );
    }
    let _lock = chain::lock_campaign_for_reading(dir, &format!("archive {}", dir.display()))?;
    let files = files_sorted(&root)?;
    let selection_sha = || sha256_file(&dir.join("selection.json")).ok();
    let selection_before = selection_sha();
    let verdict = chain::verify(dir)?;
    if selection_sha() != selection_before {
        crate::refuse!(
            Code::DigestMismatch,
            "{}: selection.json changed while it was being verified; archive again",
            dir.display()
        );
    }
    let tmp = out.with_extension(format!("tmp.{}", std::process::id()));
    let written = (|| -> Result<()> {
        let f = std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .open(&tmp)
            .with_context(|| format!("creating {}", tmp.display()))?;
        let mut b = tar::Builder::new(f);
        b.mode(tar::HeaderMode::Deterministic);
        let name = dir.file_name().map(|n| n.to_string_lossy().to_string()).unwrap_or_else(|| "campaign".into());
        for p in files {
            let rel = p.strip_prefix(&root).context("archived file outside the campaign")?;
            append_regular(&mut b, &p, &Path::new(&name).join(rel))?;
        }
        let f = b.into_inner()?;
        f.sync_all()?;
        // what went in is what was verified: a file replaced after verify is caught here, before anything is published
        let written = std::fs::File::open(&tmp).with_context(|| format!("reading {}", tmp.display()))?;
        let members = inspect_members(std::io::BufReader::new(written), &tmp.display().to_string())?;
        members_match(
            &members,
            &sha,
            selection_before.as_deref(),
            &format!("the archive being written of {}", dir.display()),
        )?;
        std::fs::hard_link(&tmp, out).with_context(|| format!("publishing {}", out.display()))
    })();
    let _ = std::fs::remove_file(&tmp);
    written?;
    let sel: Option<Selection> = limits::read_bounded(&dir.join("selection.json"), limits::MAX_JSON_BYTES)
        .ok()
        .and_then(|b| serde_json::from_slice(&b).ok());
    let d = ArchiveDescriptor {
        format_version: 1,
        archive_file: out.file_name().map(|n| n.to_string_lossy().to_string()).unwrap_or_default(),
        archive_size_bytes: std::fs::metadata(out)?.len(),
        archive_sha256: sha256_file(out)?,
        campaign_id: m.campaign_id.clone(),
        manifest_sha256: sha,
        selection_sha256: selection_before,
        run_ids: sel.map(|s| s.entries.iter().map(|e| e.attempt_id.clone()).collect()).unwrap_or_default(),
        planned_at: m.repository.clone(),
        archived_at: spec::RepoIdentity::current(),
        verdict,
    };
    write_json_new(descriptor, &d)?;
    Ok(d)
}

/// `check-archive`: the archive's size and digest match its descriptor, and
/// every member is a regular file under one relative top directory (no
/// absolute names, no `..`, no links or devices, no name twice). Streams the
/// archive; nothing is extracted.
pub(crate) fn check_archive(archive: &Path, descriptor: &Path) -> Result<ArchiveDescriptor> {
    let d: ArchiveDescriptor = serde_json::from_slice(&limits::read_bounded(descriptor, limits::MAX_JSON_BYTES)?)
        .with_context(|| format!("{}: not an archive descriptor", descriptor.display()))?;
    let size = std::fs::metadata(archive).with_context(|| format!("reading {}", archive.display()))?.len();
    if size != d.archive_size_bytes {
        crate::refuse!(
            Code::DigestMismatch,
            "{}: {size} bytes, the descriptor says {}",
            archive.display(),
            d.archive_size_bytes
        );
    }
    let sha = sha256_file(archive)?;
    if sha != d.archive_sha256 {
        crate::refuse!(
            Code::DigestMismatch,
            "{}: SHA-256 {sha}, the descriptor says {}: the archive changed",
            archive.display(),
            d.archive_sha256
        );
    }
    let f = std::fs::File::open(archive).with_context(|| format!("reading {}", archive.display()))?;
    let members = inspect_members(std::io::BufReader::new(f), &archive.display().to_string())?;
    members_match(&members, &d.manifest_sha256, d.selection_sha256.as_deref(), &archive.display().to_string())?;
    Ok(d)
}

/// What a tar stream holds: every member's SHA-256 by its name inside the
/// campaign directory, and the bytes of the members that name the others'
/// digests (manifest, its digest, the selection).
#[derive(Clone, Debug, Default)]
pub struct Members {
    /// SHA-256 per member, named relative to the campaign directory.
    pub sha256: std::collections::BTreeMap<String, String>,
    /// `manifest.json`, `manifest.sha256` and `selection.json`, where present.
    pub documents: std::collections::BTreeMap<String, Vec<u8>>,
}

const DIGEST_DOCUMENTS: [&str; 3] = ["manifest.json", "manifest.sha256", "selection.json"];

/// The archived campaign is the one its digests describe: the manifest
/// matches its recorded digest and `manifest_sha256`; the selection matches
/// `selection_sha256` (absent only when none is expected) and names that
/// manifest; every selected run's `run.json` and shards, and every frozen
/// trace the manifest names, are members with exactly the recorded digests.
/// `name` is for messages. Refuses with `DIGEST_MISMATCH` naming the member.
pub(crate) fn members_match(
    m: &Members,
    manifest_sha256: &str,
    selection_sha256: Option<&str>,
    name: &str,
) -> Result<()> {
    let member = |rel: &str| m.sha256.get(rel).map(String::as_str);
    let want = |rel: &str, sha: &str| -> Result<()> {
        match member(rel) {
            Some(got) if got == sha => Ok(()),
            Some(got) => crate::refuse!(
                Code::DigestMismatch,
                "{name}: member {rel} has SHA-256 {got}, the campaign's records say {sha}"
            ),
            None => crate::refuse!(
                Code::DigestMismatch,
                "{name}: member {rel} is missing; the campaign's records name it with SHA-256 {sha}"
            ),
        }
    };
    want("manifest.json", manifest_sha256)?;
    let recorded = m.documents.get("manifest.sha256").map(|b| String::from_utf8_lossy(b).trim().to_string());
    if recorded.as_deref() != Some(manifest_sha256) {
        crate::refuse!(
            Code::DigestMismatch,
            "{name}: manifest.sha256 is {recorded:?}, the manifest's digest is {manifest_sha256}"
        );
    }
    let manifest: spec::Manifest = serde_json::from_slice(
        m.documents.get("manifest.json").map(Vec::as_slice).unwrap_or_default(),
    )
    .map_err(|e| refuse(Code::DigestMismatch, format!("{name}: member manifest.json is not a manifest: {e}")))?;
    if let Some(sha) = &manifest.trace_sha256 {
        want(TRACE_FILE, sha)?;
    }
    for (config, sha) in &manifest.config_traces {
        want(&format!("{CONFIG_TRACES_DIR}/{config}.json"), sha)?;
    }
    match (selection_sha256, m.documents.get("selection.json")) {
        (None, None) => Ok(()),
        (None, Some(_)) => {
            crate::refuse!(Code::DigestMismatch, "{name}: holds a selection.json that its descriptor does not name")
        }
        (Some(sha), _) => {
            want("selection.json", sha)?;
            let sel: Selection = serde_json::from_slice(&m.documents["selection.json"]).map_err(|e| {
                refuse(Code::DigestMismatch, format!("{name}: member selection.json is not a selection: {e}"))
            })?;
            if sel.manifest_sha256 != manifest_sha256 {
                crate::refuse!(
                    Code::DigestMismatch,
                    "{name}: selection.json selects for manifest {}, the archive's is {manifest_sha256}",
                    sel.manifest_sha256
                );
            }
            for (name, sha) in &manifest.truth_inputs {
                want(&format!("{}/{name}", truth::TRUTH_INPUTS_DIR), sha)?;
            }
            for e in &sel.entries {
                let is_truth = manifest.schedule.iter().any(|c| c.cell_id == e.cell_id && c.truth);
                let record = if is_truth { truth::TRUTH_FILE } else { run::RUN_FILE };
                want(&format!("{}/{record}", e.run_dir), &e.run_json_sha256)?;
                for sh in &e.shards {
                    want(&format!("{}/{}", e.run_dir, sh.file), &sh.sha256)?;
                }
            }
            Ok(())
        }
    }
}

/// Inspect every member of a tar stream (`name` for messages): each must be a
/// regular file named relative to one top directory, with no `..`, root or
/// repeated name. Returns every member's digest. Reads the stream once.
pub fn inspect_members<R: std::io::Read>(reader: R, name: &str) -> Result<Members> {
    use sha2::Digest;
    use std::io::Read;
    let mut t = tar::Archive::new(reader);
    let mut top: Option<std::ffi::OsString> = None;
    let mut seen = std::collections::BTreeSet::new();
    let mut out = Members::default();
    for e in t.entries().with_context(|| format!("{name}: not a tar archive"))? {
        let mut e = e.with_context(|| format!("{name}: damaged tar entry"))?;
        let raw = String::from_utf8_lossy(&e.path_bytes()).into_owned();
        if e.header().entry_type() != tar::EntryType::Regular {
            crate::refuse!(
                Code::ArchiveMember,
                "{name}: member {raw:?} is a {:?}, not a regular file",
                e.header().entry_type()
            );
        }
        let p = Path::new(&raw);
        let mut comps = p.components();
        let first = match comps.next() {
            Some(std::path::Component::Normal(c)) => c.to_os_string(),
            _ => {
                crate::refuse!(Code::ArchiveMember, "{name}: member {raw:?} is not a relative name inside the campaign")
            }
        };
        if !comps.clone().all(|c| matches!(c, std::path::Component::Normal(_))) || comps.next().is_none() {
            crate::refuse!(
                Code::ArchiveMember,
                "{name}: member {raw:?} is not a file name inside the campaign directory"
            );
        }
        if top.get_or_insert_with(|| first.clone()) != &first {
            crate::refuse!(Code::ArchiveMember, "{name}: member {raw:?} is outside the campaign directory {:?}", top);
        }
        if seen.len() >= limits::MAX_ARCHIVE_MEMBERS {
            crate::refuse!(Code::OverLimit, "{name}: more than {} members", limits::MAX_ARCHIVE_MEMBERS);
        }
        if !seen.insert(raw.clone()) {
            crate::refuse!(Code::ArchiveMember, "{name}: member {raw:?} appears twice");
        }
        let rel =
            p.components().skip(1).map(|c| c.as_os_str().to_string_lossy().into_owned()).collect::<Vec<_>>().join("/");
        let keep = DIGEST_DOCUMENTS.contains(&rel.as_str());
        if keep && e.header().size().unwrap_or(u64::MAX) > limits::MAX_JSON_BYTES {
            crate::refuse!(Code::OverLimit, "{name}: member {raw:?} is larger than {} bytes", limits::MAX_JSON_BYTES);
        }
        let mut h = sha2::Sha256::new();
        let mut doc = Vec::new();
        let reading = || format!("{name}: reading member {raw:?}");
        if keep {
            e.read_to_end(&mut doc).with_context(reading)?;
            h.update(&doc);
        } else {
            std::io::copy(&mut e, &mut h).with_context(reading)?;
        }
        out.sha256.insert(rel.clone(), hex::encode(h.finalize()));
        if keep {
            out.documents.insert(rel, doc);
        }
    }
    Ok(out)
}

/// `campaign join A B -o C`: one campaign from two executed ones, only when
/// they are the same experiment. Refuses, naming the field: different
/// repository identity, analysis policy, configurations, workload, backend,
/// ranks or launcher; the same manifest twice; a repeated campaign or
/// attempt id. C holds both manifests (as `sources/`), the attempts of both
/// with their runs, and a manifest whose schedule is A's rounds followed by
/// B's (renumbered), so select/verify/analyze work on C unchanged.
pub(crate) fn join_campaigns(a: &Path, b: &Path, out: &Path) -> Result<spec::Manifest> {
    let (ma, sa) = load_manifest(a)?;
    let (mb, sb) = load_manifest(b)?;
    if sa == sb {
        crate::refuse!(
            Code::CampaignMismatch,
            "{} and {} hold the same manifest ({sa}): a campaign is not joined with itself",
            a.display(),
            b.display()
        );
    }
    if ma.campaign_id == mb.campaign_id {
        crate::refuse!(Code::CampaignMismatch, "both campaigns have id {}", ma.campaign_id);
    }
    let same = |what: &str, of: fn(&spec::Manifest) -> serde_json::Value| -> Result<()> {
        let (x, y) = (of(&ma), of(&mb));
        if x != y {
            crate::refuse!(Code::CampaignMismatch, "cannot join: {what} differs ({} vs {})", x, y);
        }
        Ok(())
    };
    use serde_json::json;
    same("repository identity (commit and dirty files)", |m| json!([m.repository.commit, m.repository.dirty]))?;
    same("analysis policy", |m| json!(m.spec.analysis))?;
    same("configurations", |m| json!(m.configs))?;
    same("workload", |m| json!(m.spec.workload))?;
    same("frozen trace (trace_sha256)", |m| json!(m.trace_sha256))?;
    same("truth (the job, its metric and its frozen inputs)", |m| json!([m.spec.truth, m.truth_inputs]))?;
    // the joined campaign's cells are held to one contract; verify then holds
    // B's cells to the identity A's recorded (and the other way round)
    same("hardware contract", |m| json!(m.hardware))?;
    same("backend, ranks and launcher", |m| json!([m.spec.backend, m.spec.ranks, m.spec.launcher]))?;
    let att_a = chain::read_attempts(a)?;
    let att_b = chain::read_attempts(b)?;
    if out.exists() {
        crate::refuse!(Code::AlreadyExists, "{} already exists; a joined campaign is written fresh", out.display());
    }
    // B's rounds come after A's: rename B's cells and attempts
    let offset = ma.spec.repetitions;
    let rename = |cell_id: &str, round: u32| -> String {
        let rest = cell_id.split_once('-').map(|x| x.1).unwrap_or(cell_id);
        format!("r{:02}-{rest}", round + offset)
    };
    let mut m = ma.clone();
    m.campaign_id = format!("{}+{}", ma.campaign_id, mb.campaign_id);
    m.spec.repetitions = ma.spec.repetitions + mb.spec.repetitions;
    m.planned_unix_ms = clock::unix_ms();
    for c in &mb.schedule {
        let mut c2 = c.clone();
        c2.cell_id = rename(&c.cell_id, c.round);
        c2.round = c.round + offset;
        m.schedule.push(c2);
    }
    // built in a temporary sibling and renamed at the end: a refusal half-way
    // (a duplicate attempt, a full disk) leaves no half-written campaign behind
    build_dir_new(out, |stage| {
        std::fs::create_dir_all(stage.join("runs"))?;
        std::fs::create_dir_all(stage.join("attempts"))?;
        std::fs::create_dir_all(stage.join("sources"))?;
        let copy_tree = |from: &Path, to: &Path| -> Result<()> {
            for f in files_sorted(from)? {
                let dest = to.join(f.strip_prefix(from).expect("under from"));
                std::fs::create_dir_all(dest.parent().expect("has parent"))?;
                std::fs::copy(&f, &dest).with_context(|| format!("copying {}", f.display()))?;
            }
            Ok(())
        };
        let mut lines = Vec::new();
        let mut seen = std::collections::BTreeSet::new();
        for (src, atts, renamed) in [(a, &att_a, false), (b, &att_b, true)] {
            for at in atts.iter() {
                let mut at = at.clone();
                // a run directory is a plain path inside its campaign: no `..`, no absolute path
                if at.run_dir.is_empty()
                    || !Path::new(&at.run_dir).components().all(|c| matches!(c, std::path::Component::Normal(_)))
                {
                    crate::refuse!(
                        Code::BadStructure,
                        "{}: attempt {} names run directory {:?}, not a path inside the campaign",
                        src.display(),
                        at.attempt_id,
                        at.run_dir
                    );
                }
                let (id, run_dir) = (at.attempt_id.clone(), at.run_dir.clone());
                if renamed {
                    let new_cell = rename(&at.cell_id, at.round);
                    let suffix = at.attempt_id.rsplit_once("-a").map(|x| x.1.to_string()).unwrap_or_default();
                    at.attempt_id = format!("{new_cell}-a{suffix}");
                    at.run_dir = format!("runs/{}", at.attempt_id);
                    at.round += offset;
                    at.cell_id = new_cell;
                }
                copy_tree(&src.join(&run_dir), &stage.join(&at.run_dir))?;
                for ext in ["stdout", "stderr"] {
                    let _ = std::fs::copy(
                        src.join("attempts").join(format!("{id}.{ext}")),
                        stage.join("attempts").join(format!("{}.{ext}", at.attempt_id)),
                    );
                }
                if !seen.insert(at.attempt_id.clone()) {
                    crate::refuse!(Code::DuplicateAttempt, "attempt id {} appears twice", at.attempt_id);
                }
                lines.push(serde_json::to_string(&at)?);
            }
        }
        // the runs keep their original run ids inside their shards; verify checks bytes, not names
        std::fs::copy(a.join("manifest.json"), stage.join("sources").join("a.manifest.json"))?;
        std::fs::copy(b.join("manifest.json"), stage.join("sources").join("b.manifest.json"))?;
        if ma.trace_sha256.is_some() {
            // the one trace both froze (same digest): the joined campaign's jobs and checks read it
            std::fs::copy(a.join(TRACE_FILE), stage.join(TRACE_FILE))
                .with_context(|| format!("copying {}", a.join(TRACE_FILE).display()))?;
        }
        if !ma.truth_inputs.is_empty() {
            // the same frozen inputs in both (same digests): the joined campaign's archive names them
            copy_tree(&a.join(truth::TRUTH_INPUTS_DIR), &stage.join(truth::TRUTH_INPUTS_DIR))?;
        }
        let mut bytes = serde_json::to_vec_pretty(&m)?;
        bytes.push(b'\n');
        write_new_atomic(&stage.join("manifest.json"), &bytes)?;
        let sha = sha256_hex(&bytes);
        write_new_atomic(&stage.join("manifest.sha256"), format!("{sha}\n").as_bytes())?;
        // attempt records were made under the source manifests; they say so
        write_new_atomic(&stage.join(chain::ATTEMPTS), (lines.join("\n") + "\n").as_bytes())?;
        Ok(())
    })?;
    Ok(m)
}
