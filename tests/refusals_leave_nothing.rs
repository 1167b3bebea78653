//! Refusals that leave nothing half-done (first found by the third
//! adversarial probe, fixed by class): `campaign plan` runs each
//! configuration's rank arguments through `rank`'s own checks before anything
//! runs; a launcher that refuses to start is named by its first explanatory
//! line and stops the campaign once every configuration of a round failed
//! the same way; two `campaign analyze` into one report folder never
//! interleave; every artifact error carries a refusal code and advice about
//! artifacts; `canary redact --configs` leaves no unredacted copy and a
//! refused export leaves nothing.
mod common;
use common::*;
use std::path::{Path, PathBuf};

fn s(p: &Path) -> &str {
    p.to_str().unwrap()
}

/// A small cpu campaign spec: `phases`, then one `[[configs]]` per (name, extra TOML lines).
fn spec_with(dir: &Path, file: &str, ranks: u32, phases: &str, launcher: &str, configs: &[(&str, &str)]) -> PathBuf {
    let mut text = format!(
        "name = \"p3\"\nbackend = \"cpu\"\nranks = {ranks}\nrepetitions = 2\nseed = 7\nblind = \
            false\n\n[launcher]\n{launcher}\n\n[workload]\nphases = \"{phases}\"\ntokens = 1\nlayers = 1\niters = \
                1\n\n[analysis]\ntie_policy = \"interval\"\nmin_effect_pct = 2.0\ndelta_pct = 5.0\nbootstrap_resamples \
                    = 200\nbootstrap_seed = 1\n"
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
        (
            "graph.toml",
            2,
            "blocking",
            &[("a", ""), ("g", "args = [\"--graph\"]")],
            "configs.g",
            "--graph needs the cuda backend",
        ),
        (
            "batch.toml",
            2,
            "blocking",
            &[("a", ""), ("bat", "args = [\"--batch\", \"4\"]")],
            "configs.bat",
            "--batch and --prefill-tokens",
        ),
        (
            "json.toml",
            3,
            "blocking",
            &[("j", "args = [\"-J\", \"sweep.json\"]"), ("b", "")],
            "configs.j",
            "add isolated to --phases",
        ),
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
        let o = cc_root(&[
            "canary",
            "verify",
            s(&trace),
            s(&art),
            "--configs",
            s(&sp),
            "--passes",
            "1",
            "--phases",
            "replay",
            "-o",
            s(&out),
        ]);
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
        "#!/bin/sh\nvals=\nwhile [ $# -gt 0 ]; do if [ \"$1\" = -x ]; then eval \"vals=\\\"$vals \\${{$2}}\\\"\"; \
            shift; fi; shift; done\n\
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
    std::process::Command::new(bin())
        .args(["campaign", "exec", s(dir), "--retries", "1"])
        .env("PATH", path)
        .output()
        .unwrap()
}

fn attempts(dir: &Path) -> Vec<serde_json::Value> {
    std::fs::read_to_string(dir.join("attempts.jsonl"))
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
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
    let configs: &[(&str, &str)] =
        &[("a", "env = { ALG = \"1\" }"), ("b", "env = { ALG = \"2\" }"), ("c", "env = { ALG = \"3\" }")];
    for (i, first) in [
        "mpirun has detected an attempt to run as root.",
        "There are not enough slots available in the system to satisfy the 2",
    ]
    .iter()
    .enumerate()
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

/// A verified two-configuration campaign (blocking, isolated and async
/// phases, so the report has several plots) of seed `seed` in `dir`.
fn small_campaign(d: &Path, name: &str, seed: u32) -> PathBuf {
    let configs: &[(&str, &str)] = &[
        ("ring", "env = { OMPI_MCA_coll_libnbc_iallreduce_algorithm = \"1\" }"),
        ("binomial", "env = { OMPI_MCA_coll_libnbc_iallreduce_algorithm = \"2\" }"),
    ];
    let sp = spec_with(d, &format!("{name}.toml"), 2, "isolated,blocking,async", MPIRUN, configs);
    let text = std::fs::read_to_string(&sp).unwrap().replace("seed = 7", &format!("seed = {seed}"));
    std::fs::write(&sp, text).unwrap();
    let dir = d.join(name);
    ok(&cc_root(&["campaign", "run", s(&sp), "-o", s(&dir)]));
    dir
}

fn folder(dir: &Path) -> Vec<(String, Vec<u8>)> {
    let mut v: Vec<(String, Vec<u8>)> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.file_name().unwrap() != "report.lock")
        .map(|p| (p.file_name().unwrap().to_string_lossy().into_owned(), std::fs::read(&p).unwrap()))
        .collect();
    v.sort();
    v
}

/// Two `campaign analyze` of different campaigns into one report folder:
/// while one writes, the other is refused with LOCKED and writes nothing;
/// started together, the folder ends as exactly one of them wrote it alone
/// (never plots of one and the report of the other), and the other is
/// refused (LOCKED, or ALREADY_EXISTS once the first has finished).
#[test]
fn two_analyses_into_one_report_folder_never_interleave() {
    let t = tempfile::tempdir().unwrap();
    let d = t.path();
    let (a, b) = (small_campaign(d, "ca", 11), small_campaign(d, "cb", 12));
    let alone: Vec<Vec<(String, Vec<u8>)>> = [&a, &b].iter().map(|c| folder(&c.join("report"))).collect();
    assert_ne!(alone[0], alone[1], "the two campaigns' reports differ");
    // a writer holding the folder's lock: refused, nothing written
    let held = d.join("held");
    std::fs::create_dir_all(&held).unwrap();
    let lock =
        std::fs::OpenOptions::new().create(true).truncate(false).write(true).open(held.join("report.lock")).unwrap();
    use std::os::fd::AsRawFd;
    // SAFETY: flock on a file descriptor this test owns; no memory is passed.
    assert_eq!(unsafe { libc::flock(lock.as_raw_fd(), libc::LOCK_EX) }, 0);
    let text = assert_refused(&cc(&["campaign", "analyze", s(&a), "--report-dir", s(&held)]), "LOCKED");
    assert!(text.contains("another analyze"), "{text}");
    assert!(folder(&held).is_empty(), "nothing written while locked");
    drop(lock);
    ok(&cc(&["campaign", "analyze", s(&a), "--report-dir", s(&held)]));
    assert_eq!(folder(&held), alone[0]);
    // started together, several times
    for i in 0..6 {
        let rep = d.join(format!("shared{i}"));
        let spawn = |c: &Path| {
            std::process::Command::new(bin())
                .args(["campaign", "analyze", s(c), "--report-dir", s(&rep)])
                .stdout(std::process::Stdio::piped())
                .stderr(std::process::Stdio::piped())
                .spawn()
                .unwrap()
        };
        let (pa, pb) = (spawn(&a), spawn(&b));
        let (oa, ob) = (pa.wait_with_output().unwrap(), pb.wait_with_output().unwrap());
        let won: Vec<usize> =
            [&oa, &ob].iter().enumerate().filter(|(_, o)| o.status.success()).map(|(k, _)| k).collect();
        assert_eq!(won.len(), 1, "exactly one writes the folder (round {i})");
        let lost = if won[0] == 0 { &ob } else { &oa };
        let text = String::from_utf8_lossy(&lost.stderr);
        assert!(text.contains("refused[LOCKED]") || text.contains("refused[ALREADY_EXISTS]"), "{text}");
        assert_eq!(folder(&rep), alone[won[0]], "round {i}: the folder is the winner's alone");
    }
}

/// Every way an artifact argument can be wrong (no such file, a directory,
/// empty, cut short, not JSON, another version, a trace where an artifact
/// belongs, past the size limit) is a refusal with a code that names the
/// file and gives advice about artifacts, never about traces; an artifact
/// where a trace belongs says so.
#[test]
fn every_artifact_error_has_a_code_and_artifact_advice() {
    let t = tempfile::tempdir().unwrap();
    let d = t.path();
    let trace = d.join("syn.json");
    let art = d.join("syn.canary.json");
    ok(&cc(&["synth", "--events", "60", "--seed", "3", "--ranks", "2", "-o", s(&trace)]));
    ok(&cc(&["canary", "compile", s(&trace), "-o", s(&art)]));
    let bytes = std::fs::read(&art).unwrap();
    let mut v: serde_json::Value = serde_json::from_slice(&bytes).unwrap();
    v["format_version"] = serde_json::json!(99);
    let write = |name: &str, b: &[u8]| {
        let p = d.join(name);
        std::fs::write(&p, b).unwrap();
        p
    };
    let big = d.join("big.canary.json");
    std::fs::File::create(&big).unwrap().set_len((1 << 30) + 1).unwrap();
    let dir = d.join("adir.canary.json");
    std::fs::create_dir(&dir).unwrap();
    let cases: Vec<(PathBuf, &str, &str)> = vec![
        (d.join("missing.canary.json"), "NO_SUCH_INPUT", "canary compile"),
        (dir, "NOT_REGULAR_FILE", "regular file"),
        (write("empty.canary.json", b""), "BAD_FORMAT", "canary compile"),
        (write("cut.canary.json", &bytes[..bytes.len() / 2]), "BAD_FORMAT", "canary compile"),
        (write("text.canary.json", b"not json at all\n"), "BAD_FORMAT", "canary compile"),
        (write("obj.canary.json", b"{\"hello\": 1}\n"), "BAD_FORMAT", "canary compile"),
        (write("v99.canary.json", &serde_json::to_vec_pretty(&v).unwrap()), "UNSUPPORTED_VERSION", "compile it again"),
        (trace.clone(), "BAD_FORMAT", "a communication trace, not a canary artifact"),
        (big, "OVER_LIMIT", "big.canary.json"),
    ];
    let sp = spec_with(d, "spec.toml", 2, "replay", MPIRUN, &[("a", ""), ("b", "")]);
    for (p, code, advice) in &cases {
        for (how, o) in [
            ("inspect", cc(&["canary", "inspect", s(p)])),
            ("verify", cc(&["canary", "verify", s(&trace), s(p), "--configs", s(&sp), "-o", s(&d.join("never"))])),
        ] {
            let text = assert_refused(&o, code);
            let name = p.file_name().unwrap().to_str().unwrap();
            assert!(text.contains(name) && text.contains(advice), "{how} {name}: {text}");
            assert!(!text.contains("commcanary import"), "{how} {name}: advice meant for traces: {text}");
        }
    }
    assert!(!d.join("never").exists());
    // the other way round: an artifact where the source trace belongs
    for o in [
        cc(&["canary", "verify", s(&art), s(&art), "--configs", s(&sp), "-o", s(&d.join("never"))]),
        cc(&["canary", "redact", s(&art), "-o", s(&d.join("r.json"))]),
        cc(&["canary", "compile", s(&art), "-o", s(&d.join("c.json"))]),
    ] {
        let text = assert_refused(&o, "BAD_INPUT");
        assert!(text.contains("a canary artifact") && text.contains("not a communication trace"), "{text}");
    }
}

fn leftovers(tmp: &Path) -> Vec<String> {
    std::fs::read_dir(tmp)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n.starts_with("commcanary-redact-verify-"))
        .collect()
}

/// `canary redact --configs` for real: the re-verification runs a campaign
/// (the redacted trace against the source under every configuration) in a
/// private temporary directory that is removed afterwards; beside the output
/// there is the redacted trace and its audit log and nothing else (no
/// unredacted copy, no campaign). A refused export (a spec whose campaign
/// cannot run, a launcher that fails every configuration) leaves nothing:
/// no output, no audit log, no temporary directory.
#[test]
fn redact_with_configs_reverifies_privately_and_a_refusal_leaves_nothing() {
    let t = tempfile::tempdir().unwrap();
    let d = t.path();
    let tmp = d.join("tmp");
    std::fs::create_dir(&tmp).unwrap();
    let trace = d.join("syn.json");
    ok(&cc(&["synth", "--events", "40", "--seed", "5", "--ranks", "2", "-o", s(&trace)]));
    let configs: &[(&str, &str)] = &[
        ("ring", "env = { OMPI_MCA_coll_libnbc_iallreduce_algorithm = \"1\" }"),
        ("binomial", "env = { OMPI_MCA_coll_libnbc_iallreduce_algorithm = \"2\" }"),
    ];
    let sp = spec_with(d, "spec.toml", 2, "replay", MPIRUN, configs);
    let redact = |out: &Path, spec: &Path, path: Option<&str>| {
        let mut c = std::process::Command::new(bin());
        c.args(["canary", "redact", s(&trace), "-o", s(out), "--quantize-ns", "1000", "--configs", s(spec)])
            .env("TMPDIR", &tmp)
            .env("OMPI_ALLOW_RUN_AS_ROOT", "1")
            .env("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1");
        if let Some(p) = path {
            c.env("PATH", p);
        }
        c.output().unwrap()
    };
    let out_dir = d.join("export");
    std::fs::create_dir(&out_dir).unwrap();
    let out = out_dir.join("red.json");
    let text = ok(&redact(&out, &sp, None));
    assert!(text.contains("ranking decision survives: "), "{text}");
    let mut names: Vec<String> =
        std::fs::read_dir(&out_dir).unwrap().map(|e| e.unwrap().file_name().to_string_lossy().into_owned()).collect();
    names.sort();
    assert_eq!(names, ["red.json", "red.json.audit.json"], "nothing beside the output");
    let audit: serde_json::Value =
        serde_json::from_slice(&std::fs::read(out_dir.join("red.json.audit.json")).unwrap()).unwrap();
    let survives = audit["decision_survives"].as_str().unwrap();
    assert!(survives.contains("re-verified in a private temporary directory"), "{survives}");
    assert!(leftovers(&tmp).is_empty(), "the private directory is removed: {:?}", leftovers(&tmp));
    // the redacted trace holds none of the source's run id
    let src: serde_json::Value = serde_json::from_slice(&std::fs::read(&trace).unwrap()).unwrap();
    let red = std::fs::read_to_string(&out).unwrap();
    if let Some(schema) = src["source"]["schema"].as_str().filter(|s| s.len() > 3) {
        assert!(!red.contains(schema), "the source's schema field is redacted");
    }
    // refused exports: nothing written, nothing left
    let bad = spec_with(d, "bad.toml", 2, "replay", MPIRUN, &[("ring", ""), ("g", "args = [\"--graph\"]")]);
    let fake = fake_launcher(&d.join("fake"), "mpirun has detected an attempt to run as root.");
    let fake_path = format!("{}:{}", fake.display(), std::env::var("PATH").unwrap_or_default());
    for (i, (spec, path, code)) in [
        (&bad, None, "BAD_SPEC"),
        (&d.join("no-such-spec.toml"), None, "NO_SUCH_INPUT"),
        (&sp, Some(fake_path.as_str()), "LAUNCHER_FAILED"),
    ]
    .iter()
    .enumerate()
    {
        let dir = d.join(format!("refused{i}"));
        std::fs::create_dir(&dir).unwrap();
        let o = redact(&dir.join("red.json"), spec, *path);
        let text = format!("{}{}", String::from_utf8_lossy(&o.stderr), String::from_utf8_lossy(&o.stdout));
        assert!(!o.status.success() && text.contains("refused["), "{i}: {text}");
        assert!(text.contains(&format!("refused[{code}]")), "{i}: {text}");
        assert_eq!(std::fs::read_dir(&dir).unwrap().count(), 0, "{i}: a refused export leaves nothing");
        assert!(leftovers(&tmp).is_empty(), "{i}: no private directory left");
    }
}
