//! `campaign replicate A B`: the pairs either of two reports of one experiment decides,
//! matched by configuration name (`name_a`/`name_b` undo each campaign's blinding), each
//! reproduced, contradicted or not confirmed, plus Kendall τ-b between the two plain-median
//! orders per phase, as a [`Replication`] and its terminal text. Refuses reports that
//! differ in minimum effect or format, hold different configurations or share no phase.
use crate::analysis::model::{flip, PhaseReport, Report};
use crate::analysis::ranking::{self, Relation};
use crate::core::workload::Phase;
use anyhow::{bail, Context, Result};
use serde::{Deserialize, Serialize};

/// How a pair decided in one campaign fared in the other.
#[derive(Serialize, Deserialize, schemars::JsonSchema, Clone, Copy, Debug, PartialEq, Eq)]
#[serde(rename_all = "kebab-case")]
pub enum ReplicationOutcome {
    /// Both campaigns decide the same direction.
    Reproduced,
    /// The campaigns decide opposite directions.
    Contradicted,
    /// One campaign decides it, the other does not.
    NotConfirmed,
}

/// One pair decided in at least one of two campaigns.
#[derive(Serialize, Deserialize, schemars::JsonSchema, Clone, Debug, PartialEq)]
pub struct PairReplication {
    /// Phase.
    pub phase: Phase,
    /// First configuration (name).
    pub a: String,
    /// Second configuration (name).
    pub b: String,
    /// Relation and interval (percent) in the first campaign.
    pub first: (Relation, f64, f64),
    /// In the second.
    pub second: (Relation, f64, f64),
    /// Outcome.
    pub outcome: ReplicationOutcome,
}

/// `campaign replicate A B`.
#[derive(Serialize, Deserialize, schemars::JsonSchema, Clone, Debug, PartialEq)]
pub struct Replication {
    /// The two campaign ids.
    pub campaigns: (String, String),
    /// Every pair that either campaign decides.
    pub pairs: Vec<PairReplication>,
    /// Per phase: Kendall tau-b between the two campaigns' plain medians.
    pub tau_b_medians: Vec<(Phase, Option<f64>)>,
    /// Counts: reproduced, contradicted, not confirmed.
    pub reproduced: usize,
    /// Contradicted.
    pub contradicted: usize,
    /// Not confirmed.
    pub not_confirmed: usize,
}

/// Compare the decided pairs of two reports of the same experiment; labels
/// are mapped to configuration names by `name_a`/`name_b` (blinding may
/// differ). Refuses different configuration sets or minimum effects.
pub fn replicate(
    a: &Report,
    b: &Report,
    name_a: &dyn Fn(&str) -> String,
    name_b: &dyn Fn(&str) -> String,
) -> Result<Replication> {
    if a.policy.min_effect_pct != b.policy.min_effect_pct || a.format_version != b.format_version {
        bail!(
            "the campaigns differ in minimum effect ({}% vs {}%) or report format: their decisions are not comparable",
            a.policy.min_effect_pct,
            b.policy.min_effect_pct
        );
    }
    let (mut pairs, mut taus) = (Vec::new(), Vec::new());
    for pa in &a.phases {
        let Some(pb) = b.phases.iter().find(|p| p.phase == pa.phase) else { continue };
        let mut na: Vec<String> = pa.rows.iter().map(|r| name_a(&r.label)).collect();
        let mut nb: Vec<String> = pb.rows.iter().map(|r| name_b(&r.label)).collect();
        na.sort();
        nb.sort();
        if na != nb {
            bail!("phase {}: the campaigns hold different configurations ({na:?} vs {nb:?})", pa.phase);
        }
        let find = |p: &PhaseReport, name: &dyn Fn(&str) -> String, x: &str, y: &str| {
            p.pairs.iter().find_map(|r| {
                let (ra, rb) = (name(&r.a), name(&r.b));
                if ra == x && rb == y {
                    Some((r.relation, r.ci_low_pct, r.ci_high_pct))
                } else if ra == y && rb == x {
                    // the interval of (b − a)/a mirrors on the log scale
                    let m = |v: f64| (1.0 / (1.0 + v / 100.0) - 1.0) * 100.0;
                    Some((flip(r.relation), m(r.ci_high_pct), m(r.ci_low_pct)))
                } else {
                    None
                }
            })
        };
        for r in &pa.pairs {
            let (x, y) = (name_a(&r.a), name_a(&r.b));
            let first = (r.relation, r.ci_low_pct, r.ci_high_pct);
            let second = find(pb, name_b, &x, &y).context("pair missing in the second campaign")?;
            if first.0 == Relation::NotDistinguished && second.0 == Relation::NotDistinguished {
                continue;
            }
            let outcome = match (first.0, second.0) {
                (x, y) if x == y => ReplicationOutcome::Reproduced,
                (Relation::NotDistinguished, _) | (_, Relation::NotDistinguished) => ReplicationOutcome::NotConfirmed,
                _ => ReplicationOutcome::Contradicted,
            };
            pairs.push(PairReplication { phase: pa.phase, a: x, b: y, first, second, outcome });
        }
        let med = |p: &PhaseReport, name: &dyn Fn(&str) -> String| -> Vec<f64> {
            na.iter().map(|n| p.rows.iter().find(|r| &name(&r.label) == n).map_or(f64::NAN, |r| r.median_us)).collect()
        };
        taus.push((
            pa.phase,
            ranking::tau_b(&ranking::strict_relations(&med(pa, name_a)), &ranking::strict_relations(&med(pb, name_b))),
        ));
    }
    if taus.is_empty() {
        bail!("the campaigns share no phase");
    }
    let count = |o| pairs.iter().filter(|p: &&PairReplication| p.outcome == o).count();
    Ok(Replication {
        campaigns: (a.context.campaign_id.clone(), b.context.campaign_id.clone()),
        reproduced: count(ReplicationOutcome::Reproduced),
        contradicted: count(ReplicationOutcome::Contradicted),
        not_confirmed: count(ReplicationOutcome::NotConfirmed),
        pairs,
        tau_b_medians: taus,
    })
}

/// Terminal text of a replication.
pub(crate) fn render_replication(r: &Replication) -> String {
    use std::fmt::Write;
    let mut o = String::new();
    let _ = writeln!(
        o,
        "replication of {} by {}: pairs either campaign decides (interval beyond the minimum effect)",
        r.campaigns.0, r.campaigns.1
    );
    let rel = |x: &(Relation, f64, f64)| format!("{:?} [{:+.2}, {:+.2}]%", x.0, x.1, x.2);
    for p in &r.pairs {
        let _ = writeln!(
            o,
            "  {:<9} {} vs {}: first {}, second {} → {:?}",
            p.phase.name(),
            p.a,
            p.b,
            rel(&p.first),
            rel(&p.second),
            p.outcome
        );
    }
    for (ph, t) in &r.tau_b_medians {
        let _ = writeln!(
            o,
            "  {:<9} Kendall tau-b of the plain-median orders between campaigns: {}",
            ph.name(),
            t.map(|t| format!("{t:+.2}")).unwrap_or_else(|| "undefined".into())
        );
    }
    let _ =
        writeln!(o, "{} reproduced, {} contradicted, {} not confirmed", r.reproduced, r.contradicted, r.not_confirmed);
    if r.contradicted + r.not_confirmed > 0 {
        let _ = writeln!(
            o,
            "FLAG: {} decided pair(s) did not reproduce; a ranking built on them is not established",
            r.contradicted + r.not_confirmed
        );
    }
    o
}
