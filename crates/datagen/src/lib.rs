//! specx-datagen: prompt sets and their templates, and the token-mixing acceptance datasets
//! of SpecDec++ §4.4 (`specx datagen`).
//!
//! A run: [`config`] (TOML) -> [`prompts`] + [`split`] select and template the prompts ->
//! [`generation`] runs the target and draft passes in batches and computes [`labels`] and
//! token mixing -> [`shard`] writes Parquet token and prompt tables (and safetensors features,
//! unless [`features`] recomputes them when a head is trained) ->
//! [`manifest`] records everything with checksums. [`run()`] drives it (resumable, `--shard
//! i/n`; [`mod@run`] on one device, [`devices`] one part per device at once), [`merge`] joins
//! parts, [`summary`] prints what a run holds; [`cluster`] is a config's `[slurm]` section
//! (`specx slurm` submits the parts as a job array). [`token_freq`] counts training text for a draft's
//! frequency-ranked vocabulary (`specx token-freq`).

pub mod cli;
pub mod cluster;
pub mod config;
pub mod devices;
pub mod features;
pub mod generation;
pub mod labels;
pub mod manifest;
pub mod merge;
pub mod prompts;
pub mod run;
pub mod shard;
pub mod split;
pub mod summary;
pub mod token_freq;

pub use run::RunOptions;

/// Runs datagen for `cfg` (paths already resolved): on this process's device, or with
/// `[models] devices` and no `--shard`, one part per device side by side, merged. Returns the
/// manifest it leaves.
pub fn run(cfg: &config::DatagenConfig, opts: &RunOptions) -> anyhow::Result<manifest::Manifest> {
    cfg.validate()?;
    if !cfg.models.devices.is_empty() && opts.part.is_none() {
        return devices::run_on_devices(cfg, opts);
    }
    run::run_on_one_device(cfg, opts)
}
