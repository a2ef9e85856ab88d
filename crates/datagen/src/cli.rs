//! Command-line arguments of `specx datagen` (the binary only parses and dispatches).

use crate::config::DatagenConfig;
use crate::manifest::Manifest;
use crate::summary::summary_text;
use crate::{RunOptions, run};
use anyhow::Result;
use clap::{Args, Subcommand};
use specx_run::RunManifest;
use std::path::PathBuf;

#[derive(Args, Debug, Default)]
#[command(args_conflicts_with_subcommands = true)]
// The shared `--config` says which config this command reads.
#[command(mut_arg("config", |a| a.help("Experiment config (TOML): models, prompt set and split, generation and label settings, token mixing, output. See configs/datagen-*.toml and docs/reference/config.md")))]
pub struct DatagenArgs {
    #[command(subcommand)]
    pub command: Option<DatagenCommand>,
    #[command(flatten)]
    pub run: specx_run::RunArgs,
    /// Overrides [generation] batch_size.
    #[arg(long)]
    pub batch_size: Option<usize>,
    /// Overrides [generation] max_new_tokens.
    #[arg(long)]
    pub max_new_tokens: Option<usize>,
    /// Overrides [models] draft.
    #[arg(long)]
    pub draft: Option<PathBuf>,
    /// Overrides [models] target.
    #[arg(long)]
    pub target: Option<PathBuf>,
    /// Overrides [models] draft_tokenizer: a tokenizer.json to use with the draft instead of
    /// its own.
    #[arg(long)]
    pub draft_tokenizer: Option<PathBuf>,
    /// Overrides [models] target_tokenizer.
    #[arg(long)]
    pub target_tokenizer: Option<PathBuf>,
    /// Overrides [models] weights: `q8` (the default: 8-bit activations and integer dot
    /// products: faster, data close to but not bitwise `native`'s), `native` (GGUF blocks
    /// decoded in the kernel) or `f32` (dequantized on load; bit-identical data to `native`).
    #[arg(long)]
    pub weights: Option<specx_decoder::WeightMode>,
    /// Stop after writing this many new shards (a resumable partial run).
    #[arg(long)]
    pub max_shards: Option<usize>,
}

#[derive(Subcommand, Debug)]
pub enum DatagenCommand {
    /// Join the part directories of a `--shard I/N` run into one run directory.
    Merge {
        /// Output run directory.
        #[arg(long)]
        out: PathBuf,
        /// Part directories (all N of them).
        #[arg(required = true)]
        parts: Vec<PathBuf>,
    },
    /// Print the summary of an existing run directory.
    Summary {
        /// Run directory.
        dir: PathBuf,
    },
}

/// The config of a `specx datagen` invocation with its overrides applied.
pub fn effective_config(a: &DatagenArgs) -> Result<DatagenConfig> {
    let mut cfg = DatagenConfig::load(a.run.config_path("datagen")?)?;
    if let Some(o) = a.run.out_dir()? {
        cfg.output.dir = o;
    }
    if let Some(d) = &a.draft {
        cfg.models.draft = specx_run::paths::resolve_from_cwd(d)?;
    }
    if let Some(t) = &a.target {
        cfg.models.target = specx_run::paths::resolve_from_cwd(t)?;
    }
    if let Some(t) = &a.draft_tokenizer {
        cfg.models.draft_tokenizer = Some(specx_run::paths::resolve_from_cwd(t)?);
    }
    if let Some(t) = &a.target_tokenizer {
        cfg.models.target_tokenizer = Some(specx_run::paths::resolve_from_cwd(t)?);
    }
    if !a.run.devices.is_empty() {
        cfg.models.devices = a.run.devices.clone();
    }
    if let Some(w) = a.weights {
        cfg.models.weights = w;
    }
    if a.run.limit.is_some() {
        cfg.prompts.limit = a.run.limit;
    }
    if let Some(b) = a.batch_size {
        cfg.generation.batch_size = b;
    }
    if let Some(m) = a.max_new_tokens {
        cfg.generation.max_new_tokens = m;
    }
    Ok(cfg)
}

pub fn run_cli(a: DatagenArgs) -> Result<()> {
    match &a.command {
        Some(DatagenCommand::Merge { out, parts }) => {
            let m = crate::merge::merge(parts, out)?;
            eprintln!("merged {} parts into {}", parts.len(), out.display());
            print!("{}", summary_text(&m));
            Ok(())
        }
        Some(DatagenCommand::Summary { dir }) => {
            print!("{}", summary_text(&Manifest::read(dir)?));
            Ok(())
        }
        None => {
            let cfg = effective_config(&a)?;
            let opts = RunOptions { part: a.run.part()?, max_new_shards: a.max_shards, progress: !a.run.no_progress };
            let m = run(&cfg, &opts)?;
            print!("{}", summary_text(&m));
            eprintln!(
                "run directory: {}{}",
                cfg.output.dir.display(),
                if m.complete { "" } else { " (incomplete: run the same command again to continue)" }
            );
            Ok(())
        }
    }
}
