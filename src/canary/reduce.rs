//! `canary reduce`: delta debugging on the ranking decision only.
//!
//! Consumes a source trace and an oracle built from a `canary verify` run of
//! it (per configuration, the median measured latency of each operation
//! identity). Produces an artifact of a 1-minimal subset of the source's
//! positions whose predicted configuration order equals the whole source's,
//! found by `ddmin` within a budget of oracle calls, labelled
//! `decision-preserving, not source-verified` wherever it appears; `verify`
//! judges it like any candidate.
//! Method: docs/METHODS.md, "Delta debugging on the decision".
use crate::core::refusal::Code;
use anyhow::Result;
use std::collections::BTreeMap;

/// What the search did.
#[derive(Clone, Debug, serde::Serialize, schemars::JsonSchema, PartialEq)]
pub(crate) struct ReduceOutcome {
    /// Positions kept, in trace order.
    pub kept: Vec<usize>,
    /// Oracle calls made.
    pub oracle_calls: u32,
    /// Whether the budget ran out before the subset was 1-minimal.
    pub budget_exhausted: bool,
    /// Whether the kept subset passes the oracle (it always does unless the whole source does not).
    pub passes_oracle: bool,
    /// The decision preserved: configurations fastest first, `=` between tied ones.
    pub decision: String,
}

/// The measured cost model: per configuration, per identity key, the median
/// latency (µs); and the pairs the campaign decided, the only order there is
/// to preserve.
pub(crate) struct Oracle {
    /// Configuration names.
    pub configs: Vec<String>,
    /// `cost[config][identity]`.
    pub cost_us: Vec<BTreeMap<String, f64>>,
    /// Identity key of every source position.
    pub keys: Vec<String>,
    /// Ties: relative differences at or below this are equal.
    pub min_effect_pct: f64,
    /// The pairs the source's replays decided: (faster, slower) configuration indices.
    pub decided: Vec<(usize, usize)>,
}

impl Oracle {
    /// The decision of a subset: of each pair the campaign decided, whether
    /// the subset's predicted costs order it the same way (by more than the
    /// minimum effect). Pairs the campaign did not decide have no order to keep.
    pub fn decision(&self, subset: &[usize]) -> Vec<bool> {
        let totals: Vec<f64> = self
            .cost_us
            .iter()
            .map(|m| subset.iter().map(|&p| m.get(&self.keys[p]).copied().unwrap_or(0.0)).sum())
            .collect();
        self.decided
            .iter()
            .map(|&(fast, slow)| {
                totals[fast] > 0.0 && (totals[slow] / totals[fast] - 1.0) * 100.0 > self.min_effect_pct
            })
            .collect()
    }
    /// Whether a subset keeps every decided pair.
    pub fn preserves(&self, subset: &[usize]) -> bool {
        !subset.is_empty() && self.decision(subset).iter().all(|k| *k)
    }
    /// The decided pairs in words.
    pub fn words(&self) -> String {
        self.decided
            .iter()
            .map(|&(f, s)| format!("{} < {}", self.configs[f], self.configs[s]))
            .collect::<Vec<_>>()
            .join(", ")
    }
}

/// ddmin over `n` positions against `oracle`, at most `budget` oracle calls.
pub(crate) fn ddmin(n: usize, oracle: &Oracle, budget: u32) -> Result<ReduceOutcome> {
    if oracle.decided.is_empty() {
        crate::refuse!(
            Code::NoDecision,
            "the campaign decided no pair of configurations ({}), so there is no decision to preserve: run more \
                rounds, or configurations that differ",
            oracle.configs.join(", ")
        );
    }
    let all: Vec<usize> = (0..n).collect();
    let mut calls = 0u32;
    let mut test = |s: &[usize]| -> Option<bool> {
        if calls >= budget {
            return None;
        }
        calls += 1;
        Some(oracle.preserves(s))
    };
    let mut cur = all;
    let mut parts = 2usize;
    let mut exhausted = false;
    'outer: while cur.len() >= 2 {
        let chunk = cur.len().div_ceil(parts);
        let subsets: Vec<Vec<usize>> = cur.chunks(chunk).map(|c| c.to_vec()).collect();
        // reduce to a subset
        for s in &subsets {
            match test(s) {
                None => {
                    exhausted = true;
                    break 'outer;
                }
                Some(true) => {
                    cur = s.clone();
                    parts = 2;
                    continue 'outer;
                }
                Some(false) => {}
            }
        }
        // reduce to a complement
        if subsets.len() > 2 {
            for i in 0..subsets.len() {
                let comp: Vec<usize> =
                    subsets.iter().enumerate().filter(|(j, _)| *j != i).flat_map(|(_, s)| s.iter().copied()).collect();
                match test(&comp) {
                    None => {
                        exhausted = true;
                        break 'outer;
                    }
                    Some(true) => {
                        cur = comp;
                        parts = (parts - 1).max(2);
                        continue 'outer;
                    }
                    Some(false) => {}
                }
            }
        }
        if parts >= cur.len() {
            break;
        }
        parts = (parts * 2).min(cur.len());
    }
    let passes = oracle.preserves(&cur);
    Ok(ReduceOutcome {
        kept: cur,
        oracle_calls: calls,
        budget_exhausted: exhausted,
        passes_oracle: passes,
        decision: oracle.words(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::refusal::{self, Code};
    #[test]
    fn ddmin_finds_the_one_event_that_decides() {
        // config b is faster only on the 1 MiB identity; everything else ties
        let keys: Vec<String> = (0..100).map(|i| if i == 37 { "big".into() } else { "small".into() }).collect();
        let mk = |small: f64, big: f64| BTreeMap::from([("small".to_string(), small), ("big".to_string(), big)]);
        let o = Oracle {
            configs: vec!["a".into(), "b".into()],
            cost_us: vec![mk(10.0, 1000.0), mk(10.0, 500.0)],
            keys,
            min_effect_pct: 2.0,
            decided: vec![(1, 0)],
        };
        let r = ddmin(100, &o, 200).unwrap();
        assert_eq!(r.kept, vec![37]);
        assert!(r.passes_oracle && !r.budget_exhausted);
        assert_eq!(r.decision, "b < a");
        // a budget too small stops early and says so
        let r = ddmin(100, &o, 3).unwrap();
        assert!(r.budget_exhausted && r.oracle_calls == 3);
    }

    /// Costs that differ (or tie, or are identical) with no pair decided by
    /// the campaign: refused, whatever the cost model would order; with
    /// three configurations and one decided pair only that pair is kept.
    #[test]
    fn only_decided_pairs_are_preserved_and_none_is_refused() {
        let keys: Vec<String> = (0..50).map(|i| format!("k{}", i % 5)).collect();
        let flat = |v: f64| (0..5).map(|i| (format!("k{i}"), v)).collect::<BTreeMap<_, _>>();
        for costs in
            [vec![flat(10.0), flat(10.0)], vec![flat(10.0), flat(12.0)], vec![flat(10.0), flat(10.0), flat(30.0)]]
        {
            let configs: Vec<String> = (0..costs.len()).map(|i| format!("c{i}")).collect();
            let o = Oracle { configs, cost_us: costs, keys: keys.clone(), min_effect_pct: 2.0, decided: Vec::new() };
            let e = ddmin(50, &o, 200).unwrap_err();
            assert_eq!(refusal::code_of(&e), Some(Code::NoDecision), "{e:#}");
        }
        let o = Oracle {
            configs: vec!["c0".into(), "c1".into(), "c2".into()],
            cost_us: vec![flat(10.0), flat(10.0), flat(30.0)],
            keys,
            min_effect_pct: 2.0,
            decided: vec![(0, 2)],
        };
        let r = ddmin(50, &o, 200).unwrap();
        assert_eq!(r.decision, "c0 < c2", "the undecided c0 vs c1 is not claimed");
        assert!(r.passes_oracle);
    }
}
