//! `synth-shards`: a run directory of GENERATED shards, for benchmarking
//! `join`.
//!
//! Consumes a rank count, a collective count per rank and a seed. Produces a
//! complete run directory through the real shard and run-record writers, each
//! shard marked [`crate::evidence::shard::SyntheticMark`]: `join` reads it,
//! every stage that takes measurements refuses it with `refused[SYNTHETIC]`.
//! Refuses: zero ranks or collectives, more ranks than
//! [`crate::core::limits::MAX_WORLD_SIZE`], an output directory that exists
//! and is not empty.
//!
//! The generated run: docs/METHODS.md, "Synthetic shards".
use crate::core::clock::{unix_ms, ClockModel, WindowEstimate};
use crate::core::identity::{EnvIdentity, ToolIdentity};
use crate::core::workload::{Phase, WorkloadSpec};
use crate::core::{limits, par};
use crate::evidence::run::{new_run_id, write_run_record, RunRecord, ShardRef, RUN_FORMAT_VERSION};
use crate::evidence::shard::{
    BackendKind, ClockRecord, ColdStart, CollectiveEvent, DeviceIdentity, PhaseRun, ProcessGroup, Shard, ShardBody,
    ShardHeader, SyntheticMark, TokenEvent, Unmeasured, WrittenShard, BLANK_EVENT, SHARD_FORMAT_VERSION,
};
use anyhow::{Context, Result};
use rand::{Rng, SeedableRng};
use std::path::Path;

/// The message sizes the generated collectives cycle through, by layer.
const SIZES: [u64; 4] = [4 << 10, 64 << 10, 1 << 20, 16 << 20];
/// Spacing of consecutive collectives on the generated timeline, ns.
const PERIOD_NS: u64 = 50_000;
/// Where the generated local clocks start (a machine up for about a day), ns.
const BASE_NS: u64 = 86_400_000_000_000;

/// What was written.
pub struct SynthRun {
    /// Run id.
    pub run_id: String,
    /// Shards written.
    pub shards: Vec<ShardRef>,
}

/// Write a synthetic run of `ranks` x `collectives` into `dir` with `threads` writers.
/// `format_version` is 8, or 7 or 6 for a reader that predates format 8 or
/// 7 (the body, f32 events only, is the same; the mark stays in the header,
/// where a format-6 reader ignores it as an unknown field).
pub fn write_run(
    dir: &Path,
    ranks: u32,
    collectives: u64,
    seed: u64,
    threads: usize,
    format_version: u32,
) -> Result<SynthRun> {
    use crate::core::refusal::Code;
    if ranks == 0 || ranks > limits::MAX_WORLD_SIZE {
        crate::refuse!(Code::OutOfRange, "--ranks {ranks} is outside 1 to {}", limits::MAX_WORLD_SIZE);
    }
    if !(6..=SHARD_FORMAT_VERSION).contains(&format_version) {
        crate::refuse!(Code::OutOfRange, "--format-version {format_version} is outside 6 to {SHARD_FORMAT_VERSION}");
    }
    if collectives == 0 || collectives > u64::from(u32::MAX) {
        crate::refuse!(Code::OutOfRange, "--collectives {collectives} is outside 1 to {}", u32::MAX);
    }
    if dir.exists() && std::fs::read_dir(dir).with_context(|| format!("listing {}", dir.display()))?.next().is_some() {
        crate::refuse!(
            Code::AlreadyExists,
            "{} exists and is not empty; synth-shards writes a new run directory",
            dir.display()
        );
    }
    std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    let run_id = new_run_id();
    let layers: u32 = if collectives % 10 == 0 { 10 } else { 1 };
    let tokens = u32::try_from(collectives / u64::from(layers)).expect("checked above");
    let workload: WorkloadSpec = serde_json::from_value(serde_json::json!({
        "phases": ["blocking"], "tokens": tokens, "warmup_tokens": 0, "layers": layers, "sizes_bytes": SIZES,
        "gemm": {"m": 1, "n": 1, "k": 1}, "iters": 1, "warmup_iters": 0, "check": 0,
        "fill_residual": "carry", "membound_bytes": 4
    }))
    .context("the generated workload")?;
    let started_unix_ms = unix_ms();
    let plan = RunPlan { run_id: &run_id, ranks, collectives, layers, seed, workload: &workload, started_unix_ms };
    let rank_ids: Vec<u32> = (0..ranks).collect();
    let written: Vec<(u32, Result<WrittenShard>)> = par::map(&rank_ids, threads, &|&r| {
        let mut shard = rank_shard(&plan, r);
        shard.header.format_version = format_version;
        (r, shard.write_new(dir))
    });
    let mut shards = Vec::with_capacity(ranks as usize);
    for (rank, w) in written {
        let w = w.with_context(|| format!("writing rank {rank}'s shard"))?;
        shards.push(ShardRef { rank, file: w.file, sha256: w.sha256, size_bytes: w.size_bytes, host: host() });
    }
    let record = RunRecord {
        format_version: RUN_FORMAT_VERSION,
        run_id: run_id.clone(),
        world_size: ranks,
        backend: BackendKind::Cpu,
        workload,
        argv: std::env::args().collect(),
        rank0_identity_sha256: identity(0, ranks).digest(),
        shards: shards.clone(),
        started_unix_ms,
        finished_unix_ms: unix_ms(),
    };
    write_run_record(dir, &record)?;
    Ok(SynthRun { run_id, shards })
}

fn host() -> String {
    "synthetic".to_string()
}

fn identity(rank: u32, ranks: u32) -> EnvIdentity {
    EnvIdentity {
        host: host(),
        kernel: None,
        cpu_model: None,
        mpi_library: None,
        mpi_standard: "none (synthetic)".into(),
        world_rank: rank,
        world_size: ranks,
        local_rank: rank,
        local_size: ranks,
        cpu_affinity: None,
        numa_mems: None,
        env: Vec::new(),
        tool: ToolIdentity::current(),
    }
}

/// What every generated shard of one run shares.
struct RunPlan<'a> {
    /// Run id.
    run_id: &'a str,
    /// Ranks in the run.
    ranks: u32,
    /// Collectives per rank.
    collectives: u64,
    /// Collectives per token.
    layers: u32,
    /// Seed of the generator (one stream per rank).
    seed: u64,
    /// The workload every header records.
    workload: &'a WorkloadSpec,
    /// When the run started, ms since the Unix epoch.
    started_unix_ms: u64,
}

/// One rank's generated shard.
fn rank_shard(plan: &RunPlan<'_>, rank: u32) -> Shard {
    let RunPlan { run_id, ranks, collectives, layers, seed, workload, started_unix_ms } = *plan;
    let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(seed);
    rng.set_stream(u64::from(rank));
    // this rank's clock: local = reference + offset (+ drift); rank 0 is the reference
    let (offset_ns, drift_ppm) = if rank == 0 {
        (0.0, 0.0)
    } else {
        (rng.gen_range(-50_000.0..50_000.0_f64).round(), rng.gen_range(-5.0..5.0_f64))
    };
    let end_ref = BASE_NS + collectives * PERIOD_NS + 1_000_000;
    let model = if rank == 0 {
        ClockModel::reference()
    } else {
        let w = |ref_ns: u64, off: f64| WindowEstimate {
            ref_ns,
            offset_ns: off,
            bound_ns: 400.0,
            min_rtt_ns: 800,
            samples: 64,
        };
        let end_off = offset_ns + drift_ppm * 1e-6 * (end_ref - BASE_NS) as f64;
        ClockModel::fit(w(BASE_NS, offset_ns), Some(w(end_ref, end_off))).expect("windows in order")
    };
    let local =
        |ref_ns: u64| -> u64 { (ref_ns as f64 + offset_ns + drift_ppm * 1e-6 * (ref_ns - BASE_NS) as f64) as u64 };
    let mut events = Vec::with_capacity(collectives as usize);
    let mut tokens = Vec::with_capacity((collectives / u64::from(layers)) as usize);
    for i in 0..collectives {
        let issue_ref = BASE_NS + 1_000_000 + i * PERIOD_NS + rng.gen_range(0..2_000);
        let ret = rng.gen_range(300..1_500);
        let done = 8_000 + rng.gen_range(0..12_000);
        let layer = (i % u64::from(layers)) as u32;
        events.push(CollectiveEvent {
            phase: Phase::Blocking,
            seq: i,
            bytes: SIZES[layer as usize % SIZES.len()],
            token: Some((i / u64::from(layers)) as u32),
            layer: Some(layer),
            host_issue_ns: local(issue_ref),
            host_return_ns: local(issue_ref + ret),
            wait_start_ns: local(issue_ref + ret + 50),
            wait_end_ns: local(issue_ref + done),
            ..BLANK_EVENT
        });
        if layer + 1 == layers {
            let first = &events[events.len() - layers as usize];
            let (start_ns, end_ns) = (first.host_issue_ns, events.last().expect("one").wait_end_ns);
            tokens.push(TokenEvent {
                phase: Phase::Blocking,
                token: (i / u64::from(layers)) as u32,
                warmup: false,
                start_ns,
                end_ns,
            });
        }
    }
    let id = identity(rank, ranks);
    let header = ShardHeader {
        format_version: SHARD_FORMAT_VERSION,
        run_id: run_id.to_string(),
        rank,
        world_size: ranks,
        host: host(),
        local_rank: rank,
        local_size: ranks,
        backend: BackendKind::Cpu,
        device: DeviceIdentity { backend: BackendKind::Cpu, name: "synthetic".into(), facts: Vec::new() },
        identity_sha256: id.digest(),
        identity: id,
        groups: vec![ProcessGroup { id: 0, members: (0..ranks).collect(), name: None }],
        workload: workload.clone(),
        clock: Some(ClockRecord {
            start_samples: Vec::new(),
            end_samples: Vec::new(),
            model,
            kernel_clock_id: None,
            pingpong_fit: None,
            shared_kernel_clock_refused: (rank != 0)
                .then(|| "synthetic: a generated clock model, no samples".to_string()),
            // a generated model: no calibration ran, so no path, leader or wall time
            sync: None,
            path: None,
            leader: None,
            leader_fit: None,
            leader_model: None,
            start_window_wall_ns: None,
            end_window_wall_ns: None,
        }),
        clock_injections: Vec::new(),
        clock_anchor_true_ns: 0,
        delay_injection: None,
        repeat_injection: None,
        cold_start: ColdStart { mpi_init_ns: None, backend_init_ns: 0 },
        unmeasured: vec![Unmeasured {
            field: "*".into(),
            reason: "synthetic shard: every event was generated by synth-shards, nothing was measured".into(),
        }],
        phases: vec![PhaseRun {
            phase: Phase::Blocking,
            start_ns: local(BASE_NS),
            end_ns: local(end_ref),
            device_anchor_error_ns: None,
            quantum_ns: None,
            trace: None,
            collectives,
            graph: None,
            trace_timeline: None,
            kernel_anchor: None,
            p2p: Vec::new(),
        }],
        started_unix_ms,
        tuning: None,
        checks: Vec::new(),
        synthetic: Some(SyntheticMark {
            generator: format!("commcanary synth-shards {}", env!("CARGO_PKG_VERSION")),
            seed,
            note: "generated events for benchmarking join; not a measurement".into(),
        }),
    };
    Shard { header, body: ShardBody { collectives: events, tokens, ..Default::default() } }
}
