//! The trace collective one captured call stands for, or why it has none. Consumes a decoded call
//! with its rank's datatypes, ops and communicators (a communicator becomes a trace group, named
//! alike on every member); produces a [`TraceCollective`]: kind, dtype, counts, a v-call's
//! per-member counts, root, a reduction other than a sum, times on rank 0's clock where fitted.
//! Leaves out, saying why: point-to-point, probes, completion and communicator calls, a call that
//! failed, an undescribed communicator or datatype, a reduction without an element-wise form, a
//! v-call without its per-member counts (a format-1 capture). Refuses nothing.
use super::rank_capture::{CallRecord, RankCapture, CAPTURE_FORMAT_VERSION};
use crate::core::clock::ClockModel;
use crate::evidence::commtrace::{CollectiveKind, TraceCollective, TraceDtype, TraceGroup, TraceReduceOp};
use anyhow::Result;
use sha2::{Digest, Sha256};
use std::collections::BTreeMap;

/// The trace's element type of an MPI datatype, by its name (`MPI_DOUBLE`,
/// Fortran's `MPI_DOUBLE_PRECISION`) and checked against its size.
fn trace_dtype(name: &str, size: i32) -> Option<TraceDtype> {
    let d = match name {
        "MPI_DOUBLE" | "MPI_DOUBLE_PRECISION" | "MPI_REAL8" => TraceDtype::F64,
        "MPI_FLOAT" | "MPI_REAL" | "MPI_REAL4" => TraceDtype::F32,
        "MPI_INT" | "MPI_INTEGER" | "MPI_INT32_T" | "MPI_INTEGER4" => TraceDtype::I32,
        "MPI_LONG" | "MPI_LONG_LONG" | "MPI_LONG_LONG_INT" | "MPI_INT64_T" | "MPI_INTEGER8" => TraceDtype::I64,
        "MPI_CHAR" | "MPI_SIGNED_CHAR" | "MPI_INT8_T" => TraceDtype::I8,
        "MPI_BYTE" | "MPI_UNSIGNED_CHAR" | "MPI_UINT8_T" | "MPI_CHARACTER" | "MPI_PACKED" => TraceDtype::U8,
        "MPI_C_BOOL" => TraceDtype::Bool,
        _ => return None,
    };
    (i64::from(size) == d.size_bytes() as i64).then_some(d)
}

/// The trace's name of a communicator: the same on every member (its members
/// and how many communicators with those members each member saw before).
pub(super) fn group_name(members: &[u32], ordinal: u32) -> String {
    let mut h = Sha256::new();
    for m in members {
        h.update(m.to_le_bytes());
    }
    format!("mpi-{}-n{}-{ordinal}", &hex::encode(h.finalize())[..12], members.len())
}

/// The trace collective of one call, or why it has none.
pub(super) fn collective_of(
    r: &RankCapture,
    c: &CallRecord,
    model: Option<&ClockModel>,
    groups: &mut BTreeMap<String, TraceGroup>,
) -> Result<std::result::Result<TraceCollective, String>> {
    let name = r.kind_name(c);
    // a nonblocking form (`Iallreduce`) is its blocking kind (`Allreduce`) posted early
    let blocking = name.strip_prefix('I').and_then(|b| Some(format!("{}{}", b.get(..1)?.to_uppercase(), b.get(1..)?)));
    let base = match &blocking {
        Some(b) if r.header.calls.iter().any(|k| k == b) => b.as_str(),
        _ => name,
    };
    let kind = match base {
        "Allreduce" => CollectiveKind::AllReduce,
        "Reduce" => CollectiveKind::Reduce,
        "Bcast" => CollectiveKind::Broadcast,
        "Allgather" | "Allgatherv" => CollectiveKind::AllGather,
        "Gather" | "Gatherv" => CollectiveKind::Gather,
        "Scatter" | "Scatterv" => CollectiveKind::Scatter,
        "Reduce_scatter_block" | "Reduce_scatter" => CollectiveKind::ReduceScatter,
        "Alltoall" | "Alltoallv" => CollectiveKind::AllToAll,
        "Barrier" => CollectiveKind::Barrier,
        "Scan" => CollectiveKind::Scan,
        "Exscan" => CollectiveKind::Exscan,
        "Send" | "Ssend" | "Bsend" | "Rsend" | "Recv" | "Sendrecv" | "Sendrecv_replace" => {
            return Ok(Err(
                "point-to-point: kept in mpi.p2p with its post, completion, peer and tag; replay-trace and \
                the trace phases (rank --trace, campaigns; cpu backend) run it in recorded call order, so MPI matches \
                    it as it matched the application's"
                    .into(),
            ))
        }
        "Probe" | "Iprobe" => return Ok(Err("a probe moves no data: not replayed".into())),
        "Wait" | "Waitall" | "Waitany" | "Waitsome" | "Test" | "Testall" | "Testany" | "Testsome" => {
            return Ok(Err("completion call: it completes a nonblocking operation, whose record keeps the completing \
                call (mpi.collective_completions, mpi.p2p)"
                .into()))
        }
        "Comm_split" | "Comm_split_type" | "Comm_dup" | "Comm_create" | "Comm_free" => {
            return Ok(Err("communicator management: the trace holds the communicators as groups".into()))
        }
        _ => return Ok(Err(format!("MPI_{base} has no kind in the trace format yet"))),
    };
    if c.flags & 2 != 0 {
        return Ok(Err("the library returned an error for this call".into()));
    }
    let Some((members, ordinal)) = r.comms.get(&c.comm) else {
        return Ok(Err("on a communicator the capture never described".into()));
    };
    let gname = group_name(members, *ordinal);
    groups.entry(gname.clone()).or_insert_with(|| TraceGroup {
        name: gname.clone(),
        desc: Some(format!("MPI communicator of {} ranks", members.len())),
        members: members.clone(),
    });
    let dtype = if kind == CollectiveKind::Barrier {
        TraceDtype::U8
    } else {
        if c.dt_send != c.dt_recv && c.count_send > 0 && c.count_recv > 0 {
            return Ok(Err("different send and receive datatypes".into()));
        }
        let dt = if c.count_send > 0 { c.dt_send } else { c.dt_recv };
        let Some((size, dname)) = r.dtypes.get(&dt) else {
            return Ok(Err("a datatype the capture never described".into()));
        };
        match trace_dtype(dname, *size) {
            Some(d) => d,
            None => {
                return Ok(Err(format!("datatype {dname:?} ({size} bytes) has no element type in the trace format")))
            }
        }
    };
    // the recorded reduction: absent for a sum, so that a trace of sums reads as before
    let op = if kind.row().reduces {
        let name = r.ops.get(&c.op).map(String::as_str).unwrap_or("unknown");
        match TraceReduceOp::from_name(name) {
            Some(TraceReduceOp::Sum) => None,
            Some(o) => Some(o),
            None => {
                return Ok(Err(format!(
                    "reduction {name:?} (user-defined, or a pair type's MAXLOC/MINLOC) has no \
                element-wise form in the trace"
                )))
            }
        }
    } else {
        None
    };
    // a v-call's per-member counts (capture format 2), where significant on this rank
    let is_v = matches!(base, "Allgatherv" | "Gatherv" | "Scatterv" | "Alltoallv" | "Reduce_scatter");
    // the root is recorded as a world rank
    let at_root = c.peer.is_some_and(|p| i64::from(p) == i64::from(r.header.world_rank));
    let (in_split, out_split) = match base {
        "Allgatherv" => (None, c.recv_counts.clone()),
        "Gatherv" => (None, if at_root { c.recv_counts.clone() } else { None }),
        "Scatterv" => (if at_root { c.send_counts.clone() } else { None }, None),
        "Alltoallv" => (c.send_counts.clone(), c.recv_counts.clone()),
        "Reduce_scatter" => (c.recv_counts.clone(), None),
        _ => (None, None),
    };
    let needs_in = matches!(base, "Alltoallv" | "Reduce_scatter") || (base == "Scatterv" && at_root);
    let needs_out = matches!(base, "Allgatherv" | "Alltoallv") || (base == "Gatherv" && at_root);
    // a version-1 capture has no counts on any member: every v-call is left out alike (not only where they matter)
    if is_v && (r.version < 2 || (needs_in && in_split.is_none()) || (needs_out && out_split.is_none())) {
        return Ok(Err(if r.version < 2 {
            format!(
                "a v-call in a capture of format {}, which records only its summed counts: capture again with this \
                build (format {CAPTURE_FORMAT_VERSION} records the per-member counts)",
                r.version
            )
        } else {
            "a v-call whose per-member counts were not recorded (a communicator too large for one record)".into()
        }));
    }
    for v in [&in_split, &out_split].into_iter().flatten() {
        if v.len() != members.len() {
            return Ok(Err(format!("{} per-member counts on a communicator of {} members", v.len(), members.len())));
        }
    }
    let root = if kind.is_rooted() {
        match c.peer {
            Some(p) if p >= 0 => Some(p as u32),
            _ => return Ok(Err("a rooted call without a root rank".into())),
        }
    } else {
        None
    };
    let (ins, outs) = if kind == CollectiveKind::Barrier { (0, 0) } else { (c.count_send, c.count_recv) };
    let mut t = TraceCollective::new(
        kind,
        &format!("MPI_{name}"),
        &gname,
        dtype,
        (ins, outs),
        (in_split, out_split),
        (root, None),
    );
    t.op = op;
    // on rank 0's clock where every rank's was fitted
    let on_ref = |ns: u64| model.map_or(ns, |m| m.to_reference(ns).max(0.0).round() as u64);
    t.host_start_ns = Some(on_ref(c.t_issue_ns));
    let end = if c.request != 0 { r.done.get(&c.request).map(|d| d.t_ns) } else { Some(c.t_done_ns) };
    t.host_duration_ns = end.map(|e| on_ref(e).saturating_sub(on_ref(c.t_issue_ns)));
    Ok(Ok(t))
}

#[cfg(test)]
mod tests {
    use super::super::fixtures::{allreduce_block, call, done, file_v, write_dir};
    use super::super::rank_capture::{REC_COUNTS, REC_OP};
    use super::super::{read_dir, to_trace};
    use super::*;
    use crate::core::refusal::{code_of, Code};
    use crate::evidence::commtrace::{CommTrace, Limits, COMM_TRACE_MPI_FORMAT_VERSION};

    fn counts(side: u8, v: &[u32]) -> (u8, Vec<u8>) {
        let mut p = vec![side];
        v.iter().for_each(|k| p.extend_from_slice(&k.to_le_bytes()));
        (REC_COUNTS, p)
    }

    /// Every v-variant with its per-member counts, a scan, and a reduction other than a sum, on 2 ranks.
    fn v_calls(rank: u32) -> Vec<(u8, Vec<u8>)> {
        let mut b = allreduce_block(0, 0);
        b.pop(); // keep the communicator, datatype and sum op; drop the all-reduce
        let mut max = 2u16.to_le_bytes().to_vec();
        max.extend_from_slice(b"max");
        b.push((REC_OP, max));
        let mine = u64::from(rank) + 1;
        // Allgatherv: each sends rank + 1, receives [1, 2]
        b.push(call(0, (mine, 3), 0, None, 0));
        b.push(counts(1, &[1, 2]));
        // Exscan with MPI_MAX
        b.push(call(1, (2, 2), 2, None, 0));
        // Reduce_scatter of blocks [1, 2]: in 3, out this member's
        b.push(call(2, (3, mine), 1, None, 0));
        b.push(counts(1, &[1, 2]));
        // Igatherv to rank 0: only the root has (and records) the counts; completed by the Wait after it
        b.push(call(3, (mine, if rank == 0 { 3 } else { 0 }), 0, Some(0), 9));
        if rank == 0 {
            b.push(counts(1, &[1, 2]));
        }
        b.extend([call(4, (0, 0), 0, None, 9), done(9, 400)]);
        b
    }

    const V_KINDS: [&str; 6] = ["Allgatherv", "Exscan", "Reduce_scatter", "Igatherv", "Wait", "Gatherv"];

    #[test]
    fn v_variants_scans_and_other_reductions_import_with_their_counts_and_op() {
        let files: Vec<(u32, Vec<u8>)> =
            (0..2).map(|r| (r, file_v(2, &V_KINDS, r, 2, "r", &[v_calls(r)], true))).collect();
        let d = write_dir(&files);
        let t = to_trace(&read_dir(d.path(), false, &Limits::default()).unwrap()).unwrap();
        assert_eq!(t.format_version, COMM_TRACE_MPI_FORMAT_VERSION);
        let m = t.mpi.as_ref().unwrap();
        assert!(m.left_out.iter().all(|l| l.keys().all(|k| k == "Wait")), "{:?} {:?}", m.left_out, m.left_out_reasons);
        let c = &t.ranks[1].collectives;
        assert_eq!(
            (c[0].kind, c[0].in_elems, c[0].out_split_elems.clone()),
            (CollectiveKind::AllGather, 2, Some(vec![1, 2]))
        );
        assert_eq!((c[1].kind, c[1].op), (CollectiveKind::Exscan, Some(TraceReduceOp::Max)));
        assert_eq!(
            (c[2].kind, c[2].in_split_elems.clone(), c[2].out_elems, c[2].op),
            (CollectiveKind::ReduceScatter, Some(vec![1, 2]), 2, None)
        );
        assert_eq!(
            (c[3].kind, c[3].root, c[3].out_elems, c[3].out_split_elems.clone()),
            (CollectiveKind::Gather, Some(0), 0, None)
        );
        assert_eq!(t.ranks[0].collectives[3].out_split_elems, Some(vec![1, 2]));
        // the nonblocking gather: posted at call 3, completed by the wait, call 4
        assert_eq!(
            (m.collective_calls[0][3], m.collective_nonblocking[0].clone(), m.collective_completions[0][3]),
            (3, vec![false, false, false, true], Some(4))
        );
        // a sum stays unwritten: the record reads as a trace of sums always did
        assert!(!serde_json::to_string(&c[2]).unwrap().contains("\"op\""));
        assert_eq!(CommTrace::from_slice(&serde_json::to_vec(&t).unwrap()).unwrap(), t);
        // members that disagree on what they send and receive are refused
        let mut bad = t.clone();
        bad.ranks[0].collectives[0].out_split_elems = Some(vec![2, 1]);
        let e = CommTrace::from_slice(&serde_json::to_vec(&bad).unwrap()).unwrap_err();
        assert!(format!("{e:#}").contains("counts disagree"), "{e:#}");
    }

    #[test]
    fn v_calls_of_a_version_1_capture_are_left_out_saying_why() {
        // version 1 has no counts record: the same calls without them
        let strip = |r: u32| v_calls(r).into_iter().filter(|(ty, _)| *ty != REC_COUNTS).collect::<Vec<_>>();
        let files: Vec<(u32, Vec<u8>)> =
            (0..2).map(|r| (r, file_v(1, &V_KINDS, r, 2, "r", &[strip(r)], true))).collect();
        let d = write_dir(&files);
        let t = to_trace(&read_dir(d.path(), false, &Limits::default()).unwrap()).unwrap();
        let m = t.mpi.as_ref().unwrap();
        assert_eq!(
            (m.left_out[0]["Allgatherv"], m.left_out[0]["Reduce_scatter"], m.left_out[0]["Igatherv"]),
            (1, 1, 1),
            "{:?}",
            m.left_out
        );
        assert!(m.left_out_reasons["Allgatherv"].contains("format 1"), "{:?}", m.left_out_reasons);
        // the exscan needs no counts and is kept; off the root a gather-v has none to record
        assert_eq!(t.ranks[0].collectives.iter().map(|c| c.kind).collect::<Vec<_>>(), vec![CollectiveKind::Exscan]);
        assert!(!m.left_out[1].contains_key("Exscan"));
        // a counts record in a version-1 file is refused as an unknown record
        let files = [(0, file_v(1, &V_KINDS, 0, 1, "r", &[v_calls(0)], true))];
        let d = write_dir(&files);
        assert_eq!(code_of(&read_dir(d.path(), false, &Limits::default()).unwrap_err()), Some(Code::BadFormat));
    }
}
