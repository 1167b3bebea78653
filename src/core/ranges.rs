//! Documented ranges of every number a user gives, checked before any work
//! starts.
//!
//! Consumes parsed command-line arguments; produces nothing, or a
//! `refused[OUT_OF_RANGE]` error naming the option, the value and its range.
//! [`RANGES`] is the table (docs/REFERENCE.md's "Ranges of numbers" prints
//! it); `tests/ranges.rs` keeps table, options and docs in step.
//!
//! Where each check runs: docs/METHODS.md, "Range checks".
use crate::core::refusal::{refuse, Code};
use crate::core::{limits, units};
use anyhow::Result;

/// One documented range.
#[derive(Clone, Copy, Debug)]
pub struct Range {
    /// Command path as typed (`rank`, `campaign exec`).
    pub command: &'static str,
    /// The option's long name with its dashes (`--tokens`).
    pub option: &'static str,
    /// The range, in words.
    pub range: &'static str,
}

const fn r(command: &'static str, option: &'static str, range: &'static str) -> Range {
    Range { command, option, range }
}

/// Every option that takes a number, with its range.
pub const RANGES: &[Range] = &[
    r("rank", "--tokens", "1 to 1 000 000"),
    r("rank", "--warmup-tokens", "0 to 100 000"),
    r(
        "rank",
        "--layers",
        "1 to 10 000; (--tokens + --warmup-tokens) x layers at most 10 000 000 collectives per phase",
    ),
    r("rank", "--model-dims", "H 1 to 65 536, F 1 to 262 144, LAYERS 1 to 10 000, KV_DIM 1 to H"),
    r(
        "rank",
        "--batch",
        "1 to 65 536; with --prefill-tokens at most 1 048 576 tokens in flight; the all-reduce (tokens x H elements) \
            at most 1 GiB; each per-rank GEMM matrix at most 2^28 elements",
    ),
    r("rank", "--prefill-tokens", "1 to 1 048 576 (and the limits of --batch)"),
    r("rank", "--sizes", "1 to 64 sizes, each a whole number of f32 from 4 B to 1 GiB"),
    r("rank", "--gemm", "each of M, N, K 1 to 16 384"),
    r("rank", "--min-bytes", "-b: a whole number of f32 from 4 B to 1 GiB"),
    r("rank", "--max-bytes", "-e: a whole number of f32 from 4 B to 1 GiB, at least --min-bytes"),
    r("rank", "--step-factor", "-f: 2 to 1 024"),
    r("rank", "--iters", "-n: 1 to 1 000 000"),
    r("rank", "--warmup-iters", "-w: 0 to 100 000"),
    r("rank", "--check", "0 to 1 000 000"),
    r("rank", "--membound-bytes", "4 B to 1 GiB"),
    r("rank", "--inject-delay", "rank 0 to 1 048 575 (and below the world size), every at least 1, us 0 to 10 000 000"),
    r("rank", "--inject-repeat", "1 to 64 (cpu backend)"),
    r(
        "rank",
        "--inject-clock",
        "rank 0 to 1 048 575 (and below the world size), offset_us and drift_ppm finite, below 1e9 and 1e5 in \
            magnitude",
    ),
    r("rank", "--clock-samples", "1 to 100 000"),
    r("rank", "--collective-timeout-s", "finite, above 0, at most 86 400 (one day)"),
    r("rank", "--gpu", "0 to 1 023 (and below the device count)"),
    r("rank", "--fault", "test only: rank 0 to 1 048 575; seq any"),
    r("validate", "--rounds", "2 to 1 000"),
    r("validate", "--min-bytes", "a whole number of f32 from 4 B to 1 GiB"),
    r("validate", "--max-bytes", "a whole number of f32 from 4 B to 1 GiB, at least --min-bytes"),
    r("validate", "--step-factor", "2 to 1 024"),
    r("validate", "--iters", "1 to 1 000 000"),
    r("validate", "--warmup-iters", "0 to 100 000"),
    r("validate", "--batch", "1 to 65 536"),
    r("validate", "--tokens", "1 to 1 000 000"),
    r("validate", "--warmup-tokens", "0 to 100 000"),
    r("validate", "--seed", "any 64-bit unsigned integer"),
    r("validate", "--collective-timeout-s", "finite, above 0, at most 86 400 (one day)"),
    r(
        "validate",
        "--inject-delay",
        "rank 0 to 1 048 575 (and below the world size), every at least 1, us 0 to 10 000 000",
    ),
    r("replay-trace", "--corrupt-rank", "test only: 0 to 1 048 575 (and below the world size)"),
    r("campaign run", "--retries", "0 to 100"),
    r("campaign run", "--cell-timeout-s", "1 to 604 800 (one week)"),
    r("campaign exec", "--retries", "0 to 100"),
    r("campaign exec", "--cell", "1 to 1 000 000 (and at most the schedule's cells)"),
    r("campaign exec", "--cell-timeout-s", "1 to 604 800 (one week)"),
    r("campaign confirm", "--rounds", "2 to 10 000"),
    r("campaign power", "--min-effect-pct", "finite, above 0, at most 100"),
    r("queue", "--requests", "1 to 10 000 000"),
    r("queue", "--clients", "1 to 1 000 000"),
    r("queue", "--interval-ms", "finite, above 0"),
    r("queue", "--slo-ms", "finite, above 0"),
    r("queue", "--co-correct-ms", "finite, above 0 (and at most 10 000 000 requests once corrected)"),
    r("queue", "--think-ms", "finite, 0 or above"),
    r("queue", "--seed", "any 64-bit unsigned integer"),
    r("capacity", "--demand", "finite, above 0, at most 1e15 requests/s"),
    r(
        "capacity",
        "--throughput-per-gpu",
        "finite, above 0, at most 1e15 requests/s; once or twice; demand / throughput at most 1e12 GPUs",
    ),
    r("capacity", "--gpu-hour-cost", "finite, 0 or above, at most 1e9"),
    r("bench-overhead", "--size", "4 B to 1 GiB"),
    r("compare", "--size", "1 B to 1 TiB"),
    r("bench-overhead", "--sizes", "1 to 64 sizes, each a whole number of f32 from 4 B to 1 GiB"),
    r("bench-overhead", "--iters", "1 to 10 000 000"),
    r("bench-overhead", "--reps", "1 to 10 000"),
    r("canary compile", "--iterations", "1 to the main loop's count in the source"),
    r("canary compile", "--significant-digits", "1 to 5"),
    r("canary compile", "--seed", "any 64-bit unsigned integer"),
    r("canary verify", "--rounds", "2 to 10 000"),
    r("canary verify", "--passes", "1 to 10 000"),
    r("canary verify", "--head-sample", "1 to 10 000 000"),
    r("canary reduce", "--budget", "1 to 1 000 000"),
    r("canary redact", "--quantize-ns", "0 to 60 000 000 000 (0: no quantization)"),
    r("export param", "--quantize-ns", "0 to 60 000 000 000 (0: no quantization; with --redact)"),
    r("export et", "--quantize-ns", "0 to 60 000 000 000 (0: no quantization; with --redact)"),
    r("synth", "--events", "1 to 10 000 000"),
    r("synth", "--seed", "any 64-bit unsigned integer"),
    r("synth", "--ranks", "1 to 4 096"),
    r("synth-shards", "--ranks", "1 to 1 048 576"),
    r("synth-shards", "--collectives", "1 to 4 294 967 295"),
    r("synth-shards", "--threads", "1 to 1 024"),
    r(
        "synth-shards",
        "--format-version",
        "6 to 8 (6 or 7: for a reader that predates format 7 or 8; the mark is in the header either way)",
    ),
    r("synth-shards", "--seed", "any 64-bit unsigned integer"),
    r("join", "--threads", "1 to 1 024"),
];

/// Largest message: 1 GiB.
pub(crate) const MAX_MESSAGE_BYTES: u64 = 1 << 30;
/// Largest GEMM dimension.
pub(crate) const MAX_GEMM_DIM: u32 = 16_384;
/// Most elements of one per-rank matrix of a model's GEMM (as `--gemm 16384`).
pub(crate) const MAX_MATRIX_ELEMS: u64 = 1 << 28;
/// Most tokens in flight (`--batch` x `--prefill-tokens`).
pub(crate) const MAX_TOKENS_IN_FLIGHT: u64 = 1 << 20;
/// Most collectives one workload phase may record per rank.
pub(crate) const MAX_PHASE_COLLECTIVES: u64 = 10_000_000;
/// Most simulated requests in `queue`.
pub(crate) const MAX_REQUESTS: usize = 10_000_000;
/// Most closed-loop clients in `queue`.
pub(crate) const MAX_CLIENTS: u32 = 1_000_000;
/// Most GPUs `capacity` will count.
pub(crate) const MAX_GPUS: f64 = 1e12;
/// Most runs of one all-reduce under `--inject-repeat`.
pub(crate) const MAX_INJECT_REPEAT: u32 = 64;
/// Largest rank a test-fixture or injection option may name.
pub(crate) const MAX_RANK: u32 = limits::MAX_WORLD_SIZE - 1;

/// A `refused[OUT_OF_RANGE]` error naming the option, its value and its range.
pub fn out(what: &str, v: impl std::fmt::Display, range: &str) -> anyhow::Error {
    refuse(Code::OutOfRange, format!("{what} {v} is outside its range ({range})"))
}

/// Check an integer option against `lo..=hi`.
pub(crate) fn int<T: PartialOrd + std::fmt::Display + Copy>(what: &str, v: T, lo: T, hi: T) -> Result<()> {
    if v < lo || v > hi {
        return Err(out(what, v, &format!("{lo} to {hi}")));
    }
    Ok(())
}

/// Check a real option: finite, above 0, at most `hi`.
pub(crate) fn positive(what: &str, v: f64, hi: f64) -> Result<()> {
    if !(v.is_finite() && v > 0.0 && v <= hi) {
        return Err(out(what, v, &format!("finite, above 0, at most {hi}")));
    }
    Ok(())
}

/// Check a real option: finite, 0 or above, at most `hi`.
pub(crate) fn non_negative(what: &str, v: f64, hi: f64) -> Result<()> {
    if !(v.is_finite() && v >= 0.0 && v <= hi) {
        return Err(out(what, v, &format!("finite, 0 or above, at most {hi}")));
    }
    Ok(())
}

/// Check one message size: a whole number of f32 from 4 B to 1 GiB.
pub fn size(what: &str, b: u64) -> Result<()> {
    if b % 4 != 0 {
        return Err(out(what, b, "a whole number of f32, 4 bytes each"));
    }
    int(what, b, 4, MAX_MESSAGE_BYTES)
}

/// Check a message size list.
pub fn sizes(what: &str, s: &str) -> Result<Vec<u64>> {
    let v = units::parse_size_list(s)?;
    int(&format!("{what} (count)"), v.len(), 1, 64)?;
    for &b in &v {
        size(what, b)?;
    }
    Ok(v)
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
        assert!(non_negative("--t", 0.0, 1.0).is_ok());
        assert!(non_negative("--t", f64::INFINITY, f64::MAX).is_err());
        assert!(sizes("--sizes", "2GiB").is_err());
        assert!(sizes("--sizes", "64KiB").is_ok());
    }

    #[test]
    fn one_row_per_option() {
        let mut seen = std::collections::BTreeSet::new();
        for r in RANGES {
            assert!(seen.insert((r.command, r.option)), "{} {} twice", r.command, r.option);
            assert!(r.option.starts_with("--") && !r.range.is_empty());
        }
    }
}
