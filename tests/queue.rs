//! `queue` and `capacity` through the real binary (issue #6 acceptance 3).
mod common;
use common::*;

fn json(args: &[&str]) -> serde_json::Value {
    serde_json::from_str(&ok(&cc(args))).unwrap()
}

#[test]
fn littles_law_and_open_versus_closed_through_the_cli() {
    let t = tempfile::tempdir().unwrap();
    let f = t.path().join("svc.txt");
    std::fs::write(&f, "# ms per request\n2.0\n3.5\n1.2\n4.0\n2.2\n0.8\n").unwrap();
    let fs = f.to_str().unwrap();
    let closed = json(&[
        "queue",
        "--service-times",
        fs,
        "--mode",
        "closed",
        "--clients",
        "1",
        "--think-ms",
        "2",
        "--requests",
        "3000",
        "--json",
    ]);
    let c = &closed["results"][0]["result"];
    assert_eq!(c["wait_ms"]["p99"], 0.0, "one closed client never queues");
    let rate = c["throughput_rps"].as_f64().unwrap();
    let interval = format!("{}", 1e3 / rate);
    let open_args = [
        "queue",
        "--service-times",
        fs,
        "--mode",
        "open",
        "--arrival",
        "poisson",
        "--interval-ms",
        &interval,
        "--requests",
        "3000",
        "--seed",
        "7",
        "--json",
    ];
    let open = json(&open_args);
    let o = &open["results"][0]["result"];
    assert!(o["wait_ms"]["p95"].as_f64().unwrap() > 0.0, "the open stream at the same mean rate queues");
    for r in [c, o] {
        let (l, lw) = (r["mean_in_system"].as_f64().unwrap(), r["lambda_w"].as_f64().unwrap());
        assert!((l - lw).abs() <= 1e-9 * lw, "Little's law on the horizon: L {l} vs lambda W {lw}");
    }
    assert!(closed["results"][0]["result"]["warnings"]
        .as_array()
        .unwrap()
        .iter()
        .any(|w| w.as_str().unwrap().contains("coordinated omission")));
    // same seed, same output
    assert_eq!(open, json(&open_args));
    // refusals name the fault
    std::fs::write(&f, "1.0\nfast\n").unwrap();
    let o = cc(&["queue", "--service-times", fs, "--mode", "open", "--interval-ms", "1"]);
    assert!(assert_refused(&o, "BAD_INPUT").contains("svc.txt:2"));
    let o = cc(&["queue", "--service-times", fs, "--mode", "open"]);
    assert!(assert_refused(&o, "BAD_ARGUMENT").contains("--interval-ms"));
}

#[test]
fn capacity_counts_whole_gpus_and_says_what_it_cannot_see() {
    let c = json(&[
        "capacity",
        "--demand",
        "1000",
        "--throughput-per-gpu",
        "125",
        "--throughput-per-gpu",
        "100",
        "--gpu-hour-cost",
        "2",
        "--json",
    ]);
    assert_eq!(c["needs"][0]["gpus"], 8);
    assert_eq!(c["needs"][1]["gpus"], 10);
    assert_eq!(c["avoided_gpus"], 2);
    assert_eq!(c["avoided_yearly_value"], 2.0 * 2.0 * 8760.0);
    assert!(c["caveats"].as_array().unwrap().len() >= 3);
    let text = ok(&cc(&["capacity", "--demand", "10", "--throughput-per-gpu", "3", "--gpu-hour-cost", "1"]));
    assert!(text.contains("4 GPUs (ceil)") && text.contains("requests/s"));
    assert_refused(
        &cc(&["capacity", "--demand=-1", "--throughput-per-gpu", "3", "--gpu-hour-cost", "1"]),
        "OUT_OF_RANGE",
    );
}
