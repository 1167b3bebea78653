//! `canary reduce` on disk: the search of [`super::reduce`] against the
//! oracle of a `canary verify` directory, and the reduced artifact.
//!
//! Consumes the source trace, the verify directory of it and a budget of
//! oracle calls. Produces the artifact of the kept positions, labelled
//! `decision-preserving, not source-verified`, and what the search did.
//! Refuses what the trace, the oracle or the search refuse, and an output
//! that exists, before it is written.
use super::artifact::{self, Method};
use super::{baseline, compile, reduce, verify};
use anyhow::Result;
use std::path::Path;

/// `canary reduce`: search the positions of the trace at `trace` against the oracle of the `canary verify`
/// directory `from` within `budget` oracle calls, and write the reduced artifact to `out`. Returns the search and
/// the source's collectives per rank.
pub(crate) fn run(trace: &Path, from: &Path, out: &Path, budget: u32) -> Result<(reduce::ReduceOutcome, usize)> {
    let (t, bytes) = compile::read_trace(trace)?;
    let oracle = verify::oracle_from(from, &t, &bytes, trace)?;
    let events = t.ranks.first().map_or(0, |r| r.collectives.len());
    let r = reduce::ddmin(events, &oracle, budget)?;
    let kept = r.kept.len() as u64;
    let c = baseline::from_positions(&t, &bytes, &trace.display().to_string(), &r.kept, Method::Reduced, kept, 1)?;
    let c = artifact::Canary { label: artifact::REDUCED_LABEL.into(), ..c }.seal()?;
    c.write(out)?;
    Ok((r, events))
}
