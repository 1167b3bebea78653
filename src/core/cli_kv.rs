//! `key=value,key=value` option values (`--inject-delay rank=3,every=10,us=2000`).
use anyhow::{bail, Context, Result};
use std::collections::BTreeMap;

/// Split `s` into key/value pairs, refusing keys outside `allowed` and repeats.
pub(crate) fn parse_kv(s: &str, allowed: &[&str]) -> Result<BTreeMap<String, String>> {
    let mut out = BTreeMap::new();
    for part in s.split(',').filter(|p| !p.trim().is_empty()) {
        let (k, v) = part.split_once('=').with_context(|| format!("{s:?}: expected key=value, got {part:?}"))?;
        let k = k.trim();
        if !allowed.contains(&k) {
            bail!("{s:?}: unknown key {k:?} (expected one of {})", allowed.join(", "));
        }
        if out.insert(k.to_string(), v.trim().to_string()).is_some() {
            bail!("{s:?}: key {k:?} given twice");
        }
    }
    Ok(out)
}

/// A required unsigned integer.
pub(crate) fn req_u32(kv: &BTreeMap<String, String>, key: &str, whole: &str) -> Result<u32> {
    kv.get(key)
        .with_context(|| format!("{whole:?}: missing {key}="))?
        .parse()
        .with_context(|| format!("{whole:?}: {key} must be a non-negative integer"))
}

/// An optional float.
pub(crate) fn opt_f64(kv: &BTreeMap<String, String>, key: &str, whole: &str) -> Result<Option<f64>> {
    kv.get(key).map(|v| v.parse::<f64>().with_context(|| format!("{whole:?}: {key} must be a number"))).transpose()
}
