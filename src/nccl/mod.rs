//! Our own thin NCCL loader (SPEC §1: two NCCL versions must be comparable in
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
use anyhow::{bail, Context, Result};
use libloading::os::unix::{Library, Symbol, RTLD_LOCAL, RTLD_NOW};
use serde::{Deserialize, Serialize};
use std::ffi::CStr;
use std::os::raw::{c_char, c_int};
use std::path::{Path, PathBuf};

/// Raw NCCL C types (only those we use).
pub mod sys {
    use std::os::raw::{c_char, c_int};
    /// `ncclResult_t`.
    pub type NcclResult = c_int;
    /// `ncclSuccess`.
    pub const NCCL_SUCCESS: NcclResult = 0;
    /// `ncclGetVersion(int*)`.
    pub type GetVersion = unsafe extern "C" fn(*mut c_int) -> NcclResult;
    /// `ncclGetErrorString(ncclResult_t)`.
    pub type GetErrorString = unsafe extern "C" fn(NcclResult) -> *const c_char;
}

/// Symbols every supported NCCL must export (resolved eagerly so a wrong
/// library fails at load, not mid-run).
pub const REQUIRED_SYMBOLS: [&str; 8] = [
    "ncclGetVersion",
    "ncclGetErrorString",
    "ncclGetUniqueId",
    "ncclCommInitRank",
    "ncclAllReduce",
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
    get_version: Symbol<sys::GetVersion>,
    get_error_string: Symbol<sys::GetErrorString>,
    observation: NcclObservation,
}

/// Decode an `ncclGetVersion` code (2.9+: `major*10000 + minor*100 + patch`; older: `*1000 + *100`).
pub fn decode_version(code: i32) -> String {
    if code >= 20900 {
        format!("{}.{}.{}", code / 10000, (code % 10000) / 100, code % 100)
    } else {
        format!("{}.{}.{}", code / 1000, (code % 1000) / 100, code % 100)
    }
}

/// NCCL files currently mapped into this process.
pub fn mapped_nccl_paths() -> Vec<String> {
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
    /// Load exactly `path` and verify it.
    pub fn load(path: &Path) -> Result<Self> {
        let canonical: PathBuf = std::fs::canonicalize(path)
            .with_context(|| format!("NCCL library {}: no such file", path.display()))?;
        // SAFETY: loading a shared library runs its initialisers; NCCL's are benign.
        let lib = unsafe { Library::open(Some(&canonical), RTLD_NOW | RTLD_LOCAL) }
            .with_context(|| format!("NCCL library {} could not be loaded", path.display()))?;
        for name in REQUIRED_SYMBOLS {
            let cname = format!("{name}\0");
            // SAFETY: only checks presence; the pointer is not called here.
            unsafe { lib.get::<*const ()>(cname.as_bytes()) }.map_err(|_| {
                anyhow::anyhow!("{} is not a usable NCCL: it lacks the symbol {name}", path.display())
            })?;
        }
        // SAFETY: the signatures match NCCL's public header for these two functions.
        let (get_version, get_error_string) = unsafe {
            (
                lib.get::<sys::GetVersion>(b"ncclGetVersion\0")?,
                lib.get::<sys::GetErrorString>(b"ncclGetErrorString\0")?,
            )
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
                "asked for {} ({canon}) but /proc/self/maps shows {:?}: refusing to run with a library that is not the one requested",
                path.display(),
                mapped
            );
        }
        let sha256 = crate::fsutil::sha256_file(&canonical)?;
        Ok(Self {
            _lib: lib,
            get_version,
            get_error_string,
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

    /// Version code as reported now.
    pub fn version_code(&self) -> Result<i32> {
        let mut code: c_int = 0;
        // SAFETY: as in load.
        let rc = unsafe { (self.get_version)(&mut code) };
        self.check("ncclGetVersion", rc)?;
        Ok(code)
    }

    /// Turn an NCCL result into an error naming the call, the code and NCCL's message.
    pub fn check(&self, call: &str, rc: sys::NcclResult) -> Result<()> {
        if rc == sys::NCCL_SUCCESS {
            return Ok(());
        }
        // SAFETY: ncclGetErrorString returns a static C string.
        let msg: *const c_char = unsafe { (self.get_error_string)(rc) };
        let text = if msg.is_null() { "(no message)".into() } else { unsafe { CStr::from_ptr(msg) }.to_string_lossy().into_owned() };
        bail!("{call} failed: NCCL error {rc}: {text}")
    }
}

/// Candidate NCCL libraries on this machine: the loader cache, the usual
/// directories and Python wheels (`nvidia/nccl/lib`).
pub fn find_candidates() -> Vec<PathBuf> {
    let mut dirs: Vec<PathBuf> = ["/usr/lib/x86_64-linux-gnu", "/usr/lib64", "/usr/local/cuda/lib64", "/usr/local/lib", "/usr/lib"]
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
