//! NCCL's per-collective tuner choices, from its `NCCL_DEBUG_SUBSYS=TUNING` log.
//!
//! Consumes the debug log NCCL writes for one rank. Produces one [`TunerChoice`] per
//! collective and attaches them to the rank's events by issue order, but only when the
//! counts match and every line's byte count equals its event's: otherwise the capture is
//! marked unavailable with the reason, never guessed. Lines this parser does not recognise
//! are counted, not silently dropped. The log: docs/METHODS.md, "NCCL tuner log".
use serde::{Deserialize, Serialize};

/// One tuner decision as NCCL logged it.
#[derive(schemars::JsonSchema, Serialize, Deserialize, Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct TunerChoice {
    /// Algorithm (`RING`, `TREE`, ...).
    pub algo: String,
    /// Protocol (`LL`, `LL128`, `SIMPLE`).
    pub proto: String,
    /// Channels used (`Hi - Lo + 1`).
    pub channels: u32,
}

/// A parsed log line.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct TuningLine {
    /// Collective name as NCCL prints it (`AllReduce`).
    pub collective: String,
    /// Bytes NCCL reports.
    pub bytes: u64,
    /// The decision.
    pub choice: TunerChoice,
}

/// Parse one line; `None` when it is not a per-collective tuning line.
pub(crate) fn parse_line(line: &str) -> Option<TuningLine> {
    let rest = &line[line.find(" NCCL INFO ")? + " NCCL INFO ".len()..];
    let (collective, rest) = rest.split_once(": ")?;
    if collective.is_empty() || !collective.chars().all(|c| c.is_ascii_alphanumeric()) {
        return None;
    }
    let (bytes, rest) = rest.split_once(" Bytes -> Algo ")?;
    let bytes: u64 = bytes.trim().parse().ok()?;
    let (algo, rest) = rest.split_once(" proto ")?;
    let (proto, rest) = rest.split_once(" channel{Lo..Hi}={")?;
    let (lo, rest) = rest.split_once("..")?;
    let hi = rest.split('}').next()?;
    let (lo, hi): (u32, u32) = (lo.parse().ok()?, hi.parse().ok()?);
    if hi < lo {
        return None;
    }
    Some(TuningLine {
        collective: collective.to_string(),
        bytes,
        choice: TunerChoice { algo: algo.trim().to_string(), proto: proto.trim().to_string(), channels: hi - lo + 1 },
    })
}

/// Parse a whole log: the tuning lines, and how many lines mentioned
/// `Bytes ->` but could not be parsed (a format this parser does not know).
pub(crate) fn parse_log(text: &str) -> (Vec<TuningLine>, usize) {
    let mut lines = Vec::new();
    let mut unrecognised = 0;
    for l in text.lines() {
        match parse_line(l) {
            Some(t) => lines.push(t),
            None if l.contains("Bytes ->") => unrecognised += 1,
            None => {}
        }
    }
    (lines, unrecognised)
}

/// Match parsed lines to a rank's collectives (`(seq, bytes)` in issue order).
pub(crate) fn attach(lines: &[TuningLine], events: &[(u64, u64)]) -> Result<Vec<(u64, TunerChoice)>, String> {
    if lines.len() != events.len() {
        return Err(format!("{} tuning lines for {} collectives: not attached", lines.len(), events.len()));
    }
    let mut out = Vec::with_capacity(lines.len());
    for (i, (l, &(seq, bytes))) in lines.iter().zip(events).enumerate() {
        if l.collective != "AllReduce" || l.bytes != bytes {
            return Err(format!(
                "line {i} says {} of {} bytes but collective seq {seq} is an all-reduce of {bytes} bytes: not attached",
                l.collective, l.bytes
            ));
        }
        out.push((seq, l.choice.clone()));
    }
    Ok(out)
}

/// What the shard records about tuner choices.
#[derive(schemars::JsonSchema, Serialize, Deserialize, Clone, Debug, PartialEq)]
pub struct TuningCapture {
    /// Where the choices come from.
    pub source: String,
    /// SHA-256 of the raw log (kept beside the shard).
    pub log_sha256: Option<String>,
    /// File name of the raw log in the run directory.
    pub log_file: Option<String>,
    /// Lines that looked like tuning lines but did not parse.
    pub unrecognised_lines: u64,
    /// Why nothing was attached, when nothing was.
    pub unavailable: Option<String>,
    /// Per collective (by per-group sequence number, group 0), the choice.
    pub choices: Vec<(u64, TunerChoice)>,
}

#[cfg(test)]
mod tests {
    use super::*;

    const SAMPLE: &str =
        "vm:1489:1489 [0] NCCL INFO AllReduce: 65536 Bytes -> Algo TREE proto LL channel{Lo..Hi}={0..15}\n\
vm:1489:1489 [0] NCCL INFO NCCL version 2.28.3+cuda13.0\n\
vm:1489:1489 [0] NCCL INFO AllReduce: 131072 Bytes -> Algo RING proto LL128 channel{Lo..Hi}={0..21}\n\
vm:1489:1489 [0] NCCL INFO AllReduce: 262144 Bytes -> algo? garbled\n";

    #[test]
    fn parses_the_28_format_and_counts_the_rest() {
        let (lines, bad) = parse_log(SAMPLE);
        assert_eq!(bad, 1);
        assert_eq!(lines.len(), 2);
        assert_eq!(lines[0].bytes, 65536);
        assert_eq!(lines[0].choice, TunerChoice { algo: "TREE".into(), proto: "LL".into(), channels: 16 });
        assert_eq!(lines[1].choice, TunerChoice { algo: "RING".into(), proto: "LL128".into(), channels: 22 });
        assert!(parse_line("NCCL INFO Init COMPLETE").is_none());
    }

    #[test]
    fn attaches_only_when_counts_and_sizes_agree() {
        let (lines, _) = parse_log(SAMPLE);
        let ok = attach(&lines, &[(0, 65536), (1, 131072)]).unwrap();
        assert_eq!(ok[1].0, 1);
        assert!(attach(&lines, &[(0, 65536)]).unwrap_err().contains("2 tuning lines for 1 collectives"));
        assert!(attach(&lines, &[(0, 65536), (1, 4)]).unwrap_err().contains("seq 1"));
    }
}
