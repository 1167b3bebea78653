//! Capacity arithmetic (docs/ARCHITECTURE.md §10), free of I/O: GPUs needed for a demand at
//! a measured per-GPU throughput, and what a faster configuration avoids.
//!
//! Consumes demand and per-GPU throughput in requests/s (one value, or a
//! candidate and a baseline) and the cost of a GPU-hour. Produces
//! GPUs = ceil(demand / throughput) per configuration, the GPUs avoided by
//! the candidate, and their yearly value (avoided × cost × 8760 h). It
//! states what it cannot see; the numbers are as good as the throughput's
//! provenance. Refuses non-positive or non-finite inputs.
use crate::core::ranges;
use crate::core::refusal::Code;
use anyhow::Result;
use serde::Serialize;

/// Hours in a (non-leap) year.
pub(crate) const HOURS_PER_YEAR: f64 = 8760.0;

/// One configuration's need.
#[derive(Serialize, schemars::JsonSchema, Clone, Debug, PartialEq)]
pub struct Need {
    /// Throughput per GPU, requests/s.
    pub throughput_per_gpu_rps: f64,
    /// GPUs needed (ceil).
    pub gpus: u64,
    /// Yearly cost of those GPUs.
    pub yearly_cost: f64,
}

/// The capacity answer.
#[derive(Serialize, schemars::JsonSchema, Clone, Debug, PartialEq)]
pub struct Capacity {
    /// Demand, requests/s.
    pub demand_rps: f64,
    /// Cost per GPU-hour.
    pub gpu_hour_cost: f64,
    /// Per configuration, in the order given (candidate first).
    pub needs: Vec<Need>,
    /// GPUs the first configuration avoids against the second (negative: it needs more).
    pub avoided_gpus: Option<i64>,
    /// Yearly value of the avoided GPUs.
    pub avoided_yearly_value: Option<f64>,
    /// What this arithmetic cannot see.
    pub caveats: Vec<String>,
}

/// GPUs for `demand_rps` at each throughput; the first is the candidate, a second the baseline.
pub fn capacity(demand_rps: f64, throughputs_rps: &[f64], gpu_hour_cost: f64) -> Result<Capacity> {
    let ok = |v: f64| v.is_finite() && v > 0.0;
    if !ok(demand_rps) {
        crate::refuse!(Code::OutOfRange, "--demand must be a positive number of requests/s");
    }
    if throughputs_rps.is_empty() || throughputs_rps.len() > 2 || !throughputs_rps.iter().all(|&t| ok(t)) {
        crate::refuse!(
            Code::OutOfRange,
            "--throughput-per-gpu: give one or two positive values (requests/s per GPU: candidate, then baseline)"
        );
    }
    if !(gpu_hour_cost.is_finite() && gpu_hour_cost >= 0.0) {
        crate::refuse!(Code::OutOfRange, "--gpu-hour-cost must be zero or positive");
    }
    for &t in throughputs_rps {
        if demand_rps / t > ranges::MAX_GPUS {
            crate::refuse!(
                Code::OutOfRange,
                "--demand {demand_rps} at {t} requests/s per GPU needs more than {:e} GPUs; no count that large is \
                    meaningful",
                ranges::MAX_GPUS
            );
        }
    }
    let needs: Vec<Need> = throughputs_rps
        .iter()
        .map(|&t| {
            let gpus = (demand_rps / t).ceil() as u64;
            Need { throughput_per_gpu_rps: t, gpus, yearly_cost: gpus as f64 * gpu_hour_cost * HOURS_PER_YEAR }
        })
        .collect();
    let avoided_gpus = (needs.len() == 2).then(|| needs[1].gpus as i64 - needs[0].gpus as i64);
    Ok(Capacity {
        demand_rps,
        gpu_hour_cost,
        avoided_yearly_value: avoided_gpus.map(|a| a as f64 * gpu_hour_cost * HOURS_PER_YEAR),
        avoided_gpus,
        needs,
        caveats: vec![
            "demand is taken as constant: size for the peak, not the mean, and add headroom for the SLO percentile"
                .into(),
            "throughput per GPU is what was measured at the measured scale (ranks, message sizes, one host); it need \
                not scale linearly"
                .into(),
            "no redundancy, failover, maintenance or scheduling fragmentation is included".into(),
            "the cost covers GPU-hours only: not power, cooling, network, licences or people".into(),
            "a throughput difference inside the campaign's interval is not a saving: check the canary verdict first"
                .into(),
        ],
    })
}

/// Human rendering with units.
pub fn render(c: &Capacity) -> String {
    use std::fmt::Write;
    let mut o = String::new();
    let _ = writeln!(o, "demand {} requests/s; GPU-hour cost {}", c.demand_rps, c.gpu_hour_cost);
    for (i, n) in c.needs.iter().enumerate() {
        let who = match (i, c.needs.len()) {
            (_, 1) => "configuration",
            (0, _) => "candidate",
            _ => "baseline",
        };
        let _ = writeln!(
            o,
            "{who}: {} requests/s per GPU -> {} GPUs (ceil), {:.2} per year",
            n.throughput_per_gpu_rps, n.gpus, n.yearly_cost
        );
    }
    if let (Some(a), Some(v)) = (c.avoided_gpus, c.avoided_yearly_value) {
        let _ = writeln!(o, "the candidate avoids {a} GPU(s): {v:.2} per year ({} h/year)", HOURS_PER_YEAR);
    }
    for k in &c.caveats {
        let _ = writeln!(o, "caveat: {k}");
    }
    o
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ceil_and_avoided() {
        let c = capacity(1000.0, &[110.0, 100.0], 2.0).unwrap();
        assert_eq!(c.needs[0].gpus, 10); // 9.09 -> 10
        assert_eq!(c.needs[1].gpus, 10);
        assert_eq!(c.avoided_gpus, Some(0), "a 10% faster config saves nothing at this demand");
        let c = capacity(1000.0, &[125.0, 100.0], 2.0).unwrap();
        assert_eq!((c.needs[0].gpus, c.needs[1].gpus, c.avoided_gpus), (8, 10, Some(2)));
        assert_eq!(c.avoided_yearly_value, Some(2.0 * 2.0 * 8760.0));
        assert!(capacity(0.0, &[1.0], 1.0).is_err());
        assert!(capacity(1.0, &[], 1.0).is_err());
        assert!(capacity(1.0, &[1.0, 2.0, 3.0], 1.0).is_err());
        assert!(render(&c).contains("avoids 2 GPU(s)"));
    }
}
