//! `validate` on the CPU backend under real `mpirun -n 4`: record a
//! reference, validate against it (pass), with an injected delay (fail,
//! naming the workload check), and with another rank count (refused).
//!
//! The machine these run on is small and shared (2 cores, 4 oversubscribed
//! ranks), so the site file used here is loose: busbw at least 0.2 of the
//! reference's and per-token latency at most 2.0 times it. Noise then gives
//! pass or inconclusive; the injected delay (50 ms before every 8th
//! collective of one rank, one delay per token while a token of the
//! tiny model takes a few ms) multiplies the per-token latency several times.
mod common;
use common::*;
use std::path::Path;

fn site(dir: &Path) -> String {
    let p = dir.join("site.toml");
    std::fs::write(&p, "busbw_min_ratio = 0.2\ntoken_latency_max_ratio = 2.0\n").unwrap();
    p.to_str().unwrap().to_string()
}

fn record(dir: &Path) -> String {
    let r = dir.join("ref");
    let o = mpirun(
        4,
        &[
            "validate",
            "-q",
            "--backend",
            "cpu",
            "--record-reference",
            "-o",
            r.to_str().unwrap(),
            "--max-bytes",
            "256KiB",
            "--iters",
            "5",
            "--warmup-iters",
            "2",
            "--tokens",
            "12",
            "--warmup-tokens",
            "2",
            "--rounds",
            "8",
        ],
    );
    ok(&o);
    for f in ["manifest.json", "rounds.json", "health.json", "topology.json", "descriptor.json"] {
        assert!(r.join(f).exists(), "{f} missing from the reference");
    }
    r.to_str().unwrap().to_string()
}

fn validate(n: u32, reference: &str, site: &str, out: &Path, extra: &[&str]) -> (i32, String, String) {
    let mut args = vec!["validate", "-q", "--backend", "cpu", "--reference", reference, "--site", site, "-o", out.to_str().unwrap(), "--rounds", "8", "--json"];
    args.extend_from_slice(extra);
    let o = mpirun(n, &args);
    (o.status.code().unwrap_or(-1), String::from_utf8_lossy(&o.stdout).into_owned(), String::from_utf8_lossy(&o.stderr).into_owned())
}

#[test]
fn record_validate_delay_and_refusal() {
    let d = tempfile::tempdir().unwrap();
    let reference = record(d.path());
    let site = site(d.path());

    // a fresh validation of the same node: pass (noise may leave a check inconclusive, never failing)
    let (code, out, err) = validate(4, &reference, &site, &d.path().join("v-pass"), &[]);
    let report: serde_json::Value = serde_json::from_str(&out).unwrap_or_else(|e| panic!("{e}: {out}\n{err}"));
    eprintln!(
        "fresh validation: exit {code}, verdicts {:?}",
        report["checks"].as_array().unwrap().iter().map(|c| (c["check"].as_str().unwrap(), c["verdict"].as_str().unwrap())).collect::<Vec<_>>()
    );
    assert!(code == 0 || code == 2, "a fresh validation must pass (or be inconclusive under noise), got {code}\n{out}\n{err}");
    assert_eq!(report["exit_code"], code);
    assert_eq!(report["format_version"], 1);
    let health = report["checks"].as_array().unwrap().iter().find(|c| c["check"] == "health").unwrap();
    assert!(health["measured"].as_str().unwrap().contains("no GPU: NVML checks not applicable"), "{health}");
    assert!(d.path().join("v-pass").join("report.json").exists() && d.path().join("v-pass").join("descriptor.json").exists());

    // one rank delayed 50 ms before every 8th workload collective: fail, naming the workload check
    let (code, out, err) = validate(4, &reference, &site, &d.path().join("v-delay"), &["--inject-delay", "rank=3,every=8,us=50000"]);
    assert_eq!(code, 1, "an injected delay must fail the validation\n{out}\n{err}");
    let report: serde_json::Value = serde_json::from_str(&out).unwrap();
    let workload = report["checks"].as_array().unwrap().iter().find(|c| c["check"] == "workload token latency").unwrap();
    assert_eq!(workload["verdict"], "fail", "{workload}");
    let manifest: serde_json::Value = serde_json::from_slice(&std::fs::read(d.path().join("v-delay/manifest.json")).unwrap()).unwrap();
    assert_eq!(manifest["inject_delay"], "rank=3,every=8,us=50000");

    // the table names the failing check
    let o = mpirun(
        4,
        &[
            "validate",
            "-q",
            "--backend",
            "cpu",
            "--reference",
            &reference,
            "--site",
            &site,
            "-o",
            d.path().join("v-delay-table").to_str().unwrap(),
            "--rounds",
            "8",
            "--inject-delay",
            "rank=3,every=8,us=50000",
        ],
    );
    let table = String::from_utf8_lossy(&o.stdout);
    assert_eq!(o.status.code(), Some(1), "{table}");
    assert!(table.contains("failing: workload token latency"), "{table}");

    // another rank count: refused, naming it, exit 3, nothing written
    let (code, out, err) = validate(2, &reference, &site, &d.path().join("v-two"), &[]);
    assert_eq!(code, 3, "a reference from 4 ranks must be refused on 2\n{out}\n{err}");
    assert!(err.contains("rank count 2 (the reference ran 4 ranks)"), "{err}");
    assert!(!d.path().join("v-two").exists());

    // a tampered reference is refused, naming the file
    let rounds = Path::new(&reference).join("rounds.json");
    let mut bytes = std::fs::read(&rounds).unwrap();
    bytes.push(b'\n');
    std::fs::write(&rounds, bytes).unwrap();
    let (code, _, err) = validate(4, &reference, &site, &d.path().join("v-tampered"), &[]);
    assert_eq!(code, 3, "{err}");
    assert!(err.contains("rounds.json") && err.contains("descriptor"), "{err}");
}

#[test]
fn argument_errors_exit_3() {
    let o = cc(&["validate", "--backend", "cpu"]);
    assert_eq!(o.status.code(), Some(3), "neither --record-reference nor --reference: {}", String::from_utf8_lossy(&o.stderr));
    let o = cc(&["validate", "--backend", "cpu", "--reference", "/nonexistent/ref"]);
    assert_eq!(o.status.code(), Some(3));
    assert!(String::from_utf8_lossy(&o.stderr).contains("/nonexistent/ref"), "{}", String::from_utf8_lossy(&o.stderr));
    let o = cc(&["validate", "--backend", "cpu", "--record-reference", "--rounds", "1"]);
    assert_eq!(o.status.code(), Some(3));
}

/// Issue 31, defect 7: every fault of a site file is refused with
/// `BAD_INPUT`, naming the file and the key, before any reference is read or
/// anything runs (exit 3); one case per refusal.
#[test]
fn bad_site_files_are_refused_naming_the_file_and_the_key() {
    let d = tempfile::tempdir().unwrap();
    let cases: [(&str, &str, &str); 11] = [
        ("not-toml", "coverage = 0.9\nbusbw_min_ratio = \n", ".toml:2: not a site file (not TOML)"),
        ("wrong-type", "busbw_min_ratio = \"high\"\n", "busbw_min_ratio = \"high\""),
        ("unknown-key", "busbw_min = 0.9\n", "unknown key \"busbw_min\""),
        ("inverted-busbw", "busbw_min_ratio = 1.2\n", "busbw_min_ratio = 1.2 is inverted"),
        ("inverted-latency", "token_latency_max_ratio = 0.8\n", "token_latency_max_ratio = 0.8 is inverted"),
        ("inverted-both", "busbw_min_ratio = 1.5\ntoken_latency_max_ratio = 0.5\n", "busbw_min_ratio = 1.5 is inverted"),
        ("negative-ratio", "token_latency_max_ratio = -1\n", "token_latency_max_ratio = -1"),
        ("negative-crc", "nvlink_crc_errors_max = -1\n", "nvlink_crc_errors_max = -1"),
        ("fractional-crc", "nvlink_crc_errors_max = 2.5\n", "nvlink_crc_errors_max = 2.5"),
        ("coverage", "coverage = 1.5\n", "coverage = 1.5"),
        ("allow", "allow = [\"kernel\"]\n", "allow = \"kernel\""),
    ];
    for (tag, text, needle) in cases {
        let site = d.path().join(format!("{tag}.toml"));
        std::fs::write(&site, text).unwrap();
        let out = d.path().join(format!("v-{tag}"));
        let o = cc(&["validate", "--backend", "cpu", "--reference", "/nonexistent/ref", "--site", site.to_str().unwrap(), "-o", out.to_str().unwrap()]);
        assert_eq!(o.status.code(), Some(3), "{tag}: {}", String::from_utf8_lossy(&o.stderr));
        let err = assert_refused(&o, "BAD_INPUT");
        assert!(err.contains(site.to_str().unwrap()) && err.contains(needle), "{tag}: the refusal names the file and {needle:?}:\n{err}");
        assert!(!err.contains("/nonexistent/ref"), "{tag}: the site is refused before the reference is read:\n{err}");
        assert!(!out.exists(), "{tag}");
    }
}
