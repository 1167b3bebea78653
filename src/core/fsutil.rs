//! Durable, never-overwriting file writes and content digests.
//!
//! Consumes bytes and a destination path; produces a file that either exists
//! whole or not at all (a `tempfile` temporary in the same directory, `fsync`,
//! then `persist_noclobber`, which links it into place only if the destination
//! does not exist, then the directory is fsynced). Refuses to replace an
//! existing file (`refused[ALREADY_EXISTS]`): records are appended, never replaced.
//! A missing destination directory is created (as `mkdir -p` would: `-o
//! out/x.json` works on a fresh checkout), and the file gets the mode a
//! plain `open` gives, 0666 less the umask, as directories do: a record
//! written to a shared path is readable by the accounts the umask allows.
use crate::core::limits;
use crate::core::refusal::{self, Code};
use anyhow::{Context, Result};
use sha2::{Digest, Sha256};
use std::fs::File;
use std::io::Write;
use std::os::unix::fs::PermissionsExt;
use std::path::Path;

/// Hex SHA-256 of a byte slice.
pub fn sha256_hex(bytes: &[u8]) -> String {
    hex::encode(Sha256::digest(bytes))
}

/// Hex SHA-256 of a file's bytes, streamed (a file of any size in constant memory).
pub fn sha256_file(path: &Path) -> Result<String> {
    // a FIFO or device is refused rather than read (or waited on) for ever
    let (mut f, _) = limits::open_regular(path)?;
    let mut h = Sha256::new();
    std::io::copy(&mut f, &mut h).with_context(|| format!("reading {}", path.display()))?;
    Ok(hex::encode(h.finalize()))
}

/// Replace `dest` with `bytes` atomically (a temporary file beside it, then a
/// rename): for exports that another tool reads and every run replaces, such
/// as a Prometheus text file. Records never go through this: they are new files.
pub fn replace_atomic(dest: &Path, bytes: &[u8]) -> Result<()> {
    let dir = dest.parent().filter(|p| !p.as_os_str().is_empty()).unwrap_or_else(|| Path::new("."));
    let mut t = tempfile::NamedTempFile::new_in(dir)
        .with_context(|| format!("creating a temporary file in {} for {}", dir.display(), dest.display()))?;
    t.write_all(bytes)
        .and_then(|()| t.as_file().sync_all())
        .with_context(|| format!("writing a temporary file for {}", dest.display()))?;
    t.persist(dest).map_err(|e| anyhow::anyhow!("replacing {}: {}", dest.display(), e.error))?;
    Ok(())
}

/// The refusal of a record whose destination exists.
fn record_exists(dest: &Path) -> anyhow::Error {
    refusal::refuse(
        Code::AlreadyExists,
        format!("{} already exists; CommCanary never overwrites a record", dest.display()),
    )
}

/// Write `bytes` to `dest` atomically; fails if `dest` already exists.
pub fn write_new_atomic(dest: &Path, bytes: &[u8]) -> Result<()> {
    if dest.symlink_metadata().is_ok() {
        return Err(record_exists(dest));
    }
    write_new_atomic_with(dest, &mut |w| {
        w.write_all(bytes).with_context(|| format!("writing a temporary file for {}", dest.display()))
    })
}

/// [`write_new_atomic`] of what `fill` writes (streamed: the content need
/// not be in memory). The destination is checked only when the file is
/// published, so a refusal of `fill` comes first; fails if `dest` exists then.
pub(crate) fn write_new_atomic_with(dest: &Path, fill: &mut dyn FnMut(&mut dyn Write) -> Result<()>) -> Result<()> {
    let dir = dest.parent().filter(|p| !p.as_os_str().is_empty()).unwrap_or_else(|| Path::new("."));
    if dest.file_name().is_none() {
        anyhow::bail!("{} has no file name", dest.display());
    }
    if !dir.exists() {
        std::fs::create_dir_all(dir)
            .with_context(|| format!("creating the directory {} of {}", dir.display(), dest.display()))?;
    }
    // a full disk (ENOSPC) or any other failure leaves no temporary file
    // behind: the temporary is removed when it is dropped unpersisted.
    // tempfile's own mode is 0600; 0666 is masked by the umask at open(2).
    let mut tmp = tempfile::Builder::new()
        .prefix(".commcanary-")
        .suffix(".tmp")
        .permissions(PermissionsExt::from_mode(0o666))
        .tempfile_in(dir)
        .with_context(|| format!("creating a temporary file in {}", dir.display()))?;
    // a refusal of `fill` is returned as it is (its message is the record's)
    fill(tmp.as_file_mut())?;
    tmp.as_file().sync_all().with_context(|| format!("fsync {}", tmp.path().display()))?;
    tmp.persist_noclobber(dest).map_err(|e| {
        if e.error.kind() == std::io::ErrorKind::AlreadyExists {
            record_exists(dest)
        } else {
            anyhow::Error::new(e.error).context(format!("publishing {} (nothing was replaced)", dest.display()))
        }
    })?;
    if let Ok(d) = File::open(dir) {
        let _ = d.sync_all();
    }
    Ok(())
}

/// Build the new directory `dest` whole or not at all: `build` fills a temporary sibling
/// (`.NAME.partial-XXXX`), renamed to `dest` only when `build` succeeded, and removed otherwise.
/// Refuses an existing `dest` (`refused[ALREADY_EXISTS]`) before and at the rename
/// (docs/METHODS.md, "Regular files and whole directories").
pub(crate) fn build_dir_new(dest: &Path, build: impl FnOnce(&Path) -> Result<()>) -> Result<()> {
    let exists = || {
        refusal::refuse(
            Code::AlreadyExists,
            format!(
                "{} already exists; an output directory is written fresh, never into or over an existing one",
                dest.display()
            ),
        )
    };
    if dest.symlink_metadata().is_ok() {
        return Err(exists());
    }
    let name = dest.file_name().with_context(|| format!("{} has no file name", dest.display()))?;
    let parent = dest.parent().filter(|p| !p.as_os_str().is_empty()).unwrap_or_else(|| Path::new("."));
    std::fs::create_dir_all(parent).with_context(|| format!("creating {}", parent.display()))?;
    let tmp = tempfile::Builder::new()
        .prefix(&format!(".{}.partial-", name.to_string_lossy()))
        .tempdir_in(parent)
        .with_context(|| format!("creating a temporary directory in {}", parent.display()))?;
    build(tmp.path())?;
    if let Ok(d) = File::open(tmp.path()) {
        let _ = d.sync_all();
    }
    let (from, to) = (path_c(tmp.path())?, path_c(dest)?);
    // SAFETY: both are valid NUL-terminated paths that outlive the call.
    let rc =
        unsafe { libc::renameat2(libc::AT_FDCWD, from.as_ptr(), libc::AT_FDCWD, to.as_ptr(), libc::RENAME_NOREPLACE) };
    if rc != 0 {
        let e = std::io::Error::last_os_error();
        match e.raw_os_error() {
            Some(libc::EEXIST) => return Err(exists()),
            Some(libc::EINVAL | libc::ENOSYS) => {
                if dest.symlink_metadata().is_ok() {
                    return Err(exists());
                }
                std::fs::rename(tmp.path(), dest).with_context(|| format!("publishing {}", dest.display()))?;
            }
            _ => {
                return Err(
                    anyhow::Error::new(e).context(format!("publishing {} (nothing was replaced)", dest.display()))
                )
            }
        }
    }
    // renamed: nothing left for the guard to remove
    let _ = tmp.keep();
    if let Ok(d) = File::open(parent) {
        let _ = d.sync_all();
    }
    Ok(())
}

fn path_c(p: &Path) -> Result<std::ffi::CString> {
    std::ffi::CString::new(p.as_os_str().as_encoded_bytes())
        .with_context(|| format!("{}: a path with a NUL byte", p.display()))
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
    use crate::core::refusal::{self, Code};
    use std::os::unix::process::CommandExt;

    #[test]
    fn a_failed_build_leaves_no_directory_and_a_built_one_is_never_replaced() {
        let d = tempfile::tempdir().unwrap();
        let dest = d.path().join("out");
        let e = build_dir_new(&dest, |t| {
            write_new_atomic(&t.join("manifest.json"), b"{}")?;
            anyhow::bail!("refused half-way")
        })
        .unwrap_err();
        assert!(format!("{e:#}").contains("half-way"));
        assert!(!dest.exists(), "nothing at the destination");
        assert_eq!(std::fs::read_dir(d.path()).unwrap().count(), 0, "no temporary left behind");
        build_dir_new(&dest, |t| write_new_atomic(&t.join("a"), b"1")).unwrap();
        assert_eq!(std::fs::read(dest.join("a")).unwrap(), b"1");
        let e = build_dir_new(&dest, |t| write_new_atomic(&t.join("a"), b"2")).unwrap_err();
        assert_eq!(refusal::code_of(&e), Some(Code::AlreadyExists));
        assert_eq!(std::fs::read(dest.join("a")).unwrap(), b"1");
        assert_eq!(std::fs::read_dir(d.path()).unwrap().count(), 1, "no temporary left behind");
    }

    #[test]
    fn refuses_to_overwrite_and_keeps_original() {
        let d = tempfile::tempdir().unwrap();
        let p = d.path().join("a.json");
        write_new_atomic(&p, b"first").unwrap();
        let err = write_new_atomic(&p, b"second").unwrap_err();
        assert_eq!(refusal::code_of(&err), Some(Code::AlreadyExists), "{err:#}");
        assert_eq!(std::fs::read(&p).unwrap(), b"first");
        // no temp files left behind
        let names: Vec<_> = std::fs::read_dir(d.path()).unwrap().map(|e| e.unwrap().file_name()).collect();
        assert_eq!(names.len(), 1, "{names:?}");
    }

    /// Issue 29 items 1 and 9: `-o out/x.json` on a fresh checkout creates
    /// `out/`, and the file's mode is what the umask gives a plain file, as a
    /// directory's is what it gives a directory (tempfile alone made 0600).
    #[test]
    fn creates_missing_directories_and_follows_the_umask() {
        use std::os::unix::fs::PermissionsExt;
        let d = tempfile::tempdir().unwrap();
        let p = d.path().join("out/deeper/a.json");
        write_new_atomic(&p, b"x").unwrap();
        assert_eq!(std::fs::read(&p).unwrap(), b"x");
        let dir_mode = std::fs::metadata(d.path().join("out")).unwrap().permissions().mode() & 0o777;
        let file_mode = std::fs::metadata(&p).unwrap().permissions().mode() & 0o777;
        assert_eq!(file_mode, dir_mode & 0o666, "file {file_mode:o}, directory {dir_mode:o}");
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
            CommandExt::pre_exec(&mut cmd, || {
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
