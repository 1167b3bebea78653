//! The `%globaltimer` anchor: where the GPU's global nanosecond timer lies on
//! this rank's host clock, and the stamping kernels that place CUPTI's kernel
//! timestamps on that timer.
//!
//! Consumes a CUDA context and an idle stream. Produces, per window, the host
//! time of the window's first timer reading with its error bound, and the
//! entry and exit readings of a few stamping kernels. Refuses: a device whose
//! driver cannot load the PTX module, mapped host memory that cannot be
//! allocated, a kernel that does not announce or acknowledge within 10 s.
//! Method: docs/METHODS.md, "The globaltimer anchor".
use crate::backend::cuda::drv;
use crate::core::clock::{self, DeviceAnchorEstimate, DeviceRoundTrip};
use anyhow::{bail, Result};
use cudarc::driver::result::launch_kernel;
use cudarc::driver::{sys as drv_sys, CudaContext, CudaStream};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Name of the stamping kernel, as CUPTI reports it.
pub(crate) const STAMP_KERNEL_NAME: &str = "commcanary_gt_stamp";
/// Prefix of both kernels' names.
pub(crate) const KERNEL_PREFIX: &str = "commcanary_gt_";

/// Warps polling the release word, one lane each.
pub const POLLING_WARPS: usize = 4;
/// Byte offsets in the mapped page, each word on its own 128-byte line:
/// the release word, the start announcement, the warps' reply slots (u64,
/// 128 bytes apart) and the stamping kernels' readings.
const REL: usize = 0;
const START: usize = 128;
const REPLY: usize = 256;
const STAMPS: usize = REPLY + 128 * POLLING_WARPS;
const PAGE_BYTES: usize = 4096;
/// Stamping kernels per window at most (two u64 each after `STAMPS`).
pub(crate) const MAX_STAMPS: usize = (PAGE_BYTES - STAMPS) / 16;

/// PTX ISA 7.0 (sm_70 and later). The release kernel: lane 0 of each warp
/// (warp 0 first announces the start) waits 256 ns times its warp index, then
/// polls the release word with volatile loads (2 s timeout on
/// `%globaltimer`), and on the release writes `%globaltimer` to its reply
/// slot (REPLY + 128 * warp). The stamping kernel reads the timer as its
/// first and last instructions.
const PTX: &str = "
.version 7.0
.target sm_70
.address_size 64

.visible .entry commcanary_gt_release(
    .param .u64 commcanary_gt_release_param_0,
    .param .u32 commcanary_gt_release_param_1
)
{
    .reg .pred %p<4>;
    .reg .b32 %r<6>;
    .reg .b64 %rd<10>;
    ld.param.u64 %rd1, [commcanary_gt_release_param_0];
    ld.param.u32 %r1, [commcanary_gt_release_param_1];
    mov.u32 %r3, %tid.x;
    and.b32 %r4, %r3, 31;
    setp.ne.u32 %p3, %r4, 0;
    @%p3 bra $L_end;
    shr.u32 %r5, %r3, 5;
    mul.wide.u32 %rd6, %r5, 128;
    add.u64 %rd7, %rd1, %rd6;
    mul.wide.u32 %rd8, %r5, 256;
    mov.u64 %rd2, %globaltimer;
    setp.ne.u32 %p3, %r5, 0;
    @%p3 bra $L_stagger;
    st.volatile.global.u32 [%rd1+128], %r1;
$L_stagger:
    mov.u64 %rd3, %globaltimer;
    sub.u64 %rd4, %rd3, %rd2;
    setp.lt.u64 %p2, %rd4, %rd8;
    @%p2 bra $L_stagger;
$L_wait:
    ld.volatile.global.u32 %r2, [%rd1];
    setp.eq.u32 %p1, %r2, %r1;
    @%p1 bra $L_go;
    mov.u64 %rd3, %globaltimer;
    sub.u64 %rd4, %rd3, %rd2;
    setp.lt.u64 %p2, %rd4, 2000000000;
    @%p2 bra $L_wait;
    bra $L_end;
$L_go:
    mov.u64 %rd5, %globaltimer;
    st.volatile.global.u64 [%rd7+256], %rd5;
$L_end:
    ret;
}

.visible .entry commcanary_gt_stamp(
    .param .u64 commcanary_gt_stamp_param_0
)
{
    .reg .b64 %rd<4>;
    mov.u64 %rd2, %globaltimer;
    ld.param.u64 %rd1, [commcanary_gt_stamp_param_0];
    st.volatile.global.u64 [%rd1], %rd2;
    mov.u64 %rd3, %globaltimer;
    st.volatile.global.u64 [%rd1+8], %rd3;
    ret;
}
";

/// One window of the `%globaltimer` anchor.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct TimerWindow {
    /// Host time of `first_timer_ns`, with its bound.
    pub estimate: DeviceAnchorEstimate,
    /// The window's first timer reading.
    pub first_timer_ns: u64,
    /// Greatest common divisor of the readings' differences (the timer's step, at most 1 µs).
    pub resolution_ns: u64,
    /// Entry and exit readings of the stamping kernels, in launch order.
    pub stamps: Vec<(u64, u64)>,
}

/// The loaded kernels and their mapped page.
pub(crate) struct GlobalTimer {
    _module: drv_sys::CUmodule,
    release: drv_sys::CUfunction,
    stamp: drv_sys::CUfunction,
    host: *mut u8,
    dev: drv_sys::CUdeviceptr,
    seq: u32,
}

impl GlobalTimer {
    /// Load the kernels and map the page (the context current on this thread).
    pub fn load(ctx: &Arc<CudaContext>) -> Result<Self> {
        let (module, funcs) =
            super::load_ptx(ctx, PTX, "%globaltimer kernels", &[c"commcanary_gt_release", c"commcanary_gt_stamp"])?;
        let (host, dev) =
            super::mapped_host_bytes(PAGE_BYTES).map_err(|e| anyhow::anyhow!("%globaltimer page: {e}"))?;
        Ok(Self { _module: module, release: funcs[0], stamp: funcs[1], host, dev, seq: 0 })
    }

    fn word(&self, at: usize) -> *mut u32 {
        // SAFETY: `at` is one of the page's fixed offsets, inside the page.
        unsafe { self.host.add(at) as *mut u32 }
    }

    fn read_u64(&self, at: usize) -> u64 {
        // SAFETY: an aligned u64 slot inside the page, written by the device.
        unsafe { std::ptr::read_volatile(self.host.add(at) as *const u64) }
    }

    fn wait_word(&self, at: usize, v: u32, what: &str) -> Result<()> {
        let t0 = Instant::now();
        // SAFETY: a live, aligned word of the page.
        while unsafe { std::ptr::read_volatile(self.word(at)) } != v {
            if t0.elapsed() > Duration::from_secs(10) {
                bail!("%globaltimer anchor: the release kernel did not {what} within 10 s");
            }
            std::hint::spin_loop();
        }
        Ok(())
    }

    fn reply(&self, w: usize) -> u64 {
        self.read_u64(REPLY + 128 * w)
    }

    fn clear_replies(&self) {
        for w in 0..POLLING_WARPS {
            // SAFETY: an aligned u64 slot inside the page; every warp of the last trip has written it already.
            unsafe { std::ptr::write_volatile(self.host.add(REPLY + 128 * w) as *mut u64, 0) };
        }
    }

    /// Next release value, with the reply slots cleared (every warp of the
    /// previous trip has replied: the window waited for it).
    fn arm(&mut self) -> u32 {
        self.seq = self.seq.wrapping_add(1).max(1);
        self.clear_replies();
        self.seq
    }

    /// Enqueue the release kernel for value `v`.
    fn launch_release(&self, stream: &CudaStream, v: u32) -> Result<()> {
        let threads = (32 * POLLING_WARPS) as u32;
        let (mut a, mut b) = (self.dev, v);
        let mut params = [&mut a as *mut u64 as *mut std::ffi::c_void, &mut b as *mut u32 as *mut std::ffi::c_void];
        // SAFETY: the kernel takes (u64, u32), passed by pointer; the page is mapped for the device.
        let launched =
            unsafe { launch_kernel(self.release, (1, 1, 1), (threads, 1, 1), 0, stream.cu_stream(), &mut params) };
        drv(launched, "cuLaunchKernel (%globaltimer release)")
    }

    /// Wait until the release kernel of `v` runs, and 2 µs more (every warp past its stagger and polling).
    fn wait_polling(&self, v: u32) -> Result<()> {
        self.wait_word(START, v, "start")?;
        let settle = Instant::now();
        while settle.elapsed() < Duration::from_micros(2) {
            std::hint::spin_loop();
        }
        Ok(())
    }

    /// Release the kernel waiting for `v` (a plain store to mapped memory).
    fn release(&self, v: u32) {
        // SAFETY: a live, aligned word; only this thread writes it.
        unsafe { std::ptr::write_volatile(self.word(REL), v) };
    }

    /// One window on an idle `stream`: `trips` round trips, then `stamps`
    /// stamping kernels back to back; `now` reads the host clock.
    pub fn window(
        &mut self,
        stream: &CudaStream,
        now: &mut dyn FnMut() -> u64,
        trips: usize,
        stamps: usize,
    ) -> Result<TimerWindow> {
        if trips == 0 || stamps > MAX_STAMPS {
            bail!("internal: %globaltimer window of {trips} trips and {stamps} stamping kernels");
        }
        let mut raw = Vec::with_capacity(trips);
        for _ in 0..trips {
            let v = self.arm();
            self.launch_release(stream, v)?;
            self.wait_polling(v)?;
            let before = now();
            self.release(v);
            let t0 = Instant::now();
            let ts = loop {
                if let Some(ts) = (0..POLLING_WARPS).map(|w| self.reply(w)).filter(|&r| r != 0).min() {
                    break ts;
                }
                if t0.elapsed() > Duration::from_secs(10) {
                    bail!("%globaltimer anchor: the release kernel did not reply within 10 s");
                }
                std::hint::spin_loop();
            };
            let after = now();
            raw.push((before, after, ts));
            // the other warps reply too; wait for them before the slots are cleared
            while (0..POLLING_WARPS).any(|w| self.reply(w) == 0) {
                if t0.elapsed() > Duration::from_secs(10) {
                    bail!("%globaltimer anchor: a warp of the release kernel did not reply within 10 s");
                }
                std::hint::spin_loop();
            }
        }
        for i in 0..stamps {
            let mut a = self.dev + (STAMPS + 16 * i) as u64;
            let mut params = [&mut a as *mut u64 as *mut std::ffi::c_void];
            // SAFETY: the kernel takes one u64 (a mapped slot of two u64 inside the page).
            let launched =
                unsafe { launch_kernel(self.stamp, (1, 1, 1), (1, 1, 1), 0, stream.cu_stream(), &mut params) };
            drv(launched, "cuLaunchKernel (%globaltimer stamp)")?;
        }
        drv(stream.synchronize(), "synchronizing the %globaltimer window")?;
        let first = raw[0].2;
        let trips_dev: Vec<DeviceRoundTrip> = raw
            .iter()
            .map(|&(before, after, ts)| DeviceRoundTrip {
                host_before_ns: before,
                host_after_ns: after,
                device_ns: ts as f64 - first as f64,
            })
            .collect();
        let estimate =
            clock::estimate_device_anchor(&trips_dev).map_err(|e| anyhow::anyhow!("%globaltimer window: {e}"))?;
        let resolution_ns = raw.iter().map(|r| r.2.abs_diff(first)).filter(|&d| d > 0).fold(0, gcd).clamp(1, 1000);
        let stamps =
            (0..stamps).map(|i| (self.read_u64(STAMPS + 16 * i), self.read_u64(STAMPS + 16 * i + 8))).collect();
        Ok(TimerWindow { estimate, first_timer_ns: first, resolution_ns, stamps })
    }
}

fn gcd(a: u64, b: u64) -> u64 {
    if b == 0 {
        a
    } else {
        gcd(b, a % b)
    }
}

impl Drop for GlobalTimer {
    fn drop(&mut self) {
        // SAFETY: allocated by cuMemHostAlloc in `load`; no kernel uses it after the last window synchronized.
        unsafe {
            let _ = drv_sys::cuMemFreeHost(self.host as *mut std::ffi::c_void);
        }
    }
}
