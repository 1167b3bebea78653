//! Canaries: a workload trace compiled into a small replay that ranks
//! collective configurations as the whole trace does, with the evidence.
//!
//! - [`compile`]: a communication trace → a [`artifact::Canary`] (folded
//!   loops, bounded histograms, the iterations its statistic needs).
//! - [`expand`]: an artifact → the trace its replay walks.
//! - [`baseline`]: deliberately simple samples at equal size (random,
//!   frequency, cluster, stratified gaps, the first N), made like artifacts.
//! - [`compare`]: the checks of one candidate against its source over
//!   measured replays, the assurance state, the decision cost (no I/O).
//! - [`verify`]: source and candidates replayed as one campaign, collected.
//! - [`reduce`]: delta debugging on the ranking decision only.
//! - [`redact`]: a trace without host names, user names, job ids or absolute times.
//! - [`synth`]: a deterministic synthetic trace for tests.
//!
//! Assurance states, weakest first; `verify` grants the highest whose
//! checks all held and names every check that failed: `schema-valid` (the
//! artifact decodes), `integrity-bound` (its digest holds and it was made
//! from exactly this source file), `source-verified` (its expansion covers
//! the source's identities and kinds, and its stored values stay within
//! their declared budget of the source's), `behaviorally-verified` (real
//! replays of source and canary agree on every behavioural check and on the
//! configuration ranking), `hardware-validated` (the same on GPUs with the
//! campaign's controls behaving). `production-representative` is never
//! granted by the tool: only a user can know that.
pub mod artifact;
pub mod baseline;
pub mod compare;
pub mod compile;
pub mod expand;
pub mod fold;
pub mod redact;
pub mod redaction;
pub mod reduce;
pub mod synth;
pub mod truth;
pub mod verify;
pub mod verify_page;

use serde::{Deserialize, Serialize};

/// How much of a canary's claim was checked.
#[derive(schemars::JsonSchema, Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
#[serde(rename_all = "kebab-case")]
pub enum Assurance {
    /// Nothing holds: not even a readable artifact.
    None,
    /// The artifact decodes as a canary of this format.
    SchemaValid,
    /// Its digest holds and it names exactly this source file.
    IntegrityBound,
    /// Its expansion covers the source statically, within its budget.
    SourceVerified,
    /// Replays of source and canary agree, ranking included.
    BehaviorallyVerified,
    /// The same on GPUs with the campaign's controls behaving.
    HardwareValidated,
}

impl Assurance {
    /// The user-facing name.
    pub fn name(self) -> &'static str {
        match self {
            Assurance::None => "none",
            Assurance::SchemaValid => "schema-valid",
            Assurance::IntegrityBound => "integrity-bound",
            Assurance::SourceVerified => "source-verified",
            Assurance::BehaviorallyVerified => "behaviorally-verified",
            Assurance::HardwareValidated => "hardware-validated",
        }
    }
}

impl std::fmt::Display for Assurance {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}
