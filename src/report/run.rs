//! `campaign run` and its steps as the user sees them: plan, exec, select,
//! verify and analyze, each writing its lines to the caller's output.
//!
//! Consumes a campaign spec or directory; produces the campaign's records
//! (through `campaign`), its report (through `report::campaign`) and the
//! text each step prints. `campaign run` is every step in order, the first
//! refusal ending it with its reason; `canary verify` runs its campaigns
//! through the same function. Refuses a directory planned from another spec,
//! one already selected, an incomplete campaign (no ranking is published) and
//! a spec whose rounds cannot be analyzed.
use crate::campaign::{self as cp, chain};
use crate::core::fsutil;
use crate::core::refusal::Code;
use crate::report::campaign;
use anyhow::{Context, Result};
use std::io::Write;
use std::path::{Path, PathBuf};

/// How `campaign run` runs its cells and reports.
#[derive(Clone, Debug, Default)]
pub struct RunOptions {
    /// Attempts per cell beyond the first.
    pub retries: u32,
    /// Seconds a cell may take.
    pub cell_timeout_s: Option<u64>,
    /// Print the labels behind a blinded campaign.
    pub reveal: bool,
    /// The whole text instead of the short answer.
    pub verbose: bool,
}

/// How `campaign analyze` writes.
#[derive(Clone, Debug, Default)]
pub struct Analyze {
    /// The report as JSON.
    pub json: bool,
    /// An incomplete campaign's diagnostics (unfit to publish).
    pub diagnostics: bool,
    /// Print the labels behind a blinded campaign.
    pub reveal: bool,
    /// Where the report goes (default: DIR/report).
    pub report_dir: Option<PathBuf>,
    /// The whole text instead of the short answer.
    pub verbose: bool,
    /// Every ranking table as CSV.
    pub csv: bool,
}

/// `campaign plan`: the manifest, and one line per cell.
pub fn plan(spec: &Path, output: &Path, out: &mut dyn Write) -> Result<()> {
    let m = cp::plan(spec, output)?;
    writeln!(
        out,
        "planned {} in {}: {} configurations x {} rounds = {} cells, seed {}",
        m.campaign_id,
        output.display(),
        m.configs.len(),
        m.spec.repetitions,
        m.schedule.len(),
        m.spec.seed
    )?;
    for cell in &m.schedule {
        writeln!(out, "  {:>3}. {}", m.schedule.iter().position(|x| x == cell).unwrap_or(0) + 1, cell.cell_id)?;
    }
    Ok(())
}

/// `campaign run`: plan (or resume), exec, select, verify, analyze.
pub fn run(spec: &Path, output: &Path, o: &RunOptions, out: &mut dyn Write) -> Result<()> {
    // each step exactly as its own command; the first refusal ends the run with its reason
    let resume = output.join("manifest.json").exists();
    if resume {
        let (m, _) = chain::load_manifest(output)?;
        let planned = cp::spec::CampaignSpec::load(spec)?;
        if serde_json::to_value(&m.spec)? != serde_json::to_value(&planned)? {
            crate::refuse!(
                Code::BadSpec,
                "{} holds a campaign planned from another spec than {}; choose a new -o directory",
                output.display(),
                spec.display()
            );
        }
        if output.join("selection.json").exists() {
            crate::refuse!(
                Code::CampaignState,
                "{} was already run past select (selection.json exists); continue step by step: campaign verify, \
                    campaign analyze",
                output.display()
            );
        }
        writeln!(out, "== plan: {} exists with this spec's manifest; resuming", output.display())?;
    } else {
        let planned = cp::spec::CampaignSpec::load(spec)?;
        // run ends with analyze: a one-round join part would run every cell and then be refused
        if planned.repetitions < cp::spec::MIN_ANALYZED_ROUNDS {
            crate::refuse!(
                Code::BadSpec,
                "{}: repetitions = {} with join_part = true: campaign run analyzes, which needs at least {} rounds; \
                 plan, exec and select a join part step by step, then `campaign join` it with another",
                spec.display(),
                planned.repetitions,
                cp::spec::MIN_ANALYZED_ROUNDS
            );
        }
        chain::preflight(&planned, &spec.display().to_string())?;
        writeln!(out, "== plan")?;
        if o.verbose {
            plan(spec, output, out)?;
        } else {
            let m = cp::plan(spec, output)?;
            let n = m.schedule.len();
            writeln!(
                out,
                "planned {} in {}: {} configurations x {} rounds = {n} cells",
                m.campaign_id,
                output.display(),
                m.configs.len(),
                m.spec.repetitions
            )?;
        }
    }
    writeln!(out, "== exec")?;
    // a failed cell does not stop the run here: verify names every missing cell
    chain::exec_logged(output, o.retries, None, o.cell_timeout_s, out)?;
    writeln!(out, "== select")?;
    select(output, chain::SelectPolicy::FirstSuccess, out)?;
    writeln!(out, "== verify")?;
    verify(output, false, out)?;
    writeln!(out, "== analyze")?;
    analyze(output, &Analyze { reveal: o.reveal, verbose: o.verbose, ..Default::default() }, out)
}

/// `campaign select`: one attempt per cell, written to selection.json.
pub fn select(dir: &Path, policy: chain::SelectPolicy, out: &mut dyn Write) -> Result<()> {
    // no exec may append while the selection is made and written
    let _lock = chain::lock_campaign(dir, None, &format!("select {}", dir.display()))?;
    let (sel, missing) = chain::select(dir, policy)?;
    fsutil::write_json_new(&dir.join("selection.json"), &sel)
        .context("writing selection.json (remove an old selection first to select again)")?;
    let missing = if missing.is_empty() { "none".into() } else { missing.join(", ") };
    writeln!(
        out,
        "selected {} attempts ({policy:?}); cells without a successful attempt: {missing}",
        sel.entries.len()
    )?;
    Ok(())
}

/// `campaign verify`: every cell's chain of evidence.
pub fn verify(dir: &Path, json: bool, out: &mut dyn Write) -> Result<()> {
    let v = chain::verify(dir)?;
    if json {
        writeln!(out, "{}", serde_json::to_string_pretty(&v)?)?;
    } else {
        let state = if v.complete { "complete" } else { "INCOMPLETE" };
        writeln!(out, "{state}: {}/{} cells verified", v.cells_ok, v.cells_expected)?;
        write_refusals(out, &v.refusals)?;
    }
    if !v.complete {
        crate::refuse!(Code::Incomplete, "campaign {} is incomplete ({} refusals)", dir.display(), v.refusals.len());
    }
    Ok(())
}

/// `campaign analyze`: the report, short answer or whole text.
pub fn analyze(dir: &Path, o: &Analyze, out: &mut dyn Write) -> Result<()> {
    // verify reads each job for the analysis as it joins it: every run is joined once
    let (v, read) = campaign::verify_reading(dir)?;
    if !v.complete {
        writeln!(
            out,
            "withheld-incomplete: {} of {} cells verified; no ranking is published",
            v.cells_ok, v.cells_expected
        )?;
        write_refusals(out, &v.refusals)?;
        if o.diagnostics {
            writeln!(out, "DIAGNOSTICS ONLY - UNFIT TO PUBLISH (incomplete evidence):")?;
            if let Ok(r) = cp::results(dir) {
                write!(out, "{}", cp::render_results(&r))?;
            }
        }
        crate::refuse!(Code::Incomplete, "analysis withheld: the campaign is incomplete");
    }
    let out_dir = o.report_dir.clone().unwrap_or_else(|| dir.join("report"));
    let report = campaign::analyze_and_write(dir, v, read, &out_dir)?;
    if o.json {
        writeln!(out, "{}", serde_json::to_string_pretty(&report)?)?;
    } else if o.csv {
        out.write_all(crate::analysis::ranking_csv(&report)?.as_bytes())?;
    } else {
        let render = if o.verbose { crate::analysis::render } else { crate::analysis::render_short };
        write!(out, "{}", render(&report))?;
        writeln!(out, "wrote report.json, report.html and {} plot(s) into {}", report.plots.len(), out_dir.display())?;
    }
    if o.reveal {
        match std::fs::read(dir.join("blinding.json")) {
            Ok(b) => writeln!(out, "revealed labels: {}", String::from_utf8_lossy(&b).trim())?,
            Err(_) => writeln!(out, "not blinded: labels are configuration names")?,
        }
    }
    Ok(())
}

/// Refused cells grouped by cause, in order of first appearance: a cause of
/// one cell as `CELL: WHY`, of several as one line with the count and the
/// first cells (the JSON lists every cell).
pub fn write_refusals(out: &mut dyn Write, refusals: &[(String, String)]) -> Result<()> {
    let mut causes: Vec<(&str, Vec<&str>)> = Vec::new();
    for (cell, why) in refusals {
        match causes.iter_mut().find(|(w, _)| *w == why.as_str()) {
            Some((_, cells)) => cells.push(cell),
            None => causes.push((why, vec![cell])),
        }
    }
    for (why, cells) in causes {
        if let [cell] = cells.as_slice() {
            writeln!(out, "  {cell}: {why}")?;
            continue;
        }
        let first: Vec<&str> = cells.iter().take(3).copied().collect();
        let more = if cells.len() > 3 { format!(", and {} more", cells.len() - 3) } else { String::new() };
        writeln!(out, "  {} cells: {why} (first {}{more})", cells.len(), first.join(", "))?;
    }
    Ok(())
}
