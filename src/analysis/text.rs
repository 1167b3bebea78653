//! The terminal text of a [`Report`] (`campaign analyze`): configurations × phases with
//! medians, IQR, p99, ranks, P(best)/P(worst) and whom each is decided faster than, then
//! the proxies against blocking, the A/A family, the controls, the canary, the warnings
//! and the evidence. Reads the report only and refuses nothing; the JSON is the record.
use crate::analysis::model::{ControlOutcome, PhaseReport, Report, TauEstimate};
use crate::analysis::ranking::Relation;
use crate::analysis::truth::{Regret, TruthReport};
use crate::core::workload::Phase;

/// Terminal table: configs × phases with medians, IQR, p99, ranks, P(best),
/// the pairs the intervals decide, proxies, controls, canary, warnings.
pub fn render(r: &Report) -> String {
    use std::fmt::Write;
    let mut o = String::new();
    let _ = writeln!(
        o,
        "campaign {} (manifest {}), complete: {} cells; {}; decided only beyond ±{}% (minimum effect); P(best) from \
            {} posterior draws, seed {}",
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
        "{:<10} {:>4}  {:<24} {:>4} {:>11} {:>9} {:>11} {:>7} {:>7}  decided faster than (interval beyond the minimum \
            effect)",
        "phase", "rank", "config", "jobs", "median us", "IQR us", "p99 us", "P(best)", "P(wrst)"
    );
    for p in &r.phases {
        for row in &p.rows {
            let faster = p.decided_faster_than(&row.label);
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
            "{:<10} {} rounds; {} pairs, each interval at {:.3}% (simultaneous {:.0}%); residual job noise {:.2}% (log \
                sd, {} df); P(best)/P(worst) Monte Carlo error <= {:.3}\n",
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
            "proxy {:<9} vs blocking: agree on {}/{} pairs ({:.1}%); Kendall tau-b under the interval policy {}, on \
                plain medians {}",
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
                if x.tau_plain.interval.zip(y.tau_plain.interval).is_some_and(|((_, xhi), (ylo, _))| ylo > xhi) {
                    sep.push(format!("{} tracks blocking better than {}", y.proxy.name(), x.proxy.name()));
                }
            }
        }
        let _ = writeln!(
            o,
            "{}",
            if sep.is_empty() {
                "no proxy's plain-median tau interval separates from another's: no proxy is shown to track blocking \
                    better than another"
                    .to_string()
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
            "trace canary: {} configurations ranked in phase {} within every variant; the source {} decides {decided} \
                of {} pairs",
            t.configs.len(),
            t.phase.name(),
            t.source,
            t.source_ranking.pairs.len()
        );
        for v in &t.variants {
            let c = &v.agreement.comparison;
            let _ = writeln!(
                o,
                "trace canary {:<14} vs {}: agree on {}/{} pairs ({:.1}%); Kendall tau-b under the interval policy {}, \
                    on plain medians {}",
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
    if let Some(t) = &r.truth {
        o.push_str(&render_truth(t, &tau));
    }
    for w in &r.warnings {
        let _ = writeln!(o, "warning: {w}");
    }
    let _ = writeln!(o, "evidence: {}", r.evidence);
    o
}

/// A regret in words: point, interval and whether the pick is among the best.
pub(crate) fn regret_words(g: &Regret) -> String {
    let interval = format!("{:.1}% [{:.1}, {:.1}] at {:.3}%", g.regret_pct, g.low_pct, g.high_pct, g.level * 100.0);
    if g.within_best_set {
        format!("regret {interval}: within the best set")
    } else {
        format!("regret {interval}: decided slower than the best (trails {})", g.trails.as_deref().unwrap_or("?"))
    }
}

/// The truth section: the real job's ranking, every proxy's pick judged on it, its controls.
fn render_truth(t: &TruthReport, tau: &dyn Fn(&TauEstimate) -> String) -> String {
    use std::fmt::Write;
    let mut o = String::new();
    let _ = writeln!(
        o,
        "truth: the real job, metric {} ({}, {} is better), {} rounds; pair intervals each at {:.3}%",
        t.metric,
        t.unit,
        t.better,
        t.rounds,
        t.pair_coverage * 100.0
    );
    let _ = writeln!(
        o,
        "{:>4}  {:<24} {:>4} {:>12} {:>10} {:>7} {:>7}  decided better than",
        "rank",
        "config",
        "jobs",
        format!("median {}", t.unit),
        "IQR",
        "P(best)",
        "P(wrst)"
    );
    for row in &t.rows {
        let better: Vec<&str> = t
            .pairs
            .iter()
            .filter_map(|p| match p.relation {
                Relation::AFaster if p.a == row.label => Some(p.b.as_str()),
                Relation::BFaster if p.b == row.label => Some(p.a.as_str()),
                _ => None,
            })
            .collect();
        let _ = writeln!(
            o,
            "{:>4}  {:<24} {:>4} {:>12.4} {:>10.4} {:>7.2} {:>7.2}  {}",
            row.rank,
            row.label,
            row.jobs,
            row.median,
            row.iqr,
            row.p_best,
            row.p_worst,
            if better.is_empty() { "-".to_string() } else { better.join(",") }
        );
    }
    let _ = writeln!(o, "truth best set (no configuration decided better): {}", t.best_set.join(", "));
    for p in &t.proxies {
        let c = &p.comparison;
        let cost = &p.decision_cost;
        let cost_words = if cost.truth_decided_pairs == 0 {
            "no decision cost: the truth decides no pair".to_string()
        } else {
            let rounds = |r: Option<usize>| r.map_or("not in these rounds".to_string(), |r| format!("{r} rounds"));
            let secs = |s: Option<f64>| s.map_or("-".to_string(), |s| format!("{s:.1} s"));
            format!(
                "decision cost: truth {} in {}, proxy {} in {}{}",
                secs(cost.truth_s),
                rounds(cost.truth_rounds),
                secs(cost.proxy_s),
                rounds(cost.proxy_rounds),
                cost.truth_per_proxy.map(|x| format!(" ({x:.1}x cheaper)")).unwrap_or_default()
            )
        };
        let _ = writeln!(
            o,
            "truth judges {:<16} pick {}: {}; agree on {}/{} pairs ({:.1}%), tau-b {}; {}",
            p.proxy,
            p.pick,
            regret_words(&p.regret),
            c.pairs_agree,
            c.pairs_total,
            c.agreement_pct,
            tau(&p.tau_policy),
            cost_words
        );
    }
    for c in &t.controls {
        let _ = writeln!(
            o,
            "control {} {} [truth]{}: {} (predicted: {})",
            c.kind,
            c.outcome.word(),
            c.level.map(|l| format!(" at {:.3}%", l * 100.0)).unwrap_or_default(),
            c.observed,
            c.predicted
        );
    }
    for n in &t.notes {
        let _ = writeln!(o, "truth note: {n}");
    }
    o
}

/// Controls counted per kind, one line: "a-a: 0 of 6 behaved (6
/// inconclusive); known-bad: 1 of 1 behaved". `outcomes` are (kind,
/// outcome) in report order; kinds keep their first appearance's order.
pub fn control_counts<'a>(outcomes: impl IntoIterator<Item = (&'a str, ControlOutcome)>) -> String {
    let mut kinds: Vec<(&str, [usize; 3])> = Vec::new();
    for (kind, o) in outcomes {
        let i = kinds.iter().position(|(k, _)| *k == kind).unwrap_or_else(|| {
            kinds.push((kind, [0; 3]));
            kinds.len() - 1
        });
        let slot = match o {
            ControlOutcome::Behaved => 0,
            ControlOutcome::Misbehaved => 1,
            ControlOutcome::Inconclusive => 2,
        };
        kinds[i].1[slot] += 1;
    }
    kinds
        .iter()
        .map(|(k, [ok, bad, open])| {
            let mut rest = Vec::new();
            if *bad > 0 {
                rest.push(format!("{bad} MISBEHAVED"));
            }
            if *open > 0 {
                rest.push(format!("{open} inconclusive"));
            }
            let rest = if rest.is_empty() { String::new() } else { format!(" ({})", rest.join(", ")) };
            format!("{k}: {ok} of {} behaved{rest}", ok + bad + open)
        })
        .collect::<Vec<_>>()
        .join("; ")
}

/// Every phase's ranking table as CSV: phase, rank, config, jobs, median,
/// IQR and p99 in µs, P(best), P(worst), and whom it is decided faster than
/// (`;`-separated), one row per phase and configuration.
pub fn ranking_csv(r: &Report) -> anyhow::Result<String> {
    let mut w = csv::Writer::from_writer(Vec::new());
    w.write_record([
        "phase",
        "rank",
        "config",
        "jobs",
        "median_us",
        "iqr_us",
        "p99_us",
        "p_best",
        "p_worst",
        "decided_faster_than",
    ])?;
    for p in &r.phases {
        for row in &p.rows {
            let faster = p.decided_faster_than(&row.label);
            w.write_record([
                p.phase.name().to_string(),
                row.rank.to_string(),
                row.label.clone(),
                row.jobs.to_string(),
                row.median_us.to_string(),
                row.iqr_us.to_string(),
                row.p99_us.to_string(),
                row.p_best.to_string(),
                row.p_worst.to_string(),
                faster.join(";"),
            ])?;
        }
    }
    String::from_utf8(w.into_inner().map_err(|e| anyhow::anyhow!("{e}"))?).map_err(Into::into)
}

/// One phase's ranking, best first: `<` where the interval decides the
/// neighbours, `~` where it does not.
fn chain(p: &PhaseReport) -> String {
    let mut s = p.rows.first().map(|r| r.label.clone()).unwrap_or_default();
    for w in p.rows.windows(2) {
        s.push_str(if p.relation(&w[0].label, &w[1].label) == Some(Relation::AFaster) { " < " } else { " ~ " });
        s.push_str(&w[1].label);
    }
    s
}

/// The short answer of `campaign analyze` and `campaign run` (at most about
/// 15 lines): the pick, each phase's order, the proxies, the controls counted
/// per kind, the canary and the real job. [`render`] (`-v`) and the JSON hold the rest.
pub fn render_short(r: &Report) -> String {
    use std::fmt::Write;
    let mut o = String::new();
    let _ = writeln!(
        o,
        "campaign {} (manifest {}): {} of {} cells verified, {} rounds; decided only beyond ±{}%, each phase's pairs \
            together at {:.0}%",
        r.context.campaign_id,
        &r.context.manifest_sha256[..12.min(r.context.manifest_sha256.len())],
        r.completeness.cells_ok,
        r.completeness.cells_expected,
        r.phases.iter().map(|p| p.rounds).max().unwrap_or(0),
        r.policy.min_effect_pct,
        r.coverage * 100.0
    );
    let workload = r.phases.iter().find(|p| p.phase == Phase::Blocking).or(r.phases.first());
    if let Some(t) = &r.truth {
        let _ = writeln!(
            o,
            "pick for the real job ({}, {} is better): best set {}",
            t.metric,
            t.better,
            t.best_set.join(", ")
        );
    } else if let Some(p) = workload {
        if let Some(top) = p.rows.first() {
            let faster = p.decided_faster_than(&top.label);
            let beaten = faster.len();
            let ties: Vec<&str> =
                p.rows.iter().skip(1).map(|x| x.label.as_str()).filter(|l| !faster.contains(l)).collect();
            if beaten == 0 && p.rows.len() > 1 {
                let _ = writeln!(
                    o,
                    "no pick ({}): the lowest median, {}, is decided faster than none of the {} others; P(best) {:.2}",
                    p.phase.name(),
                    top.label,
                    p.rows.len() - 1,
                    top.p_best
                );
            } else {
                let _ = writeln!(
                    o,
                    "pick ({}): {}, decided faster than {beaten} of {}; P(best) {:.2}{}",
                    p.phase.name(),
                    top.label,
                    p.rows.len() - 1,
                    top.p_best,
                    if ties.is_empty() { String::new() } else { format!("; not decided against {}", ties.join(", ")) }
                );
            }
        }
    }
    let _ = writeln!(o, "order per phase, best first ('<' decided, '~' not decided):");
    for p in &r.phases {
        let _ = writeln!(o, "  {:<9} {}", p.phase.name(), chain(p));
    }
    if !r.proxy_vs_blocking.is_empty() {
        let each: Vec<String> = r
            .proxy_vs_blocking
            .iter()
            .map(|a| {
                let tau = a.tau_policy.tau_b.map_or("undefined".to_string(), |v| format!("{v:+.2}"));
                format!("{} {}/{} (tau-b {tau})", a.proxy.name(), a.comparison.pairs_agree, a.comparison.pairs_total)
            })
            .collect();
        let _ = writeln!(o, "proxies against blocking, pairs agreeing: {}", each.join(", "));
    }
    if r.controls.is_empty() {
        let _ = writeln!(o, "controls: none declared");
    } else {
        let _ = writeln!(o, "controls: {}", control_counts(r.controls.iter().map(|c| (c.kind.as_str(), c.outcome))));
    }
    if let Some(c) = r.canary.as_ref().and_then(|c| c.verdict.as_ref()) {
        let i = &c.result.interval;
        let _ = writeln!(
            o,
            "canary {}: {} against {} in {}: {:+.2}% [{:+.2}, {:+.2}]",
            c.result.verdict.word(),
            c.candidate,
            c.baseline,
            c.phase.name(),
            i.diff_pct,
            i.ci_low_pct,
            i.ci_high_pct
        );
    }
    if let Some(t) = &r.truth {
        for p in &t.proxies {
            let _ = writeln!(o, "truth judges the {} pick {}: {}", p.proxy, p.pick, regret_words(&p.regret));
        }
    }
    if !r.warnings.is_empty() {
        let _ = writeln!(o, "{} warning(s); -v prints them", r.warnings.len());
    }
    let _ = writeln!(o, "evidence: {}", r.evidence.split(',').next().unwrap_or(&r.evidence));
    o
}
