//! `canary redact` on disk: the redacted trace and its audit log, and, with
//! a campaign spec, the re-verification of the ranking decision on it.
//!
//! Consumes a trace file and the options. Produces OUT and
//! OUT.audit.json, both or neither, and the lines the user reads. The
//! re-verification compiles the redacted trace losslessly, binds it to the
//! original and runs `canary verify` in a private temporary directory that
//! is removed (it holds the unredacted source). Refuses an output or audit
//! path that exists, before anything is written.
use super::{compile, redact, verify};
use crate::core::fsutil;
use crate::core::refusal::Code;
use anyhow::{Context, Result};
use std::io::Write;
use std::path::PathBuf;

/// What `canary redact` was asked.
#[derive(Clone, Debug)]
pub struct RedactRun {
    /// The trace's path as given.
    pub trace: PathBuf,
    /// The redacted trace to write.
    pub out: PathBuf,
    /// Quantize times to this many ns (0: no).
    pub quantize_ns: u64,
    /// Replace kernel and operator names by their kind.
    pub drop_names: bool,
    /// Re-verify the ranking under this campaign spec.
    pub configs: Option<PathBuf>,
}

/// Read the trace, redact it, write it with its audit log, and print what was done.
pub fn run(o: &RedactRun, out: &mut dyn Write) -> Result<()> {
    let (t, bytes) = &compile::read_trace(&o.trace)?;
    let (r, transforms) =
        redact::redact(t, &redact::RedactOptions { quantize_ns: o.quantize_ns, drop_names: o.drop_names })?;
    let rbytes = serde_json::to_vec_pretty(&r)?;
    // every check before anything is written: a refused redaction leaves nothing
    let audit_path = PathBuf::from(format!("{}.audit.json", o.out.display()));
    for p in [&o.out, &audit_path] {
        if p.symlink_metadata().is_ok() {
            crate::refuse!(Code::AlreadyExists, "{} exists", p.display());
        }
    }
    let mut audit = redact::AuditLog {
        format_version: 1,
        input_sha256: fsutil::sha256_hex(bytes),
        output_sha256: fsutil::sha256_hex(&rbytes),
        transforms,
        decision_survives: None,
    };
    if let Some(spec) = &o.configs {
        // the redacted trace, compiled losslessly and bound to the original: does the ranking survive?
        // The verification holds the unredacted source (its inputs, the artifact's binding): it is
        // made in a private temporary directory, never beside the redacted output, and removed.
        let private = tempfile::Builder::new()
            .prefix("commcanary-redact-verify-")
            .tempdir()
            .context("a private directory for the re-verification")?;
        let opts = compile::CompileOptions {
            lossless: true,
            source_path: o.trace.display().to_string(),
            ..Default::default()
        };
        // group names are labels (a replay runs a group by its members) and a collective's identity
        // names its group: the redacted trace is verified under the source's group names (gN back to
        // the name in the same place), so that the static checks compare like with like
        let mut rv = r.clone();
        let back: std::collections::BTreeMap<String, String> =
            r.groups.iter().zip(&t.groups).map(|(a, b)| (a.name.clone(), b.name.clone())).collect();
        for g in &mut rv.groups {
            g.name = back.get(&g.name).cloned().unwrap_or_else(|| g.name.clone());
        }
        for rank in &mut rv.ranks {
            for col in &mut rank.collectives {
                col.group = back.get(&col.group).cloned().unwrap_or_else(|| col.group.clone());
            }
        }
        let rvbytes = serde_json::to_vec_pretty(&rv)?;
        let mut c = compile::compile(&rv, &rvbytes, &opts)?;
        c.source = compile::bind_source(t, bytes, &o.trace.display().to_string())?;
        c.label = "redacted (lossless)".into();
        let c = c.seal()?;
        let art = private.path().join("redacted.canary.json");
        c.write(&art)?;
        let vdir = private.path().join("verify");
        let o = verify::VerifyOptions {
            source: o.trace.clone(),
            canary: art,
            configs: spec.clone(),
            passes: 3,
            phases: "replay".into(),
            out: vdir.clone(),
            // redaction changes values by design (rebased, quantized times): the question is the ranking only
            replay_failed: true,
            ..Default::default()
        };
        let v = verify::verify(&o, &mut std::io::stderr())?;
        let rk = v.candidates[0].checks.iter().find(|c| c.name == "ranking");
        audit.decision_survives = Some(match rk {
            Some(c) => format!(
                "{}: {} (re-verified in a private temporary directory, removed: it held the unredacted source)",
                if c.passed { "yes" } else { "NO" },
                c.measured
            ),
            None => "not re-verified".into(),
        });
    }
    fsutil::write_new_atomic(&o.out, &rbytes)?;
    if let Err(e) = fsutil::write_json_new(&audit_path, &audit) {
        // the output without its audit log is not a redaction
        let _ = std::fs::remove_file(&o.out);
        return Err(e);
    }
    for tr in &audit.transforms {
        writeln!(out, "{}: {} ({} values)", tr.field, tr.action, tr.count)?;
    }
    writeln!(
        out,
        "ranking decision survives: {}",
        audit.decision_survives.as_deref().unwrap_or("not re-verified (pass --configs SPEC to re-verify)")
    )?;
    eprintln!("wrote {} and {}", o.out.display(), audit_path.display());
    Ok(())
}
