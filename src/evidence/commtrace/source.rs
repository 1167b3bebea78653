//! Reading a source file within bounds: consumes a path (or bytes) and the
//! [`Limits`], and produces the JSON bytes, gunzipped where the file is gzip,
//! with the SHA-256 of the bytes stored; [`CountedSeq`] decodes a JSON list
//! counting its elements. Refuses a file, a decompressed stream or a list
//! past its limit, and a corrupt gzip stream. The decoders (`kineto`, `et`)
//! start here.
use crate::core::{fsutil, limits};
use anyhow::{bail, Context, Result};
use serde::Deserialize;
use std::io::Read;
use std::path::Path;

/// Bounds on what the decoders accept. A file past one is refused, naming the bound.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Limits {
    /// Bytes of a file as stored (compressed or not).
    pub max_file_bytes: u64,
    /// Bytes of JSON after decompression.
    pub max_json_bytes: u64,
    /// Events in one Kineto file.
    pub max_events: usize,
    /// Nodes in one execution-trace file. Counted in a first pass over the
    /// file before any node is kept; import then keeps 32 bytes per node
    /// (its id, parent, kind and where it lies in the file), so the memory of
    /// an import is the decompressed JSON plus 32 bytes per node, plus what
    /// it produces (collectives, and one compute operator per top-level node).
    pub max_nodes: usize,
    /// Collectives on one rank.
    pub max_collectives: usize,
    /// World size, and members of one group.
    pub max_ranks: u32,
    /// Process groups described in one file.
    pub max_groups: usize,
    /// Bytes of one name (kernels, operators, groups).
    pub max_name_bytes: usize,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            max_file_bytes: 2 << 30,
            max_json_bytes: 2 << 30,
            max_events: 50_000_000,
            max_nodes: 10_000_000,
            max_collectives: 10_000_000,
            max_ranks: 1 << 20,
            max_groups: 100_000,
            max_name_bytes: 64 << 10,
        }
    }
}

/// Read a file, decompressing gzip (detected by its magic bytes, RFC 1952),
/// within `limits`. Returns the JSON bytes and the SHA-256 of the stored bytes.
pub(crate) fn read_source(path: &Path, limits: &Limits) -> Result<(Vec<u8>, String)> {
    // a FIFO or device is refused, and the read stops at the limit whatever the size said
    let raw = limits::read_bounded(path, limits.max_file_bytes)?;
    let sha = fsutil::sha256_hex(&raw);
    // plain JSON is used as read, never copied: a file near the limit is in memory once
    if !raw.starts_with(&[0x1f, 0x8b]) {
        if raw.len() as u64 > limits.max_json_bytes {
            bail!("{}: {} bytes of JSON, over the {}-byte limit", path.display(), raw.len(), limits.max_json_bytes);
        }
        return Ok((raw, sha));
    }
    let json = decompress(&raw, limits).with_context(|| path.display().to_string())?;
    Ok((json, sha))
}

/// Gunzip `raw` when it starts with the gzip magic, else return it; refuses
/// output past `limits.max_json_bytes`.
pub fn decompress(raw: &[u8], limits: &Limits) -> Result<Vec<u8>> {
    if raw.len() as u64 > limits.max_json_bytes && !raw.starts_with(&[0x1f, 0x8b]) {
        bail!("{} bytes of JSON, over the {}-byte limit", raw.len(), limits.max_json_bytes);
    }
    if !raw.starts_with(&[0x1f, 0x8b]) {
        return Ok(raw.to_vec());
    }
    let mut out = Vec::new();
    flate2::read::MultiGzDecoder::new(raw)
        .take(limits.max_json_bytes.saturating_add(1))
        .read_to_end(&mut out)
        .context("gzip stream is corrupt or truncated")?;
    if out.len() as u64 > limits.max_json_bytes {
        bail!("decompresses past the {}-byte limit on trace JSON", limits.max_json_bytes);
    }
    Ok(out)
}

/// A JSON list decoded element by element with a count limit: each element is
/// counted as the parser reaches it and the list is refused at the first one
/// past `max`, before it is built, so a small compressed file of a hundred
/// million tiny events stops at the limit instead of building every event
/// first (serde's `DeserializeSeed`, serde.rs "Stateful deserialization").
/// Only the elements `keep` accepts are stored, with their position in the list.
pub(crate) struct CountedSeq<'a, T> {
    /// Elements allowed.
    pub max: usize,
    /// Set when the list had more than `max` elements.
    pub over: &'a std::cell::Cell<bool>,
    /// Which elements are kept.
    pub keep: fn(&T) -> bool,
}

impl<'de, T: Deserialize<'de>> serde::de::DeserializeSeed<'de> for CountedSeq<'_, T> {
    type Value = Vec<(usize, T)>;
    fn deserialize<D: serde::Deserializer<'de>>(self, d: D) -> std::result::Result<Self::Value, D::Error> {
        d.deserialize_seq(self)
    }
}

impl<'de, T: Deserialize<'de>> serde::de::Visitor<'de> for CountedSeq<'_, T> {
    type Value = Vec<(usize, T)>;
    fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        write!(f, "a list of at most {} elements", self.max)
    }
    fn visit_seq<A: serde::de::SeqAccess<'de>>(self, mut seq: A) -> std::result::Result<Self::Value, A::Error> {
        let mut out = Vec::new();
        let mut i = 0usize;
        loop {
            if i == self.max {
                // one more element (skipped, not built) is one too many
                if seq.next_element::<serde::de::IgnoredAny>()?.is_some() {
                    self.over.set(true);
                    return Err(serde::de::Error::custom(format!("more than {} elements, over the limit", self.max)));
                }
                return Ok(out);
            }
            match seq.next_element::<T>()? {
                Some(e) => {
                    if (self.keep)(&e) {
                        out.push((i, e));
                    }
                    i += 1;
                }
                None => return Ok(out),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn gzip_is_bounded() {
        use std::io::Write;
        let mut enc = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
        enc.write_all(&vec![b' '; 10_000]).unwrap();
        let gz = enc.finish().unwrap();
        let small = Limits { max_json_bytes: 9_999, ..Limits::default() };
        assert!(decompress(&gz, &small).unwrap_err().to_string().contains("limit"));
        assert_eq!(decompress(&gz, &Limits::default()).unwrap().len(), 10_000);
        assert!(decompress(&gz[..gz.len() / 2], &Limits::default()).is_err());
    }
}
