//! The static checks (state `source-verified`): a candidate's trace facts
//! against its source's, with no replay. Consumes two [`TraceFacts`]; produces
//! the `coverage.identities`, `coverage.kinds` and `mix.identities` checks,
//! each failing when the candidate misses the source's identities or kinds, or
//! shifts an identity's share beyond the declared tolerance.
use super::{Check, IDENTITY_COVERAGE_MIN, IDENTITY_SHARE_MAX};
use crate::canary::Assurance;
use std::collections::BTreeMap;

/// Static facts of a trace (the source, or a candidate's expansion).
#[derive(Clone, Debug, Default)]
pub struct TraceFacts {
    /// Collectives per identity key (`kind dtype bytes group`), all ranks.
    pub identities: BTreeMap<String, u64>,
    /// Collectives per kind, all ranks.
    pub kinds: BTreeMap<String, u64>,
    /// Every gap, all ranks, ns.
    pub gaps_ns: Vec<u64>,
}

/// The static checks (state `source-verified`).
pub(crate) fn static_checks(source: &TraceFacts, cand: &TraceFacts) -> Vec<Check> {
    let mut out = Vec::new();
    let total: u64 = source.identities.values().sum();
    let covered: u64 = source.identities.iter().filter(|(k, _)| cand.identities.contains_key(*k)).map(|(_, n)| n).sum();
    let share = covered as f64 / total.max(1) as f64;
    let missing: Vec<&String> =
        source.identities.keys().filter(|k| !cand.identities.contains_key(*k)).take(5).collect();
    out.push(Check {
        name: "coverage.identities".into(),
        guards: Assurance::SourceVerified,
        passed: share >= IDENTITY_COVERAGE_MIN,
        measured: format!(
            "{:.2}% of the source's collectives have an identity the candidate replays ({} of {} identities){}",
            share * 100.0,
            source.identities.keys().filter(|k| cand.identities.contains_key(*k)).count(),
            source.identities.len(),
            if missing.is_empty() {
                String::new()
            } else {
                format!("; missing e.g. {}", missing.iter().map(|s| s.as_str()).collect::<Vec<_>>().join("; "))
            }
        ),
        tolerance: format!("at least {:.0}%", IDENTITY_COVERAGE_MIN * 100.0),
    });
    let kinds_missing: Vec<&String> = source.kinds.keys().filter(|k| !cand.kinds.contains_key(*k)).collect();
    out.push(Check {
        name: "coverage.kinds".into(),
        guards: Assurance::SourceVerified,
        passed: kinds_missing.is_empty(),
        measured: if kinds_missing.is_empty() {
            format!("every kind of the source ({})", source.kinds.keys().cloned().collect::<Vec<_>>().join(", "))
        } else {
            format!("kinds missing: {}", kinds_missing.iter().map(|s| s.as_str()).collect::<Vec<_>>().join(", "))
        },
        tolerance: "every kind".into(),
    });
    let ctotal: u64 = cand.identities.values().sum();
    let worst = source
        .identities
        .iter()
        .map(|(k, n)| {
            let a = *n as f64 / total.max(1) as f64;
            let b = cand.identities.get(k).copied().unwrap_or(0) as f64 / ctotal.max(1) as f64;
            (k, (a - b).abs())
        })
        .max_by(|a, b| a.1.total_cmp(&b.1));
    if let Some((k, d)) = worst {
        out.push(Check {
            name: "mix.identities".into(),
            guards: Assurance::SourceVerified,
            passed: d <= IDENTITY_SHARE_MAX,
            measured: format!(
                "largest difference of an identity's share of collectives: {:.1} points ({k})",
                d * 100.0
            ),
            tolerance: format!("at most {:.0} points", IDENTITY_SHARE_MAX * 100.0),
        });
    }
    out
}
