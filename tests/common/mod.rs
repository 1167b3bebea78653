//! Helpers shared by the integration tests: run the real binary under real mpirun.
#![allow(dead_code)]
use commcanary::core::collective::{self, KindRow};
use commcanary::core::fsutil;
use commcanary::evidence::shard;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

/// Path of the binary under test: `COMMCANARY_BIN` when set (a test binary
/// carried to a GPU host runs against the staged executable there), else the
/// one cargo built.
pub fn bin() -> String {
    std::env::var("COMMCANARY_BIN").unwrap_or_else(|_| env!("CARGO_BIN_EXE_commcanary").to_string())
}

/// One mpirun job at a time per test binary: the tests' threads would otherwise
/// put several oversubscribed jobs on two cores and the timing controls would
/// measure the scheduler, not the program. (Cargo runs test binaries one after another.)
static MPIRUN: std::sync::Mutex<()> = std::sync::Mutex::new(());

/// `mpirun -n N commcanary ARGS`, oversubscribed, allowed as root, quiet progress.
pub fn mpirun(n: u32, args: &[&str]) -> Output {
    let _one_at_a_time = MPIRUN.lock().unwrap_or_else(|e| e.into_inner());
    Command::new("mpirun")
        .args(["--oversubscribe", "-n", &n.to_string(), &bin()])
        .args(args)
        .env("OMPI_ALLOW_RUN_AS_ROOT", "1")
        .env("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1")
        .env("OMPI_MCA_rmaps_base_oversubscribe", "1")
        .output()
        .expect("mpirun must be installed (scripts/setup.sh installs it)")
}

/// `mpirun -n N commcanary ARGS` with extra environment, started and not
/// waited for (stdout and stderr to the given files); the guard keeps other
/// mpirun jobs of this test binary out until it is dropped.
pub fn mpirun_spawn(
    n: u32,
    args: &[&str],
    env: &[(&str, &str)],
    stdout: &Path,
    stderr: &Path,
) -> (std::sync::MutexGuard<'static, ()>, std::process::Child) {
    let guard = MPIRUN.lock().unwrap_or_else(|e| e.into_inner());
    let child = Command::new("mpirun")
        .args(["--oversubscribe", "-n", &n.to_string(), &bin()])
        .args(args)
        .env("OMPI_ALLOW_RUN_AS_ROOT", "1")
        .env("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1")
        .env("OMPI_MCA_rmaps_base_oversubscribe", "1")
        .envs(env.iter().copied())
        .stdout(std::fs::File::create(stdout).unwrap())
        .stderr(std::fs::File::create(stderr).unwrap())
        .spawn()
        .expect("mpirun must be installed (scripts/setup.sh installs it)");
    (guard, child)
}

/// One application context of [`mpirun_contexts`]: ranks, environment, arguments.
pub type AppContext<'a> = (u32, &'a [(&'a str, &'a str)], &'a [&'a str]);

/// One mpirun job of several application contexts (MPMD, `A : B`): each
/// `(ranks, env, args)` runs `env VAR=VALUE… commcanary ARGS` on that many
/// ranks, numbered in order, so that ranks of one job can record different
/// test-hook facts (`COMMCANARY_TEST_HOST`: two "nodes" on one host).
pub fn mpirun_contexts(contexts: &[AppContext<'_>]) -> Output {
    let _one_at_a_time = MPIRUN.lock().unwrap_or_else(|e| e.into_inner());
    let mut cmd = Command::new("mpirun");
    cmd.arg("--oversubscribe");
    for (i, (n, env, args)) in contexts.iter().enumerate() {
        if i > 0 {
            cmd.arg(":");
        }
        cmd.args(["-n", &n.to_string(), "env"]);
        cmd.args(env.iter().map(|(k, v)| format!("{k}={v}")));
        cmd.arg(bin()).args(args.iter());
    }
    cmd.env("OMPI_ALLOW_RUN_AS_ROOT", "1")
        .env("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1")
        .env("OMPI_MCA_rmaps_base_oversubscribe", "1")
        .output()
        .expect("mpirun must be installed (scripts/setup.sh installs it)")
}

/// Hold the one-job lock while a command that starts mpirun jobs itself (a campaign) runs.
pub fn mpirun_lock() -> std::sync::MutexGuard<'static, ()> {
    MPIRUN.lock().unwrap_or_else(|e| e.into_inner())
}

/// Run `commcanary ARGS` directly, allowed to launch mpirun as root (campaign exec).
pub fn cc_root(args: &[&str]) -> Output {
    Command::new(bin())
        .args(args)
        .env("OMPI_ALLOW_RUN_AS_ROOT", "1")
        .env("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1")
        .output()
        .expect("binary runs")
}

/// Run `commcanary ARGS` directly.
pub fn cc(args: &[&str]) -> Output {
    Command::new(bin()).args(args).output().expect("binary runs")
}

/// Assert success, showing both streams otherwise.
pub fn ok(o: &Output) -> String {
    assert!(
        o.status.success(),
        "command failed ({:?})\nstdout:\n{}\nstderr:\n{}",
        o.status,
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    );
    String::from_utf8_lossy(&o.stdout).into_owned()
}

/// Run `rank` on the CPU backend under mpirun into a fresh directory; return the run directory.
pub fn run_rank(n: u32, out: &Path, extra: &[&str]) -> PathBuf {
    let mut args = vec!["--backend", "cpu"];
    args.extend_from_slice(extra);
    run_rank_with(n, out, &args)
}

/// Run `rank` under mpirun with exactly these extra arguments; return the run directory.
pub fn run_rank_with(n: u32, out: &Path, extra: &[&str]) -> PathBuf {
    let mut args = vec!["rank", "-q", "--out", out.to_str().unwrap()];
    args.extend_from_slice(extra);
    ok(&mpirun(n, &args));
    let dirs: Vec<PathBuf> =
        std::fs::read_dir(out).unwrap().map(|e| e.unwrap().path()).filter(|p| p.is_dir()).collect();
    assert_eq!(dirs.len(), 1, "one run directory expected in {}", out.display());
    dirs.into_iter().next().unwrap()
}

/// `join --json` as a JSON value.
pub fn join_json(run: &Path) -> serde_json::Value {
    let o = cc(&["join", "--json", run.to_str().unwrap()]);
    serde_json::from_str(&ok(&o)).expect("join --json prints JSON")
}

/// `join --events-out FILE`: one joined collective per line, written to
/// `file` and returned parsed.
pub fn joined_events(run: &Path, file: &Path) -> Vec<serde_json::Value> {
    ok(&cc(&["join", run.to_str().unwrap(), "--events-out", file.to_str().unwrap()]));
    std::fs::read_to_string(file)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).expect("a joined collective per line"))
        .collect()
}

/// SHA-256 of every file in a directory, sorted by name.
pub fn digests(dir: &Path) -> Vec<(String, String)> {
    let mut v: Vec<(String, String)> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.is_file())
        .map(|p| (p.file_name().unwrap().to_string_lossy().into_owned(), fsutil::sha256_file(&p).unwrap()))
        .collect();
    v.sort();
    v
}

/// Phase summary object from a join summary.
pub fn phase<'a>(summary: &'a serde_json::Value, name: &str) -> &'a serde_json::Value {
    summary["phases"]
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["phase"] == name)
        .unwrap_or_else(|| panic!("phase {name} in summary"))
}

/// Assert that a command failed with the named refusal code (`refused[CODE]`
/// on stderr, or on stdout where a command lists refusals, as `campaign
/// verify` does per cell). Returns stderr and stdout, for further checks.
pub fn assert_refused(o: &Output, code: &str) -> String {
    let text = format!("{}{}", String::from_utf8_lossy(&o.stderr), String::from_utf8_lossy(&o.stdout));
    assert!(!o.status.success(), "expected refused[{code}], but the command succeeded:\n{text}");
    assert!(text.contains(&format!("refused[{code}]")), "expected refused[{code}] in:\n{text}");
    text
}

/// `t` (an imported trace, as JSON) with one collective of every row of the
/// kind table appended on every rank of its first group, so that a test
/// walking the table reaches every kind: element counts follow the row's
/// buffer rule on the group's size, rooted kinds take the group's first
/// member as root, and a point-to-point row runs between the first two
/// members (the first runs the row's kind, the second the other
/// point-to-point kind, its counterpart). With `p2p` false the
/// point-to-point rows are left out (a one-rank world has no peer); the
/// rows appended are returned by name. Trailing compute is dropped, so the
/// appended collectives are each rank's last events. With `nccl_only`, the
/// rows NCCL has no operation for (gather, scatter, the scans) are left out too.
pub fn with_every_kind(t: &serde_json::Value, p2p: bool, nccl_only: bool) -> (serde_json::Value, Vec<&'static str>) {
    use commcanary::core::collective::{Buffers, KINDS};
    let mut v = t.clone();
    let g = v["groups"][0].clone();
    let name = g["name"].as_str().unwrap().to_string();
    let members: Vec<u64> = g["members"].as_array().unwrap().iter().map(|m| m.as_u64().unwrap()).collect();
    let n = members.len() as u64;
    let rows: Vec<_> = KINDS.iter().filter(|r| (p2p || !r.p2p) && !(nccl_only && r.replay_only)).collect();
    assert!(!p2p || n >= 2, "point-to-point rows need two members");
    for rank in v["ranks"].as_array_mut().unwrap() {
        let me = rank["rank"].as_u64().unwrap();
        let Some(local) = members.iter().position(|&m| m == me) else { continue };
        rank["trailing_compute"] = serde_json::json!([]);
        let colls = rank["collectives"].as_array_mut().unwrap();
        let template = colls
            .iter()
            .rev()
            .find(|c| c["group"] == name.as_str())
            .expect("a collective of the first group to copy")
            .clone();
        let end =
            |c: &serde_json::Value| c["host_start_ns"].as_u64().unwrap() + c["host_duration_ns"].as_u64().unwrap();
        let mut at = colls.iter().map(end).max().unwrap() + 10_000;
        // a group's collectives count one sequence; point-to-point ones one per peer and direction
        let next_seq = |colls: &[serde_json::Value], kind: &str, peer: Option<u64>| {
            colls
                .iter()
                .filter(|c| {
                    c["group"] == name.as_str() && c["peer"].as_u64() == peer && (peer.is_none() || c["kind"] == kind)
                })
                .map(|c| c["seq"].as_u64().unwrap() + 1)
                .max()
                .unwrap_or(0)
        };
        for row in &rows {
            let (kind, peer) = if row.p2p {
                if local > 1 {
                    continue;
                }
                let other = KINDS.iter().find(|r| r.p2p && r.kind != row.kind).expect("a point-to-point counterpart");
                (if local == 0 { row } else { other }, Some(members[1 - local]))
            } else {
                (*row, None)
            };
            let e = 256u64;
            let (ins, outs) = match kind.buffers {
                Buffers::Same => (e, e),
                Buffers::OutIsNTimesIn => (e, n * e),
                Buffers::InIsNTimesOut => (n * e, e),
                Buffers::Splits => (n * e, n * e),
                Buffers::Free if kind.p2p => (e, e),
                Buffers::Free => (0, 0),
                // the root is the group's first member
                Buffers::GatherToRoot => (e, if local == 0 { n * e } else { 0 }),
                Buffers::ScatterFromRoot => (if local == 0 { n * e } else { 0 }, e),
            };
            let mut c = template.clone();
            c["kind"] = kind.name.into();
            c["source_name"] = kind.pytorch.into();
            c["seq"] = next_seq(colls, kind.name, peer).into();
            (c["in_elems"], c["out_elems"]) = (ins.into(), outs.into());
            (c["in_split_elems"], c["out_split_elems"]) = (serde_json::Value::Null, serde_json::Value::Null);
            c["root"] = if kind.rooted { members[0].into() } else { serde_json::Value::Null };
            c["peer"] = peer.map_or(serde_json::Value::Null, Into::into);
            (c["host_start_ns"], c["host_duration_ns"]) = (at.into(), 1_000.into());
            c["device"] = serde_json::Value::Null;
            c["compute_before"] = serde_json::json!([]);
            at += 10_000;
            colls.push(c);
        }
    }
    (v, rows.iter().map(|r| r.name).collect())
}

/// Environment variable that turns a test binary's own-path walk on: the
/// outer test runs the binary under mpirun with it set to the folder for the ranks' lines.
pub const OWN_PATH_INNER: &str = "COMMCANARY_OWN_PATH_INNER";

/// Sizes the own-path walk issues a kind at over `n` ranks, bytes of `dtype`:
/// one element per rank and a thousand (whole per rank, so that every kind
/// splits), none for a barrier; no size for the kinds only a trace replay
/// runs (the own path refuses them: `backend::own`'s tests).
pub fn own_path_sizes(row: &KindRow, n: u32, dtype: shard::Dtype) -> Vec<u64> {
    if row.replay_only {
        return vec![];
    }
    if row.kind == collective::CollectiveKind::Barrier {
        return vec![0];
    }
    [1u64, 1000].iter().map(|k| k * u64::from(n) * dtype.size_bytes()).collect()
}

/// One rank's walk of the kind table through a backend's own path: every
/// row enqueued on the world twice, started and waited for (`Timing::Async`)
/// and then three times back to back (`Timing::BackToBack`, closed by
/// `end_back_to_back`), synchronized and checked (`Checked::Last`) at
/// [`own_path_sizes`]; the pass then reports one interval per call. Then an
/// all-reduce whose result is spoiled (`corrupt`) must fail its check. On
/// the cuda backend every call of the pass must have its device interval,
/// and each row also runs twice in one CUDA graph (`GraphStep::Calls`).
/// After each started call's check, its result is emptied (`Call::ClearWorld`)
/// and checked again: every element it holds must then fail.
/// Returns one line per check, `kind=… dtype=… bytes=… checked=… wrong=…`
/// (`cleared=…` for an emptied one), and the negative control's line,
/// `negative wrong=…`, for the outer test.
pub fn own_path_walk<B: commcanary::backend::Backend>(
    b: &mut B,
    n: u32,
    rank: u32,
    dtype: shard::Dtype,
) -> Vec<String> {
    use commcanary::backend::own::OwnOp;
    use commcanary::backend::{Call, Checked, GraphStep, Timing};
    use commcanary::evidence::shard::BackendKind;
    let cuda = b.info().kind == BackendKind::Cuda;
    use commcanary::core::collective::{CollectiveKind, KINDS};
    let mut lines = Vec::new();
    let mut calls = 0;
    for row in KINDS {
        for bytes in own_path_sizes(&row, n, dtype) {
            let call = Call::World { kind: row.kind, bytes, dtype };
            for timing in [Timing::Async, Timing::BackToBack] {
                let runs = if timing == Timing::Async { 1 } else { 3 };
                for _ in 0..runs {
                    b.enqueue(call, timing).unwrap_or_else(|e| panic!("{timing:?} {} of {bytes} B: {e}", row.name));
                    if timing == Timing::Async {
                        b.wait().unwrap();
                    }
                    calls += 1;
                }
                b.end_back_to_back().unwrap();
                b.synchronize().unwrap();
                let out = b
                    .check(Checked::Last { kind: row.kind, bytes, dtype }, false)
                    .unwrap_or_else(|e| panic!("check {} of {bytes} B: {e}", row.name));
                let checked = OwnOp::new(row.kind, bytes, dtype, n, rank).unwrap().recv_elems;
                lines.push(format!(
                    "kind={} dtype={} bytes={bytes} timing={timing:?} checked={checked} wrong={} first={:?}",
                    row.name,
                    dtype.name(),
                    out.wrong_elements,
                    out.first_wrong
                ));
                if timing == Timing::Async {
                    // emptied, the result fails its check: a later call's check cannot pass on this one's
                    b.enqueue(Call::ClearWorld { kind: row.kind, bytes, dtype }, Timing::HostWait).unwrap();
                    let out = b.check(Checked::Last { kind: row.kind, bytes, dtype }, false).unwrap();
                    let (name, wrong) = (row.name, out.wrong_elements);
                    lines.push(format!(
                        "kind={name} dtype={} bytes={bytes} cleared={checked} wrong={wrong}",
                        dtype.name()
                    ));
                }
            }
            if cuda {
                b.graph(GraphStep::Calls { kind: row.kind, bytes, dtype, n: 2 })
                    .unwrap_or_else(|e| panic!("graph of {} of {bytes} B: {e}", row.name));
                calls += 2;
                b.synchronize().unwrap();
                let out = b.check(Checked::Last { kind: row.kind, bytes, dtype }, false).unwrap();
                lines.push(format!(
                    "kind={} dtype={} bytes={bytes} timing=Graph wrong={} first={:?}",
                    row.name,
                    dtype.name(),
                    out.wrong_elements,
                    out.first_wrong
                ));
            }
        }
    }
    let timed = b.finish_pass().unwrap();
    assert_eq!(timed.collectives.len(), calls, "one interval (measured or not) per call of the pass");
    if cuda {
        let unmeasured = timed.collectives.iter().filter(|iv| iv.is_none()).count();
        assert_eq!(unmeasured, 0, "every call on the cuda backend has its device interval");
    }
    let bytes = 4 * u64::from(n) * dtype.size_bytes();
    b.enqueue(Call::World { kind: CollectiveKind::AllReduce, bytes, dtype }, Timing::Async).unwrap();
    b.wait().unwrap();
    b.synchronize().unwrap();
    let last = Checked::Last { kind: CollectiveKind::AllReduce, bytes, dtype };
    lines.push(format!("negative wrong={}", b.check(last, true).unwrap().wrong_elements));
    b.finish_pass().unwrap();
    lines
}

/// The outer side of [`own_path_walk`]: every rank of `n` printed a line for
/// every kind, dtype and size with no wrong element, each kind's result was
/// checked somewhere (a barrier's nowhere), and every rank's negative control failed.
pub fn assert_own_path_walks(stdout: &str, n: u32, dtypes: &[shard::Dtype]) {
    use commcanary::core::collective::{CollectiveKind, KINDS};
    // the harness's own words ("test own_path_rank ... ") may share a line with a rank's first
    let lines: Vec<&str> = stdout.lines().flat_map(|l| l.split("own-path ").skip(1)).map(str::trim_end).collect();
    for dtype in dtypes {
        for row in KINDS {
            for (bytes, timing) in
                own_path_sizes(&row, n, *dtype).into_iter().flat_map(|b| [(b, "Async"), (b, "BackToBack")])
            {
                let key = format!("kind={} dtype={} bytes={bytes} timing={timing} ", row.name, dtype.name());
                let found: Vec<&&str> = lines.iter().filter(|l| l.contains(&key)).collect();
                assert_eq!(found.len(), n as usize, "{key}: one line per rank in\n{stdout}");
                assert!(found.iter().all(|l| l.contains(" wrong=0 ")), "{key}: a wrong result: {found:?}");
                let checked: u64 = found
                    .iter()
                    .map(|l| l.split(" checked=").nth(1).unwrap().split(' ').next().unwrap().parse::<u64>().unwrap())
                    .sum();
                assert_eq!(
                    checked > 0,
                    row.kind != CollectiveKind::Barrier,
                    "{key}: elements checked over the ranks: {checked}"
                );
            }
        }
    }
    let cleared: Vec<&&str> = lines.iter().filter(|l| l.contains(" cleared=")).collect();
    assert_eq!(cleared.len(), lines.iter().filter(|l| l.contains(" timing=Async ")).count(), "{stdout}");
    for l in cleared {
        let number = |key: &str| l.split(key).nth(1).unwrap().split(' ').next().unwrap().parse::<u64>().unwrap();
        assert_eq!(number(" cleared="), number(" wrong="), "every element of an emptied result fails: {l}");
    }
    let graphs: Vec<&&str> = lines.iter().filter(|l| l.contains(" timing=Graph ")).collect();
    assert!(graphs.iter().all(|l| l.contains(" wrong=0 ")), "a wrong result from a graph: {graphs:?}");
    let negatives: Vec<&&str> = lines.iter().filter(|l| l.contains(" negative ")).collect();
    assert_eq!(negatives.len(), n as usize * dtypes.len(), "{stdout}");
    assert!(negatives.iter().all(|l| !l.ends_with("wrong=0")), "a spoiled result must fail its check: {negatives:?}");
}

/// One rank's side of an own-path test, under the mpirun of
/// [`own_path_mpirun`] (a no-op when the test binary runs alone): MPI up,
/// then for f32 and bf16 a backend from `make` walks the table
/// ([`own_path_walk`]); its lines go to `rank-R.txt` in the folder the
/// outer test names in [`OWN_PATH_INNER`].
pub fn own_path_inner<B: commcanary::backend::Backend>(
    mut make: impl FnMut(&mpi::topology::SimpleCommunicator, commcanary::backend::BackendPlan) -> B,
) {
    use mpi::topology::Communicator;
    let Ok(dir) = std::env::var(OWN_PATH_INNER) else { return };
    let universe = mpi::initialize().expect("MPI initialises once");
    let world = universe.world();
    let (n, rank) = (world.size() as u32, world.rank() as u32);
    let mut lines = String::new();
    for dtype in OWN_PATH_DTYPES {
        let plan = commcanary::backend::BackendPlan {
            max_bytes: 1 << 16,
            dtype,
            gemms: vec![],
            weight_sets: 1,
            membound_bytes: 0,
        };
        let mut b = make(&world, plan);
        for l in own_path_walk(&mut b, n, rank, dtype) {
            lines.push_str(&format!("own-path rank={rank} {l}\n"));
        }
    }
    std::fs::write(Path::new(&dir).join(format!("rank-{rank}.txt")), lines).unwrap();
}

/// The element types an own-path walk runs.
pub const OWN_PATH_DTYPES: [shard::Dtype; 2] = [shard::Dtype::F32, shard::Dtype::Bf16];

/// Run this test binary's ignored test `inner` ([`own_path_inner`]) under
/// `mpirun -n N` and check what every rank printed ([`assert_own_path_walks`]).
pub fn own_path_mpirun(inner: &str, n: u32) -> String {
    let exe = std::env::current_exe().unwrap();
    // each rank writes its lines to a file of its own: mpirun may tear lines that ranks print at once
    let out = tempfile::tempdir().unwrap();
    let o = Command::new("mpirun")
        .args(["--oversubscribe", "-n", &n.to_string()])
        .arg(&exe)
        .args(["--exact", inner, "--ignored", "--nocapture", "--test-threads", "1"])
        .env(OWN_PATH_INNER, out.path())
        .env("OMPI_ALLOW_RUN_AS_ROOT", "1")
        .env("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1")
        .env("OMPI_MCA_rmaps_base_oversubscribe", "1")
        .output()
        .expect("mpirun must be installed (scripts/setup.sh installs it)");
    let printed = String::from_utf8_lossy(&o.stdout);
    assert!(o.status.success(), "{printed}\n{}", String::from_utf8_lossy(&o.stderr));
    let stdout: String =
        (0..n).map(|r| std::fs::read_to_string(out.path().join(format!("rank-{r}.txt"))).unwrap()).collect();
    eprintln!("{} own-path lines from {n} rank(s)", stdout.matches("own-path ").count());
    assert_own_path_walks(&stdout, n, &OWN_PATH_DTYPES);
    stdout
}

/// The two-rank PyTorch trace of the H200 fixture imported into `dir/tp2.comm.json`, and a campaign
/// spec `dir/trace.toml` over it (2 ranks, two Open MPI iallreduce algorithms, `phases`); returns
/// (trace, spec).
pub fn tp2_trace_campaign(dir: &Path, phases: &str) -> (PathBuf, PathBuf) {
    let fixture =
        |r: u32| format!("{}/tests/data/pytorch-2.11-tp2-h200/kineto.rank-{r}.json.gz", env!("CARGO_MANIFEST_DIR"));
    let k = dir.join("tp2.comm.json");
    ok(&cc(&["import", "kineto", &fixture(0), &fixture(1), "-o", k.to_str().unwrap()]));
    let sp = dir.join("trace.toml");
    let spec = r#"
name = "trace"
backend = "cpu"
ranks = 2
repetitions = 2
seed = 5
[launcher]
kind = "mpirun"
args = ["--oversubscribe"]
[workload]
phases = "PHASES"
tokens = 2
layers = 2
model = "synthetic"
trace = "tp2.comm.json"
extra_args = ["--trace-allreduce-only", "--dtype", "bf16", "--warmup-tokens", "1"]
[analysis]
tie_policy = "interval"
[[configs]]
name = "ring"
env = { OMPI_MCA_coll_libnbc_iallreduce_algorithm = "1" }
[[configs]]
name = "binomial"
env = { OMPI_MCA_coll_libnbc_iallreduce_algorithm = "2" }
"#;
    std::fs::write(&sp, spec.replace("PHASES", phases)).unwrap();
    (k, sp)
}
