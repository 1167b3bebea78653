//! Campaign chain end to end on the CPU backend under real mpirun (issue #5 acceptance 1-4).
mod common;
use commcanary::core::fsutil;
use commcanary::evidence::shard::Shard;
use common::*;
use std::path::{Path, PathBuf};

fn spec(dir: &Path, seed: u64, extra_config: &str) -> PathBuf {
    let p = dir.join(format!("spec-{seed}.toml"));
    std::fs::write(
        &p,
        format!(
            r#"
name = "t"
backend = "cpu"
ranks = 2
repetitions = 3
seed = {seed}
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
[[configs]]
name = "ring"
env = {{ OMPI_MCA_coll_libnbc_iallreduce_algorithm = "1" }}
[[configs]]
name = "binomial"
env = {{ OMPI_MCA_coll_libnbc_iallreduce_algorithm = "2" }}
[[configs]]
name = "recdbl"
env = {{ OMPI_MCA_coll_libnbc_iallreduce_algorithm = "4" }}
{extra_config}
"#
        ),
    )
    .unwrap();
    p
}

fn schedule_of(dir: &Path) -> Vec<String> {
    let m: serde_json::Value = serde_json::from_slice(&std::fs::read(dir.join("manifest.json")).unwrap()).unwrap();
    m["schedule"].as_array().unwrap().iter().map(|c| c["cell_id"].as_str().unwrap().to_string()).collect()
}

fn copy_dir(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for e in std::fs::read_dir(from).unwrap() {
        let e = e.unwrap();
        let t = to.join(e.file_name());
        if e.path().is_dir() {
            copy_dir(&e.path(), &t);
        } else {
            std::fs::copy(e.path(), t).unwrap();
        }
    }
}

#[test]
fn plan_exec_select_verify_analyze_archive_and_every_refusal() {
    let t = tempfile::tempdir().unwrap();
    let d = t.path().join("c");
    let sp = spec(t.path(), 7, "");
    ok(&cc(&["campaign", "plan", sp.to_str().unwrap(), "-o", d.to_str().unwrap()]));
    let sched = schedule_of(&d);
    assert_eq!(sched.len(), 9);
    // same seed, same schedule; another seed, another schedule
    let d2 = t.path().join("c2");
    ok(&cc(&["campaign", "plan", sp.to_str().unwrap(), "-o", d2.to_str().unwrap()]));
    assert_eq!(schedule_of(&d2), sched);
    let other = (8..20).any(|s| {
        let dd = t.path().join(format!("s{s}"));
        ok(&cc(&["campaign", "plan", spec(t.path(), s, "").to_str().unwrap(), "-o", dd.to_str().unwrap()]));
        schedule_of(&dd) != sched
    });
    assert!(other, "a different seed gives a different schedule");
    // a frozen manifest is never replaced
    assert_refused(&cc(&["campaign", "plan", sp.to_str().unwrap(), "-o", d.to_str().unwrap()]), "CAMPAIGN_STATE");

    let ds = d.to_str().unwrap();
    ok(&cc_root(&["campaign", "exec", ds]));
    // executed in schedule order, round-robin
    let attempts: Vec<serde_json::Value> = std::fs::read_to_string(d.join("attempts.jsonl"))
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let executed: Vec<String> = attempts.iter().map(|a| a["cell_id"].as_str().unwrap().to_string()).collect();
    assert_eq!(executed, sched);
    for r in 1..=3 {
        let mut labels: Vec<&str> =
            attempts.iter().filter(|a| a["round"] == r).map(|a| a["label"].as_str().unwrap()).collect();
        labels.sort();
        assert_eq!(labels, ["binomial", "recdbl", "ring"]);
    }
    ok(&cc(&["campaign", "select", ds]));
    ok(&cc(&["campaign", "verify", ds]));
    let report: serde_json::Value = serde_json::from_str(&ok(&cc(&["campaign", "analyze", ds, "--json"]))).unwrap();
    let blocking = report["phases"].as_array().unwrap().iter().find(|p| p["phase"] == "blocking").unwrap();
    assert_eq!(blocking["rows"].as_array().unwrap().len(), 3);
    assert!(blocking["rows"].as_array().unwrap().iter().all(|r| r["jobs"] == 3));

    // archive and check it; one changed byte fails the check
    let tar = t.path().join("c.tar");
    ok(&cc(&["campaign", "archive", ds, "-o", tar.to_str().unwrap()]));
    let desc = t.path().join("c.tar.descriptor.json");
    ok(&cc(&["campaign", "check-archive", tar.to_str().unwrap(), desc.to_str().unwrap()]));
    let dj: serde_json::Value = serde_json::from_slice(&std::fs::read(&desc).unwrap()).unwrap();
    assert_eq!(dj["verdict"]["complete"], true);
    assert_eq!(dj["run_ids"].as_array().unwrap().len(), 9);
    let mut b = std::fs::read(&tar).unwrap();
    b[1000] ^= 1;
    std::fs::write(&tar, &b).unwrap();
    let o = cc(&["campaign", "check-archive", tar.to_str().unwrap(), desc.to_str().unwrap()]);
    assert!(assert_refused(&o, "DIGEST_MISMATCH").contains("the archive changed"));

    // refusals on copies: each names the cell, and analyze withholds
    let sel: serde_json::Value = serde_json::from_slice(&std::fs::read(d.join("selection.json")).unwrap()).unwrap();
    let cell = sel["entries"][4]["cell_id"].as_str().unwrap().to_string();
    let run_dir = sel["entries"][4]["run_dir"].as_str().unwrap().to_string();
    let refused = |name: &str, damage: &dyn Fn(&Path), code: &str, needle: &str| {
        let c = t.path().join(name);
        copy_dir(&d, &c);
        damage(&c);
        let cs = c.to_str().unwrap();
        let o = cc(&["campaign", "verify", cs]);
        assert_refused(&o, "INCOMPLETE");
        let out = String::from_utf8_lossy(&o.stdout);
        assert!(out.contains(&format!("{cell}: refused[{code}]")) && out.contains(needle), "{name}: {out}");
        let o = cc(&["campaign", "analyze", cs]);
        assert_refused(&o, "INCOMPLETE");
        assert!(String::from_utf8_lossy(&o.stdout).starts_with("withheld-incomplete"), "{name}");
    };
    refused(
        "del-shard",
        &|c| std::fs::remove_file(c.join(&run_dir).join("rank-00001.shard")).unwrap(),
        "MISSING_RANK",
        "is missing",
    );
    refused(
        "flip-shard",
        &|c| {
            let p = c.join(&run_dir).join("rank-00000.shard");
            let mut b = std::fs::read(&p).unwrap();
            let n = b.len() / 2;
            b[n] ^= 0x10;
            std::fs::write(&p, b).unwrap();
        },
        "STALE",
        "stale",
    );
    refused(
        "del-selection",
        &|c| {
            let p = c.join("selection.json");
            let mut v: serde_json::Value = serde_json::from_slice(&std::fs::read(&p).unwrap()).unwrap();
            v["entries"].as_array_mut().unwrap().remove(4);
            std::fs::write(&p, serde_json::to_vec(&v).unwrap()).unwrap();
        },
        "MISSING_CELL",
        "missing",
    );
    // a changed manifest breaks the chain at its root
    let c = t.path().join("manifest-edit");
    copy_dir(&d, &c);
    let mp = c.join("manifest.json");
    let text = std::fs::read_to_string(&mp).unwrap().replacen("\"tokens\": 4", "\"tokens\": 5", 1);
    std::fs::write(&mp, text).unwrap();
    let o = cc(&["campaign", "verify", c.to_str().unwrap()]);
    assert!(assert_refused(&o, "DIGEST_MISMATCH").contains("the frozen manifest was changed"));
}

#[test]
fn a_failing_cell_is_recorded_and_retries_append() {
    let t = tempfile::tempdir().unwrap();
    let d = t.path().join("c");
    // arguments that parse (plan checks that) but fail when the job runs
    let sp = spec(t.path(), 3, "[[configs]]\nname = \"broken\"\nargs = [\"--trace\", \"/nonexistent/t.jsonl\"]\n");
    // keep it short: one round (never analyzed here, so declared a join part: plan refuses one round otherwise)
    let text = std::fs::read_to_string(&sp).unwrap().replace("repetitions = 3", "repetitions = 1\njoin_part = true");
    std::fs::write(&sp, text).unwrap();
    ok(&cc(&["campaign", "plan", sp.to_str().unwrap(), "-o", d.to_str().unwrap()]));
    let ds = d.to_str().unwrap();
    cc_root(&["campaign", "exec", ds]);
    cc_root(&["campaign", "exec", ds, "--resume", "--retries", "1"]);
    let attempts: Vec<serde_json::Value> = std::fs::read_to_string(d.join("attempts.jsonl"))
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let broken: Vec<&serde_json::Value> = attempts.iter().filter(|a| a["label"] == "broken").collect();
    assert_eq!(broken.len(), 3, "first exec: 1 attempt; resume with one retry: 2 more; all kept");
    assert!(broken.iter().all(|a| a["status"] == "failed" && a["exit_code"] != 0));
    assert!(broken[0]["failure"].as_str().unwrap().contains("reading trace /nonexistent/t.jsonl"), "{}", broken[0]);
    let ids: Vec<&str> = broken.iter().map(|a| a["attempt_id"].as_str().unwrap()).collect();
    assert_eq!(ids, ["r01-broken-a1", "r01-broken-a2", "r01-broken-a3"]);
    // the good cells ran once each and were not re-run by resume
    assert_eq!(attempts.iter().filter(|a| a["status"] == "succeeded").count(), 3);
    for id in ids {
        assert!(d.join("attempts").join(format!("{id}.stderr")).exists());
    }
    ok(&cc(&["campaign", "select", ds]));
    let o = cc(&["campaign", "verify", ds]);
    assert!(assert_refused(&o, "MISSING_CELL").contains("r01-broken: refused[MISSING_CELL]: missing"));
}

#[test]
fn malformed_specs_are_refused_naming_the_file_and_fault() {
    let t = tempfile::tempdir().unwrap();
    let good = std::fs::read_to_string(spec(t.path(), 1, "")).unwrap();
    for (name, text, needle) in [
        ("unknown-field", good.replace("seed = 1", "seed = 1\ncolour = \"red\""), "unknown field"),
        ("dup-config", good.replace("name = \"binomial\"", "name = \"ring\""), "used twice"),
        ("bad-phase", good.replace("isolated,blocking", "isolated,warp"), "unknown phase"),
        ("no-reps", good.replace("repetitions = 3", "repetitions = 0"), "at least 1"),
    ] {
        let p = t.path().join(format!("{name}.toml"));
        std::fs::write(&p, text).unwrap();
        let o = cc(&["campaign", "plan", p.to_str().unwrap(), "-o", t.path().join(name).to_str().unwrap()]);
        let err = assert_refused(&o, "BAD_SPEC");
        assert!(err.contains(&format!("{name}.toml")) && err.contains(needle), "{name}: {err}");
        assert!(!t.path().join(name).join("manifest.json").exists());
    }
}

#[test]
fn join_accepts_the_same_experiment_and_refuses_a_different_one() {
    let t = tempfile::tempdir().unwrap();
    let sp = spec(t.path(), 5, "");
    // one-round parts: each alone cannot be analyzed, so each declares itself a join part
    let text = std::fs::read_to_string(&sp).unwrap().replace("repetitions = 3", "repetitions = 1\njoin_part = true");
    std::fs::write(&sp, &text).unwrap();
    let (a, b, c) = (t.path().join("a"), t.path().join("b"), t.path().join("c"));
    for d in [&a, &b] {
        ok(&cc(&["campaign", "plan", sp.to_str().unwrap(), "-o", d.to_str().unwrap()]));
        ok(&cc_root(&["campaign", "exec", d.to_str().unwrap()]));
    }
    ok(&cc(&["campaign", "join", a.to_str().unwrap(), b.to_str().unwrap(), "-o", c.to_str().unwrap()]));
    ok(&cc(&["campaign", "select", c.to_str().unwrap()]));
    let out = ok(&cc(&["campaign", "verify", c.to_str().unwrap()]));
    assert!(out.contains("complete: 6/6"), "{out}");
    // the joined campaign has the two rounds that analyze needs
    let out = ok(&cc(&["campaign", "analyze", c.to_str().unwrap()]));
    assert!(out.contains("2 rounds"), "{out}");
    // the same campaign twice
    let o =
        cc(&["campaign", "join", a.to_str().unwrap(), a.to_str().unwrap(), "-o", t.path().join("x").to_str().unwrap()]);
    assert!(assert_refused(&o, "CAMPAIGN_MISMATCH").contains("same manifest"));
    // another analysis policy
    let sp2 = t.path().join("strict.toml");
    std::fs::write(&sp2, text.replace("tie_policy = \"interval\"", "tie_policy = \"interval\"\nmin_effect_pct = 7.5"))
        .unwrap();
    let s = t.path().join("s");
    ok(&cc(&["campaign", "plan", sp2.to_str().unwrap(), "-o", s.to_str().unwrap()]));
    let o =
        cc(&["campaign", "join", a.to_str().unwrap(), s.to_str().unwrap(), "-o", t.path().join("y").to_str().unwrap()]);
    assert!(assert_refused(&o, "CAMPAIGN_MISMATCH").contains("analysis policy differs"));
    // another repository state (a manifest frozen elsewhere, digest consistent)
    let r = t.path().join("r");
    copy_dir(&b, &r);
    let mp = r.join("manifest.json");
    let mut m: serde_json::Value = serde_json::from_slice(&std::fs::read(&mp).unwrap()).unwrap();
    m["repository"]["commit"] = "0000000000000000000000000000000000000000".into();
    let bytes = serde_json::to_vec_pretty(&m).unwrap();
    std::fs::write(&mp, &bytes).unwrap();
    std::fs::write(r.join("manifest.sha256"), fsutil::sha256_hex(&bytes) + "\n").unwrap();
    let o =
        cc(&["campaign", "join", a.to_str().unwrap(), r.to_str().unwrap(), "-o", t.path().join("z").to_str().unwrap()]);
    assert!(assert_refused(&o, "CAMPAIGN_MISMATCH").contains("repository identity"));
}

/// `campaign run`: the five steps in one command on a fresh directory; the
/// first refusal ends it with its reason; a directory of another spec, or
/// one already run past select, is refused.
#[test]
fn campaign_run_goes_from_spec_to_report_and_stops_at_the_first_refusal() {
    let t = tempfile::tempdir().unwrap();
    let short = |p: PathBuf| {
        let text = std::fs::read_to_string(&p).unwrap().replace("repetitions = 3", "repetitions = 2");
        std::fs::write(&p, text).unwrap();
        p
    };
    let sp = short(spec(t.path(), 11, ""));
    let d = t.path().join("c");
    let (sps, ds) = (sp.to_str().unwrap(), d.to_str().unwrap());
    let text = ok(&cc_root(&["campaign", "run", sps, "-o", ds]));
    for step in ["== plan", "== exec", "== select", "== verify", "== analyze"] {
        assert!(text.contains(step), "{step} missing:\n{text}");
    }
    assert!(text.contains("complete: 2/2") || text.contains("6/6 cells verified"), "{text}");
    assert!(d.join("report/report.json").exists());
    // again: refused, nothing replaced
    let again = cc_root(&["campaign", "run", sps, "-o", ds]);
    assert!(assert_refused(&again, "CAMPAIGN_STATE").contains("past select"));
    // a directory of another spec
    let other = short(spec(t.path(), 12, ""));
    let o = cc_root(&["campaign", "run", other.to_str().unwrap(), "-o", ds]);
    assert!(assert_refused(&o, "BAD_SPEC").contains("another spec"));
    // a cell that cannot run: the run stops at verify, with no report
    let broken =
        short(spec(t.path(), 13, "[[configs]]\nname = \"broken\"\nargs = [\"--trace\", \"/nonexistent/t.jsonl\"]\n"));
    let d2 = t.path().join("c2");
    let o = cc_root(&["campaign", "run", broken.to_str().unwrap(), "-o", d2.to_str().unwrap()]);
    assert_refused(&o, "INCOMPLETE");
    let stdout = String::from_utf8_lossy(&o.stdout);
    assert!(stdout.contains("== verify") && !stdout.contains("== analyze"), "{stdout}");
    assert!(!d2.join("report").exists());
}

/// A campaign over a workload's own trace: `plan` freezes a copy and its
/// digest, every job walks that copy, `verify` checks each shard names it,
/// and a changed copy stops the next job.
#[test]
fn campaign_run_over_an_imported_trace() {
    let t = tempfile::tempdir().unwrap();
    let (k, sp) = tp2_trace_campaign(t.path(), "replay,fill");
    let d = t.path().join("c");
    let text = ok(&cc_root(&["campaign", "run", sp.to_str().unwrap(), "-o", d.to_str().unwrap()]));
    assert!(text.contains("== analyze") && d.join("report/report.json").exists(), "{text}");
    let m: serde_json::Value = serde_json::from_slice(&std::fs::read(d.join("manifest.json")).unwrap()).unwrap();
    let frozen = fsutil::sha256_file(&d.join("trace.json")).unwrap();
    assert_eq!(m["trace_sha256"].as_str(), Some(frozen.as_str()));
    assert_eq!(frozen, fsutil::sha256_file(&k).unwrap(), "the copy is the file named");
    let mut shards = 0;
    for run in std::fs::read_dir(d.join("runs")).unwrap().map(|e| e.unwrap().path()) {
        for r in 0..2 {
            let s: serde_json::Value =
                serde_json::from_str(&ok(&cc(&["inspect", run.join(format!("rank-0000{r}.shard")).to_str().unwrap()])))
                    .unwrap();
            for p in s["header"]["phases"].as_array().unwrap() {
                assert_eq!(p["trace"]["Imported"]["sha256"].as_str(), Some(frozen.as_str()), "{p}");
            }
            shards += 1;
        }
    }
    assert_eq!(shards, 2 * 2 * 2, "2 configurations x 2 rounds x 2 ranks");
    // the report says what ran: the trace, its digest, the all-reduces run and the kinds left out, not the synthetic
    // sizes
    let r: serde_json::Value = serde_json::from_slice(&std::fs::read(d.join("report/report.json")).unwrap()).unwrap();
    let c = &r["context"];
    assert_eq!(
        (c["trace"]["file"].as_str(), c["trace"]["sha256"].as_str()),
        (Some("tp2.comm.json"), Some(frozen.as_str())),
        "{c}"
    );
    let kinds = c["trace"]["kinds"].as_array().unwrap();
    let kind = |k: &str| kinds.iter().find(|x| x["kind"] == k).unwrap_or_else(|| panic!("{k} missing from {kinds:?}"));
    assert_eq!(
        (&kind("all_reduce")["run_per_pass_by_rank"], &kind("all_reduce")["dtypes"]),
        (&serde_json::json!([32, 32]), &serde_json::json!(["bf16"]))
    );
    assert_eq!(kind("all_reduce")["sizes_bytes"], serde_json::json!([65536]));
    // 2 configurations x 2 rounds x 2 phases x 2 timed passes x 32
    assert_eq!(kind("all_reduce")["joined_operations"], 512);
    for k in ["all_gather", "reduce_scatter", "broadcast", "all_to_all"] {
        assert_eq!(
            (&kind(k)["run_per_pass_by_rank"], &kind(k)["left_out_per_pass_by_rank"]),
            (&serde_json::json!([0, 0]), &serde_json::json!([1, 1])),
            "{k}"
        );
    }
    assert_eq!(kind("send")["left_out_per_pass_by_rank"], serde_json::json!([1, 0]));
    let workload = c["workload"].as_str().unwrap();
    assert!(
        workload.contains("tp2.comm.json")
            && workload.contains(frozen.as_str())
            && !workload.contains("all-reduce sizes"),
        "{workload}"
    );
    let not_represented: Vec<&str> =
        c["not_represented"].as_array().unwrap().iter().map(|x| x.as_str().unwrap()).collect();
    assert!(
        not_represented.iter().any(|x| x.contains("left out") && x.contains("all_gather 1")),
        "{not_represented:?}"
    );
    assert!(
        !not_represented.iter().any(|x| x.contains("float32") || x.contains("message sizes outside")),
        "{not_represented:?}"
    );
    // a missing trace is refused at plan, naming the file
    let bad = t.path().join("bad.toml");
    std::fs::write(&bad, std::fs::read_to_string(&sp).unwrap().replace("tp2.comm.json", "missing.json")).unwrap();
    let o = cc(&["campaign", "plan", bad.to_str().unwrap(), "-o", t.path().join("b").to_str().unwrap()]);
    assert!(assert_refused(&o, "BAD_SPEC").contains("missing.json"));
    // a trace no phase walks, or named twice
    let text = std::fs::read_to_string(&sp).unwrap();
    for (i, (from, to, needle)) in [
        ("phases = \"replay,fill\"", "phases = \"isolated\"", "has none of them"),
        ("extra_args = [", "extra_args = [\"--trace\", \"x.jsonl\", ", "name the trace once"),
    ]
    .into_iter()
    .enumerate()
    {
        let p = t.path().join(format!("bad{i}.toml"));
        std::fs::write(&p, text.replace(from, to)).unwrap();
        let o =
            cc(&["campaign", "plan", p.to_str().unwrap(), "-o", t.path().join(format!("bad{i}")).to_str().unwrap()]);
        assert!(assert_refused(&o, "BAD_SPEC").contains(needle));
    }
    // a changed copy stops the next job
    let d2 = t.path().join("c2");
    ok(&cc(&["campaign", "plan", sp.to_str().unwrap(), "-o", d2.to_str().unwrap()]));
    let mut bytes = std::fs::read(d2.join("trace.json")).unwrap();
    bytes.push(b'\n');
    std::fs::write(d2.join("trace.json"), bytes).unwrap();
    let o = cc_root(&["campaign", "exec", d2.to_str().unwrap()]);
    assert!(assert_refused(&o, "STALE").contains("the manifest froze"));
}

/// Configurations that name their own joined trace (`--trace` in their
/// arguments, which the manifest does not freeze) must still walk one trace:
/// `verify` refuses the cells outside the largest group of cells that walked
/// the same file (or none).
#[test]
fn cells_that_walked_different_trace_files_are_refused() {
    let t = tempfile::tempdir().unwrap();
    let mut traces = Vec::new();
    for name in ["a", "b"] {
        let run = run_rank(
            2,
            &t.path().join(format!("src-{name}")),
            &["--phases", "blocking", "--tokens", "2", "--model", "synthetic", "--layers", "2"],
        );
        let f = t.path().join(format!("{name}.jsonl"));
        ok(&cc(&["join", run.to_str().unwrap(), "--events-out", f.to_str().unwrap()]));
        traces.push(f);
    }
    let config = |name: &str, env: u32, trace: &Path| {
        format!(
            "[[configs]]\nname = \"{name}\"\nenv = {{ OMPI_MCA_coll_libnbc_iallreduce_algorithm = \"{env}\" }}\nargs = \
                [\"--trace\", \"{}\"]\n",
            trace.display()
        )
    };
    let write = |file: &str, second: &Path| {
        let p = t.path().join(file);
        let text = format!(
            "name = \"files\"\nbackend = \"cpu\"\nranks = 2\nrepetitions = 2\nseed = 3\n[launcher]\nkind = \
                \"mpirun\"\nargs = [\"--oversubscribe\"]\n\
             [workload]\nphases = \"replay\"\ntokens = 2\nlayers = 2\nmodel = \"synthetic\"\n[analysis]\ntie_policy = \
                 \"interval\"\n{}{}",
            config("ring", 1, &traces[0]),
            config("binomial", 2, second)
        );
        std::fs::write(&p, text).unwrap();
        p
    };
    // the same file for both: verified and analysed
    let same = write("same.toml", &traces[0]);
    let text =
        ok(&cc_root(&["campaign", "run", same.to_str().unwrap(), "-o", t.path().join("c-same").to_str().unwrap()]));
    assert!(text.contains("== analyze"), "{text}");
    // another file for the second configuration: verify stops the run, refusing the
    // cells of one configuration (a tie: the one scheduled later)
    let differ = write("differ.toml", &traces[1]);
    let o = cc_root(&["campaign", "run", differ.to_str().unwrap(), "-o", t.path().join("c-differ").to_str().unwrap()]);
    assert_refused(&o, "INCOMPLETE");
    let all = format!("{}{}", String::from_utf8_lossy(&o.stdout), String::from_utf8_lossy(&o.stderr));
    // refused cells are grouped by cause: one line, naming both cells of one configuration
    let lines: Vec<&str> = all.lines().filter(|l| l.contains("compared on different workloads")).collect();
    assert_eq!(lines.len(), 1, "{all}");
    assert!(lines[0].trim_start().starts_with("2 cells: "), "{lines:?}");
    let (_, cells) = lines[0].rsplit_once("(first ").expect("the cells named");
    let one_config = ["ring", "binomial"]
        .iter()
        .any(|c| cells.split(", ").all(|cell| cell.trim_end_matches(')').ends_with(&format!("-{c}"))));
    assert!(one_config, "{lines:?}");
    // a configuration without --trace replays its own blocking phase: not the same workload either
    let none = t.path().join("none.toml");
    let text = std::fs::read_to_string(&same).unwrap();
    let cut = text.rfind("args = [").unwrap();
    std::fs::write(&none, format!("{}\n", &text[..cut])).unwrap();
    let text = std::fs::read_to_string(&none).unwrap().replace("phases = \"replay\"", "phases = \"blocking,replay\"");
    std::fs::write(&none, text).unwrap();
    let o = cc_root(&["campaign", "run", none.to_str().unwrap(), "-o", t.path().join("c-none").to_str().unwrap()]);
    assert_refused(&o, "INCOMPLETE");
    let all = format!("{}{}", String::from_utf8_lossy(&o.stdout), String::from_utf8_lossy(&o.stderr));
    assert!(all.contains("no trace file") && all.contains("compared on different workloads"), "{all}");
}

/// `examples/cpu-trace-tp2.toml`, shortened: a CPU campaign over the
/// imported PyTorch fixture under `mpirun -n 2` ranks its configurations on
/// every collective kind of the trace, and its report names the trace, its
/// SHA-256 and every kind run.
#[test]
fn example_cpu_trace_campaign_ranks_every_kind() {
    let t = tempfile::tempdir().unwrap();
    let root = env!("CARGO_MANIFEST_DIR");
    let fixture = |r: u32| format!("{root}/tests/data/pytorch-2.11-tp2-h200/kineto.rank-{r}.json.gz");
    let k = t.path().join("tp2.comm.json");
    ok(&cc(&["import", "kineto", &fixture(0), &fixture(1), "-o", k.to_str().unwrap()]));
    let example = std::fs::read_to_string(format!("{root}/examples/cpu-trace-tp2.toml")).unwrap();
    let short = example
        .replace("trace = \"../out/tp2.comm.json\"", "trace = \"tp2.comm.json\"")
        .replace("repetitions = 3", "repetitions = 2")
        .replace("tokens = 4", "tokens = 2");
    assert_ne!(short, example);
    assert!(
        short.contains("trace = \"tp2.comm.json\"")
            && short.contains("repetitions = 2")
            && short.contains("tokens = 2")
    );
    let sp = t.path().join("cpu-trace-tp2.toml");
    std::fs::write(&sp, short).unwrap();
    let d = t.path().join("c");
    let text = ok(&cc_root(&["campaign", "run", sp.to_str().unwrap(), "-o", d.to_str().unwrap()]));
    assert!(text.contains("== analyze"), "{text}");
    let r: serde_json::Value = serde_json::from_slice(&std::fs::read(d.join("report/report.json")).unwrap()).unwrap();
    // every configuration ranked in every trace phase
    for phase in ["replay", "fill", "overlap"] {
        let p = r["phases"]
            .as_array()
            .unwrap()
            .iter()
            .find(|p| p["phase"] == phase)
            .unwrap_or_else(|| panic!("no {phase}"));
        let mut ranks: Vec<u64> = p["rows"].as_array().unwrap().iter().map(|x| x["rank"].as_u64().unwrap()).collect();
        ranks.sort_unstable();
        assert_eq!(ranks, vec![1, 2, 3], "{phase}");
    }
    let sha = fsutil::sha256_file(&k).unwrap();
    let c = &r["context"]["trace"];
    assert_eq!(
        (c["file"].as_str(), c["sha256"].as_str(), c["passes"].as_u64()),
        (Some("tp2.comm.json"), Some(sha.as_str()), Some(2)),
        "{c}"
    );
    let kinds = c["kinds"].as_array().unwrap();
    let expect = [
        ("all_reduce", [32, 32]),
        ("all_gather", [1, 1]),
        ("reduce_scatter", [1, 1]),
        ("broadcast", [1, 1]),
        ("all_to_all", [1, 1]),
        ("send", [1, 0]),
        ("recv", [0, 1]),
    ];
    assert_eq!(kinds.len(), expect.len(), "{kinds:?}");
    for (kind, per_rank) in expect {
        let x = kinds.iter().find(|x| x["kind"] == kind).unwrap_or_else(|| panic!("{kind} missing from {kinds:?}"));
        assert_eq!(
            (&x["run_per_pass_by_rank"], &x["left_out_per_pass_by_rank"]),
            (&serde_json::json!(per_rank), &serde_json::json!([0, 0])),
            "{kind}"
        );
        // 3 configurations x 2 rounds x 3 phases x 2 timed passes, each operation once (a receive joined with its send)
        let joined = if kind == "recv" { 0 } else { per_rank.iter().max().unwrap() * 3 * 2 * 3 * 2 };
        assert_eq!(x["joined_operations"], joined, "{kind}");
    }
    assert_eq!(kinds.iter().find(|x| x["kind"] == "reduce_scatter").unwrap()["dtypes"], serde_json::json!(["f32"]));
    let workload = r["context"]["workload"].as_str().unwrap();
    assert!(workload.contains(&sha) && workload.contains("left out per pass: none"), "{workload}");
    for kind in ["all_reduce", "all_gather", "reduce_scatter", "broadcast", "all_to_all", "send"] {
        assert!(workload.contains(kind), "{kind}: {workload}");
    }
    // and every shard holds events of every kind of its rank
    for run in std::fs::read_dir(d.join("runs")).unwrap().map(|e| e.unwrap().path()) {
        for rank in 0..2u32 {
            let s = Shard::read(&run.join(format!("rank-0000{rank}.shard"))).unwrap();
            let got: std::collections::BTreeSet<&str> = s.body.collectives.iter().map(|e| e.kind.name()).collect();
            let want: std::collections::BTreeSet<&str> =
                expect.iter().filter(|(_, n)| n[rank as usize] > 0).map(|(k, _)| *k).collect();
            assert_eq!(got, want, "{}", run.display());
        }
    }
}
