//! `specx eval`: config-driven experiments (models, prompt sets, sampling settings, a grid of
//! methods) with a losslessness audit in every run, resumable per-unit results, `--shard` +
//! merge (and one part per device at once), `results.parquet`, `summary.md`, the timing model and PNG plots,
//! and an export of a run in Spec-Bench's answer format.

pub mod audit;
pub mod axes;
pub mod check;
pub mod cli;
pub mod config;
pub mod devices;
pub mod drafter_replay;
pub mod earlier;
pub mod export;
pub mod grid;
pub mod manifest;
pub mod margins;
pub mod merge;
pub mod methods;
pub mod plots;
pub mod replay;
pub mod replay_run;
pub mod report;
pub mod run;
pub mod target_stats;
pub mod trace_builder;

pub use audit::EvalOutcome;
pub use run::EvalOptions;

/// Runs the experiment of `cfg` (paths resolved, `output.dir` the run directory): on this
/// process's device, or with `[models] devices` and no `--shard`, one part per device side by
/// side, merged into the run directory.
///
/// Optional prompt sets whose files are missing are left out, each with a line on stderr.
pub fn run(cfg: &config::EvalConfig, opts: &EvalOptions) -> anyhow::Result<EvalOutcome> {
    let (cfg, skipped) = cfg.without_missing_optional_sets()?;
    for s in &skipped {
        eprintln!("eval: {s}");
    }
    let cfg = &cfg;
    cfg.validate()?;
    if !cfg.models.devices.is_empty() && opts.part.is_none() {
        return devices::run_on_devices(cfg, opts);
    }
    run::run_on_one_device(cfg, opts)
}
