//! Device health of `validate`, read through NVML (called through the
//! nvml-wrapper crate).
//!
//! Consumes nothing but the node's NVML. Produces, for every GPU, a snapshot
//! at the start and one at the end (ECC, retired pages, remapped rows,
//! throttle reasons, power, temperature, PCIe link, persistence, NVLink),
//! critical XID events between them, and a per-second watch on rank 0
//! ([`Watch::sample_until`]). A reading NVML cannot give is recorded with its
//! error, never as 0. Refuses nothing: [`evaluate`] turns findings into a
//! verdict.
//!
//! What is read, and how: docs/METHODS.md, "Device health".
use super::verdict::CheckVerdict;
use nvml_wrapper::enum_wrappers::device::TemperatureSensor;
use serde::{Deserialize, Serialize};
use std::sync::atomic::{self, AtomicBool};

/// A value NVML gave, or the error it gave instead.
#[derive(schemars::JsonSchema, Serialize, Deserialize, Clone, Debug, PartialEq)]
pub struct Reading<T> {
    /// The value; absent when unreadable.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub value: Option<T>,
    /// NVML's error, when unreadable.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub unavailable: Option<String>,
}

impl<T> Reading<T> {
    /// From an NVML result.
    pub fn from_result(r: Result<T, nvml_wrapper::error::NvmlError>) -> Self {
        match r {
            Ok(v) => Reading { value: Some(v), unavailable: None },
            Err(e) => Reading { value: None, unavailable: Some(format!("{e}")) },
        }
    }
}

/// `nvmlDeviceGetRemappedRows` (Ampere and later).
#[derive(schemars::JsonSchema, Serialize, Deserialize, Clone, Debug, PartialEq)]
pub struct RemappedRows {
    /// Rows remapped for correctable errors.
    pub corrected: u32,
    /// Rows remapped for uncorrectable errors.
    pub uncorrected: u32,
    /// A remapping is pending (applied at the next GPU reset).
    pub pending: bool,
    /// A remapping failed.
    pub failure: bool,
}

/// One NVLink of a GPU.
#[derive(schemars::JsonSchema, Serialize, Deserialize, Clone, Debug, PartialEq)]
pub struct NvLinkState {
    /// Link index.
    pub link: u32,
    /// Whether the link is active.
    pub active: bool,
    /// PCI bus id of the device at the other end.
    pub remote_pci_bus_id: Reading<String>,
    /// Data-link transmit replay errors.
    pub replay_errors: Reading<u64>,
    /// Data-link transmit recovery errors.
    pub recovery_errors: Reading<u64>,
    /// Data-link receive flow-control-digit CRC errors.
    pub crc_flit_errors: Reading<u64>,
    /// Data-link receive data CRC errors.
    pub crc_data_errors: Reading<u64>,
}

/// One GPU's snapshot.
#[derive(schemars::JsonSchema, Serialize, Deserialize, Clone, Debug, PartialEq)]
pub struct GpuHealth {
    /// NVML index.
    pub index: u32,
    /// UUID.
    pub uuid: Reading<String>,
    /// Product name (the SKU).
    pub name: Reading<String>,
    /// PCI bus id.
    pub pci_bus_id: Reading<String>,
    /// Volatile (since driver load) corrected ECC errors.
    pub ecc_volatile_corrected: Reading<u64>,
    /// Volatile uncorrected ECC errors.
    pub ecc_volatile_uncorrected: Reading<u64>,
    /// Aggregate (lifetime) corrected ECC errors.
    pub ecc_aggregate_corrected: Reading<u64>,
    /// Aggregate uncorrected ECC errors.
    pub ecc_aggregate_uncorrected: Reading<u64>,
    /// Retired pages pending (pre-Ampere page retirement).
    pub retired_pages_pending: Reading<bool>,
    /// Row remapping (Ampere and later).
    pub remapped_rows: Reading<RemappedRows>,
    /// Current clock-throttle reasons, NVML's names.
    pub throttle_reasons: Reading<Vec<String>>,
    /// Power draw, W.
    pub power_w: Reading<f64>,
    /// GPU temperature, °C.
    pub temperature_c: Reading<u32>,
    /// Current PCIe link generation.
    pub pcie_gen_current: Reading<u32>,
    /// Maximum PCIe link generation of the device and system.
    pub pcie_gen_max: Reading<u32>,
    /// Current PCIe link width.
    pub pcie_width_current: Reading<u32>,
    /// Maximum PCIe link width.
    pub pcie_width_max: Reading<u32>,
    /// Persistence mode enabled.
    pub persistence_mode: Reading<bool>,
    /// Links that NVML reports a state for (absent links are left out).
    pub nvlinks: Vec<NvLinkState>,
}

/// A critical XID event seen during the run.
#[derive(schemars::JsonSchema, Serialize, Deserialize, Clone, Debug, PartialEq)]
pub struct XidEvent {
    /// NVML index of the GPU whose set reported it.
    pub gpu: u32,
    /// XID number; absent when NVML did not give it.
    pub xid: Option<u64>,
}

/// One GPU's reading during the rounds.
#[derive(schemars::JsonSchema, Serialize, Deserialize, Clone, Debug, PartialEq)]
pub struct HealthSample {
    /// Milliseconds since the sampling started.
    pub t_ms: u64,
    /// NVML index.
    pub gpu: u32,
    /// GPU temperature, °C.
    pub temperature_c: Reading<u32>,
    /// Power draw, W.
    pub power_w: Reading<f64>,
    /// Current clock-throttle reasons.
    pub throttle_reasons: Reading<Vec<String>>,
}

/// The health section of a validation.
#[derive(schemars::JsonSchema, Serialize, Deserialize, Clone, Debug, PartialEq, Default)]
pub struct HealthReport {
    /// Why NVML checks do not apply (CPU backend) or could not run (NVML did not load).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub not_applicable: Option<String>,
    /// Driver version NVML reports.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub driver_version: Option<Reading<String>>,
    /// Snapshot at the start.
    pub start: Vec<GpuHealth>,
    /// Snapshot at the end.
    pub end: Vec<GpuHealth>,
    /// Critical XID events during the run, per GPU that could be watched.
    pub xid_events: Vec<XidEvent>,
    /// GPUs whose XID events could not be watched, with NVML's error.
    pub xid_unwatched: Vec<(u32, String)>,
    /// Readings sampled during the rounds (cuda).
    #[serde(default)]
    pub samples: Vec<HealthSample>,
    /// How the readings were taken.
    pub method: String,
    /// The node's CPU load during the rounds ([`super::load`]); absent in
    /// evidence of format 1, which did not measure it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub load: Option<super::load::LoadReport>,
}

/// NVML's handle on this node, held for the validation's duration.
pub struct Watch {
    nvml: nvml_wrapper::Nvml,
}

/// The per-GPU XID event sets (they borrow the NVML handle).
pub struct XidSets<'a> {
    sets: Vec<(u32, nvml_wrapper::EventSet<'a>)>,
    unwatched: Vec<(u32, String)>,
}

impl Watch {
    /// Load NVML; `Err` with the reason where it cannot.
    pub fn init() -> Result<Self, String> {
        nvml_wrapper::Nvml::init().map(|nvml| Watch { nvml }).map_err(|e| format!("NVML did not load: {e}"))
    }

    /// Driver version.
    pub fn driver_version(&self) -> Reading<String> {
        Reading::from_result(self.nvml.sys_driver_version())
    }

    /// Every GPU's snapshot now.
    pub fn snapshot(&self) -> Vec<GpuHealth> {
        let count = self.nvml.device_count().unwrap_or(0);
        (0..count).filter_map(|i| self.nvml.device_by_index(i).ok().map(|d| gpu_health(&self.nvml, i, &d))).collect()
    }

    /// Start watching critical XID events, one event set per GPU.
    pub fn watch_xids(&self) -> XidSets<'_> {
        use nvml_wrapper::bitmasks::event::EventTypes;
        let mut out = XidSets { sets: Vec::new(), unwatched: Vec::new() };
        let count = match self.nvml.device_count() {
            Ok(c) => c,
            Err(e) => {
                out.unwatched.push((u32::MAX, format!("device count: {e}")));
                return out;
            }
        };
        for i in 0..count {
            let r = self.nvml.device_by_index(i).map_err(|e| format!("{e}")).and_then(|d| {
                let set = self.nvml.create_event_set().map_err(|e| format!("{e}"))?;
                d.register_events(EventTypes::CRITICAL_XID_ERROR, set).map_err(|e| format!("{}", e.error))
            });
            match r {
                Ok(set) => out.sets.push((i, set)),
                Err(e) => out.unwatched.push((i, e)),
            }
        }
        out
    }

    /// Sample every GPU's temperature, power and throttle reasons each
    /// `period` until `stop` is set (checked every 50 ms).
    pub fn sample_until(&self, stop: &AtomicBool, period: std::time::Duration) -> Vec<HealthSample> {
        let t0 = std::time::Instant::now();
        let mut out = Vec::new();
        let count = self.nvml.device_count().unwrap_or(0);
        while !stop.load(atomic::Ordering::Relaxed) {
            let t_ms = t0.elapsed().as_millis() as u64;
            for i in 0..count {
                let Ok(d) = self.nvml.device_by_index(i) else { continue };
                out.push(HealthSample {
                    t_ms,
                    gpu: i,
                    temperature_c: temperature(&d),
                    power_w: power_w(&d),
                    throttle_reasons: throttle_reasons(&d),
                });
            }
            let next = t0.elapsed() + period;
            while t0.elapsed() < next && !stop.load(atomic::Ordering::Relaxed) {
                std::thread::sleep(std::time::Duration::from_millis(50));
            }
        }
        out
    }

    /// The handle (topology reads it too).
    pub fn nvml(&self) -> &nvml_wrapper::Nvml {
        &self.nvml
    }
}

impl XidSets<'_> {
    /// Drain every set: the events queued since [`Watch::watch_xids`].
    pub fn drain(self) -> (Vec<XidEvent>, Vec<(u32, String)>) {
        use nvml_wrapper::enums::event::XidError;
        let mut events = Vec::new();
        let mut unwatched = self.unwatched;
        for (gpu, set) in self.sets {
            // a bounded drain: a flood of events must not hang the report
            for _ in 0..10_000 {
                match set.wait(0) {
                    Ok(ev) => events.push(XidEvent {
                        gpu,
                        xid: if let Some(XidError::Value(x)) = ev.event_data { Some(x) } else { None },
                    }),
                    Err(nvml_wrapper::error::NvmlError::Timeout) => break,
                    Err(e) => {
                        unwatched.push((gpu, format!("reading events: {e}")));
                        break;
                    }
                }
            }
            let _ = set.release_events();
        }
        (events, unwatched)
    }
}

/// `NVML_NVLINK_MAX_LINKS` of nvml.h (NVML 12): the link indices asked about.
const NVLINK_MAX_LINKS: u32 = 18;

fn gpu_health(nvml: &nvml_wrapper::Nvml, index: u32, d: &nvml_wrapper::Device<'_>) -> GpuHealth {
    use nvml_wrapper::enum_wrappers::device::{EccCounter, MemoryError};
    use nvml_wrapper::enum_wrappers::nv_link::ErrorCounter;
    let ecc = |t, c| Reading::from_result(d.total_ecc_errors(t, c));
    let mut nvlinks = Vec::new();
    for link in 0..NVLINK_MAX_LINKS {
        let l = d.link_wrapper_for(link);
        // a link the device does not have answers with an error: it is left out
        let Ok(active) = l.is_active() else { continue };
        nvlinks.push(NvLinkState {
            link,
            active,
            remote_pci_bus_id: Reading::from_result(l.remote_pci_info().map(|p| p.bus_id)),
            replay_errors: Reading::from_result(l.error_counter(ErrorCounter::DlReplay)),
            recovery_errors: Reading::from_result(l.error_counter(ErrorCounter::DlRecovery)),
            crc_flit_errors: Reading::from_result(l.error_counter(ErrorCounter::DlCrcFlit)),
            crc_data_errors: Reading::from_result(l.error_counter(ErrorCounter::DlCrcData)),
        });
    }
    GpuHealth {
        index,
        uuid: Reading::from_result(d.uuid()),
        name: Reading::from_result(d.name()),
        pci_bus_id: Reading::from_result(d.pci_info().map(|p| p.bus_id)),
        ecc_volatile_corrected: ecc(MemoryError::Corrected, EccCounter::Volatile),
        ecc_volatile_uncorrected: ecc(MemoryError::Uncorrected, EccCounter::Volatile),
        ecc_aggregate_corrected: ecc(MemoryError::Corrected, EccCounter::Aggregate),
        ecc_aggregate_uncorrected: ecc(MemoryError::Uncorrected, EccCounter::Aggregate),
        retired_pages_pending: Reading::from_result(d.are_pages_pending_retired()),
        remapped_rows: Reading::from_result(remapped_rows(nvml, d)),
        throttle_reasons: throttle_reasons(d),
        power_w: power_w(d),
        temperature_c: temperature(d),
        pcie_gen_current: Reading::from_result(d.current_pcie_link_gen()),
        pcie_gen_max: Reading::from_result(d.max_pcie_link_gen()),
        pcie_width_current: Reading::from_result(d.current_pcie_link_width()),
        pcie_width_max: Reading::from_result(d.max_pcie_link_width()),
        persistence_mode: Reading::from_result(d.is_in_persistent_mode()),
        nvlinks,
    }
}

/// Current clock-throttle reasons, by NVML's names.
fn throttle_reasons(d: &nvml_wrapper::Device<'_>) -> Reading<Vec<String>> {
    Reading::from_result(d.current_throttle_reasons().map(|r| r.iter_names().map(|(n, _)| n.to_string()).collect()))
}

/// Power draw, W.
fn power_w(d: &nvml_wrapper::Device<'_>) -> Reading<f64> {
    Reading::from_result(d.power_usage().map(|mw| f64::from(mw) / 1000.0))
}

/// GPU die temperature, °C.
fn temperature(d: &nvml_wrapper::Device<'_>) -> Reading<u32> {
    Reading::from_result(d.temperature(TemperatureSensor::Gpu))
}

/// `nvmlDeviceGetRemappedRows`, which nvml-wrapper does not wrap: called through its raw library handle.
fn remapped_rows(
    nvml: &nvml_wrapper::Nvml,
    d: &nvml_wrapper::Device<'_>,
) -> Result<RemappedRows, nvml_wrapper::error::NvmlError> {
    let lib = nvml.lib();
    if lib.nvmlDeviceGetRemappedRows.is_err() {
        return Err(nvml_wrapper::error::NvmlError::FailedToLoadSymbol("nvmlDeviceGetRemappedRows".into()));
    }
    let (mut corr, mut unc, mut pending, mut failure) = (0u32, 0u32, 0u32, 0u32);
    // SAFETY: the symbol is present (checked above); the handle is a live device of this NVML;
    // the four out-pointers are valid unsigned ints, as nvml.h declares.
    let rc = unsafe { lib.nvmlDeviceGetRemappedRows(d.handle(), &mut corr, &mut unc, &mut pending, &mut failure) };
    nvml_wrapper::error::nvml_try(rc)?;
    Ok(RemappedRows { corrected: corr, uncorrected: unc, pending: pending != 0, failure: failure != 0 })
}

/// Throttle reasons that fail a node: hardware slowdowns and thermal limits
/// (NVML's `nvmlClocksThrottleReasons`). Idle, application clocks, the
/// software power cap and sync boost are reported, not judged.
pub(crate) const FAILING_THROTTLE_REASONS: [&str; 4] =
    ["HW_SLOWDOWN", "HW_THERMAL_SLOWDOWN", "HW_POWER_BRAKE_SLOWDOWN", "SW_THERMAL_SLOWDOWN"];

/// Findings and verdict of the health check; CPU load ([`super::load`]) is reported, not judged.
/// What fails, what is inconclusive and what is only reported: docs/METHODS.md, "Health verdict rules".
pub fn evaluate(h: &HealthReport, nvlink_crc_errors_max: Option<u64>) -> (CheckVerdict, Vec<String>) {
    let load_notes: Vec<String> = match &h.load {
        Some(l) => super::load::busy_elsewhere(l).into_iter().chain([super::load::summary(l)]).collect(),
        None => vec!["CPU load unmeasured (evidence of format 1)".into()],
    };
    if let Some(why) = &h.not_applicable {
        return (CheckVerdict::Pass, std::iter::once(why.clone()).chain(load_notes).collect());
    }
    let (mut fail, mut unsure, mut notes) = (Vec::new(), Vec::new(), Vec::new());
    for e in &h.end {
        let g = e.index;
        let start = h.start.iter().find(|s| s.index == g);
        if let Some(n) = e.ecc_volatile_uncorrected.value.filter(|n| *n > 0) {
            fail.push(format!("GPU {g}: {n} uncorrected volatile ECC errors"));
        }
        if e.ecc_volatile_uncorrected.value.is_none() {
            unsure.push(format!(
                "GPU {g}: volatile uncorrected ECC unreadable ({})",
                e.ecc_volatile_uncorrected.unavailable.as_deref().unwrap_or("?")
            ));
        }
        if let Some(s) = start {
            for (what, a, b) in [
                ("volatile corrected ECC", &s.ecc_volatile_corrected, &e.ecc_volatile_corrected),
                ("aggregate uncorrected ECC", &s.ecc_aggregate_uncorrected, &e.ecc_aggregate_uncorrected),
            ] {
                if let Some((a, b)) = a.value.zip(b.value).filter(|(a, b)| b > a) {
                    fail.push(format!("GPU {g}: {what} grew from {a} to {b} during the run"));
                }
            }
        }
        if e.retired_pages_pending.value == Some(true) {
            fail.push(format!("GPU {g}: retired pages pending"));
        }
        if let Some(r) = e.remapped_rows.value.as_ref().filter(|r| r.pending || r.failure) {
            fail.push(format!(
                "GPU {g}: row remapping {}",
                if r.failure { "failed" } else { "pending (reset needed)" }
            ));
        }
        if let Some(t) = &e.throttle_reasons.value {
            let bad: Vec<&str> =
                t.iter().map(String::as_str).filter(|r| FAILING_THROTTLE_REASONS.contains(r)).collect();
            if !bad.is_empty() {
                fail.push(format!("GPU {g}: throttled by {}", bad.join(", ")));
            }
        }
        if let Some((c, m)) = e.pcie_width_current.value.zip(e.pcie_width_max.value).filter(|(c, m)| c < m) {
            fail.push(format!("GPU {g}: PCIe link width x{c} below its maximum x{m}"));
        }
        if let Some((c, m)) = e.pcie_gen_current.value.zip(e.pcie_gen_max.value).filter(|(c, m)| c < m) {
            notes.push(format!(
                "GPU {g}: PCIe gen {c} below max {m} at the end (links train down when idle; reported only)"
            ));
        }
        if e.persistence_mode.value == Some(false) {
            notes.push(format!("GPU {g}: persistence mode off"));
        }
        for l in &e.nvlinks {
            let was = start.and_then(|s| s.nvlinks.iter().find(|x| x.link == l.link));
            if !l.active || was.is_some_and(|w| !w.active) {
                fail.push(format!("GPU {g}: NVLink {} inactive", l.link));
            }
            if let Some(w) = was {
                if let Some((a, b)) = w.recovery_errors.value.zip(l.recovery_errors.value).filter(|(a, b)| b > a) {
                    fail.push(format!("GPU {g}: NVLink {} recovery errors grew from {a} to {b}", l.link));
                }
                let grew = |x: &Reading<u64>, y: &Reading<u64>| x.value.zip(y.value).map(|(a, b)| b.saturating_sub(a));
                let crc = [grew(&w.crc_flit_errors, &l.crc_flit_errors), grew(&w.crc_data_errors, &l.crc_data_errors)];
                let total: u64 = crc.iter().flatten().sum();
                if total > 0 {
                    let what = format!(
                        "GPU {g}: NVLink {} CRC errors grew by {total} during the run (flit {}, data {})",
                        l.link,
                        crc[0].map_or("unreadable".into(), |n| n.to_string()),
                        crc[1].map_or("unreadable".into(), |n| n.to_string())
                    );
                    match nvlink_crc_errors_max {
                        Some(max) if total > max => {
                            fail.push(format!("{what}, above the site's nvlink_crc_errors_max {max}"))
                        }
                        Some(max) => notes.push(format!("{what}, within the site's nvlink_crc_errors_max {max}")),
                        None => notes.push(format!(
                            "{what}; reported, not judged (no nvlink_crc_errors_max in the site file; their cost is \
                                bandwidth, judged by the busbw checks)"
                        )),
                    }
                }
            }
        }
    }
    let mut seen = std::collections::BTreeSet::new();
    for smp in &h.samples {
        for r in smp.throttle_reasons.value.iter().flatten().filter(|r| FAILING_THROTTLE_REASONS.contains(&r.as_str()))
        {
            if seen.insert((smp.gpu, r.clone())) {
                fail.push(format!("GPU {}: throttled by {r} during the run (sample at {} ms)", smp.gpu, smp.t_ms));
            }
        }
    }
    for x in &h.xid_events {
        fail.push(format!(
            "GPU {}: XID {} during the run",
            x.gpu,
            x.xid.map(|v| v.to_string()).unwrap_or_else(|| "(number not given)".into())
        ));
    }
    for (g, why) in &h.xid_unwatched {
        unsure.push(format!("GPU {g}: XID events unavailable ({why})"));
    }
    if h.end.is_empty() {
        unsure.push("NVML enumerated no GPU".into());
    }
    let verdict = match (fail.is_empty(), unsure.is_empty()) {
        (false, _) => CheckVerdict::Fail,
        (true, false) => CheckVerdict::Inconclusive,
        (true, true) => CheckVerdict::Pass,
    };
    (verdict, fail.into_iter().chain(unsure).chain(notes).chain(load_notes).collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ok<T>(v: T) -> Reading<T> {
        Reading { value: Some(v), unavailable: None }
    }

    fn healthy(index: u32) -> GpuHealth {
        GpuHealth {
            index,
            uuid: ok("GPU-x".into()),
            name: ok("NVIDIA H200".into()),
            pci_bus_id: ok("00000000:19:00.0".into()),
            ecc_volatile_corrected: ok(0),
            ecc_volatile_uncorrected: ok(0),
            ecc_aggregate_corrected: ok(3),
            ecc_aggregate_uncorrected: ok(0),
            retired_pages_pending: ok(false),
            remapped_rows: ok(RemappedRows { corrected: 0, uncorrected: 0, pending: false, failure: false }),
            throttle_reasons: ok(vec!["GPU_IDLE".into()]),
            power_w: ok(80.0),
            temperature_c: ok(35),
            pcie_gen_current: ok(5),
            pcie_gen_max: ok(5),
            pcie_width_current: ok(16),
            pcie_width_max: ok(16),
            persistence_mode: ok(true),
            nvlinks: vec![],
        }
    }

    #[test]
    fn a_healthy_node_passes_and_each_finding_fails_it() {
        let h = HealthReport { start: vec![healthy(0)], end: vec![healthy(0)], ..Default::default() };
        assert_eq!(evaluate(&h, None).0, CheckVerdict::Pass);
        let sample = HealthSample {
            t_ms: 1000,
            gpu: 0,
            temperature_c: ok(90),
            power_w: ok(700.0),
            throttle_reasons: ok(vec!["HW_THERMAL_SLOWDOWN".into()]),
        };
        let fails_first_with = |first: &str, make_bad: &dyn Fn(&mut HealthReport)| {
            let mut bad = h.clone();
            make_bad(&mut bad);
            let (v, f) = evaluate(&bad, None);
            assert_eq!(v, CheckVerdict::Fail, "{first}: {f:?}");
            assert!(f[0].contains(first), "{first}: {f:?}");
        };
        fails_first_with("uncorrected volatile ECC", &|b| b.end[0].ecc_volatile_uncorrected = ok(1));
        fails_first_with("x8", &|b| b.end[0].pcie_width_current = ok(8));
        fails_first_with("HW_THERMAL_SLOWDOWN during the run", &|b| b.samples.push(sample.clone()));
        fails_first_with("XID 79", &|b| b.xid_events.push(XidEvent { gpu: 0, xid: Some(79) }));
    }

    #[test]
    fn nvlink_crc_growth_is_judged_only_against_a_site_limit_and_recovery_growth_fails() {
        let link = |crc: u64, recovery: u64| NvLinkState {
            link: 3,
            active: true,
            remote_pci_bus_id: ok("0000:1b:00.0".to_string()),
            replay_errors: ok(0),
            recovery_errors: ok(recovery),
            crc_flit_errors: ok(0),
            crc_data_errors: ok(crc),
        };
        let mut h = HealthReport { start: vec![healthy(0)], end: vec![healthy(0)], ..Default::default() };
        h.start[0].nvlinks = vec![link(100, 0)];
        h.end[0].nvlinks = vec![link(160, 0)];
        let (v, f) = evaluate(&h, None);
        assert_eq!(v, CheckVerdict::Pass, "{f:?}");
        assert!(f.iter().any(|x| x.contains("grew by 60") && x.contains("not judged")), "{f:?}");
        assert_eq!(evaluate(&h, Some(100)).0, CheckVerdict::Pass);
        let (v, f) = evaluate(&h, Some(50));
        assert_eq!(v, CheckVerdict::Fail);
        assert!(f[0].contains("above the site's nvlink_crc_errors_max 50"), "{f:?}");
        h.end[0].nvlinks = vec![link(100, 1)];
        assert_eq!(evaluate(&h, None).0, CheckVerdict::Fail, "a link that retrained fails");
    }

    #[test]
    fn an_unreadable_reading_is_never_zero() {
        let mut h = HealthReport { start: vec![healthy(0)], end: vec![healthy(0)], ..Default::default() };
        h.end[0].ecc_volatile_uncorrected = Reading { value: None, unavailable: Some("Not Supported".into()) };
        h.xid_unwatched.push((0, "Not Supported".into()));
        let (v, f) = evaluate(&h, None);
        assert_eq!(v, CheckVerdict::Inconclusive, "{f:?}");
        let json = serde_json::to_value(&h.end[0].ecc_volatile_uncorrected).unwrap();
        assert!(json.get("value").is_none(), "{json}");
    }
}
