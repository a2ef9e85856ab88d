//! `manifest.json` of an eval run directory: the effective config, checksums of everything
//! that determines the results (models, heads, prompt files, the selected prompt ids), the
//! machine, and progress.

use super::config::EvalConfig;
pub use crate::common::machine::Machine;
use serde::{Deserialize, Serialize};
pub use specx_run::manifest::MANIFEST;
use specx_run::{ModelRecord, Part, RunManifest};
use std::path::PathBuf;
pub const FORMAT: &str = "specx-eval/1";

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct HeadRecord {
    pub name: String,
    pub path: PathBuf,
    /// sha256 of `head.safetensors`.
    pub sha256: String,
    pub depth: usize,
    pub tied: bool,
    pub draft_model_sha256: Option<String>,
    /// The draft transform the head was trained with (absent: the draft as loaded).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub draft_transform: Option<String>,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct PromptSetRecord {
    pub name: String,
    pub path: PathBuf,
    pub sha256: String,
    pub rows_in_file: usize,
    /// Ids of the selected prompts, in run order.
    pub selected: Vec<String>,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct EvalManifest {
    pub format: String,
    pub specx_version: String,
    pub config: EvalConfig,
    pub draft: ModelRecord,
    pub target: ModelRecord,
    pub heads: Vec<HeadRecord>,
    /// The cheaper drafts the methods ran: label (as in method names) and identity
    /// ([`specx_decoder::DraftTransform::identity`]: the table by its sha256).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub draft_transforms: Vec<(String, String)>,
    /// The feature heads the methods drafted with: name (as in method names) and the sha256
    /// of its `feature-head.safetensors`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub feature_heads: Vec<(String, String)>,
    /// End-of-sequence ids the runs stopped at (the target's), for replays.
    pub eos_ids: Vec<u32>,
    pub prompt_sets: Vec<PromptSetRecord>,
    /// Method settings in run order (AR first).
    pub settings: Vec<String>,
    pub machine: Machine,
    /// None for a whole run or a merged one.
    pub part: Option<Part>,
    pub units_total: usize,
    /// Units of this directory's part that are finished.
    pub units_done: usize,
    pub complete: bool,
    /// Wall time of the evaluating process(es), seconds.
    pub seconds: f64,
}

impl RunManifest for EvalManifest {
    const FORMAT: &'static str = FORMAT;
    const KIND: &'static str = "an eval run directory";

    type Config = EvalConfig;

    fn format(&self) -> &str {
        &self.format
    }

    fn config(&self) -> &EvalConfig {
        &self.config
    }

    fn config_mut(&mut self) -> &mut EvalConfig {
        &mut self.config
    }

    /// Settings and checksums, not where files live or the machine.
    fn identity(&self) -> serde_json::Value {
        serde_json::json!({
            "format": self.format,
            "config": config_identity(&self.config),
            "draft": self.draft.sha256, "target": self.target.sha256,
            "tokenizer": self.target.tokenizer_sha256,
            "heads": self.heads.iter().map(|h| (&h.name, &h.sha256)).collect::<Vec<_>>(),
            "draft_transforms": self.draft_transforms,
            "prompt_sets": self.prompt_sets.iter().map(|p| (&p.name, &p.sha256, &p.selected)).collect::<Vec<_>>(),
            "settings": self.settings,
        })
    }

    fn part(&self) -> Option<Part> {
        self.part
    }

    fn complete(&self) -> bool {
        self.complete
    }

    fn progress(&self) -> String {
        format!("{} of its units done", self.units_done)
    }
}

/// The part of a run's identity that its config decides: the config without where files
/// live, how rows are judged and `[slurm]` (with what resources it ran). Two parts whose
/// configs differ here cannot merge, whatever their models.
pub fn config_identity(config: &EvalConfig) -> serde_json::Value {
    let mut c = config.clone();
    c.output.dir = PathBuf::new();
    c.audit = Default::default(); // how rows are judged, not how they were computed
    c.slurm = None; // where and with what resources, not what
    c.models.draft = PathBuf::new();
    c.models.target = PathBuf::new();
    // Tokenizers enter by content (the models' records), not where they live.
    c.models.draft_tokenizer = None;
    c.models.target_tokenizer = None;
    for p in &mut c.prompts {
        p.path = PathBuf::new();
    }
    if let Some(g) = &mut c.methods.specdecpp {
        g.heads.iter_mut().for_each(|h| *h = PathBuf::from(crate::method::head_name(h)));
    }
    // A table enters by its content (draft_transforms), not where it lives.
    let drafts = c.methods.drafts.iter_mut().chain(c.methods.grid.iter_mut().flat_map(|g| g.drafts.iter_mut()));
    for t in drafts.filter_map(|d| d.vocab_table.as_mut()) {
        *t = t.file_name().map(PathBuf::from).unwrap_or_default();
    }
    serde_json::to_value(c).expect("a config always serialises")
}
