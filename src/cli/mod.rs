//! Command-line definitions (clap derive). Parsing only; every command's work
//! lives in its own module.
pub mod canary;
pub mod command;
pub mod schema;
use crate::backend::BackendChoice;
use crate::core::workload::FillResidual;
use clap::{Args, Parser, Subcommand, ValueEnum};
use std::path::PathBuf;

/// Rank NCCL/MPI collective configurations for real workloads, with a chain of evidence.
#[derive(Parser, Debug)]
#[command(name = "commcanary", version = crate::core::identity::VERSION_LONG, about, long_about = None)]
pub struct Cli {
    /// Subcommand.
    #[command(subcommand)]
    pub command: Command,
}

/// Subcommands.
#[derive(Subcommand, Debug)]
pub enum Command {
    /// Per-rank program: run under mpirun/srun; executes phases and writes this rank's shard
    Rank(Box<RankArgs>),
    /// Verify a run's shards, match events by operation identity, summarize (and write the joined trace)
    Join(JoinArgs),
    /// Print any shard or run record as JSON
    Inspect(InspectArgs),
    /// Export a verified run, or an imported communication trace, to another format
    #[command(subcommand)]
    Export(ExportCommand),
    /// Import a workload's PyTorch traces (one file per rank) as a communication trace
    #[command(subcommand)]
    Import(ImportCommand),
    /// Record an MPI application's calls unchanged (run under mpirun/srun): `capture -o DIR -- APP ARGS`
    Capture(CaptureArgs),
    /// Run an imported trace's collectives on per-group sub-communicators: MPI (cpu) or NCCL (cuda); run under mpirun
    #[command(name = "replay-trace")]
    ReplayTrace(ReplayTraceArgs),
    /// Does a proxy rank configurations the way the truth does? Pairwise relations, agreement, Kendall tau-b
    Compare(CompareArgs),
    /// Campaigns: plan, run, exec, select, verify, analyze, archive, check-archive, join, power, replicate, export-pick, confirm
    #[command(subcommand)]
    Campaign(CampaignCommand),
    /// Request-level queueing over measured service times: open or closed load, Little's law, SLO attainment
    Queue(QueueArgs),
    /// GPUs needed for a demand at a measured per-GPU throughput, and what a faster configuration avoids
    Capacity(CapacityArgs),
    /// Compute/communication overlap from intervals: per phase and rank of a run, or an interval file
    Overlap(OverlapArgs),
    /// Verify runs and rank configurations per phase by the median of per-job medians (descriptive)
    Summarize(SummarizeArgs),
    /// What this machine offers: GPUs, NCCL libraries (version and mapped file), MPI, CUPTI
    Doctor(DoctorArgs),
    /// Validate this node against a reference: health, topology, sweep, workload (run under mpirun; exit 0 pass, 1 fail, 2 inconclusive, 3 could not run)
    Validate(crate::validate::ValidateArgs),
    /// Canaries: compile a trace into a small replay, verify it against the trace on real replays, reduce, redact
    #[command(subcommand)]
    Canary(crate::cli::canary::CanaryCommand),
    /// Write a deterministic synthetic communication trace (for tests and examples)
    Synth(crate::cli::canary::SynthArgs),
    /// Write a run of GENERATED shards (marked synthetic in every header) to benchmark `join`; verify, analyze and summarize refuse them
    #[command(name = "synth-shards")]
    SynthShards(SynthShardsArgs),
    /// Print the JSON Schema of a format (its name: see `schema --help`)
    Schema(SchemaArgs),
    /// Per-collective instrumentation overhead, CPU or CUDA (run under mpirun; a benchmark, not a test)
    #[command(name = "bench-overhead")]
    BenchOverhead(BenchOverheadArgs),
}

pub use crate::rank::{ClockMode, ClockSyncChoice};

/// `commcanary rank`. A later value of an option overrides an earlier one, so
/// a campaign configuration's own arguments override the campaign-wide ones.
#[derive(Args, Debug)]
#[command(args_override_self = true)]
pub struct RankArgs {
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
    /// Element type of the all-reduces and of the isolated sweep (as nccl-tests -d; default bf16 for model shapes, f32 for synthetic).
    #[arg(long, short = 'd', value_enum)]
    pub dtype: Option<crate::evidence::shard::Dtype>,
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
    /// Validate the all-reduce result on this many collectives per phase; in the isolated phase, of every size (as nccl-tests -c).
    #[arg(long, short = 'c', default_value_t = 1)]
    pub check: u32,
    /// The collective the isolated phase sweeps, as nccl-tests' *_perf programs: every kind
    /// with a bus-bandwidth factor (rooted kinds from rank 0).
    #[arg(long, value_enum, default_value = "all_reduce")]
    pub collective: crate::core::workload::SweepKind,
    /// The isolated sweep's reduction, for all_reduce, reduce_scatter and reduce (as nccl-tests -o;
    /// -o is --out here): sum, prod, min, max, or avg (cuda only: MPI has no average). Default sum.
    #[arg(long, value_enum)]
    pub op: Option<crate::core::workload::ReduceOp>,
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
    /// With an imported --trace: run only its all-reduces (on the whole world); the other kinds are left out and counted in the shard. Without it every kind runs on the trace's groups (cpu backend).
    #[arg(long)]
    pub trace_allreduce_only: bool,
    /// Negative control: rank=R,every=K,us=D delays rank R before every K-th collective.
    #[arg(long)]
    pub inject_delay: Option<String>,
    /// Negative control (a known-bad configuration whose cost grows with the machine's load, as a real one's does): every all-reduce on the world (group 0) runs N times back to back, the recorded collective spanning all N; every rank must be given the same N.
    #[arg(long)]
    pub inject_repeat: Option<u32>,
    /// Test fixture: rank=R,offset_us=X,drift_ppm=Y distorts rank R's clock reads (repeatable).
    #[arg(long)]
    pub inject_clock: Vec<String>,
    /// Clock calibration against rank 0.
    #[arg(long, value_enum, default_value = "pingpong")]
    pub clock: ClockMode,
    /// Which ranks calibrate against which: `hierarchical` (node leaders, the lowest rank of each host name, against rank 0 one at a time, then every other rank against its leader, the nodes side by side, except that a rank that may take its leader's kernel clock (same boot id and time namespace, no injection, not `--clock pingpong-only`) takes it exactly without a ping-pong; a rank's model is the two composed, its bound the sum of theirs), `flat` (every rank against rank 0, one at a time), or `auto` (hierarchical where the ranks record more than one host name, else flat).
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
    pub comm_stream: crate::core::workload::CommStream,
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

/// `commcanary join`.
#[derive(Args, Debug)]
pub struct JoinArgs {
    /// Run directory (holding run.json and rank-*.shard).
    pub run_dir: PathBuf,
    /// Write the joined trace, one collective per line.
    #[arg(long)]
    pub events_out: Option<PathBuf>,
    /// Print the summary as JSON.
    #[arg(long)]
    pub json: bool,
    /// Threads reading and verifying shards (default: the available cores).
    #[arg(long)]
    pub threads: Option<usize>,
}

/// `commcanary synth-shards`.
#[derive(Args, Debug)]
pub struct SynthShardsArgs {
    /// Ranks (one shard each).
    #[arg(long)]
    pub ranks: u32,
    /// Collectives per rank.
    #[arg(long)]
    pub collectives: u64,
    /// The run directory to write (new, or empty).
    #[arg(short = 'o', long = "out")]
    pub out: PathBuf,
    /// Seed of the generated times.
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    /// Writer threads (default: the available cores).
    #[arg(long)]
    pub threads: Option<usize>,
    /// Shard format to write: 8 (current), or 6 or 7 for a binary that
    /// predates format 7 or 8 (a before/after benchmark; the f32 body is the
    /// same). The synthetic mark is in every header either way; a format-6
    /// reader ignores it, this build refuses it.
    #[arg(long, default_value_t = crate::evidence::shard::SHARD_FORMAT_VERSION)]
    pub format_version: u32,
}

/// `commcanary inspect`.
#[derive(Args, Debug)]
pub struct InspectArgs {
    /// A shard (`*.shard`) or a JSON record.
    pub file: PathBuf,
    /// Print only the header of a shard.
    #[arg(long)]
    pub header_only: bool,
}

/// `commcanary bench-overhead`.
#[derive(Args, Debug)]
pub struct BenchOverheadArgs {
    /// Collectives per measurement (cuda: keep it below the device queue's
    /// depth, about a thousand launches, so the host never blocks in a launch).
    #[arg(long, default_value_t = 2000)]
    pub iters: u32,
    /// Message size.
    #[arg(long, default_value = "64KiB")]
    pub size: String,
    /// Alternating repetitions of (bare, instrumented).
    #[arg(long, default_value_t = 5)]
    pub reps: u32,
    /// Backend: cpu (bare MPI loop vs runner) or cuda (reference NCCL loop vs runner).
    #[arg(long, value_enum, default_value = "cpu")]
    pub backend: crate::backend::BackendChoice,
    /// Message sizes for the cuda benchmark.
    #[arg(long, default_value = "64KiB,128KiB,256KiB")]
    pub sizes: String,
    /// NCCL library for the cuda benchmark.
    #[arg(long, default_value = "libnccl.so.2")]
    pub nccl_lib: PathBuf,
    /// Cuda: add a third variant, the instrumented loop with CUPTI kernel records on.
    #[arg(long)]
    pub cupti: bool,
    /// Cuda: ask NCCL for its tuning log (NCCL_DEBUG=INFO, SUBSYS=TUNING), as
    /// `rank --nccl-tuning` does, so its cost can be compared run against run.
    #[arg(long)]
    pub nccl_tuning: bool,
    /// Write every measurement (per-rep distributions) as JSON to this file.
    #[arg(long)]
    pub json_out: Option<PathBuf>,
}

/// `commcanary summarize`.
#[derive(Args, Debug)]
pub struct SummarizeArgs {
    /// LABEL=RUN_DIR pairs; a label may repeat (one run per job).
    #[arg(required = true)]
    pub runs: Vec<String>,
    /// Print JSON.
    #[arg(long)]
    pub json: bool,
}

/// `commcanary schema`.
#[derive(Args, Debug)]
pub struct SchemaArgs {
    /// Schema name (the list is `cli::schema::SCHEMAS`, so help cannot go stale).
    #[arg(value_parser = clap::builder::PossibleValuesParser::new(schema::SCHEMAS.map(|s| s.0)))]
    pub name: String,
}

/// `commcanary doctor`.
#[derive(Args, Debug)]
pub struct DoctorArgs {
    /// Also load and verify this NCCL library (repeatable); failure makes the exit code non-zero.
    #[arg(long)]
    pub nccl_lib: Vec<PathBuf>,
    /// Print JSON.
    #[arg(long)]
    pub json: bool,
}

/// `commcanary overlap`.
#[derive(Args, Debug)]
pub struct OverlapArgs {
    /// Run directory (verified with join first).
    #[arg(required_unless_present = "intervals", conflicts_with = "intervals")]
    pub run_dir: Option<PathBuf>,
    /// JSON file {"compute": [[start_us, end_us], ...], "comm": [[start_us, end_us], ...]}.
    #[arg(long)]
    pub intervals: Option<PathBuf>,
    /// Print JSON.
    #[arg(long)]
    pub json: bool,
}

/// `commcanary export ...`.
#[derive(Subcommand, Debug)]
pub enum ExportCommand {
    /// Chrome/Perfetto trace JSON: per rank, rows for phases, tokens, host calls, compute and comm streams
    Chrome(ExportChromeArgs),
    /// PARAM comms-replay JSON (DIR/rank-N.json) of an imported trace, with a group init entry per group
    Param(ExportTraceArgs),
    /// Chakra-style execution-trace JSON (DIR/rank-N.json) of an imported trace's communication nodes
    Et(ExportTraceArgs),
}

/// `commcanary export param|et`.
#[derive(Args, Debug)]
pub struct ExportTraceArgs {
    /// Communication trace written by `commcanary import`.
    pub trace: PathBuf,
    /// Output directory (created if missing; existing files are never replaced).
    #[arg(short = 'o', long = "out", alias = "output")]
    pub output: PathBuf,
    /// Redact before exporting, as `canary redact` does (local rank indices, no paths, hosts or job ids,
    /// rebased times); the audit log is written as DIR/redaction.audit.json.
    #[arg(long)]
    pub redact: bool,
    /// With --redact: quantize every time and duration to this many ns.
    #[arg(long, requires = "redact", default_value_t = 0)]
    pub quantize_ns: u64,
}

/// `commcanary replay-trace`.
#[derive(Args, Debug)]
pub struct ReplayTraceArgs {
    /// Communication trace written by `commcanary import`.
    pub trace: PathBuf,
    /// Directory for replay-trace.rank-N.json (created if missing; never overwritten).
    #[arg(short = 'o', long, default_value = "out")]
    pub out: PathBuf,
    /// Validate every collective's result.
    #[arg(long)]
    pub check: bool,
    /// Reduction of all-reduce, reduce and reduce-scatter (default sum: the traces do not record it).
    #[arg(long, value_enum)]
    pub op: Option<crate::core::workload::ReduceOp>,
    /// Pace by the trace's gaps waited on the host (`gaps`), back to back
    /// (`none`), by the recorded compute re-created on the device
    /// (`workload`, cuda), or by the gaps spun on the device (`device-gaps`, cuda).
    #[arg(long, value_enum, default_value = "gaps")]
    pub pace: crate::evidence::commtrace::exec::Pace,
    /// Negative control: corrupt every result on this rank (--check must fail).
    #[arg(long, hide = true)]
    pub corrupt_rank: Option<u32>,
    /// Backend: cpu (MPI sub-communicators), cuda (NCCL sub-communicators, one GPU per rank), or auto.
    #[arg(long, value_enum, default_value = "cpu")]
    pub backend: crate::backend::BackendChoice,
    /// NCCL library for the cuda backend: an explicit path, or a bare name resolved by the system loader.
    #[arg(long, default_value = "libnccl.so.2")]
    pub nccl_lib: PathBuf,
    /// Skip the untimed warm-up pass of the whole trace (first-use setup of connections then lands in the timed pass).
    #[arg(long)]
    pub no_warmup: bool,
    /// Record the NCCL kernels each collective ran (CUPTI; cuda backend) and compare their families with the trace's kernels.
    #[arg(long)]
    pub cupti: bool,
}

/// `commcanary import ...`.
#[derive(Subcommand, Debug)]
pub enum ImportCommand {
    /// PyTorch profiler (Kineto) JSON, one file per rank, gzip accepted
    Kineto(ImportArgs),
    /// PyTorch execution trace (Chakra ET JSON), one file per rank, gzip accepted
    Et(ImportArgs),
    /// A verified CommCanary run directory: one phase's collectives with their gaps and compute
    Run(crate::cli::canary::ImportRunArgs),
    /// An MPI application's capture folder (`commcanary capture -o DIR`), one file per rank
    Mpi(ImportMpiArgs),
}

/// `commcanary import mpi`.
#[derive(Args, Debug)]
pub struct ImportMpiArgs {
    /// Capture folder (`commcanary capture -o DIR`).
    pub dir: PathBuf,
    /// Communication trace to write (never overwritten).
    #[arg(short = 'o', long = "out", alias = "output")]
    pub output: PathBuf,
    /// Import a capture a rank did not finish (no trailer: it died or aborted), marking the trace incomplete.
    #[arg(long)]
    pub allow_incomplete: bool,
    /// Print every rank's calls per kind (and those the trace leaves out) as JSON instead of text.
    #[arg(long)]
    pub json: bool,
    /// Keep only the collectives the phases run (`rank --trace`, campaigns, `canary verify`): gather, scatter,
    /// the scans, all-gather-v, reduce-scatter with counts and logical or bitwise reductions are left out, counted
    /// with the reason (without it every collective is kept: `replay-trace` runs them all, the phases refuse them).
    #[arg(long)]
    pub for_phases: bool,
}

/// `commcanary capture`.
#[derive(Args, Debug)]
pub struct CaptureArgs {
    /// Folder for the per-rank capture files (created if missing; a rank's file is never overwritten).
    #[arg(short = 'o', long = "out", alias = "output")]
    pub output: PathBuf,
    /// The capture library (default: $COMMCANARY_CAPTURE_LIB, else libcommcanary_capture.so next to this executable).
    #[arg(long)]
    pub lib: Option<PathBuf>,
    /// The application and its arguments, after `--`.
    #[arg(last = true, required = true)]
    pub app: Vec<std::ffi::OsString>,
}

/// `commcanary import kineto|et`.
#[derive(Args, Debug)]
pub struct ImportArgs {
    /// One file per rank (any order).
    #[arg(required = true)]
    pub files: Vec<PathBuf>,
    /// Communication trace to write (never overwritten).
    #[arg(short = 'o', long = "out", alias = "output")]
    pub output: PathBuf,
    /// Print the trace's per-rank collective counts as JSON instead of text.
    #[arg(long)]
    pub json: bool,
}

/// `commcanary export chrome`.
#[derive(Args, Debug)]
pub struct ExportChromeArgs {
    /// Run directory (verified with join first).
    pub run_dir: PathBuf,
    /// Output file (never overwritten).
    #[arg(short = 'o', long = "out", alias = "output")]
    pub output: PathBuf,
}

/// `commcanary campaign ...`.
#[derive(Subcommand, Debug)]
pub enum CampaignCommand {
    /// Validate a TOML spec and freeze its manifest (configs, workload, policy, seeded schedule)
    Plan {
        /// Campaign spec (TOML).
        spec: PathBuf,
        /// Campaign directory to create.
        #[arg(short = 'o', long = "out", alias = "output")]
        output: PathBuf,
    },
    /// Plan, exec, select, verify and analyze in one go, stopping at the first refusal with its reason
    Run {
        /// Campaign spec (TOML).
        spec: PathBuf,
        /// Campaign directory to create (an existing one is resumed from exec when its manifest is this spec's).
        #[arg(short = 'o', long = "out", alias = "output")]
        output: PathBuf,
        /// Retries per failing cell.
        #[arg(long, default_value_t = 0)]
        retries: u32,
        /// Stop a cell's job after this many seconds and record it failed (1 to 604800).
        #[arg(long)]
        cell_timeout_s: Option<u64>,
        /// After the results, reveal the blinded labels' configuration names.
        #[arg(long)]
        reveal: bool,
        /// Print every step and the whole report (default: the short answer; the JSON is always whole).
        #[arg(short = 'v', long)]
        verbose: bool,
    },
    /// Run every cell without a successful attempt, one fresh job per cell; append a record per attempt
    Exec {
        /// Campaign directory.
        dir: PathBuf,
        /// Retries per failing cell in this invocation.
        #[arg(long, default_value_t = 0)]
        retries: u32,
        /// Continue an interrupted or partly failed campaign (what exec always does; stated for scripts).
        #[arg(long)]
        resume: bool,
        /// Run only the cell at this 1-based schedule position (a Slurm array task: $SLURM_ARRAY_TASK_ID).
        #[arg(long)]
        cell: Option<usize>,
        /// Stop a cell's job (its whole process group) after this many seconds and record it failed (1 to 604800).
        #[arg(long)]
        cell_timeout_s: Option<u64>,
    },
    /// Name exactly one attempt per cell and bind its digests (selection.json)
    Select {
        /// Campaign directory.
        dir: PathBuf,
        /// Which successful attempt to take.
        #[arg(long, value_enum, default_value = "first-success")]
        policy: crate::campaign::chain::SelectPolicy,
    },
    /// Completeness: refuse missing, duplicate, failed, stale or unexpected cells and identity contradictions
    Verify {
        /// Campaign directory.
        dir: PathBuf,
        /// Print JSON.
        #[arg(long)]
        json: bool,
    },
    /// Per-configuration results, only after verify passes (else withheld-incomplete)
    Analyze {
        /// Campaign directory.
        dir: PathBuf,
        /// Print JSON.
        #[arg(long)]
        json: bool,
        /// When incomplete, still print per-configuration diagnostics, marked unfit to publish.
        #[arg(long)]
        diagnostics: bool,
        /// After the results, reveal the blinded labels' configuration names.
        #[arg(long)]
        reveal: bool,
        /// Where report.json and the SVG plots go (default DIR/report; never replaced).
        #[arg(long)]
        report_dir: Option<PathBuf>,
        /// Print the whole report: every phase's table, every control, the warnings (default: the short answer).
        #[arg(short = 'v', long)]
        verbose: bool,
        /// Print every phase's ranking table as CSV (one row per phase and configuration).
        #[arg(long, conflicts_with_all = ["json", "verbose"])]
        csv: bool,
    },
    /// Tar the campaign and write a descriptor binding size, SHA-256, manifest, selection, verdict
    Archive {
        /// Campaign directory.
        dir: PathBuf,
        /// Archive file (.tar), never overwritten.
        #[arg(short = 'o', long = "out", alias = "output")]
        output: PathBuf,
        /// Descriptor file (default: ARCHIVE.descriptor.json).
        #[arg(long)]
        descriptor: Option<PathBuf>,
    },
    /// Join two executed campaigns of the same experiment (refused when repository, policy, configs or workload differ)
    Join {
        /// First campaign directory.
        a: PathBuf,
        /// Second campaign directory.
        b: PathBuf,
        /// Joined campaign directory (new).
        #[arg(short = 'o', long = "out", alias = "output")]
        output: PathBuf,
    },
    /// Rounds needed: from a pilot campaign's own noise, the power to decide 1, 2, 5, 10% differences at 3..50 rounds
    Power {
        /// Verified pilot campaign directory.
        dir: PathBuf,
        /// Phase whose noise is used (default: the canary's phase, else blocking).
        #[arg(long)]
        phase: Option<String>,
        /// Minimum effect, percent (default: the manifest's).
        #[arg(long)]
        min_effect_pct: Option<f64>,
    },
    /// Did B reproduce A? For every pair either campaign decides, does the other agree
    Replicate {
        /// First verified campaign directory.
        a: PathBuf,
        /// Second verified campaign directory.
        b: PathBuf,
        /// Print JSON.
        #[arg(long)]
        json: bool,
    },
    /// Write the winning configuration as a sourceable env file (the real job's best where the campaign ran [truth])
    ExportPick {
        /// Analyzed campaign directory.
        dir: PathBuf,
        /// Env file to write (never overwritten).
        #[arg(short = 'o', long = "out", alias = "output")]
        output: PathBuf,
        /// Pick by `truth` (default where the campaign ran its job) or by a phase's rank 1 (default: blocking).
        #[arg(long)]
        by: Option<String>,
    },
    /// Run the [truth] job with an exported pick against the default in N new interleaved rounds; state the gain
    Confirm {
        /// Campaign directory whose [truth] job is run.
        dir: PathBuf,
        /// Env file written by export-pick.
        #[arg(long)]
        pick: PathBuf,
        /// New rounds (2 to 10000).
        #[arg(long, default_value_t = 5)]
        rounds: u32,
        /// Directory of the confirming campaign (new).
        #[arg(short = 'o', long = "out", alias = "output")]
        output: PathBuf,
    },
    /// Re-verify an archive against its descriptor
    CheckArchive {
        /// Archive file.
        archive: PathBuf,
        /// Descriptor file.
        descriptor: PathBuf,
    },
}

/// Load model of `queue`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum QueueMode {
    /// Requests arrive on their own schedule (--arrival, --interval-ms).
    Open,
    /// Clients send, wait for the response, think, send again (--clients, --think-ms).
    Closed,
}

/// `commcanary queue`.
#[derive(Args, Debug)]
pub struct QueueArgs {
    /// Service times: one value in ms per line, used in order and cycled.
    #[arg(long, conflicts_with = "campaign", required_unless_present = "campaign")]
    pub service_times: Option<PathBuf>,
    /// Or a verified campaign: each configuration's per-token latencies (jobs in round order) of --phase.
    #[arg(long)]
    pub campaign: Option<PathBuf>,
    /// Campaign phase whose token latencies are the service times.
    #[arg(long, default_value = "blocking")]
    pub phase: String,
    /// Open or closed load.
    #[arg(long, value_enum)]
    pub mode: QueueMode,
    /// Open: arrival process.
    #[arg(long, value_enum, default_value = "poisson")]
    pub arrival: crate::analysis::queue::Arrival,
    /// Open: mean inter-arrival time, ms.
    #[arg(long)]
    pub interval_ms: Option<f64>,
    /// Open: seed of the Poisson process.
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    /// Closed: clients.
    #[arg(long)]
    pub clients: Option<u32>,
    /// Closed: think time after each response, ms.
    #[arg(long, default_value_t = 0.0)]
    pub think_ms: f64,
    /// Requests to simulate (default: as many as service times).
    #[arg(long)]
    pub requests: Option<usize>,
    /// Report the share of responses within this many ms, and rank by it.
    #[arg(long)]
    pub slo_ms: Option<f64>,
    /// Closed: HdrHistogram's expected-interval correction for coordinated omission, ms.
    #[arg(long)]
    pub co_correct_ms: Option<f64>,
    /// Print JSON.
    #[arg(long)]
    pub json: bool,
}

/// `commcanary capacity`.
#[derive(Args, Debug)]
pub struct CapacityArgs {
    /// Demand, requests/s.
    #[arg(long)]
    pub demand: f64,
    /// Throughput per GPU, requests/s: once, or twice (candidate, then baseline).
    #[arg(long, num_args = 1)]
    pub throughput_per_gpu: Vec<f64>,
    /// Cost of one GPU-hour (any currency; the output uses the same).
    #[arg(long)]
    pub gpu_hour_cost: f64,
    /// Print JSON.
    #[arg(long)]
    pub json: bool,
}

/// `commcanary compare`.
#[derive(Args, Debug)]
pub struct CompareArgs {
    /// Proxy: a summary CSV (config,median_us[,iqr_us]), CAMPAIGN_DIR:PHASE, or a folder of
    /// nccl-tests outputs (text or -J JSON, ours or nccl-tests', one file per configuration).
    #[arg(long)]
    pub proxy: String,
    /// Truth: the same forms as --proxy.
    #[arg(long)]
    pub truth: String,
    /// For nccl-tests outputs: rank by the out-of-place time at this size (nccl-tests' size
    /// column, e.g. 1MiB); default, the geometric mean over the sizes every file timed.
    #[arg(long)]
    pub size: Option<String>,
    /// Print the agreement as CSV (one row per pair of configurations).
    #[arg(long, conflicts_with = "json")]
    pub csv: bool,
    /// Tie rule (a campaign's manifest declares its own; this applies to tables).
    #[arg(long, value_enum, default_value = "strict")]
    pub tie_policy: crate::analysis::ranking::TiePolicy,
    /// Print JSON.
    #[arg(long)]
    pub json: bool,
}

impl From<RankArgs> for crate::rank::RankOptions {
    fn from(a: RankArgs) -> Self {
        crate::rank::RankOptions {
            backend: a.backend,
            phases: a.phases,
            tokens: a.tokens,
            warmup_tokens: a.warmup_tokens,
            model: a.model,
            model_dims: a.model_dims,
            batch: a.batch,
            prefill_tokens: a.prefill_tokens,
            dtype: a.dtype,
            layers: a.layers,
            sizes: a.sizes,
            gemm: a.gemm,
            min_bytes: a.min_bytes,
            max_bytes: a.max_bytes,
            step_factor: a.step_factor,
            iters: a.iters,
            warmup_iters: a.warmup_iters,
            check: a.check,
            collective: a.collective,
            op: a.op,
            json: a.json,
            fill_residual: a.fill_residual,
            membound_bytes: a.membound_bytes,
            trace: a.trace,
            trace_allreduce_only: a.trace_allreduce_only,
            inject_delay: a.inject_delay,
            inject_repeat: a.inject_repeat,
            inject_clock: a.inject_clock,
            clock: a.clock,
            clock_sync: a.clock_sync,
            clock_samples: a.clock_samples,
            nccl_lib: a.nccl_lib,
            collective_timeout_s: a.collective_timeout_s,
            gpu: a.gpu,
            graph: a.graph,
            comm_stream: a.comm_stream,
            cupti: a.cupti,
            nccl_tuning: a.nccl_tuning,
            out: a.out,
            run_id: a.run_id,
            quiet: a.quiet,
            fault: a.fault,
        }
    }
}

impl From<BenchOverheadArgs> for crate::rank::bench::BenchOptions {
    fn from(a: BenchOverheadArgs) -> Self {
        crate::rank::bench::BenchOptions {
            iters: a.iters,
            size: a.size,
            reps: a.reps,
            backend: a.backend,
            sizes: a.sizes,
            nccl_lib: a.nccl_lib,
            cupti: a.cupti,
            nccl_tuning: a.nccl_tuning,
            json_out: a.json_out,
        }
    }
}

/// Parse a `rank` argument vector (program name first) as the binary would,
/// into the options `rank` runs with: how `campaign plan` checks each
/// configuration's arguments before anything runs.
pub fn parse_rank_argv(argv: &[String]) -> anyhow::Result<crate::rank::RankOptions> {
    use clap::Parser;
    match Cli::try_parse_from(argv)?.command {
        Command::Rank(a) => Ok((*a).into()),
        _ => anyhow::bail!("not a `rank` command line"),
    }
}
