//! `commcanary` binary: parse, dispatch, print the error chain, exit non-zero on failure.
use anyhow::Result;
use clap::Parser;
use commcanary::cli::{Cli, Command};
use std::io::Write;

fn run() -> Result<()> {
    let cli = Cli::parse();
    match cli.command {
        Command::Rank(a) => commcanary::rank::run(a),
        Command::Join(a) => commands::join(a),
        Command::Inspect(a) => {
            println!("{}", commcanary::inspect::inspect(&a.file, a.header_only)?);
            Ok(())
        }
        Command::BenchOverhead(a) => commcanary::bench::run(a),
        Command::Overlap(a) => commands::overlap(a),
        Command::Export(commcanary::cli::ExportCommand::Chrome(a)) => {
            let joined = commcanary::join::join_dir(&a.run_dir)?;
            let trace = commcanary::export::chrome_trace(&joined);
            let bytes = serde_json::to_vec(&trace)?;
            commcanary::fsutil::write_new_atomic(&a.output, &bytes)?;
            eprintln!("wrote {} ({} events)", a.output.display(), trace["traceEvents"].as_array().map_or(0, |v| v.len()));
            Ok(())
        }
        Command::Doctor(a) => {
            let (r, all_ok) = commcanary::doctor::report(&a.nccl_lib);
            if a.json {
                println!("{}", serde_json::to_string_pretty(&r)?);
            } else {
                print!("{}", commcanary::doctor::render(&r));
            }
            if !all_ok {
                anyhow::bail!("an NCCL library named with --nccl-lib did not load and verify (see above)");
            }
            Ok(())
        }
        Command::Schema(a) => {
            print!("{}", commcanary::schema::schema_json(&a.name)?);
            Ok(())
        }
        Command::Summarize(a) => {
            let runs = a.runs.iter().map(|s| commcanary::summary::parse_labelled(s)).collect::<Result<Vec<_>>>()?;
            let s = commcanary::summary::summarize(&runs)?;
            if a.json {
                println!("{}", serde_json::to_string_pretty(&s)?);
            } else {
                print!("{}", commcanary::summary::render(&s));
            }
            Ok(())
        }
    }
}

mod commands {
    use anyhow::{Context, Result};
    use commcanary::cli::JoinArgs;
    use std::io::Write;

    pub fn overlap(a: commcanary::cli::OverlapArgs) -> Result<()> {
        use commcanary::overlap::{overlap, per_phase, IntervalFile};
        let mut out = std::io::stdout().lock();
        if let Some(f) = &a.intervals {
            let bytes = std::fs::read(f).with_context(|| format!("reading {}", f.display()))?;
            let iv: IntervalFile = serde_json::from_slice(&bytes)
                .with_context(|| format!("{}: expected {{\"compute\": [[s,e],...], \"comm\": [[s,e],...]}} in µs", f.display()))?;
            let r = overlap(&iv.compute, &iv.comm).with_context(|| f.display().to_string())?;
            if a.json {
                writeln!(out, "{}", serde_json::to_string_pretty(&r)?)?;
            } else {
                writeln!(out, "compute active {:.3} us, comm active {:.3} us, overlap {:.3} us, wall {:.3} us", r.compute_active_us, r.comm_active_us, r.overlap_us, r.wall_us)?;
                let p = |x: Option<f64>| x.map(|v| format!("{:.1}%", v * 100.0)).unwrap_or_else(|| "undefined".into());
                writeln!(out, "overlap / comm-active {}, / compute-active {}, / wall {}", p(r.overlap_of_comm), p(r.overlap_of_compute), p(r.overlap_of_wall))?;
            }
            return Ok(());
        }
        let dir = a.run_dir.as_ref().expect("clap requires run_dir without --intervals");
        let joined = commcanary::join::join_dir(dir)?;
        let rows = per_phase(&joined.shards)?;
        if a.json {
            writeln!(out, "{}", serde_json::to_string_pretty(&rows)?)?;
        } else {
            writeln!(out, "{:<21} {:>4} {:>13} {:>12} {:>11} {:>10} {:>10} {:>10}  intervals", "phase", "rank", "compute us", "comm us", "overlap us", "ov/comm", "ov/compute", "ov/wall")?;
            let p = |x: Option<f64>| x.map(|v| format!("{:.1}%", v * 100.0)).unwrap_or_else(|| "n/a".into());
            for r in rows {
                let src = match r.source {
                    commcanary::overlap::IntervalSource::CuptiKernels => "CUPTI kernels",
                    commcanary::overlap::IntervalSource::DeviceEvents => "CUDA events",
                    commcanary::overlap::IntervalSource::Host => "host; comm = issue..wait return (upper bound)",
                };
                writeln!(out, "{:<21} {:>4} {:>13.1} {:>12.1} {:>11.1} {:>10} {:>10} {:>10}  {src}", r.phase.name(), r.rank, r.report.compute_active_us, r.report.comm_active_us, r.report.overlap_us, p(r.report.overlap_of_comm), p(r.report.overlap_of_compute), p(r.report.overlap_of_wall))?;
            }
        }
        Ok(())
    }

    pub fn join(a: JoinArgs) -> Result<()> {
        let joined = commcanary::join::join_dir(&a.run_dir)?;
        if let Some(p) = &a.events_out {
            let mut buf = Vec::new();
            for c in &joined.collectives {
                serde_json::to_writer(&mut buf, c)?;
                buf.push(b'\n');
            }
            commcanary::fsutil::write_new_atomic(p, &buf)
                .with_context(|| format!("writing joined trace {}", p.display()))?;
        }
        let summary = commcanary::join::summarize(&joined);
        let mut out = std::io::stdout().lock();
        if a.json {
            writeln!(out, "{}", serde_json::to_string_pretty(&summary)?)?;
        } else {
            write!(out, "{}", commcanary::join::render_summary(&summary))?;
        }
        Ok(())
    }
}

fn main() {
    if let Err(e) = run() {
        // Under mpirun every rank would print the same argument error; print it once.
        if commcanary::rank::is_lead_process() {
            let _ = writeln!(std::io::stderr(), "commcanary: error: {e:#}");
        }
        std::process::exit(1);
    }
}
