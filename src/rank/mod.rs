//! `commcanary rank`: the per-rank SPMD program (docs/ARCHITECTURE.md §3).
//!
//! Consumes the command line and the MPI world. Produces, per rank, one shard
//! in `OUT/<run-id>/` and, on rank 0, `run.json` listing every shard's digest.
//! Order: validate arguments (before MPI, so a bad flag is one clear line),
//! MPI init, identity, backend init (timed as cold start), clock window 1,
//! phases, clock window 2, shard, gather digests, run record. Any rank's error
//! aborts the whole job (`MPI_Abort`) after printing which rank failed and why;
//! files already written stay as they are. Every MPI wait of the program is
//! bounded by `--collective-timeout-s` ([`crate::backend::mpi_deadline`]), so a stopped
//! or dead rank fails the job with `refused[COLLECTIVE_TIMEOUT]` instead of
//! blocking the others.
pub mod bench;
mod calibration;
pub mod capture;
pub mod doctor;
mod fatal;
mod finish;
pub mod phases;
mod plan;
mod start;
pub mod sweep;
mod tuning;
use crate::core::clock::ClockSync;
use crate::core::workload::FillResidual;
use crate::evidence::shard::Dtype;
pub(crate) use fatal::{end_job_on_error, write_line_stderr};
pub use fatal::{is_lead_process, let_the_lead_print_first, print_fatal_error};
pub(crate) use plan::{check_before_launch, check_ranges};
pub use start::run;
use std::path::PathBuf;
pub(crate) use tuning::request_nccl_tuning_log;

/// Clock calibration mode.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum ClockMode {
    /// Ping-pong with rank 0 before and after the phases; a rank under rank
    /// 0's kernel (same boot id) whose every sample agrees with one clock
    /// gets offset, drift and bound exactly 0.
    Pingpong,
    /// Ping-pong, and the estimate is kept even under rank 0's kernel (to
    /// see the method's own bound on one node).
    PingpongOnly,
    /// No calibration: arrival skew is reported as unknown.
    None,
}

/// Which ranks calibrate against which (`--clock-sync`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum ClockSyncChoice {
    /// Hierarchical where the ranks record more than one host name, flat on one.
    Auto,
    /// Every rank against rank 0, one rank at a time: cost grows with ranks.
    Flat,
    /// Node leaders against rank 0, then every other rank against its
    /// leader, the nodes side by side: cost grows with nodes.
    Hierarchical,
}

impl ClockSyncChoice {
    /// The topology used for ranks recording `hosts` distinct host names.
    pub fn resolve(self, hosts: usize) -> ClockSync {
        match self {
            ClockSyncChoice::Flat => ClockSync::Flat,
            ClockSyncChoice::Hierarchical => ClockSync::Hierarchical,
            ClockSyncChoice::Auto if hosts > 1 => ClockSync::Hierarchical,
            ClockSyncChoice::Auto => ClockSync::Flat,
        }
    }
}

/// What one rank runs: `commcanary rank`'s options as plain values (the
/// command-line layer converts its clap arguments into this; see the
/// `rank --help` text for each option's meaning and default).
#[derive(Clone, Debug)]
pub struct RankOptions {
    /// Backend: cpu, cuda, or auto (cuda when usable, else cpu; the choice is printed).
    pub backend: crate::backend::BackendChoice,
    /// Phases in order: isolated,blocking,async,replay,fill,overlap and the ablations
    /// async-wait-immediate,host-delay,membound-fill; `all` = the six main phases.
    pub phases: String,
    /// Timed tokens per workload phase.
    pub tokens: u32,
    /// Warm-up tokens before the timed ones (recorded, flagged).
    pub warmup_tokens: u32,
    /// Workload shape: a model preset (llama3-8b, llama3-70b, tiny) run as
    /// tensor-parallel decode over the ranks, or `synthetic` (one square GEMM
    /// and one all-reduce per layer, sizes from --sizes). Default: llama3-8b
    /// on cuda, tiny on cpu.
    pub model: Option<String>,
    /// Custom model shape H,F,LAYERS (multi-head attention) or H,F,LAYERS,KV_DIM
    /// (grouped-query attention: key/value heads x head dimension).
    pub model_dims: Option<String>,
    /// Model shapes: sequences decoded together (the GEMMs' m; all-reduces of batch x hidden).
    pub batch: u32,
    /// Model shapes: make every step a prefill of this many prompt tokens per
    /// sequence (GEMMs' m and all-reduces of batch x tokens x hidden) instead of a decode step.
    pub prefill_tokens: Option<u32>,
    /// Element type of the all-reduces (default bf16 for model shapes, f32 for synthetic).
    pub dtype: Option<Dtype>,
    /// Layers per token (default: the model's own; 32 for synthetic).
    pub layers: Option<u32>,
    /// Synthetic only: message sizes, cycled per collective (default 64KiB,128KiB,256KiB).
    pub sizes: Option<String>,
    /// Unit GEMM shape N or MxNxK: the synthetic layer's product and the fill
    /// quantum (default 64 on cpu, 1024 on cuda).
    pub gemm: Option<String>,
    /// Isolated phase: smallest size of a sweep (as nccl-tests -b); with
    /// --max-bytes, the isolated phase sweeps instead of using --sizes.
    pub min_bytes: Option<String>,
    /// Isolated phase: largest size of the sweep (as nccl-tests -e).
    pub max_bytes: Option<String>,
    /// Isolated phase: multiply the size by this factor at each step (as nccl-tests -f).
    pub step_factor: u64,
    /// Timed iterations per size in the isolated phase (as nccl-tests -n).
    pub iters: u32,
    /// Warm-up iterations per size in the isolated phase (as nccl-tests -w).
    pub warmup_iters: u32,
    /// Validate the all-reduce result on this many collectives per phase (as nccl-tests -c).
    pub check: u32,
    /// The collective the isolated phase sweeps (as nccl-tests' `*_perf` programs).
    pub collective: crate::core::workload::SweepKind,
    /// The isolated sweep's reduction (as nccl-tests -o); default sum.
    pub op: Option<crate::core::workload::ReduceOp>,
    /// Write the isolated sweep's table as JSON to this file (as nccl-tests -J), from rank 0.
    pub json: Option<PathBuf>,
    /// Fill residual handling: carry rounding errors to the next gap, or drop them.
    pub fill_residual: FillResidual,
    /// Bytes copied by one memory-bound fill unit.
    pub membound_bytes: String,
    /// Joined trace file (from `join --events-out`) to replay instead of this run's blocking phase.
    pub trace: Option<PathBuf>,
    /// With an imported `--trace`: run only its all-reduces, leaving out (and
    /// counting) the other kinds. Without it every kind runs on the trace's
    /// groups (a backend with a trace executor: cpu).
    pub trace_allreduce_only: bool,
    /// Negative control: rank=R,every=K,us=D delays rank R before every K-th collective.
    pub inject_delay: Option<String>,
    /// Negative control: every group-0 all-reduce runs N times back to back, inside one recorded collective.
    pub inject_repeat: Option<u32>,
    /// Test fixture: rank=R,offset_us=X,drift_ppm=Y distorts rank R's clock reads (repeatable).
    pub inject_clock: Vec<String>,
    /// Clock calibration against rank 0.
    pub clock: ClockMode,
    /// Which ranks calibrate against which: flat, hierarchical, or auto.
    pub clock_sync: ClockSyncChoice,
    /// Ping-pong exchanges per calibration window and rank.
    pub clock_samples: u32,
    /// NCCL library for the cuda backend: an explicit path, or a bare name
    /// resolved by the system loader (the file actually mapped is recorded either way).
    pub nccl_lib: PathBuf,
    /// Seconds without completion after which a collective is declared hung and
    /// the job fails with a message (cuda: the NCCL communicator is aborted;
    /// cpu: the wait on MPI_Iallreduce gives up). 0 < value <= 86400.
    pub collective_timeout_s: f64,
    /// Cuda backend: use this GPU ordinal instead of local_rank % device_count.
    pub gpu: Option<u32>,
    /// Cuda backend: capture each size's timed isolated iterations into one
    /// CUDA graph with a timestamp node between collectives, and launch it
    /// once (as serving engines replay decode steps): no host work per
    /// collective; per-collective host times are then the launch's. Model
    /// shapes: blocking and async capture one token's GEMMs and all-reduces
    /// into a CUDA graph and launch it per token; only token boundaries are timed.
    pub graph: bool,
    /// Cuda backend: the stream of the blocking phase's collectives.
    pub comm_stream: crate::core::workload::CommStream,
    /// Cuda backend: record every kernel through CUPTI (kernel timelines,
    /// `overlap` from kernels). Off by default: its per-launch cost would be
    /// mixed into every timing (`bench-overhead --cupti` measures it).
    pub cupti: bool,
    /// Capture NCCL's per-collective tuner choices (cuda backend): sets
    /// NCCL_DEBUG=INFO and NCCL_DEBUG_SUBSYS=TUNING with a per-process NCCL_DEBUG_FILE,
    /// keeps the log beside the shard and attaches the choices where counts and sizes match.
    pub nccl_tuning: bool,
    /// Output directory; the run goes to OUT/<run-id>/.
    pub out: PathBuf,
    /// Run id (default: UTC time plus random hex, chosen by rank 0).
    pub run_id: Option<String>,
    /// Quiet: no per-phase progress on stderr.
    pub quiet: bool,
    /// Negative controls: wrong-sum:R corrupts rank R's results (--check must fail);
    /// hang:R:SEQ stops rank R before collective SEQ (--collective-timeout must fire).
    pub fault: Option<String>,
}
