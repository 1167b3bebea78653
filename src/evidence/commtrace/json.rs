//! Helpers shared by the JSON decoders: each takes one `serde_json::Value`
//! of a source file and the field's name, and produces the typed value
//! (integers, ranks, bounded strings, the integer lists PyTorch writes inside
//! strings, µs as ns, split sizes). Refuses a value of the wrong type, sign
//! or size, naming the field. The `kineto` and `et` decoders use them.
use anyhow::{bail, Context, Result};
use serde_json::Value;

/// A non-negative integer field.
pub(crate) fn u64_of(v: &Value, what: &str) -> Result<u64> {
    if let Some(n) = v.as_u64() {
        return Ok(n);
    }
    match v.as_f64() {
        Some(f) if (0.0..1.8e19).contains(&f) && f.fract() == 0.0 => Ok(f as u64),
        _ => bail!("{what} is {v}, expected a non-negative integer"),
    }
}

/// A rank or rank count: a non-negative integer that fits 32 bits (named
/// in the error, never Rust's own conversion text).
pub(crate) fn u32_of(v: &Value, what: &str) -> Result<u32> {
    let n = u64_of(v, what)?;
    u32::try_from(n).ok().with_context(|| format!("{what} is {n}, over the largest rank number {}", u32::MAX))
}

/// An integer field, possibly negative.
pub(crate) fn i64_of(v: &Value, what: &str) -> Result<i64> {
    v.as_i64().with_context(|| format!("{what} is {v}, expected an integer"))
}

/// A string field, bounded.
pub(crate) fn str_of<'a>(v: &'a Value, what: &str, max: usize) -> Result<&'a str> {
    let s = v.as_str().with_context(|| format!("{what} is {v}, expected a string"))?;
    if s.len() > max {
        bail!("{what} is {} bytes long, over the {max}-byte limit", s.len());
    }
    Ok(s)
}

/// A JSON list of integers written as a string (`"[0, 1]"`), as PyTorch records ranks and splits.
pub(crate) fn int_list_in_string(v: &Value, what: &str, max_len: usize) -> Result<Vec<i64>> {
    let s = v.as_str().with_context(|| format!("{what} is {v}, expected a string holding a list"))?;
    let parsed: Vec<i64> =
        serde_json::from_str(s).with_context(|| format!("{what} is {s:?}, expected a list of integers"))?;
    if parsed.len() > max_len {
        bail!("{what} has {} entries, over the limit of {max_len}", parsed.len());
    }
    Ok(parsed)
}

/// Microseconds with a fraction (Chrome trace `ts`/`dur`) to whole ns.
pub(crate) fn us_to_ns(v: &Value, what: &str) -> Result<u64> {
    match v.as_f64() {
        Some(f) if (0.0..1.8e16).contains(&f) => Ok((f * 1000.0).round() as u64),
        _ => bail!("{what} is {v}, expected a non-negative time in µs"),
    }
}

/// Non-negative split sizes.
pub fn splits(list: Vec<i64>, what: &str) -> Result<Option<Vec<u64>>> {
    if list.is_empty() {
        return Ok(None);
    }
    list.into_iter()
        .map(|x| u64::try_from(x).with_context(|| format!("{what} holds {x}, expected element counts")))
        .collect::<Result<Vec<u64>>>()
        .map(Some)
}
