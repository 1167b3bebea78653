//! Hierarchical clock calibration (issue 27 item 3) on real mpirun: 4 ranks
//! on this one host made to record two host names through the test hook
//! `COMMCANARY_TEST_HOST` (ranks 0–1 "node-a", 2–3 "node-b"), so node
//! membership, leaders and the composed models are exercised without a
//! second machine. Nothing here judges timing.
mod common;
use commcanary::core::clock::{self, ClockModel, WindowEstimate};
use commcanary::core::identity;
use commcanary::evidence::shard::{shard_file_name, Shard};
use common::*;
use std::path::{Path, PathBuf};

/// One run of 2 + 2 ranks on "node-a" and "node-b" with `extra` arguments.
fn two_nodes(out: &Path, extra: &[&str]) -> PathBuf {
    let out_s = out.to_str().unwrap();
    let mut args = vec![
        "rank",
        "-q",
        "--backend",
        "cpu",
        "--phases",
        "blocking",
        "--tokens",
        "4",
        "--model",
        "synthetic",
        "--layers",
        "2",
        "--run-id",
        "r",
        "--out",
        out_s,
    ];
    args.extend_from_slice(extra);
    ok(&mpirun_contexts(&[
        (2, &[("COMMCANARY_TEST_HOST", "node-a")], &args),
        (2, &[("COMMCANARY_TEST_HOST", "node-b")], &args),
    ]));
    out.join("r")
}

fn shards(run: &Path) -> Vec<Shard> {
    (0..4)
        .map(|r| {
            let f = run.join(shard_file_name(r));
            Shard::decode(&std::fs::read(&f).unwrap(), &f.display().to_string()).unwrap()
        })
        .collect()
}

/// Equal but for the last bits of a float: the leader's model reaches its
/// ranks and the shard headers through JSON, whose decimal text need not
/// parse back to the very same f64 (serde_json's default float parser).
fn assert_models_equal(a: &ClockModel, b: &ClockModel, what: &str) {
    let close = |x: f64, y: f64| (x - y).abs() <= 1e-9 * x.abs().max(y.abs()).max(1.0);
    let opt = |x: Option<f64>, y: Option<f64>| match (x, y) {
        (Some(x), Some(y)) => close(x, y),
        (None, None) => true,
        _ => false,
    };
    let win = |x: &WindowEstimate, y: &WindowEstimate| {
        x.ref_ns == y.ref_ns
            && x.min_rtt_ns == y.min_rtt_ns
            && x.samples == y.samples
            && close(x.offset_ns, y.offset_ns)
            && close(x.bound_ns, y.bound_ns)
    };
    let ends = match (&a.end, &b.end) {
        (Some(x), Some(y)) => win(x, y),
        (None, None) => true,
        _ => false,
    };
    let same = win(&a.start, &b.start)
        && ends
        && opt(a.drift_ppm, b.drift_ppm)
        && opt(a.drift_bound_ppm, b.drift_bound_ppm)
        && close(a.bound_ns, b.bound_ns)
        && a.shared_kernel_clock == b.shared_kernel_clock;
    assert!(same, "{what}:\n{a:?}\n{b:?}");
}

#[test]
fn two_hosts_calibrate_through_their_leaders_and_join_shows_the_path() {
    let d = tempfile::tempdir().unwrap();
    // ping-pong forced: every leg is an estimate, none the shared kernel clock
    let run = two_nodes(d.path(), &["--clock", "pingpong-only"]);
    let sh = shards(&run);
    let paths: Vec<_> =
        sh.iter().map(|s| serde_json::to_value(s.header.clock.as_ref().unwrap().path).unwrap()).collect();
    assert_eq!(paths, ["reference", "direct", "direct", "via_leader"]);
    for s in &sh {
        let c = s.header.clock.as_ref().unwrap();
        assert_eq!(serde_json::to_value(c.sync).unwrap(), "hierarchical");
        assert_eq!(c.leader, Some(if s.header.rank < 2 { 0 } else { 2 }), "rank {}", s.header.rank);
        assert!(c.start_window_wall_ns.unwrap() > 0 && c.end_window_wall_ns.unwrap() > 0);
    }
    // rank 3: its leg against rank 2 composed with rank 2's model against rank 0
    let c3 = sh[3].header.clock.as_ref().unwrap();
    let (leg, lead) = (c3.leader_fit.unwrap(), c3.leader_model.unwrap());
    assert_models_equal(
        &lead,
        &sh[2].header.clock.as_ref().unwrap().model,
        "the leader's model as the leader fitted it",
    );
    assert!(c3.model.bound_ns >= leg.bound_ns + lead.bound_ns && leg.bound_ns > 0.0 && lead.bound_ns > 0.0);
    assert_models_equal(&c3.model, &clock::compose(&leg, &lead).unwrap(), "rank 3's model, composed");
    assert!(c3.end_samples.iter().all(|p| p.t_ref_ns > 0));
    for r in [1, 2] {
        let c = sh[r].header.clock.as_ref().unwrap();
        assert!(c.leader_fit.is_none() && c.leader_model.is_none(), "rank {r} is direct");
    }
    // join: per rank and per node
    let s = join_json(&run);
    assert_eq!(s["clock_sync"], "hierarchical");
    assert!(s["calibration_wall_ns"].as_u64().unwrap() > 0);
    let c = &s["clocks"][3];
    assert_eq!((&c["path"], &c["leader"]), (&serde_json::json!("via_leader"), &serde_json::json!(2)), "{c}");
    assert!((c["leader_leg_bound_us"].as_f64().unwrap() - leg.bound_ns / 1e3).abs() < 1e-9);
    assert!((c["leader_bound_us"].as_f64().unwrap() - lead.bound_ns / 1e3).abs() < 1e-9);
    assert!((c["bound_us"].as_f64().unwrap() - c3.model.bound_ns / 1e3).abs() < 1e-9);
    assert_eq!(c["offset_within_bound"], true, "{c}");
    assert_eq!(s["clocks"][1]["path"], "direct");
    let nodes = s["nodes"].as_array().unwrap();
    assert_eq!(nodes.len(), 2);
    assert_eq!((&nodes[1]["host"], &nodes[1]["leader"]), (&serde_json::json!("node-b"), &serde_json::json!(2)));
    let text = ok(&cc(&["join", run.to_str().unwrap()]));
    assert!(text.contains("calibration hierarchical:"), "{text}");
    assert!(text.lines().any(|l| l.contains("rank   3 node-b") && l.contains("via leader 2")), "{text}");
}

#[test]
fn a_whole_node_offset_is_covered_by_the_composed_bound() {
    let d = tempfile::tempdir().unwrap();
    let inj = "offset_us=2000,drift_ppm=30";
    let (a, b) = (format!("rank=2,{inj}"), format!("rank=3,{inj}"));
    let run = two_nodes(d.path(), &["--inject-clock", &a, "--inject-clock", &b]);
    let s = join_json(&run);
    for c in s["clocks"].as_array().unwrap() {
        assert_eq!(c["offset_within_bound"], true, "{c}");
        assert_eq!(c["drift_within_bound"], true, "{c}");
    }
    let c = &s["clocks"][3];
    assert_eq!(c["path"], "via_leader");
    let (est, truth, bound) =
        (c["offset_us"].as_f64().unwrap(), c["injected_offset_us"].as_f64().unwrap(), c["bound_us"].as_f64().unwrap());
    assert!((2000.0..2100.0).contains(&truth), "{c}");
    assert!((est - truth).abs() <= bound + 0.004, "{c}");
    assert!(c["shared_kernel_clock_refused"].as_str().unwrap().contains("against leader rank 2"), "{c}");
    // node-a still reads rank 0's kernel clock, where the boot id is readable
    if identity::kernel_clock_id().is_some() {
        assert_eq!(s["clocks"][1]["shared_kernel_clock"], true);
    }
}

#[test]
fn flat_calibration_stays_available_and_is_recorded_as_such() {
    let d = tempfile::tempdir().unwrap();
    let run = two_nodes(d.path(), &["--clock-sync", "flat"]);
    for s in shards(&run) {
        let c = s.header.clock.as_ref().unwrap();
        assert_eq!(serde_json::to_value(c.sync).unwrap(), "flat");
        assert_eq!(c.leader, None);
        assert!(c.leader_fit.is_none());
        let want = if s.header.rank == 0 { "reference" } else { "direct" };
        assert_eq!(serde_json::to_value(c.path).unwrap(), want);
    }
    assert_eq!(join_json(&run)["clock_sync"], "flat");
}

#[test]
fn ranks_sharing_their_leaders_kernel_clock_take_it_without_a_ping_pong() {
    if identity::kernel_clock_id().is_none() {
        eprintln!(
            "SKIPPED: this host's boot id or time namespace cannot be read, so no rank may take a shared kernel clock"
        );
        return;
    }
    let d = tempfile::tempdir().unwrap();
    // default --clock pingpong: one kernel, no injection
    let run = two_nodes(d.path(), &["--clock-samples", "50"]);
    let sh = shards(&run);
    let c: Vec<_> = sh.iter().map(|s| s.header.clock.clone().unwrap()).collect();
    // the leaders ping-pong rank 0; the other ranks of each node read its clock
    assert_eq!(c[2].start_samples.len(), 50, "leader rank 2 ping-pongs rank 0");
    assert_eq!(c[2].end_samples.len(), 50);
    assert!(c[2].model.shared_kernel_clock && c[2].pingpong_fit.is_some(), "{:?}", c[2]);
    for r in [1, 3] {
        assert!(c[r].start_samples.is_empty() && c[r].end_samples.is_empty(), "rank {r} ran no ping-pong");
        assert!(
            c[r].model.shared_kernel_clock && c[r].model.bound_ns == 0.0 && c[r].model.start.offset_ns == 0.0,
            "rank {r}: {:?}",
            c[r].model
        );
        assert_eq!(c[r].shared_kernel_clock_refused, None, "rank {r}");
    }
    // rank 1 is on rank 0's node: rank 0's clock directly, no samples and no ping-pong fit
    assert_eq!(serde_json::to_value(c[1].path).unwrap(), "direct");
    assert_eq!((c[1].model.start.samples, c[1].pingpong_fit), (0, None));
    // rank 3 composes its exact leg with its leader's model
    assert_eq!(serde_json::to_value(c[3].path).unwrap(), "via_leader");
    let leg = c[3].leader_fit.unwrap();
    assert!(leg.shared_kernel_clock && leg.bound_ns == 0.0 && leg.start.samples == 0, "{leg:?}");
    assert!(leg.end.unwrap().ref_ns > leg.start.ref_ns);
    assert_models_equal(&c[3].leader_model.unwrap(), &c[2].model, "the leader's model as the leader fitted it");
    // the evidence rank 3 keeps is its leader's ping-pong, through the exact leg
    let measured = c[3].pingpong_fit.expect("the leader's ping-pong fit, composed");
    assert_eq!(measured.start.samples, 50);
    let s = join_json(&run);
    for c in s["clocks"].as_array().unwrap() {
        assert_eq!(c["offset_within_bound"], true, "{c}");
    }
    assert!(s["nodes"].as_array().unwrap().iter().all(|n| n["consistent"] != false), "{}", s["nodes"]);
    // no ping-pong ran for rank 1: join shows no ping-pong estimate and says so
    assert!(s["clocks"][1]["pingpong_offset_us"].is_null(), "{}", s["clocks"][1]);
    assert!(
        s["clocks"][3]["pingpong_offset_us"].is_number(),
        "rank 3 keeps its leader's ping-pong: {}",
        s["clocks"][3]
    );
    let text = ok(&cc(&["join", run.to_str().unwrap()]));
    assert!(text.lines().any(|l| l.contains("rank   1 node-a") && l.contains("taken without a ping-pong")), "{text}");
}

#[test]
fn pingpong_only_still_ping_pongs_every_rank_against_its_leader() {
    let d = tempfile::tempdir().unwrap();
    let run = two_nodes(d.path(), &["--clock", "pingpong-only", "--clock-samples", "20"]);
    for s in shards(&run).iter().skip(1) {
        let c = s.header.clock.as_ref().unwrap();
        assert_eq!((c.start_samples.len(), c.end_samples.len()), (20, 20), "rank {}", s.header.rank);
        assert!(!c.model.shared_kernel_clock);
    }
}
