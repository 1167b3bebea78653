//! The phase vocabulary: each way of executing the collectives ([`Phase`]),
//! its name, whether it needs a source trace, runs as a graph or has tokens,
//! and [`parse_phases`] for `--phases`. Refuses unknown and repeated phases
//! and an empty list.
use anyhow::{bail, Result};
use clap::ValueEnum;
use serde::{Deserialize, Serialize};
use std::fmt;
use std::str::FromStr;
use std::sync::LazyLock;

/// A phase: one way of executing the collectives (docs/ARCHITECTURE.md §4).
#[derive(
    schemars::JsonSchema, Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, ValueEnum,
)]
#[serde(rename_all = "kebab-case")]
#[value(rename_all = "kebab-case")]
pub enum Phase {
    /// All-reduce alone per size: the microbenchmark proxy.
    Isolated,
    /// GEMM then all-reduce; the next GEMM waits on the collective (PyTorch's synchronous semantics).
    Blocking,
    /// Issue the all-reduce, run the next layer's GEMM, then wait.
    Async,
    /// Collectives only, paced by the source trace's gaps.
    Replay,
    /// Each gap filled with round(gap/quantum) GEMMs run before the collective.
    Fill,
    /// Async issue; the gap's GEMMs placed between issue and wait (a stress proxy).
    Overlap,
    /// Ablation: fill's GEMMs, then async issue with an immediate wait.
    AsyncWaitImmediate,
    /// Ablation: async issue, host-only busy work for the gap, then wait.
    HostDelay,
    /// Ablation: fill with a memory-bound kernel instead of a GEMM.
    MemboundFill,
}

impl Phase {
    /// Every phase, in the canonical order (the declaration's).
    pub fn all() -> &'static [Phase] {
        Phase::value_variants()
    }

    /// Name as used on the command line and in files.
    pub fn name(self) -> &'static str {
        static NAMES: LazyLock<Vec<String>> = LazyLock::new(|| {
            Phase::all()
                .iter()
                .map(|p| p.to_possible_value().expect("no phase is skipped").get_name().to_owned())
                .collect()
        });
        &NAMES[self as usize]
    }

    /// Whether the phase consumes a source trace of gaps.
    pub fn needs_trace(self) -> bool {
        matches!(
            self,
            Phase::Replay
                | Phase::Fill
                | Phase::Overlap
                | Phase::AsyncWaitImmediate
                | Phase::HostDelay
                | Phase::MemboundFill
        )
    }

    /// Whether the phase runs as one captured token per launch under `--graph`.
    pub fn runs_in_a_graph(self) -> bool {
        matches!(
            self,
            Phase::Isolated | Phase::Blocking | Phase::Async | Phase::Fill | Phase::Overlap | Phase::MemboundFill
        )
    }

    /// Whether the phase has tokens (per-token latency is meaningful).
    pub fn has_tokens(self) -> bool {
        self != Phase::Isolated
    }
}

impl fmt::Display for Phase {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for Phase {
    type Err = anyhow::Error;
    fn from_str(s: &str) -> Result<Self> {
        Phase::all().iter().copied().find(|p| p.name() == s.trim()).ok_or_else(|| {
            let names: Vec<_> = Phase::all().iter().map(|p| p.name()).collect();
            anyhow::anyhow!("unknown phase {s:?} (known: {})", names.join(", "))
        })
    }
}

/// Parse a comma-separated phase list; `all` expands to the six main phases.
pub(crate) fn parse_phases(s: &str) -> Result<Vec<Phase>> {
    let mut out: Vec<Phase> = Vec::new();
    for part in s.split(',').map(str::trim).filter(|p| !p.is_empty()) {
        let add: Vec<Phase> = if part == "all" { Phase::all()[..6].to_vec() } else { vec![part.parse()?] };
        for p in add {
            if out.contains(&p) {
                bail!("--phases: {p} is listed twice");
            }
            out.push(p);
        }
    }
    if out.is_empty() {
        bail!("--phases: at least one phase is required");
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn phases_parse() {
        assert_eq!(parse_phases("blocking,async").unwrap(), vec![Phase::Blocking, Phase::Async]);
        assert_eq!(parse_phases("all").unwrap().len(), 6);
        assert!(parse_phases("blocking,blocking").is_err());
        let e = parse_phases("warp").unwrap_err().to_string();
        assert!(e.contains("unknown phase") && e.contains("membound-fill"), "{e}");
    }

    #[test]
    fn value_enum_serde_and_name_agree() {
        let names: Vec<&str> = Phase::all().iter().map(|p| p.name()).collect();
        assert_eq!(
            names,
            [
                "isolated",
                "blocking",
                "async",
                "replay",
                "fill",
                "overlap",
                "async-wait-immediate",
                "host-delay",
                "membound-fill"
            ]
        );
        for &p in Phase::all() {
            assert_eq!(p.to_possible_value().expect("listed").get_name(), p.name());
            assert_eq!(serde_json::to_value(p).unwrap(), serde_json::json!(p.name()));
            assert_eq!(serde_json::from_value::<Phase>(serde_json::json!(p.name())).unwrap(), p);
            assert_eq!(p.to_string().parse::<Phase>().unwrap(), p);
        }
    }
}
