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
    // validate's exit codes 1 and 2 are verdicts; a refused argument is 3 (could not run)
    let want = if args.first() == Some(&"validate") { 3 } else { 1 };
    assert_eq!(o.status.code(), Some(want), "{args:?}: {:?}\n{err}", o.status);
    assert!(err.contains(&format!("refused[{code}]")), "{args:?}: expected refused[{code}] in {err}");
}

#[test]
fn capacity_and_queue_refuse_what_they_cannot_count() {
    // item 5: no wrapped or saturated GPU counts
    refused_quickly(
        &[
            "capacity",
            "--demand",
            "1e19",
            "--throughput-per-gpu",
            "1",
            "--throughput-per-gpu",
            "0.5",
            "--gpu-hour-cost",
            "2",
        ],
        "OUT_OF_RANGE",
    );
    let d = tempfile::tempdir().unwrap();
    let st = d.path().join("s.txt");
    std::fs::write(&st, "1.0\n2.0\n3.0\n").unwrap();
    let s = st.to_str().unwrap();
    for slo in ["--slo-ms=NaN", "--slo-ms=-5", "--slo-ms=inf"] {
        refused_quickly(&["queue", "--service-times", s, "--mode", "closed", "--clients", "1", slo], "OUT_OF_RANGE");
    }
    // item 8: no unbounded allocation or endless loop
    for e in ["1e-9", "1e-300"] {
        refused_quickly(
            &["queue", "--service-times", s, "--mode", "closed", "--clients", "1", "--co-correct-ms", e],
            "OUT_OF_RANGE",
        );
    }
    refused_quickly(&["queue", "--service-times", s, "--mode", "closed", "--clients", "4000000000"], "OUT_OF_RANGE");
    for n in ["10000000000", "18446744073709551615"] {
        refused_quickly(
            &["queue", "--service-times", s, "--mode", "open", "--interval-ms", "1", "--requests", n],
            "OUT_OF_RANGE",
        );
    }
    // a good call still works
    ok(&cc(&[
        "queue",
        "--service-times",
        s,
        "--mode",
        "closed",
        "--clients",
        "1",
        "--slo-ms",
        "2.5",
        "--co-correct-ms",
        "0.5",
    ]));
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
    // an existing --json-out is refused before the benchmark runs (not after, losing its results)
    let existing = d.path().join("bench.json");
    std::fs::write(&existing, b"[]").unwrap();
    refused_quickly(
        &["bench-overhead", "--backend", "cpu", "--json-out", existing.to_str().unwrap()],
        "ALREADY_EXISTS",
    );
    assert_eq!(std::fs::read(&existing).unwrap(), b"[]", "the existing file is untouched");
}

#[test]
fn plan_refuses_specs_that_can_never_run_or_analyze() {
    let d = tempfile::tempdir().unwrap();
    let spec = |name: &str, analysis: &str, config: &str| {
        let p = d.path().join(format!("{name}.toml"));
        std::fs::write(
            &p,
            format!(
                "name = \"t\"\nbackend = \"cpu\"\nranks = 2\nrepetitions = 2\nseed = 1\n[launcher]\nkind = \
                    \"mpirun\"\n[workload]\nphases = \"blocking\"\ntokens = 2\nlayers = 2\n[analysis]\ntie_policy = \
                        \"interval\"\n{analysis}\n[[configs]]\n{config}\n"
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
    std::fs::write(
        &big,
        std::fs::read_to_string(spec("ok", "", "name = \"a\""))
            .unwrap()
            .replace("repetitions = 2", "repetitions = 4294967295"),
    )
    .unwrap();
    refused_quickly(
        &["campaign", "plan", big.to_str().unwrap(), "-o", d.path().join("c-reps").to_str().unwrap()],
        "OUT_OF_RANGE",
    );
    ok(&cc(&[
        "campaign",
        "plan",
        spec("ok2", "", "name = \"a\"").to_str().unwrap(),
        "-o",
        d.path().join("c-ok").to_str().unwrap(),
    ]));
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
    let o = mpirun(
        2,
        &[
            "rank",
            "-q",
            "--backend",
            "cpu",
            "--phases",
            "replay",
            "--tokens",
            "2",
            "--layers",
            "2",
            "--trace",
            crafted.to_str().unwrap(),
            "--out",
            out.to_str().unwrap(),
        ],
    );
    assert!(!o.status.success());
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(err.contains("refused[OUT_OF_RANGE]") && err.contains("gap"), "{err}");
    assert!(t0.elapsed() < Duration::from_secs(60));
}

/// Options that take a value which is not a number (paths, names, enums,
/// lists of names). Every other value-taking option must have a row in
/// `commcanary::core::ranges::RANGES` (issue 13 item 8: a future flag cannot be
/// forgotten).
const NON_NUMERIC: &[(&str, &str)] = &[
    ("rank", "--collective"),
    ("rank", "--op"),
    ("rank", "--json"),
    ("import run", "<run_dir>"),
    ("import run", "--phase"),
    ("import run", "--out"),
    ("canary compile", "<trace>"),
    ("canary compile", "--out"),
    ("canary verify", "<trace>"),
    ("canary verify", "<artifact>"),
    ("canary verify", "--configs"),
    ("canary verify", "--backend"),
    ("canary verify", "--phases"),
    ("canary verify", "--also"),
    ("canary verify", "--out"),
    ("canary reduce", "<trace>"),
    ("canary reduce", "--out"),
    ("canary reduce", "--from"),
    ("canary redact", "<trace>"),
    ("canary redact", "--out"),
    ("canary redact", "--configs"),
    ("canary inspect", "<artifact>"),
    ("synth", "--out"),
    ("synth-shards", "--out"),
    ("rank", "--backend"),
    ("rank", "--phases"),
    ("rank", "--model"),
    ("rank", "--dtype"),
    ("rank", "--fill-residual"),
    ("rank", "--comm-stream"),
    ("rank", "--trace"),
    ("rank", "--clock"),
    ("rank", "--clock-sync"),
    ("rank", "--nccl-lib"),
    ("rank", "--out"),
    ("rank", "--run-id"),
    ("join", "<run_dir>"),
    ("join", "--events-out"),
    ("inspect", "<file>"),
    ("export chrome", "<run_dir>"),
    ("export chrome", "--out"),
    ("export param", "<trace>"),
    ("export param", "--out"),
    ("export et", "<trace>"),
    ("export et", "--out"),
    ("import kineto", "<files>"),
    ("import kineto", "--out"),
    ("import et", "<files>"),
    ("import et", "--out"),
    ("replay-trace", "<trace>"),
    ("replay-trace", "--out"),
    ("replay-trace", "--op"),
    ("replay-trace", "--pace"),
    ("replay-trace", "--backend"),
    ("replay-trace", "--nccl-lib"),
    ("compare", "--proxy"),
    ("compare", "--truth"),
    ("compare", "--tie-policy"),
    ("campaign plan", "<spec>"),
    ("campaign plan", "--out"),
    ("campaign run", "<spec>"),
    ("campaign run", "--out"),
    ("campaign exec", "<dir>"),
    ("campaign export-pick", "<dir>"),
    ("campaign export-pick", "--out"),
    ("campaign export-pick", "--by"),
    ("campaign confirm", "<dir>"),
    ("campaign confirm", "--pick"),
    ("campaign confirm", "--out"),
    ("import mpi", "<dir>"),
    ("import mpi", "--out"),
    ("capture", "--out"),
    ("capture", "--lib"),
    ("capture", "<app>"),
    ("campaign select", "<dir>"),
    ("campaign select", "--policy"),
    ("campaign verify", "<dir>"),
    ("campaign analyze", "<dir>"),
    ("campaign analyze", "--report-dir"),
    ("campaign archive", "<dir>"),
    ("campaign archive", "--out"),
    ("campaign archive", "--descriptor"),
    ("campaign join", "<a>"),
    ("campaign join", "<b>"),
    ("campaign join", "--out"),
    ("campaign power", "<dir>"),
    ("campaign power", "--phase"),
    ("campaign replicate", "<a>"),
    ("campaign replicate", "<b>"),
    ("campaign check-archive", "<archive>"),
    ("campaign check-archive", "<descriptor>"),
    ("queue", "--service-times"),
    ("queue", "--campaign"),
    ("queue", "--phase"),
    ("queue", "--mode"),
    ("queue", "--arrival"),
    ("overlap", "<run_dir>"),
    ("overlap", "--intervals"),
    ("summarize", "<runs>"),
    ("doctor", "--nccl-lib"),
    ("schema", "<name>"),
    ("bench-overhead", "--backend"),
    ("bench-overhead", "--nccl-lib"),
    ("bench-overhead", "--json-out"),
    ("validate", "--backend"),
    ("validate", "--reference"),
    ("validate", "--site"),
    ("validate", "--out"),
    ("validate", "--model"),
    ("validate", "--nccl-lib"),
    ("validate", "--prometheus"),
];

/// Every option of every subcommand that takes a value: (command path, `--long` or `<id>`).
fn value_options() -> Vec<(String, String)> {
    fn walk(cmd: &clap::Command, path: &str, out: &mut Vec<(String, String)>) {
        for a in cmd.get_arguments() {
            if matches!(a.get_id().as_str(), "help" | "version") || !a.get_action().takes_values() {
                continue;
            }
            let name = match a.get_long() {
                Some(l) => format!("--{l}"),
                None => format!("<{}>", a.get_id()),
            };
            out.push((path.to_string(), name));
        }
        for s in cmd.get_subcommands() {
            let p = if path.is_empty() { s.get_name().to_string() } else { format!("{path} {}", s.get_name()) };
            walk(s, &p, out);
        }
    }
    let mut out = Vec::new();
    walk(&<commcanary::cli::Cli as clap::CommandFactory>::command(), "", &mut out);
    out
}

/// One out-of-range invocation per row of the range table (None: the row
/// admits every value its type can hold, so clap's own parse is the range).
fn out_of_range_example(command: &str, option: &str, out: &str) -> Option<Vec<String>> {
    let rank = |bad: &[&str]| -> Vec<String> {
        ["rank", "-q", "--backend", "cpu", "--out", out].iter().chain(bad).map(|s| s.to_string()).collect()
    };
    let v = |a: &[&str]| -> Vec<String> { a.iter().map(|s| s.to_string()).collect() };
    let st = "/nonexistent/service-times.txt";
    Some(match (command, option) {
        ("rank", "--tokens") => rank(&["--tokens", "0"]),
        ("rank", "--warmup-tokens") => rank(&["--warmup-tokens", "100001"]),
        ("rank", "--layers") => rank(&["--layers", "0"]),
        ("rank", "--model-dims") => rank(&["--model-dims", "4294967295,14336,32"]),
        ("rank", "--batch") => rank(&["--batch", "0"]),
        ("rank", "--prefill-tokens") => rank(&["--prefill-tokens", "4294967295"]),
        ("rank", "--sizes") => rank(&["--model", "synthetic", "--sizes", "2GiB"]),
        ("rank", "--gemm") => rank(&["--gemm", "100000"]),
        ("rank", "--min-bytes") => rank(&["-b", "2", "-e", "1KiB"]),
        ("rank", "--max-bytes") => rank(&["-b", "4", "-e", "2GiB"]),
        ("rank", "--step-factor") => rank(&["-f", "1"]),
        ("rank", "--iters") => rank(&["-n", "0"]),
        ("rank", "--warmup-iters") => rank(&["-w", "100001"]),
        ("rank", "--check") => rank(&["--check", "1000001"]),
        ("rank", "--membound-bytes") => rank(&["--membound-bytes", "100GiB"]),
        ("rank", "--inject-delay") => rank(&["--inject-delay", "rank=0,every=0,us=1"]),
        ("rank", "--inject-repeat") => rank(&["--inject-repeat", "65"]),
        ("rank", "--inject-clock") => rank(&["--inject-clock", "rank=4294967295,offset_us=1"]),
        ("rank", "--clock-samples") => rank(&["--clock-samples", "0"]),
        ("rank", "--collective-timeout-s") => rank(&["--collective-timeout-s", "NaN"]),
        ("rank", "--gpu") => rank(&["--gpu", "4096"]),
        ("rank", "--fault") => rank(&["--fault", "hang:4294967296:1"]),
        ("validate", "--rounds") => return None,
        ("validate", "--seed") => return None,
        ("validate", "--min-bytes") => {
            v(&["validate", "--backend", "cpu", "--record-reference", "-o", out, "--min-bytes", "2"])
        }
        ("validate", "--max-bytes") => v(&[
            "validate",
            "--backend",
            "cpu",
            "--record-reference",
            "-o",
            out,
            "--min-bytes",
            "1KiB",
            "--max-bytes",
            "64",
        ]),
        ("validate", "--step-factor") => {
            v(&["validate", "--backend", "cpu", "--record-reference", "-o", out, "--step-factor", "1"])
        }
        ("validate", "--iters") => {
            v(&["validate", "--backend", "cpu", "--record-reference", "-o", out, "--iters", "0"])
        }
        ("validate", "--warmup-iters") => {
            v(&["validate", "--backend", "cpu", "--record-reference", "-o", out, "--warmup-iters", "100001"])
        }
        ("validate", "--batch") => {
            v(&["validate", "--backend", "cpu", "--record-reference", "-o", out, "--batch", "0"])
        }
        ("validate", "--tokens") => {
            v(&["validate", "--backend", "cpu", "--record-reference", "-o", out, "--tokens", "0"])
        }
        ("validate", "--warmup-tokens") => {
            v(&["validate", "--backend", "cpu", "--record-reference", "-o", out, "--warmup-tokens", "100001"])
        }
        ("validate", "--collective-timeout-s") => {
            v(&["validate", "--backend", "cpu", "--record-reference", "-o", out, "--collective-timeout-s", "NaN"])
        }
        ("validate", "--inject-delay") => v(&[
            "validate",
            "--backend",
            "cpu",
            "--record-reference",
            "-o",
            out,
            "--inject-delay",
            "rank=4294967295,every=1,us=1",
        ]),
        ("replay-trace", "--corrupt-rank") => {
            v(&["replay-trace", "/nonexistent/trace.json", "--corrupt-rank", "4294967295"])
        }
        ("campaign run", "--retries") => v(&["campaign", "run", "/nonexistent/s.toml", "-o", out, "--retries", "101"]),
        ("campaign run", "--cell-timeout-s") => {
            v(&["campaign", "run", "/nonexistent/s.toml", "-o", out, "--cell-timeout-s", "0"])
        }
        ("campaign exec", "--retries") => v(&["campaign", "exec", "/nonexistent/c", "--retries", "101"]),
        ("campaign exec", "--cell") => v(&["campaign", "exec", "/nonexistent/c", "--cell", "0"]),
        ("campaign exec", "--cell-timeout-s") => v(&["campaign", "exec", "/nonexistent/c", "--cell-timeout-s", "0"]),
        ("campaign confirm", "--rounds") => {
            v(&["campaign", "confirm", "/nonexistent/c", "--pick", "/nonexistent/p.env", "--rounds", "1", "-o", out])
        }
        ("campaign power", "--min-effect-pct") => v(&["campaign", "power", "/nonexistent/c", "--min-effect-pct", "0"]),
        ("queue", "--requests") => {
            v(&["queue", "--service-times", st, "--mode", "open", "--interval-ms", "1", "--requests", "0"])
        }
        ("queue", "--clients") => v(&["queue", "--service-times", st, "--mode", "closed", "--clients", "0"]),
        ("queue", "--interval-ms") => v(&["queue", "--service-times", st, "--mode", "open", "--interval-ms", "0"]),
        ("queue", "--slo-ms") => {
            v(&["queue", "--service-times", st, "--mode", "closed", "--clients", "1", "--slo-ms", "NaN"])
        }
        ("queue", "--co-correct-ms") => {
            v(&["queue", "--service-times", st, "--mode", "closed", "--clients", "1", "--co-correct-ms=-1"])
        }
        ("queue", "--think-ms") => {
            v(&["queue", "--service-times", st, "--mode", "closed", "--clients", "1", "--think-ms", "inf"])
        }
        ("queue", "--seed") => return None,
        ("capacity", "--demand") => {
            v(&["capacity", "--demand", "0", "--throughput-per-gpu", "1", "--gpu-hour-cost", "1"])
        }
        ("capacity", "--throughput-per-gpu") => {
            v(&["capacity", "--demand", "1", "--throughput-per-gpu", "1e16", "--gpu-hour-cost", "1"])
        }
        ("capacity", "--gpu-hour-cost") => {
            v(&["capacity", "--demand", "1", "--throughput-per-gpu", "1", "--gpu-hour-cost", "NaN"])
        }
        ("bench-overhead", "--size") => v(&["bench-overhead", "--size", "0"]),
        ("bench-overhead", "--sizes") => v(&["bench-overhead", "--sizes", "3"]),
        ("bench-overhead", "--iters") => v(&["bench-overhead", "--iters", "0"]),
        ("bench-overhead", "--reps") => v(&["bench-overhead", "--reps", "0"]),
        ("canary compile", "--iterations") => {
            v(&["canary", "compile", "/nonexistent/t.json", "-o", out, "--iterations", "0"])
        }
        ("canary compile", "--significant-digits") => {
            v(&["canary", "compile", "/nonexistent/t.json", "-o", out, "--significant-digits", "6"])
        }
        ("canary compile", "--seed") => return None,
        ("canary verify", "--rounds") => v(&[
            "canary",
            "verify",
            "/nonexistent/t.json",
            "/nonexistent/a.json",
            "--configs",
            "/nonexistent/s.toml",
            "-o",
            out,
            "--rounds",
            "1",
        ]),
        ("canary verify", "--passes") => v(&[
            "canary",
            "verify",
            "/nonexistent/t.json",
            "/nonexistent/a.json",
            "--configs",
            "/nonexistent/s.toml",
            "-o",
            out,
            "--passes",
            "0",
        ]),
        ("canary verify", "--head-sample") => v(&[
            "canary",
            "verify",
            "/nonexistent/t.json",
            "/nonexistent/a.json",
            "--configs",
            "/nonexistent/s.toml",
            "-o",
            out,
            "--head-sample",
            "0",
        ]),
        ("canary reduce", "--budget") => {
            v(&["canary", "reduce", "/nonexistent/t.json", "-o", out, "--from", "/nonexistent/v", "--budget", "0"])
        }
        ("canary redact", "--quantize-ns") => {
            v(&["canary", "redact", "/nonexistent/t.json", "-o", out, "--quantize-ns", "60000000001"])
        }
        ("export param", "--quantize-ns") => {
            v(&["export", "param", "/nonexistent/t.json", "-o", out, "--redact", "--quantize-ns", "60000000001"])
        }
        ("export et", "--quantize-ns") => {
            v(&["export", "et", "/nonexistent/t.json", "-o", out, "--redact", "--quantize-ns", "60000000001"])
        }
        ("synth", "--events") => v(&["synth", "--events", "0", "--seed", "1", "-o", out]),
        ("synth", "--seed") => return None,
        ("synth", "--ranks") => v(&["synth", "--events", "1", "--seed", "1", "--ranks", "0", "-o", out]),
        ("synth-shards", "--ranks") => v(&["synth-shards", "--ranks", "0", "--collectives", "1", "-o", out]),
        ("synth-shards", "--collectives") => v(&["synth-shards", "--ranks", "1", "--collectives", "0", "-o", out]),
        ("synth-shards", "--threads") => {
            v(&["synth-shards", "--ranks", "1", "--collectives", "1", "--threads", "0", "-o", out])
        }
        ("synth-shards", "--format-version") => {
            v(&["synth-shards", "--ranks", "1", "--collectives", "1", "--format-version", "5", "-o", out])
        }
        ("synth-shards", "--seed") => return None,
        ("compare", "--size") => {
            v(&["compare", "--proxy", "/nonexistent/p", "--truth", "/nonexistent/t", "--size", "0"])
        }
        ("join", "--threads") => v(&["join", "--threads", "0", "/nonexistent-run"]),
        _ => panic!("{command} {option}: a row of the range table without an out-of-range example here; add one"),
    })
}

/// Item 8: every option that takes a value is either in the range table or
/// named non-numeric here; every row names a real option, is printed in
/// docs/REFERENCE.md, and its out-of-range example is refused with OUT_OF_RANGE
/// before any work (nothing written, no MPI).
#[test]
fn every_numeric_option_has_a_documented_range_that_is_enforced() {
    use commcanary::core::ranges::RANGES;
    let options = value_options();
    let missing: Vec<String> = options
        .iter()
        .filter(|(c, o)| {
            !RANGES.iter().any(|r| r.command == c && r.option == o) && !NON_NUMERIC.contains(&(c.as_str(), o.as_str()))
        })
        .map(|(c, o)| format!("{c} {o}"))
        .collect();
    assert!(missing.is_empty(), "options with no range row and not listed as non-numeric: {missing:?}");
    for (c, o) in NON_NUMERIC {
        assert!(options.iter().any(|(c2, o2)| c2 == c && o2 == o), "NON_NUMERIC names {c} {o}, which is no option");
        assert!(
            !RANGES.iter().any(|r| r.command == *c && r.option == *o),
            "{c} {o} is both non-numeric and in the range table"
        );
    }
    let readme = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/docs/REFERENCE.md")).unwrap();
    let d = tempfile::tempdir().unwrap();
    let out = d.path().join("out");
    for r in RANGES {
        assert!(
            options.iter().any(|(c, o)| c == r.command && o == r.option),
            "range row {} {} names no option",
            r.command,
            r.option
        );
        let row = format!("| `{} {}` | {} |", r.command, r.option, r.range);
        assert!(readme.contains(&row), "docs/REFERENCE.md lacks the row\n{row}");
        if let Some(args) = out_of_range_example(r.command, r.option, out.to_str().unwrap()) {
            let args: Vec<&str> = args.iter().map(String::as_str).collect();
            refused_quickly(&args, "OUT_OF_RANGE");
        }
    }
    assert!(!out.exists(), "an out-of-range rank wrote its output directory");
}

/// Item 8: the flags added after the first range table (regressions named in the follow-up).
#[test]
fn sweep_and_model_numbers_are_refused_before_mpi_starts() {
    let d = tempfile::tempdir().unwrap();
    let out = d.path().join("out");
    let o = out.to_str().unwrap();
    let base = ["rank", "-q", "--backend", "cpu", "--out", o];
    for c in [
        &["-f", "1", "-b", "4", "-e", "64"][..],
        &["-b", "1MiB", "-e", "1KiB"],
        &["--batch", "0"],
        &["--model-dims", "1000000,1000000,1000000"],
        &["--prefill-tokens", "4294967295"],
        &["--batch", "65536", "--prefill-tokens", "65536"],
    ] {
        let args: Vec<&str> = base.iter().chain(c).copied().collect();
        refused_quickly(&args, "OUT_OF_RANGE");
    }
    // a model's derived sizes, once the world size is known (mpirun sets it before MPI_Init)
    let t0 = Instant::now();
    let m = mpirun(2, &["rank", "-q", "--backend", "cpu", "--out", o, "--model-dims", "65536,262144,2"]);
    let err = String::from_utf8_lossy(&m.stderr);
    assert!(!m.status.success() && err.contains("refused[OUT_OF_RANGE]") && err.contains("GEMM"), "{err}");
    assert!(t0.elapsed() < Duration::from_secs(60));
    assert!(!out.exists(), "nothing written");
}
