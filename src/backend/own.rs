//! The backends' own path ([`super::Backend::enqueue`] of a world [`super::Call`]), kind by kind: what
//! one rank's world collective of a kind moves ([`OwnOp`]) and what its result
//! must hold ([`OwnOp::verify`]), both read from the kind table's row, so that
//! a backend adds only the library call of a new kind.
//!
//! Consumes a kind, a size in nccl-tests' convention, the element type, the
//! world size and this rank. Produces the rank's buffer element counts, the
//! root, a point-to-point kind's ring, and [`contribution`]s whose results are
//! known ([`expected_sum`]). Refuses a size that is not a whole number of
//! elements per rank, and a barrier with bytes. Method: docs/METHODS.md, "The own path".
use super::call::Call;
use super::{contribution, expected_sum, BackendError, BackendResult, CheckOutcome};
use crate::core::collective::{Buffers, CollectiveKind, Lands};
use crate::evidence::shard::Dtype;

/// One rank's share of a world collective on the own path.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct OwnOp {
    /// The kind.
    pub kind: CollectiveKind,
    /// The size asked for, bytes (nccl-tests' convention).
    pub bytes: u64,
    /// Elements this rank sends (0 for a barrier).
    pub send_elems: usize,
    /// Elements of the result that lands on this rank (0 where none does:
    /// a reduce off its root, a barrier). A broadcast's root receives its
    /// own data too, as NCCL's out-of-place broadcast copies it.
    pub recv_elems: usize,
    /// Elements per member block: the all-gather's and reduce-scatter's
    /// per-rank share, the all-to-all's per-peer split; else the whole count.
    pub block_elems: usize,
    /// The root of a rooted kind: rank 0.
    pub root: Option<u32>,
    /// A point-to-point kind's ring: (send to, receive from).
    pub ring: Option<(u32, u32)>,
    /// This rank.
    pub rank: u32,
    /// Ranks in the world.
    pub world_size: u32,
}

impl OwnOp {
    /// This rank's share of a `kind` of `bytes` of `dtype` over `world_size` ranks.
    pub fn new(kind: CollectiveKind, bytes: u64, dtype: Dtype, world_size: u32, rank: u32) -> BackendResult<Self> {
        let row = kind.row();
        let n = world_size.max(1);
        let name = row.name;
        let misuse = |why: String| BackendError::Misuse(format!("{name} of {bytes} bytes: {why}"));
        // the own path runs what a sweep or a phase runs on the world: not the kinds only a trace replay runs
        if row.replay_only {
            return Err(misuse(
                "the own path (sweeps and phases) does not run this kind; replay-trace --backend cpu \
                replays it from a trace"
                    .into(),
            ));
        }
        if bytes % dtype.size_bytes() != 0 {
            return Err(misuse(format!("not a whole number of {} elements", dtype.name())));
        }
        let count = usize::try_from(bytes / dtype.size_bytes())
            .map_err(|_| misuse("the element count does not fit in memory".into()))?;
        let root = row.rooted.then_some(0);
        let ring = row.p2p.then(|| ((rank + 1) % n, (rank + n - 1) % n));
        let split = |count: usize| -> BackendResult<usize> {
            let per = count / n as usize;
            if per == 0 || per * n as usize != count {
                return Err(misuse(format!("not a whole number of {} elements per rank over {n} ranks", dtype.name())));
            }
            Ok(per)
        };
        let (send_elems, recv_elems, block_elems) = match row.buffers {
            Buffers::Free if !row.p2p => {
                if bytes != 0 {
                    return Err(misuse("a barrier moves no bytes".into()));
                }
                (0, 0, 0)
            }
            _ if count == 0 => return Err(misuse("no element to move".into())),
            Buffers::Same | Buffers::Free => (count, count, count),
            Buffers::OutIsNTimesIn => {
                let per = split(count)?;
                (per, count, per)
            }
            Buffers::InIsNTimesOut => {
                let per = split(count)?;
                (count, per, per)
            }
            Buffers::Splits => (count, count, split(count)?),
            Buffers::GatherToRoot | Buffers::ScatterFromRoot => return Err(misuse("not run by the own path".into())),
        };
        let lands_here = match row.lands {
            Lands::Everywhere => true,
            Lands::OnRoot => root == Some(rank),
            // the ring: every rank's receive half is checked where it lands
            Lands::AtPeer | Lands::Here => true,
            Lands::Nowhere => false,
        };
        let recv_elems = if lands_here { recv_elems } else { 0 };
        Ok(OwnOp { kind, bytes, send_elems, recv_elems, block_elems, root, ring, rank, world_size: n })
    }

    /// The library call: this share's counts, root and ring, even all-to-all splits.
    pub fn call(&self) -> Call<'static> {
        Call {
            kind: self.kind,
            send_elems: self.send_elems,
            recv_elems: self.recv_elems,
            block_elems: self.block_elems,
            root: self.root,
            send_to: self.ring.map(|r| r.0),
            recv_from: self.ring.map(|r| r.1),
            splits: None,
            group_size: self.world_size,
        }
    }

    /// The expected element `j` of this rank's result.
    fn expected(&self, dtype: Dtype, j: usize) -> (f32, String) {
        let row = self.kind.row();
        let b = self.block_elems.max(1);
        if row.reduces {
            // a reduce-scatter's block is this rank's share of the reduced whole
            let at = if row.buffers == Buffers::InIsNTimesOut { self.rank as usize * b + j } else { j };
            return (expected_sum(dtype, self.world_size, at), format!("element {j}"));
        }
        match (row.buffers, self.ring, self.root) {
            (Buffers::OutIsNTimesIn, ..) => {
                let (r, i) = (j / b, j % b);
                (contribution(dtype, r as u32, i), format!("element {i} of rank {r}'s block"))
            }
            (Buffers::Splits, ..) => {
                let (r, i) = (j / b, j % b);
                (
                    contribution(dtype, r as u32, self.rank as usize * b + i),
                    format!("element {i} of the block from rank {r}"),
                )
            }
            (_, Some((_, from)), _) => (contribution(dtype, from, j), format!("element {j} from rank {from}")),
            (_, None, Some(root)) => (contribution(dtype, root, j), format!("element {j} of the root's")),
            _ => (contribution(dtype, self.rank, j), format!("element {j}")),
        }
    }

    /// Compare this rank's result `values` (widened to f32, `recv_elems` of
    /// them) with what every rank's [`contribution`]s make of it: how many
    /// elements are wrong, and the first of them. bf16 sums are exact up to
    /// [`super::BF16_EXACT_MAX_WORLD`] ranks; larger worlds are refused before a run.
    pub fn verify(&self, values: &[f32], dtype: Dtype) -> CheckOutcome {
        let mut out = CheckOutcome { wrong_elements: 0, first_wrong: None };
        for (j, &got) in values.iter().enumerate() {
            let (want, what) = self.expected(dtype, j);
            if got != want {
                out.wrong_elements += 1;
                if out.first_wrong.is_none() {
                    out.first_wrong = Some(format!("{what} is {got}, expected {want} ({})", dtype.name()));
                }
            }
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::collective::KINDS;

    /// Every kind of the table has a shape; each rank's result, computed here
    /// as the collective's definition says from every rank's contributions,
    /// passes the check, and one changed element fails it.
    #[test]
    fn every_kind_has_a_shape_and_a_check_that_can_fail() {
        for n in [1u32, 2, 3, 4] {
            for row in KINDS {
                let bytes = if row.kind == CollectiveKind::Barrier { 0 } else { 4 * 12 };
                // gather, scatter and the scans run only in a trace replay: the own path refuses them
                if row.replay_only {
                    assert!(OwnOp::new(row.kind, bytes, Dtype::F32, n, 0).is_err(), "{}", row.name);
                    continue;
                }
                for rank in 0..n {
                    let op = OwnOp::new(row.kind, bytes, Dtype::F32, n, rank)
                        .unwrap_or_else(|e| panic!("{} on {n}: {e}", row.name));
                    let count = bytes as usize / 4;
                    let mine = |r: u32, i: usize| contribution(Dtype::F32, r, i);
                    let sum = |i: usize| (0..n).map(|r| mine(r, i)).sum::<f32>();
                    let per = count / n as usize;
                    let result: Vec<f32> = match row.kind {
                        CollectiveKind::AllReduce => (0..count).map(sum).collect(),
                        CollectiveKind::Reduce => (0..op.recv_elems).map(sum).collect(),
                        CollectiveKind::ReduceScatter => (0..per).map(|i| sum(rank as usize * per + i)).collect(),
                        CollectiveKind::AllGather => (0..n).flat_map(|r| (0..per).map(move |i| mine(r, i))).collect(),
                        CollectiveKind::AllToAll => {
                            (0..n).flat_map(|r| (0..per).map(move |i| mine(r, rank as usize * per + i))).collect()
                        }
                        CollectiveKind::Broadcast => (0..op.recv_elems).map(|i| mine(0, i)).collect(),
                        CollectiveKind::Send | CollectiveKind::Recv => {
                            (0..count).map(|i| mine((rank + n - 1) % n, i)).collect()
                        }
                        CollectiveKind::Barrier => vec![],
                        CollectiveKind::Gather
                        | CollectiveKind::Scatter
                        | CollectiveKind::Scan
                        | CollectiveKind::Exscan => unreachable!("refused above"),
                    };
                    assert_eq!(result.len(), op.recv_elems, "{} rank {rank} of {n}", row.name);
                    assert_eq!(op.verify(&result, Dtype::F32).wrong_elements, 0, "{} rank {rank} of {n}", row.name);
                    if let Some(first) = result.first() {
                        let mut bad = result.clone();
                        bad[0] = first + 1.0;
                        let o = op.verify(&bad, Dtype::F32);
                        assert_eq!(o.wrong_elements, 1, "{}", row.name);
                        assert!(o.first_wrong.unwrap().contains("element 0"), "{}", row.name);
                    }
                }
            }
        }
    }

    #[test]
    fn sizes_that_do_not_split_and_barriers_with_bytes_are_refused() {
        assert!(OwnOp::new(CollectiveKind::AllGather, 4 * 5, Dtype::F32, 2, 0).is_err());
        assert!(OwnOp::new(CollectiveKind::ReduceScatter, 4, Dtype::F32, 2, 0).is_err());
        assert!(OwnOp::new(CollectiveKind::AllToAll, 4 * 3, Dtype::F32, 2, 0).is_err());
        assert!(OwnOp::new(CollectiveKind::AllReduce, 6, Dtype::F32, 2, 0).is_err());
        assert!(OwnOp::new(CollectiveKind::AllReduce, 0, Dtype::F32, 2, 0).is_err());
        assert!(OwnOp::new(CollectiveKind::Barrier, 4, Dtype::F32, 2, 0).is_err());
        let g = OwnOp::new(CollectiveKind::AllGather, 4 * 6, Dtype::F32, 3, 1).unwrap();
        assert_eq!((g.send_elems, g.recv_elems, g.block_elems), (2, 6, 2));
        let r = OwnOp::new(CollectiveKind::Reduce, 8, Dtype::F32, 3, 1).unwrap();
        assert_eq!((r.send_elems, r.recv_elems, r.root), (2, 0, Some(0)), "a reduce lands on its root only");
        let b = OwnOp::new(CollectiveKind::Broadcast, 8, Dtype::Bf16, 3, 0).unwrap();
        assert_eq!((b.send_elems, b.recv_elems), (4, 4), "the broadcast's root receives its own data");
        let s = OwnOp::new(CollectiveKind::Send, 8, Dtype::F32, 3, 0).unwrap();
        assert_eq!(s.ring, Some((1, 2)));
    }
}
