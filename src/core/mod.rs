//! Layer 1: the vocabulary every stage shares, with no stage logic.
//!
//! Units and `key=value` parsing, the clock model, the workload vocabulary
//! (phases, shapes, element types), the collective vocabulary (kinds and
//! buffer dtypes of traced collectives), environment identity, atomic
//! never-overwriting files, descriptive statistics, work over items on a
//! few threads, the size limits of every decoder, the documented ranges of every number, and the refusal codes.
//! Imports nothing from the crate outside `core` (docs/ARCHITECTURE.md §2).
pub mod cli_kv;
pub mod clock;
pub mod collective;
pub mod fsutil;
pub mod identity;
pub mod limits;
pub mod par;
pub mod ranges;
pub mod refusal;
pub mod stats;
pub mod units;
pub mod workload;
