//! `import kineto`: PyTorch profiler traces (Kineto's Chrome-trace JSON).
//!
//! Consumes one file per rank as `torch.profiler` exports it: its
//! `distributedInfo`, the `record_param_comms` operators and the kernels.
//! Produces that rank's part of a [`CommTrace`](super::CommTrace): every
//! collective with its host interval, its NCCL kernel's device interval and
//! stream, and the compute kernels between collectives, times in whole ns on
//! that rank's own clock (`aligned_across_ranks: false`). Refuses a trace of a
//! run that was not distributed. Fields used: docs/METHODS.md, "Kineto import".
use super::json::{i64_of, int_list_in_string, splits, str_of, u32_of, u64_of, us_to_ns};
use super::{
    classify_name, global_rank, number_sequences, ClockDomain, CollectiveKind, ComputeOp, DeviceSpan, Limits,
    RankRecord, SourceFile, TraceClock, TraceCollective, TraceDtype, TraceGroup, UnknownField,
};
use crate::core::collective::{Buffers, Lands};
use crate::core::refusal::{self, Code};
use anyhow::{bail, Context, Result};
use serde::Deserialize;
use serde_json::{Map, Value};
use std::collections::BTreeMap;
use std::path::Path;

/// The fields of a Kineto file that are used; `trace_events` holds only the
/// events [`used`] keeps, each with its position in `traceEvents`.
struct KinetoFile {
    schema_version: Option<Value>,
    base_time_ns: Option<u64>,
    distributed_info: Option<Value>,
    trace_events: Vec<(usize, Event)>,
}

/// Decodes a Kineto file, counting `traceEvents` as they are read ([`super::CountedSeq`]).
struct FileSeed<'a> {
    max_events: usize,
    over: &'a std::cell::Cell<bool>,
}

impl<'de> serde::de::DeserializeSeed<'de> for FileSeed<'_> {
    type Value = KinetoFile;
    fn deserialize<D: serde::Deserializer<'de>>(self, d: D) -> std::result::Result<KinetoFile, D::Error> {
        d.deserialize_map(self)
    }
}

impl<'de> serde::de::Visitor<'de> for FileSeed<'_> {
    type Value = KinetoFile;
    fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        f.write_str("an object with traceEvents")
    }
    fn visit_map<A: serde::de::MapAccess<'de>>(self, mut map: A) -> std::result::Result<KinetoFile, A::Error> {
        let (mut schema_version, mut distributed_info, mut trace_events, mut base_time_ns) = (None, None, None, None);
        while let Some(key) = map.next_key::<String>()? {
            match key.as_str() {
                "schemaVersion" => schema_version = map.next_value()?,
                "distributedInfo" => distributed_info = map.next_value()?,
                // where `ts` counts from (absent in older traces, whose `ts` count from the epoch)
                "baseTimeNanoseconds" => base_time_ns = map.next_value::<Option<Value>>()?.and_then(|v| v.as_u64()),
                "traceEvents" => {
                    trace_events = Some(map.next_value_seed(super::CountedSeq {
                        max: self.max_events,
                        over: self.over,
                        keep: used,
                    })?);
                }
                _ => {
                    map.next_value::<serde::de::IgnoredAny>()?;
                }
            }
        }
        let trace_events = trace_events.ok_or_else(|| serde::de::Error::missing_field("traceEvents"))?;
        Ok(KinetoFile { schema_version, base_time_ns, distributed_info, trace_events })
    }
}

/// Whether the import reads this event: complete (`X`) events of the
/// categories it uses. Others are counted against the limit and dropped.
fn used(e: &Event) -> bool {
    e.ph.as_deref() == Some("X")
        && match (e.cat.as_deref(), e.name.as_deref()) {
            (Some("cuda_runtime" | "cuda_driver" | "kernel" | "gpu_memcpy" | "gpu_memset"), Some(_)) => true,
            (Some("cpu_op"), Some(n)) => n == "record_param_comms",
            _ => false,
        }
}

#[derive(Deserialize)]
struct Event {
    ph: Option<String>,
    cat: Option<String>,
    name: Option<String>,
    ts: Option<Value>,
    dur: Option<Value>,
    #[serde(default)]
    args: Option<Map<String, Value>>,
}

/// The clock contract of an imported Kineto trace.
pub fn clock() -> TraceClock {
    TraceClock {
        domain: ClockDomain::HostPerRank,
        aligned_across_ranks: false,
        note: "ns on each rank's own host clock as its profiler read it (Kineto `ts` x 1000, rounded); \
               device times were put on that clock by the profiler; no offset between ranks' clocks is recorded"
            .into(),
    }
}

/// What a Kineto trace cannot tell.
pub fn unknown() -> Vec<UnknownField> {
    vec![UnknownField {
        field: "cross-rank time alignment".into(),
        reason: "Kineto timestamps are per host; compare gaps within a rank, never times across ranks".into(),
    }]
}

/// Import one rank's file.
pub(crate) fn import_file(path: &Path, limits: &Limits) -> Result<RankRecord> {
    let (json, sha256) = super::read_source(path, limits)?;
    parse(&json, &path.display().to_string(), sha256, limits).with_context(|| path.display().to_string())
}

fn arg<'a>(args: &'a Map<String, Value>, key: &str) -> Result<&'a Value> {
    args.get(key).with_context(|| format!("record_param_comms has no {key:?} argument"))
}

/// Parse one rank's Kineto JSON (the decoder the fuzz target drives).
pub fn parse(json: &[u8], label: &str, sha256: String, limits: &Limits) -> Result<RankRecord> {
    use serde::de::DeserializeSeed;
    let over = std::cell::Cell::new(false);
    let mut de = serde_json::Deserializer::from_slice(json);
    let file =
        FileSeed { max_events: limits.max_events, over: &over }.deserialize(&mut de).and_then(|f| de.end().map(|_| f));
    if over.get() {
        return Err(refusal::refuse(
            Code::OverLimit,
            format!(
                "more than {} events in traceEvents, over the limit (refused at the first one past it, before it \
                was built)",
                limits.max_events
            ),
        ));
    }
    let file = file.context("not a PyTorch profiler (Kineto) trace: expected an object with traceEvents")?;
    let info = file.distributed_info.context(
        "no distributedInfo: not a trace of a distributed PyTorch run (the profiler writes it when \
            torch.distributed is initialized)",
    )?;
    let rank = u32_of(info.get("rank").unwrap_or(&Value::Null), "distributedInfo.rank")?;
    let world = u32_of(info.get("world_size").unwrap_or(&Value::Null), "distributedInfo.world_size")?;
    if world == 0 || world > limits.max_ranks {
        bail!("distributedInfo.world_size is {world}, outside 1..={}", limits.max_ranks);
    }
    let nccl_version = info.get("nccl_version").and_then(|v| v.as_str()).map(str::to_string);
    let backend = info.get("backend").and_then(|v| v.as_str()).unwrap_or("").to_string();
    let pgs = info.get("pg_config").and_then(|v| v.as_array()).context("distributedInfo has no pg_config list")?;
    if pgs.len() > limits.max_groups {
        bail!("{} process groups, over the limit of {}", pgs.len(), limits.max_groups);
    }
    let mut groups: Vec<TraceGroup> = Vec::with_capacity(pgs.len());
    for (i, pg) in pgs.iter().enumerate() {
        let what = |k: &str| format!("distributedInfo.pg_config[{i}].{k}");
        let name =
            str_of(pg.get("pg_name").unwrap_or(&Value::Null), &what("pg_name"), limits.max_name_bytes)?.to_string();
        let desc = pg.get("pg_desc").and_then(|v| v.as_str()).map(str::to_string);
        let ranks =
            pg.get("ranks").and_then(|v| v.as_array()).with_context(|| format!("{} is not a list", what("ranks")))?;
        let size = pg.get("pg_size").map(|v| u64_of(v, &what("pg_size"))).transpose()?;
        if ranks.len() > limits.max_ranks as usize {
            bail!("{} has {} entries, over the limit of {}", what("ranks"), ranks.len(), limits.max_ranks);
        }
        let mut members = ranks.iter().map(|r| u32_of(r, &what("ranks"))).collect::<Result<Vec<u32>>>()?;
        if size.is_some_and(|s| s > limits.max_ranks as u64) {
            bail!("{} is {}, over the limit of {}", what("pg_size"), size.unwrap_or(0), limits.max_ranks);
        }
        // An empty list means every rank of the world (PyTorch's pg_config_info convention).
        if members.is_empty() {
            members = (0..size.map(|s| s as u32).unwrap_or(world)).collect();
        }
        if let Some(s) = size.filter(|&s| s != members.len() as u64) {
            bail!("{} lists {} ranks but pg_size is {s}", what("ranks"), members.len());
        }
        groups.push(TraceGroup { name, desc, members });
    }
    let run_facts = vec![
        ("world size".to_string(), world.to_string()),
        ("backend".to_string(), backend),
        ("NCCL version".to_string(), nccl_version.clone().unwrap_or_else(|| "(none)".into())),
        ("process groups".to_string(), serde_json::to_string(&groups)?),
    ];

    // Host launch time per correlation id, NCCL kernels per External id, compute kernels.
    let mut launch_ns: BTreeMap<u64, u64> = BTreeMap::new();
    // External id -> its NCCL kernels: (start ns, end ns, name, stream).
    type Kernels = Vec<(u64, u64, String, Option<u64>)>;
    let mut nccl: BTreeMap<u64, Kernels> = BTreeMap::new();
    let mut compute: Vec<(u64, ComputeOp)> = Vec::new();
    // (host start, args, position in traceEvents, position among the kept events)
    let mut comms: Vec<(u64, &Map<String, Value>, u64, usize)> = Vec::new();
    for (k, (i, e)) in file.trace_events.iter().enumerate() {
        let i = *i;
        if e.ph.as_deref() != Some("X") {
            continue;
        }
        let (Some(cat), Some(name)) = (e.cat.as_deref(), e.name.as_deref()) else { continue };
        let ctx = || format!("traceEvents[{i}] ({name})");
        if name.len() > limits.max_name_bytes {
            bail!("{}: name of {} bytes, over the {}-byte limit", ctx(), name.len(), limits.max_name_bytes);
        }
        match cat {
            "cuda_runtime" | "cuda_driver" => {
                if let (Some(c), Some(ts)) =
                    (e.args.as_ref().and_then(|a| a.get("correlation")).and_then(|v| v.as_u64()), &e.ts)
                {
                    launch_ns.insert(c, us_to_ns(ts, &format!("{}.ts", ctx()))?);
                }
            }
            "kernel" | "gpu_memcpy" | "gpu_memset" => {
                let ts = us_to_ns(e.ts.as_ref().unwrap_or(&Value::Null), &format!("{}.ts", ctx()))?;
                let dur = us_to_ns(e.dur.as_ref().unwrap_or(&Value::Null), &format!("{}.dur", ctx()))?;
                let args = e.args.as_ref();
                let stream = args.and_then(|a| a.get("stream")).and_then(|v| v.as_u64());
                if cat == "kernel" && name.starts_with("nccl") {
                    if let Some(ext) = args.and_then(|a| a.get("External id")).and_then(|v| v.as_u64()) {
                        nccl.entry(ext).or_default().push((ts, ts.saturating_add(dur), name.to_string(), stream));
                    }
                } else {
                    let corr = args.and_then(|a| a.get("correlation")).and_then(|v| v.as_u64());
                    compute.push((
                        corr.unwrap_or(u64::MAX),
                        ComputeOp { name: name.to_string(), stream, device_start_ns: Some(ts), duration_ns: Some(dur) },
                    ));
                }
            }
            "cpu_op" if name == "record_param_comms" => {
                let args = e.args.as_ref().with_context(|| format!("{}: no args", ctx()))?;
                let ts = us_to_ns(e.ts.as_ref().unwrap_or(&Value::Null), &format!("{}.ts", ctx()))?;
                comms.push((ts, args, i as u64, k));
            }
            _ => {}
        }
    }
    comms.sort_by_key(|&(ts, _, i, _)| (ts, i));
    let mut collectives: Vec<TraceCollective> = Vec::new();
    for &(ts, args, i, k) in &comms {
        let ctx = || format!("traceEvents[{i}] (record_param_comms)");
        let cname = str_of(arg(args, "Collective name")?, "Collective name", limits.max_name_bytes)?;
        let Some(kind) = classify_name(cname).with_context(ctx)? else { continue };
        if collectives.len() >= limits.max_collectives {
            bail!("more than {} collectives on rank {rank}", limits.max_collectives);
        }
        let c = collective(kind, cname, args, &groups, rank, ts).with_context(ctx)?;
        let ext = args.get("External id").and_then(|v| v.as_u64());
        let kernels = ext.and_then(|x| nccl.get(&x));
        let device = kernels.map(|ks| DeviceSpan {
            start_ns: ks.iter().map(|k| k.0).min().unwrap_or(0),
            end_ns: ks.iter().map(|k| k.1).max().unwrap_or(0),
            kernel: ks[0].2.clone(),
        });
        let stream = kernels.and_then(|ks| ks[0].3);
        let dur =
            file.trace_events[k].1.dur.as_ref().map(|d| us_to_ns(d, &format!("traceEvents[{i}].dur"))).transpose()?;
        collectives.push(TraceCollective { device, stream, host_duration_ns: dur, ..c });
    }
    // Compute goes before the first collective whose host start follows its launch.
    compute.sort_by_key(|(corr, op)| (launch_ns.get(corr).copied().or(op.device_start_ns), op.device_start_ns));
    let mut trailing = Vec::new();
    for (corr, op) in compute {
        let at = launch_ns.get(&corr).copied().or(op.device_start_ns).unwrap_or(0);
        match collectives.iter_mut().find(|c| c.host_start_ns.is_some_and(|h| h > at)) {
            Some(c) => c.compute_before.push(op),
            None => trailing.push(op),
        }
    }
    number_sequences(&mut collectives);
    let base = file.base_time_ns.unwrap_or(0);
    let starts = || collectives.iter().filter_map(|c| c.host_start_ns);
    let wall_span_ns =
        starts().min().zip(starts().max()).map(|(a, b)| (base.saturating_add(a), base.saturating_add(b)));
    Ok(RankRecord {
        wall_span_ns,
        file: SourceFile { path: label.to_string(), sha256, rank },
        world_size: world,
        run_facts,
        groups,
        collectives,
        trailing_compute: trailing,
        schema: file.schema_version.map(|v| v.to_string().trim_matches('"').to_string()),
        nccl_version,
    })
}

fn collective(
    kind: CollectiveKind,
    cname: &str,
    args: &Map<String, Value>,
    groups: &[TraceGroup],
    rank: u32,
    ts_ns: u64,
) -> Result<TraceCollective> {
    let gname = str_of(arg(args, "Process Group Name")?, "Process Group Name", 1 << 16)?;
    let group = groups.iter().find(|g| g.name == gname).with_context(|| {
        let described: Vec<&str> = groups.iter().map(|g| g.name.as_str()).collect();
        format!(
            "{cname} uses process group {gname:?}, which distributedInfo.pg_config never describes (described: \
            {described:?})"
        )
    })?;
    // The record repeats the membership; it must be the described one.
    if let Some(v) = args.get("Process Group Ranks") {
        let listed = int_list_in_string(v, "Process Group Ranks", group.members.len() + 1)?;
        let described: Vec<i64> = group.members.iter().map(|&m| m as i64).collect();
        if !listed.is_empty() && listed != described {
            bail!("{cname} on group {gname:?} lists ranks {listed:?}, but the group is described with {described:?}");
        }
    }
    if !group.members.contains(&rank) {
        bail!("{cname} on group {gname:?} recorded by rank {rank}, which is not a member ({:?})", group.members);
    }
    // `Rank` of a collective that is neither rooted nor point-to-point is the
    // recording process's own rank in the group: it must be this file's rank
    if !kind.is_rooted() && !kind.is_p2p() && kind != CollectiveKind::Barrier {
        if let Some(v) = args.get("Rank") {
            let me = global_rank(group, i64_of(v, "Rank")?, "Rank")?;
            if me != rank {
                bail!(
                    "{cname} on group {gname:?} says it was recorded by rank {me}, but distributedInfo.rank says \
                    this file is rank {rank}: one file holds one rank"
                );
            }
        }
    }
    let dtype = TraceDtype::from_pytorch(str_of(arg(args, "dtype")?, "dtype", 64)?)?;
    let in_elems = u64_of(arg(args, "In msg nelems")?, "In msg nelems")?;
    let out_elems = u64_of(arg(args, "Out msg nelems")?, "Out msg nelems")?;
    let n = group.members.len();
    let split = |key: &str| match args.get(key) {
        Some(v) if kind.row().buffers == Buffers::Splits => splits(int_list_in_string(v, key, n)?, key),
        _ => Ok(None),
    };
    let (in_split, out_split) = (split("In split size")?, split("Out split size")?);
    let recorded_rank = || args.get("Rank").map(|v| i64_of(v, "Rank")).transpose();
    let (root, peer) = match (kind.is_rooted(), kind.is_p2p()) {
        (true, _) => {
            let r = recorded_rank()?.context("rooted collective without a Rank (root) argument")?;
            (Some(global_rank(group, r, "root")?), None)
        }
        (_, true) => {
            // a send records where it goes, a receive where it comes from
            let key = if kind.row().lands == Lands::AtPeer { "Dst Rank" } else { "Src Rank" };
            let p = match args.get(key) {
                Some(v) => i64_of(v, key)?,
                None => recorded_rank()?.with_context(|| format!("{cname} without {key:?} or Rank"))?,
            };
            (None, Some(global_rank(group, p, "peer")?))
        }
        _ => (None, None),
    };
    Ok(TraceCollective {
        host_start_ns: Some(ts_ns),
        ..TraceCollective::new(kind, cname, gname, dtype, (in_elems, out_elems), (in_split, out_split), (root, peer))
    })
}
