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
