//! What a host offers the CUDA backend, found without starting it: the
//! driver and its version, the visible GPUs, cuBLAS, NVML's device facts and
//! `nvidia-smi`'s topology. Consumes nothing but the host; produces a
//! one-line reason when the backend cannot run ([`unavailable_reason`],
//! which `rank`, `bench-overhead`, `doctor` and `campaign exec` ask before
//! MPI starts) and the facts a shard's device header records.
use anyhow::{bail, Result};
use libloading::Library;

/// Why the CUDA backend cannot run here, or `None` when it can be tried.
pub fn unavailable_reason() -> Option<String> {
    match probe_devices() {
        Err(why) => Some(why),
        Ok(0) => Some("the CUDA driver reports no GPU on this machine".into()),
        Ok(_) => None,
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

/// Query the driver for its version and device names (our own dlopen, so a
/// missing driver is an error, not a panic).
pub fn driver_report() -> Result<DriverReport, String> {
    let n = probe_devices()?;
    let lib = libcuda()?;
    // SAFETY: signatures per the CUDA driver API; the library stays loaded for the process.
    unsafe {
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

/// The CUDA driver library, loaded once per process and never unloaded (the
/// driver keeps process-wide state; cudarc loads the same file for its calls).
fn libcuda() -> Result<&'static Library, String> {
    static LIBCUDA: std::sync::OnceLock<Result<Library, String>> = std::sync::OnceLock::new();
    LIBCUDA
        .get_or_init(|| {
            // SAFETY: loading the CUDA driver runs its initialisers; it is the documented way to use it.
            unsafe { Library::new("libcuda.so.1") }.map_err(|e| format!("no CUDA driver: libcuda.so.1 could not be loaded ({e})"))
        })
        .as_ref()
        .map_err(Clone::clone)
}

/// Count CUDA devices through the driver API, loaded dynamically.
pub fn probe_devices() -> Result<u32, String> {
    let lib = libcuda()?;
    type CuInit = unsafe extern "C" fn(u32) -> i32;
    type CuCount = unsafe extern "C" fn(*mut i32) -> i32;
    // SAFETY: symbol types match the CUDA driver API (cuInit(unsigned), cuDeviceGetCount(int*)).
    unsafe {
        let init: libloading::Symbol<CuInit> = lib.get(b"cuInit\0").map_err(|e| format!("libcuda.so.1 lacks cuInit ({e})"))?;
        let count: libloading::Symbol<CuCount> = lib.get(b"cuDeviceGetCount\0").map_err(|e| format!("libcuda.so.1 lacks cuDeviceGetCount ({e})"))?;
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

/// cudarc panics when it cannot find a library; find cuBLAS ourselves first.
pub(super) fn probe_cublas() -> Result<String> {
    let names = cudarc::get_lib_name_candidates("cublas");
    for n in &names {
        // SAFETY: probing a library by name; it is closed again at once.
        if unsafe { Library::new(n) }.is_ok() {
            return Ok(n.clone());
        }
    }
    bail!("cuBLAS not found (tried {}); add its directory to LD_LIBRARY_PATH", names.join(", "))
}

/// NVML facts about one GPU, keys suffixed `_start` or `_end` (driver, PCIe
/// bus and power limit only at start). A fact that cannot be read is reported
/// with the reason, never guessed.
pub(super) fn nvml_facts(uuid: &str, suffix: &str) -> Vec<(String, String)> {
    let nvml = match nvml_wrapper::Nvml::init() {
        Ok(n) => n,
        Err(e) => return vec![(format!("nvml{suffix}"), format!("unavailable: {e}"))],
    };
    let mut v = Vec::new();
    let dev = match nvml.device_by_uuid(uuid) {
        Ok(d) => d,
        Err(e) => return vec![(format!("nvml{suffix}"), format!("device {uuid} not found: {e}"))],
    };
    let mut put = |k: &str, r: Result<String, nvml_wrapper::error::NvmlError>| {
        v.push((format!("{k}{suffix}"), r.unwrap_or_else(|e| format!("unreadable: {e}"))));
    };
    use nvml_wrapper::enum_wrappers::device::{Clock, TemperatureSensor};
    if suffix == "_start" {
        put("driver_version", nvml.sys_driver_version());
        put("cuda_driver_version", nvml.sys_cuda_driver_version().map(|c| format!("{}.{}", c / 1000, (c % 1000) / 10)));
        put("pci_bus_id", dev.pci_info().map(|p| p.bus_id));
        put("power_limit_w", dev.power_management_limit().map(|mw| format!("{:.1}", mw as f64 / 1000.0)));
    }
    put("sm_clock_mhz", dev.clock_info(Clock::SM).map(|c| c.to_string()));
    put("mem_clock_mhz", dev.clock_info(Clock::Memory).map(|c| c.to_string()));
    put("temperature_c", dev.temperature(TemperatureSensor::Gpu).map(|t| t.to_string()));
    put(
        "compute_processes",
        dev.running_compute_processes().map(|ps| {
            let me = std::process::id();
            let others: Vec<String> = ps.iter().filter(|p| p.pid != me).map(|p| p.pid.to_string()).collect();
            format!("{} total, other pids [{}]", ps.len(), others.join(","))
        }),
    );
    v
}

/// `nvidia-smi topo -m`, where the tool exists.
pub(super) fn topology() -> String {
    match std::process::Command::new("nvidia-smi").args(["topo", "-m"]).output() {
        Ok(o) if o.status.success() => String::from_utf8_lossy(&o.stdout).lines().take_while(|l| !l.trim().is_empty()).collect::<Vec<_>>().join("\n"),
        Ok(o) => format!("unavailable: nvidia-smi topo -m exited {:?}", o.status.code()),
        Err(e) => format!("unavailable: nvidia-smi: {e}"),
    }
}
