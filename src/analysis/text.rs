//! The terminal text of a [`Report`] (`campaign analyze`): configurations × phases with
//! medians, IQR, p99, ranks, P(best)/P(worst) and whom each is decided faster than, then
//! the proxies against blocking, the A/A family, the controls, the canary, the warnings
//! and the evidence. Reads the report only and refuses nothing; the JSON is the record.
use crate::analysis::model::{Report, TauEstimate};
use crate::analysis::ranking::Relation;

/// Terminal table: configs × phases with medians, IQR, p99, ranks, P(best),
/// the pairs the intervals decide, proxies, controls, canary, warnings.
pub fn render(r: &Report) -> String {
    use std::fmt::Write;
    let mut o = String::new();
    let _ = writeln!(
        o,
        "campaign {} (manifest {}), complete: {} cells; {}; decided only beyond ±{}% (minimum effect); P(best) from {} posterior draws, seed {}",
        r.context.campaign_id,
        &r.context.manifest_sha256[..12.min(r.context.manifest_sha256.len())],
        r.completeness.cells_ok,
        r.interval_method.split(';').next().unwrap_or(""),
        r.policy.min_effect_pct,
        r.policy.bootstrap_resamples,
        r.policy.bootstrap_seed
    );
    let _ = writeln!(
        o,
        "{:<10} {:>4}  {:<24} {:>4} {:>11} {:>9} {:>11} {:>7} {:>7}  decided faster than (interval beyond the minimum effect)",
        "phase", "rank", "config", "jobs", "median us", "IQR us", "p99 us", "P(best)", "P(wrst)"
    );
    for p in &r.phases {
        for row in &p.rows {
            let faster: Vec<&str> = p.rows.iter().filter(|x| p.relation(&row.label, &x.label) == Some(Relation::AFaster)).map(|x| x.label.as_str()).collect();
            let _ = writeln!(
                o,
                "{:<10} {:>4}  {:<24} {:>4} {:>11.1} {:>9.1} {:>11.1} {:>7.2} {:>7.2}  {}",
                p.phase.name(),
                row.rank,
                row.label,
                row.jobs,
                row.median_us,
                row.iqr_us,
                row.p99_us,
                row.p_best,
                row.p_worst,
                if faster.is_empty() { "-".to_string() } else { faster.join(",") }
            );
        }
        let _ = writeln!(
            o,
            "{:<10} {} rounds; {} pairs, each interval at {:.3}% (simultaneous {:.0}%); residual job noise {:.2}% (log sd, {} df); P(best)/P(worst) Monte Carlo error <= {:.3}\n",
            "",
            p.rounds,
            p.family_pairs,
            p.pair_coverage * 100.0,
            r.coverage * 100.0,
            p.rank_model.sigma_log * 100.0,
            p.rank_model.sigma_df,
            p.rank_model.mc_se
        );
    }
    let tau = |t: &TauEstimate| match (t.tau_b, t.interval) {
        (Some(v), Some((lo, hi))) => format!("{v:+.2} [{lo:+.2}, {hi:+.2}]"),
        (Some(v), None) => format!("{v:+.2} [interval undefined]"),
        (None, _) => "undefined".to_string(),
    };
    for a in &r.proxy_vs_blocking {
        let c = &a.comparison;
        let _ = writeln!(
            o,
            "proxy {:<9} vs blocking: agree on {}/{} pairs ({:.1}%); Kendall tau-b under the interval policy {}, on plain medians {}",
            a.proxy.name(),
            c.pairs_agree,
            c.pairs_total,
            c.agreement_pct,
            tau(&a.tau_policy),
            tau(&a.tau_plain)
        );
    }
    if r.proxy_vs_blocking.len() >= 2 {
        let mut sep = Vec::new();
        for x in &r.proxy_vs_blocking {
            for y in &r.proxy_vs_blocking {
                if let (Some((_, xhi)), Some((ylo, _))) = (x.tau_plain.interval, y.tau_plain.interval) {
                    if ylo > xhi {
                        sep.push(format!("{} tracks blocking better than {}", y.proxy.name(), x.proxy.name()));
                    }
                }
            }
        }
        let _ = writeln!(
            o,
            "{}",
            if sep.is_empty() {
                "no proxy's plain-median tau interval separates from another's: no proxy is shown to track blocking better than another".to_string()
            } else {
                format!("tau intervals separate: {}", sep.join("; "))
            }
        );
    }
    if let Some(f) = &r.aa_family {
        let _ = writeln!(o, "A/A family: {}", f.method);
    }
    for c in &r.controls {
        let _ = writeln!(
            o,
            "control {} {}{}{}: {} (predicted: {})",
            c.kind,
            c.outcome.word(),
            c.phase.map(|p| format!(" [{}]", p.name())).unwrap_or_default(),
            c.level.map(|l| format!(" at {:.3}%", l * 100.0)).unwrap_or_default(),
            c.observed,
            c.predicted
        );
    }
    if let Some(c) = r.canary.as_ref().and_then(|c| c.verdict.as_ref()) {
        let _ = writeln!(o, "canary {}: {}", c.result.verdict.word(), c.statement);
    }
    if let Some(t) = r.canary.as_ref().and_then(|c| c.trace.as_ref()) {
        let decided = t.source_ranking.pairs.iter().filter(|p| p.relation != Relation::NotDistinguished).count();
        let _ = writeln!(
            o,
            "trace canary: {} configurations ranked in phase {} within every variant; the source {} decides {decided} of {} pairs",
            t.configs.len(),
            t.phase.name(),
            t.source,
            t.source_ranking.pairs.len()
        );
        for v in &t.variants {
            let c = &v.agreement.comparison;
            let _ = writeln!(
                o,
                "trace canary {:<14} vs {}: agree on {}/{} pairs ({:.1}%); Kendall tau-b under the interval policy {}, on plain medians {}",
                v.variant,
                t.source,
                c.pairs_agree,
                c.pairs_total,
                c.agreement_pct,
                tau(&v.agreement.tau_policy),
                tau(&v.agreement.tau_plain)
            );
        }
    }
    for w in &r.warnings {
        let _ = writeln!(o, "warning: {w}");
    }
    let _ = writeln!(o, "evidence: {}", r.evidence);
    o
}
