//! How a rank's fatal error reaches the user: one whole line on the stderr
//! that ranks and launcher share, printed once for an error every rank met
//! before MPI (the lead first), tagged with the rank after; once MPI is up,
//! [`end_job_on_error`] prints and aborts the job. Also the launcher's rank and
//! world size, read from its environment before MPI starts.
use anyhow::Result;
use mpi::topology::{Communicator, SimpleCommunicator};

/// World rank from the launcher's environment, before MPI is initialised
/// (used only to print an argument error once rather than once per rank).
fn launcher_rank() -> Option<u32> {
    ["OMPI_COMM_WORLD_RANK", "PMI_RANK", "PMIX_RANK", "SLURM_PROCID"]
        .iter()
        .find_map(|k| std::env::var(k).ok()?.parse().ok())
}

/// Write one whole line to stderr in a single `write`: ranks and the launcher
/// share the pipe, and a line written in pieces gets another process's output
/// spliced into it (seen: mpirun's banner inside a rank's error line).
pub(crate) fn write_line_stderr(line: &str) {
    use std::io::Write;
    let _ = std::io::stderr().lock().write_all(format!("{line}\n").as_bytes());
}

/// World size from the launcher's environment, before MPI is initialised.
pub(super) fn launcher_world_size() -> Option<u32> {
    ["OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "PMIX_SIZE", "SLURM_NTASKS"]
        .iter()
        .find_map(|k| std::env::var(k).ok()?.parse().ok())
}

/// Print the error that ends this process: at once on the lead process and
/// on any rank once MPI has started (tagged with the rank); before MPI, another
/// rank waits first ([`let_the_lead_print_first`]) so that the lead prints it
/// once (docs/METHODS.md, "Fatal errors on every rank").
pub fn print_fatal_error(message: &str) {
    match launcher_rank() {
        None | Some(0) => write_line_stderr(&format!("commcanary: error: {message}")),
        Some(rank) => {
            if !mpi::environment::is_initialized() {
                let_the_lead_print_first();
            }
            write_line_stderr(&format!("commcanary: error (rank {rank}): {message}"));
        }
    }
}

/// How long a non-lead rank waits before printing its fatal error.
const ERROR_GRACE: std::time::Duration = std::time::Duration::from_secs(2);

/// On an error every rank met before MPI started (a bad argument): a rank
/// other than the lead waits `ERROR_GRACE` ([`print_fatal_error`] says why);
/// the lead returns at once.
pub fn let_the_lead_print_first() {
    if !is_lead_process() {
        std::thread::sleep(ERROR_GRACE);
    }
}

/// Whether this process should print job-wide messages.
pub fn is_lead_process() -> bool {
    launcher_rank().unwrap_or(0) == 0
}

/// Run `body` with MPI up: an error is printed by the rank that met it, as
/// `PREFIX rank N: error: …`, and ends the job (MPI_Abort, exit 2).
/// Returning it instead would finalize MPI while a peer may sit in a
/// collective, and the message might never appear.
pub(crate) fn end_job_on_error(
    world: &SimpleCommunicator,
    prefix: &str,
    body: impl FnOnce() -> Result<()>,
) -> Result<()> {
    if let Err(e) = body() {
        write_line_stderr(&format!("{prefix} rank {}: error: {e:#}", world.rank()));
        world.abort(2);
    }
    Ok(())
}
