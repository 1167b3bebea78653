//! `verify`: consumes the manifest, `selection.json`, the attempt log and the selected runs, and
//! produces the `Verdict`: every cell passed or refused with its code (missing, duplicate, failed,
//! stale, overlapping, not joining, contradicting the manifest or its hardware contract, walking
//! another trace than the other cells). Call `verify`, or `verify_visiting` to be handed each passed
//! cell's joined run as well.
use super::attempts::{accepted_manifests, load_manifest, overlapping, read_attempts, AttemptRecord, AttemptStatus};
use super::select::{Selected, Selection};
use super::spec::{Cell, ConfigSpec, Manifest};
use crate::campaign::hardware::CellHardware;
use crate::core::fsutil::sha256_file;
use crate::core::refusal::{Code, Refusal};
use crate::core::workload::{self, Phase};
use crate::core::{identity, limits, par};
use crate::evidence::join::{self, JoinedRun};
use crate::evidence::run;
use crate::evidence::shard::{Shard, ShardHeader, TraceOrigin};
use anyhow::{Context, Result};
use std::path::{Path, PathBuf};

pub use crate::analysis::policy::Verdict;

/// The most cells checked side by side: each holds its joined run in memory.
const MAX_CELLS_AT_ONCE: usize = 4;

/// Verify completeness of the selection against the manifest.
pub fn verify(dir: &Path) -> Result<Verdict> {
    verify_visiting(dir, &mut |_, _, _| {})
}

/// [`verify`], handing each cell that passed its own checks to `visit` with
/// its selection entry and the run `verify` joined (before the checks across
/// cells, so the verdict still decides whether the campaign is complete): a
/// reader that needs the runs (the analysis) joins each one once.
pub fn verify_visiting(dir: &Path, visit: &mut dyn FnMut(&Cell, &Selected, &JoinedRun)) -> Result<Verdict> {
    let (m, sha) = load_manifest(dir)?;
    let sp = dir.join("selection.json");
    if !sp.exists() {
        crate::refuse!(Code::NoSuchInput, "reading {} (run `campaign select` first): no such file", sp.display());
    }
    let sel: Selection = serde_json::from_slice(&limits::read_bounded(&sp, limits::MAX_JSON_BYTES)?)
        .with_context(|| format!("{}: not a selection", sp.display()))?;
    let attempts = read_attempts(dir)?;
    let accepted = accepted_manifests(dir, &m, &sha)?;
    let mut refusals: Vec<(String, String)> = Vec::new();
    if sel.manifest_sha256 != sha {
        refusals.push((
            "(selection)".into(),
            coded(Code::StaleManifest, format!("selection was made for manifest {}, not {sha}", sel.manifest_sha256)),
        ));
    }
    for e in &sel.entries {
        if !m.schedule.iter().any(|c| c.cell_id == e.cell_id) {
            refusals.push((
                e.cell_id.clone(),
                coded(Code::UnexpectedCell, "unexpected: the manifest has no such cell".into()),
            ));
        }
    }
    let mut passed: Vec<(String, String, Option<String>)> = Vec::new();
    let mut hardware: Vec<(String, String, CellHardware)> = Vec::new();
    // each cell's selected entry, or why it has none
    let picked: Vec<(&Cell, std::result::Result<&Selected, String>)> = m
        .schedule
        .iter()
        .map(|c| {
            let picked: Vec<&Selected> = sel.entries.iter().filter(|e| e.cell_id == c.cell_id).collect();
            let e = match picked.as_slice() {
                [] => Err(coded(Code::MissingCell, "missing: no selected attempt".into())),
                [one] => Ok(*one),
                many => Err(coded(Code::DuplicateCell, format!("duplicate: {} attempts selected", many.len()))),
            };
            (c, e)
        })
        .collect();
    // the cells are checked (hashed, joined) a few at a time side by side,
    // then visited and recorded in schedule order: the same verdict and
    // visits as one at a time, with as many joined runs in memory as threads
    // truth cells hold a record, not shards: checked one by one (small files)
    let mut truth_ok = 0;
    for (c, e) in picked.iter().filter(|(c, _)| c.truth) {
        match e.as_ref().map_err(Clone::clone).and_then(|e| check_truth_cell(dir, &m, &accepted, c, e, &attempts)) {
            Ok(()) => truth_ok += 1,
            Err(why) => refusals.push((c.cell_id.clone(), why)),
        }
    }
    let picked: Vec<_> = picked.into_iter().filter(|(c, _)| !c.truth).collect();
    let threads = par::available().min(MAX_CELLS_AT_ONCE);
    for chunk in picked.chunks(threads) {
        let checked = par::map(chunk, threads, &|(c, e)| {
            e.as_ref().map_err(Clone::clone).and_then(|e| check_cell(dir, &m, &accepted, c, e, &attempts))
        });
        for ((c, e), result) in chunk.iter().zip(checked) {
            match result {
                Ok((walked, hw, joined)) => {
                    visit(c, e.as_ref().expect("checked only where selected"), &joined);
                    passed.push((c.cell_id.clone(), c.label.clone(), walked));
                    hardware.push((c.cell_id.clone(), c.label.clone(), hw));
                }
                Err(why) => refusals.push((c.cell_id.clone(), why)),
            }
        }
    }
    // configurations are ranked on one workload: every cell walked the same
    // unfrozen trace file, or every cell none
    let mut refused: Vec<(String, String)> = other_trace_files(&passed)
        .into_iter()
        .map(|(cell, why)| (cell, coded(Code::IdentityContradiction, why)))
        .collect();
    // and on one kind of hardware: every cell recorded what most cells did on the contract's fields
    refused.extend(
        m.hardware.disagreeing(&hardware).into_iter().map(|(cell, why)| (cell, coded(Code::HardwareContract, why))),
    );
    let refused_cells: std::collections::BTreeSet<&str> = refused.iter().map(|(c, _)| c.as_str()).collect();
    let ok = passed.len() - refused_cells.len() + truth_ok;
    refusals.extend(refused);
    Ok(Verdict {
        complete: refusals.is_empty(),
        manifest_sha256: sha,
        cells_expected: m.schedule.len(),
        cells_ok: ok,
        refusals,
    })
}

/// Where a phase that walks a trace walked another than the manifest froze
/// (the frozen imported trace, by digest), or walked an imported trace where
/// the manifest froze none: the first such phase, in words.
fn walked_another_trace(shards: &[Shard], frozen_sha256: Option<&str>) -> Option<String> {
    for sh in shards {
        for p in &sh.header.phases {
            let got = match &p.trace {
                Some(TraceOrigin::Imported { sha256, .. }) => Some(sha256.as_str()),
                _ => None,
            };
            if p.trace.is_some() && got != frozen_sha256 {
                return Some(format!(
                    "rank {} phase {} walked trace {:?}; the manifest froze {:?}",
                    sh.header.rank, p.phase, got, frozen_sha256
                ));
            }
        }
    }
    None
}

/// A refusal as the text `verify` lists for a cell: `refused[CODE]: why`.
fn coded(code: Code, message: String) -> String {
    Refusal { code, message }.to_string()
}

/// The checks every selected attempt passes, a proxy's or a truth cell's: it
/// is recorded, under an accepted manifest, succeeded, overlapped nothing,
/// and the selection entry is its record's.
fn check_attempt<'a>(
    accepted: &[String],
    c: &Cell,
    e: &Selected,
    attempts: &'a [AttemptRecord],
) -> std::result::Result<&'a AttemptRecord, String> {
    let a = attempts
        .iter()
        .find(|a| a.attempt_id == e.attempt_id)
        .ok_or_else(|| coded(Code::SelectionMismatch, format!("selected attempt {} has no record", e.attempt_id)))?;
    let stale = |what: String| coded(Code::StaleManifest, what);
    if !accepted.contains(&a.manifest_sha256) {
        return Err(stale(format!(
            "attempt {} ran under manifest {}, not this campaign's manifest {}",
            a.attempt_id, a.manifest_sha256, accepted[0]
        )));
    }
    if a.status != AttemptStatus::Succeeded {
        return Err(coded(
            Code::FailedAttempt,
            format!("selected attempt {} failed: {}", a.attempt_id, a.failure.clone().unwrap_or_default()),
        ));
    }
    if let Some((b, host)) = overlapping(a, attempts) {
        return Err(coded(
            Code::OverlappingAttempts,
            format!(
                "attempt {} ({}..{} ms) overlapped attempt {} ({}..{} ms) on the same host ({host}): their timings \
                    contaminate each other",
                a.attempt_id,
                a.started_unix_ms,
                a.finished_unix_ms,
                b.attempt_id,
                b.started_unix_ms,
                b.finished_unix_ms
            ),
        ));
    }
    if a.cell_id != c.cell_id
        || a.run_dir != e.run_dir
        || a.shards != e.shards
        || a.run_json_sha256.as_deref() != Some(e.run_json_sha256.as_str())
    {
        return Err(coded(
            Code::SelectionMismatch,
            format!("selection entry disagrees with attempt record {}", a.attempt_id),
        ));
    }
    Ok(a)
}

/// The configuration a cell's label stands for.
fn config_of<'m>(m: &'m Manifest, c: &Cell) -> std::result::Result<&'m ConfigSpec, String> {
    let labelled = m.configs.iter().find(|x| x.label == c.label);
    Ok(&labelled.ok_or_else(|| coded(Code::SelectionMismatch, "unknown label".into()))?.config)
}

/// A truth cell: its attempt, and its record read again against what the job
/// printed and the manifest's truth command and configuration.
fn check_truth_cell(
    dir: &Path,
    m: &Manifest,
    accepted: &[String],
    c: &Cell,
    e: &Selected,
    attempts: &[AttemptRecord],
) -> std::result::Result<(), String> {
    let a = check_attempt(accepted, c, e, attempts)?;
    let t = m
        .spec
        .truth
        .as_ref()
        .ok_or_else(|| coded(Code::UnexpectedCell, "a truth cell in a manifest without [truth]".into()))?;
    let cfg = config_of(m, c)?;
    if !e.shards.is_empty() {
        return Err(coded(
            Code::IdentityContradiction,
            format!("truth attempt {} lists {} shard(s); a truth cell writes none", a.attempt_id, e.shards.len()),
        ));
    }
    let facts = super::truth::AttemptFacts {
        attempt_id: &a.attempt_id,
        label: &a.label,
        argv: &a.argv,
        stdout_sha256: &a.stdout_sha256,
        stderr_sha256: &a.stderr_sha256,
    };
    super::truth::check_record(dir, &e.run_dir, &e.run_json_sha256, &facts, t, &cfg.env)
        .map(|_| ())
        .map_err(|(code, why)| coded(code, why))
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
) -> std::result::Result<(Option<String>, CellHardware, JoinedRun), String> {
    check_attempt(accepted, c, e, attempts)?;
    let stale = |what: String| coded(Code::StaleManifest, what);
    let run: PathBuf = dir.join(&e.run_dir);
    // `what` (a file, named for messages) hashes to `want`; refused with `missing` where it is not there
    let recorded = |p: &Path, want: &str, what: String, missing: Code| match sha256_file(p) {
        Ok(d) if d == want => Ok(()),
        Ok(d) => Err(coded(Code::Stale, format!("stale: {what} hashes to {d}, recorded {want}"))),
        Err(_) => Err(coded(missing, format!("{what} is missing"))),
    };
    let rj = run.join(run::RUN_FILE);
    recorded(&rj, &e.run_json_sha256, rj.display().to_string(), Code::NoSuchInput)?;
    for s in &e.shards {
        let p = run.join(&s.file);
        recorded(&p, &s.sha256, format!("rank {} shard {}", s.rank, p.display()), Code::MissingRank)?;
    }
    let joined = join::join_dir(&run).map_err(|e| coded(Code::NotJoinable, format!("does not join: {e:#}")))?;
    // generated shards are not measurements: the refusal's own code, not NOT_JOINABLE
    joined.refuse_synthetic("campaign verify").map_err(|e| format!("{e:#}"))?;
    let contradiction = |why: String| coded(Code::IdentityContradiction, why);
    let want_backend = &m.spec.backend;
    let cfg = config_of(m, c)?;
    let w = &joined.run.workload;
    let want_phases = workload::parse_phases(&m.spec.workload.phases)
        .map_err(|e| coded(Code::BadSpec, format!("manifest phases: {e:#}")))?;
    let ran = [
        ("tokens", w.tokens, m.spec.workload.tokens),
        ("layers", w.layers, m.spec.workload.layers),
        ("iters", w.iters, m.spec.workload.iters),
    ];
    for (what, got, want) in ran {
        if got != want {
            return Err(stale(format!("run {} ran {what} = {got}, the manifest says {want}", joined.run.run_id)));
        }
    }
    if w.phases != want_phases {
        return Err(stale(format!(
            "run {} ran phases {:?}, the manifest says {}",
            joined.run.run_id, w.phases, m.spec.workload.phases
        )));
    }
    if let Some(why) = walked_another_trace(&joined.shards, m.frozen_trace(&cfg.name).map(|t| t.1).as_deref()) {
        return Err(contradiction(why));
    }
    let file_trace = file_trace_walked(&joined.shards).map_err(contradiction)?;
    if joined.run.world_size != m.spec.ranks {
        return Err(contradiction(format!(
            "ran with {} ranks, the manifest says {}",
            joined.run.world_size, m.spec.ranks
        )));
    }
    for sh in &joined.shards {
        let h = &sh.header;
        let got = serde_json::to_value(h.backend).ok().and_then(|v| v.as_str().map(String::from)).unwrap_or_default();
        if &got != want_backend {
            return Err(contradiction(format!("rank {} ran backend {got}, the manifest says {want_backend}", h.rank)));
        }
        for (k, v) in &cfg.env {
            let recorded = identity::RECORDED_ENV_PREFIXES.iter().any(|p| k.starts_with(p));
            if recorded && !h.identity.env.iter().any(|(ek, ev)| ek == k && ev == v) {
                let why =
                    format!("rank {}: {k}={v} is in the configuration but not in the recorded environment", h.rank);
                return Err(contradiction(why));
            }
        }
        if let Some(lib) = &cfg.nccl_lib {
            let mapped = h.device.facts.iter().find(|f| f.0 == "nccl_mapped_path").map(|f| f.1.clone());
            let want = std::fs::canonicalize(lib).map(|p| p.display().to_string()).unwrap_or_else(|_| lib.clone());
            if mapped.as_deref() != Some(want.as_str()) {
                let why = format!("rank {}: NCCL mapped {:?}, the configuration names {want}", h.rank, mapped);
                return Err(contradiction(why));
            }
        }
    }
    let headers: Vec<&ShardHeader> = joined.shards.iter().map(|s| &s.header).collect();
    let hw = m.hardware.check_cell(&headers).map_err(|why| coded(Code::HardwareContract, why))?;
    Ok((file_trace, hw, joined))
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
fn file_trace_walked(shards: &[Shard]) -> std::result::Result<Option<String>, String> {
    let mut seen: Option<(&str, u32, Phase)> = None;
    for sh in shards {
        for p in &sh.header.phases {
            if let Some(TraceOrigin::File { sha256, .. }) = &p.trace {
                match seen {
                    None => seen = Some((sha256, sh.header.rank, p.phase)),
                    Some((first, r, ph)) if first != sha256 => {
                        return Err(format!(
                            "rank {} phase {} walked trace file {sha256}, rank {r} phase {ph} walked {first}",
                            sh.header.rank, p.phase
                        ));
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
    use crate::evidence::shard::{self, Shard};

    /// A shard header's record of `phase`, which walked `trace`.
    fn phase_walked(phase: &str, trace: &serde_json::Value) -> serde_json::Value {
        serde_json::json!({"phase": phase, "start_ns": 0, "end_ns": 1, "device_anchor_error_ns": null,
            "quantum_ns": null, "trace": trace, "collectives": 1})
    }

    #[test]
    fn verify_refuses_a_phase_that_walked_another_trace_than_the_frozen_one() {
        let phase = |trace: serde_json::Value| {
            let h = shard::test_header("cpu", serde_json::json!([phase_walked("replay", &trace)]));
            vec![Shard { header: h, body: Default::default() }]
        };
        let imported = |sha: &str| {
            serde_json::json!({"Imported": {"path": "trace.json", "sha256": sha, "source_rank": 0,
            "collectives_per_pass": 32, "left_out_per_pass": 0}})
        };
        let blocking = serde_json::json!("ThisRunBlocking");
        for (trace, frozen, refused, what) in [
            (imported("aa"), Some("aa"), false, "the frozen trace"),
            (blocking.clone(), Some("aa"), true, "its own blocking phase instead of the frozen trace"),
            (imported("aa"), None, true, "an imported trace the manifest did not freeze"),
            (blocking, None, false, "its own blocking phase, no trace frozen"),
            (serde_json::Value::Null, Some("aa"), false, "phases without a trace are not concerned"),
        ] {
            assert_eq!(walked_another_trace(&phase(trace), frozen).is_some(), refused, "{what}");
        }
        let why = walked_another_trace(&phase(imported("bb")), Some("aa")).expect("another digest is refused");
        assert!(
            why.contains("rank 0 phase replay walked trace Some(\"bb\")") && why.contains("froze Some(\"aa\")"),
            "{why}"
        );
    }

    #[test]
    fn a_cell_names_the_one_trace_file_its_phases_walked() {
        let shard = |rank: u32, traces: &[serde_json::Value]| {
            let phases: Vec<serde_json::Value> =
                traces.iter().zip(["replay", "fill"]).map(|(t, p)| phase_walked(p, t)).collect();
            let mut h = shard::test_header("cpu", serde_json::Value::Array(phases));
            h.rank = rank;
            Shard { header: h, body: Default::default() }
        };
        let file = |sha: &str| serde_json::json!({"File": {"path": "t.jsonl", "sha256": sha, "source_rank": 0}});
        let blocking = serde_json::json!("ThisRunBlocking");
        assert_eq!(
            file_trace_walked(&[shard(0, &[file("aa"), file("aa")]), shard(1, &[file("aa")])]),
            Ok(Some("aa".into()))
        );
        assert_eq!(file_trace_walked(&[shard(0, &[blocking.clone(), serde_json::Value::Null])]), Ok(None));
        let why = file_trace_walked(&[shard(0, &[file("aa")]), shard(1, &[file("bb")])]).unwrap_err();
        assert!(
            why.contains("rank 1 phase replay walked trace file bb") && why.contains("rank 0 phase replay walked aa"),
            "{why}"
        );
        assert!(file_trace_walked(&[shard(0, &[file("aa"), file("bb")])]).is_err(), "two phases of one rank");
    }

    #[test]
    fn cells_that_walked_another_trace_file_than_most_are_named() {
        let cell = |id: &str, label: &str, d: Option<&str>| (id.to_string(), label.to_string(), d.map(String::from));
        assert!(other_trace_files(&[cell("r1-a", "a", Some("x")), cell("r1-b", "b", Some("x"))]).is_empty());
        assert!(other_trace_files(&[cell("r1-a", "a", None), cell("r1-b", "b", None)]).is_empty());
        let refused = other_trace_files(&[
            cell("r1-a", "a", Some("x")),
            cell("r2-a", "a", Some("x")),
            cell("r1-b", "b", Some("y")),
        ]);
        assert_eq!(refused.len(), 1);
        assert_eq!(refused[0].0, "r1-b");
        assert!(
            refused[0].1.contains("walked trace file y, most cells walked trace file x")
                && refused[0].1.contains("a: trace file x; b: trace file y"),
            "{}",
            refused[0].1
        );
        // a configuration replaying its own blocking phase against others walking a file
        let refused =
            other_trace_files(&[cell("r1-a", "a", Some("x")), cell("r1-c", "c", None), cell("r1-b", "b", Some("x"))]);
        assert_eq!(refused.iter().map(|r| r.0.as_str()).collect::<Vec<_>>(), vec!["r1-c"]);
        assert!(refused[0].1.contains("walked no trace file"), "{}", refused[0].1);
        // a tie: the first group stands
        let refused = other_trace_files(&[cell("r1-b", "b", Some("y")), cell("r1-a", "a", Some("x"))]);
        assert_eq!(refused.iter().map(|r| r.0.as_str()).collect::<Vec<_>>(), vec!["r1-a"]);
    }
}
