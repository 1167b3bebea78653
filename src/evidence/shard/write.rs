//! Writing shards: consumes a [`Shard`] and produces its bytes (magic,
//! version, JSON header, bincode body, SHA-256 trailer) or its file
//! `rank-NNNNN.shard`, written once: an existing file is refused, never
//! replaced. Use [`Shard::write_new`]; [`Shard::encode`] gives the bytes alone.
use super::{bincode_cfg, shard_file_name, Shard, MAGIC, TRAILER};
use crate::core::fsutil;
use anyhow::{Context, Result};
use sha2::{Digest, Sha256};
use std::path::Path;

/// Where [`Shard::write_new`] put a shard: its file name, size and SHA-256
/// (the digest `run.json` records).
pub struct WrittenShard {
    /// File name inside the run directory.
    pub file: String,
    /// File size.
    pub size_bytes: u64,
    /// SHA-256 (hex) of the whole file.
    pub sha256: String,
}

impl Shard {
    /// The shard writer: encode and write `dir/rank-NNNNN.shard` atomically,
    /// never replacing a file (the `rank` command and `synth-shards` both write through it).
    pub fn write_new(&self, dir: &Path) -> Result<WrittenShard> {
        let bytes = self.encode()?;
        let file = shard_file_name(self.header.rank);
        fsutil::write_new_atomic(&dir.join(&file), &bytes)?;
        Ok(WrittenShard { file, size_bytes: bytes.len() as u64, sha256: fsutil::sha256_hex(&bytes) })
    }

    /// Encode to bytes (header, body, trailer).
    pub fn encode(&self) -> Result<Vec<u8>> {
        let body = bincode::serde::encode_to_vec(&self.body, bincode_cfg()).context("encoding shard body")?;
        self.encode_with_body(&body)
    }

    pub(super) fn encode_with_body(&self, body: &[u8]) -> Result<Vec<u8>> {
        let header = serde_json::to_vec(&self.header).context("encoding shard header")?;
        let mut out = Vec::with_capacity(header.len() + body.len() + 80);
        out.extend_from_slice(MAGIC);
        out.extend_from_slice(&self.header.format_version.to_le_bytes());
        out.extend_from_slice(&(header.len() as u64).to_le_bytes());
        out.extend_from_slice(&header);
        out.extend_from_slice(&(body.len() as u64).to_le_bytes());
        out.extend_from_slice(body);
        let digest = Sha256::digest(&out);
        out.extend_from_slice(TRAILER);
        out.extend_from_slice(&digest);
        Ok(out)
    }
}
