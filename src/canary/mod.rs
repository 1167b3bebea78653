//! Canaries: a workload trace compiled into a small replay that ranks
//! collective configurations as the whole trace does, with the evidence.
//!
//! Consumes a communication trace; produces an artifact ([`compile`]), its
//! replay trace ([`expand`]), baselines ([`baseline`]), a reduced trace
//! ([`reduce`]), a redacted trace ([`redact`]) and, from real replays
//! ([`verify`], judged by [`compare`]), the highest [`Assurance`] state whose
//! checks all held, naming every check that failed. `production-representative`
//! is never granted by the tool. [`synth`] makes deterministic synthetic
//! traces for tests. The parts and the states:
//! docs/METHODS.md, "Canaries and their assurance states".
pub mod artifact;
pub mod baseline;
pub mod compare;
pub mod compile;
pub mod expand;
pub mod fold;
pub mod redact;
pub mod redaction;
pub mod reduce;
pub mod reduction;
pub mod synth;
pub mod truth;
pub mod verify;

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

/// The user-facing name (its serde name).
impl std::fmt::Display for Assurance {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.serialize(f)
    }
}
