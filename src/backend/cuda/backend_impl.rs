//! The [`Backend`] trait for [`CudaBackend`]: the collectives (streamed,
//! back to back, in a graph), GEMM and copy compute, timing marks, the end of
//! a pass (its events and kernel records mapped onto the host clock), result
//! checks, graph capture of a token and the trace executor. Every method the
//! trait asks for is here; misuse (a wait without a collective, a mark inside
//! a capture) is refused as [`BackendError::Misuse`].
use super::*;
use crate::backend::cuda::nccl::{NcclCall, RedOp};
use crate::backend::mpi_deadline;
use crate::backend::own::OwnOp;
use crate::core::clock::DeviceTimeMap;
use crate::core::collective::CollectiveKind;
use crate::evidence::commtrace::p2p::P2pPlan;
use crate::evidence::commtrace::{CommTrace, TraceCollective};
use crate::evidence::shard::KernelKind;
use cudarc::cublas::result::gemm_ex;
use cudarc::driver::result::event;

impl Backend for CudaBackend {
    fn info(&self) -> BackendInfo {
        BackendInfo { kind: BackendKind::Cuda, rank: self.rank, world_size: self.world_size, back_to_back: true }
    }

    fn device(&self) -> DeviceIdentity {
        // start facts from initialisation, end facts read now (after the phases)
        let mut d = self.device.clone();
        d.facts.extend(nvml_facts(&self.uuid, "_end"));
        d
    }

    fn unmeasured(&self) -> Vec<Unmeasured> {
        [Unmeasured {
            field: "wait_start_ns/wait_end_ns".into(),
            reason: "on the cuda backend these are host enqueue times of the stream dependency; the compute \
                    stream's stall is in device_waits. In the isolated phase no wait is enqueued (collectives run back \
                        to back, as in nccl-tests), so both equal host_return_ns there"
                .into(),
        }]
        .into_iter()
        .chain(self.graph_used.then(|| {
            Unmeasured {
                field: "host_issue_ns/host_return_ns (isolated, --graph)".into(),
                reason:
                    "the host launched each size's timed iterations as one CUDA graph; every collective of it carries \
                that launch call's host times"
                        .into(),
            }
        }))
        .chain(
            self.cupti_unavailable
                .as_ref()
                .map(|why| Unmeasured { field: "kernels".into(), reason: format!("no CUPTI kernel records: {why}") }),
        )
        .chain(self.cupti_lost.any().then(|| {
            let l = self.cupti_lost;
            Unmeasured {
                field: "kernels".into(),
                reason: format!(
                    "incomplete: CUPTI dropped {} kernel record(s) for want of buffer space ({} buffer(s) whose \
                        dropped count could not be read), and {} record(s) were malformed and left out",
                    l.dropped, l.dropped_unread, l.malformed
                ),
            }
        }))
        .chain(self.kernel_anchor_failures.first().map(|why| Unmeasured {
            field: "phases[].kernel_anchor".into(),
            reason: format!(
                "in {} pass(es) the kernel times rest on CUPTI's own conversion (error unknown): the %globaltimer \
                    anchor did not fit, first because {why}",
                self.kernel_anchor_failures.len()
            ),
        }))
        .chain(match (&self.cupti, &self.timer) {
            (Some(_), Err(why)) => Some(Unmeasured {
                field: "phases[].kernel_anchor".into(),
                reason: format!(
                    "the %globaltimer anchor could not load ({why}): kernel times rest on CUPTI's own \
                    conversion, whose error is not known"
                ),
            }),
            _ => None,
        })
        .collect()
    }

    /// `replay-trace --backend cuda`'s executor on this rank's GPU: its own
    /// NCCL world communicator (bootstrapped over a duplicate of the MPI
    /// world) split into every group of `trace`, and its own stream. Its
    /// collectives complete on the host ([`Call::Trace`]: the NCCL call,
    /// then a stream synchronization; started [`Timing::Async`], the NCCL
    /// call alone, and [`Call::Complete`] synchronizes the stream) and record
    /// no device interval. An MPI
    /// trace's point-to-point program is refused.
    fn prepare(&mut self, trace: &CommTrace, colls: &[TraceCollective], p2p: Option<&P2pPlan>) -> BackendResult<()> {
        if p2p.is_some() {
            return Err(BackendError::Unsupported(
                "this backend does not run an MPI trace's point-to-point operations (mpi.p2p): run the phases with \
                    --backend cpu, or pass --trace-allreduce-only (the point-to-point operations are then left out and \
                        counted)"
                    .into(),
            ));
        }
        // a second preparation replaces the first: end its communicators first
        if let Some(mut old) = self.trace_exec.take() {
            old.abort();
        }
        let mut exec = trace_exec::CudaTraceExec::new(
            &self.exec_world,
            self.exec_ordinal,
            &self.exec_nccl_path,
            trace,
            self.timeout,
        )?;
        exec.prepare(colls)?;
        self.trace_exec = Some(exec);
        // the executor bound its context to this thread: it is the primary context of the same GPU, as ours is
        drv(self.ctx.bind_to_thread(), "binding the CUDA context")?;
        Ok(())
    }

    fn enqueue(&mut self, call: Call<'_>, timing: Timing) -> BackendResult<()> {
        match (call, timing) {
            (Call::World { kind, bytes, dtype }, Timing::Async) => self.start(kind, bytes, dtype),
            (Call::World { kind, bytes, dtype }, Timing::BackToBack) => self.back_to_back(kind, bytes, dtype),
            (Call::Trace { index, c, op }, Timing::HostWait) => Ok(self.prepared_exec()?.run(index, c, op)?),
            // posted: enqueued on the executor's stream, which runs its calls in order
            (Call::Trace { index, c, op }, Timing::Async) => {
                let exec = self.prepared_exec()?;
                let stream = exec.stream().clone();
                Ok(exec.enqueue_on(index, c, op, false, &stream)?)
            }
            // before a host-timed call: done before its timing starts; before a post: ordered on the stream
            (Call::Clear(index), Timing::HostWait | Timing::Async) => {
                let exec = self.prepared_exec()?;
                let stream = exec.stream().clone();
                exec.clear_result(index, &stream)?;
                if timing == Timing::HostWait {
                    drv(stream.synchronize(), "cuStreamSynchronize (result cleared)")?;
                }
                Ok(())
            }
            (Call::ClearWorld { kind, bytes, dtype }, Timing::HostWait | Timing::Async) => {
                self.clear_world(kind, bytes, dtype)?;
                if timing == Timing::HostWait {
                    self.wait_stream(!self.on_compute, "waiting for a result to be cleared")?;
                }
                Ok(())
            }
            (Call::Complete(_), Timing::HostWait) => {
                let exec = self.prepared_exec()?;
                drv(exec.stream().synchronize(), "cuStreamSynchronize (posted collective done)")?;
                Ok(exec.async_error()?)
            }
            (Call::World { .. }, Timing::Untimed) => {
                Err(BackendError::Misuse("--inject-repeat: this backend times one call per recorded collective".into()))
            }
            (Call::P2pStep(_), _) => {
                Err(BackendError::Misuse("internal: no point-to-point program was prepared".into()))
            }
            (call, timing) => {
                Err(BackendError::Misuse(format!("internal: the cuda backend has no {timing:?} path for {call:?}")))
            }
        }
    }

    fn wait(&mut self) -> BackendResult<Option<DeviceInterval>> {
        let Some((_bytes, start, end)) = self.pending.take() else {
            return Err(BackendError::Misuse("internal: wait without an outstanding collective".into()));
        };
        if self.on_compute {
            // same stream: the next GEMM follows the collective in stream order; no wait to time
            if !self.capturing {
                self.intervals.push((start, end));
            }
            return Ok(None);
        }
        if self.capturing {
            // the compute stream joins the communication stream inside the graph; nothing is timed
            drv(self.compute.wait(&self.pass_events[end]), "cuStreamWaitEvent (compute waits collective, captured)")?;
            let _ = start;
            return Ok(None);
        }
        let before = self.record(false, "cuEventRecord (before wait)")?;
        drv(self.compute.wait(&self.pass_events[end]), "cuStreamWaitEvent (compute waits collective)")?;
        self.tail[0] = None;
        let after = self.record(false, "cuEventRecord (after wait)")?;
        self.intervals.push((start, end));
        self.waits.push((before, after));
        Ok(None)
    }

    fn collectives_on_compute_stream(&mut self, on: bool) -> BackendResult<()> {
        if self.pending.is_some() || self.capturing {
            return Err(BackendError::Misuse(
                "internal: the collective stream changed with a collective outstanding or inside a capture".into(),
            ));
        }
        self.on_compute = on;
        Ok(())
    }

    fn end_back_to_back(&mut self) -> BackendResult<()> {
        Ok(self.close_back_to_back()?)
    }

    fn compute(&mut self, work: Compute) -> BackendResult<()> {
        match work {
            Compute::Gemm { shape, layer, units } => self.gemm(shape, layer, units),
            Compute::Membound(units) => self.membound(units),
        }
    }

    fn synchronize(&mut self) -> BackendResult<()> {
        self.close_back_to_back()?;
        self.wait_stream(true, "synchronizing the communication stream")?;
        self.wait_stream(false, "synchronizing the compute stream")?;
        Ok(self.comm.async_error()?)
    }

    fn mark(&mut self) -> BackendResult<Option<usize>> {
        if self.capturing {
            return Err(BackendError::Misuse("internal: a timing mark inside a graph capture".into()));
        }
        self.ensure_anchor()?;
        self.close_back_to_back()?;
        let e = self.record(false, "cuEventRecord (mark)")?;
        self.marks.push(e);
        Ok(Some(self.marks.len() - 1))
    }

    fn finish_pass(&mut self) -> BackendResult<PassTimings> {
        self.close_back_to_back()?;
        // drained, not taken: the next pass pushes into the capacity this one
        // grew, with no reallocation on its hot path
        let intervals: Vec<(usize, usize)> = self.intervals.drain(..).collect();
        let waits_ev: Vec<(usize, usize)> = self.waits.drain(..).collect();
        let marks: Vec<usize> = self.marks.drain(..).collect();
        let Some(anchor) = self.anchor.take() else {
            self.tail = [None, None];
            self.free_events.append(&mut self.pass_events);
            return Ok(PassTimings { collectives: vec![None; intervals.len()], ..Default::default() });
        };
        // the end window: the caller synchronized, so the streams are idle
        let (end_event, end_est) = self.anchor_window()?;
        let first = &self.pass_events[anchor.event];
        let span_ms = drv(first.elapsed_ms(&self.pass_events[end_event]), "cuEventElapsedTime (end anchor)")? as f64;
        let map = DeviceTimeMap::fit(anchor.estimate, Some((end_est, span_ms * 1e6)));
        self.last_anchor_windows = Some((anchor.estimate, end_est));
        // host time of every event of the pass, each read once
        let mut host_ns = vec![0u64; self.pass_events.len()];
        let mut needed = vec![false; self.pass_events.len()];
        for &(a, b) in intervals.iter().chain(&waits_ev) {
            needed[a] = true;
            if b != OPEN_END {
                needed[b] = true;
            }
        }
        for &m in &marks {
            needed[m] = true;
        }
        for (i, e) in self.pass_events.iter().enumerate() {
            if needed[i] {
                let ms = drv(first.elapsed_ms(e), "cuEventElapsedTime")? as f64;
                host_ns[i] = map.to_host_ns(ms * 1e6);
            }
        }
        let end_timer = match anchor.timer {
            Some(_) => self.timer_window()?,
            None => None,
        };
        let mut kernels = Vec::new();
        let mut kernel_anchor = None;
        if let (Some(c), Some((ts0, host0, _err))) = (&self.cupti, anchor.cupti) {
            let (mut raw, lost) = c.drain()?;
            self.cupti_lost.add(lost);
            let bounded = match (&anchor.timer, &end_timer) {
                (Some(s), Some(e)) => match Self::kernel_timer_map(s, e, &raw, anchor.cupti) {
                    Ok((m, a)) => {
                        kernel_anchor = Some(a);
                        Some(m)
                    }
                    Err(why) => {
                        self.kernel_anchor_failures.push(why);
                        None
                    }
                },
                _ => None,
            };
            // the anchor's own kernels are the instrument's, not the pass's
            raw.retain(|k| !k.name.starts_with(globaltimer::KERNEL_PREFIX));
            for k in raw {
                let tmap = |t: u64| match &bounded {
                    Some(m) => m.to_host_ns(t),
                    None => (host0 as i128 + t as i128 - ts0 as i128).max(0) as u64,
                };
                let kind =
                    if k.name.to_ascii_lowercase().contains("nccl") { KernelKind::Nccl } else { KernelKind::Compute };
                kernels.push(crate::backend::PassKernel {
                    kind,
                    name: k.name,
                    start_ns: tmap(k.start),
                    end_ns: tmap(k.end),
                    stream: k.stream,
                    correlation: k.correlation,
                });
            }
        }
        let iv = |&(a, b): &(usize, usize)| {
            (b != OPEN_END).then(|| DeviceInterval { start_ns: host_ns[a], end_ns: host_ns[b] })
        };
        let collectives = intervals.iter().map(iv).collect();
        let waits = waits_ev.iter().map(iv).collect();
        let marks_ns = marks.iter().map(|&m| host_ns[m]).collect();
        // Error of a mapped time: the map's bound, the resolution of the event
        // timestamps (twice: the anchor's and the event's), and the rounding of
        // the float milliseconds that cuEventElapsedTime returns over the pass.
        let rounding_ns = (span_ms * 1e6).abs() * f64::from(f32::EPSILON) / 2.0;
        let mut error_ns = map.bound_ns + 2.0 * self.timer_granularity_ns + rounding_ns;
        // CUPTI's own conversion's error (unknown) is not the events'; where
        // the kernel times rest on it, the events' error is at least its
        // back-to-back read, as before the %globaltimer anchor existed
        if let (Some(c), None) = (anchor.cupti, &kernel_anchor) {
            error_ns = error_ns.max(c.2 as f64);
        }
        self.free_events.append(&mut self.pass_events);
        self.tail = [None, None];
        self.graphs.clear();
        Ok(PassTimings {
            collectives,
            marks_ns,
            anchor_error_ns: Some(error_ns.ceil() as u64),
            kernels,
            waits,
            kernel_anchor,
        })
    }

    fn check(&mut self, what: Checked<'_>, corrupt: bool) -> BackendResult<CheckOutcome> {
        match what {
            Checked::Last { kind, bytes, dtype } => {
                let op = OwnOp::new(kind, bytes, dtype, self.world_size, self.rank)?;
                let what = kind.label();
                let mut values = self.read_result(op.recv_elems as u64 * dtype.size_bytes(), dtype, &what)?;
                // the negative control spoils the result, where this rank has one
                if corrupt {
                    if let Some(v) = values.first_mut() {
                        *v += 1.0;
                    }
                }
                Ok(op.verify(&values, dtype))
            }
            Checked::Trace { index, c, op } => {
                let (wrong_elements, first_wrong) = self.prepared_exec()?.count_wrong(index, c, op, corrupt)?;
                Ok(CheckOutcome { wrong_elements, first_wrong })
            }
        }
    }

    fn end_p2p_pass(&mut self, _check: bool, _corrupt: bool) -> BackendResult<Option<u64>> {
        Err(BackendError::Misuse("internal: no point-to-point program was prepared".into()))
    }

    fn graph(&mut self, step: GraphStep) -> BackendResult<Option<(u64, u64)>> {
        match step {
            GraphStep::Begin => self.begin_graph().map(|_| None),
            GraphStep::End => self.end_graph().map(|_| None),
            GraphStep::Launch => self.launch_graph().map(|_| None),
            GraphStep::Calls { kind, bytes, dtype, n } => self.calls_graph(kind, bytes, dtype, n).map(Some),
        }
    }

    fn barrier(&mut self, what: &str, phase: &str, timeout: Option<std::time::Duration>) -> anyhow::Result<()> {
        mpi_deadline::barrier_within(&self.exec_world, timeout, mpi_deadline::Op { what, phase, peer: None })
    }
}

impl CudaBackend {
    /// The executor of the prepared trace collectives.
    fn prepared_exec(&mut self) -> BackendResult<&mut trace_exec::CudaTraceExec> {
        self.trace_exec
            .as_mut()
            .ok_or_else(|| BackendError::Misuse("internal: no trace collectives were prepared".into()))
    }

    /// A world call of any kind right behind the previous one
    /// ([`Timing::BackToBack`]): the NCCL calls of `kind` as [`Self::start`]
    /// makes them, behind one boundary event, on the collective stream.
    fn back_to_back(&mut self, kind: CollectiveKind, bytes: u64, dtype: Dtype) -> BackendResult<()> {
        let op = self.world_op(kind, bytes, dtype)?;
        if self.anchor.is_none() {
            self.ensure_anchor()?;
            drv(self.ctx.bind_to_thread(), "binding the CUDA context")?;
        }
        // The hot path: one pooled event recorded as this collective's start
        // (and the previous one's end), then the NCCL call. No stream
        // dependency, no wait, no allocation.
        let e = self.pooled_event()?;
        // SAFETY: a live event and stream of this context, which is current on this thread.
        drv(unsafe { event::record(e.cu_event(), self.comm_stream.cu_stream()) }, "cuEventRecord (boundary)")?;
        self.pass_events.push(e);
        let b = self.pass_events.len() - 1;
        if self.back_to_back_open {
            if let Some(last) = self.intervals.last_mut() {
                last.1 = b;
            }
        }
        let (sp, rp) = self.buffers();
        let stream = self.comm_stream.cu_stream() as *mut std::ffi::c_void;
        if kind == CollectiveKind::AllReduce {
            // the isolated sweep's hot path: no allocation
            // SAFETY: buffers hold `bytes` of `dtype` on this context's device (issue_count); the stream belongs to it.
            unsafe { self.comm.all_reduce_sum(sp, rp, op.send_elems, dtype, stream) }?;
            self.tail[1] = None;
            self.intervals.push((b, OPEN_END));
            self.back_to_back_open = true;
            return Ok(());
        }
        let calls = super::nccl_call::nccl_calls(&op.call(), sp, rp, dtype.into(), dtype.size_bytes(), RedOp::Sum)
            .map_err(BackendError::Misuse)?;
        self.enqueue_calls(&calls, stream)?;
        self.tail[1] = None;
        self.intervals.push((b, OPEN_END));
        self.back_to_back_open = true;
        Ok(())
    }

    /// [`GraphStep::Calls`]: `n` world calls of `kind` captured behind
    /// timestamp nodes into one graph (the NCCL calls of [`Self::start`]) and
    /// launched once.
    fn calls_graph(&mut self, kind: CollectiveKind, bytes: u64, dtype: Dtype, n: u32) -> BackendResult<(u64, u64)> {
        self.graph_used = true;
        let op = self.world_op(kind, bytes, dtype)?;
        self.ensure_anchor()?;
        self.close_back_to_back()?;
        // the graph's first node waits for the eager work before it (stream order)
        let (sp, rp) = self.buffers();
        let stream = self.comm_stream.cu_stream();
        let calls = super::nccl_call::nccl_calls(&op.call(), sp, rp, dtype.into(), dtype.size_bytes(), RedOp::Sum)
            .map_err(BackendError::Misuse)?;
        drv(
            self.comm_stream.begin_capture(drv_sys::CUstreamCaptureMode::CU_STREAM_CAPTURE_MODE_THREAD_LOCAL),
            "cuStreamBeginCapture",
        )?;
        let mut captured = || -> BackendResult<()> {
            let record = |b: &mut Self| -> BackendResult<usize> {
                let e = b.pooled_event()?;
                // SAFETY: a live event and the capturing stream of this context; EXTERNAL makes it a timestamp node.
                let recorded = unsafe {
                    drv_sys::cuEventRecordWithFlags(
                        e.cu_event(),
                        stream,
                        drv_sys::CUevent_record_flags::CU_EVENT_RECORD_EXTERNAL as u32,
                    )
                    .result()
                };
                drv(recorded, "cuEventRecordWithFlags (graph)")?;
                b.pass_events.push(e);
                Ok(b.pass_events.len() - 1)
            };
            let mut prev = record(self)?;
            for _ in 0..n {
                self.enqueue_calls(&calls, stream as *mut _)?;
                let next = record(self)?;
                self.intervals.push((prev, next));
                prev = next;
            }
            Ok(())
        };
        let res = captured();
        let graph = drv(
            self.comm_stream.end_capture(drv_sys::CUgraphInstantiate_flags(0)),
            "cuStreamEndCapture / cuGraphInstantiate",
        );
        res?;
        let graph = graph?.ok_or_else(|| anyhow::anyhow!("stream capture produced no graph"))?;
        drv(graph.upload(), "cuGraphUpload")?;
        let t0 = self.clock.now_ns();
        drv(graph.launch(), "cuGraphLaunch")?;
        self.tail[1] = None;
        let t1 = self.clock.now_ns();
        // kept until the pass is finished: the launch may still be running
        self.graphs.push(graph);
        Ok((t0, t1))
    }

    fn gemm(&mut self, shape: usize, layer: u32, units: u32) -> BackendResult<()> {
        self.ensure_anchor()?;
        self.tail[0] = None;
        let Some(g) = self.gemms.get(shape).copied() else {
            return Err(BackendError::Misuse(format!("internal: GEMM shape {shape} was not prepared")));
        };
        let (m, n, k) = (g.m as i32, g.n as i32, g.k as i32);
        let alpha: f32 = 1.0;
        let beta: f32 = 0.0;
        let sets = &self.b[shape];
        let weights = &sets[layer as usize % sets.len()];
        for _ in 0..units {
            let (ap, _a) = self.a.device_ptr(&self.compute);
            let (bp, _b) = weights.device_ptr(&self.compute);
            let (cp, _c) = self.c.device_ptr_mut(&self.compute);
            // SAFETY: A is m x k, B is k x n, C is m x n (column-major, leading dims m, k, m), bf16 on this device.
            unsafe {
                gemm_ex(
                    *self.blas.handle(),
                    blas_sys::cublasOperation_t::CUBLAS_OP_N,
                    blas_sys::cublasOperation_t::CUBLAS_OP_N,
                    m,
                    n,
                    k,
                    (&alpha as *const f32).cast(),
                    ap as *const _,
                    blas_sys::cudaDataType::CUDA_R_16BF,
                    m,
                    bp as *const _,
                    blas_sys::cudaDataType::CUDA_R_16BF,
                    k,
                    (&beta as *const f32).cast(),
                    cp as *mut _,
                    blas_sys::cudaDataType::CUDA_R_16BF,
                    m,
                    blas_sys::cublasComputeType_t::CUBLAS_COMPUTE_32F,
                    blas_sys::cublasGemmAlgo_t::CUBLAS_GEMM_DEFAULT,
                )
            }
            .map_err(|e| anyhow::anyhow!("cublasGemmEx {m}x{n}x{k}: {e:?}"))?;
        }
        Ok(())
    }

    fn membound(&mut self, units: u32) -> BackendResult<()> {
        self.ensure_anchor()?;
        self.tail[0] = None;
        for _ in 0..units {
            drv(self.compute.memcpy_dtod(&self.mem_src, &mut self.mem_dst), "cuMemcpyDtoDAsync")?;
        }
        Ok(())
    }

    fn begin_graph(&mut self) -> BackendResult<()> {
        if self.capturing || self.pending.is_some() {
            return Err(BackendError::Misuse(
                "internal: graph capture begun with a capture or a collective outstanding".into(),
            ));
        }
        // the anchor synchronizes an event, which a capturing stream forbids: take it first
        self.ensure_anchor()?;
        if self.blas_workspace.is_none() {
            // cuBLAS would otherwise allocate its workspace inside the capture
            const WORKSPACE_BYTES: usize = 32 << 20;
            let ws = drv(self.compute.alloc_zeros::<u8>(WORKSPACE_BYTES), "allocating the cuBLAS workspace")?;
            {
                let (wp, _w) = ws.device_ptr(&self.compute);
                // SAFETY: the workspace is a field of self, declared after `blas`, so it outlives every use of the
                // handle.
                let st = unsafe { blas_sys::cublasSetWorkspace_v2(*self.blas.handle(), wp as *mut _, WORKSPACE_BYTES) };
                if st != blas_sys::cublasStatus_t::CUBLAS_STATUS_SUCCESS {
                    return Err(BackendError::Device(anyhow::anyhow!("cublasSetWorkspace: {st:?}")));
                }
            }
            self.blas_workspace = Some(ws);
        }
        drv(self.compute.synchronize(), "synchronizing before capture")?;
        // thread-local: NCCL's own threads may make CUDA calls while this thread captures
        drv(
            self.compute.begin_capture(drv_sys::CUstreamCaptureMode::CU_STREAM_CAPTURE_MODE_THREAD_LOCAL),
            "cuStreamBeginCapture",
        )?;
        self.capturing = true;
        Ok(())
    }

    fn end_graph(&mut self) -> BackendResult<()> {
        if !self.capturing {
            return Err(BackendError::Misuse("internal: end of a graph capture that was not begun".into()));
        }
        self.capturing = false;
        let graph = self
            .compute
            .end_capture(drv_sys::CUgraphInstantiate_flags(0))
            .map_err(|e| {
                anyhow::anyhow!(
                    "capturing one token into a CUDA graph failed: CUDA error {e:?} (NCCL 2.9 or \
                later captures collectives)"
                )
            })?
            .ok_or_else(|| anyhow::anyhow!("the CUDA graph capture of one token produced no graph"))?;
        drv(graph.upload(), "cuGraphUpload")?;
        self.graph = Some(graph);
        self.tail = [None, None];
        Ok(())
    }

    fn launch_graph(&mut self) -> BackendResult<()> {
        self.ensure_anchor()?;
        let Some(g) = &self.graph else {
            return Err(BackendError::Misuse("internal: no graph was captured".into()));
        };
        self.tail = [None, None];
        Ok(drv(g.launch(), "cuGraphLaunch")?)
    }
}

impl CudaBackend {
    /// The checks every world call passes before it is enqueued: nothing
    /// outstanding, a size the buffers hold ([`crate::backend::issue_count`]),
    /// the kind's row ([`OwnOp`]), and a barrier's one f32 element.
    fn world_op(&self, kind: CollectiveKind, bytes: u64, dtype: Dtype) -> BackendResult<OwnOp> {
        crate::backend::issue_count(kind, self.pending.is_some(), bytes, dtype, self.dtype, self.send.len() as u64)?;
        let op = OwnOp::new(kind, bytes, dtype, self.world_size, self.rank)?;
        if kind == CollectiveKind::Barrier && self.send.len() < 4 {
            return Err(BackendError::Misuse(
                "a barrier is a one-element f32 all-reduce, and the buffers hold fewer than 4 bytes".into(),
            ));
        }
        Ok(op)
    }

    /// Zero what a world call of `kind`, `bytes` and `dtype` leaves in this
    /// rank's result buffer, on the stream its next call runs on, outside any
    /// capture; the stream's last event then no longer marks its end.
    fn clear_world(&mut self, kind: CollectiveKind, bytes: u64, dtype: Dtype) -> BackendResult<()> {
        if self.pending.is_some() || self.capturing {
            return Err(BackendError::Misuse(
                "internal: a result cleared under an outstanding call or a capture".into(),
            ));
        }
        let op = self.world_op(kind, bytes, dtype)?;
        let n = (op.recv_elems as u64 * dtype.size_bytes()).min(self.recv.len() as u64) as usize;
        let stream = if self.on_compute { self.compute.clone() } else { self.comm_stream.clone() };
        drv(stream.memset_zeros(&mut self.recv.slice_mut(0..n)), "clearing the result buffer")?;
        self.tail = [None, None];
        Ok(())
    }

    /// Enqueue a world call's NCCL calls on `stream`, several as one NCCL group.
    fn enqueue_calls(&self, calls: &[NcclCall], stream: *mut std::ffi::c_void) -> BackendResult<()> {
        let grouped = calls.len() > 1;
        if grouped {
            self.comm.group(true)?;
        }
        for c in calls {
            // SAFETY: every call comes from `nccl_calls` of an OwnOp that
            // `world_op` checked, so every pointer lies in this rank's send or
            // receive buffer, each `bytes` and 4 or more long, which bounds
            // every count and offset; the stream belongs to this context.
            unsafe { self.comm.enqueue(c, stream) }?;
        }
        if grouped {
            self.comm.group(false)?;
        }
        Ok(())
    }

    /// A world [`Call`] started ([`Timing::Async`]): the NCCL calls of `kind` (its arm in
    /// `nccl_calls`) on the world communicator and the collective stream,
    /// between the collective's start and end events; its size, root and ring
    /// from [`OwnOp`]. Several calls (an all-to-all's sends and receives, a
    /// ring's pair) are one NCCL group.
    fn start(&mut self, kind: CollectiveKind, bytes: u64, dtype: Dtype) -> BackendResult<()> {
        if self.capturing && kind != CollectiveKind::AllReduce {
            return Err(BackendError::Misuse(format!("internal: a {} inside a graph capture", kind.name())));
        }
        let op = self.world_op(kind, bytes, dtype)?;
        let start = self.begin_collective()?;
        let (sp, rp) = self.buffers();
        let calls = super::nccl_call::nccl_calls(&op.call(), sp, rp, dtype.into(), dtype.size_bytes(), RedOp::Sum)
            .map_err(BackendError::Misuse)?;
        let stream = self.collective_stream() as *mut std::ffi::c_void;
        self.enqueue_calls(&calls, stream)?;
        Ok(self.end_collective(bytes, start)?)
    }
}
