//! Parsing and printing of byte sizes and durations. Values travel in integer
//! base units (`_bytes`, `_ns`); conversion happens only at the edges.
use anyhow::{bail, Context, Result};

/// Parse `64KiB`, `1MiB`, `4096`, `2k` (k/K = KiB for message sizes) into bytes.
pub(crate) fn parse_bytes(s: &str) -> Result<u64> {
    let t = s.trim();
    let split = t.find(|c: char| !c.is_ascii_digit()).unwrap_or(t.len());
    let (num, unit) = t.split_at(split);
    if num.is_empty() {
        bail!("size {s:?}: expected a number followed by an optional unit (B, KiB, MiB, GiB)");
    }
    let n: u64 = num.parse().with_context(|| format!("size {s:?}: bad number"))?;
    let mul: u64 = match unit.trim().to_ascii_lowercase().as_str() {
        "" | "b" => 1,
        "k" | "kib" | "kb" => 1 << 10,
        "m" | "mib" | "mb" => 1 << 20,
        "g" | "gib" | "gb" => 1 << 30,
        other => bail!("size {s:?}: unknown unit {other:?} (use B, KiB, MiB or GiB)"),
    };
    n.checked_mul(mul).with_context(|| format!("size {s:?} overflows"))
}

/// Parse a comma-separated list of sizes.
pub(crate) fn parse_size_list(s: &str) -> Result<Vec<u64>> {
    let v: Vec<u64> = s.split(',').filter(|x| !x.trim().is_empty()).map(parse_bytes).collect::<Result<_>>()?;
    if v.is_empty() {
        bail!("--sizes: at least one size is required");
    }
    Ok(v)
}

/// Human form of a byte count, exact when it is a whole number of KiB/MiB.
pub(crate) fn fmt_bytes(b: u64) -> String {
    if b >= 1 << 30 && b % (1 << 30) == 0 {
        format!("{}GiB", b >> 30)
    } else if b >= 1 << 20 && b % (1 << 20) == 0 {
        format!("{}MiB", b >> 20)
    } else if b >= 1 << 10 && b % (1 << 10) == 0 {
        format!("{}KiB", b >> 10)
    } else {
        format!("{b}B")
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    #[test]
    fn sizes_round_trip() {
        assert_eq!(parse_bytes("64KiB").unwrap(), 65536);
        assert_eq!(parse_bytes("1MiB").unwrap(), 1 << 20);
        assert_eq!(parse_bytes("4096").unwrap(), 4096);
        assert!(parse_bytes("KiB").is_err());
        assert!(parse_bytes("3furlongs").is_err());
        assert_eq!(parse_size_list("64KiB,128KiB,256KiB").unwrap(), vec![65536, 131072, 262144]);
        assert_eq!(fmt_bytes(131072), "128KiB");
        assert_eq!(fmt_bytes(100), "100B");
    }
}
