//! JSON Schemas of every on-disk and printed format, generated from the types
//! (schemars, which honours the serde attributes). `results-schema/` holds
//! the committed copies; a test fails when they drift from the code, and
//! `commcanary schema NAME` prints one.
use crate::analysis::ranking::Comparison;
use crate::analysis::summary::Summary;
use crate::campaign::chain::{AttemptRecord, Selection};
use crate::campaign::spec::Manifest;
use crate::campaign::truth::TruthRecord;
use crate::canary::artifact::Canary;
use crate::canary::redact::AuditLog;
use crate::canary::verify::VerifyReport;
use crate::evidence::commtrace::exec::WorkloadReport;
use crate::evidence::commtrace::{CommTrace, ReplayFile, ReplayIndex};
use crate::evidence::join::{JoinSummary, JoinedCollective};
use crate::evidence::run::RunRecord;
use crate::evidence::shard::Shard;
use crate::rank::sweep::SweepReport;
use crate::validate::health::HealthReport;
use crate::validate::reference::{RoundsFile, ValidateDescriptor, ValidateManifest};
use crate::validate::topology::Topology;
use anyhow::{bail, Result};
use schemars::schema_for;

/// Names of the schemas and the files they live in.
pub const SCHEMAS: [(&str, &str); 26] = [
    ("shard", "shard.schema.json"),
    ("run", "run.schema.json"),
    ("joined-collective", "joined-collective.schema.json"),
    ("join-summary", "join-summary.schema.json"),
    ("summary", "summary.schema.json"),
    ("campaign-manifest", "campaign-manifest.schema.json"),
    ("campaign-attempt", "campaign-attempt.schema.json"),
    ("campaign-selection", "campaign-selection.schema.json"),
    ("campaign-report", "campaign-report.schema.json"),
    ("campaign-archive-descriptor", "campaign-archive-descriptor.schema.json"),
    ("comparison", "comparison.schema.json"),
    ("comm-trace", "comm-trace.schema.json"),
    ("replay-trace", "replay-trace.schema.json"),
    ("replay-workload", "replay-workload.schema.json"),
    ("replay-trace-index", "replay-trace-index.schema.json"),
    ("validate-report", "validate-report.schema.json"),
    ("validate-manifest", "validate-manifest.schema.json"),
    ("validate-rounds", "validate-rounds.schema.json"),
    ("validate-health", "validate-health.schema.json"),
    ("validate-topology", "validate-topology.schema.json"),
    ("validate-descriptor", "validate-descriptor.schema.json"),
    ("canary", "canary.schema.json"),
    ("canary-verify", "canary-verify.schema.json"),
    ("canary-audit", "canary-audit.schema.json"),
    ("rank-sweep", "rank-sweep.schema.json"),
    ("truth-record", "truth-record.schema.json"),
];

/// Pretty JSON Schema by name.
pub fn schema_json(name: &str) -> Result<String> {
    let s = match name {
        // A shard is binary; its schema describes the decoded form `inspect` prints.
        "shard" => schema_for!(Shard),
        "run" => schema_for!(RunRecord),
        "joined-collective" => schema_for!(JoinedCollective),
        "join-summary" => schema_for!(JoinSummary),
        "summary" => schema_for!(Summary),
        "campaign-manifest" => schema_for!(Manifest),
        "campaign-attempt" => schema_for!(AttemptRecord),
        "campaign-selection" => schema_for!(Selection),
        "campaign-report" => schema_for!(crate::analysis::Report),
        "campaign-archive-descriptor" => schema_for!(crate::campaign::ArchiveDescriptor),
        "comparison" => schema_for!(Comparison),
        "comm-trace" => schema_for!(CommTrace),
        // replay-trace.rank-N.json: what each collective did on that rank, under a header
        "replay-trace" => schema_for!(ReplayFile),
        // replay-trace.json: rank 0's index of every rank's files and digests
        "replay-trace-index" => schema_for!(ReplayIndex),
        // replay-trace.rank-N.workload.json: the workload pace's pass as a whole
        "replay-workload" => schema_for!(WorkloadReport),
        "validate-report" => schema_for!(crate::validate::ValidationReport),
        "validate-manifest" => schema_for!(ValidateManifest),
        "validate-rounds" => schema_for!(RoundsFile),
        "validate-health" => schema_for!(HealthReport),
        "validate-topology" => schema_for!(Topology),
        "validate-descriptor" => schema_for!(ValidateDescriptor),
        "canary" => schema_for!(Canary),
        "canary-verify" => schema_for!(VerifyReport),
        "canary-audit" => schema_for!(AuditLog),
        // rank -J FILE: the isolated sweep's table
        "rank-sweep" => schema_for!(SweepReport),
        // runs/ATTEMPT/truth.json: one truth cell's job, its metric and digests
        "truth-record" => schema_for!(TruthRecord),
        other => {
            let names: Vec<&str> = SCHEMAS.iter().map(|s| s.0).collect();
            bail!("unknown schema {other:?} (known: {})", names.join(", "))
        }
    };
    Ok(serde_json::to_string_pretty(&s)? + "\n")
}
