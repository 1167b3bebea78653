//! Layer 7: files made from an analysis.
//!
//! The campaign report (collect the verified campaign, analyze, write
//! `report.json`, the SVG plots and `report.html`), exports of verified runs
//! (Chrome/Perfetto trace JSON), the pick in the form the user deploys
//! with its confirmation on new rounds (docs/ARCHITECTURE.md §7, §9, §11),
//! and the commands that read evidence for one analysis: `compare`,
//! `overlap`, `queue`.
pub mod campaign;
pub mod compare;
pub mod export;
pub mod html;
pub mod overlap;
pub mod pick;
pub mod plots;
pub mod queue;
pub mod run;
