//! `commcanary validate`: may this node rejoin the partition? Device health,
//! topology, a collective sweep and a model-shaped workload, each compared
//! with a reference recorded once on a node the site trusts.
//!
//! Consumes the command line, an optional reference directory and site TOML,
//! under `mpirun`/`srun` with one rank per GPU of one node (or on the CPU
//! backend). Produces the evidence directory ([`reference`](mod@reference)),
//! the table (or `--json`) and the exit code: 0 pass, 1 fail, 2 inconclusive,
//! 3 could not run. Refuses: bad arguments (before MPI), a job on more than
//! one node or of fewer than 2 ranks, a reference that does not describe this
//! node ([`reference::contradictions`]).
//!
//! Order and checks: docs/METHODS.md, "Validate run order and checks".
pub mod health;
pub mod load;
mod plan;
pub mod reference;
mod report;
mod run;
pub mod sweep;
pub mod topology;
pub mod verdict;

pub use report::{render, CheckRow, SizeRow, ValidationReport, REPORT_FORMAT_VERSION};
pub use run::command;

use crate::backend::BackendChoice;
use std::path::PathBuf;

/// Exit code of a validation that could not run (argument errors, refusals, failures).
pub const EXIT_COULD_NOT_RUN: i32 = 3;

/// `commcanary validate`.
#[derive(clap::Args, Debug)]
#[command(group(clap::ArgGroup::new("mode").required(true).args(["record_reference", "reference"])))]
pub struct ValidateArgs {
    /// Backend: cpu, cuda, or auto (cuda when usable, else cpu).
    #[arg(long, value_enum, default_value = "auto")]
    pub backend: BackendChoice,
    /// Record this node as the reference into --out (a node the site trusts).
    #[arg(long)]
    pub record_reference: bool,
    /// Compare this node with the reference directory REF (its settings are reused).
    #[arg(long)]
    pub reference: Option<PathBuf>,
    /// Site TOML (keys, units and refusals: docs/VALIDATION.md): busbw_min_ratio (0.95, at most 1),
    /// token_latency_max_ratio (1.05, at least 1), coverage (0.95), nvlink_crc_errors_max (absent: not judged), allow
    /// ([]); any other key is refused.
    #[arg(long, requires = "reference")]
    pub site: Option<PathBuf>,
    /// Evidence directory to create (never overwritten); default validate-HOST-UNIXMS.
    #[arg(long, short = 'o')]
    pub out: Option<PathBuf>,
    /// Rounds (default 6); a comparison pairs as many rounds as both sides have.
    #[arg(long, default_value_t = 6, value_parser = clap::value_parser!(u32).range(2..=1000))]
    pub rounds: u32,
    /// Reference only: smallest sweep size (default 8).
    #[arg(long, short = 'b')]
    pub min_bytes: Option<String>,
    /// Reference only: largest sweep size (default 1GiB on cuda, 16MiB on cpu).
    #[arg(long, short = 'e')]
    pub max_bytes: Option<String>,
    /// Reference only: sweep step factor (default 4).
    #[arg(long, short = 'f')]
    pub step_factor: Option<u64>,
    /// Reference only: timed iterations per size (default 20).
    #[arg(long, short = 'n')]
    pub iters: Option<u32>,
    /// Reference only: warm-up iterations per size (default 5).
    #[arg(long, short = 'w')]
    pub warmup_iters: Option<u32>,
    /// Reference only: workload model preset (default llama3-8b on cuda, tiny on cpu).
    #[arg(long)]
    pub model: Option<String>,
    /// Reference only: sequences per decode step (default 1).
    #[arg(long)]
    pub batch: Option<u32>,
    /// Reference only: timed tokens per round (default 32).
    #[arg(long)]
    pub tokens: Option<u32>,
    /// Reference only: warm-up tokens per round (default 4).
    #[arg(long)]
    pub warmup_tokens: Option<u32>,
    /// Seed of the per-round order of the measurements.
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    /// NCCL library for the cuda backend (as `rank --nccl-lib`).
    #[arg(long, default_value = "libnccl.so.2")]
    pub nccl_lib: PathBuf,
    /// Seconds without completion after which a collective is declared hung (0 < value <= 86400).
    #[arg(long, default_value_t = crate::core::limits::DEFAULT_COLLECTIVE_TIMEOUT_S)]
    pub collective_timeout_s: f64,
    /// Test and control knob: rank=R,every=K,us=D delays rank R before every
    /// K-th collective of the workload (not the sweep); recorded in the manifest.
    #[arg(long)]
    pub inject_delay: Option<String>,
    /// Print the report as JSON (format `validate-report`).
    #[arg(long)]
    pub json: bool,
    /// Also write the verdicts in Prometheus' text format to FILE, replaced atomically (for a
    /// node exporter's textfile collector): per check its verdict and ratio, and the overall verdict.
    #[arg(long, value_name = "FILE")]
    pub prometheus: Option<PathBuf>,
    /// No progress lines on stderr.
    #[arg(long, short = 'q')]
    pub quiet: bool,
}
