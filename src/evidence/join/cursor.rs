//! Where the merge reads one rank's events, in key order. Each event has a
//! [`Key`] ([`key_of`]); a [`Cursor`] walks either decoded events through
//! their sorted index or the shard file itself, re-read one event at a time
//! through a 32 KiB buffer. The re-read file must be the one the first pass
//! verified, or it is refused (`refused[STALE]`): every byte it reads is
//! hashed again and the digest must be the verified one; its stamp is also
//! compared when opened and after its last byte (why the stamp alone proves
//! nothing: docs/METHODS.md, "Join internals"). Use [`Cursor::head`] for the
//! next event and [`Cursor::advance`] past it.
use crate::core::limits::FileStamp;
use crate::core::refusal::{refuse, Code};
use crate::evidence::shard::{decode_collective_event, CollectiveEvent, CollectiveKind, BLANK_EVENT};
use anyhow::{Context, Result};
#[cfg(target_arch = "x86_64")]
use core::arch::x86_64;
use std::path::Path;

/// An event's place in the join: (group, sequence number, (sender, receiver)
/// of a point-to-point pair).
pub(super) type Key = (u32, u64, Option<(u32, u32)>);

/// The key of an event of `rank` (whose peer, for a send or receive, [`super::matching::index_rank`] checked).
pub(super) fn key_of(rank: u32, e: &CollectiveEvent) -> Key {
    let pair = match (e.kind, e.peer) {
        (CollectiveKind::Send, Some(p)) => Some((rank, p)),
        (CollectiveKind::Recv, Some(p)) => Some((p, rank)),
        _ => None,
    };
    (e.group, e.seq, pair)
}

/// Where the merge reads one rank's events, in key order.
pub(super) enum Cursor<'a> {
    /// Decoded events and their sorted index.
    Indexed { events: std::borrow::Cow<'a, [CollectiveEvent]>, index: Vec<(Key, usize)>, pos: usize },
    /// The shard file, read again one event at a time: its events were
    /// recorded in key order.
    Stream(Box<StreamReader>),
}

impl Cursor<'_> {
    pub(super) fn head(&self) -> Option<(Key, &CollectiveEvent)> {
        match self {
            Cursor::Indexed { events, index, pos } => index.get(*pos).map(|&(k, i)| (k, &events[i])),
            Cursor::Stream(s) => s.has_head.then_some((s.key, &s.head)),
        }
    }
    /// A hint that [`Self::head`] is needed soon: the reader's state, its
    /// decoded event included, is brought into the cache.
    pub(super) fn prefetch_head(&self) {
        if let Cursor::Stream(s) = self {
            prefetch(std::ptr::from_ref::<StreamReader>(s).cast::<u8>(), std::mem::size_of::<StreamReader>());
        }
    }

    /// A hint that [`Self::advance`] comes soon: the bytes it decodes (two
    /// cache lines, an event's usual size) are brought into the cache.
    pub(super) fn prefetch_next(&self) {
        if let Cursor::Stream(s) = self {
            if let Some(next) = s.buf.get(s.lo..s.hi) {
                prefetch(next.as_ptr(), next.len().min(128));
            }
        }
    }

    pub(super) fn advance(&mut self) -> Result<()> {
        match self {
            Cursor::Indexed { pos, .. } => {
                *pos += 1;
                Ok(())
            }
            Cursor::Stream(s) => s.advance(),
        }
    }
}

/// What the first pass verified of a shard file.
#[derive(Clone, Debug)]
pub(super) struct Verified {
    /// Its SHA-256 (the one run.json recorded).
    pub digest: String,
    /// Its stamp when it was read.
    pub stamp: FileStamp,
    /// Whether that stamp proves nothing (it is then not compared).
    pub racy: bool,
}

/// A verified shard read again from its first byte to its last, decoding
/// its collective events one at a time into a small buffer. At its end the
/// file must still be the one the first pass verified (the module doc), or
/// it changed while it was being joined (`refused[STALE]`).
pub(super) struct StreamReader {
    name: String,
    rank: u32,
    version: u32,
    file: std::fs::File,
    buf: Vec<u8>,
    lo: usize,
    hi: usize,
    eof: bool,
    /// Every byte read, hashed (until the end is checked).
    hasher: Option<sha2::Sha256>,
    remaining: u64,
    verified: Verified,
    /// Whether `key` and `head` hold the next event (decoded in place, never moved).
    has_head: bool,
    key: Key,
    head: CollectiveEvent,
}

/// Buffer of each streamed shard.
const STREAM_BUF: usize = 32 << 10;

impl StreamReader {
    pub(super) fn open(
        path: &Path,
        rank: u32,
        version: u32,
        events_at: usize,
        events: u64,
        verified: Verified,
    ) -> Result<Self> {
        let file = std::fs::File::open(path).with_context(|| format!("reopening {}", path.display()))?;
        // whatever is decoded here is hashed: only the verified bytes can be joined
        let hasher = Some(sha2::Sha256::default());
        let mut r = StreamReader {
            name: path.display().to_string(),
            rank,
            version,
            file,
            buf: vec![0; STREAM_BUF],
            lo: 0,
            hi: 0,
            eof: false,
            hasher,
            remaining: events,
            verified,
            has_head: false,
            key: (0, 0, None),
            head: BLANK_EVENT,
        };
        r.check_stamp()?;
        let mut skip = events_at;
        while skip > 0 {
            if r.lo == r.hi && !r.fill()? {
                return Err(r.changed());
            }
            let n = skip.min(r.hi - r.lo);
            r.lo += n;
            skip -= n;
        }
        r.advance()?;
        Ok(r)
    }

    /// Read more of the file (hashing it); false at its end.
    fn fill(&mut self) -> Result<bool> {
        use sha2::Digest;
        use std::io::Read;
        if self.eof {
            return Ok(false);
        }
        if self.lo > 0 {
            self.buf.copy_within(self.lo..self.hi, 0);
            self.hi -= self.lo;
            self.lo = 0;
        }
        if self.hi == self.buf.len() {
            self.buf.resize(self.buf.len() * 2, 0);
        }
        let n = self.file.read(&mut self.buf[self.hi..]).with_context(|| format!("reading {}", self.name))?;
        if n == 0 {
            self.eof = true;
            return Ok(false);
        }
        if let Some(h) = self.hasher.as_mut() {
            h.update(&self.buf[self.hi..self.hi + n]);
        }
        self.hi += n;
        Ok(true)
    }

    /// Refuse the file unless its stamp is the verified one (a racy stamp
    /// is left to the digest).
    fn check_stamp(&self) -> Result<()> {
        if self.verified.racy {
            return Ok(());
        }
        let now = FileStamp::of(&self.file).with_context(|| format!("reading {}", self.name))?;
        if now != self.verified.stamp {
            return Err(refuse(
                Code::Stale,
                format!(
                    "{}: rank {} shard changed while join read it (its inode, size or times are not those it had \
                    when verified)",
                    self.name, self.rank
                ),
            ));
        }
        Ok(())
    }

    fn changed(&self) -> anyhow::Error {
        refuse(
            Code::Stale,
            format!(
                "{}: rank {} shard changed while join read it (it no longer reads as it verified)",
                self.name, self.rank
            ),
        )
    }

    fn advance(&mut self) -> Result<()> {
        use sha2::Digest;
        if self.remaining == 0 {
            self.has_head = false;
            // the rest of the file, hashed, then the digest checked
            self.lo = self.hi;
            while self.fill()? {
                self.lo = self.hi;
            }
            let h = self.hasher.take().context("internal: the shard was checked twice")?;
            if hex::encode(h.finalize()) != self.verified.digest {
                return Err(self.changed());
            }
            self.check_stamp()?;
            self.buf = Vec::new();
            return Ok(());
        }
        loop {
            self.has_head = false;
            match decode_collective_event(self.version, &self.buf[self.lo..self.hi], &mut self.head) {
                Ok(used) => {
                    self.lo += used;
                    self.remaining -= 1;
                    self.key = key_of(self.rank, &self.head);
                    self.has_head = true;
                    return Ok(());
                }
                Err(bincode::error::DecodeError::UnexpectedEnd { .. }) if !self.eof => {
                    if !self.fill()? {
                        return Err(self.changed());
                    }
                }
                Err(_) => return Err(self.changed()),
            }
        }
    }
}

/// Ask the CPU to bring `len` bytes at `p` into its cache (one hint per
/// 64-byte line; a no-op on other architectures than x86-64).
#[inline(always)]
fn prefetch(p: *const u8, len: usize) {
    #[cfg(target_arch = "x86_64")]
    for at in (0..len).step_by(64) {
        // SAFETY: PREFETCHT0 is a hint: it never faults, writes nothing and
        // has no architectural effect, whatever the address.
        unsafe { x86_64::_mm_prefetch::<{ x86_64::_MM_HINT_T0 }>(p.wrapping_add(at).cast::<i8>()) };
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = (p, len);
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::fsutil;
    use crate::core::limits::{read_bounded_stamped, wall_now_ns, FileStamp, RACY_WINDOW_NS};
    use std::os::fd::AsRawFd;

    /// A "shard" of `bytes` with no events: the reader skips nothing, reads to
    /// the end and checks the file.
    fn reread(path: &Path, verified: Verified) -> Result<()> {
        StreamReader::open(path, 0, 7, 0, 0, verified).map(|_| ())
    }

    fn stale(r: Result<()>) -> String {
        let e = format!("{:#}", r.expect_err("the changed file must be refused"));
        assert!(e.contains("STALE") && e.contains("changed while join read it"), "{e}");
        e
    }

    #[test]
    fn a_fresh_file_is_racy_and_its_bytes_are_hashed_again() {
        let d = tempfile::tempdir().unwrap();
        let p = d.path().join("rank-00000.shard");
        std::fs::write(&p, b"the verified bytes").unwrap();
        let (bytes, stamp, racy) = read_bounded_stamped(&p, 1 << 20).unwrap();
        let v = Verified { digest: fsutil::sha256_hex(&bytes), stamp, racy };
        assert!(v.racy, "a file written just now proves nothing by its stamp");
        reread(&p, v.clone()).unwrap();
        // same length, other bytes, within the racy window: the digest catches it
        std::fs::write(&p, b"the modified bytes").unwrap();
        stale(reread(&p, v));
    }

    #[test]
    fn an_old_file_is_checked_by_its_stamp() {
        let d = tempfile::tempdir().unwrap();
        let p = d.path().join("rank-00000.shard");
        std::fs::write(&p, b"the verified bytes").unwrap();
        // as if it had been written long ago: a stamp outside the racy window
        let f = std::fs::File::open(&p).unwrap();
        let stamp = FileStamp::of(&f).unwrap();
        assert!(!stamp.racy(wall_now_ns() + 2 * RACY_WINDOW_NS));
        let v = Verified { digest: fsutil::sha256_hex(b"the verified bytes"), stamp, racy: false };
        reread(&p, v.clone()).unwrap();
        // the stamp alone proves nothing: another digest with the same stamp is refused
        stale(reread(&p, Verified { digest: fsutil::sha256_hex(b"other bytes"), ..v.clone() }));
        // rewritten in place after a clock tick: another status-change time
        std::thread::sleep(std::time::Duration::from_millis(50));
        std::fs::write(&p, b"the modified bytes").unwrap();
        stale(reread(&p, v.clone()));
        // replaced by another file (atomic rename): another inode
        std::fs::write(&p, b"the verified bytes").unwrap();
        let v = Verified { stamp: FileStamp::of(&std::fs::File::open(&p).unwrap()).unwrap(), ..v };
        let q = d.path().join("other");
        std::fs::write(&q, b"the verified bytes").unwrap();
        std::fs::rename(&q, &p).unwrap();
        stale(reread(&p, v));
    }

    /// Bytes changed through a shared mapping whose page is already dirty
    /// change no time: the stamp holds, and only the re-hash refuses them.
    /// Variants: the changed byte at the start, middle and end of a page, and
    /// on the second page of the file.
    #[test]
    fn bytes_changed_through_a_dirty_shared_mapping_are_refused_though_the_stamp_holds() {
        let page = 4096usize;
        for at in [0usize, 1000, page - 1, page + 17] {
            let d = tempfile::tempdir().unwrap();
            let p = d.path().join("rank-00000.shard");
            let bytes: Vec<u8> = (0..2 * page).map(|i| (i * 7 % 251) as u8).collect();
            std::fs::write(&p, &bytes).unwrap();
            let f = std::fs::OpenOptions::new().read(true).write(true).open(&p).unwrap();
            // SAFETY: a fresh shared read-write mapping of the whole file
            // (2 pages, its length), unmapped below before the file is dropped.
            let m = unsafe {
                libc::mmap(
                    std::ptr::null_mut(),
                    2 * page,
                    libc::PROT_READ | libc::PROT_WRITE,
                    libc::MAP_SHARED,
                    AsRawFd::as_raw_fd(&f),
                    0,
                )
            };
            assert_ne!(m, libc::MAP_FAILED);
            let m = m.cast::<u8>();
            // SAFETY: `at` and `at - at % page` lie within the 2-page mapping.
            unsafe { *m.add(at - at % page) = bytes[at - at % page] };
            // the page is now writable and dirty; the bytes are the verified ones
            let v = Verified { digest: fsutil::sha256_hex(&bytes), stamp: FileStamp::of(&f).unwrap(), racy: false };
            reread(&p, v.clone()).unwrap();
            // SAFETY: as above.
            unsafe { *m.add(at) ^= 1 };
            assert_eq!(
                FileStamp::of(&f).unwrap(),
                v.stamp,
                "premise: a store into a dirty shared page changes no time"
            );
            let e = stale(reread(&p, v));
            assert!(e.contains("rank-00000.shard"), "{e}");
            // SAFETY: the mapping made above, of that length, used no more.
            assert_eq!(unsafe { libc::munmap(m.cast(), 2 * page) }, 0);
        }
    }
}
