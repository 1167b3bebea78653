//! CUDA/NCCL backend: GPUs through cudarc (driver, cuBLAS; loaded at run
//! time), NCCL through our own loader ([`crate::backend::cuda::nccl`]).
//!
//! Consumes the world communicator (for NCCL's unique id), the node-local rank
//! (GPU = `local_rank % device_count`), an NCCL library path and the workload
//! spec. Produces device intervals for every collective and device-ordered
//! marks, on the host timeline through [`crate::core::clock::DeviceTimeMap`]
//! (with `--cupti`, kernel records through [`globaltimer`]). Refuses, with a
//! one-line reason: no driver, no GPU, no cuBLAS, an NCCL library that is not
//! the one asked for. Anchors, hot path, stream semantics: docs/METHODS.md, "CUDA backend".
mod anchor;
mod backend_impl;
mod bench;
pub mod buffers;
pub mod cupti;
mod events;
pub mod globaltimer;
pub mod nccl;
mod nccl_call;
mod probe;
mod setup;
pub mod trace_exec;
use super::{contribution, Backend, BackendError, BackendPlan, BackendResult, DeviceInterval, PassTimings};
use super::{BackendInfo, Call, CheckOutcome, Checked, Compute, GraphStep, Timing};
use crate::backend::cuda::cupti::{Cupti, LostRecords};
use crate::backend::cuda::nccl::{NcclComm, NcclLibrary};
use crate::core::clock::{DeviceAnchorEstimate, RankClock};
use crate::core::workload::GemmShape;
use crate::evidence::shard::{BackendKind, DeviceIdentity, Dtype, Unmeasured};
use anchor::{Anchor, ANCHOR_ROUND_TRIPS, TIMER_ROUND_TRIPS, TIMER_STAMPS};
use anyhow::{bail, Context, Result};
use cudarc::cublas::{sys as blas_sys, CudaBlas};
use cudarc::driver::result::module;
use cudarc::driver::{sys as drv_sys, CudaContext, CudaEvent, CudaSlice, CudaStream, DevicePtr, DevicePtrMut};
use mpi::topology::{Communicator, SimpleCommunicator};
pub(crate) use probe::driver_report;
use probe::{nvml_facts, probe_cublas, topology};
pub use probe::{probe_devices, unavailable_reason, DriverReport};
pub use setup::CudaOptions;
use std::path::Path;
use std::sync::Arc;

/// Resolution of CUDA event timestamps as documented for `cuEventElapsedTime`
/// ("around 0.5 microseconds"); used where the measured granularity is inconclusive.
pub(crate) const EVENT_RESOLUTION_NS: f64 = 500.0;

/// `bytes` of zeroed host memory mapped into the device's address space
/// (host pointer, device pointer), with the context current. The caller
/// frees it with `cuMemFreeHost`, or keeps it for the process's life.
pub(crate) fn mapped_host_bytes(bytes: usize) -> std::result::Result<(*mut u8, drv_sys::CUdeviceptr), String> {
    let mut p: *mut std::ffi::c_void = std::ptr::null_mut();
    // SAFETY: out-pointers to locals; the context is current (callers bind it);
    // the memory is zeroed before its device pointer is handed out.
    unsafe {
        drv_sys::cuMemHostAlloc(&mut p, bytes, drv_sys::CU_MEMHOSTALLOC_DEVICEMAP | drv_sys::CU_MEMHOSTALLOC_PORTABLE)
            .result()
            .map_err(|e| format!("cuMemHostAlloc: {e:?}"))?;
        std::ptr::write_bytes(p as *mut u8, 0, bytes);
        let mut d: drv_sys::CUdeviceptr = 0;
        if let Err(e) = drv_sys::cuMemHostGetDevicePointer_v2(&mut d, p, 0).result() {
            let _ = drv_sys::cuMemFreeHost(p);
            return Err(format!("cuMemHostGetDevicePointer: {e:?}"));
        }
        Ok((p as *mut u8, d))
    }
}

/// Two 4-byte host words mapped into the device's address space (host
/// pointer, device pointer): the release word at offset 0, which the host
/// writes and a `cuStreamWaitValue32` reads, and the acknowledgement at
/// offset 4, which a `cuStreamWriteValue32` writes and the host polls. Never
/// freed: one per process, released with the process.
pub(crate) fn host_release_word() -> std::result::Result<(*mut u32, drv_sys::CUdeviceptr), String> {
    let (p, d) = mapped_host_bytes(8)?;
    Ok((p as *mut u32, d))
}

/// Load a PTX image into `ctx` (the driver compiles it for the device) and
/// look up its entry points, in the order named. The module is never
/// unloaded: its functions stay valid for the process's life.
pub(crate) fn load_ptx(
    ctx: &Arc<CudaContext>,
    ptx: &str,
    what: &str,
    entries: &[&std::ffi::CStr],
) -> Result<(drv_sys::CUmodule, Vec<drv_sys::CUfunction>)> {
    drv(ctx.bind_to_thread(), "binding the CUDA context")?;
    let src = std::ffi::CString::new(ptx).expect("no NUL in the PTX");
    // SAFETY: a NUL-terminated PTX image; the context is current.
    let module = drv(unsafe { module::load_data(src.as_ptr() as *const _) }, &format!("cuModuleLoadData ({what})"))?;
    let funcs = entries
        .iter()
        // SAFETY: the module was just loaded and is never unloaded.
        .map(|&name| drv(unsafe { module::get_function(module, name.into()) }, "cuModuleGetFunction"))
        .collect::<Result<Vec<_>>>()?;
    Ok((module, funcs))
}

/// Placeholder end of a back-to-back collective until the next boundary is recorded.
const OPEN_END: usize = usize::MAX;

/// CUDA backend state of one rank.
pub struct CudaBackend {
    // Fields drop in order: the trace executor (its own NCCL communicators,
    // buffers and stream) and the graph (whose nodes use NCCL's and cuBLAS's
    // resources) before NCCL (which keeps its library loaded) and cuBLAS,
    // and all of them before the context.
    /// `rank`'s collectives of other kinds (an isolated sweep of
    /// `--collective`): `replay-trace --backend cuda`'s executor, made by
    /// [`Backend::prepare`] on communicators of its own.
    trace_exec: Option<trace_exec::CudaTraceExec>,
    /// What the trace executor is made from: a duplicate of the world (for
    /// NCCL's unique id), the NCCL library asked for, and this rank's GPU.
    exec_world: SimpleCommunicator,
    exec_nccl_path: std::path::PathBuf,
    exec_ordinal: u32,
    /// Graph mode: the captured token, launched on the compute stream.
    graph: Option<cudarc::driver::CudaGraph>,
    comm: NcclComm,
    blas: CudaBlas,
    compute: Arc<CudaStream>,
    comm_stream: Arc<CudaStream>,
    /// Collective buffers, `max_bytes` each, holding elements of `dtype`.
    send: buffers::DeviceBytes,
    recv: buffers::DeviceBytes,
    dtype: Dtype,
    a: CudaSlice<u16>,
    /// bf16 weights per GEMM shape, one buffer per weight set.
    b: Vec<Vec<CudaSlice<u16>>>,
    c: CudaSlice<u16>,
    mem_src: CudaSlice<u8>,
    mem_dst: CudaSlice<u8>,
    gemms: Vec<GemmShape>,
    world_size: u32,
    clock: RankClock,
    /// Outstanding all-reduce: (bytes, start event, end event), indices into `pass_events`.
    pending: Option<(u64, usize, usize)>,
    /// Every timing event recorded in the current pass, in recording order.
    pass_events: Vec<CudaEvent>,
    /// Per collective of the pass: (start, end) indices into `pass_events`.
    intervals: Vec<(usize, usize)>,
    /// Per collective of the pass where the compute stream waited on it: (before, after).
    waits: Vec<(usize, usize)>,
    marks: Vec<usize>,
    /// A back-to-back run is open: the last interval ends at the next boundary.
    back_to_back_open: bool,
    /// CUDA graphs launched in this pass, dropped once it is finished.
    graphs: Vec<cudarc::driver::CudaGraph>,
    /// Whether any collective ran inside a graph (its host times are the launch's).
    graph_used: bool,
    /// Per stream (compute, comm): the pass event recorded last on it, where
    /// nothing was enqueued after it; a synchronization polls it instead of
    /// recording a fence (an API call, microseconds in a virtual machine).
    tail: [Option<usize>; 2],
    /// Timing events ready for reuse: creating one per operation made the host
    /// the bottleneck (seen on the H200), so they are pooled across passes.
    free_events: Vec<CudaEvent>,
    /// Reused "compute work so far" event for the comm stream's dependency
    /// (cuStreamWaitEvent captures the record current at the call, so re-recording is safe).
    produced: CudaEvent,
    anchor: Option<Anchor>,
    /// Graph mode: capturing the compute stream (and the streams it forks to).
    capturing: bool,
    /// Graph mode: cuBLAS workspace set before capture (cuBLAS must not allocate inside one).
    blas_workspace: Option<CudaSlice<u8>>,
    /// The start and end anchor windows of the last finished pass (for diagnostics and the benchmark).
    last_anchor_windows: Option<(DeviceAnchorEstimate, DeviceAnchorEstimate)>,
    cupti: Option<Cupti>,
    cupti_unavailable: Option<String>,
    /// Kernel records CUPTI dropped or that were malformed, over every pass.
    cupti_lost: LostRecords,
    /// Passes whose kernel times could not be anchored through `%globaltimer`, and why.
    kernel_anchor_failures: Vec<String>,
    /// With `--cupti`: the `%globaltimer` anchor of kernel records, or why it is unavailable.
    timer: std::result::Result<globaltimer::GlobalTimer, String>,
    fence: CudaEvent,
    /// Host-mapped word that releases the anchor's stream wait (host pointer,
    /// device pointer); `None` where stream memory operations are unavailable.
    release: Option<(*mut u32, drv_sys::CUdeviceptr)>,
    release_count: u32,
    /// Collectives run on the compute stream (blocking with `--comm-stream current`).
    on_compute: bool,
    /// Granularity of the event timer, measured at start, ns.
    timer_granularity_ns: f64,
    timeout: std::time::Duration,
    rank: u32,
    uuid: String,
    device: DeviceIdentity,
    ctx: Arc<CudaContext>,
}

pub(crate) fn drv<T>(r: Result<T, cudarc::driver::DriverError>, what: &str) -> Result<T> {
    r.map_err(|e| anyhow::anyhow!("{what}: CUDA error {e:?}"))
}
