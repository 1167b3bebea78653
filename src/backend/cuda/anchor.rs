//! Where a pass's device timeline lies on the host clock: the anchor
//! windows at the start and end of every pass (event round trips on the idle
//! compute stream, their feasible intervals intersected), the event timer's
//! measured granularity, and with `--cupti` the `%globaltimer` windows that
//! place kernel records. Consumes the backend's streams and pooled events;
//! produces [`crate::core::clock::DeviceAnchorEstimate`]s and the kernel
//! timer map a pass's intervals are mapped with; refuses (an error naming
//! the call) when a driver call fails.
use super::*;
use crate::backend::cuda::cupti::RawKernel;
use crate::core::clock::{self, DeviceAnchorEstimate, DeviceRoundTrip, KernelTimerMap};
use crate::evidence::shard::KernelAnchor;
use cudarc::driver::result::event;

/// Round trips per anchor window (start and end of every pass).
pub(super) const ANCHOR_ROUND_TRIPS: usize = 24;

/// The start window of a pass: its first event (device time 0 of the pass)
/// and where that event lies on the host clock.
pub(super) struct Anchor {
    /// Index into the pass's events of the window's first event.
    pub(super) event: usize,
    pub(super) estimate: DeviceAnchorEstimate,
    /// CUPTI's clock against the host clock: (cupti ns, host ns, error ns).
    pub(super) cupti: Option<(u64, u64, u64)>,
    /// `%globaltimer` on the host clock at the pass start (with `--cupti`).
    pub(super) timer: Option<globaltimer::TimerWindow>,
}

/// Round trips per `%globaltimer` window: more than the event windows',
/// since a trip costs one small launch and the intersection narrows with
/// every trip whose two legs are short (on one H200: 24 trips gave 1.6 µs,
/// 96 gave 1.1-1.5 µs, 400 gave 0.9 µs; a trip takes about 8 µs).
pub(super) const TIMER_ROUND_TRIPS: usize = 256;
/// Stamping kernels per `%globaltimer` window.
pub(super) const TIMER_STAMPS: usize = 8;

impl CudaBackend {
    /// Measure the event timer's granularity (the greatest common divisor of
    /// the device times of events recorded back to back, in whole ns) and
    /// record it among the device facts; the documented 0.5 µs stays where the
    /// measurement is inconclusive.
    pub(super) fn measure_timer_granularity(&mut self) -> Result<()> {
        let times = self.event_timer_probe(32)?;
        let gcd = |mut a: u64, mut b: u64| {
            while b != 0 {
                (a, b) = (b, a % b);
            }
            a
        };
        let g = times.iter().map(|t| t.round() as u64).filter(|&t| t > 0).fold(0, gcd);
        if (1..=(EVENT_RESOLUTION_NS as u64)).contains(&g) {
            self.timer_granularity_ns = g as f64;
        }
        self.device.facts.push((
            "event_timer_granularity_ns".into(),
            format!(
                "{} (gcd of {} back-to-back event times; the CUDA documentation's figure is {EVENT_RESOLUTION_NS})",
                self.timer_granularity_ns,
                times.len()
            ),
        ));
        Ok(())
    }

    /// One anchor window on the idle compute stream: `ANCHOR_ROUND_TRIPS` round
    /// trips (docs/GPU.md, "The anchor window's round trips"). Returns the
    /// window's first event (kept among the pass's events) and the
    /// intersection of the trips' feasible intervals.
    pub(super) fn anchor_window(&mut self) -> Result<(usize, DeviceAnchorEstimate)> {
        let mut trips = [(0u64, 0u64); ANCHOR_ROUND_TRIPS];
        let mut events = Vec::with_capacity(ANCHOR_ROUND_TRIPS);
        for trip in trips.iter_mut() {
            let e = self.pooled_event()?;
            if let Some((host, dev)) = self.release {
                self.release_count = self.release_count.wrapping_add(1).max(1);
                let want = self.release_count;
                let stream = self.compute.cu_stream();
                // SAFETY: `dev` maps two live 4-byte host words of this context; the stream is this context's.
                unsafe {
                    drv(
                        drv_sys::cuStreamWaitValue32_v2(
                            stream,
                            dev,
                            want,
                            drv_sys::CUstreamWaitValue_flags::CU_STREAM_WAIT_VALUE_EQ as u32,
                        )
                        .result(),
                        "cuStreamWaitValue32 (anchor)",
                    )?;
                    drv(event::record(e.cu_event(), stream), "cuEventRecord (anchor)")?;
                    drv(
                        drv_sys::cuStreamWriteValue32_v2(stream, dev + 4, want, 0).result(),
                        "cuStreamWriteValue32 (anchor)",
                    )?;
                }
                let before = self.clock.now_ns();
                // SAFETY: live, aligned host words; only this thread writes the first, the device the second.
                unsafe { std::ptr::write_volatile(host, want) };
                let t0 = std::time::Instant::now();
                // SAFETY: as above.
                while unsafe { std::ptr::read_volatile(host.add(1)) } != want {
                    if t0.elapsed() > std::time::Duration::from_secs(10) {
                        bail!("anchor: the device did not acknowledge a released wait within 10 s");
                    }
                    std::hint::spin_loop();
                }
                *trip = (before, self.clock.now_ns());
                events.push(e);
                continue;
            }
            let before = self.clock.now_ns();
            drv(e.record(&self.compute), "cuEventRecord (anchor)")?;
            loop {
                // SAFETY: a live event of this context.
                match unsafe { event::query(e.cu_event()) } {
                    Ok(()) => break,
                    Err(err) if err.0 == drv_sys::cudaError_enum::CUDA_ERROR_NOT_READY => std::hint::spin_loop(),
                    Err(err) => bail!("cuEventQuery (anchor): CUDA error {err:?}"),
                }
            }
            *trip = (before, self.clock.now_ns());
            events.push(e);
        }
        let mut rt = Vec::with_capacity(ANCHOR_ROUND_TRIPS);
        for (e, &(before, after)) in events.iter().zip(&trips) {
            let ms = drv(events[0].elapsed_ms(e), "cuEventElapsedTime (anchor)")? as f64;
            rt.push(DeviceRoundTrip { host_before_ns: before, host_after_ns: after, device_ns: ms * 1e6 });
        }
        let est = clock::estimate_device_anchor(&rt).map_err(|e| anyhow::anyhow!("anchor window: {e}"))?;
        self.tail[0] = None;
        let mut events = events.into_iter();
        let first = events.next().expect("ANCHOR_ROUND_TRIPS > 0");
        self.free_events.extend(events);
        self.pass_events.push(first);
        Ok((self.pass_events.len() - 1, est))
    }

    /// At the first device operation of a pass (streams idle), anchor the device timeline.
    pub(super) fn ensure_anchor(&mut self) -> Result<()> {
        if self.anchor.is_some() {
            return Ok(());
        }
        let (event, estimate) = self.anchor_window()?;
        let cupti = match &self.cupti {
            Some(c) => {
                // start from an empty collection: earlier kernels belong to no pass
                let _ = c.drain()?;
                let h1 = self.clock.now_ns();
                let ts = c.timestamp()?;
                let h2 = self.clock.now_ns();
                Some((ts, h1 + (h2 - h1) / 2, (h2 - h1).div_ceil(2)))
            }
            None => None,
        };
        let timer = self.timer_window()?;
        self.anchor = Some(Anchor { event, estimate, cupti, timer });
        Ok(())
    }

    /// A `%globaltimer` window on the idle compute stream, where the anchor is loaded.
    pub(super) fn timer_window(&mut self) -> Result<Option<globaltimer::TimerWindow>> {
        let (Ok(t), Some(_)) = (&mut self.timer, &self.cupti) else {
            return Ok(None);
        };
        let clock = &self.clock;
        let w = t.window(&self.compute, &mut || clock.now_ns(), TIMER_ROUND_TRIPS, TIMER_STAMPS)?;
        self.tail[0] = None;
        Ok(Some(w))
    }

    /// The kernel timer map of a pass from its start and end `%globaltimer`
    /// windows and the stamping kernels' CUPTI records among `raw`; the
    /// reason where they do not fit together.
    pub(super) fn kernel_timer_map(
        start: &globaltimer::TimerWindow,
        end: &globaltimer::TimerWindow,
        raw: &[RawKernel],
        cupti_own: Option<(u64, u64, u64)>,
    ) -> std::result::Result<(KernelTimerMap, KernelAnchor), String> {
        use crate::core::clock::{bracket_timer_offset, KernelTimerMap, KernelTimerWindow, StampedKernel};
        let mut stamps: Vec<_> = raw.iter().filter(|k| k.name == globaltimer::STAMP_KERNEL_NAME).cloned().collect();
        // launch order
        stamps.sort_by_key(|k| k.correlation);
        let want = start.stamps.len() + end.stamps.len();
        if stamps.len() != want {
            return Err(format!("CUPTI recorded {} of the {want} stamping kernels", stamps.len()));
        }
        let pair =
            |w: &globaltimer::TimerWindow, recs: &[RawKernel]| -> std::result::Result<KernelTimerWindow, String> {
                let k: Vec<StampedKernel> = w
                    .stamps
                    .iter()
                    .zip(recs)
                    .map(|(&(entry, exit), r)| StampedKernel {
                        timer_start_ns: r.start,
                        timer_end_ns: r.end,
                        stamp_entry_ns: entry,
                        stamp_exit_ns: exit,
                    })
                    .collect();
                let offset = bracket_timer_offset(&k).map_err(|e| e.to_string())?;
                Ok(KernelTimerWindow { estimate: w.estimate, device0_ns: w.first_timer_ns, offset })
            };
        let (s, e) = (pair(start, &stamps[..start.stamps.len()])?, pair(end, &stamps[start.stamps.len()..])?);
        if end.first_timer_ns <= start.first_timer_ns {
            return Err("the end window's %globaltimer reading does not follow the start window's".into());
        }
        let resolution = start.resolution_ns.max(end.resolution_ns);
        let map = KernelTimerMap::fit(s, Some(e), resolution);
        let own = cupti_own.map(|(ts0, host0, _)| {
            let first = &stamps[0];
            (host0 as f64 + first.start as f64 - ts0 as f64) - map.to_host_ns(first.start) as f64
        });
        let anchor = KernelAnchor {
            error_ns: map.bound_ns.ceil() as u64,
            globaltimer_bound_ns: s.estimate.bound_ns.max(e.estimate.bound_ns),
            cupti_offset_bound_ns: s.offset.bound_ns.max(e.offset.bound_ns),
            globaltimer_resolution_ns: resolution,
            best_round_trip_ns: s.estimate.best_rtt_ns.min(e.estimate.best_rtt_ns),
            round_trips: s.estimate.samples,
            stamp_kernels: start.stamps.len() as u32,
            cupti_minus_globaltimer_ns: s.offset.offset_ns,
            cupti_own_minus_anchored_ns: own,
        };
        Ok((map, anchor))
    }

    /// The anchor windows (start, end) of the last finished pass.
    pub fn last_anchor_windows(&self) -> Option<(DeviceAnchorEstimate, DeviceAnchorEstimate)> {
        self.last_anchor_windows
    }
}
