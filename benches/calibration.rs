//! The long calibration run (not a timing benchmark): seeded simulations of
//! the campaign statistics (`support/calibration.rs`) at 3, 5, 10 and 20
//! rounds, written as Markdown tables into a new directory (`out/` is ignored by git):
//!
//!   CALIBRATION_OUT=out/calibration-DATE cargo bench --bench calibration
//!
//! CALIBRATION_SIMS scales the simulation count (default 20000 per cell for
//! intervals, a tenth of that for P(best), which draws a posterior per
//! simulated campaign). The same seeds give the same tables.
//! CALIBRATION_ONLY=aa-family writes only the table of a campaign's A/A
//! controls judged as one family (per control and per campaign).
//! CALIBRATION_ONLY=regret writes only the coverage of the truth section's regret intervals.
//! Without CALIBRATION_OUT, criterion times one small cell of each table
//! (`cargo bench --bench calibration`).
#[path = "support/calibration.rs"]
mod calibration;
use calibration::{
    aa_family_false, coverage, family_false_different, null_p_best, regret_coverage, verdict_rates, Noise,
    SimulationSetup, REGRET_SCENARIOS,
};
use commcanary::analysis::inference;
use commcanary::core::{fsutil, identity};
use criterion::{criterion_group, Criterion};
use std::fmt::Write;

const ROUNDS: [usize; 4] = [3, 5, 10, 20];
/// Job noise (log-scale standard deviation) of the coverage, A/A and P(best) tables.
const SCALE: f64 = 0.03;

fn main() -> anyhow::Result<()> {
    match std::env::var_os("CALIBRATION_OUT") {
        Some(out) => tables(out.into()),
        None => {
            cells();
            Criterion::default().configure_from_args().final_summary();
            Ok(())
        }
    }
}

/// One cell of each table, at 200 simulated campaigns (20 for P(best)), 5 rounds.
fn cell_timings(c: &mut Criterion) {
    let setup = SimulationSetup {
        noise: Noise::Gaussian,
        rounds: 5,
        k: 4,
        min_effect_pct: 0.0,
        scale: SCALE,
        sims: 200,
        seed: 1,
    };
    let mut g = c.benchmark_group("calibration_cell");
    g.sample_size(10);
    g.bench_function("coverage", |b| {
        b.iter(|| coverage(setup.noise, setup.rounds, 3.0, SCALE, setup.sims, 1).expect("coverage"))
    });
    g.bench_function("verdict_rates", |b| {
        b.iter(|| verdict_rates(setup.noise, setup.rounds, 0.0, 2.0, SCALE, setup.sims, 1).expect("rates"))
    });
    g.bench_function("aa_family", |b| b.iter(|| aa_family_false(&setup, true).expect("aa family")));
    g.bench_function("family_false_different", |b| b.iter(|| family_false_different(&setup, true).expect("pairs")));
    let regret = &REGRET_SCENARIOS[1];
    g.bench_function("regret_coverage", |b| {
        b.iter(|| regret_coverage(regret, setup.noise, setup.rounds, SCALE, setup.sims, 1).expect("regret"))
    });
    g.bench_function("null_p_best", |b| {
        b.iter(|| null_p_best(&SimulationSetup { sims: 20, ..setup }, 1000).expect("p best"))
    });
    g.finish();
}

criterion_group!(cells, cell_timings);

/// The tables, written into `out` (a new directory).
fn tables(out: std::path::PathBuf) -> anyhow::Result<()> {
    let sims: u32 = std::env::var("CALIBRATION_SIMS").ok().map(|s| s.parse()).transpose()?.unwrap_or(20_000);
    std::fs::create_dir_all(&out)?;
    let t0 = std::time::Instant::now();
    let mut md = String::new();
    let hdr = |md: &mut String, first: &str| {
        let _ = writeln!(md, "| {first} | {} |", ROUNDS.map(|r| format!("{r} rounds")).join(" | "));
        let _ = writeln!(md, "|---|{}", "---:|".repeat(ROUNDS.len()));
    };
    let _ = writeln!(
        md,
        "# Calibration tables\n\nProduced by `{}` with CALIBRATION_SIMS={sims}; job noise log-sd {SCALE} unless \
            stated.\n",
        identity::VERSION_LONG
    );

    if std::env::var("CALIBRATION_ONLY").ok().as_deref() == Some("regret") {
        regret_tables(&mut md, sims, &hdr)?;
        let _ = writeln!(md, "Wall time: {:.0} s.", t0.elapsed().as_secs_f64());
        fsutil::write_new_atomic(&out.join("calibration.md"), md.as_bytes())?;
        print!("{md}");
        return Ok(());
    }
    if std::env::var("CALIBRATION_ONLY").ok().as_deref() == Some("aa-family") {
        aa_family_tables(&mut md, sims, &hdr)?;
        let _ = writeln!(md, "Wall time: {:.0} s.", t0.elapsed().as_secs_f64());
        fsutil::write_new_atomic(&out.join("calibration.md"), md.as_bytes())?;
        print!("{md}");
        return Ok(());
    }

    let _ = writeln!(
        md,
        "## Coverage of the nominal 95% interval (true difference +3%, {sims} simulated campaigns per cell)\n"
    );
    hdr(&mut md, "job noise");
    let mut min_cov = 1.0f64;
    for (i, noise) in Noise::ALL.into_iter().enumerate() {
        let row: Vec<f64> = ROUNDS
            .iter()
            .map(|&r| coverage(noise, r, 3.0, SCALE, sims, 100 + i as u64))
            .collect::<anyhow::Result<_>>()?;
        min_cov = row.iter().copied().fold(min_cov, f64::min);
        let _ = writeln!(
            md,
            "| {} | {} |",
            noise.name(),
            row.iter().map(|c| format!("{:.1}%", c * 100.0)).collect::<Vec<_>>().join(" | ")
        );
    }
    let mc = (0.95f64 * 0.05 / sims as f64).sqrt() * 100.0;
    let _ = writeln!(
        md,
        "\nLowest cell: {:.1}% (Monte Carlo standard error about {mc:.2} points at 95%).\n",
        min_cov * 100.0
    );

    for m in [0.0, 2.0] {
        let _ = writeln!(
            md,
            "## A/A verdicts: share `pass` / `fail` among {sims} simulated campaigns of one configuration \
                under two names, minimum effect {m}%\n"
        );
        hdr(&mut md, "job noise");
        for (i, noise) in Noise::ALL.into_iter().enumerate() {
            let row: Vec<String> = ROUNDS
                .iter()
                .map(|&r| {
                    verdict_rates(noise, r, 0.0, m, SCALE, sims, 200 + i as u64)
                        .map(|v| format!("{:.2}% / {:.2}%", v[0] * 100.0, v[1] * 100.0))
                })
                .collect::<anyhow::Result<_>>()?;
            let _ = writeln!(md, "| {} | {} |", noise.name(), row.join(" | "));
        }
        let _ = writeln!(md);
    }
    aa_family_tables(&mut md, sims, &hdr)?;

    for k in [4usize, 7] {
        let _ = writeln!(
            md,
            "## Pair tables of {k} identical configurations: share of {sims} simulated campaigns with at least one \
                decided pair (minimum effect 0), \
             simultaneous intervals (each at {:.3}%) / unadjusted 95% intervals\n",
            inference::simultaneous_coverage(inference::COVERAGE, k * (k - 1) / 2) * 100.0
        );
        hdr(&mut md, "job noise");
        for (i, noise) in Noise::ALL.into_iter().enumerate() {
            let row: Vec<String> = ROUNDS
                .iter()
                .map(|&r| -> anyhow::Result<String> {
                    let setup = SimulationSetup {
                        noise,
                        rounds: r,
                        k,
                        min_effect_pct: 0.0,
                        scale: SCALE,
                        sims,
                        seed: 600 + i as u64,
                    };
                    let adj = family_false_different(&setup, true)?;
                    let raw = family_false_different(&setup, false)?;
                    Ok(format!("{:.2}% / {:.1}%", adj * 100.0, raw * 100.0))
                })
                .collect::<anyhow::Result<_>>()?;
            let _ = writeln!(md, "| {} | {} |", noise.name(), row.join(" | "));
        }
        let _ = writeln!(md);
    }

    let psims = (sims / 10).max(50);
    let draws = 1000;
    for (m, k) in [2.0, 0.5, 0.0].into_iter().flat_map(|m| [2usize, 4, 6].map(|k| (m, k))) {
        let _ = writeln!(
            md,
            "## Null P(best): {k} identical configurations, minimum effect {m}%, {psims} simulated campaigns per cell, \
                {draws} posterior draws each\n\nEach cell: mean P(best) of the lowest and highest position (ideal \
                    1/{k} = {:.3}); share of campaigns whose top P(best) ≥ 0.9; the largest top P(best) seen.\n",
            1.0 / k as f64
        );
        hdr(&mut md, "job noise");
        for (i, noise) in Noise::ALL.into_iter().enumerate() {
            let row: Vec<String> = ROUNDS
                .iter()
                .map(|&r| {
                    null_p_best(
                        &SimulationSetup {
                            noise,
                            rounds: r,
                            k,
                            min_effect_pct: m,
                            scale: SCALE,
                            sims: psims,
                            seed: 300 + i as u64,
                        },
                        draws,
                    )
                    .map(|(mean, high, top)| {
                        let lo = mean.iter().copied().fold(1.0, f64::min);
                        let hi = mean.iter().copied().fold(0.0, f64::max);
                        format!("{lo:.3}–{hi:.3}; {:.1}%; {top:.2}", high * 100.0)
                    })
                })
                .collect::<anyhow::Result<_>>()?;
            let _ = writeln!(md, "| {} | {} |", noise.name(), row.join(" | "));
        }
        let _ = writeln!(md);
    }

    let pscale = 0.02;
    let pm = 0.5;
    let _ = writeln!(
        md,
        "## Power: share of campaigns that decide a true slowdown (`fail`), Gaussian job noise log-sd {pscale} \
            (per-round log-ratio sd {:.4}), minimum effect {pm}%, {sims} campaigns per cell\n",
        pscale * 2f64.sqrt()
    );
    let _ = writeln!(
        md,
        "| true slowdown | {} | rounds suggested for 80% | simulated power there |",
        ROUNDS.map(|r| format!("{r} rounds")).join(" | ")
    );
    let _ = writeln!(md, "|---|{}---:|---:|", "---:|".repeat(ROUNDS.len()));
    for (i, e) in [1.0, 2.0, 5.0, 10.0].into_iter().enumerate() {
        let row: Vec<String> = ROUNDS
            .iter()
            .map(|&r| {
                verdict_rates(Noise::Gaussian, r, e, pm, pscale, sims, 400 + i as u64)
                    .map(|v| format!("{:.1}%", v[1] * 100.0))
            })
            .collect::<anyhow::Result<_>>()?;
        let n = inference::rounds_to_decide(pscale * 2f64.sqrt(), e, pm, inference::COVERAGE, inference::POWER);
        let at = match n {
            Some(n) => format!(
                "{:.1}%",
                verdict_rates(Noise::Gaussian, n as usize, e, pm, pscale, sims, 500 + i as u64)?[1] * 100.0
            ),
            None => "-".into(),
        };
        let _ = writeln!(
            md,
            "| {e}% | {} | {} | {at} |",
            row.join(" | "),
            n.map(|n| n.to_string()).unwrap_or_else(|| "-".into())
        );
    }
    let _ = writeln!(md, "\nWall time: {:.0} s.", t0.elapsed().as_secs_f64());
    fsutil::write_new_atomic(&out.join("calibration.md"), md.as_bytes())?;
    print!("{md}");
    Ok(())
}

/// Coverage of the regret interval of a pick (the truth section's), per
/// scenario, noise model and scale, at 3, 5, 10 and 20 rounds.
fn regret_tables(md: &mut String, sims: u32, hdr: &dyn Fn(&mut String, &str)) -> anyhow::Result<()> {
    use crate::calibration::{regret_coverage, REGRET_SCENARIOS};
    let mut min_cov = 1.0f64;
    for (si, sc) in REGRET_SCENARIOS.iter().enumerate() {
        let _ = writeln!(
            md,
            "## Regret interval coverage: {} (true means {:?}, pick {}), {sims} simulated campaigns per cell\n",
            sc.name, sc.means, sc.pick
        );
        hdr(md, "job noise, log sd");
        for (i, noise) in Noise::ALL.into_iter().enumerate() {
            for (j, scale) in [0.01, 0.03, 0.1].into_iter().enumerate() {
                let seed = 7_000 + (si * 100 + i * 10 + j) as u64;
                let row: Vec<f64> = ROUNDS
                    .iter()
                    .map(|&r| regret_coverage(sc, noise, r, scale, sims, seed + r as u64))
                    .collect::<anyhow::Result<_>>()?;
                min_cov = row.iter().copied().fold(min_cov, f64::min);
                let _ = writeln!(
                    md,
                    "| {} {scale} | {} |",
                    noise.name(),
                    row.iter().map(|c| format!("{:.1}%", c * 100.0)).collect::<Vec<_>>().join(" | ")
                );
            }
        }
        let _ = writeln!(md);
    }
    let _ = writeln!(
        md,
        "Lowest cell over every scenario: {:.1}% (nominal 95%; the interval is read off the report's simultaneous pair \
            intervals).\n",
        min_cov * 100.0
    );
    Ok(())
}

/// A campaign's A/A controls as one family: per-control and per-campaign false
/// A/A rates with the family's level, and the per-campaign rate at 95% each.
fn aa_family_tables(md: &mut String, sims: u32, hdr: &dyn Fn(&mut String, &str)) -> anyhow::Result<()> {
    for m in [0.0, 2.0] {
        for k in [2usize, 6] {
            let _ = writeln!(
                md,
                "## A campaign's A/A controls as one family: {k} controls (one A/A pair in {k} phases of two \
                    configurations), minimum effect {m}%, {sims} simulated campaigns per cell\n\n\
                 Each cell: share of controls that misbehave, each judged at {:.3}% (1 - 0.05/{k}) / share of \
                     campaigns with at least one misbehaved \
                 control, so judged / the same share with every control at 95% (report formats before 7, in a phase of \
                     two configurations). \
                 Phases independent: the case in which the bound is nearly tight.\n",
                commcanary::analysis::aa_level(k, inference::COVERAGE) * 100.0
            );
            hdr(md, "job noise");
            for (i, noise) in Noise::ALL.into_iter().enumerate() {
                let row: Vec<String> = ROUNDS
                    .iter()
                    .map(|&r| -> anyhow::Result<String> {
                        let seed = 700 + 10 * k as u64 + i as u64;
                        let setup =
                            SimulationSetup { noise, rounds: r, k, min_effect_pct: m, scale: SCALE, sims, seed };
                        let (each, fw) = aa_family_false(&setup, true)?;
                        let (_, raw) = aa_family_false(&setup, false)?;
                        Ok(format!("{:.2}% / {:.2}% / {:.1}%", each * 100.0, fw * 100.0, raw * 100.0))
                    })
                    .collect::<anyhow::Result<_>>()?;
                let _ = writeln!(md, "| {} | {} |", noise.name(), row.join(" | "));
            }
            let _ = writeln!(md);
        }
    }
    Ok(())
}
