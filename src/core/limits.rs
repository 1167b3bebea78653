//! Size and count limits of every decoder of untrusted input, in one place.
//!
//! Consumes a path (or bytes) and a limit; produces the bytes, or a
//! `refused[OVER_LIMIT]` error naming the file, its size and the limit, before
//! anything is allocated for the content. Each limit is far above what a
//! real run writes (a 4096-rank, million-token run stays below them) and far
//! below what would exhaust a node's memory. bincode's own limit
//! (`config::standard().with_limit::<N>()`, bincode 2 docs, "Configuration")
//! bounds every length prefix inside a shard body, so a crafted string or
//! vector length is refused instead of allocated.
use crate::core::refusal::{refuse, Code};
use anyhow::{Context, Result};
use std::io::Read;
use std::path::Path;

/// Default of `--collective-timeout-s` on every command that runs collectives
/// (`rank`, `validate`): one value, so a node validated and a run ranked give
/// up on a hung peer after the same time.
pub const DEFAULT_COLLECTIVE_TIMEOUT_S: f64 = 300.0;
/// A shard file (header + body + trailer).
pub const MAX_SHARD_BYTES: u64 = 512 << 20;
/// A shard's JSON header.
pub const MAX_SHARD_HEADER_BYTES: usize = 64 << 20;
/// A shard's bincode body.
pub const MAX_SHARD_BODY_BYTES: usize = 256 << 20;
/// bincode's decode limit for the largest bodies: the in-memory size it may
/// claim (every length prefix is checked before allocation). Smaller bodies get
/// smaller limits, 16 times their size class (1 MiB, 16 MiB), since a varint
/// decodes to at most 8 bytes per byte read.
pub const MAX_SHARD_BODY_DECODE_BYTES: usize = 4 << 30;
/// A JSON record: run record, manifest, selection, descriptor, interval file.
pub const MAX_JSON_BYTES: u64 = 256 << 20;
/// A campaign spec (TOML).
pub const MAX_SPEC_BYTES: u64 = 1 << 20;
/// The attempts log.
pub const MAX_ATTEMPTS_LOG_BYTES: u64 = 1 << 30;
/// A CSV table or service-time file.
pub const MAX_TEXT_TABLE_BYTES: u64 = 1 << 30;
/// Members of a campaign archive.
pub const MAX_ARCHIVE_MEMBERS: usize = 10_000_000;
/// Ranks in one run.
pub const MAX_WORLD_SIZE: u32 = 1 << 20;

/// Read `path` whole, refusing a file larger than `max_bytes` before reading it.
pub fn read_bounded(path: &Path, max_bytes: u64) -> Result<Vec<u8>> {
    let f = std::fs::File::open(path).with_context(|| format!("reading {}", path.display()))?;
    let len = f.metadata().with_context(|| format!("reading {}", path.display()))?.len();
    if len > max_bytes {
        return Err(refuse(Code::OverLimit, format!("{}: {len} bytes is over the limit of {max_bytes} bytes for this kind of file", path.display())));
    }
    let mut out = Vec::with_capacity(len as usize);
    // take() also bounds a file that grows while it is read
    f.take(max_bytes + 1).read_to_end(&mut out).with_context(|| format!("reading {}", path.display()))?;
    if out.len() as u64 > max_bytes {
        return Err(refuse(Code::OverLimit, format!("{}: grew past the limit of {max_bytes} bytes while being read", path.display())));
    }
    Ok(out)
}

/// [`read_bounded`] as UTF-8 text.
pub fn read_text_bounded(path: &Path, max_bytes: u64) -> Result<String> {
    let b = read_bounded(path, max_bytes)?;
    String::from_utf8(b).with_context(|| format!("{}: not UTF-8 text", path.display()))
}
