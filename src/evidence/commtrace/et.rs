//! `import et`: PyTorch execution traces (Chakra host execution-trace JSON).
//!
//! Consumes one file per rank as `torch.profiler.ExecutionTraceObserver`
//! writes it: its process-group node, its `record_param_comms` nodes and the
//! top-level operators between them. Produces that rank's part of a
//! [`CommTrace`](super::CommTrace): collectives in execution order, every time
//! and duration absent (an execution trace records order, not time). Refuses
//! a file whose collectives disagree on its rank. Fields used and conventions:
//! docs/METHODS.md, "Execution-trace import".
use super::json::{i64_of, str_of, u32_of, u64_of};
use super::{
    classify_name, global_rank, number_sequences, ClockDomain, CollectiveKind, ComputeOp, Limits, RankRecord,
    SourceFile, TraceClock, TraceCollective, TraceDtype, TraceGroup, UnknownField,
};
use crate::core::collective::Buffers;
use crate::core::refusal::{refuse, Code};
use anyhow::{bail, Context, Result};
use serde::Deserialize;
use serde_json::value::RawValue;
use serde_json::Value;
use std::borrow::Cow;
use std::path::Path;

/// The most bytes one node may span in the file, bounding the memory of decoding one
/// node (docs/REFERENCE.md, "Limits").
pub const MAX_NODE_BYTES: usize = 64 << 20;

/// An execution-trace file: its schema and what import keeps of its nodes.
struct EtFile {
    schema: Option<String>,
    time: Option<String>,
    nodes: Vec<Slim>,
}

/// What import keeps of one node whatever the node holds (32 bytes): its id, its parent,
/// what kind of node it is, and where its text lies in the file, to decode it again.
#[derive(Clone, Copy)]
struct Slim {
    id: u64,
    parent: u64,
    off: u64,
    len: u32,
    kind: u8,
}

const HAS_PARENT: u8 = 1;
const COMM: u8 = 2;
const PG: u8 = 4;
const THREAD: u8 = 8;
const MARKER: u8 = 16;

impl Slim {
    fn parent(&self) -> Option<u64> {
        (self.kind & HAS_PARENT != 0).then_some(self.parent)
    }
}

/// Why the decode stopped at a node, when it was a limit.
#[derive(Default)]
struct Over {
    nodes: std::cell::Cell<bool>,
    node_bytes: std::cell::Cell<Option<usize>>,
}

/// Decodes an execution-trace file, counting `nodes` as they are read.
struct FileSeed<'a> {
    base: usize,
    len: usize,
    max_nodes: usize,
    over: &'a Over,
}

impl<'de> serde::de::DeserializeSeed<'de> for FileSeed<'_> {
    type Value = EtFile;
    fn deserialize<D: serde::Deserializer<'de>>(self, d: D) -> std::result::Result<EtFile, D::Error> {
        d.deserialize_map(self)
    }
}

impl<'de> serde::de::Visitor<'de> for FileSeed<'_> {
    type Value = EtFile;
    fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        f.write_str("an object with nodes")
    }
    fn visit_map<A: serde::de::MapAccess<'de>>(self, mut map: A) -> std::result::Result<EtFile, A::Error> {
        let (mut schema, mut nodes, mut time) = (None, None, None);
        while let Some(key) = map.next_key::<Cow<'de, str>>()? {
            match key.as_ref() {
                "schema" => schema = map.next_value()?,
                "time" => time = map.next_value::<Option<Value>>()?.and_then(|v| v.as_str().map(str::to_string)),
                "nodes" => {
                    nodes = Some(map.next_value_seed(NodesSeed {
                        base: self.base,
                        len: self.len,
                        max: self.max_nodes,
                        over: self.over,
                    })?)
                }
                _ => {
                    map.next_value::<serde::de::IgnoredAny>()?;
                }
            }
        }
        let nodes = nodes.ok_or_else(|| serde::de::Error::missing_field("nodes"))?;
        Ok(EtFile { schema, time, nodes })
    }
}

/// The `nodes` list: each node is counted as the parser reaches it and the
/// list is refused at the first one past the limit, before it is kept; of
/// each node only its [`Slim`] is kept.
struct NodesSeed<'a> {
    base: usize,
    len: usize,
    max: usize,
    over: &'a Over,
}

impl<'de> serde::de::DeserializeSeed<'de> for NodesSeed<'_> {
    type Value = Vec<Slim>;
    fn deserialize<D: serde::Deserializer<'de>>(self, d: D) -> std::result::Result<Self::Value, D::Error> {
        d.deserialize_seq(self)
    }
}

impl<'de> serde::de::Visitor<'de> for NodesSeed<'_> {
    type Value = Vec<Slim>;
    fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        write!(f, "a list of at most {} nodes", self.max)
    }
    fn visit_seq<A: serde::de::SeqAccess<'de>>(self, mut seq: A) -> std::result::Result<Self::Value, A::Error> {
        use serde::de::Error;
        // room for as many nodes as the text can hold (the smallest node,
        // `{"id":0,"name":""},`, is 19 bytes), at most the limit: kept once, never regrown
        let mut out = Vec::with_capacity(self.max.min(self.len / 19 + 1));
        loop {
            if out.len() == self.max {
                if seq.next_element::<serde::de::IgnoredAny>()?.is_some() {
                    self.over.nodes.set(true);
                    return Err(A::Error::custom(format!("more than {} nodes, over the limit", self.max)));
                }
                return Ok(out);
            }
            let Some(raw) = seq.next_element::<&'de RawValue>()? else { return Ok(out) };
            let text = raw.get();
            if text.len() > MAX_NODE_BYTES {
                self.over.node_bytes.set(Some(text.len()));
                return Err(A::Error::custom("a node over the size limit"));
            }
            let head: Head =
                serde_json::from_str(text).map_err(|e| A::Error::custom(format!("node {}: {e}", out.len())))?;
            let name = head.name.as_ref();
            let flag = |yes: bool, f: u8| if yes { f } else { 0 };
            let kind = flag(head.ctrl_deps.is_some(), HAS_PARENT)
                | flag(name == "record_param_comms", COMM)
                | flag(name.contains(PG_INIT), PG)
                | flag(name == THREAD_NODE, THREAD)
                | flag(name.starts_with("## "), MARKER);
            let off = (text.as_ptr() as usize).wrapping_sub(self.base) as u64;
            out.push(Slim { id: head.id, parent: head.ctrl_deps.unwrap_or(0), off, len: text.len() as u32, kind });
        }
    }
}

/// What the first pass reads of a node.
#[derive(Deserialize)]
struct Head<'a> {
    id: u64,
    #[serde(borrow)]
    name: Cow<'a, str>,
    #[serde(default)]
    ctrl_deps: Option<u64>,
}

/// A node decoded whole (only the ones import uses, one at a time); values
/// stay as their text until read.
#[derive(Deserialize)]
struct Node<'a> {
    id: u64,
    #[serde(borrow)]
    name: Cow<'a, str>,
    #[serde(default, borrow)]
    inputs: Option<Inputs<'a>>,
    #[serde(default, borrow)]
    attrs: Vec<Attr<'a>>,
}

#[derive(Deserialize)]
struct Inputs<'a> {
    #[serde(default, borrow)]
    values: Vec<&'a RawValue>,
}

#[derive(Deserialize)]
struct Attr<'a> {
    #[serde(borrow)]
    name: Cow<'a, str>,
    #[serde(borrow)]
    value: &'a RawValue,
}

const THREAD_NODE: &str = "[pytorch|profiler|execution_trace|thread]";
const PG_INIT: &str = "process_group:init";

/// The clock contract of an imported execution trace: no times at all.
pub fn clock() -> TraceClock {
    TraceClock {
        domain: ClockDomain::None,
        aligned_across_ranks: false,
        note: "an execution trace records the order of operators, not their times".into(),
    }
}

/// What an execution trace cannot tell.
pub fn unknown() -> Vec<UnknownField> {
    let r = "execution traces record operator order and arguments, not times";
    vec![
        UnknownField { field: "host_start_ns".into(), reason: r.into() },
        UnknownField { field: "host_duration_ns".into(), reason: r.into() },
        UnknownField { field: "device".into(), reason: "execution traces record no kernels".into() },
        UnknownField { field: "compute_before.duration_ns".into(), reason: r.into() },
        UnknownField {
            field: "stream".into(),
            reason: "PyTorch's execution trace records no streams (present only in traces commcanary exported)".into(),
        },
    ]
}

/// Import one rank's file.
pub(crate) fn import_file(path: &Path, limits: &Limits) -> Result<RankRecord> {
    let (json, sha256) = super::read_source(path, limits)?;
    parse(&json, &path.display().to_string(), sha256, limits).with_context(|| path.display().to_string())
}

fn attr(n: &Node, key: &str) -> Result<Option<Value>> {
    let a = n.attrs.iter().find(|a| a.name == key);
    a.map(|a| serde_json::from_str(a.value.get()).with_context(|| format!("node {} attr {key:?} is not JSON", n.id)))
        .transpose()
}

fn need(n: &Node, key: &str) -> Result<Value> {
    attr(n, key)?.with_context(|| format!("node {} ({}) has no {key:?} attr", n.id, n.name))
}

/// Decode the node `s` whole from the file's text.
fn whole<'a>(json: &'a [u8], s: &Slim) -> Result<Node<'a>> {
    let text = usize::try_from(s.off)
        .ok()
        .and_then(|o| json.get(o..o.checked_add(s.len as usize)?))
        .context("internal: node outside the file")?;
    serde_json::from_slice(text).with_context(|| format!("node {}: not an execution-trace node", s.id))
}

/// Parse one rank's execution-trace JSON (the decoder the fuzz target drives).
pub fn parse(json: &[u8], label: &str, sha256: String, limits: &Limits) -> Result<RankRecord> {
    use serde::de::DeserializeSeed;
    let over = Over::default();
    let mut de = serde_json::Deserializer::from_slice(json);
    let seed = FileSeed { base: json.as_ptr() as usize, len: json.len(), max_nodes: limits.max_nodes, over: &over };
    let file = seed.deserialize(&mut de).and_then(|f| de.end().map(|_| f));
    if over.nodes.get() {
        return Err(refuse(
            Code::OverLimit,
            format!(
                "more than {} nodes, over the limit (refused at the first one past it, before it was kept)",
                limits.max_nodes
            ),
        ));
    }
    if let Some(n) = over.node_bytes.get() {
        return Err(refuse(
            Code::OverLimit,
            format!("a node of {n} bytes, over the limit of {MAX_NODE_BYTES} bytes for one node"),
        ));
    }
    let file = file.context("not a PyTorch execution trace: expected an object with nodes")?;
    let mut nodes = file.nodes;
    nodes.sort_unstable_by_key(|n| n.id);
    if let Some(w) = nodes.windows(2).find(|w| w[0].id == w[1].id) {
        bail!("node id {} appears twice", w[0].id);
    }
    let index_of = |id: u64| nodes.binary_search_by_key(&id, |n| n.id).ok();
    // Process groups.
    let init = nodes.iter().find(|n| n.kind & PG != 0).context(
        "no `## process_group:init ##` node: the trace describes no process group (record it after init_process_group)",
    )?;
    let init = whole(json, init)?;
    let desc_value: Option<Value> =
        init.inputs.as_ref().and_then(|i| i.values.first()).and_then(|v| serde_json::from_str(v.get()).ok());
    let desc_text = desc_value.as_ref().and_then(|v| v.as_str()).with_context(|| {
        format!("node {} ({}): first input is not the process-group JSON string", init.id, init.name)
    })?;
    if desc_text.len() as u64 > limits.max_json_bytes {
        bail!("process-group description over the size limit");
    }
    let pgs: Vec<Value> = serde_json::from_str(desc_text)
        .with_context(|| format!("node {}: process-group description is not a JSON list (truncated?)", init.id))?;
    if pgs.len() > limits.max_groups {
        bail!("{} process groups, over the limit of {}", pgs.len(), limits.max_groups);
    }
    let mut groups: Vec<TraceGroup> = Vec::new();
    for (i, pg) in pgs.iter().enumerate() {
        let what = |k: &str| format!("process_group:init[{i}].{k}");
        let name =
            str_of(pg.get("pg_name").unwrap_or(&Value::Null), &what("pg_name"), limits.max_name_bytes)?.to_string();
        let desc = pg.get("pg_desc").and_then(|v| v.as_str()).map(str::to_string);
        let size = u64_of(pg.get("group_size").unwrap_or(&Value::Null), &what("group_size"))?;
        if size > limits.max_ranks as u64 {
            bail!("{} is {size}, over the limit of {}", what("group_size"), limits.max_ranks);
        }
        let listed =
            pg.get("ranks").and_then(|v| v.as_array()).with_context(|| format!("{} is not a list", what("ranks")))?;
        let members: Vec<u32> = if listed.is_empty() {
            (0..size as u32).collect()
        } else {
            if listed.len() as u64 != size {
                bail!("{} lists {} ranks but group_size is {size}", what("ranks"), listed.len());
            }
            listed.iter().map(|r| u32_of(r, &what("ranks"))).collect::<Result<_>>()?
        };
        groups.push(TraceGroup { name, desc, members });
    }
    drop(pgs);
    let world =
        groups.iter().flat_map(|g| g.members.iter().map(|&m| m + 1).chain([g.members.len() as u32])).max().unwrap_or(0);
    if world == 0 || world > limits.max_ranks {
        bail!("the process groups give a world of {world} ranks, outside 1..={}", limits.max_ranks);
    }

    // Which nodes contain a communication record (they are not compute): one
    // flag per node, by its place in id order.
    let mut holds_comm = vec![false; nodes.len()];
    for i in (0..nodes.len()).filter(|&i| nodes[i].kind & COMM != 0) {
        let mut at = i;
        // Bounded walk up the parent chain (a cycle in a damaged file stops at a node already marked).
        for _ in 0..nodes.len() {
            if std::mem::replace(&mut holds_comm[at], true) {
                break;
            }
            match nodes[at].parent().filter(|&p| p != nodes[at].id).and_then(index_of) {
                Some(p) => at = p,
                None => break,
            }
        }
    }
    let is_thread = |id: u64| index_of(id).is_some_and(|i| nodes[i].kind & THREAD != 0);

    let mut collectives: Vec<TraceCollective> = Vec::new();
    let mut pending: Vec<ComputeOp> = Vec::new();
    let mut own: Option<(u32, u64)> = None;
    for (i, s) in nodes.iter().enumerate() {
        if s.kind & COMM != 0 {
            let n = whole(json, s)?;
            let ctx = || format!("node {} (record_param_comms)", n.id);
            let cname_v = need(&n, "collective_name")?;
            let cname = str_of(&cname_v, "collective_name", limits.max_name_bytes)?;
            let Some(kind) = classify_name(cname).with_context(ctx)? else { continue };
            if collectives.len() >= limits.max_collectives {
                return Err(refuse(
                    Code::OverLimit,
                    format!("{label}: more than {} collectives in one file", limits.max_collectives),
                ));
            }
            let (mut c, local) = collective(&n, kind, cname, &groups).with_context(ctx)?;
            if !kind.is_p2p() && !kind.is_rooted() && kind != CollectiveKind::Barrier {
                let g = groups.iter().find(|g| g.name == c.group).context("internal: group vanished")?;
                let me = global_rank(g, local, "recorded rank").with_context(ctx)?;
                match own {
                    Some((r, first)) if r != me => bail!(
                        "node {} says this file is rank {me}, node {first} says rank {r}: one file must hold one rank",
                        n.id
                    ),
                    None => own = Some((me, n.id)),
                    _ => {}
                }
            }
            c.compute_before = std::mem::take(&mut pending);
            collectives.push(c);
        } else if s.parent().is_some_and(is_thread) && !holds_comm[i] && s.kind & MARKER == 0 {
            let n = whole(json, s)?;
            if n.name.len() > limits.max_name_bytes {
                bail!("node {}: name over the {}-byte limit", n.id, limits.max_name_bytes);
            }
            pending.push(ComputeOp {
                name: n.name.into_owned(),
                stream: None,
                device_start_ns: None,
                duration_ns: None,
            });
        }
    }
    drop(nodes);
    let rank = match own {
        Some((r, _)) => r,
        None => rank_from_file_name(label).with_context(|| {
            format!(
                "cannot tell which rank recorded {label}: it has no collective that records its \
                own rank, and its name has no rank-N"
            )
        })?,
    };
    // Point-to-point and rooted records were resolved against the group; a
    // file's own rank must be a member of every group it communicates on.
    for c in &collectives {
        let g = groups.iter().find(|g| g.name == c.group).context("internal: group vanished")?;
        if !g.members.contains(&rank) {
            bail!(
                "rank {rank} records {} on group {:?}, which it is not a member of ({:?})",
                c.source_name,
                g.name,
                g.members
            );
        }
    }
    number_sequences(&mut collectives);
    let mut facts = vec![("process groups".to_string(), serde_json::to_string(&groups)?)];
    facts.push(("ET schema".to_string(), file.schema.clone().unwrap_or_default()));
    let wall_span_ns = file.time.as_deref().and_then(wall_time_ns).map(|t| (t, t));
    Ok(RankRecord {
        wall_span_ns,
        file: SourceFile { path: label.to_string(), sha256, rank },
        world_size: world,
        run_facts: facts,
        groups,
        collectives,
        trailing_compute: pending,
        schema: file.schema,
        nccl_version: None,
    })
}

/// The observer's start time, `YYYY-MM-DD HH:MM:SS` (as PyTorch's
/// `ExecutionTraceObserver` writes `time`), as ns since the Unix epoch on the
/// civil calendar (days from civil: H. Hinnant, "chrono-Compatible Low-Level
/// Date Algorithms"); `None` if it is not in that form.
fn wall_time_ns(s: &str) -> Option<u64> {
    let b = s.as_bytes();
    if b.len() != 19 || b[4] != b'-' || b[7] != b'-' || b[10] != b' ' || b[13] != b':' || b[16] != b':' {
        return None;
    }
    let n = |r: std::ops::Range<usize>| -> Option<i64> { s.get(r)?.parse().ok() };
    let (y, m, d, hh, mm, ss) = (n(0..4)?, n(5..7)?, n(8..10)?, n(11..13)?, n(14..16)?, n(17..19)?);
    if !(1..=12).contains(&m) || !(1..=31).contains(&d) || hh > 23 || mm > 59 || ss > 60 {
        return None;
    }
    let y = if m <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let doy = (153 * (if m > 2 { m - 3 } else { m + 9 }) + 2) / 5 + d - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    let days = era * 146_097 + doe - 719_468;
    let secs = days * 86_400 + hh * 3600 + mm * 60 + ss;
    u64::try_from(secs).ok().map(|s| s * 1_000_000_000)
}

/// `rank-3`, `rank3`, `rank_3` in a file name.
fn rank_from_file_name(label: &str) -> Option<u32> {
    let name = Path::new(label).file_name()?.to_str()?;
    let at = name.find("rank")? + 4;
    let digits: String =
        name[at..].trim_start_matches(['-', '_', '.']).chars().take_while(|c| c.is_ascii_digit()).collect();
    digits.parse().ok()
}

/// Index of the group-local rank among a record's inputs.
fn rank_input(values: &[&RawValue]) -> Result<Value> {
    // (seq, is_p2p) pair, or a bare int seq: no leading tensor list.
    let is_seq = |v: &RawValue| {
        serde_json::from_str::<i64>(v.get()).is_ok() || serde_json::from_str::<(i64, bool)>(v.get()).is_ok()
    };
    let base = match values.first() {
        Some(v) if is_seq(v) => 0,
        Some(_) => 1,
        None => bail!("no inputs"),
    };
    let v = values.get(base + 2).context("inputs end before the recorded rank")?;
    serde_json::from_str(v.get()).context("the recorded rank is not JSON")
}

fn collective(n: &Node, kind: CollectiveKind, cname: &str, groups: &[TraceGroup]) -> Result<(TraceCollective, i64)> {
    let gname_v = need(n, "pg_name")?;
    let gname = str_of(&gname_v, "pg_name", 1 << 16)?;
    let group = groups.iter().find(|g| g.name == gname).with_context(|| {
        let described: Vec<&str> = groups.iter().map(|g| g.name.as_str()).collect();
        format!(
            "{cname} uses process group {gname:?}, which the process_group:init node never describes (described: \
            {described:?})"
        )
    })?;
    let size = group.members.len();
    if let Some(v) = attr(n, "pg_size")? {
        let s = u64_of(&v, "pg_size")?;
        if s != size as u64 {
            bail!("{cname} on group {gname:?} records pg_size {s}, but the group is described with {size} members");
        }
    }
    // Strided membership, where recorded, must be the described one (stride -1: not strided).
    if let (Some(start), Some(stride)) = (attr(n, "global_rank_start")?, attr(n, "global_rank_stride")?) {
        let (start, stride) = (i64_of(&start, "global_rank_start")?, i64_of(&stride, "global_rank_stride")?);
        if stride >= 0 {
            let strided: Vec<i64> = (0..size as i64).map(|i| start + i * stride).collect();
            let described: Vec<i64> = group.members.iter().map(|&m| m as i64).collect();
            if strided != described {
                bail!(
                    "{cname} on group {gname:?} records members start {start} stride {stride}, but the group is \
                    described with {described:?}"
                );
            }
        }
    }
    let dtype = TraceDtype::from_pytorch(str_of(&need(n, "dtype")?, "dtype", 64)?)?;
    let in_elems = u64_of(&need(n, "in_msg_nelems")?, "in_msg_nelems")?;
    let out_elems = u64_of(&need(n, "out_msg_nelems")?, "out_msg_nelems")?;
    let split = |key: &str| -> Result<Option<Vec<u64>>> {
        match attr(n, key)? {
            Some(v) if kind.row().buffers == Buffers::Splits => {
                super::json::splits(super::json::int_list_in_string(&v, key, size)?, key)
            }
            _ => Ok(None),
        }
    };
    let (in_split, out_split) = (split("in_split_size")?, split("out_split_size")?);
    let values = n.inputs.as_ref().map(|i| i.values.as_slice()).unwrap_or(&[]);
    let local = i64_of(&rank_input(values)?, "recorded rank")?;
    let (root, peer) = match (kind.is_rooted(), kind.is_p2p()) {
        (true, _) => (Some(global_rank(group, local, "root")?), None),
        (_, true) => (None, Some(global_rank(group, local, "peer")?)),
        _ => (None, None),
    };
    let mut c =
        TraceCollective::new(kind, cname, gname, dtype, (in_elems, out_elems), (in_split, out_split), (root, peer));
    c.stream = attr(n, "stream")?.map(|v| u64_of(&v, "stream")).transpose()?;
    Ok((c, local))
}

#[cfg(test)]
mod tests {
    #[test]
    fn rank_from_names() {
        assert_eq!(super::rank_from_file_name("dir/et.rank-12.json.gz"), Some(12));
        assert_eq!(super::rank_from_file_name("rank3.json"), Some(3));
        assert_eq!(super::rank_from_file_name("trace.json"), None);
    }

    #[test]
    fn start_times_on_the_civil_calendar() {
        // values from Python's calendar.timegm
        assert_eq!(super::wall_time_ns("1970-01-01 00:00:00"), Some(0));
        assert_eq!(super::wall_time_ns("2026-11-30 15:18:23"), Some(1_796_051_903_000_000_000));
        assert_eq!(super::wall_time_ns("2000-02-29 23:59:59"), Some(951_868_799_000_000_000));
        assert_eq!(super::wall_time_ns("2026-13-01 00:00:00"), None);
        assert_eq!(super::wall_time_ns("yesterday"), None);
    }
}
