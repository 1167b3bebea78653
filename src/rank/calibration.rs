//! Clock calibration of `rank` (`--clock`, `--clock-sync`): who ping-pongs
//! whom ([`topology`], from every rank's host name and kernel clock id), the
//! start and end windows ([`clock_window`]), and each rank's fit against rank 0
//! with the leaders' hand-off ([`end_record`], the shard's [`ClockRecord`]).
//! A shared kernel clock is taken only where boot id and time namespace match,
//! no clock is injected and `--clock pingpong-only` is off; else the fit says
//! why. Hierarchical calibration: docs/METHODS.md, "Clock calibration of rank".
use super::{ClockMode, RankOptions};
use crate::backend::mpi_deadline::{
    barrier, barrier_idle, broadcast, gather, recv_bytes, recv_u64, recv_u64_idle, send_bytes, send_u64,
    test_stop_point, Op,
};
use crate::core::clock::{
    compose, fit_rank_model, monotonic_raw_ns, node_leaders, ClockInjection, ClockModel, ClockPath, ClockSync,
    PingSample, RankClock, RankClockFit,
};
use crate::core::identity;
use crate::evidence::shard::ClockRecord;
use anyhow::{Context, Result};
use mpi::topology::{Communicator, SimpleCommunicator};

const CLOCK_TAG: i32 = 7001;
/// Ping-pongs of a rank with its node leader (hierarchical calibration).
const CLOCK_TAG_LOCAL: i32 = 7002;
/// A node leader's model, handed to the ranks of its node.
const CLOCK_TAG_HANDOFF: i32 = 7003;
/// The token a rank is sent when its turn to ping-pong comes.
const TURN_TOKEN: u64 = u64::MAX;

/// Who calibrates against whom, from every rank's host name and kernel
/// clock id (gathered once, before the start window).
pub(super) struct ClockTopology {
    sync: ClockSync,
    /// Every rank's node leader (`clock::node_leaders`).
    leader_of: Vec<u32>,
    /// Every rank's kernel clock id (`identity::kernel_clock_id`).
    kernel_ids: Vec<Option<String>>,
    /// Why each rank may not take its peer's kernel clock ([`not_same_kernel`];
    /// `None`: it may, and under hierarchical calibration it skips the ping-pong).
    refused: Vec<Option<String>>,
}

impl ClockTopology {
    /// The rank `rank` ping-pongs: its leader where that is neither itself
    /// nor rank 0 under hierarchical calibration, else rank 0.
    fn peer_of(&self, rank: u32) -> u32 {
        match self.sync {
            ClockSync::Hierarchical if self.leader_of[rank as usize] != rank => self.leader_of[rank as usize],
            _ => 0,
        }
    }
    /// The ranks that get `rank`'s model or ping-pong it, in order.
    fn served_by(&self, rank: u32) -> Vec<u32> {
        (1..self.leader_of.len() as u32).filter(|&r| r != rank && self.peer_of(r) == rank).collect()
    }
    /// Whether `rank` takes its leader's kernel clock without a ping-pong:
    /// hierarchical, not a leader, and nothing refuses the shared clock.
    fn reads_leader_clock(&self, rank: u32) -> bool {
        self.sync == ClockSync::Hierarchical
            && self.leader_of[rank as usize] != rank
            && self.refused[rank as usize].is_none()
    }
    /// Whether `rank` ping-pongs its peer in a window.
    fn pings(&self, rank: u32) -> bool {
        rank != 0 && !self.reads_leader_clock(rank)
    }
    fn path_of(&self, rank: u32) -> ClockPath {
        match self.peer_of(rank) {
            _ if rank == 0 => ClockPath::Reference,
            0 => ClockPath::Direct,
            _ => ClockPath::ViaLeader,
        }
    }
}

/// Bytes per rank in the exchange of host names and kernel clock ids: each
/// is cut to 127 bytes (a Linux host name has at most 64).
const CLOCK_ID_SLOT: usize = 256;

/// Every rank's recorded host name and kernel clock id, in rank order, on
/// every rank (a gather at rank 0, then a broadcast).
fn exchange_clock_ids(
    world: &SimpleCommunicator,
    host: &str,
    kernel: Option<&str>,
    limit: std::time::Duration,
) -> Result<Vec<(String, Option<String>)>> {
    let half = CLOCK_ID_SLOT / 2;
    let mut mine = [0u8; CLOCK_ID_SLOT];
    for (at, text) in [(0, host), (half, kernel.unwrap_or(""))] {
        let n = text.len().min(half - 1);
        mine[at..at + n].copy_from_slice(&text.as_bytes()[..n]);
    }
    let phase = "clock calibration, topology";
    let gathered =
        gather(world, 0, &mine, limit, Op { what: "gather of host names and kernel clock ids", phase, peer: None })?;
    let mut all = gathered.unwrap_or_else(|| vec![0u8; CLOCK_ID_SLOT * world.size() as usize]);
    let op = Op { what: "broadcast of host names and kernel clock ids", phase, peer: Some(0) };
    broadcast(world, 0, &mut all, limit, op)?;
    let text = |b: &[u8]| {
        let end = b.iter().position(|&c| c == 0).unwrap_or(b.len());
        String::from_utf8_lossy(&b[..end]).into_owned()
    };
    Ok(all
        .chunks(CLOCK_ID_SLOT)
        .map(|c| {
            let k = text(&c[half..]);
            (text(&c[..half]), (!k.is_empty()).then_some(k))
        })
        .collect())
}

/// Wait (idle) for `peer`'s turn token on `tag`, then exchange `n`
/// ping-pongs with it: the samples, on this rank's clock.
fn ping(
    world: &SimpleCommunicator,
    clock: &RankClock,
    peer: u32,
    tag: i32,
    n: u32,
    limit: std::time::Duration,
    phase: &str,
) -> Result<Vec<PingSample>> {
    let op = Op { what: "ping-pong", phase, peer: Some(peer) };
    let turn_op = Op { what: "wait for this rank's turn to ping-pong", phase, peer: Some(peer) };
    let turn = recv_u64_idle(world, peer, tag, limit, turn_op)?;
    if turn != TURN_TOKEN {
        anyhow::bail!("clock calibration ({phase}): rank {peer} sent {turn} where the turn token was due");
    }
    let mut samples = Vec::with_capacity(n as usize);
    for _ in 0..n {
        let t_send = clock.now_ns();
        send_u64(world, peer, tag, t_send, limit, op)?;
        let t_ref = recv_u64(world, peer, tag, limit, op)?;
        let t_recv = clock.now_ns();
        samples.push(PingSample { t_send_local_ns: t_send, t_ref_ns: t_ref, t_recv_local_ns: t_recv });
    }
    Ok(samples)
}

/// Answer `n` ping-pongs of each of `ranks` on `tag`, one rank at a time,
/// each after sending it the turn token.
fn answer(
    world: &SimpleCommunicator,
    clock: &RankClock,
    ranks: &[u32],
    tag: i32,
    n: u32,
    limit: std::time::Duration,
    phase: &str,
) -> Result<()> {
    for &r in ranks {
        let op = Op { what: "ping-pong", phase, peer: Some(r) };
        send_u64(world, r, tag, TURN_TOKEN, limit, Op { what: "send of the turn token", phase, peer: Some(r) })?;
        for _ in 0..n {
            let _ping = recv_u64(world, r, tag, limit, op)?;
            let t = clock.now_ns();
            send_u64(world, r, tag, t, limit, op)?;
        }
    }
    Ok(())
}

/// What one calibration window gave this rank.
pub(super) struct Window {
    /// Samples against its peer ([`ClockTopology::peer_of`]); none on rank 0
    /// and on a rank that reads its leader's kernel clock.
    pub samples: Vec<PingSample>,
    /// The window's wall time on this rank (`CLOCK_MONOTONIC`, ns) from the
    /// end of the opening barrier to the end of the closing one.
    pub wall_ns: u64,
    /// This rank's clock at the end of the closing barrier (the reference
    /// time of a leg taken from a shared kernel clock without samples).
    pub closed_ns: u64,
}

/// One calibration window, every wait bounded by `limit`. Flat: every rank
/// r > 0 exchanges `n` ping-pongs with rank 0, one rank at a time.
/// Hierarchical: first the node leaders with rank 0, one leader at a time;
/// then, on every node at once, each other rank that does not read its
/// leader's kernel clock with its leader, one rank at a time (rank 0's
/// node: with rank 0).
pub(super) fn clock_window(
    world: &SimpleCommunicator,
    clock: &RankClock,
    n: u32,
    limit: std::time::Duration,
    window: &str,
    topo: &ClockTopology,
) -> Result<Window> {
    let rank = world.rank() as u32;
    let phase = format!("clock calibration, {window} window");
    barrier(world, limit, Op { what: "barrier before the ping-pongs", phase: &phase, peer: None })?;
    let t0 = monotonic_raw_ns();
    if window == "start" {
        test_stop_point("clock", rank);
    }
    let mut samples = Vec::new();
    let peer = topo.peer_of(rank);
    match topo.sync {
        ClockSync::Flat => {
            if rank == 0 {
                answer(world, clock, &topo.served_by(0), CLOCK_TAG, n, limit, &phase)?;
            } else {
                samples = ping(world, clock, 0, CLOCK_TAG, n, limit, &phase)?;
            }
        }
        ClockSync::Hierarchical => {
            let leader = topo.leader_of[rank as usize] == rank;
            // stage 1: node leaders against rank 0, one at a time
            if rank == 0 {
                let leaders: Vec<u32> =
                    topo.served_by(0).into_iter().filter(|&r| topo.leader_of[r as usize] == r).collect();
                answer(world, clock, &leaders, CLOCK_TAG, n, limit, &phase)?;
            } else if leader {
                samples = ping(world, clock, 0, CLOCK_TAG, n, limit, &phase)?;
            }
            // stage 2: every other rank against its leader, the nodes side by side
            if leader {
                let locals: Vec<u32> = (1..topo.leader_of.len() as u32)
                    .filter(|&r| r != rank && topo.leader_of[r as usize] == rank && topo.pings(r))
                    .collect();
                answer(world, clock, &locals, CLOCK_TAG_LOCAL, n, limit, &phase)?;
            } else if topo.pings(rank) {
                samples = ping(world, clock, peer, CLOCK_TAG_LOCAL, n, limit, &phase)?;
            }
        }
    }
    barrier_idle(world, limit, Op { what: "barrier after the ping-pongs", phase: &phase, peer: None })?;
    let closed_ns = clock.now_ns();
    Ok(Window { samples, wall_ns: monotonic_raw_ns() - t0, closed_ns })
}

/// Why this rank cannot take `peer`'s kernel clock for its own (another boot
/// id or time namespace, a synthetic injection, `--clock pingpong-only`), or
/// `None` where it may, given the samples agree with one clock.
fn not_same_kernel(
    mode: ClockMode,
    injections: &[ClockInjection],
    rank: u32,
    peer: u32,
    topo: &ClockTopology,
) -> Option<String> {
    let whose = if peer == 0 { "rank 0".to_string() } else { format!("its leader, rank {peer}") };
    if mode == ClockMode::PingpongOnly {
        return Some("--clock pingpong-only".to_string());
    }
    if injections.iter().any(|i| i.rank == peer || i.rank == rank) {
        return Some(if peer == 0 {
            "a synthetic clock injection on this rank or rank 0".to_string()
        } else {
            format!("a synthetic clock injection on this rank or {whose}")
        });
    }
    match (&topo.kernel_ids[rank as usize], &topo.kernel_ids[peer as usize]) {
        (Some(a), Some(b)) if a == b => None,
        (Some(a), Some(b)) => Some(format!("another kernel or time namespace ({a} against {whose}'s {b})")),
        _ => Some("a boot id or time namespace that could not be read".to_string()),
    }
}

/// Largest serialized model a leader hands to a rank of its node.
const MAX_HANDOFF_BYTES: usize = 1 << 16;

/// A rank's model against rank 0 through its leader: its own fit against
/// the leader composed with the leader's against rank 0 (`clock::compose`).
/// Rank 0's kernel clock where both legs are shared kernel clocks; else the
/// composed models, with the composed ping-pong fits beside them where they
/// differ (a leg that was a shared clock) and why the result is not rank 0's clock.
fn compose_via_leader(own: &RankClockFit, lead: &RankClockFit, leader: u32) -> Result<RankClockFit> {
    let measured = compose(&own.pingpong.unwrap_or(own.model), &lead.pingpong.unwrap_or(lead.model))
        .context("composing the clock model through the leader")?;
    let model = compose(&own.model, &lead.model).context("composing the clock model through the leader")?;
    let why: Vec<String> = [
        own.refused.as_ref().map(|w| format!("against leader rank {leader}: {w}")),
        lead.refused.as_ref().map(|w| format!("leader rank {leader} against rank 0: {w}")),
    ]
    .into_iter()
    .flatten()
    .collect();
    Ok(RankClockFit {
        pingpong: (model != measured).then_some(measured),
        model,
        refused: (!why.is_empty()).then(|| why.join("; ")),
    })
}

/// Who calibrates against whom under `--clock` (`None`: no calibration):
/// every rank's host name and kernel clock id, exchanged once, before the start window.
pub(super) fn topology(
    world: &SimpleCommunicator,
    args: &RankOptions,
    injections: &[ClockInjection],
    host: &str,
    limit: std::time::Duration,
) -> Result<Option<ClockTopology>> {
    Ok(match args.clock {
        ClockMode::Pingpong | ClockMode::PingpongOnly => {
            let ids = exchange_clock_ids(world, host, identity::kernel_clock_id().as_deref(), limit)?;
            let hosts: Vec<&str> = ids.iter().map(|(h, _)| h.as_str()).collect();
            let leader_of = node_leaders(&hosts);
            let nodes = leader_of.iter().enumerate().filter(|(r, l)| **l as usize == *r).count();
            let mut topo = ClockTopology {
                sync: args.clock_sync.resolve(nodes),
                leader_of,
                kernel_ids: ids.into_iter().map(|(_, k)| k).collect(),
                refused: Vec::new(),
            };
            let refused = (0..topo.leader_of.len() as u32)
                .map(|r| not_same_kernel(args.clock, injections, r, topo.peer_of(r), &topo))
                .collect();
            topo.refused = refused;
            Some(topo)
        }
        ClockMode::None => None,
    })
}

/// The end window, this rank's fit against its peer (exact where it shares
/// the peer's kernel clock), the leaders' hand-off of their models under
/// hierarchical calibration, and the shard's clock record.
pub(super) fn end_record(
    world: &SimpleCommunicator,
    clock: &RankClock,
    args: &RankOptions,
    limit: std::time::Duration,
    topo: &ClockTopology,
    start: Window,
) -> Result<ClockRecord> {
    let rank = world.rank() as u32;
    let end = clock_window(world, clock, args.clock_samples, limit, "end", topo)?;
    let t_fit = monotonic_raw_ns();
    let kernel_clock_id = topo.kernel_ids[rank as usize].clone();
    let peer = topo.peer_of(rank);
    let path = topo.path_of(rank);
    let hierarchical = topo.sync == ClockSync::Hierarchical;
    let phase = "clock calibration, hand-off of the leaders' models";
    // against the peer: rank 0 (direct) or the leader (via_leader)
    let own = if rank == 0 {
        RankClockFit { model: ClockModel::reference(), pingpong: None, refused: None }
    } else if topo.reads_leader_clock(rank) {
        RankClockFit {
            model: ClockModel::shared_kernel_clock_unmeasured(start.closed_ns, end.closed_ns)?,
            pingpong: None,
            refused: None,
        }
    } else {
        fit_rank_model(&start.samples, &end.samples, topo.refused[rank as usize].clone())
            .context("fitting the clock model")?
    };
    // a leader other than rank 0 hands its model to the ranks of its node
    if hierarchical && rank != 0 && topo.leader_of[rank as usize] == rank {
        let bytes = serde_json::to_vec(&own).context("encoding this leader's clock model")?;
        for r in topo.served_by(rank) {
            let op = Op { what: "send of the leader's clock model", phase, peer: Some(r) };
            send_bytes(world, r, CLOCK_TAG_HANDOFF, &bytes, limit, op)?;
        }
    }
    let (fit, leader_fit, leader_model) = if path == ClockPath::ViaLeader {
        let op = Op { what: "receive of the leader's clock model", phase, peer: Some(peer) };
        let bytes = recv_bytes(world, peer, CLOCK_TAG_HANDOFF, MAX_HANDOFF_BYTES, limit, op)?;
        let lead: RankClockFit = serde_json::from_slice(&bytes)
            .with_context(|| format!("decoding the clock model of leader rank {peer}"))?;
        (compose_via_leader(&own, &lead, peer)?, Some(own.model), Some(lead.model))
    } else {
        (own, None, None)
    };
    let handoff_ns = monotonic_raw_ns() - t_fit;
    Ok(ClockRecord {
        start_samples: start.samples,
        end_samples: end.samples,
        model: fit.model,
        kernel_clock_id,
        pingpong_fit: fit.pingpong,
        shared_kernel_clock_refused: fit.refused,
        sync: Some(topo.sync),
        path: Some(path),
        leader: hierarchical.then_some(topo.leader_of[rank as usize]),
        leader_fit,
        leader_model,
        start_window_wall_ns: Some(start.wall_ns),
        end_window_wall_ns: Some(end.wall_ns + if hierarchical { handoff_ns } else { 0 }),
    })
}
