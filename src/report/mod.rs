//! Layer 7: files made from an analysis.
//!
//! The campaign report (collect the verified campaign, analyze, write
//! `report.json` and the SVG plots) and exports of verified runs
//! (Chrome/Perfetto trace JSON) (docs/ARCHITECTURE.md §9, §11).
pub mod campaign;
pub mod export;
pub mod plots;
