//! Command-line arguments of `specx datagen` (the binary only parses and dispatches).

use crate::config::DatagenConfig;
use crate::manifest::{Manifest, Part};
use crate::{run, RunOptions};
use crate::summary::summary_text;
use anyhow::{Context, Result};
use clap::{Args, Subcommand};
use std::path::PathBuf;

#[derive(Args, Debug, Default)]
#[command(args_conflicts_with_subcommands = true)]
pub struct DatagenArgs {
    #[command(subcommand)]
    pub command: Option<DatagenCommand>,
    /// Experiment config (TOML): models, prompt set and split, generation and label settings,
    /// token mixing, output. See configs/datagen-*.toml.
    #[arg(long)]
    pub config: Option<PathBuf>,
    /// Run directory, instead of the config's [output] dir.
    #[arg(long)]
    pub out: Option<PathBuf>,
    /// Produce only part I of N (`I/N`, 0-based): shards k with k % N == I. Run each part on
    /// its own machine into its own directory, then `specx datagen merge`.
    #[arg(long, value_name = "I/N")]
    pub shard: Option<String>,
    /// Overrides [models] devices: run one part per device at once (`cpu,wgpu:0`: part 0 of 2
    /// on the CPU, part 1 on the first Vulkan adapter) in OUT/parts/I, then merge them into
    /// OUT. Run the same command again to resume.
    #[arg(long, value_delimiter = ',')]
    pub devices: Vec<String>,
    /// Overrides [prompts] limit: use the first N prompts of the split.
    #[arg(long)]
    pub limit: Option<usize>,
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
    /// Overrides [models] weights: `q8` (the default: 8-bit activations and integer dot
    /// products: faster, data close to but not bitwise `native`'s), `native` (GGUF blocks
    /// decoded in the kernel) or `f32` (dequantized on load; bit-identical data to `native`).
    #[arg(long)]
    pub weights: Option<specx_decoder::WeightMode>,
    /// Stop after writing this many new shards (a resumable partial run).
    #[arg(long)]
    pub max_shards: Option<usize>,
    /// Log a line per shard instead of drawing progress bars.
    #[arg(long)]
    pub no_progress: bool,
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

/// Parses `I/N`.
pub fn parse_part(s: &str) -> Result<Part> {
    let (i, n) = s.split_once('/').with_context(|| format!("--shard {s}: expected I/N, e.g. 0/4"))?;
    // The range (0 <= I < N) is checked by `run`, which library callers reach directly.
    Ok(Part { index: i.trim().parse().with_context(|| format!("--shard {s}: bad index"))?, count: n.trim().parse().with_context(|| format!("--shard {s}: bad count"))? })
}

/// The config of a `specx datagen` invocation with its overrides applied.
pub fn effective_config(a: &DatagenArgs) -> Result<DatagenConfig> {
    let path = a.config.as_ref().context("specx datagen needs --config FILE (see configs/)")?;
    let mut cfg = DatagenConfig::load(path)?;
    let cwd = std::env::current_dir()?;
    let abs = |p: &PathBuf| crate::config::resolve_path(p, &cwd);
    if let Some(o) = &a.out {
        cfg.output.dir = abs(o);
    }
    if let Some(d) = &a.draft {
        cfg.models.draft = abs(d);
    }
    if let Some(t) = &a.target {
        cfg.models.target = abs(t);
    }
    if !a.devices.is_empty() {
        cfg.models.devices = a.devices.clone();
    }
    if let Some(w) = a.weights {
        cfg.models.weights = w;
    }
    if a.limit.is_some() {
        cfg.prompts.limit = a.limit;
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
            let part = a.shard.as_deref().map(parse_part).transpose()?;
            let opts = RunOptions { part, max_new_shards: a.max_shards, progress: !a.no_progress };
            let m = run(&cfg, &opts)?;
            print!("{}", summary_text(&m));
            eprintln!("run directory: {}{}", cfg.output.dir.display(), if m.complete { "" } else { " (incomplete: run the same command again to continue)" });
            Ok(())
        }
    }
}
