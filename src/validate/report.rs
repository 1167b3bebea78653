//! The report of `validate`, I/O free: [`build_report`] judges this node's
//! evidence against the reference's into a [`ValidationReport`], one
//! [`CheckRow`] per check (health, topology, and the ratio checks judged as one
//! family, a failing one with its likely cause), and [`render`] prints it as the
//! one-screen table. Recording a reference yields per-size rows and no verdict.
use super::plan::Plan;
use super::reference::{self, Evidence, NodeFacts, RoundRecord, Site};
use super::sweep;
use super::verdict::{self, CheckVerdict};
use super::{health, load, topology};
use crate::analysis::inference;
use crate::core::workload::SweepKind;
use crate::core::{stats, units};
use anyhow::{Context, Result};
use serde::{Deserialize, Serialize};

/// Format version of the printed report (`--json`, `report.json`).
/// 2: ratio checks carry their interval method and reference jobs; `likely_cause`.
pub const REPORT_FORMAT_VERSION: u32 = 2;

/// Ratio checks judged as one family: all-reduce busbw, all-gather busbw,
/// workload token latency.
const RATIO_CHECKS: usize = 3;

/// One row of the table.
#[derive(schemars::JsonSchema, Serialize, Deserialize, Clone, Debug, PartialEq)]
pub struct CheckRow {
    /// Check name.
    pub check: String,
    /// What was measured on this node, in words with units.
    pub measured: String,
    /// The reference's value, in words with units.
    pub reference: String,
    /// The ratio interval, or the findings.
    pub interval: String,
    /// Verdict.
    pub verdict: CheckVerdict,
    /// The ratio statistics, for ratio checks.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ratio: Option<verdict::RatioCheck>,
    /// Findings and notes (health, topology).
    pub findings: Vec<String>,
}

/// Per size of a collective: this node's and the reference's median busbw over rounds.
#[derive(schemars::JsonSchema, Serialize, Deserialize, Clone, Debug, PartialEq)]
pub struct SizeRow {
    /// Collective.
    #[serde(with = "sweep::by_name")]
    #[schemars(with = "sweep::by_name::Schema")]
    pub collective: SweepKind,
    /// Size, bytes.
    pub bytes: u64,
    /// Median over rounds of busbw on this node, GB/s.
    pub busbw_gbps: f64,
    /// Median over rounds of the reference's busbw, GB/s (absent when recording).
    pub reference_busbw_gbps: Option<f64>,
    /// Median over rounds of the time per iteration, µs.
    pub time_us: f64,
}

/// `--json` and `report.json`.
#[derive(schemars::JsonSchema, Serialize, Deserialize, Clone, Debug, PartialEq)]
pub struct ValidationReport {
    /// [`REPORT_FORMAT_VERSION`].
    pub format_version: u32,
    /// `reference` (recorded, no verdict) or `validation`.
    pub kind: String,
    /// The node.
    pub node: NodeFacts,
    /// The reference directory and its manifest's SHA-256.
    pub reference: Option<(String, String)>,
    /// The site's thresholds in force.
    pub site: Site,
    /// Rounds run here.
    pub rounds: u32,
    /// The checks (empty when recording a reference).
    pub checks: Vec<CheckRow>,
    /// Per-size busbw (informative; the verdicts are per collective).
    pub sizes: Vec<SizeRow>,
    /// Overall verdict (absent when recording a reference).
    pub verdict: Option<CheckVerdict>,
    /// Exit code.
    pub exit_code: i32,
    /// The evidence directory written.
    pub evidence_dir: String,
    /// How the comparison is made and what it assumes.
    pub method: String,
    /// When a ratio check fails while the CPUs of this node (or of a reference
    /// job) were busy with something else: that, named as the likely cause.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub likely_cause: Option<String>,
}

/// A Prometheus label value: backslash, double quote and newline escaped.
fn label(v: &str) -> String {
    v.replace('\\', "\\\\").replace('"', "\\\"").replace('\n', "\\n")
}

/// The report in Prometheus' text exposition format, for a node exporter's
/// textfile collector: per check one `commcanary_validate_check` sample per
/// verdict (1 for the one given), the ratio with its interval's bounds and
/// the site's threshold for ratio checks, the overall verdict, and when it
/// was judged (`unix_s`). A reference recording has no verdicts: only the
/// timestamp and `kind` are written. Unmeasured ratios are left out, never 0.
pub fn prometheus(r: &ValidationReport, unix_s: u64) -> String {
    use std::fmt::Write as _;
    let node = label(&r.node.host);
    let verdicts = [CheckVerdict::Pass, CheckVerdict::Inconclusive, CheckVerdict::Fail];
    let mut o = String::new();
    let family = |o: &mut String, name: &str, help: &str| {
        let _ = writeln!(o, "# HELP {name} {help}\n# TYPE {name} gauge");
    };
    family(&mut o, "commcanary_validate_check", "1 for the verdict a check was given, 0 for the others.");
    for c in &r.checks {
        for v in verdicts {
            let _ = writeln!(
                o,
                "commcanary_validate_check{{node=\"{node}\",check=\"{}\",verdict=\"{}\"}} {}",
                label(&c.check),
                v.word(),
                u8::from(c.verdict == v)
            );
        }
    }
    family(
        &mut o,
        "commcanary_validate_ratio",
        "Node over reference for a ratio check: the typical ratio and its interval's bounds.",
    );
    for (c, x) in r.checks.iter().filter_map(|c| c.ratio.as_ref().map(|x| (c, x))) {
        for (bound, v) in [("point", x.ratio), ("low", x.ratio_low), ("high", x.ratio_high)] {
            if v.is_finite() {
                let _ = writeln!(
                    o,
                    "commcanary_validate_ratio{{node=\"{node}\",check=\"{}\",bound=\"{bound}\"}} {v}",
                    label(&c.check)
                );
            }
        }
    }
    family(&mut o, "commcanary_validate_threshold", "The site's threshold ratio of a ratio check.");
    for (c, x) in r.checks.iter().filter_map(|c| c.ratio.as_ref().map(|x| (c, x))) {
        let _ = writeln!(
            o,
            "commcanary_validate_threshold{{node=\"{node}\",check=\"{}\"}} {}",
            label(&c.check),
            x.threshold
        );
    }
    family(
        &mut o,
        "commcanary_validate_verdict",
        "1 for the node's overall verdict, 0 for the others (none when a reference was recorded).",
    );
    if let Some(overall) = r.verdict {
        for v in verdicts {
            let _ = writeln!(
                o,
                "commcanary_validate_verdict{{node=\"{node}\",verdict=\"{}\"}} {}",
                v.word(),
                u8::from(overall == v)
            );
        }
    }
    family(
        &mut o,
        "commcanary_validate_timestamp_seconds",
        "When this node was judged (or its reference recorded), Unix seconds.",
    );
    let _ =
        writeln!(o, "commcanary_validate_timestamp_seconds{{node=\"{node}\",kind=\"{}\"}} {unix_s}", label(&r.kind));
    o
}

pub(super) fn geo_busbw(rows: &[sweep::SizeResult]) -> Option<f64> {
    verdict::geometric_mean(&rows.iter().map(|r| r.busbw_gbps).collect::<Vec<_>>())
}

fn median_of(v: impl Iterator<Item = f64>) -> f64 {
    let mut v: Vec<f64> = v.collect();
    stats::median(&mut v).unwrap_or(f64::NAN)
}

/// The verdicts (I/O free): this node's evidence against the reference's.
pub(super) fn build_report(plan: &Plan, ev: &Evidence, out: &std::path::Path) -> Result<ValidationReport> {
    let site = &plan.site;
    let refr = plan.reference.as_ref();
    // every round of every reference job, for the informative medians
    let ref_rounds: Vec<&RoundRecord> =
        refr.map(|set| set.jobs.iter().flat_map(|j| j.evidence.rounds.rounds.iter()).collect()).unwrap_or_default();
    let mut sizes = Vec::new();
    for kind in sweep::kinds() {
        let pick = |r: &RoundRecord| -> Vec<sweep::SizeResult> { r.sweep(kind).to_vec() };
        let first = ev.rounds.rounds.first().map(pick).unwrap_or_default();
        for (i, row) in first.iter().enumerate() {
            sizes.push(SizeRow {
                collective: kind,
                bytes: row.bytes,
                busbw_gbps: median_of(ev.rounds.rounds.iter().filter_map(|r| pick(r).get(i).map(|x| x.busbw_gbps))),
                reference_busbw_gbps: refr
                    .map(|_| median_of(ref_rounds.iter().filter_map(|r| pick(r).get(i).map(|x| x.busbw_gbps)))),
                time_us: median_of(ev.rounds.rounds.iter().filter_map(|r| pick(r).get(i).map(|x| x.time_us))),
            });
        }
    }
    let mut checks = Vec::new();
    let mut likely_cause = None;
    if let Some(set) = refr {
        let rf = set.first();
        // health and topology: a verdict with its findings, no ratio interval
        let row = |check: &str, measured, reference, (verdict, findings)| {
            let (check, interval) = (check.into(), "-".into());
            CheckRow { check, measured, reference, interval, verdict, ratio: None, findings }
        };
        let hv = health::evaluate(&ev.health, site.nvlink_crc_errors_max);
        checks.push(row("health", health_summary(&ev.health), health_summary(&rf.health), hv));
        let td = topology::differences(&ev.topology, &rf.topology);
        let tv = (if td.is_empty() { CheckVerdict::Pass } else { CheckVerdict::Fail }, td);
        checks.push(row("topology", topo_summary(&ev.topology), topo_summary(&rf.topology), tv));
        let per_job = |stat: &dyn Fn(&RoundRecord) -> f64| -> (Vec<f64>, Vec<Vec<f64>>) {
            (
                ev.rounds.rounds.iter().map(stat).collect(),
                set.jobs.iter().map(|j| j.evidence.rounds.rounds.iter().map(stat).collect()).collect(),
            )
        };
        // the ratio checks below are one family (any FAIL fails the node)
        let per_check = verdict::check_coverage(site.coverage, RATIO_CHECKS);
        let rows_before_family = checks.len();
        for kind in sweep::kinds() {
            let stat = |r: &RoundRecord| geo_busbw(r.sweep(kind)).unwrap_or(f64::NAN);
            let (here, there) = per_job(&stat);
            let check = RatioCheck {
                name: &format!("{} busbw", sweep::name(kind)),
                threshold: site.busbw_min_ratio,
                dir: verdict::Direction::AtLeast,
                coverage: per_check,
                unit: "GB/s geomean over sizes",
                digits: 3,
            };
            checks.push(ratio_row(&check, &here, &there)?);
        }
        let (here, there) = per_job(&RoundRecord::token_latency_us);
        let check = RatioCheck {
            name: "workload token latency",
            threshold: site.token_latency_max_ratio,
            dir: verdict::Direction::AtMost,
            coverage: per_check,
            unit: "us per token",
            digits: 1,
        };
        checks.push(ratio_row(&check, &here, &there)?);
        // the family's size sets each check's level: it must be the rows pushed
        debug_assert_eq!(checks.len() - rows_before_family, RATIO_CHECKS, "RATIO_CHECKS must count the ratio checks");
        likely_cause = likely_cause_of(&checks, ev, set);
        if let Some(cause) = &likely_cause {
            for c in checks.iter_mut().filter(|c| c.ratio.is_some() && c.verdict == CheckVerdict::Fail) {
                c.findings.push(format!("likely cause: {cause}"));
            }
        }
    }
    let overall = refr.map(|_| verdict::overall(checks.iter().map(|c| c.verdict)));
    Ok(ValidationReport {
        format_version: REPORT_FORMAT_VERSION,
        kind: ev.manifest.kind.clone(),
        node: ev.manifest.node.clone(),
        reference: ev.manifest.reference.clone(),
        site: site.clone(),
        rounds: ev.manifest.rounds,
        checks,
        sizes,
        verdict: overall,
        exit_code: overall.map(CheckVerdict::exit_code).unwrap_or(0),
        evidence_dir: out.display().to_string(),
        method: "ratio checks: per round, the geometric mean of busbw over the sweep sizes (ratio >= busbw_min_ratio) \
            and the slowest rank's median per-token latency (ratio <= token_latency_max_ratio), on the log scale. The \
            three ratio checks are one family: each interval has coverage 1 - (1 - coverage)/3 (Bonferroni), so that \
            an unchanged node fails some check with probability at most (1 - coverage)/2. A reference of K >= 2 jobs: \
            the prediction interval of a new job's mean from the K reference job means, each over the first n rounds \
            (n the fewest of any job compared), t with K-1 degrees of freedom times s sqrt(1 + 1/K) (Hahn and Meeker \
            1991, 4.7), s = max(s_J, s_w/sqrt(n)) with s_w the pooled within-job round sd (the job variance component \
            truncated at zero, Searle, Casella and McCulloch 1992, 3.5): it carries job-to-job variation. A reference \
            of one job: round i of this node paired with round i of the reference, the Student-t interval of the mean \
            per-round log-ratio; it carries round-to-round variation only, so a FAIL is reported INCONCLUSIVE"
            .into(),
        likely_cause,
    })
}

/// A failing ratio check on a node (or against a reference job) whose CPUs
/// were busy with something else names that as its likely cause.
fn likely_cause_of(checks: &[CheckRow], ev: &Evidence, set: &reference::ReferenceSet) -> Option<String> {
    if !checks.iter().any(|c| c.ratio.is_some() && c.verdict == CheckVerdict::Fail) {
        return None;
    }
    let busy = |h: &health::HealthReport| h.load.as_ref().and_then(load::busy_elsewhere);
    let here = busy(&ev.health);
    let there: Vec<String> = set
        .jobs
        .iter()
        .filter_map(|j| busy(&j.evidence.health).map(|why| format!("reference job {}: {why}", j.name)))
        .collect();
    match (here, there.is_empty()) {
        (None, true) => None,
        (Some(h), true) => Some(format!("this node: {h}")),
        (h, false) => Some(h.map(|h| format!("this node: {h}; ")).unwrap_or_default() + &there.join("; ")),
    }
}

/// One ratio check: its name, its rule and how its row prints the measured values.
#[derive(Clone, Copy)]
struct RatioCheck<'a> {
    /// The check's name in the report.
    name: &'a str,
    /// The ratio's threshold.
    threshold: f64,
    /// Which side of the threshold passes.
    dir: verdict::Direction,
    /// Coverage of the check's interval (its share of the family's).
    coverage: f64,
    /// Unit of the measured and reference values.
    unit: &'a str,
    /// Decimals of the measured and reference values.
    digits: usize,
}

/// The row of one ratio check: this node's per-round values `here` against each reference job's `there`.
fn ratio_row(check: &RatioCheck<'_>, here: &[f64], there: &[Vec<f64>]) -> Result<CheckRow> {
    let RatioCheck { name, threshold, dir, coverage, unit, digits } = *check;
    let r = match there {
        [one] => verdict::single_job_check(here, one, threshold, dir, coverage),
        jobs => verdict::job_check(here, jobs, threshold, dir, coverage),
    }
    .with_context(|| format!("check {name}"))?;
    let med = |v: &[f64]| median_of(v.iter().copied());
    let all_there: Vec<f64> = there.iter().flatten().copied().collect();
    let op = match dir {
        verdict::Direction::AtLeast => ">=",
        verdict::Direction::AtMost => "<=",
    };
    let mut findings = Vec::new();
    match r.method {
        verdict::IntervalMethod::JobPrediction => {
            findings.push(format!(
                "{} reference jobs, each mean over {} rounds; job-to-job sd {:.3}, within-job round sd {} (log scale); \
                    ratio {:.3}, threshold {op} {threshold}",
                r.reference_jobs,
                r.pairs,
                r.sd_log,
                r.sd_log_within_jobs.map(|x| format!("{x:.3}")).unwrap_or_else(|| "-".into()),
                r.ratio
            ));
            if r.verdict == CheckVerdict::Inconclusive {
                findings.push(match r.jobs_to_resolve {
                    Some(k) => format!(
                        "inconclusive: about {k} reference jobs would resolve it if the mean and job spread stay as \
                            measured"
                    ),
                    None => format!(
                        "inconclusive: no number of reference jobs up to {} resolves it at this job spread; more \
                            rounds per job narrow the spread only by its within-job part",
                        verdict::MAX_JOBS
                    ),
                });
            }
        }
        verdict::IntervalMethod::PairedRounds => {
            findings.push(format!("{} pairs of rounds; ratio {:.3}, threshold {op} {threshold}", r.pairs, r.ratio));
            findings.push(
                "the reference is one job: its interval carries round-to-round variation only, not job-to-job (record \
                    3 or more reference jobs; docs/VALIDATION.md)"
                    .into(),
            );
            if r.capped_from == Some(CheckVerdict::Fail) {
                findings.push(
                    "inconclusive: the round interval lies beyond the threshold, but one reference job cannot tell \
                        that from job-to-job variation: a FAIL is reported INCONCLUSIVE"
                        .into(),
                );
            } else if r.verdict == CheckVerdict::Inconclusive {
                findings.push(match r.rounds_to_resolve {
                    Some(n) => format!(
                        "inconclusive: about {n} rounds would resolve it if the mean and spread stay as measured"
                    ),
                    None => format!(
                        "inconclusive: the ratio sits at the threshold; more than {} rounds would be needed",
                        inference::MAX_ROUNDS
                    ),
                });
            }
        }
    }
    Ok(CheckRow {
        check: name.into(),
        measured: format!("{:.*} {unit}", digits, med(here)),
        reference: format!("{:.*} {unit}", digits, med(&all_there)),
        interval: format!("x{:.3} [{:.3}, {:.3}] {op} {threshold}", r.ratio, r.ratio_low, r.ratio_high),
        verdict: r.verdict,
        ratio: Some(r),
        findings,
    })
}

fn health_summary(h: &health::HealthReport) -> String {
    let base = match &h.not_applicable {
        Some(why) => why.clone(),
        None => format!("{} GPUs read, {} XID events", h.end.len(), h.xid_events.len()),
    };
    let other = h
        .load
        .as_ref()
        .and_then(|l| l.other_share)
        .map(|o| format!("other processes {:.0}% of the job's CPUs", o * 100.0));
    format!("{base}; {}", other.unwrap_or_else(|| "CPU load unmeasured".into()))
}

fn topo_summary(t: &topology::Topology) -> String {
    if t.gpus.is_empty() {
        format!("{} ranks, {}", t.ranks, t.cpu_model.as_deref().unwrap_or("CPU model unknown"))
    } else {
        format!(
            "{} x {}",
            t.gpus.len(),
            t.gpus.first().and_then(|g| g.name.value.clone()).unwrap_or_else(|| "?".into())
        )
    }
}

/// The one-screen table.
pub fn render(r: &ValidationReport) -> String {
    use std::fmt::Write;
    let mut s = String::new();
    let _ = writeln!(
        s,
        "node {} ({}, {} ranks, {}); {} rounds",
        r.node.host,
        reference::backend_name(r.node.backend),
        r.node.ranks,
        r.node.sku,
        r.rounds
    );
    if r.checks.is_empty() {
        let _ = writeln!(s, "{:<11} {:>12} {:>14} {:>12}", "collective", "size", "busbw GB/s", "time us");
        for z in &r.sizes {
            let _ = writeln!(
                s,
                "{:<11} {:>12} {:>14.3} {:>12.2}",
                sweep::name(z.collective),
                units::fmt_bytes(z.bytes),
                z.busbw_gbps,
                z.time_us
            );
        }
        let _ = writeln!(s, "reference recorded in {} (no verdict: this is the reference)", r.evidence_dir);
        return s;
    }
    let _ = writeln!(
        s,
        "{:<24} {:<30} {:<30} {:<32} verdict",
        "check", "measured (median)", "reference (median)", "ratio [interval]"
    );
    let _ = writeln!(
        s,
        "(measured and reference: the median over each side's rounds; the ratio: this job's geometric mean over the \
            reference's (over its jobs' means when it has several, with the prediction interval of a new job; else \
            over paired rounds), so it need not equal the ratio of the two medians)"
    );
    for c in &r.checks {
        let cut = |x: &str, n: usize| {
            if x.chars().count() > n {
                format!("{}…", x.chars().take(n - 1).collect::<String>())
            } else {
                x.to_string()
            }
        };
        let _ = writeln!(
            s,
            "{:<24} {:<30} {:<30} {:<32} {}",
            c.check,
            cut(&c.measured, 30),
            cut(&c.reference, 30),
            cut(&c.interval, 32),
            c.verdict.word().to_uppercase()
        );
        for f in c.findings.iter().filter(|_| c.verdict != CheckVerdict::Pass || c.ratio.is_none()) {
            let _ = writeln!(s, "    {f}");
        }
    }
    let failing: Vec<&str> =
        r.checks.iter().filter(|c| c.verdict == CheckVerdict::Fail).map(|c| c.check.as_str()).collect();
    let v = r.verdict.unwrap_or(CheckVerdict::Inconclusive);
    let _ = writeln!(
        s,
        "verdict: {} (exit {}){}; evidence in {}",
        v.word().to_uppercase(),
        r.exit_code,
        if failing.is_empty() { String::new() } else { format!("; failing: {}", failing.join(", ")) },
        r.evidence_dir
    );
    if let Some(cause) = &r.likely_cause {
        let _ = writeln!(s, "likely cause: {cause}");
    }
    s
}
