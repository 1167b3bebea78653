//! The C entry points: each `MPI_X` the application calls runs `PMPI_X`
//! with the caller's arguments unchanged, then hands the call's facts
//! (kind, counts, datatypes, op, communicator, root or peer and tag, the
//! request it made or completed, entry and return times) to the capture.
//! Wait and test calls read the requests before the call (the library
//! resets completed ones to `MPI_REQUEST_NULL`) and record one completion
//! per request they complete, with the status's source and tag (a status
//! the caller ignores is replaced by a local one).
use crate::format::kind;
use crate::state::{self, now_ns, Call, Done};
use mpi_sys as ffi;
use std::os::raw::{c_char, c_int, c_void};

type Buf = *const c_void;
type MBuf = *mut c_void;
type Ints = *const c_int;
type Dt = ffi::MPI_Datatype;
type Comm = ffi::MPI_Comm;
type Op = ffi::MPI_Op;
type Req = ffi::MPI_Request;
type Status = ffi::MPI_Status;

pub(crate) fn comm_size(comm: Comm) -> c_int {
    let mut n = 0;
    // SAFETY: `comm` is the application's handle to a call that just succeeded; `n` is a local.
    unsafe { ffi::PMPI_Comm_size(comm, &mut n) };
    n
}

pub(crate) fn comm_rank(comm: Comm) -> c_int {
    let mut r = 0;
    // SAFETY: as in `comm_size`.
    unsafe { ffi::PMPI_Comm_rank(comm, &mut r) };
    r
}

/// The sum of `n` counts (0 for a null array, which MPI allows where the argument is not significant).
pub(crate) fn sum(counts: Ints, n: c_int) -> u64 {
    if counts.is_null() || n <= 0 {
        return 0;
    }
    // SAFETY: MPI requires the array to hold the communicator's size in counts where it is significant.
    let s = unsafe { std::slice::from_raw_parts(counts, n as usize) };
    s.iter().map(|&c| c.max(0) as u64).sum()
}

/// `n` per-member counts as recorded (negative ones as 0); `None` for a null array (not significant here).
pub(crate) fn per_member(counts: Ints, n: c_int) -> Option<Vec<u32>> {
    if counts.is_null() || n <= 0 {
        return None;
    }
    // SAFETY: as in `sum`.
    let s = unsafe { std::slice::from_raw_parts(counts, n as usize) };
    Some(s.iter().map(|&c| c.max(0) as u32).collect())
}

fn n(c: c_int) -> u64 {
    c.max(0) as u64
}

/// Defines `MPI_X` over `PMPI_X`; `$rec` fills the [`Call`] named `$c` from the arguments.
macro_rules! wrap {
    ($name:ident => $pname:ident, $kind:literal, ($($a:ident : $t:ty),* $(,)?), |$c:ident| $rec:block) => {
        #[no_mangle]
        pub unsafe extern "C" fn $name($($a: $t),*) -> c_int {
            let t_issue = now_ns();
            // SAFETY: the caller's arguments go unchanged to the library's profiling entry point.
            let ret = unsafe { ffi::$pname($($a),*) };
            let mut $c = Call { kind: const { kind($kind) }, t_issue, t_done: now_ns(), ret, ..Default::default() };
            $rec
            state::with(|s| s.call(&$c));
            ret
        }
    };
}

// ---- collectives -------------------------------------------------------

macro_rules! reduce_like {
    ($name:ident => $pname:ident, $kind:literal) => {
        wrap!(
            $name => $pname, $kind,
            (sb: Buf, rb: MBuf, count: c_int, dt: Dt, op: Op, comm: Comm),
            |c| {
                (c.comm, c.count_send, c.count_recv, c.dt_send, c.dt_recv, c.op) =
                    (Some(comm), n(count), n(count), Some(dt), Some(dt), Some(op));
            }
        );
    };
    ($name:ident => $pname:ident, $kind:literal, request) => {
        wrap!(
            $name => $pname, $kind,
            (sb: Buf, rb: MBuf, count: c_int, dt: Dt, op: Op, comm: Comm, req: *mut Req),
            |c| {
                (c.comm, c.count_send, c.count_recv, c.dt_send, c.dt_recv, c.op) =
                    (Some(comm), n(count), n(count), Some(dt), Some(dt), Some(op));
                c.new_request = Some(read_req(req));
            }
        );
    };
}
reduce_like!(MPI_Allreduce => PMPI_Allreduce, "Allreduce");
reduce_like!(MPI_Iallreduce => PMPI_Iallreduce, "Iallreduce", request);
reduce_like!(MPI_Scan => PMPI_Scan, "Scan");
reduce_like!(MPI_Iscan => PMPI_Iscan, "Iscan", request);
reduce_like!(MPI_Exscan => PMPI_Exscan, "Exscan");
reduce_like!(MPI_Iexscan => PMPI_Iexscan, "Iexscan", request);

/// A request the library just wrote (null pointer: none).
fn read_req(req: *mut Req) -> Req {
    if req.is_null() {
        return ffi::MPI_Request(std::ptr::null_mut());
    }
    // SAFETY: the library wrote the request through this caller-provided pointer.
    unsafe { *req }
}

wrap!(
    MPI_Reduce => PMPI_Reduce, "Reduce",
    (sb: Buf, rb: MBuf, count: c_int, dt: Dt, op: Op, root: c_int, comm: Comm),
    |c| {
        (c.comm, c.count_send, c.count_recv, c.dt_send, c.dt_recv, c.op, c.peer) =
            (Some(comm), n(count), n(count), Some(dt), Some(dt), Some(op), Some(root));
    }
);
wrap!(
    MPI_Ireduce => PMPI_Ireduce, "Ireduce",
    (sb: Buf, rb: MBuf, count: c_int, dt: Dt, op: Op, root: c_int, comm: Comm, req: *mut Req),
    |c| {
        (c.comm, c.count_send, c.count_recv, c.dt_send, c.dt_recv, c.op, c.peer) =
            (Some(comm), n(count), n(count), Some(dt), Some(dt), Some(op), Some(root));
        c.new_request = Some(read_req(req));
    }
);
wrap!(
    MPI_Reduce_scatter_block => PMPI_Reduce_scatter_block, "Reduce_scatter_block",
    (sb: Buf, rb: MBuf, count: c_int, dt: Dt, op: Op, comm: Comm),
    |c| {
        (c.comm, c.count_send, c.count_recv, c.dt_send, c.dt_recv, c.op) =
            (Some(comm), n(count) * n(comm_size(comm)), n(count), Some(dt), Some(dt), Some(op));
    }
);
wrap!(
    MPI_Ireduce_scatter_block => PMPI_Ireduce_scatter_block, "Ireduce_scatter_block",
    (sb: Buf, rb: MBuf, count: c_int, dt: Dt, op: Op, comm: Comm, req: *mut Req),
    |c| {
        (c.comm, c.count_send, c.count_recv, c.dt_send, c.dt_recv, c.op) =
            (Some(comm), n(count) * n(comm_size(comm)), n(count), Some(dt), Some(dt), Some(op));
        c.new_request = Some(read_req(req));
    }
);
wrap!(
    MPI_Reduce_scatter => PMPI_Reduce_scatter, "Reduce_scatter",
    (sb: Buf, rb: MBuf, counts: Ints, dt: Dt, op: Op, comm: Comm),
    |c| {
        let own = if counts.is_null() { 0 } else {
            // SAFETY: MPI requires `counts` to hold one count per member; this rank's is at its rank.
            n(unsafe { *counts.add(comm_rank(comm).max(0) as usize) })
        };
        (c.comm, c.count_send, c.count_recv, c.dt_send, c.dt_recv, c.op) =
            (Some(comm), sum(counts, comm_size(comm)), own, Some(dt), Some(dt), Some(op));
        c.recv_counts = per_member(counts, comm_size(comm));
    }
);
wrap!(
    MPI_Ireduce_scatter => PMPI_Ireduce_scatter, "Ireduce_scatter",
    (sb: Buf, rb: MBuf, counts: Ints, dt: Dt, op: Op, comm: Comm, req: *mut Req),
    |c| {
        let own = if counts.is_null() { 0 } else {
            // SAFETY: as in MPI_Reduce_scatter.
            n(unsafe { *counts.add(comm_rank(comm).max(0) as usize) })
        };
        (c.comm, c.count_send, c.count_recv, c.dt_send, c.dt_recv, c.op) =
            (Some(comm), sum(counts, comm_size(comm)), own, Some(dt), Some(dt), Some(op));
        c.recv_counts = per_member(counts, comm_size(comm));
        c.new_request = Some(read_req(req));
    }
);
wrap!(
    MPI_Bcast => PMPI_Bcast, "Bcast",
    (buf: MBuf, count: c_int, dt: Dt, root: c_int, comm: Comm),
    |c| {
        (c.comm, c.count_send, c.count_recv, c.dt_send, c.dt_recv, c.peer) =
            (Some(comm), n(count), n(count), Some(dt), Some(dt), Some(root));
    }
);
wrap!(
    MPI_Ibcast => PMPI_Ibcast, "Ibcast",
    (buf: MBuf, count: c_int, dt: Dt, root: c_int, comm: Comm, req: *mut Req),
    |c| {
        (c.comm, c.count_send, c.count_recv, c.dt_send, c.dt_recv, c.peer) =
            (Some(comm), n(count), n(count), Some(dt), Some(dt), Some(root));
        c.new_request = Some(read_req(req));
    }
);
wrap!(MPI_Barrier => PMPI_Barrier, "Barrier", (comm: Comm), |c| { c.comm = Some(comm); });
wrap!(
    MPI_Ibarrier => PMPI_Ibarrier, "Ibarrier",
    (comm: Comm, req: *mut Req),
    |c| {
        c.comm = Some(comm);
        c.new_request = Some(read_req(req));
    }
);

/// Send and receive counts both given per member (all-gather, all-to-all).
macro_rules! two_sided {
    ($name:ident => $pname:ident, $kind:literal, $rmul:expr) => {
        wrap!(
            $name => $pname, $kind,
            (sb: Buf, sc: c_int, sdt: Dt, rb: MBuf, rc: c_int, rdt: Dt, comm: Comm),
            |c| {
                let m: fn(Comm) -> u64 = $rmul;
                (c.comm, c.count_send, c.count_recv, c.dt_send, c.dt_recv) = (
                    Some(comm),
                    n(sc) * if $kind.contains("toall") { m(comm) } else { 1 },
                    n(rc) * m(comm),
                    Some(sdt),
                    Some(rdt),
                );
            }
        );
    };
    ($name:ident => $pname:ident, $kind:literal, $rmul:expr, request) => {
        wrap!(
            $name => $pname, $kind,
            (sb: Buf, sc: c_int, sdt: Dt, rb: MBuf, rc: c_int, rdt: Dt, comm: Comm, req: *mut Req),
            |c| {
                let m: fn(Comm) -> u64 = $rmul;
                (c.comm, c.count_send, c.count_recv, c.dt_send, c.dt_recv) = (
                    Some(comm),
                    n(sc) * if $kind.contains("toall") { m(comm) } else { 1 },
                    n(rc) * m(comm),
                    Some(sdt),
                    Some(rdt),
                );
                c.new_request = Some(read_req(req));
            }
        );
    };
}
two_sided!(MPI_Allgather => PMPI_Allgather, "Allgather", |comm| n(comm_size(comm)));
two_sided!(MPI_Iallgather => PMPI_Iallgather, "Iallgather", |comm| n(comm_size(comm)), request);
two_sided!(MPI_Alltoall => PMPI_Alltoall, "Alltoall", |comm| n(comm_size(comm)));
two_sided!(MPI_Ialltoall => PMPI_Ialltoall, "Ialltoall", |comm| n(comm_size(comm)), request);

wrap!(
    MPI_Allgatherv => PMPI_Allgatherv, "Allgatherv",
    (sb: Buf, sc: c_int, sdt: Dt, rb: MBuf, rcs: Ints, displs: Ints, rdt: Dt, comm: Comm),
    |c| {
        (c.comm, c.count_send, c.count_recv, c.dt_send, c.dt_recv) =
            (Some(comm), n(sc), sum(rcs, comm_size(comm)), Some(sdt), Some(rdt));
        c.recv_counts = per_member(rcs, comm_size(comm));
    }
);
wrap!(
    MPI_Iallgatherv => PMPI_Iallgatherv, "Iallgatherv",
    (sb: Buf, sc: c_int, sdt: Dt, rb: MBuf, rcs: Ints, displs: Ints, rdt: Dt, comm: Comm, req: *mut Req),
    |c| {
        (c.comm, c.count_send, c.count_recv, c.dt_send, c.dt_recv) =
            (Some(comm), n(sc), sum(rcs, comm_size(comm)), Some(sdt), Some(rdt));
        c.recv_counts = per_member(rcs, comm_size(comm));
        c.new_request = Some(read_req(req));
    }
);
wrap!(
    MPI_Alltoallv => PMPI_Alltoallv, "Alltoallv",
    (sb: Buf, scs: Ints, sd: Ints, sdt: Dt, rb: MBuf, rcs: Ints, rd: Ints, rdt: Dt, comm: Comm),
    |c| {
        let m = comm_size(comm);
        (c.comm, c.count_send, c.count_recv, c.dt_send, c.dt_recv) =
            (Some(comm), sum(scs, m), sum(rcs, m), Some(sdt), Some(rdt));
        (c.send_counts, c.recv_counts) = (per_member(scs, m), per_member(rcs, m));
    }
);
wrap!(
    MPI_Ialltoallv => PMPI_Ialltoallv, "Ialltoallv",
    (sb: Buf, scs: Ints, sd: Ints, sdt: Dt, rb: MBuf, rcs: Ints, rd: Ints, rdt: Dt, comm: Comm, req: *mut Req),
    |c| {
        let m = comm_size(comm);
        (c.comm, c.count_send, c.count_recv, c.dt_send, c.dt_recv) =
            (Some(comm), sum(scs, m), sum(rcs, m), Some(sdt), Some(rdt));
        (c.send_counts, c.recv_counts) = (per_member(scs, m), per_member(rcs, m));
        c.new_request = Some(read_req(req));
    }
);

/// Rooted: the receive (gather) or send (scatter) side counts only at the root.
fn at_root(comm: Comm, root: c_int, v: u64) -> u64 {
    if comm_rank(comm) == root {
        v
    } else {
        0
    }
}

wrap!(
    MPI_Gather => PMPI_Gather, "Gather",
    (sb: Buf, sc: c_int, sdt: Dt, rb: MBuf, rc: c_int, rdt: Dt, root: c_int, comm: Comm),
    |c| {
        (c.comm, c.count_send, c.count_recv, c.dt_send, c.dt_recv, c.peer) =
            (Some(comm), n(sc), at_root(comm, root, n(rc) * n(comm_size(comm))), Some(sdt), Some(rdt), Some(root));
    }
);
wrap!(
    MPI_Igather => PMPI_Igather, "Igather",
    (sb: Buf, sc: c_int, sdt: Dt, rb: MBuf, rc: c_int, rdt: Dt, root: c_int, comm: Comm, req: *mut Req),
    |c| {
        (c.comm, c.count_send, c.count_recv, c.dt_send, c.dt_recv, c.peer) =
            (Some(comm), n(sc), at_root(comm, root, n(rc) * n(comm_size(comm))), Some(sdt), Some(rdt), Some(root));
        c.new_request = Some(read_req(req));
    }
);
wrap!(
    MPI_Gatherv => PMPI_Gatherv, "Gatherv",
    (sb: Buf, sc: c_int, sdt: Dt, rb: MBuf, rcs: Ints, displs: Ints, rdt: Dt, root: c_int, comm: Comm),
    |c| {
        let r = if comm_rank(comm) == root { sum(rcs, comm_size(comm)) } else { 0 };
        (c.comm, c.count_send, c.count_recv, c.dt_send, c.dt_recv, c.peer) =
            (Some(comm), n(sc), r, Some(sdt), Some(rdt), Some(root));
        c.recv_counts = if comm_rank(comm) == root { per_member(rcs, comm_size(comm)) } else { None };
    }
);
wrap!(
    MPI_Igatherv => PMPI_Igatherv, "Igatherv",
    (sb: Buf, sc: c_int, sdt: Dt, rb: MBuf, rcs: Ints, displs: Ints, rdt: Dt, root: c_int, comm: Comm, req: *mut Req),
    |c| {
        let r = if comm_rank(comm) == root { sum(rcs, comm_size(comm)) } else { 0 };
        (c.comm, c.count_send, c.count_recv, c.dt_send, c.dt_recv, c.peer) =
            (Some(comm), n(sc), r, Some(sdt), Some(rdt), Some(root));
        c.recv_counts = if comm_rank(comm) == root { per_member(rcs, comm_size(comm)) } else { None };
        c.new_request = Some(read_req(req));
    }
);
wrap!(
    MPI_Scatter => PMPI_Scatter, "Scatter",
    (sb: Buf, sc: c_int, sdt: Dt, rb: MBuf, rc: c_int, rdt: Dt, root: c_int, comm: Comm),
    |c| {
        (c.comm, c.count_send, c.count_recv, c.dt_send, c.dt_recv, c.peer) =
            (Some(comm), at_root(comm, root, n(sc) * n(comm_size(comm))), n(rc), Some(sdt), Some(rdt), Some(root));
    }
);
wrap!(
    MPI_Iscatter => PMPI_Iscatter, "Iscatter",
    (sb: Buf, sc: c_int, sdt: Dt, rb: MBuf, rc: c_int, rdt: Dt, root: c_int, comm: Comm, req: *mut Req),
    |c| {
        (c.comm, c.count_send, c.count_recv, c.dt_send, c.dt_recv, c.peer) =
            (Some(comm), at_root(comm, root, n(sc) * n(comm_size(comm))), n(rc), Some(sdt), Some(rdt), Some(root));
        c.new_request = Some(read_req(req));
    }
);
wrap!(
    MPI_Scatterv => PMPI_Scatterv, "Scatterv",
    (sb: Buf, scs: Ints, displs: Ints, sdt: Dt, rb: MBuf, rc: c_int, rdt: Dt, root: c_int, comm: Comm),
    |c| {
        let s = if comm_rank(comm) == root { sum(scs, comm_size(comm)) } else { 0 };
        (c.comm, c.count_send, c.count_recv, c.dt_send, c.dt_recv, c.peer) =
            (Some(comm), s, n(rc), Some(sdt), Some(rdt), Some(root));
        c.send_counts = if comm_rank(comm) == root { per_member(scs, comm_size(comm)) } else { None };
    }
);
wrap!(
    MPI_Iscatterv => PMPI_Iscatterv, "Iscatterv",
    (sb: Buf, scs: Ints, displs: Ints, sdt: Dt, rb: MBuf, rc: c_int, rdt: Dt, root: c_int, comm: Comm, req: *mut Req),
    |c| {
        let s = if comm_rank(comm) == root { sum(scs, comm_size(comm)) } else { 0 };
        (c.comm, c.count_send, c.count_recv, c.dt_send, c.dt_recv, c.peer) =
            (Some(comm), s, n(rc), Some(sdt), Some(rdt), Some(root));
        c.send_counts = if comm_rank(comm) == root { per_member(scs, comm_size(comm)) } else { None };
        c.new_request = Some(read_req(req));
    }
);

// ---- point-to-point ----------------------------------------------------

macro_rules! send_like {
    ($name:ident => $pname:ident, $kind:literal) => {
        wrap!(
            $name => $pname, $kind,
            (buf: Buf, count: c_int, dt: Dt, dest: c_int, tag: c_int, comm: Comm),
            |c| {
                (c.comm, c.count_send, c.dt_send, c.peer, c.tag) =
                    (Some(comm), n(count), Some(dt), Some(dest), Some(tag));
            }
        );
    };
    ($name:ident => $pname:ident, $kind:literal, request) => {
        wrap!(
            $name => $pname, $kind,
            (buf: Buf, count: c_int, dt: Dt, dest: c_int, tag: c_int, comm: Comm, req: *mut Req),
            |c| {
                (c.comm, c.count_send, c.dt_send, c.peer, c.tag) =
                    (Some(comm), n(count), Some(dt), Some(dest), Some(tag));
                c.new_request = Some(read_req(req));
            }
        );
    };
}
send_like!(MPI_Send => PMPI_Send, "Send");
send_like!(MPI_Ssend => PMPI_Ssend, "Ssend");
send_like!(MPI_Bsend => PMPI_Bsend, "Bsend");
send_like!(MPI_Rsend => PMPI_Rsend, "Rsend");
send_like!(MPI_Isend => PMPI_Isend, "Isend", request);
send_like!(MPI_Issend => PMPI_Issend, "Issend", request);
send_like!(MPI_Ibsend => PMPI_Ibsend, "Ibsend", request);
send_like!(MPI_Irsend => PMPI_Irsend, "Irsend", request);

wrap!(
    MPI_Irecv => PMPI_Irecv, "Irecv",
    (buf: MBuf, count: c_int, dt: Dt, source: c_int, tag: c_int, comm: Comm, req: *mut Req),
    |c| {
        (c.comm, c.count_recv, c.dt_recv, c.peer, c.tag) = (Some(comm), n(count), Some(dt), Some(source), Some(tag));
        c.new_request = Some(read_req(req));
    }
);

/// A status to hand the library: the caller's, or `local` where the caller ignores it.
fn status_or(st: *mut Status, local: &mut Status) -> *mut Status {
    // SAFETY: reading the rsmpi shim's constant, initialized at load time.
    if st.is_null() || st == unsafe { ffi::RSMPI_STATUS_IGNORE } {
        local
    } else {
        st
    }
}

fn blank_status() -> Status {
    Status { MPI_SOURCE: ffi::MPI_UNDEFINED, MPI_TAG: ffi::MPI_UNDEFINED, MPI_ERROR: 0, _cancelled: 0, _ucount: 0 }
}

#[no_mangle]
pub unsafe extern "C" fn MPI_Recv(
    buf: MBuf,
    count: c_int,
    dt: Dt,
    source: c_int,
    tag: c_int,
    comm: Comm,
    st: *mut Status,
) -> c_int {
    let mut local = blank_status();
    let stp = status_or(st, &mut local);
    let t_issue = now_ns();
    // SAFETY: the caller's arguments go to PMPI_Recv unchanged, but for a valid status in place of an ignored one.
    let ret = unsafe { ffi::PMPI_Recv(buf, count, dt, source, tag, comm, stp) };
    // SAFETY: `stp` is the caller's status or `local`, written by the library.
    let got = unsafe { *stp };
    let c = Call {
        kind: const { kind("Recv") },
        t_issue,
        t_done: now_ns(),
        ret,
        comm: Some(comm),
        count_recv: n(count),
        dt_recv: Some(dt),
        peer2: Some(got.MPI_SOURCE),
        tag2: Some(got.MPI_TAG),
        peer: Some(source),
        tag: Some(tag),
        ..Default::default()
    };
    state::with(|s| s.call(&c));
    ret
}

#[no_mangle]
pub unsafe extern "C" fn MPI_Sendrecv(
    sb: Buf,
    sc: c_int,
    sdt: Dt,
    dest: c_int,
    stag: c_int,
    rb: MBuf,
    rc: c_int,
    rdt: Dt,
    source: c_int,
    rtag: c_int,
    comm: Comm,
    st: *mut Status,
) -> c_int {
    let mut local = blank_status();
    let stp = status_or(st, &mut local);
    let t_issue = now_ns();
    // SAFETY: as in MPI_Recv.
    let ret = unsafe { ffi::PMPI_Sendrecv(sb, sc, sdt, dest, stag, rb, rc, rdt, source, rtag, comm, stp) };
    // SAFETY: as in MPI_Recv.
    let got = unsafe { *stp };
    let c = Call {
        kind: const { kind("Sendrecv") },
        t_issue,
        t_done: now_ns(),
        ret,
        comm: Some(comm),
        count_send: n(sc),
        count_recv: n(rc),
        dt_send: Some(sdt),
        dt_recv: Some(rdt),
        peer: Some(dest),
        tag: Some(stag),
        peer2: Some(if source == ffi::MPI_ANY_SOURCE { got.MPI_SOURCE } else { source }),
        tag2: Some(if rtag == ffi::MPI_ANY_TAG { got.MPI_TAG } else { rtag }),
        ..Default::default()
    };
    state::with(|s| s.call(&c));
    ret
}

#[no_mangle]
pub unsafe extern "C" fn MPI_Sendrecv_replace(
    buf: MBuf,
    count: c_int,
    dt: Dt,
    dest: c_int,
    stag: c_int,
    source: c_int,
    rtag: c_int,
    comm: Comm,
    st: *mut Status,
) -> c_int {
    let mut local = blank_status();
    let stp = status_or(st, &mut local);
    let t_issue = now_ns();
    // SAFETY: as in MPI_Recv.
    let ret = unsafe { ffi::PMPI_Sendrecv_replace(buf, count, dt, dest, stag, source, rtag, comm, stp) };
    // SAFETY: as in MPI_Recv.
    let got = unsafe { *stp };
    let c = Call {
        kind: const { kind("Sendrecv_replace") },
        t_issue,
        t_done: now_ns(),
        ret,
        comm: Some(comm),
        count_send: n(count),
        count_recv: n(count),
        dt_send: Some(dt),
        dt_recv: Some(dt),
        peer: Some(dest),
        tag: Some(stag),
        peer2: Some(if source == ffi::MPI_ANY_SOURCE { got.MPI_SOURCE } else { source }),
        tag2: Some(if rtag == ffi::MPI_ANY_TAG { got.MPI_TAG } else { rtag }),
        ..Default::default()
    };
    state::with(|s| s.call(&c));
    ret
}

#[no_mangle]
pub unsafe extern "C" fn MPI_Probe(source: c_int, tag: c_int, comm: Comm, st: *mut Status) -> c_int {
    let mut local = blank_status();
    let stp = status_or(st, &mut local);
    let t_issue = now_ns();
    // SAFETY: as in MPI_Recv.
    let ret = unsafe { ffi::PMPI_Probe(source, tag, comm, stp) };
    // SAFETY: as in MPI_Recv.
    let got = unsafe { *stp };
    let c = Call {
        kind: const { kind("Probe") },
        t_issue,
        t_done: now_ns(),
        ret,
        comm: Some(comm),
        peer: Some(source),
        tag: Some(tag),
        peer2: Some(got.MPI_SOURCE),
        tag2: Some(got.MPI_TAG),
        ..Default::default()
    };
    state::with(|s| s.call(&c));
    ret
}

#[no_mangle]
pub unsafe extern "C" fn MPI_Iprobe(source: c_int, tag: c_int, comm: Comm, flag: *mut c_int, st: *mut Status) -> c_int {
    let mut local = blank_status();
    let stp = status_or(st, &mut local);
    let t_issue = now_ns();
    // SAFETY: as in MPI_Recv.
    let ret = unsafe { ffi::PMPI_Iprobe(source, tag, comm, flag, stp) };
    // SAFETY: the library wrote the flag, and the status where the flag is set.
    let (found, got) = unsafe { (!flag.is_null() && *flag != 0, *stp) };
    let c = Call {
        kind: const { kind("Iprobe") },
        t_issue,
        t_done: now_ns(),
        ret,
        comm: Some(comm),
        peer: Some(source),
        tag: Some(tag),
        peer2: found.then_some(got.MPI_SOURCE),
        tag2: found.then_some(got.MPI_TAG),
        n: found as u32,
        ..Default::default()
    };
    state::with(|s| s.call(&c));
    ret
}

// ---- completion --------------------------------------------------------

/// Records a wait or test call over `reqs` (read before the call) and one
/// completion per index in `completed` with its status.
pub(crate) fn record_completion(
    kind_no: u16,
    flags: u16,
    t_issue: u64,
    ret: c_int,
    (reqs, ids): (&[Req], &[(u64, u32)]),
    completed: &[(usize, Option<Status>)],
) {
    let t_done = now_ns();
    state::with(|s| {
        let call = Call {
            kind: kind_no,
            flags,
            t_issue,
            t_done,
            ret,
            request_id: if reqs.len() == 1 { ids[0].0 } else { 0 },
            n: reqs.len() as u32,
            ..Default::default()
        };
        s.call(&call);
        for (i, st) in completed {
            let Some(&r) = reqs.get(*i) else { continue };
            if r.0.is_null() {
                continue;
            }
            let (id, comm) = ids[*i];
            let d =
                Done { request_id: id, source: st.map(|s| s.MPI_SOURCE), tag: st.map(|s| s.MPI_TAG), index: *i as u32 };
            s.done(&d, t_done, comm);
            s.request_gone(r);
        }
    });
}

/// Requests a call is handed and their ids, read before the call (a
/// completed request's handle may be handed out again at once).
pub(crate) fn copy_reqs(reqs: *const Req, count: c_int) -> (Vec<Req>, Vec<(u64, u32)>) {
    if reqs.is_null() || count <= 0 {
        return (Vec::new(), Vec::new());
    }
    // SAFETY: MPI requires `count` requests at `reqs`.
    let r = unsafe { std::slice::from_raw_parts(reqs, count as usize) }.to_vec();
    let mut ids = vec![(0, 0); r.len()];
    state::with(|s| ids = r.iter().map(|&q| s.request(q)).collect());
    (r, ids)
}

#[no_mangle]
pub unsafe extern "C" fn MPI_Wait(req: *mut Req, st: *mut Status) -> c_int {
    let (reqs, ids) = copy_reqs(req, 1);
    let mut local = blank_status();
    let stp = status_or(st, &mut local);
    let t_issue = now_ns();
    // SAFETY: as in MPI_Recv.
    let ret = unsafe { ffi::PMPI_Wait(req, stp) };
    // SAFETY: as in MPI_Recv.
    let got = unsafe { *stp };
    record_completion(const { kind("Wait") }, 0, t_issue, ret, (&reqs, &ids), &[(0, Some(got))]);
    ret
}

#[no_mangle]
pub unsafe extern "C" fn MPI_Test(req: *mut Req, flag: *mut c_int, st: *mut Status) -> c_int {
    let (reqs, ids) = copy_reqs(req, 1);
    let mut local = blank_status();
    let stp = status_or(st, &mut local);
    let t_issue = now_ns();
    // SAFETY: as in MPI_Recv.
    let ret = unsafe { ffi::PMPI_Test(req, flag, stp) };
    // SAFETY: the library wrote the flag, and the status where it is set.
    let (done, got) = unsafe { (!flag.is_null() && *flag != 0, *stp) };
    let completed: Vec<(usize, Option<Status>)> = if done { vec![(0, Some(got))] } else { Vec::new() };
    record_completion(const { kind("Test") }, 0, t_issue, ret, (&reqs, &ids), &completed);
    ret
}

/// Statuses for `count` requests: the caller's array, or a local one where it ignores them.
fn statuses_or(st: *mut Status, count: c_int, local: &mut Vec<Status>) -> *mut Status {
    // SAFETY: reading the rsmpi shim's constant, initialized at load time.
    if st.is_null() || st == unsafe { ffi::RSMPI_STATUSES_IGNORE } {
        *local = vec![blank_status(); count.max(0) as usize];
        local.as_mut_ptr()
    } else {
        st
    }
}

fn status_at(stp: *const Status, i: usize) -> Status {
    // SAFETY: `stp` holds one status per request and `i` is below the request count.
    unsafe { *stp.add(i) }
}

#[no_mangle]
pub unsafe extern "C" fn MPI_Waitall(count: c_int, reqs: *mut Req, st: *mut Status) -> c_int {
    let (before, ids) = copy_reqs(reqs, count);
    let mut local = Vec::new();
    let stp = statuses_or(st, count, &mut local);
    let t_issue = now_ns();
    // SAFETY: as in MPI_Recv, with an array of statuses.
    let ret = unsafe { ffi::PMPI_Waitall(count, reqs, stp) };
    let completed: Vec<(usize, Option<Status>)> = (0..before.len()).map(|i| (i, Some(status_at(stp, i)))).collect();
    record_completion(const { kind("Waitall") }, 0, t_issue, ret, (&before, &ids), &completed);
    ret
}

#[no_mangle]
pub unsafe extern "C" fn MPI_Testall(count: c_int, reqs: *mut Req, flag: *mut c_int, st: *mut Status) -> c_int {
    let (before, ids) = copy_reqs(reqs, count);
    let mut local = Vec::new();
    let stp = statuses_or(st, count, &mut local);
    let t_issue = now_ns();
    // SAFETY: as in MPI_Waitall.
    let ret = unsafe { ffi::PMPI_Testall(count, reqs, flag, stp) };
    // SAFETY: the library wrote the flag.
    let done = unsafe { !flag.is_null() && *flag != 0 };
    let completed: Vec<(usize, Option<Status>)> =
        if done { (0..before.len()).map(|i| (i, Some(status_at(stp, i)))).collect() } else { Vec::new() };
    record_completion(const { kind("Testall") }, 0, t_issue, ret, (&before, &ids), &completed);
    ret
}

#[no_mangle]
pub unsafe extern "C" fn MPI_Waitany(count: c_int, reqs: *mut Req, index: *mut c_int, st: *mut Status) -> c_int {
    let (before, ids) = copy_reqs(reqs, count);
    let mut local = blank_status();
    let stp = status_or(st, &mut local);
    let t_issue = now_ns();
    // SAFETY: as in MPI_Recv.
    let ret = unsafe { ffi::PMPI_Waitany(count, reqs, index, stp) };
    // SAFETY: the library wrote the index and the status.
    let (i, got) = unsafe { (*index, *stp) };
    let completed: Vec<(usize, Option<Status>)> = if i >= 0 { vec![(i as usize, Some(got))] } else { Vec::new() };
    record_completion(const { kind("Waitany") }, 0, t_issue, ret, (&before, &ids), &completed);
    ret
}

#[no_mangle]
pub unsafe extern "C" fn MPI_Testany(
    count: c_int,
    reqs: *mut Req,
    index: *mut c_int,
    flag: *mut c_int,
    st: *mut Status,
) -> c_int {
    let (before, ids) = copy_reqs(reqs, count);
    let mut local = blank_status();
    let stp = status_or(st, &mut local);
    let t_issue = now_ns();
    // SAFETY: as in MPI_Recv.
    let ret = unsafe { ffi::PMPI_Testany(count, reqs, index, flag, stp) };
    // SAFETY: the library wrote index, flag and status.
    let (i, done, got) = unsafe { (*index, !flag.is_null() && *flag != 0, *stp) };
    let completed: Vec<(usize, Option<Status>)> =
        if done && i >= 0 { vec![(i as usize, Some(got))] } else { Vec::new() };
    record_completion(const { kind("Testany") }, 0, t_issue, ret, (&before, &ids), &completed);
    ret
}

macro_rules! some_like {
    ($name:ident => $pname:ident, $kind:literal) => {
        #[no_mangle]
        pub unsafe extern "C" fn $name(
            count: c_int,
            reqs: *mut Req,
            outcount: *mut c_int,
            indices: *mut c_int,
            st: *mut Status,
        ) -> c_int {
            let (before, ids) = copy_reqs(reqs, count);
            let mut local = Vec::new();
            let stp = statuses_or(st, count, &mut local);
            let t_issue = now_ns();
            // SAFETY: as in MPI_Waitall.
            let ret = unsafe { ffi::$pname(count, reqs, outcount, indices, stp) };
            // SAFETY: the library wrote `outcount` indices (MPI_UNDEFINED: none).
            let k = unsafe { *outcount };
            let completed: Vec<(usize, Option<Status>)> = if k > 0 {
                // SAFETY: as above.
                let idx = unsafe { std::slice::from_raw_parts(indices, k as usize) };
                idx.iter().enumerate().map(|(j, &i)| (i.max(0) as usize, Some(status_at(stp, j)))).collect()
            } else {
                Vec::new()
            };
            record_completion(const { kind($kind) }, 0, t_issue, ret, (&before, &ids), &completed);
            ret
        }
    };
}
some_like!(MPI_Waitsome => PMPI_Waitsome, "Waitsome");
some_like!(MPI_Testsome => PMPI_Testsome, "Testsome");

// ---- communicators -----------------------------------------------------

wrap!(
    MPI_Comm_split => PMPI_Comm_split, "Comm_split",
    (comm: Comm, color: c_int, key: c_int, out: *mut Comm),
    |c| {
        (c.comm, c.peer, c.tag) = (Some(comm), Some(color), Some(key));
        note_new_comm(out);
    }
);
wrap!(
    MPI_Comm_split_type => PMPI_Comm_split_type, "Comm_split_type",
    (comm: Comm, ty: c_int, key: c_int, info: ffi::MPI_Info, out: *mut Comm),
    |c| {
        (c.comm, c.peer, c.tag) = (Some(comm), Some(ty), Some(key));
        note_new_comm(out);
    }
);
wrap!(
    MPI_Comm_dup => PMPI_Comm_dup, "Comm_dup",
    (comm: Comm, out: *mut Comm),
    |c| {
        c.comm = Some(comm);
        note_new_comm(out);
    }
);
wrap!(
    MPI_Comm_create => PMPI_Comm_create, "Comm_create",
    (comm: Comm, group: ffi::MPI_Group, out: *mut Comm),
    |c| {
        c.comm = Some(comm);
        note_new_comm(out);
    }
);

/// A communicator just made: its members are recorded now (creation order is the same on every member).
fn note_new_comm(out: *mut Comm) {
    if out.is_null() {
        return;
    }
    // SAFETY: the library wrote the new communicator through the caller's pointer.
    let comm = unsafe { *out };
    // SAFETY: reading the rsmpi shim's constant.
    if comm.0.is_null() || comm == unsafe { ffi::RSMPI_COMM_NULL } {
        return;
    }
    state::with(|s| s.note_comm(comm));
}

#[no_mangle]
pub unsafe extern "C" fn MPI_Comm_free(comm: *mut Comm) -> c_int {
    let t_issue = now_ns();
    let handle = if comm.is_null() {
        ffi::MPI_Comm(std::ptr::null_mut())
    } else {
        // SAFETY: the caller passes its communicator's address.
        unsafe { *comm }
    };
    let call = Call { kind: const { kind("Comm_free") }, t_issue, comm: Some(handle), ..Default::default() };
    // the call is recorded before the handle dies (its id resolves now)
    state::with(|s| s.call(&call));
    state::with(|s| s.comm_freed(handle, t_issue));
    // SAFETY: forwarded unchanged.
    unsafe { ffi::PMPI_Comm_free(comm) }
}

// ---- life cycle --------------------------------------------------------

#[no_mangle]
pub unsafe extern "C" fn MPI_Init(argc: *mut c_int, argv: *mut *mut *mut c_char) -> c_int {
    // SAFETY: forwarded unchanged.
    let ret = unsafe { ffi::PMPI_Init(argc, argv) };
    if ret == 0 {
        crate::start();
    }
    ret
}

#[no_mangle]
pub unsafe extern "C" fn MPI_Init_thread(
    argc: *mut c_int,
    argv: *mut *mut *mut c_char,
    required: c_int,
    provided: *mut c_int,
) -> c_int {
    // SAFETY: forwarded unchanged.
    let ret = unsafe { ffi::PMPI_Init_thread(argc, argv, required, provided) };
    if ret == 0 {
        crate::start();
    }
    ret
}

#[no_mangle]
pub unsafe extern "C" fn MPI_Finalize() -> c_int {
    crate::finish();
    // SAFETY: no arguments.
    unsafe { ffi::PMPI_Finalize() }
}

#[no_mangle]
pub unsafe extern "C" fn MPI_Abort(comm: Comm, code: c_int) -> c_int {
    crate::abort(code);
    // SAFETY: forwarded unchanged.
    unsafe { ffi::PMPI_Abort(comm, code) }
}
