//! The streaming `join` (the command) gives what the in-memory join (the
//! library's `join_dir`) gives, whatever the order a rank recorded its events
//! in; generated (`synth-shards`) runs join and are refused where
//! measurements are required.
mod common;
use commcanary::core::fsutil;
use commcanary::evidence::join;
use commcanary::evidence::shard::Shard;
use common::*;
use std::path::Path;

/// The in-memory join's outputs as the command prints them: `--json`'s summary and the joined trace.
fn in_memory(run: &Path) -> (String, String) {
    let j = join::join_dir(run).unwrap();
    let s = join::summarize(&j);
    let mut lines = String::new();
    for c in &j.collectives {
        lines.push_str(&serde_json::to_string(c).unwrap());
        lines.push('\n');
    }
    (serde_json::to_string_pretty(&s).unwrap() + "\n", lines)
}

/// The command's outputs (`join --json --events-out`) with `threads` reading threads.
fn streamed(run: &Path, events: &Path, threads: u32) -> (String, String) {
    let _ = std::fs::remove_file(events);
    let out = ok(&cc(&[
        "join",
        "--json",
        "--threads",
        &threads.to_string(),
        run.to_str().unwrap(),
        "--events-out",
        events.to_str().unwrap(),
    ]));
    (out, std::fs::read_to_string(events).unwrap())
}

fn without_shards(summary: &str) -> serde_json::Value {
    let mut v: serde_json::Value = serde_json::from_str(summary).unwrap();
    v.as_object_mut().unwrap().remove("shards");
    v
}

#[test]
fn the_streaming_join_equals_the_in_memory_join_even_for_a_rank_out_of_key_order() {
    let d = tempfile::tempdir().unwrap();
    // two phases and an arrival delay: warm-ups, several sizes, the delay control
    let run = run_rank(
        4,
        d.path(),
        &[
            "--phases",
            "blocking,async",
            "--tokens",
            "3",
            "--warmup-tokens",
            "1",
            "--model",
            "synthetic",
            "--layers",
            "3",
            "--inject-delay",
            "rank=1,every=2,us=50",
        ],
    );
    let before = digests(&run);
    let events = d.path().join("joined.jsonl");
    let (summary, lines) = in_memory(&run);
    assert!(lines.lines().count() > 10, "a join with collectives to compare");
    for threads in [1, 2, 3] {
        assert_eq!(streamed(&run, &events, threads), (summary.clone(), lines.clone()), "{threads} threads");
    }
    assert_eq!(digests(&run), before, "join modifies nothing");

    // rank 2's events recorded in reverse: not in key order, so the streaming
    // join keeps them decoded; the joined operations are the same
    let p = run.join("rank-00002.shard");
    let mut s = Shard::read(&p).unwrap();
    s.body.collectives.reverse();
    let bytes = s.encode().unwrap();
    std::fs::write(&p, &bytes).unwrap();
    let rj = run.join("run.json");
    let mut v: serde_json::Value = serde_json::from_slice(&std::fs::read(&rj).unwrap()).unwrap();
    v["shards"][2]["sha256"] = fsutil::sha256_hex(&bytes).into();
    v["shards"][2]["size_bytes"] = bytes.len().into();
    std::fs::write(&rj, serde_json::to_vec_pretty(&v).unwrap()).unwrap();
    let (summary2, lines2) = streamed(&run, &events, 2);
    assert_eq!(lines2, lines, "the same joined collectives, in the same order");
    assert_eq!(without_shards(&summary2), without_shards(&summary), "the same summary but for rank 2's digest");
    assert_eq!(in_memory(&run), (summary2, lines2));
}

#[test]
fn generated_runs_join_and_are_refused_where_measurements_are_required() {
    let d = tempfile::tempdir().unwrap();
    for (name, version) in [("v8", "8"), ("v7", "7"), ("v6", "6")] {
        let run = d.path().join(name);
        let o = ok(&cc(&[
            "synth-shards",
            "--ranks",
            "5",
            "--collectives",
            "30",
            "--format-version",
            version,
            "-o",
            run.to_str().unwrap(),
        ]));
        assert!(o.contains("5 SYNTHETIC shards"), "{o}");
        // the real writers: run.json lists every shard, each shard verifies
        let h = Shard::read(&run.join("rank-00003.shard")).unwrap().header;
        assert_eq!(h.format_version.to_string(), version);
        let mark = h.synthetic.expect("marked synthetic");
        assert!(mark.generator.starts_with("commcanary synth-shards"), "{}", mark.generator);
        let before = digests(&run);
        // join reads it (in memory and streaming alike)
        let events = d.path().join(format!("{name}.jsonl"));
        let (summary, lines) = in_memory(&run);
        assert_eq!(streamed(&run, &events, 2), (summary.clone(), lines.clone()));
        let s: serde_json::Value = serde_json::from_str(&summary).unwrap();
        assert_eq!((s["world_size"].as_u64(), s["collectives"].as_u64()), (Some(5), Some(30)));
        assert_eq!(phase(&s, "blocking")["collectives_per_rank"].as_u64(), Some(30));
        assert!(s["clocks"].as_array().unwrap().iter().all(|c| c["calibrated"] == true), "generated clock models");
        // stages that take measurements refuse it
        let err = assert_refused(&cc(&["summarize", &format!("a={}", run.display())]), "SYNTHETIC");
        assert!(
            err.contains("rank 0 shard is synthetic") && err.contains("summarize takes measured runs only"),
            "{err}"
        );
        assert_eq!(digests(&run), before, "nothing modified");
    }
    // an existing, non-empty output is refused, nothing written into it
    let o = cc(&["synth-shards", "--ranks", "2", "--collectives", "3", "-o", d.path().join("v7").to_str().unwrap()]);
    assert_refused(&o, "ALREADY_EXISTS");
}
