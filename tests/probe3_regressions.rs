//! What the third adversarial probe left open, fixed by class: `campaign
//! plan` runs each configuration's rank arguments through `rank`'s own
//! checks before anything runs; a launcher that refuses to start is named by
//! its first explanatory line and stops the campaign once every configuration
//! of a round failed the same way; two `campaign analyze` into one report
//! folder never interleave; every artifact error carries a refusal code and
//! advice about artifacts; `canary redact --configs` leaves no unredacted copy
//! and a refused export leaves nothing.
mod common;
use common::*;
use std::path::{Path, PathBuf};

fn s(p: &Path) -> &str {
    p.to_str().unwrap()
}

/// A small cpu campaign spec: `phases`, then one `[[configs]]` per (name, extra TOML lines).
fn spec_with(dir: &Path, file: &str, ranks: u32, phases: &str, launcher: &str, configs: &[(&str, &str)]) -> PathBuf {
    let mut text = format!(
        "name = \"p3\"\nbackend = \"cpu\"\nranks = {ranks}\nrepetitions = 2\nseed = 7\nblind = false\n\n[launcher]\n{launcher}\n\n[workload]\nphases = \"{phases}\"\ntokens = 1\nlayers = 1\niters = 1\n\n[analysis]\ntie_policy = \"interval\"\nmin_effect_pct = 2.0\ndelta_pct = 5.0\nbootstrap_resamples = 200\nbootstrap_seed = 1\n"
    );
    for (name, extra) in configs {
        text.push_str(&format!("\n[[configs]]\nname = \"{name}\"\n{extra}\n"));
    }
    let p = dir.join(file);
    std::fs::write(&p, text).unwrap();
    p
}

/// A spec file, its ranks, phases and configurations; the configuration named and the reason.
type Case<'a> = (&'a str, u32, &'a str, &'a [(&'a str, &'a str)], &'a str, &'a str);

const MPIRUN: &str = "kind = \"mpirun\"\nargs = [\"--oversubscribe\"]";

/// Specs whose every cell of one configuration `rank` would refuse before MPI
/// starts (phases needing a trace none is given, a cuda-only option on cpu,
/// model-only options on a synthetic workload, an isolated sweep's table
/// without the isolated phase): `campaign plan` refuses them naming the configuration and
/// rank's reason, and writes nothing. The example canary spec planned as a
/// campaign is one of them; the same phases after a blocking phase plan.
#[test]
fn plan_refuses_what_rank_would_refuse_in_every_cell() {
    let t = tempfile::tempdir().unwrap();
    let d = t.path();
    let example = Path::new(env!("CARGO_MANIFEST_DIR")).join("examples/canary-cpu-long.toml");
    let out = d.join("example");
    let text = assert_refused(&cc(&["campaign", "plan", "--out", s(&out), s(&example)]), "BAD_SPEC");
    assert!(text.contains("configs.nbc-ring") && text.contains("needs a source trace"), "{text}");
    assert!(!out.exists(), "nothing written");
    let cases: &[Case] = &[
        ("fill.toml", 2, "fill", &[("a", ""), ("b", "")], "configs.a", "needs a source trace"),
        ("overlap.toml", 2, "isolated,overlap", &[("a", ""), ("b", "")], "configs.a", "needs a source trace"),
        ("graph.toml", 2, "blocking", &[("a", ""), ("g", "args = [\"--graph\"]")], "configs.g", "--graph needs the cuda backend"),
        ("batch.toml", 2, "blocking", &[("a", ""), ("bat", "args = [\"--batch\", \"4\"]")], "configs.bat", "--batch and --prefill-tokens"),
        ("json.toml", 3, "blocking", &[("j", "args = [\"-J\", \"sweep.json\"]"), ("b", "")], "configs.j", "add isolated to --phases"),
    ];
    for (file, ranks, phases, configs, who, why) in cases {
        let sp = spec_with(d, file, *ranks, phases, MPIRUN, configs);
        let out = d.join(format!("out-{file}"));
        let text = assert_refused(&cc(&["campaign", "plan", "--out", s(&out), s(&sp)]), "BAD_SPEC");
        assert!(text.contains(who) && text.contains(why) && text.contains("rank would refuse"), "{file}: {text}");
        assert!(!out.exists(), "{file}: nothing written");
    }
    // the same phases after a blocking phase: the source trace is the run's own
    let sp = spec_with(d, "good.toml", 2, "blocking,replay,fill", MPIRUN, &[("a", ""), ("b", "")]);
    ok(&cc(&["campaign", "plan", "--out", s(&d.join("good")), s(&sp)]));
}

/// `canary verify` plans its campaign through the same check: a configuration
/// whose rank arguments rank refuses (a cuda-only option, model-only options
/// on the synthetic replay) is refused before anything is written or run.
#[test]
fn canary_verify_refuses_what_rank_would_refuse_before_writing() {
    let t = tempfile::tempdir().unwrap();
    let d = t.path();
    let trace = d.join("syn.json");
    let art = d.join("syn.canary.json");
    ok(&cc(&["synth", "--events", "60", "--seed", "1", "--ranks", "2", "-o", s(&trace)]));
    ok(&cc(&["canary", "compile", s(&trace), "-o", s(&art)]));
    for (i, bad) in ["args = [\"--graph\"]", "args = [\"--prefill-tokens\", \"8\"]"].iter().enumerate() {
        let sp = spec_with(d, &format!("v{i}.toml"), 2, "replay", MPIRUN, &[("good", ""), ("bad", bad)]);
        let out = d.join(format!("verify{i}"));
        let o = cc_root(&["canary", "verify", s(&trace), s(&art), "--configs", s(&sp), "--passes", "1", "--phases", "replay", "-o", s(&out)]);
        let text = assert_refused(&o, "BAD_SPEC");
        assert!(text.contains(".bad") && text.contains("rank would refuse"), "{bad}: {text}");
        assert!(!out.exists(), "{bad}: nothing written");
    }
}

/// A fake `mpirun` first on PATH: prints an Open MPI-like banner (its first
/// explanatory line from `first_line`, a shell expression over the job's
/// `-x` variable values) and exits 1 without starting a rank.
fn fake_launcher(dir: &Path, first_line: &str) -> PathBuf {
    let bin = dir.join("fakebin");
    std::fs::create_dir_all(&bin).unwrap();
    let script = format!(
        "#!/bin/sh\nvals=\nwhile [ $# -gt 0 ]; do if [ \"$1\" = -x ]; then eval \"vals=\\\"$vals \\${{$2}}\\\"\"; shift; fi; shift; done\n\
         {{ echo '--------------------------------------------------------------------------'\n\
           echo \"{first_line}\"\n echo\n echo 'Some advice on what to change, over several lines.'\n\
           echo 'We reiterate our advice against doing so - please proceed at your own risk.'\n\
           echo '--------------------------------------------------------------------------'; }} >&2\nexit 1\n"
    );
    let p = bin.join("mpirun");
    std::fs::write(&p, script).unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o755)).unwrap();
    bin
}

fn exec_with_path(fakebin: &Path, dir: &Path) -> std::process::Output {
    let path = format!("{}:{}", fakebin.display(), std::env::var("PATH").unwrap_or_default());
    std::process::Command::new(bin()).args(["campaign", "exec", s(dir), "--retries", "1"]).env("PATH", path).output().unwrap()
}

fn attempts(dir: &Path) -> Vec<serde_json::Value> {
    std::fs::read_to_string(dir.join("attempts.jsonl")).unwrap().lines().map(|l| serde_json::from_str(l).unwrap()).collect()
}

/// A launcher that refuses to start (as mpirun does as root without the two
/// variables, or without enough slots) is named by its banner's first
/// explanatory line, never its closing advice; once it failed the same way
/// for every configuration of a round, exec stops with LAUNCHER_FAILED and
/// runs none of the cells left, keeping every attempt. A launcher failing
/// differently per configuration is no such stop: every cell is tried.
#[test]
fn a_launcher_that_fails_every_configuration_stops_the_campaign() {
    let t = tempfile::tempdir().unwrap();
    let d = t.path();
    let configs: &[(&str, &str)] = &[("a", "env = { ALG = \"1\" }"), ("b", "env = { ALG = \"2\" }"), ("c", "env = { ALG = \"3\" }")];
    for (i, first) in
        ["mpirun has detected an attempt to run as root.", "There are not enough slots available in the system to satisfy the 2"].iter().enumerate()
    {
        let sp = spec_with(d, &format!("l{i}.toml"), 2, "blocking", MPIRUN, configs);
        let dir = d.join(format!("c{i}"));
        ok(&cc(&["campaign", "plan", "--out", s(&dir), s(&sp)]));
        let fake = fake_launcher(&d.join(format!("f{i}")), first);
        let o = exec_with_path(&fake, &dir);
        let text = assert_refused(&o, "LAUNCHER_FAILED");
        assert!(text.contains(first) && !text.contains("reiterate"), "{text}");
        assert!(text.contains("the 3 cell(s) left"), "{text}");
        // two configurations tried twice (--retries 1), the third once: then every
        // configuration had failed the same way; nothing of round 2 ran
        let recs = attempts(&dir);
        assert_eq!(recs.len(), 5, "{recs:?}");
        for r in &recs {
            assert_eq!(r["round"], 1);
            let f = r["failure"].as_str().unwrap();
            assert!(f.contains(first) && !f.contains("reiterate"), "{f}");
        }
        // a retry adds to the log, never replaces it
        let _ = exec_with_path(&fake, &dir);
        assert_eq!(attempts(&dir).len(), 10);
    }
    // a failure that names each configuration's own setting is no launcher-wide failure
    let sp = spec_with(d, "differ.toml", 2, "blocking", MPIRUN, configs);
    let dir = d.join("differ");
    ok(&cc(&["campaign", "plan", "--out", s(&dir), s(&sp)]));
    let fake = fake_launcher(&d.join("fdiffer"), "cannot use the setting$vals");
    let o = exec_with_path(&fake, &dir);
    let text = format!("{}{}", String::from_utf8_lossy(&o.stderr), String::from_utf8_lossy(&o.stdout));
    assert!(!text.contains("LAUNCHER_FAILED"), "{text}");
    assert_eq!(attempts(&dir).len(), 12, "every cell of both rounds tried twice");
    assert!(attempts(&dir).iter().any(|r| r["failure"].as_str().unwrap().contains("cannot use the setting 2")));
}
