//! The pass's timing events and the two streams they are recorded on: the
//! event pool, `record` on the compute or communication stream, and
//! `wait_stream` (bounded by the collective timeout; NCCL is aborted past it
//! or on its asynchronous error). Every collective calls `begin_collective`
//! before its NCCL call and `end_collective` after it; `read_result` copies a
//! result back. Produces indices into the pass's events for `finish_pass`.
use super::*;
use cudarc::driver::result::event;

impl CudaBackend {
    pub(super) fn pooled_event(&mut self) -> Result<CudaEvent> {
        match self.free_events.pop() {
            Some(e) => Ok(e),
            None => drv(self.ctx.new_event(Some(drv_sys::CUevent_flags::CU_EVENT_DEFAULT)), "cuEventCreate"),
        }
    }

    /// Record a pooled timing event on the compute (`false`) or communication
    /// (`true`) stream; returns its index among the pass's events.
    pub(super) fn record(&mut self, comm_stream: bool, what: &'static str) -> Result<usize> {
        let e = self.pooled_event()?;
        let stream = if comm_stream { &self.comm_stream } else { &self.compute };
        drv(e.record(stream), what)?;
        self.pass_events.push(e);
        // an event recorded inside a capture is a graph node, never a stream's tail
        self.tail[comm_stream as usize] = (!self.capturing).then(|| self.pass_events.len() - 1);
        Ok(self.pass_events.len() - 1)
    }

    /// Wait for everything enqueued on `stream` so far, polling NCCL's
    /// asynchronous error; past the collective timeout, abort the
    /// communicator and fail with a message instead of hanging.
    pub(super) fn wait_stream(&mut self, comm_stream: bool, what: &str) -> Result<()> {
        let polled = match self.tail[comm_stream as usize] {
            Some(i) => self.pass_events[i].cu_event(),
            None => {
                let stream = if comm_stream { &self.comm_stream } else { &self.compute };
                drv(self.fence.record(stream), "cuEventRecord (fence)")?;
                self.fence.cu_event()
            }
        };
        let t0 = std::time::Instant::now();
        loop {
            // SAFETY: a live event of this context (the stream's tail event or the fence).
            match unsafe { event::query(polled) } {
                Ok(()) => return Ok(()),
                Err(e) if e.0 == drv_sys::cudaError_enum::CUDA_ERROR_NOT_READY => {}
                Err(e) => bail!("{what}: CUDA error {e:?}"),
            }
            if let Err(e) = self.comm.async_error() {
                let _ = self.comm.abort();
                return Err(e.context(format!(
                    "{what} on rank {}: NCCL reported an asynchronous error; communicator aborted",
                    self.rank
                )));
            }
            if t0.elapsed() > self.timeout {
                let _ = self.comm.abort();
                bail!(
                    "{what} on rank {}: no completion after {:.0} s (--collective-timeout); a peer is probably gone. \
                        The NCCL communicator was aborted",
                    self.rank,
                    self.timeout.as_secs_f64()
                );
            }
            // Spin for the first 200 us, then spin yielding up to 2 ms: a sleep
            // of 20 us lasts ~70 us under Linux timer slack, and a replay paced
            // from the host's observation of completion would carry that as
            // fake gap and skew. Long waits back off to sleeping.
            let waited = t0.elapsed();
            if waited < std::time::Duration::from_micros(200) {
                std::hint::spin_loop();
            } else if waited < std::time::Duration::from_millis(2) {
                std::thread::yield_now();
            } else {
                std::thread::sleep(std::time::Duration::from_micros(20));
            }
        }
    }

    /// Raw device pointers of the all-reduce buffers (allocated with event
    /// tracking off, so taking them records nothing).
    pub(super) fn buffers(&self) -> (drv_sys::CUdeviceptr, drv_sys::CUdeviceptr) {
        let (sp, _s) = self.send.device_ptr(&self.comm_stream);
        let (rp, _r) = self.recv.device_ptr(&self.comm_stream);
        (sp, rp)
    }

    /// Prologue of a collective on the comm stream: the pass's anchor, the
    /// collective consuming what the compute stream produced so far, and its
    /// start event (inside a capture the records are dependencies, never read).
    /// On the compute stream, stream order is the dependency: only the start event.
    pub(super) fn begin_collective(&mut self) -> Result<usize> {
        self.ensure_anchor()?;
        self.close_back_to_back()?;
        if self.on_compute {
            self.tail = [None, None];
            return self.record(false, "cuEventRecord (start)");
        }
        drv(self.produced.record(&self.compute), "cuEventRecord (produced)")?;
        drv(self.comm_stream.wait(&self.produced), "cuStreamWaitEvent (comm waits compute)")?;
        self.tail = [None, None];
        self.record(true, "cuEventRecord (start)")
    }

    /// Epilogue: the end event, and the collective becomes the outstanding one.
    pub(super) fn end_collective(&mut self, bytes: u64, start: usize) -> Result<()> {
        let end = self.record(!self.on_compute, "cuEventRecord (end)")?;
        self.pending = Some((bytes, start, end));
        Ok(())
    }

    /// The first `bytes` of the result buffer, once the comm stream is done, widened to f32.
    pub(super) fn read_result(&mut self, bytes: u64, dtype: Dtype, what: &str) -> Result<Vec<f32>> {
        let n = usize::try_from(bytes)?.min(self.recv.len());
        let mut host = vec![0u8; n];
        self.close_back_to_back()?;
        self.wait_stream(!self.on_compute, "waiting for the collective to check")?;
        if n == 0 {
            // nothing lands here (a reduce off its root, a barrier)
            return Ok(Vec::new());
        }
        // only the bytes checked come back, not the whole buffer
        let copy = self
            .comm_stream
            .memcpy_dtoh(&self.recv.slice(0..n), &mut host)
            .and_then(|_| self.comm_stream.synchronize());
        copy.map_err(|e| anyhow::anyhow!("copying the {what} result back failed: {e:?}"))?;
        Ok(match dtype {
            Dtype::F32 => host.chunks_exact(4).map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]])).collect(),
            Dtype::Bf16 => crate::backend::bf16_to_f32(
                &host.chunks_exact(2).map(|c| u16::from_le_bytes([c[0], c[1]])).collect::<Vec<u16>>(),
            ),
        })
    }

    /// The stream a started collective is enqueued on.
    pub(super) fn collective_stream(&self) -> drv_sys::CUstream {
        if self.on_compute {
            self.compute.cu_stream()
        } else {
            self.comm_stream.cu_stream()
        }
    }

    /// Close an open back-to-back run with its final boundary event.
    pub(super) fn close_back_to_back(&mut self) -> Result<()> {
        if std::mem::take(&mut self.back_to_back_open) {
            let e = self.record(true, "cuEventRecord (final boundary)")?;
            if let Some(last) = self.intervals.last_mut() {
                last.1 = e;
            }
        }
        Ok(())
    }
}
