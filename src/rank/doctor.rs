//! `doctor`: what this machine offers CommCanary, pasteable into a ticket.
//!
//! Consumes nothing but the machine (and optional explicit `--nccl-lib`
//! paths). Produces a report: host, CPU, MPI library, the CUDA driver and its
//! GPUs, every NCCL library found with the version it reports and the file
//! that was really mapped, CUPTI libraries. A fact that cannot be read is
//! reported with the reason, never guessed. Exits non-zero only when an
//! explicitly requested NCCL library fails to load or verify.
use crate::backend::cuda::nccl::{find_candidates, NcclLibrary, NcclObservation};
use crate::backend::cuda::{self, DriverReport};
use crate::core::identity::{self, ToolIdentity};
use serde::Serialize;
use std::path::PathBuf;

/// One NCCL library probe.
#[derive(schemars::JsonSchema, Serialize, Clone, Debug)]
pub struct NcclProbe {
    /// Path probed.
    pub path: String,
    /// Whether it was named with `--nccl-lib`.
    pub explicit: bool,
    /// Observation when it loaded and verified.
    pub ok: Option<NcclObservation>,
    /// Error otherwise.
    pub error: Option<String>,
}

/// The doctor report.
#[derive(schemars::JsonSchema, Serialize, Clone, Debug)]
pub struct DoctorReport {
    /// Host name.
    pub host: String,
    /// Kernel release.
    pub kernel: Option<String>,
    /// CPU model.
    pub cpu_model: Option<String>,
    /// CPUs this process may use.
    pub cpus_available: usize,
    /// MPI library version string.
    pub mpi_library: Option<String>,
    /// CUDA driver report, when a driver loads.
    pub cuda: Option<DriverReport>,
    /// Why there is no CUDA report.
    pub cuda_unavailable: Option<String>,
    /// NCCL libraries probed.
    pub nccl: Vec<NcclProbe>,
    /// CUPTI libraries found.
    pub cupti: Vec<String>,
    /// This tool.
    pub tool: ToolIdentity,
}

fn find_cupti() -> Vec<String> {
    let mut out = Vec::new();
    for d in ["/usr/local/cuda/extras/CUPTI/lib64", "/usr/local/cuda/lib64", "/usr/lib/x86_64-linux-gnu"] {
        if let Ok(rd) = std::fs::read_dir(d) {
            for e in rd.flatten() {
                if e.file_name().to_string_lossy().starts_with("libcupti.so") {
                    out.push(e.path().display().to_string());
                }
            }
        }
    }
    out.sort();
    out
}

/// Build the report; the bool is false when an explicit library failed.
pub fn report(explicit: &[PathBuf]) -> (DoctorReport, bool) {
    let (cuda, cuda_unavailable) = match cuda::driver_report() {
        Ok(r) => (Some(r), None),
        Err(e) => (None, Some(e)),
    };
    let mut all_ok = true;
    let mut nccl = Vec::new();
    let mut paths: Vec<(PathBuf, bool)> = explicit.iter().map(|p| (p.clone(), true)).collect();
    for c in find_candidates() {
        if !explicit.iter().any(|e| std::fs::canonicalize(e).ok().as_ref() == Some(&c)) {
            paths.push((c, false));
        }
    }
    for (p, is_explicit) in paths {
        let loaded = NcclLibrary::load(&p);
        all_ok &= !(is_explicit && loaded.is_err());
        nccl.push(NcclProbe {
            path: p.display().to_string(),
            explicit: is_explicit,
            ok: loaded.as_ref().ok().map(|lib| lib.observation().clone()),
            error: loaded.err().map(|e| format!("{e:#}")),
        });
    }
    let r = DoctorReport {
        host: identity::hostname(),
        kernel: std::fs::read_to_string("/proc/sys/kernel/osrelease").ok().map(|s| s.trim().to_string()),
        cpu_model: identity::cpu_model(),
        cpus_available: std::thread::available_parallelism().map(|n| n.get()).unwrap_or(0),
        mpi_library: identity::mpi_library(),
        cuda,
        cuda_unavailable,
        nccl,
        cupti: find_cupti(),
        tool: ToolIdentity::current(),
    };
    (r, all_ok)
}

/// Human rendering.
pub fn render(r: &DoctorReport) -> String {
    use std::fmt::Write;
    let mut o = String::new();
    let _ = writeln!(o, "commcanary {} (commit {}, tree {})", r.tool.version, r.tool.git_commit, r.tool.git_tree);
    let _ = writeln!(o, "host        {} (kernel {})", r.host, r.kernel.as_deref().unwrap_or("unknown"));
    let _ = writeln!(o, "cpu         {} x{}", r.cpu_model.as_deref().unwrap_or("unknown"), r.cpus_available);
    let _ = writeln!(
        o,
        "mpi         {}",
        r.mpi_library.as_deref().map(|s| s.lines().next().unwrap_or("")).unwrap_or("unknown")
    );
    match (&r.cuda, &r.cuda_unavailable) {
        (Some(c), _) => {
            let _ = writeln!(
                o,
                "cuda driver {}.{} ({}), {} GPU(s)",
                c.driver_version / 1000,
                (c.driver_version % 1000) / 10,
                c.driver_version,
                c.devices.len()
            );
            for (i, d) in c.devices.iter().enumerate() {
                let _ = writeln!(o, "  gpu {i}: {d}");
            }
        }
        (None, Some(why)) => {
            let _ = writeln!(o, "cuda        unavailable: {why}");
        }
        _ => {}
    }
    if r.nccl.is_empty() {
        let _ = writeln!(o, "nccl        none found (pass --nccl-lib PATH to probe one)");
    }
    for n in &r.nccl {
        match (&n.ok, &n.error) {
            (Some(ob), _) => {
                let _ = writeln!(
                    o,
                    "nccl        {} reports {} (code {}); mapped {}",
                    n.path, ob.version, ob.version_code, ob.canonical_path
                );
            }
            (None, Some(e)) => {
                let _ = writeln!(o, "nccl        {} FAILED: {e}", n.path);
            }
            _ => {}
        }
    }
    let _ = writeln!(o, "cupti       {}", if r.cupti.is_empty() { "none found".into() } else { r.cupti.join(", ") });
    o
}
