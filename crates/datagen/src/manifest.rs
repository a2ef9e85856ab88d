//! `manifest.json` of a datagen run directory: the full config, the models and the prompt set
//! with checksums, the split, seeds, counts, and every shard with its files' checksums.

use crate::config::DatagenConfig;
use crate::labels::LabelStats;
use crate::shard::ShardRecord;

use serde::{Deserialize, Serialize};
use specx_run::manifest::ModelRecord;
use specx_run::{Part, RunManifest};
use std::path::PathBuf;
pub const PROMPT_LIST: &str = "prompts.json";
/// 2: shards carry a prompt table and features only when stored (1 had no prompt table).
pub const FORMAT: &str = "specx-datagen/2";

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct PromptSetRecord {
    pub path: PathBuf,
    pub sha256: String,
    pub rows_in_file: usize,
    /// Split name, sizes and seed (also in the config; repeated with the outcome here).
    pub split: String,
    pub split_sizes: Vec<usize>,
    pub split_seed: u64,
    /// Prompts this run uses (after `limit`), listed in order in `prompts.json`.
    pub selected: usize,
    pub prompt_list_sha256: String,
    pub template: String,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Manifest {
    pub format: String,
    pub specx_version: String,
    pub config: DatagenConfig,
    pub draft: ModelRecord,
    pub target: ModelRecord,
    pub prompts: PromptSetRecord,
    /// None for a whole run (or a merged one).
    pub part: Option<Part>,
    /// Shards of the whole run (all parts).
    pub shard_count: usize,
    /// Shards present in this directory, by index.
    pub shards: Vec<ShardRecord>,
    pub hidden_size: usize,
    /// True when every shard this directory is responsible for is written.
    pub complete: bool,
    pub summary: LabelStats,
    /// Wall time of the generating process(es), seconds (not part of the data).
    pub seconds: f64,
}

impl RunManifest for Manifest {
    const FORMAT: &'static str = FORMAT;
    const KIND: &'static str = "a datagen run directory";

    type Config = DatagenConfig;

    fn format(&self) -> &str {
        &self.format
    }

    fn config(&self) -> &DatagenConfig {
        &self.config
    }

    fn config_mut(&mut self) -> &mut DatagenConfig {
        &mut self.config
    }

    /// What must agree for two directories to hold parts of the same dataset (or for a run to
    /// resume into an existing directory): the settings and the checksums of the models, the
    /// tokenizers and the prompts. Not where files live (a moved project or a part made on
    /// another machine still matches), which part it is, or what has been written so far.
    fn identity(&self) -> serde_json::Value {
        serde_json::json!({
            "format": self.format,
            "config": config_identity(&self.config),
            "draft": self.draft.sha256, "draft_tokenizer": self.draft.tokenizer_sha256, "draft_transform": self.draft.transform,
            "target": self.target.sha256, "target_tokenizer": self.target.tokenizer_sha256,
            "prompts": self.prompts.sha256, "prompt_list": self.prompts.prompt_list_sha256,
            "shard_count": self.shard_count,
        })
    }

    fn part(&self) -> Option<Part> {
        self.part
    }

    fn complete(&self) -> bool {
        self.complete
    }

    fn progress(&self) -> String {
        format!("{} shards written", self.shards.len())
    }
}

impl Manifest {
    /// Recomputes the summary from the shard records.
    pub fn refresh_summary(&mut self) {
        self.shards.sort_by_key(|s| s.index);
        let mut s = LabelStats::default();
        for sh in &self.shards {
            s.merge(&sh.stats);
        }
        self.summary = s;
    }
}

/// The part of a run's identity that its config decides: the config without where files
/// live and without `[slurm]` (with what resources it ran). Two parts whose configs differ
/// here cannot merge, whatever their models.
pub fn config_identity(config: &DatagenConfig) -> serde_json::Value {
    let mut c = config.clone();
    c.output.dir = PathBuf::new();
    c.models.draft = PathBuf::new();
    c.models.target = PathBuf::new();
    c.prompts.path = PathBuf::new();
    c.models.draft_transform.vocab_table = None;
    c.slurm = None;
    serde_json::to_value(c).expect("a config always serialises")
}
