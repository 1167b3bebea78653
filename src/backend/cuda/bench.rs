//! Instrument probes for the overhead benchmark: a bare `ncclAllReduce` loop
//! as the reference (with or without one event per call), the event timer's
//! back-to-back spacing, and switching CUPTI kernel records on or off. The
//! loops and the probe synchronize before and after and return their events
//! to the pool: call them between passes. Refuses an all-reduce the buffers
//! were not prepared for, and CUPTI switching where CUPTI was not started.
use super::*;
use crate::core::collective;
use cudarc::driver::result::event;

impl CudaBackend {
    /// Reference for the overhead benchmark: `iters` back-to-back
    /// `ncclAllReduce` calls on the comm stream and nothing else, with the
    /// host clock read before each call and after the last, an event before
    /// the first and one after the last. Returns the host clock reads (ns)
    /// and the device ns per collective.
    pub fn reference_loop(&mut self, bytes: u64, iters: u32) -> Result<(Vec<u64>, f64)> {
        self.reference_loop_marked(bytes, iters, false)
    }

    /// [`Self::reference_loop`] with, where `events`, one pooled timing
    /// event recorded before each call and nothing else: what the
    /// instrument's timestamp costs in this loop, apart from its bookkeeping.
    pub fn reference_loop_marked(&mut self, bytes: u64, iters: u32, events: bool) -> Result<(Vec<u64>, f64)> {
        let count = crate::backend::issue_count(
            collective::CollectiveKind::AllReduce,
            self.pending.is_some(),
            bytes,
            Dtype::F32,
            self.dtype,
            self.send.len() as u64,
        )?;
        self.synchronize()?;
        drv(self.ctx.bind_to_thread(), "binding the CUDA context")?;
        let start = self.pooled_event()?;
        let end = self.pooled_event()?;
        let (sp, rp) = self.buffers();
        let stream = self.comm_stream.cu_stream();
        let mut host = Vec::with_capacity(iters as usize + 1);
        // SAFETY: live events and stream of this context.
        drv(unsafe { event::record(start.cu_event(), stream) }, "cuEventRecord")?;
        let marks: Vec<CudaEvent> =
            if events { (0..iters).map(|_| self.pooled_event()).collect::<Result<_>>()? } else { Vec::new() };
        for i in 0..iters as usize {
            host.push(self.clock.now_ns());
            if let Some(e) = marks.get(i) {
                // SAFETY: a live event and stream of this context.
                drv(unsafe { event::record(e.cu_event(), stream) }, "cuEventRecord")?;
            }
            // SAFETY: as in the back-to-back world call.
            unsafe { self.comm.all_reduce_sum(sp, rp, count, Dtype::F32, stream as *mut _) }?;
        }
        host.push(self.clock.now_ns());
        // SAFETY: as above.
        drv(unsafe { event::record(end.cu_event(), stream) }, "cuEventRecord")?;
        self.synchronize()?;
        let ms = drv(start.elapsed_ms(&end), "cuEventElapsedTime")? as f64;
        self.free_events.push(start);
        self.free_events.push(end);
        self.free_events.extend(marks);
        Ok((host, ms * 1e6 / iters.max(1) as f64))
    }

    /// Event timer probe: `n` events recorded back to back on the idle
    /// compute stream; returns each one's device time after the first, ns
    /// (their spacing shows the timer's granularity).
    pub fn event_timer_probe(&mut self, n: usize) -> Result<Vec<f64>> {
        self.synchronize()?;
        let evs = (0..n.max(2)).map(|_| self.pooled_event()).collect::<Result<Vec<_>>>()?;
        for e in &evs {
            drv(e.record(&self.compute), "cuEventRecord (probe)")?;
        }
        self.synchronize()?;
        let out = evs[1..]
            .iter()
            .map(|e| Ok(drv(evs[0].elapsed_ms(e), "cuEventElapsedTime")? as f64 * 1e6))
            .collect::<Result<Vec<_>>>()?;
        self.free_events.extend(evs);
        Ok(out)
    }

    /// Turn CUPTI kernel records on or off for what follows (benchmark
    /// variants); an error where CUPTI was not started.
    pub fn set_cupti(&mut self, on: bool) -> Result<()> {
        match &self.cupti {
            Some(c) => c.set_enabled(on),
            None => bail!("CUPTI is not active: {}", self.cupti_unavailable.as_deref().unwrap_or("not started")),
        }
    }
}
