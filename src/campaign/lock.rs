//! The campaign lock: advisory flock(2) on `campaign.lock`, exclusive for a whole `exec`,
//! `select` or `archive`; shared, plus a lock of the cell and one of the host under `inflight/`,
//! for `exec --cell`; exclusive on a report folder's `report.lock` for `analyze`. Produces a `CampaignLock` held until
//! dropped; refuses (`LOCKED`) when another command holds it. Take it before reading what you will write:
//! `lock_campaign`, or `lock_campaign_for_reading` for a campaign this process may not be able to write.
use crate::core::identity;
use crate::core::refusal::Code;
use anyhow::{Context, Result};
use std::path::Path;

/// Lock file of a campaign directory (advisory `flock`).
pub(crate) const LOCK_FILE: &str = "campaign.lock";
/// Directory of in-flight attempt notes (one per running job, removed once its record is appended).
pub(crate) const INFLIGHT_FILE: &str = "inflight";

/// A held advisory lock; released when dropped (or when the process dies).
pub(crate) struct CampaignLock {
    _files: Vec<std::fs::File>,
}

/// A lock file, created if missing, never truncated.
fn open_lock(path: &Path) -> Result<std::fs::File> {
    std::fs::OpenOptions::new()
        .create(true)
        .truncate(false)
        .read(true)
        .write(true)
        .open(path)
        .with_context(|| format!("opening lock {}", path.display()))
}

fn flock(path: &Path, exclusive: bool, what: &str) -> Result<std::fs::File> {
    use std::os::fd::AsRawFd;
    let f = open_lock(path)?;
    let op = if exclusive { libc::LOCK_EX } else { libc::LOCK_SH } | libc::LOCK_NB;
    // SAFETY: flock on a file descriptor we own; no memory is passed.
    if unsafe { libc::flock(f.as_raw_fd(), op) } != 0 {
        let e = std::io::Error::last_os_error();
        if e.raw_os_error() == Some(libc::EWOULDBLOCK) {
            crate::refuse!(
                Code::Locked,
                "{what}: another campaign command (exec, select or archive) holds {}; wait for it to finish",
                path.display()
            );
        }
        return Err(e).with_context(|| format!("locking {}", path.display()));
    }
    Ok(f)
}

/// Lock a campaign: exclusively (whole `exec`, `select`, `archive`), or shared plus an exclusive lock
/// on one cell and a waited-for one on this host (`exec --cell`; docs/CAMPAIGNS.md, "Campaign locks").
pub(crate) fn lock_campaign(dir: &Path, cell: Option<&str>, what: &str) -> Result<CampaignLock> {
    let mut files = vec![flock(&dir.join(LOCK_FILE), cell.is_none(), what)?];
    if let Some(c) = cell {
        let d = dir.join(INFLIGHT_FILE);
        std::fs::create_dir_all(&d)?;
        files.push(flock(&d.join(format!("{c}.lock")), true, what)?);
        let host: String = identity::hostname()
            .chars()
            .map(|ch| if ch.is_ascii_alphanumeric() || "._-".contains(ch) { ch } else { '_' })
            .collect();
        files.push(flock_wait(&d.join(format!("host-{host}.lock")), what)?);
    }
    Ok(CampaignLock { _files: files })
}

/// The lock `archive` takes: [`lock_campaign`]'s exclusive lock where the
/// campaign can be written; on a campaign this process cannot write (a
/// read-only mount, another user's published results) the existing lock file
/// opened read-only (flock(2) needs no write access), or no lock at all where
/// there is no lock file to open: then no command of ours can be changing
/// it, and `archive` checks every member it wrote against the campaign's
/// records anyway.
pub(crate) fn lock_campaign_for_reading(dir: &Path, what: &str) -> Result<Option<CampaignLock>> {
    let path = dir.join(LOCK_FILE);
    match open_lock(&path) {
        Ok(_) => lock_campaign(dir, None, what).map(Some),
        Err(e)
            if e.downcast_ref::<std::io::Error>()
                .is_some_and(|io| matches!(io.raw_os_error(), Some(libc::EACCES | libc::EROFS | libc::EPERM))) =>
        {
            use std::os::fd::AsRawFd;
            let Ok(f) = std::fs::File::open(&path) else {
                eprintln!("{what}: {} cannot be written and holds no lock file; reading it unlocked", dir.display());
                return Ok(None);
            };
            // SAFETY: flock on a file descriptor we own; no memory is passed.
            if unsafe { libc::flock(f.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) } != 0 {
                crate::refuse!(
                    Code::Locked,
                    "{what}: another campaign command (exec, select or archive) holds {}; wait for it to finish",
                    path.display()
                );
            }
            Ok(Some(CampaignLock { _files: vec![f] }))
        }
        Err(e) => Err(e),
    }
}

/// Lock file of a report folder: one `analyze` writes it at a time.
pub(crate) const REPORT_LOCK_FILE: &str = "report.lock";

/// An exclusive lock of a report folder (`analyze`, created if missing),
/// held from reading what the folder holds until its last file is written, so
/// two `analyze` into one folder never interleave their plots and reports: the
/// second is refused with `LOCKED` while the first writes.
pub(crate) fn lock_report_dir(out_dir: &Path, what: &str) -> Result<CampaignLock> {
    use std::os::fd::AsRawFd;
    std::fs::create_dir_all(out_dir).with_context(|| format!("creating {}", out_dir.display()))?;
    let path = out_dir.join(REPORT_LOCK_FILE);
    let f = open_lock(&path)?;
    // SAFETY: flock on a file descriptor we own; no memory is passed.
    if unsafe { libc::flock(f.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) } != 0 {
        let e = std::io::Error::last_os_error();
        if e.raw_os_error() == Some(libc::EWOULDBLOCK) {
            crate::refuse!(
                Code::Locked,
                "{what}: another analyze is writing the report folder {} (it holds {}); nothing was written by this \
                    one: run it again once that one has finished",
                out_dir.display(),
                path.display()
            );
        }
        return Err(e).with_context(|| format!("locking {}", path.display()));
    }
    Ok(CampaignLock { _files: vec![f] })
}

/// An exclusive lock, waited for (saying so) when another process holds it.
fn flock_wait(path: &Path, what: &str) -> Result<std::fs::File> {
    use std::os::fd::AsRawFd;
    let f = open_lock(path)?;
    // SAFETY: flock on a file descriptor we own; no memory is passed.
    if unsafe { libc::flock(f.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) } == 0 {
        return Ok(f);
    }
    eprintln!("{what}: another cell of this campaign runs on this host; waiting for it ({})", path.display());
    loop {
        // SAFETY: as above.
        if unsafe { libc::flock(f.as_raw_fd(), libc::LOCK_EX) } == 0 {
            return Ok(f);
        }
        let e = std::io::Error::last_os_error();
        if e.kind() != std::io::ErrorKind::Interrupted {
            return Err(e).with_context(|| format!("locking {}", path.display()));
        }
    }
}
