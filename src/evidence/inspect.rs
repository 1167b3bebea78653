//! `inspect`: print any CommCanary file as JSON.
//!
//! Consumes a shard (verified: hash and format) or a JSON record; produces
//! pretty JSON on stdout. Refuses files that are neither.
use crate::core::limits;
use crate::core::refusal::{self, Code};
use crate::evidence::shard::Shard;
use anyhow::Result;
use std::path::Path;

/// Render `path` as pretty JSON.
pub fn inspect(path: &Path, header_only: bool) -> Result<String> {
    let bytes = limits::read_bounded(path, limits::MAX_SHARD_BYTES)?;
    if Shard::sniff(&bytes) {
        let shard = Shard::decode(&bytes, &path.display().to_string())?;
        let v = if header_only { serde_json::to_value(&shard.header)? } else { serde_json::to_value(&shard)? };
        return Ok(serde_json::to_string_pretty(&v)?);
    }
    let v: serde_json::Value = serde_json::from_slice(&bytes).map_err(|e| {
        refusal::refuse(
            Code::BadFormat,
            format!("{}: neither a CommCanary shard nor a JSON record: {e}", path.display()),
        )
    })?;
    Ok(serde_json::to_string_pretty(&v)?)
}
