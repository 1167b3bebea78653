//! One experiment, one kind of hardware (issue 27, item 7): `campaign verify`
//! refuses a cell that ran on a host the spec's hardware contract does not
//! name, or that recorded another hardware identity than the contract
//! allows, with `refused[HARDWARE_CONTRACT]`, naming the field and the
//! expected and recorded values. Real jobs under real mpirun; another host
//! or CPU is made with the test hooks `COMMCANARY_TEST_HOST` and
//! `COMMCANARY_TEST_CPU_MODEL`, which the ranks record in place of the real
//! fact (and, like every `COMMCANARY_*` variable, in their identity).
mod common;
use commcanary::core::identity;
use common::*;
use std::path::{Path, PathBuf};

/// A one-round, two-rank spec with the given configurations and `[hardware]`
/// table; never analyzed here, so declared a `join_part` (plan refuses one
/// round otherwise).
fn spec(dir: &Path, name: &str, configs: &[(&str, &str)], hardware: &str) -> PathBuf {
    let mut text = format!(
        r#"
name = "{name}"
backend = "cpu"
ranks = 2
repetitions = 1
join_part = true
seed = 3
[launcher]
kind = "mpirun"
args = ["--oversubscribe"]
[workload]
phases = "blocking"
tokens = 2
layers = 2
[analysis]
tie_policy = "interval"
{hardware}
"#
    );
    for (c, env) in configs {
        text.push_str(&format!(
            "[[configs]]\nname = \"{c}\"\nenv = {{ OMPI_MCA_coll_libnbc_iallreduce_algorithm = \"1\"{env} }}\n"
        ));
    }
    let p = dir.join(format!("{name}.toml"));
    std::fs::write(&p, text).unwrap();
    p
}

/// plan + exec (with extra environment for exec) + select; the campaign directory.
fn run(spec: &Path, dir: &Path, env: &[(&str, &str)]) {
    let d = dir.to_str().unwrap();
    ok(&cc(&["campaign", "plan", spec.to_str().unwrap(), "-o", d]));
    let o = std::process::Command::new(bin())
        .args(["campaign", "exec", d])
        .env("OMPI_ALLOW_RUN_AS_ROOT", "1")
        .env("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1")
        .envs(env.iter().copied())
        .output()
        .unwrap();
    ok(&o);
    ok(&cc(&["campaign", "select", d]));
}

fn real_cpu() -> String {
    std::fs::read_to_string("/proc/cpuinfo")
        .unwrap()
        .lines()
        .find(|l| l.starts_with("model name"))
        .and_then(|l| l.split_once(':'))
        .map(|(_, v)| v.trim().to_string())
        .expect("a CPU model in /proc/cpuinfo")
}

/// The acceptance of item 7: a cell from another host name, or with another
/// recorded hardware identity, than the contract allows is refused by
/// `verify`, with its code, naming the field, the expected and the recorded
/// value; the cells that keep the contract pass, and `analyze` withholds.
#[test]
fn a_cell_from_another_host_or_hardware_is_refused_by_verify() {
    let t = tempfile::tempdir().unwrap();
    let here = identity::hostname();
    let sp = spec(
        t.path(),
        "hosts",
        &[
            ("ring", ""),
            ("ring-2", ""),
            ("moved", ", COMMCANARY_TEST_HOST = \"node-b\""),
            ("other-cpu", ", COMMCANARY_TEST_CPU_MODEL = \"Imaginary CPU 9000\""),
        ],
        &format!("[hardware]\nhosts = [{here:?}]\n"),
    );
    let d = t.path().join("c");
    run(&sp, &d, &[]);
    let m: serde_json::Value = serde_json::from_slice(&std::fs::read(d.join("manifest.json")).unwrap()).unwrap();
    assert_eq!(m["format_version"], 5);
    assert_eq!(m["hardware"]["hosts"], serde_json::json!([here]));
    assert_eq!(m["hardware"]["declared"], true);
    let o = cc(&["campaign", "verify", d.to_str().unwrap()]);
    assert_refused(&o, "INCOMPLETE");
    let out = String::from_utf8_lossy(&o.stdout).into_owned();
    assert!(out.contains("INCOMPLETE: 2/4 cells verified"), "{out}");
    assert!(
        out.contains(&format!(
            "r01-moved: refused[HARDWARE_CONTRACT]: hardware contract: host: rank 0 ran on \"node-b\", which is not \
                among hardware.hosts [{here:?}]"
        )),
        "{out}"
    );
    assert!(
        out.contains(&format!(
            "r01-other-cpu: refused[HARDWARE_CONTRACT]: hardware contract: cpu_model: expected {:?} (as 2 of 3 cells \
                recorded, first ",
            real_cpu()
        )) && out.contains("this cell recorded \"Imaginary CPU 9000\""),
        "{out}"
    );
    assert!(!out.contains("r01-ring:") && !out.contains("r01-ring-2:"), "the cells that keep the contract pass: {out}");
    let o = cc(&["campaign", "analyze", d.to_str().unwrap()]);
    assert_refused(&o, "INCOMPLETE");
    assert!(String::from_utf8_lossy(&o.stdout).starts_with("withheld-incomplete"));
}

/// A value the contract pins is refused when a rank recorded another one;
/// `same = []` relaxes the default, so cells on another CPU then verify.
#[test]
fn pinned_values_are_refused_and_the_default_can_be_relaxed() {
    let t = tempfile::tempdir().unwrap();
    let sp = spec(t.path(), "pinned", &[("ring", "")], "[hardware]\nexpect = { device_name = \"NVIDIA H200\" }\n");
    let d = t.path().join("pinned");
    run(&sp, &d, &[]);
    let o = cc(&["campaign", "verify", d.to_str().unwrap()]);
    let text = assert_refused(&o, "HARDWARE_CONTRACT");
    assert!(
        text.contains(&format!(
            "hardware contract: device_name: expected \"NVIDIA H200\" (hardware.expect), rank 0 on host {} recorded \
                {:?}",
            identity::hostname(),
            real_cpu()
        )),
        "{text}"
    );
    let sp = spec(
        t.path(),
        "relaxed",
        &[("ring", ""), ("other-cpu", ", COMMCANARY_TEST_CPU_MODEL = \"Imaginary CPU 9000\"")],
        "[hardware]\nsame = []\n",
    );
    let d = t.path().join("relaxed");
    run(&sp, &d, &[]);
    let out = ok(&cc(&["campaign", "verify", d.to_str().unwrap()]));
    assert!(out.contains("complete: 2/2"), "{out}");
    // a table that could never verify is refused at plan
    let bad = spec(t.path(), "nohosts", &[("ring", "")], "[hardware]\nhosts = []\n");
    let o = cc(&["campaign", "plan", bad.to_str().unwrap(), "-o", t.path().join("nohosts").to_str().unwrap()]);
    assert!(assert_refused(&o, "BAD_SPEC").contains("hardware.hosts is empty"));
    let bad = spec(t.path(), "nofield", &[("ring", "")], "[hardware]\nsame = [\"gpu_colour\"]\n");
    let o = cc(&["campaign", "plan", bad.to_str().unwrap(), "-o", t.path().join("nofield").to_str().unwrap()]);
    assert!(assert_refused(&o, "BAD_SPEC").contains("gpu_colour"));
}

/// Two campaigns joined into one: the cells B ran on another kind of
/// hardware (here: every rank of B's exec recorded another CPU) are refused
/// by `verify` of the joined campaign; campaigns under different contracts
/// are not joined at all.
#[test]
fn a_joined_campaign_is_held_to_one_kind_of_hardware() {
    let t = tempfile::tempdir().unwrap();
    let sp = spec(t.path(), "j", &[("ring", "")], "");
    let (a, b, c) = (t.path().join("a"), t.path().join("b"), t.path().join("c"));
    run(&sp, &a, &[]);
    run(&sp, &b, &[("COMMCANARY_TEST_CPU_MODEL", "Imaginary CPU 9000")]);
    ok(&cc(&["campaign", "verify", a.to_str().unwrap()]));
    ok(&cc(&["campaign", "verify", b.to_str().unwrap()]));
    ok(&cc(&["campaign", "join", a.to_str().unwrap(), b.to_str().unwrap(), "-o", c.to_str().unwrap()]));
    ok(&cc(&["campaign", "select", c.to_str().unwrap()]));
    let o = cc(&["campaign", "verify", c.to_str().unwrap()]);
    let out = assert_refused(&o, "HARDWARE_CONTRACT");
    assert!(
        out.contains(&format!(
            "r02-ring: refused[HARDWARE_CONTRACT]: hardware contract: cpu_model: expected {:?} (as 1 of 2 cells \
                recorded, first r01-ring), this cell recorded \"Imaginary CPU 9000\"",
            real_cpu()
        )),
        "{out}"
    );
    // another contract: not the same experiment
    let relaxed = spec(t.path(), "j2", &[("ring", "")], "[hardware]\nsame = []\n");
    let r = t.path().join("r");
    ok(&cc(&["campaign", "plan", relaxed.to_str().unwrap(), "-o", r.to_str().unwrap()]));
    let o =
        cc(&["campaign", "join", a.to_str().unwrap(), r.to_str().unwrap(), "-o", t.path().join("x").to_str().unwrap()]);
    assert!(assert_refused(&o, "CAMPAIGN_MISMATCH").contains("hardware contract differs"));
}
