//! `join` refuses every corruption, naming the fault, and never touches the files.
mod common;
use commcanary::core::fsutil;
use commcanary::evidence::shard::{self, Shard, TraceOrigin};
use common::*;
use std::path::{Path, PathBuf};

fn fresh_run(d: &Path) -> PathBuf {
    run_rank(4, d, &["--phases", "blocking", "--tokens", "4", "--model", "synthetic", "--layers", "4"])
}

fn join_fails(run: &Path, code: &str, needle: &str) {
    let before = digests(run);
    let o = cc(&["join", run.to_str().unwrap()]);
    let err = assert_refused(&o, code);
    assert!(err.contains(needle), "expected {needle:?} in: {err}");
    assert_eq!(digests(run), before, "join must not modify anything");
}

/// Rewrite run.json's digest for `rank` so only the deeper check can catch the fault.
fn rebind_digest(run: &Path, rank: u32, bytes: &[u8]) {
    let p = run.join("run.json");
    let mut v: serde_json::Value = serde_json::from_slice(&std::fs::read(&p).unwrap()).unwrap();
    v["shards"][rank as usize]["sha256"] = fsutil::sha256_hex(bytes).into();
    std::fs::write(&p, serde_json::to_vec_pretty(&v).unwrap()).unwrap();
}

#[test]
fn refusals() {
    let d = tempfile::tempdir().unwrap();
    let base = fresh_run(d.path());
    ok(&cc(&["join", base.to_str().unwrap()]));
    let copy = |name: &str| {
        let to = d.path().join(name);
        std::fs::create_dir(&to).unwrap();
        for e in std::fs::read_dir(&base).unwrap() {
            let e = e.unwrap();
            std::fs::copy(e.path(), to.join(e.file_name())).unwrap();
        }
        to
    };

    // missing rank shard
    let r = copy("missing");
    std::fs::remove_file(r.join("rank-00002.shard")).unwrap();
    join_fails(&r, "MISSING_RANK", "rank 2 shard missing");

    // flipped byte in the body
    let r = copy("flipped");
    let p = r.join("rank-00001.shard");
    let mut b = std::fs::read(&p).unwrap();
    let i = b.len() - 200;
    b[i] ^= 0x01;
    std::fs::write(&p, &b).unwrap();
    join_fails(&r, "DIGEST_MISMATCH", "SHA-256 mismatch");

    // truncated
    let r = copy("truncated");
    let p = r.join("rank-00003.shard");
    let b = std::fs::read(&p).unwrap();
    std::fs::write(&p, &b[..b.len() / 2]).unwrap();
    join_fails(&r, "TRUNCATED", "truncated");

    // duplicated shard (same rank under two names)
    let r = copy("duplicated");
    std::fs::copy(r.join("rank-00001.shard"), r.join("rank-00001-copy.shard")).unwrap();
    join_fails(&r, "DUPLICATE_RANK", "duplicate shards for rank 1");

    // an event present on some ranks only (shard re-sealed with a valid hash)
    let r = copy("unmatched");
    let p = r.join("rank-00002.shard");
    let mut s = Shard::read(&p).unwrap();
    let removed = s.body.collectives.remove(5);
    let bytes = s.encode().unwrap();
    std::fs::write(&p, &bytes).unwrap();
    rebind_digest(&r, 2, &bytes);
    join_fails(
        &r,
        "UNMATCHED_EVENT",
        &format!(
            "group 0 seq {} (blocking, {} bytes) is on ranks [0, 1, 3] but missing on ranks [2]",
            removed.seq, removed.bytes
        ),
    );

    // size mismatch between ranks
    let r = copy("size");
    let p = r.join("rank-00001.shard");
    let mut s = Shard::read(&p).unwrap();
    s.body.collectives[7].bytes *= 2;
    let seq = s.body.collectives[7].seq;
    let bytes = s.encode().unwrap();
    std::fs::write(&p, &bytes).unwrap();
    rebind_digest(&r, 1, &bytes);
    join_fails(&r, "IDENTITY_MISMATCH", &format!("identity mismatch at group 0 seq {seq}"));

    // a validly sealed shard that is not the one run.json recorded
    let r = copy("stale");
    let p = r.join("rank-00000.shard");
    let mut s = Shard::read(&p).unwrap();
    s.body.collectives[0].wait_end_ns += 1;
    std::fs::write(&p, s.encode().unwrap()).unwrap();
    join_fails(&r, "STALE", "stale or replaced");

    // run.json missing
    let r = copy("norun");
    std::fs::remove_file(r.join("run.json")).unwrap();
    join_fails(&r, "NO_SUCH_INPUT", "run.json: missing");

    // the original is still fine
    ok(&cc(&["join", base.to_str().unwrap()]));
}

#[test]
fn inspect_prints_shards_and_records_and_refuses_garbage() {
    let d = tempfile::tempdir().unwrap();
    let run =
        run_rank(2, d.path(), &["--phases", "blocking", "--tokens", "2", "--model", "synthetic", "--layers", "2"]);
    let v: serde_json::Value =
        serde_json::from_str(&ok(&cc(&["inspect", run.join("rank-00001.shard").to_str().unwrap()]))).unwrap();
    assert_eq!(v["header"]["rank"], 1);
    assert!(v["body"]["collectives"].as_array().unwrap().len() >= 4);
    let v: serde_json::Value =
        serde_json::from_str(&ok(&cc(&["inspect", run.join("run.json").to_str().unwrap()]))).unwrap();
    assert_eq!(v["world_size"], 2);
    let g = d.path().join("garbage.bin");
    std::fs::write(&g, b"\x00\x01nope").unwrap();
    let o = cc(&["inspect", g.to_str().unwrap()]);
    assert!(assert_refused(&o, "BAD_FORMAT").contains("neither a CommCanary shard nor a JSON record"));
}

/// A run written before shard format 6 (format 5: all-reduces only, no
/// root, peer or per-kind counts) still verifies, joins and inspects.
#[test]
fn a_format_5_run_still_joins() {
    let run = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/shard-v5");
    let text = ok(&cc(&["join", run.to_str().unwrap()]));
    assert!(text.contains("2 ranks, 32 joined collectives, every shard hash verified"), "{text}");
    for r in 0..2 {
        let s = Shard::read(&run.join(format!("rank-0000{r}.shard"))).unwrap();
        assert_eq!(s.header.format_version, 5);
        assert_eq!(s.body.collectives.len(), 32);
        assert!(s
            .body
            .collectives
            .iter()
            .all(|e| e.kind == shard::CollectiveKind::AllReduce && e.root.is_none() && e.peer.is_none()));
        match &s.header.phases[0].trace {
            Some(TraceOrigin::Imported { collectives_per_pass, left_out_per_pass, kinds, .. }) => {
                assert_eq!((*collectives_per_pass, *left_out_per_pass, kinds.len()), (32, 5, 0));
            }
            other => panic!("{other:?}"),
        }
    }
}
