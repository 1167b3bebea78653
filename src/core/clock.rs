//! Per-rank clocks and their calibration against rank 0.
//!
//! Consumes: raw `CLOCK_MONOTONIC` reads (optionally shifted by a synthetic
//! injection, a test fixture), and ping-pong samples exchanged with rank 0.
//! Produces: a [`ClockModel`] `local = reference + offset(reference)`, with a
//! linear offset (drift) fitted from a start and an end window, and an error
//! bound ([`fit_rank_model`]; [`compose`] chains a leader's and a rank's).
//! Refuses: windows without samples, and models whose windows are not ordered
//! in time.
//!
//! Method: docs/METHODS.md, "Clock calibration".
use crate::core::cli_kv;
use crate::core::refusal::Code;
use serde::{Deserialize, Serialize};

/// A synthetic clock distortion applied to one rank's reads (test fixture).
#[derive(schemars::JsonSchema, Serialize, Deserialize, Clone, Copy, Debug, PartialEq)]
pub struct ClockInjection {
    /// Rank whose clock is distorted.
    pub rank: u32,
    /// Offset added at the anchor, in ns.
    pub offset_ns: i64,
    /// Rate error in parts per million.
    pub drift_ppm: f64,
}

impl ClockInjection {
    /// Parse `rank=R,offset_us=X,drift_ppm=Y`.
    pub fn parse(s: &str) -> anyhow::Result<Self> {
        let kv = cli_kv::parse_kv(s, &["rank", "offset_us", "drift_ppm"])?;
        let rank = cli_kv::req_u32(&kv, "rank", s)?;
        let offset_us: f64 = cli_kv::opt_f64(&kv, "offset_us", s)?.unwrap_or(0.0);
        let drift_ppm: f64 = cli_kv::opt_f64(&kv, "drift_ppm", s)?.unwrap_or(0.0);
        if !offset_us.is_finite() || offset_us.abs() > 1e9 {
            crate::refuse!(
                Code::OutOfRange,
                "--inject-clock {s:?}: offset_us must be finite and below 1e9 in magnitude"
            );
        }
        if !drift_ppm.is_finite() || drift_ppm.abs() > 1e5 {
            crate::refuse!(
                Code::OutOfRange,
                "--inject-clock {s:?}: drift_ppm must be finite and below 1e5 in magnitude"
            );
        }
        Ok(Self { rank, offset_ns: (offset_us * 1e3).round() as i64, drift_ppm })
    }

    /// Injected offset (local - true) in ns at true time `t_true_ns`, with the
    /// drift accumulated since `anchor_true_ns`.
    pub fn offset_at(&self, anchor_true_ns: u64, t_true_ns: u64) -> f64 {
        self.offset_ns as f64 + self.drift_ppm * 1e-6 * (t_true_ns as f64 - anchor_true_ns as f64)
    }
}

/// Raw `CLOCK_MONOTONIC` in ns.
pub(crate) fn monotonic_raw_ns() -> u64 {
    let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: clock_gettime writes into the provided timespec; CLOCK_MONOTONIC always exists on Linux.
    let rc = unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    debug_assert_eq!(rc, 0);
    (ts.tv_sec as u64) * 1_000_000_000 + ts.tv_nsec as u64
}

/// A rank's clock: `CLOCK_MONOTONIC`, distorted when an injection targets this rank.
#[derive(Clone, Debug)]
pub struct RankClock {
    injection: Option<ClockInjection>,
    anchor_true_ns: u64,
}

impl RankClock {
    /// A clock for `rank`, applying the injection among `injections` that names it.
    pub fn new(rank: u32, injections: &[ClockInjection]) -> Self {
        Self { injection: injections.iter().copied().find(|i| i.rank == rank), anchor_true_ns: monotonic_raw_ns() }
    }
    /// The injection applied to this clock, if any.
    pub fn injection(&self) -> Option<ClockInjection> {
        self.injection
    }
    /// True time at which the injection's drift starts accumulating.
    pub fn anchor_true_ns(&self) -> u64 {
        self.anchor_true_ns
    }
    /// Read the (possibly distorted) local clock in ns.
    pub fn now_ns(&self) -> u64 {
        let t = monotonic_raw_ns();
        match self.injection {
            None => t,
            Some(inj) => {
                let v = t as f64 + inj.offset_at(self.anchor_true_ns, t);
                if v <= 0.0 {
                    0
                } else {
                    v as u64
                }
            }
        }
    }
    /// Busy-wait until the local clock reads at least `deadline_ns`.
    pub fn spin_until(&self, deadline_ns: u64) {
        while self.now_ns() < deadline_ns {
            std::hint::spin_loop();
        }
    }
    /// Sleep for most of the interval, then spin for the last stretch.
    pub fn sleep_until(&self, deadline_ns: u64) {
        const SPIN_NS: u64 = 200_000;
        let now = self.now_ns();
        if deadline_ns > now + SPIN_NS {
            std::thread::sleep(std::time::Duration::from_nanos(deadline_ns - now - SPIN_NS));
        }
        self.spin_until(deadline_ns);
    }
}

/// One ping-pong exchange with rank 0, all times in ns.
#[derive(schemars::JsonSchema, Serialize, Deserialize, Clone, Copy, Debug, PartialEq)]
pub struct PingSample {
    /// Local clock just before sending the ping.
    pub t_send_local_ns: u64,
    /// Rank 0's clock when it answered.
    pub t_ref_ns: u64,
    /// Local clock just after the answer arrived.
    pub t_recv_local_ns: u64,
}

impl PingSample {
    /// Round trip on the local clock.
    pub fn rtt_ns(&self) -> u64 {
        self.t_recv_local_ns.saturating_sub(self.t_send_local_ns)
    }
}

/// Offset estimate from one window of samples.
#[derive(schemars::JsonSchema, Serialize, Deserialize, Clone, Copy, Debug, PartialEq)]
pub struct WindowEstimate {
    /// Rank 0's clock at the chosen sample (the window's reference time).
    pub ref_ns: u64,
    /// Estimated local - reference offset at `ref_ns`.
    pub offset_ns: f64,
    /// Half-width of the feasible interval (half the best round trip).
    pub bound_ns: f64,
    /// Best round trip observed.
    pub min_rtt_ns: u64,
    /// Number of samples in the window.
    pub samples: u32,
}

/// Errors of the clock estimator.
#[derive(Debug, thiserror::Error, PartialEq)]
pub enum ClockError {
    /// A window had no samples.
    #[error("clock window has no samples")]
    EmptyWindow,
    /// The end window does not come after the start window.
    #[error("clock windows are not ordered in time (start ref {start_ns} ns, end ref {end_ns} ns)")]
    Unordered {
        /// start window reference time
        start_ns: u64,
        /// end window reference time
        end_ns: u64,
    },
    /// Stamped kernels whose timer readings admit no common offset.
    #[error(
        "the kernel timer and the stamps admit no common offset (latest lower bound {lo_ns} ns above earliest upper \
            bound {hi_ns} ns): not one timer shifted by a constant"
    )]
    NoCommonOffset {
        /// greatest lower bound
        lo_ns: i64,
        /// least upper bound
        hi_ns: i64,
    },
}

/// SKaMPI estimate of one window: the minimum round trip sample's midpoint.
pub(crate) fn estimate_window(samples: &[PingSample]) -> Result<WindowEstimate, ClockError> {
    let best = samples.iter().min_by_key(|s| s.rtt_ns()).ok_or(ClockError::EmptyWindow)?;
    let mid = (best.t_send_local_ns as f64 + best.t_recv_local_ns as f64) / 2.0;
    Ok(WindowEstimate {
        ref_ns: best.t_ref_ns,
        offset_ns: mid - best.t_ref_ns as f64,
        bound_ns: best.rtt_ns() as f64 / 2.0,
        min_rtt_ns: best.rtt_ns(),
        samples: samples.len() as u32,
    })
}

/// The first sample that one clock read by both sides cannot give (rank 0's
/// read outside this rank's send and receive reads), by index.
pub(crate) fn first_sample_off_one_clock(samples: &[PingSample]) -> Option<usize> {
    samples.iter().position(|s| s.t_ref_ns < s.t_send_local_ns || s.t_ref_ns > s.t_recv_local_ns)
}

/// A rank's clock: the model arrivals use and its evidence.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq)]
pub struct RankClockFit {
    /// The model: the ping-pong fit, or rank 0's kernel clock itself (exactly 0).
    pub model: ClockModel,
    /// The ping-pong fit, kept as evidence where `model` is the shared kernel
    /// clock and a ping-pong ran (none where the clock was taken without one).
    pub pingpong: Option<ClockModel>,
    /// Why a rank other than 0 does not read rank 0's kernel clock.
    pub refused: Option<String>,
}

/// A non-reference rank's model from its two windows: rank 0's kernel clock where `not_same_kernel`
/// (why this rank cannot read it) is `None` and every sample agrees with one clock, else the ping-pong
/// fit and why (docs/METHODS.md, "Clock models in code").
pub fn fit_rank_model(
    start: &[PingSample],
    end: &[PingSample],
    not_same_kernel: Option<String>,
) -> Result<RankClockFit, ClockError> {
    let measured = ClockModel::fit(estimate_window(start)?, Some(estimate_window(end)?))?;
    let off_one_clock = [("start", start), ("end", end)].into_iter().find_map(|(w, v)| {
        first_sample_off_one_clock(v).map(|i| {
            let s = v[i];
            format!(
                "same kernel, but {w}-window sample {i} has rank 0's read {} ns outside this rank's [{}, {}]: not one \
                    clock",
                s.t_ref_ns, s.t_send_local_ns, s.t_recv_local_ns
            )
        })
    });
    match not_same_kernel.or(off_one_clock) {
        Some(why) => Ok(RankClockFit { model: measured, pingpong: None, refused: Some(why) }),
        None => Ok(RankClockFit {
            model: ClockModel::shared_kernel_clock(&measured),
            pingpong: Some(measured),
            refused: None,
        }),
    }
}

/// Which ranks calibrate against which.
#[derive(schemars::JsonSchema, Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
pub enum ClockSync {
    /// Every rank other than 0 ping-pongs rank 0, one rank at a time.
    Flat,
    /// Node leaders (the lowest rank of each host) ping-pong rank 0 one at a
    /// time, then every other rank its leader, the nodes side by side (or
    /// takes the leader's kernel clock without a ping-pong where it may); a
    /// rank's model is its model against its leader composed with its
    /// leader's against rank 0 ([`compose`]).
    Hierarchical,
}

impl ClockSync {
    /// The name used on the command line and in reports.
    pub fn name(self) -> &'static str {
        match self {
            ClockSync::Flat => "flat",
            ClockSync::Hierarchical => "hierarchical",
        }
    }
}

/// How a rank's model against rank 0 was obtained.
#[derive(schemars::JsonSchema, Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
pub enum ClockPath {
    /// Rank 0 itself.
    Reference,
    /// Ping-pong against rank 0 (flat calibration, node leaders, and the
    /// ranks on rank 0's node).
    Direct,
    /// Its model against its node leader composed with the leader's against rank 0.
    ViaLeader,
}

/// Every rank's node leader: the lowest rank that records the same host
/// name (`hosts` in rank order). Nodes are told apart by host name, never by
/// kernel: simulated nodes share one kernel, and one kernel clock is what
/// [`fit_rank_model`] checks, not what a node is.
pub(crate) fn node_leaders<S: AsRef<str>>(hosts: &[S]) -> Vec<u32> {
    let mut first: std::collections::HashMap<&str, u32> = std::collections::HashMap::new();
    hosts.iter().enumerate().map(|(r, h)| *first.entry(h.as_ref()).or_insert(r as u32)).collect()
}

/// Compose a rank's model against its node leader (`local`, on the leader's clock) with the
/// leader's against rank 0 (`leader`): the rank's model against rank 0, on the windows where both
/// hold (docs/METHODS.md, "Clock calibration" and "Clock models in code").
pub fn compose(local: &ClockModel, leader: &ClockModel) -> Result<ClockModel, ClockError> {
    // a time on the leader's clock, on rank 0's
    let leader_to_ref = |u: u64| leader.to_reference(u);
    let o = |t: f64| {
        let ol = leader.offset_at_ref(t);
        ol + local.offset_at_ref(t + ol)
    };
    let k_l = leader.slope();
    let k_r = local.slope();
    let bound = leader.bound_ns + local.bound_ns + k_r.abs() * leader.bound_ns;
    let window = |t: f64, a: &WindowEstimate, b: &WindowEstimate| WindowEstimate {
        ref_ns: t.round().max(0.0) as u64,
        offset_ns: o(t.round().max(0.0)),
        bound_ns: bound,
        min_rtt_ns: a.min_rtt_ns + b.min_rtt_ns,
        samples: a.samples + b.samples,
    };
    let t1 = (leader.start.ref_ns as f64).max(leader_to_ref(local.start.ref_ns));
    let start = window(t1, &local.start, &leader.start);
    let shared_kernel_clock = local.shared_kernel_clock && leader.shared_kernel_clock;
    let (Some(le), Some(re), Some(dl), Some(dr)) =
        (leader.end, local.end, leader.drift_bound_ppm, local.drift_bound_ppm)
    else {
        return Ok(ClockModel {
            start,
            end: None,
            drift_ppm: None,
            drift_bound_ppm: None,
            bound_ns: bound,
            shared_kernel_clock,
        });
    };
    let t2 = (le.ref_ns as f64).min(leader_to_ref(re.ref_ns));
    if t2 <= t1 {
        return Err(ClockError::Unordered { start_ns: t1 as u64, end_ns: t2.max(0.0) as u64 });
    }
    let end = window(t2, &re, &le);
    let (dl, dr) = (dl * 1e-6, dr * 1e-6);
    let drift_bound = dl + dr + k_l.abs() * dr + k_r.abs() * dl + dl * dr;
    Ok(ClockModel {
        start,
        end: Some(end),
        drift_ppm: Some((k_l + k_r + k_l * k_r) * 1e6),
        drift_bound_ppm: Some(drift_bound * 1e6),
        bound_ns: bound,
        shared_kernel_clock,
    })
}

/// Affine clock model of one rank against rank 0.
#[derive(schemars::JsonSchema, Serialize, Deserialize, Clone, Copy, Debug, PartialEq)]
pub struct ClockModel {
    /// Start window estimate.
    pub start: WindowEstimate,
    /// End window estimate; absent when only one window was measured.
    pub end: Option<WindowEstimate>,
    /// Drift (d offset / d reference) in parts per million; absent when unmeasured.
    pub drift_ppm: Option<f64>,
    /// Uncertainty of the drift in ppm; absent when unmeasured.
    pub drift_bound_ppm: Option<f64>,
    /// Error bound in ns for times between the two windows.
    pub bound_ns: f64,
    /// This rank reads rank 0's kernel clock (same boot id and time
    /// namespace, no synthetic injection on either, every ping-pong sample
    /// consistent with one clock): offset, drift and bound are exactly 0 and
    /// the ping-pong fit, where one ran, is kept beside the model as evidence
    /// (`ClockRecord::pingpong_fit`). False in shards written before this field.
    #[serde(default)]
    pub shared_kernel_clock: bool,
}

impl ClockModel {
    /// Offset, drift and bound exactly 0 over the windows `start` and `end`.
    fn exact(start: WindowEstimate, end: Option<WindowEstimate>, shared_kernel_clock: bool) -> Self {
        Self { start, end, drift_ppm: Some(0.0), drift_bound_ppm: Some(0.0), bound_ns: 0.0, shared_kernel_clock }
    }

    /// Identity model for the reference rank itself.
    pub fn reference() -> Self {
        let w = WindowEstimate { ref_ns: 0, offset_ns: 0.0, bound_ns: 0.0, min_rtt_ns: 0, samples: 0 };
        Self::exact(w, Some(w), false)
    }

    /// Rank 0's own kernel clock, read by another rank: offset, drift and
    /// bound exactly 0. The windows keep the measured reference times, round
    /// trips and sample counts.
    pub fn shared_kernel_clock(measured: &ClockModel) -> Self {
        let zero = |w: WindowEstimate| WindowEstimate { offset_ns: 0.0, bound_ns: 0.0, ..w };
        Self::exact(zero(measured.start), measured.end.map(zero), true)
    }

    /// A kernel clock shared with its peer, taken without a ping-pong: exactly 0, windows at
    /// `start_ns` and `end_ns`, no samples (so `min_rtt_ns` 0 is unmeasured).
    pub fn shared_kernel_clock_unmeasured(start_ns: u64, end_ns: u64) -> Result<Self, ClockError> {
        if end_ns <= start_ns {
            return Err(ClockError::Unordered { start_ns, end_ns });
        }
        let w = |ref_ns| WindowEstimate { ref_ns, offset_ns: 0.0, bound_ns: 0.0, min_rtt_ns: 0, samples: 0 };
        Ok(Self::exact(w(start_ns), Some(w(end_ns)), true))
    }

    /// Fit from a start window and, optionally, an end window.
    pub fn fit(start: WindowEstimate, end: Option<WindowEstimate>) -> Result<Self, ClockError> {
        match end {
            None => Ok(Self {
                start,
                end: None,
                drift_ppm: None,
                drift_bound_ppm: None,
                bound_ns: start.bound_ns,
                shared_kernel_clock: false,
            }),
            Some(e) => {
                if e.ref_ns <= start.ref_ns {
                    return Err(ClockError::Unordered { start_ns: start.ref_ns, end_ns: e.ref_ns });
                }
                let span = (e.ref_ns - start.ref_ns) as f64;
                let slope = (e.offset_ns - start.offset_ns) / span;
                Ok(Self {
                    start,
                    end: Some(e),
                    drift_ppm: Some(slope * 1e6),
                    drift_bound_ppm: Some((start.bound_ns + e.bound_ns) / span * 1e6),
                    bound_ns: start.bound_ns.max(e.bound_ns),
                    shared_kernel_clock: false,
                })
            }
        }
    }

    fn slope(&self) -> f64 {
        self.drift_ppm.unwrap_or(0.0) * 1e-6
    }

    /// Estimated offset (local - reference) at reference time `ref_ns`.
    pub fn offset_at_ref(&self, ref_ns: f64) -> f64 {
        self.start.offset_ns + self.slope() * (ref_ns - self.start.ref_ns as f64)
    }

    /// Map a local clock reading onto rank 0's timebase.
    pub fn to_reference(&self, local_ns: u64) -> f64 {
        // local = ref + o0 + k (ref - r0)  =>  ref = (local - o0 + k r0) / (1 + k)
        let k = self.slope();
        (local_ns as f64 - self.start.offset_ns + k * self.start.ref_ns as f64) / (1.0 + k)
    }
}

/// One round trip that anchors the device timer to the host clock: the host
/// read its clock, recorded an event on an idle stream, polled it until
/// complete and read its clock again. The device wrote the event's timestamp
/// somewhere between the two reads.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct DeviceRoundTrip {
    /// Host clock just before the event was recorded.
    pub host_before_ns: u64,
    /// Host clock just after the host saw the event complete.
    pub host_after_ns: u64,
    /// Device time of the event relative to the window's first event, ns.
    pub device_ns: f64,
}

/// Host time of a window's first device event, from the intersection of the
/// round trips' feasible intervals.
#[derive(schemars::JsonSchema, Serialize, Deserialize, Clone, Copy, Debug, PartialEq)]
pub struct DeviceAnchorEstimate {
    /// Estimated host time of the window's first event, ns.
    pub host_ns: f64,
    /// Half-width of the feasible interval (or half the disagreement, when the
    /// round trips' intervals do not intersect because of timer resolution).
    pub bound_ns: f64,
    /// Narrowest single round trip, ns.
    pub best_rtt_ns: u64,
    /// Round trips in the window.
    pub samples: u32,
}

/// Intersect the feasible intervals of a window's round trips: never wider than the narrowest
/// (docs/METHODS.md, "Clock models in code").
pub fn estimate_device_anchor(trips: &[DeviceRoundTrip]) -> Result<DeviceAnchorEstimate, ClockError> {
    if trips.is_empty() {
        return Err(ClockError::EmptyWindow);
    }
    let lo = trips.iter().map(|t| t.host_before_ns as f64 - t.device_ns).fold(f64::NEG_INFINITY, f64::max);
    let hi = trips.iter().map(|t| t.host_after_ns as f64 - t.device_ns).fold(f64::INFINITY, f64::min);
    let best = trips.iter().map(|t| t.host_after_ns.saturating_sub(t.host_before_ns)).min().unwrap_or(0);
    Ok(DeviceAnchorEstimate {
        host_ns: (lo + hi) / 2.0,
        bound_ns: (hi - lo).abs() / 2.0,
        best_rtt_ns: best,
        samples: trips.len() as u32,
    })
}

/// A kernel that stamped the device's timer as its first and last
/// instruction, and the start and end a kernel timer (CUPTI's activity
/// record) reported for it.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct StampedKernel {
    /// Kernel timer: start.
    pub timer_start_ns: u64,
    /// Kernel timer: end.
    pub timer_end_ns: u64,
    /// Device timer read by the kernel's first instruction.
    pub stamp_entry_ns: u64,
    /// Device timer read by its last.
    pub stamp_exit_ns: u64,
}

/// Offset of a kernel timer from the device timer, `timer = device + offset`.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct TimerOffset {
    /// Midpoint of the feasible offsets, ns.
    pub offset_ns: f64,
    /// Half-width of the feasible offsets, ns.
    pub bound_ns: f64,
    /// Kernels intersected.
    pub samples: u32,
}

/// Bracket a kernel timer's offset `c` from the device timer (`timer = device + c`) by intersecting
/// its stamped kernels' intervals; refuses an empty intersection (docs/METHODS.md, "Clock models in code").
pub fn bracket_timer_offset(kernels: &[StampedKernel]) -> Result<TimerOffset, ClockError> {
    if kernels.is_empty() {
        return Err(ClockError::EmptyWindow);
    }
    let lo = kernels.iter().map(|k| k.timer_start_ns as i64 - k.stamp_entry_ns as i64).max().expect("non-empty");
    let hi = kernels.iter().map(|k| k.timer_end_ns as i64 - k.stamp_exit_ns as i64).min().expect("non-empty");
    if lo > hi {
        return Err(ClockError::NoCommonOffset { lo_ns: lo, hi_ns: hi });
    }
    Ok(TimerOffset {
        offset_ns: (lo + hi) as f64 / 2.0,
        bound_ns: (hi - lo) as f64 / 2.0,
        samples: kernels.len() as u32,
    })
}

/// Affine map from device time (ns since the start window's first event) to the host clock,
/// fitted from a window at each end of a pass (docs/METHODS.md, "Clock models in code").
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct DeviceTimeMap {
    /// Host time of device time 0.
    pub host0_ns: f64,
    /// Host ns per device ns.
    pub rate: f64,
    /// Error bound of the map inside the pass, ns.
    pub bound_ns: f64,
}

impl DeviceTimeMap {
    /// Fit from the start window and, where measured, the end window with the
    /// device time of its first event (relative to the start window's first event).
    pub fn fit(start: DeviceAnchorEstimate, end: Option<(DeviceAnchorEstimate, f64)>) -> Self {
        match end {
            Some((e, span_device_ns)) if span_device_ns > 0.0 => Self {
                host0_ns: start.host_ns,
                rate: (e.host_ns - start.host_ns) / span_device_ns,
                bound_ns: start.bound_ns.max(e.bound_ns),
            },
            _ => Self { host0_ns: start.host_ns, rate: 1.0, bound_ns: start.bound_ns },
        }
    }

    /// Host time of a device time.
    pub fn to_host_ns(&self, device_ns: f64) -> u64 {
        (self.host0_ns + device_ns * self.rate).max(0.0) as u64
    }
}

/// Map from a kernel timer (CUPTI's activity timestamps) to the host clock through the device
/// timer: [`bracket_timer_offset`] per window, then [`DeviceTimeMap`], the offset interpolated between.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct KernelTimerMap {
    device: DeviceTimeMap,
    device0_ns: u64,
    /// (timer time, offset) at the start window and, where measured, the end window.
    offsets: [(f64, f64); 2],
    /// Error bound of a mapped kernel time, ns: the host map's bound, the
    /// larger offset bracket's half-width and the device timer's step.
    pub bound_ns: f64,
}

/// One window of a kernel timer anchor: the host estimate of the device
/// timer reading `device0_ns`, and the kernel timer's offset bracket.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct KernelTimerWindow {
    /// Host time of `device0_ns`.
    pub estimate: DeviceAnchorEstimate,
    /// The window's first device timer reading.
    pub device0_ns: u64,
    /// The kernel timer's offset from the device timer in this window.
    pub offset: TimerOffset,
}

impl KernelTimerMap {
    /// Fit from a start window, an end window where measured, and the device timer's step.
    pub fn fit(start: KernelTimerWindow, end: Option<KernelTimerWindow>, resolution_ns: u64) -> Self {
        let span = end.map(|e| (e.estimate, e.device0_ns as f64 - start.device0_ns as f64));
        let device = DeviceTimeMap::fit(start.estimate, span);
        let at = |w: &KernelTimerWindow| (w.device0_ns as f64 + w.offset.offset_ns, w.offset.offset_ns);
        let s = at(&start);
        let e = end.as_ref().map_or(s, at);
        let offset_bound = end.map_or(start.offset.bound_ns, |e| e.offset.bound_ns.max(start.offset.bound_ns));
        Self {
            device,
            device0_ns: start.device0_ns,
            offsets: [s, e],
            bound_ns: device.bound_ns + offset_bound + resolution_ns as f64,
        }
    }

    /// Host time of a kernel timer reading.
    pub fn to_host_ns(&self, timer_ns: u64) -> u64 {
        let [(t0, c0), (t1, c1)] = self.offsets;
        let t = timer_ns as f64;
        let c = if t1 > t0 { c0 + (c1 - c0) * ((t - t0) / (t1 - t0)).clamp(0.0, 1.0) } else { c0 };
        self.device.to_host_ns(t - c - self.device0_ns as f64)
    }
}

/// Wall-clock milliseconds since the Unix epoch (0 before it): the dates of
/// records (`started_unix_ms`, `planned_unix_ms`), never an interval.
pub(crate) fn unix_ms() -> u64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.as_millis() as u64).unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn timer_offset_is_bracketed_by_entry_and_exit_stamps() {
        // timer = device - 205_000; each kernel starts 300 ns before its first instruction
        // and ends 250..400 ns after its last
        let k = |entry: u64, exit: u64, lag_end: u64| StampedKernel {
            timer_start_ns: entry - 300 - 205_000,
            timer_end_ns: exit + lag_end - 205_000,
            stamp_entry_ns: entry,
            stamp_exit_ns: exit,
        };
        let o = bracket_timer_offset(&[k(1_000_000, 1_001_000, 400), k(2_000_000, 2_005_000, 250)]).unwrap();
        // feasible [-205_300, -204_750]
        assert_eq!((o.offset_ns, o.bound_ns, o.samples), (-205_025.0, 275.0, 2));
        assert!((o.offset_ns - -205_000.0).abs() <= o.bound_ns);
        // a timer that moved between kernels admits no common offset
        let mut moved = k(3_000_000, 3_001_000, 250);
        moved.timer_start_ns += 5_000;
        moved.timer_end_ns += 5_000;
        assert!(matches!(
            bracket_timer_offset(&[k(1_000_000, 1_001_000, 400), moved]),
            Err(ClockError::NoCommonOffset { .. })
        ));
        assert!(matches!(bracket_timer_offset(&[]), Err(ClockError::EmptyWindow)));
    }

    #[test]
    fn kernel_timer_map_recovers_host_time_within_its_bound() {
        // device timer = host + 1_000_000 + 3 ppm drift; kernel timer = device - 205_000 + 40 ns over the pass
        let host_of_dev = |d: f64| (d - 1_000_000.0) / (1.0 + 3e-6);
        let win = |d0: u64, off: f64| KernelTimerWindow {
            estimate: DeviceAnchorEstimate {
                host_ns: host_of_dev(d0 as f64) + 300.0,
                bound_ns: 900.0,
                best_rtt_ns: 1900,
                samples: 64,
            },
            device0_ns: d0,
            offset: TimerOffset { offset_ns: off + 100.0, bound_ns: 300.0, samples: 8 },
        };
        let m = KernelTimerMap::fit(win(50_000_000, -205_000.0), Some(win(1_050_000_000, -204_960.0)), 32);
        assert_eq!(m.bound_ns, 900.0 + 300.0 + 32.0);
        for d in [50_000_000.0_f64, 300_000_000.0, 1_050_000_000.0] {
            let timer = d - 205_000.0 + 40.0 * (d - 50e6) / 1e9;
            let got = m.to_host_ns(timer.round() as u64) as f64;
            assert!((got - host_of_dev(d)).abs() <= m.bound_ns, "device {d}: {got} vs {}", host_of_dev(d));
        }
        // one window: the offset is held, the rate taken as 1
        let m1 = KernelTimerMap::fit(win(50_000_000, -205_000.0), None, 32);
        assert!((m1.to_host_ns(50_000_000 - 205_000) as f64 - host_of_dev(50e6)).abs() <= m1.bound_ns);
    }

    /// Exchanges against a reference clock with `local = true + offset + drift (true - anchor)`.
    fn simulate(start_true: u64, n: usize, offset_ns: f64, drift_ppm: f64, jitter: &[u64]) -> Vec<PingSample> {
        exchange(start_true as f64, n, |t| t + offset_ns + drift_ppm * 1e-6 * t, |t| t, jitter)
    }

    #[test]
    fn empty_window_is_refused() {
        assert_eq!(estimate_window(&[]), Err(ClockError::EmptyWindow));
    }

    #[test]
    fn reference_model_is_identity() {
        let m = ClockModel::reference();
        assert_eq!(m.to_reference(123_456), 123_456.0);
    }

    #[test]
    fn a_shared_kernel_clock_is_exact_only_when_every_sample_agrees() {
        // one clock: rank 0 answers between our two reads
        let window = |t0: u64| -> Vec<PingSample> {
            let at = |i: u64, d: u64| t0 + d + i * 100;
            (0..8)
                .map(|i| PingSample { t_send_local_ns: at(i, 0), t_ref_ns: at(i, 30), t_recv_local_ns: at(i, 70) })
                .collect()
        };
        let (one, later) = (window(1_000), window(1_001_000));
        let fit = fit_rank_model(&one, &later, None).unwrap();
        assert_eq!(fit.refused, None);
        let m = fit.model;
        assert!(m.shared_kernel_clock);
        assert_eq!(
            (m.bound_ns, m.start.offset_ns, m.start.bound_ns, m.drift_ppm, m.drift_bound_ppm),
            (0.0, 0.0, 0.0, Some(0.0), Some(0.0))
        );
        assert_eq!(m.to_reference(123_456), 123_456.0);
        assert_eq!(m.offset_at_ref(5e6), 0.0);
        // the measured fit stays as evidence: midpoint 5 ns, half-width 35 ns
        let p = fit.pingpong.unwrap();
        assert_eq!((p.start.offset_ns, p.start.bound_ns, p.shared_kernel_clock), (5.0, 35.0, false));
        assert_eq!((m.start.ref_ns, m.start.min_rtt_ns, m.start.samples), (p.start.ref_ns, 70, 8));
        // another kernel, namespace, injection or mode: the measured fit, and why
        let fit = fit_rank_model(&one, &later, Some("boot ids differ".into())).unwrap();
        assert_eq!(
            (fit.model.shared_kernel_clock, fit.model.bound_ns, fit.pingpong, fit.refused.as_deref()),
            (false, 35.0, None, Some("boot ids differ"))
        );
        // one sample outside one clock: the measured fit even on one kernel, naming the sample
        let mut shifted = later.clone();
        shifted[3].t_ref_ns = shifted[3].t_recv_local_ns + 1;
        assert_eq!(first_sample_off_one_clock(&shifted), Some(3));
        let fit = fit_rank_model(&one, &shifted, None).unwrap();
        assert!(!fit.model.shared_kernel_clock);
        assert!(fit.refused.unwrap().contains("end-window sample 3"));
        assert_eq!(first_sample_off_one_clock(&one), None);
    }

    /// Ping-pong samples of a clock `local(true)` against a reference
    /// clock `reference(true)`, with forward and backward delays from `jitter`.
    fn exchange(
        start_true: f64,
        n: usize,
        local: impl Fn(f64) -> f64,
        reference: impl Fn(f64) -> f64,
        jitter: &[u64],
    ) -> Vec<PingSample> {
        (0..n)
            .map(|i| {
                let t0 = start_true + i as f64 * 10_000.0;
                let fwd = 500.0 + jitter[i % jitter.len()] as f64;
                let back = 500.0 + jitter[(i * 7 + 3) % jitter.len()] as f64;
                PingSample {
                    t_send_local_ns: local(t0) as u64,
                    t_ref_ns: reference(t0 + fwd) as u64,
                    t_recv_local_ns: local(t0 + fwd + back) as u64,
                }
            })
            .collect()
    }

    fn fit2(a: &[PingSample], b: &[PingSample]) -> ClockModel {
        ClockModel::fit(estimate_window(a).unwrap(), Some(estimate_window(b).unwrap())).unwrap()
    }

    #[test]
    fn node_leaders_are_the_lowest_rank_of_each_host() {
        assert_eq!(node_leaders(&["a", "a", "b", "b", "a", "c"]), vec![0, 0, 2, 2, 0, 5]);
        assert_eq!(node_leaders(&["x", "y", "x"]), vec![0, 1, 0]);
        assert!(node_leaders::<&str>(&[]).is_empty());
    }

    #[test]
    fn composed_bound_is_the_sum_of_the_legs_without_drift() {
        // leader 1 ms ahead of rank 0, the rank 3 us behind its leader; no drift
        let leader = |t: f64| t + 1_000_000.0;
        let rank = |t: f64| leader(t) - 3_000.0;
        let id = |t: f64| t;
        let l = fit2(&exchange(1e9, 20, leader, id, &[0, 400]), &exchange(3e9, 20, leader, id, &[0, 400]));
        let r = fit2(&exchange(1.1e9, 20, rank, leader, &[0, 100]), &exchange(3.1e9, 20, rank, leader, &[0, 100]));
        let c = compose(&r, &l).unwrap();
        // no drift: the sum, up to the second-order terms of an estimated slope near 0
        assert!(
            (c.bound_ns - (l.bound_ns + r.bound_ns)).abs() < 1e-6,
            "{} vs {} + {}",
            c.bound_ns,
            l.bound_ns,
            r.bound_ns
        );
        assert!(c.drift_ppm.unwrap().abs() < 1e-3, "{:?}", c.drift_ppm);
        assert!((c.drift_bound_ppm.unwrap() - (l.drift_bound_ppm.unwrap() + r.drift_bound_ppm.unwrap())).abs() < 1e-6);
        // windows where both hold: the rank's later start, the leader's earlier end
        assert!((c.start.ref_ns as f64 - 1.1e9).abs() < 2_000.0, "{}", c.start.ref_ns);
        assert!((c.end.unwrap().ref_ns as f64 - 3e9).abs() < 2_000.0, "{}", c.end.unwrap().ref_ns);
        assert_eq!(c.start.samples, 40);
        assert_eq!(c.start.min_rtt_ns, l.start.min_rtt_ns + r.start.min_rtt_ns);
        assert!((c.start.offset_ns - 997_000.0).abs() <= c.bound_ns, "{}", c.start.offset_ns);
        assert!(!c.shared_kernel_clock);
        // both legs the shared kernel clock: exactly that
        let (sl, sr) = (ClockModel::shared_kernel_clock(&l), ClockModel::shared_kernel_clock(&r));
        let s = compose(&sr, &sl).unwrap();
        assert!(s.shared_kernel_clock);
        assert_eq!((s.bound_ns, s.start.offset_ns, s.drift_ppm, s.drift_bound_ppm), (0.0, 0.0, Some(0.0), Some(0.0)));
        // one leg shared: the other leg's model, bound and all
        let h = compose(&sr, &l).unwrap();
        assert!(!h.shared_kernel_clock);
        assert_eq!(h.bound_ns, l.bound_ns);
        // one window on either leg: one window, drift unmeasured
        let one = ClockModel::fit(r.start, None).unwrap();
        let c1 = compose(&one, &l).unwrap();
        assert_eq!(
            (c1.end, c1.drift_ppm, c1.drift_bound_ppm, c1.bound_ns),
            (None, None, None, l.bound_ns + r.start.bound_ns)
        );
        // legs whose windows do not overlap in time are refused
        let early = fit2(&exchange(1e8, 5, rank, leader, &[0]), &exchange(2e8, 5, rank, leader, &[0]));
        assert!(matches!(compose(&early, &l), Err(ClockError::Unordered { .. })));
    }

    proptest! {
        #[test]
        fn composed_model_recovers_the_rank_within_its_bound(
            leader_off_us in -5_000.0f64..5_000.0,
            leader_ppm in -200.0f64..200.0,
            rank_off_us in -5_000.0f64..5_000.0,
            rank_ppm in -200.0f64..200.0,
            jl in proptest::collection::vec(0u64..20_000, 1..16),
            jr in proptest::collection::vec(0u64..20_000, 1..16),
        ) {
            // true time t; leader = t + a + p t; rank = leader + b + q leader
            let leader = move |t: f64| t + leader_off_us * 1e3 + leader_ppm * 1e-6 * t;
            let rank = move |t: f64| { let u = leader(t); u + rank_off_us * 1e3 + rank_ppm * 1e-6 * u };
            let id = |t: f64| t;
            let l = fit2(&exchange(1e9, 40, leader, id, &jl), &exchange(3e9, 40, leader, id, &jl));
            let r = fit2(&exchange(1.002e9, 40, rank, leader, &jr), &exchange(3.002e9, 40, rank, leader, &jr));
            let c = compose(&r, &l).unwrap();
            // integer truncation of the simulated reads: at most 2 ns per leg
            for t in [c.start.ref_ns as f64, 2e9, c.end.unwrap().ref_ns as f64] {
                let truth = rank(t) - t;
                prop_assert!((c.offset_at_ref(t) - truth).abs() <= c.bound_ns + 4.0, "t {} offset {} truth {} bound \
                    {}", t, c.offset_at_ref(t), truth, c.bound_ns);
                prop_assert!((c.to_reference(rank(t) as u64) - t).abs() <= c.bound_ns * (1.0 + 1e-3) + 6.0);
            }
            let truth_ppm = ((1.0 + leader_ppm * 1e-6) * (1.0 + rank_ppm * 1e-6) - 1.0) * 1e6;
            prop_assert!((c.drift_ppm.unwrap() - truth_ppm).abs() <= c.drift_bound_ppm.unwrap() + 1e-3,
                "drift {} truth {} bound {}", c.drift_ppm.unwrap(), truth_ppm, c.drift_bound_ppm.unwrap());
            prop_assert!(c.bound_ns >= l.bound_ns + r.bound_ns);
        }
    }

    #[test]
    fn unordered_windows_refused() {
        let w = estimate_window(&simulate(1_000_000, 4, 0.0, 0.0, &[0])).unwrap();
        assert!(matches!(ClockModel::fit(w, Some(w)), Err(ClockError::Unordered { .. })));
    }

    proptest! {
        #[test]
        fn recovers_offset_and_drift_within_bound(
            offset_us in -5_000.0f64..5_000.0,
            drift_ppm in -200.0f64..200.0,
            jitter in proptest::collection::vec(0u64..20_000, 1..16),
        ) {
            let offset_ns = offset_us * 1e3;
            let m = fit2(
                &simulate(1_000_000_000, 50, offset_ns, drift_ppm, &jitter),
                &simulate(3_000_000_000, 50, offset_ns, drift_ppm, &jitter),
            );
            // truth at the start window's reference time
            let r0 = m.start.ref_ns as f64;
            let truth0 = offset_ns + drift_ppm * 1e-6 * r0;
            // integer truncation of simulated reads adds at most 2 ns
            prop_assert!((m.start.offset_ns - truth0).abs() <= m.start.bound_ns + 2.0,
                "offset {} truth {} bound {}", m.start.offset_ns, truth0, m.start.bound_ns);
            let d = m.drift_ppm.unwrap();
            prop_assert!((d - drift_ppm).abs() <= m.drift_bound_ppm.unwrap() + 1e-3,
                "drift {} truth {} bound {}", d, drift_ppm, m.drift_bound_ppm.unwrap());
            // mapping a local read of a true instant back lands within the bound
            let t_true = 2_000_000_000.0;
            let local = t_true + offset_ns + drift_ppm * 1e-6 * t_true;
            let back = m.to_reference(local as u64);
            prop_assert!((back - t_true).abs() <= m.bound_ns * (1.0 + drift_ppm.abs() * 1e-6) + 4.0);
        }
    }

    #[test]
    fn device_anchor_intersection_is_never_wider_than_the_best_trip() {
        // truth: first event at host 1_000_000; device offsets 0, 10 us, 20 us
        let trip = |before: u64, after: u64, d: f64| DeviceRoundTrip {
            host_before_ns: before,
            host_after_ns: after,
            device_ns: d,
        };
        let trips = [
            trip(999_000, 1_004_000, 0.0),        // [999_000, 1_004_000]
            trip(1_009_800, 1_013_000, 10_000.0), // [999_800, 1_003_000]
            trip(1_017_000, 1_020_300, 20_000.0), // [997_000, 1_000_300]
        ];
        let e = estimate_device_anchor(&trips).unwrap();
        assert_eq!(e.host_ns, (999_800.0 + 1_000_300.0) / 2.0);
        assert_eq!(e.bound_ns, 250.0);
        assert_eq!(e.best_rtt_ns, 3_200);
        assert!((e.host_ns - 1_000_000.0).abs() <= e.bound_ns);
        assert_eq!(estimate_device_anchor(&[]), Err(ClockError::EmptyWindow));
    }

    proptest! {
        #[test]
        fn device_map_recovers_rate_within_bound(
            rate_ppm in -100.0f64..100.0,
            delays in proptest::collection::vec((200u64..4_000, 200u64..4_000), 4..32),
        ) {
            // device ns d maps to host h0 + d (1 + rate); each trip waits fwd before the event and back after
            let h0 = 5_000_000_000.0f64;
            let rate = 1.0 + rate_ppm * 1e-6;
            let window = |start_d: f64| -> Vec<DeviceRoundTrip> {
                delays.iter().enumerate().map(|(i, &(fwd, back))| {
                    let d = start_d + i as f64 * 20_000.0;
                    let h = h0 + d * rate;
                    DeviceRoundTrip {
                        host_before_ns: (h - fwd as f64).floor() as u64,
                        host_after_ns: (h + back as f64).ceil() as u64,
                        device_ns: d - start_d,
                    }
                }).collect()
            };
            let a = estimate_device_anchor(&window(0.0)).unwrap();
            let span = 2e9;
            let b = estimate_device_anchor(&window(span)).unwrap();
            let m = DeviceTimeMap::fit(a, Some((b, span)));
            for d in [0.0, 1e6, 1e9, span] {
                let truth = h0 + d * rate;
                prop_assert!((m.to_host_ns(d) as f64 - truth).abs() <= m.bound_ns + 2.0, "d {} err {} bound \
                    {}", d, m.to_host_ns(d) as f64 - truth, m.bound_ns);
            }
        }
    }
}
