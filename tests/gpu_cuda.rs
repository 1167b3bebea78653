//! GPU-only: the CUDA backend end to end on a real GPU. Skipped, with the
//! reason printed, where no GPU is usable (CI). Run on a GPU host by building
//! this test binary (`cargo test --release --no-run --test gpu_cuda`) and
//! executing it there with `COMMCANARY_BIN` pointing at a staged commcanary.
mod common;
use commcanary::backend::cuda;
use commcanary::core::clock::RankClock;
use commcanary::core::collective::{self, Lands};
use commcanary::core::workload::{CommStream, Phase};
use commcanary::evidence::shard::{self, KernelEvent, KernelKind, Shard, TraceOrigin};
use common::*;

fn gpu_or_skip() -> bool {
    match cuda::unavailable_reason() {
        Some(why) => {
            eprintln!("SKIPPED: GPU-only test, no usable GPU here: {why}");
            false
        }
        None => true,
    }
}

#[test]
fn cuda_one_rank_blocking_has_no_overlap_and_every_collective_a_device_interval() {
    if !gpu_or_skip() {
        return;
    }
    let d = tempfile::tempdir().unwrap();
    let run = run_rank_with(
        1,
        d.path(),
        &[
            "--backend",
            "cuda",
            "--cupti",
            "--comm-stream",
            "separate",
            "--phases",
            "blocking,async,overlap",
            "--tokens",
            "8",
            "--model",
            "synthetic",
            "--layers",
            "8",
            "--check",
            "4",
        ],
    );
    let s = join_json(&run);
    assert_eq!(phase(&s, "blocking")["completion_source"], "device-events");
    let shard = Shard::read(&run.join("rank-00000.shard")).unwrap();
    assert!(shard.body.collectives.iter().all(|e| e.device_start_ns.is_some() && e.device_end_ns.is_some()));
    let fact = |k: &str| shard.header.device.facts.iter().find(|f| f.0 == k).map(|f| f.1.clone());
    for k in [
        "uuid",
        "pci_bus_id_start",
        "driver_version_start",
        "temperature_c_start",
        "temperature_c_end",
        "sm_clock_mhz_end",
        "compute_processes_start",
        "topology",
    ] {
        let v = fact(k).unwrap_or_else(|| panic!("device fact {k} recorded"));
        eprintln!("fact {k} = {}", v.lines().next().unwrap_or(""));
    }
    assert!(shard.header.phases.iter().all(|p| p.device_anchor_error_ns.is_some()));
    assert_eq!(
        shard.body.device_waits.len(),
        shard.body.collectives.len(),
        "the compute stream's wait on every collective is measured"
    );
    assert!(phase(&s, "blocking")["device_wait_median_us"].as_f64().is_some());
    let cupti = shard.header.device.facts.iter().find(|f| f.0 == "cupti").map(|f| f.1.clone()).unwrap_or_default();
    if cupti.starts_with("kernel activity records") {
        // one rank: NCCL copies instead of launching a kernel; the GEMMs are kernels
        assert!(shard.body.kernels.iter().any(|k| k.kind == KernelKind::Compute), "GEMM kernels recorded");
        assert!(!shard.body.kernels.iter().any(|k| k.kind == KernelKind::Nccl), "no NCCL kernel on one rank");
        check_kernel_anchor(&shard);
    } else {
        eprintln!("note: CUPTI unavailable on this GPU host ({cupti}); kernel assertions not made");
    }
    let v: serde_json::Value = serde_json::from_str(&ok(&cc(&["overlap", "--json", run.to_str().unwrap()]))).unwrap();
    for r in v.as_array().unwrap() {
        if r["phase"] == "blocking" {
            let rep = &r["report"];
            // the next GEMM waits on the collective's end: nothing can overlap it
            assert!(rep["overlap_us"].as_f64().unwrap() <= 0.01 * rep["comm_active_us"].as_f64().unwrap(), "{r}");
        }
    }
}

/// With `--cupti`: every phase's kernel times are anchored through
/// `%globaltimer` (error = the sum of its terms), the anchor's own kernels are
/// not among the pass's, and every GEMM kernel lies inside a compute interval
/// measured by events, within the two anchors' errors (two clocks anchored
/// independently must agree).
fn check_kernel_anchor(shard: &Shard) {
    let name = |k: &KernelEvent| shard.body.kernel_names[k.name as usize].clone();
    assert!(
        !shard.body.kernels.iter().any(|k| name(k).starts_with("commcanary_gt_")),
        "the anchor's kernels are not the pass's"
    );
    for p in &shard.header.phases {
        let a = p
            .kernel_anchor
            .as_ref()
            .unwrap_or_else(|| panic!("phase {} has a kernel anchor ({:?})", p.phase, shard.header.unmeasured));
        let sum = a.globaltimer_bound_ns + a.cupti_offset_bound_ns + a.globaltimer_resolution_ns as f64;
        assert_eq!(a.error_ns, sum.ceil() as u64, "{a:?}");
        eprintln!(
            "phase {}: kernel anchor error {} ns (globaltimer {:.0} ns over {} trips, best round trip {} ns; CUPTI \
                offset {:.0} ns over {} stamps; step {} ns); CUPTI - globaltimer {:.0} ns; CUPTI's own conversion \
                    minus this {:?} ns; event anchor error {:?} ns",
            p.phase,
            a.error_ns,
            a.globaltimer_bound_ns,
            a.round_trips,
            a.best_round_trip_ns,
            a.cupti_offset_bound_ns,
            a.stamp_kernels,
            a.globaltimer_resolution_ns,
            a.cupti_minus_globaltimer_ns,
            a.cupti_own_minus_anchored_ns,
            p.device_anchor_error_ns
        );
        // blocking and async time every GEMM they launch (fill and overlap calibrate theirs untimed first)
        if !["blocking", "async"].contains(&p.phase.name()) {
            continue;
        }
        let tol = a.error_ns + p.device_anchor_error_ns.unwrap_or(0);
        let compute: Vec<(u64, u64)> = shard
            .body
            .compute
            .iter()
            .filter(|c| c.phase == p.phase)
            .map(|c| (c.start_ns.saturating_sub(tol), c.end_ns + tol))
            .collect();
        if compute.is_empty() {
            continue;
        }
        let gemms: Vec<&KernelEvent> =
            shard.body.kernels.iter().filter(|k| k.phase == p.phase && k.kind == KernelKind::Compute).collect();
        let outside: Vec<String> = gemms
            .iter()
            .filter(|k| !compute.iter().any(|&(s, e)| k.start_ns >= s && k.end_ns <= e))
            .map(|k| format!("{} [{}, {}]", name(k), k.start_ns, k.end_ns))
            .collect();
        assert!(
            outside.is_empty(),
            "phase {}: {} of {} GEMM kernels outside every compute interval (±{tol} ns): {:?}",
            p.phase,
            outside.len(),
            gemms.len(),
            &outside[..outside.len().min(3)]
        );
    }
}

/// `--comm-stream current` (the default): blocking collectives run on the
/// compute stream, each with its device interval and no cross-stream wait
/// (async keeps its own stream and its measured waits), eagerly and captured
/// into a CUDA graph; the choice is recorded in the shard.
#[test]
fn cuda_blocking_on_the_compute_stream_eager_and_graph() {
    if !gpu_or_skip() {
        return;
    }
    for graph in [false, true] {
        let d = tempfile::tempdir().unwrap();
        let mut args = vec![
            "--backend",
            "cuda",
            "--phases",
            "blocking,async",
            "--model-dims",
            "2048,8192,4",
            "--tokens",
            "8",
            "--check",
            "2",
        ];
        if graph {
            args.push("--graph");
        }
        let run = run_rank_with(1, d.path(), &args);
        let shard = Shard::read(&run.join("rank-00000.shard")).unwrap();
        assert_eq!(shard.header.workload.comm_stream, CommStream::Current);
        let blocking: Vec<_> = shard.body.collectives.iter().filter(|e| e.phase == Phase::Blocking).collect();
        if graph {
            let pr = shard.header.phases.iter().find(|r| r.phase == Phase::Blocking).unwrap();
            assert!(pr.graph.is_some() && blocking.is_empty(), "graph mode times tokens only");
            assert_eq!(shard.body.tokens.iter().filter(|t| t.phase == Phase::Blocking && !t.warmup).count(), 8);
        } else {
            assert!(
                !blocking.is_empty()
                    && blocking.iter().all(|e| e.device_start_ns.is_some() && e.device_end_ns.is_some())
            );
            let asynchronous = shard.body.collectives.iter().filter(|e| e.phase == Phase::Async).count();
            assert_eq!(shard.body.device_waits.len(), asynchronous, "waits measured for async only");
        }
        let s = join_json(&run);
        eprintln!(
            "blocking on the compute stream, graph={graph}: token p50 {} us",
            phase(&s, "blocking")["token_median_us"]
        );
    }
}

#[test]
fn cuda_bogus_nccl_path_is_one_clear_line_before_mpi() {
    if !gpu_or_skip() {
        return;
    }
    let o = cc(&["rank", "--backend", "cuda", "--nccl-lib", "/nonexistent/libnccl.so.2"]);
    assert!(!o.status.success());
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(err.contains("/nonexistent/libnccl.so.2: no such file") && err.trim().lines().count() == 1, "{err}");
}

/// `bench-overhead` failing once MPI is up (here: no such NCCL library)
/// prints the rank's error and ends the job, as `rank` does, instead of
/// returning it through MPI's finalization.
#[test]
fn cuda_bench_overhead_error_after_mpi_start_is_printed_and_ends_the_job() {
    if !gpu_or_skip() {
        return;
    }
    let o = mpirun(
        1,
        &[
            "bench-overhead",
            "--backend",
            "cuda",
            "--nccl-lib",
            "/nonexistent/libnccl.so.2",
            "--reps",
            "1",
            "--iters",
            "10",
        ],
    );
    assert!(!o.status.success());
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(err.contains("bench-overhead rank 0: error") && err.contains("/nonexistent/libnccl.so.2"), "{err}");
}

#[test]
fn cuda_two_ranks_kernels_show_no_overlap_in_blocking() {
    if !gpu_or_skip() {
        return;
    }
    let gpus = cuda::probe_devices().unwrap_or(0);
    if gpus < 2 {
        eprintln!("SKIPPED: needs 2 GPUs, this host has {gpus}");
        return;
    }
    let d = tempfile::tempdir().unwrap();
    let run = run_rank_with(
        2,
        d.path(),
        &[
            "--backend",
            "cuda",
            "--cupti",
            "--phases",
            "blocking,overlap",
            "--tokens",
            "16",
            "--model",
            "synthetic",
            "--layers",
            "16",
        ],
    );
    let shard = Shard::read(&run.join("rank-00000.shard")).unwrap();
    let cupti = shard.header.device.facts.iter().find(|f| f.0 == "cupti").map(|f| f.1.clone()).unwrap_or_default();
    if !cupti.starts_with("kernel activity records") {
        eprintln!("SKIPPED: CUPTI unavailable on this host ({cupti})");
        return;
    }
    assert!(shard.body.kernels.iter().any(|k| k.kind == KernelKind::Nccl), "NCCL kernels recorded");
    // arrivals: every blocking collective's NCCL kernel start on both ranks, with the kernel anchors' bound
    let s = join_json(&run);
    let b = phase(&s, "blocking");
    assert_eq!(
        b["arrivals_from_nccl_kernels"], b["collectives_per_rank"],
        "every collective pairs with its NCCL kernel: {b}"
    );
    eprintln!(
        "blocking: skew p50 {} us, bound p50 {} us (NCCL kernel starts)",
        b["skew_median_us"], b["skew_bound_median_us"]
    );
    let v: serde_json::Value = serde_json::from_str(&ok(&cc(&["overlap", "--json", run.to_str().unwrap()]))).unwrap();
    for r in v.as_array().unwrap() {
        assert_eq!(r["source"], "cupti-kernels", "{r}");
        let ov = r["report"]["overlap_us"].as_f64().unwrap();
        match r["phase"].as_str().unwrap() {
            // stream dependencies forbid it: a guarantee, asserted
            "blocking" => assert_eq!(ov, 0.0, "{r}"),
            // a measurement: whether the GEMMs placed between issue and wait
            // meet the NCCL kernel depends on arrival and gap sizes; reported
            _ => eprintln!("overlap phase, rank {}: {ov:.1} us of NCCL kernel time under GEMM kernels", r["rank"]),
        }
    }
}

#[test]
fn cuda_hung_peer_ends_the_job_with_a_message_not_a_hang() {
    // two ranks need two GPUs: NCCL refuses two ranks on one device
    let Some(d) = two_gpus_and_a_dir() else { return };
    let t0 = std::time::Instant::now();
    let o = mpirun(
        2,
        &[
            "rank",
            "-q",
            "--backend",
            "cuda",
            "--phases",
            "blocking",
            "--tokens",
            "4",
            "--model",
            "synthetic",
            "--layers",
            "4",
            "--collective-timeout-s",
            "5",
            "--fault",
            "hang:1:10",
            "--out",
            d.path().to_str().unwrap(),
        ],
    );
    assert!(!o.status.success());
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(err.contains("--collective-timeout") && err.contains("communicator was aborted"), "{err}");
    assert!(t0.elapsed().as_secs() < 120, "the job ended by itself: {:?}", t0.elapsed());
}

/// A JSON file's value.
fn json(path: impl AsRef<std::path::Path>) -> serde_json::Value {
    serde_json::from_slice(&std::fs::read(path).unwrap()).unwrap()
}

/// `replay-trace TRACE --backend cuda --check --pace PACE --out OUT` on `ranks` ranks; its output, once it succeeded.
fn replay_on_gpu(ranks: u32, trace: &std::path::Path, pace: &str, out: &std::path::Path) -> String {
    let (trace, out) = (trace.to_str().unwrap(), out.to_str().unwrap());
    ok(&mpirun(ranks, &["replay-trace", trace, "--backend", "cuda", "--check", "--pace", pace, "--out", out]))
}

/// A scratch directory where two GPUs are usable; `None` (with the reason printed) elsewhere.
fn two_gpus_and_a_dir() -> Option<tempfile::TempDir> {
    if !gpu_or_skip() {
        return None;
    }
    if cuda::probe_devices().unwrap_or(0) < 2 {
        eprintln!("SKIPPED: needs two GPUs");
        return None;
    }
    Some(tempfile::tempdir().unwrap())
}

#[test]
fn cuda_two_ranks_llama3_8b_decode_in_bf16_checks_its_sums() {
    let Some(d) = two_gpus_and_a_dir() else {
        return;
    };
    // the default workload on cuda is llama3-8b: 32 layers, bf16 all-reduces of 4096 elements
    let run = run_rank_with(
        2,
        d.path(),
        &["--backend", "cuda", "--phases", "isolated,blocking,async", "--tokens", "8", "--iters", "5", "--check", "8"],
    );
    let s = join_json(&run);
    assert_eq!(phase(&s, "blocking")["collectives_per_rank"], 8 * 64);
    let shard = Shard::read(&run.join("rank-00001.shard")).unwrap();
    let m = shard.header.workload.model.as_ref().unwrap();
    assert_eq!((m.shape.name.as_str(), m.tensor_parallel, m.weight_sets), ("llama3-8b", 2, 32));
    assert_eq!(shard.header.workload.gemm_dtype, Some(shard::Dtype::Bf16));
    assert!(shard.body.collectives.iter().all(|e| e.dtype == shard::TraceDtype::Bf16 && e.bytes == 8192));
    assert_eq!(shard.body.collectives.iter().filter(|e| e.checked && e.phase == Phase::Blocking).count(), 8);
    let fact = |k: &str| shard.header.device.facts.iter().find(|f| f.0 == k).map(|f| f.1.clone()).unwrap_or_default();
    assert!(fact("collective").contains("bf16"), "{}", fact("collective"));
    eprintln!(
        "blocking token p50 {} us, p99 {} us",
        phase(&s, "blocking")["token_median_us"],
        phase(&s, "blocking")["token_p99_us"]
    );
}

#[test]
fn cuda_two_ranks_graph_mode_launches_one_graph_per_token() {
    let Some(d) = two_gpus_and_a_dir() else {
        return;
    };
    let run = run_rank_with(
        2,
        d.path(),
        &[
            "--backend",
            "cuda",
            "--graph",
            "--phases",
            "isolated,blocking,async",
            "--tokens",
            "16",
            "--iters",
            "5",
            "--check",
            "1",
        ],
    );
    let s = join_json(&run);
    let shard = Shard::read(&run.join("rank-00000.shard")).unwrap();
    for p in [Phase::Blocking, Phase::Async] {
        let pr = shard.header.phases.iter().find(|r| r.phase == p).unwrap();
        let g = pr.graph.as_ref().expect("graph mode is recorded per phase");
        assert_eq!((g.collectives_per_token, g.gemms_per_token, g.launches, g.checked), (64, 128, 18, 1), "{p}");
        assert_eq!(pr.collectives, 0, "no per-collective events in graph mode");
        let toks: Vec<_> = shard.body.tokens.iter().filter(|t| t.phase == p && !t.warmup).collect();
        assert_eq!(toks.len(), 16);
        assert!(toks.iter().all(|t| t.end_ns > t.start_ns));
        eprintln!("{p} graph token p50 {} us", phase(&s, p.name())["token_median_us"]);
    }
    assert!(shard.header.unmeasured.iter().any(|u| u.field == "collectives (graph mode)"));
    assert!(
        shard.body.collectives.iter().all(|e| e.phase == Phase::Isolated),
        "only isolated records collectives under --graph"
    );
}

#[test]
fn cuda_isolated_sweep_runs_back_to_back_and_counts_wrong_elements() {
    if !gpu_or_skip() {
        return;
    }
    let gpus = cuda::probe_devices().unwrap_or(0);
    let n = gpus.clamp(1, 2);
    let d = tempfile::tempdir().unwrap();
    let run = run_rank_with(
        n,
        d.path(),
        &[
            "--backend",
            "cuda",
            "--phases",
            "isolated",
            "--model",
            "synthetic",
            "-b",
            "8",
            "-e",
            "1M",
            "-f",
            "4",
            "-n",
            "20",
            "-w",
            "3",
            "--check",
            "1",
        ],
    );
    let shard = Shard::read(&run.join("rank-00000.shard")).unwrap();
    let cupti = shard.header.device.facts.iter().find(|f| f.0 == "cupti").map(|f| f.1.clone()).unwrap_or_default();
    assert!(cupti.starts_with("off"), "CUPTI stays off unless asked for: {cupti}");
    let ev = &shard.body.collectives;
    assert_eq!(
        ev.len(),
        9 * 23,
        "8 B .. 512 KiB by 4 (the next, 2 MiB, is past -e 1M) is 9 sizes of 3 + 20 iterations"
    );
    assert!(ev.iter().all(|e| e.device_start_ns.is_some() && e.device_end_ns.is_some()));
    // back to back: within a size's timed loop each collective ends where the next one starts (the
    // warm-ups are separated from it by a synchronize and a barrier)
    assert_eq!(ev.iter().filter(|e| e.warmup).count(), 9 * 3);
    let ev_timed: Vec<_> = ev.iter().filter(|e| !e.warmup).collect();
    for w in ev_timed.windows(2).filter(|w| w[0].bytes == w[1].bytes) {
        assert_eq!(w[0].device_end_ns, w[1].device_start_ns, "seq {}", w[0].seq);
    }
    assert_eq!(shard.header.checks.len(), 9, "one check per size, after its loop");
    assert!(shard.header.checks.iter().all(|c| c.wrong_elements == 0));
    let s = join_json(&run);
    let rows = s["isolated_sizes"].as_array().unwrap();
    assert_eq!(rows.len(), 9);
    assert!(rows.iter().all(|r| r["wrong_elements"] == 0 && r["busbw_gbps"].as_f64().unwrap() > 0.0), "{rows:?}");
    // --graph: the timed iterations run inside one CUDA graph per size, still one interval each, back to back
    let graph = run_rank_with(
        n,
        &d.path().join("g"),
        &[
            "--backend",
            "cuda",
            "--graph",
            "--phases",
            "isolated",
            "--model",
            "synthetic",
            "-b",
            "1K",
            "-e",
            "64K",
            "-f",
            "8",
            "-n",
            "30",
            "-w",
            "2",
            "--check",
            "1",
            "--run-id",
            "graph",
        ],
    );
    let gs = Shard::read(&graph.join("rank-00000.shard")).unwrap();
    let timed: Vec<_> = gs.body.collectives.iter().filter(|e| !e.warmup).collect();
    assert_eq!(timed.len(), 3 * 30);
    assert!(gs.body.collectives.iter().all(|e| e.device_start_ns.is_some() && e.device_end_ns.is_some()));
    for w in timed.windows(2).filter(|w| w[0].bytes == w[1].bytes) {
        assert_eq!(w[0].device_end_ns, w[1].device_start_ns);
        assert_eq!(w[0].host_issue_ns, w[1].host_issue_ns, "one launch per size");
    }
    assert!(gs.header.unmeasured.iter().any(|u| u.field.contains("--graph")));
    assert!(gs.header.checks.iter().all(|c| c.wrong_elements == 0) && gs.header.checks.len() == 3);
    // a wrong result is counted, kept on disk, and fails the job after the shards are written
    let o = mpirun(
        n,
        &[
            "rank",
            "-q",
            "--backend",
            "cuda",
            "--phases",
            "isolated",
            "--model",
            "synthetic",
            "-b",
            "64",
            "-e",
            "64",
            "-n",
            "5",
            "-w",
            "1",
            "--check",
            "1",
            "--fault",
            "wrong-sum:0",
            "--run-id",
            "bad",
            "--out",
            d.path().to_str().unwrap(),
        ],
    );
    assert!(!o.status.success());
    assert!(String::from_utf8_lossy(&o.stderr).contains("1 wrong elements"), "{}", String::from_utf8_lossy(&o.stderr));
    let bad = Shard::read(&d.path().join("bad").join("rank-00000.shard")).unwrap();
    assert_eq!(bad.header.checks[0].wrong_elements, 1);
}

/// The imported fixture for `ranks` ranks: the whole trace on two GPUs; on
/// one, rank 0's all-reduces and broadcast on one-member groups (NCCL refuses
/// two ranks on one GPU; the other kinds' recorded counts are a 2-rank group's).
fn fixture_trace(dir: &std::path::Path, ranks: u32) -> std::path::PathBuf {
    let data = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/pytorch-2.11-tp2-h200");
    let k = dir.join("k.json");
    let files: Vec<String> =
        (0..2).map(|r| data.join(format!("kineto.rank-{r}.json.gz")).to_str().unwrap().to_string()).collect();
    ok(&cc(&["import", "kineto", &files[0], &files[1], "-o", k.to_str().unwrap()]));
    if ranks == 2 {
        return k;
    }
    let mut t = json(&k);
    t["world_size"] = 1.into();
    for g in t["groups"].as_array_mut().unwrap() {
        g["members"] = serde_json::json!([0]);
    }
    t["ranks"].as_array_mut().unwrap().truncate(1);
    t["ranks"][0]["collectives"]
        .as_array_mut()
        .unwrap()
        .retain(|c| c["kind"] == "all_reduce" || c["kind"] == "broadcast");
    let one = dir.join("one-rank.json");
    std::fs::write(&one, serde_json::to_vec(&t).unwrap()).unwrap();
    one
}

/// `replay-trace --pace workload` on the GPU: the recorded compute re-created
/// by the spinning kernel, collectives checked, device intervals in stream
/// order, and the pass at least as long as the compute it re-created (less
/// the calibrated launch excess per kernel).
#[test]
fn cuda_workload_pace_recreates_the_recorded_compute() {
    if !gpu_or_skip() {
        return;
    }
    let ranks = if cuda::probe_devices().unwrap_or(0) >= 2 { 2 } else { 1 };
    eprintln!("workload pace on {ranks} rank(s)");
    let d = tempfile::tempdir().unwrap();
    let t = fixture_trace(d.path(), ranks);
    let out = d.path().join("wl");
    eprintln!("{}", replay_on_gpu(ranks, &t, "workload", &out));
    for rank in 0..ranks {
        let file = json(out.join(format!("replay-trace.rank-{rank}.json")));
        let recs: Vec<serde_json::Value> = file["records"].as_array().unwrap().clone();
        let w = json(out.join(format!("replay-trace.rank-{rank}.workload.json")));
        assert_eq!(w["backend"], "cuda");
        let spin = &w["spin"];
        let excess = spin["excess_ns"].as_f64().unwrap();
        for p in spin["points"].as_array().unwrap().iter().filter(|p| p["recorded_ns"].as_u64().unwrap() >= 20_000) {
            let (want, got) = (p["recorded_ns"].as_f64().unwrap(), p["achieved_ns"].as_f64().unwrap());
            assert!((got - want).abs() <= 0.05 * want, "calibrated spin of {want} ns took {got} ns");
        }
        // consecutive kernels with nothing waiting between them are one launch
        let (kernels, launches, ns) = (
            w["compute_ops"].as_f64().unwrap(),
            w["compute_launches"].as_f64().unwrap(),
            w["compute_recorded_ns"].as_f64().unwrap(),
        );
        assert!(launches >= 1.0 && launches < kernels, "the fixture's runs of short kernels merge: {w}");
        assert!(w["pass_device_ns"].as_f64().unwrap() >= ns - launches * excess, "{w}");
        let mut prev_end = 0;
        for r in &recs {
            let (s, e) = (r["device_start_ns"].as_u64().unwrap(), r["device_end_ns"].as_u64().unwrap());
            // the fixture's point-to-point ran on a stream of its own
            let p2p = r["kind"] == "send" || r["kind"] == "recv";
            assert!(s <= e && (p2p || s >= prev_end), "collectives on one stream run in order: {r}");
            if !p2p {
                prev_end = e;
            }
            assert_eq!(r["checked"], r["kind"] != "send", "{r}");
        }
    }
}

/// Two recorded streams on one GPU: a collective the source ran beside a
/// long kernel on another stream runs beside it here too (no wait invented),
/// and the kernel recorded after the collective ended waits for it.
#[test]
fn cuda_workload_pace_keeps_recorded_concurrency_across_streams() {
    if !gpu_or_skip() {
        return;
    }
    let d = tempfile::tempdir().unwrap();
    let one = fixture_trace(d.path(), 1);
    let mut t = json(&one);
    let kernel = |stream: u64, start: u64, dur: u64| {
        serde_json::json!({
            "name": "k",
            "stream": stream,
            "device_start_ns": start,
            "duration_ns": dur
        })
    };
    let colls = t["ranks"][0]["collectives"].as_array_mut().unwrap();
    colls.truncate(2);
    // stream 7: a 200 µs kernel from 0; stream 20: the collective at 10-50 µs, beside it
    colls[0]["stream"] = 20.into();
    colls[0]["device"]["start_ns"] = 10_000.into();
    colls[0]["device"]["end_ns"] = 50_000.into();
    colls[0]["compute_before"] = serde_json::json!([kernel(7, 0, 200_000)]);
    // stream 7 again: a 20 µs kernel at 250 µs (after the collective ended), then the second collective
    colls[1]["stream"] = 7.into();
    colls[1]["device"]["start_ns"] = 300_000.into();
    colls[1]["device"]["end_ns"] = 310_000.into();
    colls[1]["compute_before"] = serde_json::json!([kernel(7, 250_000, 20_000)]);
    let two = d.path().join("two-streams.json");
    std::fs::write(&two, serde_json::to_vec(&t).unwrap()).unwrap();
    let out = d.path().join("wl");
    replay_on_gpu(1, &two, "workload", &out);
    let file = json(out.join("replay-trace.rank-0.json"));
    let recs: Vec<serde_json::Value> = file["records"].as_array().unwrap().clone();
    let w = json(out.join("replay-trace.rank-0.workload.json"));
    assert_eq!(w["streams"], serde_json::json!(["7", "20"]), "{w}");
    assert_eq!(
        w["cross_stream_waits"], 2,
        "the later kernel and collective wait for the first collective; nothing waits for the long kernel"
    );
    let start = |i: usize| recs[i]["device_start_ns"].as_u64().unwrap();
    eprintln!(
        "first collective starts {} ns after the gate, second {} ns; pass {} ns",
        start(0),
        start(1),
        w["pass_device_ns"]
    );
    assert!(start(0) < 100_000, "the first collective ran beside the 200 µs kernel: {}", start(0));
    assert!(start(1) >= 200_000, "the second collective followed the long kernel on its stream: {}", start(1));
    assert!(recs.iter().all(|r| r["checked"] == true));
}

/// `--graph` with fill and overlap: one token of an imported trace, its gaps
/// as calibrated GEMM units, captured once and launched per token; checked.
#[test]
fn cuda_fill_and_overlap_run_as_graphs_from_a_trace() {
    if !gpu_or_skip() {
        return;
    }
    let d = tempfile::tempdir().unwrap();
    let t = fixture_trace(d.path(), 1);
    let run = run_rank_with(
        1,
        &d.path().join("g"),
        &[
            "--backend",
            "cuda",
            "--graph",
            "--phases",
            "fill,overlap",
            "--trace",
            t.to_str().unwrap(),
            "--trace-allreduce-only",
            "--dtype",
            "bf16",
            "--model-dims",
            "1024,4096,2",
            "--tokens",
            "6",
            "--warmup-tokens",
            "1",
            "--check",
            "1",
        ],
    );
    let shard = Shard::read(&run.join("rank-00000.shard")).unwrap();
    for p in [Phase::Fill, Phase::Overlap] {
        let pr = shard.header.phases.iter().find(|r| r.phase == p).unwrap();
        let g = pr.graph.as_ref().expect("graph mode is recorded per phase");
        // the one-rank trace keeps rank 0's 32 all-reduces
        assert_eq!((g.collectives_per_token, g.launches, g.checked), (32, 7, 1), "{p}: {g:?}");
        assert!(g.gemms_per_token > 0 && g.timing.contains("token 1"), "{p}: {g:?}");
        let toks: Vec<_> = shard.body.tokens.iter().filter(|t| t.phase == p && !t.warmup).collect();
        assert_eq!(toks.len(), 6);
        assert!(toks.iter().all(|t| t.end_ns > t.start_ns));
    }
    let s = join_json(&run);
    eprintln!(
        "graph fill token p50 {} us, overlap {} us",
        phase(&s, "fill")["token_median_us"],
        phase(&s, "overlap")["token_median_us"]
    );
    // a trace phase that paces by host time is refused under --graph
    let o = mpirun(
        1,
        &[
            "rank",
            "--backend",
            "cuda",
            "--graph",
            "--phases",
            "replay",
            "--trace",
            t.to_str().unwrap(),
            "--trace-allreduce-only",
            "--out",
            d.path().join("r").to_str().unwrap(),
        ],
    );
    assert!(!o.status.success() && String::from_utf8_lossy(&o.stderr).contains("paces collectives by host time"));
}

/// Trace phases on the GPU walk every kind of the trace (issue 29 item 3):
/// without `--trace-allreduce-only` the one-rank fixture's broadcast runs
/// through the NCCL trace executor beside the 32 all-reduces, is checked, and
/// nothing is left out of a pass.
#[test]
fn cuda_trace_phases_run_every_kind_of_the_trace() {
    if !gpu_or_skip() {
        return;
    }
    let d = tempfile::tempdir().unwrap();
    let t = fixture_trace(d.path(), 1);
    let run = run_rank_with(
        1,
        &d.path().join("k"),
        &[
            "--backend",
            "cuda",
            "--phases",
            "replay",
            "--trace",
            t.to_str().unwrap(),
            "--dtype",
            "bf16",
            "--tokens",
            "3",
            "--warmup-tokens",
            "1",
            "--check",
            "1",
        ],
    );
    let s = join_json(&run);
    // 33 collectives a token over 3 tokens, the broadcast's 2 MiB among them
    let p = phase(&s, "replay");
    assert_eq!((p["collectives_per_rank"].as_u64(), p["sizes_bytes"]["2097152"].as_u64()), (Some(99), Some(3)), "{p}");
    let shard = Shard::read(&run.join("rank-00000.shard")).unwrap();
    let pr = shard.header.phases.iter().find(|r| r.phase == Phase::Replay).unwrap();
    match pr.trace.as_ref() {
        Some(TraceOrigin::Imported { collectives_per_pass, left_out_per_pass, kinds, .. }) => {
            assert_eq!(
                (*collectives_per_pass, *left_out_per_pass),
                (33, 0),
                "32 all-reduces and the broadcast, nothing left out"
            );
            let b = kinds
                .iter()
                .find(|k| serde_json::to_value(k.kind).unwrap() == "broadcast")
                .expect("the broadcast is counted");
            assert_eq!((b.run_per_pass, b.left_out_per_pass), (1, 0));
        }
        other => panic!("the replay phase walked the imported trace: {other:?}"),
    }
}

/// The kind table walked on the NCCL trace executor (the CPU side is
/// `tests/commtrace.rs`): every row but the point-to-point ones runs on a
/// one-rank communicator with its result checked; sends and receives need a
/// peer on a second GPU and are named as not run.
#[test]
fn cuda_replay_runs_every_kind_of_the_table_checked() {
    if !gpu_or_skip() {
        return;
    }
    use commcanary::core::collective::KINDS;
    let d = tempfile::tempdir().unwrap();
    let one = json(fixture_trace(d.path(), 1));
    let (v, rows) = with_every_kind(&one, false, true);
    let left_out: Vec<&str> = KINDS.iter().filter(|r| !rows.contains(&r.name)).map(|r| r.name).collect();
    eprintln!(
        "NOT RUN here: {left_out:?} (point-to-point: needs two GPUs; gather, scatter and the scans: no NCCL \
        operation, refused before launch)"
    );
    let t = d.path().join("every-kind.json");
    std::fs::write(&t, serde_json::to_vec(&v).unwrap()).unwrap();
    let out = d.path().join("replay");
    replay_on_gpu(1, &t, "none", &out);
    let f = json(out.join("replay-trace.rank-0.json"));
    let recs = f["records"].as_array().unwrap();
    for row in KINDS.iter().filter(|r| rows.contains(&r.name)) {
        let ran: Vec<&serde_json::Value> = recs.iter().filter(|r| r["kind"] == row.name).collect();
        assert!(!ran.is_empty(), "{} did not run on NCCL", row.name);
        // one rank is every root: every result that lands somewhere is checked here
        if row.lands != Lands::Nowhere {
            assert!(ran.iter().all(|r| r["checked"] == true), "{} ran unchecked: {ran:?}", row.name);
        }
    }
}

/// One rank's side of [`cuda_own_path_runs_every_kind_of_the_table_checked`],
/// run under mpirun (a no-op when run alone).
#[test]
#[ignore = "one rank's side: the outer test runs it under mpirun"]
fn cuda_own_path_rank() {
    use commcanary::backend::cuda::{CudaBackend, CudaOptions};
    use mpi::topology::Communicator;
    own_path_inner(|world, plan| {
        let rank = world.rank() as u32;
        let o = CudaOptions {
            local_rank: rank,
            nccl_path: std::path::Path::new("libnccl.so.2"),
            events_hint: 64,
            timeout: std::time::Duration::from_secs(60),
            gpu: None,
            cupti: false,
        };
        CudaBackend::new(world, &plan, RankClock::new(rank, &[]), o).unwrap()
    });
}

/// Every other kind of the isolated sweep runs back to back through the same
/// world calls as the all-reduce (shard format 10): every record has its
/// device interval, each timed loop's intervals touch, one check per size
/// finds nothing wrong, and the same sweep in CUDA graphs does too. Another
/// reduction than the sum still runs on the executor, its device intervals
/// unmeasured and said so.
#[test]
fn cuda_every_kind_sweeps_back_to_back_with_device_intervals_and_graphs() {
    if !gpu_or_skip() {
        return;
    }
    let n = cuda::probe_devices().unwrap_or(0).clamp(1, 2);
    let d = tempfile::tempdir().unwrap();
    for kind in ["all_gather", "reduce_scatter", "broadcast", "reduce", "all_to_all"] {
        for graph in [false, true] {
            let out = d.path().join(format!("{kind}-{graph}"));
            let mut args = vec![
                "--backend",
                "cuda",
                "--phases",
                "isolated",
                "--collective",
                kind,
                "-b",
                "1K",
                "-e",
                "64K",
                "-f",
                "8",
                "-n",
                "10",
                "-w",
                "2",
            ];
            args.extend(["--check", "1"]);
            if graph {
                args.push("--graph");
            }
            let run = run_rank_with(n, &out, &args);
            let shard = Shard::read(&run.join("rank-00000.shard")).unwrap();
            assert_eq!(shard.header.format_version, 10);
            let ev = &shard.body.collectives;
            assert_eq!(ev.len(), 3 * 12, "{kind}: 1K, 8K, 64K of 2 + 10 iterations");
            assert!(
                ev.iter().all(|e| e.group != 0 && e.device_start_ns.is_some() && e.device_end_ns.is_some()),
                "{kind} graph={graph}"
            );
            let timed: Vec<_> = ev.iter().filter(|e| !e.warmup).collect();
            for w in timed.windows(2).filter(|w| w[0].bytes == w[1].bytes) {
                assert_eq!(w[0].device_end_ns, w[1].device_start_ns, "{kind} graph={graph}: back to back");
            }
            let checks = &shard.header.checks;
            assert!(
                !checks.is_empty() && checks.len() <= 3 && checks.iter().all(|c| c.wrong_elements == 0),
                "{kind}: {checks:?}"
            );
            assert!(
                !shard.header.unmeasured.iter().any(|u| u.field.starts_with("isolated")),
                "{kind}: {:?}",
                shard.header.unmeasured
            );
        }
    }
    let run = run_rank_with(
        n,
        &d.path().join("max"),
        &[
            "--backend",
            "cuda",
            "--phases",
            "isolated",
            "--collective",
            "all_reduce",
            "--op",
            "max",
            "-b",
            "1K",
            "-e",
            "1K",
            "-n",
            "5",
            "-w",
            "1",
        ],
    );
    let shard = Shard::read(&run.join("rank-00000.shard")).unwrap();
    assert!(shard.body.collectives.iter().all(|e| e.device_start_ns.is_none()), "max runs on the executor");
    assert!(shard.header.unmeasured.iter().any(|u| u.field.starts_with("isolated")), "{:?}", shard.header.unmeasured);
}

/// The kind table walked on the CUDA backend's own path (`Backend::enqueue`,
/// NCCL on the world communicator; the CPU side is `tests/own_path.rs`): on
/// one GPU every row, the ring's send and receive to itself included, started
/// and waited for, back to back and in a CUDA graph, each with its device
/// interval and its result checked, and a spoiled all-reduce failing its check.
#[test]
fn cuda_own_path_runs_every_kind_of_the_table_checked() {
    if !gpu_or_skip() {
        return;
    }
    let stdout = own_path_mpirun("cuda_own_path_rank", 1);
    // every kind also ran in a CUDA graph, and back to back with its device interval (asserted inside)
    for row in collective::KINDS.into_iter().filter(|r| !r.replay_only) {
        let key = format!("kind={} ", row.name);
        assert!(stdout.lines().any(|l| l.contains(&key) && l.contains(" timing=Graph ")), "{key}in a graph: {stdout}");
    }
}
