//! `manifest.json` of a datagen run directory: the full config, the models and the prompt set
//! with checksums, the split, seeds, counts, and every shard with its files' checksums.

use crate::config::DatagenConfig;
use crate::labels::LabelStats;
use crate::shard::ShardRecord;
use anyhow::{bail, Context, Result};
use serde::{Deserialize, Serialize};
use specx_decoder::fsutil::write_atomic;
use std::path::{Path, PathBuf};

pub const MANIFEST: &str = "manifest.json";
pub const PROMPT_LIST: &str = "prompts.json";
/// 2: shards carry a prompt table and features only when stored (1 had no prompt table).
pub const FORMAT: &str = "specx-datagen/2";

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ModelRecord {
    pub path: PathBuf,
    pub format: String,
    /// [`specx_decoder::LoadedModel::weights_sha256`]: what a head checkpoint must match.
    pub sha256: String,
    pub files: Vec<PathBuf>,
    pub tokenizer_sha256: String,
    pub architecture: String,
    pub hidden_size: usize,
    pub layers: usize,
    pub vocab_size: usize,
    /// The transform the model ran with ([`specx_decoder::DraftTransform::identity`]):
    /// `none` for a model as loaded (and every run made before transforms existed).
    #[serde(default = "no_transform")]
    pub transform: String,
}

fn no_transform() -> String {
    "none".into()
}

impl ModelRecord {
    /// What the model's outputs depend on: its weights' sha256, and its transform when it has
    /// one (hashed together). Keys the feature caches of a run.
    pub fn weights_key(&self) -> String {
        if self.transform == "none" { self.sha256.clone() } else { specx_decoder::fsutil::sha256_hex(format!("{} {}", self.sha256, self.transform).as_bytes()) }
    }
}

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

/// Which part of a `--shard i/n` run a directory holds.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Part {
    pub index: usize,
    pub count: usize,
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

impl Manifest {
    /// What must agree for two directories to hold parts of the same dataset (or for a run to
    /// resume into an existing directory): the settings and the checksums of the models, the
    /// tokenizers and the prompts. Not where files live (a moved project or a part made on
    /// another machine still matches), which part it is, or what has been written so far.
    pub fn identity(&self) -> serde_json::Value {
        serde_json::json!({
            "format": self.format,
            "config": config_identity(&self.config),
            "draft": self.draft.sha256, "draft_tokenizer": self.draft.tokenizer_sha256, "draft_transform": self.draft.transform,
            "target": self.target.sha256, "target_tokenizer": self.target.tokenizer_sha256,
            "prompts": self.prompts.sha256, "prompt_list": self.prompts.prompt_list_sha256,
            "shard_count": self.shard_count,
        })
    }

    pub fn read(dir: &Path) -> Result<Self> {
        let p = dir.join(MANIFEST);
        let bytes = std::fs::read(&p).with_context(|| format!("reading {} (is {} a datagen run directory?)", p.display(), dir.display()))?;
        let mut m: Self = serde_json::from_slice(&bytes).with_context(|| format!("{}: malformed manifest", p.display()))?;
        if m.format != FORMAT {
            bail!("{}: format '{}', this specx reads '{FORMAT}'", p.display(), m.format);
        }
        m.config.resolve(dir);
        Ok(m)
    }

    /// Writes the manifest with the config's model and prompt paths relative to the caches
    /// (see [`DatagenConfig::portable`]), so a committed run names the same files on another
    /// machine; [`Self::read`] resolves them again.
    pub fn write(&self, dir: &Path) -> Result<()> {
        let portable = Self { config: self.config.portable(), ..self.clone() };
        write_atomic(&dir.join(MANIFEST), serde_json::to_string_pretty(&portable)?.as_bytes())
    }

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

/// Refuses to write into `dir` when it holds a run of another setup (`old` vs `new`
/// identities) or another part of a sharded run.
pub fn ensure_same_setup(dir: &Path, what: &str, old: &serde_json::Value, new: &serde_json::Value, old_part: Option<Part>, new_part: Option<Part>) -> Result<()> {
    if old != new || old_part != new_part {
        bail!(
            "{} holds {what} with a different setup ({} differs{}); choose another output directory or delete it",
            dir.display(),
            identity_difference(old, new),
            if old_part != new_part { format!(", part {old_part:?} vs {new_part:?}") } else { String::new() }
        );
    }
    Ok(())
}

/// Names the first difference between two identities (a dotted key path, with both values
/// where they are not objects), for error messages.
pub fn identity_difference(a: &serde_json::Value, b: &serde_json::Value) -> String {
    fn walk(a: &serde_json::Value, b: &serde_json::Value, path: &str) -> Option<String> {
        match (a, b) {
            (serde_json::Value::Object(x), serde_json::Value::Object(y)) => {
                let keys: std::collections::BTreeSet<&String> = x.keys().chain(y.keys()).collect();
                keys.into_iter().find_map(|k| match (x.get(k), y.get(k)) {
                    (Some(u), Some(v)) => walk(u, v, &format!("{path}.{k}")),
                    _ => Some(format!("{path}.{k}")),
                })
            }
            _ if a != b => Some(format!("{} ({} vs {})", path.trim_start_matches('.'), a, b)),
            _ => None,
        }
    }
    walk(a, b, "").unwrap_or_else(|| "nothing".into())
}
