//! A capture folder read as one run ([`MpiCapture`]). Consumes the folder's `rank-NNNNN.mpicap`
//! files, each decoded by `rank_capture`; produces its ranks in rank order. Refuses with a code: no
//! capture file (`NOT_MPI`), files of two runs (`FOREIGN_SHARD`), a rank twice (`DUPLICATE_RANK`)
//! or missing (`MISSING_RANK`), an incomplete rank (`INCOMPLETE_CAPTURE`) unless allowed.
use super::rank_capture::{read_rank, RankCapture};
use crate::core::refusal::{self, Code};
use crate::evidence::commtrace::Limits;
use crate::refuse;
use anyhow::{Context, Result};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// A whole capture folder, checked.
#[derive(Clone, Debug)]
pub struct MpiCapture {
    /// Ranks in rank order.
    pub ranks: Vec<RankCapture>,
}

/// Read every rank of a capture folder and check that they make one whole run.
/// With `allow_incomplete`, ranks without a trailer are kept (and said so).
pub fn read_dir(dir: &Path, allow_incomplete: bool, limits: &Limits) -> Result<MpiCapture> {
    let entries =
        std::fs::read_dir(dir).map_err(|e| refusal::refuse(Code::NoSuchInput, format!("{}: {e}", dir.display())))?;
    let mut paths: Vec<PathBuf> = Vec::new();
    for e in entries {
        let p = e.with_context(|| dir.display().to_string())?.path();
        if p.extension().is_some_and(|x| x == "mpicap") {
            paths.push(p);
        }
    }
    paths.sort();
    if paths.is_empty() {
        refuse!(
            Code::NotMpi,
            "{}: no rank wrote a capture file (rank-NNNNN.mpicap): the program never initialized MPI (not an MPI \
                program?), or it did not run under `commcanary capture`",
            dir.display()
        );
    }
    let ranks = paths.iter().map(|p| read_rank(p, limits)).collect::<Result<Vec<_>>>()?;
    let first = &ranks[0];
    for r in &ranks[1..] {
        if r.header.run_id != first.header.run_id || r.header.world_size != first.header.world_size {
            refuse!(
                Code::ForeignShard,
                "{} and {} come from two runs: run {} of {} ranks and run {} of {} ranks; capture each run into its \
                    own folder",
                r.file.path,
                first.file.path,
                r.header.run_id,
                r.header.world_size,
                first.header.run_id,
                first.header.world_size
            );
        }
    }
    let world = first.header.world_size;
    let mut by_rank: BTreeMap<u32, RankCapture> = BTreeMap::new();
    for r in ranks {
        let rank = r.header.world_rank;
        if let Some(o) = by_rank.get(&rank) {
            refuse!(Code::DuplicateRank, "{} and {} both hold rank {rank}", o.file.path, r.file.path);
        }
        by_rank.insert(rank, r);
    }
    if let Some(missing) = (0..world).find(|k| !by_rank.contains_key(k)) {
        refuse!(
            Code::MissingRank,
            "{}: rank {missing} of the run's {world} has no capture file (expected rank-{missing:05}.mpicap; {} of \
                {world} present)",
            dir.display(),
            by_rank.len()
        );
    }
    let ranks: Vec<RankCapture> = by_rank.into_values().collect();
    if !allow_incomplete {
        if let Some(r) = ranks.iter().find(|r| r.incomplete.is_some()) {
            refuse!(
                Code::IncompleteCapture,
                "{} (and {} ranks in all): the capture is incomplete; `import mpi --allow-incomplete` keeps what was \
                    recorded and marks the trace incomplete",
                r.incomplete.as_deref().unwrap_or_default(),
                ranks.iter().filter(|r| r.incomplete.is_some()).count()
            );
        }
    }
    Ok(MpiCapture { ranks })
}

#[cfg(test)]
mod tests {
    use super::super::fixtures::{allreduce_block, file, write_dir};
    use super::*;
    use crate::core::refusal::code_of;

    #[test]
    fn a_folder_of_two_runs_a_missing_rank_or_no_file_is_refused() {
        let b = allreduce_block(0, 0);
        let two = write_dir(&[
            (0, file(0, 2, "a", std::slice::from_ref(&b), true)),
            (1, file(1, 2, "b", std::slice::from_ref(&b), true)),
        ]);
        assert_eq!(code_of(&read_dir(two.path(), false, &Limits::default()).unwrap_err()), Some(Code::ForeignShard));
        let missing =
            write_dir(&[(0, file(0, 3, "a", std::slice::from_ref(&b), true)), (2, file(2, 3, "a", &[b], true))]);
        let e = read_dir(missing.path(), false, &Limits::default()).unwrap_err();
        assert_eq!(code_of(&e), Some(Code::MissingRank), "{e:#}");
        assert!(format!("{e:#}").contains("rank 1"), "{e:#}");
        let none = write_dir(&[]);
        assert_eq!(code_of(&read_dir(none.path(), false, &Limits::default()).unwrap_err()), Some(Code::NotMpi));
    }
}
