//! `specx eval`: config-driven experiments (models, prompt sets, sampling settings, a grid of
//! methods) with a losslessness audit in every run, resumable per-unit results, `--shard` +
//! merge (and one part per device at once), `results.parquet`, `summary.md`, the timing model and PNG plots.

pub mod axes;
pub mod cli;
pub mod config;
pub mod devices;
pub mod drafter_replay;
pub mod grid;
pub mod manifest;
pub mod margins;
pub mod merge;
pub mod plots;
pub mod replay;
pub mod replay_run;
pub mod report;
pub mod results;
pub mod run;
pub mod timing;
