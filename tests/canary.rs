//! Canaries end to end with the real binary: synth, compile, verify under real
//! mpirun (a campaign of the source, the canary and the baselines), reduce,
//! the integrity refusals, redaction, and `import run`.
mod common;
use commcanary::canary::verify::{self, VerifyReport};
use commcanary::core::fsutil;
use common::{assert_refused, cc, cc_root, ok, run_rank};
use std::path::Path;

fn tmp(name: &str) -> std::path::PathBuf {
    let d = std::env::temp_dir().join(format!("cc-canary-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

fn s(p: &Path) -> &str {
    p.to_str().unwrap()
}

fn spec() -> String {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("examples/canary-cpu.toml").display().to_string()
}

fn state(r: &serde_json::Value, variant: &str) -> (String, Vec<String>) {
    let v = r["candidates"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["variant"] == variant)
        .unwrap_or_else(|| panic!("variant {variant} in {r}"));
    let failed = v["checks"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|c| c["passed"] == false)
        .map(|c| c["name"].as_str().unwrap().to_string())
        .collect();
    (v["state"].as_str().unwrap().to_string(), failed)
}

const BELOW_BEHAVIOURAL: [&str; 3] = ["schema-valid", "integrity-bound", "source-verified"];

/// A job-to-job spread of one configuration (log sd of its jobs' median pass latencies over the rounds) that no
/// quiet run shows: about one round in four 1.7 times slower than the others. Quiet runs of the acceptance
/// test give a few hundredths.
const NOISY_JOB_SPREAD_LOG_SD: f64 = 0.25;

/// The acceptance run on 2 ranks: a lossless canary of `synth --events 100
/// --seed 7` verifies behaviourally; the 2-event sample and the baselines at
/// equal size fail named checks; `reduce` keeps a handful of events within its
/// budget, passes its oracle, says what it is, and does not verify behaviourally.
#[test]
fn a_lossless_canary_verifies_behaviorally_and_simple_samples_do_not() {
    let d = tmp("synth");
    let (trace, art) = (d.join("synth.json"), d.join("synth.canary.json"));
    // two ranks, fewer than the cores of a 2-core CI machine: oversubscribed
    // ranks that spin in MPI's progress loop while the rank they wait for is
    // descheduled make a round's time the scheduler's, and under a
    // background load one such round left the source undecided
    ok(&cc(&["synth", "--events", "100", "--seed", "7", "--ranks", "2", "-o", s(&trace)]));
    let out = ok(&cc(&["canary", "compile", s(&trace), "--lossless", "-o", s(&art)]));
    assert!(out.contains("lossless"), "{out}");
    let v = d.join("verify");
    let o = cc_root(&[
        "canary",
        "verify",
        s(&trace),
        s(&art),
        "--configs",
        &spec(),
        "--baselines",
        "--head-sample",
        "2",
        "-o",
        s(&v),
        "--json",
    ]);
    let r: serde_json::Value = serde_json::from_str(&ok(&o)).unwrap();
    assert_eq!(r["source"]["world_size"], 2, "the rank count comes from the trace");
    let (st, failed) = state(&r, "canary");
    // A load that comes and goes between rounds (other jobs, a build beside the suite) can make one round of a
    // configuration several times slower than its others; 4 such rounds then decide nothing, or nothing the
    // canary (the same trace replayed again) can reach, and the tool says so: the ranking fails for want of a
    // decision alone, with no contradiction and nothing decided outside the other side's interval, and it gives
    // the job-to-job spread. Only then, and only beyond a spread no quiet run shows, is the state (and what
    // follows from it) left unjudged; on a quiet machine, or on any contradiction, it is checked as before.
    let c = r["candidates"].as_array().unwrap().iter().find(|c| c["variant"] == "canary").unwrap();
    let behavioural_failed: Vec<&str> = c["checks"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|k| k["guards"] == "behaviorally-verified" && k["passed"] == false)
        .map(|k| k["name"].as_str().unwrap())
        .collect();
    let spread = c["ranking_undecided"]["job_spread_log_sd"].as_f64();
    let noisy_undecided = st == "source-verified"
        && behavioural_failed == ["ranking"]
        && spread.is_some_and(|x| x > NOISY_JOB_SPREAD_LOG_SD);
    if noisy_undecided {
        eprintln!(
            "NOTE: jobs of one configuration spread {:.2} (log sd) on this loaded machine and the ranking was not \
                decided ({}): the lossless canary's behaviorally-verified state was not checked",
            spread.unwrap(),
            c["ranking_undecided"]["reason"].as_str().unwrap_or("?")
        );
    } else {
        assert_eq!(
            st,
            "behaviorally-verified",
            "the lossless canary failed {failed:?}\n{}",
            serde_json::to_string_pretty(&r).unwrap()
        );
        assert!(c.get("ranking_undecided").is_none(), "a verified canary's ranking is decided: {c}");
    }
    // whether the source decided a pair: without one there is no decision for the baselines or reduce
    let source_decided = !c["cost"].is_null();
    assert!(source_decided || noisy_undecided, "the known-bad control gives the source a decision: {c}");
    for b in ["head2", "random", "frequency", "cluster", "stratified-gap"] {
        let (st, failed) = state(&r, b);
        assert!(BELOW_BEHAVIOURAL.contains(&st.as_str()), "{b} reached {st}");
        assert!(
            failed.iter().any(|f| !f.starts_with("hardware.") && f != "source.unknowns"),
            "{b} must fail a named check of its own: {failed:?}"
        );
    }
    let (_, head) = state(&r, "head2");
    assert!(
        head.iter().any(|f| f.starts_with("coverage.") || f.starts_with("tail-recall.") || f.starts_with("gaps.")),
        "{head:?}"
    );
    if !noisy_undecided {
        assert_eq!(r["canary_beats_baselines"], true);
    } else if !source_decided {
        assert!(r["canary_beats_baselines"].is_null(), "no decision, no comparison: {}", r["canary_beats_baselines"]);
    }
    // the default text is the short answer: one line per candidate (a canary, a head sample and four
    // baselines here) within 30 lines, each naming its state and what stops it; -v prints every check
    let report: VerifyReport = serde_json::from_value(r.clone()).unwrap();
    let short = verify::render_short(&report);
    assert!(short.lines().count() <= 30, "{short}");
    for c in r["candidates"].as_array().unwrap() {
        let line = short
            .lines()
            .find(|l| l.starts_with(&format!("{} [", c["variant"].as_str().unwrap())))
            .unwrap_or_else(|| panic!("{c}: {short}"));
        assert!(line.contains(c["state"].as_str().unwrap()), "{line}");
        let failed = c["checks"].as_array().unwrap().iter().any(|k| k["passed"] == false);
        assert_eq!(line.contains("stopped by "), failed, "{line}");
    }
    if !noisy_undecided {
        assert!(short.contains("canary beats every baseline at equal size"), "{short}");
    }
    assert!(verify::render(&report).lines().count() > short.lines().count());
    // the web page beside the JSON: every candidate, every check, nothing fetched from the network
    let html = std::fs::read_to_string(v.join("report.html")).unwrap();
    for c in r["candidates"].as_array().unwrap() {
        assert!(html.contains(&format!("<td>{}</td>", c["variant"].as_str().unwrap())), "{c}");
    }
    assert!(html.contains("id=\"checks-table\"") && !html.contains("src=\"http") && !html.contains("href=\"http"));
    // the evidence is a verified campaign
    ok(&cc(&["campaign", "verify", s(&v.join("campaign"))]));
    // whose own report ranks every variant against the source, as verify did
    let rep: serde_json::Value =
        serde_json::from_slice(&std::fs::read(v.join("campaign/report/report.json")).unwrap()).unwrap();
    let tr = &rep["canary"]["trace"];
    assert_eq!(tr["source"], "source", "{tr}");
    assert_eq!(tr["phase"], "replay");
    for c in r["candidates"].as_array().unwrap() {
        let name = c["variant"].as_str().unwrap();
        let in_report = tr["variants"]
            .as_array()
            .unwrap()
            .iter()
            .find(|x| x["variant"] == name)
            .unwrap_or_else(|| panic!("{name} in {tr}"));
        assert_eq!(
            in_report["agreement"]["comparison"]["relations"], c["ranking"]["comparison"]["relations"],
            "{name}: the campaign report and canary verify agree on the ranking"
        );
    }

    // reduce on the ranking decision only, with the source replays as its oracle
    let red = d.join("reduced.json");
    let reduce = cc(&["canary", "reduce", s(&trace), "-o", s(&red), "--budget", "200", "--from", s(&v)]);
    if !source_decided {
        // (only in the noisy case above) a source that decided nothing gives reduce nothing to preserve
        assert_refused(&reduce, "NO_DECISION");
        let _ = std::fs::remove_dir_all(&d);
        return;
    }
    let out = ok(&reduce);
    assert!(
        out.contains("decision-preserving, not source-verified") && out.contains("passes its oracle: true"),
        "{out}"
    );
    let kept: usize = out.split("reduce: ").nth(1).unwrap().split(' ').next().unwrap().parse().unwrap();
    assert!((1..=5).contains(&kept), "a handful of events: {out}");
    let a: serde_json::Value = serde_json::from_slice(&std::fs::read(&red).unwrap()).unwrap();
    assert_eq!(a["label"], "decision-preserving, not source-verified");
    assert_eq!(a["method"], "reduced");
    let v2 = d.join("verify-reduced");
    let r: serde_json::Value = serde_json::from_str(&ok(&cc_root(&[
        "canary",
        "verify",
        s(&trace),
        s(&red),
        "--configs",
        &spec(),
        "--rounds",
        "2",
        "-o",
        s(&v2),
        "--json",
    ])))
    .unwrap();
    let (st, failed) = state(&r, "canary");
    assert!(
        BELOW_BEHAVIOURAL.contains(&st.as_str()),
        "a reduced trace is never promoted past what it checks: {st} {failed:?}"
    );
    assert_eq!(r["candidates"][0]["label"], "decision-preserving, not source-verified");
    let _ = std::fs::remove_dir_all(&d);
}

/// One changed byte in the source or the artifact is refused before anything
/// runs, naming the file; so is a canary of one trace against another.
#[test]
fn changed_bytes_and_another_trace_are_refused_on_integrity() {
    let d = tmp("integrity");
    let (trace, art, other) = (d.join("t.json"), d.join("t.canary.json"), d.join("other.json"));
    ok(&cc(&["synth", "--events", "40", "--seed", "3", "--ranks", "2", "-o", s(&trace)]));
    ok(&cc(&["synth", "--events", "40", "--seed", "4", "--ranks", "2", "-o", s(&other)]));
    ok(&cc(&["canary", "compile", s(&trace), "-o", s(&art)]));
    let verify = |t: &Path, a: &Path, out: &str| {
        cc_root(&["canary", "verify", s(t), s(a), "--configs", &spec(), "-o", s(&d.join(out))])
    };
    // another trace of the same shape
    let e = assert_refused(&verify(&other, &art, "v1"), "DIGEST_MISMATCH");
    assert!(e.contains(s(&other)), "{e}");
    // one changed digit inside the source
    let text = std::fs::read_to_string(&trace).unwrap();
    let at = text.find("\"host_start_ns\": ").unwrap() + "\"host_start_ns\": ".len();
    let mut bytes = text.into_bytes();
    bytes[at] = if bytes[at] == b'9' { b'8' } else { bytes[at] + 1 };
    let changed = d.join("changed.json");
    std::fs::write(&changed, &bytes).unwrap();
    let e = assert_refused(&verify(&changed, &art, "v2"), "DIGEST_MISMATCH");
    assert!(e.contains(s(&changed)), "{e}");
    // one changed digit inside the artifact
    let text = std::fs::read_to_string(&art).unwrap();
    let at = text.find("\"occurrences\": ").unwrap() + "\"occurrences\": ".len();
    let mut bytes = text.into_bytes();
    bytes[at] = if bytes[at] == b'9' { b'8' } else { bytes[at] + 1 };
    let bad = d.join("bad.canary.json");
    std::fs::write(&bad, &bytes).unwrap();
    let e = assert_refused(&verify(&trace, &bad, "v3"), "DIGEST_MISMATCH");
    assert!(e.contains(s(&bad)), "{e}");
    // a trace of another shape is another trace
    let small = d.join("small.json");
    ok(&cc(&["synth", "--events", "30", "--seed", "3", "--ranks", "2", "-o", s(&small)]));
    assert_refused(&verify(&small, &art, "v4"), "IDENTITY_MISMATCH");
    for out in ["v1", "v2", "v3", "v4"] {
        assert!(!d.join(out).exists(), "a refusal writes nothing ({out})");
    }
    let _ = std::fs::remove_dir_all(&d);
}

/// A redacted export holds no host name, user name, job id or absolute time of
/// its source, and its audit log is beside it.
#[test]
fn a_redacted_trace_names_no_host_user_job_or_absolute_time() {
    let d = tmp("redact");
    let fixture = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/pytorch-2.11-tp2-h200");
    let site = d.join("home/alice-cc/slurm-job-4242917/gpu-node-17x");
    std::fs::create_dir_all(&site).unwrap();
    for r in 0..2 {
        std::fs::copy(fixture.join(format!("kineto.rank-{r}.json.gz")), site.join(format!("kineto.rank-{r}.json.gz")))
            .unwrap();
    }
    let trace = d.join("t.json");
    ok(&cc(&[
        "import",
        "kineto",
        s(&site.join("kineto.rank-0.json.gz")),
        s(&site.join("kineto.rank-1.json.gz")),
        "-o",
        s(&trace),
    ]));
    let src = std::fs::read_to_string(&trace).unwrap();
    assert!(
        src.contains("alice-cc") && src.contains("4242917") && src.contains("gpu-node-17x"),
        "the source names them"
    );
    let t: serde_json::Value = serde_json::from_str(&src).unwrap();
    let absolute: Vec<String> = t["ranks"]
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|r| r["collectives"].as_array().unwrap().iter().filter_map(|c| c["host_start_ns"].as_u64()))
        .filter(|v| *v > 1_000_000_000)
        .map(|v| v.to_string())
        .collect();
    assert!(!absolute.is_empty());
    let out = d.join("redacted.json");
    let printed = ok(&cc(&["canary", "redact", s(&trace), "-o", s(&out), "--quantize-ns", "1000"]));
    assert!(printed.contains("rebased"), "{printed}");
    let red = std::fs::read_to_string(&out).unwrap();
    for word in ["alice-cc", "4242917", "gpu-node-17x", "home/", &d.display().to_string()] {
        assert!(!red.contains(word), "the redacted trace still contains {word:?}");
    }
    for a in &absolute {
        assert!(!red.contains(a.as_str()), "absolute time {a} survived");
    }
    let audit: serde_json::Value =
        serde_json::from_slice(&std::fs::read(d.join("redacted.json.audit.json")).unwrap()).unwrap();
    assert!(audit["transforms"].as_array().unwrap().len() >= 5, "{audit}");
    assert_eq!(audit["output_sha256"], fsutil::sha256_file(&out).unwrap());
    // still a trace: it compiles
    ok(&cc(&["canary", "compile", s(&out), "-o", s(&d.join("redacted.canary.json"))]));
    // the exports shared outside the site redact the same way, with their audit log beside them
    for fmt in ["param", "et"] {
        let dir = d.join(format!("export-{fmt}"));
        ok(&cc(&["export", fmt, s(&trace), "-o", s(&dir), "--redact", "--quantize-ns", "1000"]));
        let audit: serde_json::Value =
            serde_json::from_slice(&std::fs::read(dir.join("redaction.audit.json")).unwrap()).unwrap();
        assert!(audit["transforms"].as_array().unwrap().len() >= 5, "{audit}");
        assert!(audit["decision_survives"].as_str().unwrap().contains("not re-verified"), "{audit}");
        for rank in 0..2 {
            let text = std::fs::read_to_string(dir.join(format!("rank-{rank}.json"))).unwrap();
            for word in ["alice-cc", "4242917", "gpu-node-17x", "home/", &d.display().to_string()] {
                assert!(!text.contains(word), "export {fmt} --redact still contains {word:?}");
            }
            for a in &absolute {
                assert!(!text.contains(a.as_str()), "export {fmt} --redact: absolute time {a} survived");
            }
        }
    }
    let _ = std::fs::remove_dir_all(&d);
}

/// A verified run is a source: `import run` keeps every collective with its
/// gaps and compute, and the canary folds tokens of layers into one loop.
#[test]
fn a_verified_run_imports_and_compiles_to_a_folded_canary() {
    let d = tmp("run");
    let run = run_rank(
        2,
        &d.join("runs"),
        &[
            "--phases",
            "blocking",
            "--model",
            "synthetic",
            "--tokens",
            "24",
            "--layers",
            "8",
            "--sizes",
            "64KiB,128KiB,256KiB",
        ],
    );
    let trace = d.join("run.comm.json");
    ok(&cc(&["import", "run", s(&run), "-o", s(&trace)]));
    let t: serde_json::Value = serde_json::from_slice(&std::fs::read(&trace).unwrap()).unwrap();
    let n = t["ranks"][0]["collectives"].as_array().unwrap().len();
    assert_eq!(n, (24 + 2) * 8, "every collective of the phase, warm-ups included");
    let c0 = &t["ranks"][0]["collectives"][1];
    assert!(c0["source_name"].as_str().unwrap().starts_with("blocking:"), "{c0}");
    assert!(!c0["compute_before"].as_array().unwrap().is_empty(), "the rank's timed compute in the gap: {c0}");
    let art = d.join("run.canary.json");
    let out = ok(&cc(&["canary", "compile", s(&trace), "-o", s(&art)]));
    let a: serde_json::Value = serde_json::from_slice(&std::fs::read(&art).unwrap()).unwrap();
    // the sizes cycle through the layers of every token: one loop of three, nested in nothing
    fn body_len(n: &serde_json::Value) -> u64 {
        match n.get("op") {
            Some(_) => 1,
            None => {
                n["loop"]["count"].as_u64().unwrap()
                    * n["loop"]["body"].as_array().unwrap().iter().map(body_len).sum::<u64>()
            }
        }
    }
    let covered: u64 = a["body"].as_array().unwrap().iter().map(body_len).sum();
    assert_eq!(covered as usize, n, "the folded body covers every collective: {out}");
    assert!(a["replay"]["source_iterations"].as_u64().unwrap() >= 26, "{out}");
    assert!(a["sizes"]["artifact_events"].as_u64().unwrap() <= 2 * 8, "{out}");
    // a changed shard is refused on import
    let shard = std::fs::read_dir(&run)
        .unwrap()
        .map(|e| e.unwrap().path())
        .find(|p| p.extension().is_some_and(|e| e == "shard"))
        .unwrap();
    let mut b = std::fs::read(&shard).unwrap();
    let last = b.len() - 40;
    b[last] ^= 1;
    std::fs::write(&shard, b).unwrap();
    let o = cc(&["import", "run", s(&run), "-o", s(&d.join("again.json"))]);
    assert!(
        !o.status.success() && String::from_utf8_lossy(&o.stderr).contains("refused["),
        "{}",
        String::from_utf8_lossy(&o.stderr)
    );
    let _ = std::fs::remove_dir_all(&d);
}

/// The PyTorch fixture imports and compiles; its canary expands to a consistent trace of both ranks.
#[test]
fn the_pytorch_fixture_compiles() {
    let d = tmp("fixture");
    let fixture = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/pytorch-2.11-tp2-h200");
    let trace = d.join("tp2.json");
    ok(&cc(&[
        "import",
        "kineto",
        s(&fixture.join("kineto.rank-0.json.gz")),
        s(&fixture.join("kineto.rank-1.json.gz")),
        "-o",
        s(&trace),
    ]));
    let art = d.join("tp2.canary.json");
    let out = ok(&cc(&["canary", "compile", s(&trace), "-o", s(&art)]));
    assert!(out.contains("source/artifact"), "{out}");
    let insp = ok(&cc(&["canary", "inspect", s(&art)]));
    assert!(insp.contains("kineto"), "{insp}");
    let _ = std::fs::remove_dir_all(&d);
}
