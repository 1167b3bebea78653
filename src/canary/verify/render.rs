//! The verify report as text. Consumes a `VerifyReport`; produces the full
//! listing (`canary verify -v`: every check, control and cost) or the short
//! answer (one line per candidate). Refuses nothing.
use super::VerifyReport;
use crate::canary::compare::Check;
use crate::canary::truth;

/// The report as text.
pub fn render(r: &VerifyReport) -> String {
    use std::fmt::Write;
    let mut s = String::new();
    let _ = writeln!(
        s,
        "canary verify: source {} ({} ranks, {} collectives, SHA-256 {})",
        r.source.path,
        r.source.world_size,
        r.source.collectives_per_rank.iter().sum::<u64>(),
        r.source.file_sha256
    );
    let _ = writeln!(
        s,
        "  {} configurations x {} rounds on {}; campaign {} (manifest {})",
        r.configs.len(),
        r.rounds,
        r.backend,
        r.campaign.0,
        r.campaign.1
    );
    let _ = writeln!(s, "  evidence: {}", r.evidence);
    let _ = match r.controls.behaved {
        None => writeln!(s, "  controls: none declared"),
        Some(b) => writeln!(s, "  controls: {}", if b { "every one behaved" } else { "NOT all behaved" }),
    };
    for d in r.controls.details.iter().filter(|_| r.controls.behaved.is_some()) {
        let _ = writeln!(s, "    {d}");
    }
    if let Some(t) = &r.truth {
        let _ = writeln!(
            s,
            "  the real job: {} ({}, {} is better) decides {} pair(s); best set {}; the source's {}",
            t.metric,
            t.unit,
            t.better,
            t.decided_pairs,
            t.best_set.join(", "),
            truth::words(&t.source)
        );
    }
    for v in &r.candidates {
        let _ = writeln!(s);
        let _ = writeln!(s, "{} [{}] — {}: {}", v.variant, v.method, v.label, v.state);
        if let Some(j) = &v.truth {
            let _ = writeln!(s, "  {}", truth::words(j));
        }
        let _ = writeln!(
            s,
            "  size: {} events stored (source/artifact {:.1}x), {} collectives per pass (source/candidate {:.1}x), {} \
                bytes (source/artifact {:.2}x{})",
            v.events.0,
            v.events.1,
            v.replayed.0,
            v.replayed.1,
            v.bytes.0,
            v.bytes.1,
            if v.bytes.1 < 1.0 { ": the artifact is LARGER than its source" } else { "" }
        );
        if v.cost.is_none() && v.ranking.is_some() {
            let _ = writeln!(
                s,
                "  decision cost: none: the source decided no pair of configurations, so there is no \
                decision to preserve"
            );
        }
        if let Some(c) = &v.cost {
            let _ = writeln!(
                s,
                "  decision cost: source {} in {} rounds, candidate {} in {} rounds: {}",
                c.source_replay_s.map_or("n/a".into(), |x| format!("{x:.2} s")),
                c.source_rounds.map_or("n/a".into(), |x| x.to_string()),
                c.candidate_replay_s.map_or("n/a".into(), |x| format!("{x:.2} s")),
                c.candidate_rounds.map_or("never".into(), |x| x.to_string()),
                c.source_per_candidate
                    .map_or("not reached (the candidate never decided the source's relations)".into(), |x| format!(
                        "{x:.1}x cheaper (source/candidate)"
                    ))
            );
        }
        let failed: Vec<&Check> = v.checks.iter().filter(|c| !c.passed).collect();
        let _ = writeln!(s, "  checks: {} of {} held", v.checks.len() - failed.len(), v.checks.len());
        for Check { name, guards, measured, tolerance, .. } in &failed {
            let _ = writeln!(s, "    FAILED {name} (guards {guards}): {measured} — tolerance {tolerance}");
        }
        for u in &v.unjudged {
            let _ = writeln!(s, "    not judged {}: {}", u.name, u.reason);
        }
        if let Some(u) = &v.ranking_undecided {
            let _ = writeln!(
                s,
                "    ranking undecided, not contradicted: {} (job-to-job spread {:.2}, log sd); more rounds can \
                    decide it",
                u.reason, u.job_spread_log_sd
            );
        }
        if let Some(c) = v.checks.iter().find(|c| c.name == "ranking") {
            if c.passed {
                let _ = writeln!(s, "    ranking: {}", c.measured);
            }
        }
    }
    if let Some(b) = r.canary_beats_baselines {
        let _ = writeln!(s);
        let _ = writeln!(s, "canary {} every baseline at equal size", if b { "beats" } else { "does NOT beat" });
    } else if r
        .candidates
        .iter()
        .skip(1)
        .any(|c| matches!(c.method.as_str(), "random" | "frequency" | "cluster" | "stratified-gap" | "head"))
    {
        let _ = writeln!(s);
        let _ = writeln!(s, "canary and baselines: no comparison (the source decided no pair of configurations)");
    }
    let _ = writeln!(s, "never granted: {}", r.never_granted);
    s
}

/// The short answer (`canary verify` without `-v`): the source, the controls
/// counted per kind, the real job, then one line per candidate with its
/// state, the check that stops it from the next state, its ranking against
/// the source and its decision cost; [`render`] and the JSON hold every check.
pub fn render_short(r: &VerifyReport) -> String {
    use std::fmt::Write;
    let mut s = String::new();
    let _ = writeln!(
        s,
        "canary verify: source {} ({} ranks, {} collectives); {} configurations x {} rounds on {}",
        r.source.path,
        r.source.world_size,
        r.source.collectives_per_rank.iter().sum::<u64>(),
        r.configs.len(),
        r.rounds,
        r.backend
    );
    let _ = match r.controls.behaved {
        None => writeln!(s, "controls: none declared"),
        Some(b) => writeln!(s, "controls: {}{}", r.controls.summary, if b { "" } else { " (NOT all behaved)" }),
    };
    if let Some(t) = &r.truth {
        let _ = writeln!(
            s,
            "the real job: {} decides {} pair(s), best set {}; the source's {}",
            t.metric,
            t.decided_pairs,
            t.best_set.join(", "),
            truth::words(&t.source)
        );
    }
    for v in &r.candidates {
        let failed: Vec<&Check> = v.checks.iter().filter(|c| !c.passed).collect();
        let stop = match failed.iter().min_by_key(|c| c.guards) {
            None => "every check held".to_string(),
            Some(c) => {
                let more = if failed.len() > 1 {
                    format!(" (and {} more failed checks)", failed.len() - 1)
                } else {
                    String::new()
                };
                format!("stopped by {}: {}{more}", c.name, c.measured)
            }
        };
        let ranking = v.ranking.as_ref().map(|a| {
            let c = &a.comparison;
            format!("; ranking {}/{} pairs agree", c.pairs_agree, c.pairs_total)
        });
        let cost = v
            .cost
            .as_ref()
            .and_then(|c| c.source_per_candidate)
            .map(|x| format!("; {x:.1}x cheaper to decide"))
            .unwrap_or_default();
        let _ = writeln!(s, "{} [{}]: {}; {stop}{}{cost}", v.variant, v.method, v.state, ranking.unwrap_or_default());
        if let Some(j) = &v.truth {
            let _ = writeln!(s, "  {}", truth::words(j));
        }
    }
    if let Some(b) = r.canary_beats_baselines {
        let _ = writeln!(s, "canary {} every baseline at equal size", if b { "beats" } else { "does NOT beat" });
    }
    let _ = writeln!(s, "-v prints every check and control; canary-verify.json has everything");
    s
}
