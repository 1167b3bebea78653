//! Named refusals: a stable code per way evidence or input is refused.
//!
//! Consumes nothing; produces errors whose text starts `refused[CODE]: `, so
//! scripts and people can tell one refusal from another without parsing
//! prose, and tests can assert the code rather than a sentence. Codes are
//! part of the command-line contract: a code is added, never renamed. The
//! table of docs/REFERENCE.md ("Refusals") lists every code with its meaning and an example; a test
//! keeps the table and [`Code::ALL`] in step.
use std::fmt;

/// Stable refusal codes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Code {
    /// `plan` into a directory that already holds campaign state.
    CampaignState,
    /// An attempt or run made under another manifest or workload.
    StaleManifest,
    /// Another process holds the campaign (or cell) lock.
    Locked,
    /// A job of an interrupted `exec` is still running.
    OrphanJob,
    /// Two attempts ran at the same time on one host.
    OverlappingAttempts,
    /// An input exceeds a documented size or count limit.
    OverLimit,
    /// A run record or shard whose structure is impossible (world size, membership).
    BadStructure,
    /// The same run given twice.
    DuplicateRun,
    /// `archive`: a symbolic link or special file inside the campaign.
    ArchiveLink,
    /// `archive`: the output lies inside the campaign directory.
    ArchiveOutputInside,
    /// `check-archive`: a member name or type that could escape or was never hashed.
    ArchiveMember,
    /// A number outside its documented range.
    OutOfRange,
    /// A campaign spec that can never run or analyze.
    BadSpec,
    /// A named file or directory of evidence does not exist (run directory, run.json, selection, a shard in verify).
    NoSuchInput,
    /// A file is not what it claims to be: bad magic, damaged trailer marker, undecodable header or body, trailing bytes.
    BadFormat,
    /// A format version this build does not read.
    UnsupportedVersion,
    /// A file ends before its declared lengths or its trailer.
    Truncated,
    /// Content does not hash (or size) to the digest recorded for it: a shard's trailer, a manifest, an archive.
    DigestMismatch,
    /// A file changed after it was recorded: a shard or run.json no longer matches the digest in run.json or the selection.
    Stale,
    /// A shard in a run directory belongs to another run, or its rank or world size does not fit the run.
    ForeignShard,
    /// A rank of the run has no shard.
    MissingRank,
    /// Two shards claim the same rank.
    DuplicateRank,
    /// A shard's rank is not listed in run.json.
    UnlistedRank,
    /// Ranks disagree on a process group's membership, or a rank records a collective of a group it is not in.
    GroupMismatch,
    /// A rank records the same (group, sequence) twice.
    DuplicateEvent,
    /// A collective is present on some members of its group and missing on others.
    UnmatchedEvent,
    /// Ranks disagree on one operation's identity (kind, bytes, dtype, phase).
    IdentityMismatch,
    /// A run's recorded identity (ranks, backend, environment, NCCL library) contradicts the manifest's configuration.
    IdentityContradiction,
    /// A scheduled cell has no selected attempt.
    MissingCell,
    /// A cell has more than one selected attempt.
    DuplicateCell,
    /// The selection names a cell the manifest does not schedule.
    UnexpectedCell,
    /// The selected attempt of a cell did not succeed.
    FailedAttempt,
    /// A selection entry disagrees with the attempt record it names.
    SelectionMismatch,
    /// An attempt id appears twice.
    DuplicateAttempt,
    /// A run of a cell does not join (its join refusal follows).
    NotJoinable,
    /// A campaign that `verify` does not pass as complete: no ranking, comparison or queue is computed from it.
    Incomplete,
    /// Two campaigns that cannot be joined (same manifest, same id, different definitions).
    CampaignMismatch,
    /// An output that already exists: archives, reports and joined campaigns are never overwritten.
    AlreadyExists,
    /// An argument, or a combination of arguments, that cannot run (named in the message).
    BadArgument,
    /// A user-given input file with a malformed value (intervals, service times, a CSV table, an imported trace).
    BadInput,
    /// A collective or other MPI operation of a run did not complete within `--collective-timeout-s`.
    CollectiveTimeout,
    /// An input path names a FIFO, device, socket or directory where a regular file is read.
    NotRegularFile,
    /// A cell ran on another host or another kind of hardware (CPU, GPU, driver, NCCL build, MPI, kernel, topology) than the campaign's hardware contract allows.
    HardwareContract,
    /// Generated (`synth-shards`) shards where measurements are required: verify, analyze, summarize, canary verify.
    Synthetic,
}

impl Code {
    /// Every code, in the order of docs/REFERENCE.md's table.
    pub const ALL: &'static [Code] = &[
        Code::CampaignState,
        Code::StaleManifest,
        Code::Locked,
        Code::OrphanJob,
        Code::OverlappingAttempts,
        Code::OverLimit,
        Code::BadStructure,
        Code::DuplicateRun,
        Code::ArchiveLink,
        Code::ArchiveOutputInside,
        Code::ArchiveMember,
        Code::OutOfRange,
        Code::BadSpec,
        Code::NoSuchInput,
        Code::BadFormat,
        Code::UnsupportedVersion,
        Code::Truncated,
        Code::DigestMismatch,
        Code::Stale,
        Code::ForeignShard,
        Code::MissingRank,
        Code::DuplicateRank,
        Code::UnlistedRank,
        Code::GroupMismatch,
        Code::DuplicateEvent,
        Code::UnmatchedEvent,
        Code::IdentityMismatch,
        Code::IdentityContradiction,
        Code::MissingCell,
        Code::DuplicateCell,
        Code::UnexpectedCell,
        Code::FailedAttempt,
        Code::SelectionMismatch,
        Code::DuplicateAttempt,
        Code::NotJoinable,
        Code::Incomplete,
        Code::CampaignMismatch,
        Code::AlreadyExists,
        Code::BadArgument,
        Code::BadInput,
        Code::CollectiveTimeout,
        Code::NotRegularFile,
        Code::HardwareContract,
        Code::Synthetic,
    ];

    /// The code as printed.
    pub fn as_str(self) -> &'static str {
        match self {
            Code::CampaignState => "CAMPAIGN_STATE",
            Code::StaleManifest => "STALE_MANIFEST",
            Code::Locked => "LOCKED",
            Code::OrphanJob => "ORPHAN_JOB",
            Code::OverlappingAttempts => "OVERLAPPING_ATTEMPTS",
            Code::OverLimit => "OVER_LIMIT",
            Code::BadStructure => "BAD_STRUCTURE",
            Code::DuplicateRun => "DUPLICATE_RUN",
            Code::ArchiveLink => "ARCHIVE_LINK",
            Code::ArchiveOutputInside => "ARCHIVE_OUTPUT_INSIDE",
            Code::ArchiveMember => "ARCHIVE_MEMBER",
            Code::OutOfRange => "OUT_OF_RANGE",
            Code::BadSpec => "BAD_SPEC",
            Code::NoSuchInput => "NO_SUCH_INPUT",
            Code::BadFormat => "BAD_FORMAT",
            Code::UnsupportedVersion => "UNSUPPORTED_VERSION",
            Code::Truncated => "TRUNCATED",
            Code::DigestMismatch => "DIGEST_MISMATCH",
            Code::Stale => "STALE",
            Code::ForeignShard => "FOREIGN_SHARD",
            Code::MissingRank => "MISSING_RANK",
            Code::DuplicateRank => "DUPLICATE_RANK",
            Code::UnlistedRank => "UNLISTED_RANK",
            Code::GroupMismatch => "GROUP_MISMATCH",
            Code::DuplicateEvent => "DUPLICATE_EVENT",
            Code::UnmatchedEvent => "UNMATCHED_EVENT",
            Code::IdentityMismatch => "IDENTITY_MISMATCH",
            Code::IdentityContradiction => "IDENTITY_CONTRADICTION",
            Code::MissingCell => "MISSING_CELL",
            Code::DuplicateCell => "DUPLICATE_CELL",
            Code::UnexpectedCell => "UNEXPECTED_CELL",
            Code::FailedAttempt => "FAILED_ATTEMPT",
            Code::SelectionMismatch => "SELECTION_MISMATCH",
            Code::DuplicateAttempt => "DUPLICATE_ATTEMPT",
            Code::NotJoinable => "NOT_JOINABLE",
            Code::Incomplete => "INCOMPLETE",
            Code::CampaignMismatch => "CAMPAIGN_MISMATCH",
            Code::AlreadyExists => "ALREADY_EXISTS",
            Code::BadArgument => "BAD_ARGUMENT",
            Code::BadInput => "BAD_INPUT",
            Code::CollectiveTimeout => "COLLECTIVE_TIMEOUT",
            Code::NotRegularFile => "NOT_REGULAR_FILE",
            Code::HardwareContract => "HARDWARE_CONTRACT",
            Code::Synthetic => "SYNTHETIC",
        }
    }
}

/// A refusal: code plus what was refused and why.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub struct Refusal {
    /// Stable code.
    pub code: Code,
    /// What was refused, naming the file or argument and the fault.
    pub message: String,
}

impl fmt::Display for Refusal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "refused[{}]: {}", self.code.as_str(), self.message)
    }
}

/// A refusal as an `anyhow` error.
pub fn refuse(code: Code, message: impl Into<String>) -> anyhow::Error {
    anyhow::Error::new(Refusal { code, message: message.into() })
}

/// The code of the first refusal in an error's chain, if any.
pub fn code_of(e: &anyhow::Error) -> Option<Code> {
    e.chain().find_map(|c| c.downcast_ref::<Refusal>()).map(|r| r.code)
}

/// For a stage boundary where every fault is of one kind: an error that
/// carries no code gets `code` (its whole chain becomes the message); a coded
/// one keeps its own. Use as `.map_err(or_code(Code::BadInput))`.
pub fn or_code(code: Code) -> impl Fn(anyhow::Error) -> anyhow::Error {
    move |e| if code_of(&e).is_some() { e } else { refuse(code, format!("{e:#}")) }
}

/// `bail!` with a refusal code: `refuse!(Code::X, "fmt", args)`.
#[macro_export]
macro_rules! refuse {
    ($code:expr, $($arg:tt)*) => {
        return Err($crate::core::refusal::refuse($code, format!($($arg)*)).into())
    };
}

#[cfg(test)]
mod tests {
    use super::*;
    #[test]
    fn every_code_is_in_the_readme_table_once() {
        let readme = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/docs/REFERENCE.md")).expect("docs/REFERENCE.md");
        for c in Code::ALL {
            let row = format!("| `{}` |", c.as_str());
            assert_eq!(readme.matches(&row).count(), 1, "docs/REFERENCE.md: one table row starting {row}");
        }
        let mut names: Vec<&str> = Code::ALL.iter().map(|c| c.as_str()).collect();
        names.sort_unstable();
        names.dedup();
        assert_eq!(names.len(), Code::ALL.len(), "codes are distinct");
    }

    #[test]
    fn finds_the_code_under_context() {
        let e = refuse(Code::Truncated, "f: truncated").context("reading f");
        assert_eq!(code_of(&e), Some(Code::Truncated));
        assert_eq!(code_of(&anyhow::anyhow!("plain")), None);
    }

    #[test]
    fn prints_the_code_first() {
        let e = refuse(Code::StaleManifest, "x");
        assert_eq!(format!("{e:#}"), "refused[STALE_MANIFEST]: x");
    }
}
