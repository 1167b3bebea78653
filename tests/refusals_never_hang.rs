//! Refusals that end instead of hanging: inputs that are FIFOs, devices or
//! directories are refused with a named code instead of hanging or reading
//! for ever, a small compressed trace of very many events stops at the event
//! limit, and what plan, exec, join, archive and import can know early is
//! refused early. Every command here runs under a watchdog: a hang fails the
//! test instead of the suite. (First found by issue 31's adversarial probe;
//! "Defect N" below is that issue's.)
mod common;
use commcanary::core::fsutil;
use commcanary::evidence::commtrace::Limits;
use common::*;
use std::io::Write;
use std::os::unix::fs::symlink;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

/// Run `commcanary ARGS` (allowed to launch mpirun as root), killed and
/// failed if it has not ended within `secs`: a hang is the defect.
fn within(secs: u64, args: &[&str]) -> Output {
    within_cmd(secs, Command::new(bin()).args(args))
}

fn within_cmd(secs: u64, cmd: &mut Command) -> Output {
    let mut child = cmd
        .env("OMPI_ALLOW_RUN_AS_ROOT", "1")
        .env("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .process_group(0)
        .spawn()
        .expect("binary runs");
    let t0 = Instant::now();
    while child.try_wait().unwrap().is_none() {
        if t0.elapsed() > Duration::from_secs(secs) {
            // SAFETY: signalling the process group this test created.
            unsafe { libc::kill(-(child.id() as i32), libc::SIGKILL) };
            let o = child.wait_with_output().unwrap();
            panic!(
                "{:?} hung past {secs} s\nstderr:\n{}",
                cmd.get_args().collect::<Vec<_>>(),
                String::from_utf8_lossy(&o.stderr)
            );
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    child.wait_with_output().unwrap()
}

use std::os::unix::process::CommandExt;

fn mkfifo(p: &Path) -> PathBuf {
    let c = std::ffi::CString::new(p.to_str().unwrap()).unwrap();
    // SAFETY: `c` is a valid NUL-terminated path that outlives the call.
    assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0, "mkfifo {}", p.display());
    p.to_path_buf()
}

fn s(p: &Path) -> &str {
    p.to_str().unwrap()
}

/// Refused with `code`, naming `file`, and no panic.
fn refused_naming(o: &Output, code: &str, file: &str) {
    let err = assert_refused(o, code);
    assert!(err.contains(file), "the refusal names {file}:\n{err}");
    assert!(!err.contains("panicked"), "{err}");
}

/// Defects 2 and 3: every reader of a user-named file refuses a FIFO, a
/// character device (also behind a symbolic link) and a directory, naming it,
/// instead of blocking for ever or reading until memory runs out.
#[test]
fn fifos_devices_and_directories_are_refused_by_every_reader() {
    let d = tempfile::tempdir().unwrap();
    let fifo = mkfifo(&d.path().join("rank-0.json"));
    let link = d.path().join("zero.json");
    symlink("/dev/zero", &link).unwrap();
    let dir = d.path().join("a-directory");
    std::fs::create_dir(&dir).unwrap();
    let out = d.path().join("out");
    for bad in [fifo.as_path(), Path::new("/dev/zero"), link.as_path(), dir.as_path()] {
        let b = s(bad);
        let cases: Vec<Vec<&str>> = vec![
            vec!["import", "kineto", b, "-o", s(&out)],
            vec!["import", "et", b, "-o", s(&out)],
            vec!["export", "param", b, "-o", s(&out)],
            vec!["campaign", "plan", b, "-o", s(&out)],
            vec!["queue", "--service-times", b, "--mode", "closed", "--clients", "2"],
            vec!["compare", "--proxy", b, "--truth", b],
            vec!["overlap", "--intervals", b],
            vec!["inspect", b],
            vec!["validate", "--backend", "cpu", "--record-reference", "--out", s(&out), "--site", b],
        ];
        for args in cases {
            let o = within(60, &args);
            // a directory is compare's folder of nccl-tests outputs: an empty one holds none
            let code = if args[0] == "compare" && bad == dir.as_path() { "BAD_INPUT" } else { "NOT_REGULAR_FILE" };
            let err = assert_refused(&o, code);
            assert!(err.contains(b), "{args:?}: the refusal names {b}:\n{err}");
            assert!(!out.exists(), "{args:?}: a refused command wrote {}", out.display());
        }
    }
}

/// Defect 1: a gzip of a few hundred kB holding one event more than the
/// 50 M-event limit is refused at the limit (`OVER_LIMIT`), under a 3 GiB
/// address-space limit: the events before it are counted, not built (built,
/// they take about 8 GB and the import aborts on a failed allocation).
#[test]
fn a_small_gzip_of_too_many_tiny_events_stops_at_the_limit() {
    let d = tempfile::tempdir().unwrap();
    let p = d.path().join("many.json.gz");
    let mut gz = flate2::write::GzEncoder::new(std::fs::File::create(&p).unwrap(), flate2::Compression::fast());
    gz.write_all(b"{\"traceEvents\":[").unwrap();
    let chunk = "{},".repeat(1 << 20);
    let limit = Limits::default().max_events;
    let mut n = 0;
    while n + (1 << 20) <= limit {
        gz.write_all(chunk.as_bytes()).unwrap();
        n += 1 << 20;
    }
    for _ in n..limit {
        gz.write_all(b"{},").unwrap();
    }
    gz.write_all(b"{}]}").unwrap();
    gz.finish().unwrap();
    assert!(std::fs::metadata(&p).unwrap().len() < 4 << 20, "a small file");
    let out = d.path().join("t.json");
    let o = within_cmd(
        300,
        Command::new("sh").args([
            "-c",
            "ulimit -v 3145728 && exec \"$0\" \"$@\"",
            &bin(),
            "import",
            "kineto",
            s(&p),
            "-o",
            s(&out),
        ]),
    );
    let err = assert_refused(&o, "OVER_LIMIT");
    assert_eq!(o.status.code(), Some(1), "{err}");
    assert!(err.contains(&format!("more than {limit} events")), "{err}");
    assert!(!out.exists());
}

/// Defect 3: `campaign exec` whose frozen trace was replaced by a FIFO, or by
/// a symbolic link to a device, refuses instead of hashing it for ever.
#[test]
fn exec_refuses_a_frozen_trace_replaced_by_a_fifo_or_a_device() {
    let t = tempfile::tempdir().unwrap();
    let (_, sp) = tp2_trace_campaign(t.path(), "replay");
    for (i, what) in ["fifo", "device"].into_iter().enumerate() {
        let c = t.path().join(format!("c{i}"));
        ok(&cc(&["campaign", "plan", s(&sp), "-o", s(&c)]));
        let frozen = c.join("trace.json");
        std::fs::remove_file(&frozen).unwrap();
        if what == "fifo" {
            mkfifo(&frozen);
        } else {
            symlink("/dev/zero", &frozen).unwrap();
        }
        let o = within(60, &["campaign", "exec", s(&c), "--cell-timeout-s", "30"]);
        refused_naming(&o, "NOT_REGULAR_FILE", "trace.json");
    }
}

/// The fixture's two ranks imported into `dir/tp2.comm.json`.
fn imported_fixture(dir: &Path) -> PathBuf {
    let fixture =
        |r: u32| format!("{}/tests/data/pytorch-2.11-tp2-h200/kineto.rank-{r}.json.gz", env!("CARGO_MANIFEST_DIR"));
    let k = dir.join("tp2.comm.json");
    if !k.exists() {
        ok(&cc(&["import", "kineto", &fixture(0), &fixture(1), "-o", s(&k)]));
    }
    k
}

/// `mpirun -n N commcanary ARGS` under the watchdog.
fn mpirun_within(secs: u64, n: u32, args: &[&str]) -> Output {
    within_cmd(
        secs,
        Command::new("mpirun")
            .args(["--oversubscribe", "-n", &n.to_string(), &bin()])
            .args(args)
            .env("OMPI_MCA_rmaps_base_oversubscribe", "1"),
    )
}

/// A rank with no collective of its own still makes the groups'
/// communicators with the others (a split is collective over the world): the
/// replay ends, rank 1 with no record and rank 0's every call checked. It
/// hung when only ranks with calls prepared.
#[test]
fn replay_trace_of_a_rank_without_collectives_ends() {
    let d = tempfile::tempdir().unwrap();
    let mut t: serde_json::Value = serde_json::from_slice(&std::fs::read(imported_fixture(d.path())).unwrap()).unwrap();
    // rank 0's calls on groups of rank 0 alone; rank 1 has none
    for g in t["groups"].as_array_mut().unwrap() {
        g["members"] = serde_json::json!([0]);
    }
    t["ranks"][1]["collectives"] = serde_json::json!([]);
    // the kinds whose counts hold on a group of one
    t["ranks"][0]["collectives"]
        .as_array_mut()
        .unwrap()
        .retain(|c| c["kind"] == "all_reduce" || c["kind"] == "broadcast");
    let one = d.path().join("one-sided.json");
    std::fs::write(&one, serde_json::to_vec(&t).unwrap()).unwrap();
    let out = d.path().join("out");
    ok(&mpirun_within(120, 2, &["replay-trace", s(&one), "--pace", "none", "--check", "--out", s(&out)]));
    let records = |r: u32| {
        let f: serde_json::Value =
            serde_json::from_slice(&std::fs::read(out.join(format!("replay-trace.rank-{r}.json"))).unwrap()).unwrap();
        f["records"].as_array().unwrap().clone()
    };
    let r0 = records(0);
    assert_eq!(r0.len(), t["ranks"][0]["collectives"].as_array().unwrap().len());
    assert!(r0.iter().all(|r| r["checked"] == true), "{r0:?}");
    assert!(records(1).is_empty());
}

/// Defect 6: `replay-trace` refuses a recorded gap over the one replay bound
/// (60 s, `MAX_REPLAY_GAP_NS`) before MPI starts, as `rank --trace` does,
/// instead of sleeping through it; back to back (`--pace none`) it is no wait.
/// Smaller item: a trace of another rank count is refused with a code.
#[test]
fn replay_trace_refuses_a_gap_over_the_bound_before_mpi_starts() {
    let d = tempfile::tempdir().unwrap();
    let k = imported_fixture(d.path());
    let mut t: serde_json::Value = serde_json::from_slice(&std::fs::read(&k).unwrap()).unwrap();
    // 1000 s before every rank's second collective
    for r in t["ranks"].as_array_mut().unwrap() {
        for c in r["collectives"].as_array_mut().unwrap().iter_mut().skip(1) {
            for f in ["host_start_ns"] {
                if let Some(v) = c[f].as_u64() {
                    c[f] = (v + 1_000_000_000_000).into();
                }
            }
            if c["device"].is_object() {
                for f in ["start_ns", "end_ns"] {
                    c["device"][f] = (c["device"][f].as_u64().unwrap() + 1_000_000_000_000).into();
                }
            }
        }
    }
    let gap = d.path().join("gap.comm.json");
    std::fs::write(&gap, serde_json::to_vec(&t).unwrap()).unwrap();
    let out = d.path().join("out");
    let o = mpirun_within(120, 2, &["replay-trace", s(&gap), "--out", s(&out)]);
    let err = assert_refused(&o, "OUT_OF_RANGE");
    assert!(err.contains("gap of 1000") && err.contains("gap.comm.json"), "{err}");
    assert!(!out.exists(), "refused before MPI started: nothing written");
    // the same bound as rank --trace
    let o = mpirun_within(
        120,
        2,
        &[
            "rank",
            "-q",
            "--backend",
            "cpu",
            "--trace",
            s(&gap),
            "--phases",
            "replay",
            "--trace-allreduce-only",
            "--out",
            s(&out),
        ],
    );
    assert_refused(&o, "OUT_OF_RANGE");
    // unpaced, the gap is not waited: the replay runs
    ok(&mpirun_within(300, 2, &["replay-trace", s(&gap), "--pace", "none", "--no-warmup", "--out", s(&out)]));
    // one rank for a two-rank trace: a coded refusal
    let o = within(120, &["replay-trace", s(&k), "--pace", "none", "--out", s(&d.path().join("one"))]);
    assert_refused(&o, "BAD_ARGUMENT");
}

/// The fixture's file of `kind` for `rank`, decompressed and parsed.
fn fixture_json(kind: &str, rank: u32) -> serde_json::Value {
    use std::io::Read;
    let p = format!("{}/tests/data/pytorch-2.11-tp2-h200/{kind}.rank-{rank}.json.gz", env!("CARGO_MANIFEST_DIR"));
    let mut json = Vec::new();
    flate2::read::GzDecoder::new(std::fs::File::open(p).unwrap()).read_to_end(&mut json).unwrap();
    serde_json::from_slice(&json).unwrap()
}

/// Kineto `record_param_comms` events of a parsed file.
fn comms(v: &mut serde_json::Value) -> Vec<&mut serde_json::Value> {
    v["traceEvents"].as_array_mut().unwrap().iter_mut().filter(|e| e["name"] == "record_param_comms").collect()
}

/// Import the two (edited) Kineto files; refused with BAD_INPUT naming `want`, nothing written.
fn kineto_refused(d: &Path, tag: &str, files: [serde_json::Value; 2], want: &str) {
    let paths: Vec<PathBuf> = files
        .iter()
        .enumerate()
        .map(|(r, v)| {
            let p = d.join(format!("{tag}.rank-{r}.json"));
            std::fs::write(&p, serde_json::to_vec(v).unwrap()).unwrap();
            p
        })
        .collect();
    let out = d.join(format!("{tag}.comm.json"));
    let o = within(60, &["import", "kineto", s(&paths[0]), s(&paths[1]), "-o", s(&out)]);
    let err = assert_refused(&o, "BAD_INPUT");
    assert!(err.contains(want), "{tag}: expected {want:?} in\n{err}");
    assert!(!err.contains("out of range integral type conversion"), "{err}");
    assert!(!out.exists(), "{tag}: a refused import wrote {}", out.display());
}

/// Defect 10: import refuses a group with a duplicate member, a count whose
/// bytes overflow, a record whose rank contradicts the file's, and rank
/// files of two runs of the same shape; a crafted communication trace with a
/// duplicate or outside member is refused where it is read.
#[test]
fn import_refuses_impossible_groups_counts_ranks_and_mixed_runs() {
    let d = tempfile::tempdir().unwrap();
    let base = || [fixture_json("kineto", 0), fixture_json("kineto", 1)];

    // group "1" as [0, 1, 1]: rank 1 twice
    let mut f = base();
    for v in f.iter_mut() {
        for pg in v["distributedInfo"]["pg_config"].as_array_mut().unwrap() {
            if pg["pg_name"] == "1" {
                pg["ranks"] = serde_json::json!([0, 1, 1]);
                pg["pg_size"] = 3.into();
            }
        }
        for e in comms(v) {
            if e["args"]["Process Group Name"] == "1" {
                e["args"]["Process Group Ranks"] = "[0, 1, 1]".into();
                e["args"]["Group size"] = 3.into();
            }
        }
    }
    kineto_refused(d.path(), "dup", f, "lists rank 1 twice");

    // 2^64 - 1 elements
    let mut f = base();
    for v in f.iter_mut() {
        let e = comms(v).into_iter().next().unwrap();
        e["args"]["In msg nelems"] = u64::MAX.into();
        e["args"]["Out msg nelems"] = u64::MAX.into();
    }
    kineto_refused(d.path(), "huge", f, "more than any collective's buffer holds");

    // rank 1's file says one of its all-reduces was recorded by rank 0
    let mut f = base();
    let e = comms(&mut f[1]).into_iter().next().unwrap();
    e["args"]["Rank"] = 0.into();
    kineto_refused(d.path(), "rank", f, "says it was recorded by rank 0");

    // rank 1 from a run of the same shape an hour later
    let mut f = base();
    let b = f[1]["baseTimeNanoseconds"].as_u64().unwrap();
    f[1]["baseTimeNanoseconds"] = (b + 3_600_000_000_000).into();
    kineto_refused(d.path(), "runs", f, "come from different runs");

    // the same for execution traces: their start times an hour apart
    let mut e1 = fixture_json("et", 1);
    e1["time"] = "2026-11-30 16:18:23".into();
    let (p0, p1) = (d.path().join("et.rank-0.json"), d.path().join("et.rank-1.json"));
    std::fs::write(&p0, serde_json::to_vec(&fixture_json("et", 0)).unwrap()).unwrap();
    std::fs::write(&p1, serde_json::to_vec(&e1).unwrap()).unwrap();
    let o = within(60, &["import", "et", s(&p0), s(&p1), "-o", s(&d.path().join("et.comm.json"))]);
    assert!(assert_refused(&o, "BAD_INPUT").contains("come from different runs"));

    // a crafted communication trace: a duplicate member, a member outside the world
    let k = imported_fixture(d.path());
    for (tag, members, want) in
        [("dupm", serde_json::json!([0, 1, 1]), "twice"), ("outm", serde_json::json!([0, 1, 7]), "outside the world")]
    {
        let mut t: serde_json::Value = serde_json::from_slice(&std::fs::read(&k).unwrap()).unwrap();
        t["groups"][1]["members"] = members;
        let p = d.path().join(format!("{tag}.comm.json"));
        std::fs::write(&p, serde_json::to_vec(&t).unwrap()).unwrap();
        let o = within(60, &["export", "param", s(&p), "-o", s(&d.path().join(tag))]);
        assert!(assert_refused(&o, "BAD_INPUT").contains(want), "{tag}");
    }
}

/// A small two-configuration CPU spec (`extra` appended).
fn small_spec(dir: &Path, tag: &str, seed: u64, extra: &str) -> PathBuf {
    let p = dir.join(format!("{tag}.toml"));
    std::fs::write(
        &p,
        format!(
            r#"
name = "t"
backend = "cpu"
ranks = 2
repetitions = 2
seed = {seed}
[launcher]
kind = "mpirun"
args = ["--oversubscribe"]
[workload]
phases = "blocking"
tokens = 2
layers = 2
iters = 3
[analysis]
tie_policy = "interval"
[[configs]]
name = "ring"
env = {{ OMPI_MCA_coll_libnbc_iallreduce_algorithm = "1" }}
[[configs]]
name = "binomial"
env = {{ OMPI_MCA_coll_libnbc_iallreduce_algorithm = "2" }}
{extra}
"#
        ),
    )
    .unwrap();
    p
}

/// Defect 8: a `campaign join` refused half-way (a duplicate attempt id,
/// found after copying the first run) leaves no half-written output, so the
/// rerun after the fix is not blocked by `ALREADY_EXISTS`.
#[test]
fn a_refused_campaign_join_leaves_no_output_directory() {
    let d = tempfile::tempdir().unwrap();
    let (a, b) = (d.path().join("a"), d.path().join("b"));
    ok(&cc(&["campaign", "plan", s(&small_spec(d.path(), "a", 1, "")), "-o", s(&a)]));
    ok(&cc(&["campaign", "plan", s(&small_spec(d.path(), "b", 2, "")), "-o", s(&b)]));
    let m: serde_json::Value = serde_json::from_slice(&std::fs::read(b.join("manifest.json")).unwrap()).unwrap();
    let cell = &m["schedule"][0];
    let id = format!("{}-a1", cell["cell_id"].as_str().unwrap());
    std::fs::create_dir_all(b.join("runs").join(&id)).unwrap();
    std::fs::write(b.join("runs").join(&id).join("run.json"), b"{}").unwrap();
    let rec = serde_json::json!({
        "attempt_id": id, "cell_id": cell["cell_id"], "label": cell["label"], "round": cell["round"],
        "manifest_sha256": std::fs::read_to_string(b.join("manifest.sha256")).unwrap().trim(),
        "status": "failed", "exit_code": 1, "failure": "exit code 1", "argv": ["mpirun"],
        "started_unix_ms": 1, "finished_unix_ms": 2, "stdout_sha256": "", "stderr_sha256": "",
        "run_dir": format!("runs/{id}"), "run_json_sha256": null, "shards": [], "identity_sha256": null, "host": "h"
    })
    .to_string();
    std::fs::write(b.join("attempts.jsonl"), format!("{rec}\n{rec}\n")).unwrap();
    let j = d.path().join("joined");
    let o = within(60, &["campaign", "join", s(&a), s(&b), "-o", s(&j)]);
    assert_refused(&o, "DUPLICATE_ATTEMPT");
    assert!(!j.exists(), "a refused join left {}", j.display());
    let left: Vec<String> =
        std::fs::read_dir(d.path()).unwrap().map(|e| e.unwrap().file_name().to_string_lossy().into_owned()).collect();
    assert!(!left.iter().any(|n| n.contains("joined")), "a temporary was left: {left:?}");
    // the cause fixed, the same command runs
    std::fs::write(b.join("attempts.jsonl"), format!("{rec}\n")).unwrap();
    ok(&within(60, &["campaign", "join", s(&a), s(&b), "-o", s(&j)]));
    assert!(j.join("manifest.json").exists() && j.join("runs").exists());
}

/// Defect 9: what is known at plan time is refused at plan time
/// (`BAD_SPEC`, naming the field), not after every cell ran; smaller item: a
/// rank outside the world in `--inject-delay`/`--inject-clock` is refused with
/// a code before MPI starts.
#[test]
fn plan_refuses_specs_no_cell_can_run_or_analyze() {
    let d = tempfile::tempdir().unwrap();
    let cfg = |args: &str, env: &str| format!("[[configs]]\nname = \"third\"\nargs = [{args}]\nenv = {{ {env} }}\n");
    let cases: Vec<(&str, String, &str, &str)> = vec![
        ("strict", String::new(), "tie_policy = \"interval\"", "analysis.tie_policy"),
        ("iqr", String::new(), "tie_policy = \"iqr\"", "analysis.tie_policy"),
        ("delay9", cfg("\"--inject-delay\", \"rank=9,every=2,us=100\"", ""), "", "--inject-delay names rank 9"),
        ("clock9", cfg("\"--inject-clock\", \"rank=9,offset_us=5\"", ""), "", "rank 9"),
        ("nul", cfg("", "X = \"a\\u0000b\""), "", "NUL byte"),
        ("envname", cfg("", "\"1BAD\" = \"x\""), "", "not an environment variable name"),
        ("launcher-n", String::new(), "args = [\"--oversubscribe\", \"-n\", \"1\"]", "launcher.args"),
        ("cuda", cfg("\"--backend\", \"cuda\"", ""), "", "backend"),
        ("repeat0", cfg("\"--inject-repeat\", \"0\"", ""), "", "--inject-repeat 0 is outside its range"),
        ("repeat-cuda", cfg("\"--inject-repeat\", \"2\"", ""), "", "--inject-repeat needs backend = \"cpu\""),
    ];
    for (tag, extra, replace, needle) in cases {
        let p = small_spec(d.path(), tag, 1, &extra);
        let text = std::fs::read_to_string(&p).unwrap();
        let text = match tag {
            "strict" => text.replace(replace, "tie_policy = \"strict\""),
            "iqr" => text.replace("tie_policy = \"interval\"", replace),
            "launcher-n" => text.replace("args = [\"--oversubscribe\"]", replace),
            "repeat-cuda" => text.replace("backend = \"cpu\"", "backend = \"cuda\""),
            _ => text,
        };
        std::fs::write(&p, text).unwrap();
        let c = d.path().join(format!("c-{tag}"));
        let o = within(60, &["campaign", "plan", s(&p), "-o", s(&c)]);
        let err = assert_refused(&o, "BAD_SPEC");
        assert!(err.contains(needle) && err.contains(&format!("{tag}.toml")), "{tag}: expected {needle:?} in\n{err}");
        assert!(!c.join("manifest.json").exists(), "{tag}: nothing planned");
    }
    // the spec the cases started from plans
    ok(&cc(&["campaign", "plan", s(&small_spec(d.path(), "fine", 1, "")), "-o", s(&d.path().join("fine"))]));
    // rank: a delayed or skewed rank outside the world, refused before MPI starts
    for flag in [["--inject-delay", "rank=9,every=2,us=100"], ["--inject-clock", "rank=9,offset_us=5"]] {
        let out = d.path().join("r");
        let o = mpirun_within(
            120,
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
                "--layers",
                "2",
                flag[0],
                flag[1],
                "--out",
                s(&out),
            ],
        );
        assert!(assert_refused(&o, "OUT_OF_RANGE").contains("rank 9"));
        assert!(!out.exists());
    }
}

/// Defect 9, remaining part: `repetitions = 1` can run but never be analyzed
/// (every interval is over rounds, with rounds - 1 degrees of freedom), so
/// `plan` refuses it with `BAD_SPEC` naming the field, before any cell runs.
/// A part meant only for `campaign join` declares `join_part = true` and
/// plans; `campaign run`, which ends with analyze, refuses such a part.
#[test]
fn plan_refuses_one_round_unless_the_spec_is_a_join_part() {
    let d = tempfile::tempdir().unwrap();
    let one = |tag: &str, extra: &str| {
        let p = small_spec(d.path(), tag, 1, "");
        let text = std::fs::read_to_string(&p).unwrap().replace("repetitions = 2", &format!("repetitions = 1{extra}"));
        std::fs::write(&p, text).unwrap();
        p
    };
    let c = d.path().join("c-one");
    let o = within(60, &["campaign", "plan", s(&one("one", "")), "-o", s(&c)]);
    let err = assert_refused(&o, "BAD_SPEC");
    assert!(err.contains("one.toml") && err.contains("repetitions = 1") && err.contains("join_part"), "{err}");
    assert!(!c.join("manifest.json").exists(), "nothing planned");
    // the same refusal through `campaign run`, before any cell runs
    let r = d.path().join("r-one");
    let o = within(60, &["campaign", "run", s(&one("one-run", "")), "-o", s(&r)]);
    assert!(assert_refused(&o, "BAD_SPEC").contains("repetitions = 1"));
    assert!(!r.join("attempts.jsonl").exists() && !r.join("manifest.json").exists(), "no cell ran");
    // a declared join part plans, and its manifest records the declaration
    let part = one("part", "\njoin_part = true");
    let p = d.path().join("c-part");
    ok(&within(60, &["campaign", "plan", s(&part), "-o", s(&p)]));
    let m: serde_json::Value = serde_json::from_slice(&std::fs::read(p.join("manifest.json")).unwrap()).unwrap();
    assert_eq!(m["spec"]["join_part"], true);
    // ... but `campaign run` of it is refused: it would end in an analyze that cannot be
    let r = d.path().join("r-part");
    let o = within(60, &["campaign", "run", s(&part), "-o", s(&r)]);
    assert!(assert_refused(&o, "BAD_SPEC").contains("campaign join"));
    assert!(!r.join("manifest.json").exists(), "no cell ran");
    // two rounds plan without the declaration, and their manifest does not carry it
    let two = d.path().join("c-two");
    ok(&within(60, &["campaign", "plan", s(&small_spec(d.path(), "two", 1, "")), "-o", s(&two)]));
    let m: serde_json::Value = serde_json::from_slice(&std::fs::read(two.join("manifest.json")).unwrap()).unwrap();
    assert!(m["spec"].get("join_part").is_none(), "{}", m["spec"]);
}

/// Smaller items: `campaign exec` exits non-zero, naming the cells, when a
/// cell is left without a successful attempt; `--run-id .` and `..` are
/// refused; `PATH` (and `LD_PRELOAD` when set) is in the recorded identity.
#[test]
fn exec_fails_with_a_failed_cell_run_ids_and_recorded_paths() {
    let d = tempfile::tempdir().unwrap();
    let sp = small_spec(
        d.path(),
        "broken",
        3,
        "[[configs]]\nname = \"broken\"\nargs = [\"--trace\", \"/nonexistent/t.jsonl\"]\n",
    );
    let c = d.path().join("c");
    ok(&cc(&["campaign", "plan", s(&sp), "-o", s(&c)]));
    let o = within(300, &["campaign", "exec", s(&c)]);
    let err = assert_refused(&o, "FAILED_ATTEMPT");
    assert_eq!(o.status.code(), Some(1), "{err}");
    assert!(err.contains("r01-") && err.contains("broken"), "{err}");
    for id in [".", ".."] {
        let out = d.path().join("runs");
        let o = mpirun_within(
            120,
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
                "--layers",
                "2",
                "--run-id",
                id,
                "--out",
                s(&out),
            ],
        );
        assert!(assert_refused(&o, "BAD_ARGUMENT").contains("--run-id"));
        assert!(!out.exists());
    }
    let run = run_rank(2, &d.path().join("r"), &["--phases", "blocking", "--tokens", "2", "--layers", "2"]);
    let shard: serde_json::Value =
        serde_json::from_str(&ok(&cc(&["inspect", s(&run.join("rank-00000.shard"))]))).unwrap();
    let env = shard["header"]["identity"]["env"].as_array().unwrap();
    assert!(env.iter().any(|kv| kv[0] == "PATH" && !kv[1].as_str().unwrap().is_empty()), "{env:?}");
}

/// Defect 7 (part): a resealed reference whose settings ask for zero
/// iterations, whose rounds hold different sizes, or which records wrong
/// results is refused (`OUT_OF_RANGE`, `BAD_INPUT`) before anything runs.
#[test]
fn a_resealed_reference_with_impossible_settings_or_rounds_is_refused() {
    let d = tempfile::tempdir().unwrap();
    let r = d.path().join("ref");
    let args = [
        "validate",
        "-q",
        "--backend",
        "cpu",
        "--record-reference",
        "-o",
        s(&r),
        "--max-bytes",
        "64KiB",
        "--iters",
        "3",
    ];
    let rest = ["--warmup-iters", "1", "--tokens", "4", "--warmup-tokens", "1", "--rounds", "2"];
    ok(&mpirun_within(300, 2, &[&args[..], &rest[..]].concat()));
    let reseal = |tag: &str, file: &str, edit: &dyn Fn(&mut serde_json::Value)| -> PathBuf {
        let c = d.path().join(tag);
        std::fs::create_dir(&c).unwrap();
        for e in std::fs::read_dir(&r).unwrap() {
            let e = e.unwrap();
            std::fs::copy(e.path(), c.join(e.file_name())).unwrap();
        }
        let mut v: serde_json::Value = serde_json::from_slice(&std::fs::read(c.join(file)).unwrap()).unwrap();
        edit(&mut v);
        let bytes = serde_json::to_vec_pretty(&v).unwrap();
        std::fs::write(c.join(file), &bytes).unwrap();
        let mut desc: serde_json::Value =
            serde_json::from_slice(&std::fs::read(c.join("descriptor.json")).unwrap()).unwrap();
        for f in desc["files"].as_array_mut().unwrap() {
            if f["name"] == file {
                f["size_bytes"] = bytes.len().into();
                f["sha256"] = fsutil::sha256_hex(&bytes).into();
            }
        }
        std::fs::write(c.join("descriptor.json"), serde_json::to_vec_pretty(&desc).unwrap()).unwrap();
        c
    };
    let cases: Vec<(PathBuf, &str, &str)> = vec![
        (reseal("iters0", "manifest.json", &|v| v["settings"]["iters"] = 0.into()), "OUT_OF_RANGE", "settings.iters"),
        (
            reseal("fewer", "rounds.json", &|v| {
                v["rounds"][1]["all_reduce"].as_array_mut().unwrap().pop();
            }),
            "BAD_INPUT",
            "the same sizes",
        ),
        (
            reseal("wrong", "rounds.json", &|v| v["rounds"][0]["all_reduce"][0]["wrong_elements"] = 3.into()),
            "BAD_INPUT",
            "wrong elements",
        ),
    ];
    for (c, code, needle) in cases {
        let o = within(60, &["validate", "--backend", "cpu", "--reference", s(&c), "-o", s(&d.path().join("v"))]);
        assert!(assert_refused(&o, code).contains(needle), "{}", c.display());
        assert!(!d.path().join("v").exists());
    }
}

/// Defect 4: an archive whose member differs from what the campaign's
/// records say (a shard replaced after verify, sealed into a descriptor that
/// matches the tar's own digest) is refused by `check-archive`, naming the
/// member; `archive` runs the same member check on what it wrote before
/// publishing it.
#[test]
fn check_archive_checks_every_member_against_the_campaign_records() {
    let d = tempfile::tempdir().unwrap();
    let c = d.path().join("c");
    ok(&cc(&["campaign", "plan", s(&small_spec(d.path(), "arc", 4, "")), "-o", s(&c)]));
    ok(&within(300, &["campaign", "exec", s(&c)]));
    ok(&cc(&["campaign", "select", s(&c)]));
    let tar_path = d.path().join("c.tar");
    ok(&cc(&["campaign", "archive", s(&c), "-o", s(&tar_path)]));
    let desc = d.path().join("c.tar.descriptor.json");
    ok(&cc(&["campaign", "check-archive", s(&tar_path), s(&desc)]));
    // the same archive with one shard's last byte changed, and with the selection removed
    for (tag, what) in [("shard", "rank-00001.shard"), ("selection", "selection.json")] {
        let mut a = tar::Archive::new(std::fs::File::open(&tar_path).unwrap());
        let mut b = tar::Builder::new(Vec::new());
        let mut touched = None;
        for e in a.entries().unwrap() {
            let mut e = e.unwrap();
            let name = e.path().unwrap().display().to_string();
            let mut bytes = Vec::new();
            std::io::Read::read_to_end(&mut e, &mut bytes).unwrap();
            if touched.is_none() && name.ends_with(what) {
                touched = Some(name.clone());
                if tag == "selection" {
                    continue;
                }
                let last = bytes.len() - 1;
                bytes[last] ^= 1;
            }
            let mut h = e.header().clone();
            h.set_size(bytes.len() as u64);
            h.set_cksum();
            b.append(&h, bytes.as_slice()).unwrap();
        }
        let bytes = b.into_inner().unwrap();
        let touched = touched.expect("the member is in the archive");
        let evil = d.path().join(format!("{tag}.tar"));
        std::fs::write(&evil, &bytes).unwrap();
        let mut dj: serde_json::Value = serde_json::from_slice(&std::fs::read(&desc).unwrap()).unwrap();
        dj["archive_size_bytes"] = bytes.len().into();
        dj["archive_sha256"] = fsutil::sha256_hex(&bytes).into();
        let ed = d.path().join(format!("{tag}.json"));
        std::fs::write(&ed, serde_json::to_vec(&dj).unwrap()).unwrap();
        let o = cc(&["campaign", "check-archive", s(&evil), s(&ed)]);
        let err = assert_refused(&o, "DIGEST_MISMATCH");
        let rel = touched.split_once('/').unwrap().1;
        assert!(err.contains(rel), "{tag}: the refusal names the member {rel}: {err}");
    }
}

fn attempts_of(c: &Path) -> Vec<serde_json::Value> {
    std::fs::read_to_string(c.join("attempts.jsonl"))
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

/// Defect 5: two `exec --cell` at once on one host run one after the other
/// (the second waits for the host's lock), so nothing overlaps; and a
/// campaign that already holds an overlapped success is repaired: `exec`
/// runs that cell again, `select` takes the clean attempt, `verify` passes.
#[test]
fn cells_on_one_host_never_overlap_and_an_overlapped_cell_is_run_again() {
    let d = tempfile::tempdir().unwrap();
    let c = d.path().join("c");
    ok(&cc(&["campaign", "plan", s(&small_spec(d.path(), "host", 5, "")), "-o", s(&c)]));
    let spawn = |cell: &str| {
        Command::new(bin())
            .args(["campaign", "exec", s(&c), "--cell", cell])
            .env("OMPI_ALLOW_RUN_AS_ROOT", "1")
            .env("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1")
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap()
    };
    let (a, b) = (spawn("1"), spawn("2"));
    let (a, b) = (a.wait_with_output().unwrap(), b.wait_with_output().unwrap());
    ok(&a);
    ok(&b);
    let att = attempts_of(&c);
    assert_eq!(att.len(), 2, "{att:?}");
    let span =
        |x: &serde_json::Value| (x["started_unix_ms"].as_u64().unwrap(), x["finished_unix_ms"].as_u64().unwrap());
    let ((s0, e0), (s1, e1)) = (span(&att[0]), span(&att[1]));
    assert!(e0 <= s1 || e1 <= s0, "two cells on one host ran at once: {att:?}");
    ok(&within(300, &["campaign", "exec", s(&c)]));
    // an attempt that ran beside cell 1's success on its host (what two unlocked execs left)
    let first = attempts_of(&c)
        .into_iter()
        .find(|x| x["cell_id"].as_str().unwrap().starts_with("r01-") && x["status"] == "succeeded")
        .unwrap();
    let mut other = first.clone();
    other["attempt_id"] = format!("{}-a9", first["cell_id"].as_str().unwrap()).into();
    other["status"] = "failed".into();
    other["failure"] = "ran beside another cell".into();
    other["exit_code"] = 1.into();
    let mut f = std::fs::OpenOptions::new().append(true).open(c.join("attempts.jsonl")).unwrap();
    writeln!(f, "{}", serde_json::to_string(&other).unwrap()).unwrap();
    drop(f);
    ok(&cc(&["campaign", "select", s(&c)]));
    assert_refused(&cc(&["campaign", "verify", s(&c)]), "OVERLAPPING_ATTEMPTS");
    // the repair: exec runs the overlapped cell again, select takes the clean attempt
    ok(&within(300, &["campaign", "exec", s(&c)]));
    let again: Vec<serde_json::Value> = attempts_of(&c)
        .into_iter()
        .filter(|x| x["cell_id"] == first["cell_id"] && x["status"] == "succeeded")
        .collect();
    assert_eq!(again.len(), 2, "the overlapped cell ran once more: {again:?}");
    std::fs::remove_file(c.join("selection.json")).unwrap();
    ok(&cc(&["campaign", "select", s(&c)]));
    ok(&cc(&["campaign", "verify", s(&c)]));
}

/// Smaller item: `campaign archive` of a campaign this process cannot write
/// (published results, another user's directory) works: the lock file is
/// opened read-only, or skipped where none can be opened. As root, whom
/// file modes do not stop, the archive runs as user `nobody` (setpriv(1)).
#[test]
fn archive_works_on_a_campaign_it_cannot_write() {
    use std::os::unix::fs::PermissionsExt;
    let d = tempfile::tempdir().unwrap();
    std::fs::set_permissions(d.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    let c = d.path().join("c");
    ok(&cc(&["campaign", "plan", s(&small_spec(d.path(), "ro", 6, "")), "-o", s(&c)]));
    ok(&within(300, &["campaign", "exec", s(&c)]));
    ok(&cc(&["campaign", "select", s(&c)]));
    let out = d.path().join("out");
    std::fs::create_dir(&out).unwrap();
    std::fs::set_permissions(&out, std::fs::Permissions::from_mode(0o777)).unwrap();
    // every directory of the campaign read-only and reachable, every file readable
    let mut dirs = vec![c.clone()];
    while let Some(x) = dirs.pop() {
        for e in std::fs::read_dir(&x).unwrap() {
            let p = e.unwrap().path();
            if p.is_dir() {
                dirs.push(p);
            } else {
                std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o444)).unwrap();
            }
        }
        std::fs::set_permissions(&x, std::fs::Permissions::from_mode(0o555)).unwrap();
    }
    let tar = out.join("c.tar");
    // SAFETY: geteuid reads the process's effective user id; it cannot fail.
    let root = unsafe { libc::geteuid() } == 0;
    let archive_as_reader = |tar: &Path| {
        let mut cmd = if root {
            let mut c = Command::new("setpriv");
            c.args(["--reuid=65534", "--regid=65534", "--clear-groups", &bin()]);
            c
        } else {
            Command::new(bin())
        };
        cmd.args(["campaign", "archive", s(&c), "-o", s(tar)]);
        ok(&within_cmd(120, &mut cmd));
    };
    archive_as_reader(&tar);
    assert!(tar.exists() && out.join("c.tar.descriptor.json").exists());
    ok(&cc(&["campaign", "check-archive", s(&tar), s(&out.join("c.tar.descriptor.json"))]));
    // and removing the lock file too (a campaign copied without it) still archives
    let mut perm = std::fs::metadata(&c).unwrap().permissions();
    perm.set_mode(0o755);
    std::fs::set_permissions(&c, perm.clone()).unwrap();
    std::fs::remove_file(c.join("campaign.lock")).unwrap();
    perm.set_mode(0o555);
    std::fs::set_permissions(&c, perm).unwrap();
    archive_as_reader(&out.join("c2.tar"));
    // leave the temporary directory removable
    let mut dirs = vec![c.clone()];
    while let Some(x) = dirs.pop() {
        std::fs::set_permissions(&x, std::fs::Permissions::from_mode(0o755)).unwrap();
        for e in std::fs::read_dir(&x).unwrap() {
            let p = e.unwrap().path();
            if p.is_dir() {
                dirs.push(p);
            }
        }
    }
}

/// Smaller item: a rank stopped (SIGSTOP) for seconds inside a job that
/// then completes is not silent: `join` names the stall, on the stopped rank
/// (no progress before a collective) and on the others (waiting inside it),
/// in its text and JSON. The stop here is 4 s (the issue's was 20 s): far
/// beyond the 1 s floor and any scheduling delay, short enough for CI.
#[test]
fn a_rank_stopped_mid_job_is_flagged_as_a_stall_by_join() {
    let d = tempfile::tempdir().unwrap();
    let pid_file = d.path().join("stopped.pid");
    let (out, err) = (d.path().join("stdout"), d.path().join("stderr"));
    let runs = d.path().join("out");
    let (guard, mut child) = mpirun_spawn(
        2,
        &[
            "rank",
            "-q",
            "--backend",
            "cpu",
            "--phases",
            "blocking",
            "--tokens",
            "8",
            "--layers",
            "4",
            "--run-id",
            "r",
            "--out",
            s(&runs),
        ],
        &[("COMMCANARY_TEST_STOP_AT", "mid-blocking"), ("COMMCANARY_TEST_STOP_PID_FILE", s(&pid_file))],
        &out,
        &err,
    );
    let t0 = Instant::now();
    let pid = loop {
        if let Some(p) = std::fs::read_to_string(&pid_file).ok().and_then(|t| t.trim().parse::<u32>().ok()) {
            break p;
        }
        if let Some(st) = child.try_wait().unwrap() {
            panic!("the job ended ({st}) before rank 1 stopped: {}", std::fs::read_to_string(&err).unwrap_or_default());
        }
        assert!(t0.elapsed() < Duration::from_secs(120), "rank 1 never stopped");
        std::thread::sleep(Duration::from_millis(20));
    };
    std::thread::sleep(Duration::from_secs(4));
    assert!(Command::new("kill").args(["-CONT", &pid.to_string()]).status().unwrap().success());
    let status = loop {
        if let Some(st) = child.try_wait().unwrap() {
            break st;
        }
        if t0.elapsed() > Duration::from_secs(180) {
            let _ = child.kill();
            panic!("the job did not end after the stop");
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    drop(guard);
    assert!(status.success(), "{}", std::fs::read_to_string(&err).unwrap_or_default());
    let run = runs.join("r");
    let text = ok(&cc(&["join", s(&run)]));
    let line = text
        .lines()
        .find(|l| l.starts_with("stall at blocking"))
        .unwrap_or_else(|| panic!("no stall line in:\n{text}"));
    assert!(line.contains("no progress before it: rank 1") && line.contains("inside it: rank 0"), "{line}");
    let json: serde_json::Value = serde_json::from_str(&ok(&cc(&["join", s(&run), "--json"]))).unwrap();
    let stalls = json["stalls"].as_array().expect("a stalls list");
    let stopped = stalls.iter().find(|x| x["rank"] == 1 && x["at"] == "before").unwrap_or_else(|| panic!("{stalls:?}"));
    assert!(stopped["duration_ms"].as_f64().unwrap() >= 3500.0, "{stopped}");
    // the same run without a stop flags nothing
    let quiet = d.path().join("quiet");
    ok(&mpirun_within(
        120,
        2,
        &[
            "rank",
            "-q",
            "--backend",
            "cpu",
            "--phases",
            "blocking",
            "--tokens",
            "8",
            "--layers",
            "4",
            "--run-id",
            "q",
            "--out",
            s(&quiet),
        ],
    ));
    let json: serde_json::Value = serde_json::from_str(&ok(&cc(&["join", s(&quiet.join("q")), "--json"]))).unwrap();
    assert_eq!(json["stalls"], serde_json::json!([]), "a run without a stop has no stall");
}
