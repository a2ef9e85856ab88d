//! specx-datagen: the token-mixing acceptance datasets of SpecDec++ §4.4 (`specx datagen`).
//!
//! A run: [`config`] (TOML) -> its `[prompts]` ([`specx_prompts`]) select and template the prompts ->
//! [`generation`] runs the target and draft passes in batches and computes [`labels`] and
//! token mixing -> [`shard`] writes Parquet token and prompt tables (and safetensors features,
//! unless [`features`] recomputes them when a head is trained) ->
//! [`manifest`] records everything with checksums. [`run()`] drives it (resumable, `--shard
//! i/n`; [`mod@run`] on one device, [`devices`] one part per device at once), [`merge`] joins
//! parts, [`summary`] prints what a run holds; what every run directory shares (the manifest
//! envelope, parts, resume, paths, seeds, `[slurm]`) is [`specx_run`]'s. [`token_freq`] counts
//! training text for a draft's frequency-ranked vocabulary (`specx token-freq`).

pub mod cli;
pub mod config;
pub mod devices;
pub mod features;
pub mod generation;
pub mod labels;
pub mod manifest;
pub mod merge;
pub mod run;
pub mod shard;
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
