//! Durable, never-overwriting file writes and content digests.
//!
//! Consumes bytes and a destination path; produces a file that either exists
//! whole or not at all (temp file in the same directory, `fsync`, then a
//! hard link that fails if the destination exists, then the temp is removed and
//! the directory fsynced). Refuses to replace an existing file: records are
//! appended, never replaced.
use anyhow::{bail, Context, Result};
use sha2::{Digest, Sha256};
use std::fs::{self, File, OpenOptions};
use std::io::Write;
use std::path::Path;

/// Hex SHA-256 of a byte slice.
pub fn sha256_hex(bytes: &[u8]) -> String {
    hex::encode(Sha256::digest(bytes))
}

/// Hex SHA-256 of a file's bytes, streamed (a file of any size in constant memory).
pub fn sha256_file(path: &Path) -> Result<String> {
    let mut f = File::open(path).with_context(|| format!("reading {}", path.display()))?;
    let mut h = Sha256::new();
    std::io::copy(&mut f, &mut h).with_context(|| format!("reading {}", path.display()))?;
    Ok(hex::encode(h.finalize()))
}

/// Write `bytes` to `dest` atomically; fails if `dest` already exists.
pub fn write_new_atomic(dest: &Path, bytes: &[u8]) -> Result<()> {
    let dir = dest
        .parent()
        .filter(|p| !p.as_os_str().is_empty())
        .unwrap_or_else(|| Path::new("."));
    if dest.exists() {
        bail!("{} already exists; CommCanary never overwrites a record", dest.display());
    }
    let name = dest
        .file_name()
        .with_context(|| format!("{} has no file name", dest.display()))?
        .to_string_lossy()
        .to_string();
    let tmp = dir.join(format!(".{name}.{}.tmp", std::process::id()));
    let mut f = OpenOptions::new()
        .write(true)
        .create_new(true)
        .open(&tmp)
        .with_context(|| format!("creating temporary file {}", tmp.display()))?;
    // a full disk (ENOSPC) or any other failure leaves no temporary file behind
    let written = f
        .write_all(bytes)
        .with_context(|| format!("writing {}", tmp.display()))
        .and_then(|()| f.sync_all().with_context(|| format!("fsync {}", tmp.display())));
    drop(f);
    if let Err(e) = written {
        let _ = fs::remove_file(&tmp);
        return Err(e);
    }
    let linked = fs::hard_link(&tmp, dest);
    let _ = fs::remove_file(&tmp);
    linked.with_context(|| {
        format!("publishing {} (it may already exist; nothing was replaced)", dest.display())
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
        assert!(err.to_string().contains("already exists"), "{err:#}");
        assert_eq!(fs::read(&p).unwrap(), b"first");
        // no temp files left behind
        let names: Vec<_> = fs::read_dir(d.path()).unwrap().map(|e| e.unwrap().file_name()).collect();
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
        cmd.args(["--exact", "fsutil::tests::a_failed_write_leaves_no_temporary_file", "--test-threads", "1"])
            .env("COMMCANARY_FSIZE_CHILD", d.path());
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
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stdout));
        let names: Vec<_> = fs::read_dir(d.path()).unwrap().map(|e| e.unwrap().file_name()).collect();
        assert!(names.is_empty(), "left behind: {names:?}");
    }
}
