//! CUPTI kernel activity records: what ran on the GPU, when, on which stream.
//!
//! Consumes `libcupti` (loaded at run time by our own dlopen, like NCCL; a
//! missing library is a reason recorded in the shard, never a panic).
//! Produces, per pass, the kernels that executed (concurrent-kernel activity
//! records: start, end, stream, correlation id, name), with CUPTI timestamps
//! mapped onto this rank's host clock through an anchor read back to back
//! (host clock, `cuptiGetTimestamp`, host clock; error = half that interval).
//! Only the leading fields of the kernel record are read, at the offsets of
//! cudarc's bindgen layout of `CUpti_ActivityKernel5` (checked at compile
//! time to equal those of the newest record of the targeted CUDA), and a record that fails the sanity checks (end before start, no name)
//! is counted as malformed, not used.
use anyhow::{bail, Context, Result};
use libloading::Library;
use std::sync::Mutex;

/// `CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL`.
const KIND_CONCURRENT_KERNEL: u32 = 10;
/// `CUPTI_ACTIVITY_KIND_KERNEL` (also accepted when read back).
const KIND_KERNEL: u32 = 3;
const BUFFER_BYTES: usize = 8 << 20;

/// One kernel as CUPTI reported it (CUPTI timestamps, ns).
#[derive(Clone, Debug, PartialEq)]
pub struct RawKernel {
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

struct Collected {
    kernels: Vec<RawKernel>,
    malformed: u64,
    dropped: u64,
}

static COLLECTED: Mutex<Collected> = Mutex::new(Collected { kernels: Vec::new(), malformed: 0, dropped: 0 });

extern "C" fn buffer_requested(buffer: *mut *mut u8, size: *mut usize, max_records: *mut usize) {
    // SAFETY: CUPTI passes valid out-pointers; the buffer is freed in buffer_completed.
    unsafe {
        let p = libc::aligned_alloc(8, BUFFER_BYTES) as *mut u8;
        *buffer = p;
        *size = if p.is_null() { 0 } else { BUFFER_BYTES };
        *max_records = 0;
    }
}

type GetNextRecord = unsafe extern "C" fn(*mut u8, usize, *mut *mut u8) -> i32;
static GET_NEXT: Mutex<Option<GetNextRecord>> = Mutex::new(None);

/// The kernel record whose layout is read: the oldest one CUPTI may still
/// deliver for `CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL`. Newer records only
/// append fields; the assertions below check, at compile time, that the
/// fields read sit at the same offsets in the newest record of the CUDA
/// version the bindings target.
type KernelRecord = cudarc::cupti::sys::CUpti_ActivityKernel5;
type NewestKernelRecord = cudarc::cupti::sys::CUpti_ActivityKernel10;

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
    let name_ptr = unsafe { std::ptr::read_unaligned(rec.add(OFF_NAME) as *const *const std::os::raw::c_char) };
    if name_ptr.is_null() || end < start || start == 0 {
        return None;
    }
    // SAFETY: CUPTI's kernel names are NUL-terminated strings owned by CUPTI
    // and valid while the buffer is being processed.
    let name = unsafe { std::ffi::CStr::from_ptr(name_ptr) }.to_string_lossy().into_owned();
    Some(RawKernel { start, end, stream: rd_u32(OFF_STREAM), correlation: rd_u32(OFF_CORRELATION), name })
}

extern "C" fn buffer_completed(_ctx: *mut std::ffi::c_void, _stream: u32, buffer: *mut u8, _size: usize, valid: usize) {
    if buffer.is_null() {
        return;
    }
    let next = *GET_NEXT.lock().unwrap_or_else(|e| e.into_inner());
    let mut got = Vec::new();
    let mut malformed = 0;
    if let Some(next) = next {
        let mut rec: *mut u8 = std::ptr::null_mut();
        // SAFETY: buffer/valid come from CUPTI; records are read only through CUPTI's iterator.
        unsafe {
            while next(buffer, valid, &mut rec) == 0 && !rec.is_null() {
                let kind = std::ptr::read_unaligned(rec as *const u32);
                if kind == KIND_CONCURRENT_KERNEL || kind == KIND_KERNEL {
                    match read_kernel(rec) {
                        Some(k) => got.push(k),
                        None => malformed += 1,
                    }
                }
            }
        }
    }
    // SAFETY: allocated by aligned_alloc in buffer_requested.
    unsafe { libc::free(buffer as *mut libc::c_void) };
    let mut c = COLLECTED.lock().unwrap_or_else(|e| e.into_inner());
    c.kernels.extend(got);
    c.malformed += malformed;
}

/// An enabled CUPTI kernel-activity session. The library is never unloaded:
/// CUPTI registers exit-time work of its own, and unloading it before the
/// process exits made ranks crash at exit on the H200s.
pub struct Cupti {
    _lib: std::mem::ManuallyDrop<Library>,
    flush_all: unsafe extern "C" fn(u32) -> i32,
    get_timestamp: unsafe extern "C" fn(*mut u64) -> i32,
    disable: unsafe extern "C" fn(u32) -> i32,
    enable: unsafe extern "C" fn(u32) -> i32,
    /// Library file that was loaded.
    pub path: String,
}

/// Candidate CUPTI libraries, in order.
pub fn candidates() -> Vec<String> {
    let mut v: Vec<String> = ["libcupti.so.13", "libcupti.so.12", "libcupti.so"].iter().map(|s| s.to_string()).collect();
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
        type Register =
            unsafe extern "C" fn(extern "C" fn(*mut *mut u8, *mut usize, *mut usize), extern "C" fn(*mut std::ffi::c_void, u32, *mut u8, usize, usize)) -> i32;
        // SAFETY: signatures per cupti_activity.h.
        unsafe {
            let register: libloading::Symbol<Register> = lib.get(b"cuptiActivityRegisterCallbacks\0").context("cuptiActivityRegisterCallbacks")?;
            let enable: libloading::Symbol<unsafe extern "C" fn(u32) -> i32> = lib.get(b"cuptiActivityEnable\0").context("cuptiActivityEnable")?;
            let next: libloading::Symbol<GetNextRecord> = lib.get(b"cuptiActivityGetNextRecord\0").context("cuptiActivityGetNextRecord")?;
            let flush_all = *lib.get::<unsafe extern "C" fn(u32) -> i32>(b"cuptiActivityFlushAll\0").context("cuptiActivityFlushAll")?;
            let get_timestamp = *lib.get::<unsafe extern "C" fn(*mut u64) -> i32>(b"cuptiGetTimestamp\0").context("cuptiGetTimestamp")?;
            let disable = *lib.get::<unsafe extern "C" fn(u32) -> i32>(b"cuptiActivityDisable\0").context("cuptiActivityDisable")?;
            *GET_NEXT.lock().unwrap_or_else(|e| e.into_inner()) = Some(*next);
            let rc = register(buffer_requested, buffer_completed);
            if rc != 0 {
                bail!("cuptiActivityRegisterCallbacks failed with CUPTI error {rc}");
            }
            let rc = enable(KIND_CONCURRENT_KERNEL);
            if rc != 0 {
                bail!("cuptiActivityEnable(CONCURRENT_KERNEL) failed with CUPTI error {rc} (profiling may be restricted on this machine)");
            }
            let enable = *enable;
            Ok(Self { _lib: std::mem::ManuallyDrop::new(lib), flush_all, get_timestamp, disable, enable, path })
        }
    }

    /// Turn kernel records on or off for the kernels launched from now on.
    pub fn set_enabled(&self, on: bool) -> Result<()> {
        // SAFETY: plain CUPTI calls on a kind this module enabled before.
        let rc = unsafe {
            if on {
                (self.enable)(KIND_CONCURRENT_KERNEL)
            } else {
                (self.disable)(KIND_CONCURRENT_KERNEL)
            }
        };
        if rc != 0 {
            bail!("cuptiActivity{}(CONCURRENT_KERNEL) failed with CUPTI error {rc}", if on { "Enable" } else { "Disable" });
        }
        Ok(())
    }

    /// CUPTI's clock now, ns.
    pub fn timestamp(&self) -> Result<u64> {
        let mut t = 0u64;
        // SAFETY: writes one u64.
        let rc = unsafe { (self.get_timestamp)(&mut t) };
        if rc != 0 {
            bail!("cuptiGetTimestamp failed with CUPTI error {rc}");
        }
        Ok(t)
    }

    /// Flush and take every kernel recorded so far, with the malformed and dropped counts.
    pub fn drain(&self) -> Result<(Vec<RawKernel>, u64, u64)> {
        // SAFETY: forced flush of all buffers; callbacks run before it returns.
        let rc = unsafe { (self.flush_all)(1) };
        if rc != 0 {
            bail!("cuptiActivityFlushAll failed with CUPTI error {rc}");
        }
        let mut c = COLLECTED.lock().unwrap_or_else(|e| e.into_inner());
        let k = std::mem::take(&mut c.kernels);
        let (m, d) = (std::mem::take(&mut c.malformed), std::mem::take(&mut c.dropped));
        Ok((k, m, d))
    }
}

impl Drop for Cupti {
    fn drop(&mut self) {
        // SAFETY: disabling a kind that was enabled.
        let _ = unsafe { (self.disable)(KIND_CONCURRENT_KERNEL) };
        // SAFETY: final flush so CUPTI returns its buffers before the library goes.
        let _ = unsafe { (self.flush_all)(1) };
    }
}

#[cfg(test)]
mod tests {
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
