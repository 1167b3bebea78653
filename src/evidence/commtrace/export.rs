//! `export param` and `export et`: a communication trace for other tools.
//!
//! Consumes a [`CommTrace`]. Produces, per rank, one JSON document that the
//! caller writes as `DIR/rank-N.json`: PARAM's comms-replay "basic" trace, or
//! a Chakra-style execution trace of the communication that `import et` reads
//! back. Refuses nothing a [`CommTrace`] can hold; compute is not exported.
//! Layouts: docs/METHODS.md, "Export to PARAM and Chakra".
use super::{CollectiveKind, CommTrace, TraceCollective, TraceDtype, TraceGroup};
use anyhow::{Context, Result};
use serde_json::{json, Value};
use std::collections::BTreeMap;

/// PARAM's integer group id for each group name.
fn param_pg_ids(groups: &[TraceGroup]) -> BTreeMap<String, u64> {
    let mut ids = BTreeMap::new();
    let mut next = groups.iter().filter_map(|g| g.name.parse::<u64>().ok()).max().map_or(0, |m| m + 1);
    for g in groups {
        if let Ok(n) = g.name.parse::<u64>() {
            ids.insert(g.name.clone(), n);
        }
    }
    let mut others: Vec<&TraceGroup> = groups.iter().filter(|g| g.name.parse::<u64>().is_err()).collect();
    others.sort_by(|a, b| a.name.cmp(&b.name));
    for g in others {
        ids.insert(g.name.clone(), next);
        next += 1;
    }
    ids
}

/// PARAM's dtype name.
fn param_dtype(d: TraceDtype) -> &'static str {
    match d {
        TraceDtype::F32 => "float",
        TraceDtype::Bf16 => "bfloat16",
        TraceDtype::F16 => "half",
        TraceDtype::F64 => "double",
        TraceDtype::I8 => "char",
        TraceDtype::U8 => "byte",
        TraceDtype::I32 => "int",
        TraceDtype::I64 => "long",
        TraceDtype::Bool => "bool",
    }
}

fn group_of<'a>(t: &'a CommTrace, c: &TraceCollective) -> Result<&'a TraceGroup> {
    t.group(&c.group).with_context(|| format!("internal: group {:?} not described", c.group))
}

/// Even split of `n` elements over a group of `k` (what PyTorch does without split sizes).
fn even(n: u64, k: usize) -> Vec<u64> {
    vec![n / (k.max(1) as u64); k]
}

/// PARAM basic traces, one per rank, in rank order.
pub fn param(t: &CommTrace) -> Result<Vec<(u32, Value)>> {
    let ids = param_pg_ids(&t.groups);
    let mut out = Vec::with_capacity(t.ranks.len());
    for r in &t.ranks {
        let mut list: Vec<Value> = t
            .groups
            .iter()
            .map(|g| {
                json!({
                    "comms": "init",
                    "req": -1,
                    "pg_id": ids[&g.name],
                    "pg_name": g.name,
                    "pg_desc": g.desc,
                    "global_ranks": g.members,
                    "world_size": g.members.len(),
                })
            })
            .collect();
        for c in &r.collectives {
            let g = group_of(t, c)?;
            let mut e = json!({
                "comms": c.kind.param_name(),
                "req": c.seq,
                "pg_id": ids[&g.name],
                "global_ranks": g.members,
                "world_size": g.members.len(),
                "in_msg_size": c.in_elems,
                "out_msg_size": c.out_elems,
                "dtype": param_dtype(c.dtype),
                "markers": [c.source_name],
            });
            let m = e.as_object_mut().context("internal: not an object")?;
            if c.kind == CollectiveKind::AllToAll {
                let n = g.members.len();
                m.insert("in_split".into(), json!(c.in_split_elems.clone().unwrap_or_else(|| even(c.in_elems, n))));
                m.insert("out_split".into(), json!(c.out_split_elems.clone().unwrap_or_else(|| even(c.out_elems, n))));
            }
            if let Some(root) = c.root {
                m.insert("root".into(), json!(root));
            }
            if let Some(p) = c.peer {
                let (src, dst) = if c.kind == CollectiveKind::Send { (r.rank, p) } else { (p, r.rank) };
                m.insert("src_rank".into(), json!(src));
                m.insert("dst_rank".into(), json!(dst));
                m.insert("use_batch".into(), json!(false));
            }
            if let Some(h) = c.host_start_ns {
                m.insert("startTime_ns".into(), json!(h));
            }
            list.push(e);
        }
        out.push((r.rank, Value::Array(list)));
    }
    Ok(out)
}

/// Chakra ET schema written.
pub(crate) const ET_SCHEMA: &str = "1.1.1-chakra.0.0.4";

fn node(id: u64, name: &str, parent: u64, values: Vec<Value>, types: Vec<&str>, attrs: Vec<Value>) -> Value {
    let shapes: Vec<Value> =
        types.iter().map(|t| if t.starts_with("Tuple") { json!([[], []]) } else { json!([]) }).collect();
    let mut all_attrs = vec![
        json!({"name": "rf_id", "type": "uint64", "value": id}),
        json!({"name": "fw_parent", "type": "uint64", "value": 0}),
        json!({"name": "seq_id", "type": "int64", "value": -1}),
        json!({"name": "scope", "type": "uint64", "value": 0}),
        json!({"name": "tid", "type": "uint64", "value": 1}),
        json!({"name": "fw_tid", "type": "uint64", "value": 0}),
        json!({"name": "op_schema", "type": "string", "value": ""}),
        json!({"name": "kernel_backend", "type": "string", "value": ""}),
        json!({"name": "kernel_file", "type": "string", "value": ""}),
        json!({"name": "tensor_range", "type": "string", "value": ""}),
    ];
    all_attrs.extend(attrs);
    let empty = json!({"values": [], "shapes": [], "types": [], "strides": []});
    json!({
        "id": id,
        "name": name,
        "ctrl_deps": parent,
        "inputs": {"values": values, "shapes": shapes.clone(), "types": types, "strides": shapes},
        "outputs": empty,
        "attrs": all_attrs,
    })
}

/// Members as PyTorch's (start, stride): stride -1 when not evenly strided.
fn start_stride(members: &[u32]) -> (i64, i64) {
    let start = members.first().map_or(0, |&m| m as i64);
    if members.len() < 2 {
        return (start, if members.len() == 1 { 0 } else { 1 });
    }
    let stride = members[1] as i64 - members[0] as i64;
    let strided = members.windows(2).all(|w| w[1] as i64 - w[0] as i64 == stride);
    (start, if strided && stride > 0 { stride } else { -1 })
}

/// Chakra-style execution traces of the communication, one per rank, in rank order.
pub fn et(t: &CommTrace) -> Result<Vec<(u32, Value)>> {
    let mut out = Vec::with_capacity(t.ranks.len());
    let pgs: Vec<Value> = t
        .groups
        .iter()
        .map(|g| {
            json!({"pg_name": g.name, "pg_desc": g.desc, "backend_config": "",
                   "ranks": g.members, "group_size": g.members.len(), "group_count": t.groups.len()})
        })
        .collect();
    let pg_text = serde_json::to_string(&pgs)?;
    for r in &t.ranks {
        let mut nodes = vec![
            node(1, "[pytorch|profiler|execution_trace|process]", 1, vec![], vec![], vec![]),
            node(2, "[pytorch|profiler|execution_trace|thread]", 1, vec![], vec![], vec![]),
            node(3, "## process_group:init ##", 2, vec![json!(pg_text)], vec!["String"], vec![]),
        ];
        for (i, c) in r.collectives.iter().enumerate() {
            let g = group_of(t, c)?;
            let local = |global: u32| g.members.iter().position(|&m| m == global).map_or(-1, |p| p as i64);
            let recorded = match (c.root, c.peer) {
                (Some(x), _) | (None, Some(x)) => local(x),
                (None, None) => local(r.rank),
            };
            let (start, stride) = start_stride(&g.members);
            let split_text = |s: &Option<Vec<u64>>| s.as_ref().map_or("[]".to_string(), |v| json!(v).to_string());
            let split_list = |s: &Option<Vec<u64>>| s.clone().unwrap_or_default();
            let values = vec![
                json!([c.seq, c.kind.is_p2p()]),
                json!([c.group, g.desc.clone().unwrap_or_default()]),
                json!(recorded),
                json!(c.source_name),
                json!(split_list(&c.in_split_elems)),
                json!(split_list(&c.out_split_elems)),
                json!(start),
                json!(stride),
                json!(g.members.len()),
            ];
            let types = vec![
                "Tuple[Int,Bool]",
                "Tuple[String,String]",
                "Int",
                "String",
                "GenericList[Int]",
                "GenericList[Int]",
                "Int",
                "Int",
                "Int",
            ];
            let mut attrs = vec![
                json!({"name": "collective_name", "type": "string", "value": c.source_name}),
                json!({"name": "dtype", "type": "string", "value": c.dtype.pytorch_name()}),
                json!({"name": "in_msg_nelems", "type": "uint64", "value": c.in_elems}),
                json!({"name": "out_msg_nelems", "type": "uint64", "value": c.out_elems}),
                json!({"name": "in_split_size", "type": "string", "value": split_text(&c.in_split_elems)}),
                json!({"name": "out_split_size", "type": "string", "value": split_text(&c.out_split_elems)}),
                json!({"name": "global_rank_start", "type": "int64", "value": start}),
                json!({"name": "global_rank_stride", "type": "int64", "value": stride}),
                json!({"name": "pg_name", "type": "string", "value": c.group}),
                json!({"name": "pg_desc", "type": "string", "value": g.desc.clone().unwrap_or_default()}),
                json!({"name": "pg_size", "type": "uint64", "value": g.members.len()}),
            ];
            if let Some(s) = c.stream {
                attrs.push(json!({"name": "stream", "type": "uint64", "value": s}));
            }
            nodes.push(node(4 + i as u64, "record_param_comms", 2, values, types, attrs));
        }
        out.push((r.rank, json!({"schema": ET_SCHEMA, "pid": r.rank, "nodes": nodes})));
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn strides_and_group_ids() {
        assert_eq!(start_stride(&[0, 2, 4]), (0, 2));
        assert_eq!(start_stride(&[1, 2, 7]), (1, -1));
        assert_eq!(start_stride(&[5]), (5, 0));
        let g = |n: &str| TraceGroup { name: n.into(), desc: None, members: vec![0] };
        let ids = param_pg_ids(&[g("1"), g("tp"), g("0"), g("dp")]);
        assert_eq!((ids["0"], ids["1"], ids["dp"], ids["tp"]), (0, 1, 2, 3));
    }
}
