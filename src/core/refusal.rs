//! Named refusals: a stable code per way evidence or input is refused.
//!
//! Consumes nothing; produces errors whose text starts `refused[CODE]: `, so
//! scripts and people can tell one refusal from another without parsing
//! prose, and tests can assert the code rather than a sentence. Codes are
//! part of the command-line contract: a code is added, never renamed. The
//! table of docs/REFERENCE.md ("Refusals") lists every code with its meaning and an example; a test
//! keeps the table and [`Code::ALL`] in step.
use std::fmt;

/// One list makes the enum, [`Code::ALL`] (in the list's order, which is
/// docs/REFERENCE.md's) and [`Code::as_str`]: a code cannot be added to one and
/// forgotten in another.
macro_rules! refusal_codes {
    ($($(#[doc = $doc:literal])* $variant:ident => $name:literal,)+) => {
        /// Stable refusal codes.
        #[derive(Clone, Copy, Debug, PartialEq, Eq)]
        pub enum Code {
            $($(#[doc = $doc])* $variant,)+
        }

        impl Code {
            /// Every code, in the order of docs/REFERENCE.md's table.
            pub const ALL: &'static [Code] = &[$(Code::$variant,)+];

            /// The code as printed.
            pub fn as_str(self) -> &'static str {
                match self {
                    $(Code::$variant => $name,)+
                }
            }
        }
    };
}

refusal_codes! {
    /// `plan` into a directory that already holds campaign state.
    CampaignState => "CAMPAIGN_STATE",
    /// An attempt or run made under another manifest or workload.
    StaleManifest => "STALE_MANIFEST",
    /// Another process holds the campaign (or cell) lock.
    Locked => "LOCKED",
    /// A job of an interrupted `exec` is still running.
    OrphanJob => "ORPHAN_JOB",
    /// Two attempts ran at the same time on one host.
    OverlappingAttempts => "OVERLAPPING_ATTEMPTS",
    /// An input exceeds a documented size or count limit.
    OverLimit => "OVER_LIMIT",
    /// A run record or shard whose structure is impossible (world size, membership).
    BadStructure => "BAD_STRUCTURE",
    /// The same run given twice.
    DuplicateRun => "DUPLICATE_RUN",
    /// `archive`: a symbolic link or special file inside the campaign.
    ArchiveLink => "ARCHIVE_LINK",
    /// `archive`: the output lies inside the campaign directory.
    ArchiveOutputInside => "ARCHIVE_OUTPUT_INSIDE",
    /// `check-archive`: a member name or type that could escape or was never hashed.
    ArchiveMember => "ARCHIVE_MEMBER",
    /// A number outside its documented range.
    OutOfRange => "OUT_OF_RANGE",
    /// A campaign spec that can never run or analyze.
    BadSpec => "BAD_SPEC",
    /// A named file or directory of evidence does not exist (run directory, run.json, selection, a shard in verify).
    NoSuchInput => "NO_SUCH_INPUT",
    /// A file is not what it claims to be: bad magic, damaged trailer marker, undecodable header or body, trailing
    /// bytes.
    BadFormat => "BAD_FORMAT",
    /// A format version this build does not read.
    UnsupportedVersion => "UNSUPPORTED_VERSION",
    /// A file ends before its declared lengths or its trailer.
    Truncated => "TRUNCATED",
    /// Content does not hash (or size) to the digest recorded for it: a shard's trailer, a manifest, an archive.
    DigestMismatch => "DIGEST_MISMATCH",
    /// A file changed after it was recorded: a shard or run.json no longer matches the digest in run.json or the
    /// selection.
    Stale => "STALE",
    /// A shard in a run directory (or an MPI capture file) belongs to another run, or its rank or world size does not
    /// fit the run.
    ForeignShard => "FOREIGN_SHARD",
    /// A rank of the run has no shard.
    MissingRank => "MISSING_RANK",
    /// Two shards claim the same rank.
    DuplicateRank => "DUPLICATE_RANK",
    /// A shard's rank is not listed in run.json.
    UnlistedRank => "UNLISTED_RANK",
    /// Ranks disagree on a process group's membership, or a rank records a collective of a group it is not in.
    GroupMismatch => "GROUP_MISMATCH",
    /// A rank records the same (group, sequence) twice.
    DuplicateEvent => "DUPLICATE_EVENT",
    /// A collective is present on some members of its group and missing on others.
    UnmatchedEvent => "UNMATCHED_EVENT",
    /// Ranks disagree on one operation's identity (kind, bytes, dtype, phase).
    IdentityMismatch => "IDENTITY_MISMATCH",
    /// A run's recorded identity (ranks, backend, environment, NCCL library) contradicts the manifest's configuration.
    IdentityContradiction => "IDENTITY_CONTRADICTION",
    /// A scheduled cell has no selected attempt.
    MissingCell => "MISSING_CELL",
    /// A cell has more than one selected attempt.
    DuplicateCell => "DUPLICATE_CELL",
    /// The selection names a cell the manifest does not schedule.
    UnexpectedCell => "UNEXPECTED_CELL",
    /// The selected attempt of a cell did not succeed.
    FailedAttempt => "FAILED_ATTEMPT",
    /// A selection entry disagrees with the attempt record it names.
    SelectionMismatch => "SELECTION_MISMATCH",
    /// An attempt id appears twice.
    DuplicateAttempt => "DUPLICATE_ATTEMPT",
    /// A run of a cell does not join (its join refusal follows).
    NotJoinable => "NOT_JOINABLE",
    /// A campaign that `verify` does not pass as complete: no ranking, comparison or queue is computed from it.
    Incomplete => "INCOMPLETE",
    /// Two campaigns that cannot be joined (same manifest, same id, different definitions).
    CampaignMismatch => "CAMPAIGN_MISMATCH",
    /// An output that already exists: archives, reports and joined campaigns are never overwritten.
    AlreadyExists => "ALREADY_EXISTS",
    /// An argument, or a combination of arguments, that cannot run (named in the message).
    BadArgument => "BAD_ARGUMENT",
    /// A user-given input file with a malformed value (intervals, service times, a CSV table, an imported trace).
    BadInput => "BAD_INPUT",
    /// A collective or other MPI operation of a run did not complete within `--collective-timeout-s`.
    CollectiveTimeout => "COLLECTIVE_TIMEOUT",
    /// An input path names a FIFO, device, socket or directory where a regular file is read.
    NotRegularFile => "NOT_REGULAR_FILE",
    /// A cell ran on another host or another kind of hardware (CPU, GPU, driver, NCCL build, MPI, kernel, topology)
    /// than the campaign's hardware contract allows.
    HardwareContract => "HARDWARE_CONTRACT",
    /// Generated (`synth-shards`) shards where measurements are required: verify, analyze, summarize, canary verify.
    Synthetic => "SYNTHETIC",
    /// `canary verify`: a canary that a check needing no measurement (coverage, mix, structure, values) already fails,
    /// refused before any replay.
    StaticCheck => "STATIC_CHECK",
    /// `canary reduce`: the campaign it reads decided no pair of configurations, so there is no order to preserve.
    NoDecision => "NO_DECISION",
    /// `capture`/`import mpi`: the program wrote no capture file: it never initialized MPI.
    NotMpi => "NOT_MPI",
    /// `import mpi`: a rank's capture has no trailer (the rank ended without `MPI_Finalize`, or aborted);
    /// `--allow-incomplete` imports it marked incomplete.
    IncompleteCapture => "INCOMPLETE_CAPTURE",
    /// `campaign exec`/`run`: the launcher failed the same way (before any rank ran) for every configuration of a
    /// round; the cells left were not run.
    LauncherFailed => "LAUNCHER_FAILED",
    /// A trace's collective (kind, per-member counts or reduction) that the chosen backend or phase cannot run, refused
    /// before launch.
    UnsupportedOperation => "UNSUPPORTED_OPERATION",
}

/// A refusal: code plus what was refused and why.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub(crate) struct Refusal {
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
pub(crate) fn or_code(code: Code) -> impl Fn(anyhow::Error) -> anyhow::Error {
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
        let readme = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/docs/REFERENCE.md"))
            .expect("docs/REFERENCE.md");
        for c in Code::ALL {
            let row = format!("| `{}` |", c.as_str());
            assert_eq!(readme.matches(&row).count(), 1, "docs/REFERENCE.md: one table row starting {row}");
        }
        let mut names: Vec<&str> = Code::ALL.iter().map(|c| c.as_str()).collect();
        names.sort_unstable();
        names.dedup();
        assert_eq!(names.len(), Code::ALL.len(), "codes are distinct");
        // and the table names no code this build lacks
        let rows = readme.lines().filter(|l| {
            l.starts_with("| `")
                && l[3..]
                    .split('`')
                    .next()
                    .is_some_and(|c| !c.is_empty() && c.chars().all(|ch| ch.is_ascii_uppercase() || ch == '_'))
        });
        assert_eq!(rows.count(), Code::ALL.len(), "docs/REFERENCE.md: one refusal row per code, no more");
    }

    #[test]
    fn every_printed_code_is_its_variant_name_in_screaming_snake_case() {
        for c in Code::ALL {
            let mut want = String::new();
            for (i, ch) in format!("{c:?}").chars().enumerate() {
                if ch.is_ascii_uppercase() && i > 0 {
                    want.push('_');
                }
                want.push(ch.to_ascii_uppercase());
            }
            assert_eq!(c.as_str(), want, "{c:?}");
        }
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
