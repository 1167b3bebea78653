//! A proxy's ranking against a truth's over the same configurations and
//! rounds, outside a campaign report: what `canary verify` asks of a canary's
//! replay against its source's (no I/O).
//!
//! Consumes two [`PhaseInput`]s with the same labels and rounds. Produces
//! both phase reports (pair intervals simultaneous per phase, as in the
//! campaign report), the agreement of their relations with Kendall τ-b and
//! its round-resampling interval ([`ProxyAgreement`]), and the fewest leading
//! rounds at which each side already decides what it decides with all of
//! them. The methods are the campaign report's (docs/ARCHITECTURE.md §9).
use super::{analyze_phase, pair_rows, tables, tau_estimates, PhaseInput, PhaseReport, ProxyAgreement};
use crate::analysis::policy::AnalysisPolicy;
use crate::analysis::ranking::{self, Relation};
use anyhow::{bail, Result};

/// Both sides' phase reports and their agreement.
pub(crate) fn proxy_against_truth(
    proxy: &PhaseInput,
    truth: &PhaseInput,
    policy: &AnalysisPolicy,
    evidence: &str,
) -> Result<(PhaseReport, PhaseReport, ProxyAgreement)> {
    if proxy.labels != truth.labels {
        bail!(
            "the proxy ranks {:?}, the truth {:?}: the same configurations in the same order are needed",
            proxy.labels,
            truth.labels
        );
    }
    let (pr, pt) = analyze_phase(proxy, policy)?;
    let (tr, tt) = analyze_phase(truth, policy)?;
    if pt.table.len() != tt.table.len() {
        bail!("the proxy ran {} rounds, the truth {}", pt.table.len(), tt.table.len());
    }
    let summaries = tr.summaries(&truth.labels);
    let prel: Vec<Relation> = pr.pairs.iter().map(|x| x.relation).collect();
    let trel: Vec<Relation> = tr.pairs.iter().map(|x| x.relation).collect();
    let (tau_policy, tau_plain) = tau_estimates(&pt.table, &tt.table, policy, pr.pair_coverage);
    let comparison = ranking::compare_relations(&summaries, &prel, &trel, policy.tie_policy, evidence)?;
    Ok((pr, tr, ProxyAgreement { proxy: proxy.phase, truth: truth.phase, comparison, tau_policy, tau_plain }))
}

/// The relations of every pair using only the first `rounds` rounds (in round order), at the phase's simultaneous
/// coverage.
pub(crate) fn relations_in_first_rounds(
    p: &PhaseInput,
    policy: &AnalysisPolicy,
    rounds: usize,
) -> Result<Vec<Relation>> {
    let t = tables(p)?;
    if rounds < 2 || rounds > t.table.len() {
        bail!("{rounds} rounds asked of {}", t.table.len());
    }
    let k = p.labels.len();
    let coverage = super::inference::simultaneous_coverage(super::COVERAGE, k * (k - 1) / 2);
    Ok(pair_rows(&p.labels, &t.table[..rounds], policy, coverage)?.into_iter().map(|r| r.relation).collect())
}

/// The fewest leading rounds (at least 2) from which on `p` decides, at every
/// later count, each pair that `target` decides as `target` decides it; a pair
/// `target` leaves undistinguished constrains nothing (`None` when even all
/// rounds do not decide them).
pub fn rounds_to_decide(p: &PhaseInput, policy: &AnalysisPolicy, target: &[Relation]) -> Result<Option<usize>> {
    let n = tables(p)?.table.len();
    let mut first: Option<usize> = None;
    for r in 2..=n {
        let rel = relations_in_first_rounds(p, policy, r)?;
        if rel.len() == target.len() && rel.iter().zip(target).all(|(a, t)| *t == Relation::NotDistinguished || a == t)
        {
            first.get_or_insert(r);
        } else {
            first = None;
        }
    }
    Ok(first)
}
