//! One candidate (a canary, a baseline, a reduced trace) against its source:
//! the checks, the assurance state, the decision cost (no I/O).
//!
//! Consumes the static facts of both traces ([`TraceFacts`]) and, per
//! variant, configuration and round, the measures of one replay job
//! ([`JobMeasure`]). Produces a [`CandidateVerdict`]: every check with its
//! measured value, its tolerance and whether it held, the highest state whose
//! checks all held, and the replay seconds each side needed to reach the
//! decided relations. Refuses nothing. Tail recall, maxima, tolerances and
//! the ranking check: docs/METHODS.md, "Candidate checks".
mod coverage;
mod ranking;
mod replay;
mod tail;

pub(crate) use coverage::static_checks;
pub use coverage::TraceFacts;
pub(crate) use ranking::{phase_input, ranking_check, RankingOutcome};
pub(crate) use replay::replay_checks;
pub use tail::{recurring_by_position, tail_recall_check};

use crate::analysis::truth::Regret;
use crate::analysis::ProxyAgreement;
use crate::canary::{compile, Assurance};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// What one replay job measured.
#[derive(Clone, Debug, Default)]
pub struct JobMeasure {
    /// Round.
    pub round: u32,
    /// Per-pass latency of the replay phase (warm-ups excluded), µs.
    pub pass_us: Vec<f64>,
    /// Per kind: each timed collective's latency (the slowest rank's issue to wait return), µs.
    pub per_kind_us: BTreeMap<String, Vec<f64>>,
    /// Per kind: each position of a pass, the median of its latency over the
    /// job's timed passes, µs ([`recurring_by_position`]).
    pub per_kind_recurring_us: BTreeMap<String, Vec<f64>>,
    /// Wall time of the replay phase on rank 0, warm-ups included, s.
    pub replay_s: f64,
    /// Share of communication hidden under compute in the overlap phase (mean over ranks), where it ran.
    pub hidden_share: Option<f64>,
}

/// One check.
#[derive(schemars::JsonSchema, Serialize, Deserialize, Clone, Debug, PartialEq)]
pub struct Check {
    /// Name (`coverage.identities`, `latency.all_reduce.p99`, `ranking`, ...).
    pub name: String,
    /// The state this check guards.
    pub guards: Assurance,
    /// Whether it held.
    pub passed: bool,
    /// What was measured, in words, with numbers.
    pub measured: String,
    /// The tolerance, in words.
    pub tolerance: String,
}

/// A check left out, and why: what the data could not support (never
/// counted as held or failed; printed beside the checks).
#[derive(schemars::JsonSchema, Serialize, Deserialize, Clone, Debug, PartialEq)]
pub struct Unjudged {
    /// Name of the check left out.
    pub name: String,
    /// Why, with numbers.
    pub reason: String,
}

/// Why a ranking check failed for want of a decision alone: no contradiction,
/// no pair decided on one side outside the other side's interval, but the
/// source decided no pair, or the candidate none of the source's, in these
/// rounds. More rounds or a quieter machine can decide it; nothing measured
/// says that the candidate ranks otherwise than its source.
#[derive(schemars::JsonSchema, Serialize, Deserialize, Clone, Debug, PartialEq)]
pub struct Undecided {
    /// What was not decided, in words, with numbers.
    pub reason: String,
    /// The largest job-to-job spread of one configuration on either side: the
    /// standard deviation of the logs of its jobs' median pass latencies over
    /// the rounds (0.1 is about 10%; a round several times slower than the
    /// others, as under a load that came and went, gives 0.5 and more).
    pub job_spread_log_sd: f64,
}

/// The decision cost: replay seconds to reach the decided relations.
#[derive(schemars::JsonSchema, Serialize, Deserialize, Clone, Debug, PartialEq)]
pub struct DecisionCost {
    /// Rounds from which on the source decides every pair it decides with all its rounds.
    pub source_rounds: Option<usize>,
    #[doc = concat!(
        "Rounds from which on the candidate decides those pairs as the source does (absent when it never did); ",
        "pairs the source leaves undecided do not count."
    )]
    pub candidate_rounds: Option<usize>,
    /// Replay seconds of the source over those rounds, all configurations.
    pub source_replay_s: Option<f64>,
    /// Replay seconds of the candidate over its rounds, all configurations.
    pub candidate_replay_s: Option<f64>,
    /// source_replay_s / candidate_replay_s (how many times cheaper the candidate decides).
    pub source_per_candidate: Option<f64>,
    /// Mean replay seconds of one source job and one candidate job.
    pub per_job_s: (f64, f64),
}

/// One variant's pick judged on the real job.
#[derive(schemars::JsonSchema, Serialize, Deserialize, Clone, Debug, PartialEq)]
pub struct TruthJudgement {
    /// The configuration the variant's replays rank first (lowest median of job medians).
    pub pick: String,
    /// Its regret on the real job (labels are configuration names).
    pub regret: Regret,
    #[doc = concat!(
        "Leading rounds from which on the variant decides every pair the job decides, as the job does ",
        "(absent: not in these rounds)."
    )]
    pub rounds_to_truth: Option<usize>,
    /// The variant's replay seconds over those rounds, every configuration.
    pub replay_s_to_truth: Option<f64>,
    #[doc = concat!(
        "The job's seconds to decide what it decides over the variant's seconds ",
        "(how many times cheaper the variant decided)."
    )]
    pub truth_per_variant: Option<f64>,
}

/// One candidate's verdict.
#[derive(schemars::JsonSchema, Serialize, Deserialize, Clone, Debug, PartialEq)]
pub struct CandidateVerdict {
    /// Variant name (`canary`, `random`, ...).
    pub variant: String,
    /// How it was made (`compiled`, `random`, `reduced`, ...).
    pub method: String,
    /// Its label (reduced: `decision-preserving, not source-verified`).
    pub label: String,
    /// The highest state whose checks all held.
    pub state: Assurance,
    /// Every check.
    pub checks: Vec<Check>,
    /// Checks left out, and why.
    #[serde(default)]
    pub unjudged: Vec<Unjudged>,
    /// The ranking of configurations against the source's.
    pub ranking: Option<ProxyAgreement>,
    /// Where the ranking check failed for want of a decision alone ([`Undecided`]); absent otherwise.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ranking_undecided: Option<Undecided>,
    /// The decision cost.
    pub cost: Option<DecisionCost>,
    /// `truth.regret`: its pick judged on the real job (specs with `[truth]`; never changes `state`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub truth: Option<TruthJudgement>,
    /// Events stored in the artifact, and the ratio source/artifact.
    pub events: (u64, f64),
    /// Collectives one replay pass issues, and the ratio source/candidate.
    pub replayed: (u64, f64),
    /// Artifact bytes, and the ratio source/artifact (below 1: the artifact is larger than its source).
    pub bytes: (u64, f64),
}

/// Declared tolerances.
pub(crate) const HIDDEN_SHARE_FLOOR: f64 = 0.05;
/// Smallest tail-event recall that passes.
pub const TAIL_RECALL_MIN: f64 = 0.5;
/// Tukey's far-out fence: beyond the third quartile by this many
/// interquartile ranges (Tukey, *Exploratory Data Analysis*, 1977, ch. 2).
pub(crate) const TAIL_FENCE_IQR: f64 = 3.0;
/// Smallest share of source collectives whose identity the candidate has.
pub(crate) const IDENTITY_COVERAGE_MIN: f64 = 0.99;
/// Largest difference of one identity's share of collectives.
pub(crate) const IDENTITY_SHARE_MAX: f64 = compile::MIX_SHARE_MAX;

/// Measures of the source and of one candidate, by configuration (same labels, same rounds).
pub struct Paired<'a> {
    /// Configuration labels.
    pub configs: &'a [String],
    /// `source[config]` jobs.
    pub source: &'a [Vec<JobMeasure>],
    /// `candidate[config]` jobs.
    pub candidate: &'a [Vec<JobMeasure>],
    /// `controls[config]`: a control that adds latency of its own (a
    /// known-bad, an injected delay or clock offset), left out of the tail
    /// recall, which is about the workload's tail. Empty: none.
    pub controls: &'a [bool],
}

/// The highest state whose checks all held, given the checks and what the run could show.
pub(crate) fn state_of(checks: &[Check], hardware_ok: bool) -> Assurance {
    let all = |s: Assurance| checks.iter().filter(|c| c.guards == s).all(|c| c.passed);
    let mut state = Assurance::IntegrityBound;
    for s in [Assurance::SourceVerified, Assurance::BehaviorallyVerified] {
        if all(s) && checks.iter().any(|c| c.guards == s) {
            state = s;
        } else {
            return state;
        }
    }
    if hardware_ok
        && all(Assurance::HardwareValidated)
        && checks.iter().any(|c| c.guards == Assurance::HardwareValidated)
    {
        state = Assurance::HardwareValidated;
    }
    state
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_state_stops_at_the_first_failed_level() {
        let c = |g, passed| Check {
            name: "x".into(),
            guards: g,
            passed,
            measured: String::new(),
            tolerance: String::new(),
        };
        use Assurance::{BehaviorallyVerified as B, HardwareValidated as H, IntegrityBound, SourceVerified as S};
        for (checks, hardware_ok, want) in [
            (vec![c(S, true), c(B, true)], false, B),
            (vec![c(S, false), c(B, true)], true, IntegrityBound),
            (vec![c(S, true), c(B, true), c(H, true)], true, H),
            (vec![c(S, true), c(B, true), c(H, true)], false, B),
        ] {
            assert_eq!(state_of(&checks, hardware_ok), want, "{checks:?}, hardware_ok {hardware_ok}");
        }
    }
}
