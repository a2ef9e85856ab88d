//! The datagen experiment config (TOML). Unknown keys are errors, so a typo never silently
//! falls back to a default; paths are read as [`specx_run::paths`] says.

use anyhow::{Context, Result, bail, ensure};
use serde::{Deserialize, Serialize};
use specx_decoder::SamplingConfig;
use specx_prompts::PromptsConfig;
use specx_run::config::parse_toml;
use specx_run::paths::{portable_path, resolve_path};
use std::path::{Path, PathBuf};

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DatagenConfig {
    pub models: ModelsConfig,
    pub prompts: PromptsConfig,
    #[serde(default)]
    pub generation: GenerationConfig,
    #[serde(default)]
    pub labels: LabelsConfig,
    #[serde(default)]
    pub mixing: MixingConfig,
    pub output: OutputConfig,
    /// Seed of every random stream (target sampling, draft sampling, mixing); each prompt's
    /// streams are derived from it and the prompt id.
    #[serde(default)]
    pub seed: u64,
    /// The job array `specx slurm datagen` submits (not part of the run's identity).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub slurm: Option<specx_run::slurm::SlurmConfig>,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ModelsConfig {
    /// Draft model: a GGUF file or an HF directory.
    pub draft: PathBuf,
    pub target: PathBuf,
    /// tokenizer.json to use with the draft instead of its own (the tokenizer.json beside it,
    /// or a GGUF's metadata): for an HF directory without one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub draft_tokenizer: Option<PathBuf>,
    /// tokenizer.json to use with the target instead of its own.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub target_tokenizer: Option<PathBuf>,
    /// `cpu`, `wgpu[:N]` (a Vulkan adapter; build with `--features wgpu`) or `cuda[:N]`; several
    /// joined by `+` split the target's layers over them, the draft on the first.
    #[serde(default = "default_device")]
    pub device: String,
    /// Several devices at once (`["cpu", "wgpu:0"]`): the run is split into one part per
    /// device (part i of N on the i-th, in OUTPUT/parts/i), the parts run side by side in one
    /// process and are merged into the run directory. Replaces `device`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub devices: Vec<String>,
    /// GGUF weights (on a GPU `q8` and `native` both keep the blocks on the device): `q8` (the
    /// default: on the CPU integer dot products on 8-bit activations),
    /// `native` (kept in their block formats, decoded in the kernel) or `f32` (dequantized on
    /// load; the same data as `native` bit for bit). `q8` gives other numbers, so a run never
    /// resumes or merges across it.
    #[serde(default)]
    pub weights: specx_decoder::WeightMode,
    /// A cheaper draft (`{ vocab = 32768, weights = "q4_0" }`, see `specx decode
    /// --draft-vocab/--draft-weights`): the data, and a head trained on it, then belong to that
    /// draft, and are refused with another.
    #[serde(default, skip_serializing_if = "specx_decoder::DraftTransform::is_identity")]
    pub draft_transform: specx_decoder::DraftTransform,
}

fn default_device() -> String {
    "cpu".into()
}

/// How the target writes the responses X.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct GenerationConfig {
    #[serde(default = "default_max_new")]
    pub max_new_tokens: usize,
    #[serde(default = "one")]
    pub temperature: f32,
    pub top_k: Option<usize>,
    pub top_p: Option<f32>,
    /// Prompts generated together (one pass over the weights serves all of them).
    #[serde(default = "default_batch")]
    pub batch_size: usize,
}

fn default_max_new() -> usize {
    512
}
fn one() -> f32 {
    1.0
}
fn default_batch() -> usize {
    16
}

impl Default for GenerationConfig {
    fn default() -> Self {
        Self {
            max_new_tokens: default_max_new(),
            temperature: 1.0,
            top_k: None,
            top_p: None,
            batch_size: default_batch(),
        }
    }
}

impl GenerationConfig {
    pub fn sampling(&self) -> SamplingConfig {
        SamplingConfig { temperature: self.temperature, top_k: self.top_k, top_p: self.top_p }
    }
}

/// The distributions the labels compare. Both p and q are warped by these settings before
/// `min(1, p(Y)/q(Y))`, and Y is drawn from the warped q: set them to the evaluation's
/// sampling settings to label exactly what the verifier will do. The official SpecDec++ code
/// labels at temperature 1 without cuts (the default here).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LabelsConfig {
    #[serde(default = "one")]
    pub temperature: f32,
    pub top_k: Option<usize>,
    pub top_p: Option<f32>,
}

impl Default for LabelsConfig {
    fn default() -> Self {
        Self { temperature: 1.0, top_k: None, top_p: None }
    }
}

impl LabelsConfig {
    pub fn sampling(&self) -> SamplingConfig {
        SamplingConfig { temperature: self.temperature, top_k: self.top_k, top_p: self.top_p }
    }
}

/// Token mixing (SpecDec++ §4.4): Z_i = X_i with probability `target_ratio`, else Y_i.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct MixingConfig {
    #[serde(default = "default_ratio")]
    pub target_ratio: f64,
    /// Independent mixing draws per prompt, each with its own draft pass and features.
    #[serde(default = "one_usize")]
    pub draws: usize,
}

fn default_ratio() -> f64 {
    0.15
}
fn one_usize() -> usize {
    1
}

impl Default for MixingConfig {
    fn default() -> Self {
        Self { target_ratio: default_ratio(), draws: 1 }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum FeatureDtype {
    F16,
    F32,
}

/// Whether a shard carries the draft's hidden states.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum FeatureStorage {
    /// In the shard (`features-*.safetensors`, ~1.8 KB per labelled row in f16 for the 0.5B
    /// draft: ~0.3 GB per 1,000 prompts).
    #[default]
    Store,
    /// Not at all: the draft recomputes them from the shard's token ids when a head is trained
    /// (one forward per prompt, cached locally). Shards are then ~3 KB per prompt, small
    /// enough to commit, and generation skips the draft's Z streams.
    Recompute,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct OutputConfig {
    /// The run directory.
    pub dir: PathBuf,
    #[serde(default)]
    pub features: FeatureStorage,
    /// Precision of stored features.
    #[serde(default = "default_dtype")]
    pub features_dtype: FeatureDtype,
    /// Prompts per shard: the unit of resuming and of `--shard i/n`.
    #[serde(default = "default_shard_size")]
    pub prompts_per_shard: usize,
}

fn default_dtype() -> FeatureDtype {
    FeatureDtype::F16
}
fn default_shard_size() -> usize {
    32
}

impl specx_run::RunConfig for DatagenConfig {
    /// Makes every path absolute (against `base`).
    fn resolve(&mut self, base: &Path) {
        self.models.draft = resolve_path(&self.models.draft, base);
        self.models.target = resolve_path(&self.models.target, base);
        for t in self.models.draft_tokenizer.iter_mut().chain(self.models.target_tokenizer.iter_mut()) {
            *t = resolve_path(t, base);
        }
        self.prompts.path = resolve_path(&self.prompts.path, base);
        self.output.dir = resolve_path(&self.output.dir, base);
        if let Some(t) = &mut self.models.draft_transform.vocab_table {
            *t = resolve_path(t, base);
        }
    }

    /// The config with its model and prompt paths written relative to the caches (see
    /// [`portable_path`]): what a manifest records.
    fn portable(&self) -> Self {
        let mut c = self.clone();
        c.models.draft = portable_path(&c.models.draft);
        c.models.target = portable_path(&c.models.target);
        for t in c.models.draft_tokenizer.iter_mut().chain(c.models.target_tokenizer.iter_mut()) {
            *t = portable_path(t);
        }
        c.prompts.path = portable_path(&c.prompts.path);
        c
    }

    fn devices(&self) -> &[String] {
        &self.models.devices
    }
}

impl DatagenConfig {
    /// Parses a config; errors name the file and, for unknown keys, the key.
    pub fn parse(text: &str, origin: &Path) -> Result<Self> {
        parse_toml(text, origin)
    }

    /// Reads `path` and resolves its relative paths against the file's directory.
    pub fn load(path: &Path) -> Result<Self> {
        specx_run::config::load_config(path)
    }

    /// Range checks that serde cannot express.
    pub fn validate(&self) -> Result<()> {
        self.models.device.parse::<specx_decoder::Placement>().and_then(|p| p.check()).context("[models] device")?;
        if !self.models.devices.is_empty() {
            let devices = specx_decoder::parse_device_list(&self.models.devices).context("[models] devices")?;
            devices.into_iter().try_for_each(specx_decoder::check_device).context("[models] devices")?;
        }
        for (key, path) in
            [("draft_tokenizer", &self.models.draft_tokenizer), ("target_tokenizer", &self.models.target_tokenizer)]
        {
            if let Some(p) = path {
                ensure!(p.is_file(), "[models] {key} {} is not a file", p.display());
            }
        }
        self.generation.sampling().validate().context("[generation]")?;
        self.labels.sampling().validate().context("[labels]")?;
        let g = &self.generation;
        if g.max_new_tokens == 0 || g.batch_size == 0 {
            bail!("[generation] max_new_tokens and batch_size must be at least 1");
        }
        let m = &self.mixing;
        if !(0.0..=1.0).contains(&m.target_ratio) || m.draws == 0 {
            bail!("[mixing] target_ratio must be in [0, 1] and draws >= 1 (got {} and {})", m.target_ratio, m.draws);
        }
        if self.output.prompts_per_shard == 0 {
            bail!("[output] prompts_per_shard must be at least 1");
        }
        if self.prompts.limit == Some(0) {
            bail!("[prompts] limit = 0 selects no prompts");
        }
        self.prompts.chat()?;
        Ok(())
    }

    /// The config as TOML (what a manifest records, and what reproduces the run).
    pub fn to_toml(&self) -> String {
        toml::to_string(self).expect("a config always serialises")
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use specx_run::RunConfig;

    const MINIMAL: &str = r#"
seed = 3
[models]
draft = "d.gguf"
target = "$SPECX_MODELS/t.gguf"
[prompts]
format = "alpaca"
path = "a.json"
[output]
dir = "out"
"#;

    #[test]
    fn defaults_follow_the_paper_and_paths_resolve() {
        let mut c = DatagenConfig::parse(MINIMAL, Path::new("x.toml")).unwrap();
        c.resolve(Path::new("/base"));
        assert_eq!(c.mixing.target_ratio, 0.15);
        assert_eq!(c.generation.max_new_tokens, 512);
        assert_eq!(c.labels.temperature, 1.0);
        assert_eq!(c.models.draft, PathBuf::from("/base/d.gguf"));
        let portable = c.portable();
        assert_eq!(portable.models.target, PathBuf::from("$SPECX_MODELS/t.gguf"));
        assert_eq!(resolve_path(&portable.models.target, Path::new("/elsewhere")), c.models.target);
        assert_eq!(portable.models.draft, c.models.draft);
        assert!(c.models.target.ends_with("t.gguf") && c.models.target.is_absolute());
        c.validate().unwrap();
        let again = DatagenConfig::parse(&c.to_toml(), Path::new("y.toml")).unwrap();
        assert_eq!(again, c);
    }

    #[test]
    fn unknown_keys_and_bad_values_are_named() {
        let typo = MINIMAL.replace("[output]", "[mixing]\ntarget_ration = 0.2\n[output]");
        let e = format!("{:#}", DatagenConfig::parse(&typo, Path::new("cfg.toml")).unwrap_err());
        assert!(e.contains("cfg.toml") && e.contains("target_ration"), "{e}");
        let bad = MINIMAL.replace("[output]", "[mixing]\ntarget_ratio = 1.5\n[output]");
        assert!(DatagenConfig::parse(&bad, Path::new("c")).unwrap().validate().is_err());
        let chat = MINIMAL.replace("path = \"a.json\"", "path = \"a.json\"\nchat_template = \"llama9\"");
        assert!(
            format!("{:#}", DatagenConfig::parse(&chat, Path::new("c")).unwrap().validate().unwrap_err())
                .contains("llama9")
        );
    }
}
