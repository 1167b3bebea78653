//! The rules a trace's records obey: every rank present once, groups that
//! hold each rank of the world once, counts that fit the operation on one
//! rank and agree across a group's members, sends and receives that pair up.
//! Consumes decoded groups and collectives; produces nothing but the refusal
//! that names the file and the fault. The decoders number sequences and
//! resolve ranks here; `load` runs the checks on a whole trace.
use super::{CollectiveKind, RankTrace, TraceCollective, TraceGroup};
use anyhow::{bail, Context, Result};
use std::collections::{BTreeMap, BTreeSet};

/// Largest buffer one collective record may describe, in bytes: MPI's
/// `MPI_Count` is a signed 64-bit integer (MPI 4.0, §2.5.8 "Counts") and
/// NCCL's `count` a `size_t`; a count whose bytes pass `i64::MAX` is no
/// buffer any collective holds.
pub const MAX_COLLECTIVE_BYTES: u64 = i64::MAX as u64;

/// Every group's members distinct and inside the world of `world` ranks.
pub(super) fn check_groups(groups: &[TraceGroup], world: u32) -> Result<()> {
    for g in groups {
        if let Some(&m) = g.members.iter().find(|&&m| m >= world) {
            bail!("group {:?} names rank {m}, outside the world of {world} ranks", g.name);
        }
        let mut seen = BTreeSet::new();
        if let Some(&m) = g.members.iter().find(|&&m| !seen.insert(m)) {
            bail!(
                "group {:?} lists rank {m} twice (members {:?}): a process group holds each rank once",
                g.name,
                g.members
            );
        }
    }
    Ok(())
}

/// Fill each collective's `seq`: per group for collectives, per (group, peer,
/// direction) for point-to-point.
pub fn number_sequences(colls: &mut [TraceCollective]) {
    let mut next: BTreeMap<(String, Option<(CollectiveKind, u32)>), u64> = BTreeMap::new();
    for c in colls.iter_mut() {
        let key = (c.group.clone(), if c.kind.is_p2p() { c.peer.map(|p| (c.kind, p)) } else { None });
        let n = next.entry(key).or_insert(0);
        c.seq = *n;
        *n += 1;
    }
}

/// Members of a group after resolving a group-local rank; refuses one outside the group.
pub(crate) fn global_rank(group: &TraceGroup, local: i64, what: &str) -> Result<u32> {
    usize::try_from(local).ok().and_then(|i| group.members.get(i).copied()).with_context(|| {
        format!("{what} {local} is not a rank of group {:?} (members {:?})", group.name, group.members)
    })
}

/// Check one record's own buffer relations (the counts a collective of this
/// kind must have on one rank of a group of `n`).
pub(crate) fn check_record_counts(c: &TraceCollective, n: u64) -> Result<()> {
    let (i, o) = (c.in_elems, c.out_elems);
    for (what, e) in [("in", i), ("out", o)] {
        if e.checked_mul(c.dtype.size_bytes()).is_none_or(|b| b > MAX_COLLECTIVE_BYTES) {
            bail!(
                "{} on group {:?} (#{}) records {e} {:?} elements {what}: over {MAX_COLLECTIVE_BYTES} bytes, more than \
                    any collective's buffer holds",
                c.source_name,
                c.group,
                c.seq,
                c.dtype
            );
        }
    }
    use crate::core::collective::Buffers;
    // a per-member list: one count per member, summing to `total` (no overflow)
    let fits =
        |v: &[u64], total: u64| v.len() as u64 == n && v.iter().try_fold(0u64, |a, &x| a.checked_add(x)) == Some(total);
    let ok = match (c.kind.row().buffers, &c.in_split_elems, &c.out_split_elems) {
        (Buffers::Free, ..) => true,
        (Buffers::Same, None, None) => i == o,
        (Buffers::OutIsNTimesIn, None, None) => Some(o) == i.checked_mul(n),
        // all-gather-v: every member's block
        (Buffers::OutIsNTimesIn, None, Some(b)) => fits(b, o),
        (Buffers::InIsNTimesOut, None, None) => Some(i) == o.checked_mul(n),
        // reduce-scatter with per-member counts: this member's block is one of them
        (Buffers::InIsNTimesOut, Some(a), None) => fits(a, i) && a.contains(&o),
        (Buffers::Splits, Some(a), Some(b)) => fits(a, i) && fits(b, o),
        (Buffers::Splits, None, None) => i == o && n > 0 && i % n == 0,
        // off the root nothing lands (gather) or is sent (scatter)
        (Buffers::GatherToRoot, None, None) => o == 0 || Some(o) == i.checked_mul(n),
        (Buffers::GatherToRoot, None, Some(b)) => fits(b, o),
        (Buffers::ScatterFromRoot, None, None) => i == 0 || Some(i) == o.checked_mul(n),
        (Buffers::ScatterFromRoot, Some(a), None) => fits(a, i),
        _ => false,
    };
    if !ok {
        bail!(
            "{} on group {:?} (#{}) records {i} elements in and {o} out{} on a group of {n}: counts disagree with the \
                operation",
            c.source_name,
            c.group,
            c.seq,
            match (&c.in_split_elems, &c.out_split_elems) {
                (None, None) => String::new(),
                (a, b) => format!(" with splits {a:?}/{b:?}"),
            }
        );
    }
    Ok(())
}

/// Every rank of `0..world` present once.
pub(super) fn check_ranks(world: u32, ranks: &[u32], names: &[String]) -> Result<()> {
    let mut seen: BTreeMap<u32, usize> = BTreeMap::new();
    for (i, &r) in ranks.iter().enumerate() {
        if r >= world {
            bail!(
                "{}: rank {r} is outside the world of {world} ranks: files from different runs or rank sets",
                name_of(names, i)
            );
        }
        if let Some(j) = seen.insert(r, i) {
            bail!(
                "{} and {} both record rank {r}: files from different runs or rank sets",
                name_of(names, j),
                name_of(names, i)
            );
        }
    }
    if let Some(missing) = (0..world).find(|r| !seen.contains_key(r)) {
        let given: Vec<u32> = seen.keys().copied().collect();
        bail!(
            "rank {missing} missing: the trace's world has {world} ranks and the files given record ranks {given:?} \
            (give one file per rank)"
        );
    }
    Ok(())
}

fn name_of(names: &[String], i: usize) -> &str {
    names.get(i).map(|s| s.as_str()).unwrap_or("?")
}

/// Cross-rank checks: groups described, members agree per collective, point-to-point pairs.
pub(super) fn check_consistency(groups: &[TraceGroup], ranks: &[RankTrace], names: &[String]) -> Result<()> {
    let file_of =
        |rank: u32| -> &str { ranks.iter().position(|r| r.rank == rank).map(|i| name_of(names, i)).unwrap_or("?") };
    let by_name: BTreeMap<&str, &TraceGroup> = groups.iter().map(|g| (g.name.as_str(), g)).collect();
    // (group, member) -> that member's non-p2p collectives on the group.
    let mut per_member: BTreeMap<(&str, u32), Vec<&TraceCollective>> = BTreeMap::new();
    // (src, dst, group) -> sends / recvs.
    let mut sends: BTreeMap<(u32, u32, &str), Vec<&TraceCollective>> = BTreeMap::new();
    let mut recvs: BTreeMap<(u32, u32, &str), Vec<&TraceCollective>> = BTreeMap::new();
    for r in ranks {
        for c in &r.collectives {
            let g = by_name.get(c.group.as_str()).with_context(|| {
                let described: Vec<&str> = by_name.keys().copied().collect();
                format!(
                    "{}: rank {} uses process group {:?}, which no file describes (described: {described:?})",
                    file_of(r.rank),
                    r.rank,
                    c.group
                )
            })?;
            if !g.members.contains(&r.rank) {
                bail!(
                    "{}: rank {} issues {} on group {:?} whose members are {:?}",
                    file_of(r.rank),
                    r.rank,
                    c.source_name,
                    g.name,
                    g.members
                );
            }
            check_record_counts(c, g.members.len() as u64)
                .with_context(|| format!("{}: rank {}", file_of(r.rank), r.rank))?;
            match c.kind {
                CollectiveKind::Send => {
                    let p = c.peer.with_context(|| format!("{}: send #{} has no peer", file_of(r.rank), c.seq))?;
                    sends.entry((r.rank, p, &c.group)).or_default().push(c);
                }
                CollectiveKind::Recv => {
                    let p = c.peer.with_context(|| format!("{}: recv #{} has no peer", file_of(r.rank), c.seq))?;
                    recvs.entry((p, r.rank, &c.group)).or_default().push(c);
                }
                _ => per_member.entry((g.name.as_str(), r.rank)).or_default().push(c),
            }
        }
    }
    for g in groups {
        let lists: Vec<(u32, &[&TraceCollective])> = g
            .members
            .iter()
            .map(|&m| (m, per_member.get(&(g.name.as_str(), m)).map(|v| v.as_slice()).unwrap_or(&[])))
            .collect();
        let Some(&(first_rank, first)) = lists.first() else { continue };
        for &(m, list) in &lists[1..] {
            if list.len() != first.len() {
                bail!(
                    "group {:?}: rank {first_rank} ({}) issues {} collectives on it, rank {m} ({}) issues {}: counts \
                        disagree across the group's members",
                    g.name,
                    file_of(first_rank),
                    first.len(),
                    file_of(m),
                    list.len()
                );
            }
            for (k, (a, b)) in first.iter().zip(list.iter()).enumerate() {
                // counts that differ by member by definition are checked below, per pair of members
                let varies = [a, b].iter().any(|c| c.in_split_elems.is_some() || c.out_split_elems.is_some())
                    || matches!(a.kind, CollectiveKind::Gather | CollectiveKind::Scatter);
                let same = a.kind == b.kind
                    && a.dtype == b.dtype
                    && a.root == b.root
                    && a.op == b.op
                    && (varies || (a.in_elems == b.in_elems && a.out_elems == b.out_elems));
                if !same {
                    bail!(
                        "group {:?} collective #{k}: rank {first_rank} ({}) records {} of {} {:?} elements in, {} \
                            out{}{}; rank {m} ({}) records {} of {} {:?} in, {} out{}{}: counts disagree across the \
                                group's members",
                        g.name,
                        file_of(first_rank),
                        a.kind.name(),
                        a.in_elems,
                        a.dtype,
                        a.out_elems,
                        root_text(a.root),
                        op_text(a),
                        file_of(m),
                        b.kind.name(),
                        b.in_elems,
                        b.dtype,
                        b.out_elems,
                        root_text(b.root),
                        op_text(b),
                    );
                }
            }
        }
        // What member i sends to member j is what j receives from i: all-to-all(v),
        // all-gather(v), gather(v) to its root, scatter(v) from its root, and a
        // reduce-scatter's per-member blocks (the same list on every member).
        let n = g.members.len() as u64;
        for k in 0..first.len() {
            let kind = first[k].kind;
            let root = first[k].root.and_then(|r| g.members.iter().position(|&m| m == r));
            for (i, &(ri, li)) in lists.iter().enumerate() {
                let a = li[k];
                let off_root = root.is_some_and(|r| r != i);
                if kind == CollectiveKind::Gather && off_root && (a.out_elems != 0 || a.out_split_elems.is_some()) {
                    bail!(
                        "group {:?} gather #{k}: rank {ri}, not the root, records {} elements out: only the root \
                        receives",
                        g.name,
                        a.out_elems
                    );
                }
                if kind == CollectiveKind::Scatter && off_root && (a.in_elems != 0 || a.in_split_elems.is_some()) {
                    bail!(
                        "group {:?} scatter #{k}: rank {ri}, not the root, records {} elements in: only the root sends",
                        g.name,
                        a.in_elems
                    );
                }
                for (j, &(rj, lj)) in lists.iter().enumerate() {
                    let b = lj[k];
                    let split =
                        |v: &Option<Vec<u64>>, at: usize, total: u64| v.as_ref().map(|s| s[at]).unwrap_or(total / n);
                    let flow = match kind {
                        CollectiveKind::AllToAll => {
                            Some((split(&a.in_split_elems, j, a.in_elems), split(&b.out_split_elems, i, b.out_elems)))
                        }
                        CollectiveKind::AllGather => Some((a.in_elems, split(&b.out_split_elems, i, b.out_elems))),
                        CollectiveKind::Gather if root == Some(j) => {
                            Some((a.in_elems, split(&b.out_split_elems, i, b.out_elems)))
                        }
                        CollectiveKind::Scatter if root == Some(i) => {
                            Some((split(&a.in_split_elems, j, a.in_elems), b.out_elems))
                        }
                        CollectiveKind::ReduceScatter if a.in_split_elems.is_some() || b.in_split_elems.is_some() => {
                            if a.in_split_elems != b.in_split_elems {
                                bail!(
                                    "group {:?} reduce-scatter #{k}: ranks {ri} and {rj} record different per-member \
                                    counts: counts disagree across the group's members",
                                    g.name
                                );
                            }
                            Some((split(&a.in_split_elems, j, a.in_elems), b.out_elems))
                        }
                        _ => None,
                    };
                    if let Some((send, recv)) = flow.filter(|(s, r)| s != r) {
                        bail!(
                            "group {:?} {} #{k}: rank {ri} sends {send} elements to rank {rj}, which expects {recv} \
                                from it: counts disagree across the group's members",
                            g.name,
                            kind.label()
                        );
                    }
                }
            }
        }
    }
    let pairs: BTreeSet<(u32, u32, &str)> = sends.keys().chain(recvs.keys()).copied().collect();
    for key in pairs {
        let (s, r) = (
            sends.get(&key).map(|v| v.as_slice()).unwrap_or(&[]),
            recvs.get(&key).map(|v| v.as_slice()).unwrap_or(&[]),
        );
        let (src, dst, g) = key;
        if s.len() != r.len() {
            bail!(
                "group {g:?}: rank {src} ({}) sends {} times to rank {dst}, which ({}) receives {} times from it: \
                    point-to-point operations do not pair up",
                file_of(src),
                s.len(),
                file_of(dst),
                r.len()
            );
        }
        for (k, (a, b)) in s.iter().zip(r.iter()).enumerate() {
            if a.in_elems != b.out_elems || a.dtype != b.dtype {
                bail!(
                    "group {g:?}: send #{k} from rank {src} carries {} {:?} elements, the matching recv on rank {dst} \
                        expects {} {:?}: counts disagree",
                    a.in_elems,
                    a.dtype,
                    b.out_elems,
                    b.dtype
                );
            }
        }
    }
    Ok(())
}

fn op_text(c: &TraceCollective) -> String {
    c.op.map(|o| format!(" ({})", o.name())).unwrap_or_default()
}

fn root_text(root: Option<u32>) -> String {
    root.map(|r| format!(" (root {r})")).unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::collective::TraceReduceOp;
    use crate::evidence::commtrace::TraceDtype;

    #[test]
    fn record_counts_follow_the_operation() {
        let c = |kind: CollectiveKind, i, o| {
            TraceCollective::new(kind, kind.pytorch_name(), "0", TraceDtype::Bf16, (i, o), (None, None), (None, None))
        };
        assert!(check_record_counts(&c(CollectiveKind::AllGather, 4, 8), 2).is_ok());
        assert!(check_record_counts(&c(CollectiveKind::AllGather, 4, 4), 2).is_err());
        assert!(check_record_counts(&c(CollectiveKind::ReduceScatter, 8, 4), 2).is_ok());
        assert!(check_record_counts(&c(CollectiveKind::AllReduce, 8, 4), 2).is_err());
        assert!(check_record_counts(&c(CollectiveKind::AllToAll, 9, 9), 2).is_err());
        // gather: n blocks on the root, nothing elsewhere; scatter the other way
        assert!(check_record_counts(&c(CollectiveKind::Gather, 3, 6), 2).is_ok());
        assert!(check_record_counts(&c(CollectiveKind::Gather, 3, 0), 2).is_ok());
        assert!(check_record_counts(&c(CollectiveKind::Gather, 3, 5), 2).is_err());
        assert!(check_record_counts(&c(CollectiveKind::Scatter, 6, 3), 2).is_ok());
        assert!(check_record_counts(&c(CollectiveKind::Scatter, 0, 3), 2).is_ok());
        assert!(check_record_counts(&c(CollectiveKind::Scatter, 5, 3), 2).is_err());
        assert!(
            check_record_counts(&c(CollectiveKind::Scan, 4, 4), 2).is_ok()
                && check_record_counts(&c(CollectiveKind::Exscan, 4, 3), 2).is_err()
        );
        // v-variants: one count per member, summing to the buffer
        let v = |kind, io, splits| v_coll(kind, "0", io, splits);
        assert!(check_record_counts(&v(CollectiveKind::AllGather, (1, 3), (None, Some(vec![1, 2]))), 2).is_ok());
        assert!(check_record_counts(&v(CollectiveKind::AllGather, (1, 4), (None, Some(vec![1, 2]))), 2).is_err());
        assert!(check_record_counts(&v(CollectiveKind::AllGather, (1, 3), (None, Some(vec![1, 1, 1]))), 2).is_err());
        assert!(check_record_counts(&v(CollectiveKind::ReduceScatter, (3, 2), (Some(vec![1, 2]), None)), 2).is_ok());
        assert!(check_record_counts(&v(CollectiveKind::ReduceScatter, (3, 3), (Some(vec![1, 2]), None)), 2).is_err());
        assert!(check_record_counts(&v(CollectiveKind::Gather, (2, 3), (None, Some(vec![1, 2]))), 2).is_ok());
        assert!(check_record_counts(&v(CollectiveKind::Scatter, (3, 1), (Some(vec![1, 2]), None)), 2).is_ok());
        // a count list that overflows when summed is refused, never wrapped
        let overflowing = v(CollectiveKind::AllGather, (1, 0), (None, Some(vec![u64::MAX, 1])));
        assert!(check_record_counts(&overflowing, 2).is_err());
        // splits on a kind that has none are refused
        assert!(check_record_counts(&v(CollectiveKind::Broadcast, (2, 2), (Some(vec![1, 1]), None)), 2).is_err());
    }

    type Splits = (Option<Vec<u64>>, Option<Vec<u64>>);

    /// A collective of f64 with these counts and splits (rooted kinds at rank 0).
    fn v_coll(kind: CollectiveKind, group: &str, io: (u64, u64), splits: Splits) -> TraceCollective {
        TraceCollective::new(
            kind,
            "v",
            group,
            TraceDtype::F64,
            io,
            splits,
            (Some(0).filter(|_| kind.is_rooted()), None),
        )
    }

    fn group(members: &[u32]) -> Vec<TraceGroup> {
        vec![TraceGroup { name: "g".into(), desc: None, members: members.to_vec() }]
    }

    fn ranks(per_rank: Vec<TraceCollective>) -> Vec<RankTrace> {
        per_rank
            .into_iter()
            .enumerate()
            .map(|(r, c)| RankTrace { rank: r as u32, collectives: vec![c], trailing_compute: vec![] })
            .collect()
    }

    #[test]
    fn members_agree_on_what_each_sends_and_receives() {
        let names = vec!["a".to_string(), "b".to_string()];
        let c = |kind, io, splits: Splits| v_coll(kind, "g", io, splits);
        let ok = |a, b| check_consistency(&group(&[0, 1]), &ranks(vec![a, b]), &names);
        let gather = |io, splits| c(CollectiveKind::Gather, io, splits);
        let scatter = |io, splits| c(CollectiveKind::Scatter, io, splits);
        // gather-v: the root's counts are what each member sends
        assert!(ok(gather((1, 3), (None, Some(vec![1, 2]))), gather((2, 0), (None, None))).is_ok());
        let e = ok(gather((1, 3), (None, Some(vec![1, 2]))), gather((1, 0), (None, None))).unwrap_err();
        assert!(e.to_string().contains("rank 1 sends 1 elements to rank 0, which expects 2"), "{e}");
        // off the root a gather receives nothing
        assert!(ok(gather((1, 2), (None, None)), gather((1, 2), (None, None))).is_err());
        // scatter-v
        assert!(ok(scatter((3, 1), (Some(vec![1, 2]), None)), scatter((0, 2), (None, None))).is_ok());
        assert!(ok(scatter((3, 1), (Some(vec![1, 2]), None)), scatter((0, 1), (None, None))).is_err());
        // all-gather-v: every member's list names every member's block
        let ag = |me: u64, list: Vec<u64>| c(CollectiveKind::AllGather, (me, list.iter().sum()), (None, Some(list)));
        assert!(ok(ag(1, vec![1, 2]), ag(2, vec![1, 2])).is_ok());
        assert!(ok(ag(1, vec![1, 2]), ag(2, vec![2, 1])).is_err());
        // reduce-scatter with counts: the same list everywhere, each member its block
        let rs =
            |me: u64, list: Vec<u64>| c(CollectiveKind::ReduceScatter, (list.iter().sum(), me), (Some(list), None));
        assert!(ok(rs(1, vec![1, 2]), rs(2, vec![1, 2])).is_ok());
        assert!(ok(rs(1, vec![1, 2]), rs(1, vec![1, 1])).is_err());
        // the reduction must agree
        let mut a = c(CollectiveKind::Scan, (2, 2), (None, None));
        let b = a.clone();
        a.op = Some(TraceReduceOp::Max);
        assert!(ok(a, b).unwrap_err().to_string().contains("(max)"));
    }
}
