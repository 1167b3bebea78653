//! Named refusals: a stable code per way evidence or input is refused.
//!
//! Consumes nothing; produces errors whose text starts `refused[CODE]: `, so
//! scripts and people can tell one refusal from another without parsing
//! prose, and tests can assert the code rather than a sentence. Codes are
//! part of the command-line contract: a code is added, never renamed.
//! (Kept in its own module so a later, wider evidence-refusal type can absorb it.)
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
}

impl Code {
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

/// `bail!` with a refusal code: `refuse!(Code::X, "fmt", args)`.
#[macro_export]
macro_rules! refuse {
    ($code:expr, $($arg:tt)*) => {
        return Err($crate::refusal::refuse($code, format!($($arg)*)).into())
    };
}

#[cfg(test)]
mod tests {
    use super::*;
    #[test]
    fn prints_the_code_first() {
        let e = refuse(Code::StaleManifest, "x");
        assert_eq!(format!("{e:#}"), "refused[STALE_MANIFEST]: x");
    }
}
