//! One rank's part of one recorded collective ([`TraceShare`]) for every
//! backend's trace executor: what it sends, its result's length, its library
//! call ([`Call`]) and the check of what landed, all read from the kind table's
//! row, so that an executor adds only its buffers and one arm per kind.
//!
//! Consumes a [`TraceCollective`], this rank and its group's members (in group
//! order). Produces a reduction's input as [`contribution`]s rounded to the
//! dtype (in elements), data movement's as [`payload`] bytes (any dtype), an
//! all-to-all's recorded or even splits (`AllToAllLayout`), and nccl-tests'
//! `#wrong` of a result (elements or bytes that differ, the first described).
//! Refuses a root or peer outside the group, a size that overflows.
use super::call::{Call, Splits};
use crate::core::collective::{self, Buffers, KindRow, Lands};
use crate::core::workload::ReduceOp;
use crate::evidence::commtrace::exec::{contribution, expected_reduction, payload, round_to, AllToAllLayout, Tally};
use crate::evidence::commtrace::{self, TraceCollective};
use crate::evidence::shard::BackendKind;
use anyhow::{Context, Result};

/// What a rank sends.
#[derive(Clone, Debug, PartialEq)]
pub enum Input {
    /// A reduction's contributions, rounded to the dtype.
    Values(Vec<f32>),
    /// Data movement's bytes (a broadcast's on its root, zeros elsewhere).
    Bytes(Vec<u8>),
    /// Nothing (a barrier, a receive).
    Nothing,
}

/// A result as it landed, read back from the library's buffer.
pub enum Landed<'a> {
    /// A reduction's elements, as the library hands them back in the dtype.
    Values(&'a [f32]),
    /// Data movement's bytes.
    Bytes(&'a [u8]),
}

/// One rank's part of one recorded collective.
pub struct TraceShare {
    row: &'static KindRow,
    dtype: commtrace::TraceDtype,
    rank: u32,
    members: Vec<u32>,
    /// This rank's position in the group.
    me: usize,
    /// Counts of the call, in elements (reductions) or bytes.
    send: usize,
    recv: usize,
    block: usize,
    /// Root and peer as global ranks (the check's patterns) and group ranks (the call).
    root: Option<(u32, u32)>,
    peer: Option<(u32, u32)>,
    layout: Option<(AllToAllLayout, Splits)>,
    /// A v-call's per-member counts and displacements (all-gather-v,
    /// reduce-scatter with counts, gather-v and scatter-v; elements for a
    /// reduction, else bytes); a gather's or a scatter's even blocks on its
    /// root are `blocks`' answer without them.
    v: Option<Splits>,
    /// Length of the result: elements (reductions) or bytes.
    out_len: usize,
}

impl TraceShare {
    /// `rank`'s part of `c` on a group of `members`.
    pub fn new(c: &TraceCollective, rank: u32, members: &[u32]) -> Result<Self> {
        let row = c.kind.row();
        let n = members.len();
        let me = members.iter().position(|&m| m == rank).context("rank not in its group")?;
        let local = |r: u32| members.iter().position(|&m| m == r).map(|p| (r, p as u32));
        let root = match (row.rooted, c.root) {
            (false, _) => None,
            (true, None) => anyhow::bail!("{} without a root", c.kind.name()),
            (true, Some(r)) => Some(local(r).context("root not in the group")?),
        };
        let peer = match (row.p2p, c.peer) {
            (false, _) => None,
            (true, None) => anyhow::bail!("point-to-point without a peer"),
            (true, Some(p)) => Some(local(p).context("peer not in the group")?),
        };
        let esize = c.dtype.size_bytes() as usize;
        let bytes = |elems: u64| -> Result<usize> {
            usize::try_from(elems)?.checked_mul(esize).context("message size overflows")
        };
        let elems = |e: u64| -> Result<usize> { Ok(usize::try_from(e)?) };
        let mut layout = None;
        let mut v = None;
        let offsets = |v: &[usize]| {
            v.iter().scan(0usize, |acc, &x| Some(std::mem::replace(acc, *acc + x))).collect::<Vec<usize>>()
        };
        // a v-call's splits where only its receives (or only its sends) are per member, packed in member order
        let receiving = |counts: Vec<usize>| Splits {
            send_counts: Vec::new(),
            send_at: Vec::new(),
            recv_at: offsets(&counts),
            recv_counts: counts,
        };
        let sending = |counts: Vec<usize>| Splits {
            send_at: offsets(&counts),
            send_counts: counts,
            recv_counts: Vec::new(),
            recv_at: Vec::new(),
        };
        let counted = |split: &[u64], f: &dyn Fn(u64) -> Result<usize>| {
            split.iter().map(|&e| f(e)).collect::<Result<Vec<usize>>>()
        };
        let sum = |v: &[usize]| v.iter().try_fold(0usize, |a, &x| a.checked_add(x)).context("message size overflows");
        let at_root = root.is_some_and(|r| r.1 as usize == me);
        // a gather or scatter is a v-call where it has counts, or where the source named its v form (off the root it
        // has none)
        let v_named = c.source_name.ends_with('v') || c.in_split_elems.is_some() || c.out_split_elems.is_some();
        // (send, recv, block, result length)
        let (send, recv, block, out_len) = if row.reduces {
            let (i, o) = (elems(c.in_elems)?, elems(c.out_elems)?);
            if let (Buffers::InIsNTimesOut, Some(split)) = (row.buffers, &c.in_split_elems) {
                let counts = counted(split, &elems)?;
                v = Some(receiving(counts));
            }
            (i, o, if row.buffers == Buffers::InIsNTimesOut { o } else { i }, o)
        } else {
            match row.buffers {
                Buffers::OutIsNTimesIn if c.out_split_elems.is_some() => {
                    let counts = counted(c.out_split_elems.as_deref().unwrap_or_default(), &bytes)?;
                    let (b, total) = (bytes(c.in_elems)?, sum(&counts)?);
                    v = Some(receiving(counts));
                    (b, total, b, total)
                }
                Buffers::OutIsNTimesIn => {
                    let b = bytes(c.in_elems)?;
                    (b, b * n, b, b * n)
                }
                Buffers::GatherToRoot => {
                    let b = bytes(c.in_elems)?;
                    let counts = match (&c.out_split_elems, at_root) {
                        (Some(split), _) => counted(split, &bytes)?,
                        (None, true) => vec![bytes(c.out_elems)? / n.max(1); n],
                        (None, false) => Vec::new(),
                    };
                    let total = sum(&counts)?;
                    if v_named {
                        v = Some(receiving(counts));
                    }
                    (b, total, if at_root { bytes(c.out_elems)? / n.max(1) } else { b }, total)
                }
                Buffers::ScatterFromRoot => {
                    let o = bytes(c.out_elems)?;
                    let counts = match (&c.in_split_elems, at_root) {
                        (Some(split), _) => counted(split, &bytes)?,
                        (None, true) => vec![o; n],
                        (None, false) => Vec::new(),
                    };
                    let total = sum(&counts)?;
                    if v_named {
                        v = Some(sending(counts));
                    }
                    (total, o, o, o)
                }
                Buffers::Splits => {
                    let l = AllToAllLayout::of(c, n)?;
                    let (s, r) = (l.send_bytes.iter().sum(), l.recv_bytes.iter().sum());
                    let splits = Splits {
                        send_counts: l.send_bytes.clone(),
                        send_at: l.send_at.clone(),
                        recv_counts: l.recv_bytes.clone(),
                        recv_at: l.recv_at.clone(),
                    };
                    layout = Some((l, splits));
                    (s, r, 0, r)
                }
                _ if row.p2p => {
                    let b = bytes(c.in_elems.max(c.out_elems))?;
                    match row.lands {
                        Lands::Here => (0, b, 0, b),
                        _ => (b, 0, 0, 0),
                    }
                }
                Buffers::Free => (0, 0, 0, 0),
                _ => {
                    let b = bytes(c.in_elems)?;
                    (b, b, b, b)
                }
            }
        };
        Ok(TraceShare {
            row,
            dtype: c.dtype,
            rank,
            members: members.to_vec(),
            me,
            send,
            recv,
            block,
            root,
            peer,
            layout,
            v,
            out_len,
        })
    }

    /// The library call, counted in elements (reductions) or bytes.
    pub fn call(&self) -> Call<'_> {
        let peer = self.peer.map(|p| p.1);
        Call {
            kind: self.row.kind,
            send_elems: self.send,
            recv_elems: self.recv,
            block_elems: self.block,
            root: self.root.map(|r| r.1),
            send_to: peer.filter(|_| self.row.lands == Lands::AtPeer),
            recv_from: peer.filter(|_| self.row.lands == Lands::Here),
            splits: self.layout.as_ref().map(|l| &l.1).or(self.v.as_ref()),
            group_size: self.members.len() as u32,
        }
    }

    /// Whether the kind reduces (its buffers are values of the dtype, else bytes).
    pub fn reduces(&self) -> bool {
        self.row.reduces
    }

    /// Members of the group.
    pub fn group_size(&self) -> usize {
        self.members.len()
    }

    /// Elements (reductions) or bytes of the result buffer.
    pub fn out_len(&self) -> usize {
        self.out_len
    }

    /// Bytes this member hands its library as input: a reduction's elements
    /// as f32 on the cpu backend (bf16 and f16 upcast; f64 and the integers
    /// in their own width), in their own width on NCCL; data movement as bytes.
    pub fn wire_bytes(&self, backend: BackendKind) -> u64 {
        use commtrace::TraceDtype as D;
        let width = match (self.reduces(), backend, self.dtype) {
            (false, ..) => 1,
            (true, BackendKind::Cpu, D::F32 | D::Bf16 | D::F16) => 4,
            (true, ..) => self.dtype.size_bytes(),
        };
        self.input_len() as u64 * width
    }

    /// Elements or bytes this rank hands to the library as input (0 for a
    /// barrier and a receive), to be multiplied by the width it sends them in.
    pub fn input_len(&self) -> usize {
        match self.row.lands {
            Lands::Nowhere | Lands::Here => 0,
            _ if self.row.buffers == Buffers::OutIsNTimesIn => self.block,
            _ => self.send,
        }
    }

    /// What this rank sends (a broadcast's root its bytes, the others zeros
    /// of the same length, for a backend whose broadcast has a send buffer).
    pub fn input(&self) -> Input {
        let rank = self.rank;
        if self.row.reduces {
            return Input::Values((0..self.send).map(|i| round_to(self.dtype, contribution(rank, i))).collect());
        }
        if let Some((l, _)) = &self.layout {
            return Input::Bytes(l.send_buffer(rank, &self.members));
        }
        match self.row.buffers {
            // every member sends its own block to the root
            Buffers::GatherToRoot => return Input::Bytes((0..self.send).map(|i| payload(rank, u32::MAX, i)).collect()),
            // the root sends member j its block j, addressed to it
            Buffers::ScatterFromRoot if self.send > 0 => {
                let (counts, at) = self.blocks(false);
                let mut buf = vec![0u8; self.send];
                for (j, &dst) in self.members.iter().enumerate() {
                    for i in 0..counts[j] {
                        buf[at[j] + i] = payload(rank, dst, i);
                    }
                }
                return Input::Bytes(buf);
            }
            Buffers::ScatterFromRoot => return Input::Nothing,
            _ => {}
        }
        match (self.root, self.peer) {
            (Some((root, _)), _) if root == rank => {
                Input::Bytes((0..self.send).map(|i| payload(root, u32::MAX, i)).collect())
            }
            (Some(_), _) => Input::Bytes(vec![0; self.send]),
            (_, Some((peer, _))) if self.send > 0 => {
                Input::Bytes((0..self.send).map(|i| payload(rank, peer, i)).collect())
            }
            (None, None) if self.send > 0 => Input::Bytes((0..self.send).map(|i| payload(rank, u32::MAX, i)).collect()),
            _ => Input::Nothing,
        }
    }

    /// Whether a result lands on this rank to be checked (not a reduce's off
    /// its root, a send's, a barrier's).
    pub fn lands_here(&self) -> bool {
        // an exclusive scan leaves the first member's result undefined
        if self.row.kind == collective::CollectiveKind::Exscan && self.me == 0 {
            return false;
        }
        match self.row.lands {
            Lands::Everywhere | Lands::Here => true,
            Lands::OnRoot => self.root.map(|r| r.1 as usize) == Some(self.me),
            Lands::AtPeer | Lands::Nowhere => false,
        }
    }

    /// Per-member block lengths and offsets of the received (`recv`) or sent
    /// side of a v-call, else even blocks of `block` (a gather's or a scatter's
    /// root), else of the result over the members.
    fn blocks(&self, recv: bool) -> (Vec<usize>, Vec<usize>) {
        let n = self.members.len();
        match &self.v {
            Some(v) if recv && v.recv_counts.len() == n => (v.recv_counts.clone(), v.recv_at.clone()),
            Some(v) if !recv && v.send_counts.len() == n => (v.send_counts.clone(), v.send_at.clone()),
            _ => (vec![self.block; n], (0..n).map(|j| j * self.block).collect()),
        }
    }

    /// Count what is wrong in `landed`, the result of a run with `op`:
    /// `(0, None)` where it is right or lands elsewhere.
    pub fn wrong(&self, landed: Landed, op: ReduceOp) -> (u64, Option<String>) {
        let mut tally = Tally::default();
        if !self.lands_here() {
            return (0, None);
        }
        let (members, rank) = (&self.members[..], self.rank);
        match landed {
            Landed::Values(got) => {
                // a reduce-scatter's block is this rank's share of the reduced whole (at its counts' offset)
                let offset = match (&self.v, self.row.buffers) {
                    (Some(v), _) => v.recv_at.get(self.me).copied().unwrap_or(0),
                    (None, Buffers::InIsNTimesOut) => self.me * got.len(),
                    _ => 0,
                };
                // a scan reduces the members up to this one (inclusive) or before it (exclusive)
                let over = match self.row.kind {
                    collective::CollectiveKind::Scan => &members[..=self.me],
                    collective::CollectiveKind::Exscan => &members[..self.me],
                    _ => members,
                };
                for (i, &g) in got.iter().enumerate() {
                    let want = expected_reduction(self.dtype, over, offset + i, op);
                    if g != want {
                        tally.add(|| format!("element {i} is {g}, expected {want}"));
                    }
                }
            }
            Landed::Bytes(out) => match (&self.layout, self.row.buffers, self.root, self.peer) {
                (Some((l, _)), ..) => {
                    for (i, src) in l.wrong(out, rank, members) {
                        tally.add(|| format!("byte {i} from rank {src} is wrong"));
                    }
                }
                (_, Buffers::OutIsNTimesIn | Buffers::GatherToRoot, ..) => {
                    let (counts, at) = self.blocks(true);
                    for (j, &src) in members.iter().enumerate() {
                        for i in (0..counts[j]).filter(|&i| out.get(at[j] + i) != Some(&payload(src, u32::MAX, i))) {
                            tally.add(|| format!("byte {i} of rank {src}'s block is wrong"));
                        }
                    }
                }
                (_, Buffers::ScatterFromRoot, Some((root, _)), _) => {
                    for i in (0..out.len()).filter(|&i| out[i] != payload(root, rank, i)) {
                        tally.add(|| format!("byte {i} of the block root {root} sent is wrong"));
                    }
                }
                (_, _, Some((root, _)), _) => {
                    for i in (0..out.len()).filter(|&i| out[i] != payload(root, u32::MAX, i)) {
                        tally.add(|| format!("byte {i} differs from root {root}'s"));
                    }
                }
                (_, _, _, Some((peer, _))) => {
                    for i in (0..out.len()).filter(|&i| out[i] != payload(peer, rank, i)) {
                        tally.add(|| format!("byte {i} from rank {peer} is wrong"));
                    }
                }
                _ => {}
            },
        }
        (tally.wrong, tally.first)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::collective::{CollectiveKind, KINDS};
    use crate::evidence::commtrace::TraceDtype;

    /// A record of `e` elements per member as member `me` records it (a gather's and a scatter's counts differ on the
    /// root, `members[1 % n]`).
    fn record(
        kind: CollectiveKind,
        dtype: TraceDtype,
        e: u64,
        members: &[u32],
        splits: Option<(Vec<u64>, Vec<u64>)>,
        peer: Option<u32>,
        me: usize,
    ) -> TraceCollective {
        let row = kind.row();
        let n = members.len() as u64;
        let at_root = me == 1 % members.len();
        let (ins, outs) = match (row.buffers, &splits) {
            (Buffers::Splits, Some((i, o))) => (i.iter().sum(), o.iter().sum()),
            (Buffers::Same, _) => (e, e),
            (Buffers::OutIsNTimesIn, _) => (e, n * e),
            (Buffers::InIsNTimesOut, _) => (n * e, e),
            (Buffers::Splits, None) => (n * e, n * e),
            (Buffers::Free, _) if row.p2p => (e, e),
            (Buffers::Free, _) => (0, 0),
            (Buffers::GatherToRoot, _) => (e, if at_root { n * e } else { 0 }),
            (Buffers::ScatterFromRoot, _) => (if at_root { n * e } else { 0 }, e),
        };
        let (si, so) = splits.map_or((None, None), |(i, o)| (Some(i), Some(o)));
        TraceCollective::new(
            kind,
            row.pytorch,
            "g",
            dtype,
            (ins, outs),
            (si, so),
            (row.rooted.then_some(members[1 % members.len()]), peer),
        )
    }

    /// What lands on member `me` by the collective's definition, computed
    /// from every member's input and call: the oracle the check must agree with.
    fn landed(shares: &[TraceShare], me: usize) -> Option<Result<Vec<f32>, Vec<u8>>> {
        let s = &shares[me];
        if !s.lands_here() {
            return None;
        }
        let inputs: Vec<Input> = shares.iter().map(TraceShare::input).collect();
        let call = s.call();
        let values = |i: &Input| match i {
            Input::Values(v) => v.clone(),
            other => panic!("{other:?}"),
        };
        let bytes = |i: &Input| match i {
            Input::Bytes(v) => v.clone(),
            Input::Nothing => Vec::new(),
            other => panic!("{other:?}"),
        };
        if s.reduces() {
            // a scan reduces the members up to this one (inclusive) or before it (exclusive)
            let over = match s.row.kind {
                CollectiveKind::Scan => &inputs[..=me],
                CollectiveKind::Exscan => &inputs[..me],
                _ => &inputs[..],
            };
            let sum: Vec<f32> = (0..call.send_elems).map(|i| over.iter().map(|x| values(x)[i]).sum()).collect();
            let b = call.block_elems;
            return Some(Ok(if s.row.buffers == Buffers::InIsNTimesOut {
                sum[me * b..(me + 1) * b].to_vec()
            } else {
                sum
            }));
        }
        Some(Err(match (s.row.kind, call.splits) {
            (CollectiveKind::AllGather | CollectiveKind::Gather, _) => inputs.iter().flat_map(bytes).collect(),
            (CollectiveKind::Scatter, _) => {
                let b = s.out_len();
                bytes(&inputs[call.root.unwrap() as usize])[me * b..(me + 1) * b].to_vec()
            }
            (CollectiveKind::Broadcast, _) => bytes(&inputs[call.root.unwrap() as usize]),
            (CollectiveKind::AllToAll, Some(mine)) => {
                let mut out = vec![0u8; s.out_len()];
                for (j, src) in shares.iter().enumerate() {
                    let theirs = src.call().splits.unwrap().clone();
                    let sent = &bytes(&inputs[j])[theirs.send_at[me]..theirs.send_at[me] + theirs.send_counts[me]];
                    assert_eq!(sent.len(), mine.recv_counts[j], "splits agree");
                    out[mine.recv_at[j]..mine.recv_at[j] + sent.len()].copy_from_slice(sent);
                }
                out
            }
            (CollectiveKind::Recv, _) => {
                let from = call.recv_from.unwrap() as usize;
                assert_eq!(shares[from].call().send_to, Some(me as u32));
                bytes(&inputs[from])
            }
            (k, _) => panic!("{k:?} lands nothing"),
        }))
    }

    /// Every kind of the table, on groups of 1 to 4 whose global ranks are
    /// not their positions, f32 and bf16, even and uneven all-to-all: what
    /// the definition delivers passes the check, one changed element or byte
    /// fails it, and the call's counts fit the buffers made for it.
    #[test]
    fn every_kind_checks_what_its_definition_delivers_and_fails_one_change() {
        for members in [vec![3u32], vec![4, 1], vec![2, 5, 0], vec![6, 3, 1, 0]] {
            let n = members.len();
            for row in KINDS {
                for dtype in [TraceDtype::F32, TraceDtype::Bf16] {
                    // member j sends j + k + 1 elements to member k
                    let uneven = (row.buffers == Buffers::Splits)
                        .then_some(|j: usize| (0..n).map(|k| (j + k + 1) as u64).collect::<Vec<_>>());
                    for splits in [false, uneven.is_some()] {
                        if row.p2p && n < 2 {
                            continue;
                        }
                        let shares: Vec<TraceShare> = members
                            .iter()
                            .enumerate()
                            .map(|(j, &rank)| {
                                let (kind, peer) = match (row.p2p, j) {
                                    (false, _) => (row.kind, None),
                                    (true, 0) => (CollectiveKind::Send, Some(members[1])),
                                    (true, 1) => (CollectiveKind::Recv, Some(members[0])),
                                    // a third member sends to nobody: a barrier stands in
                                    (true, _) => (CollectiveKind::Barrier, None),
                                };
                                let sp = (splits && kind == row.kind).then(|| {
                                    let to = uneven.as_ref().unwrap();
                                    (to(j), (0..n).map(|src| to(src)[j]).collect())
                                });
                                TraceShare::new(
                                    &record(kind, dtype, 6 * n as u64, &members, sp, peer, j),
                                    rank,
                                    &members,
                                )
                                .unwrap()
                            })
                            .collect();
                        for (me, s) in shares.iter().enumerate() {
                            let what =
                                format!("{} on {members:?}, member {me}, {dtype:?}, splits {splits}", s.row.name);
                            match s.input() {
                                Input::Values(v) => assert_eq!(v.len(), s.call().send_elems, "{what}"),
                                Input::Bytes(b) => assert!(b.len() >= s.call().send_elems, "{what}"),
                                Input::Nothing => assert_eq!(s.call().send_elems, 0, "{what}"),
                            }
                            match landed(&shares, me) {
                                None => assert_eq!(s.wrong(Landed::Bytes(&[]), ReduceOp::Sum), (0, None), "{what}"),
                                Some(Ok(mut v)) => {
                                    assert_eq!(v.len(), s.out_len(), "{what}");
                                    assert_eq!(s.wrong(Landed::Values(&v), ReduceOp::Sum), (0, None), "{what}");
                                    v[0] += 1.0;
                                    let (wrong, first) = s.wrong(Landed::Values(&v), ReduceOp::Sum);
                                    assert_eq!(wrong, 1, "{what}");
                                    assert!(first.unwrap().starts_with("element 0"), "{what}");
                                }
                                Some(Err(mut b)) => {
                                    assert_eq!(b.len(), s.out_len(), "{what}");
                                    assert_eq!(s.wrong(Landed::Bytes(&b), ReduceOp::Sum), (0, None), "{what}");
                                    let last = b.len() - 1;
                                    b[last] = b[last].wrapping_add(1);
                                    assert_eq!(s.wrong(Landed::Bytes(&b), ReduceOp::Sum).0, 1, "{what}");
                                }
                            }
                        }
                    }
                }
            }
        }
    }

    #[test]
    fn a_root_or_peer_outside_the_group_is_refused() {
        let members = [0u32, 1];
        for (c, why) in [
            (record(CollectiveKind::Broadcast, TraceDtype::F32, 4, &[0, 9], None, None, 1), "root not in the group"),
            (record(CollectiveKind::Send, TraceDtype::F32, 4, &members, None, Some(7), 1), "peer not in the group"),
        ] {
            let e = TraceShare::new(&c, 0, &members).map(|_| ()).unwrap_err().to_string();
            assert!(e.contains(why), "{e}");
        }
    }
}
