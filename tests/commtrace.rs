//! `import kineto|et` and `export param|et` on the real PyTorch 2.11 fixture,
//! and every refusal on a damaged copy of it.
mod common;
use commcanary::backend::cuda;
use commcanary::core::fsutil;
use commcanary::evidence::shard::{self, CollectiveEvent, Shard};
use common::*;
use serde_json::Value;
use std::io::{Read, Write};
use std::path::{Path, PathBuf};

const FIXTURE: &str = "tests/data/pytorch-2.11-tp2-h200";

fn fixture_path(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join(FIXTURE).join(name)
}

/// A fixture file, decompressed and parsed.
fn fixture(name: &str) -> Value {
    let raw = std::fs::read(fixture_path(name)).unwrap();
    let mut json = Vec::new();
    flate2::read::GzDecoder::new(&raw[..]).read_to_end(&mut json).unwrap();
    serde_json::from_slice(&json).unwrap()
}

/// Write a (damaged) copy as plain JSON.
fn write(dir: &Path, name: &str, v: &Value) -> PathBuf {
    let p = dir.join(name);
    std::fs::write(&p, serde_json::to_vec(v).unwrap()).unwrap();
    p
}

fn s(p: &Path) -> &str {
    p.to_str().unwrap()
}

fn import(kind: &str, files: &[&Path], out: &Path) -> std::process::Output {
    let mut args = vec!["import", kind];
    args.extend(files.iter().map(|p| s(p)));
    args.extend(["-o", s(out)]);
    cc(&args)
}

fn import_ok(kind: &str, files: &[&Path], out: &Path) -> Value {
    ok(&import(kind, files, out));
    serde_json::from_slice(&std::fs::read(out).unwrap()).unwrap()
}

/// Refused, with every piece of `want` in the error, and nothing written.
fn refused(kind: &str, files: &[&Path], dir: &Path, want: &[&str]) {
    let out = dir.join(format!("refused-{}.json", want[0].len()));
    let o = import(kind, files, &out);
    let err = assert_refused(&o, "BAD_INPUT");
    for w in want {
        assert!(err.contains(w), "error lacks {w:?}:\n{err}");
    }
    assert!(!out.exists(), "a refused import wrote {}", out.display());
}

fn fixture_files(kind: &str) -> Vec<PathBuf> {
    (0..2).map(|r| fixture_path(&format!("{kind}.rank-{r}.json.gz"))).collect()
}

/// (kind, group, dtype, in elements, out elements, root, p2p peer) of one collective.
type CollectiveShape = (String, String, String, u64, u64, Option<u64>, Option<u64>);

/// Per rank: (kind, group, dtype, in, out) of every collective, and the p2p peers.
fn shape(t: &Value, rank: usize) -> Vec<CollectiveShape> {
    t["ranks"][rank]["collectives"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| {
            (
                c["kind"].as_str().unwrap().to_string(),
                c["group"].as_str().unwrap().to_string(),
                c["dtype"].as_str().unwrap().to_string(),
                c["in_elems"].as_u64().unwrap(),
                c["out_elems"].as_u64().unwrap(),
                c["root"].as_u64(),
                c["peer"].as_u64(),
            )
        })
        .collect()
}

fn count(t: &Value, rank: usize, kind: &str) -> usize {
    shape(t, rank).iter().filter(|c| c.0 == kind).count()
}

#[test]
fn fixture_imports_with_the_recorded_collectives() {
    let d = tempfile::tempdir().unwrap();
    let files = fixture_files("kineto");
    let t = import_ok("kineto", &[&files[1], &files[0]], &d.path().join("k.json"));
    assert_eq!(t["world_size"], 2);
    assert_eq!(t["source"]["nccl_version"], "2.28.9");
    assert_eq!(t["clock"]["aligned_across_ranks"], false);
    assert!(t["unknown"].as_array().unwrap().iter().any(|u| u["field"] == "cross-rank time alignment"));
    for rank in 0..2 {
        let sh = shape(&t, rank);
        let ar: Vec<_> = sh.iter().filter(|c| c.0 == "all_reduce").collect();
        assert_eq!(ar.len(), 32, "rank {rank}");
        assert!(ar.iter().all(|c| c.1 == "1" && c.2 == "bf16" && c.3 == 32768 && c.4 == 32768), "rank {rank}: {ar:?}");
        for k in ["all_gather", "reduce_scatter", "broadcast", "all_to_all"] {
            assert_eq!(count(&t, rank, k), 1, "rank {rank} {k}");
        }
        let rs = sh.iter().find(|c| c.0 == "reduce_scatter").unwrap();
        assert_eq!((rs.2.as_str(), rs.3, rs.4), ("f32", 2097152, 1048576));
        assert_eq!(sh.iter().find(|c| c.0 == "broadcast").unwrap().5, Some(0), "broadcast root");
        // Every collective has its NCCL kernel and stream from Kineto; compute between them has durations.
        for c in t["ranks"][rank]["collectives"].as_array().unwrap() {
            assert!(c["device"]["kernel"].as_str().unwrap().starts_with("ncclDevKernel_"), "{c}");
            assert!(c["stream"].is_u64() && c["host_start_ns"].is_u64());
            for op in c["compute_before"].as_array().unwrap() {
                assert!(op["duration_ns"].as_u64().unwrap() > 0, "{op}");
            }
        }
        let gemms = t["ranks"][rank]["collectives"][1]["compute_before"].as_array().unwrap();
        assert!(gemms.iter().any(|op| op["name"].as_str().unwrap().starts_with("nvjet_")), "{gemms:?}");
    }
    assert_eq!((count(&t, 0, "send"), count(&t, 0, "recv")), (1, 0));
    assert_eq!((count(&t, 1, "send"), count(&t, 1, "recv")), (0, 1));
    assert_eq!(shape(&t, 0).iter().find(|c| c.0 == "send").unwrap().6, Some(1));
    assert_eq!(shape(&t, 1).iter().find(|c| c.0 == "recv").unwrap().6, Some(0));
    // The first all-reduce on rank 0 really waited ~0.5 s for the other profiler: kept as recorded.
    let first = &t["ranks"][0]["collectives"][0]["device"];
    assert!(first["end_ns"].as_u64().unwrap() - first["start_ns"].as_u64().unwrap() > 400_000_000);
    // The groups every collective references are described, with global members.
    let groups = t["groups"].as_array().unwrap();
    assert!(groups.iter().any(|g| g["name"] == "1" && g["members"] == serde_json::json!([0, 1])));

    // The execution trace of the same run gives the same communication, without times.
    let e =
        import_ok("et", &fixture_files("et").iter().map(|p| p.as_path()).collect::<Vec<_>>(), &d.path().join("e.json"));
    for rank in 0..2 {
        assert_eq!(shape(&e, rank), shape(&t, rank), "rank {rank}: ET and Kineto disagree");
        for c in e["ranks"][rank]["collectives"].as_array().unwrap() {
            assert!(c["host_start_ns"].is_null() && c["device"].is_null() && c["stream"].is_null(), "{c}");
        }
    }
    let unknown: Vec<&str> = e["unknown"].as_array().unwrap().iter().map(|u| u["field"].as_str().unwrap()).collect();
    assert!(unknown.contains(&"host_start_ns") && unknown.contains(&"device"), "{unknown:?}");
    assert_eq!(e["clock"]["domain"], "none");
    // Never overwritten.
    let again = import("kineto", &[&files[0], &files[1]], &d.path().join("k.json"));
    assert!(assert_refused(&again, "ALREADY_EXISTS").contains("already exists"));
}

/// Communication fields of every collective (everything but times and compute).
fn comm_fields(t: &Value) -> Vec<Value> {
    t["ranks"]
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|r| {
            r["collectives"].as_array().unwrap().iter().map(move |c| {
                let mut c = c.clone();
                let m = c.as_object_mut().unwrap();
                for k in ["host_start_ns", "host_duration_ns", "device", "compute_before"] {
                    m.remove(k);
                }
                m.insert("rank".into(), r["rank"].clone());
                c
            })
        })
        .collect()
}

#[test]
fn et_export_round_trips_every_communication_field() {
    let d = tempfile::tempdir().unwrap();
    let files = fixture_files("kineto");
    let k = d.path().join("k.json");
    let t = import_ok("kineto", &[&files[0], &files[1]], &k);
    let dir = d.path().join("et");
    ok(&cc(&["export", "et", s(&k), "-o", s(&dir)]));
    let exported: Vec<PathBuf> = (0..2).map(|r| dir.join(format!("rank-{r}.json"))).collect();
    let back = import_ok("et", &[&exported[0], &exported[1]], &d.path().join("back.json"));
    assert_eq!(comm_fields(&back), comm_fields(&t));
    assert_eq!(back["groups"], t["groups"]);
    // A hand-made all-to-all-v with uneven splits on a non-strided subgroup ([1, 0]) survives too.
    let mut v = t.clone();
    v["groups"].as_array_mut().unwrap().push(serde_json::json!({"name": "ep", "desc": null, "members": [1, 0]}));
    for (r, (ins, outs)) in [(vec![3u64, 5], vec![3u64, 7]), (vec![7u64, 1], vec![5u64, 1])].into_iter().enumerate() {
        let colls = v["ranks"][r]["collectives"].as_array_mut().unwrap();
        let mut a2a = colls.iter().find(|c| c["kind"] == "all_to_all").unwrap().clone();
        a2a["group"] = "ep".into();
        a2a["seq"] = 0.into();
        a2a["in_elems"] = ins.iter().sum::<u64>().into();
        a2a["out_elems"] = outs.iter().sum::<u64>().into();
        a2a["in_split_elems"] = serde_json::json!(ins);
        a2a["out_split_elems"] = serde_json::json!(outs);
        colls.push(a2a);
    }
    // Group-local order is [1, 0]. What local i sends local j (in_split_i[j]) must be what
    // j expects from i (out_split_j[i]); the splits above break that and are refused.
    let v_path = write(d.path(), "v.json", &v);
    let check = cc(&["export", "et", s(&v_path), "-o", s(&d.path().join("v-et"))]);
    let text = assert_refused(&check, "BAD_INPUT");
    assert!(text.contains("all-to-all") && text.contains("disagree"), "{text}");
    // Rank 0 is local 1, rank 1 is local 0: consistent uneven splits.
    for (r, (ins, outs)) in [(vec![3u64, 5], vec![3u64, 5]), (vec![7u64, 3], vec![7u64, 3])].into_iter().enumerate() {
        let a2a = v["ranks"][r]["collectives"].as_array_mut().unwrap().last_mut().unwrap();
        a2a["in_split_elems"] = serde_json::json!(ins);
        a2a["out_split_elems"] = serde_json::json!(outs);
        a2a["in_elems"] = ins.iter().sum::<u64>().into();
        a2a["out_elems"] = outs.iter().sum::<u64>().into();
    }
    let v_path = write(d.path(), "v2.json", &v);
    let vdir = d.path().join("v2-et");
    ok(&cc(&["export", "et", s(&v_path), "-o", s(&vdir)]));
    let vf: Vec<PathBuf> = (0..2).map(|r| vdir.join(format!("rank-{r}.json"))).collect();
    let vback = import_ok("et", &[&vf[0], &vf[1]], &d.path().join("v2-back.json"));
    assert_eq!(comm_fields(&vback), comm_fields(&v));
}

/// Adding a collective kind is one row of the kind table and one arm per
/// backend: every row is read by the import under its PyTorch name, leaves
/// through both exports and reads back, and replays checked on the CPU
/// backend (`tests/gpu_cuda.rs` walks the table on the CUDA backend; the
/// size sweep's kinds are the rows with a bus-bandwidth factor, checked in
/// `core::workload`'s tests).
#[test]
fn every_kind_of_the_table_imports_exports_and_replays_checked_on_cpu() {
    use commcanary::core::collective::{classify_name, KINDS};
    for row in &KINDS {
        assert_eq!(
            classify_name(row.pytorch).unwrap(),
            Some(row.kind),
            "the import reads {} as {}",
            row.pytorch,
            row.name
        );
    }
    let d = tempfile::tempdir().unwrap();
    let files = fixture_files("kineto");
    let t = import_ok("kineto", &[&files[0], &files[1]], &d.path().join("k.json"));
    let (v, rows) = with_every_kind(&t, true, false);
    assert_eq!(rows.len(), KINDS.len());
    let k = write(d.path(), "every-kind.json", &v);
    // the ET export reads back field for field; the PARAM export names every kind PARAM's way
    let et = d.path().join("et");
    ok(&cc(&["export", "et", s(&k), "-o", s(&et)]));
    let back = import_ok("et", &[&et.join("rank-0.json"), &et.join("rank-1.json")], &d.path().join("back.json"));
    assert_eq!(comm_fields(&back), comm_fields(&v));
    let param = d.path().join("param");
    ok(&cc(&["export", "param", s(&k), "-o", s(&param)]));
    let p0 = std::fs::read_to_string(param.join("rank-0.json")).unwrap();
    for row in &KINDS {
        assert!(p0.contains(&format!("\"{}\"", row.param)), "PARAM export lacks {}", row.param);
    }
    // every kind replays on MPI with its result checked where it lands
    let out = d.path().join("replay");
    ok(&mpirun(2, &["replay-trace", s(&k), "--out", s(&out), "--check", "--pace", "none"]));
    let recs: Vec<Value> = (0..2)
        .flat_map(|r| {
            let f: Value =
                serde_json::from_slice(&std::fs::read(out.join(format!("replay-trace.rank-{r}.json"))).unwrap())
                    .unwrap();
            f["records"].as_array().unwrap().clone()
        })
        .collect();
    for row in &KINDS {
        let ran: Vec<&Value> = recs.iter().filter(|r| r["kind"] == row.name).collect();
        assert!(!ran.is_empty(), "{} did not run", row.name);
        // checked where its result lands: a send's data by its receive, nothing for a barrier
        use commcanary::core::collective::Lands;
        let checked_here = matches!(row.lands, Lands::Everywhere | Lands::OnRoot | Lands::Here);
        assert!(!checked_here || ran.iter().any(|r| r["checked"] == true), "{} ran unchecked: {ran:?}", row.name);
    }
}

#[test]
fn param_export_declares_every_group_before_use() {
    let d = tempfile::tempdir().unwrap();
    let files = fixture_files("kineto");
    let k = d.path().join("k.json");
    import_ok("kineto", &[&files[0], &files[1]], &k);
    let dir = d.path().join("param");
    ok(&cc(&["export", "param", s(&k), "-o", s(&dir)]));
    for rank in 0..2u64 {
        let list: Vec<Value> =
            serde_json::from_slice(&std::fs::read(dir.join(format!("rank-{rank}.json"))).unwrap()).unwrap();
        let inits: Vec<&Value> = list.iter().take_while(|e| e["comms"] == "init").collect();
        let ids: Vec<u64> = inits.iter().map(|e| e["pg_id"].as_u64().unwrap()).collect();
        assert_eq!(ids, vec![0, 1]);
        assert!(inits.iter().all(|e| e["global_ranks"] == serde_json::json!([0, 1]) && e["world_size"] == 2));
        let colls = &list[inits.len()..];
        assert_eq!(colls.len(), 37);
        for c in colls {
            assert!(ids.contains(&c["pg_id"].as_u64().unwrap()), "{c}: group used before init");
        }
        let ar: Vec<&Value> = colls.iter().filter(|c| c["comms"] == "all_reduce").collect();
        assert_eq!(ar.len(), 32);
        assert!(ar.iter().all(|c| c["pg_id"] == 1 && c["dtype"] == "bfloat16" && c["in_msg_size"] == 32768));
        let rs = colls.iter().find(|c| c["comms"] == "reduce_scatter_base").unwrap();
        assert_eq!((rs["dtype"].as_str(), rs["in_msg_size"].as_u64()), (Some("float"), Some(2097152)));
        let a2a = colls.iter().find(|c| c["comms"] == "all_to_allv").unwrap();
        assert_eq!(a2a["in_split"], serde_json::json!([4096, 4096]));
        let p2p = colls.iter().find(|c| c["comms"] == "send" || c["comms"] == "recv").unwrap();
        assert_eq!((p2p["src_rank"].as_u64(), p2p["dst_rank"].as_u64()), (Some(0), Some(1)));
        assert!(colls.iter().all(|c| c["startTime_ns"].is_u64()));
    }
    // Nothing is replaced on a second export.
    let again = cc(&["export", "param", s(&k), "-o", s(&dir)]);
    assert!(assert_refused(&again, "ALREADY_EXISTS").contains("already exists"));
}

/// The `record_param_comms` events of a Kineto file (mutable).
fn kineto_comms(v: &mut Value) -> Vec<&mut Value> {
    v["traceEvents"].as_array_mut().unwrap().iter_mut().filter(|e| e["name"] == "record_param_comms").collect()
}

#[test]
fn kineto_refusals_on_damaged_copies() {
    let d = tempfile::tempdir().unwrap();
    let dir = d.path();
    let (r0, r1) = (fixture("kineto.rank-0.json.gz"), fixture("kineto.rank-1.json.gz"));
    let p0 = write(dir, "k0.json", &r0);
    let p1 = write(dir, "k1.json", &r1);
    // A rank missing, and a rank given twice.
    refused("kineto", &[&p0], dir, &["rank 1 missing", "world has 2 ranks"]);
    refused("kineto", &[&p0, &p0], dir, &["both record rank 0", "different runs or rank sets"]);
    // Another run: a different NCCL, or a different group layout.
    let mut other = r1.clone();
    other["distributedInfo"]["nccl_version"] = "2.21.5".into();
    let po = write(dir, "other-run.json", &other);
    refused("kineto", &[&p0, &po], dir, &["different runs or rank sets", "NCCL version", "other-run.json"]);
    let mut other = r1.clone();
    other["distributedInfo"]["world_size"] = 4.into();
    let po = write(dir, "other-world.json", &other);
    refused("kineto", &[&p0, &po], dir, &["different runs or rank sets", "world size"]);
    // An unknown collective name, listing the known ones.
    let mut bad = r1.clone();
    kineto_comms(&mut bad)[3]["args"]["Collective name"] = "allreduce_fancy".into();
    let pb = write(dir, "unknown-name.json", &bad);
    refused(
        "kineto",
        &[&p0, &pb],
        dir,
        &["unknown-name.json", "unknown collective name \"allreduce_fancy\"", "known: allreduce", "all_to_allv"],
    );
    // A group used but never described.
    let mut bad = r1.clone();
    kineto_comms(&mut bad)[5]["args"]["Process Group Name"] = "7".into();
    let pb = write(dir, "undescribed.json", &bad);
    refused("kineto", &[&p0, &pb], dir, &["undescribed.json", "\"7\"", "never describes"]);
    // Counts that disagree across the group's members.
    let mut bad = r1.clone();
    {
        let mut comms = kineto_comms(&mut bad);
        comms[4]["args"]["In msg nelems"] = 16384.into();
        comms[4]["args"]["Out msg nelems"] = 16384.into();
    }
    let pb = write(dir, "counts.json", &bad);
    refused(
        "kineto",
        &[&p0, &pb],
        dir,
        &["group \"1\" collective #4", "counts disagree across the group's members", "counts.json"],
    );
    // A record whose own counts contradict its operation (all-gather out != in x group size).
    let mut bad = r1.clone();
    for e in kineto_comms(&mut bad) {
        if e["args"]["Collective name"] == "_allgather_base" {
            e["args"]["Out msg nelems"] = 1048576.into();
        }
    }
    let pb = write(dir, "gather.json", &bad);
    refused("kineto", &[&p0, &pb], dir, &["_allgather_base", "counts disagree with the operation"]);
    // A receive that was never recorded: the send has no partner.
    let mut bad = r1.clone();
    bad["traceEvents"]
        .as_array_mut()
        .unwrap()
        .retain(|e| !(e["name"] == "record_param_comms" && e["args"]["Collective name"] == "recv"));
    let pb = write(dir, "no-recv.json", &bad);
    refused("kineto", &[&p0, &pb], dir, &["sends 1 times to rank 1", "receives 0 times", "do not pair up"]);
    // Not a distributed trace at all; truncated gzip.
    let mut bad = r1.clone();
    bad.as_object_mut().unwrap().remove("distributedInfo");
    let pb = write(dir, "single.json", &bad);
    refused("kineto", &[&p0, &pb], dir, &["single.json", "no distributedInfo"]);
    let raw = std::fs::read(fixture_path("kineto.rank-1.json.gz")).unwrap();
    let pt = dir.join("truncated.json.gz");
    std::fs::write(&pt, &raw[..raw.len() / 2]).unwrap();
    refused("kineto", &[&p0, &pt], dir, &["truncated.json.gz", "gzip"]);
    // The undamaged copies, plain and re-gzipped, still import.
    let mut enc = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
    enc.write_all(&serde_json::to_vec(&r1).unwrap()).unwrap();
    let pg = dir.join("k1.json.gz");
    std::fs::write(&pg, enc.finish().unwrap()).unwrap();
    import_ok("kineto", &[&p0, &pg], &dir.join("fine.json"));
    import_ok("kineto", &[&p1, &p0], &dir.join("fine2.json"));
}

/// The `record_param_comms` nodes of an execution trace (mutable).
fn et_comms(v: &mut Value) -> Vec<&mut Value> {
    v["nodes"].as_array_mut().unwrap().iter_mut().filter(|n| n["name"] == "record_param_comms").collect()
}

fn set_attr(node: &mut Value, name: &str, value: Value) {
    for a in node["attrs"].as_array_mut().unwrap() {
        if a["name"] == name {
            a["value"] = value.clone();
        }
    }
}

#[test]
fn et_refusals_on_damaged_copies() {
    let d = tempfile::tempdir().unwrap();
    let dir = d.path();
    let (r0, r1) = (fixture("et.rank-0.json.gz"), fixture("et.rank-1.json.gz"));
    let p0 = write(dir, "e0.json", &r0);
    refused("et", &[&p0], dir, &["rank 1 missing"]);
    // Another run: a different process-group layout.
    let mut other = r1.clone();
    for n in other["nodes"].as_array_mut().unwrap() {
        if n["name"].as_str().unwrap().contains("process_group:init") {
            let text = n["inputs"]["values"][0].as_str().unwrap().replace("\"undefined\"", "\"tp\"");
            n["inputs"]["values"][0] = text.into();
        }
    }
    let po = write(dir, "other.json", &other);
    refused("et", &[&p0, &po], dir, &["different runs or rank sets", "process groups"]);
    let mut bad = r1.clone();
    set_attr(et_comms(&mut bad)[2], "collective_name", "allreduce_fancy".into());
    let pb = write(dir, "name.json", &bad);
    refused("et", &[&p0, &pb], dir, &["name.json", "unknown collective name", "known:"]);
    let mut bad = r1.clone();
    set_attr(et_comms(&mut bad)[2], "pg_name", "9".into());
    let pb = write(dir, "group.json", &bad);
    refused("et", &[&p0, &pb], dir, &["group.json", "\"9\"", "never describes"]);
    let mut bad = r1.clone();
    {
        let mut comms = et_comms(&mut bad);
        set_attr(comms[7], "in_msg_nelems", 8.into());
        set_attr(comms[7], "out_msg_nelems", 8.into());
    }
    let pb = write(dir, "counts.json", &bad);
    refused("et", &[&p0, &pb], dir, &["collective #7", "counts disagree across the group's members"]);
}

/// The imported fixture runs under `mpirun -n 2` on the CPU backend: every
/// collective of every kind checked; the same run with one rank's results
/// corrupted fails its check (the check can fail).
#[test]
fn imported_trace_replays_on_cpu_with_every_kind_checked() {
    let d = tempfile::tempdir().unwrap();
    let files = fixture_files("kineto");
    let k = d.path().join("k.json");
    import_ok("kineto", &[&files[0], &files[1]], &k);
    let out = d.path().join("replay");
    ok(&mpirun(2, &["replay-trace", s(&k), "--out", s(&out), "--check"]));
    let t: Value = serde_json::from_slice(&std::fs::read(&k).unwrap()).unwrap();
    // rank 0's index names every rank's file with its digest, and each file's header binds it to the trace
    let index: Value = serde_json::from_slice(&std::fs::read(out.join("replay-trace.json")).unwrap()).unwrap();
    let trace_sha = fsutil::sha256_file(&k).unwrap();
    assert_eq!(
        (index["trace_sha256"].as_str(), index["world_size"].as_u64()),
        (Some(trace_sha.as_str()), Some(2)),
        "{index}"
    );
    for (rank, r) in index["ranks"].as_array().unwrap().iter().enumerate() {
        let files = r["files"].as_array().unwrap();
        assert_eq!(files.len(), 1, "{r}");
        let (name, sha) = (files[0][0].as_str().unwrap(), files[0][1].as_str().unwrap());
        assert_eq!(name, format!("replay-trace.rank-{rank}.json"));
        assert_eq!(fsutil::sha256_file(&out.join(name)).unwrap(), sha);
    }
    for rank in 0..2usize {
        let file: Value =
            serde_json::from_slice(&std::fs::read(out.join(format!("replay-trace.rank-{rank}.json"))).unwrap())
                .unwrap();
        let h = &file["header"];
        assert_eq!(
            (file["format_version"].as_u64(), h["rank"].as_u64(), h["world_size"].as_u64()),
            (Some(2), Some(rank as u64), Some(2)),
            "{h}"
        );
        assert_eq!((h["trace_sha256"].as_str(), h["backend"].as_str()), (Some(trace_sha.as_str()), Some("cpu")), "{h}");
        assert!(
            h["settings"].as_array().unwrap().iter().any(|x| x == "--check")
                && h["tool"].as_str().unwrap().starts_with("commcanary "),
            "{h}"
        );
        let recs = file["records"].as_array().unwrap();
        let want = shape(&t, rank);
        assert_eq!(recs.len(), want.len());
        for (r, w) in recs.iter().zip(&want) {
            assert_eq!(
                (r["kind"].as_str().unwrap(), r["group"].as_str().unwrap(), r["dtype"].as_str().unwrap()),
                (w.0.as_str(), w.1.as_str(), w.2.as_str())
            );
            assert_eq!((r["in_elems"].as_u64().unwrap(), r["out_elems"].as_u64().unwrap()), (w.3, w.4));
            // Every kind's result is validated where it lands (a send's at its receiver).
            assert_eq!(r["checked"], r["kind"] != "send", "{r}");
            assert!(r["target_gap_ns"].is_u64());
        }
        let ar = recs.iter().find(|r| r["kind"] == "all_reduce").unwrap();
        assert_eq!((ar["op"].as_str(), ar["op_source"].as_str()), (Some("sum"), Some("default")));
    }
    // the same directory again: refused before MPI starts, nothing changed
    let before = std::fs::read(out.join("replay-trace.rank-0.json")).unwrap();
    let again = cc(&["replay-trace", s(&k), "--out", s(&out), "--check"]);
    assert!(assert_refused(&again, "ALREADY_EXISTS").contains("replay-trace"));
    assert_eq!(std::fs::read(out.join("replay-trace.rank-0.json")).unwrap(), before);
    for op in ["avg", "max"] {
        let o = d.path().join(format!("replay-{op}"));
        ok(&mpirun(2, &["replay-trace", s(&k), "--out", s(&o), "--check", "--pace", "none", "--op", op]));
    }
    let bad = mpirun(
        2,
        &["replay-trace", s(&k), "--out", s(&d.path().join("bad")), "--check", "--pace", "none", "--corrupt-rank", "1"],
    );
    let err = String::from_utf8_lossy(&bad.stderr);
    assert!(!bad.status.success() && err.contains("--check:"), "{err}");
    // An execution trace has no times: pacing by gaps is refused, back to back runs.
    let e = d.path().join("e.json");
    import_ok("et", &fixture_files("et").iter().map(|p| p.as_path()).collect::<Vec<_>>(), &e);
    let refused = mpirun(2, &["replay-trace", s(&e), "--out", s(&d.path().join("et-gaps")), "--check"]);
    assert!(!refused.status.success() && String::from_utf8_lossy(&refused.stderr).contains("records no times"));
    ok(&mpirun(2, &["replay-trace", s(&e), "--out", s(&d.path().join("et-none")), "--check", "--pace", "none"]));
}

/// The workload pace re-creates each rank's recorded compute before its
/// collectives: every record says how many kernels and how much recorded
/// time stood before it (matching the trace), the report sums them, and an
/// execution trace (no kernel durations) is refused with the reason.
#[test]
fn workload_pace_recreates_the_recorded_compute_on_cpu() {
    let d = tempfile::tempdir().unwrap();
    let files = fixture_files("kineto");
    let k = d.path().join("k.json");
    import_ok("kineto", &[&files[0], &files[1]], &k);
    let out = d.path().join("wl");
    ok(&mpirun(2, &["replay-trace", s(&k), "--out", s(&out), "--check", "--pace", "workload"]));
    let t: Value = serde_json::from_slice(&std::fs::read(&k).unwrap()).unwrap();
    for rank in 0..2usize {
        let file: Value =
            serde_json::from_slice(&std::fs::read(out.join(format!("replay-trace.rank-{rank}.json"))).unwrap())
                .unwrap();
        let recs = file["records"].as_array().unwrap();
        let colls = t["ranks"][rank]["collectives"].as_array().unwrap();
        assert_eq!(recs.len(), colls.len());
        let (mut n_all, mut ns_all) = (0u64, 0u64);
        for (r, c) in recs.iter().zip(colls) {
            let before = c["compute_before"].as_array().unwrap();
            let ns: u64 = before.iter().map(|k| k["duration_ns"].as_u64().unwrap()).sum();
            assert_eq!(
                (r["compute_ops"].as_u64(), r["compute_recorded_ns"].as_u64()),
                (Some(before.len() as u64), Some(ns)),
                "{r}"
            );
            // one thread: the pacing target is the whole compute, and the host waited at least that long
            assert_eq!(r["target_gap_ns"].as_u64(), Some(ns));
            assert!(r["actual_gap_ns"].as_u64().unwrap() >= ns, "{r}");
            assert_eq!(r["checked"], r["kind"] != "send", "{r}");
            n_all += before.len() as u64;
            ns_all += ns;
        }
        let w: Value = serde_json::from_slice(
            &std::fs::read(out.join(format!("replay-trace.rank-{rank}.workload.json"))).unwrap(),
        )
        .unwrap();
        assert_eq!((w["rank"].as_u64(), w["backend"].as_str()), (Some(rank as u64), Some("cpu")));
        assert_eq!((w["compute_ops"].as_u64(), w["compute_recorded_ns"].as_u64()), (Some(n_all), Some(ns_all)));
        assert!(w["compute_launches"].is_null(), "the cpu pace launches nothing: {w}");
        assert_eq!(w["collectives"].as_u64(), Some(colls.len() as u64));
        assert!(w["pass_host_ns"].as_u64().unwrap() >= ns_all, "{w}");
        assert!(w["pass_device_ns"].is_null() && w["trace_span_ns"].as_u64().unwrap() > 0, "{w}");
    }
    let e = d.path().join("e.json");
    import_ok("et", &fixture_files("et").iter().map(|p| p.as_path()).collect::<Vec<_>>(), &e);
    let refused = mpirun(2, &["replay-trace", s(&e), "--out", s(&d.path().join("et-wl")), "--pace", "workload"]);
    let err = String::from_utf8_lossy(&refused.stderr);
    assert!(!refused.status.success() && err.contains("no recorded duration"), "{err}");
    // the device-paced gaps need a device
    let refused = mpirun(2, &["replay-trace", s(&k), "--out", s(&d.path().join("dg")), "--pace", "device-gaps"]);
    let err = String::from_utf8_lossy(&refused.stderr);
    assert!(!refused.status.success() && err.contains("--pace device-gaps needs --backend cuda"), "{err}");
}

/// Without a GPU, `replay-trace --backend cuda` says why in one line, before MPI starts.
#[test]
fn replay_on_cuda_without_a_gpu_is_one_clear_refusal() {
    if cuda::unavailable_reason().is_none() {
        eprintln!(
            "SKIPPED: this machine has a usable GPU (the GPU path is checked by scripts/device/device-trace-replay.sh)"
        );
        return;
    }
    let d = tempfile::tempdir().unwrap();
    let files = fixture_files("kineto");
    let k = d.path().join("k.json");
    import_ok("kineto", &[&files[0], &files[1]], &k);
    let o = cc(&["replay-trace", s(&k), "--backend", "cuda", "--out", s(&d.path().join("r"))]);
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(!o.status.success() && err.contains("--backend cuda is unavailable:") && err.lines().count() == 1, "{err}");
    assert!(!d.path().join("r").exists());
}

/// CUPTI records GPU kernels: asked for on the CPU backend, it is refused before any work.
#[test]
fn replay_with_cupti_on_the_cpu_backend_is_refused() {
    let d = tempfile::tempdir().unwrap();
    let files = fixture_files("kineto");
    let k = d.path().join("k.json");
    import_ok("kineto", &[&files[0], &files[1]], &k);
    let o = cc(&["replay-trace", s(&k), "--backend", "cpu", "--cupti", "--out", s(&d.path().join("r"))]);
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(!o.status.success() && err.contains("--cupti needs the cuda backend"), "{err}");
    assert!(!d.path().join("r").exists());
}

/// `rank --trace` on an imported trace with `--trace-allreduce-only`: the
/// phases walk each rank's own all-reduces once per token, paced by the
/// recorded gaps (replay) or with the recorded compute re-created (fill,
/// overlap); the other kinds are left out and counted in the shard.
#[test]
fn imported_trace_drives_the_rank_phases_on_cpu() {
    let d = tempfile::tempdir().unwrap();
    let files = fixture_files("kineto");
    let k = d.path().join("k.json");
    let t = import_ok("kineto", &[&files[0], &files[1]], &k);
    let run = run_rank_with(
        2,
        &d.path().join("ok"),
        &[
            "--backend",
            "cpu",
            "--phases",
            "replay,fill,overlap",
            "--trace",
            s(&k),
            "--dtype",
            "bf16",
            "--tokens",
            "2",
            "--warmup-tokens",
            "1",
            "--trace-allreduce-only",
        ],
    );
    let summary = join_json(&run);
    for p in ["replay", "fill", "overlap"] {
        // the fixture's collectives carry their kernels' device intervals
        assert_eq!(phase_of(&summary, p)["source_timeline"], "device", "{p}");
    }
    for rank in 0..2usize {
        let shard: Value =
            serde_json::from_str(&ok(&cc(&["inspect", s(&run.join(format!("rank-0000{rank}.shard")))]))).unwrap();
        let recorded: Vec<&Value> =
            t["ranks"][rank]["collectives"].as_array().unwrap().iter().filter(|c| c["kind"] == "all_reduce").collect();
        assert_eq!(recorded.len(), 32);
        for p in shard["header"]["phases"].as_array().unwrap() {
            let o = &p["trace"]["Imported"];
            assert_eq!(
                (o["collectives_per_pass"].as_u64(), o["left_out_per_pass"].as_u64(), o["source_rank"].as_u64()),
                (Some(32), Some(5), Some(rank as u64)),
                "{p}"
            );
            assert_eq!(o["sha256"].as_str().unwrap(), fsutil::sha256_file(&k).unwrap());
        }
        let colls = shard["body"]["collectives"].as_array().unwrap();
        let targets: Vec<u64> = colls
            .iter()
            .filter(|c| c["phase"] == "replay")
            .map(|c| c["replay"]["target_gap_ns"].as_u64().unwrap())
            .collect();
        for phase in ["replay", "fill", "overlap"] {
            let mine: Vec<&Value> = colls.iter().filter(|c| c["phase"] == phase).collect();
            // 1 warm-up + 2 timed passes of 32 all-reduces of 32,768 bf16 elements
            assert_eq!(mine.len(), 3 * 32, "{phase}");
            assert!(mine.iter().all(|c| c["bytes"] == 65536 && c["dtype"] == "bf16"), "{phase}");
            assert_eq!(mine.iter().filter(|c| c["warmup"] == true).count(), 32, "{phase}");
            for (i, c) in mine.iter().enumerate() {
                assert_eq!((c["token"].as_u64(), c["layer"].as_u64()), (Some(i as u64 / 32), Some(i as u64 % 32)));
                if i % 32 == 0 {
                    // no earlier collective to measure from: the compute recorded before the first stands for its gap
                    let first: u64 = recorded[0]["compute_before"]
                        .as_array()
                        .unwrap()
                        .iter()
                        .map(|k| k["duration_ns"].as_u64().unwrap())
                        .sum();
                    assert!(first > 0);
                    assert_eq!(targets[i], first, "a pass re-creates the compute before its first collective");
                }
            }
            if phase != "replay" {
                // the recorded compute fills: never more than the recorded gap, and less where the device idled
                let fills: Vec<u64> = mine.iter().map(|c| c["fill"]["gap_ns"].as_u64().unwrap()).collect();
                assert!(fills.iter().zip(&targets).all(|(f, g)| f <= g), "{phase}: {fills:?} vs {targets:?}");
                assert!(
                    fills.iter().zip(&targets).any(|(f, g)| f < g),
                    "{phase}: the compute is the whole gap everywhere"
                );
            }
        }
    }
    for phase in ["replay", "fill", "overlap"] {
        assert_eq!(
            phase_of(&summary, phase)["collectives_per_rank"].as_u64(),
            Some(64),
            "{phase}: timed collectives per rank"
        );
    }
}

fn phase_of<'a>(summary: &'a Value, name: &str) -> &'a Value {
    phase(summary, name)
}

/// Without `--trace-allreduce-only` the phases run every collective of the
/// imported trace: the fixture's 32 all-reduces on the world and its FSDP
/// step (all-gather, f32 reduce-scatter, broadcast from rank 0, all-to-all,
/// a send from rank 0 to rank 1) on the trace's group "0", each recorded
/// with its kind, group, root or peer, checked where `--check` asks, and
/// joined across ranks (a send with its receive); `join` refuses a shard
/// whose kind or pairing disagrees.
#[test]
fn imported_trace_runs_every_kind_in_the_rank_phases_on_cpu() {
    let d = tempfile::tempdir().unwrap();
    let files = fixture_files("kineto");
    let k = d.path().join("k.json");
    let t = import_ok("kineto", &[&files[0], &files[1]], &k);
    let run = run_rank_with(
        2,
        &d.path().join("ok"),
        &[
            "--backend",
            "cpu",
            "--phases",
            "replay,fill,overlap",
            "--trace",
            s(&k),
            "--dtype",
            "bf16",
            "--tokens",
            "2",
            "--warmup-tokens",
            "1",
            "--check",
            "40",
        ],
    );
    let kinds = ["all_reduce", "all_gather", "reduce_scatter", "broadcast", "all_to_all", "send", "recv"];
    for rank in 0..2usize {
        let shard: Value =
            serde_json::from_str(&ok(&cc(&["inspect", s(&run.join(format!("rank-0000{rank}.shard")))]))).unwrap();
        assert_eq!(shard["header"]["format_version"], shard::SHARD_FORMAT_VERSION);
        let groups = shard["header"]["groups"].as_array().unwrap();
        assert!(
            groups.iter().any(|g| g["id"] == 1 && g["name"] == "0" && g["members"] == serde_json::json!([0, 1])),
            "{groups:?}"
        );
        let recorded = t["ranks"][rank]["collectives"].as_array().unwrap();
        assert_eq!(recorded.len(), 37);
        for p in shard["header"]["phases"].as_array().unwrap() {
            let o = &p["trace"]["Imported"];
            assert_eq!(
                (o["collectives_per_pass"].as_u64(), o["left_out_per_pass"].as_u64()),
                (Some(37), Some(0)),
                "{p}"
            );
            for c in o["kinds"].as_array().unwrap() {
                let n = recorded.iter().filter(|r| r["kind"] == c["kind"]).count() as u64;
                assert_eq!((c["run_per_pass"].as_u64(), c["left_out_per_pass"].as_u64()), (Some(n), Some(0)), "{c}");
            }
        }
        let colls = shard["body"]["collectives"].as_array().unwrap();
        for phase in ["replay", "fill", "overlap"] {
            let mine: Vec<&Value> = colls.iter().filter(|c| c["phase"] == phase).collect();
            // 1 warm-up + 2 timed passes of the rank's 37 collectives, in the trace's order
            assert_eq!(mine.len(), 3 * 37, "{phase}");
            for (i, c) in mine.iter().enumerate() {
                let r = &recorded[i % 37];
                assert_eq!(c["kind"], r["kind"], "{phase} #{i}");
                assert_eq!(c["group"].as_u64(), Some(if r["kind"] == "all_reduce" { 0 } else { 1 }), "{phase} #{i}");
                assert_eq!((&c["root"], &c["peer"]), (&r["root"], &r["peer"]), "{phase} #{i}");
            }
            for kind in kinds {
                let n = recorded.iter().filter(|r| r["kind"] == kind).count();
                assert_eq!(mine.iter().filter(|c| c["kind"] == kind).count(), 3 * n, "{phase} {kind}");
            }
            // --check 40: the first 40 timed collectives with a result on this rank (a send's is its receiver's), so
            // all of the first timed pass's
            let checked: Vec<&&Value> = mine.iter().filter(|c| c["checked"] == true).collect();
            assert_eq!(checked.len(), 40, "{phase}");
            assert!(checked.iter().all(|c| c["warmup"] == false && c["kind"] != "send"), "{phase}");
            assert!(
                mine.iter().filter(|c| c["token"] == 1 && c["kind"] != "send").all(|c| c["checked"] == true),
                "{phase}"
            );
        }
        assert!(shard["header"]["checks"].as_array().unwrap().iter().all(|c| c["wrong_elements"] == 0));
    }
    // joined: each kind once per operation, the send with its receive
    let events = d.path().join("events.jsonl");
    ok(&cc(&["join", s(&run), "--events-out", s(&events)]));
    let joined: Vec<Value> =
        std::fs::read_to_string(&events).unwrap().lines().map(|l| serde_json::from_str(l).unwrap()).collect();
    for phase in ["replay", "fill", "overlap"] {
        let mine: Vec<&Value> = joined.iter().filter(|c| c["phase"] == phase && c["warmup"] == false).collect();
        for (kind, n) in [
            ("all_reduce", 64),
            ("all_gather", 2),
            ("reduce_scatter", 2),
            ("broadcast", 2),
            ("all_to_all", 2),
            ("send", 2),
            ("recv", 0),
        ] {
            assert_eq!(mine.iter().filter(|c| c["kind"] == kind).count(), n, "{phase} {kind}");
        }
        assert!(mine
            .iter()
            .filter(|c| c["kind"] == "send")
            .all(|c| c["members"] == serde_json::json!([0, 1]) && c["ranks"].as_array().unwrap().len() == 2));
        assert!(mine.iter().filter(|c| c["kind"] == "broadcast").all(|c| c["root"] == 0));
    }
    // the Perfetto export names each kind, with its group and root or peer
    let chrome = d.path().join("chrome.json");
    ok(&cc(&["export", "chrome", s(&run), "-o", s(&chrome)]));
    let exported = std::fs::read_to_string(&chrome).unwrap();
    for name in [
        "\"allreduce 65536B",
        "\"all_gather 2097152B",
        "\"reduce_scatter 8388608B",
        "\"broadcast 2097152B",
        "\"send 8192B",
        "\"recv 8192B",
    ] {
        assert!(exported.contains(name), "{name} not in the export");
    }
    // join refuses a kind that differs between the members, and a receive that became a send
    let tampered = |name: &str, change: &dyn Fn(&mut CollectiveEvent) -> bool| -> PathBuf {
        let to = d.path().join(name);
        std::fs::create_dir(&to).unwrap();
        for e in std::fs::read_dir(&run).unwrap() {
            let e = e.unwrap();
            std::fs::copy(e.path(), to.join(e.file_name())).unwrap();
        }
        let p = to.join("rank-00001.shard");
        let mut sh = Shard::read(&p).unwrap();
        // the first event that `change` changes
        assert!(sh.body.collectives.iter_mut().any(change), "an event to change");
        let bytes = sh.encode().unwrap();
        std::fs::write(&p, &bytes).unwrap();
        let rp = to.join("run.json");
        let mut v: Value = serde_json::from_slice(&std::fs::read(&rp).unwrap()).unwrap();
        v["shards"][1]["sha256"] = fsutil::sha256_hex(&bytes).into();
        std::fs::write(&rp, serde_json::to_vec_pretty(&v).unwrap()).unwrap();
        to
    };
    use commcanary::evidence::shard::CollectiveKind as K;
    let r = tampered("kind", &|e| {
        let hit = e.kind == K::AllGather;
        if hit {
            e.kind = K::AllToAll;
        }
        hit
    });
    let err = assert_refused(&cc(&["join", s(&r)]), "IDENTITY_MISMATCH");
    assert!(err.contains("group 1 seq 0") && err.contains("all_gather") && err.contains("all_to_all"), "{err}");
    let r = tampered("p2p", &|e| {
        let hit = e.kind == K::Recv;
        if hit {
            e.kind = K::Send;
        }
        hit
    });
    let err = assert_refused(&cc(&["join", s(&r)]), "UNMATCHED_EVENT");
    assert!(err.contains("(rank 0 to rank 1)") || err.contains("(rank 1 to rank 0)"), "{err}");
    let r = tampered("root", &|e| {
        let hit = e.kind == K::Broadcast;
        if hit {
            e.root = Some(1);
        }
        hit
    });
    let err = assert_refused(&cc(&["join", s(&r)]), "IDENTITY_MISMATCH");
    assert!(err.contains("broadcast root 0") && err.contains("broadcast root 1"), "{err}");
}

/// Negative control: a spoiled result of a kind other than the world
/// all-reduce (`--fault wrong-sum`, here on the first checked all-gather of
/// a copy of the fixture without its all-reduces) fails the job, naming the
/// rank, phase, group and kind; without the fault the same run passes.
#[test]
fn a_wrong_result_of_another_kind_fails_the_rank_phases() {
    let d = tempfile::tempdir().unwrap();
    let files = fixture_files("kineto");
    let k = d.path().join("k.json");
    let mut t = import_ok("kineto", &[&files[0], &files[1]], &k);
    for r in t["ranks"].as_array_mut().unwrap() {
        r["collectives"].as_array_mut().unwrap().retain(|c| c["kind"] != "all_reduce");
    }
    let no_allreduce = write(d.path(), "no-allreduce.json", &t);
    let args = |out: &Path, fault: bool| -> Vec<String> {
        let mut a: Vec<String> = [
            "rank",
            "-q",
            "--backend",
            "cpu",
            "--phases",
            "replay",
            "--trace",
            s(&no_allreduce),
            "--tokens",
            "1",
            "--warmup-tokens",
            "0",
        ]
        .iter()
        .map(|x| x.to_string())
        .collect();
        a.extend(["--check", "5", "--out", s(out)].map(String::from));
        if fault {
            a.extend(["--fault", "wrong-sum:1"].map(String::from));
        }
        a
    };
    let good = args(&d.path().join("good"), false);
    ok(&mpirun(2, &good.iter().map(String::as_str).collect::<Vec<_>>()));
    let bad = args(&d.path().join("bad"), true);
    let o = mpirun(2, &bad.iter().map(String::as_str).collect::<Vec<_>>());
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(!o.status.success(), "{err}");
    assert!(err.contains("result check failed on rank 1, phase replay, group 1 seq 0 (all_gather"), "{err}");
}
