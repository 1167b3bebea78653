//! Truth cells: the user's own job in the campaign, its metric recorded and
//! read again, every proxy's pick judged by its regret, and the pick exported
//! and confirmed on new rounds; plan's refusals name the spec field.
mod common;
use common::*;
use std::path::{Path, PathBuf};

/// One campaign at a time in this binary: the tests' threads would otherwise
/// put several oversubscribed campaigns on two cores, and the job's wall time
/// would measure the scheduler.
static ONE_CAMPAIGN: std::sync::Mutex<()> = std::sync::Mutex::new(());

fn one_at_a_time() -> std::sync::MutexGuard<'static, ()> {
    ONE_CAMPAIGN.lock().unwrap_or_else(|e| e.into_inner())
}

/// A spec with `[truth]` (TRUTH is the table's body) and three configurations;
/// `slow` makes the job sleep longer (a known bad for the job).
fn spec(dir: &Path, name: &str, truth: &str, rounds: u32) -> PathBuf {
    let p = dir.join(format!("{name}.toml"));
    std::fs::write(
        &p,
        format!(
            r#"
name = "{name}"
backend = "cpu"
ranks = 2
repetitions = {rounds}
seed = 7
[launcher]
kind = "mpirun"
args = ["--oversubscribe"]
[workload]
phases = "isolated,blocking"
tokens = 4
layers = 4
iters = 5
[analysis]
tie_policy = "interval"
min_effect_pct = 2.0
[truth]
{truth}
[controls]
known_bad = ["slow"]
[[configs]]
name = "fast"
env = {{ TRUTH_SLEEP_S = "0.05" }}
[[configs]]
name = "fast-again"
env = {{ TRUTH_SLEEP_S = "0.05" }}
[[configs]]
name = "slow"
env = {{ TRUTH_SLEEP_S = "1.5" }}
"#
        ),
    )
    .unwrap();
    p
}

fn json(p: &Path) -> serde_json::Value {
    serde_json::from_slice(&std::fs::read(p).unwrap_or_else(|e| panic!("{}: {e}", p.display()))).unwrap()
}

#[test]
fn plan_refuses_a_missing_command_and_a_bad_metric_naming_the_field() {
    let t = tempfile::tempdir().unwrap();
    let cases = [
        (
            r#"command = ["no-such-program-xyz", "-v"]
metric = "wall""#,
            "truth.command",
            "no-such-program-xyz",
        ),
        (
            r#"command = ["sh", "-c", "true"]
metric = { regex = 'Loop time of ([0-9.', unit = "s", better = "lower" }"#,
            "truth.metric.regex",
            "does not compile",
        ),
        (
            r#"command = ["sh", "-c", "true"]
metric = { regex = '(a)(b)', unit = "s", better = "lower" }"#,
            "truth.metric.regex",
            "2 capture groups",
        ),
        (
            r#"command = ["sh", "-c", "true"]
metric = "walltime""#,
            "truth.metric",
            "expected \"wall\"",
        ),
        (
            r#"command = ["sh", "-c", "true"]
metric = { json = "../m.json", field = "a", unit = "s", better = "lower" }"#,
            "truth.metric.json",
            "inside the cell's folder",
        ),
        (
            r#"command = ["sh", "-c", "true"]
metric = "wall"
inputs = ["missing.in"]"#,
            "truth.inputs",
            "missing.in",
        ),
    ];
    for (i, (truth, field, words)) in cases.iter().enumerate() {
        let s = spec(t.path(), &format!("bad{i}"), truth, 2);
        let out = t.path().join(format!("c{i}"));
        let o = cc_root(&["campaign", "plan", s.to_str().unwrap(), "-o", out.to_str().unwrap()]);
        let text = assert_refused(&o, "BAD_SPEC");
        assert!(text.contains(field) && text.contains(words), "case {i}: {text}");
        assert!(text.contains(s.to_str().unwrap()), "the spec file is named: {text}");
        assert!(!out.join("manifest.json").exists(), "nothing planned");
    }
}

#[test]
fn a_truth_cell_whose_metric_is_missing_fails_and_is_retried() {
    let _serial = one_at_a_time();
    let t = tempfile::tempdir().unwrap();
    // the job prints its metric only from its second run on (a flag file outside the campaign)
    let flag = t.path().join("ran-once");
    let truth = format!(
        concat!(
            r#"command = ["sh", "-c", "if [ -e {f} ]; then sleep $TRUTH_SLEEP_S; "#,
            r#"echo \"cost 1.25 s\"; else touch {f}; echo no metric here; fi"]
metric = {{ regex = 'cost ([0-9.]+) s', unit = "s", better = "lower" }}
launch = "self"
timeout_s = 60"#
        ),
        f = flag.display()
    );
    let s = spec(t.path(), "flaky", &truth, 2);
    let dir = t.path().join("c");
    let o = cc_root(&["campaign", "plan", s.to_str().unwrap(), "-o", dir.to_str().unwrap()]);
    ok(&o);
    let o = cc_root(&["campaign", "exec", dir.to_str().unwrap(), "--retries", "1"]);
    ok(&o);
    let attempts: Vec<serde_json::Value> = std::fs::read_to_string(dir.join("attempts.jsonl"))
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let truth_attempts: Vec<&serde_json::Value> =
        attempts.iter().filter(|a| a["cell_id"].as_str().unwrap().ends_with("@truth")).collect();
    let failed: Vec<&&serde_json::Value> = truth_attempts.iter().filter(|a| a["status"] == "failed").collect();
    assert_eq!(failed.len(), 1, "exactly the first truth job missed its metric: {truth_attempts:#?}");
    let why = failed[0]["failure"].as_str().unwrap();
    assert!(why.contains("metric") && why.contains("matched nothing in stdout"), "{why}");
    // the failed attempt left its record, and the same cell succeeded on its retry
    let failed_cell = failed[0]["cell_id"].as_str().unwrap();
    let rec = json(&dir.join(failed[0]["run_dir"].as_str().unwrap()).join("truth.json"));
    assert!(rec["metric"].is_null() && rec["exit_code"] == 0, "{rec:#}");
    assert!(
        truth_attempts.iter().any(|a| a["cell_id"] == failed_cell && a["status"] == "succeeded"),
        "retried: {truth_attempts:#?}"
    );
    // 3 configurations x 2 rounds of truth cells, each with one success
    assert_eq!(truth_attempts.iter().filter(|a| a["status"] == "succeeded").count(), 6);
    let ok_rec = truth_attempts.iter().find(|a| a["status"] == "succeeded").unwrap();
    let rec = json(&dir.join(ok_rec["run_dir"].as_str().unwrap()).join("truth.json"));
    assert_eq!(rec["metric"]["value"], 1.25);
    assert_eq!(rec["metric"]["raw"], "cost 1.25 s");
    assert!(rec["config_env"]["TRUTH_SLEEP_S"].is_string(), "{rec:#}");
    assert_eq!(rec["stdout_sha256"], ok_rec["stdout_sha256"]);
    ok(&cc_root(&["campaign", "select", dir.to_str().unwrap()]));
    ok(&cc_root(&["campaign", "verify", dir.to_str().unwrap()]));
    // a record whose metric was edited after the job no longer verifies (read again from the kept stdout)
    let sel = json(&dir.join("selection.json"));
    let e =
        sel["entries"].as_array().unwrap().iter().find(|e| e["cell_id"].as_str().unwrap().ends_with("@truth")).unwrap();
    let stdout = dir.join("attempts").join(format!("{}.stdout", e["attempt_id"].as_str().unwrap()));
    std::fs::write(&stdout, b"cost 0.5 s\n").unwrap();
    let o = cc_root(&["campaign", "verify", dir.to_str().unwrap()]);
    let text = assert_refused(&o, "INCOMPLETE");
    assert!(text.contains("STALE") && text.contains(e["cell_id"].as_str().unwrap()), "{text}");
}

#[test]
fn the_job_ranks_the_configurations_judges_each_proxy_and_confirms_the_pick() {
    let _serial = one_at_a_time();
    let t = tempfile::tempdir().unwrap();
    let truth = r#"command = ["sh", "-c", "sleep ${TRUTH_SLEEP_S:-0.05}"]
metric = "wall"
timeout_s = 120"#;
    let s = spec(t.path(), "job", truth, 4);
    let dir = t.path().join("c");
    let o = cc_root(&["campaign", "run", s.to_str().unwrap(), "-o", dir.to_str().unwrap(), "--retries", "1", "-v"]);
    let text = ok(&o);
    // the whole text (-v): the truth's ranking, each proxy judged by regret, the controls on the truth
    assert!(text.contains("truth: the real job, metric wall time (s, lower is better), 4 rounds"), "{text}");
    for phase in ["isolated", "blocking"] {
        assert!(text.contains(&format!("truth judges phase {phase}")), "{text}");
    }
    assert!(text.contains("regret "), "{text}");
    let r = json(&dir.join("report/report.json"));
    let tr = &r["truth"];
    assert_eq!(tr["rows"].as_array().unwrap().len(), 3);
    assert_eq!(tr["rows"].as_array().unwrap().last().unwrap()["label"], "slow", "{tr:#}");
    // the known-bad control judged on the job: 1.5 s of sleep against 0.05 s is decided in 4 rounds
    let kb = tr["controls"].as_array().unwrap().iter().find(|c| c["kind"] == "known-bad").unwrap();
    assert_eq!(kb["outcome"], "behaved", "{kb:#}");
    assert!(!tr["best_set"].as_array().unwrap().iter().any(|l| l == "slow"), "{tr:#}");
    for p in tr["proxies"].as_array().unwrap() {
        let g = &p["regret"];
        let (lo, pt, hi) =
            (g["low_pct"].as_f64().unwrap(), g["regret_pct"].as_f64().unwrap(), g["high_pct"].as_f64().unwrap());
        assert!(0.0 <= lo && lo <= pt && pt <= hi, "{p:#}");
        assert_eq!(g["within_best_set"].as_bool().unwrap(), p["pick"] != "slow", "{p:#}");
        // the job decides the known-bad's pairs, so a decision cost is stated
        assert!(p["decision_cost"]["truth_decided_pairs"].as_u64().unwrap() >= 2, "{p:#}");
    }
    // the metric in each record equals the attempt's wall time within the launcher's bookkeeping
    let sel = json(&dir.join("selection.json"));
    let truth_entries: Vec<&serde_json::Value> = sel["entries"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e["cell_id"].as_str().unwrap().ends_with("@truth"))
        .collect();
    assert_eq!(truth_entries.len(), 12);
    for e in truth_entries {
        let rec = json(&dir.join(e["run_dir"].as_str().unwrap()).join("truth.json"));
        assert_eq!(rec["argv"][0], "mpirun", "launched under the campaign's launcher: {rec:#}");
        assert!(
            rec["argv"].as_array().unwrap().iter().any(|a| a == "TRUTH_SLEEP_S"),
            "the configuration's variable is forwarded: {rec:#}"
        );
        assert_eq!(rec["metric"]["value"], rec["wall_s"]);
    }
    // export the pick; it sources under set -u and sets the winner's variable
    let pick = t.path().join("pick.env");
    let o = cc_root(&["campaign", "export-pick", dir.to_str().unwrap(), "-o", pick.to_str().unwrap()]);
    ok(&o);
    let o = std::process::Command::new("bash")
        .args(["-c", &format!("set -eu; . {}; echo \"$TRUTH_SLEEP_S\"", pick.display())])
        .output()
        .unwrap();
    assert_eq!(ok(&o).trim(), "0.05", "the pick is a fast configuration");
    let o = cc_root(&["campaign", "export-pick", dir.to_str().unwrap(), "-o", pick.to_str().unwrap()]);
    assert_refused(&o, "ALREADY_EXISTS");
    // confirm: the pick against the default (no variable: the job sleeps 0 s) in new rounds
    let conf = t.path().join("confirm");
    let o = cc_root(&[
        "campaign",
        "confirm",
        dir.to_str().unwrap(),
        "--pick",
        pick.to_str().unwrap(),
        "--rounds",
        "3",
        "-o",
        conf.to_str().unwrap(),
    ]);
    let text = ok(&o);
    assert!(text.contains("confirm: the pick's gain over the default on the real job is"), "{text}");
    assert!(text.contains("recommended") || text.contains("NOT RECOMMENDED"), "{text}");
    let cr = json(&conf.join("campaign/report/report.json"));
    assert_eq!(cr["truth"]["rows"].as_array().unwrap().len(), 2);
    assert!(cr["phases"].as_array().unwrap().is_empty(), "a confirmation runs only the job");
}

#[test]
fn canary_verify_judges_the_source_and_the_canary_pick_on_the_job() {
    let _serial = one_at_a_time();
    let t = tempfile::tempdir().unwrap();
    let s = |p: &Path| p.to_str().unwrap().to_string();
    let (trace, art) = (t.path().join("synth.json"), t.path().join("synth.canary.json"));
    ok(&cc(&["synth", "--events", "60", "--seed", "7", "--ranks", "2", "-o", &s(&trace)]));
    ok(&cc(&["canary", "compile", &s(&trace), "--lossless", "-o", &s(&art)]));
    let spec = t.path().join("verify.toml");
    std::fs::write(
        &spec,
        r#"
name = "canary-truth"
backend = "cpu"
ranks = 2
repetitions = 3
seed = 11
[launcher]
kind = "mpirun"
args = ["--oversubscribe"]
[workload]
phases = "replay"
tokens = 3
layers = 1
iters = 1
[analysis]
tie_policy = "interval"
min_effect_pct = 2.0
[truth]
command = ["sh", "-c", "sleep ${TRUTH_SLEEP_S:-0.05}"]
metric = "wall"
timeout_s = 60
[controls]
known_bad = ["nbc-ring-delayed"]
[[configs]]
name = "nbc-ring"
env = { OMPI_MCA_coll_libnbc_iallreduce_algorithm = "1", TRUTH_SLEEP_S = "0.05" }
[[configs]]
name = "nbc-binomial"
env = { OMPI_MCA_coll_libnbc_iallreduce_algorithm = "2", TRUTH_SLEEP_S = "0.05" }
[[configs]]
name = "nbc-ring-delayed"
env = { OMPI_MCA_coll_libnbc_iallreduce_algorithm = "1", TRUTH_SLEEP_S = "1.5" }
args = ["--inject-repeat", "4", "--inject-delay", "rank=1,every=2,us=10000"]
"#,
    )
    .unwrap();
    let v = t.path().join("verify");
    let o = cc_root(&["canary", "verify", &s(&trace), &s(&art), "--configs", &s(&spec), "-o", &s(&v)]);
    let text = ok(&o);
    assert!(text.contains("the real job: wall time") && text.contains("truth.regret: pick"), "{text}");
    let r = json(&v.join("canary-verify.json"));
    let tr = &r["truth"];
    assert!(
        tr["source"]["regret"]["high_pct"].as_f64().unwrap() >= tr["source"]["regret"]["low_pct"].as_f64().unwrap(),
        "{tr:#}"
    );
    assert!(
        !tr["best_set"].as_array().unwrap().iter().any(|c| c == "nbc-ring-delayed"),
        "the job decides its known bad: {tr:#}"
    );
    let canary = r["candidates"].as_array().unwrap().iter().find(|c| c["variant"] == "canary").unwrap();
    let j = &canary["truth"];
    assert!(["nbc-ring", "nbc-binomial", "nbc-ring-delayed"].contains(&j["pick"].as_str().unwrap()), "{j:#}");
    assert_eq!(j["regret"]["pick"], j["pick"]);
    // the job ran once per configuration and round, under the source variant
    let m = json(&v.join("campaign/manifest.json"));
    let truth_cells: Vec<&str> = m["schedule"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|c| c["truth"] == true)
        .map(|c| c["label"].as_str().unwrap())
        .collect();
    assert_eq!(truth_cells.len(), 9, "{truth_cells:?}");
    assert!(truth_cells.iter().all(|l| l.starts_with("source.")), "{truth_cells:?}");
}
