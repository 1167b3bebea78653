//! `commcanary compare` on summary tables (issue #6, acceptance 1).
mod common;
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
    let rel = |v: &serde_json::Value| v["relations"].as_array().unwrap().iter().find(|r| r["a"] == "c1" && r["b"] == "c2").unwrap().clone();
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
