//! Where the merge reads one rank's events, in key order. Each event has a
//! [`Key`] ([`key_of`]); a [`Cursor`] walks either decoded events through
//! their sorted index or the shard file itself, re-read one event at a time
//! through a 32 KiB buffer and hashed: a file that no longer hashes to the
//! digest the first pass verified is refused (`refused[STALE]`). Use
//! [`Cursor::head`] for the next event and [`Cursor::advance`] past it.
use crate::core::refusal::Code;
use crate::evidence::shard::{CollectiveEvent, CollectiveKind};
use anyhow::{Context, Result};
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

/// A verified shard read again from its first byte to its last, decoding
/// its collective events one at a time into a small buffer and hashing
/// every byte: at the end the digest must be the one the first pass
/// verified (and run.json recorded), or the shard changed while it was
/// being joined (`refused[STALE]`).
pub(super) struct StreamReader {
    name: String,
    rank: u32,
    version: u32,
    file: std::fs::File,
    buf: Vec<u8>,
    lo: usize,
    hi: usize,
    eof: bool,
    hasher: sha2::Sha256,
    remaining: u64,
    digest: String,
    /// Whether `key` and `head` hold the next event (decoded in place, never moved).
    has_head: bool,
    key: Key,
    head: CollectiveEvent,
}

/// Buffer of each streamed shard.
const STREAM_BUF: usize = 32 << 10;

impl StreamReader {
    pub(super) fn open(path: &Path, rank: u32, version: u32, events_at: usize, events: u64, digest: String) -> Result<Self> {
        let file = std::fs::File::open(path).with_context(|| format!("reopening {}", path.display()))?;
        let mut r = StreamReader {
            name: path.display().to_string(),
            rank,
            version,
            file,
            buf: vec![0; STREAM_BUF],
            lo: 0,
            hi: 0,
            eof: false,
            hasher: sha2::Sha256::default(),
            remaining: events,
            digest,
            has_head: false,
            key: (0, 0, None),
            head: crate::evidence::shard::BLANK_EVENT,
        };
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
        self.hasher.update(&self.buf[self.hi..self.hi + n]);
        self.hi += n;
        Ok(true)
    }

    fn changed(&self) -> anyhow::Error {
        crate::core::refusal::refuse(
            Code::Stale,
            format!("{}: rank {} shard changed while join read it (it no longer reads as it verified)", self.name, self.rank),
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
            let got = hex::encode(std::mem::take(&mut self.hasher).finalize());
            if got != self.digest {
                return Err(self.changed());
            }
            self.buf = Vec::new();
            return Ok(());
        }
        loop {
            self.has_head = false;
            match crate::evidence::shard::decode_collective_event(self.version, &self.buf[self.lo..self.hi], &mut self.head) {
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
/// 64-byte line): a software prefetch (Intel 64 and IA-32 Architectures
/// Optimization Reference Manual, "Software Prefetch"), a no-op on other
/// architectures. The merge walks a thousand ranks' readers in turn, each
/// visited once per operation: their state and next bytes are long evicted
/// by then, and the merge asks for them a few ranks ahead of its use.
#[inline(always)]
fn prefetch(p: *const u8, len: usize) {
    #[cfg(target_arch = "x86_64")]
    for at in (0..len).step_by(64) {
        // SAFETY: PREFETCHT0 is a hint: it never faults, writes nothing and
        // has no architectural effect, whatever the address.
        unsafe { core::arch::x86_64::_mm_prefetch::<{ core::arch::x86_64::_MM_HINT_T0 }>(p.wrapping_add(at).cast::<i8>()) };
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = (p, len);
}
