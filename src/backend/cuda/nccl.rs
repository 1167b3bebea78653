//! Our own thin NCCL loader (docs/ARCHITECTURE.md §3: two NCCL versions must be comparable in
//! one campaign, and a loader search order is not proof of which library ran).
//!
//! Consumes an explicit library path. Produces an [`NcclLibrary`] holding
//! only the symbols CommCanary calls, plus two independent observations of
//! what was loaded: the file actually mapped into this process
//! (`/proc/self/maps`) and the version the library reports
//! (`ncclGetVersion`). Refuses, with the path and the reason: a file that
//! cannot be loaded, a library lacking a required symbol, and a library whose
//! mapped file is not the one asked for. Layout follows cudarc's split, folded
//! into one file: raw types ([`sys`]), then checked calls on [`NcclLibrary`].
use crate::backend::mpi_deadline;
use crate::core::workload::ReduceOp;
use crate::core::{collective, fsutil};
use crate::evidence::shard;
use anyhow::{bail, Context, Result};
use libloading::os::unix::{Library, Symbol, RTLD_LOCAL, RTLD_NOW};
use serde::{Deserialize, Serialize};
use std::ffi::CStr;
use std::os::raw::{c_char, c_int};
use std::path::{Path, PathBuf};
pub(crate) use sys::{DataType, RedOp};

/// Raw NCCL C types (only those we use).
pub mod sys {
    use std::ffi::c_void;
    use std::os::raw::{c_char, c_int};
    /// `ncclResult_t`.
    pub(crate) type NcclResult = c_int;
    /// `ncclSuccess`.
    pub(crate) const NCCL_SUCCESS: NcclResult = 0;
    /// `ncclGetVersion(int*)`.
    pub(crate) type GetVersion = unsafe extern "C" fn(*mut c_int) -> NcclResult;
    /// `ncclGetErrorString(ncclResult_t)`.
    pub(crate) type GetErrorString = unsafe extern "C" fn(NcclResult) -> *const c_char;
    /// `ncclComm_t`.
    pub(crate) type Comm = *mut c_void;
    /// `cudaStream_t`.
    pub(crate) type Stream = *mut c_void;
    /// `ncclUniqueId`: 128 opaque bytes, passed by value to `ncclCommInitRank`.
    #[repr(C)]
    #[derive(Clone, Copy)]
    pub(crate) struct UniqueId {
        /// Opaque bytes.
        pub internal: [c_char; 128],
    }
    /// `ncclDataType_t`, as nccl.h numbers it (the aliases `ncclChar`,
    /// `ncclInt`, `ncclHalf`, `ncclFloat` and `ncclDouble` share these values).
    #[repr(i32)]
    #[derive(Clone, Copy, Debug, PartialEq, Eq)]
    pub enum DataType {
        /// `ncclInt8`.
        Int8 = 0,
        /// `ncclUint8`.
        Uint8 = 1,
        /// `ncclInt32`.
        Int32 = 2,
        /// `ncclUint32`.
        Uint32 = 3,
        /// `ncclInt64`.
        Int64 = 4,
        /// `ncclUint64`.
        Uint64 = 5,
        /// `ncclFloat16`.
        Float16 = 6,
        /// `ncclFloat32`.
        Float32 = 7,
        /// `ncclFloat64`.
        Float64 = 8,
        /// `ncclBfloat16` (NCCL 2.10 and later).
        Bfloat16 = 9,
    }
    /// `ncclRedOp_t`'s built-in reductions, as nccl.h numbers them.
    #[repr(i32)]
    #[derive(Clone, Copy, Debug, PartialEq, Eq)]
    pub enum RedOp {
        /// `ncclSum`.
        Sum = 0,
        /// `ncclProd`.
        Prod = 1,
        /// `ncclMax`.
        Max = 2,
        /// `ncclMin`.
        Min = 3,
        /// `ncclAvg` (NCCL 2.10 and later).
        Avg = 4,
    }
    /// `ncclGetUniqueId(ncclUniqueId*)`.
    pub(crate) type GetUniqueId = unsafe extern "C" fn(*mut UniqueId) -> NcclResult;
    /// `ncclCommInitRank(ncclComm_t*, int nranks, ncclUniqueId, int rank)`.
    pub(crate) type CommInitRank = unsafe extern "C" fn(*mut Comm, c_int, UniqueId, c_int) -> NcclResult;
    /// `ncclAllReduce(const void*, void*, size_t, ncclDataType_t, ncclRedOp_t, ncclComm_t, cudaStream_t)`.
    pub type AllReduce =
        unsafe extern "C" fn(*const c_void, *mut c_void, usize, DataType, RedOp, Comm, Stream) -> NcclResult;
    /// `ncclAllGather(const void*, void*, size_t sendcount, ncclDataType_t, ncclComm_t, cudaStream_t)`.
    pub type AllGather = unsafe extern "C" fn(*const c_void, *mut c_void, usize, DataType, Comm, Stream) -> NcclResult;
    /// `ncclCommDestroy(ncclComm_t)` and `ncclCommAbort(ncclComm_t)`.
    pub(crate) type CommEnd = unsafe extern "C" fn(Comm) -> NcclResult;
    /// `ncclCommGetAsyncError(ncclComm_t, ncclResult_t*)`.
    pub(crate) type CommGetAsyncError = unsafe extern "C" fn(Comm, *mut NcclResult) -> NcclResult;
    /// `NCCL_SPLIT_NOCOLOR`: this rank joins no new communicator.
    pub(crate) const NCCL_SPLIT_NOCOLOR: c_int = -1;
    /// `ncclReduceScatter(const void*, void*, size_t recvcount, ncclDataType_t, ncclRedOp_t, ncclComm_t,
    /// cudaStream_t)`.
    pub(crate) type ReduceScatter =
        unsafe extern "C" fn(*const c_void, *mut c_void, usize, DataType, RedOp, Comm, Stream) -> NcclResult;
    /// `ncclBroadcast(const void*, void*, size_t, ncclDataType_t, int root, ncclComm_t, cudaStream_t)`.
    pub type Broadcast =
        unsafe extern "C" fn(*const c_void, *mut c_void, usize, DataType, c_int, Comm, Stream) -> NcclResult;
    /// `ncclReduce(const void*, void*, size_t, ncclDataType_t, ncclRedOp_t, int root, ncclComm_t, cudaStream_t)`.
    pub(crate) type Reduce =
        unsafe extern "C" fn(*const c_void, *mut c_void, usize, DataType, RedOp, c_int, Comm, Stream) -> NcclResult;
    /// `ncclSend(const void*, size_t, ncclDataType_t, int peer, ncclComm_t, cudaStream_t)`.
    pub type Send = unsafe extern "C" fn(*const c_void, usize, DataType, c_int, Comm, Stream) -> NcclResult;
    /// `ncclRecv(void*, size_t, ncclDataType_t, int peer, ncclComm_t, cudaStream_t)`.
    pub type Recv = unsafe extern "C" fn(*mut c_void, usize, DataType, c_int, Comm, Stream) -> NcclResult;
    /// `ncclGroupStart()` and `ncclGroupEnd()`.
    pub type Group = unsafe extern "C" fn() -> NcclResult;
    /// `ncclCommSplit(ncclComm_t, int color, int key, ncclComm_t*, ncclConfig_t*)` (NCCL 2.18 and later; a null
    /// config inherits the parent's).
    pub(crate) type CommSplit = unsafe extern "C" fn(Comm, c_int, c_int, *mut Comm, *mut c_void) -> NcclResult;
}

/// The symbols of every other collective, point-to-point and `ncclCommSplit`:
/// resolved at load where present, and required only by what uses them
/// (imported traces), so an older NCCL still runs the all-reduce workload.
pub(crate) struct TraceSymbols {
    reduce_scatter: Option<Symbol<sys::ReduceScatter>>,
    broadcast: Option<Symbol<sys::Broadcast>>,
    reduce: Option<Symbol<sys::Reduce>>,
    send: Option<Symbol<sys::Send>>,
    recv: Option<Symbol<sys::Recv>>,
    group_start: Option<Symbol<sys::Group>>,
    group_end: Option<Symbol<sys::Group>>,
    comm_split: Option<Symbol<sys::CommSplit>>,
}

/// One symbol of [`TraceSymbols`], or an error naming it and the library.
fn need<'a, T>(s: &'a Option<Symbol<T>>, name: &str, lib: &NcclObservation) -> Result<&'a Symbol<T>> {
    s.as_ref()
        .with_context(|| format!("NCCL {} ({}) lacks {name}, which this trace needs", lib.version, lib.canonical_path))
}

/// Symbols every supported NCCL must export (resolved eagerly so a wrong
/// library fails at load, not mid-run).
pub(crate) const REQUIRED_SYMBOLS: [&str; 9] = [
    "ncclGetVersion",
    "ncclGetErrorString",
    "ncclGetUniqueId",
    "ncclCommInitRank",
    "ncclAllReduce",
    "ncclAllGather",
    "ncclCommDestroy",
    "ncclCommAbort",
    "ncclCommGetAsyncError",
];

/// What was loaded, observed two ways.
#[derive(schemars::JsonSchema, Serialize, Deserialize, Clone, Debug, PartialEq)]
pub struct NcclObservation {
    /// Path as requested.
    pub requested_path: String,
    /// Requested path with symlinks resolved.
    pub canonical_path: String,
    /// Every NCCL file mapped into this process after loading (`/proc/self/maps`).
    pub mapped_paths: Vec<String>,
    /// Raw `ncclGetVersion` code.
    pub version_code: i32,
    /// Decoded version, e.g. `2.28.3`.
    pub version: String,
    /// SHA-256 of the library file.
    pub sha256: String,
}

/// A loaded NCCL library.
pub struct NcclLibrary {
    _lib: Library,
    get_error_string: Symbol<sys::GetErrorString>,
    get_unique_id: Symbol<sys::GetUniqueId>,
    comm_init_rank: Symbol<sys::CommInitRank>,
    all_reduce: Symbol<sys::AllReduce>,
    all_gather: Symbol<sys::AllGather>,
    comm_destroy: Symbol<sys::CommEnd>,
    comm_abort: Symbol<sys::CommEnd>,
    comm_get_async_error: Symbol<sys::CommGetAsyncError>,
    trace: TraceSymbols,
    observation: NcclObservation,
}

/// Decode an `ncclGetVersion` code (2.9+: `major*10000 + minor*100 + patch`; older: `*1000 + *100`).
pub(crate) fn decode_version(code: i32) -> String {
    if code >= 20900 {
        format!("{}.{}.{}", code / 10000, (code % 10000) / 100, code % 100)
    } else {
        format!("{}.{}.{}", code / 1000, (code % 1000) / 100, code % 100)
    }
}

/// NCCL files currently mapped into this process.
pub(crate) fn mapped_nccl_paths() -> Vec<String> {
    let maps = std::fs::read_to_string("/proc/self/maps").unwrap_or_default();
    let mut v: Vec<String> = maps
        .lines()
        .filter_map(|l| l.split_whitespace().nth(5))
        .filter(|p| Path::new(p).file_name().is_some_and(|f| f.to_string_lossy().starts_with("libnccl")))
        .map(str::to_string)
        .collect();
    v.sort();
    v.dedup();
    v
}

impl NcclLibrary {
    /// Load exactly `path` and verify it. A bare file name (no `/`) is
    /// resolved by the system loader's search; the file actually mapped then
    /// becomes the canonical path (the search order itself proves nothing).
    pub fn load(path: &Path) -> Result<Self> {
        let bare = path.components().count() == 1 && !path.to_string_lossy().contains('/');
        let before = mapped_nccl_paths();
        let (lib, canonical): (Library, PathBuf) = if bare {
            // SAFETY: loading a shared library runs its initialisers; NCCL's are benign.
            let lib = unsafe { Library::open(Some(path), RTLD_NOW | RTLD_LOCAL) }
                .with_context(|| format!("NCCL library {} could not be found by the system loader", path.display()))?;
            let new: Vec<String> = mapped_nccl_paths().into_iter().filter(|p| !before.contains(p)).collect();
            let one = match new.as_slice() {
                [one] => PathBuf::from(one),
                _ => bail!(
                    "loading {} mapped {:?}: cannot tell which NCCL file is in use; pass an explicit path",
                    path.display(),
                    new
                ),
            };
            (lib, one)
        } else {
            let canonical: PathBuf = std::fs::canonicalize(path)
                .with_context(|| format!("NCCL library {}: no such file", path.display()))?;
            // SAFETY: as above.
            let lib = unsafe { Library::open(Some(&canonical), RTLD_NOW | RTLD_LOCAL) }
                .with_context(|| format!("NCCL library {} could not be loaded", path.display()))?;
            (lib, canonical)
        };
        for name in REQUIRED_SYMBOLS {
            let cname = format!("{name}\0");
            // SAFETY: only checks presence; the pointer is not called here.
            unsafe { lib.get::<*const ()>(cname.as_bytes()) }
                .map_err(|_| anyhow::anyhow!("{} is not a usable NCCL: it lacks the symbol {name}", path.display()))?;
        }
        // SAFETY: the signatures match NCCL's public header (nccl.h, 2.x) for these functions.
        let (
            get_version,
            get_error_string,
            get_unique_id,
            comm_init_rank,
            all_reduce,
            all_gather,
            comm_destroy,
            comm_abort,
            comm_get_async_error,
        ) = unsafe {
            (
                lib.get::<sys::GetVersion>(b"ncclGetVersion\0")?,
                lib.get::<sys::GetErrorString>(b"ncclGetErrorString\0")?,
                lib.get::<sys::GetUniqueId>(b"ncclGetUniqueId\0")?,
                lib.get::<sys::CommInitRank>(b"ncclCommInitRank\0")?,
                lib.get::<sys::AllReduce>(b"ncclAllReduce\0")?,
                lib.get::<sys::AllGather>(b"ncclAllGather\0")?,
                lib.get::<sys::CommEnd>(b"ncclCommDestroy\0")?,
                lib.get::<sys::CommEnd>(b"ncclCommAbort\0")?,
                lib.get::<sys::CommGetAsyncError>(b"ncclCommGetAsyncError\0")?,
            )
        };
        // SAFETY: the signatures match nccl.h (2.x; ncclCommSplit since 2.18); absent symbols stay None.
        let trace = unsafe {
            TraceSymbols {
                reduce_scatter: lib.get::<sys::ReduceScatter>(b"ncclReduceScatter\0").ok(),
                broadcast: lib.get::<sys::Broadcast>(b"ncclBroadcast\0").ok(),
                reduce: lib.get::<sys::Reduce>(b"ncclReduce\0").ok(),
                send: lib.get::<sys::Send>(b"ncclSend\0").ok(),
                recv: lib.get::<sys::Recv>(b"ncclRecv\0").ok(),
                group_start: lib.get::<sys::Group>(b"ncclGroupStart\0").ok(),
                group_end: lib.get::<sys::Group>(b"ncclGroupEnd\0").ok(),
                comm_split: lib.get::<sys::CommSplit>(b"ncclCommSplit\0").ok(),
            }
        };
        let mut code: c_int = 0;
        // SAFETY: ncclGetVersion writes one int.
        let rc = unsafe { get_version(&mut code) };
        if rc != sys::NCCL_SUCCESS {
            bail!("ncclGetVersion in {} failed with NCCL error {rc}", path.display());
        }
        let mapped = mapped_nccl_paths();
        let canon = canonical.display().to_string();
        if !mapped.iter().any(|m| m == &canon) {
            bail!(
                "asked for {} ({canon}) but /proc/self/maps shows {:?}: refusing to run with a library that is not the \
                    one requested",
                path.display(),
                mapped
            );
        }
        let sha256 = fsutil::sha256_file(&canonical)?;
        Ok(Self {
            _lib: lib,
            get_error_string,
            get_unique_id,
            comm_init_rank,
            all_reduce,
            all_gather,
            comm_destroy,
            comm_abort,
            comm_get_async_error,
            trace,
            observation: NcclObservation {
                requested_path: path.display().to_string(),
                canonical_path: canon,
                mapped_paths: mapped,
                version_code: code,
                version: decode_version(code),
                sha256,
            },
        })
    }

    /// The two observations of what was loaded.
    pub fn observation(&self) -> &NcclObservation {
        &self.observation
    }

    /// Turn an NCCL result into an error naming the call, the code and NCCL's message.
    pub fn check(&self, call: &str, rc: sys::NcclResult) -> Result<()> {
        if rc == sys::NCCL_SUCCESS {
            return Ok(());
        }
        // SAFETY: ncclGetErrorString returns a static C string.
        let msg: *const c_char = unsafe { (self.get_error_string)(rc) };
        let text = if msg.is_null() {
            "(no message)".into()
        } else {
            // SAFETY: non-null, and NCCL's error strings are static NUL-terminated literals.
            unsafe { CStr::from_ptr(msg) }.to_string_lossy().into_owned()
        };
        bail!("{call} failed: NCCL error {rc}: {text}")
    }

    /// `ncclGetUniqueId` (rank 0 only; broadcast the bytes).
    pub fn unique_id(&self) -> Result<[u8; 128]> {
        let mut id = sys::UniqueId { internal: [0; 128] };
        // SAFETY: writes 128 bytes into id.
        self.check("ncclGetUniqueId", unsafe { (self.get_unique_id)(&mut id) })?;
        Ok(id.internal.map(|c| c as u8))
    }
}

/// One NCCL call the backend enqueues (a world call or a trace collective): device pointers, counts in elements
/// of `dtype`, reductions as `op`, root and peer as ranks of the communicator.
#[derive(Clone, Copy, Debug)]
#[allow(missing_docs)]
pub(crate) enum NcclCall {
    AllReduce { send: u64, recv: u64, count: usize, dtype: DataType, op: RedOp },
    AllGather { send: u64, recv: u64, count: usize, dtype: DataType },
    ReduceScatter { send: u64, recv: u64, recv_count: usize, dtype: DataType, op: RedOp },
    Broadcast { send: u64, recv: u64, count: usize, dtype: DataType, root: c_int },
    Reduce { send: u64, recv: u64, count: usize, dtype: DataType, op: RedOp, root: c_int },
    Send { buf: u64, count: usize, dtype: DataType, peer: c_int },
    Recv { buf: u64, count: usize, dtype: DataType, peer: c_int },
}

impl From<shard::Dtype> for DataType {
    /// NCCL's data type of a run's element type.
    fn from(dtype: shard::Dtype) -> Self {
        match dtype {
            shard::Dtype::F32 => DataType::Float32,
            shard::Dtype::Bf16 => DataType::Bfloat16,
        }
    }
}

impl From<ReduceOp> for RedOp {
    /// NCCL's reduction of a workload's reduction (every one has its own).
    fn from(op: ReduceOp) -> Self {
        use crate::core::workload::ReduceOp as W;
        match op {
            W::Sum => RedOp::Sum,
            W::Prod => RedOp::Prod,
            W::Max => RedOp::Max,
            W::Min => RedOp::Min,
            W::Avg => RedOp::Avg,
        }
    }
}

impl DataType {
    /// NCCL's data type of a trace's element type; `bool` travels as `ncclUint8`
    /// (one byte each), which only data movement may use: a reduction over it is refused.
    pub(crate) fn of_trace(d: collective::TraceDtype, reduces: bool) -> Result<Self> {
        use crate::core::collective::TraceDtype as T;
        Ok(match d {
            T::F32 => DataType::Float32,
            T::Bf16 => DataType::Bfloat16,
            T::F16 => DataType::Float16,
            T::F64 => DataType::Float64,
            T::I8 => DataType::Int8,
            T::U8 => DataType::Uint8,
            T::I32 => DataType::Int32,
            T::I64 => DataType::Int64,
            T::Bool if !reduces => DataType::Uint8,
            T::Bool => bail!("a reduction over bool has no NCCL data type"),
        })
    }
}

/// A communicator; destroyed on drop (aborted when [`NcclComm::abort`] was asked for).
pub(crate) struct NcclComm {
    lib: std::sync::Arc<NcclLibrary>,
    comm: sys::Comm,
}

impl NcclComm {
    /// `ncclCommInitRank` with the broadcast id. The CUDA context of the
    /// target device must be current on this thread.
    pub fn init_rank(lib: std::sync::Arc<NcclLibrary>, nranks: u32, id: [u8; 128], rank: u32) -> Result<Self> {
        let id = sys::UniqueId { internal: id.map(|b| b as c_char) };
        let mut comm: sys::Comm = std::ptr::null_mut();
        // SAFETY: comm receives a handle; id is passed by value as nccl.h declares.
        let rc = unsafe { (lib.comm_init_rank)(&mut comm, nranks as c_int, id, rank as c_int) };
        lib.check("ncclCommInitRank", rc)?;
        Ok(Self { lib, comm })
    }

    /// The communicator of every rank of `world`: rank 0's `ncclGetUniqueId`,
    /// broadcast over MPI under `timeout` (naming `phase` if it times out),
    /// then `ncclCommInitRank`. Collective over `world`; the CUDA context of
    /// the target device must be current on this thread.
    pub fn bootstrap(
        world: &mpi::topology::SimpleCommunicator,
        lib: std::sync::Arc<NcclLibrary>,
        timeout: std::time::Duration,
        phase: &str,
    ) -> Result<Self> {
        use mpi::topology::Communicator;
        let rank = world.rank() as u32;
        let mut id = [0u8; 128];
        if rank == 0 {
            id = lib.unique_id()?;
        }
        let op = mpi_deadline::Op { what: "broadcast of the NCCL unique id", phase, peer: Some(0) };
        mpi_deadline::broadcast(world, 0, &mut id[..], timeout, op)?;
        Self::init_rank(lib, world.size() as u32, id, rank)
    }

    /// Enqueue a sum all-reduce of `count` elements of `dtype` on `stream`.
    ///
    /// # Safety
    /// `send`/`recv` must be device pointers valid for `count` elements of
    /// `dtype` on this communicator's device, and `stream` a stream of its context.
    pub unsafe fn all_reduce_sum(
        &self,
        send: u64,
        recv: u64,
        count: usize,
        dtype: shard::Dtype,
        stream: *mut std::ffi::c_void,
    ) -> Result<()> {
        // SAFETY: the caller guarantees the pointers and stream (see # Safety); `self.comm` is a live communicator.
        let rc = unsafe {
            (self.lib.all_reduce)(
                send as *const std::ffi::c_void,
                recv as *mut std::ffi::c_void,
                count,
                dtype.into(),
                RedOp::Sum,
                self.comm,
                stream,
            )
        };
        self.lib.check("ncclAllReduce", rc)
    }

    /// `ncclCommSplit(color, key)`: the new communicator of this rank's
    /// color, ranked by key, or `None` for [`sys::NCCL_SPLIT_NOCOLOR`].
    /// Collective over this communicator: every member calls it, in the same order.
    pub fn split(&self, color: c_int, key: c_int) -> Result<Option<NcclComm>> {
        let f = need(&self.lib.trace.comm_split, "ncclCommSplit (NCCL 2.18 or later)", &self.lib.observation)?;
        let mut comm: sys::Comm = std::ptr::null_mut();
        // SAFETY: `self.comm` is live; comm receives a handle or stays null; a null config inherits the parent's.
        let rc = unsafe { f(self.comm, color, key, &mut comm, std::ptr::null_mut()) };
        self.lib.check("ncclCommSplit", rc)?;
        Ok((!comm.is_null()).then(|| NcclComm { lib: self.lib.clone(), comm }))
    }

    /// Enqueue one operation of an imported trace on `stream`.
    ///
    /// # Safety
    /// Every device pointer in `op` must be valid on this communicator's
    /// device for the counts it names, and `stream` a stream of its context.
    pub unsafe fn enqueue(&self, op: &NcclCall, stream: *mut std::ffi::c_void) -> Result<()> {
        let o = &self.lib.observation;
        let t = &self.lib.trace;
        let vp = |p: u64| p as *const std::ffi::c_void;
        let mp = |p: u64| p as *mut std::ffi::c_void;
        let c = self.comm;
        let (call, rc) = match *op {
            NcclCall::AllReduce { send, recv, count, dtype, op } => {
                // SAFETY: the caller guarantees pointers, count and stream; `c` is live.
                let rc = unsafe { (self.lib.all_reduce)(vp(send), mp(recv), count, dtype, op, c, stream) };
                ("ncclAllReduce", rc)
            }
            NcclCall::AllGather { send, recv, count, dtype } => {
                // SAFETY: as above.
                let rc = unsafe { (self.lib.all_gather)(vp(send), mp(recv), count, dtype, c, stream) };
                ("ncclAllGather", rc)
            }
            NcclCall::ReduceScatter { send, recv, recv_count, dtype, op } => {
                let f = need(&t.reduce_scatter, "ncclReduceScatter", o)?;
                // SAFETY: as above.
                let rc = unsafe { f(vp(send), mp(recv), recv_count, dtype, op, c, stream) };
                ("ncclReduceScatter", rc)
            }
            NcclCall::Broadcast { send, recv, count, dtype, root } => {
                let f = need(&t.broadcast, "ncclBroadcast", o)?;
                // SAFETY: as above.
                let rc = unsafe { f(vp(send), mp(recv), count, dtype, root, c, stream) };
                ("ncclBroadcast", rc)
            }
            NcclCall::Reduce { send, recv, count, dtype, op, root } => {
                let f = need(&t.reduce, "ncclReduce", o)?;
                // SAFETY: as above.
                let rc = unsafe { f(vp(send), mp(recv), count, dtype, op, root, c, stream) };
                ("ncclReduce", rc)
            }
            NcclCall::Send { buf, count, dtype, peer } => {
                let f = need(&t.send, "ncclSend", o)?;
                // SAFETY: as above.
                let rc = unsafe { f(vp(buf), count, dtype, peer, c, stream) };
                ("ncclSend", rc)
            }
            NcclCall::Recv { buf, count, dtype, peer } => {
                let f = need(&t.recv, "ncclRecv", o)?;
                // SAFETY: as above.
                let rc = unsafe { f(mp(buf), count, dtype, peer, c, stream) };
                ("ncclRecv", rc)
            }
        };
        self.lib.check(call, rc)
    }

    /// `ncclGroupStart` / `ncclGroupEnd` (fuses the point-to-point calls between them, e.g. an all-to-all).
    pub fn group(&self, start: bool) -> Result<()> {
        let (f, name) = if start {
            (&self.lib.trace.group_start, "ncclGroupStart")
        } else {
            (&self.lib.trace.group_end, "ncclGroupEnd")
        };
        let f = need(f, name, &self.lib.observation)?;
        // SAFETY: no arguments; pairs are balanced by the caller.
        let rc = unsafe { f() };
        self.lib.check(name, rc)
    }

    /// `ncclCommGetAsyncError`: an error raised by NCCL's own threads.
    pub fn async_error(&self) -> Result<()> {
        let mut e: sys::NcclResult = sys::NCCL_SUCCESS;
        // SAFETY: writes one int.
        let rc = unsafe { (self.lib.comm_get_async_error)(self.comm, &mut e) };
        self.lib.check("ncclCommGetAsyncError", rc)?;
        self.lib.check("NCCL asynchronous operation", e)
    }

    /// `ncclCommAbort`: end the communicator without waiting for peers; later
    /// calls on it fail and drop does nothing more.
    pub fn abort(&mut self) -> Result<()> {
        if self.comm.is_null() {
            return Ok(());
        }
        let c = std::mem::replace(&mut self.comm, std::ptr::null_mut());
        // SAFETY: c is a live communicator, ended exactly once.
        let rc = unsafe { (self.lib.comm_abort)(c) };
        self.lib.check("ncclCommAbort", rc)
    }
}

impl Drop for NcclComm {
    fn drop(&mut self) {
        if !self.comm.is_null() {
            // SAFETY: live communicator, ended exactly once.
            let _ = unsafe { (self.lib.comm_destroy)(self.comm) };
        }
    }
}

/// Candidate NCCL libraries on this machine: the loader cache, the usual
/// directories and Python wheels (`nvidia/nccl/lib`).
pub(crate) fn find_candidates() -> Vec<PathBuf> {
    let mut dirs: Vec<PathBuf> =
        ["/usr/lib/x86_64-linux-gnu", "/usr/lib64", "/usr/local/cuda/lib64", "/usr/local/lib", "/usr/lib"]
            .iter()
            .map(PathBuf::from)
            .collect();
    if let Ok(p) = std::env::var("LD_LIBRARY_PATH") {
        dirs.extend(p.split(':').filter(|s| !s.is_empty()).map(PathBuf::from));
    }
    for root in ["/opt", "/usr/local/lib", "/usr/lib"] {
        // .../site-packages/nvidia/nccl/lib, at most a few levels down
        let pattern_walk = |start: &Path| -> Vec<PathBuf> {
            let mut found = Vec::new();
            let mut stack = vec![(start.to_path_buf(), 0)];
            while let Some((d, depth)) = stack.pop() {
                if depth > 7 {
                    continue;
                }
                let Ok(rd) = std::fs::read_dir(&d) else { continue };
                for e in rd.flatten() {
                    let p = e.path();
                    if p.is_dir() && !p.is_symlink() {
                        if p.ends_with("nvidia/nccl/lib") {
                            found.push(p.clone());
                        }
                        stack.push((p, depth + 1));
                    }
                }
            }
            found
        };
        dirs.extend(pattern_walk(Path::new(root)));
    }
    let mut out = Vec::new();
    for d in dirs {
        let Ok(rd) = std::fs::read_dir(&d) else { continue };
        for e in rd.flatten() {
            let name = e.file_name().to_string_lossy().into_owned();
            if name.starts_with("libnccl.so") {
                if let Ok(c) = std::fs::canonicalize(e.path()) {
                    if !out.contains(&c) {
                        out.push(c);
                    }
                }
            }
        }
    }
    out.sort();
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn versions_decode() {
        assert_eq!(decode_version(22803), "2.28.3");
        assert_eq!(decode_version(22809), "2.28.9");
        assert_eq!(decode_version(2804), "2.8.4");
    }

    #[test]
    fn missing_file_is_a_clear_error() {
        let e = NcclLibrary::load(Path::new("/nonexistent/libnccl.so.2")).err().expect("must fail");
        assert!(format!("{e:#}").contains("/nonexistent/libnccl.so.2: no such file"), "{e:#}");
    }

    #[test]
    fn a_library_that_is_not_nccl_is_refused_by_symbol() {
        // libm is on every glibc system and exports none of NCCL's symbols.
        let libm = ["/lib/x86_64-linux-gnu/libm.so.6", "/usr/lib/x86_64-linux-gnu/libm.so.6", "/lib64/libm.so.6"]
            .into_iter()
            .map(Path::new)
            .find(|p| p.exists())
            .expect("libm.so.6 present");
        let e = NcclLibrary::load(libm).err().expect("must fail");
        assert!(format!("{e:#}").contains("lacks the symbol ncclGetVersion"), "{e:#}");
    }

    #[test]
    fn a_non_library_file_is_a_clear_error() {
        let d = tempfile::tempdir().unwrap();
        let p = d.path().join("libnccl.so.2");
        std::fs::write(&p, b"not an ELF file").unwrap();
        let e = NcclLibrary::load(&p).err().expect("must fail");
        assert!(format!("{e:#}").contains("could not be loaded"), "{e:#}");
    }
}
