//! The cpu backend's one arm per kind: a [`Call`] as MPI calls (MPI-3.1
//! standard, chapters 3 and 5), blocking for the trace executor
//! (`MPI_Allreduce`, `MPI_Alltoallv`, `MPI_Send`, ...) or nonblocking for the
//! own path (`MPI_Iallreduce`, `MPI_Ialltoall`, a ring's `MPI_Irecv` and
//! `MPI_Isend`, ...), completed later by `MPI_Waitall`.
//!
//! Consumes a call's counts, checked once into MPI's `int` ([`MpiCounts`]),
//! and the buffers, datatype, reduction and communicator ([`MpiArgs`]).
//! Produces the MPI call's name, its return code and the requests it started.
//! Refuses (at [`MpiCounts::of`]) a count past MPI's `int`. Blocking and
//! nonblocking calls stay distinct (Open MPI serves them from different
//! components), so each mode measures what its caller asked for.
use crate::backend::call::Call;
use crate::core::collective::CollectiveKind;
use mpi::ffi;
use std::os::raw::{c_int, c_void};

/// The tag of point-to-point messages (the own path's ring runs on the
/// backend's own duplicate of the world, a trace's on its groups' split
/// communicators: nothing else sends there).
pub(crate) const P2P_TAG: c_int = 0x7c0;

/// A [`Call`]'s counts as MPI's `int`s.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct MpiCounts {
    kind: CollectiveKind,
    send: c_int,
    recv: c_int,
    block: c_int,
    root: c_int,
    send_to: Option<c_int>,
    recv_from: Option<c_int>,
    /// A v-call's send counts, send displacements, receive counts, receive
    /// displacements (`MPI_Alltoallv`; the others use their side's two).
    v: Option<[Vec<c_int>; 4]>,
}

impl MpiCounts {
    /// `call`'s counts, or which of them exceeds MPI's `int`.
    pub(crate) fn of(call: &Call) -> Result<Self, String> {
        let int = |x: usize, what: &str| {
            c_int::try_from(x).map_err(|_| {
                format!("{}: a {what} of {x} exceeds MPI's int count on the cpu backend", call.kind.name())
            })
        };
        let ints = |v: &[usize], what: &str| v.iter().map(|&x| int(x, what)).collect::<Result<Vec<_>, _>>();
        let v = match call.splits {
            Some(s) => Some([
                ints(&s.send_counts, "send count")?,
                ints(&s.send_at, "send displacement")?,
                ints(&s.recv_counts, "receive count")?,
                ints(&s.recv_at, "receive displacement")?,
            ]),
            None => None,
        };
        let rank = |r: Option<u32>| r.map(|r| int(r as usize, "rank")).transpose();
        Ok(MpiCounts {
            kind: call.kind,
            send: int(call.send_elems, "message")?,
            recv: int(call.recv_elems, "message")?,
            block: int(call.block_elems, "block")?,
            root: int(call.root_or_0() as usize, "rank")?,
            send_to: rank(call.send_to)?,
            recv_from: rank(call.recv_from)?,
            v,
        })
    }
}

/// The buffers, datatype, reduction and communicator of one MPI call.
#[derive(Clone, Copy, Debug)]
pub(crate) struct MpiArgs {
    /// The send buffer.
    pub send: *const c_void,
    /// The receive buffer (a broadcast's one buffer, on every rank).
    pub recv: *mut c_void,
    /// The datatype of both buffers.
    pub dtype: ffi::MPI_Datatype,
    /// The reduction of a reducing kind.
    pub op: ffi::MPI_Op,
    /// The communicator.
    pub comm: ffi::MPI_Comm,
}

/// Blocking calls, or nonblocking ones starting requests in these slots.
pub(crate) enum Mode<'r> {
    /// `MPI_Allreduce` and its kin: the call returns when this rank's part is done.
    Blocking,
    /// `MPI_Iallreduce` and its kin: the requests, completed by the caller.
    Nonblocking(&'r mut [ffi::MPI_Request; 2]),
}

/// Run `c` on `a`: one arm per kind, each naming its blocking and its
/// nonblocking call. Returns the call's name, MPI's return code (0 is
/// success) and how many requests it started (0 when blocking).
///
/// # Safety
/// `a`'s buffers must hold what `c` counts (the send buffer `send` elements,
/// or a split's displacement plus count; the receive buffer `recv`, `block`
/// times the group size, or the splits') of `a.dtype`, and, when
/// nonblocking, stay alive and untouched until the requests complete. `a`'s
/// handles must be valid.
pub(crate) unsafe fn mpi_call(c: &MpiCounts, a: &MpiArgs, mode: Mode) -> (&'static str, c_int, usize) {
    let MpiArgs { send, recv, dtype: t, op, comm } = *a;
    let (sn, rn, bn, root) = (c.send, c.recv, c.block, c.root);
    // SAFETY: every arm passes `a`'s buffers and handles with `c`'s counts,
    // which the caller's contract above makes valid for MPI.
    unsafe {
        match (c.kind, mode) {
            (CollectiveKind::AllReduce, Mode::Blocking) => {
                ("MPI_Allreduce", ffi::MPI_Allreduce(send, recv, sn, t, op, comm), 0)
            }
            (CollectiveKind::AllReduce, Mode::Nonblocking(r)) => {
                ("MPI_Iallreduce", ffi::MPI_Iallreduce(send, recv, sn, t, op, comm, &mut r[0]), 1)
            }
            (CollectiveKind::AllGather, mode) => match (&c.v, mode) {
                (None, Mode::Blocking) => ("MPI_Allgather", ffi::MPI_Allgather(send, bn, t, recv, bn, t, comm), 0),
                (None, Mode::Nonblocking(r)) => {
                    ("MPI_Iallgather", ffi::MPI_Iallgather(send, bn, t, recv, bn, t, comm, &mut r[0]), 1)
                }
                (Some([_, _, rc, rd]), Mode::Blocking) => {
                    ("MPI_Allgatherv", ffi::MPI_Allgatherv(send, sn, t, recv, rc.as_ptr(), rd.as_ptr(), t, comm), 0)
                }
                (Some([_, _, rc, rd]), Mode::Nonblocking(r)) => (
                    "MPI_Iallgatherv",
                    ffi::MPI_Iallgatherv(send, sn, t, recv, rc.as_ptr(), rd.as_ptr(), t, comm, &mut r[0]),
                    1,
                ),
            },
            (CollectiveKind::ReduceScatter, mode) => match (&c.v, mode) {
                (None, Mode::Blocking) => {
                    ("MPI_Reduce_scatter_block", ffi::MPI_Reduce_scatter_block(send, recv, bn, t, op, comm), 0)
                }
                (None, Mode::Nonblocking(r)) => (
                    "MPI_Ireduce_scatter_block",
                    ffi::MPI_Ireduce_scatter_block(send, recv, bn, t, op, comm, &mut r[0]),
                    1,
                ),
                (Some([_, _, rc, _]), Mode::Blocking) => {
                    ("MPI_Reduce_scatter", ffi::MPI_Reduce_scatter(send, recv, rc.as_ptr(), t, op, comm), 0)
                }
                (Some([_, _, rc, _]), Mode::Nonblocking(r)) => (
                    "MPI_Ireduce_scatter",
                    ffi::MPI_Ireduce_scatter(send, recv, rc.as_ptr(), t, op, comm, &mut r[0]),
                    1,
                ),
            },
            // off the root a gather-v's counts are not significant (empty here)
            (CollectiveKind::Gather, mode) => match (&c.v, mode) {
                (None, Mode::Blocking) => ("MPI_Gather", ffi::MPI_Gather(send, sn, t, recv, bn, t, root, comm), 0),
                (None, Mode::Nonblocking(r)) => {
                    ("MPI_Igather", ffi::MPI_Igather(send, sn, t, recv, bn, t, root, comm, &mut r[0]), 1)
                }
                (Some([_, _, rc, rd]), Mode::Blocking) => {
                    ("MPI_Gatherv", ffi::MPI_Gatherv(send, sn, t, recv, rc.as_ptr(), rd.as_ptr(), t, root, comm), 0)
                }
                (Some([_, _, rc, rd]), Mode::Nonblocking(r)) => (
                    "MPI_Igatherv",
                    ffi::MPI_Igatherv(send, sn, t, recv, rc.as_ptr(), rd.as_ptr(), t, root, comm, &mut r[0]),
                    1,
                ),
            },
            (CollectiveKind::Scatter, mode) => match (&c.v, mode) {
                (None, Mode::Blocking) => ("MPI_Scatter", ffi::MPI_Scatter(send, bn, t, recv, rn, t, root, comm), 0),
                (None, Mode::Nonblocking(r)) => {
                    ("MPI_Iscatter", ffi::MPI_Iscatter(send, bn, t, recv, rn, t, root, comm, &mut r[0]), 1)
                }
                (Some([sc, sd, _, _]), Mode::Blocking) => {
                    ("MPI_Scatterv", ffi::MPI_Scatterv(send, sc.as_ptr(), sd.as_ptr(), t, recv, rn, t, root, comm), 0)
                }
                (Some([sc, sd, _, _]), Mode::Nonblocking(r)) => (
                    "MPI_Iscatterv",
                    ffi::MPI_Iscatterv(send, sc.as_ptr(), sd.as_ptr(), t, recv, rn, t, root, comm, &mut r[0]),
                    1,
                ),
            },
            (CollectiveKind::Scan, Mode::Blocking) => ("MPI_Scan", ffi::MPI_Scan(send, recv, sn, t, op, comm), 0),
            (CollectiveKind::Scan, Mode::Nonblocking(r)) => {
                ("MPI_Iscan", ffi::MPI_Iscan(send, recv, sn, t, op, comm, &mut r[0]), 1)
            }
            (CollectiveKind::Exscan, Mode::Blocking) => ("MPI_Exscan", ffi::MPI_Exscan(send, recv, sn, t, op, comm), 0),
            (CollectiveKind::Exscan, Mode::Nonblocking(r)) => {
                ("MPI_Iexscan", ffi::MPI_Iexscan(send, recv, sn, t, op, comm, &mut r[0]), 1)
            }
            // in place: the root's data is in the receive buffer
            (CollectiveKind::Broadcast, Mode::Blocking) => ("MPI_Bcast", ffi::MPI_Bcast(recv, sn, t, root, comm), 0),
            (CollectiveKind::Broadcast, Mode::Nonblocking(r)) => {
                ("MPI_Ibcast", ffi::MPI_Ibcast(recv, sn, t, root, comm, &mut r[0]), 1)
            }
            (CollectiveKind::Reduce, Mode::Blocking) => {
                ("MPI_Reduce", ffi::MPI_Reduce(send, recv, sn, t, op, root, comm), 0)
            }
            (CollectiveKind::Reduce, Mode::Nonblocking(r)) => {
                ("MPI_Ireduce", ffi::MPI_Ireduce(send, recv, sn, t, op, root, comm, &mut r[0]), 1)
            }
            (CollectiveKind::AllToAll, mode) => match (&c.v, mode) {
                (None, Mode::Blocking) => ("MPI_Alltoall", ffi::MPI_Alltoall(send, bn, t, recv, bn, t, comm), 0),
                (None, Mode::Nonblocking(r)) => {
                    ("MPI_Ialltoall", ffi::MPI_Ialltoall(send, bn, t, recv, bn, t, comm, &mut r[0]), 1)
                }
                (Some([sc, sd, rc, rd]), Mode::Blocking) => (
                    "MPI_Alltoallv",
                    ffi::MPI_Alltoallv(send, sc.as_ptr(), sd.as_ptr(), t, recv, rc.as_ptr(), rd.as_ptr(), t, comm),
                    0,
                ),
                (Some([sc, sd, rc, rd]), Mode::Nonblocking(r)) => (
                    "MPI_Ialltoallv",
                    ffi::MPI_Ialltoallv(
                        send,
                        sc.as_ptr(),
                        sd.as_ptr(),
                        t,
                        recv,
                        rc.as_ptr(),
                        rd.as_ptr(),
                        t,
                        comm,
                        &mut r[0],
                    ),
                    1,
                ),
            },
            (CollectiveKind::Barrier, Mode::Blocking) => ("MPI_Barrier", ffi::MPI_Barrier(comm), 0),
            (CollectiveKind::Barrier, Mode::Nonblocking(r)) => ("MPI_Ibarrier", ffi::MPI_Ibarrier(comm, &mut r[0]), 1),
            // a send, a receive, or both (the own path's ring: one issue)
            (CollectiveKind::Send | CollectiveKind::Recv, Mode::Blocking) => match (c.send_to, c.recv_from) {
                (Some(to), Some(from)) => (
                    "MPI_Sendrecv",
                    ffi::MPI_Sendrecv(
                        send,
                        sn,
                        t,
                        to,
                        P2P_TAG,
                        recv,
                        rn,
                        t,
                        from,
                        P2P_TAG,
                        comm,
                        ffi::RSMPI_STATUS_IGNORE,
                    ),
                    0,
                ),
                (Some(to), None) => ("MPI_Send", ffi::MPI_Send(send, sn, t, to, P2P_TAG, comm), 0),
                (None, Some(from)) => {
                    ("MPI_Recv", ffi::MPI_Recv(recv, rn, t, from, P2P_TAG, comm, ffi::RSMPI_STATUS_IGNORE), 0)
                }
                (None, None) => ("a point-to-point call without a peer", ffi::MPI_ERR_ARG as c_int, 0),
            },
            (CollectiveKind::Send | CollectiveKind::Recv, Mode::Nonblocking(r)) => {
                let mut n = 0;
                let mut rc = 0;
                if let Some(from) = c.recv_from {
                    rc = ffi::MPI_Irecv(recv, rn, t, from, P2P_TAG, comm, &mut r[n]);
                    n += 1;
                }
                if let (0, Some(to)) = (rc, c.send_to) {
                    rc = ffi::MPI_Isend(send, sn, t, to, P2P_TAG, comm, &mut r[n]);
                    n += 1;
                }
                let name = match (c.recv_from, c.send_to) {
                    (Some(_), Some(_)) => "MPI_Irecv + MPI_Isend",
                    (Some(_), None) => "MPI_Irecv",
                    (None, Some(_)) => "MPI_Isend",
                    (None, None) => return ("a point-to-point call without a peer", ffi::MPI_ERR_ARG as c_int, 0),
                };
                (name, rc, n)
            }
        }
    }
}
