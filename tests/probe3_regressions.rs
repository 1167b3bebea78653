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
