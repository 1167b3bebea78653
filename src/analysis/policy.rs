//! The analysis policy and the completeness verdict: what a campaign freezes
//! before it runs and what `verify` decides, as the analysis consumes them.
//!
//! Kept below both the campaign (which writes them into the manifest and
//! computes the verdict) and the analysis (which reads them), so the
//! statistics never depend on campaign I/O (docs/ARCHITECTURE.md §2).
//! Consumes nothing, produces types; refuses nothing.
use serde::{Deserialize, Serialize};

pub use crate::analysis::ranking::TiePolicy;

/// The analysis policy, frozen before anything runs.
#[derive(schemars::JsonSchema, Serialize, Deserialize, Clone, Debug, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct AnalysisPolicy {
    /// Tie policy; a campaign is analyzed under `interval` only (its relations come from the printed intervals).
    pub tie_policy: TiePolicy,
    /// Minimum effect, percent: a pair (and the canary) is decided only when its
    /// interval lies beyond ± this; within ± this it is `tied` (equivalent).
    #[serde(default)]
    pub min_effect_pct: f64,
    /// Slowdown of operational interest, percent: the report gives P(slowdown > delta).
    #[serde(default = "default_delta")]
    pub delta_pct: f64,
    /// Monte Carlo draws: posterior draws of P(best)/P(worst), resamples of the tau intervals.
    #[serde(default = "default_resamples")]
    pub bootstrap_resamples: u32,
    /// Seed of those draws (ChaCha8).
    #[serde(default)]
    pub bootstrap_seed: u64,
}

fn default_delta() -> f64 {
    5.0
}
fn default_resamples() -> u32 {
    10_000
}

/// Completeness verdict.
#[derive(schemars::JsonSchema, Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
pub struct Verdict {
    /// True only when every check passed.
    pub complete: bool,
    /// Manifest identity.
    pub manifest_sha256: String,
    /// Cells expected.
    pub cells_expected: usize,
    /// Cells that passed every check.
    pub cells_ok: usize,
    /// Each refusal: (cell, reason).
    pub refusals: Vec<(String, String)>,
}
