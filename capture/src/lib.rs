//! `commcanary-capture`: the LD_PRELOAD library of `commcanary capture`.
//!
//! Consumes an MPI application's calls, unchanged: it defines the MPI
//! functions (C `MPI_Allreduce`, Fortran `mpi_allreduce_` and its spellings,
//! and Open MPI's `ompi_allreduce_f` that `use mpi_f08` reaches), records
//! each call and forwards it to the library's profiling entry point
//! (`PMPI_*` for C; for Fortran the library's own Fortran routine, which
//! calls `PMPI_*`, so a Fortran call is recorded once). Produces, when
//! `COMMCANARY_CAPTURE_DIR` names a folder, one file per rank
//! (`rank-NNNNN.mpicap`, [`format`]) streamed in digested blocks, with a
//! trailer at `MPI_Finalize`; without it the library only forwards.
//! Refuses (prints, and records nothing) a rank file that already exists:
//! a capture never overwrites one.
// The entry points have MPI's signatures and contracts (the MPI standard is their safety doc).
#![allow(clippy::missing_safety_doc, clippy::too_many_arguments)]

pub mod format;
mod fortran;
mod mpi_c;
mod state;

use mpi_sys as ffi;
use std::os::raw::c_int;
use std::sync::atomic::{AtomicUsize, Ordering};

/// The environment variable naming the capture folder.
pub const DIR_ENV: &str = "COMMCANARY_CAPTURE_DIR";
/// The environment variable `commcanary capture` sets to its own pid.
pub const CAPTURE_PID_ENV: &str = "COMMCANARY_CAPTURE_PID";

/// After `PMPI_Init*` returned: agree on a run id (rank 0's, broadcast on a
/// private duplicate of the world) and open this rank's file.
pub(crate) fn start() {
    let Some(dir) = std::env::var_os(DIR_ENV) else { return };
    let Ok(g) = state::STATE.lock() else { return };
    if g.is_some() {
        return;
    }
    drop(g);
    let (mut rank, mut size): (c_int, c_int) = (0, 0);
    let mut private = ffi::MPI_Comm(std::ptr::null_mut());
    // SAFETY: MPI is initialized (called after PMPI_Init returned); outputs are valid locals.
    unsafe {
        ffi::PMPI_Comm_rank(ffi::RSMPI_COMM_WORLD, &mut rank);
        ffi::PMPI_Comm_size(ffi::RSMPI_COMM_WORLD, &mut size);
        ffi::PMPI_Comm_dup(ffi::RSMPI_COMM_WORLD, &mut private);
    }
    let realtime_ns =
        std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.as_nanos() as u64).unwrap_or(0);
    let host = hostname();
    let mut id = [0u8; 64];
    let own = format!("{realtime_ns:x}-{}-{}", std::process::id(), host);
    let n = own.len().min(64);
    id[..n].copy_from_slice(&own.as_bytes()[..n]);
    // SAFETY: every rank passes a 64-byte buffer; the private communicator was made above.
    unsafe { ffi::PMPI_Bcast(id.as_mut_ptr().cast(), 64, ffi::RSMPI_UINT8_T, 0, private) };
    PRIVATE.store(private.0 as usize, Ordering::SeqCst);
    let run_id = String::from_utf8_lossy(&id).trim_end_matches('\0').to_string();
    let argv: Vec<String> = std::fs::read("/proc/self/cmdline")
        .map(|b| {
            b.split(|&c| c == 0).filter(|s| !s.is_empty()).map(|s| String::from_utf8_lossy(s).into_owned()).collect()
        })
        .unwrap_or_default();
    let header = serde_json::json!({
        "format_version": format::FORMAT_VERSION,
        "tool": concat!("commcanary-capture ", env!("CARGO_PKG_VERSION")),
        "run_id": run_id,
        "world_rank": rank,
        "world_size": size,
        "host": host,
        "pid": std::process::id(),
        // the `commcanary capture` process this one descends from (through any wrapper script)
        "capture_pid": std::env::var(CAPTURE_PID_ENV).ok().and_then(|v| v.parse::<u32>().ok()),
        "argv": argv,
        "clock": "CLOCK_MONOTONIC",
        "init_monotonic_ns": state::now_ns(),
        "init_realtime_ns": realtime_ns,
        "kernel_clock": kernel_clock(),
        "block_bytes": format::BLOCK_BYTES,
        "calls": format::CALLS,
    });
    let path = std::path::Path::new(&dir).join(format!("rank-{rank:05}.mpicap"));
    match state::Capture::create(&path, header.to_string().as_bytes()) {
        Ok(c) => {
            if let Ok(mut g) = state::STATE.lock() {
                *g = Some(c);
            }
            // SAFETY: registering a plain extern "C" function with no arguments.
            unsafe { libc::atexit(flush_at_exit) };
            flush_on_termination();
        }
        Err(e) => eprintln!(
            "commcanary-capture: refused: cannot create {} ({e}); rank {rank} runs uncaptured",
            path.display()
        ),
    }
    // every rank takes part (a rank without a file too: the others wait for it)
    let samples = pingpong(private, rank, size);
    state::with(|c| c.clock_window(0, &samples));
}

/// The capture's own duplicate of the world (0: none), for the clock windows.
static PRIVATE: AtomicUsize = AtomicUsize::new(0);

/// One clock window: every rank but 0, in turn, exchanges
/// [`format::CLOCK_SAMPLES`] ping-pongs with rank 0 on the private
/// communicator; `import mpi` fits each rank's clock against rank 0's from
/// the two windows (the way `rank` calibrates). Returns this rank's samples.
fn pingpong(private: ffi::MPI_Comm, rank: c_int, size: c_int) -> Vec<[u64; 3]> {
    let mut out = Vec::new();
    for r in 1..size {
        for _ in 0..format::CLOCK_SAMPLES {
            let mut t: u64 = 0;
            // SAFETY: one u64 each way between rank 0 and rank r on the private
            // communicator (tags 1 and 2); statuses ignored.
            unsafe {
                if rank == 0 {
                    ffi::PMPI_Recv(
                        (&mut t as *mut u64).cast(),
                        1,
                        ffi::RSMPI_UINT64_T,
                        r,
                        1,
                        private,
                        ffi::RSMPI_STATUS_IGNORE,
                    );
                    t = state::now_ns();
                    ffi::PMPI_Send((&t as *const u64).cast(), 1, ffi::RSMPI_UINT64_T, r, 2, private);
                } else if rank == r {
                    let t1 = state::now_ns();
                    ffi::PMPI_Send((&t1 as *const u64).cast(), 1, ffi::RSMPI_UINT64_T, 0, 1, private);
                    ffi::PMPI_Recv(
                        (&mut t as *mut u64).cast(),
                        1,
                        ffi::RSMPI_UINT64_T,
                        0,
                        2,
                        private,
                        ffi::RSMPI_STATUS_IGNORE,
                    );
                    out.push([t1, t, state::now_ns()]);
                }
            }
        }
    }
    // SAFETY: every rank of the private communicator calls it.
    unsafe { ffi::PMPI_Barrier(private) };
    out
}

/// Which CLOCK_MONOTONIC this process reads: boot id and time namespace.
fn kernel_clock() -> Option<String> {
    let boot = std::fs::read_to_string("/proc/sys/kernel/random/boot_id").ok()?.trim().to_string();
    let ns = std::fs::read_link("/proc/self/ns/time")
        .map(|l| l.to_string_lossy().into_owned())
        .unwrap_or_else(|_| "none".into());
    Some(format!("{boot} {ns}"))
}

/// An exit without `MPI_Finalize` keeps what was recorded (no trailer: incomplete).
extern "C" fn flush_at_exit() {
    state::with(|c| c.flush_block());
}

/// A rank the launcher terminates (SIGTERM, SIGINT, SIGHUP, as `mpirun`
/// does when another rank aborts) keeps its last block: for each of these
/// signals whose disposition is still the default, a handler writes the
/// block being filled (if no thread holds the capture at that instant),
/// then restores the default and raises the signal again.
fn flush_on_termination() {
    for sig in [libc::SIGTERM, libc::SIGINT, libc::SIGHUP] {
        // SAFETY: sigaction with valid local structs; the handler is installed
        // only where the application left the default disposition.
        unsafe {
            let mut old: libc::sigaction = std::mem::zeroed();
            if libc::sigaction(sig, std::ptr::null(), &mut old) != 0 || old.sa_sigaction != libc::SIG_DFL {
                continue;
            }
            let mut act: libc::sigaction = std::mem::zeroed();
            act.sa_sigaction = on_signal as *const () as usize;
            libc::sigemptyset(&mut act.sa_mask);
            libc::sigaction(sig, &act, std::ptr::null_mut());
        }
    }
}

/// The handler of [`flush_on_termination`]: only a non-blocking lock, no allocation.
extern "C" fn on_signal(sig: c_int) {
    state::IN_SIGNAL.store(true, Ordering::Relaxed);
    if let Ok(mut g) = state::STATE.try_lock() {
        if let Some(c) = g.as_mut() {
            c.flush_block();
        }
    }
    // SAFETY: restoring the default disposition and re-raising are async-signal-safe.
    unsafe {
        libc::signal(sig, libc::SIG_DFL);
        libc::raise(sig);
    }
}

/// Before `PMPI_Finalize`: the last block and the trailer.
pub(crate) fn finish() {
    let p = PRIVATE.swap(0, Ordering::SeqCst);
    if p == 0 {
        return; // not capturing, or finished already
    }
    let mut private = ffi::MPI_Comm(p as *mut _);
    let (mut rank, mut size): (c_int, c_int) = (0, 0);
    // SAFETY: MPI is still initialized (called before PMPI_Finalize); outputs are locals.
    unsafe {
        ffi::PMPI_Comm_rank(private, &mut rank);
        ffi::PMPI_Comm_size(private, &mut size);
    }
    let samples = pingpong(private, rank, size);
    // SAFETY: the private communicator is freed once, here.
    unsafe { ffi::PMPI_Comm_free(&mut private) };
    if let Ok(mut g) = state::STATE.lock() {
        if let Some(mut c) = g.take() {
            c.clock_window(1, &samples);
            c.finish();
        }
    }
}

/// Before `PMPI_Abort`: the abort record and the last block, no trailer.
pub(crate) fn abort(code: c_int) {
    state::with(|c| c.abort(code));
}

fn hostname() -> String {
    let mut buf = [0u8; 256];
    // SAFETY: gethostname writes at most buf.len() bytes into the local buffer.
    let r = unsafe { libc::gethostname(buf.as_mut_ptr().cast(), buf.len()) };
    if r != 0 {
        return String::from("unknown");
    }
    let end = buf.iter().position(|&c| c == 0).unwrap_or(buf.len());
    String::from_utf8_lossy(&buf[..end]).into_owned()
}
