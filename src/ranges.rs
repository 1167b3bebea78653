//! Documented ranges of every number a user gives, checked before any work starts.
//!
//! Consumes parsed command-line arguments; produces nothing, or a
//! `refused[OUT_OF_RANGE]` error naming the option, the value and its range.
//! The ranges keep every allocation and loop bounded on a node (the largest
//! values still fit a 139 GiB GPU and a few GiB of host memory per rank):
//!
//! | option | range |
//! |---|---|
//! | `--tokens` | 1 to 1 000 000 |
//! | `--warmup-tokens` | 0 to 100 000 |
//! | `--layers` | 1 to 10 000 |
//! | `(--tokens + --warmup-tokens) x --layers` | at most 10 000 000 collectives per phase |
//! | `--iters` | 1 to 1 000 000; `--warmup-iters` 0 to 100 000; `--check` 0 to 1 000 000 |
//! | `--sizes` | 1 to 64 sizes, each a whole number of f32 from 4 B to 1 GiB |
//! | `--membound-bytes` | 4 B to 1 GiB |
//! | `--gemm` | each of M, N, K 1 to 16 384 |
//! | `--clock-samples` | 1 to 100 000 |
//! | `--collective-timeout-s` | finite, above 0, at most 86 400 (one day) |
//! | `queue --requests` | 1 to 10 000 000; `--clients` 1 to 1 000 000 |
//! | `queue --slo-ms`, `--co-correct-ms`, `--interval-ms` | finite and above 0 |
//! | `capacity` | at most 10^12 GPUs per need |
//! | `bench-overhead --size` | 4 B to 1 GiB; `--iters`, `--reps` at least 1 |
use crate::refusal::{refuse, Code};
use anyhow::Result;

/// Largest message: 1 GiB.
pub const MAX_MESSAGE_BYTES: u64 = 1 << 30;
/// Largest GEMM dimension.
pub const MAX_GEMM_DIM: u32 = 16_384;
/// Most collectives one workload phase may record per rank.
pub const MAX_PHASE_COLLECTIVES: u64 = 10_000_000;
/// Most simulated requests in `queue`.
pub const MAX_REQUESTS: usize = 10_000_000;
/// Most closed-loop clients in `queue`.
pub const MAX_CLIENTS: u32 = 1_000_000;
/// Most GPUs `capacity` will count.
pub const MAX_GPUS: f64 = 1e12;

fn out(what: &str, v: impl std::fmt::Display, range: &str) -> anyhow::Error {
    refuse(Code::OutOfRange, format!("{what} {v} is outside its range ({range})"))
}

/// Check an integer option against `lo..=hi`.
pub fn int<T: PartialOrd + std::fmt::Display + Copy>(what: &str, v: T, lo: T, hi: T) -> Result<()> {
    if v < lo || v > hi {
        return Err(out(what, v, &format!("{lo} to {hi}")));
    }
    Ok(())
}

/// Check a real option: finite, above 0, at most `hi`.
pub fn positive(what: &str, v: f64, hi: f64) -> Result<()> {
    if !(v.is_finite() && v > 0.0 && v <= hi) {
        return Err(out(what, v, &format!("finite, above 0, at most {hi}")));
    }
    Ok(())
}

/// Check a message size list.
pub fn sizes(what: &str, s: &str) -> Result<Vec<u64>> {
    let v = crate::units::parse_size_list(s)?;
    int(&format!("{what} (count)"), v.len(), 1, 64)?;
    for &b in &v {
        if b % 4 != 0 {
            return Err(out(what, b, "a whole number of f32, 4 bytes each"));
        }
        int(what, b, 4, MAX_MESSAGE_BYTES)?;
    }
    Ok(v)
}

/// Every number of `rank`'s arguments.
pub fn rank_args(a: &crate::cli::RankArgs) -> Result<()> {
    int("--tokens", a.tokens, 1, 1_000_000)?;
    int("--warmup-tokens", a.warmup_tokens, 0, 100_000)?;
    if let Some(l) = a.layers {
        int("--layers", l, 1, 10_000)?;
    }
    // a model's own layer count (when --layers is not given) is its file's business
    let per_phase = (a.tokens as u64 + a.warmup_tokens as u64) * a.layers.unwrap_or(1) as u64;
    int("(--tokens + --warmup-tokens) x --layers", per_phase, 1, MAX_PHASE_COLLECTIVES)?;
    int("--iters", a.iters, 1, 1_000_000)?;
    int("--warmup-iters", a.warmup_iters, 0, 100_000)?;
    int("--check", a.check, 0, 1_000_000)?;
    if let Some(s) = &a.sizes {
        sizes("--sizes", s)?;
    }
    int("--membound-bytes", crate::units::parse_bytes(&a.membound_bytes)?, 4, MAX_MESSAGE_BYTES)?;
    if let Some(g) = &a.gemm {
        let s: crate::workload::GemmShape = g.parse()?;
        for (d, v) in [("M", s.m), ("N", s.n), ("K", s.k)] {
            int(&format!("--gemm {d}"), v, 1, MAX_GEMM_DIM)?;
        }
    }
    int("--clock-samples", a.clock_samples, 1, 100_000)?;
    positive("--collective-timeout-s", a.collective_timeout_s, 86_400.0)?;
    crate::workload::parse_phases(&a.phases)?;
    if let Some(d) = &a.inject_delay {
        crate::workload::DelayInjection::parse(d)?;
    }
    Ok(())
}

/// `queue`'s numbers.
pub fn queue_args(a: &crate::cli::QueueArgs) -> Result<()> {
    if let Some(r) = a.requests {
        int("--requests", r, 1, MAX_REQUESTS)?;
    }
    if let Some(c) = a.clients {
        int("--clients", c, 1, MAX_CLIENTS)?;
    }
    for (what, v) in [("--slo-ms", a.slo_ms), ("--co-correct-ms", a.co_correct_ms), ("--interval-ms", a.interval_ms)] {
        if let Some(v) = v {
            positive(what, v, f64::MAX)?;
        }
    }
    if !(a.think_ms.is_finite() && a.think_ms >= 0.0) {
        return Err(out("--think-ms", a.think_ms, "finite, 0 or above"));
    }
    Ok(())
}

/// `bench-overhead`'s numbers.
pub fn bench_args(a: &crate::cli::BenchOverheadArgs) -> Result<()> {
    int("--size", crate::units::parse_bytes(&a.size)?, 4, MAX_MESSAGE_BYTES)?;
    sizes("--sizes", &a.sizes)?;
    int("--iters", a.iters, 1, 10_000_000)?;
    int("--reps", a.reps, 1, 10_000)?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    #[test]
    fn refuses_outside_and_accepts_inside() {
        assert!(int("--x", 0u32, 1, 2).unwrap_err().to_string().starts_with("refused[OUT_OF_RANGE]: --x 0"));
        assert!(int("--x", 2u32, 1, 2).is_ok());
        assert!(positive("--t", f64::NAN, 1.0).is_err());
        assert!(positive("--t", -1.0, 1.0).is_err());
        assert!(sizes("--sizes", "2GiB").is_err());
        assert!(sizes("--sizes", "64KiB").is_ok());
    }
}
