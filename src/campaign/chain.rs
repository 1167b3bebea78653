//! The chain of evidence after planning: attempts (append-only), selection,
//! completeness verification (docs/ARCHITECTURE.md §7).
//!
//! Consumes the manifest and what `exec` recorded; produces `attempts.jsonl`,
//! the selection and a verification. `verify` refuses, naming the cell,
//! anything missing, duplicated, failed, stale, unexpected, that does not
//! join, that contradicts the manifest or breaks its hardware contract. The
//! stages live in sibling modules reached through this one: `attempts`,
//! `lock`, `exec`, `select` and `verify`.
//!
//! Each stage's rules: docs/METHODS.md, "The chain after planning".
pub(crate) use super::attempts::{load_manifest, ATTEMPTS};
pub use super::attempts::{parse_attempts, read_attempts, AttemptRecord, AttemptStatus};
pub(crate) use super::exec::preflight;
pub use super::exec::{exec, exec_all, exec_logged};
pub(crate) use super::lock::{lock_campaign, lock_campaign_for_reading, INFLIGHT_FILE, LOCK_FILE};
pub use super::select::{select, SelectPolicy, Selected, Selection};
pub use super::verify::{verify, verify_visiting, Verdict};
