//! `rank --phases isolated --collective KIND`: nccl-tests' sweeps of other
//! collective kinds than all-reduce, on the CPU backend under real mpirun
//! (issue 29, item 7): the printed table (units, redop, root, #wrong on every
//! size, the footer), every rank's shard, the `-J` JSON, a negative control
//! whose check must fail, and the refusals.
mod common;
use commcanary::cli::schema;
use commcanary::evidence::nccl_tests;
use common::*;
use std::path::{Path, PathBuf};

/// The table's rows (the lines between the header and the footer), split into columns.
fn table_rows(stdout: &str) -> Vec<Vec<String>> {
    stdout
        .lines()
        .skip_while(|l| !l.contains("size(B)"))
        .skip(1)
        .take_while(|l| !l.starts_with('#'))
        .map(|l| l.split_whitespace().map(str::to_string).collect())
        .collect()
}

/// Run a sweep of `kind` under `mpirun -n 2` (f32, sizes 8 B to 2 KiB by 4,
/// 5 timed iterations) with `extra` arguments; returns stdout and the run directory.
fn sweep(out: &Path, kind: &str, extra: &[&str]) -> (String, PathBuf) {
    let mut args = vec!["rank", "--backend", "cpu", "--phases", "isolated", "--collective", kind, "-d", "f32"];
    args.extend_from_slice(&[
        "-b",
        "8",
        "-e",
        "2KiB",
        "-f",
        "4",
        "-n",
        "5",
        "-w",
        "1",
        "-c",
        "1",
        "-o",
        out.to_str().unwrap(),
    ]);
    args.extend_from_slice(extra);
    let stdout = ok(&mpirun(2, &args));
    let run = std::fs::read_dir(out).unwrap().next().unwrap().unwrap().path();
    (stdout, run)
}

/// The decoded shard of `rank` in `run`.
fn shard(run: &Path, rank: u32) -> serde_json::Value {
    let f = run.join(format!("rank-{rank:05}.shard"));
    serde_json::from_str(&ok(&cc(&["inspect", f.to_str().unwrap()]))).unwrap()
}

#[test]
fn an_all_gather_sweep_prints_nccl_tests_table_and_writes_shards_and_json() {
    let t = tempfile::tempdir().unwrap();
    let json = t.path().join("ag.json");
    let (stdout, run) = sweep(&t.path().join("runs"), "all_gather", &["-J", json.to_str().unwrap()]);
    let header = stdout.lines().find(|l| l.contains("size(B)")).unwrap_or_else(|| panic!("no table:\n{stdout}"));
    for col in ["count(elts)", "type", "redop", "root", "time(us)", "algbw(GB/s)", "busbw(GB/s)", "#wrong"] {
        assert!(header.contains(col), "{col} missing from {header}");
    }
    assert!(stdout.contains("isolated all_gather, per size (size is the gathered receive buffer"), "{stdout}");
    let rows = table_rows(&stdout);
    let sizes: Vec<&str> = rows.iter().map(|r| r[0].as_str()).collect();
    assert_eq!(sizes, ["8", "32", "128", "512", "2048"], "{stdout}");
    for r in &rows {
        // size, count (f32 elements of the gathered buffer), type, redop none, root -1, 5 iterations, #wrong 0
        assert_eq!(r[1].parse::<u64>().unwrap() * 4, r[0].parse::<u64>().unwrap(), "{r:?}");
        assert_eq!(
            (r[2].as_str(), r[3].as_str(), r[4].as_str(), r[5].as_str(), r[9].as_str()),
            ("f32", "none", "-1", "5", "0"),
            "{r:?}"
        );
    }
    assert!(stdout.contains("# Avg bus bandwidth    : "), "{stdout}");

    // every rank's shard: the sweep's group, one member's input as bytes, every size checked and right
    for rank in 0..2 {
        let s = shard(&run, rank);
        let h = &s["header"];
        assert_eq!(h["workload"]["isolated_collective"], "all_gather");
        let group = h["groups"]
            .as_array()
            .unwrap()
            .iter()
            .find(|g| g["name"] == "isolated-sweep")
            .unwrap_or_else(|| panic!("no sweep group: {h}"));
        assert_eq!(group["members"], serde_json::json!([0, 1]));
        let events = s["body"]["collectives"].as_array().unwrap();
        assert_eq!(events.len(), 5 * 6, "5 sizes x (1 warm-up + 5 timed)");
        assert!(events
            .iter()
            .all(|e| e["kind"] == "all_gather" && e["group"] == group["id"] && e["phase"] == "isolated"));
        let bytes: std::collections::BTreeSet<u64> = events.iter().map(|e| e["bytes"].as_u64().unwrap()).collect();
        assert_eq!(bytes.into_iter().collect::<Vec<_>>(), vec![4, 16, 64, 256, 1024], "half of each gathered size");
        let checks = h["checks"].as_array().unwrap();
        assert_eq!(checks.len(), 5, "one checked iteration per size on rank {rank}: {checks:?}");
        assert!(checks.iter().all(|c| c["wrong_elements"] == 0));
    }

    // -J: nccl-tests' own fields, the all-gather factor (n-1)/n = 0.5
    let j: serde_json::Value = serde_json::from_slice(&std::fs::read(&json).unwrap()).unwrap();
    let schema: serde_json::Value = serde_json::from_str(&schema::schema_json("rank-sweep").unwrap()).unwrap();
    for k in schema["required"].as_array().unwrap() {
        assert!(j.get(k.as_str().unwrap()).is_some(), "{k} missing from {j}");
    }
    let ours = &j["commcanary"];
    assert_eq!(
        (ours["collective"].as_str(), ours["world_size"].as_u64(), ours["bus_bw_factor"].as_f64()),
        (Some("all_gather"), Some(2), Some(0.5))
    );
    assert_eq!(
        (j["version"].as_u64(), j["out_of_bounds"]["count"].as_u64(), j["out_of_bounds"]["okay"].as_bool()),
        (Some(3), Some(0), Some(true))
    );
    let results = j["results"].as_array().unwrap();
    assert_eq!(results.len(), 5);
    for r in results {
        let o = &r["out_of_place"];
        assert_eq!(
            (o["nwrong"].as_u64(), r["root"].as_i64(), r["redop"].as_str(), r["type"].as_str()),
            (Some(0), Some(-1), Some("none"), Some("float"))
        );
        let (alg, bus) = (o["alg_bw"].as_f64().unwrap(), o["bus_bw"].as_f64().unwrap());
        assert!((bus - alg * 0.5).abs() <= 1e-12 * alg.max(1.0), "{r}");
        assert!(r["in_place"].is_null(), "{r}");
    }
    let mean = results.iter().map(|r| r["out_of_place"]["bus_bw"].as_f64().unwrap()).sum::<f64>() / 5.0;
    assert!((j["average_bus_bandwidth"]["bandwidth"].as_f64().unwrap() - mean).abs() <= 1e-12 * mean.max(1.0));
    // the parser that reads nccl-tests' own -J files reads ours back, row for row
    let text = std::fs::read_to_string(&json).unwrap();
    let t = nccl_tests::parse(&text, &json.display().to_string()).unwrap();
    assert_eq!(t.rows.len(), 5);
    for (row, r) in t.rows.iter().zip(results) {
        assert_eq!(row.size_bytes, r["size"].as_u64().unwrap());
        assert_eq!(row.time_us(), r["out_of_place"]["time"].as_f64());
        assert_eq!(row.out_of_place.as_ref().unwrap().nwrong, Some(0));
    }
    // join prints the same table from the verified shards
    let summary = join_json(&run);
    assert!(summary["isolated_sizes"]
        .as_array()
        .unwrap()
        .iter()
        .all(|r| r["collective"] == "all_gather" && r["wrong_elements"] == 0));
}

#[test]
fn rooted_and_reducing_kinds_print_their_root_and_redop() {
    let t = tempfile::tempdir().unwrap();
    let (stdout, run) = sweep(&t.path().join("bcast"), "broadcast", &[]);
    let rows = table_rows(&stdout);
    assert_eq!(rows.len(), 5, "{stdout}");
    // broadcast: no reduction, root 0, bus bandwidth = algorithm bandwidth
    assert!(
        rows.iter().all(|r| (r[3].as_str(), r[4].as_str(), r[9].as_str()) == ("none", "0", "0") && r[7] == r[8]),
        "{stdout}"
    );
    assert!(shard(&run, 1)["body"]["collectives"]
        .as_array()
        .unwrap()
        .iter()
        .all(|e| e["kind"] == "broadcast" && e["root"] == 0));

    let (stdout, run) = sweep(&t.path().join("rs"), "reduce_scatter", &["--op", "max"]);
    let rows = table_rows(&stdout);
    assert!(stdout.contains("size is the whole send buffer"), "{stdout}");
    assert!(rows.iter().all(|r| (r[3].as_str(), r[4].as_str(), r[9].as_str()) == ("max", "-1", "0")), "{stdout}");
    assert_eq!(shard(&run, 0)["header"]["workload"]["isolated_op"], "max");
}

/// The negative control: rank 1 spoils every checked result, so every size
/// of the table counts wrong elements and the job fails after its shards
/// are written (a sweep whose check cannot fail would prove nothing).
#[test]
fn a_wrong_result_is_counted_on_every_size_and_fails_the_job() {
    let t = tempfile::tempdir().unwrap();
    let out = t.path().join("runs");
    let o = mpirun(
        2,
        &[
            "rank",
            "--backend",
            "cpu",
            "--phases",
            "isolated",
            "--collective",
            "reduce_scatter",
            "-d",
            "f32",
            "-b",
            "8",
            "-e",
            "128",
            "-f",
            "4",
            "-n",
            "3",
            "-w",
            "1",
            "-o",
            out.to_str().unwrap(),
            "--fault",
            "wrong-sum:1",
        ],
    );
    assert!(!o.status.success());
    let stdout = String::from_utf8_lossy(&o.stdout);
    let rows = table_rows(&stdout);
    assert_eq!(rows.len(), 3, "{stdout}");
    assert!(rows.iter().all(|r| r[9].parse::<u64>().unwrap() > 0), "{stdout}");
    assert!(String::from_utf8_lossy(&o.stderr).contains("result check failed on rank 1, phase isolated"));
}

#[test]
fn sweeps_that_cannot_run_are_refused_before_mpi() {
    let t = tempfile::tempdir().unwrap();
    let out = t.path().join("runs");
    let base = ["rank", "--backend", "cpu", "--phases", "isolated", "-o", out.to_str().unwrap()];
    let with = |extra: &[&str]| -> Vec<String> { base.iter().chain(extra).map(|s| s.to_string()).collect() };
    let run = |args: Vec<String>| cc(&args.iter().map(String::as_str).collect::<Vec<_>>());
    assert!(assert_refused(&run(with(&["--op", "avg"])), "BAD_ARGUMENT").contains("MPI has no average"));
    assert!(assert_refused(&run(with(&["--collective", "broadcast", "--op", "max"])), "BAD_ARGUMENT")
        .contains("has no reduction"));
    let existing = t.path().join("taken.json");
    std::fs::write(&existing, "{}").unwrap();
    assert_refused(&run(with(&["-J", existing.to_str().unwrap()])), "ALREADY_EXISTS");
    // three ranks: 8 bytes of f32 leave no whole element per rank for an all-gather
    let o = mpirun(
        3,
        &[
            "rank",
            "--backend",
            "cpu",
            "--model",
            "synthetic",
            "--phases",
            "isolated",
            "--collective",
            "all_gather",
            "-b",
            "8",
            "-e",
            "64",
            "-o",
            out.to_str().unwrap(),
        ],
    );
    assert!(assert_refused(&o, "BAD_ARGUMENT").contains("pass -b 12 or more"));
    assert!(!out.exists() || std::fs::read_dir(&out).unwrap().next().is_none(), "a refusal leaves no run behind");
}

/// The kind table walked for the sweep: every kind with a bus-bandwidth
/// factor has a `--collective` that sweeps it, checked (#wrong 0 on every
/// size) with its events named as the row names them; the kinds without
/// one (barrier, send, receive) have none.
#[test]
fn every_kind_with_a_bus_bandwidth_factor_sweeps_checked() {
    use clap::ValueEnum;
    use commcanary::core::{collective::KINDS, workload::SweepKind};
    let t = tempfile::tempdir().unwrap();
    for row in &KINDS {
        let sweep_kind = SweepKind::value_variants().iter().find(|k| k.kind() == row.kind);
        assert_eq!(
            sweep_kind.is_some(),
            row.bus_bw.is_some(),
            "{}: a sweep exactly where a bus-bandwidth factor is defined",
            row.name
        );
        let Some(k) = sweep_kind else { continue };
        let (stdout, run) = sweep(&t.path().join(row.name), row.name, &[]);
        let rows = table_rows(&stdout);
        assert_eq!(rows.len(), 5, "{stdout}");
        assert!(rows.iter().all(|r| r[9] == "0"), "{}: #wrong on some size\n{stdout}", row.name);
        let events = shard(&run, 0)["body"]["collectives"].as_array().unwrap().clone();
        assert!(!events.is_empty() && events.iter().all(|e| e["kind"] == row.name), "{}", row.name);
        assert!(
            events.iter().any(|e| e["checked"] == true),
            "{}: nothing checked on rank 0 (every root is 0)",
            row.name
        );
        assert_eq!(k.name(), row.name);
    }
}
