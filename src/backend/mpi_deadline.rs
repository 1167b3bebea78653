//! The per-rank program's blocking MPI operations, bounded by
//! `--collective-timeout-s`.
//!
//! Consumes a communicator, a buffer, a time limit and a description of the
//! operation; produces the operation's result, or a
//! `refused[COLLECTIVE_TIMEOUT]` error naming the operation, the program phase
//! and the peer (when it has one) once the limit passes. Refuses nothing else.
//! Test hook: [`test_stop_point`] stops the process where
//! `COMMCANARY_TEST_STOP_AT` says. Polling, yielding, idle waits:
//! docs/METHODS.md, "Bounded MPI waits".
use crate::core::refusal::{refuse, Code};
use anyhow::{bail, Result};
use mpi::collective::CommunicatorCollectives;
use mpi::ffi;
use mpi::raw::AsRaw;
use mpi::topology::{Communicator, SimpleCommunicator};
use std::os::raw::{c_int, c_void};
use std::time::{Duration, Instant};

/// What is waited for, for the timeout message.
#[derive(Clone, Copy, Debug)]
pub struct Op<'a> {
    /// The MPI operation and its purpose (`barrier`, `broadcast of the run directory`).
    pub what: &'a str,
    /// Where in the program (`clock calibration, start window`, `phase blocking`).
    pub phase: &'a str,
    /// The rank waited for, when the operation has one peer.
    pub peer: Option<u32>,
}

/// The refusal of an operation that outlived `limit`.
pub(crate) fn timeout_error(op: &Op, limit: Duration) -> anyhow::Error {
    let who = match op.peer {
        Some(p) => format!("rank {p} is stopped, dead or far behind"),
        None => "a peer rank is stopped, dead or far behind (a collective does not say which)".to_string(),
    };
    refuse(
        Code::CollectiveTimeout,
        format!(
            "collective timeout: the {} ({}) did not complete within {:.1} s (--collective-timeout-s); {who}",
            op.what,
            op.phase,
            limit.as_secs_f64()
        ),
    )
}

/// Yielding tests before an idle wait starts to sleep between tests.
pub const IDLE_SPIN: Duration = Duration::from_micros(50);
/// An idle wait's first sleep between two tests; each next one doubles.
pub const IDLE_FIRST_SLEEP: Duration = Duration::from_micros(20);
/// An idle wait's longest sleep between two tests.
pub const IDLE_MAX_SLEEP: Duration = Duration::from_micros(250);

/// How a wait spends the time between two tests of its request.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Patience {
    /// Yield the core after every test (a reply expected within a round trip).
    Yield,
    /// Yield for [`IDLE_SPIN`], then sleep with a doubling backoff (a long wait).
    Idle,
}

/// Complete `req` by polling MPI_Test until `limit`, spending the time
/// between tests as `patience` says. On timeout the request stays pending
/// (its buffers must not be freed).
fn poll(req: &mut ffi::MPI_Request, limit: Duration, op: &Op) -> Result<()> {
    poll_with(req, limit, op, Patience::Yield)
}

fn poll_with(req: &mut ffi::MPI_Request, limit: Duration, op: &Op, patience: Patience) -> Result<()> {
    let t0 = Instant::now();
    let mut nap = IDLE_FIRST_SLEEP;
    loop {
        let mut done: c_int = 0;
        // SAFETY: req is an active request started by the caller.
        let rc = unsafe { ffi::MPI_Test(req, &mut done, ffi::RSMPI_STATUS_IGNORE) };
        if rc != 0 {
            bail!("MPI_Test on the {} ({}) failed with MPI error code {rc}", op.what, op.phase);
        }
        if done != 0 {
            return Ok(());
        }
        let waited = t0.elapsed();
        if waited > limit {
            return Err(timeout_error(op, limit));
        }
        if patience == Patience::Idle && waited > IDLE_SPIN {
            std::thread::sleep(nap);
            nap = (nap * 2).min(IDLE_MAX_SLEEP);
        } else {
            std::thread::yield_now();
        }
    }
}

/// Complete every one of `reqs` (their statuses into `sts`) by polling
/// MPI_Testall until `limit`, yielding between tests. On timeout the requests
/// stay pending (their buffers must not be freed).
pub(crate) fn poll_all(
    reqs: &mut [ffi::MPI_Request],
    sts: &mut [ffi::MPI_Status],
    limit: Duration,
    op: &Op,
) -> Result<()> {
    let t0 = Instant::now();
    loop {
        let mut done: c_int = 0;
        // SAFETY: every request is active or null, started by the caller; `sts` holds one status per request.
        let rc = unsafe { ffi::MPI_Testall(reqs.len() as c_int, reqs.as_mut_ptr(), &mut done, sts.as_mut_ptr()) };
        if rc != 0 {
            bail!("MPI_Testall on the {} ({}) failed with MPI error code {rc}", op.what, op.phase);
        }
        if done != 0 {
            return Ok(());
        }
        if t0.elapsed() > limit {
            return Err(timeout_error(op, limit));
        }
        std::thread::yield_now();
    }
}

fn started(rc: c_int, call: &str, op: &Op) -> Result<()> {
    if rc != 0 {
        bail!("{call} for the {} ({}) failed with MPI error code {rc}", op.what, op.phase);
    }
    Ok(())
}

/// Barrier on `comm` within `limit`.
pub fn barrier(comm: &SimpleCommunicator, limit: Duration, op: Op) -> Result<()> {
    barrier_with(comm, limit, op, Patience::Yield)
}

/// A barrier bounded by `limit` where one is set ([`barrier`]), else MPI's own.
pub fn barrier_within(comm: &SimpleCommunicator, limit: Option<Duration>, op: Op) -> Result<()> {
    match limit {
        Some(limit) => barrier(comm, limit, op),
        None => {
            comm.barrier();
            Ok(())
        }
    }
}

/// [`barrier`] for a wait that is long by design: sleeps between tests (module doc).
pub(crate) fn barrier_idle(comm: &SimpleCommunicator, limit: Duration, op: Op) -> Result<()> {
    barrier_with(comm, limit, op, Patience::Idle)
}

fn barrier_with(comm: &SimpleCommunicator, limit: Duration, op: Op, patience: Patience) -> Result<()> {
    // SAFETY: reading an immutable handle constant that rsmpi's C shim initialises before MPI_Init returns.
    let mut req: ffi::MPI_Request = unsafe { ffi::RSMPI_REQUEST_NULL };
    // SAFETY: no buffers; req is polled to completion or left pending.
    started(unsafe { ffi::MPI_Ibarrier(comm.as_raw(), &mut req) }, "MPI_Ibarrier", &op)?;
    poll_with(&mut req, limit, &op, patience)
}

/// Broadcast `buf` from `root` within `limit`.
pub fn broadcast(comm: &SimpleCommunicator, root: u32, buf: &mut [u8], limit: Duration, op: Op) -> Result<()> {
    let mut owned = buf.to_vec();
    let count = c_int::try_from(owned.len())?;
    // SAFETY: reading an immutable handle constant that rsmpi's C shim initialises before MPI_Init returns.
    let mut req: ffi::MPI_Request = unsafe { ffi::RSMPI_REQUEST_NULL };
    // SAFETY: `owned` outlives the request: it is leaked if the request does not complete.
    let rc = unsafe {
        ffi::MPI_Ibcast(
            owned.as_mut_ptr() as *mut c_void,
            count,
            ffi::RSMPI_UINT8_T,
            root as c_int,
            comm.as_raw(),
            &mut req,
        )
    };
    started(rc, "MPI_Ibcast", &op)?;
    if let Err(e) = poll(&mut req, limit, &op) {
        std::mem::forget(owned);
        return Err(e);
    }
    buf.copy_from_slice(&owned);
    Ok(())
}

/// Gather every rank's `mine` (all the same length) at `root` within
/// `limit`: the root gets them in rank order, the others `None`.
pub fn gather(comm: &SimpleCommunicator, root: u32, mine: &[u8], limit: Duration, op: Op) -> Result<Option<Vec<u8>>> {
    let send = mine.to_vec();
    let count = c_int::try_from(send.len())?;
    let is_root = comm.rank() as u32 == root;
    let mut all = if is_root { vec![0u8; send.len() * comm.size() as usize] } else { Vec::new() };
    // SAFETY: reading an immutable handle constant that rsmpi's C shim initialises before MPI_Init returns.
    let mut req: ffi::MPI_Request = unsafe { ffi::RSMPI_REQUEST_NULL };
    // SAFETY: both buffers outlive the request (leaked if it does not
    // complete); the receive buffer is read only at the root, where it holds size x count bytes.
    let rc = unsafe {
        ffi::MPI_Igather(
            send.as_ptr() as *const c_void,
            count,
            ffi::RSMPI_UINT8_T,
            all.as_mut_ptr() as *mut c_void,
            count,
            ffi::RSMPI_UINT8_T,
            root as c_int,
            comm.as_raw(),
            &mut req,
        )
    };
    started(rc, "MPI_Igather", &op)?;
    if let Err(e) = poll(&mut req, limit, &op) {
        std::mem::forget(send);
        std::mem::forget(all);
        return Err(e);
    }
    Ok(is_root.then_some(all))
}

/// Send one `u64` to `dest` within `limit`.
pub(crate) fn send_u64(comm: &SimpleCommunicator, dest: u32, tag: i32, v: u64, limit: Duration, op: Op) -> Result<()> {
    // SAFETY: `MPI_UINT64_T` is `u64`'s type.
    unsafe { transfer(comm, true, vec![v], ffi::RSMPI_UINT64_T, dest, tag, limit, &op, Patience::Yield) }.map(drop)
}

/// Receive one `u64` from `src` within `limit`.
pub(crate) fn recv_u64(comm: &SimpleCommunicator, src: u32, tag: i32, limit: Duration, op: Op) -> Result<u64> {
    recv_u64_with(comm, src, tag, limit, op, Patience::Yield)
}

/// [`recv_u64`] for a wait that is long by design: sleeps between tests (module doc).
pub(crate) fn recv_u64_idle(comm: &SimpleCommunicator, src: u32, tag: i32, limit: Duration, op: Op) -> Result<u64> {
    recv_u64_with(comm, src, tag, limit, op, Patience::Idle)
}

fn recv_u64_with(
    comm: &SimpleCommunicator,
    src: u32,
    tag: i32,
    limit: Duration,
    op: Op,
    patience: Patience,
) -> Result<u64> {
    // SAFETY: `MPI_UINT64_T` is `u64`'s type.
    let v = unsafe { transfer(comm, false, vec![0u64], ffi::RSMPI_UINT64_T, src, tag, limit, &op, patience)? };
    Ok(v[0])
}

/// Send `bytes` to `dest` within `limit`: its length (one `u64`), then the bytes, both on `tag`.
pub(crate) fn send_bytes(
    comm: &SimpleCommunicator,
    dest: u32,
    tag: i32,
    bytes: &[u8],
    limit: Duration,
    op: Op,
) -> Result<()> {
    send_u64(comm, dest, tag, bytes.len() as u64, limit, op)?;
    // SAFETY: `MPI_UINT8_T` is `u8`'s type.
    unsafe { transfer(comm, true, bytes.to_vec(), ffi::RSMPI_UINT8_T, dest, tag, limit, &op, Patience::Yield) }
        .map(drop)
}

/// Receive what [`send_bytes`] sent from `src` within `limit`; a length
/// over `max_len` is refused before anything is allocated.
pub(crate) fn recv_bytes(
    comm: &SimpleCommunicator,
    src: u32,
    tag: i32,
    max_len: usize,
    limit: Duration,
    op: Op,
) -> Result<Vec<u8>> {
    let len = recv_u64(comm, src, tag, limit, op)?;
    if len > max_len as u64 {
        bail!("the {} ({}) from rank {src} announced {len} bytes, over the limit of {max_len}", op.what, op.phase);
    }
    let buf = vec![0u8; len as usize];
    // SAFETY: `MPI_UINT8_T` is `u8`'s type.
    unsafe { transfer(comm, false, buf, ffi::RSMPI_UINT8_T, src, tag, limit, &op, Patience::Yield) }
}

/// Send `buf` to (`send`) or receive it from `peer` on `tag` (`MPI_Isend`,
/// `MPI_Irecv`) within `limit`; returns the buffer, which is leaked instead
/// when the request does not complete (MPI may still use it).
///
/// # Safety
/// `dtype` is the MPI type of `T`.
#[allow(clippy::too_many_arguments)]
unsafe fn transfer<T>(
    comm: &SimpleCommunicator,
    send: bool,
    mut buf: Vec<T>,
    dtype: ffi::MPI_Datatype,
    peer: u32,
    tag: i32,
    limit: Duration,
    op: &Op,
    patience: Patience,
) -> Result<Vec<T>> {
    let count = c_int::try_from(buf.len())?;
    let ptr = buf.as_mut_ptr() as *mut c_void;
    // SAFETY: reading an immutable handle constant that rsmpi's C shim initialises before MPI_Init returns.
    let mut req: ffi::MPI_Request = unsafe { ffi::RSMPI_REQUEST_NULL };
    // SAFETY: `buf` holds `count` elements of `dtype` (the caller's contract) and outlives the request: it is
    // leaked below if the request does not complete.
    let (rc, call) = unsafe {
        if send {
            (ffi::MPI_Isend(ptr, count, dtype, peer as c_int, tag, comm.as_raw(), &mut req), "MPI_Isend")
        } else {
            (ffi::MPI_Irecv(ptr, count, dtype, peer as c_int, tag, comm.as_raw(), &mut req), "MPI_Irecv")
        }
    };
    started(rc, call, op)?;
    if let Err(e) = poll_with(&mut req, limit, op, patience) {
        std::mem::forget(buf);
        return Err(e);
    }
    Ok(buf)
}

/// Test hook: when `COMMCANARY_TEST_STOP_AT` equals `point` and
/// `COMMCANARY_TEST_STOP_RANK` (default 1) equals `rank`, stop this process
/// with SIGSTOP (docs/METHODS.md, "Test stop points"); else do nothing.
pub fn test_stop_point(point: &str, rank: u32) {
    let Ok(at) = std::env::var("COMMCANARY_TEST_STOP_AT") else { return };
    let who = std::env::var("COMMCANARY_TEST_STOP_RANK").ok().and_then(|v| v.parse::<u32>().ok()).unwrap_or(1);
    if at != point || who != rank {
        return;
    }
    if let Ok(f) = std::env::var("COMMCANARY_TEST_STOP_PID_FILE") {
        let _ = std::fs::write(f, std::process::id().to_string());
    }
    // SAFETY: raise has no memory effects; the process resumes on SIGCONT.
    unsafe {
        libc::raise(libc::SIGSTOP);
    }
}
