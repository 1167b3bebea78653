//! `commcanary capture -o DIR -- APP ARGS`: one rank's capture, started by
//! `mpirun`/`srun` in place of the application.
//!
//! Consumes the application's command line and the capture library; runs the
//! application with three changes to its environment
//! (docs/METHODS.md, "The capture command"). Produces what the library writes (`DIR/rank-NNNNN.mpicap`)
//! and the application's own exit status. Refuses a missing library
//! (`NO_SUCH_INPUT`) and, after the application ended, a process that wrote no
//! capture file of its own (`NOT_MPI`: it never initialized MPI), naming it.
use crate::core::refusal::Code;
use crate::evidence::commtrace::mpi::read_header;
use crate::refuse;
use anyhow::{Context, Result};
use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::atomic::{self, AtomicI32};

/// The library's file name.
pub const LIB_NAME: &str = "libcommcanary_capture.so";
/// The variable naming the library when `--lib` is not given.
pub const LIB_ENV: &str = "COMMCANARY_CAPTURE_LIB";
/// The variable the library reads for the capture folder.
pub const DIR_ENV: &str = "COMMCANARY_CAPTURE_DIR";
/// The variable naming this process to the library (recorded in the header),
/// so that a rank started through a wrapper script is still found as ours.
pub const CAPTURE_PID_ENV: &str = "COMMCANARY_CAPTURE_PID";

/// What `capture` runs.
#[derive(Clone, Debug)]
pub struct CaptureOptions {
    /// Capture folder.
    pub dir: PathBuf,
    /// The library, if named.
    pub lib: Option<PathBuf>,
    /// The application and its arguments.
    pub app: Vec<OsString>,
}

/// The library to preload: named, from the environment, or next to this executable.
pub fn library(lib: Option<&Path>) -> Result<PathBuf> {
    let (p, how) = match (lib, std::env::var_os(LIB_ENV)) {
        (Some(p), _) => (p.to_path_buf(), "--lib"),
        (None, Some(e)) => (PathBuf::from(e), LIB_ENV),
        (None, None) => {
            let exe = std::env::current_exe().context("locating this executable")?;
            (
                exe.parent().map(|d| d.join(LIB_NAME)).unwrap_or_else(|| PathBuf::from(LIB_NAME)),
                "next to this executable",
            )
        }
    };
    if !p.is_file() {
        refuse!(
            Code::NoSuchInput,
            "capture library {} ({how}) does not exist: `cargo build` builds it next to the commcanary binary, or name \
                it with --lib",
            p.display()
        );
    }
    p.canonicalize().with_context(|| p.display().to_string())
}

/// Run the application under the capture library; its exit status is returned.
pub fn run(o: &CaptureOptions) -> Result<ExitCode> {
    let lib = library(o.lib.as_deref())?;
    let Some((prog, args)) = o.app.split_first() else {
        refuse!(Code::BadArgument, "no application given: `commcanary capture -o DIR -- APP ARGS`")
    };
    std::fs::create_dir_all(&o.dir).with_context(|| format!("creating {}", o.dir.display()))?;
    let dir = o.dir.canonicalize().with_context(|| o.dir.display().to_string())?;
    let preload = match std::env::var_os("LD_PRELOAD").filter(|v| !v.is_empty()) {
        Some(mut v) => {
            v.push(":");
            v.push(lib.as_os_str());
            v
        }
        None => lib.clone().into_os_string(),
    };
    let mut cmd = std::process::Command::new(prog);
    cmd.args(args).env("LD_PRELOAD", &preload).env(DIR_ENV, &dir).env(CAPTURE_PID_ENV, std::process::id().to_string());
    {
        use std::os::unix::process::CommandExt;
        // SAFETY: the closure runs in the forked child before exec and only
        // calls prctl, which is async-signal-safe: the application gets
        // SIGTERM if this process dies (a launcher's SIGKILL), never outlives it.
        unsafe {
            cmd.pre_exec(|| {
                libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGTERM);
                Ok(())
            })
        };
    }
    let mut child = cmd.spawn().with_context(|| format!("starting {}", Path::new(prog).display()))?;
    let pid = child.id();
    forward_termination(pid);
    let status = child.wait().with_context(|| format!("waiting for {}", Path::new(prog).display()))?;
    let wrote = own_capture(&dir, pid, std::process::id());
    let code = match status.code() {
        Some(c) => c,
        None => {
            use std::os::unix::process::ExitStatusExt;
            128 + status.signal().unwrap_or(0)
        }
    };
    match wrote {
        Some(f) => {
            if code != 0 {
                eprintln!(
                    "capture: {} ended with status {code}; {} keeps what it recorded",
                    Path::new(prog).display(),
                    f.display()
                );
            }
        }
        None if code == 0 => refuse!(
            Code::NotMpi,
            "{} (pid {pid}) ended without initializing MPI: not an MPI program, or not one linked against the MPI \
                library the capture wraps; nothing was captured in {}",
            Path::new(prog).display(),
            dir.display()
        ),
        None => eprintln!(
            "capture: {} ended with status {code} before initializing MPI; nothing was captured",
            Path::new(prog).display()
        ),
    }
    Ok(ExitCode::from(u8::try_from(code).unwrap_or(1)))
}

/// The application's pid, for [`forward`].
static CHILD: AtomicI32 = AtomicI32::new(0);

/// SIGTERM, SIGINT and SIGHUP sent to this process (a launcher ending the
/// job) go to the application, whose capture library then keeps its last
/// block; this process goes on waiting for it and reports its status.
fn forward_termination(pid: u32) {
    CHILD.store(pid as i32, atomic::Ordering::SeqCst);
    for sig in [libc::SIGTERM, libc::SIGINT, libc::SIGHUP] {
        // SAFETY: installing a handler that only calls kill(2), which is async-signal-safe.
        unsafe {
            let mut act: libc::sigaction = std::mem::zeroed();
            act.sa_sigaction = forward as *const () as usize;
            libc::sigemptyset(&mut act.sa_mask);
            libc::sigaction(sig, &act, std::ptr::null_mut());
        }
    }
}

extern "C" fn forward(sig: libc::c_int) {
    let pid = CHILD.load(atomic::Ordering::SeqCst);
    if pid > 0 {
        // SAFETY: kill(2) on the application's pid, async-signal-safe.
        unsafe { libc::kill(pid, sig) };
    }
}

/// The capture file in `dir` written by the application `pid` or by a
/// process under this `capture` (`me`: a wrapper script's child), if any.
fn own_capture(dir: &Path, pid: u32, me: u32) -> Option<PathBuf> {
    std::fs::read_dir(dir)
        .ok()?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|x| x == "mpicap"))
        .find(|p| read_header(p).is_ok_and(|h| h.pid == pid || h.capture_pid == Some(me)))
}
