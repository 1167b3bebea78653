//! `commcanary capture` and `import mpi` on real MPI programs under mpirun:
//! the imported trace replays (`replay-trace --check`), and
//! every rank's calls per kind, as imported, equal what an independent
//! counter (tests/data/mpi_capture/counter.c, a PMPI-style interposer
//! preloaded before the capture library, sharing no code with it) counted in
//! the same run; a Fortran twin of the C program gives the same counts; the
//! refusals (not an MPI program, an aborted run, a rank missing, two runs, a
//! damaged block) carry their codes and lose nothing. LAMMPS (Debian's `lmp`,
//! the shipped `melt` example) runs where it is installed
//! (`bash scripts/setup.sh`); a missing tool
//! (mpicc, mpifort, lmp) prints SKIPPED and why.
mod common;
use commcanary::core::refusal::{self, Code};
use commcanary::evidence::commtrace::{exec, CommTrace};
use commcanary::evidence::shard::{self, Shard};
use commcanary::evidence::trace;
use common::*;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;

/// What the tests build once: the capture library, the counter, the C program and (if mpifort works) its Fortran twin.
struct Tools {
    counter: PathBuf,
    app: PathBuf,
    app_f: Result<PathBuf, String>,
    more_f: Result<PathBuf, String>,
    _dir: tempfile::TempDir,
}

fn data(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/mpi_capture").join(name)
}

fn run_ok(cmd: &mut Command) -> Result<(), String> {
    match cmd.output() {
        Ok(o) if o.status.success() => Ok(()),
        Ok(o) => Err(format!("{cmd:?}: {}\n{}", o.status, String::from_utf8_lossy(&o.stderr))),
        Err(e) => Err(format!("{cmd:?}: {e}")),
    }
}

/// The tools, or why they cannot be built here (the caller prints SKIPPED).
fn tools() -> Result<&'static Tools, String> {
    static T: OnceLock<Result<Tools, String>> = OnceLock::new();
    T.get_or_init(|| {
        if !cfg!(all(target_arch = "x86_64", target_os = "linux")) {
            return Err("the counter forwards calls the x86-64 System V way (see counter.c)".into());
        }
        // the capture library is a workspace member: built next to the binary
        let lib = Path::new(&bin()).with_file_name("libcommcanary_capture.so");
        if !lib.is_file() {
            let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
            eprintln!(
                "building the capture library ({} is missing): {cargo} build -p commcanary-capture",
                lib.display()
            );
            run_ok(
                Command::new(&cargo)
                    .args(["build", "-p", "commcanary-capture"])
                    .current_dir(env!("CARGO_MANIFEST_DIR")),
            )?;
        }
        assert!(lib.is_file(), "{} after cargo build -p commcanary-capture", lib.display());
        let dir = tempfile::tempdir().map_err(|e| e.to_string())?;
        let counter = dir.path().join("counter.so");
        run_ok(
            Command::new("mpicc")
                .args(["-shared", "-fPIC", "-O1", "-o"])
                .arg(&counter)
                .arg(data("counter.c"))
                .arg("-ldl"),
        )
        .map_err(|e| format!("mpicc cannot build the counter: {e}"))?;
        let app = dir.path().join("app");
        run_ok(Command::new("mpicc").args(["-O1", "-o"]).arg(&app).arg(data("app.c")))
            .map_err(|e| format!("mpicc: {e}"))?;
        let app_f = dir.path().join("app_f");
        let app_f = run_ok(Command::new("mpifort").args(["-O1", "-o"]).arg(&app_f).arg(data("app.f90"))).map(|_| app_f);
        let more_f = dir.path().join("more_f");
        let more_f =
            run_ok(Command::new("mpifort").args(["-O1", "-o"]).arg(&more_f).arg(data("more.f90"))).map(|_| more_f);
        Ok(Tools { counter, app, app_f, more_f, _dir: dir })
    })
    .as_ref()
    .map_err(Clone::clone)
}

macro_rules! tools_or_skip {
    () => {
        match tools() {
            Ok(t) => t,
            Err(why) => {
                eprintln!("SKIPPED: {why}");
                return;
            }
        }
    };
}

/// `mpirun -n N env LD_PRELOAD=counter COUNTER_DIR=… commcanary capture -o CAP -- APP ARGS`;
/// the counter's per-rank files land in `cwd/counts`.
fn capture_counted(t: &Tools, n: u32, cwd: &Path, cap: &Path, app: &[&str]) -> std::process::Output {
    let counts = cwd.join("counts");
    std::fs::create_dir_all(&counts).unwrap();
    let (pre, cd) = (t.counter.to_str().unwrap().to_string(), counts.to_str().unwrap().to_string());
    let mut args = vec!["capture", "-o", cap.to_str().unwrap(), "--"];
    args.extend_from_slice(app);
    let env = [("LD_PRELOAD", pre.as_str()), ("COUNTER_DIR", cd.as_str())];
    mpirun_contexts(&[(n, &env, &args)])
}

/// The counter's calls per kind, rank by rank.
fn counted(cwd: &Path, n: u32) -> Vec<BTreeMap<String, u64>> {
    (0..n)
        .map(|r| {
            let p = cwd.join("counts").join(format!("rank-{r}.txt"));
            let text = std::fs::read_to_string(&p)
                .unwrap_or_else(|e| panic!("{}: {e} (the counter writes it at MPI_Finalize)", p.display()));
            text.lines()
                .map(|l| {
                    let (k, v) = l.split_once(' ').unwrap();
                    (k.to_string(), v.parse().unwrap())
                })
                .collect()
        })
        .collect()
}

/// `import mpi CAP -o TRACE --json`: per rank, the calls per kind.
fn imported(cap: &Path, trace: &Path, extra: &[&str]) -> (serde_json::Value, Vec<BTreeMap<String, u64>>) {
    let mut args = vec!["import", "mpi", cap.to_str().unwrap(), "-o", trace.to_str().unwrap(), "--json"];
    args.extend_from_slice(extra);
    let v: serde_json::Value = serde_json::from_str(&ok(&cc(&args))).unwrap();
    let calls =
        v["ranks"].as_array().unwrap().iter().map(|r| serde_json::from_value(r["calls"].clone()).unwrap()).collect();
    (v, calls)
}

/// Capture `app` on `n` ranks with the counter in front; the import's counts must equal the counter's.
fn counts_agree(t: &Tools, n: u32, app: &[&str]) -> Vec<BTreeMap<String, u64>> {
    let d = tempfile::tempdir().unwrap();
    let cap = d.path().join("cap");
    let o = capture_counted(t, n, d.path(), &cap, app);
    ok(&o);
    let trace = d.path().join("trace.json");
    let (v, calls) = imported(&cap, &trace, &[]);
    let want = counted(d.path(), n);
    assert_eq!(calls.len(), n as usize);
    for r in 0..n as usize {
        assert!(!want[r].is_empty(), "rank {r}: the counter saw no calls");
        assert_eq!(calls[r], want[r], "rank {r} of {app:?}: capture (left) against the independent counter (right)");
    }
    // --for-phases keeps only what the phases can run: no collective whose members disagree on it
    let for_phases = d.path().join("for-phases.json");
    ok(&cc(&["import", "mpi", cap.to_str().unwrap(), "-o", for_phases.to_str().unwrap(), "--for-phases"]));
    let fp = CommTrace::read(&for_phases).unwrap();
    assert!(exec::uneven_members(&fp).is_empty(), "{:?}", exec::uneven_members(&fp));
    // the written trace reads back through the trace reader and holds what the summary says
    let t = CommTrace::read(&trace).unwrap();
    assert_eq!(t.format_version, 3);
    // every rank's clock fitted against rank 0's from the two windows: times on one timebase
    let m = t.mpi.as_ref().unwrap();
    assert!(
        t.clock.aligned_across_ranks && m.clock_models.iter().all(Option::is_some),
        "{:?} {:?}",
        t.clock,
        m.clock_unaligned
    );
    for (r, rt) in t.ranks.iter().enumerate() {
        let left: u64 = v["ranks"][r]["left_out"].as_object().unwrap().values().map(|x| x.as_u64().unwrap()).sum();
        let all: u64 = calls[r].values().sum();
        assert_eq!(rt.collectives.len() as u64, all - left, "rank {r}: the trace holds every call not left out");
        // every collective is in the trace: what is left out is point-to-point (in mpi.p2p), probes, completions,
        // communicators
        for k in m.left_out[r].keys() {
            let kept_elsewhere = [
                "Send",
                "Ssend",
                "Bsend",
                "Rsend",
                "Isend",
                "Issend",
                "Ibsend",
                "Irsend",
                "Recv",
                "Irecv",
                "Sendrecv",
                "Sendrecv_replace",
            ];
            let bookkeeping = k.starts_with("Wait")
                || k.starts_with("Test")
                || k.starts_with("Comm_")
                || k.ends_with("probe")
                || k == "Probe";
            assert!(
                kept_elsewhere.contains(&k.as_str()) || bookkeeping,
                "rank {r}: {k} left out: {:?}",
                m.left_out_reasons.get(k)
            );
        }
    }
    // every point-to-point operation is in mpi.p2p, a nonblocking one with the call that completed it
    for (r, ops) in m.p2p.iter().enumerate() {
        let c = |k: &str| calls[r].get(k).copied().unwrap_or(0);
        let sends = ["Send", "Ssend", "Bsend", "Rsend", "Isend", "Issend", "Ibsend", "Irsend"]
            .iter()
            .map(|k| c(k))
            .sum::<u64>();
        let recvs = c("Recv") + c("Irecv");
        let pairs = c("Sendrecv") + c("Sendrecv_replace");
        assert_eq!(ops.len() as u64, sends + recvs + 2 * pairs, "rank {r}: p2p entries");
        for o in ops.iter().filter(|o| o.request.is_some()) {
            assert!(
                o.completed_by_call.is_some_and(|k| k > o.call) && o.complete_ns.is_some_and(|t| t >= o.post_ns),
                "rank {r}: {o:?}"
            );
        }
        assert_eq!(m.collective_calls[r].len(), t.ranks[r].collectives.len());
    }
    // and it replays on MPI, every result checked: the collectives, and every
    // point-to-point operation in recorded call order, each receive against the send MPI matched it with
    let replay = d.path().join("replay");
    let o = mpirun(
        n,
        &["replay-trace", trace.to_str().unwrap(), "--check", "--backend", "cpu", "-o", replay.to_str().unwrap()],
    );
    ok(&o);
    assert!(replay.join("replay-trace.json").is_file());
    for (r, ops) in m.p2p.iter().enumerate() {
        let f: serde_json::Value =
            serde_json::from_slice(&std::fs::read(replay.join(format!("replay-trace.rank-{r}.json"))).unwrap())
                .unwrap();
        if ops.is_empty() {
            assert!(f.get("p2p").is_none(), "rank {r}: {f}");
            continue;
        }
        let p = &f["p2p"];
        let recvs = ops.iter().filter(|o| o.direction == "recv").count() as u64;
        assert_eq!(p["operations"].as_u64(), Some(ops.len() as u64), "rank {r}: {p}");
        assert_eq!(
            p["nonblocking"].as_u64(),
            Some(ops.iter().filter(|o| o.request.is_some()).count() as u64),
            "rank {r}: {p}"
        );
        assert_eq!(
            p["receives_checked"].as_u64().unwrap() + p["receives_unmatched"].as_u64().unwrap(),
            recvs,
            "rank {r}: every receive checked or named unmatched: {p}"
        );
    }
    // nonblocking collectives were replayed nonblocking, each waited for at its recorded completing call
    for (r, flags) in m.collective_nonblocking.iter().enumerate() {
        let f: serde_json::Value =
            serde_json::from_slice(&std::fs::read(replay.join(format!("replay-trace.rank-{r}.json"))).unwrap())
                .unwrap();
        let posted = flags.iter().filter(|&&b| b).count() as u64;
        let want: u64 = calls[r]
            .iter()
            .filter(|(k, _)| {
                k.starts_with('I') && !["Isend", "Issend", "Ibsend", "Irsend", "Irecv", "Iprobe"].contains(&k.as_str())
            })
            .map(|(_, n)| n)
            .sum();
        assert_eq!(posted, want, "rank {r}: every I-collective is marked nonblocking");
        assert_eq!(
            f.get("nonblocking").map(|b| b["posted"].as_u64()),
            if posted > 0 { Some(Some(posted)) } else { None },
            "rank {r}: {f}"
        );
    }
    if m.p2p.iter().any(|ops| !ops.is_empty()) {
        // the negative control: rank 1's received bytes spoiled, the check must say which receive
        let bad = d.path().join("replay-bad");
        let o = mpirun(
            n,
            &[
                "replay-trace",
                trace.to_str().unwrap(),
                "--check",
                "--corrupt-rank",
                "1",
                "--backend",
                "cpu",
                "-o",
                bad.to_str().unwrap(),
            ],
        );
        let err = String::from_utf8_lossy(&o.stderr);
        assert!(
            !o.status.success() && err.contains("rank 1, point-to-point receive") && err.contains("its matching send"),
            "{err}"
        );
    }
    calls
}

#[test]
fn c_program_every_rank_has_exactly_the_counted_calls_on_2_and_4_ranks() {
    let t = tools_or_skip!();
    let app = t.app.to_str().unwrap();
    for n in [2, 4] {
        let calls = counts_agree(t, n, &[app, "20"]);
        // and the program's own arithmetic: 20 iterations of 2 Irecv, 3 Wait and 2 Waitall
        assert_eq!(
            (calls[0]["Irecv"], calls[0]["Wait"], calls[0]["Waitall"], calls[0]["Comm_free"]),
            (40, 60, 40, 2),
            "{calls:?}"
        );
    }
}

#[test]
fn fortran_twin_is_captured_with_the_c_programs_counts() {
    let t = tools_or_skip!();
    let app_f = match &t.app_f {
        Ok(p) => p.to_str().unwrap(),
        Err(why) => {
            eprintln!(
                "SKIPPED: mpifort cannot build the Fortran twin (install gfortran: bash scripts/setup.sh): {why}"
            );
            return;
        }
    };
    let fortran = counts_agree(t, 2, &[app_f, "20"]);
    let c = counts_agree(t, 2, &[t.app.to_str().unwrap(), "20"]);
    assert_eq!(fortran, c, "Fortran (left) and C (right) make the same calls");
}

#[test]
fn fortran_nonblocking_collectives_v_variants_and_waitsome_match_the_counter() {
    let t = tools_or_skip!();
    let more = match &t.more_f {
        Ok(p) => p.to_str().unwrap(),
        Err(why) => {
            eprintln!("SKIPPED: mpifort cannot build more.f90 (install gfortran: bash scripts/setup.sh): {why}");
            return;
        }
    };
    let calls = counts_agree(t, 2, &[more]);
    assert_eq!(
        (calls[0]["Ibcast"], calls[0]["Gatherv"], calls[0]["Waitsome"], calls[0]["Comm_split_type"]),
        (5, 5, 5, 1),
        "{calls:?}"
    );
}

#[test]
fn lammps_melt_every_rank_has_exactly_the_counted_calls() {
    let t = tools_or_skip!();
    let melt = Path::new("/usr/share/lammps/examples/melt/in.melt");
    if Command::new("lmp").arg("-h").output().is_err() || !melt.is_file() {
        eprintln!("SKIPPED: LAMMPS (lmp and {}) is not installed: bash scripts/setup.sh installs it", melt.display());
        return;
    }
    for n in [2, 4] {
        let calls = counts_agree(t, n, &["lmp", "-in", melt.to_str().unwrap(), "-log", "none", "-screen", "none"]);
        // melt exchanges halos point-to-point and reduces thermo output: both are there
        assert!(
            calls.iter().all(|c| c.get("Allreduce").is_some_and(|&k| k > 0) && c.get("Irecv").is_some_and(|&k| k > 0)),
            "{calls:?}"
        );
    }
}

#[test]
fn a_program_that_never_initializes_mpi_is_refused_not_mpi() {
    let t = tools_or_skip!();
    let d = tempfile::tempdir().unwrap();
    // the contrast: an MPI program behind a wrapper script (a child of the shell, not the capture's own child) is
    // captured
    let wrapped = d.path().join("wrapped");
    let o = mpirun(
        2,
        &[
            "capture",
            "-o",
            wrapped.to_str().unwrap(),
            "--",
            "sh",
            "-c",
            "\"$0\" \"$@\"; exit $?",
            t.app.to_str().unwrap(),
            "3",
        ],
    );
    ok(&o);
    assert!(wrapped.join("rank-00001.mpicap").is_file());
    let cap = d.path().join("cap");
    let o = mpirun(1, &["capture", "-o", cap.to_str().unwrap(), "--", "true"]);
    assert!(!o.status.success(), "capture of a non-MPI program must fail");
    assert!(String::from_utf8_lossy(&o.stderr).contains("refused[NOT_MPI]"), "{}", String::from_utf8_lossy(&o.stderr));
    assert_refused(
        &cc(&["import", "mpi", cap.to_str().unwrap(), "-o", d.path().join("t.json").to_str().unwrap()]),
        "NOT_MPI",
    );
    assert!(!d.path().join("t.json").exists());
}

/// A complete 2-rank capture of the C program in `d/NAME`.
fn capture_app(t: &Tools, d: &Path, name: &str, args: &[&str]) -> (PathBuf, std::process::Output) {
    let cap = d.join(name);
    let mut a = vec!["capture", "-o", cap.to_str().unwrap(), "--", t.app.to_str().unwrap()];
    a.extend_from_slice(args);
    (cap.clone(), mpirun(2, &a))
}

#[test]
fn an_aborted_run_is_incomplete_refused_or_imported_marked() {
    let t = tools_or_skip!();
    let d = tempfile::tempdir().unwrap();
    // rank 0 calls MPI_Abort at iteration 5 of 2000
    let (cap, o) = capture_app(t, d.path(), "cap", &["2000", "5"]);
    assert!(!o.status.success());
    for r in 0..2 {
        assert!(cap.join(format!("rank-{r:05}.mpicap")).is_file(), "rank {r} left its file");
    }
    let out = d.path().join("t.json");
    assert_refused(&cc(&["import", "mpi", cap.to_str().unwrap(), "-o", out.to_str().unwrap()]), "INCOMPLETE_CAPTURE");
    assert!(!out.exists());
    let (v, calls) = imported(&cap, &out, &["--allow-incomplete"]);
    let why = v["incomplete"].as_array().unwrap();
    assert!(why.iter().any(|w| w.as_str().unwrap().contains("MPI_Abort")), "{why:?}");
    // rank 0 recorded its 5 iterations before the abort (what it wrote is kept)
    assert_eq!(calls[0].get("Bcast"), Some(&5), "{calls:?}");
    let tr = CommTrace::read(&out).unwrap();
    // no MPI_Finalize, so no second clock window: the times stay per rank, and the trace says why
    assert!(!tr.clock.aligned_across_ranks && tr.clock.note.contains("clock window"), "{:?}", tr.clock);
    assert!(!tr.mpi.unwrap().incomplete.is_empty());
}

#[test]
fn a_missing_rank_two_runs_and_a_damaged_block_are_refused_with_their_codes() {
    let t = tools_or_skip!();
    let d = tempfile::tempdir().unwrap();
    let (a, o) = capture_app(t, d.path(), "a", &["30"]);
    ok(&o);
    let (b, o) = capture_app(t, d.path(), "b", &["30"]);
    ok(&o);
    let out = |n: &str| d.path().join(n).to_str().unwrap().to_string();
    let import = |cap: &Path, o: &str| cc(&["import", "mpi", cap.to_str().unwrap(), "-o", o]);
    // two runs: a's rank 1 replaced by b's
    let mixed = d.path().join("mixed");
    std::fs::create_dir(&mixed).unwrap();
    std::fs::copy(a.join("rank-00000.mpicap"), mixed.join("rank-00000.mpicap")).unwrap();
    std::fs::copy(b.join("rank-00001.mpicap"), mixed.join("rank-00001.mpicap")).unwrap();
    assert_refused(&import(&mixed, &out("mixed.json")), "FOREIGN_SHARD");
    // a rank missing
    std::fs::remove_file(mixed.join("rank-00001.mpicap")).unwrap();
    let e = assert_refused(&import(&mixed, &out("missing.json")), "MISSING_RANK");
    assert!(e.contains("rank-00001.mpicap"), "{e}");
    // one byte of a block changed
    let bad = d.path().join("bad");
    std::fs::create_dir(&bad).unwrap();
    for r in 0..2 {
        std::fs::copy(a.join(format!("rank-{r:05}.mpicap")), bad.join(format!("rank-{r:05}.mpicap"))).unwrap();
    }
    let f = bad.join("rank-00001.mpicap");
    let mut bytes = std::fs::read(&f).unwrap();
    let k = bytes.len() - 200; // inside the last block's records
    bytes[k] ^= 0x40;
    std::fs::write(&f, &bytes).unwrap();
    assert_refused(&import(&bad, &out("bad.json")), "DIGEST_MISMATCH");
    // cut inside a block: the whole blocks before it are kept, the rank is incomplete
    std::fs::write(&f, &std::fs::read(a.join("rank-00001.mpicap")).unwrap()[..bytes.len() - 300]).unwrap();
    assert_refused(&import(&bad, &out("cut.json")), "INCOMPLETE_CAPTURE");
    for o in ["mixed.json", "missing.json", "bad.json", "cut.json"] {
        assert!(!d.path().join(o).exists(), "{o} written by a refused import");
    }
    // the intact captures are untouched and import
    ok(&import(&a, &out("a.json")));
}

/// LAMMPS (`lmp`) and the repository's scaled melt input, or why not.
fn lammps_or_skip() -> Option<PathBuf> {
    let input = Path::new(env!("CARGO_MANIFEST_DIR")).join("examples/lammps/in.lj-melt");
    if Command::new("lmp").arg("-h").output().is_err() {
        eprintln!("SKIPPED: LAMMPS (lmp) is not installed: bash scripts/setup.sh installs it");
        return None;
    }
    Some(input)
}

/// A small LAMMPS melt (4 x 6^3 atoms, `steps` steps) captured on `n` ranks and imported into `d/trace.json`.
fn lammps_trace(d: &Path, n: u32, steps: &str) -> PathBuf {
    let input = lammps_or_skip().expect("checked by the caller");
    let cap = d.join("cap");
    let o = mpirun(
        n,
        &[
            "capture",
            "-o",
            cap.to_str().unwrap(),
            "--",
            "lmp",
            "-in",
            input.to_str().unwrap(),
            "-log",
            "none",
            "-screen",
            "none",
            "-var",
            "n",
            "6",
            "-var",
            "steps",
            steps,
        ],
    );
    ok(&o);
    let trace = d.join("trace.json");
    // the phases run what a shard holds: the trace keeps that, the rest (LAMMPS's scans) left out and counted
    let v: serde_json::Value = serde_json::from_str(&ok(&cc(&[
        "import",
        "mpi",
        cap.to_str().unwrap(),
        "-o",
        trace.to_str().unwrap(),
        "--for-phases",
        "--json",
    ])))
    .unwrap();
    let reasons = v["left_out_reasons"].to_string();
    assert!(v["ranks"][0]["left_out"].get("Scan").is_none() || reasons.contains("--for-phases"), "{v}");
    trace
}

#[test]
fn lammps_f64_i32_i64_collectives_run_in_the_phases_in_their_own_dtypes() {
    if lammps_or_skip().is_none() {
        return;
    }
    let d = tempfile::tempdir().unwrap();
    let trace = lammps_trace(d.path(), 2, "100");
    let t = CommTrace::read(&trace).unwrap();
    use commcanary::evidence::shard::{CollectiveKind, TraceDtype};
    let recorded: std::collections::BTreeSet<(CollectiveKind, TraceDtype)> =
        t.ranks[0].collectives.iter().map(|c| (c.kind, c.dtype)).collect();
    for want in [
        (CollectiveKind::AllReduce, TraceDtype::F64),
        (CollectiveKind::AllReduce, TraceDtype::I32),
        (CollectiveKind::Broadcast, TraceDtype::I8),
    ] {
        assert!(recorded.contains(&want), "LAMMPS records {want:?}: {recorded:?}");
    }
    // the replay phase walks every recorded collective in its recorded dtype, each checked
    let run = run_rank(
        2,
        &d.path().join("runs"),
        &["--trace", trace.to_str().unwrap(), "--phases", "replay", "--tokens", "1", "--check", "1000000"],
    );
    for r in 0..2u32 {
        let s = Shard::read(&run.join(format!("rank-{r:05}.shard"))).unwrap();
        assert_eq!(s.header.format_version, shard::SHARD_FORMAT_VERSION);
        let ran: Vec<(CollectiveKind, TraceDtype, u64)> =
            s.body.collectives.iter().filter(|e| !e.warmup).map(|e| (e.kind, e.dtype, e.bytes)).collect();
        let want: Vec<(CollectiveKind, TraceDtype, u64)> =
            t.ranks[r as usize].collectives.iter().map(|c| (c.kind, c.dtype, trace::event_bytes(c))).collect();
        assert_eq!(ran, want, "rank {r}: the phase ran the trace's collectives as recorded");
        assert!(
            s.body.collectives.iter().filter(|e| !e.warmup && e.kind == CollectiveKind::AllReduce).all(|e| e.checked),
            "rank {r}: every all-reduce checked"
        );
    }
    // and the run joins (every rank ran the same operations in the same dtypes): one timed pass of the trace
    let j = join_json(&run);
    assert_eq!(j["phases"][0]["collectives_per_rank"].as_u64(), Some(t.ranks[0].collectives.len() as u64), "{j}");
}

#[test]
fn lammps_canary_and_full_capture_picks_are_judged_by_regret_on_lammps() {
    if lammps_or_skip().is_none() {
        return;
    }
    let d = tempfile::tempdir().unwrap();
    let trace = lammps_trace(d.path(), 2, "100");
    let art = d.path().join("canary.json");
    ok(&cc(&["canary", "compile", trace.to_str().unwrap(), "-o", art.to_str().unwrap()]));
    // the spec beside the input its [truth] freezes
    let spec = d.path().join("spec.toml");
    std::fs::copy(data("lammps-canary-truth.toml"), &spec).unwrap();
    std::fs::copy(
        Path::new(env!("CARGO_MANIFEST_DIR")).join("examples/lammps/in.lj-melt"),
        d.path().join("in.lj-melt"),
    )
    .unwrap();
    let out = d.path().join("verify");
    let (t_s, a_s, c_s, o_s) =
        (trace.to_str().unwrap(), art.to_str().unwrap(), spec.to_str().unwrap(), out.to_str().unwrap());
    let o = {
        let _one_at_a_time = mpirun_lock();
        cc_root(&["canary", "verify", t_s, a_s, "--configs", c_s, "--passes", "1", "-o", o_s])
    };
    let text = ok(&o);
    // an assurance state is reached, and every check that stops a higher one is named
    assert!(text.contains("canary [compiled]: "), "{text}");
    let v: serde_json::Value = serde_json::from_slice(&std::fs::read(out.join("canary-verify.json")).unwrap()).unwrap();
    // LAMMPS ran as the truth under both configurations: the full capture's pick and the canary's, each judged by its
    // regret on LAMMPS
    let t = &v["truth"];
    assert!(t["metric"].as_str().is_some_and(|m| m.contains("Loop time of")), "{t}");
    let configs = ["shared-memory", "tcp-2k-buffers"];
    assert!(configs.contains(&t["source"]["pick"].as_str().unwrap()), "{t}");
    assert!(t["source"]["regret"].is_object(), "{t}");
    assert!(text.contains("truth.regret: pick "), "the regret is printed: {text}");
    let cands = v["candidates"].as_array().expect("every candidate's verdict");
    let judged: Vec<&serde_json::Value> =
        cands.iter().filter_map(|c| c.get("truth").filter(|t| !t.is_null())).collect();
    assert!(
        !judged.is_empty()
            && judged.iter().all(|j| configs.contains(&j["pick"].as_str().unwrap()) && j["regret"].is_object()),
        "{v}"
    );
    // LAMMPS with 2 KiB TCP buffers is the known bad: the truth decides it, so the decision cost is printed (rounds and
    // replay seconds) or said unreached
    assert!(t["decided_pairs"].as_u64().is_some(), "{t}");
}

/// The kinds the trace gained (gather, scatter, scans, v-variants, a
/// reduction other than a sum, nonblocking posts) alone: `replay-trace
/// --check` passes at 2 and 4 ranks, and a corrupted rank fails the check of
/// one of them; the cuda backend and the phases refuse them before launch,
/// naming the kind.
#[test]
fn new_kinds_alone_replay_checked_and_a_corrupted_rank_fails_them() {
    let t = tools_or_skip!();
    for n in [2, 4] {
        let d = tempfile::tempdir().unwrap();
        let cap = d.path().join("cap");
        let o = mpirun(n, &["capture", "-o", cap.to_str().unwrap(), "--", t.app.to_str().unwrap(), "3"]);
        ok(&o);
        let full = d.path().join("full.json");
        imported(&cap, &full, &[]);
        let mut v: serde_json::Value = serde_json::from_slice(&std::fs::read(&full).unwrap()).unwrap();
        // keep only the new kinds, v-variants and other reductions (and their entries in mpi's per-collective lists)
        let new = |c: &serde_json::Value| {
            ["gather", "scatter", "scan", "exscan"].contains(&c["kind"].as_str().unwrap())
                || !c["in_split_elems"].is_null() && c["kind"] != "all_to_all"
                || !c["out_split_elems"].is_null()
                || c.get("op").is_some()
        };
        let mut kept_kinds = std::collections::BTreeSet::new();
        for r in 0..n as usize {
            let colls = v["ranks"][r]["collectives"].as_array().unwrap().clone();
            let keep: Vec<bool> = colls.iter().map(new).collect();
            kept_kinds.extend(colls.iter().filter(|c| new(c)).map(|c| c["source_name"].as_str().unwrap().to_string()));
            v["ranks"][r]["collectives"] = colls.into_iter().zip(&keep).filter(|(_, k)| **k).map(|(c, _)| c).collect();
            for list in ["collective_calls", "collective_completions", "collective_nonblocking"] {
                let l = v["mpi"][list][r].as_array().unwrap().clone();
                v["mpi"][list][r] = l.into_iter().zip(&keep).filter(|(_, k)| **k).map(|(c, _)| c).collect();
            }
            v["mpi"]["p2p"][r] = serde_json::json!([]);
        }
        for k in [
            "MPI_Gather",
            "MPI_Scatter",
            "MPI_Scan",
            "MPI_Exscan",
            "MPI_Allgatherv",
            "MPI_Gatherv",
            "MPI_Scatterv",
            "MPI_Reduce_scatter",
            "MPI_Iallgatherv",
            "MPI_Iexscan",
            "MPI_Igatherv",
            "MPI_Reduce",
        ] {
            assert!(kept_kinds.contains(k), "{k} not among the new kinds kept: {kept_kinds:?}");
        }
        let trace = d.path().join("new.json");
        std::fs::write(&trace, serde_json::to_vec(&v).unwrap()).unwrap();
        let out = d.path().join("replay");
        let o = mpirun(
            n,
            &["replay-trace", trace.to_str().unwrap(), "--check", "--backend", "cpu", "-o", out.to_str().unwrap()],
        );
        let text = ok(&o);
        assert!(text.contains("collectives replayed nonblocking"), "{text}");
        for r in 0..n {
            let f: serde_json::Value =
                serde_json::from_slice(&std::fs::read(out.join(format!("replay-trace.rank-{r}.json"))).unwrap())
                    .unwrap();
            let records = f["records"].as_array().unwrap();
            assert!(records.iter().any(|x| x["checked"] == true), "rank {r}: nothing checked");
            // the recorded reductions ran: MPI_MAX on the exscans, MPI_MIN on the int all-reduce
            assert!(records.iter().any(|x| x["op"] == "max" && x["op_source"] == "trace"), "rank {r}");
            assert!(records.iter().any(|x| x["op"] == "min" && x["op_source"] == "trace"), "rank {r}");
            assert_eq!(
                f["nonblocking"]["posted"].as_u64(),
                Some(3 * 3),
                "rank {r}: Iallgatherv, Iexscan, Igatherv per iteration"
            );
        }
        let bad = d.path().join("replay-bad");
        let o = mpirun(
            n,
            &[
                "replay-trace",
                trace.to_str().unwrap(),
                "--check",
                "--corrupt-rank",
                "1",
                "--backend",
                "cpu",
                "-o",
                bad.to_str().unwrap(),
            ],
        );
        let err = String::from_utf8_lossy(&o.stderr);
        assert!(!o.status.success() && err.contains("rank 1, collective") && err.contains("--check:"), "{err}");
        // NCCL has no gather, scatter or scans: the cuda executor refuses them first thing (no GPU needed to see it)
        use commcanary::evidence::commtrace::{exec, CommTrace};
        let e =
            exec::refuse_unsupported(&CommTrace::read(&trace).unwrap(), "cuda", &exec::nccl_cannot_run).unwrap_err();
        assert_eq!(refusal::code_of(&e), Some(Code::UnsupportedOperation));
        assert!(format!("{e:#}").contains("no NCCL operation") && format!("{e:#}").contains("cuda backend"), "{e:#}");
        // while the full trace's sums, broadcasts and all-to-alls of equal blocks pass that check except its new kinds
        let full_trace = CommTrace::read(&full).unwrap();
        let refused: Vec<_> = full_trace.ranks[0]
            .collectives
            .iter()
            .filter(|c| exec::nccl_cannot_run(c).is_some())
            .map(|c| c.kind)
            .collect();
        assert!(!refused.is_empty() && refused.len() < full_trace.ranks[0].collectives.len(), "{refused:?}");
        // the phases run the kinds a shard records, with sums: refused before launch
        let runs = d.path().join("runs");
        let o = mpirun(
            n,
            &[
                "rank",
                "-q",
                "--out",
                runs.to_str().unwrap(),
                "--backend",
                "cpu",
                "--trace",
                trace.to_str().unwrap(),
                "--phases",
                "replay",
                "--tokens",
                "1",
            ],
        );
        let err = assert_refused(&o, "UNSUPPORTED_OPERATION");
        assert!(err.contains("the phases") && err.contains("--trace"), "{err}");
    }
}
