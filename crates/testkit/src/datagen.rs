//! A datagen run of the repository's tiny config (`configs/datagen-tiny.toml`) on a pair.

use crate::paths::configs;
use specx_datagen::cli::{DatagenArgs, effective_config};
use specx_datagen::config::FeatureStorage;
use specx_datagen::manifest::Manifest;
use specx_datagen::{RunOptions, run};
use std::path::{Path, PathBuf};

/// What to run: `limit` prompts of `split`, `max_new_tokens` each, `per_shard` prompts per
/// shard, stopping after `max_shards` new shards when given, features stored as `features`
/// says (the config's choice when not given).
#[derive(Clone, Debug)]
pub struct TinyDatagen {
    pub draft: PathBuf,
    pub target: PathBuf,
    pub split: String,
    pub limit: usize,
    pub max_new_tokens: usize,
    pub per_shard: usize,
    pub max_shards: Option<usize>,
    pub features: Option<FeatureStorage>,
}

impl TinyDatagen {
    /// 6 prompts of `split`, 16 new tokens each, 5 per shard.
    pub fn new(draft: &Path, target: &Path, split: &str) -> Self {
        Self {
            draft: draft.to_path_buf(),
            target: target.to_path_buf(),
            split: split.into(),
            limit: 6,
            max_new_tokens: 16,
            per_shard: 5,
            max_shards: None,
            features: None,
        }
    }

    /// Runs it into `out`.
    pub fn run(&self, out: &Path) -> Manifest {
        let args = DatagenArgs {
            run: specx_run::RunArgs {
                config: Some(configs().join("datagen-tiny.toml")),
                out: Some(out.to_path_buf()),
                limit: Some(self.limit),
                no_progress: true,
                ..Default::default()
            },
            max_new_tokens: Some(self.max_new_tokens),
            draft: Some(self.draft.clone()),
            target: Some(self.target.clone()),
            ..Default::default()
        };
        let mut cfg = effective_config(&args).unwrap();
        cfg.prompts.split = self.split.clone();
        cfg.output.prompts_per_shard = self.per_shard;
        if let Some(f) = self.features {
            cfg.output.features = f;
        }
        run(&cfg, &RunOptions { max_new_shards: self.max_shards, ..Default::default() }).unwrap()
    }
}
