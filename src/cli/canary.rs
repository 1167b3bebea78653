//! `canary compile|verify|reduce|redact|inspect`, `synth` and `import run`:
//! arguments and the command functions (the stages are in [`crate::canary`]).
use crate::canary::artifact;
use crate::canary::redaction::RedactRun;
use crate::canary::{compile, redaction, reduction, synth, verify};
use crate::core::fsutil;
use crate::core::workload::Phase;
use crate::evidence::commtrace::{self, from_run};
use anyhow::Result;
use clap::{Args, Subcommand};
use std::io::Write;
use std::path::PathBuf;

/// `commcanary canary ...`.
#[derive(Subcommand, Debug)]
pub enum CanaryCommand {
    /// Compile a communication trace into a canary: folded loops, bounded histograms, fewer iterations
    Compile(CompileArgs),
    /// Replay a trace and its canary (and baselines) as one campaign; print the assurance state and the decision cost
    Verify(VerifyArgs),
    /// Delta debugging on the ranking decision only (decision-preserving, not source-verified)
    Reduce(ReduceArgs),
    /// Write a trace without host names, user names, job ids or absolute times, with an audit log
    Redact(RedactArgs),
    /// Print a canary artifact's summary (after checking its digest)
    Inspect(InspectCanaryArgs),
}

/// `canary compile`.
#[derive(Args, Debug)]
pub struct CompileArgs {
    /// Communication trace (`commcanary import` or `synth`).
    pub trace: PathBuf,
    /// Canary artifact to write (never overwritten).
    #[arg(short = 'o', long = "out", alias = "output")]
    pub out: PathBuf,
    /// Keep every recorded value and the source's full count (a lossless fold, no cheaper to replay).
    #[arg(long)]
    pub lossless: bool,
    /// Iterations of the main loop to replay (default: what the declared median statistic needs).
    #[arg(long)]
    pub iterations: Option<u64>,
    /// Significant digits of the histograms (error budget 10^-digits relative).
    #[arg(long, default_value_t = 2)]
    pub significant_digits: u8,
    /// Seed of the stratified expansion.
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
}

/// `canary verify`.
#[derive(Args, Debug)]
pub struct VerifyArgs {
    /// The stage's own options.
    #[command(flatten)]
    pub opts: verify::VerifyOptions,
    /// Print the report as JSON.
    #[arg(long)]
    pub json: bool,
    /// Print every check, control and size (default: one line per candidate; the JSON is always whole).
    #[arg(short = 'v', long)]
    pub verbose: bool,
}

/// `canary reduce`.
#[derive(Args, Debug)]
pub struct ReduceArgs {
    /// The source trace.
    pub trace: PathBuf,
    /// Reduced artifact to write.
    #[arg(short = 'o', long = "out", alias = "output")]
    pub out: PathBuf,
    /// Oracle calls allowed.
    #[arg(long, default_value_t = 200)]
    pub budget: u32,
    /// A `canary verify` directory of this trace: its source replays are the oracle's measurements.
    #[arg(long = "from")]
    pub from: PathBuf,
}

/// `canary redact`.
#[derive(Args, Debug)]
pub struct RedactArgs {
    /// The trace to redact.
    pub trace: PathBuf,
    /// Redacted trace to write; the audit log is written beside it as OUT.audit.json.
    #[arg(short = 'o', long = "out", alias = "output")]
    pub out: PathBuf,
    /// Quantize every time and duration to this many ns.
    #[arg(long, default_value_t = 0)]
    pub quantize_ns: u64,
    /// Replace kernel and operator names by their kind.
    #[arg(long)]
    pub drop_names: bool,
    /// Re-verify the ranking decision on the redacted trace under this campaign spec (runs a campaign).
    #[arg(long)]
    pub configs: Option<PathBuf>,
}

/// `canary inspect`.
#[derive(Args, Debug)]
pub struct InspectCanaryArgs {
    /// A canary artifact.
    pub artifact: PathBuf,
}

/// `synth`.
#[derive(Args, Debug)]
pub struct SynthArgs {
    /// Collectives per rank.
    #[arg(long)]
    pub events: usize,
    /// Seed.
    #[arg(long)]
    pub seed: u64,
    /// Ranks.
    #[arg(long, default_value_t = 4)]
    pub ranks: u32,
    /// Communication trace to write (never overwritten).
    #[arg(short = 'o', long = "out", alias = "output")]
    pub out: PathBuf,
}

/// `import run`.
#[derive(Args, Debug)]
pub struct ImportRunArgs {
    /// A run directory (`commcanary rank --out`), verified with join first.
    pub run_dir: PathBuf,
    /// The phase whose collectives become the trace.
    // parsed by `FromStr`, not `ValueEnum`: help lists no values and an unknown phase names the known ones
    #[arg(
        long,
        default_value = "blocking",
        value_parser = <crate::core::workload::Phase as std::str::FromStr>::from_str
    )]
    pub phase: Phase,
    /// Communication trace to write (never overwritten).
    #[arg(short = 'o', long = "out", alias = "output")]
    pub out: PathBuf,
}

/// The numbers of a `canary` command, before it does anything (ranges: [`crate::core::ranges`]).
pub(crate) fn check_ranges(c: &CanaryCommand) -> Result<()> {
    use crate::core::ranges::int;
    match c {
        CanaryCommand::Compile(a) => {
            if let Some(k) = a.iterations {
                int("--iterations", k, 1, u64::MAX)?;
            }
            int("--significant-digits", a.significant_digits, 1, 5)
        }
        CanaryCommand::Verify(a) => {
            int("--passes", a.opts.passes, 1, 10_000)?;
            if let Some(r) = a.opts.rounds {
                int("--rounds", r, 2, 10_000)?;
            }
            if let Some(n) = a.opts.head_sample {
                int("--head-sample", n, 1, 10_000_000)?;
            }
            Ok(())
        }
        CanaryCommand::Reduce(a) => int("--budget", a.budget, 1, 1_000_000),
        CanaryCommand::Redact(a) => int("--quantize-ns", a.quantize_ns, 0, 60_000_000_000),
        CanaryCommand::Inspect(_) => Ok(()),
    }
}

fn summary(c: &artifact::Canary) -> Result<String> {
    // every size and ratio from the body itself; the source's count from its binding (checked against the trace where
    // one is read)
    let shape = artifact::check_consistency(c)?;
    let src = c.source.collectives_per_rank.iter().sum::<u64>() as f64;
    Ok(format!(
        "{} ({}): {} slots x {} ranks = {} events stored (source/artifact {:.1}x); replays {} of the main loop's {} \
            iterations: {} collectives per pass (source/canary {:.1}x); {} approximations; digest {}",
        c.label,
        c.method.name(),
        c.slots.len(),
        c.source.world_size,
        shape.artifact_events(),
        src / shape.artifact_events().max(1) as f64,
        c.replay.iterations,
        c.replay.source_iterations,
        shape.replayed_events(),
        src / shape.replayed_events().max(1) as f64,
        c.approximations.len(),
        c.digest
    ))
}

fn bytes_line(src: u64, art: u64) -> String {
    let r = src as f64 / art.max(1) as f64;
    let larger = if art > src { "; the artifact is LARGER than its source" } else { "" };
    format!("bytes: source {src}, artifact {art} (source/artifact {r:.2}x{larger})")
}

/// `canary ...`.
pub fn canary(c: CanaryCommand, out: &mut dyn Write) -> Result<std::process::ExitCode> {
    match c {
        CanaryCommand::Compile(a) => {
            let opts = compile::CompileOptions {
                lossless: a.lossless,
                iterations: a.iterations,
                significant_digits: a.significant_digits,
                seed: a.seed,
                source_path: a.trace.display().to_string(),
            };
            let compile::Compiled { canary: c, bytes: (src, art), took } = compile::run(&a.trace, &a.out, &opts)?;
            writeln!(out, "{}", summary(&c)?)?;
            writeln!(out, "{}", bytes_line(src, art))?;
            writeln!(out, "iterations: {}", c.replay.rule)?;
            for ap in &c.approximations {
                writeln!(out, "approximation: {}: {}", ap.what, ap.detail)?;
            }
            if let Some(l) = &c.left_out_p2p {
                writeln!(out, "{}", l.line())?;
            }
            eprintln!("wrote {} in {:.3} s", a.out.display(), took.as_secs_f64());
        }
        CanaryCommand::Inspect(a) => {
            let (c, _) = artifact::read(&a.artifact)?;
            writeln!(out, "{}", summary(&c)?)?;
            writeln!(
                out,
                "source: {} ({}; SHA-256 {}, canonical {})",
                c.source.path, c.source.origin, c.source.file_sha256, c.source.canonical_sha256
            )?;
            if c.is_reduced() {
                writeln!(out, "label: {}", artifact::REDUCED_LABEL)?;
            }
            if let Some(l) = &c.left_out_p2p {
                writeln!(out, "{}", l.line())?;
            }
        }
        CanaryCommand::Verify(a) => {
            let o = a.opts;
            let mut log = std::io::stderr();
            let r = verify::verify(&o, &mut log)?;
            super::json_or(out, a.json, &r, |r| if a.verbose { verify::render(r) } else { verify::render_short(r) })?;
            eprintln!("wrote {}", o.out.join("canary-verify.json").display());
        }
        CanaryCommand::Reduce(a) => {
            let (r, n) = reduction::run(&a.trace, &a.from, &a.out, a.budget)?;
            writeln!(
                out,
                "reduce: {} of {} events kept in {} oracle calls (budget {}{}); passes its oracle: {}",
                r.kept.len(),
                n,
                r.oracle_calls,
                a.budget,
                if r.budget_exhausted { ", RAN OUT" } else { "" },
                r.passes_oracle
            )?;
            writeln!(
                out,
                "decision preserved (measured per-identity latencies of {}): {}",
                a.from.display(),
                r.decision
            )?;
            writeln!(out, "label: {}", artifact::REDUCED_LABEL)?;
            eprintln!("wrote {}", a.out.display());
        }
        CanaryCommand::Redact(a) => {
            let o = RedactRun {
                trace: a.trace,
                out: a.out,
                quantize_ns: a.quantize_ns,
                drop_names: a.drop_names,
                configs: a.configs,
            };
            redaction::run(&o, out)?;
        }
    }
    Ok(std::process::ExitCode::SUCCESS)
}

/// `synth`.
pub(crate) fn synth_cmd(a: SynthArgs, out: &mut dyn Write) -> Result<()> {
    let t = synth::synth(a.events, a.ranks, a.seed)?;
    fsutil::write_json_new(&a.out, &t)?;
    let specials = synth::specials(a.events, a.ranks, a.seed);
    writeln!(
        out,
        "synth: {} collectives on each of {} ranks (seed {}), {} special (skew or overlap), the first at positions \
            {:?}",
        a.events,
        a.ranks,
        a.seed,
        specials.iter().filter(|s| **s != synth::Special::None).count(),
        specials
            .iter()
            .enumerate()
            .filter(|(_, s)| **s != synth::Special::None)
            .map(|(i, _)| i)
            .take(20)
            .collect::<Vec<_>>()
    )?;
    eprintln!("wrote {}", a.out.display());
    Ok(())
}

/// `import run`.
pub(crate) fn import_run(a: ImportRunArgs, out: &mut dyn Write) -> Result<()> {
    let t = from_run::import_run(&a.run_dir, a.phase)?;
    fsutil::write_json_new(&a.out, &t)?;
    write!(out, "{}", commtrace::render_counts(&t))?;
    eprintln!("wrote {}", a.out.display());
    Ok(())
}
