//! Source traces that lie about their own size: an execution trace whose
//! nodes are tiny but very many, or whose one node is huge, is bounded by its
//! structure (nodes counted before they are kept, only what import needs
//! kept), not only by its byte size. Every command runs under an
//! address-space limit, so a decoder that keeps what the input says
//! aborts instead of taking the machine's memory.
mod common;
use common::*;
use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

const FIXTURE: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/data/pytorch-2.11-tp2-h200");

/// `commcanary ARGS` under an address-space limit of `kib` KiB (`ulimit -v`).
fn cc_limited(kib: u64, args: &[&str]) -> Output {
    Command::new("bash")
        .arg("-c")
        .arg(format!("ulimit -v {kib}; exec \"$0\" \"$@\""))
        .arg(bin())
        .args(args)
        .output()
        .expect("bash runs")
}

fn fixture_json(rank: u32) -> String {
    let gz = std::fs::read(format!("{FIXTURE}/et.rank-{rank}.json.gz")).unwrap();
    let mut s = String::new();
    flate2::read::GzDecoder::new(&gz[..]).read_to_string(&mut s).unwrap();
    s
}

/// Rank 0's fixture with `n` nodes made by `node(i)` put in front of its own
/// nodes, written (gzip when `gz`) to `dir/name`.
fn with_extra_nodes(dir: &Path, name: &str, n: u64, gz: bool, node: &dyn Fn(u64) -> String) -> PathBuf {
    let json = fixture_json(0);
    let at = json.find("\"nodes\"").unwrap();
    let open = at + json[at..].find('[').unwrap() + 1;
    let p = dir.join(name);
    let f = std::io::BufWriter::new(std::fs::File::create(&p).unwrap());
    let mut w: Box<dyn Write> =
        if gz { Box::new(flate2::write::GzEncoder::new(f, flate2::Compression::fast())) } else { Box::new(f) };
    w.write_all(&json.as_bytes()[..open]).unwrap();
    for i in 0..n {
        w.write_all(node(i).as_bytes()).unwrap();
        w.write_all(b",").unwrap();
    }
    w.write_all(&json.as_bytes()[open..]).unwrap();
    w.flush().unwrap();
    drop(w);
    p
}

/// The text of the i-th extra node.
type NodeText = dyn Fn(u64) -> String;

fn rank1(dir: &Path) -> PathBuf {
    let p = dir.join("et.rank-1.json");
    std::fs::write(&p, fixture_json(1)).unwrap();
    p
}

fn s(p: &Path) -> &str {
    p.to_str().unwrap()
}

/// Nine million nodes, under the node limit: imported in a fraction of what
/// keeping every node whole took (the tip kept ~104 bytes per node and
/// aborted under this limit); ten million and one, in several node shapes,
/// are refused OVER_LIMIT before they are kept.
#[test]
fn an_execution_trace_of_very_many_tiny_nodes_is_bounded_by_its_node_count() {
    let t = tempfile::tempdir().unwrap();
    let r1 = rank1(t.path());
    // the clean import, for comparison
    let clean = t.path().join("et.rank-0.json");
    std::fs::write(&clean, fixture_json(0)).unwrap();
    let want = ok(&cc(&["import", "et", s(&clean), s(&r1), "-o", s(&t.path().join("clean.json"))]));
    // ids far past the fixture's, no parent: not compute, not communication
    let base = 1u64 << 40;
    let tiny = move |i: u64| format!("{{\"id\":{},\"name\":\"x\"}}", base + i);
    let p = with_extra_nodes(t.path(), "many.rank-0.json.gz", 9_000_000, true, &tiny);
    let o = cc_limited(1_400_000, &["import", "et", s(&p), s(&r1), "-o", s(&t.path().join("many.json"))]);
    let got = ok(&o);
    assert_eq!(got, want, "the extra nodes change nothing the import keeps");

    // past the limit, in three shapes: tiny, with attributes and inputs, chained under one another
    let shapes: [(&str, Box<NodeText>); 3] = [
        ("tiny", Box::new(tiny)),
        (
            "attrs",
            Box::new(move |i| {
                format!(
                    concat!(
                        "{{\"id\":{},\"name\":\"y\",\"attrs\":[{{\"name\":\"a\",\"value\":{}}}],",
                        "\"inputs\":{{\"values\":[[]]}}}}"
                    ),
                    base + i,
                    i % 10
                )
            }),
        ),
        ("chain", Box::new(move |i| format!("{{\"id\":{},\"name\":\"n\",\"ctrl_deps\":{}}}", base + i + 1, base + i))),
    ];
    for (name, node) in shapes.iter() {
        let p = with_extra_nodes(t.path(), &format!("{name}.rank-0.json"), 10_000_001, false, node.as_ref());
        // the text is in memory once, plus 32 bytes a node up to the limit
        let o =
            cc_limited(1_800_000, &["import", "et", s(&p), s(&r1), "-o", s(&t.path().join(format!("{name}.json")))]);
        let err = assert_refused(&o, "OVER_LIMIT");
        assert!(err.contains("more than 10000000 nodes"), "{name}: {err}");
        assert!(err.contains(s(&p)), "{name}: names the file: {err}");
        assert!(!t.path().join(format!("{name}.json")).exists(), "{name}: nothing written");
        std::fs::remove_file(&p).unwrap();
    }
}

/// One node whose inputs list millions of empty values: its text is over
/// the per-node limit and it is refused, naming the limit; a node just under
/// it that import never uses is skipped without being decoded into values.
#[test]
fn an_execution_trace_node_too_large_to_decode_is_refused() {
    let t = tempfile::tempdir().unwrap();
    let r1 = rank1(t.path());
    for (values, refused) in [(23_000_000u64, true), (20_000_000, false)] {
        let big = move |_| {
            let mut s = String::with_capacity(values as usize * 3 + 64);
            s.push_str("{\"id\":1099511627776,\"name\":\"aten::cat\",\"inputs\":{\"values\":[");
            for k in 0..values {
                if k > 0 {
                    s.push(',');
                }
                s.push_str("[]");
            }
            s.push_str("]}}");
            s
        };
        let p = with_extra_nodes(t.path(), &format!("big{values}.rank-0.json"), 1, false, &big);
        let o = cc_limited(
            1_400_000,
            &["import", "et", s(&p), s(&r1), "-o", s(&t.path().join(format!("big{values}.json")))],
        );
        if refused {
            let err = assert_refused(&o, "OVER_LIMIT");
            assert!(err.contains("over the limit of 67108864 bytes for one node"), "{err}");
        } else {
            ok(&o);
        }
    }
}

/// Generated shards (`synth-shards`, several sizes) stay generated through
/// `import run`: the trace is of source kind `synthetic` with an unknown
/// `measurement`, and a canary compiled from it says its origin is
/// synthetic, never a measured run.
#[test]
fn a_run_of_generated_shards_imports_as_synthetic() {
    let t = tempfile::tempdir().unwrap();
    for (ranks, collectives, seed) in [(2u32, 100u32, 1u32), (4, 10, 7), (3, 257, 3)] {
        let run = t.path().join(format!("fake-{ranks}-{collectives}"));
        ok(&cc(&[
            "synth-shards",
            "--ranks",
            &ranks.to_string(),
            "--collectives",
            &collectives.to_string(),
            "--seed",
            &seed.to_string(),
            "--threads",
            "1",
            "-o",
            s(&run),
        ]));
        let trace = t.path().join(format!("fake-{ranks}-{collectives}.json"));
        let o = cc(&["import", "run", s(&run), "-o", s(&trace)]);
        if !o.status.success() {
            // refusing generated shards outright is as good as marking them
            assert_refused(&o, "SYNTHETIC");
            continue;
        }
        let tr: serde_json::Value = serde_json::from_slice(&std::fs::read(&trace).unwrap()).unwrap();
        assert_eq!(tr["source"]["kind"], "synthetic", "{ranks}x{collectives}: {}", tr["source"]);
        assert!(tr["source"]["schema"].as_str().unwrap().contains("synthetic"), "{}", tr["source"]);
        assert!(tr["unknown"].as_array().unwrap().iter().any(|u| u["field"] == "measurement"), "{}", tr["unknown"]);
        let art = t.path().join(format!("fake-{ranks}-{collectives}.canary.json"));
        ok(&cc(&["canary", "compile", s(&trace), "-o", s(&art)]));
        let c: serde_json::Value = serde_json::from_slice(&std::fs::read(&art).unwrap()).unwrap();
        assert_eq!(c["source"]["origin"], "synthetic", "{}", c["source"]);
    }
}

/// `canary redact` builds its output by allow-list: a run's schema (its run
/// id: job id, user, host, start time), the reasons of unknowns and any
/// source name or version that is not a plain name are not copied; every
/// one is logged; times near 2^64 never wrap to 0 and trailing compute
/// durations are quantized. Variants: several planted secrets in every
/// free-text field of a trace, and several quantization steps.
#[test]
fn redaction_keeps_only_fields_known_safe() {
    let t = tempfile::tempdir().unwrap();
    let base = t.path().join("syn.json");
    ok(&cc(&["synth", "--events", "40", "--seed", "3", "--ranks", "2", "-o", s(&base)]));
    let secrets = ["slurm-987654-alice-gpu017", "20261205T061737Z-78382443", "bob@site.example", "/home/carol/job-55"];
    for (i, secret) in secrets.iter().enumerate() {
        let mut tr: serde_json::Value = serde_json::from_slice(&std::fs::read(&base).unwrap()).unwrap();
        tr["source"]["schema"] = format!("commcanary run {secret} phase blocking").into();
        tr["source"]["nccl_version"] = format!("2.21.5+{secret}").into();
        tr["unknown"] = serde_json::json!([{"field": "device", "reason": format!("measured on {secret}")}]);
        let big = u64::MAX - 3;
        for r in tr["ranks"].as_array_mut().unwrap() {
            r["collectives"][0]["source_name"] = format!("nccl:all_reduce {secret}").into();
            r["trailing_compute"] =
                serde_json::json!([{"name": "k", "stream": null, "device_start_ns": big, "duration_ns": 1_234_567}]);
        }
        let p = t.path().join(format!("t{i}.json"));
        std::fs::write(&p, serde_json::to_vec_pretty(&tr).unwrap()).unwrap();
        for q in [1000u64, 7, 1 << 20] {
            let out = t.path().join(format!("r{i}-{q}.json"));
            ok(&cc(&["canary", "redact", s(&p), "-o", s(&out), "--quantize-ns", &q.to_string()]));
            let text = std::fs::read_to_string(&out).unwrap();
            for part in secret.split(['-', '@', '/']).filter(|w| w.len() >= 4) {
                assert!(!text.contains(part), "{secret:?}: {part:?} survived redaction");
            }
            let red: serde_json::Value = serde_json::from_str(&text).unwrap();
            assert!(red["source"]["schema"].is_null(), "{}", red["source"]);
            for r in red["ranks"].as_array().unwrap() {
                let k = &r["trailing_compute"][0];
                assert_eq!(
                    k["duration_ns"].as_u64().unwrap() % q,
                    0,
                    "trailing compute duration quantized to {q}: {k}"
                );
                assert_ne!(k["device_start_ns"].as_u64(), Some(0), "a time near 2^64 did not wrap to 0: {k}");
            }
            let audit: serde_json::Value =
                serde_json::from_slice(&std::fs::read(format!("{}.audit.json", out.display())).unwrap()).unwrap();
            let fields: Vec<&str> =
                audit["transforms"].as_array().unwrap().iter().map(|x| x["field"].as_str().unwrap()).collect();
            for f in ["source.schema", "source.nccl_version", "unknown[].reason", "collectives[].source_name"] {
                assert!(fields.contains(&f), "the audit log lists {f}: {fields:?}");
            }
        }
    }
}
