//! Tuning records: NCCL's tuner choices of a workload phase against a proxy
//! phase that replays it, the k-th collective of each (warm-ups included).
//! Consumes joined collectives with captured choices (`rank --nccl-tuning`);
//! produces a [`TuningComparison`] that says why none was made where phases
//! differ in length or sizes or a choice is missing. Use [`compare_tuning`];
//! the summary keeps a [`TuneRec`] per collective instead.
use super::JoinedCollective;
use crate::core::workload::Phase;
use crate::evidence::tuning::TunerChoice;
use serde::{Deserialize, Serialize};

/// Event-by-event comparison of tuner choices between a workload phase and a
/// proxy that replays it (the k-th collective of each, warm-ups included;
/// sizes must agree pairwise or the comparison is refused).
#[derive(schemars::JsonSchema, Serialize, Deserialize, Clone, Debug, PartialEq)]
pub struct TuningComparison {
    /// Workload phase.
    pub workload: Phase,
    /// Proxy phase.
    pub proxy: Phase,
    /// Pairs compared.
    pub compared: u64,
    /// Pairs with the same algorithm, protocol and channel count.
    pub same: u64,
    /// The first differing pairs: (index, workload choice, proxy choice).
    pub first_differences: Vec<(u64, String, String)>,
    /// Why no comparison was made, when none was.
    pub refused: Option<String>,
}

/// What the tuning comparison needs of one collective.
pub(super) struct TuneRec {
    pub(super) phase: Phase,
    pub(super) bytes: u64,
    pub(super) tuner: Option<TunerChoice>,
}

pub(super) fn tuner_label(t: &TunerChoice) -> String {
    format!("{}/{}/{}ch", t.algo, t.proto, t.channels)
}

/// Compare the k-th collectives of two phases.
pub fn compare_tuning(all: &[JoinedCollective], workload: Phase, proxy: Phase) -> TuningComparison {
    let recs: Vec<TuneRec> =
        all.iter().map(|c| TuneRec { phase: c.phase, bytes: c.bytes, tuner: c.tuner.clone() }).collect();
    compare_tuning_of(&recs, workload, proxy)
}

pub(super) fn compare_tuning_of(all: &[TuneRec], workload: Phase, proxy: Phase) -> TuningComparison {
    let a: Vec<&TuneRec> = all.iter().filter(|c| c.phase == workload).collect();
    let b: Vec<&TuneRec> = all.iter().filter(|c| c.phase == proxy).collect();
    let mut out =
        TuningComparison { workload, proxy, compared: 0, same: 0, first_differences: Vec::new(), refused: None };
    if a.len() != b.len() {
        out.refused = Some(format!("{workload} has {} collectives and {proxy} has {}", a.len(), b.len()));
        return out;
    }
    for (k, (x, y)) in a.iter().zip(&b).enumerate() {
        if x.bytes != y.bytes {
            out.refused = Some(format!("collective {k}: {workload} has {} bytes, {proxy} has {}", x.bytes, y.bytes));
            return out;
        }
        let (Some(tx), Some(ty)) = (&x.tuner, &y.tuner) else {
            out.refused = Some(format!("collective {k} has no captured choice in one of the phases"));
            return out;
        };
        out.compared += 1;
        if tx == ty {
            out.same += 1;
        } else if out.first_differences.len() < 10 {
            out.first_differences.push((k as u64, tuner_label(tx), tuner_label(ty)));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::super::fixtures::{collective, times};
    use super::*;
    use crate::evidence::tuning::TunerChoice;

    #[test]
    fn tuning_comparison_pairs_by_order_and_refuses_size_mismatch() {
        let t = |a: &str, p: &str| Some(TunerChoice { algo: a.into(), proto: p.into(), channels: 8 });
        let mk = |phase, bytes, tuner| {
            let mut c = collective(vec![times(0, 0, None)]);
            (c.phase, c.bytes, c.tuner) = (phase, bytes, tuner);
            c
        };
        let all = vec![
            mk(Phase::Blocking, 4, t("RING", "LL")),
            mk(Phase::Blocking, 8, t("RING", "LL")),
            mk(Phase::Replay, 4, t("RING", "LL")),
            mk(Phase::Replay, 8, t("TREE", "LL")),
        ];
        let c = compare_tuning(&all, Phase::Blocking, Phase::Replay);
        assert_eq!((c.compared, c.same), (2, 1));
        assert_eq!(c.first_differences, vec![(1, "RING/LL/8ch".to_string(), "TREE/LL/8ch".to_string())]);
        let bad = vec![mk(Phase::Blocking, 4, t("RING", "LL")), mk(Phase::Replay, 8, t("RING", "LL"))];
        assert!(compare_tuning(&bad, Phase::Blocking, Phase::Replay).refused.unwrap().contains("bytes"));
    }
}
