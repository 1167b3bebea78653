//! Every fuzz seed and every input a fuzzer found (fuzz/seeds/TARGET/) goes
//! through its decoder here on stable: a decoder must return (Ok or a named
//! error), never panic. The real campaign files among the seeds must decode.
use commcanary::analysis::overlap::{self, IntervalFile};
use commcanary::analysis::{queue, ranking};
use commcanary::evidence::commtrace::{exec, export, CommTrace};
use commcanary::evidence::run;
use commcanary::evidence::shard::{self, Shard};
use commcanary::validate::reference::Site;
use std::path::Path;

fn decode(target: &str, data: &[u8]) -> bool {
    use commcanary::campaign;
    match target {
        "shard" => Shard::decode(data, "seed").is_ok(),
        "shard_body" => {
            data.split_first().is_some_and(|(v, b)| shard::decode_shard_body(1 + (v % 3) as u32, b, "seed").is_ok())
        }
        "run_record" => run::parse_run_record(data, "seed").is_ok(),
        "manifest" => serde_json::from_slice::<campaign::spec::Manifest>(data).is_ok(),
        "spec_toml" => std::str::from_utf8(data)
            .ok()
            .and_then(|t| toml::from_str::<campaign::spec::CampaignSpec>(t).ok())
            .is_some_and(|s| s.validate().is_ok()),
        "attempts_log" => campaign::chain::parse_attempts(data, "seed").is_ok_and(|(r, _)| !r.is_empty()),
        "selection" => serde_json::from_slice::<campaign::chain::Selection>(data).is_ok(),
        "csv" => std::str::from_utf8(data).is_ok_and(|t| ranking::parse_csv(t, "seed").is_ok()),
        "intervals" => {
            serde_json::from_slice::<IntervalFile>(data).is_ok_and(|iv| overlap::overlap(&iv.compute, &iv.comm).is_ok())
        }
        "service_times" => std::str::from_utf8(data).is_ok_and(|t| queue::parse_service_times(t, "seed").is_ok()),
        "archive" => match data.split_first() {
            Some((s, rest)) if s % 2 == 0 => serde_json::from_slice::<campaign::ArchiveDescriptor>(rest).is_ok(),
            Some((_, rest)) => campaign::inspect_members(rest, "seed").is_ok(),
            None => false,
        },
        "kineto" | "et" => {
            use commcanary::evidence::commtrace::{decompress, et, kineto, Limits};
            let limits = Limits::default();
            decompress(data, &limits).is_ok_and(|json| {
                if target == "kineto" {
                    kineto::parse(&json, "seed", String::new(), &limits).is_ok()
                } else {
                    et::parse(&json, "seed", String::new(), &limits).is_ok()
                }
            })
        }
        "comm_trace" => CommTrace::from_slice(data).is_ok_and(|t| {
            let _ = export::param(&t);
            t.ranks.iter().all(|r| exec::gaps_ns(&r.collectives).is_some())
        }),
        "site" => std::str::from_utf8(data).is_ok_and(|t| Site::parse(t, "seed").is_ok()),
        // as the fuzz target reads it: a mode byte, then the artifact's file bytes (even) or its fields, resealed (odd)
        "canary_artifact" => data.split_first().is_some_and(|(mode, rest)| {
            use commcanary::canary::{artifact, expand};
            let bytes = if mode % 2 == 0 {
                rest.to_vec()
            } else {
                match serde_json::from_slice::<artifact::Canary>(rest)
                    .map_err(anyhow::Error::from)
                    .and_then(|c| c.seal())
                {
                    Ok(c) => serde_json::to_vec_pretty(&c).unwrap(),
                    Err(_) => return false,
                }
            };
            artifact::from_slice(&bytes).is_ok_and(|c| expand::expand(&c).is_ok())
        }),
        // a mode byte, then a whole capture file (even) or block payloads framed with a header (odd)
        "mpicap" => {
            use commcanary::evidence::commtrace::{mpi, Limits};
            let Some(file) = mpi::capture_from_fuzz_input(data) else { return false };
            mpi::parse_rank(&file, "seed", &Limits::default()).is_ok_and(|r| {
                let _ = r.calls_by_kind();
                r.header.world_size != 1 || mpi::to_trace(&mpi::MpiCapture { ranks: vec![r.clone()] }).is_ok()
            })
        }
        other => panic!("fuzz/seeds/{other}: no decoder of that name"),
    }
}

#[test]
fn every_seed_and_finding_decodes_without_panic() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("fuzz").join("seeds");
    let mut n = 0;
    for t in std::fs::read_dir(&root).unwrap() {
        let t = t.unwrap();
        let target = t.file_name().to_string_lossy().into_owned();
        for f in std::fs::read_dir(t.path()).unwrap() {
            let f = f.unwrap().path();
            let data = std::fs::read(&f).unwrap();
            let ok = decode(&target, &data);
            // real files (named without the "crash-"/"oom-"/"timeout-" prefix a fuzzer gives) must decode
            let name = f.file_name().unwrap().to_string_lossy().into_owned();
            let finding = ["crash-", "oom-", "timeout-", "slow-unit-", "leak-"].iter().any(|p| name.starts_with(p));
            assert!(ok || finding, "{}: a real {target} seed does not decode", f.display());
            n += 1;
        }
    }
    assert!(n >= 14, "one seed per target at least, found {n}");
}
