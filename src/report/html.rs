//! `report.html`: one self-contained web page of a campaign [`Report`],
//! written beside `report.json` by `campaign analyze`.
//!
//! Consumes the report and its SVG plots (as drawn for the report folder);
//! produces one HTML document with no network access (inline CSS, inline
//! SVG, a few lines of inline script that sort a table by a clicked column):
//! the short answer first, then each phase's ranking, the proxies, the
//! controls, the canary, the real job, the plots, the whole text, and the
//! evidence chain as links to the campaign's own files. Every value is
//! HTML-escaped; nothing is computed here that the report does not hold.
use crate::analysis::Report;
use std::fmt::Write;

/// Escape text for HTML content and attribute values.
pub fn escape(s: &str) -> String {
    let mut o = String::with_capacity(s.len());
    for ch in s.chars() {
        match ch {
            '&' => o.push_str("&amp;"),
            '<' => o.push_str("&lt;"),
            '>' => o.push_str("&gt;"),
            '"' => o.push_str("&quot;"),
            '\'' => o.push_str("&#39;"),
            c => o.push(c),
        }
    }
    o
}

const STYLE: &str = concat!(
    "body{font:14px/1.45 system-ui,sans-serif;margin:24px auto;max-width:1180px;padding:0 16px;color:#1b1b1b}",
    "h1{font-size:22px}h2{font-size:18px;margin-top:28px;border-bottom:1px solid #ddd}",
    "pre{background:#f6f6f6;padding:10px;overflow-x:auto;font-size:12.5px}",
    "table{border-collapse:collapse;margin:8px 0}",
    "th,td{border:1px solid #ccc;padding:3px 8px;text-align:left}",
    "th{background:#eef2f7;cursor:pointer;user-select:none}th.sorted-asc::after{content:' \\25B2'}",
    "th.sorted-desc::after{content:' \\25BC'}td.num{text-align:right;font-variant-numeric:tabular-nums}",
    ".bad{color:#b00020;font-weight:600}.ok{color:#136f2d}figure{margin:12px 0}",
    "figure svg{max-width:100%;height:auto;border:1px solid #eee}.small{color:#555;font-size:12px}",
);

const SORT_SCRIPT: &str = concat!(
    "document.querySelectorAll('table.sortable th').forEach(function(th,col){th.addEventListener('click',",
    "function(){var t=th.closest('table'),b=t.tBodies[0],rows=Array.from(b.rows),",
    "asc=!th.classList.contains('sorted-asc');t.querySelectorAll('th').forEach(function(h){",
    "h.classList.remove('sorted-asc','sorted-desc')});th.classList.add(asc?'sorted-asc':'sorted-desc');",
    "rows.sort(function(x,y){var a=x.cells[col].dataset.v||x.cells[col].textContent,",
    "c=y.cells[col].dataset.v||y.cells[col].textContent,p=parseFloat(a),q=parseFloat(c),",
    "r=(isNaN(p)||isNaN(q))?a.localeCompare(c):p-q;return asc?r:-r});rows.forEach(function(r){",
    "b.appendChild(r)})})});",
);

/// One cell of a [`table`]: its text, and a number to sort by where it has one.
pub type Cell = (String, Option<f64>);

/// A whole page: `title` and the body's HTML, with the style and the sort script.
pub fn document(title: &str, body: &str) -> String {
    format!(
        "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\"><meta name=\"viewport\" \
            content=\"width=device-width\"><title>{0}</title><style>{STYLE}</style></head><body>\n\
         <h1>{0}</h1>\n{body}<script>{SORT_SCRIPT}</script>\n</body></html>\n",
        escape(title)
    )
}

/// A sortable table: `head` names, `rows` of (text, numeric sort key) cells.
pub fn table(o: &mut String, id: &str, head: &[&str], rows: &[Vec<Cell>]) {
    let _ = write!(o, "<table class=\"sortable\" id=\"{}\"><thead><tr>", escape(id));
    for h in head {
        let _ = write!(o, "<th>{}</th>", escape(h));
    }
    o.push_str("</tr></thead><tbody>");
    for r in rows {
        o.push_str("<tr>");
        for (text, key) in r {
            let _ = match key {
                Some(k) => write!(o, "<td class=\"num\" data-v=\"{k}\">{}</td>", escape(text)),
                None => write!(o, "<td>{}</td>", escape(text)),
            };
        }
        o.push_str("</tr>");
    }
    o.push_str("</tbody></table>\n");
}

/// A number cell, sorted by its value (non-finite: by its text).
pub fn num(v: f64, digits: usize) -> Cell {
    (format!("{v:.digits$}"), v.is_finite().then_some(v))
}

/// A text cell.
pub fn txt(s: impl Into<String>) -> Cell {
    (s.into(), None)
}

/// An SVG file's text ready to inline (its XML declaration dropped).
fn inline_svg(svg: &str) -> &str {
    svg.find("<svg").map_or("", |i| &svg[i..])
}

/// The page. `plots` are (file name, SVG text) as written beside it;
/// `evidence` are (relative link, what it is) of the campaign's own files.
pub fn page(r: &Report, plots: &[(String, String)], evidence: &[(String, String)]) -> String {
    let mut o = String::new();
    let title = format!("CommCanary campaign {}", r.context.campaign_id);
    let _ = writeln!(
        o,
        "<p class=\"small\">manifest {} · {} · {}</p>",
        escape(&r.context.manifest_sha256),
        escape(&r.producer),
        escape(&r.evidence)
    );
    let _ = write!(o, "<h2 id=\"answer\">The answer</h2>\n<pre>{}</pre>\n", escape(&crate::analysis::render_short(r)));
    for p in &r.phases {
        let _ = write!(
            o,
            "<h2 id=\"phase-{0}\">Phase {0}</h2>\n<p class=\"small\">{1} rounds; {2} pairs, each interval at {3:.3}% \
                (simultaneous {4:.0}%); decided only beyond ±{5}%</p>\n",
            escape(p.phase.name()),
            p.rounds,
            p.family_pairs,
            p.pair_coverage * 100.0,
            r.coverage * 100.0,
            r.policy.min_effect_pct
        );
        let rows: Vec<Vec<Cell>> = p
            .rows
            .iter()
            .map(|row| {
                let faster = p.decided_faster_than(&row.label);
                vec![
                    num(row.rank as f64, 0),
                    txt(row.label.clone()),
                    num(row.jobs as f64, 0),
                    num(row.median_us, 1),
                    num(row.iqr_us, 1),
                    num(row.p99_us, 1),
                    num(row.p_best, 2),
                    num(row.p_worst, 2),
                    txt(if faster.is_empty() { "-".to_string() } else { faster.join(", ") }),
                ]
            })
            .collect();
        table(
            &mut o,
            &format!("ranking-{}", p.phase.name()),
            &[
                "rank",
                "config",
                "jobs",
                "median \u{b5}s",
                "IQR \u{b5}s",
                "p99 \u{b5}s",
                "P(best)",
                "P(worst)",
                "decided faster than",
            ],
            &rows,
        );
    }
    if !r.proxy_vs_blocking.is_empty() {
        o.push_str("<h2 id=\"proxies\">Proxies against blocking</h2>\n");
        let tau = |t: &crate::analysis::TauEstimate| match (t.tau_b, t.interval) {
            (Some(v), Some((lo, hi))) => (format!("{v:+.2} [{lo:+.2}, {hi:+.2}]"), Some(v)),
            (Some(v), None) => (format!("{v:+.2}"), Some(v)),
            (None, _) => ("undefined".into(), None),
        };
        let rows: Vec<_> = r
            .proxy_vs_blocking
            .iter()
            .map(|a| {
                let c = &a.comparison;
                vec![
                    txt(a.proxy.name()),
                    (format!("{}/{}", c.pairs_agree, c.pairs_total), Some(c.agreement_pct)),
                    tau(&a.tau_policy),
                    tau(&a.tau_plain),
                ]
            })
            .collect();
        table(
            &mut o,
            "proxies",
            &["proxy", "pairs agreeing", "tau-b (interval policy)", "tau-b (plain medians)"],
            &rows,
        );
    }
    if !r.controls.is_empty() {
        let _ = write!(
            o,
            "<h2 id=\"controls\">Controls</h2>\n<p>{}</p>\n",
            escape(&crate::analysis::control_counts(r.controls.iter().map(|c| (c.kind.as_str(), c.outcome))))
        );
        let rows: Vec<_> = r
            .controls
            .iter()
            .map(|c| {
                vec![
                    txt(c.kind.clone()),
                    txt(c.outcome.word()),
                    txt(c.phase.map(|p| p.name().to_string()).unwrap_or_else(|| "-".into())),
                    txt(c.observed.clone()),
                    txt(c.predicted.clone()),
                ]
            })
            .collect();
        table(&mut o, "controls-table", &["kind", "outcome", "phase", "observed", "predicted"], &rows);
    }
    if let Some(c) = r.canary.as_ref().and_then(|c| c.verdict.as_ref()) {
        let _ = write!(
            o,
            "<h2 id=\"canary\">Canary: {}</h2>\n<p>{}</p>\n",
            escape(c.result.verdict.word()),
            escape(&c.statement)
        );
    }
    if let Some(t) = &r.truth {
        let _ = writeln!(
            o,
            "<h2 id=\"truth\">The real job: {} ({}, {} is better)</h2>",
            escape(&t.metric),
            escape(&t.unit),
            escape(&t.better)
        );
        let rows: Vec<_> = t
            .rows
            .iter()
            .map(|row| {
                vec![
                    num(row.rank as f64, 0),
                    txt(row.label.clone()),
                    num(row.jobs as f64, 0),
                    num(row.median, 4),
                    num(row.iqr, 4),
                    num(row.p_best, 2),
                ]
            })
            .collect();
        table(
            &mut o,
            "truth-table",
            &["rank", "config", "jobs", &format!("median {}", t.unit), "IQR", "P(best)"],
            &rows,
        );
        let rows: Vec<_> = t
            .proxies
            .iter()
            .map(|p| {
                vec![
                    txt(p.proxy.clone()),
                    txt(p.pick.clone()),
                    txt(crate::analysis::regret_words(&p.regret)),
                    txt(format!("{}/{}", p.comparison.pairs_agree, p.comparison.pairs_total)),
                ]
            })
            .collect();
        table(&mut o, "truth-proxies", &["proxy", "pick", "regret on the real job", "pairs agreeing"], &rows);
    }
    if !r.warnings.is_empty() {
        o.push_str("<h2 id=\"warnings\">Warnings</h2>\n<ul>");
        for w in &r.warnings {
            let _ = write!(o, "<li>{}</li>", escape(w));
        }
        o.push_str("</ul>\n");
    }
    if !plots.is_empty() {
        o.push_str("<h2 id=\"plots\">Plots</h2>\n");
        for (name, svg) in plots {
            let _ = writeln!(
                o,
                "<figure id=\"plot-{0}\">{1}<figcaption class=\"small\"><a href=\"{0}\">{0}</a></figcaption></figure>",
                escape(name),
                inline_svg(svg)
            );
        }
    }
    let _ = write!(
        o,
        "<h2 id=\"text\">The whole text</h2>\n<details><summary>campaign analyze -v</summary><pre>{}</pre></details>\n",
        escape(&crate::analysis::render(r))
    );
    o.push_str(
        "<h2 id=\"evidence\">Evidence chain</h2>\n<p class=\"small\">Links are relative to the campaign's own \
        report folder (DIR/report).</p>\n<ul>",
    );
    for (href, what) in evidence {
        let _ = write!(o, "<li><a href=\"{0}\">{0}</a>: {1}</li>", escape(href), escape(what));
    }
    let _ = writeln!(o, "</ul>\n<p class=\"small\">{}</p>", escape(&r.interval_method));
    document(&title, &o)
}

/// The campaign's own files the page links to, relative to the default
/// report folder (`DIR/report`); from a `--report-dir` elsewhere they are
/// the same names under the campaign directory.
pub fn evidence_links() -> Vec<(String, String)> {
    [
        ("report.json", "this report as JSON (the record; the page is drawn from it)"),
        ("../manifest.json", "the frozen manifest: configurations, workload, policy, the seeded schedule"),
        ("../attempts.jsonl", "every attempt of every cell, appended"),
        ("../selection.json", "the attempt selected for each cell"),
        ("../runs/", "each selected job's run record and hashed shards"),
    ]
    .iter()
    .map(|(a, b)| (a.to_string(), b.to_string()))
    .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn escaping_covers_markup_and_quotes() {
        assert_eq!(escape("<a href=\"x\">&'</a>"), "&lt;a href=&quot;x&quot;&gt;&amp;&#39;&lt;/a&gt;");
    }

    #[test]
    fn inline_svg_drops_the_declaration() {
        assert_eq!(inline_svg("<?xml version=\"1.0\"?>\n<svg width=\"1\"></svg>"), "<svg width=\"1\"></svg>");
        assert_eq!(inline_svg("not an svg"), "");
    }
}
