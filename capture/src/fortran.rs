//! The Fortran entry points. Open MPI's Fortran routines (`mpi_allreduce_`
//! and its spellings, aliases of `ompi_allreduce_f` in `libmpi_mpifh`, which
//! `use mpi_f08` calls directly) call `PMPI_Allreduce`, never `MPI_Allreduce`:
//! a C wrapper alone misses every Fortran call. So each is defined here under
//! every spelling (`mpi_x`, `mpi_x_`, `mpi_x__`, `MPI_X`, `ompi_x_f`),
//! records the call (flag [`FLAG_FORTRAN`]; handles through the `*_f2c`
//! conversions) and forwards to the library's `ompi_x_f`, found once with
//! `dlsym(RTLD_NEXT)`. Since that routine calls `PMPI_*`, a Fortran call is
//! recorded exactly once. A completion's source and tag are not read from a
//! Fortran status (it may be `MPI_STATUS_IGNORE`'s special address): they
//! are recorded as unknown.
use crate::format::{kind, FLAG_FORTRAN};
use crate::mpi_c::{comm_rank, comm_size, record_completion};
use crate::state::{self, now_ns, Call};
use mpi_sys as ffi;
use std::os::raw::{c_int, c_void};
use std::sync::atomic::AtomicUsize;

type F = *const c_int;
type FM = *mut c_int;
type Buf = *mut c_void;

fn dt(h: F) -> Option<ffi::MPI_Datatype> {
    // SAFETY: Fortran passes every handle by reference; the conversion reads a valid handle.
    (!h.is_null()).then(|| unsafe { ffi::PMPI_Type_f2c(*h) })
}
fn comm(h: F) -> Option<ffi::MPI_Comm> {
    // SAFETY: as in `dt`.
    (!h.is_null()).then(|| unsafe { ffi::PMPI_Comm_f2c(*h) })
}
fn op(h: F) -> Option<ffi::MPI_Op> {
    // SAFETY: as in `dt`.
    (!h.is_null()).then(|| unsafe { ffi::PMPI_Op_f2c(*h) })
}
fn req(h: F) -> ffi::MPI_Request {
    if h.is_null() {
        return ffi::MPI_Request(std::ptr::null_mut());
    }
    // SAFETY: as in `dt`.
    unsafe { ffi::PMPI_Request_f2c(*h) }
}
fn int(p: F) -> c_int {
    if p.is_null() {
        return 0;
    }
    // SAFETY: Fortran passes integers by reference.
    unsafe { *p }
}
fn n(p: F) -> u64 {
    int(p).max(0) as u64
}
fn sum(p: F, k: c_int) -> u64 {
    crate::mpi_c::sum(p, k)
}
fn per_member(p: F, k: c_int) -> Option<Vec<u32>> {
    crate::mpi_c::per_member(p, k)
}

/// The library's routine `name`, looked up once.
fn real(slot: &AtomicUsize, name: &std::ffi::CStr) -> usize {
    use std::sync::atomic::Ordering;
    let f = slot.load(Ordering::Acquire);
    if f != 0 {
        return f;
    }
    // SAFETY: dlsym with RTLD_NEXT and a terminated name; a null result is handled below.
    let p = unsafe { libc::dlsym(libc::RTLD_NEXT, name.as_ptr()) } as usize;
    if p == 0 {
        eprintln!(
            "commcanary-capture: the MPI library has no {name:?}: not Open MPI's Fortran bindings; aborting \
            rather than skipping the call"
        );
        std::process::abort();
    }
    slot.store(p, Ordering::Release);
    p
}

/// Defines one Fortran routine under every spelling; `$rec` fills the [`Call`] `$c` after the real routine ran.
macro_rules! fwrap {
    (
        $m:ident, $lc:literal, $uc:literal, $kind:literal,
        ($($a:ident : $t:ty),* $(,)?),
        |$c:ident, $ierr:ident| $pre:block $rec:block
    ) => {
        mod $m {
            #[allow(unused_imports)]
            use super::*;
            static REAL: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
            #[inline(always)]
            unsafe fn imp($($a: $t,)* $ierr: FM) {
                $pre
                let t_issue = now_ns();
                let f = real(&REAL, &std::ffi::CString::new(concat!("ompi_", $lc, "_f")).unwrap_or_default());
                let f: unsafe extern "C" fn($($t,)* FM) =
                    // SAFETY: `f` is the library's routine of exactly this signature (Open MPI's `ompi_X_f`).
                    unsafe { std::mem::transmute::<usize, unsafe extern "C" fn($($t,)* FM)>(f) };
                // SAFETY: the caller's arguments go unchanged to the library's Fortran routine.
                unsafe { f($($a,)* $ierr) };
                #[allow(unused_mut)]
                let mut $c = Call {
                    kind: const { kind($kind) },
                    flags: FLAG_FORTRAN,
                    t_issue,
                    t_done: now_ns(),
                    ret: int($ierr),
                    ..Default::default()
                };
                $rec
                state::with(|s| s.call(&$c));
            }
            #[export_name = concat!("mpi_", $lc)]
            pub unsafe extern "C" fn a($($a: $t,)* ierr: FM) {
                // SAFETY: the caller's contract is the MPI routine's, which `imp` forwards to.
                unsafe { imp($($a,)* ierr) }
            }
            #[export_name = concat!("mpi_", $lc, "_")]
            pub unsafe extern "C" fn b($($a: $t,)* ierr: FM) {
                // SAFETY: the caller's contract is the MPI routine's, which `imp` forwards to.
                unsafe { imp($($a,)* ierr) }
            }
            #[export_name = concat!("mpi_", $lc, "__")]
            pub unsafe extern "C" fn c($($a: $t,)* ierr: FM) {
                // SAFETY: the caller's contract is the MPI routine's, which `imp` forwards to.
                unsafe { imp($($a,)* ierr) }
            }
            #[export_name = concat!("MPI_", $uc)]
            pub unsafe extern "C" fn d($($a: $t,)* ierr: FM) {
                // SAFETY: the caller's contract is the MPI routine's, which `imp` forwards to.
                unsafe { imp($($a,)* ierr) }
            }
            #[export_name = concat!("ompi_", $lc, "_f")]
            pub unsafe extern "C" fn e($($a: $t,)* ierr: FM) {
                // SAFETY: the caller's contract is the MPI routine's, which `imp` forwards to.
                unsafe { imp($($a,)* ierr) }
            }
        }
    };
}

fwrap!(
    allreduce, "allreduce", "ALLREDUCE", "Allreduce",
    (sb: Buf, rb: Buf, count: F, d: F, o: F, cm: F),
    |c, ierr| {} {
        (c.comm, c.count_send, c.count_recv, c.dt_send, c.dt_recv, c.op) =
            (comm(cm), n(count), n(count), dt(d), dt(d), op(o));
    }
);
fwrap!(
    iallreduce, "iallreduce", "IALLREDUCE", "Iallreduce",
    (sb: Buf, rb: Buf, count: F, d: F, o: F, cm: F, r: F),
    |c, ierr| {} {
        (c.comm, c.count_send, c.count_recv, c.dt_send, c.dt_recv, c.op) =
            (comm(cm), n(count), n(count), dt(d), dt(d), op(o));
        c.new_request = Some(req(r));
    }
);
fwrap!(
    scan, "scan", "SCAN", "Scan",
    (sb: Buf, rb: Buf, count: F, d: F, o: F, cm: F),
    |c, ierr| {} {
        (c.comm, c.count_send, c.count_recv, c.dt_send, c.dt_recv, c.op) =
            (comm(cm), n(count), n(count), dt(d), dt(d), op(o));
    }
);
fwrap!(
    exscan, "exscan", "EXSCAN", "Exscan",
    (sb: Buf, rb: Buf, count: F, d: F, o: F, cm: F),
    |c, ierr| {} {
        (c.comm, c.count_send, c.count_recv, c.dt_send, c.dt_recv, c.op) =
            (comm(cm), n(count), n(count), dt(d), dt(d), op(o));
    }
);
fwrap!(
    reduce, "reduce", "REDUCE", "Reduce",
    (sb: Buf, rb: Buf, count: F, d: F, o: F, root: F, cm: F),
    |c, ierr| {} {
        (c.comm, c.count_send, c.count_recv, c.dt_send, c.dt_recv, c.op, c.peer) =
            (comm(cm), n(count), n(count), dt(d), dt(d), op(o), Some(int(root)));
    }
);
fwrap!(
    reduce_scatter_block, "reduce_scatter_block", "REDUCE_SCATTER_BLOCK", "Reduce_scatter_block",
    (sb: Buf, rb: Buf, count: F, d: F, o: F, cm: F),
    |c, ierr| {} {
        let m = comm(cm).map(comm_size).unwrap_or(0).max(0) as u64;
        (c.comm, c.count_send, c.count_recv, c.dt_send, c.dt_recv, c.op) =
            (comm(cm), n(count) * m, n(count), dt(d), dt(d), op(o));
    }
);
fwrap!(
    bcast, "bcast", "BCAST", "Bcast",
    (b: Buf, count: F, d: F, root: F, cm: F),
    |c, ierr| {} {
        (c.comm, c.count_send, c.count_recv, c.dt_send, c.dt_recv, c.peer) =
            (comm(cm), n(count), n(count), dt(d), dt(d), Some(int(root)));
    }
);
fwrap!(
    barrier, "barrier", "BARRIER", "Barrier",
    (cm: F),
    |c, ierr| {} {
        c.comm = comm(cm);
    }
);
fwrap!(
    allgather, "allgather", "ALLGATHER", "Allgather",
    (sb: Buf, sc: F, sd: F, rb: Buf, rc: F, rd: F, cm: F),
    |c, ierr| {} {
        let m = comm(cm).map(comm_size).unwrap_or(0).max(0) as u64;
        (c.comm, c.count_send, c.count_recv, c.dt_send, c.dt_recv) = (comm(cm), n(sc), n(rc) * m, dt(sd), dt(rd));
    }
);
fwrap!(
    allgatherv, "allgatherv", "ALLGATHERV", "Allgatherv",
    (sb: Buf, sc: F, sd: F, rb: Buf, rcs: F, displs: F, rd: F, cm: F),
    |c, ierr| {} {
        let m = comm(cm).map(comm_size).unwrap_or(0);
        (c.comm, c.count_send, c.count_recv, c.dt_send, c.dt_recv) = (comm(cm), n(sc), sum(rcs, m), dt(sd), dt(rd));
        c.recv_counts = per_member(rcs, m);
    }
);
fwrap!(
    alltoall, "alltoall", "ALLTOALL", "Alltoall",
    (sb: Buf, sc: F, sd: F, rb: Buf, rc: F, rd: F, cm: F),
    |c, ierr| {} {
        let m = comm(cm).map(comm_size).unwrap_or(0).max(0) as u64;
        (c.comm, c.count_send, c.count_recv, c.dt_send, c.dt_recv) = (comm(cm), n(sc) * m, n(rc) * m, dt(sd), dt(rd));
    }
);
fwrap!(
    alltoallv, "alltoallv", "ALLTOALLV", "Alltoallv",
    (sb: Buf, scs: F, sdis: F, sd: F, rb: Buf, rcs: F, rdis: F, rd: F, cm: F),
    |c, ierr| {} {
        let m = comm(cm).map(comm_size).unwrap_or(0);
        (c.comm, c.count_send, c.count_recv, c.dt_send, c.dt_recv) =
            (comm(cm), sum(scs, m), sum(rcs, m), dt(sd), dt(rd));
        (c.send_counts, c.recv_counts) = (per_member(scs, m), per_member(rcs, m));
    }
);
fwrap!(
    gather, "gather", "GATHER", "Gather",
    (sb: Buf, sc: F, sd: F, rb: Buf, rc: F, rd: F, root: F, cm: F),
    |c, ierr| {} {
        let k = comm(cm);
        let at_root = k.map(|k| comm_rank(k) == int(root)).unwrap_or(false);
        let m = k.map(comm_size).unwrap_or(0).max(0) as u64;
        (c.comm, c.count_send, c.count_recv, c.dt_send, c.dt_recv, c.peer) =
            (k, n(sc), if at_root { n(rc) * m } else { 0 }, dt(sd), dt(rd), Some(int(root)));
    }
);
fwrap!(
    scatter, "scatter", "SCATTER", "Scatter",
    (sb: Buf, sc: F, sd: F, rb: Buf, rc: F, rd: F, root: F, cm: F),
    |c, ierr| {} {
        let k = comm(cm);
        let at_root = k.map(|k| comm_rank(k) == int(root)).unwrap_or(false);
        let m = k.map(comm_size).unwrap_or(0).max(0) as u64;
        (c.comm, c.count_send, c.count_recv, c.dt_send, c.dt_recv, c.peer) =
            (k, if at_root { n(sc) * m } else { 0 }, n(rc), dt(sd), dt(rd), Some(int(root)));
    }
);

fwrap!(
    ibcast, "ibcast", "IBCAST", "Ibcast",
    (b: Buf, count: F, d: F, root: F, cm: F, r: F),
    |c, ierr| {} {
        (c.comm, c.count_send, c.count_recv, c.dt_send, c.dt_recv, c.peer) =
            (comm(cm), n(count), n(count), dt(d), dt(d), Some(int(root)));
        c.new_request = Some(req(r));
    }
);
fwrap!(
    ireduce, "ireduce", "IREDUCE", "Ireduce",
    (sb: Buf, rb: Buf, count: F, d: F, o: F, root: F, cm: F, r: F),
    |c, ierr| {} {
        (c.comm, c.count_send, c.count_recv, c.dt_send, c.dt_recv, c.op, c.peer) =
            (comm(cm), n(count), n(count), dt(d), dt(d), op(o), Some(int(root)));
        c.new_request = Some(req(r));
    }
);
fwrap!(
    iscan, "iscan", "ISCAN", "Iscan",
    (sb: Buf, rb: Buf, count: F, d: F, o: F, cm: F, r: F),
    |c, ierr| {} {
        (c.comm, c.count_send, c.count_recv, c.dt_send, c.dt_recv, c.op) =
            (comm(cm), n(count), n(count), dt(d), dt(d), op(o));
        c.new_request = Some(req(r));
    }
);
fwrap!(
    iexscan, "iexscan", "IEXSCAN", "Iexscan",
    (sb: Buf, rb: Buf, count: F, d: F, o: F, cm: F, r: F),
    |c, ierr| {} {
        (c.comm, c.count_send, c.count_recv, c.dt_send, c.dt_recv, c.op) =
            (comm(cm), n(count), n(count), dt(d), dt(d), op(o));
        c.new_request = Some(req(r));
    }
);
fwrap!(
    ireduce_scatter_block, "ireduce_scatter_block", "IREDUCE_SCATTER_BLOCK", "Ireduce_scatter_block",
    (sb: Buf, rb: Buf, count: F, d: F, o: F, cm: F, r: F),
    |c, ierr| {} {
        let m = comm(cm).map(comm_size).unwrap_or(0).max(0) as u64;
        (c.comm, c.count_send, c.count_recv, c.dt_send, c.dt_recv, c.op) =
            (comm(cm), n(count) * m, n(count), dt(d), dt(d), op(o));
        c.new_request = Some(req(r));
    }
);
fwrap!(
    reduce_scatter, "reduce_scatter", "REDUCE_SCATTER", "Reduce_scatter",
    (sb: Buf, rb: Buf, rcs: F, d: F, o: F, cm: F),
    |c, ierr| {} {
        let k = comm(cm);
        let (m, me) = k.map(|k| (comm_size(k), comm_rank(k))).unwrap_or((0, 0));
        // SAFETY: MPI requires one count per member at `rcs`; this rank's is at its rank.
        let own = if rcs.is_null() || me < 0 { 0 } else { unsafe { *rcs.add(me as usize) }.max(0) as u64 };
        (c.comm, c.count_send, c.count_recv, c.dt_send, c.dt_recv, c.op) = (k, sum(rcs, m), own, dt(d), dt(d), op(o));
        c.recv_counts = per_member(rcs, m);
    }
);
fwrap!(
    ireduce_scatter, "ireduce_scatter", "IREDUCE_SCATTER", "Ireduce_scatter",
    (sb: Buf, rb: Buf, rcs: F, d: F, o: F, cm: F, r: F),
    |c, ierr| {} {
        let k = comm(cm);
        let (m, me) = k.map(|k| (comm_size(k), comm_rank(k))).unwrap_or((0, 0));
        // SAFETY: as in reduce_scatter.
        let own = if rcs.is_null() || me < 0 { 0 } else { unsafe { *rcs.add(me as usize) }.max(0) as u64 };
        (c.comm, c.count_send, c.count_recv, c.dt_send, c.dt_recv, c.op) = (k, sum(rcs, m), own, dt(d), dt(d), op(o));
        c.recv_counts = per_member(rcs, m);
        c.new_request = Some(req(r));
    }
);
fwrap!(
    ibarrier, "ibarrier", "IBARRIER", "Ibarrier",
    (cm: F, r: F),
    |c, ierr| {} {
        c.comm = comm(cm);
        c.new_request = Some(req(r));
    }
);
fwrap!(
    iallgather, "iallgather", "IALLGATHER", "Iallgather",
    (sb: Buf, sc: F, sd: F, rb: Buf, rc: F, rd: F, cm: F, r: F),
    |c, ierr| {} {
        let m = comm(cm).map(comm_size).unwrap_or(0).max(0) as u64;
        (c.comm, c.count_send, c.count_recv, c.dt_send, c.dt_recv) = (comm(cm), n(sc), n(rc) * m, dt(sd), dt(rd));
        c.new_request = Some(req(r));
    }
);
fwrap!(
    iallgatherv, "iallgatherv", "IALLGATHERV", "Iallgatherv",
    (sb: Buf, sc: F, sd: F, rb: Buf, rcs: F, displs: F, rd: F, cm: F, r: F),
    |c, ierr| {} {
        let m = comm(cm).map(comm_size).unwrap_or(0);
        (c.comm, c.count_send, c.count_recv, c.dt_send, c.dt_recv) = (comm(cm), n(sc), sum(rcs, m), dt(sd), dt(rd));
        c.recv_counts = per_member(rcs, m);
        c.new_request = Some(req(r));
    }
);
fwrap!(
    ialltoall, "ialltoall", "IALLTOALL", "Ialltoall",
    (sb: Buf, sc: F, sd: F, rb: Buf, rc: F, rd: F, cm: F, r: F),
    |c, ierr| {} {
        let m = comm(cm).map(comm_size).unwrap_or(0).max(0) as u64;
        (c.comm, c.count_send, c.count_recv, c.dt_send, c.dt_recv) = (comm(cm), n(sc) * m, n(rc) * m, dt(sd), dt(rd));
        c.new_request = Some(req(r));
    }
);
fwrap!(
    ialltoallv, "ialltoallv", "IALLTOALLV", "Ialltoallv",
    (sb: Buf, scs: F, sdis: F, sd: F, rb: Buf, rcs: F, rdis: F, rd: F, cm: F, r: F),
    |c, ierr| {} {
        let m = comm(cm).map(comm_size).unwrap_or(0);
        (c.comm, c.count_send, c.count_recv, c.dt_send, c.dt_recv) =
            (comm(cm), sum(scs, m), sum(rcs, m), dt(sd), dt(rd));
        (c.send_counts, c.recv_counts) = (per_member(scs, m), per_member(rcs, m));
        c.new_request = Some(req(r));
    }
);

/// Rooted calls: (communicator, whether this rank is the root, members).
fn rooted(cm: F, root: F) -> (Option<ffi::MPI_Comm>, bool, c_int) {
    let k = comm(cm);
    let at_root = k.map(|k| comm_rank(k) == int(root)).unwrap_or(false);
    (k, at_root, k.map(comm_size).unwrap_or(0))
}

fwrap!(
    igather, "igather", "IGATHER", "Igather",
    (sb: Buf, sc: F, sd: F, rb: Buf, rc: F, rd: F, root: F, cm: F, r: F),
    |c, ierr| {} {
        let (k, at_root, m) = rooted(cm, root);
        (c.comm, c.count_send, c.count_recv, c.dt_send, c.dt_recv, c.peer) =
            (k, n(sc), if at_root { n(rc) * m.max(0) as u64 } else { 0 }, dt(sd), dt(rd), Some(int(root)));
        c.new_request = Some(req(r));
    }
);
fwrap!(
    iscatter, "iscatter", "ISCATTER", "Iscatter",
    (sb: Buf, sc: F, sd: F, rb: Buf, rc: F, rd: F, root: F, cm: F, r: F),
    |c, ierr| {} {
        let (k, at_root, m) = rooted(cm, root);
        (c.comm, c.count_send, c.count_recv, c.dt_send, c.dt_recv, c.peer) =
            (k, if at_root { n(sc) * m.max(0) as u64 } else { 0 }, n(rc), dt(sd), dt(rd), Some(int(root)));
        c.new_request = Some(req(r));
    }
);
fwrap!(
    gatherv, "gatherv", "GATHERV", "Gatherv",
    (sb: Buf, sc: F, sd: F, rb: Buf, rcs: F, displs: F, rd: F, root: F, cm: F),
    |c, ierr| {} {
        let (k, at_root, m) = rooted(cm, root);
        (c.comm, c.count_send, c.count_recv, c.dt_send, c.dt_recv, c.peer) =
            (k, n(sc), if at_root { sum(rcs, m) } else { 0 }, dt(sd), dt(rd), Some(int(root)));
        c.recv_counts = if at_root { per_member(rcs, m) } else { None };
    }
);
fwrap!(
    igatherv, "igatherv", "IGATHERV", "Igatherv",
    (sb: Buf, sc: F, sd: F, rb: Buf, rcs: F, displs: F, rd: F, root: F, cm: F, r: F),
    |c, ierr| {} {
        let (k, at_root, m) = rooted(cm, root);
        (c.comm, c.count_send, c.count_recv, c.dt_send, c.dt_recv, c.peer) =
            (k, n(sc), if at_root { sum(rcs, m) } else { 0 }, dt(sd), dt(rd), Some(int(root)));
        c.recv_counts = if at_root { per_member(rcs, m) } else { None };
        c.new_request = Some(req(r));
    }
);
fwrap!(
    scatterv, "scatterv", "SCATTERV", "Scatterv",
    (sb: Buf, scs: F, displs: F, sd: F, rb: Buf, rc: F, rd: F, root: F, cm: F),
    |c, ierr| {} {
        let (k, at_root, m) = rooted(cm, root);
        (c.comm, c.count_send, c.count_recv, c.dt_send, c.dt_recv, c.peer) =
            (k, if at_root { sum(scs, m) } else { 0 }, n(rc), dt(sd), dt(rd), Some(int(root)));
        c.send_counts = if at_root { per_member(scs, m) } else { None };
    }
);
fwrap!(
    iscatterv, "iscatterv", "ISCATTERV", "Iscatterv",
    (sb: Buf, scs: F, displs: F, sd: F, rb: Buf, rc: F, rd: F, root: F, cm: F, r: F),
    |c, ierr| {} {
        let (k, at_root, m) = rooted(cm, root);
        (c.comm, c.count_send, c.count_recv, c.dt_send, c.dt_recv, c.peer) =
            (k, if at_root { sum(scs, m) } else { 0 }, n(rc), dt(sd), dt(rd), Some(int(root)));
        c.send_counts = if at_root { per_member(scs, m) } else { None };
        c.new_request = Some(req(r));
    }
);

macro_rules! fsend {
    ($m:ident, $lc:literal, $uc:literal, $kind:literal) => {
        fwrap!(
            $m, $lc, $uc, $kind,
            (b: Buf, count: F, d: F, dest: F, tag: F, cm: F),
            |c, ierr| {} {
                (c.comm, c.count_send, c.dt_send, c.peer, c.tag) =
                    (comm(cm), n(count), dt(d), Some(int(dest)), Some(int(tag)));
            }
        );
    };
}
fsend!(send, "send", "SEND", "Send");
fsend!(ssend, "ssend", "SSEND", "Ssend");
fsend!(bsend, "bsend", "BSEND", "Bsend");
fsend!(rsend, "rsend", "RSEND", "Rsend");
fwrap!(
    isend, "isend", "ISEND", "Isend",
    (b: Buf, count: F, d: F, dest: F, tag: F, cm: F, r: F),
    |c, ierr| {} {
        (c.comm, c.count_send, c.dt_send, c.peer, c.tag) = (comm(cm), n(count), dt(d), Some(int(dest)), Some(int(tag)));
        c.new_request = Some(req(r));
    }
);
fwrap!(
    issend, "issend", "ISSEND", "Issend",
    (b: Buf, count: F, d: F, dest: F, tag: F, cm: F, r: F),
    |c, ierr| {} {
        (c.comm, c.count_send, c.dt_send, c.peer, c.tag) = (comm(cm), n(count), dt(d), Some(int(dest)), Some(int(tag)));
        c.new_request = Some(req(r));
    }
);
fwrap!(
    ibsend, "ibsend", "IBSEND", "Ibsend",
    (b: Buf, count: F, d: F, dest: F, tag: F, cm: F, r: F),
    |c, ierr| {} {
        (c.comm, c.count_send, c.dt_send, c.peer, c.tag) = (comm(cm), n(count), dt(d), Some(int(dest)), Some(int(tag)));
        c.new_request = Some(req(r));
    }
);
fwrap!(
    irsend, "irsend", "IRSEND", "Irsend",
    (b: Buf, count: F, d: F, dest: F, tag: F, cm: F, r: F),
    |c, ierr| {} {
        (c.comm, c.count_send, c.dt_send, c.peer, c.tag) = (comm(cm), n(count), dt(d), Some(int(dest)), Some(int(tag)));
        c.new_request = Some(req(r));
    }
);
fwrap!(
    sendrecv_replace, "sendrecv_replace", "SENDRECV_REPLACE", "Sendrecv_replace",
    (b: Buf, count: F, d: F, dest: F, stag: F, src: F, rtag: F, cm: F, st: FM),
    |c, ierr| {} {
        (c.comm, c.count_send, c.count_recv, c.dt_send, c.dt_recv) = (comm(cm), n(count), n(count), dt(d), dt(d));
        (c.peer, c.tag, c.peer2, c.tag2) = (Some(int(dest)), Some(int(stag)), Some(int(src)), Some(int(rtag)));
    }
);
fwrap!(
    iprobe, "iprobe", "IPROBE", "Iprobe",
    (src: F, tag: F, cm: F, flag: FM, st: FM),
    |c, ierr| {} {
        (c.comm, c.peer, c.tag, c.n) = (comm(cm), Some(int(src)), Some(int(tag)), (int(flag) != 0) as u32);
    }
);
fwrap!(
    comm_split_type, "comm_split_type", "COMM_SPLIT_TYPE", "Comm_split_type",
    (cm: F, ty: F, key: F, info: F, out: FM),
    |c, ierr| {} {
        (c.comm, c.peer, c.tag) = (comm(cm), Some(int(ty)), Some(int(key)));
        note_new(out);
    }
);
fwrap!(
    comm_create, "comm_create", "COMM_CREATE", "Comm_create",
    (cm: F, group: F, out: FM),
    |c, ierr| {} {
        c.comm = comm(cm);
        note_new(out);
    }
);
fwrap!(
    irecv, "irecv", "IRECV", "Irecv",
    (b: Buf, count: F, d: F, src: F, tag: F, cm: F, r: F),
    |c, ierr| {} {
        (c.comm, c.count_recv, c.dt_recv, c.peer, c.tag) = (comm(cm), n(count), dt(d), Some(int(src)), Some(int(tag)));
        c.new_request = Some(req(r));
    }
);
fwrap!(
    recv, "recv", "RECV", "Recv",
    (b: Buf, count: F, d: F, src: F, tag: F, cm: F, st: FM),
    |c, ierr| {} {
        (c.comm, c.count_recv, c.dt_recv, c.peer, c.tag) = (comm(cm), n(count), dt(d), Some(int(src)), Some(int(tag)));
    }
);
fwrap!(
    sendrecv, "sendrecv", "SENDRECV", "Sendrecv",
    (sb: Buf, sc: F, sd: F, dest: F, stag: F, rb: Buf, rc: F, rd: F, src: F, rtag: F, cm: F, st: FM),
    |c, ierr| {} {
        (c.comm, c.count_send, c.count_recv, c.dt_send, c.dt_recv) = (comm(cm), n(sc), n(rc), dt(sd), dt(rd));
        (c.peer, c.tag, c.peer2, c.tag2) = (Some(int(dest)), Some(int(stag)), Some(int(src)), Some(int(rtag)));
    }
);
fwrap!(
    probe, "probe", "PROBE", "Probe",
    (src: F, tag: F, cm: F, st: FM),
    |c, ierr| {} {
        (c.comm, c.peer, c.tag) = (comm(cm), Some(int(src)), Some(int(tag)));
    }
);
fwrap!(
    comm_split, "comm_split", "COMM_SPLIT", "Comm_split",
    (cm: F, color: F, key: F, out: FM),
    |c, ierr| {} {
        (c.comm, c.peer, c.tag) = (comm(cm), Some(int(color)), Some(int(key)));
        note_new(out);
    }
);
fwrap!(
    comm_dup, "comm_dup", "COMM_DUP", "Comm_dup",
    (cm: F, out: FM),
    |c, ierr| {} {
        c.comm = comm(cm);
        note_new(out);
    }
);

/// A communicator the library just made (Fortran handle): its members are recorded now.
fn note_new(out: FM) {
    // SAFETY: reading the rsmpi shim's constant.
    if let Some(k) = comm(out).filter(|k| !k.0.is_null() && *k != unsafe { ffi::RSMPI_COMM_NULL }) {
        state::with(|s| s.note_comm(k));
    }
}

/// Requests a Fortran wait or test is handed, as C handles, with their ids.
fn freqs(r: F, count: c_int) -> (Vec<ffi::MPI_Request>, Vec<(u64, u32)>) {
    if r.is_null() || count <= 0 {
        return (Vec::new(), Vec::new());
    }
    let hs: Vec<ffi::MPI_Request> = (0..count as usize)
        .map(|i| {
            // SAFETY: MPI requires `count` request handles at `r`.
            req(unsafe { r.add(i) })
        })
        .collect();
    let mut ids = vec![(0, 0); hs.len()];
    state::with(|s| ids = hs.iter().map(|&q| s.request(q)).collect());
    (hs, ids)
}

/// The requests a Fortran waitsome/testsome completed (indices count from 1).
fn some_done(outcount: F, indices: F) -> Vec<usize> {
    let k = int(outcount);
    if k <= 0 || indices.is_null() {
        return Vec::new();
    }
    // SAFETY: the library wrote `outcount` indices into the caller's array.
    unsafe { std::slice::from_raw_parts(indices, k as usize) }
        .iter()
        .filter(|&&i| i >= 1)
        .map(|&i| (i - 1) as usize)
        .collect()
}

/// Defines a Fortran wait/test routine; `$done` gives the completed indices after the call.
macro_rules! fwait {
    (
        $m:ident, $lc:literal, $uc:literal, $kind:literal,
        ($($a:ident : $t:ty),*),
        $reqs:ident, $count:expr,
        |$before:ident| $done:expr
    ) => {
        mod $m {
            #[allow(unused_imports)]
            use super::*;
            static REAL: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
            #[inline(always)]
            unsafe fn imp($($a: $t,)* ierr: FM) {
                let ($before, ids) = freqs($reqs, $count);
                let t_issue = now_ns();
                let f = real(&REAL, &std::ffi::CString::new(concat!("ompi_", $lc, "_f")).unwrap_or_default());
                let f: unsafe extern "C" fn($($t,)* FM) =
                    // SAFETY: `f` is the library's routine of exactly this signature.
                    unsafe { std::mem::transmute::<usize, unsafe extern "C" fn($($t,)* FM)>(f) };
                // SAFETY: the caller's arguments go unchanged to the library's Fortran routine.
                unsafe { f($($a,)* ierr) };
                let done: Vec<usize> = $done;
                let completed: Vec<(usize, Option<ffi::MPI_Status>)> = done.into_iter().map(|i| (i, None)).collect();
                record_completion(
                    const { kind($kind) },
                    FLAG_FORTRAN,
                    t_issue,
                    int(ierr),
                    (&$before, &ids),
                    &completed,
                );
            }
            #[export_name = concat!("mpi_", $lc)]
            pub unsafe extern "C" fn a($($a: $t,)* ierr: FM) {
                // SAFETY: the caller's contract is the MPI routine's, which `imp` forwards to.
                unsafe { imp($($a,)* ierr) }
            }
            #[export_name = concat!("mpi_", $lc, "_")]
            pub unsafe extern "C" fn b($($a: $t,)* ierr: FM) {
                // SAFETY: the caller's contract is the MPI routine's, which `imp` forwards to.
                unsafe { imp($($a,)* ierr) }
            }
            #[export_name = concat!("mpi_", $lc, "__")]
            pub unsafe extern "C" fn c($($a: $t,)* ierr: FM) {
                // SAFETY: the caller's contract is the MPI routine's, which `imp` forwards to.
                unsafe { imp($($a,)* ierr) }
            }
            #[export_name = concat!("MPI_", $uc)]
            pub unsafe extern "C" fn d($($a: $t,)* ierr: FM) {
                // SAFETY: the caller's contract is the MPI routine's, which `imp` forwards to.
                unsafe { imp($($a,)* ierr) }
            }
            #[export_name = concat!("ompi_", $lc, "_f")]
            pub unsafe extern "C" fn e($($a: $t,)* ierr: FM) {
                // SAFETY: the caller's contract is the MPI routine's, which `imp` forwards to.
                unsafe { imp($($a,)* ierr) }
            }
        }
    };
}
fwait!(
    wait, "wait", "WAIT", "Wait",
    (r: FM, st: FM),
    r, 1,
    |before| vec![0]
);
fwait!(
    waitall, "waitall", "WAITALL", "Waitall",
    (count: F, r: FM, st: FM),
    r, int(count),
    |before| (0..before.len()).collect()
);
fwait!(
    waitany, "waitany", "WAITANY", "Waitany",
    (count: F, r: FM, idx: FM, st: FM),
    r, int(count),
    |before| {
        // Fortran indices count from 1; MPI_UNDEFINED: none
        let i = int(idx);
        if i >= 1 { vec![(i - 1) as usize] } else { Vec::new() }
    }
);
fwait!(
    testany, "testany", "TESTANY", "Testany",
    (count: F, r: FM, idx: FM, flag: FM, st: FM),
    r, int(count),
    |before| {
        let i = int(idx);
        if int(flag) != 0 && i >= 1 { vec![(i - 1) as usize] } else { Vec::new() }
    }
);
fwait!(
    waitsome, "waitsome", "WAITSOME", "Waitsome",
    (count: F, r: FM, outcount: FM, indices: FM, st: FM),
    r, int(count),
    |before| {
        some_done(outcount, indices)
    }
);
fwait!(
    testsome, "testsome", "TESTSOME", "Testsome",
    (count: F, r: FM, outcount: FM, indices: FM, st: FM),
    r, int(count),
    |before| {
        some_done(outcount, indices)
    }
);
fwait!(
    test, "test", "TEST", "Test",
    (r: FM, flag: FM, st: FM),
    r, 1,
    |before| if int(flag) != 0 { vec![0] } else { Vec::new() }
);
fwait!(
    testall, "testall", "TESTALL", "Testall",
    (count: F, r: FM, flag: FM, st: FM),
    r, int(count),
    |before| if int(flag) != 0 { (0..before.len()).collect() } else { Vec::new() }
);

// ---- life cycle --------------------------------------------------------

macro_rules! flife {
    ($m:ident, $lc:literal, $uc:literal, ($($a:ident : $t:ty),*), $before:block, $after:block) => {
        mod $m {
            #[allow(unused_imports)]
            use super::*;
            static REAL: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
            #[inline(always)]
            unsafe fn imp($($a: $t,)* ierr: FM) {
                $before
                let f = real(&REAL, &std::ffi::CString::new(concat!("ompi_", $lc, "_f")).unwrap_or_default());
                let f: unsafe extern "C" fn($($t,)* FM) =
                    // SAFETY: `f` is the library's routine of exactly this signature.
                    unsafe { std::mem::transmute::<usize, unsafe extern "C" fn($($t,)* FM)>(f) };
                // SAFETY: the caller's arguments go unchanged to the library's Fortran routine.
                unsafe { f($($a,)* ierr) };
                if int(ierr) == 0 $after
            }
            #[export_name = concat!("mpi_", $lc)]
            pub unsafe extern "C" fn a($($a: $t,)* ierr: FM) {
                // SAFETY: the caller's contract is the MPI routine's, which `imp` forwards to.
                unsafe { imp($($a,)* ierr) }
            }
            #[export_name = concat!("mpi_", $lc, "_")]
            pub unsafe extern "C" fn b($($a: $t,)* ierr: FM) {
                // SAFETY: the caller's contract is the MPI routine's, which `imp` forwards to.
                unsafe { imp($($a,)* ierr) }
            }
            #[export_name = concat!("mpi_", $lc, "__")]
            pub unsafe extern "C" fn c($($a: $t,)* ierr: FM) {
                // SAFETY: the caller's contract is the MPI routine's, which `imp` forwards to.
                unsafe { imp($($a,)* ierr) }
            }
            #[export_name = concat!("MPI_", $uc)]
            pub unsafe extern "C" fn d($($a: $t,)* ierr: FM) {
                // SAFETY: the caller's contract is the MPI routine's, which `imp` forwards to.
                unsafe { imp($($a,)* ierr) }
            }
            #[export_name = concat!("ompi_", $lc, "_f")]
            pub unsafe extern "C" fn e($($a: $t,)* ierr: FM) {
                // SAFETY: the caller's contract is the MPI routine's, which `imp` forwards to.
                unsafe { imp($($a,)* ierr) }
            }
        }
    };
}
flife!(init, "init", "INIT", (), {}, {
    crate::start();
});
flife!(init_thread, "init_thread", "INIT_THREAD", (required: F, provided: FM), {}, { crate::start(); });
flife!(
    finalize,
    "finalize",
    "FINALIZE",
    (),
    {
        crate::finish();
    },
    {}
);
flife!(abort, "abort", "ABORT", (cm: F, code: F), { crate::abort(int(code)); }, {});
// Comm_free: recorded, and its id released, before the library frees it.
flife!(comm_free, "comm_free", "COMM_FREE", (cm: FM), {
    let t = now_ns();
    if let Some(k) = comm(cm) {
        let call = Call {
            kind: const { kind("Comm_free") },
            flags: FLAG_FORTRAN,
            t_issue: t,
            t_done: t,
            comm: Some(k),
            ..Default::default()
        };
        state::with(|s| {
            s.call(&call);
            s.comm_freed(k, t)
        });
    }
}, {});
