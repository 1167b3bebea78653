//! Size and count limits of every decoder of untrusted input, in one place.
//!
//! Consumes a path (or bytes) and a limit; produces the bytes, or a
//! `refused[OVER_LIMIT]` error naming the file, its size and the limit, before
//! anything is allocated for the content, or `refused[NOT_REGULAR_FILE]` for a
//! FIFO, device, socket or directory ([`open_regular`], the one opener of a
//! user-named file). How the limits were chosen: docs/REFERENCE.md, "Limits of decoders".
use crate::core::refusal::{refuse, Code};
use anyhow::{Context, Result};
use std::io::Read;
use std::path::Path;

/// Default of `--collective-timeout-s` on every command that runs collectives
/// (`rank`, `validate`): one value, so a node validated and a run ranked give
/// up on a hung peer after the same time.
pub(crate) const DEFAULT_COLLECTIVE_TIMEOUT_S: f64 = 300.0;
/// A shard file (header + body + trailer).
pub(crate) const MAX_SHARD_BYTES: u64 = 512 << 20;
/// A shard's JSON header.
pub(crate) const MAX_SHARD_HEADER_BYTES: usize = 64 << 20;
/// A shard's bincode body.
pub const MAX_SHARD_BODY_BYTES: usize = 256 << 20;
/// bincode's decode limit for the largest bodies: the in-memory size it may
/// claim (every length prefix is checked before allocation). Smaller bodies get
/// smaller limits, 16 times their size class (1 MiB, 16 MiB), since a varint
/// decodes to at most 8 bytes per byte read.
pub const MAX_SHARD_BODY_DECODE_BYTES: usize = 4 << 30;
/// A JSON record: run record, manifest, selection, descriptor, interval file.
pub(crate) const MAX_JSON_BYTES: u64 = 256 << 20;
/// A campaign spec (TOML).
pub(crate) const MAX_SPEC_BYTES: u64 = 1 << 20;
/// The attempts log.
pub(crate) const MAX_ATTEMPTS_LOG_BYTES: u64 = 1 << 30;
/// A CSV table or service-time file.
pub(crate) const MAX_TEXT_TABLE_BYTES: u64 = 1 << 30;
/// One nccl-tests output file (text or `-J` JSON with per-iteration times).
pub(crate) const MAX_NCCL_TESTS_FILE_BYTES: u64 = 64 << 20;
/// Files in a folder of nccl-tests outputs (one per configuration).
pub(crate) const MAX_NCCL_TESTS_FILES: usize = 1024;
/// Members of a campaign archive.
pub(crate) const MAX_ARCHIVE_MEMBERS: usize = 10_000_000;
/// Ranks in one run.
pub const MAX_WORLD_SIZE: u32 = 1 << 20;

/// Open `path` for reading only if it names a regular file (after following symbolic links), and
/// return it with its size; anything else is refused with `refused[NOT_REGULAR_FILE]` naming the
/// file, before and after the open (docs/METHODS.md, "Regular files and whole directories").
pub fn open_regular(path: &Path) -> Result<(std::fs::File, u64)> {
    use std::os::unix::fs::OpenOptionsExt;
    let meta = std::fs::metadata(path).with_context(|| format!("reading {}", path.display()))?;
    refuse_unless_regular(path, &meta)?;
    let f = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NONBLOCK)
        .open(path)
        .with_context(|| format!("reading {}", path.display()))?;
    let meta = f.metadata().with_context(|| format!("reading {}", path.display()))?;
    refuse_unless_regular(path, &meta)?;
    Ok((f, meta.len()))
}

fn refuse_unless_regular(path: &Path, meta: &std::fs::Metadata) -> Result<()> {
    use std::os::unix::fs::FileTypeExt;
    let t = meta.file_type();
    if t.is_file() {
        return Ok(());
    }
    let what = if t.is_dir() {
        "a directory"
    } else if t.is_fifo() {
        "a FIFO (named pipe)"
    } else if t.is_char_device() {
        "a character device"
    } else if t.is_block_device() {
        "a block device"
    } else if t.is_socket() {
        "a socket"
    } else {
        "not a regular file"
    };
    Err(refuse(
        Code::NotRegularFile,
        format!(
            "{} is {what}; only a regular file is read as input (a pipe or device could block or never end)",
            path.display()
        ),
    ))
}

/// Read `path` whole, refusing a file that is not regular ([`open_regular`])
/// or is larger than `max_bytes`, before reading it; the read itself stops at
/// `max_bytes + 1` whatever the size said, so a file growing while it is read
/// is bounded too.
pub fn read_bounded(path: &Path, max_bytes: u64) -> Result<Vec<u8>> {
    let (mut f, len) = open_regular(path)?;
    read_opened(path, &mut f, len, max_bytes)
}

/// The read of [`read_bounded`] on the file `f` opened from `path`, `len`
/// bytes long when opened.
fn read_opened(path: &Path, f: &mut std::fs::File, len: u64, max_bytes: u64) -> Result<Vec<u8>> {
    if len > max_bytes {
        return Err(refuse(
            Code::OverLimit,
            format!("{}: {len} bytes is over the limit of {max_bytes} bytes for this kind of file", path.display()),
        ));
    }
    let mut out = Vec::with_capacity(len as usize);
    // take() also bounds a file that grows while it is read
    f.take(max_bytes + 1).read_to_end(&mut out).with_context(|| format!("reading {}", path.display()))?;
    if out.len() as u64 > max_bytes {
        return Err(refuse(
            Code::OverLimit,
            format!("{}: grew past the limit of {max_bytes} bytes while being read", path.display()),
        ));
    }
    Ok(out)
}

/// What says a file is the one that was read: device, inode, size, and the modification and
/// status-change times (ns), from `fstat` of the open file ([`FileStamp::racy`]: docs/METHODS.md,
/// "Regular files and whole directories").
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FileStamp {
    dev: u64,
    ino: u64,
    len: u64,
    mtime_ns: i128,
    ctime_ns: i128,
}

/// How close to the read a file's times must be for its stamp to prove
/// nothing (git's "racy" entries, Documentation/technical/racy-git.txt):
/// more than the coarsest timestamp granularity expected (the kernel's tick,
/// a file system's 1 or 2 s) and the clock difference to a file server.
pub const RACY_WINDOW_NS: i128 = 3_000_000_000;

impl FileStamp {
    /// The stamp of an open file.
    pub fn of(f: &std::fs::File) -> std::io::Result<Self> {
        use std::os::unix::fs::MetadataExt;
        let m = f.metadata()?;
        Ok(FileStamp {
            dev: m.dev(),
            ino: m.ino(),
            len: m.len(),
            mtime_ns: m.mtime() as i128 * 1_000_000_000 + m.mtime_nsec() as i128,
            ctime_ns: m.ctime() as i128 * 1_000_000_000 + m.ctime_nsec() as i128,
        })
    }

    /// Whether a later write could leave this stamp as it is: the file's
    /// times are within [`RACY_WINDOW_NS`] of `read_at_ns` (wall clock, ns
    /// since the epoch, taken before the read) or after it.
    pub fn racy(&self, read_at_ns: i128) -> bool {
        self.mtime_ns.max(self.ctime_ns) >= read_at_ns - RACY_WINDOW_NS
    }
}

/// The wall clock in ns since the epoch (for [`FileStamp::racy`]).
pub fn wall_now_ns() -> i128 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.as_nanos() as i128).unwrap_or(0)
}

/// [`read_bounded`], with the file's stamp and whether it proves nothing
/// ([`FileStamp::racy`], or the stamp changed while the file was read).
pub fn read_bounded_stamped(path: &Path, max_bytes: u64) -> Result<(Vec<u8>, FileStamp, bool)> {
    let read_at = wall_now_ns();
    let (mut f, len) = open_regular(path)?;
    let before = FileStamp::of(&f).with_context(|| format!("reading {}", path.display()))?;
    let out = read_opened(path, &mut f, len, max_bytes)?;
    let after = FileStamp::of(&f).with_context(|| format!("reading {}", path.display()))?;
    Ok((out, after, before != after || after.racy(read_at)))
}

/// SHA-256 of `path`'s bytes, refusing a file that is not regular
/// ([`open_regular`]) or holds more than `max_bytes`; at most `max_bytes + 1`
/// bytes are read whatever the size said.
pub fn sha256_bounded(path: &Path, max_bytes: u64) -> Result<String> {
    use sha2::{Digest, Sha256};
    let (f, len) = open_regular(path)?;
    if len > max_bytes {
        return Err(refuse(
            Code::OverLimit,
            format!("{}: {len} bytes is over the limit of {max_bytes} bytes for this kind of file", path.display()),
        ));
    }
    let mut h = Sha256::new();
    let n = std::io::copy(&mut f.take(max_bytes + 1), &mut h).with_context(|| format!("reading {}", path.display()))?;
    if n > max_bytes {
        return Err(refuse(
            Code::OverLimit,
            format!("{}: grew past the limit of {max_bytes} bytes while being read", path.display()),
        ));
    }
    Ok(hex::encode(h.finalize()))
}

/// [`read_bounded`] as UTF-8 text.
pub fn read_text_bounded(path: &Path, max_bytes: u64) -> Result<String> {
    let b = read_bounded(path, max_bytes)?;
    String::from_utf8(b).with_context(|| format!("{}: not UTF-8 text", path.display()))
}

/// Longest gap a trace file may ask to replay: 60 s.
pub const MAX_REPLAY_GAP_NS: u64 = 60_000_000_000;

/// The one gap bound of every replay (`rank --trace`, `replay-trace`): the first gap over
/// [`MAX_REPLAY_GAP_NS`] is refused with `refused[OUT_OF_RANGE]` before anything is replayed,
/// `what(i)` naming the collective before which it lies.
pub(crate) fn check_replay_gaps(gaps: impl IntoIterator<Item = u64>, what: &dyn Fn(usize) -> String) -> Result<()> {
    if let Some((i, g)) = gaps.into_iter().enumerate().find(|(_, g)| *g > MAX_REPLAY_GAP_NS) {
        crate::refuse!(
            Code::OutOfRange,
            "{} has a gap of {g} ns before it; replayed gaps are at most {MAX_REPLAY_GAP_NS} ns (60 s)",
            what(i)
        );
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::refusal::code_of;
    use std::os::unix::fs::symlink;

    fn mkfifo(p: &Path) {
        let c = std::ffi::CString::new(p.as_os_str().as_encoded_bytes()).unwrap();
        // SAFETY: `c` is a valid NUL-terminated path that outlives the call.
        assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0, "mkfifo {}", p.display());
    }

    #[test]
    fn refuses_a_fifo_a_device_and_a_directory_without_blocking() {
        let d = tempfile::tempdir().unwrap();
        let fifo = d.path().join("trace.json");
        mkfifo(&fifo);
        let link = d.path().join("zero-link.json");
        symlink("/dev/zero", &link).unwrap();
        for p in [fifo.as_path(), Path::new("/dev/zero"), Path::new("/dev/null"), link.as_path(), d.path()] {
            let e = read_bounded(p, 1 << 20).expect_err("refused");
            assert_eq!(code_of(&e), Some(Code::NotRegularFile), "{}: {e:#}", p.display());
            assert!(format!("{e:#}").contains(&p.display().to_string()), "names the file: {e:#}");
            assert!(read_text_bounded(p, 1 << 20).is_err());
        }
    }

    #[test]
    fn reads_a_regular_file_and_refuses_one_over_the_limit() {
        let d = tempfile::tempdir().unwrap();
        let p = d.path().join("a.json");
        std::fs::write(&p, b"0123456789").unwrap();
        assert_eq!(read_bounded(&p, 10).unwrap(), b"0123456789");
        assert_eq!(code_of(&read_bounded(&p, 9).unwrap_err()), Some(Code::OverLimit));
    }
}
