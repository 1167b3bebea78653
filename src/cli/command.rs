//! The command layer: one function per subcommand, from parsed arguments
//! (`crate::cli`) to printed results. The binary only parses and calls
//! [`run`]; everything here is reachable from library tests.
//!
//! Consumes: a parsed [`Cli`]. Produces: human or `--json` output on the given
//! writer, files the command names (written atomically, never replacing),
//! and an exit code. Refuses: whatever the stage it calls refuses.
use crate::analysis::overlap::IntervalSource;
use crate::analysis::{capacity, summary};
use crate::canary::artifact;
use crate::canary::redact::{self, AuditLog, RedactOptions};
use crate::cli::{canary, json_or, schema, Cli, Command, JoinArgs};
use crate::core::ranges::{int, non_negative, positive, sizes, MAX_CLIENTS, MAX_MESSAGE_BYTES, MAX_RANK, MAX_REQUESTS};
use crate::core::refusal::{self, Code};
use crate::core::{fsutil, limits, par, units};
use crate::evidence::{inspect, join, shard, synth_shards};
use crate::rank::bench::{self, BenchOptions};
use crate::rank::capture::{self, CaptureOptions};
use crate::rank::{doctor, replay};
use crate::report::campaign as report_campaign;
use crate::report::compare as report_compare;
use crate::report::overlap::{self as report_overlap, Overlapped};
use crate::report::queue::{self as report_queue, Queued};
use crate::report::run::{self, Analyze, RunOptions};
use crate::report::{export, pick};
use anyhow::{Context, Result};
use std::io::Write;
use std::process::ExitCode;

/// Run one parsed command line, writing its results to `out`.
///
/// Diagnostics (what was written where) go to stderr; an error is returned
/// for the binary to print.
pub fn run(cli: Cli, out: &mut dyn Write) -> Result<ExitCode> {
    check_command_ranges(&cli.command)?;
    match cli.command {
        // validate's exit code is its verdict (0 pass, 1 fail, 2 inconclusive, 3 could not run)
        Command::Validate(a) => {
            return Ok(ExitCode::from(u8::try_from(crate::validate::command(a)).unwrap_or(u8::MAX)))
        }
        Command::Rank(a) => crate::rank::run(*a)?,
        Command::Join(a) => join(a, out)?,
        Command::Inspect(a) => writeln!(out, "{}", inspect::inspect(&a.file, a.header_only)?)?,
        Command::BenchOverhead(a) => bench::run(a)?,
        Command::Overlap(a) => overlap(a, out)?,
        Command::Campaign(c) => campaign(c, out)?,
        Command::Compare(a) => compare(a, out)?,
        Command::Queue(a) => queue(a, out)?,
        Command::Capacity(a) => {
            let c = capacity::capacity(a.demand, &a.throughput_per_gpu, a.gpu_hour_cost)?;
            json_or(out, a.json, &c, capacity::render)?;
        }
        Command::Export(crate::cli::ExportCommand::Chrome(a)) => {
            let joined = join::join_dir(&a.run_dir)?;
            let trace = export::chrome_trace(&joined);
            let bytes = serde_json::to_vec(&trace)?;
            fsutil::write_new_atomic(&a.output, &bytes)?;
            eprintln!(
                "wrote {} ({} events)",
                a.output.display(),
                trace["traceEvents"].as_array().map_or(0, |v| v.len())
            );
        }
        Command::Export(crate::cli::ExportCommand::Param(a)) => export_trace(a, "param")?,
        Command::Export(crate::cli::ExportCommand::Et(a)) => export_trace(a, "et")?,
        Command::Import(crate::cli::ImportCommand::Run(a)) => canary::import_run(a, out)?,
        Command::Import(crate::cli::ImportCommand::Mpi(a)) => import_mpi(a, out)?,
        Command::Capture(a) => return capture::run(&CaptureOptions { dir: a.output, lib: a.lib, app: a.app }),
        Command::Import(c) => import(c, out)?,
        Command::Synth(a) => canary::synth_cmd(a, out)?,
        Command::Canary(c) => return canary::canary(c, out),
        Command::ReplayTrace(a) => replay::run(&a)?,
        Command::Doctor(a) => {
            let (r, all_ok) = doctor::report(&a.nccl_lib);
            json_or(out, a.json, &r, doctor::render)?;
            if !all_ok {
                anyhow::bail!("an NCCL library named with --nccl-lib did not load and verify (see above)");
            }
        }
        Command::Schema(a) => write!(out, "{}", schema::schema_json(&a.name)?)?,
        Command::SynthShards(a) => {
            let threads = a.threads.unwrap_or_else(par::available);
            let r = synth_shards::write_run(&a.out, a.ranks, a.collectives, a.seed, threads, a.format_version)?;
            let bytes: u64 = r.shards.iter().map(|s| s.size_bytes).sum();
            writeln!(
                out,
                "run {}: {} SYNTHETIC shards ({} collectives each, {bytes} shard bytes) and run.json written to {}",
                r.run_id,
                r.shards.len(),
                a.collectives,
                a.out.display()
            )?;
        }
        Command::Summarize(a) => {
            let runs = a.runs.iter().map(|s| summary::parse_labelled(s)).collect::<Result<Vec<_>>>()?;
            json_or(out, a.json, &summary::summarize(&runs)?, summary::render)?;
        }
    }
    Ok(ExitCode::SUCCESS)
}

fn import(c: crate::cli::ImportCommand, out: &mut dyn Write) -> Result<()> {
    use crate::cli::ImportCommand;
    use crate::evidence::commtrace::{import_files, render_counts, Limits, SourceKind};
    let (kind, a) = match c {
        ImportCommand::Kineto(a) => (SourceKind::Kineto, a),
        ImportCommand::Et(a) => (SourceKind::ExecutionTrace, a),
        ImportCommand::Run(a) => return canary::import_run(a, out),
        ImportCommand::Mpi(a) => return import_mpi(a, out),
    };
    let t = import_files(kind, &a.files, &Limits::default()).map_err(refusal::or_code(Code::BadInput))?;
    fsutil::write_json_new(&a.output, &t)?;
    let counts: Vec<(u32, usize)> = t.ranks.iter().map(|r| (r.rank, r.collectives.len())).collect();
    json_or(out, a.json, &counts, |_| render_counts(&t))?;
    eprintln!(
        "wrote {} ({} ranks; unknown: {})",
        a.output.display(),
        t.ranks.len(),
        t.unknown.iter().map(|u| u.field.as_str()).collect::<Vec<_>>().join(", ")
    );
    Ok(())
}

fn import_mpi(a: crate::cli::ImportMpiArgs, out: &mut dyn Write) -> Result<()> {
    use crate::evidence::commtrace::{mpi, render_counts, Limits};
    let cap = mpi::read_dir(&a.dir, a.allow_incomplete, &Limits::default())?;
    let t = mpi::to_trace_with(&cap, a.for_phases).map_err(refusal::or_code(Code::BadInput))?;
    fsutil::write_json_new(&a.output, &t)?;
    let m = t.mpi.as_ref().context("import mpi wrote no mpi section")?;
    if a.json {
        let per_rank: Vec<serde_json::Value> = (0..m.calls.len())
            .map(|k| {
                let n = t.ranks[k].collectives.len();
                serde_json::json!({"rank": k, "calls": m.calls[k], "left_out": m.left_out[k], "collectives": n})
            })
            .collect();
        let v =
            serde_json::json!({"ranks": per_rank, "left_out_reasons": m.left_out_reasons, "incomplete": m.incomplete});
        writeln!(out, "{}", serde_json::to_string_pretty(&v)?)?;
    } else {
        write!(out, "{}", render_counts(&t))?;
        for (k, calls) in m.calls.iter().enumerate() {
            let all: u64 = calls.values().sum();
            let left: u64 = m.left_out[k].values().sum();
            writeln!(
                out,
                "rank {k}: {all} MPI calls captured, {left} not in the trace ({})",
                m.left_out[k].iter().map(|(n, c)| format!("{n} {c}")).collect::<Vec<_>>().join(", ")
            )?;
        }
        for (n, why) in &m.left_out_reasons {
            writeln!(out, "left out: MPI_{n}: {why}")?;
        }
    }
    for i in &m.incomplete {
        eprintln!("incomplete: {i}");
    }
    let marked = if m.incomplete.is_empty() { "" } else { "; marked incomplete" };
    eprintln!("wrote {} ({} ranks{marked})", a.output.display(), t.ranks.len());
    Ok(())
}

fn export_trace(a: crate::cli::ExportTraceArgs, to: &str) -> Result<()> {
    use crate::evidence::commtrace::{export, CommTrace};
    let bad_input = refusal::or_code(Code::BadInput);
    let (t, input_sha256) = CommTrace::read_with_sha256(&a.trace).map_err(&bad_input)?;
    let mut audit = None;
    let t = if a.redact {
        let (r, transforms) = redact::redact(&t, &RedactOptions { quantize_ns: a.quantize_ns, drop_names: false })?;
        audit = Some(AuditLog {
            format_version: 1,
            input_sha256,
            output_sha256: artifact::canonical_sha256(&r)?,
            transforms,
            decision_survives: Some(format!(
                "not re-verified by export; `commcanary canary redact {} -o FILE --configs SPEC` re-verifies the \
                    ranking on replays",
                a.trace.display()
            )),
        });
        r
    } else {
        t
    };
    let docs = if to == "param" { export::param(&t) } else { export::et(&t) }.map_err(&bad_input)?;
    std::fs::create_dir_all(&a.output).with_context(|| format!("creating {}", a.output.display()))?;
    if let Some(audit) = &audit {
        fsutil::write_json_new(&a.output.join("redaction.audit.json"), audit)?;
    }
    for (rank, doc) in &docs {
        fsutil::write_json_new(&a.output.join(format!("rank-{rank}.json")), doc)?;
    }
    let redacted = if a.redact { " (redacted; audit log redaction.audit.json)" } else { "" };
    eprintln!("wrote {} files to {}{redacted}", docs.len(), a.output.display());
    Ok(())
}

fn overlap(a: crate::cli::OverlapArgs, out: &mut dyn Write) -> Result<()> {
    match report_overlap::run(a.intervals.as_deref(), a.run_dir.as_deref())? {
        Overlapped::Intervals(r) if a.json => writeln!(out, "{}", serde_json::to_string_pretty(&r)?)?,
        Overlapped::Intervals(r) => {
            writeln!(
                out,
                "compute active {:.3} us, comm active {:.3} us, overlap {:.3} us, wall {:.3} us",
                r.compute_active_us, r.comm_active_us, r.overlap_us, r.wall_us
            )?;
            let p = |x: Option<f64>| x.map(|v| format!("{:.1}%", v * 100.0)).unwrap_or_else(|| "undefined".into());
            writeln!(
                out,
                "overlap / comm-active {}, / compute-active {}, / wall {}",
                p(r.overlap_of_comm),
                p(r.overlap_of_compute),
                p(r.overlap_of_wall)
            )?;
        }
        Overlapped::Run(rows) if a.json => writeln!(out, "{}", serde_json::to_string_pretty(&rows)?)?,
        Overlapped::Run(rows) => {
            writeln!(
                out,
                "{:<21} {:>4} {:>13} {:>12} {:>11} {:>10} {:>10} {:>10}  intervals",
                "phase", "rank", "compute us", "comm us", "overlap us", "ov/comm", "ov/compute", "ov/wall"
            )?;
            let p = |x: Option<f64>| x.map(|v| format!("{:.1}%", v * 100.0)).unwrap_or_else(|| "n/a".into());
            for r in rows {
                let src = match r.source {
                    IntervalSource::CuptiKernels => "CUPTI kernels",
                    IntervalSource::DeviceEvents => "CUDA events",
                    IntervalSource::Host => "host; comm = issue..wait return (upper bound)",
                };
                writeln!(
                    out,
                    "{:<21} {:>4} {:>13.1} {:>12.1} {:>11.1} {:>10} {:>10} {:>10}  {src}",
                    r.phase.name(),
                    r.rank,
                    r.report.compute_active_us,
                    r.report.comm_active_us,
                    r.report.overlap_us,
                    p(r.report.overlap_of_comm),
                    p(r.report.overlap_of_compute),
                    p(r.report.overlap_of_wall)
                )?;
            }
        }
    }
    Ok(())
}

fn queue(a: crate::cli::QueueArgs, out: &mut dyn Write) -> Result<()> {
    use crate::analysis::queue::Load;
    let load = match a.mode {
        crate::cli::QueueMode::Open => {
            let Some(interval_ms) = a.interval_ms else {
                crate::refuse!(Code::BadArgument, "--mode open needs --interval-ms");
            };
            Load::Open { arrival: a.arrival, interval_ms, seed: a.seed }
        }
        crate::cli::QueueMode::Closed => {
            let Some(clients) = a.clients else {
                crate::refuse!(Code::BadArgument, "--mode closed needs --clients");
            };
            Load::Closed { clients, think_ms: a.think_ms }
        }
    };
    let Queued { results, ranks: (by_median, by_slo), evidence } = report_queue::run(
        a.service_times.as_deref(),
        a.campaign.as_deref().map(|d| (d, a.phase.as_str())),
        load,
        a.requests,
        a.slo_ms,
        a.co_correct_ms,
    )?;
    if a.json {
        let v = serde_json::json!({
            "evidence": evidence,
            "results": results.iter().map(|(l, r)| serde_json::json!({"config": l, "result": r})).collect::<Vec<_>>(),
            "rank_by_median_response": by_median,
            "rank_by_slo_attainment": if a.slo_ms.is_some() { Some(&by_slo) } else { None },
        });
        writeln!(out, "{}", serde_json::to_string_pretty(&v)?)?;
        return Ok(());
    }
    writeln!(
        out,
        "{:<24} {:>9} {:>10} {:>10} {:>10} {:>10} {:>10} {:>10} {:>8}",
        "config", "req/s", "wait p50", "wait p99", "resp p50", "resp p95", "resp p99", "L=lambdaW", "SLO"
    )?;
    for (l, r) in &results {
        writeln!(
            out,
            "{:<24} {:>9.1} {:>10.3} {:>10.3} {:>10.3} {:>10.3} {:>10.3} {:>10.3} {:>8}",
            l,
            r.throughput_rps,
            r.wait_ms.p50,
            r.wait_ms.p99,
            r.response_ms.p50,
            r.response_ms.p95,
            r.response_ms.p99,
            r.mean_in_system,
            r.slo_attainment.map(|s| format!("{:.1}%", s * 100.0)).unwrap_or_else(|| "-".into())
        )?;
        if let Some(c) = &r.response_co_corrected_ms {
            writeln!(out, "{:<24} CO-corrected response p50 {:.3} p95 {:.3} p99 {:.3} ms", "", c.p50, c.p95, c.p99)?;
        }
    }
    writeln!(out, "rank by median response: {}", by_median.join(" < "))?;
    if a.slo_ms.is_some() {
        writeln!(out, "rank by SLO attainment: {}", by_slo.join(" > "))?;
    }
    let mut warned = std::collections::BTreeSet::new();
    for w in results.iter().flat_map(|r| r.1.warnings.iter()) {
        if warned.insert(w) {
            writeln!(out, "warning: {w}")?;
        }
    }
    writeln!(out, "ms throughout; one FIFO server; percentiles nearest-rank. evidence: {evidence}")?;
    Ok(())
}

fn compare(a: crate::cli::CompareArgs, out: &mut dyn Write) -> Result<()> {
    let (configs, c) = report_compare::run(&a.proxy, &a.truth, a.size.as_deref(), a.tie_policy)?;
    if a.json {
        writeln!(out, "{}", serde_json::to_string_pretty(&c)?)?;
        return Ok(());
    }
    if a.csv {
        let mut w = csv::Writer::from_writer(Vec::new());
        for r in &c.relations {
            w.serialize(r)?;
        }
        out.write_all(&w.into_inner().map_err(|e| anyhow::anyhow!("{e}"))?)?;
        return Ok(());
    }
    writeln!(out, "{} configurations, {} pairs, tie rule {:?}", configs, c.pairs_total, c.tie_policy)?;
    writeln!(
        out,
        "under the declared {:?} rule the proxy and the truth agreed on {} of {} pairs ({:.1}%); Kendall tau-b {}",
        c.tie_policy,
        c.pairs_agree,
        c.pairs_total,
        c.agreement_pct,
        c.kendall_tau_b.map(|t| format!("{t:.3}")).unwrap_or_else(|| "undefined (every pair tied on one side)".into())
    )?;
    for d in &c.disagreements {
        writeln!(
            out,
            "  disagree {} vs {}: proxy {:?}, truth {:?}; truth-side difference {:.1}% of the faster",
            d.a, d.b, d.proxy, d.truth, d.truth_cost_pct
        )?;
    }
    if c.pairs_total >= 10 {
        writeln!(
            out,
            "note: {} pairs invite false discoveries; read the whole matrix (--json), not a list of inversions",
            c.pairs_total
        )?;
    }
    writeln!(out, "evidence: {}", c.evidence_class)?;
    Ok(())
}

fn campaign(c: crate::cli::CampaignCommand, out: &mut dyn Write) -> Result<()> {
    use crate::campaign::{self as cp, chain};
    use crate::cli::CampaignCommand as C;
    match c {
        C::Plan { spec, output } => run::plan(&spec, &output, out)?,
        C::Run { spec, output, retries, cell_timeout_s, reveal, verbose } => {
            run::run(&spec, &output, &RunOptions { retries, cell_timeout_s, reveal, verbose }, out)?
        }
        C::Exec { dir, retries, resume: _, cell, cell_timeout_s } => {
            chain::exec_all(&dir, retries, cell, cell_timeout_s, out)?
        }
        C::Select { dir, policy } => run::select(&dir, policy, out)?,
        C::Verify { dir, json } => run::verify(&dir, json, out)?,
        C::Analyze { dir, json, diagnostics, reveal, report_dir, verbose, csv } => {
            run::analyze(&dir, &Analyze { json, diagnostics, reveal, report_dir, verbose, csv }, out)?
        }
        C::Archive { dir, output, descriptor } => {
            let desc =
                descriptor.unwrap_or_else(|| std::path::PathBuf::from(format!("{}.descriptor.json", output.display())));
            let d = cp::archive(&dir, &output, &desc)?;
            writeln!(
                out,
                "archived {} ({} bytes, sha256 {}); descriptor {}; verdict {}",
                output.display(),
                d.archive_size_bytes,
                d.archive_sha256,
                desc.display(),
                if d.verdict.complete { "complete" } else { "INCOMPLETE" }
            )?;
        }
        C::Join { a, b, output } => {
            let m = cp::join_campaigns(&a, &b, &output)?;
            writeln!(
                out,
                "joined into {} ({}): {} cells; run `campaign select` and `verify` on it",
                output.display(),
                m.campaign_id,
                m.schedule.len()
            )?;
        }
        C::Power { dir, phase, min_effect_pct } => {
            write!(out, "{}", report_campaign::power(&dir, phase.as_deref(), min_effect_pct)?)?
        }
        C::Replicate { a, b, json } => {
            json_or(out, json, &report_campaign::replicate(&a, &b)?, crate::analysis::render_replication)?
        }
        C::ExportPick { dir, output, by } => {
            let p = pick::pick(&dir, by.as_deref())?;
            fsutil::write_new_atomic(&output, pick::env_file(&p).as_bytes())?;
            writeln!(
                out,
                "wrote {}: configuration {} ({} variable(s)); picked by {}",
                output.display(),
                p.name,
                p.env.len(),
                p.why
            )?;
            writeln!(
                out,
                "source it before the job (. {}), or confirm it: commcanary campaign confirm {} --pick {} --rounds 5 \
                    -o DIR",
                output.display(),
                dir.display(),
                output.display()
            )?;
        }
        C::Confirm { dir, pick, rounds, output } => {
            write!(out, "{}", pick::confirm(&dir, &pick, rounds, &output)?.text()?)?
        }
        C::CheckArchive { archive, descriptor } => {
            let d = cp::check_archive(&archive, &descriptor)?;
            writeln!(
                out,
                "{}: size and SHA-256 match the descriptor (campaign {}, manifest {})",
                archive.display(),
                d.campaign_id,
                d.manifest_sha256
            )?;
        }
    }
    Ok(())
}

fn join(a: JoinArgs, out: &mut dyn Write) -> Result<()> {
    // the streaming join: the run is never held in memory whole (evidence::join's module doc)
    let threads = a.threads.unwrap_or_else(par::available);
    let summary = match &a.events_out {
        Some(p) => {
            let (mut summary, mut joined_ok) = (None, true);
            fsutil::write_new_atomic_with(p, &mut |w| {
                let mut w = std::io::BufWriter::with_capacity(1 << 20, w);
                let s = join::join_summary_streaming(&a.run_dir, threads, Some(&mut w))
                    .inspect_err(|_| joined_ok = false)?;
                w.flush()?;
                summary = Some(s);
                Ok(())
            })
            // a refusal of the join is the join's; a fault of the file names it
            .map_err(|e| {
                if joined_ok {
                    e.context(format!("writing joined trace {}", p.display()))
                } else {
                    e
                }
            })?;
            summary.expect("written only after the join")
        }
        None => join::join_summary_streaming(&a.run_dir, threads, None)?,
    };
    json_or(out, a.json, &summary, join::render_summary)
}

/// `queue`'s numbers.
fn queue_args(a: &crate::cli::QueueArgs) -> Result<()> {
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
    non_negative("--think-ms", a.think_ms, f64::MAX)
}

/// `capacity`'s numbers.
fn capacity_args(a: &crate::cli::CapacityArgs) -> Result<()> {
    positive("--demand", a.demand, 1e15)?;
    int("--throughput-per-gpu (count)", a.throughput_per_gpu.len(), 1, 2)?;
    for &t in &a.throughput_per_gpu {
        positive("--throughput-per-gpu", t, 1e15)?;
    }
    non_negative("--gpu-hour-cost", a.gpu_hour_cost, 1e9)
}

/// `bench-overhead`'s numbers.
fn bench_args(a: &BenchOptions) -> Result<()> {
    int("--size", units::parse_bytes(&a.size)?, 4, MAX_MESSAGE_BYTES)?;
    sizes("--sizes", &a.sizes)?;
    int("--iters", a.iters, 1, 10_000_000)?;
    int("--reps", a.reps, 1, 10_000)?;
    Ok(())
}

/// The numbers of any command but `rank` (which [`crate::rank::run`] checks
/// first thing with [`crate::rank::check_ranges`]), before the command does anything
/// (ranges: [`crate::core::ranges`]).
pub(crate) fn check_command_ranges(c: &Command) -> Result<()> {
    match c {
        Command::Rank(_) => Ok(()),
        // validate checks its own before any work (validate::check_ranges), refusing with its could-not-run code
        Command::Validate(_) => Ok(()),
        Command::BenchOverhead(a) => bench_args(a),
        Command::Compare(a) => match &a.size {
            Some(s) => int("--size", units::parse_bytes(s)?, 1, 1 << 40),
            None => Ok(()),
        },
        Command::SynthShards(a) => {
            int("--ranks", a.ranks, 1, limits::MAX_WORLD_SIZE)?;
            int("--collectives", a.collectives, 1, u64::from(u32::MAX))?;
            int("--format-version", a.format_version, 6, shard::SHARD_FORMAT_VERSION)?;
            int("--threads", a.threads.unwrap_or(1), 1, 1024)
        }
        Command::Join(a) => int("--threads", a.threads.unwrap_or(1), 1, 1024),
        Command::Synth(a) => {
            int("--events", a.events, 1, 10_000_000)?;
            int("--ranks", a.ranks, 1, 4096)
        }
        Command::Canary(c) => canary::check_ranges(c),
        Command::Export(crate::cli::ExportCommand::Param(a) | crate::cli::ExportCommand::Et(a)) => {
            int("--quantize-ns", a.quantize_ns, 0, 60_000_000_000)
        }
        Command::Queue(a) => queue_args(a),
        Command::Capacity(a) => capacity_args(a),
        Command::ReplayTrace(a) => match a.corrupt_rank {
            Some(r) => int("--corrupt-rank", r, 0, MAX_RANK),
            None => Ok(()),
        },
        Command::Campaign(crate::cli::CampaignCommand::Run { retries, cell_timeout_s, .. }) => {
            int("--retries", *retries, 0, 100)?;
            if let Some(t) = cell_timeout_s {
                int("--cell-timeout-s", *t, 1, 604_800)?;
            }
            Ok(())
        }
        Command::Campaign(crate::cli::CampaignCommand::Confirm { rounds, .. }) => int("--rounds", *rounds, 2, 10_000),
        Command::Campaign(crate::cli::CampaignCommand::Exec { retries, cell, cell_timeout_s, .. }) => {
            int("--retries", *retries, 0, 100)?;
            if let Some(c) = cell {
                int("--cell", *c, 1, 1_000_000)?;
            }
            if let Some(t) = cell_timeout_s {
                int("--cell-timeout-s", *t, 1, 604_800)?;
            }
            Ok(())
        }
        Command::Campaign(crate::cli::CampaignCommand::Power { min_effect_pct: Some(p), .. }) => {
            positive("--min-effect-pct", *p, 100.0)
        }
        _ => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::refusal::{self, Code};
    use clap::Parser;

    /// Run a command line through the command layer; its stdout, or its error.
    fn run_args(args: &[&str]) -> Result<String> {
        let cli = Cli::try_parse_from(std::iter::once("commcanary").chain(args.iter().copied()))?;
        let mut out = Vec::new();
        let code = run(cli, &mut out)?;
        assert_eq!(code, ExitCode::SUCCESS);
        Ok(String::from_utf8(out)?)
    }

    #[test]
    fn capacity_and_schema_print_through_the_writer() {
        let text =
            run_args(&["capacity", "--demand", "10", "--throughput-per-gpu", "3", "--gpu-hour-cost", "1"]).unwrap();
        assert!(text.contains("4 GPUs (ceil)"), "{text}");
        let v: serde_json::Value = serde_json::from_str(
            &run_args(&["capacity", "--json", "--demand", "10", "--throughput-per-gpu", "3", "--gpu-hour-cost", "1"])
                .unwrap(),
        )
        .unwrap();
        assert!(v.is_object(), "{v}");
        let s: serde_json::Value = serde_json::from_str(&run_args(&["schema", "run"]).unwrap()).unwrap();
        assert_eq!(s["title"], "RunRecord");
    }

    #[test]
    fn ranges_are_checked_before_the_command_runs() {
        let e =
            run_args(&["capacity", "--demand=-1", "--throughput-per-gpu", "3", "--gpu-hour-cost", "1"]).unwrap_err();
        assert_eq!(refusal::code_of(&e), Some(Code::OutOfRange), "{e:#}");
        let e =
            run_args(&["queue", "--service-times", "/nonexistent", "--mode", "closed", "--clients", "0"]).unwrap_err();
        assert_eq!(refusal::code_of(&e), Some(Code::OutOfRange), "{e:#}");
    }

    #[test]
    fn queue_reads_service_times_and_refuses_a_bad_file_with_its_line() {
        let d = tempfile::tempdir().unwrap();
        let f = d.path().join("svc.txt");
        std::fs::write(&f, "1.0\n2.0\n1.5\n").unwrap();
        let fs = f.to_str().unwrap();
        let text = run_args(&["queue", "--service-times", fs, "--mode", "closed", "--clients", "2", "--think-ms", "1"])
            .unwrap();
        assert!(text.contains("rank by median response") && text.contains("coordinated omission"), "{text}");
        std::fs::write(&f, "1.0\nfast\n").unwrap();
        let e = run_args(&["queue", "--service-times", fs, "--mode", "open", "--interval-ms", "1"]).unwrap_err();
        assert_eq!(refusal::code_of(&e), Some(Code::BadInput), "{e:#}");
        assert!(format!("{e:#}").contains("svc.txt:2"), "{e:#}");
    }
}
