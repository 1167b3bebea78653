//! `commcanary overlap` on a real CPU run and on an interval file.
mod common;
use common::*;

#[test]
fn blocking_has_no_overlap_and_overlap_phase_has_some() {
    let d = tempfile::tempdir().unwrap();
    let run = run_rank(
        2,
        d.path(),
        &["--phases", "blocking,overlap", "--tokens", "4", "--model", "synthetic", "--layers", "4"],
    );
    let v: serde_json::Value = serde_json::from_str(&ok(&cc(&["overlap", "--json", run.to_str().unwrap()]))).unwrap();
    let rows = v.as_array().unwrap();
    assert_eq!(rows.len(), 4, "2 phases x 2 ranks");
    for r in rows {
        assert_eq!(r["source"], "host");
        let ov = r["report"]["overlap_us"].as_f64().unwrap();
        match r["phase"].as_str().unwrap() {
            "blocking" => assert_eq!(ov, 0.0, "{r}"),
            "overlap" => assert!(ov > 0.0, "{r}"),
            p => panic!("unexpected phase {p}"),
        }
    }
}

#[test]
fn interval_file_and_its_refusals() {
    let d = tempfile::tempdir().unwrap();
    let f = d.path().join("iv.json");
    std::fs::write(&f, r#"{"compute": [[0,10],[20,30]], "comm": [[5,25],[8,12]]}"#).unwrap();
    let v: serde_json::Value =
        serde_json::from_str(&ok(&cc(&["overlap", "--json", "--intervals", f.to_str().unwrap()]))).unwrap();
    assert_eq!(v["overlap_us"], 10.0);
    assert_eq!(v["wall_us"], 30.0);
    assert_eq!(v["overlap_of_comm"], 0.5);
    std::fs::write(&f, r#"{"compute": [[10,0]], "comm": []}"#).unwrap();
    let o = cc(&["overlap", "--intervals", f.to_str().unwrap()]);
    assert!(assert_refused(&o, "BAD_INPUT").contains("ends before it starts"));
    std::fs::write(&f, r#"{"compute": [], "communication": []}"#).unwrap();
    let o = cc(&["overlap", "--intervals", f.to_str().unwrap()]);
    assert!(assert_refused(&o, "BAD_INPUT").contains("expected"));
}
