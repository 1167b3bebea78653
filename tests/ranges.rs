//! Issue 13 items 5, 8, 10 and 11: every number is checked against its
//! documented range before work starts, and refused with `refused[CODE]`
//! (exit 1, no panic, no allocation abort, nothing written).
mod common;
use common::*;
use std::time::{Duration, Instant};

/// Run and require a named refusal within `secs` (a hang or an abort is a failure).
fn refused_quickly(args: &[&str], code: &str) {
    let t0 = Instant::now();
    let mut child = std::process::Command::new(bin())
        .args(args)
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    while child.try_wait().unwrap().is_none() {
        if t0.elapsed() > Duration::from_secs(20) {
            child.kill().unwrap();
            panic!("{args:?}: still running after 20 s");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let o = child.wait_with_output().unwrap();
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(1), "{args:?}: {:?}\n{err}", o.status);
    assert!(err.contains(&format!("refused[{code}]")), "{args:?}: expected refused[{code}] in {err}");
}

#[test]
fn capacity_and_queue_refuse_what_they_cannot_count() {
    // item 5: no wrapped or saturated GPU counts
    refused_quickly(&["capacity", "--demand", "1e19", "--throughput-per-gpu", "1", "--throughput-per-gpu", "0.5", "--gpu-hour-cost", "2"], "OUT_OF_RANGE");
    let d = tempfile::tempdir().unwrap();
    let st = d.path().join("s.txt");
    std::fs::write(&st, "1.0\n2.0\n3.0\n").unwrap();
    let s = st.to_str().unwrap();
    for slo in ["--slo-ms=NaN", "--slo-ms=-5", "--slo-ms=inf"] {
        refused_quickly(&["queue", "--service-times", s, "--mode", "closed", "--clients", "1", slo], "OUT_OF_RANGE");
    }
    // item 8: no unbounded allocation or endless loop
    for e in ["1e-9", "1e-300"] {
        refused_quickly(&["queue", "--service-times", s, "--mode", "closed", "--clients", "1", "--co-correct-ms", e], "OUT_OF_RANGE");
    }
    refused_quickly(&["queue", "--service-times", s, "--mode", "closed", "--clients", "4000000000"], "OUT_OF_RANGE");
    for n in ["10000000000", "18446744073709551615"] {
        refused_quickly(&["queue", "--service-times", s, "--mode", "open", "--interval-ms", "1", "--requests", n], "OUT_OF_RANGE");
    }
    // a good call still works
    ok(&cc(&["queue", "--service-times", s, "--mode", "closed", "--clients", "1", "--slo-ms", "2.5", "--co-correct-ms", "0.5"]));
}

#[test]
fn rank_refuses_out_of_range_numbers_before_any_work() {
    let d = tempfile::tempdir().unwrap();
    let out = d.path().join("out");
    let o = out.to_str().unwrap();
    let base = ["rank", "-q", "--backend", "cpu", "--out", o];
    let cases: &[&[&str]] = &[
        &["--sizes", "2GiB"],
        &["--sizes", "3"],
        &["--membound-bytes", "100GiB"],
        &["--gemm", "100000"],
        &["--tokens", "4294967295"],
        &["--clock-samples", "4294967295"],
        &["--clock-samples", "0"],
        &["--collective-timeout-s", "NaN"],
        &["--collective-timeout-s=-1"],
    ];
    for c in cases {
        let args: Vec<&str> = base.iter().chain(c.iter()).copied().collect();
        refused_quickly(&args, "OUT_OF_RANGE");
        assert!(!out.exists() || std::fs::read_dir(&out).unwrap().count() == 0, "{c:?}: nothing written");
    }
    refused_quickly(&["bench-overhead", "--size", "0"], "OUT_OF_RANGE");
}

#[test]
fn plan_refuses_specs_that_can_never_run_or_analyze() {
    let d = tempfile::tempdir().unwrap();
    let spec = |name: &str, analysis: &str, config: &str| {
        let p = d.path().join(format!("{name}.toml"));
        std::fs::write(
            &p,
            format!(
                "name = \"t\"\nbackend = \"cpu\"\nranks = 2\nrepetitions = 1\nseed = 1\n[launcher]\nkind = \"mpirun\"\n[workload]\nphases = \"blocking\"\ntokens = 2\nlayers = 2\n[analysis]\ntie_policy = \"iqr\"\n{analysis}\n[[configs]]\n{config}\n"
            ),
        )
        .unwrap();
        p
    };
    let long = format!("name = \"{}\"", "x".repeat(250));
    let cases = [
        ("inf-delta", "delta_pct = inf", "name = \"a\""),
        ("zero-resamples", "bootstrap_resamples = 0", "name = \"a\""),
        ("bad-sizes", "", "name = \"a\"\nargs = [\"--sizes\", \"3\"]"),
        ("bad-gemm", "", "name = \"a\"\nargs = [\"--gemm\", \"0\"]"),
        ("bad-delay", "", "name = \"a\"\nargs = [\"--inject-delay\", \"rank=x\"]"),
        ("bad-flag", "", "name = \"a\"\nargs = [\"--no-such-flag\"]"),
        ("long-name", "", long.as_str()),
    ];
    for (name, analysis, config) in cases {
        let p = spec(name, analysis, config);
        let dir = d.path().join(format!("c-{name}"));
        let o = cc(&["campaign", "plan", p.to_str().unwrap(), "-o", dir.to_str().unwrap()]);
        let err = String::from_utf8_lossy(&o.stderr);
        assert_eq!(o.status.code(), Some(1), "{name}: {err}");
        assert!(err.contains("refused[BAD_SPEC]") || err.contains("refused[OUT_OF_RANGE]"), "{name}: {err}");
        assert!(!dir.join("manifest.json").exists(), "{name}: nothing planned");
    }
    let big = d.path().join("reps.toml");
    std::fs::write(&big, std::fs::read_to_string(spec("ok", "", "name = \"a\"")).unwrap().replace("repetitions = 1", "repetitions = 4294967295")).unwrap();
    refused_quickly(&["campaign", "plan", big.to_str().unwrap(), "-o", d.path().join("c-reps").to_str().unwrap()], "OUT_OF_RANGE");
    ok(&cc(&["campaign", "plan", spec("ok2", "", "name = \"a\"").to_str().unwrap(), "-o", d.path().join("c-ok").to_str().unwrap()]));
}

/// Item 8: a trace whose gap is 10^15 ns (11.6 days) is refused, not slept through.
#[test]
fn a_trace_gap_of_days_is_refused_not_slept() {
    let d = tempfile::tempdir().unwrap();
    let run = run_rank(2, &d.path().join("src"), &["--phases", "blocking", "--tokens", "2", "--layers", "2"]);
    let events = d.path().join("events.jsonl");
    ok(&cc(&["join", run.to_str().unwrap(), "--events-out", events.to_str().unwrap()]));
    let text = std::fs::read_to_string(&events).unwrap();
    let mut lines: Vec<serde_json::Value> = text.lines().map(|l| serde_json::from_str(l).unwrap()).collect();
    let last = lines.iter_mut().rev().find(|c| c["phase"] == "blocking").unwrap();
    for t in last["ranks"].as_array_mut().unwrap() {
        for k in ["host_issue_ns", "wait_end_ns", "completion_ns"] {
            if let Some(v) = t[k].as_u64() {
                t[k] = (v + 1_000_000_000_000_000).into();
            }
        }
    }
    let crafted = d.path().join("gap.jsonl");
    std::fs::write(&crafted, lines.iter().map(|l| l.to_string() + "\n").collect::<String>()).unwrap();
    let out = d.path().join("replay");
    let t0 = Instant::now();
    let o = mpirun(2, &["rank", "-q", "--backend", "cpu", "--phases", "replay", "--tokens", "2", "--layers", "2", "--trace", crafted.to_str().unwrap(), "--out", out.to_str().unwrap()]);
    assert!(!o.status.success());
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(err.contains("refused[OUT_OF_RANGE]") && err.contains("gap"), "{err}");
    assert!(t0.elapsed() < Duration::from_secs(60));
}
