//! CUDA/NCCL backend: availability probe.
//!
//! This build does not yet execute phases on GPUs (that is issue #4: own NCCL
//! loader, streams, events, cuBLAS). What it does today, for real: probe
//! whether a CUDA driver is loadable and how many devices it reports, so that
//! `--backend auto` can choose honestly and `--backend cuda` can refuse with a
//! one-line reason instead of a panic.
use libloading::Library;

/// Why the CUDA backend cannot run here.
pub fn unavailable_reason() -> String {
    match probe_devices() {
        Err(why) => why,
        Ok(0) => "the CUDA driver reports no GPU on this machine".into(),
        Ok(n) => format!(
            "{n} GPU(s) found, but this build of commcanary has no CUDA phase executor yet; use --backend cpu"
        ),
    }
}

/// What the CUDA driver reports.
#[derive(schemars::JsonSchema, serde::Serialize, serde::Deserialize, Clone, Debug, PartialEq)]
pub struct DriverReport {
    /// `cuDriverGetVersion`, e.g. 13000.
    pub driver_version: i32,
    /// Device names in ordinal order.
    pub devices: Vec<String>,
}

/// Query the driver for its version and device names.
pub fn driver_report() -> Result<DriverReport, String> {
    let n = probe_devices()?;
    // SAFETY: as in probe_devices; signatures per the CUDA driver API.
    unsafe {
        let lib = Library::new("libcuda.so.1").map_err(|e| format!("libcuda.so.1: {e}"))?;
        type Ver = unsafe extern "C" fn(*mut i32) -> i32;
        type Get = unsafe extern "C" fn(*mut i32, i32) -> i32;
        type Name = unsafe extern "C" fn(*mut std::os::raw::c_char, i32, i32) -> i32;
        let ver: libloading::Symbol<Ver> = lib.get(b"cuDriverGetVersion\0").map_err(|e| e.to_string())?;
        let get: libloading::Symbol<Get> = lib.get(b"cuDeviceGet\0").map_err(|e| e.to_string())?;
        let name: libloading::Symbol<Name> = lib.get(b"cuDeviceGetName\0").map_err(|e| e.to_string())?;
        let mut v = 0;
        if ver(&mut v) != 0 {
            return Err("cuDriverGetVersion failed".into());
        }
        let mut devices = Vec::new();
        for i in 0..n as i32 {
            let mut dev = 0;
            if get(&mut dev, i) != 0 {
                return Err(format!("cuDeviceGet({i}) failed"));
            }
            let mut buf = [0 as std::os::raw::c_char; 256];
            if name(buf.as_mut_ptr(), 256, dev) != 0 {
                return Err(format!("cuDeviceGetName({i}) failed"));
            }
            devices.push(std::ffi::CStr::from_ptr(buf.as_ptr()).to_string_lossy().into_owned());
        }
        Ok(DriverReport { driver_version: v, devices })
    }
}

/// Count CUDA devices through the driver API, loaded dynamically.
pub fn probe_devices() -> Result<u32, String> {
    // SAFETY: loading the CUDA driver runs its initialisers; it is the documented way to use it.
    let lib = unsafe { Library::new("libcuda.so.1") }
        .map_err(|e| format!("no CUDA driver: libcuda.so.1 could not be loaded ({e})"))?;
    type CuInit = unsafe extern "C" fn(u32) -> i32;
    type CuCount = unsafe extern "C" fn(*mut i32) -> i32;
    // SAFETY: symbol types match the CUDA driver API (cuInit(unsigned), cuDeviceGetCount(int*)).
    unsafe {
        let init: libloading::Symbol<CuInit> =
            lib.get(b"cuInit\0").map_err(|e| format!("libcuda.so.1 lacks cuInit ({e})"))?;
        let count: libloading::Symbol<CuCount> =
            lib.get(b"cuDeviceGetCount\0").map_err(|e| format!("libcuda.so.1 lacks cuDeviceGetCount ({e})"))?;
        let rc = init(0);
        if rc != 0 {
            return Err(format!("cuInit failed with CUDA error {rc}"));
        }
        let mut n = 0i32;
        let rc = count(&mut n);
        if rc != 0 {
            return Err(format!("cuDeviceGetCount failed with CUDA error {rc}"));
        }
        Ok(n.max(0) as u32)
    }
}
