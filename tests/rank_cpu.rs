//! The per-rank program on the CPU backend under real mpirun: shards, join, checks.
mod common;
use commcanary::backend::cuda;
use commcanary::core::fsutil;
use commcanary::core::workload::Phase;
use commcanary::evidence::shard::{Shard, TraceOrigin};
use common::*;

#[test]
fn four_ranks_blocking_writes_four_shards_and_joins_128_per_rank() {
    let d = tempfile::tempdir().unwrap();
    let run =
        run_rank(4, d.path(), &["--phases", "blocking", "--tokens", "16", "--model", "synthetic", "--layers", "8"]);
    let shards: Vec<_> = std::fs::read_dir(&run)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n.ends_with(".shard"))
        .collect();
    assert_eq!(shards.len(), 4, "{shards:?}");
    let s = join_json(&run);
    assert_eq!(s["world_size"], 4);
    let b = phase(&s, "blocking");
    assert_eq!(b["collectives_per_rank"], 128);
    // sizes cycle 64 -> 128 -> 256 KiB (the cycle runs through the warm-up tokens too)
    let first: Vec<u64> = b["first_sizes_bytes"].as_array().unwrap().iter().map(|v| v.as_u64().unwrap()).collect();
    let cycle = [65536u64, 131072, 262144];
    let start = cycle.iter().position(|&c| c == first[0]).unwrap();
    for (i, v) in first.iter().enumerate() {
        assert_eq!(*v, cycle[(start + i) % 3], "{first:?}");
    }
    let sizes = b["sizes_bytes"].as_object().unwrap();
    let total: u64 = sizes.values().map(|v| v.as_u64().unwrap()).sum();
    assert_eq!(total, 128);
    assert_eq!(sizes.len(), 3);
    // every rank's shard: right rank, right events, consistent header
    for r in 0..4u32 {
        let shard = Shard::read(&run.join(format!("rank-{r:05}.shard"))).unwrap();
        assert_eq!(shard.header.rank, r);
        assert_eq!(shard.header.world_size, 4);
        let timed = shard.body.collectives.iter().filter(|e| e.phase == Phase::Blocking && !e.warmup).count();
        assert_eq!(timed, 128, "rank {r}");
        assert_eq!(shard.body.tokens.iter().filter(|t| !t.warmup).count(), 16, "rank {r} tokens");
        for e in &shard.body.collectives {
            assert!(
                e.host_issue_ns <= e.host_return_ns
                    && e.host_return_ns <= e.wait_start_ns
                    && e.wait_start_ns <= e.wait_end_ns
            );
            assert_eq!(e.device_start_ns, None, "cpu has no device timeline: unknown, not zero");
        }
        assert!(shard.header.unmeasured.iter().any(|u| u.field == "device_start_ns"));
        assert!(shard.header.identity.mpi_library.as_deref().unwrap_or("").contains("Open MPI"));
        assert_eq!(shard.header.identity_sha256, shard.header.identity.digest());
    }
}

#[test]
fn two_ranks_every_phase_and_ablation() {
    let d = tempfile::tempdir().unwrap();
    let phases = "isolated,blocking,async,replay,fill,overlap,async-wait-immediate,host-delay,membound-fill";
    let run = run_rank(
        2,
        d.path(),
        &[
            "--phases",
            phases,
            "--tokens",
            "6",
            "--model",
            "synthetic",
            "--layers",
            "4",
            "--iters",
            "5",
            "--check",
            "3",
            "--membound-bytes",
            "256KiB",
        ],
    );
    let s = join_json(&run);
    for p in phases.split(',') {
        let ps = phase(&s, p);
        let expect = if p == "isolated" { 3 * 5 } else { 6 * 4 };
        assert_eq!(ps["collectives_per_rank"], expect, "phase {p}");
    }
    for r in 0..2u32 {
        let shard = Shard::read(&run.join(format!("rank-{r:05}.shard"))).unwrap();
        let of = |p: Phase| shard.body.collectives.iter().filter(move |e| e.phase == p);
        assert!(of(Phase::Replay).all(|e| e.replay.is_some() && e.fill.is_none()));
        assert!(of(Phase::Fill).all(|e| e.fill.is_some()));
        assert!(of(Phase::Overlap).all(|e| e.fill.is_some()));
        assert!(of(Phase::Blocking).all(|e| e.replay.is_none() && e.fill.is_none()));
        let checked: usize = of(Phase::Blocking).filter(|e| e.checked).count();
        assert_eq!(checked, 3, "--check 3 validates three collectives per phase");
        // the fill quantum is calibrated and recorded
        let fill_run = shard.header.phases.iter().find(|p| p.phase == Phase::Fill).unwrap();
        assert!(fill_run.quantum_ns.unwrap() > 0);
        assert_eq!(fill_run.trace, Some(TraceOrigin::ThisRunBlocking));
        // overlap places GEMMs between issue and wait: some compute lies inside a collective's interval
        let overlap_gemms = shard.body.compute.iter().filter(|c| c.phase == Phase::Overlap).count();
        assert!(overlap_gemms > 0);
        let inside = shard
            .body
            .compute
            .iter()
            .filter(|c| c.phase == Phase::Overlap)
            .all(|c| of(Phase::Overlap).any(|e| e.host_return_ns <= c.start_ns && c.end_ns <= e.wait_start_ns));
        assert!(inside, "overlap GEMMs sit between issue and wait");
        let fill_outside = shard
            .body
            .compute
            .iter()
            .filter(|c| c.phase == Phase::Fill)
            .all(|c| !of(Phase::Fill).any(|e| e.host_issue_ns < c.start_ns && c.end_ns < e.wait_end_ns));
        assert!(fill_outside, "fill GEMMs run before the collective, never inside it");
        // tokens for every workload phase
        for p in Phase::all().iter().filter(|p| p.has_tokens()) {
            assert_eq!(shard.body.tokens.iter().filter(|t| t.phase == *p && !t.warmup).count(), 6, "{p}");
        }
    }
}

#[test]
fn replay_from_a_shared_trace_file() {
    let d = tempfile::tempdir().unwrap();
    let src = run_rank(
        2,
        &d.path().join("a"),
        &["--phases", "blocking", "--tokens", "4", "--model", "synthetic", "--layers", "3"],
    );
    let trace = d.path().join("trace.jsonl");
    ok(&cc(&["join", src.to_str().unwrap(), "--events-out", trace.to_str().unwrap()]));
    let run = run_rank(
        2,
        &d.path().join("b"),
        &[
            "--phases",
            "replay,fill",
            "--trace",
            trace.to_str().unwrap(),
            "--tokens",
            "1",
            "--model",
            "synthetic",
            "--layers",
            "1",
        ],
    );
    let s = join_json(&run);
    // the replay follows the trace (4 tokens x 3 layers), not this run's --tokens
    assert_eq!(phase(&s, "replay")["collectives_per_rank"], 12);
    let shard = Shard::read(&run.join("rank-00001.shard")).unwrap();
    let pr = shard.header.phases.iter().find(|p| p.phase == Phase::Replay).unwrap();
    match pr.trace.as_ref().unwrap() {
        TraceOrigin::File { sha256, source_rank, .. } => {
            assert_eq!(sha256, &fsutil::sha256_file(&trace).unwrap());
            assert_eq!(*source_rank, 1);
        }
        other => panic!("expected a file origin, got {other:?}"),
    }
}

#[test]
fn trace_phase_without_source_is_refused() {
    let d = tempfile::tempdir().unwrap();
    let o = mpirun(2, &["rank", "-q", "--backend", "cpu", "--phases", "replay", "--out", d.path().to_str().unwrap()]);
    let err = assert_refused(&o, "BAD_ARGUMENT");
    assert!(err.contains("needs a source trace"), "{err}");
}

#[test]
fn wrong_sum_fails_the_run_naming_rank_phase_and_sequence() {
    let d = tempfile::tempdir().unwrap();
    let o = mpirun(
        2,
        &[
            "rank",
            "-q",
            "--backend",
            "cpu",
            "--phases",
            "blocking",
            "--tokens",
            "2",
            "--model",
            "synthetic",
            "--layers",
            "2",
            "--check",
            "1",
            "--fault",
            "wrong-sum:1",
            "--out",
            d.path().to_str().unwrap(),
        ],
    );
    assert!(!o.status.success());
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(err.contains("result check failed on rank 1, phase blocking, group 0 seq"), "{err}");
}

#[test]
fn cuda_backend_without_gpu_is_one_clear_line() {
    if cuda::probe_devices().map(|n| n > 0).unwrap_or(false) {
        eprintln!("skipped: this machine has a GPU; the no-GPU message cannot be observed here");
        return;
    }
    let d = tempfile::tempdir().unwrap();
    let o = cc(&["rank", "--backend", "cuda", "--out", d.path().to_str().unwrap()]);
    assert!(!o.status.success());
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(err.trim().lines().count(), 1, "one line: {err}");
    assert!(err.contains("--backend cuda is unavailable"), "{err}");
    assert!(!err.contains("panicked") && !err.contains("backtrace"), "{err}");
}

#[test]
fn bad_arguments_are_refused_before_mpi() {
    for (args, code, needle) in [
        (vec!["rank", "--phases", "warp"], "BAD_ARGUMENT", "unknown phase"),
        (vec!["rank", "--model", "synthetic", "--sizes", "3B"], "OUT_OF_RANGE", "whole number of f32"),
        (vec!["rank", "--inject-delay", "rank=1,every=0,us=5"], "OUT_OF_RANGE", "every must be at least 1"),
        (vec!["rank", "--inject-clock", "rank=1,offset_ms=5"], "BAD_ARGUMENT", "unknown key"),
        (vec!["rank", "--inject-repeat", "0"], "OUT_OF_RANGE", "--inject-repeat 0 is outside its range (1 to 64)"),
    ] {
        let o = cc(&args);
        let err = assert_refused(&o, code);
        assert!(err.contains(needle), "{args:?}: {err}");
    }
}

#[test]
fn an_argument_error_under_mpirun_is_printed_once() {
    // every rank meets it; the lead prints it at once, another rank only
    // after a grace the launcher ends (and then tagged with its rank)
    let o = mpirun(2, &["rank", "--no-such-flag"]);
    assert!(!o.status.success());
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(
        err.matches("error: unexpected argument '--no-such-flag'").count(),
        1,
        "one untagged copy, the lead's: {err}"
    );
    let tagged = err.matches("(rank 1): unexpected argument").count();
    assert_eq!(err.matches("unexpected argument '--no-such-flag'").count(), 1 + tagged, "{err}");
}

#[test]
fn existing_run_is_never_overwritten() {
    let d = tempfile::tempdir().unwrap();
    let out = d.path().to_str().unwrap();
    let args = [
        "rank",
        "-q",
        "--backend",
        "cpu",
        "--phases",
        "blocking",
        "--tokens",
        "1",
        "--model",
        "synthetic",
        "--layers",
        "1",
        "--run-id",
        "fixed",
        "--out",
        out,
    ];
    ok(&mpirun(2, &args));
    let before = digests(&d.path().join("fixed"));
    let o = mpirun(2, &args);
    assert!(assert_refused(&o, "ALREADY_EXISTS").contains("never overwritten"));
    assert_eq!(digests(&d.path().join("fixed")), before);
}

/// `--inject-repeat N` (the known-bad control whose cost grows with the
/// machine's load) runs every group-0 all-reduce N times inside one recorded
/// collective, in every phase. Counted by Open MPI's own collective monitoring
/// (`coll/monitoring`: all-to-all operations per communicator), not by the
/// tool: N times the operations on the backend's communicator, the same
/// recorded events, the results still checked, and the header says so.
#[test]
fn inject_repeat_runs_every_world_all_reduce_n_times_counted_by_mpi() {
    let d = tempfile::tempdir().unwrap();
    let phases = "isolated,blocking,async,replay,fill,overlap";
    let shape = [
        "--backend",
        "cpu",
        "--phases",
        phases,
        "--tokens",
        "4",
        "--model",
        "synthetic",
        "--layers",
        "2",
        "--iters",
        "3",
        "--check",
        "2",
    ];
    let mut ops = Vec::new();
    let mut recorded = Vec::new();
    for n in ["1", "3"] {
        let (out, prof) = (d.path().join(format!("out{n}")), d.path().join(format!("mon{n}")));
        let env = [
            ("OMPI_MCA_pml_monitoring_enable", "1"),
            ("OMPI_MCA_pml_monitoring_enable_output", "3"),
            ("OMPI_MCA_pml_monitoring_filename", prof.to_str().unwrap()),
        ];
        let args = [&["rank", "-q", "--out", out.to_str().unwrap(), "--inject-repeat", n][..], &shape[..]].concat();
        ok(&mpirun_contexts(&[(2, &env[..], &args[..])]));
        let run = std::fs::read_dir(&out).unwrap().map(|e| e.unwrap().path()).find(|p| p.is_dir()).unwrap();
        let shard = Shard::read(&run.join("rank-00000.shard")).unwrap();
        assert_eq!(shard.header.repeat_injection, (n != "1").then_some(3), "the header records the control");
        assert!(
            !shard.header.checks.is_empty() && shard.header.checks.iter().all(|c| c.wrong_elements == 0),
            "every checked result is right"
        );
        recorded.push(shard.body.collectives.iter().filter(|e| e.group == 0).count());
        // rank 0's profile: the all-to-all operations on the communicator the backend duplicated from the world
        let text = std::fs::read_to_string(format!("{}.0.prof", prof.display()))
            .expect("coll/monitoring wrote rank 0's profile");
        // the backend duplicates the world twice: its collectives' communicator and its phase barriers' (2 per
        // phase); the profile lists both as "DUP FROM 0" in no fixed order, and the collectives' is the busier
        let a2a = |b: &str| -> usize {
            let l = b.lines().find(|l| l.starts_with("A2A")).unwrap_or_else(|| panic!("no A2A line in {b}"));
            l.split('\t')
                .nth(3)
                .and_then(|f| f.strip_suffix(" msgs sent"))
                .and_then(|f| f.parse().ok())
                .unwrap_or_else(|| panic!("{l}"))
        };
        let dups: Vec<usize> = text
            .split("\nD\t")
            .filter(|b| b.starts_with("MPI COMMUNICATOR") && b.contains("DUP FROM 0"))
            .map(a2a)
            .collect();
        assert_eq!(dups.len(), 2, "the collectives' and the barriers' duplicates of the world in {text}");
        let msgs = dups.into_iter().max().unwrap();
        ops.push(msgs);
    }
    assert_eq!(recorded[0], recorded[1], "the repeats are not recorded events");
    assert_eq!(
        ops[0], recorded[0],
        "without the control MPI saw one all-reduce per recorded collective: {ops:?} {recorded:?}"
    );
    assert_eq!(ops[1], 3 * recorded[1], "with it, three: {ops:?} {recorded:?}");
}
