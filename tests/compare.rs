//! `commcanary compare` on summary tables (issue #6, acceptance 1).
mod common;
use commcanary::evidence::nccl_tests;
use common::*;

#[test]
fn eight_configs_28_relations_hand_computed() {
    let t = tempfile::tempdir().unwrap();
    let proxy = t.path().join("proxy.csv");
    let truth = t.path().join("truth.csv");
    // proxy: c1 < c2 < ... < c8; truth: the same, except c6 is the slowest
    let mut p = String::from("config,median_us,iqr_us\n");
    let mut q = String::from("config,median_us,iqr_us\n");
    for i in 1..=8 {
        p.push_str(&format!("c{i},{},{}\n", i * 10, if i <= 2 { 15 } else { 1 }));
        let tm = if i == 6 { 100 } else { i * 10 };
        q.push_str(&format!("c{i},{tm},{}\n", if i <= 2 { 15 } else { 1 }));
    }
    std::fs::write(&proxy, p).unwrap();
    std::fs::write(&truth, q).unwrap();
    let args = |policy: &str| {
        vec![
            "compare".to_string(),
            "--proxy".into(),
            proxy.display().to_string(),
            "--truth".into(),
            truth.display().to_string(),
            "--tie-policy".into(),
            policy.into(),
            "--json".into(),
        ]
    };
    let run = |policy: &str| -> serde_json::Value {
        let a = args(policy);
        let refs: Vec<&str> = a.iter().map(String::as_str).collect();
        serde_json::from_str(&ok(&cc(&refs))).unwrap()
    };
    let v = run("strict");
    assert_eq!(v["pairs_total"], 28);
    assert_eq!(v["relations"].as_array().unwrap().len(), 28);
    // by hand: only (c6,c7) and (c6,c8) reverse: 26 agree; tau-b = (26 - 2) / 28
    assert_eq!(v["pairs_agree"], 26);
    assert!((v["agreement_pct"].as_f64().unwrap() - 2600.0 / 28.0).abs() < 1e-9);
    assert!((v["kendall_tau_b"].as_f64().unwrap() - 24.0 / 28.0).abs() < 1e-12);
    let d = v["disagreements"].as_array().unwrap();
    assert_eq!(d.len(), 2);
    // c6 (100) vs c7 (70): 42.857% of the faster; vs c8 (80): 25%
    let cost = |b: &str| d.iter().find(|x| x["b"] == b).unwrap()["truth_cost_pct"].as_f64().unwrap();
    assert!((cost("c7") - 300.0 / 7.0).abs() < 1e-9);
    assert!((cost("c8") - 25.0).abs() < 1e-9);
    let ev = v["evidence_class"].as_str().unwrap();
    assert!(ev.contains("proxy: reported evidence") && ev.contains("truth: reported evidence"), "{ev}");
    // the IQR rule turns the close pair c1/c2 (10 apart, IQR 15) into a tie on both sides
    let rel = |v: &serde_json::Value| {
        v["relations"].as_array().unwrap().iter().find(|r| r["a"] == "c1" && r["b"] == "c2").unwrap().clone()
    };
    assert_eq!(rel(&v)["proxy"], "a_faster");
    let w = run("iqr");
    assert_eq!(rel(&w)["proxy"], "not_distinguished");
    assert_eq!(rel(&w)["truth"], "not_distinguished");
    // ties on each side: (c1,c2) and (c2,c3) (10 apart, IQR 15); of the other 26
    // pairs 24 are concordant and 2 discordant: (24 - 2) / sqrt((28 - 2)(28 - 2))
    assert_eq!(w["pairs_agree"], 26);
    assert!((w["kendall_tau_b"].as_f64().unwrap() - 22.0 / 26.0).abs() < 1e-12);
    // human output words the claim as docs/ARCHITECTURE.md §9 asks
    let a = args("iqr");
    let refs: Vec<&str> = a[..a.len() - 1].iter().map(String::as_str).collect();
    let human = ok(&cc(&refs));
    assert!(human.contains("under the declared Iqr rule the proxy and the truth agreed on"), "{human}");
    assert!(!human.contains("statistically identical"));
}

/// nccl-tests' outputs as a proxy: a folder of one run per configuration,
/// the printed table (with and without `-I 1` columns) and a `-J` file of
/// JSON version 3 (fixtures written from nccl-tests 2.19.6's printf and
/// JSON writer formats), ranked at one size or by the geometric mean.
#[test]
fn a_folder_of_nccl_tests_outputs_is_a_proxy() {
    let data = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/data/nccl_tests");
    let sweep = format!("{data}/sweep");
    let truth = format!("{data}/truth.csv");
    let run = |extra: &[&str]| -> serde_json::Value {
        let mut a = vec!["compare", "--proxy", &sweep, "--truth", &truth, "--json"];
        a.extend_from_slice(extra);
        serde_json::from_str(&ok(&cc(&a))).unwrap()
    };
    // at 1 MiB the proxy orders ring-simple < ring-ll < tree-ll, as the truth does
    let v = run(&["--size", "1MiB"]);
    assert_eq!((v["pairs_total"].as_u64(), v["pairs_agree"].as_u64()), (Some(3), Some(3)), "{v}");
    assert!(
        v["evidence_class"].as_str().unwrap().contains("3 nccl-tests outputs")
            && v["evidence_class"].as_str().unwrap().contains("1048576 bytes"),
        "{v}"
    );
    // at 8 B the order is reversed (tree-ll < ring-ll < ring-simple): every pair disagrees
    let v = run(&["--size", "8"]);
    assert_eq!(v["pairs_agree"].as_u64(), Some(0), "{v}");
    // by default the geometric mean over the 4 common sizes: 20.45 < 21.34 < 22.45 µs
    let v = run(&[]);
    assert_eq!(v["pairs_agree"].as_u64(), Some(3), "{v}");
    assert!(v["evidence_class"].as_str().unwrap().contains("over the 4 sizes"), "{v}");
    // --csv: one row per pair, the same relations as --json
    let csv = ok(&cc(&["compare", "--proxy", &sweep, "--truth", &truth, "--size", "8", "--csv"]));
    let mut lines = csv.lines();
    assert_eq!(lines.next(), Some("a,b,proxy,truth,agree"), "{csv}");
    assert_eq!(lines.filter(|l| l.ends_with(",false")).count(), 3, "{csv}");
}

#[test]
fn nccl_tests_folders_are_refused_naming_the_file_and_the_fault() {
    let data = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/data/nccl_tests");
    let truth = format!("{data}/truth.csv");
    let t = tempfile::tempdir().unwrap();
    for f in ["ring-ll.txt", "ring-simple.txt", "tree-ll.json"] {
        std::fs::copy(format!("{data}/sweep/{f}"), t.path().join(f)).unwrap();
    }
    let dir = t.path().display().to_string();
    // a size one file did not time
    let o = cc(&["compare", "--proxy", &dir, "--truth", &truth, "--size", "2MiB"]);
    assert!(!o.status.success());
    assert!(
        String::from_utf8_lossy(&o.stderr).contains("ring-ll: no timed result of 2097152 bytes"),
        "{}",
        String::from_utf8_lossy(&o.stderr)
    );
    // a damaged line in one file: its name, its line, the fault, and BAD_INPUT
    let text = std::fs::read_to_string(t.path().join("ring-ll.txt")).unwrap().replace("22.40", "22.4x");
    std::fs::write(t.path().join("ring-ll.txt"), text).unwrap();
    let o = cc(&["compare", "--proxy", &dir, "--truth", &truth]);
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        !o.status.success()
            && err.contains("BAD_INPUT")
            && err.contains("ring-ll.txt: line ")
            && err.contains("\"22.4x\""),
        "{err}"
    );
    // two outputs of one configuration
    std::fs::copy(format!("{data}/sweep/ring-ll.txt"), t.path().join("ring-ll.txt")).unwrap();
    std::fs::copy(format!("{data}/sweep/tree-ll.json"), t.path().join("ring-ll.json")).unwrap();
    let o = cc(&["compare", "--proxy", &dir, "--truth", &truth]);
    assert!(
        String::from_utf8_lossy(&o.stderr).contains("two files are named \"ring-ll\""),
        "{}",
        String::from_utf8_lossy(&o.stderr)
    );
    // a JSON file that is not nccl-tests' (no results list)
    std::fs::remove_file(t.path().join("ring-ll.json")).unwrap();
    std::fs::write(t.path().join("tree-ll.json"), "{\"version\": 3}").unwrap();
    let o = cc(&["compare", "--proxy", &dir, "--truth", &truth]);
    assert!(
        String::from_utf8_lossy(&o.stderr).contains("tree-ll.json: no `results` list"),
        "{}",
        String::from_utf8_lossy(&o.stderr)
    );
}

/// Real nccl-tests 2.19.6 outputs of one H100 (`tests/data/nccl_tests/h100-real/`,
/// recorded by `scripts/device/record-nccl-tests-outputs.sh`): every format
/// parses, row for row against the file's own numbers (the JSON read here
/// by serde alone, the text by splitting its columns), and each folder is a proxy.
#[test]
fn real_nccl_tests_outputs_of_an_h100_are_read_in_every_format() {
    let data = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/data/nccl_tests/h100-real");
    for config in ["default", "ring-ll", "ring-ll128", "ring-simple"] {
        // -J: every result's out-of-place and in-place time, as the file says
        let path = format!("{data}/json/{config}.json");
        let raw = std::fs::read_to_string(&path).unwrap();
        let t = nccl_tests::parse(&raw, &path).unwrap();
        let j: serde_json::Value = serde_json::from_str(&raw).unwrap();
        let results = j["results"].as_array().unwrap();
        assert_eq!((t.rows.len(), results.len()), (12, 12), "{path}");
        for (row, r) in t.rows.iter().zip(results) {
            assert_eq!(row.size_bytes, r["size"].as_u64().unwrap(), "{path}");
            assert_eq!(
                row.out_of_place.as_ref().unwrap().time_us,
                r["out_of_place"]["time"].as_f64().unwrap(),
                "{path}"
            );
            assert_eq!(row.in_place.as_ref().unwrap().time_us, r["in_place"]["time"].as_f64().unwrap(), "{path}");
        }
        // the printed table, with and without -I 1's per-iteration columns:
        // out-of-place time is column 6, in-place time column 10 or 14
        for (kind, in_place_col) in [("text", 9), ("iter", 13)] {
            let path = format!("{data}/{kind}/{config}.txt");
            let raw = std::fs::read_to_string(&path).unwrap();
            let t = nccl_tests::parse(&raw, &path).unwrap();
            let lines: Vec<Vec<&str>> = raw
                .lines()
                .filter(|l| !l.starts_with('#') && !l.trim().is_empty())
                .map(|l| l.split_whitespace().collect())
                .collect();
            assert_eq!((t.rows.len(), lines.len()), (12, 12), "{path}");
            assert_eq!(t.nccl_tests_version.as_deref(), Some("2.19.6"), "{path}");
            for (row, cols) in t.rows.iter().zip(&lines) {
                assert_eq!(row.size_bytes.to_string(), cols[0], "{path}");
                assert_eq!(row.out_of_place.as_ref().unwrap().time_us, cols[5].parse::<f64>().unwrap(), "{path}");
                assert_eq!(
                    row.in_place.as_ref().unwrap().time_us,
                    cols[in_place_col].parse::<f64>().unwrap(),
                    "{path}"
                );
            }
        }
    }
    // each folder is a proxy and a truth for the others: 4 configurations, 6 pairs
    for (proxy, truth) in [("json", "text"), ("iter", "text"), ("text", "json")] {
        let v: serde_json::Value = serde_json::from_str(&ok(&cc(&[
            "compare",
            "--proxy",
            &format!("{data}/{proxy}"),
            "--truth",
            &format!("{data}/{truth}"),
            "--json",
        ])))
        .unwrap();
        assert_eq!(v["pairs_total"].as_u64(), Some(6), "{proxy} vs {truth}: {v}");
    }
}
