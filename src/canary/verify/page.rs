//! `report.html` of `canary verify`, beside `canary-verify.json`.
//!
//! Consumes a [`VerifyReport`]; produces one self-contained page (the
//! report layer's [`crate::report::html`] style, tables that sort, no
//! network): the short answer, one row per candidate with its state and the
//! check that stops it, every check of every candidate, the controls, and
//! links to the verify directory's own files. Computes nothing the report
//! does not hold.
use super::VerifyReport;
use crate::report::html::{document, escape, num, table, txt};
use std::fmt::Write;

/// The page.
pub fn page(r: &VerifyReport) -> String {
    let mut o = String::new();
    let _ = writeln!(
        o,
        "<p class=\"small\">source {} (SHA-256 {}) · {}</p>",
        escape(&r.source.path),
        escape(&r.source.file_sha256),
        escape(&r.evidence)
    );
    let _ = writeln!(o, "<h2 id=\"answer\">The answer</h2>\n<pre>{}</pre>", escape(&super::render_short(r)));
    o.push_str("<h2 id=\"candidates\">Candidates</h2>\n");
    let rows: Vec<_> = r
        .candidates
        .iter()
        .map(|v| {
            let failed = v.checks.iter().filter(|c| !c.passed).count();
            vec![
                txt(v.variant.clone()),
                txt(v.method.clone()),
                txt(v.state.to_string()),
                (format!("{} of {}", v.checks.len() - failed, v.checks.len()), Some((v.checks.len() - failed) as f64)),
                v.ranking.as_ref().map_or(txt("-"), |a| {
                    (
                        format!("{}/{}", a.comparison.pairs_agree, a.comparison.pairs_total),
                        Some(a.comparison.agreement_pct),
                    )
                }),
                v.cost.as_ref().and_then(|c| c.source_per_candidate).map_or(txt("-"), |x| num(x, 1)),
                num(v.replayed.1, 1),
            ]
        })
        .collect();
    table(
        &mut o,
        "candidates-table",
        &[
            "candidate",
            "method",
            "state",
            "checks held",
            "ranking pairs agreeing",
            "cheaper to decide (x)",
            "source/candidate collectives",
        ],
        &rows,
    );
    o.push_str("<h2 id=\"checks\">Every check</h2>\n");
    let rows: Vec<_> = r
        .candidates
        .iter()
        .flat_map(|v| {
            v.checks.iter().map(move |c| {
                vec![
                    txt(v.variant.clone()),
                    txt(c.name.clone()),
                    txt(if c.passed { "held" } else { "FAILED" }),
                    txt(c.guards.to_string()),
                    txt(c.measured.clone()),
                    txt(c.tolerance.clone()),
                ]
            })
        })
        .collect();
    table(&mut o, "checks-table", &["candidate", "check", "result", "guards", "measured", "tolerance"], &rows);
    if !r.controls.details.is_empty() {
        let _ = writeln!(o, "<h2 id=\"controls\">Controls</h2>\n<p>{}</p>\n<ul>", escape(&r.controls.summary));
        for d in &r.controls.details {
            let _ = write!(o, "<li>{}</li>", escape(d));
        }
        o.push_str("</ul>\n");
    }
    o.push_str("<h2 id=\"evidence\">Evidence chain</h2>\n<ul>");
    for (href, what) in [
        ("canary-verify.json", "this report as JSON (the record)"),
        ("campaign/manifest.json", "the campaign that replayed source and candidates"),
        ("campaign/report/report.html", "that campaign's own report"),
        ("inputs/", "the source, the candidates and the spec as verified"),
    ] {
        let _ = write!(o, "<li><a href=\"{href}\">{href}</a>: {}</li>", escape(what));
    }
    let _ = writeln!(o, "</ul>\n<p class=\"small\">never granted: {}</p>", escape(&r.never_granted));
    document(&format!("CommCanary canary verify: {}", r.source.path), &o)
}
