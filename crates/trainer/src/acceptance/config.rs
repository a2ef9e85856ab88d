//! The training config (TOML; unknown keys are errors; relative paths are relative to the
//! config file).

use crate::acceptance::loss::LossWeights;
use anyhow::{Result, bail};
use serde::{Deserialize, Serialize};
use specx_run::config::read_toml;
use specx_run::paths::resolve_path;
use std::path::{Path, PathBuf};

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TrainConfig {
    pub data: DataConfig,
    #[serde(default)]
    pub head: HeadConfig,
    #[serde(default)]
    pub loss: LossConfig,
    #[serde(default)]
    pub optim: OptimConfig,
    pub output: OutputConfig,
    /// Seeds the head's initialisation and the batch order of every epoch.
    #[serde(default)]
    pub seed: u64,
    /// Grid for `specx train --sweep` (the paper's Table 3: w_rej x depth).
    #[serde(default)]
    pub sweep: SweepConfig,
    /// Where the head trains: `cpu` (default), `wgpu[:N]` (a Vulkan adapter; build with
    /// `--features wgpu`) or `cuda[:N]`. Checkpoints load on any device.
    #[serde(default = "cpu")]
    pub device: String,
}

fn cpu() -> String {
    "cpu".into()
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DataConfig {
    /// A `specx datagen` run directory (training rows): finished, or with its first
    /// `train_prompts` prompts finished.
    pub train: PathBuf,
    /// Train on the run's first N prompts only (whole shards, in order; the run may still be
    /// growing): nested subsets of one run for data-scaling curves.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub train_prompts: Option<usize>,
    /// Another run directory on disjoint prompts (validation rows).
    pub dev: PathBuf,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct HeadConfig {
    /// Residual SiLU blocks before the output layer (0: a linear head), 0..=4 in the paper.
    #[serde(default = "default_depth")]
    pub depth: usize,
    /// One block's weights shared by all blocks.
    #[serde(default)]
    pub tied: bool,
    /// Beyond the paper: the head also reads the draft's probability of the scored token, the
    /// entropy and the top-2 margin of the distribution it was drawn from (recomputed with the
    /// run's draft, like the features).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub draft_stats: bool,
}

fn default_depth() -> usize {
    3
}

impl Default for HeadConfig {
    fn default() -> Self {
        Self { depth: default_depth(), tied: false, draft_stats: false }
    }
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LossConfig {
    #[serde(default = "one")]
    pub w_acc: f64,
    #[serde(default = "six")]
    pub w_rej: f64,
}

fn one() -> f64 {
    1.0
}
fn six() -> f64 {
    6.0
}

impl Default for LossConfig {
    fn default() -> Self {
        Self { w_acc: 1.0, w_rej: 6.0 }
    }
}

impl LossConfig {
    pub fn weights(&self) -> LossWeights {
        LossWeights { w_acc: self.w_acc, w_rej: self.w_rej }
    }
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct OptimConfig {
    /// AdamW peak learning rate.
    #[serde(default = "default_lr")]
    pub lr: f64,
    #[serde(default)]
    pub weight_decay: f64,
    /// Share of all steps spent warming up linearly before the cosine decay.
    #[serde(default = "default_warmup")]
    pub warmup_ratio: f64,
    #[serde(default = "default_epochs")]
    pub epochs: usize,
    #[serde(default = "default_batch")]
    pub batch_size: usize,
}

fn default_lr() -> f64 {
    5e-5
}
fn default_warmup() -> f64 {
    0.05
}
fn default_epochs() -> usize {
    3
}
fn default_batch() -> usize {
    32
}

impl Default for OptimConfig {
    fn default() -> Self {
        Self {
            lr: default_lr(),
            weight_decay: 0.0,
            warmup_ratio: default_warmup(),
            epochs: default_epochs(),
            batch_size: default_batch(),
        }
    }
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct OutputConfig {
    /// Checkpoint directory (`checkpoints/<name>`); a sweep writes `<dir>/w<W>-d<D>/` each.
    pub dir: PathBuf,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SweepConfig {
    #[serde(default = "default_w_rej")]
    pub w_rej: Vec<f64>,
    #[serde(default = "default_depths")]
    pub depth: Vec<usize>,
    /// Tied and/or untied heads ([head] tied if absent).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub tied: Vec<bool>,
    /// Training-set sizes in prompts ([data] train_prompts if absent): a data-scaling sweep.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub train_prompts: Vec<usize>,
}

fn default_w_rej() -> Vec<f64> {
    vec![1.0, 3.0, 6.0, 12.0]
}
fn default_depths() -> Vec<usize> {
    (0..=4).collect()
}

impl Default for SweepConfig {
    fn default() -> Self {
        Self { w_rej: default_w_rej(), depth: default_depths(), tied: Vec::new(), train_prompts: Vec::new() }
    }
}

impl TrainConfig {
    pub fn load(path: &Path) -> Result<Self> {
        let (mut cfg, base): (Self, PathBuf) = read_toml(path)?;
        cfg.data.train = resolve_path(&cfg.data.train, &base);
        cfg.data.dev = resolve_path(&cfg.data.dev, &base);
        cfg.output.dir = resolve_path(&cfg.output.dir, &base);
        Ok(cfg)
    }

    pub fn validate(&self) -> Result<()> {
        self.device.parse().and_then(specx_decoder::check_device).map_err(|e| anyhow::anyhow!("device: {e:#}"))?;
        let o = &self.optim;
        if !(o.lr > 0.0)
            || o.epochs == 0
            || o.batch_size == 0
            || !(0.0..1.0).contains(&o.warmup_ratio)
            || o.weight_decay < 0.0
        {
            bail!("[optim] needs lr > 0, epochs >= 1, batch_size >= 1, 0 <= warmup_ratio < 1, weight_decay >= 0");
        }
        if self.data.train_prompts == Some(0) || self.sweep.train_prompts.contains(&0) {
            bail!("train_prompts must be at least 1");
        }
        if self.loss.w_acc <= 0.0 || self.loss.w_rej <= 0.0 {
            bail!("[loss] weights must be positive");
        }
        Ok(())
    }

    pub fn to_toml(&self) -> String {
        toml::to_string(self).expect("a config always serialises")
    }
}
