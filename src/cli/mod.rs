//! Command-line definitions (clap derive). Parsing only; every command's work
//! lives in its own module.
pub mod canary;
pub mod command;
pub mod schema;
use crate::analysis::queue::Arrival;
use crate::analysis::ranking;
use crate::campaign::chain::SelectPolicy;
use crate::cli::canary::{CanaryCommand, ImportRunArgs, SynthArgs};
use crate::rank::bench::BenchOptions;
use crate::rank::replay::ReplayTraceArgs;
use anyhow::Result;
use clap::{Args, Parser, Subcommand, ValueEnum};
use std::io::Write;
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
    Rank(Box<crate::rank::RankOptions>),
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
    /// Campaigns: plan, run, exec, select, verify, analyze, archive, check-archive, join, power, replicate,
    /// export-pick, confirm
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
    /// Validate this node against a reference: health, topology, sweep, workload (run under mpirun; exit 0 pass, 1
    /// fail, 2 inconclusive, 3 could not run)
    Validate(crate::validate::ValidateArgs),
    /// Canaries: compile a trace into a small replay, verify it against the trace on real replays, reduce, redact
    #[command(subcommand)]
    Canary(CanaryCommand),
    /// Write a deterministic synthetic communication trace (for tests and examples)
    Synth(SynthArgs),
    /// Write a run of GENERATED shards (marked synthetic in every header) to benchmark `join`; verify, analyze and
    /// summarize refuse them
    #[command(name = "synth-shards")]
    SynthShards(SynthShardsArgs),
    /// Print the JSON Schema of a format (its name: see `schema --help`)
    Schema(SchemaArgs),
    /// Per-collective instrumentation overhead, CPU or CUDA (run under mpirun; a benchmark, not a test)
    #[command(name = "bench-overhead")]
    BenchOverhead(BenchOptions),
}

pub use crate::rank::{ClockMode, ClockSyncChoice};

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

/// `commcanary import ...`.
#[derive(Subcommand, Debug)]
pub enum ImportCommand {
    /// PyTorch profiler (Kineto) JSON, one file per rank, gzip accepted
    Kineto(ImportArgs),
    /// PyTorch execution trace (Chakra ET JSON), one file per rank, gzip accepted
    Et(ImportArgs),
    /// A verified CommCanary run directory: one phase's collectives with their gaps and compute
    Run(ImportRunArgs),
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
        policy: SelectPolicy,
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
    pub arrival: Arrival,
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
    pub tie_policy: ranking::TiePolicy,
    /// Print JSON.
    #[arg(long)]
    pub json: bool,
}

/// Prints `v` as pretty JSON with `--json`, else as `text` renders it.
pub(crate) fn json_or<T: serde::Serialize>(
    out: &mut dyn Write,
    json: bool,
    v: &T,
    text: impl FnOnce(&T) -> String,
) -> Result<()> {
    if json {
        writeln!(out, "{}", serde_json::to_string_pretty(v)?)?;
    } else {
        write!(out, "{}", text(v))?;
    }
    Ok(())
}
