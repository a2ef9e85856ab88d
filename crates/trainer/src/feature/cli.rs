//! Command-line arguments of `specx train-feature-head`.

use crate::feature::config::FeatureHeadConfig;
use crate::feature::train::{FeatureTrainOptions, curve_table, train_feature_head};
use anyhow::Result;
use clap::Args;
use std::path::PathBuf;

#[derive(Args, Debug)]
pub struct FeatureTrainArgs {
    /// Training config (TOML): datagen runs for training and dev text, the target, the head's
    /// width and vocabulary subset, optimiser, seed, output. See
    /// configs/train-feature-head.toml.
    #[arg(long)]
    pub config: PathBuf,
    /// Output directory instead of the config's [output] dir.
    #[arg(long)]
    pub out: Option<PathBuf>,
    /// Overrides [data] train_prompts: train on the train run's first N prompts (whole shards).
    #[arg(long)]
    pub train_prompts: Option<usize>,
    /// Overrides [optim] epochs.
    #[arg(long)]
    pub epochs: Option<usize>,
    /// Stop after this many optimiser steps in this run (re-run the same command to continue
    /// from the last curve point).
    #[arg(long)]
    pub max_steps: Option<usize>,
    /// Log a line per curve point without progress bars.
    #[arg(long)]
    pub no_progress: bool,
}

/// Trains as the arguments say and prints the curve; returns the output directory.
pub fn run_cli(a: FeatureTrainArgs) -> Result<PathBuf> {
    let mut cfg = FeatureHeadConfig::read(&a.config)?;
    if let Some(out) = a.out {
        cfg.output.dir = out;
    }
    if let Some(n) = a.train_prompts {
        cfg.data.train_prompts = Some(n);
    }
    if let Some(e) = a.epochs {
        cfg.optim.epochs = e;
    }
    cfg.validate()?;
    let state =
        train_feature_head(&cfg, &FeatureTrainOptions { max_steps_this_run: a.max_steps, progress: !a.no_progress })?;
    println!(
        "feature head: {} parameters, {} training rows ({} dev), {} steps, {:.0} s of training; {}\n",
        state.parameters,
        state.train_rows,
        state.dev_rows,
        state.steps_done,
        state.seconds,
        cfg.output.dir.display()
    );
    print!("{}", curve_table(&state));
    Ok(cfg.output.dir)
}
