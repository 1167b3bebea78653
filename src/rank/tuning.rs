//! NCCL tuner capture (`--nccl-tuning`, cuda backend): before MPI starts,
//! [`request_nccl_tuning_log`] points NCCL's debug log at `OUT/.nccl-debug/`;
//! after the phases, `collect_tuning` keeps this process's log beside the
//! shard and attaches its per-collective choices where counts and sizes
//! match, or records why none could be attached.
use crate::core::fsutil;
use crate::evidence::tuning::{self, TuningCapture};
use anyhow::{Context, Result};
use std::path::PathBuf;

/// Directory (under `--out`) where NCCL writes per-process debug logs before they are kept.
fn nccl_debug_dir(out: &std::path::Path) -> PathBuf {
    out.join(".nccl-debug")
}

/// Ask NCCL for its tuning log. Runs before MPI_Init, while this process is
/// still single-threaded, so changing the environment is safe.
pub(crate) fn request_nccl_tuning_log(out: &std::path::Path) -> Result<()> {
    let dir = nccl_debug_dir(out);
    std::fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
    let dir = std::fs::canonicalize(&dir)?;
    let subsys = match std::env::var("NCCL_DEBUG_SUBSYS") {
        Ok(s) if !s.is_empty() && !s.split(',').any(|x| x == "TUNING") => format!("{s},TUNING"),
        Ok(s) if !s.is_empty() => s,
        _ => "TUNING".into(),
    };
    // TRACE already includes INFO
    if !std::env::var("NCCL_DEBUG").is_ok_and(|v| v.eq_ignore_ascii_case("TRACE")) {
        std::env::set_var("NCCL_DEBUG", "INFO");
    }
    std::env::set_var("NCCL_DEBUG_SUBSYS", subsys);
    std::env::set_var("NCCL_DEBUG_FILE", dir.join("%h.%p.log"));
    Ok(())
}

/// After the phases: keep this process's NCCL log beside the shard and attach the choices.
pub(super) fn collect_tuning(
    out: &std::path::Path,
    run_dir: &std::path::Path,
    rank: u32,
    events: &[(u64, u64)],
) -> Result<TuningCapture> {
    let pid = std::process::id();
    let dir = nccl_debug_dir(out);
    let suffix = format!(".{pid}.log");
    let found = std::fs::read_dir(&dir)
        .with_context(|| format!("listing {}", dir.display()))?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .find(|p| p.file_name().is_some_and(|n| n.to_string_lossy().ends_with(&suffix)));
    let source = "NCCL_DEBUG_SUBSYS=TUNING log of this process".to_string();
    let Some(path) = found else {
        return Ok(TuningCapture {
            source,
            log_sha256: None,
            log_file: None,
            unrecognised_lines: 0,
            unavailable: Some(format!("NCCL wrote no debug file for pid {pid} in {}", dir.display())),
            choices: Vec::new(),
        });
    };
    let bytes = std::fs::read(&path).with_context(|| format!("reading {}", path.display()))?;
    let kept = format!("nccl-debug.rank-{rank:05}.log");
    fsutil::write_new_atomic(&run_dir.join(&kept), &bytes)?;
    let _ = std::fs::remove_file(&path);
    let (lines, unrecognised) = tuning::parse_log(&String::from_utf8_lossy(&bytes));
    let attached = if lines.is_empty() {
        Err("NCCL printed no per-collective tuning lines on this rank (it prints them on rank 0 only)".to_string())
    } else {
        tuning::attach(&lines, events)
    };
    let (choices, unavailable) = match attached {
        Ok(c) => (c, None),
        Err(why) => (Vec::new(), Some(why)),
    };
    Ok(TuningCapture {
        source,
        log_sha256: Some(fsutil::sha256_hex(&bytes)),
        log_file: Some(kept),
        unrecognised_lines: unrecognised as u64,
        unavailable,
        choices,
    })
}
