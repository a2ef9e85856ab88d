//! The config of a feature-head training run (`specx train-feature-head`; TOML, unknown keys
//! are errors, relative paths are relative to the config file).

use anyhow::{Result, ensure};
use serde::{Deserialize, Serialize};
use specx_decoder::WeightMode;
use specx_run::config::read_toml;
use specx_run::paths::resolve_path;
use std::path::{Path, PathBuf};

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FeatureHeadConfig {
    pub data: FeatureDataConfig,
    pub model: FeatureModelConfig,
    #[serde(default)]
    pub head: FeatureHeadShape,
    #[serde(default)]
    pub optim: FeatureOptimConfig,
    pub output: FeatureOutputConfig,
    /// Seeds the initialisation, the batch order of every epoch and the input noise.
    #[serde(default)]
    pub seed: u64,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FeatureDataConfig {
    /// A `specx datagen` run directory: its prompts and responses are the training text.
    pub train: PathBuf,
    /// Its first N prompts (whole shards).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub train_prompts: Option<usize>,
    /// A run on disjoint prompts: the learning curve's held-out text.
    pub dev: PathBuf,
    /// Its first N prompts (whole shards).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dev_prompts: Option<usize>,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FeatureModelConfig {
    /// The target model whose hidden states the head reads (the runs' target).
    pub target: PathBuf,
    /// tokenizer.json to use with the target instead of its own (the tokenizer.json beside
    /// it, or a GGUF's metadata).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tokenizer: Option<PathBuf>,
    /// How the target runs when its features are computed (the head should read features of
    /// the weights it will draft for).
    #[serde(default = "q8")]
    pub weights: WeightMode,
}

fn one() -> f64 {
    1.0
}

fn q8() -> WeightMode {
    WeightMode::Q8
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FeatureHeadShape {
    /// The decoder layer's width (a multiple of 64).
    pub width: usize,
    /// The MLP's inner width.
    pub intermediate: usize,
    /// Scored vocabulary: the N most frequent tokens of `vocab_table`.
    pub vocab: usize,
    /// A token frequency table (`specx token-freq`).
    pub vocab_table: PathBuf,
}

impl Default for FeatureHeadShape {
    fn default() -> Self {
        Self {
            width: 512,
            intermediate: 1536,
            vocab: 16384,
            vocab_table: "datasets/token-frequencies/qwen2.5-train.tsv".into(),
        }
    }
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FeatureOptimConfig {
    pub lr: f64,
    pub warmup_ratio: f64,
    pub epochs: usize,
    /// Rows per optimiser step (whole sequences packed up to this many).
    pub batch_tokens: usize,
    /// Weight of the smooth-L1 regression on the next state (EAGLE-1: 1; EAGLE-3 drops it).
    #[serde(default = "one")]
    pub reg_weight: f64,
    /// Weight of the cross-entropy term (EAGLE-1: 0.1).
    pub cls_weight: f64,
    /// Half-width of the uniform noise added to input features (EAGLE's augmentation
    /// against its own prediction errors), relative to each feature row's RMS.
    pub noise: f64,
    /// Evaluate on the dev text (a point of the learning curve) every this many steps.
    pub eval_every: usize,
}

impl Default for FeatureOptimConfig {
    fn default() -> Self {
        Self {
            lr: 1e-3,
            warmup_ratio: 0.05,
            epochs: 2,
            batch_tokens: 2048,
            reg_weight: 1.0,
            cls_weight: 0.1,
            noise: 0.1,
            eval_every: 50,
        }
    }
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FeatureOutputConfig {
    pub dir: PathBuf,
}

impl FeatureHeadConfig {
    /// Reads a config; relative paths become relative to the file's directory.
    pub fn read(path: &Path) -> Result<Self> {
        let (mut cfg, base): (Self, PathBuf) = read_toml(path)?;
        for p in [
            &mut cfg.data.train,
            &mut cfg.data.dev,
            &mut cfg.model.target,
            &mut cfg.head.vocab_table,
            &mut cfg.output.dir,
        ] {
            *p = resolve_path(p, &base);
        }
        if let Some(t) = &mut cfg.model.tokenizer {
            *t = resolve_path(t, &base);
        }
        cfg.validate()?;
        Ok(cfg)
    }

    pub fn validate(&self) -> Result<()> {
        let o = &self.optim;
        ensure!(
            self.head.width > 0 && self.head.width.is_multiple_of(specx_decoder::speculative::FEATURE_HEAD_DIM),
            "[head] width = {} must be a positive multiple of 64",
            self.head.width
        );
        ensure!(self.head.intermediate > 0 && self.head.vocab > 0, "[head] intermediate and vocab must be positive");
        ensure!(
            o.lr > 0.0 && o.epochs > 0 && o.batch_tokens > 1 && o.eval_every > 0,
            "[optim] lr, epochs, batch_tokens (> 1) and eval_every must be positive"
        );
        ensure!(
            (0.0..1.0).contains(&o.warmup_ratio)
                && o.reg_weight >= 0.0
                && o.cls_weight >= 0.0
                && o.reg_weight + o.cls_weight > 0.0
                && o.noise >= 0.0,
            "[optim] warmup_ratio must be in [0, 1), reg_weight, cls_weight (not both 0) and noise non-negative"
        );
        Ok(())
    }
}
