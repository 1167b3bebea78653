//! Request-level queueing over measured service times, free of I/O.
//!
//! Consumes a list of service times in ms (used in order and cycled) and a
//! load model: an open generator (`fixed` or seeded `poisson` arrivals) or a
//! closed loop (N clients, think time T). One FIFO server. Produces
//! throughput, nearest-rank p50/p95/p99 of wait and response, the time-average
//! number in system, SLO attainment, and for closed loops the
//! coordinated-omission warning and correction. Refuses: an empty or
//! non-positive service list, zero requests or clients, a non-positive
//! interval, negative think time or correction interval.
//!
//! Method: docs/METHODS.md, "Request queueing".
use crate::core::refusal::Code;
use crate::core::{ranges, stats};
use anyhow::{bail, Result};
use rand::{Rng, SeedableRng};
use serde::{Deserialize, Serialize};

/// Open-loop arrival process.
#[derive(Serialize, Deserialize, schemars::JsonSchema, Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
#[serde(rename_all = "lowercase")]
pub enum Arrival {
    /// Exactly every interval.
    Fixed,
    /// Exponential inter-arrival times with the interval as mean (seeded).
    Poisson,
}

/// The load model.
#[derive(Serialize, Deserialize, schemars::JsonSchema, Clone, Copy, Debug, PartialEq)]
#[serde(rename_all = "kebab-case", tag = "mode")]
pub(crate) enum Load {
    /// Requests arrive on their own schedule.
    Open {
        /// Arrival process.
        arrival: Arrival,
        /// Mean inter-arrival time, ms.
        interval_ms: f64,
        /// Seed of the Poisson process.
        seed: u64,
    },
    /// Each client sends, waits for the response, thinks, sends again.
    Closed {
        /// Clients.
        clients: u32,
        /// Think time after each response, ms.
        think_ms: f64,
    },
}

/// Nearest-rank percentiles, ms.
#[derive(Serialize, Deserialize, schemars::JsonSchema, Clone, Copy, Debug, PartialEq)]
pub(crate) struct Percentiles {
    /// 50th.
    pub p50: f64,
    /// 95th.
    pub p95: f64,
    /// 99th.
    pub p99: f64,
}

/// One simulation's outcome.
#[derive(Serialize, Deserialize, schemars::JsonSchema, Clone, Debug, PartialEq)]
pub(crate) struct QueueResult {
    /// The load model.
    pub load: Load,
    /// Requests simulated.
    pub requests: usize,
    /// Service times available (cycled when fewer than requests).
    pub service_times: usize,
    /// Horizon: first arrival to last departure, ms.
    pub horizon_ms: f64,
    /// Requests per second over the horizon.
    pub throughput_rps: f64,
    /// Server busy share of the horizon.
    pub utilization: f64,
    /// Wait before service, ms.
    pub wait_ms: Percentiles,
    /// Response (wait + service), ms.
    pub response_ms: Percentiles,
    /// Mean response, ms.
    pub mean_response_ms: f64,
    /// Time-average number in system over the horizon (event sweep).
    pub mean_in_system: f64,
    /// throughput × mean response (Little's law: equals `mean_in_system`).
    pub lambda_w: f64,
    /// SLO, ms, when asked.
    pub slo_ms: Option<f64>,
    /// Share of responses within the SLO.
    pub slo_attainment: Option<f64>,
    /// Closed loop with `--co-correct-ms`: response percentiles with the
    /// expected-interval correction.
    pub response_co_corrected_ms: Option<Percentiles>,
    /// Warnings (coordinated omission, cycling).
    pub warnings: Vec<String>,
}

fn pct(v: &mut [f64]) -> Percentiles {
    let mut q = |p| stats::percentile_nearest_rank(v, p).unwrap_or(f64::NAN);
    Percentiles { p50: q(50.0), p95: q(95.0), p99: q(99.0) }
}

/// Response percentiles with HdrHistogram's expected-interval correction (`Histogram::record_correct`,
/// docs/METHODS.md, "Request queueing"), in ns to 3 significant digits, memory bounded however many
/// records the correction adds.
fn co_corrected(resp_ms: &[f64], expected_ms: f64) -> Result<Percentiles> {
    let ns = |ms: f64| (ms * 1e6).round().max(1.0) as u64;
    let high = resp_ms.iter().copied().fold(expected_ms, f64::max);
    let mut h = hdrhistogram::Histogram::<u64>::new_with_bounds(1, ns(high).max(2), 3)
        .map_err(|e| anyhow::anyhow!("coordinated-omission histogram: {e}"))?;
    for &r in resp_ms {
        h.record_correct(ns(r), ns(expected_ms)).map_err(|e| anyhow::anyhow!("recording {r} ms: {e}"))?;
    }
    let q = |p: f64| h.value_at_quantile(p) as f64 / 1e6;
    Ok(Percentiles { p50: q(0.50), p95: q(0.95), p99: q(0.99) })
}

/// Arrival and departure of each request, in arrival order.
fn schedule(service_ms: &[f64], load: Load, requests: usize) -> Vec<(f64, f64, f64)> {
    let mut out = Vec::with_capacity(requests);
    let s = |i: usize| service_ms[i % service_ms.len()];
    match load {
        Load::Open { arrival, interval_ms, seed } => {
            let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(seed);
            let (mut t, mut free) = (0.0f64, 0.0f64);
            for i in 0..requests {
                if i > 0 {
                    t += match arrival {
                        Arrival::Fixed => interval_ms,
                        // inverse CDF of the exponential; 1 - u lies in (0, 1]
                        Arrival::Poisson => -interval_ms * (1.0 - rng.gen::<f64>()).ln(),
                    };
                }
                let start = t.max(free);
                free = start + s(i);
                out.push((t, start, free));
            }
        }
        Load::Closed { clients, think_ms } => {
            // next arrival per client; the earliest is served next (FIFO)
            let mut next: Vec<f64> = vec![think_ms; clients as usize];
            let mut free = 0.0f64;
            for i in 0..requests {
                let (c, &t) = next.iter().enumerate().min_by(|a, b| a.1.total_cmp(b.1)).expect("clients >= 1");
                let start = t.max(free);
                free = start + s(i);
                out.push((t, start, free));
                next[c] = free + think_ms;
            }
        }
    }
    out
}

/// Simulate `requests` requests over `service_ms` under `load`.
pub(crate) fn simulate(
    service_ms: &[f64],
    load: Load,
    requests: usize,
    slo_ms: Option<f64>,
    co_correct_ms: Option<f64>,
) -> Result<QueueResult> {
    if service_ms.is_empty() {
        bail!("no service times");
    }
    if let Some(v) = service_ms.iter().find(|v| !(v.is_finite() && **v > 0.0)) {
        bail!("service time {v} ms: every service time must be a positive number");
    }
    if requests == 0 {
        bail!("--requests must be at least 1");
    }
    match load {
        Load::Open { interval_ms, .. } if !(interval_ms.is_finite() && interval_ms > 0.0) => {
            bail!("--interval-ms must be positive")
        }
        Load::Closed { clients: 0, .. } => bail!("--clients must be at least 1"),
        Load::Closed { think_ms, .. } if !(think_ms.is_finite() && think_ms >= 0.0) => {
            bail!("--think-ms must be zero or positive")
        }
        _ => {}
    }
    if co_correct_ms.is_some_and(|e| !(e.is_finite() && e > 0.0)) {
        bail!("--co-correct-ms must be positive");
    }
    if slo_ms.is_some_and(|s| !(s.is_finite() && s > 0.0)) {
        crate::refuse!(Code::OutOfRange, "--slo-ms {}: must be finite and above 0", slo_ms.unwrap_or(f64::NAN));
    }
    if requests > ranges::MAX_REQUESTS {
        crate::refuse!(Code::OutOfRange, "--requests {requests}: at most {}", ranges::MAX_REQUESTS);
    }
    if let Load::Closed { clients, .. } = load {
        if clients > ranges::MAX_CLIENTS {
            crate::refuse!(Code::OutOfRange, "--clients {clients}: at most {}", ranges::MAX_CLIENTS);
        }
    }
    let sched = schedule(service_ms, load, requests);
    let first = sched.iter().map(|x| x.0).fold(f64::INFINITY, f64::min);
    let last = sched.iter().map(|x| x.2).fold(f64::NEG_INFINITY, f64::max);
    let horizon_ms = last - first;
    let mut waits: Vec<f64> = sched.iter().map(|&(a, s, _)| s - a).collect();
    let mut resp: Vec<f64> = sched.iter().map(|&(a, _, d)| d - a).collect();
    let busy: f64 = sched.iter().map(|&(_, s, d)| d - s).sum();
    // time-average number in system: sweep +1 at arrivals, -1 at departures
    let mut events: Vec<(f64, i32)> = sched.iter().flat_map(|&(a, _, d)| [(a, 1), (d, -1)]).collect();
    events.sort_by(|x, y| x.0.total_cmp(&y.0).then(x.1.cmp(&y.1)));
    let (mut area, mut n, mut t_prev) = (0.0f64, 0i64, first);
    for (t, delta) in events {
        area += n as f64 * (t - t_prev);
        n += delta as i64;
        t_prev = t;
    }
    let mean_response_ms = resp.iter().sum::<f64>() / requests as f64;
    let (throughput_rps, mean_in_system, lambda_w) = if horizon_ms > 0.0 {
        let thr = requests as f64 / (horizon_ms / 1e3);
        (thr, area / horizon_ms, thr * mean_response_ms / 1e3)
    } else {
        (f64::NAN, f64::NAN, f64::NAN)
    };
    let slo_attainment = slo_ms.map(|slo| resp.iter().filter(|&&r| r <= slo).count() as f64 / requests as f64);
    let mut warnings = Vec::new();
    if requests > service_ms.len() {
        warnings.push(format!("{} service times cycled over {requests} requests", service_ms.len()));
    }
    if let Load::Open { interval_ms, .. } = load {
        let mean_service = (0..requests).map(|i| service_ms[i % service_ms.len()]).sum::<f64>() / requests as f64;
        let rho = mean_service / interval_ms;
        if rho >= 1.0 {
            warnings.push(format!(
                "offered load {rho:.2} >= 1 (mean service {mean_service:.3} ms, mean interval {interval_ms} ms): the \
                    queue grows without bound, so these figures describe this horizon only"
            ));
        }
    }
    let mut response_co_corrected_ms = None;
    if let Load::Closed { clients, think_ms } = load {
        warnings.push(format!(
            "closed loop ({clients} client(s), {think_ms} ms think): a client waits for each response before it sends \
                again, so a slow server slows its own load (coordinated omission); these percentiles understate what \
                an open stream at the same rate sees{}",
            if co_correct_ms.is_none() {
                "; --co-correct-ms E adds HdrHistogram's expected-interval correction"
            } else {
                ""
            }
        ));
        if let Some(e) = co_correct_ms {
            // the correction adds floor(r / e) - 1 synthetic records per response: bound them first
            let added: f64 = resp.iter().map(|&r| (r / e).floor().max(0.0)).sum();
            if added > ranges::MAX_REQUESTS as f64 {
                crate::refuse!(
                    Code::OutOfRange,
                    "--co-correct-ms {e}: the correction would add {added:.3e} synthetic records (at most {}); the \
                        expected interval is far below the responses",
                    ranges::MAX_REQUESTS
                );
            }
            response_co_corrected_ms = Some(co_corrected(&resp, e)?);
        }
    }
    Ok(QueueResult {
        load,
        requests,
        service_times: service_ms.len(),
        horizon_ms,
        throughput_rps,
        utilization: if horizon_ms > 0.0 { busy / horizon_ms } else { f64::NAN },
        wait_ms: pct(&mut waits),
        response_ms: pct(&mut resp),
        mean_response_ms,
        mean_in_system,
        lambda_w,
        slo_ms,
        slo_attainment,
        response_co_corrected_ms,
        warnings,
    })
}

/// Read a service-time file: one value in ms per line (blank lines and `#` comments skipped).
pub fn parse_service_times(text: &str, name: &str) -> Result<Vec<f64>> {
    let mut out = Vec::new();
    for (i, line) in text.lines().enumerate() {
        let l = line.trim();
        if l.is_empty() || l.starts_with('#') {
            continue;
        }
        let v: f64 = l.parse().map_err(|_| anyhow::anyhow!("{name}:{}: {l:?} is not a number of ms", i + 1))?;
        if !(v.is_finite() && v > 0.0) {
            bail!("{name}:{}: {v} ms: service times must be positive", i + 1);
        }
        out.push(v);
    }
    if out.is_empty() {
        bail!("{name}: no service times");
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn open(arrival: Arrival, interval_ms: f64, seed: u64) -> Load {
        Load::Open { arrival, interval_ms, seed }
    }

    #[test]
    fn a_lone_closed_client_never_waits_but_an_open_stream_at_its_rate_does() {
        let service = [2.0, 3.0, 1.0, 4.0, 2.5];
        let closed = simulate(&service, Load::Closed { clients: 1, think_ms: 2.0 }, 2000, None, None).unwrap();
        assert_eq!(closed.wait_ms.p99, 0.0, "one client: the server is always free when it sends");
        let interval = 1e3 / closed.throughput_rps; // same mean rate
        let open = simulate(&service, open(Arrival::Poisson, interval, 3), 2000, None, None).unwrap();
        assert!(
            (open.throughput_rps / closed.throughput_rps - 1.0).abs() < 0.1,
            "{} vs {}",
            open.throughput_rps,
            closed.throughput_rps
        );
        assert!(open.wait_ms.p95 > 0.5 && open.wait_ms.p50 > 0.0, "Poisson arrivals queue: {:?}", open.wait_ms);
        assert!(open.response_ms.p99 > closed.response_ms.p99);
        assert!(closed.warnings.iter().any(|w| w.contains("coordinated omission")));
        assert!(!open.warnings.iter().any(|w| w.contains("coordinated omission")));
    }

    #[test]
    fn fixed_arrivals_slower_than_service_never_queue() {
        let r = simulate(&[1.0, 2.0], open(Arrival::Fixed, 3.0, 0), 100, Some(1.5), None).unwrap();
        assert_eq!(r.wait_ms.p99, 0.0);
        assert_eq!(r.response_ms.p50, 1.0);
        assert_eq!(r.response_ms.p99, 2.0);
        assert_eq!(r.slo_attainment, Some(0.5));
        // 100 requests from t=0 to the last departure at 99*3 + 2 ms
        assert!((r.horizon_ms - 299.0).abs() < 1e-12);
    }

    #[test]
    fn co_correction_adds_the_missing_samples() {
        // one client, no think: every response is one service time; a 10 ms
        // stall with an expected interval of 1 ms hides 9 requests of 9..1 ms
        let mut service = vec![1.0; 99];
        service.push(10.0);
        let r = simulate(&service, Load::Closed { clients: 1, think_ms: 0.0 }, 100, None, Some(1.0)).unwrap();
        assert_eq!(r.response_ms.p99, 1.0);
        let c = r.response_co_corrected_ms.unwrap();
        assert!(c.p99 > 5.0 && c.p95 >= 1.0, "{c:?}");
    }

    #[test]
    fn refuses_bad_input() {
        assert!(simulate(&[], open(Arrival::Fixed, 1.0, 0), 1, None, None).is_err());
        assert!(simulate(&[0.0], open(Arrival::Fixed, 1.0, 0), 1, None, None).is_err());
        assert!(simulate(&[1.0], open(Arrival::Fixed, 0.0, 0), 1, None, None).is_err());
        assert!(simulate(&[1.0], Load::Closed { clients: 0, think_ms: 1.0 }, 1, None, None).is_err());
        assert!(parse_service_times("1.0\nx\n", "f").unwrap_err().to_string().contains("f:2"));
        assert_eq!(parse_service_times("# ms\n1.5\n\n2\n", "f").unwrap(), vec![1.5, 2.0]);
    }

    proptest! {
        #[test]
        fn littles_law_holds_on_the_finite_horizon(
            service in proptest::collection::vec(0.01f64..20.0, 1..40),
            requests in 1usize..400,
            interval in 0.05f64..10.0,
            poisson in any::<bool>(),
            closed in any::<bool>(),
            clients in 1u32..8,
            think in 0.0f64..10.0,
            seed in 0u64..1000,
        ) {
            let load = if closed {
                Load::Closed { clients, think_ms: think }
            } else {
                open(if poisson { Arrival::Poisson } else { Arrival::Fixed }, interval, seed)
            };
            let r = simulate(&service, load, requests, None, None).unwrap();
            if r.horizon_ms > 0.0 {
                prop_assert!((r.mean_in_system - r.lambda_w).abs() <= 1e-9 * r.lambda_w.abs().max(1e-300), "L {} vs \
                    lambda W {}", r.mean_in_system, r.lambda_w);
                prop_assert!(r.utilization <= 1.0 + 1e-12);
            }
            prop_assert_eq!(&r, &simulate(&service, load, requests, None, None).unwrap());
        }
    }
}
