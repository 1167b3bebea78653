//! `overlap` on disk: compute/communication overlap of an interval file or of a run.
//!
//! Consumes a JSON file of compute and communication intervals (µs), or a run
//! directory (joined and verified by [`crate::evidence::join`]). Produces the
//! file's [`OverlapReport`], or the run's per phase and rank
//! ([`crate::analysis::overlap`]). Refuses a malformed file or interval and a
//! run that does not join.
use crate::analysis::overlap::{overlap, per_phase, IntervalFile, OverlapReport, PhaseOverlap};
use crate::core::limits;
use crate::core::refusal::{self, Code};
use crate::evidence::join;
use anyhow::{Context, Result};
use std::path::Path;

/// What [`run`] measured: the interval file's overlap, or the run's per phase and rank.
pub enum Overlapped {
    /// Of the interval file.
    Intervals(OverlapReport),
    /// Of the run, per phase and rank.
    Run(Vec<PhaseOverlap>),
}

/// `overlap`: of the interval file if one is given, else of the run directory.
pub fn run(intervals: Option<&Path>, run_dir: Option<&Path>) -> Result<Overlapped> {
    if let Some(f) = intervals {
        let bytes = limits::read_bounded(f, limits::MAX_JSON_BYTES)?;
        let bad_input = refusal::or_code(Code::BadInput);
        let iv: IntervalFile = serde_json::from_slice(&bytes)
            .with_context(|| {
                format!("{}: expected {{\"compute\": [[s,e],...], \"comm\": [[s,e],...]}} in µs", f.display())
            })
            .map_err(&bad_input)?;
        let r = overlap(&iv.compute, &iv.comm).with_context(|| f.display().to_string()).map_err(&bad_input)?;
        return Ok(Overlapped::Intervals(r));
    }
    let dir = run_dir.expect("clap requires run_dir without --intervals");
    Ok(Overlapped::Run(per_phase(&join::join_dir(dir)?.shards)?))
}
