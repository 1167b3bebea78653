//! `export chrome` on a real CPU run: valid JSON, every rank, the five rows, one time axis.
mod common;
use common::*;

#[test]
fn chrome_trace_has_every_rank_and_row_and_is_never_overwritten() {
    let d = tempfile::tempdir().unwrap();
    let run = run_rank(
        2,
        d.path(),
        &["--phases", "blocking,overlap", "--tokens", "3", "--model", "synthetic", "--layers", "3"],
    );
    let out = d.path().join("trace.json");
    ok(&cc(&["export", "chrome", run.to_str().unwrap(), "-o", out.to_str().unwrap()]));
    let t: serde_json::Value = serde_json::from_slice(&std::fs::read(&out).unwrap()).unwrap();
    let ev = t["traceEvents"].as_array().unwrap();
    for rank in 0..2 {
        let rows: Vec<&str> = ev
            .iter()
            .filter(|e| e["ph"] == "M" && e["name"] == "thread_name" && e["pid"] == rank)
            .map(|e| e["args"]["name"].as_str().unwrap())
            .collect();
        assert_eq!(
            rows,
            [
                "phases",
                "tokens",
                "host calls",
                "compute stream",
                "comm stream",
                "GEMM kernels (CUPTI)",
                "NCCL kernels (CUPTI)"
            ],
            "rank {rank}"
        );
        // no CUPTI on the CPU backend: the kernel rows are empty, never filled with something else
        assert!(!ev.iter().any(|e| e["ph"] == "X" && e["pid"] == rank && (e["tid"] == 5 || e["tid"] == 6)));
        for tid in 0..5 {
            assert!(
                ev.iter().any(|e| e["ph"] == "X" && e["pid"] == rank && e["tid"] == tid),
                "rank {rank} row {tid} has spans"
            );
        }
    }
    let xs: Vec<f64> = ev.iter().filter(|e| e["ph"] == "X").map(|e| e["ts"].as_f64().unwrap()).collect();
    assert!(xs.iter().all(|&x| x >= 0.0) && xs.contains(&0.0), "rebased to the earliest event");
    assert!(ev.iter().filter(|e| e["ph"] == "X").all(|e| e["dur"].as_f64().unwrap() >= 0.0));
    assert!(
        t["otherData"]["kernel_rows"].as_str().unwrap().contains("no CUPTI kernel records (cpu backend)"),
        "{}",
        t["otherData"]
    );
    // a second export to the same file is refused and the first is kept
    let before = std::fs::read(&out).unwrap();
    let o = cc(&["export", "chrome", run.to_str().unwrap(), "-o", out.to_str().unwrap()]);
    assert_refused(&o, "ALREADY_EXISTS");
    assert_eq!(std::fs::read(&out).unwrap(), before);
}
