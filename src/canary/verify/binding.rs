//! The binding of each artifact to its source, checked before anything runs.
//! Consumes an artifact, its path, the source trace and the source's bytes;
//! produces nothing when the artifact was compiled from exactly these bytes.
//! Refuses another trace (`IDENTITY_MISMATCH`: other ranks or collective
//! counts) and the same shape with other bytes (`DIGEST_MISMATCH`, saying
//! whether the content or only its writing differs).
use crate::canary::artifact::{self, Canary};
use crate::core::fsutil;
use crate::core::refusal::Code;
use crate::evidence::commtrace::CommTrace;
use anyhow::Result;
use std::path::Path;

/// Check the artifact against the source bytes: refused on any mismatch.
pub(crate) fn check_binding(
    c: &Canary,
    art_path: &Path,
    t: &CommTrace,
    src_bytes: &[u8],
    src_path: &Path,
) -> Result<()> {
    let sha = fsutil::sha256_hex(src_bytes);
    if sha == c.source.file_sha256 {
        return Ok(());
    }
    let canonical = artifact::canonical_sha256(t)?;
    let counts: Vec<u64> = t.ranks.iter().map(|r| r.collectives.len() as u64).collect();
    if t.world_size != c.source.world_size || counts != c.source.collectives_per_rank {
        crate::refuse!(
            Code::IdentityMismatch,
            "{} is another trace than the one {} was compiled from ({} ranks with {:?} collectives; the canary's \
                source had {} ranks with {:?}, SHA-256 {})",
            src_path.display(),
            art_path.display(),
            t.world_size,
            counts,
            c.source.world_size,
            c.source.collectives_per_rank,
            c.source.file_sha256
        );
    }
    crate::refuse!(
        Code::DigestMismatch,
        "{}: SHA-256 {sha}, but {} was compiled from a file with SHA-256 {} ({}): the source changed since, or it is \
            another trace",
        src_path.display(),
        art_path.display(),
        c.source.file_sha256,
        if canonical == c.source.canonical_sha256 { "the same content written differently" } else { "other content" }
    );
}
