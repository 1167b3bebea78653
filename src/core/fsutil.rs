//! Durable, never-overwriting file writes and content digests.
//!
//! Consumes bytes and a destination path; produces a file that either exists
//! whole or not at all (a `tempfile` temporary in the same directory, `fsync`,
//! then `persist_noclobber`, which links it into place only if the destination
//! does not exist, then the directory is fsynced). Refuses to replace an
//! existing file (`refused[ALREADY_EXISTS]`): records are appended, never replaced.
use anyhow::{Context, Result};
use sha2::{Digest, Sha256};
use std::fs::File;
use std::io::Write;
use std::path::Path;

/// Hex SHA-256 of a byte slice.
pub fn sha256_hex(bytes: &[u8]) -> String {
    hex::encode(Sha256::digest(bytes))
}

/// Hex SHA-256 of a file's bytes, streamed (a file of any size in constant memory).
pub fn sha256_file(path: &Path) -> Result<String> {
    // a FIFO or device is refused rather than read (or waited on) for ever
    let (mut f, _) = crate::core::limits::open_regular(path)?;
    let mut h = Sha256::new();
    std::io::copy(&mut f, &mut h).with_context(|| format!("reading {}", path.display()))?;
    Ok(hex::encode(h.finalize()))
}

/// Write `bytes` to `dest` atomically; fails if `dest` already exists.
pub fn write_new_atomic(dest: &Path, bytes: &[u8]) -> Result<()> {
    let dir = dest.parent().filter(|p| !p.as_os_str().is_empty()).unwrap_or_else(|| Path::new("."));
    let exists = || {
        crate::core::refusal::refuse(
            crate::core::refusal::Code::AlreadyExists,
            format!("{} already exists; CommCanary never overwrites a record", dest.display()),
        )
    };
    if dest.symlink_metadata().is_ok() {
        return Err(exists());
    }
    if dest.file_name().is_none() {
        anyhow::bail!("{} has no file name", dest.display());
    }
    // a full disk (ENOSPC) or any other failure leaves no temporary file
    // behind: the temporary is removed when it is dropped unpersisted
    let mut tmp = tempfile::Builder::new()
        .prefix(".commcanary-")
        .suffix(".tmp")
        .tempfile_in(dir)
        .with_context(|| format!("creating a temporary file in {}", dir.display()))?;
    tmp.write_all(bytes).with_context(|| format!("writing {}", tmp.path().display()))?;
    tmp.as_file().sync_all().with_context(|| format!("fsync {}", tmp.path().display()))?;
    tmp.persist_noclobber(dest).map_err(|e| {
        if e.error.kind() == std::io::ErrorKind::AlreadyExists {
            exists()
        } else {
            anyhow::Error::new(e.error).context(format!("publishing {} (nothing was replaced)", dest.display()))
        }
    })?;
    if let Ok(d) = File::open(dir) {
        let _ = d.sync_all();
    }
    Ok(())
}

/// Serialize `value` as pretty JSON and write it with [`write_new_atomic`].
pub fn write_json_new<T: serde::Serialize>(dest: &Path, value: &T) -> Result<()> {
    let mut bytes = serde_json::to_vec_pretty(value)?;
    bytes.push(b'\n');
    write_new_atomic(dest, &bytes)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn refuses_to_overwrite_and_keeps_original() {
        let d = tempfile::tempdir().unwrap();
        let p = d.path().join("a.json");
        write_new_atomic(&p, b"first").unwrap();
        let err = write_new_atomic(&p, b"second").unwrap_err();
        assert_eq!(crate::core::refusal::code_of(&err), Some(crate::core::refusal::Code::AlreadyExists), "{err:#}");
        assert_eq!(std::fs::read(&p).unwrap(), b"first");
        // no temp files left behind
        let names: Vec<_> = std::fs::read_dir(d.path()).unwrap().map(|e| e.unwrap().file_name()).collect();
        assert_eq!(names.len(), 1, "{names:?}");
    }

    /// A write that fails part-way (here EFBIG under a 16-byte RLIMIT_FSIZE,
    /// as ENOSPC fails it) leaves neither the destination nor a temporary file.
    #[test]
    fn a_failed_write_leaves_no_temporary_file() {
        if let Ok(dir) = std::env::var("COMMCANARY_FSIZE_CHILD") {
            let r = write_new_atomic(&Path::new(&dir).join("big.json"), &[b'x'; 4096]);
            assert!(r.is_err(), "the write must fail under the file size limit");
            return;
        }
        let d = tempfile::tempdir().unwrap();
        let mut cmd = std::process::Command::new(std::env::current_exe().unwrap());
        // this test's own name, wherever the module lives
        let name = concat!(module_path!(), "::a_failed_write_leaves_no_temporary_file");
        let name = name.split_once("::").map_or(name, |(_, rest)| rest);
        cmd.args(["--exact", name, "--test-threads", "1"]).env("COMMCANARY_FSIZE_CHILD", d.path());
        // SAFETY: setrlimit and signal are async-signal-safe.
        unsafe {
            std::os::unix::process::CommandExt::pre_exec(&mut cmd, || {
                let lim = libc::rlimit { rlim_cur: 16, rlim_max: 16 };
                libc::setrlimit(libc::RLIMIT_FSIZE, &lim);
                libc::signal(libc::SIGXFSZ, libc::SIG_IGN);
                Ok(())
            });
        }
        let o = cmd.output().unwrap();
        let out = String::from_utf8_lossy(&o.stdout);
        assert!(o.status.success(), "{out}");
        assert!(out.contains("1 passed"), "the child must have run this test: {out}");
        let names: Vec<_> = std::fs::read_dir(d.path()).unwrap().map(|e| e.unwrap().file_name()).collect();
        assert!(names.is_empty(), "left behind: {names:?}");
    }
}
