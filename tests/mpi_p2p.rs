//! The trace phases run an MPI capture's point-to-point program: a real
//! program captured under mpirun (the capture tests' C program, and LAMMPS
//! where `lmp` is installed), imported, and run by `rank --trace ... --phases
//! replay` on 2 ranks: every pass of every rank's shard records that its
//! point-to-point operations and calls ran (as many as the trace's program
//! has), with their host time inside the pass's token, the receives checked
//! against their sends, and the collectives as recorded. `canary compile`
//! counts the point-to-point traffic it leaves out, and a format-1 artifact is
//! still read; `replay-trace --backend cuda` refuses such a trace. Structure
//! only, never timing. A missing tool (mpicc, lmp) prints SKIPPED and why.
mod common;
use commcanary::canary::artifact::{self, Canary};
use commcanary::evidence::commtrace::{p2p, CommTrace};
use commcanary::evidence::shard::{Shard, TraceOrigin, SHARD_FORMAT_VERSION};
use commcanary::evidence::trace;
use common::*;
use std::path::{Path, PathBuf};
use std::process::Command;

fn data(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/mpi_capture").join(name)
}

/// `app ITERS` (tests/data/mpi_capture/app.c) captured on 2 ranks and imported into `d/trace.json`, or why not.
fn c_program_trace(d: &Path) -> Result<PathBuf, String> {
    if !Path::new(&bin()).with_file_name("libcommcanary_capture.so").is_file() {
        return Err("the capture library is not built next to the binary (cargo build builds it)".into());
    }
    let app = d.join("app");
    let o = Command::new("mpicc")
        .args(["-O1", "-o"])
        .arg(&app)
        .arg(data("app.c"))
        .output()
        .map_err(|e| format!("mpicc: {e}"))?;
    if !o.status.success() {
        return Err(format!("mpicc cannot build app.c: {}", String::from_utf8_lossy(&o.stderr)));
    }
    let cap = d.join("cap");
    ok(&mpirun(2, &["capture", "-o", cap.to_str().unwrap(), "--", app.to_str().unwrap(), "4"]));
    let trace = d.join("trace.json");
    // the phases run what a shard holds: gather, scatter and the scans are left out, counted (import mpi --for-phases)
    ok(&cc(&["import", "mpi", cap.to_str().unwrap(), "-o", trace.to_str().unwrap(), "--for-phases"]));
    Ok(trace)
}

/// A small LAMMPS melt (4 x 6^3 atoms, 100 steps) captured on 2 ranks and imported, or `None` where LAMMPS is missing.
fn lammps_trace(d: &Path) -> Option<PathBuf> {
    if Command::new("lmp").arg("-h").output().is_err() {
        eprintln!("SKIPPED: LAMMPS (lmp) is not installed: bash scripts/setup.sh installs it");
        return None;
    }
    let input = Path::new(env!("CARGO_MANIFEST_DIR")).join("examples/lammps/in.lj-melt");
    let cap = d.join("cap");
    let args =
        ["-in", input.to_str().unwrap(), "-log", "none", "-screen", "none", "-var", "n", "6", "-var", "steps", "100"];
    let mut a = vec!["capture", "-o", cap.to_str().unwrap(), "--", "lmp"];
    a.extend_from_slice(&args);
    ok(&mpirun(2, &a));
    let trace = d.join("trace.json");
    // the phases run what a shard holds: gather, scatter and the scans are left out, counted (import mpi --for-phases)
    ok(&cc(&["import", "mpi", cap.to_str().unwrap(), "-o", trace.to_str().unwrap(), "--for-phases"]));
    Some(trace)
}

/// Run the replay phase of `trace` on 2 ranks (1 warm-up pass, 2 timed, every result checked)
/// and check what every shard records of the point-to-point program and the nonblocking
/// collectives; returns how many collectives the trace's ranks posted nonblocking.
fn replay_runs_the_point_to_point_program(trace: &Path, d: &Path) -> usize {
    let t = CommTrace::read(trace).unwrap();
    let m = t.mpi.as_ref().expect("an MPI capture");
    assert!(m.p2p.iter().all(|r| !r.is_empty()), "the program sends and receives on every rank");
    let plans = p2p::plans(&t).unwrap();
    let run = run_rank(
        2,
        &d.join("runs"),
        &[
            "--trace",
            trace.to_str().unwrap(),
            "--phases",
            "replay",
            "--warmup-tokens",
            "1",
            "--tokens",
            "2",
            "--check",
            "1000000",
        ],
    );
    for (r, plan) in plans.iter().enumerate() {
        let s = Shard::read(&run.join(format!("rank-{r:05}.shard"))).unwrap();
        assert_eq!(s.header.format_version, SHARD_FORMAT_VERSION);
        assert!(s.header.format_version >= 9, "point-to-point records came with format 9");
        let ph = &s.header.phases[0];
        let (ops, calls) = (m.p2p[r].len() as u32, plan.steps.len() as u32);
        let Some(TraceOrigin::Imported { p2p: Some(count), .. }) = &ph.trace else {
            panic!("rank {r}: {:?}", ph.trace)
        };
        assert_eq!(
            (count.operations_per_pass, count.left_out_per_pass, count.calls_per_pass),
            (ops, 0, calls),
            "rank {r}"
        );
        let sent: u64 = plan.ops.iter().filter(|o| o.send).map(|o| o.bytes).sum();
        assert_eq!(count.bytes_sent_per_pass, sent, "rank {r}");
        // every pass, warm-up included, ran the whole program
        assert_eq!(
            ph.p2p.iter().map(|p| (p.token, p.warmup)).collect::<Vec<_>>(),
            vec![(0, true), (1, false), (2, false)],
            "rank {r}"
        );
        let matched = plan.ops.iter().filter(|o| o.matched.is_some()).count() as u64;
        assert!(matched > 0, "rank {r}: the program's receives match known sends");
        for p in &ph.p2p {
            assert_eq!(
                (p.operations, p.calls),
                (ops, calls),
                "rank {r}, pass {}: as many operations and calls as the trace's program",
                p.token
            );
            assert!(p.host_ns > 0, "rank {r}, pass {}: the calls' time is measured", p.token);
            assert!(p.target_gap_ns.is_some() && p.actual_gap_ns.is_some(), "rank {r}: replay paces the calls");
            // the timed passes' receives were checked against the sends they matched
            assert_eq!(p.receives_checked, (!p.warmup).then_some(matched), "rank {r}, pass {}", p.token);
            // the pass's token spans its point-to-point time
            let tok = s.body.tokens.iter().find(|k| k.token == p.token).unwrap();
            assert!(
                tok.end_ns - tok.start_ns >= p.host_ns,
                "rank {r}, pass {}: token {} ns < point-to-point {} ns",
                p.token,
                tok.end_ns - tok.start_ns,
                p.host_ns
            );
        }
        // the collectives run as recorded, each pass
        let ran: Vec<_> = s
            .body
            .collectives
            .iter()
            .filter(|e| !e.warmup && e.token == Some(1))
            .map(|e| (e.kind, e.dtype, e.bytes))
            .collect();
        let want: Vec<_> = t.ranks[r].collectives.iter().map(|c| (c.kind, c.dtype, trace::event_bytes(c))).collect();
        assert_eq!(ran, want, "rank {r}: the collectives as recorded");
        // a nonblocking one was posted and completed by its own wait later, and checked after that wait; a blocking
        // one completed in its call
        let posted = m.collective_nonblocking.get(r).cloned().unwrap_or_default();
        let pass: Vec<_> = s.body.collectives.iter().filter(|e| !e.warmup && e.token == Some(1)).collect();
        for (i, e) in pass.iter().enumerate() {
            if posted.get(i) == Some(&true) {
                assert!(e.wait_end_ns > e.host_return_ns && e.checked, "rank {r}, collective {i}: {e:?}");
            } else if e.group != 0 {
                assert_eq!(e.wait_end_ns, e.host_return_ns, "rank {r}, collective {i}: {e:?}");
            }
        }
    }
    // and every member recorded every collective alike: the run joins, two timed passes to the warm-up's one
    let j = join_json(&run);
    let ph = &j["phases"][0];
    let (timed, warm) = (ph["collectives_per_rank"].as_u64().unwrap(), ph["warmup_collectives_per_rank"].as_u64());
    assert!(timed > 0 && Some(timed) == warm.map(|w| 2 * w), "{j}");
    m.collective_nonblocking.iter().map(|v| v.iter().filter(|&&b| b).count()).sum()
}

#[test]
fn the_c_program_s_point_to_point_runs_in_the_replay_phase_and_cuda_refuses_it() {
    let d = tempfile::tempdir().unwrap();
    let trace = match c_program_trace(d.path()) {
        Ok(t) => t,
        Err(why) => {
            eprintln!("SKIPPED: {why}");
            return;
        }
    };
    // app.c posts an MPI_Iallreduce every iteration
    assert!(replay_runs_the_point_to_point_program(&trace, d.path()) >= 8, "the C program's posts are in the trace");
    // the cuda executor has no point-to-point replay: refused before anything runs (before the GPU is looked for)
    let o = mpirun(
        2,
        &["replay-trace", trace.to_str().unwrap(), "-o", d.path().join("cuda").to_str().unwrap(), "--backend", "cuda"],
    );
    let e = assert_refused(&o, "BAD_ARGUMENT");
    assert!(e.contains("point-to-point operations") && e.contains("--backend cpu"), "{e}");
    assert!(!d.path().join("cuda").exists(), "nothing written");
}

#[test]
fn lammps_point_to_point_runs_in_the_replay_phase_and_the_canary_counts_it_left_out() {
    let d = tempfile::tempdir().unwrap();
    let Some(trace) = lammps_trace(d.path()) else { return };
    let _ = replay_runs_the_point_to_point_program(&trace, d.path());
    // the canary leaves the point-to-point traffic out, and says how much
    let t = CommTrace::read(&trace).unwrap();
    let m = t.mpi.as_ref().unwrap();
    let art = d.path().join("lammps.canary.json");
    let out = ok(&cc(&["canary", "compile", trace.to_str().unwrap(), "-o", art.to_str().unwrap()]));
    let total: usize = m.p2p.iter().map(Vec::len).sum();
    assert!(out.contains(&format!("left out: point-to-point: {total} operations")), "{out}");
    let (c, _) = artifact::read(&art).unwrap();
    let l = c.left_out_p2p.as_ref().expect("counted in the artifact");
    assert_eq!(l.operations_per_rank, m.p2p.iter().map(|r| r.len() as u64).collect::<Vec<_>>());
    assert!(l.bytes_sent_per_rank.iter().all(|&b| b > 0), "{l:?}");
    // a format-1 artifact (no such record) is still read
    let old = Canary { format_version: 1, left_out_p2p: None, ..c }.seal().unwrap();
    let old_path = d.path().join("v1.canary.json");
    old.write(&old_path).unwrap();
    let out = ok(&cc(&["canary", "inspect", old_path.to_str().unwrap()]));
    assert!(!out.contains("left out: point-to-point"), "{out}");
}
