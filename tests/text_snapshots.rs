//! The printed tables as committed snapshots (`tests/snapshots/`): a change
//! to what a user reads is a reviewed diff. Inputs are generated here from a
//! seed (synthetic shards, marked so in their headers), so the text depends
//! on the code alone; the run id, new per run, is replaced before rendering.
//! After an intended change: `cargo insta review` (or set `INSTA_UPDATE=always`
//! and inspect the diff of the `.snap` files).
use commcanary::evidence::{join, shard, synth_shards};

fn synthetic_summary(ranks: u32, collectives: u64, seed: u64) -> join::JoinSummary {
    let d = tempfile::tempdir().unwrap();
    let run = d.path().join("run");
    synth_shards::write_run(&run, ranks, collectives, seed, 1, shard::SHARD_FORMAT_VERSION).unwrap();
    let mut s = join::join_summary_streaming(&run, 1, None).unwrap();
    s.run_id = "RUN-ID".into();
    s
}

#[test]
fn join_summary_of_a_seeded_synthetic_run() {
    insta::assert_snapshot!(join::render_summary(&synthetic_summary(4, 200, 7)));
}

#[test]
fn join_summary_of_one_rank() {
    insta::assert_snapshot!(join::render_summary(&synthetic_summary(1, 30, 11)));
}

/// The isolated phase's table, as `rank` prints it after an nccl-tests-style
/// sweep: a checked all-gather on device events and an unchecked host-timed
/// row without the sweep's columns (a shard older than them).
#[test]
fn isolated_sweep_table() {
    let rows: Vec<join::IsolatedSizeRow> = serde_json::from_value(serde_json::json!([
        {"bytes": 1024, "iterations": 20, "time_us": 12.5, "algbw_gbps": 0.08192, "busbw_gbps": 0.06144,
         "wrong_elements": 0,
         "p50_us": 12.25, "p99_us": 19.0, "source": "device-events", "count": 64, "dtype": "f32", "redop": "none",
         "collective": "all_gather", "root": null},
        {"bytes": 1048576, "iterations": 20, "time_us": 410.0, "algbw_gbps": 2.557, "busbw_gbps": 1.918,
         "wrong_elements": null,
         "p50_us": 405.5, "p99_us": 512.75, "source": "host-issue-to-wait-return"}
    ]))
    .unwrap();
    insta::assert_snapshot!(join::render_isolated(&rows));
}

fn demo_report() -> commcanary::analysis::Report {
    let p = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/reports/demo-loaded.report.json");
    serde_json::from_slice(&std::fs::read(&p).unwrap()).unwrap()
}

/// The campaign report's whole text (`campaign analyze -v`), rendered from a
/// committed report (the README demo on a loaded machine, `tests/data/reports/`):
/// decisions, intervals, controls and the levels they were judged at.
#[test]
fn campaign_report_text_of_a_committed_report() {
    insta::assert_snapshot!(commcanary::analysis::render(&demo_report()));
}

/// The short answer of the same report (`campaign analyze`): the pick, each
/// phase's order, the proxies, the controls counted per kind, the canary.
#[test]
fn campaign_report_short_answer_of_a_committed_report() {
    let text = commcanary::analysis::render_short(&demo_report());
    assert!(text.lines().count() <= 15, "the short answer is at most 15 lines:\n{text}");
    insta::assert_snapshot!(text);
}

/// `campaign analyze --csv`: one row per phase and configuration, the same numbers as the table.
#[test]
fn campaign_report_ranking_as_csv() {
    let r = demo_report();
    let csv = commcanary::analysis::ranking_csv(&r).unwrap();
    let mut rd = csv::Reader::from_reader(csv.as_bytes());
    let rows: Vec<csv::StringRecord> = rd.records().map(Result::unwrap).collect();
    assert_eq!(rows.len(), r.phases.iter().map(|p| p.rows.len()).sum::<usize>());
    let blocking_first = rows.iter().find(|x| &x[0] == "blocking" && &x[1] == "1").unwrap();
    assert_eq!(&blocking_first[2], "nbc-binomial");
    assert_eq!(&blocking_first[9], "nbc-ring-again;nbc-ring;nbc-ring-delayed");
}
