//! Environment identity of one rank in one attempt (docs/ARCHITECTURE.md §8).
//!
//! Consumes the process environment, `/proc`, and MPI; produces an
//! [`EnvIdentity`] and its SHA-256 (over the canonical JSON: fixed field order,
//! sorted variables). Facts that cannot be read are absent, never guessed.
use crate::core::fsutil::sha256_hex;
use serde::{Deserialize, Serialize};

/// Environment variable prefixes that change collective behaviour and are recorded.
pub(crate) const RECORDED_ENV_PREFIXES: [&str; 5] = ["NCCL_", "OMPI_MCA_", "CUDA_", "UCX_", "COMMCANARY_"];

/// Whole names also recorded when set: what decides which libraries (an
/// NCCL, an MPI, an interposer) and which programs a job loads.
pub(crate) const RECORDED_ENV_NAMES: [&str; 3] = ["LD_PRELOAD", "LD_LIBRARY_PATH", "PATH"];

/// The tool that produced a record.
#[derive(schemars::JsonSchema, Serialize, Deserialize, Clone, Debug, PartialEq)]
pub struct ToolIdentity {
    /// Crate version.
    pub version: String,
    /// Git commit at build time.
    pub git_commit: String,
    /// `clean`, `dirty` or `unknown`: whether tracked files differed from the commit at build time.
    pub git_tree: String,
    /// SHA-256 of the running executable, where readable.
    pub binary_sha256: Option<String>,
}

impl ToolIdentity {
    /// The identity of this build.
    pub fn current() -> Self {
        Self {
            version: env!("CARGO_PKG_VERSION").to_string(),
            git_commit: env!("COMMCANARY_GIT_COMMIT").to_string(),
            git_tree: env!("COMMCANARY_GIT_DIRTY").to_string(),
            binary_sha256: std::fs::read("/proc/self/exe").ok().map(|b| sha256_hex(&b)),
        }
    }
}

/// `--version` text: version, commit and tree state at build time.
pub const VERSION_LONG: &str = concat!(
    env!("CARGO_PKG_VERSION"),
    " (commit ",
    env!("COMMCANARY_GIT_COMMIT"),
    ", tree ",
    env!("COMMCANARY_GIT_DIRTY"),
    " at build)"
);

/// Identity of one rank's environment.
#[derive(schemars::JsonSchema, Serialize, Deserialize, Clone, Debug, PartialEq)]
pub struct EnvIdentity {
    /// Host name.
    pub host: String,
    /// Kernel release (`uname -r`).
    pub kernel: Option<String>,
    /// CPU model name from `/proc/cpuinfo`.
    pub cpu_model: Option<String>,
    /// MPI library version string (`MPI_Get_library_version`).
    pub mpi_library: Option<String>,
    /// MPI standard version implemented.
    pub mpi_standard: String,
    /// World rank.
    pub world_rank: u32,
    /// World size.
    pub world_size: u32,
    /// Node-local rank (`MPI_Comm_split_type(SHARED)`).
    pub local_rank: u32,
    /// Ranks on this node.
    pub local_size: u32,
    /// CPUs this process may run on (`Cpus_allowed_list`).
    pub cpu_affinity: Option<String>,
    /// NUMA nodes this process may allocate from (`Mems_allowed_list`).
    pub numa_mems: Option<String>,
    /// Recorded environment variables, sorted by name.
    pub env: Vec<(String, String)>,
    /// This tool.
    pub tool: ToolIdentity,
}

impl EnvIdentity {
    /// SHA-256 of the canonical JSON.
    pub fn digest(&self) -> String {
        sha256_hex(&serde_json::to_vec(self).expect("identity serializes"))
    }
}

/// Host name of this machine.
pub fn hostname() -> String {
    hostname::get().map_or_else(|_| "unknown-host".into(), |h| h.to_string_lossy().into_owned())
}

/// Which `CLOCK_MONOTONIC` this process reads: the kernel's boot id
/// (`/proc/sys/kernel/random/boot_id`) and the time namespace
/// (`/proc/self/ns/time`, "none" on kernels before time namespaces). Two
/// processes with the same id read one clock; `None` when the boot id is
/// unreadable.
pub fn kernel_clock_id() -> Option<String> {
    let boot = std::fs::read_to_string("/proc/sys/kernel/random/boot_id")
        .ok()
        .map(|s| s.trim().to_string())
        .filter(|s| !s.is_empty())?;
    let ns = match std::fs::read_link("/proc/self/ns/time") {
        Ok(l) => l.to_string_lossy().into_owned(),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => "none".into(),
        Err(_) => return None,
    };
    Some(format!("{boot} {ns}"))
}

fn proc_status_field(field: &str) -> Option<String> {
    let s = std::fs::read_to_string("/proc/self/status").ok()?;
    s.lines().find_map(|l| l.strip_prefix(field).and_then(|r| r.strip_prefix(':'))).map(|v| v.trim().to_string())
}

/// The variables that stand in for a recorded hardware fact in test builds.
pub const FACT_HOOKS: [&str; 2] = ["COMMCANARY_TEST_HOST", "COMMCANARY_TEST_CPU_MODEL"];

/// Whether this build honours the test hooks of [`FACT_HOOKS`]: only a build
/// with debug assertions (what `cargo test` runs); a release build records
/// the real host and CPU whatever the environment says, and its
/// `campaign verify` refuses a record that used a hook ([`hook_used`]).
pub const FACT_HOOKS_HONOURED: bool = cfg!(debug_assertions);

/// Test hook, ignored by release builds: the value of a `COMMCANARY_TEST_*` variable that stands in
/// for a recorded fact (docs/ARCHITECTURE.md §8; the variable is recorded too).
fn test_override(var: &str) -> Option<String> {
    if !FACT_HOOKS_HONOURED {
        return None;
    }
    std::env::var(var).ok().filter(|v| !v.is_empty())
}

/// The first fact hook a rank's recorded environment set (name and value):
/// its host or CPU model may be the hook's, not the hardware's.
pub fn hook_used(id: &EnvIdentity) -> Option<(&str, &str)> {
    id.env
        .iter()
        .find(|(k, v)| FACT_HOOKS.contains(&k.as_str()) && !v.is_empty())
        .map(|(k, v)| (k.as_str(), v.as_str()))
}

/// The host name a rank records: [`hostname`], or `COMMCANARY_TEST_HOST`
/// where the tests set it.
pub(crate) fn recorded_host() -> String {
    test_override("COMMCANARY_TEST_HOST").unwrap_or_else(hostname)
}

/// CPU model from `/proc/cpuinfo` (`COMMCANARY_TEST_CPU_MODEL` where the tests set it).
pub fn cpu_model() -> Option<String> {
    if let Some(v) = test_override("COMMCANARY_TEST_CPU_MODEL") {
        return Some(v);
    }
    let s = std::fs::read_to_string("/proc/cpuinfo").ok()?;
    s.lines().find(|l| l.starts_with("model name")).and_then(|l| l.split_once(':')).map(|(_, v)| v.trim().to_string())
}

/// MPI library version string, without the NUL padding some libraries
/// (OpenMPI 4.1.6) leave in it.
pub fn mpi_library() -> Option<String> {
    mpi::environment::library_version()
        .ok()
        .map(|s| s.trim_matches(|c: char| c == '\0' || c.is_whitespace()).to_string())
}

/// Whether a variable of this name is recorded (a recorded prefix, or a recorded whole name).
pub(crate) fn is_recorded(name: &str) -> bool {
    RECORDED_ENV_PREFIXES.iter().any(|p| name.starts_with(p)) || RECORDED_ENV_NAMES.contains(&name)
}

/// Recorded environment variables, sorted.
pub(crate) fn recorded_env() -> Vec<(String, String)> {
    let mut v: Vec<(String, String)> = std::env::vars().filter(|(k, _)| is_recorded(k)).collect();
    v.sort();
    v
}

/// Capture the identity of this rank. `mpi` facts are passed in by the caller.
pub(crate) fn capture(world_rank: u32, world_size: u32, local_rank: u32, local_size: u32) -> EnvIdentity {
    let (maj, min) = mpi::environment::version();
    EnvIdentity {
        host: recorded_host(),
        kernel: std::fs::read_to_string("/proc/sys/kernel/osrelease").ok().map(|s| s.trim().to_string()),
        cpu_model: cpu_model(),
        mpi_library: mpi_library(),
        mpi_standard: format!("{maj}.{min}"),
        world_rank,
        world_size,
        local_rank,
        local_size,
        cpu_affinity: proc_status_field("Cpus_allowed_list"),
        numa_mems: proc_status_field("Mems_allowed_list"),
        env: recorded_env(),
        tool: ToolIdentity::current(),
    }
}
