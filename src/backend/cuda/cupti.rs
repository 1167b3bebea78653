//! CUPTI kernel activity records: what ran on the GPU, when, on which stream.
//!
//! Consumes `libcupti` (a missing library is a reason recorded in the shard,
//! never a panic). Produces, per pass, the kernels that executed (start, end,
//! stream, correlation id, name) on this rank's host clock. A record that
//! fails the sanity checks (end before start, no name) is counted as
//! malformed, not used. Method: docs/METHODS.md, "CUPTI kernel records".
use anyhow::{bail, Context, Result};
use cudarc::cupti::result::{self as cupti, activity};
use cudarc::cupti::sys::{
    culib, is_culib_present, CUpti_Activity, CUpti_ActivityKernel10, CUpti_ActivityKernel5, CUpti_ActivityKind,
};
use cudarc::driver::sys::CUcontext;
use libloading::Library;
use std::os::raw;
use std::sync::Mutex;

/// The kind enabled: concurrent-kernel records.
const KIND: CUpti_ActivityKind = CUpti_ActivityKind::CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL;
/// The record kinds read back (a record's leading `u32`, read as a number,
/// never as the enum: CUPTI may write kinds the bindings do not know).
const KIND_CONCURRENT_KERNEL: u32 = CUpti_ActivityKind::CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL as u32;
const KIND_KERNEL: u32 = CUpti_ActivityKind::CUPTI_ACTIVITY_KIND_KERNEL as u32;
const BUFFER_BYTES: usize = 8 << 20;

/// One kernel as CUPTI reported it (CUPTI timestamps, ns).
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct RawKernel {
    /// Start.
    pub start: u64,
    /// End.
    pub end: u64,
    /// CUPTI stream id.
    pub stream: u32,
    /// Correlation id with the launching API call.
    pub correlation: u32,
    /// Kernel name.
    pub name: String,
}

/// Kernel records that did not become kernels: counts over the buffers CUPTI returned.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct LostRecords {
    /// Records that failed the sanity checks (end before start, no name).
    pub malformed: u64,
    /// Records CUPTI could not store for want of buffer space.
    pub dropped: u64,
    /// Buffers whose dropped count CUPTI would not give (their losses are unknown).
    pub dropped_unread: u64,
}

impl LostRecords {
    /// Add another drain's counts.
    pub fn add(&mut self, o: LostRecords) {
        self.malformed += o.malformed;
        self.dropped += o.dropped;
        self.dropped_unread += o.dropped_unread;
    }

    /// Whether anything was lost, or may have been.
    pub fn any(&self) -> bool {
        *self != LostRecords::default()
    }
}

struct Collected {
    kernels: Vec<RawKernel>,
    lost: LostRecords,
}

static COLLECTED: Mutex<Collected> =
    Mutex::new(Collected { kernels: Vec::new(), lost: LostRecords { malformed: 0, dropped: 0, dropped_unread: 0 } });

unsafe extern "C" fn buffer_requested(buffer: *mut *mut u8, size: *mut usize, max_records: *mut usize) {
    // SAFETY: CUPTI passes valid out-pointers; the buffer is freed in buffer_completed.
    unsafe {
        let p = libc::aligned_alloc(8, BUFFER_BYTES) as *mut u8;
        *buffer = p;
        *size = if p.is_null() { 0 } else { BUFFER_BYTES };
        *max_records = 0;
    }
}

/// The kernel record whose layout is read: the oldest one CUPTI may still
/// deliver for `CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL`. Newer records only
/// append fields; the assertions below check, at compile time, that the
/// fields read sit at the same offsets in the newest record of the CUDA
/// version the bindings target.
type KernelRecord = CUpti_ActivityKernel5;
type NewestKernelRecord = CUpti_ActivityKernel10;

const OFF_START: usize = std::mem::offset_of!(KernelRecord, start);
const OFF_END: usize = std::mem::offset_of!(KernelRecord, end);
const OFF_STREAM: usize = std::mem::offset_of!(KernelRecord, streamId);
const OFF_CORRELATION: usize = std::mem::offset_of!(KernelRecord, correlationId);
const OFF_NAME: usize = std::mem::offset_of!(KernelRecord, name);
const _: () = {
    assert!(std::mem::offset_of!(KernelRecord, kind) == 0);
    assert!(OFF_START == std::mem::offset_of!(NewestKernelRecord, start));
    assert!(OFF_END == std::mem::offset_of!(NewestKernelRecord, end));
    assert!(OFF_STREAM == std::mem::offset_of!(NewestKernelRecord, streamId));
    assert!(OFF_CORRELATION == std::mem::offset_of!(NewestKernelRecord, correlationId));
    assert!(OFF_NAME == std::mem::offset_of!(NewestKernelRecord, name));
};

/// Read the leading fields of a kernel record.
///
/// # Safety
/// `rec` must point to a CUPTI kernel activity record (at least
/// `size_of::<KernelRecord>()` readable bytes).
unsafe fn read_kernel(rec: *const u8) -> Option<RawKernel> {
    // SAFETY: every offset lies inside `KernelRecord`, which
    // the caller guarantees is readable; reads are unaligned-tolerant.
    let rd_u64 = |off: usize| unsafe { std::ptr::read_unaligned(rec.add(off) as *const u64) };
    // SAFETY: as above.
    let rd_u32 = |off: usize| unsafe { std::ptr::read_unaligned(rec.add(off) as *const u32) };
    let start = rd_u64(OFF_START);
    let end = rd_u64(OFF_END);
    // SAFETY: as above; the name field is a pointer.
    let name_ptr = unsafe { std::ptr::read_unaligned(rec.add(OFF_NAME) as *const *const raw::c_char) };
    if name_ptr.is_null() || end < start || start == 0 {
        return None;
    }
    // SAFETY: CUPTI's kernel names are NUL-terminated strings owned by CUPTI
    // and valid while the buffer is being processed.
    let name = unsafe { std::ffi::CStr::from_ptr(name_ptr) }.to_string_lossy().into_owned();
    Some(RawKernel { start, end, stream: rd_u32(OFF_STREAM), correlation: rd_u32(OFF_CORRELATION), name })
}

unsafe extern "C" fn buffer_completed(ctx: CUcontext, stream: u32, buffer: *mut u8, _size: usize, valid: usize) {
    if buffer.is_null() {
        return;
    }
    let mut got = Vec::new();
    let mut malformed = 0;
    let mut rec: *mut CUpti_Activity = std::ptr::null_mut();
    // SAFETY: buffer/valid come from CUPTI; records are read only through CUPTI's iterator.
    unsafe {
        while activity::get_next_record(buffer, valid, &mut rec).is_ok() && !rec.is_null() {
            let kind = std::ptr::read_unaligned(rec as *const u32);
            if kind == KIND_CONCURRENT_KERNEL || kind == KIND_KERNEL {
                match read_kernel(rec as *const u8) {
                    Some(k) => got.push(k),
                    None => malformed += 1,
                }
            }
        }
    }
    // Records CUPTI could not store for want of buffer space (its documented
    // check in the completion callback; the count resets when read): counted,
    // so that a run that lost kernels says so.
    let mut dropped = 0usize;
    // SAFETY: ctx and stream are the ones CUPTI passed; writes one usize.
    let read = unsafe { activity::get_num_dropped_records(ctx, stream, &mut dropped) }.is_ok();
    // SAFETY: allocated by aligned_alloc in buffer_requested.
    unsafe { libc::free(buffer as *mut libc::c_void) };
    let mut c = COLLECTED.lock().unwrap_or_else(|e| e.into_inner());
    c.kernels.extend(got);
    c.lost.add(LostRecords {
        malformed,
        dropped: if read { dropped as u64 } else { 0 },
        dropped_unread: u64::from(!read),
    });
}

/// An enabled CUPTI kernel-activity session. The library is never unloaded:
/// CUPTI registers exit-time work of its own, and unloading it before the
/// process exits made ranks crash at exit on the H200s.
pub(crate) struct Cupti {
    _lib: std::mem::ManuallyDrop<Library>,
    /// Library file that was loaded.
    pub path: String,
}

/// Candidate CUPTI libraries, in order.
pub fn candidates() -> Vec<String> {
    let mut v: Vec<String> =
        ["libcupti.so.13", "libcupti.so.12", "libcupti.so"].iter().map(|s| s.to_string()).collect();
    for d in ["/usr/local/cuda/extras/CUPTI/lib64", "/usr/local/cuda/lib64"] {
        v.push(format!("{d}/libcupti.so"));
    }
    v
}

impl Cupti {
    /// Load CUPTI and enable concurrent-kernel records (call before kernels launch).
    pub fn start() -> Result<Self> {
        let mut last = String::new();
        for c in candidates() {
            // SAFETY: loading CUPTI runs its initialisers; that is how it is used.
            match unsafe { Library::new(&c) } {
                Ok(lib) => return Self::enable(lib, c),
                Err(e) => last = format!("{c}: {e}"),
            }
        }
        bail!("CUPTI not found (tried {}; last error {last})", candidates().join(", "))
    }

    fn enable(lib: Library, path: String) -> Result<Self> {
        // cudarc loads CUPTI by soname; it must find the file loaded here (an
        // already-loaded soname resolves to it), not panic or take another.
        // SAFETY: probing library names with dlopen; nothing is called.
        if !unsafe { is_culib_present() } {
            bail!(
                "CUPTI was loaded from {path}, but cudarc finds no CUPTI by its sonames (tried {}); add its directory \
                    to LD_LIBRARY_PATH",
                super::probe::lib_names("cupti")
            );
        }
        // SAFETY: looking up a symbol's address in two handles; nothing is called.
        let same = unsafe {
            let ours = lib.get::<*const ()>(b"cuptiActivityEnable\0").map(|s| *s).context("cuptiActivityEnable")?;
            let theirs =
                culib().get::<*const ()>(b"cuptiActivityEnable\0").map(|s| *s).context("cuptiActivityEnable")?;
            ours == theirs
        };
        if !same {
            bail!(
                "CUPTI was loaded from {path}, but cudarc resolved another CUPTI library; put {path}'s directory \
                first in LD_LIBRARY_PATH"
            );
        }
        activity::register_callbacks(Some(buffer_requested), Some(buffer_completed))
            .map_err(|e| anyhow::anyhow!("cuptiActivityRegisterCallbacks failed: {e}"))?;
        activity::enable(KIND).map_err(|e| {
            anyhow::anyhow!(
                "cuptiActivityEnable(CONCURRENT_KERNEL) failed: {e} (profiling may be restricted on this machine)"
            )
        })?;
        Ok(Self { _lib: std::mem::ManuallyDrop::new(lib), path })
    }

    /// Turn kernel records on or off for the kernels launched from now on.
    pub fn set_enabled(&self, on: bool) -> Result<()> {
        let r = if on { activity::enable(KIND) } else { activity::disable(KIND) };
        r.map_err(|e| {
            anyhow::anyhow!("cuptiActivity{}(CONCURRENT_KERNEL) failed: {e}", if on { "Enable" } else { "Disable" })
        })
    }

    /// CUPTI's clock now, ns.
    pub fn timestamp(&self) -> Result<u64> {
        let mut t = 0u64;
        // SAFETY: writes one u64.
        unsafe { cupti::get_timestamp(&mut t) }.map_err(|e| anyhow::anyhow!("cuptiGetTimestamp failed: {e}"))?;
        Ok(t)
    }

    /// Flush and take every kernel recorded so far, with the records lost since the last drain.
    pub fn drain(&self) -> Result<(Vec<RawKernel>, LostRecords)> {
        // A forced flush of all buffers; the completion callbacks run before it returns.
        activity::flush_all(1).map_err(|e| anyhow::anyhow!("cuptiActivityFlushAll failed: {e}"))?;
        let mut c = COLLECTED.lock().unwrap_or_else(|e| e.into_inner());
        let k = std::mem::take(&mut c.kernels);
        Ok((k, std::mem::take(&mut c.lost)))
    }
}

impl Drop for Cupti {
    fn drop(&mut self) {
        let _ = activity::disable(KIND);
        // A final flush, so that CUPTI returns its buffers.
        let _ = activity::flush_all(1);
    }
}
#[cfg(test)]
mod tests {
    #[test]
    fn lost_records_add_up_and_an_unread_count_is_a_loss() {
        let mut l = super::LostRecords::default();
        assert!(!l.any());
        l.add(super::LostRecords { malformed: 1, dropped: 2, dropped_unread: 0 });
        l.add(super::LostRecords { malformed: 0, dropped: 3, dropped_unread: 0 });
        assert_eq!((l.malformed, l.dropped, l.dropped_unread), (1, 5, 0));
        let unread = super::LostRecords { dropped_unread: 1, ..Default::default() };
        assert!(unread.any(), "a buffer whose dropped count could not be read is not a clean pass");
    }

    #[test]
    fn reads_the_leading_fields_at_their_offsets() {
        let name = std::ffi::CString::new("ncclDevKernel_AllReduce_Sum_f32_RING_LL").unwrap();
        let mut rec = [0u8; 160];
        rec[0..4].copy_from_slice(&10u32.to_le_bytes());
        rec[16..24].copy_from_slice(&1_000u64.to_le_bytes());
        rec[24..32].copy_from_slice(&1_500u64.to_le_bytes());
        rec[48..52].copy_from_slice(&7u32.to_le_bytes());
        rec[92..96].copy_from_slice(&42u32.to_le_bytes());
        rec[104..112].copy_from_slice(&(name.as_ptr() as usize as u64).to_le_bytes());
        // SAFETY: rec is laid out as a kernel record's leading fields.
        let k = unsafe { super::read_kernel(rec.as_ptr()) }.unwrap();
        assert_eq!((k.start, k.end, k.stream, k.correlation), (1_000, 1_500, 7, 42));
        assert!(k.name.starts_with("ncclDevKernel"));
        rec[24..32].copy_from_slice(&500u64.to_le_bytes());
        // SAFETY: as above.
        assert!(unsafe { super::read_kernel(rec.as_ptr()) }.is_none(), "end before start is malformed");
    }
}
