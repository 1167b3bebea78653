//! `commcanary rank`: the per-rank SPMD program, its steps in order: docs/ARCHITECTURE.md §3.
//!
//! Consumes the command line and the MPI world. Produces, per rank, one shard
//! in `OUT/<run-id>/` and, on rank 0, `run.json` listing every shard's digest.
//! Any rank's error aborts the whole job (`MPI_Abort`). Every MPI wait of the program is
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
pub mod replay;
mod start;
pub mod sweep;
mod tuning;
use crate::backend::BackendChoice;
use crate::core::clock::ClockSync;
use crate::core::workload::{CommStream, FillResidual, ReduceOp, SweepKind};
use crate::evidence::shard;
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

/// What one rank runs: `commcanary rank`'s options (`rank --help` prints each
/// option's meaning and default). A later value of an option overrides an
/// earlier one, so a campaign configuration's own arguments override the
/// campaign-wide ones.
#[derive(clap::Args, Clone, Debug)]
#[command(args_override_self = true)]
pub struct RankOptions {
    /// Backend: cpu, cuda, or auto (cuda when usable, else cpu; the choice is printed).
    #[arg(long, value_enum, default_value = "auto")]
    pub backend: BackendChoice,
    /// Phases in order: isolated,blocking,async,replay,fill,overlap and the ablations
    /// async-wait-immediate,host-delay,membound-fill; `all` = the six main phases.
    #[arg(long, default_value = "all")]
    pub phases: String,
    /// Timed tokens per workload phase.
    #[arg(long, default_value_t = 256)]
    pub tokens: u32,
    /// Warm-up tokens before the timed ones (recorded, flagged).
    #[arg(long, default_value_t = 2)]
    pub warmup_tokens: u32,
    /// Workload shape: a model preset (llama3-8b, llama3-70b, tiny) run as
    /// tensor-parallel decode over the ranks, or `synthetic` (one square GEMM
    /// and one all-reduce per layer, sizes from --sizes). Default: llama3-8b
    /// on cuda, tiny on cpu.
    #[arg(long, conflicts_with = "model_dims")]
    pub model: Option<String>,
    /// Custom model shape H,F,LAYERS (multi-head attention) or H,F,LAYERS,KV_DIM
    /// (grouped-query attention: key/value heads x head dimension).
    #[arg(long)]
    pub model_dims: Option<String>,
    /// Model shapes: sequences decoded together (the GEMMs' m; all-reduces of batch x hidden).
    #[arg(long, default_value_t = 1)]
    pub batch: u32,
    /// Model shapes: make every step a prefill of this many prompt tokens per
    /// sequence (GEMMs' m and all-reduces of batch x tokens x hidden) instead of a decode step.
    #[arg(long)]
    pub prefill_tokens: Option<u32>,
    /// Element type of the all-reduces and of the isolated sweep (as nccl-tests -d; default bf16 for model shapes, f32
    /// for synthetic).
    #[arg(long, short = 'd', value_enum)]
    pub dtype: Option<shard::Dtype>,
    /// Layers per token (default: the model's own; 32 for synthetic).
    #[arg(long)]
    pub layers: Option<u32>,
    /// Synthetic only: message sizes, cycled per collective (default 64KiB,128KiB,256KiB).
    #[arg(long)]
    pub sizes: Option<String>,
    /// Unit GEMM shape N or MxNxK: the synthetic layer's product and the fill
    /// quantum (default 64 on cpu, 1024 on cuda).
    #[arg(long)]
    pub gemm: Option<String>,
    /// Isolated phase: smallest size of a sweep (as nccl-tests -b); with
    /// --max-bytes, the isolated phase sweeps instead of using --sizes.
    #[arg(long, short = 'b', requires = "max_bytes")]
    pub min_bytes: Option<String>,
    /// Isolated phase: largest size of the sweep (as nccl-tests -e).
    #[arg(long, short = 'e', requires = "min_bytes")]
    pub max_bytes: Option<String>,
    /// Isolated phase: multiply the size by this factor at each step (as nccl-tests -f).
    #[arg(long, short = 'f', default_value_t = 2)]
    pub step_factor: u64,
    /// Timed iterations per size in the isolated phase (as nccl-tests -n).
    #[arg(long, short = 'n', default_value_t = 50)]
    pub iters: u32,
    /// Warm-up iterations per size in the isolated phase (as nccl-tests -w).
    #[arg(long, short = 'w', default_value_t = 5)]
    pub warmup_iters: u32,
    /// Validate the all-reduce result on this many collectives per phase; in the isolated phase, of every size (as
    /// nccl-tests -c).
    #[arg(long, short = 'c', default_value_t = 1)]
    pub check: u32,
    /// The collective the isolated phase sweeps, as nccl-tests' *_perf programs: every kind
    /// with a bus-bandwidth factor (rooted kinds from rank 0).
    #[arg(long, value_enum, default_value = "all_reduce")]
    pub collective: SweepKind,
    /// The isolated sweep's reduction, for all_reduce, reduce_scatter and reduce (as nccl-tests -o;
    /// -o is --out here): sum, prod, min, max, or avg (cuda only: MPI has no average). Default sum.
    #[arg(long, value_enum)]
    pub op: Option<ReduceOp>,
    /// Write the isolated sweep's table as JSON to FILE (as nccl-tests -J; schema `rank-sweep`), from rank 0.
    #[arg(long = "json", short = 'J', value_name = "FILE")]
    pub json: Option<PathBuf>,
    /// Fill residual handling: carry rounding errors to the next gap, or drop them.
    #[arg(long, value_enum, default_value = "carry")]
    pub fill_residual: FillResidual,
    /// Bytes copied by one memory-bound fill unit.
    #[arg(long, default_value = "4MiB")]
    pub membound_bytes: String,
    /// Trace for replay, fill and overlap instead of this run's blocking phase: a joined trace
    /// (`join --events-out`), or a workload's trace from `commcanary import` (walked once per token).
    #[arg(long)]
    pub trace: Option<PathBuf>,
    /// With an imported --trace: run only its all-reduces (on the whole world); the other kinds are left out and
    /// counted in the shard. Without it every kind runs on the trace's groups (cpu backend).
    #[arg(long)]
    pub trace_allreduce_only: bool,
    /// Negative control: rank=R,every=K,us=D delays rank R before every K-th collective.
    #[arg(long)]
    pub inject_delay: Option<String>,
    /// Negative control (a known-bad configuration whose cost grows with the machine's load, as a real one's does):
    /// every all-reduce on the world (group 0) runs N times back to back, the recorded collective spanning all N; every
    /// rank must be given the same N.
    #[arg(long)]
    pub inject_repeat: Option<u32>,
    /// Test fixture: rank=R,offset_us=X,drift_ppm=Y distorts rank R's clock reads (repeatable).
    #[arg(long)]
    pub inject_clock: Vec<String>,
    /// Clock calibration against rank 0.
    #[arg(long, value_enum, default_value = "pingpong")]
    pub clock: ClockMode,
    /// Which ranks calibrate against which: `hierarchical` (node leaders, the lowest rank of each host name, against
    /// rank 0 one at a time, then every other rank against its leader, the nodes side by side, except that a rank that
    /// may take its leader's kernel clock (same boot id and time namespace, no injection, not `--clock pingpong-only`)
    /// takes it exactly without a ping-pong; a rank's model is the two composed, its bound the sum of theirs), `flat`
    /// (every rank against rank 0, one at a time), or `auto` (hierarchical where the ranks record more than one host
    /// name, else flat).
    #[arg(long, value_enum, default_value = "auto")]
    pub clock_sync: ClockSyncChoice,
    /// Ping-pong exchanges per calibration window and rank.
    #[arg(long, default_value_t = 200)]
    pub clock_samples: u32,
    /// NCCL library for the cuda backend: an explicit path, or a bare name
    /// resolved by the system loader (the file actually mapped is recorded either way).
    #[arg(long, default_value = "libnccl.so.2")]
    pub nccl_lib: PathBuf,
    /// Seconds without completion after which a collective is declared hung and
    /// the job fails with a message (cuda: the NCCL communicator is aborted;
    /// cpu: the wait on MPI_Iallreduce gives up). 0 < value <= 86400.
    #[arg(long, alias = "collective-timeout", default_value_t = crate::core::limits::DEFAULT_COLLECTIVE_TIMEOUT_S)]
    pub collective_timeout_s: f64,
    /// Cuda backend: use this GPU ordinal instead of local_rank % device_count.
    #[arg(long)]
    pub gpu: Option<u32>,
    /// Cuda backend: capture each size's timed isolated iterations into one
    /// CUDA graph with a timestamp node between collectives, and launch it
    /// once (as serving engines replay decode steps): no host work per
    /// collective; per-collective host times are then the launch's. Model
    /// shapes: blocking and async capture one token's GEMMs and all-reduces
    /// into a CUDA graph and launch it per token; only token boundaries are
    /// timed. fill, overlap and membound-fill capture a token of --trace FILE.
    #[arg(long)]
    pub graph: bool,
    /// Cuda backend: the stream of the blocking phase's collectives. `current`
    /// (default): the compute stream, as PyTorch 2.8 and later run a
    /// synchronous collective; `separate`: a stream of its own joined by
    /// events both ways, as PyTorch runs `async_op=True` (and ran every
    /// collective before 2.8). `async` and `overlap` always use their own.
    #[arg(long, value_enum, default_value = "current")]
    pub comm_stream: CommStream,
    /// Cuda backend: record every kernel through CUPTI (kernel timelines,
    /// `overlap` from kernels). Off by default: its per-launch cost would be
    /// mixed into every timing (`bench-overhead --cupti` measures it).
    #[arg(long)]
    pub cupti: bool,
    /// Capture NCCL's per-collective tuner choices (cuda backend): sets
    /// NCCL_DEBUG=INFO and NCCL_DEBUG_SUBSYS=TUNING with a per-process NCCL_DEBUG_FILE,
    /// keeps the log beside the shard and attaches the choices where counts and sizes match.
    #[arg(long)]
    pub nccl_tuning: bool,
    /// Output directory; the run goes to OUT/<run-id>/.
    #[arg(short = 'o', long, default_value = "out")]
    pub out: PathBuf,
    /// Run id (default: UTC time plus random hex, chosen by rank 0).
    #[arg(long)]
    pub run_id: Option<String>,
    /// Quiet: no per-phase progress on stderr.
    #[arg(long, short)]
    pub quiet: bool,
    /// Negative controls: wrong-sum:R corrupts rank R's results (--check must fail);
    /// hang:R:SEQ stops rank R before collective SEQ (--collective-timeout must fire).
    #[arg(long, hide = true)]
    pub fault: Option<String>,
}

/// `commcanary rank ...` alone, to parse a configuration's argument vector.
#[derive(clap::Parser)]
#[command(name = "commcanary")]
struct RankLine {
    #[command(subcommand)]
    command: RankCommand,
}

#[derive(clap::Subcommand)]
enum RankCommand {
    Rank(Box<RankOptions>),
}

impl RankOptions {
    /// Parse a `rank` argument vector (program name first, then `rank`) as the
    /// binary would: how a campaign checks each configuration's arguments
    /// before anything runs.
    pub fn parse_argv(argv: &[String]) -> anyhow::Result<Self> {
        use clap::Parser;
        let RankCommand::Rank(o) = RankLine::try_parse_from(argv)?.command;
        Ok(*o)
    }
}
