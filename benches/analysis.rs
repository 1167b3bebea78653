//! Benchmark (criterion, asserts nothing): the statistics of `campaign analyze`
//! and the report's plots at full campaign size, from synthetic jobs: 8
//! configurations x 5 rounds x all six phases, 1024 events per job in the
//! token phases (256 tokens x 4 ranks) and 1200 in `isolated` (100 iterations
//! x 3 sizes x 4 ranks); 10,000 resamples. Joining the shards is timed by
//! scripts/bench/bench-analysis.sh on real runs. Run: `cargo bench --bench analysis`.
use commcanary::analysis::{analyze, AnalysisInput, ClaimContext, ControlsInput, JobData, KnownBadInput, PhaseInput};
use commcanary::campaign::chain::Verdict;
use commcanary::campaign::spec::{AnalysisPolicy, TiePolicy};
use commcanary::core::workload::Phase;
use commcanary::report::plots;
use criterion::{criterion_group, criterion_main, Criterion};
use rand::{Rng, SeedableRng};

fn input(tie: TiePolicy) -> AnalysisInput {
    let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(1);
    let labels: Vec<String> = (1..=8).map(|i| format!("config-{i:02}")).collect();
    let phases = [Phase::Isolated, Phase::Blocking, Phase::Async, Phase::Replay, Phase::Fill, Phase::Overlap]
        .into_iter()
        .map(|phase| {
            let events = if phase == Phase::Isolated { 1200 } else { 1024 };
            PhaseInput {
                phase,
                labels: labels.clone(),
                jobs: (0..8)
                    .map(|c| {
                        (1..=5)
                            .map(|round| JobData {
                                round,
                                samples_us: (0..events)
                                    .map(|_| (1000.0 + 40.0 * c as f64) * (1.0 + rng.gen_range(-0.05..0.05)))
                                    .collect(),
                            })
                            .collect()
                    })
                    .collect(),
            }
        })
        .collect();
    AnalysisInput {
        phases,
        policy: AnalysisPolicy {
            tie_policy: tie,
            min_effect_pct: 2.0,
            delta_pct: 5.0,
            bootstrap_resamples: 10_000,
            bootstrap_seed: 1,
        },
        canary: Some(("config-02".into(), "config-01".into(), Phase::Blocking)),
        trace_canary: None,
        truth: None,
        controls: ControlsInput {
            aa_pairs: vec![("config-01".into(), "config-03".into())],
            known_bad: vec![KnownBadInput { label: "config-08".into(), graded: None }],
            injected_skew: vec![],
        },
        context: ClaimContext {
            campaign_id: "bench".into(),
            manifest_sha256: "0".repeat(64),
            hardware: "synthetic".into(),
            workload: "synthetic".into(),
            replay_semantics: "synthetic".into(),
            not_represented: vec![],
            trace: None,
        },
    }
}

/// `analyze` and `report::plots::all` on the full-size input, tie policy interval.
fn analysis(c: &mut Criterion) {
    let verdict =
        Verdict { complete: true, manifest_sha256: String::new(), cells_expected: 40, cells_ok: 40, refusals: vec![] };
    let mut g = c.benchmark_group("full_campaign");
    // one analysis takes about a second: criterion's fewest samples
    g.sample_size(10);
    let tie = TiePolicy::Interval;
    let inp = input(tie);
    g.bench_function(format!("statistics_{tie:?}"), |b| {
        b.iter(|| analyze(&inp, verdict.clone(), "bench").expect("valid input"))
    });
    let r = analyze(&inp, verdict.clone(), "bench").expect("valid input");
    g.bench_function(format!("plots_{tie:?}"), |b| b.iter(|| plots::all(&r).expect("plots")));
    g.finish();
}

criterion_group!(benches, analysis);
criterion_main!(benches);
