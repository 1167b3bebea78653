//! What a host offers the CUDA backend, found without starting it: the
//! driver and its version, the visible GPUs, cuBLAS, NVML's device facts and
//! `nvidia-smi`'s topology. Consumes nothing but the host; produces a
//! one-line reason when the backend cannot run ([`unavailable_reason`],
//! which `rank`, `bench-overhead`, `doctor` and `campaign exec` ask before
//! MPI starts) and the facts a shard's device header records.
use anyhow::{bail, Result};
use cudarc::driver::result::{device, init};
use cudarc::driver::sys;
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

/// Query the driver for its version and device names (through cudarc, once
/// [`probe_devices`] has found the driver, so that a missing driver is an
/// error, not a panic).
pub(crate) fn driver_report() -> Result<DriverReport, String> {
    use cudarc::driver::result::device;
    let n = probe_devices()?;
    let mut v = 0;
    // SAFETY: cuDriverGetVersion writes one int; the driver is present (probe_devices).
    unsafe { sys::cuDriverGetVersion(&mut v) }.result().map_err(|e| format!("cuDriverGetVersion failed: {e}"))?;
    let mut devices = Vec::new();
    for i in 0..n as i32 {
        let dev = device::get(i).map_err(|e| format!("cuDeviceGet({i}) failed: {e}"))?;
        devices.push(device::get_name(dev).map_err(|e| format!("cuDeviceGetName({i}) failed: {e}"))?);
    }
    Ok(DriverReport { driver_version: v, devices })
}

/// Whether cudarc finds the CUDA driver library. cudarc panics on its first
/// call when it cannot, so every driver call here comes after this check.
fn driver_present() -> Result<(), String> {
    static PRESENT: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    // SAFETY: probing library names with dlopen; nothing is called.
    if *PRESENT.get_or_init(|| unsafe { sys::is_culib_present() }) {
        Ok(())
    } else {
        Err(format!("no CUDA driver: libcuda could not be loaded (tried {})", lib_names("cuda")))
    }
}

/// The file names cudarc tries for library `name`, once each, in its order.
pub(super) fn lib_names(name: &str) -> String {
    let mut seen = Vec::new();
    for n in cudarc::get_lib_name_candidates(name) {
        if !seen.contains(&n) {
            seen.push(n);
        }
    }
    seen.join(", ")
}

/// Count CUDA devices through the driver API (cudarc, loaded at run time).
pub fn probe_devices() -> Result<u32, String> {
    driver_present()?;
    init().map_err(|e| format!("cuInit failed: {e}"))?;
    let n = device::get_count().map_err(|e| format!("cuDeviceGetCount failed: {e}"))?;
    Ok(n.max(0) as u32)
}

/// cudarc panics when it cannot find a library; find cuBLAS ourselves first.
pub(super) fn probe_cublas() -> Result<String> {
    for n in cudarc::get_lib_name_candidates("cublas") {
        // SAFETY: probing a library by name; it is closed again at once.
        if unsafe { Library::new(&n) }.is_ok() {
            return Ok(n);
        }
    }
    bail!("cuBLAS not found (tried {}); add its directory to LD_LIBRARY_PATH", lib_names("cublas"))
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
        Ok(o) if o.status.success() => String::from_utf8_lossy(&o.stdout)
            .lines()
            .take_while(|l| !l.trim().is_empty())
            .collect::<Vec<_>>()
            .join("\n"),
        Ok(o) => format!("unavailable: nvidia-smi topo -m exited {:?}", o.status.code()),
        Err(e) => format!("unavailable: nvidia-smi: {e}"),
    }
}
