//! The oracle of `canary reduce`, read from a `canary verify` directory.
//! Consumes the directory and the source trace with its bytes; produces each
//! configuration's median latency per collective key over the source's
//! replays and the pairs the source's ranking decided. Refuses a directory
//! that verified another source (`DIGEST_MISMATCH`), a campaign that does not
//! verify (`INCOMPLETE`), a report without a ranking of the source
//! (`NO_DECISION`) and one whose ranking names unlisted configurations.
use super::VerifyReport;
use crate::analysis::ranking::Relation;
use crate::campaign::chain::{self, Selection};
use crate::campaign::spec::CampaignSpec;
use crate::canary::reduce::Oracle;
use crate::core::refusal::{refuse, Code};
use crate::core::workload::Phase;
use crate::core::{fsutil, limits, stats};
use crate::evidence::commtrace::CommTrace;
use crate::evidence::join;
use anyhow::{Context, Result};
use std::collections::BTreeMap;
use std::path::Path;

/// The oracle of `canary reduce`: the source replays of a `canary verify`
/// directory of this trace (refused when the directory verified another trace).
pub(crate) fn oracle_from(dir: &Path, t: &CommTrace, src_bytes: &[u8], src_path: &Path) -> Result<Oracle> {
    let rp = dir.join("canary-verify.json");
    let bytes =
        limits::read_bounded(&rp, limits::MAX_JSON_BYTES).with_context(|| format!("reading {}", rp.display()))?;
    let r: VerifyReport = serde_json::from_slice(&bytes)
        .map_err(|e| refuse(Code::BadFormat, format!("{}: not a canary-verify report: {e}", rp.display())))?;
    let sha = fsutil::sha256_hex(src_bytes);
    if r.source.file_sha256 != sha {
        crate::refuse!(
            Code::DigestMismatch,
            "{} verified a source with SHA-256 {}; {} has {sha}",
            dir.display(),
            r.source.file_sha256,
            src_path.display()
        );
    }
    let campaign_dir = dir.join("campaign");
    let (m, _) = chain::load_manifest(&campaign_dir)?;
    let v = chain::verify(&campaign_dir)?;
    if !v.complete {
        crate::refuse!(
            Code::Incomplete,
            "{}: the campaign does not verify ({} of {} cells)",
            campaign_dir.display(),
            v.cells_ok,
            v.cells_expected
        );
    }
    let sel: Selection =
        serde_json::from_slice(&limits::read_bounded(&campaign_dir.join("selection.json"), limits::MAX_JSON_BYTES)?)?;
    let mut lat: Vec<BTreeMap<String, Vec<f64>>> = vec![BTreeMap::new(); r.configs.len()];
    for e in &sel.entries {
        let cell = m.schedule.iter().find(|c| c.cell_id == e.cell_id).with_context(|| format!("cell {}", e.cell_id))?;
        let Some(cfg) = cell.label.strip_prefix("source.").filter(|_| !cell.truth) else { continue };
        let ci = r.configs.iter().position(|c| c == cfg).with_context(|| format!("configuration {cfg}"))?;
        let j = join::join_dir(&campaign_dir.join(&e.run_dir))?;
        j.refuse_synthetic("canary verify")?;
        for c in j.collectives.iter().filter(|c| c.phase == Phase::Replay && !c.warmup) {
            let kind = serde_json::to_value(c.kind)?.as_str().unwrap_or("?").to_string();
            let worst = c.ranks.iter().map(|r| r.wait_end_ns.saturating_sub(r.host_issue_ns)).max().unwrap_or(0);
            lat[ci].entry(format!("{kind} {}B", c.bytes)).or_default().push(worst as f64 / 1e3);
        }
    }
    let cost_us = lat
        .into_iter()
        .map(|m| m.into_iter().map(|(k, mut v)| (k, stats::median(&mut v).unwrap_or(0.0))).collect())
        .collect();
    let keys = t
        .ranks
        .first()
        .map(|r| r.collectives.iter().map(|c| format!("{} {}B", c.kind.name(), c.in_bytes())).collect())
        .unwrap_or_default();
    let spec = CampaignSpec::load(&campaign_dir.join("..").join("verify-spec.toml")).ok();
    let min_effect_pct = spec.map_or(2.0, |s| s.analysis.min_effect_pct);
    // the order to preserve is what the source's replays decided, pair by pair, and nothing else
    let ranking = r.candidates.first().and_then(|c| c.ranking.as_ref()).ok_or_else(|| {
        refuse(Code::NoDecision, format!("{}: the verify report has no ranking of the source's replays", rp.display()))
    })?;
    let idx = |n: &str| r.configs.iter().position(|c| c == n);
    let mut decided = Vec::new();
    for p in &ranking.comparison.relations {
        let (Some(a), Some(b)) = (idx(&p.a), idx(&p.b)) else {
            crate::refuse!(
                Code::BadFormat,
                "{}: its ranking names a configuration it does not list ({} vs {})",
                rp.display(),
                p.a,
                p.b
            );
        };
        match p.truth {
            Relation::AFaster => decided.push((a, b)),
            Relation::BFaster => decided.push((b, a)),
            Relation::NotDistinguished => {}
        }
    }
    Ok(Oracle { configs: r.configs.clone(), cost_us, keys, min_effect_pct, decided })
}
