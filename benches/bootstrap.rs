//! Benchmark (prints, asserts nothing): 10,000 resamples of 8 configurations
//! x 5 rounds, paired by round, and hierarchical with 1024 events per job
//! (256 tokens x 4 ranks). Run: `cargo bench --bench bootstrap`.
use commcanary::analysis::bootstrap::{hierarchical, paired_by_round, BootstrapResult, CanaryAsk};
use std::time::Instant;

/// Run `f` with seeds 0..7 and print median, min and max in ms.
fn time(what: &str, f: impl Fn(u64) -> BootstrapResult) {
    let mut times: Vec<f64> = (0..7)
        .map(|seed| {
            let t0 = Instant::now();
            std::hint::black_box(f(seed));
            t0.elapsed().as_secs_f64() * 1e3
        })
        .collect();
    times.sort_by(|a, b| a.total_cmp(b));
    println!(
        "bootstrap {what}: median {:.2} ms, min {:.2} ms, max {:.2} ms over {} runs",
        times[times.len() / 2],
        times[0],
        times[times.len() - 1],
        times.len()
    );
}

fn main() {
    let table: Vec<Vec<f64>> = (0..5).map(|r| (0..8).map(|c| 100.0 + 10.0 * c as f64 + r as f64).collect()).collect();
    let ask = Some(CanaryAsk { candidate: 1, baseline: 0, min_effect_pct: 2.0, delta_pct: 5.0, coverage: 0.95 });
    time("paired-by-round, 10000 resamples, 8 configs x 5 rounds", |seed| paired_by_round(&table, 10_000, seed, ask).expect("valid table"));
    let jobs: Vec<Vec<Vec<f64>>> =
        (0..8).map(|c| (0..5).map(|r| (0..1024).map(|e| 100.0 + 10.0 * c as f64 + r as f64 + (e % 17) as f64).collect()).collect()).collect();
    time("hierarchical (jobs, then 1024 events per job), 10000 resamples, 8 configs x 5 jobs", |seed| {
        hierarchical(&jobs, 10_000, seed, ask).expect("valid jobs")
    });
}
