//! Tail recall: how much of the source's recurring tail a candidate reaches.
//! Consumes per-pass latencies ([`recurring_by_position`] turns them into one
//! median per position) and [`Paired`] jobs; produces the `tail-recall.KIND`
//! check, or an [`Unjudged`] where the source's tail does not recur or is too
//! rare for the candidate's pass to hold. Control configurations are left out.
use super::{Check, JobMeasure, Paired, Unjudged, TAIL_FENCE_IQR, TAIL_RECALL_MIN};
use crate::canary::Assurance;
use crate::core::stats;
use crate::core::stats::percentile_nearest_rank as pct;
use std::collections::BTreeMap;

/// Per kind, each position of a pass (its index in the pass, in sequence
/// order), the median of that position's latency over the passes given
/// (`passes[t]`: pass t's collectives as (seq, kind, µs), in sequence order).
/// What recurs at one point of the trace stays; a stall that hit one pass
/// at one point (the machine's, not the workload's) drops out once there are
/// three passes or more.
pub fn recurring_by_position(passes: &[Vec<(u64, String, f64)>]) -> BTreeMap<String, Vec<f64>> {
    let mut out: BTreeMap<String, Vec<f64>> = BTreeMap::new();
    let n = passes.iter().map(Vec::len).max().unwrap_or(0);
    for i in 0..n {
        let Some(kind) = passes.iter().find_map(|p| p.get(i)).map(|x| x.1.clone()) else { continue };
        let mut v: Vec<f64> = passes.iter().filter_map(|p| p.get(i)).filter(|x| x.1 == kind).map(|x| x.2).collect();
        if let Some(m) = stats::median(&mut v) {
            out.entry(kind).or_default().push(m);
        }
    }
    out
}

/// Tukey's far fence of a sample: Q3 + [`TAIL_FENCE_IQR`] × (Q3 − Q1).
fn far_fence(v: &[f64]) -> Option<f64> {
    let mut w = v.to_vec();
    // the second call sorts what the first sorted
    let (q1, q3) = (pct(&mut w, 25.0)?, pct(&mut w, 75.0)?);
    Some(q3 + TAIL_FENCE_IQR * (q3 - q1))
}

/// `tail-recall.KIND`: how much of the source's recurring tail (beyond its far fence) the candidate
/// reaches, held to [`TAIL_RECALL_MIN`] of what the source reaches against itself; control
/// configurations left out, a tail too sparse to judge [`Unjudged`] (docs/METHODS.md, "Tail recall").
pub fn tail_recall_check(p: &Paired, k: &str) -> Result<Check, Unjudged> {
    fn workload<'j>(jobs: &'j [Vec<JobMeasure>], controls: &[bool]) -> Vec<&'j JobMeasure> {
        jobs.iter()
            .enumerate()
            .filter(|(i, _)| !controls.get(*i).copied().unwrap_or(false))
            .flat_map(|(_, js)| js)
            .collect()
    }
    let (src_jobs, cand_jobs) = (workload(p.source, p.controls), workload(p.candidate, p.controls));
    // each job's recurring latencies over that job's median: a job slower as a
    // whole (a busier machine, another clock speed) moves no position into the tail
    let pooled = |jobs: &[&JobMeasure], keep: &dyn Fn(u32) -> bool| -> Vec<f64> {
        jobs.iter()
            .filter(|j| keep(j.round))
            .flat_map(|j| {
                let v = j.per_kind_recurring_us.get(k).map_or(&[][..], Vec::as_slice);
                let m = stats::median(&mut v.to_vec()).filter(|m| *m > 0.0);
                v.iter().filter_map(move |x| m.map(|m| x / m))
            })
            .collect()
    };
    let share_beyond = |v: &[f64], fence: f64| -> f64 {
        if v.is_empty() {
            0.0
        } else {
            v.iter().filter(|&&x| x > fence).count() as f64 / v.len() as f64
        }
    };
    let name = format!("tail-recall.{k}");
    let left_out = |reason: String| Unjudged { name: name.clone(), reason };
    let (s, c) = (pooled(&src_jobs, &|_| true), pooled(&cand_jobs, &|_| true));
    let Some(fence) = far_fence(&s) else {
        return Err(left_out("the source's workload configurations ran no such collective".into()));
    };
    let beyond = s.iter().filter(|&&x| x > fence).count();
    let source_jobs = src_jobs.iter().filter(|j| j.per_kind_recurring_us.contains_key(k)).count();
    if beyond == 0 || beyond < source_jobs {
        return Err(left_out(format!(
            "the source has no recurring tail: {beyond} positions beyond its far fence ({fence:.2}x its job's median) \
                over {source_jobs} jobs, fewer than one per job"
        )));
    }
    let ss = beyond as f64 / s.len() as f64;
    // a tail rarer than one position of the candidate's pass cannot be held at the source's rate
    let mut per_pass: Vec<f64> =
        cand_jobs.iter().filter_map(|j| j.per_kind_recurring_us.get(k)).map(|v| v.len() as f64).collect();
    let cand_positions = pct(&mut per_pass, 50.0).unwrap_or(0.0);
    if ss * cand_positions < 1.0 {
        return Err(left_out(format!(
            "the source's recurring tail is {:.3}% of its positions (beyond its far fence, {fence:.2}x its job's \
                median): fewer than one of the candidate's {cand_positions:.0} positions per pass at that rate, so a \
                candidate this short cannot hold it; the tail is one of the candidate's approximations",
            ss * 100.0
        )));
    }
    let cs = share_beyond(&c, fence);
    let recall = (cs / ss).min(1.0);
    let own = {
        let (even, odd) = (pooled(&src_jobs, &|r| r % 2 == 0), pooled(&src_jobs, &|r| r % 2 == 1));
        match far_fence(&even) {
            Some(f) => match share_beyond(&even, f) {
                e if e > 0.0 => (share_beyond(&odd, f) / e).min(1.0),
                _ => 1.0,
            },
            None => 1.0,
        }
    };
    let min = TAIL_RECALL_MIN * own;
    Ok(Check {
        name,
        guards: Assurance::BehaviorallyVerified,
        passed: recall >= min,
        measured: format!(
            "{recall:.2} of the source's recurring tail reached by the candidate ({:.2}% of the source's positions \
                beyond its far fence, {fence:.2}x its job's median, {:.2}% of the candidate's); the source's odd \
                rounds reach {own:.2} of its even rounds'",
            ss * 100.0,
            cs * 100.0
        ),
        tolerance: format!("at least {TAIL_RECALL_MIN} of what the source reaches against itself ({min:.2})"),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A stall that hit one pass at one point drops out of the recurring
    /// latencies; a slow point of every pass stays.
    #[test]
    fn one_off_stalls_drop_out_of_the_recurring_tail() {
        let pass = |stall_at: Option<usize>| -> Vec<(u64, String, f64)> {
            let us = |i: usize| match i {
                5 => 900.0,
                _ if Some(i) == stall_at => 4000.0,
                _ => 50.0 + i as f64,
            };
            (0..8).map(|i| (i as u64, "all_reduce".to_string(), us(i))).collect()
        };
        let r = recurring_by_position(&[pass(Some(2)), pass(None), pass(Some(7))]);
        let v = &r["all_reduce"];
        assert_eq!(v.len(), 8);
        assert_eq!(v[5], 900.0);
        assert!(v.iter().enumerate().all(|(i, &x)| i == 5 || x < 100.0), "{v:?}");
        // a source whose only tail is one-off stalls has no recurring tail to judge
        let configs = vec!["a".to_string()];
        let job = |round| JobMeasure {
            round,
            per_kind_recurring_us: recurring_by_position(&[pass(Some(1)), pass(None), pass(Some(3))])
                .into_iter()
                .map(|(k, v)| (k, v.into_iter().filter(|x| *x < 500.0).collect()))
                .collect(),
            ..Default::default()
        };
        let recall = |source: &[Vec<JobMeasure>], candidate: &[Vec<JobMeasure>]| {
            tail_recall_check(&Paired { configs: &configs, source, candidate, controls: &[] }, "all_reduce")
        };
        let src = vec![(1..=4).map(job).collect::<Vec<_>>()];
        let u = recall(&src, &src).unwrap_err();
        assert!(u.reason.contains("no recurring tail"), "{u:?}");
        // four jobs whose every pass recurs at `us`
        let jobs = |us: Vec<f64>| {
            let job = |round| JobMeasure {
                round,
                per_kind_recurring_us: BTreeMap::from([("all_reduce".to_string(), us.clone())]),
                ..Default::default()
            };
            vec![(1..=4).map(job).collect::<Vec<_>>()]
        };
        // a recurring tail of 1 position in 1,000, against a candidate of 100 positions a pass: left out, not failed
        let src = jobs((0..1000).map(|i| if i == 500 { 900.0 } else { 50.0 + (i % 9) as f64 }).collect());
        let u = recall(&src, &jobs((0..100).map(|i| 50.0 + (i % 9) as f64).collect())).unwrap_err();
        assert!(u.reason.contains("cannot hold it"), "{u:?}");
        // the same tail against a candidate of 1,000 positions without it: judged, and failed
        let c = recall(&src, &jobs((0..1000).map(|i| 50.0 + (i % 9) as f64).collect())).unwrap();
        assert!(!c.passed, "{c:?}");
    }
}
