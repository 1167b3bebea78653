//! Text output of `join`: a [`JoinSummary`] as a person reads it (phases,
//! NCCL kernel arrivals, the isolated sizes, stalls, clocks and nodes, device
//! waits, source timelines, tuner choices, the delay control), and the
//! isolated phase's [`IsolatedSizeRow`]s as nccl-tests prints its own table.
//! Refuses nothing; an unknown figure prints as `unknown`. Use
//! [`render_summary`] for `join` and [`render_isolated`] for the sweep alone.
use super::isolated::IsolatedSizeRow;
use super::summary::JoinSummary;
use super::CompletionSource;
use crate::core::clock::ClockPath;
use crate::core::workload::Phase;
use crate::evidence::shard::GapTimeline;
use crate::evidence::stalls;

/// The isolated phase's per-size table, as nccl-tests prints its own: size,
/// count, type, redop and root columns (redop `none` for a kind without a
/// reduction, root -1 for a kind without a root), units in the header, and
/// the "Avg bus bandwidth" footer, the arithmetic mean of busbw over the
/// sizes (nccl-tests' `src/common.cu` sums busbw over the sizes and divides
/// by their number). Empty when no size was run.
pub fn render_isolated(rows: &[IsolatedSizeRow]) -> String {
    use std::fmt::Write;
    let mut o = String::new();
    if rows.is_empty() {
        return o;
    }
    let kind = rows[0].collective.unwrap_or_default();
    let size_is = kind.size_is();
    let _ = writeln!(
        o,
        "isolated {kind}, per size (size is {size_is}, as nccl-tests; an iteration's time is the \
        largest over ranks, as nccl-tests -I 1):"
    );
    let _ = writeln!(
        o,
        "{:>12} {:>12} {:>6} {:>6} {:>5} {:>7} {:>10} {:>12} {:>12} {:>7} {:>10} {:>10}",
        "size(B)",
        "count(elts)",
        "type",
        "redop",
        "root",
        "iters",
        "time(us)",
        "algbw(GB/s)",
        "busbw(GB/s)",
        "#wrong",
        "p50(us)",
        "p99(us)"
    );
    for r in rows {
        let wrong = r.wrong_elements.map(|w| w.to_string()).unwrap_or_else(|| "n/a".into());
        let count = r.count.map(|c| c.to_string()).unwrap_or_else(|| "?".into());
        let dtype = r.dtype.map(|d| d.name().to_string()).unwrap_or_else(|| "?".into());
        let _ = writeln!(
            o,
            "{:>12} {:>12} {:>6} {:>6} {:>5} {:>7} {:>10.2} {:>12.2} {:>12.2} {:>7} {:>10.2} {:>10.2}",
            r.bytes,
            count,
            dtype,
            r.redop.as_deref().unwrap_or("?"),
            r.root.map_or(-1, i64::from),
            r.iterations,
            r.time_us,
            r.algbw_gbps,
            r.busbw_gbps,
            wrong,
            r.p50_us,
            r.p99_us
        );
    }
    let avg = rows.iter().map(|r| r.busbw_gbps).sum::<f64>() / rows.len() as f64;
    let _ = writeln!(
        o,
        "# Avg bus bandwidth    : {avg:.3} GB/s (arithmetic mean over {} sizes, as nccl-tests prints it)",
        rows.len()
    );
    o
}

/// Human-readable rendering of a summary.
pub fn render_summary(s: &JoinSummary) -> String {
    use std::fmt::Write;
    let f = |x: Option<f64>| x.map(|v| format!("{v:.1}")).unwrap_or_else(|| "unknown".into());
    let mut o = String::new();
    let _ = writeln!(
        o,
        "run {}: {} ranks, {} joined collectives, every shard hash verified",
        s.run_id, s.world_size, s.collectives
    );
    let dev = s.phases.iter().any(|p| p.completion_source == Some(CompletionSource::DeviceEvents));
    let _ = writeln!(
        o,
        "completion = {}",
        if dev { "device interval (CUDA events on the comm stream)" } else { "host issue to wait return" }
    );
    let _ = writeln!(
        o,
        "{:<21} {:>7} {:>7} {:>12} {:>12} {:>12} {:>12} {:>10}",
        "phase", "coll/rk", "warmup", "compl p50us", "compl p99us", "token p50us", "token p99us", "skew p50us"
    );
    for p in &s.phases {
        let _ = writeln!(
            o,
            "{:<21} {:>7} {:>7} {:>12} {:>12} {:>12} {:>12} {:>10}",
            p.phase.name(),
            p.collectives_per_rank,
            p.warmup_collectives_per_rank,
            f(p.completion_median_us),
            f(p.completion_p99_us),
            f(p.token_median_us),
            f(p.token_p99_us),
            f(p.skew_median_us)
        );
    }
    for p in s.phases.iter().filter(|p| p.arrivals_from_nccl_kernels > 0) {
        let _ = writeln!(
            o,
            "{}: arrival = NCCL kernel start (CUPTI through %globaltimer) on {} of {} collectives; skew bound p50 {} \
                us",
            p.phase.name(),
            p.arrivals_from_nccl_kernels,
            p.collectives_per_rank,
            f(p.skew_bound_median_us)
        );
    }
    o.push_str(&render_isolated(&s.isolated_sizes));
    for line in stalls::render(&s.stalls) {
        let _ = writeln!(o, "{line}");
    }
    let _ = writeln!(
        o,
        "clocks (offset vs rank 0 at the start window; bound = half the best round trip, 0 on rank 0's \
        kernel clock; via a leader, the two legs' bounds summed):"
    );
    if let Some(sync) = s.clock_sync {
        let wall =
            s.calibration_wall_ns.map(|n| format!("{:.3} ms", n as f64 / 1e6)).unwrap_or_else(|| "unmeasured".into());
        let _ = writeln!(o, "  calibration {}: {wall} wall (both windows, slowest rank)", sync.name());
    }
    for c in &s.clocks {
        let inj = match (c.injected_offset_us, c.injected_drift_ppm) {
            (Some(o2), Some(d)) => format!("  injected {o2:.3} us, {d:.2} ppm"),
            _ => String::new(),
        };
        let inj = match (c.shared_kernel_clock, c.pingpong_offset_us, c.pingpong_bound_us) {
            (true, Some(o2), Some(b)) => {
                format!("{inj}  rank 0's kernel clock (ping-pong {o2:.3} ± {b:.3} us agrees)")
            }
            (true, None, _) if c.rank != 0 => {
                format!("{inj}  rank 0's kernel clock (its leader's, taken without a ping-pong)")
            }
            _ => match &c.shared_kernel_clock_refused {
                // the alarming refusal: one kernel, yet a sample one clock cannot give
                Some(why) if why.contains("same kernel, but") => format!("{inj}  NOT rank 0's clock: {why}"),
                _ => inj,
            },
        };
        // after the columns other scripts read (rank, host, offset, bound): how the model was obtained
        let inj = match (c.path, c.leader, c.leader_leg_bound_us, c.leader_bound_us) {
            (Some(ClockPath::ViaLeader), Some(l), Some(a), Some(b)) => {
                format!("{inj}  via leader {l} (± {a:.3} + ± {b:.3} us)")
            }
            _ => inj,
        };
        let inj = match c.calibration_wall_ns {
            Some(n) => format!("{inj}  calib {:.3} ms", n as f64 / 1e6),
            None => inj,
        };
        let _ = writeln!(
            o,
            "  rank {:>3} {:<16} offset {:>10} us ± {:>8} us  drift {:>9} ppm ± {:>8}{}",
            c.rank,
            c.host,
            c.offset_us.map(|v| format!("{v:.3}")).unwrap_or_else(|| "unknown".into()),
            c.bound_us.map(|v| format!("{v:.3}")).unwrap_or_else(|| "unknown".into()),
            c.drift_ppm.map(|v| format!("{v:.2}")).unwrap_or_else(|| "unknown".into()),
            c.drift_bound_ppm.map(|v| format!("{v:.2}")).unwrap_or_else(|| "unknown".into()),
            inj
        );
    }
    for n in &s.nodes {
        let verdict = match n.consistent {
            Some(true) => "consistent with one shared clock",
            Some(false) => "INCONSISTENT: estimates exclude a shared clock",
            None => "unknown (uncalibrated)",
        };
        let lead = match (n.leader, n.leader_bound_us) {
            (Some(l), Some(b)) => format!("; leader rank {l} ± {b:.3} us against rank 0"),
            _ => String::new(),
        };
        let _ = writeln!(o, "  node {} ranks {:?}: {verdict}{lead}", n.host, n.ranks);
    }
    for p in s.phases.iter().filter(|p| p.device_wait_median_us.is_some()) {
        let _ = writeln!(
            o,
            "compute stream stalled on a collective (p50) in {:<13} {} us",
            p.phase.name(),
            f(p.device_wait_median_us)
        );
    }
    for p in s.phases.iter() {
        if let Some(t) = p.source_timeline {
            let what = match t {
                GapTimeline::Device => "device timeline (collective intervals on the GPU)",
                GapTimeline::Host => "host timeline (issue to the previous wait's return)",
                GapTimeline::Mixed => "mixed: device intervals where measured, host times elsewhere",
            };
            let _ = writeln!(o, "source gaps of {:<13} {what}", p.phase.name());
        }
    }
    for p in s.phases.iter().filter(|p| !p.tuner_choices.is_empty()) {
        let list: Vec<String> = p.tuner_choices.iter().map(|(k, v)| format!("{k} x{v}")).collect();
        let _ = writeln!(o, "tuner choices {:<13} {}", p.phase.name(), list.join(", "));
    }
    for t in &s.tuning_comparisons {
        match &t.refused {
            Some(why) => {
                let _ = writeln!(o, "tuner choices {} vs {}: not compared ({why})", t.workload, t.proxy);
            }
            None => {
                let _ = writeln!(
                    o,
                    "tuner choices {} vs {}: {}/{} collectives chose the same algorithm, protocol and channels",
                    t.workload, t.proxy, t.same, t.compared
                );
            }
        }
    }
    if let Some(dc) = &s.delay_control {
        let _ = writeln!(
            o,
            "delay control (rank {} +{:.0} us every {}, achieved median {} us): {}/{} delayed collectives show skew >= \
                delay/2 - bound (min {}), {}/{} undelayed do (median skew {})",
            dc.rank, dc.delay_us, dc.every, f(dc.achieved_delay_median_us), dc.delayed_detected, dc.delayed,
            f(dc.delayed_skew_min_us), dc.undelayed_false_alarms, dc.undelayed, f(dc.undelayed_skew_median_us)
        );
        if let Some(b) = &dc.beyond_design {
            let _ = writeln!(
                o,
                "  on skew beyond the replay's design (arrival less paced gap; {} of the judged collectives replayed): \
                    {}/{} delayed detected, {}/{} undelayed above the line (median {})",
                b.corrected,
                b.delayed_detected,
                dc.delayed,
                b.undelayed_false_alarms,
                dc.undelayed,
                f(b.undelayed_skew_median_us)
            );
        }
        for p in &dc.per_phase {
            let design = match (p.beyond_design_detected, p.beyond_design_false_alarms) {
                (Some(d), Some(fa)) if p.phase == Phase::Replay => {
                    format!("; beyond design {d}/{} and {fa}/{}", p.delayed, p.undelayed)
                }
                _ => String::new(),
            };
            let _ = writeln!(
                o,
                "  {:<21} {}: detected {}/{} delayed, false alarms {}/{} undelayed{design}",
                p.phase.name(),
                if p.judged { "judged" } else { "not judged (device queue may run ahead of the host)" },
                p.delayed_detected,
                p.delayed,
                p.undelayed_false_alarms,
                p.undelayed
            );
        }
    }
    o
}
