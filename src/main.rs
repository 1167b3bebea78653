//! `commcanary` binary: parse, dispatch, print the error chain, exit non-zero on failure.
use anyhow::Result;
use clap::Parser;
use commcanary::cli::{Cli, Command};

fn run() -> Result<()> {
    let cli = Cli::parse();
    match cli.command {
        Command::Rank(a) => commcanary::rank::run(a),
        Command::Join(a) => commands::join(a),
        Command::Inspect(a) => {
            println!("{}", commcanary::inspect::inspect(&a.file, a.header_only)?);
            Ok(())
        }
        Command::BenchOverhead(a) => {
            commcanary::ranges::bench_args(&a)?;
            commcanary::bench::run(a)
        }
        Command::Overlap(a) => commands::overlap(a),
        Command::Campaign(c) => commands::campaign(c),
        Command::Compare(a) => commands::compare(a),
        Command::Queue(a) => commands::queue(a),
        Command::Capacity(a) => {
            let c = commcanary::capacity::capacity(a.demand, &a.throughput_per_gpu, a.gpu_hour_cost)?;
            if a.json {
                println!("{}", serde_json::to_string_pretty(&c)?);
            } else {
                print!("{}", commcanary::capacity::render(&c));
            }
            Ok(())
        }
        Command::Export(commcanary::cli::ExportCommand::Chrome(a)) => {
            let joined = commcanary::join::join_dir(&a.run_dir)?;
            let trace = commcanary::export::chrome_trace(&joined);
            let bytes = serde_json::to_vec(&trace)?;
            commcanary::fsutil::write_new_atomic(&a.output, &bytes)?;
            eprintln!("wrote {} ({} events)", a.output.display(), trace["traceEvents"].as_array().map_or(0, |v| v.len()));
            Ok(())
        }
        Command::Export(commcanary::cli::ExportCommand::Param(a)) => commands::export_trace(a, "param"),
        Command::Export(commcanary::cli::ExportCommand::Et(a)) => commands::export_trace(a, "et"),
        Command::Import(c) => commands::import(c),
        Command::ReplayTrace(a) => commcanary::commtrace::replay_command(&a),
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

    pub fn import(c: commcanary::cli::ImportCommand) -> Result<()> {
        use commcanary::cli::ImportCommand;
        use commcanary::commtrace::{import_files, render_counts, Limits, SourceKind};
        let (kind, a) = match c {
            ImportCommand::Kineto(a) => (SourceKind::Kineto, a),
            ImportCommand::Et(a) => (SourceKind::ExecutionTrace, a),
        };
        let t = import_files(kind, &a.files, &Limits::default())?;
        commcanary::fsutil::write_json_new(&a.output, &t)?;
        if a.json {
            println!("{}", serde_json::to_string_pretty(&t.ranks.iter().map(|r| (r.rank, r.collectives.len())).collect::<Vec<_>>())?);
        } else {
            print!("{}", render_counts(&t));
        }
        eprintln!("wrote {} ({} ranks; unknown: {})", a.output.display(), t.ranks.len(),
            t.unknown.iter().map(|u| u.field.as_str()).collect::<Vec<_>>().join(", "));
        Ok(())
    }

    pub fn export_trace(a: commcanary::cli::ExportTraceArgs, to: &str) -> Result<()> {
        use commcanary::commtrace::{export, CommTrace};
        let t = CommTrace::read(&a.trace)?;
        let docs = if to == "param" { export::param(&t)? } else { export::et(&t)? };
        std::fs::create_dir_all(&a.output).with_context(|| format!("creating {}", a.output.display()))?;
        for (rank, doc) in &docs {
            commcanary::fsutil::write_json_new(&a.output.join(format!("rank-{rank}.json")), doc)?;
        }
        eprintln!("wrote {} files to {}", docs.len(), a.output.display());
        Ok(())
    }

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

    /// One side of a comparison: summaries, evidence, the declared rule and,
    /// for a campaign, the relations its analysis decided (pair order of the summaries).
    struct Side {
        rows: Vec<commcanary::ranking::ConfigSummary>,
        evidence: String,
        rule: Option<commcanary::ranking::TiePolicy>,
        relations: Option<Vec<commcanary::ranking::Relation>>,
    }

    /// A campaign's analysis input, only once `verify` passes.
    fn verified_input(dir: &std::path::Path) -> Result<(commcanary::campaign::chain::Verdict, commcanary::analysis::AnalysisInput)> {
        let v = commcanary::campaign::chain::verify(dir)?;
        if !v.complete {
            anyhow::bail!("{}: withheld-incomplete ({} refusals); verify the campaign first", dir.display(), v.refusals.len());
        }
        Ok((v, commcanary::campaign::report::collect(dir)?.0))
    }

    /// One side of a comparison. A campaign is analyzed once however many
    /// sides name it (`analyzed` holds the last one).
    fn side(spec: &str, analyzed: &mut Option<(std::path::PathBuf, commcanary::analysis::AnalysisInput, commcanary::analysis::Report)>) -> Result<Side> {
        if let Some((dir, phase)) = spec.rsplit_once(':').filter(|(d, _)| std::path::Path::new(d).join("manifest.json").exists()) {
            let dir = std::path::Path::new(dir);
            let phase: commcanary::workload::Phase = phase.parse()?;
            if analyzed.as_ref().is_none_or(|a| a.0 != dir) {
                let (v, input) = verified_input(dir)?;
                let ev = format!("measured: verified campaign {} (manifest {})", input.context.campaign_id, &input.context.manifest_sha256[..12]);
                let report = commcanary::analysis::analyze(&input, v, &ev)?;
                *analyzed = Some((dir.to_path_buf(), input, report));
            }
            let (_, input, report) = analyzed.as_ref().expect("just set");
            let ev = format!(
                "{}, phase {phase}, per-job medians with IQR over {} jobs each",
                report.evidence,
                input.phases.first().and_then(|p| p.jobs.first()).map(|j| j.len()).unwrap_or(0)
            );
            let rule = input.policy.tie_policy;
            let Some(pr) = report.phases.iter().find(|p| p.phase == phase) else {
                anyhow::bail!("{}: the campaign has no results for phase {phase}", dir.display());
            };
            let labels = &input.phases.iter().find(|p| p.phase == phase).expect("analyzed").labels;
            let rows = pr.summaries(labels);
            let relations = pr.pairs.iter().map(|p| p.relation).collect();
            return Ok(Side { rows, evidence: ev, rule: Some(rule), relations: Some(relations) });
        }
        let text = std::fs::read_to_string(spec).with_context(|| format!("reading {spec} (a CSV table, or CAMPAIGN_DIR:PHASE)"))?;
        let rows = commcanary::ranking::parse_csv(&text, spec)?;
        Ok(Side { rows, evidence: format!("reported evidence: summary table {spec}, not re-measured here; no bootstrap is offered for it"), rule: None, relations: None })
    }

    pub fn queue(a: commcanary::cli::QueueArgs) -> Result<()> {
        use commcanary::queue::{simulate, Load};
        commcanary::ranges::queue_args(&a)?;
        let load = match a.mode {
            commcanary::cli::QueueMode::Open => {
                let interval_ms = a.interval_ms.context("--mode open needs --interval-ms")?;
                Load::Open { arrival: a.arrival, interval_ms, seed: a.seed }
            }
            commcanary::cli::QueueMode::Closed => Load::Closed { clients: a.clients.context("--mode closed needs --clients")?, think_ms: a.think_ms },
        };
        // (label, service times ms)
        let (sources, evidence): (Vec<(String, Vec<f64>)>, String) = if let Some(f) = &a.service_times {
            let text = std::fs::read_to_string(f).with_context(|| format!("reading {}", f.display()))?;
            (vec![(f.display().to_string(), commcanary::queue::parse_service_times(&text, &f.display().to_string())?)], format!("service times from {} (provenance: whoever wrote the file)", f.display()))
        } else {
            let dir = a.campaign.as_ref().expect("clap requires one");
            let phase: commcanary::workload::Phase = a.phase.parse()?;
            let (_, input) = verified_input(dir)?;
            let p = input.phases.iter().find(|p| p.phase == phase).with_context(|| format!("{}: no phase {phase}", dir.display()))?;
            if !phase.has_tokens() {
                anyhow::bail!("phase {phase} has no tokens; service times are per-token latencies of a workload phase");
            }
            let s = p
                .labels
                .iter()
                .zip(&p.jobs)
                .map(|(l, jobs)| {
                    let mut js = jobs.clone();
                    js.sort_by_key(|j| j.round);
                    (l.clone(), js.iter().flat_map(|j| j.samples_us.iter().map(|us| us / 1e3)).collect())
                })
                .collect();
            (s, format!("service times: per-token latencies of phase {phase} in verified campaign {} (manifest {}), jobs in round order, every rank's tokens", input.context.campaign_id, &input.context.manifest_sha256[..12]))
        };
        let mut results = Vec::new();
        for (label, service) in &sources {
            let n = a.requests.unwrap_or(service.len());
            results.push((label.clone(), simulate(service, load, n, a.slo_ms, a.co_correct_ms).with_context(|| format!("simulating {label}"))?));
        }
        // labels ordered by a key of their result (stable: ties keep input order)
        let ranked = |key: &dyn Fn(&commcanary::queue::QueueResult) -> f64, descending: bool| -> Vec<&str> {
            let mut v: Vec<&(String, commcanary::queue::QueueResult)> = results.iter().collect();
            v.sort_by(|x, y| if descending { key(&y.1).total_cmp(&key(&x.1)) } else { key(&x.1).total_cmp(&key(&y.1)) });
            v.into_iter().map(|r| r.0.as_str()).collect()
        };
        let by_median = ranked(&|r| r.response_ms.p50, false);
        let by_slo = if a.slo_ms.is_some() { ranked(&|r| r.slo_attainment.unwrap_or(f64::NAN), true) } else { Vec::new() };
        let mut out = std::io::stdout().lock();
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
        writeln!(out, "{:<24} {:>9} {:>10} {:>10} {:>10} {:>10} {:>10} {:>10} {:>8}", "config", "req/s", "wait p50", "wait p99", "resp p50", "resp p95", "resp p99", "L=lambdaW", "SLO")?;
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

    pub fn compare(a: commcanary::cli::CompareArgs) -> Result<()> {
        let mut analyzed = None;
        let p = side(&a.proxy, &mut analyzed)?;
        let t = side(&a.truth, &mut analyzed)?;
        if let (Some(x), Some(y)) = (p.rule, t.rule) {
            if x != y {
                anyhow::bail!("the two campaigns declare different tie policies");
            }
        }
        let rule = p.rule.or(t.rule).unwrap_or(a.tie_policy);
        let evidence = if p.evidence == t.evidence { p.evidence.clone() } else { format!("proxy: {}; truth: {}", p.evidence, t.evidence) };
        let same_order = p.rows.iter().map(|r| &r.config).eq(t.rows.iter().map(|r| &r.config));
        let c = match (&p.relations, &t.relations) {
            (Some(pr), Some(tr)) if same_order => commcanary::ranking::compare_relations(&t.rows, pr, tr, rule, &evidence)?,
            _ if rule == commcanary::ranking::TiePolicy::Interval => {
                anyhow::bail!("the interval tie policy needs both sides from campaigns with the same configurations")
            }
            _ => commcanary::ranking::compare(&p.rows, &t.rows, rule, &evidence)?,
        };
        let p = p.rows;
        let mut out = std::io::stdout().lock();
        if a.json {
            writeln!(out, "{}", serde_json::to_string_pretty(&c)?)?;
            return Ok(());
        }
        writeln!(out, "{} configurations, {} pairs, tie rule {:?}", p.len(), c.pairs_total, c.tie_policy)?;
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
            writeln!(out, "  disagree {} vs {}: proxy {:?}, truth {:?}; truth-side difference {:.1}% of the faster", d.a, d.b, d.proxy, d.truth, d.truth_cost_pct)?;
        }
        if c.pairs_total >= 10 {
            writeln!(out, "note: {} pairs invite false discoveries; read the whole matrix (--json), not a list of inversions", c.pairs_total)?;
        }
        writeln!(out, "evidence: {}", c.evidence_class)?;
        Ok(())
    }

    pub fn campaign(c: commcanary::cli::CampaignCommand) -> Result<()> {
        use commcanary::campaign::{self as cp, chain};
        use commcanary::cli::CampaignCommand as C;
        let mut out = std::io::stdout().lock();
        match c {
            C::Plan { spec, output } => {
                let m = cp::plan(&spec, &output)?;
                writeln!(out, "planned {} in {}: {} configurations x {} rounds = {} cells, seed {}", m.campaign_id, output.display(), m.configs.len(), m.spec.repetitions, m.schedule.len(), m.spec.seed)?;
                for cell in &m.schedule {
                    writeln!(out, "  {:>3}. {}", m.schedule.iter().position(|x| x == cell).unwrap_or(0) + 1, cell.cell_id)?;
                }
            }
            C::Exec { dir, retries, resume: _, cell, cell_timeout_s } => {
                let (ok, failed) = chain::exec(&dir, retries, cell, cell_timeout_s.map(std::time::Duration::from_secs))?;
                writeln!(out, "exec: {ok} cells succeeded in this invocation, {failed} failed attempts recorded (all in attempts.jsonl)")?;
                if failed > 0 && ok == 0 {
                    anyhow::bail!("no cell succeeded");
                }
            }
            C::Select { dir, policy } => {
                // no exec may append while the selection is made and written
                let _lock = chain::lock_campaign(&dir, None, &format!("select {}", dir.display()))?;
                let (sel, missing) = chain::select(&dir, policy)?;
                commcanary::fsutil::write_json_new(&dir.join("selection.json"), &sel)
                    .context("writing selection.json (remove an old selection first to select again)")?;
                writeln!(out, "selected {} attempts ({:?}); cells without a successful attempt: {}", sel.entries.len(), policy, if missing.is_empty() { "none".into() } else { missing.join(", ") })?;
            }
            C::Verify { dir, json } => {
                let v = chain::verify(&dir)?;
                if json {
                    writeln!(out, "{}", serde_json::to_string_pretty(&v)?)?;
                } else {
                    writeln!(out, "{}: {}/{} cells verified", if v.complete { "complete" } else { "INCOMPLETE" }, v.cells_ok, v.cells_expected)?;
                    for (cell, why) in &v.refusals {
                        writeln!(out, "  refused {cell}: {why}")?;
                    }
                }
                if !v.complete {
                    anyhow::bail!("campaign {} is incomplete ({} refusals)", dir.display(), v.refusals.len());
                }
            }
            C::Analyze { dir, json, diagnostics, reveal, report_dir } => {
                let v = chain::verify(&dir)?;
                if !v.complete {
                    writeln!(out, "withheld-incomplete: {} of {} cells verified; no ranking is published", v.cells_ok, v.cells_expected)?;
                    for (cell, why) in &v.refusals {
                        writeln!(out, "  refused {cell}: {why}")?;
                    }
                    if diagnostics {
                        writeln!(out, "DIAGNOSTICS ONLY - UNFIT TO PUBLISH (incomplete evidence):")?;
                        if let Ok(r) = cp::results(&dir) {
                            write!(out, "{}", cp::render_results(&r))?;
                        }
                    }
                    anyhow::bail!("analysis withheld: the campaign is incomplete");
                }
                let out_dir = report_dir.unwrap_or_else(|| dir.join("report"));
                let report = cp::report::analyze_and_write(&dir, v, &out_dir)?;
                if json {
                    writeln!(out, "{}", serde_json::to_string_pretty(&report)?)?;
                } else {
                    write!(out, "{}", commcanary::analysis::render(&report))?;
                    writeln!(out, "wrote {} and {} plot(s) into {}", "report.json", report.plots.len(), out_dir.display())?;
                }
                if reveal {
                    match std::fs::read(dir.join("blinding.json")) {
                        Ok(b) => writeln!(out, "revealed labels: {}", String::from_utf8_lossy(&b).trim())?,
                        Err(_) => writeln!(out, "not blinded: labels are configuration names")?,
                    }
                }
            }
            C::Archive { dir, output, descriptor } => {
                let desc = descriptor.unwrap_or_else(|| std::path::PathBuf::from(format!("{}.descriptor.json", output.display())));
                let d = cp::archive(&dir, &output, &desc)?;
                writeln!(out, "archived {} ({} bytes, sha256 {}); descriptor {}; verdict {}", output.display(), d.archive_size_bytes, d.archive_sha256, desc.display(), if d.verdict.complete { "complete" } else { "INCOMPLETE" })?;
            }
            C::Join { a, b, output } => {
                let m = cp::join_campaigns(&a, &b, &output)?;
                writeln!(out, "joined into {} ({}): {} cells; run `campaign select` and `verify` on it", output.display(), m.campaign_id, m.schedule.len())?;
            }
            C::Power { dir, phase, min_effect_pct } => {
                let (_, input) = verified_input(&dir)?;
                let phase: commcanary::workload::Phase = match phase {
                    Some(p) => p.parse()?,
                    None => input.canary.as_ref().map(|c| c.2).unwrap_or(commcanary::workload::Phase::Blocking),
                };
                let m = min_effect_pct.unwrap_or(input.policy.min_effect_pct);
                if !(m >= 0.0) {
                    anyhow::bail!("--min-effect-pct {m}: must be non-negative");
                }
                write!(out, "{}", cp::report::power_text(&input, phase, m)?)?;
            }
            C::Replicate { a, b, json } => {
                let (ra, na) = cp::report::analyze_for_replication(&a)?;
                let (rb, nb) = cp::report::analyze_for_replication(&b)?;
                let name = |m: &std::collections::BTreeMap<String, String>, l: &str| m.get(l).cloned().unwrap_or_else(|| l.to_string());
                let r = commcanary::analysis::replicate(&ra, &rb, &|l| name(&na, l), &|l| name(&nb, l))?;
                if json {
                    writeln!(out, "{}", serde_json::to_string_pretty(&r)?)?;
                } else {
                    write!(out, "{}", commcanary::analysis::render_replication(&r))?;
                }
            }
            C::CheckArchive { archive, descriptor } => {
                let d = cp::check_archive(&archive, &descriptor)?;
                writeln!(out, "{}: size and SHA-256 match the descriptor (campaign {}, manifest {})", archive.display(), d.campaign_id, d.manifest_sha256)?;
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
            commcanary::rank::write_line_stderr(&format!("commcanary: error: {e:#}"));
        }
        std::process::exit(1);
    }
}
