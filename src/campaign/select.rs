//! `select`: consumes the manifest and the attempt log and produces the `Selection` that
//! `selection.json` holds: one successful attempt per expected cell under the policy, its digests
//! bound, a clean attempt preferred to one that overlapped another on its host. Cells without a
//! success come back as missing, not refused: `verify` says why. Hold the campaign lock while selecting.
use super::attempts::{accepted_manifests, load_manifest, overlapping, read_attempts, AttemptRecord, AttemptStatus};
use crate::evidence::run::ShardRef;
use anyhow::Result;
use serde::{Deserialize, Serialize};
use std::path::Path;

/// Selection policy.
#[derive(schemars::JsonSchema, Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
#[serde(rename_all = "kebab-case")]
pub enum SelectPolicy {
    /// The first successful attempt of each cell.
    FirstSuccess,
    /// The last successful attempt of each cell.
    LastSuccess,
}

/// One selected attempt.
#[derive(schemars::JsonSchema, Serialize, Deserialize, Clone, Debug, PartialEq)]
pub struct Selected {
    /// Cell.
    pub cell_id: String,
    /// Attempt.
    pub attempt_id: String,
    /// Run directory (relative).
    pub run_dir: String,
    /// run.json digest.
    pub run_json_sha256: String,
    /// Shard digests.
    pub shards: Vec<ShardRef>,
}

/// The selection file.
#[derive(schemars::JsonSchema, Serialize, Deserialize, Clone, Debug, PartialEq)]
pub struct Selection {
    /// Format version.
    pub format_version: u32,
    /// Manifest it selects for.
    pub manifest_sha256: String,
    /// Policy used.
    pub policy: SelectPolicy,
    /// Entries.
    pub entries: Vec<Selected>,
}

/// Select one attempt per cell; cells without a success are left out (verify will say so).
pub fn select(dir: &Path, policy: SelectPolicy) -> Result<(Selection, Vec<String>)> {
    let (m, sha) = load_manifest(dir)?;
    let attempts = read_attempts(dir)?;
    let accepted = accepted_manifests(dir, &m, &sha)?;
    let mut entries = Vec::new();
    let mut missing = Vec::new();
    for c in &m.schedule {
        // an attempt made under another manifest is never this campaign's evidence
        let ok: Vec<&AttemptRecord> = attempts
            .iter()
            .filter(|a| {
                a.cell_id == c.cell_id && a.status == AttemptStatus::Succeeded && accepted.contains(&a.manifest_sha256)
            })
            .collect();
        // one that overlapped another attempt on its host only when there is no other (verify then says why it is
        // refused)
        let clean: Vec<&AttemptRecord> = ok.iter().copied().filter(|a| overlapping(a, &attempts).is_none()).collect();
        let from = if clean.is_empty() { &ok } else { &clean };
        let pick = match policy {
            SelectPolicy::FirstSuccess => from.first().copied(),
            SelectPolicy::LastSuccess => from.last().copied(),
        };
        match pick {
            Some(a) => entries.push(Selected {
                cell_id: c.cell_id.clone(),
                attempt_id: a.attempt_id.clone(),
                run_dir: a.run_dir.clone(),
                run_json_sha256: a.run_json_sha256.clone().unwrap_or_default(),
                shards: a.shards.clone(),
            }),
            None => missing.push(c.cell_id.clone()),
        }
    }
    Ok((Selection { format_version: 1, manifest_sha256: sha, policy, entries }, missing))
}
