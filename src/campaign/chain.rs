//! The chain of evidence after planning: attempts (append-only), selection,
//! completeness verification (docs/ARCHITECTURE.md §7).
//!
//! `exec` consumes the manifest and appends one terminal record per attempt
//! to `attempts.jsonl` (fsynced line by line; nothing is rewritten), keeping
//! each attempt's stdout/stderr beside it. `select` names exactly one attempt
//! per expected cell and binds its digests. `verify` refuses, naming the
//! cell: a missing, duplicated, failed, stale (bytes changed since the
//! attempt was recorded) or unexpected cell, a shard that does not join, and
//! identity contradictions with the manifest (backend, world size, a
//! configuration's environment or NCCL library), and hardware that breaks the
//! manifest's hardware contract (`campaign::hardware`). A success that overlapped
//! another attempt on its host is refused by `verify`, passed over by
//! `select` when the cell has a clean one, and run again by `exec`.
//!
//! The stages live in sibling modules and are reached through this one:
//! `attempts` (the log and the manifest it is held to), `lock`, `exec`,
//! `select` and `verify`.
pub(crate) use super::attempts::{load_manifest, ATTEMPTS};
pub use super::attempts::{parse_attempts, read_attempts, AttemptRecord, AttemptStatus};
pub use super::exec::exec;
pub(crate) use super::exec::{cells_without_success, preflight};
pub(crate) use super::lock::{lock_campaign, lock_campaign_for_reading, INFLIGHT_FILE, LOCK_FILE};
pub use super::select::{select, SelectPolicy, Selected, Selection};
pub use super::verify::{verify, verify_visiting, Verdict};
