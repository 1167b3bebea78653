//! `compare`: a proxy's ranking against the truth's, each side a summary
//! table (CSV), a folder of nccl-tests outputs or a verified campaign's phase.
//!
//! Consumes the two sides and the tie rule (a campaign's own rule wins).
//! Produces the [`Comparison`] of [`crate::analysis::ranking`]: agreement,
//! Kendall τ-b and the disagreements. Refuses an unreadable side, two
//! campaigns with different tie policies, and the interval rule unless both
//! sides are campaigns of the same configurations.
use crate::analysis::ranking::{self, Comparison, ConfigSummary, Relation};
use crate::analysis::{AnalysisInput, Report};
use crate::core::refusal::{self, Code};
use crate::core::workload::Phase;
use crate::core::{limits, units};
use crate::report::campaign;
use anyhow::{Context, Result};
use std::path::{Path, PathBuf};

/// One side of a comparison: summaries, evidence, the declared rule and,
/// for a campaign, the relations its analysis decided (pair order of the summaries).
struct Side {
    rows: Vec<ConfigSummary>,
    evidence: String,
    rule: Option<ranking::TiePolicy>,
    relations: Option<Vec<Relation>>,
}

/// A folder of nccl-tests outputs as one side of `compare`.
fn nccl_tests_side(dir: &Path, size: Option<u64>) -> Result<Side> {
    use crate::evidence::nccl_tests::{self as nt, NcclTestsMetric};
    let tables = nt::read_dir(dir)?;
    let metric = size.map_or(NcclTestsMetric::GeoMeanCommon, NcclTestsMetric::Size);
    let (times, sizes) = nt::times_us(&tables, metric)?;
    let how = match metric {
        NcclTestsMetric::Size(s) => format!("out-of-place time at {s} bytes"),
        NcclTestsMetric::GeoMeanCommon => {
            format!("geometric mean of the out-of-place time over the {} sizes every file timed", sizes.len())
        }
    };
    let rows = times.into_iter().map(|(config, median_us)| ConfigSummary { config, median_us, iqr_us: None }).collect();
    let (n, dir) = (tables.len(), dir.display());
    let evidence =
        format!("reported evidence: {n} nccl-tests outputs in {dir}, {how}; not re-measured here, no interval");
    Ok(Side { rows, evidence, rule: None, relations: None })
}

/// One side of a comparison. A campaign is analyzed once however many
/// sides name it (`analyzed` holds the last one).
fn side(spec: &str, size: Option<u64>, analyzed: &mut Option<(PathBuf, AnalysisInput, Report)>) -> Result<Side> {
    if let Some((dir, phase)) = spec.rsplit_once(':').filter(|(d, _)| Path::new(d).join("manifest.json").exists()) {
        let dir = Path::new(dir);
        let phase: Phase = phase.parse()?;
        if analyzed.as_ref().is_none_or(|a| a.0 != dir) {
            let (v, input) = campaign::verified_input(dir)?;
            let ev = format!(
                "measured: verified campaign {} (manifest {})",
                input.context.campaign_id,
                &input.context.manifest_sha256[..12]
            );
            let report = crate::analysis::analyze(&input, v, &ev)?;
            *analyzed = Some((dir.to_path_buf(), input, report));
        }
        let (_, input, report) = analyzed.as_ref().expect("just set");
        let ev = format!(
            "{}, phase {phase}, per-job medians with IQR over {} jobs each",
            report.evidence,
            input.phases.first().and_then(|p| p.jobs.first()).map(|j| j.len()).unwrap_or(0)
        );
        let rule = input.policy.tie_policy;
        let Some(pr) = report.phases.iter().find(|p| p.phase == phase) else {
            anyhow::bail!("{}: the campaign has no results for phase {phase}", dir.display());
        };
        let labels = &input.phases.iter().find(|p| p.phase == phase).expect("analyzed").labels;
        let rows = pr.summaries(labels);
        let relations = pr.pairs.iter().map(|p| p.relation).collect();
        return Ok(Side { rows, evidence: ev, rule: Some(rule), relations: Some(relations) });
    }
    let path = Path::new(spec);
    if path.is_dir() && !path.join("manifest.json").exists() {
        return nccl_tests_side(path, size);
    }
    let text = limits::read_text_bounded(path, limits::MAX_TEXT_TABLE_BYTES)
        .with_context(|| format!("reading {spec} (a CSV table, or CAMPAIGN_DIR:PHASE)"))?;
    let rows = ranking::parse_csv(&text, spec).map_err(refusal::or_code(Code::BadInput))?;
    let evidence =
        format!("reported evidence: summary table {spec}, not re-measured here; no bootstrap is offered for it");
    Ok(Side { rows, evidence, rule: None, relations: None })
}

/// `compare PROXY TRUTH`: both sides read (a campaign analyzed once), then compared under the declared rule (the
/// campaigns' own where they declare one). Returns the number of configurations and the comparison.
pub fn run(
    proxy: &str,
    truth: &str,
    size: Option<&str>,
    tie_policy: ranking::TiePolicy,
) -> Result<(usize, Comparison)> {
    let mut analyzed = None;
    let size = size.map(units::parse_bytes).transpose().context("--size")?;
    let p = side(proxy, size, &mut analyzed)?;
    let t = side(truth, size, &mut analyzed)?;
    if let (Some(x), Some(y)) = (p.rule, t.rule) {
        if x != y {
            anyhow::bail!("the two campaigns declare different tie policies");
        }
    }
    let rule = p.rule.or(t.rule).unwrap_or(tie_policy);
    let evidence = if p.evidence == t.evidence {
        p.evidence.clone()
    } else {
        format!("proxy: {}; truth: {}", p.evidence, t.evidence)
    };
    let same_order = p.rows.iter().map(|r| &r.config).eq(t.rows.iter().map(|r| &r.config));
    let c = match (&p.relations, &t.relations) {
        (Some(pr), Some(tr)) if same_order => ranking::compare_relations(&t.rows, pr, tr, rule, &evidence)?,
        _ if rule == ranking::TiePolicy::Interval => {
            anyhow::bail!("the interval tie policy needs both sides from campaigns with the same configurations")
        }
        _ => ranking::compare(&p.rows, &t.rows, rule, &evidence)?,
    };
    Ok((p.rows.len(), c))
}
