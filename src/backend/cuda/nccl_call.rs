//! The cuda backend's one arm per kind: a [`Call`] as NCCL calls (NCCL user
//! guide, "Collective operations", "Point-to-point communication" and
//! "Group calls"), for the own path and the trace executor alike.
//!
//! Consumes a call, the device addresses of its send and receive buffers,
//! NCCL's datatype and the width of one element, and the reduction.
//! Produces the [`NcclCall`]s to enqueue; more than one (an all-to-all's
//! sends and receives, a ring's pair) must be one NCCL group. NCCL has no
//! all-to-all and no barrier: the first is a send and a receive per peer, the
//! second a one-element f32 all-reduce, as PyTorch's `barrier()` is on NCCL.
use super::nccl::{DataType, NcclCall, RedOp};
use crate::backend::call::Call;
use crate::core::collective::CollectiveKind;
use std::os::raw::c_int;

/// `c` as NCCL calls on buffers at `send` and `recv` of `dtype`, whose
/// elements are `elem_bytes` wide, reducing with `op`; or why NCCL has none
/// (gather, scatter, the scans, an all-gather's or reduce-scatter's
/// per-member counts: the trace executor refuses those before launch).
pub(crate) fn nccl_calls(
    c: &Call,
    send: u64,
    recv: u64,
    dtype: DataType,
    elem_bytes: u64,
    op: RedOp,
) -> Result<Vec<NcclCall>, String> {
    let at = |base: u64, elems: usize| base + elems as u64 * elem_bytes;
    let root = c.root_or_0() as c_int;
    Ok(match c.kind {
        CollectiveKind::Gather | CollectiveKind::Scatter | CollectiveKind::Scan | CollectiveKind::Exscan => {
            return Err(format!("{} has no NCCL operation", c.kind.label()))
        }
        CollectiveKind::AllGather | CollectiveKind::ReduceScatter if c.splits.is_some() => {
            return Err(format!("{} with per-member counts has no NCCL operation", c.kind.label()))
        }
        CollectiveKind::AllReduce => vec![NcclCall::AllReduce { send, recv, count: c.send_elems, dtype, op }],
        CollectiveKind::AllGather => vec![NcclCall::AllGather { send, recv, count: c.block_elems, dtype }],
        CollectiveKind::ReduceScatter => {
            vec![NcclCall::ReduceScatter { send, recv, recv_count: c.block_elems, dtype, op }]
        }
        CollectiveKind::Broadcast => vec![NcclCall::Broadcast { send, recv, count: c.send_elems, dtype, root }],
        CollectiveKind::Reduce => vec![NcclCall::Reduce { send, recv, count: c.send_elems, dtype, op, root }],
        CollectiveKind::AllToAll => (0..c.group_size as usize)
            .flat_map(|j| {
                let peer = j as c_int;
                let (sc, sd, rc, rd) = match c.splits {
                    Some(s) => (s.send_counts[j], s.send_at[j], s.recv_counts[j], s.recv_at[j]),
                    None => (c.block_elems, j * c.block_elems, c.block_elems, j * c.block_elems),
                };
                [
                    NcclCall::Send { buf: at(send, sd), count: sc, dtype, peer },
                    NcclCall::Recv { buf: at(recv, rd), count: rc, dtype, peer },
                ]
            })
            .collect(),
        CollectiveKind::Barrier => vec![NcclCall::AllReduce { send, recv, count: 1, dtype: DataType::Float32, op }],
        // a send, a receive, or both (the own path's ring: one group)
        CollectiveKind::Send | CollectiveKind::Recv => c
            .send_to
            .map(|to| NcclCall::Send { buf: send, count: c.send_elems, dtype, peer: to as c_int })
            .into_iter()
            .chain(c.recv_from.map(|from| NcclCall::Recv {
                buf: recv,
                count: c.recv_elems,
                dtype,
                peer: from as c_int,
            }))
            .collect(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::backend::own::OwnOp;
    use crate::backend::trace_share::{Input, TraceShare};
    use crate::core::collective::{Buffers, KINDS};
    use crate::evidence::commtrace::{exec, TraceCollective, TraceDtype};
    use crate::evidence::shard::Dtype;

    const SEND: u64 = 0x1000_0000;
    const RECV: u64 = 0x2000_0000;

    /// Every byte range `ops` touch, as (base, bytes).
    fn ranges(ops: &[NcclCall], elem: u64, n: u64) -> Vec<(u64, u64)> {
        let b = |count: usize| count as u64 * elem;
        ops.iter()
            .flat_map(|op| match *op {
                NcclCall::AllReduce { send, recv, count, dtype, .. } => {
                    let w = if dtype == DataType::Float32 { 4 } else { elem };
                    vec![(send, count as u64 * w), (recv, count as u64 * w)]
                }
                NcclCall::AllGather { send, recv, count, .. } => vec![(send, b(count)), (recv, b(count) * n)],
                NcclCall::ReduceScatter { send, recv, recv_count, .. } => {
                    vec![(send, b(recv_count) * n), (recv, b(recv_count))]
                }
                NcclCall::Broadcast { send, recv, count, .. } | NcclCall::Reduce { send, recv, count, .. } => {
                    vec![(send, b(count)), (recv, b(count))]
                }
                NcclCall::Send { buf, count, .. } | NcclCall::Recv { buf, count, .. } => vec![(buf, b(count))],
            })
            .collect()
    }

    fn inside(what: &str, touched: &[(u64, u64)], send_len: u64, recv_len: u64) {
        for &(at, len) in touched {
            let fits = (at >= SEND && at + len <= SEND + send_len) || (at >= RECV && at + len <= RECV + recv_len);
            assert!(fits, "{what}: {len} bytes at {at:#x} outside send {send_len} / receive {recv_len}");
        }
    }

    /// Every kind's NCCL calls, for the own path's world collective and for
    /// a recorded collective (even and uneven all-to-all), touch only the
    /// buffers made for them, and every kind makes at least one call.
    #[test]
    fn every_kind_calls_stay_inside_their_buffers() {
        for n in 1u32..=4 {
            for row in KINDS {
                // the kinds NCCL has no operation for: refused, never an empty call
                if row.replay_only {
                    let c = TraceCollective::new(
                        row.kind,
                        row.pytorch,
                        "g",
                        TraceDtype::F32,
                        (4, 4),
                        (None, None),
                        (row.rooted.then_some(0), None),
                    );
                    assert!(exec::nccl_cannot_run(&c).is_some(), "{}", row.name);
                    continue;
                }
                for rank in 0..n {
                    let bytes = if row.kind == CollectiveKind::Barrier { 0 } else { 4 * 12 };
                    let op = OwnOp::new(row.kind, bytes, Dtype::F32, n, rank).unwrap();
                    let calls = nccl_calls(&op.call(), SEND, RECV, DataType::Float32, 4, RedOp::Sum).unwrap();
                    assert!(!calls.is_empty(), "{}", row.name);
                    // the own path's buffers hold the size asked for, and 4 bytes at least
                    let len = bytes.max(4);
                    inside(&format!("own {} rank {rank} of {n}", row.name), &ranges(&calls, 4, u64::from(n)), len, len);
                }
                if row.p2p && n < 2 {
                    continue;
                }
                let members: Vec<u32> = (0..n).rev().collect();
                for uneven in [false, row.buffers == Buffers::Splits] {
                    // one member's splits: k + 1 elements to member k, k + 2 from it
                    let splits = uneven.then(|| {
                        (
                            (0..n).map(|k| u64::from(k + 1)).collect::<Vec<_>>(),
                            (0..n).map(|k| u64::from(k + 2)).collect::<Vec<_>>(),
                        )
                    });
                    let e = 6 * u64::from(n);
                    let (ins, outs) = match (row.buffers, &splits) {
                        (Buffers::Splits, Some((i, o))) => (i.iter().sum(), o.iter().sum()),
                        (Buffers::OutIsNTimesIn, _) => (e, u64::from(n) * e),
                        (Buffers::InIsNTimesOut, _) => (u64::from(n) * e, e),
                        (Buffers::Free, _) if !row.p2p => (0, 0),
                        _ => (e, e),
                    };
                    let (si, so) = splits.map_or((None, None), |(i, o)| (Some(i), Some(o)));
                    let peer = row.p2p.then(|| members[1]);
                    let c = TraceCollective::new(
                        row.kind,
                        row.pytorch,
                        "g",
                        TraceDtype::Bf16,
                        (ins, outs),
                        (si, so),
                        (row.rooted.then_some(members[0]), peer),
                    );
                    let share = TraceShare::new(&c, members[0], &members).unwrap();
                    let (dtype, width) = if share.reduces() { (DataType::Bfloat16, 2) } else { (DataType::Uint8, 1) };
                    let calls = nccl_calls(&share.call(), SEND, RECV, dtype, width, RedOp::Sum).unwrap();
                    assert!(!calls.is_empty(), "{}", row.name);
                    let send_len = match share.input() {
                        Input::Values(v) => v.len() as u64 * width,
                        Input::Bytes(b) => b.len() as u64,
                        Input::Nothing => 0,
                    };
                    // the executor's allocations keep 4 bytes at least
                    let recv_len = share.out_len() as u64 * width;
                    inside(
                        &format!("trace {} on {n}, uneven {uneven}", row.name),
                        &ranges(&calls, width, u64::from(n)),
                        send_len.max(4),
                        recv_len.max(4),
                    );
                }
            }
        }
    }
}
