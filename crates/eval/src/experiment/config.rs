//! The eval experiment config (TOML): models, prompt sets, sampling settings, the response
//! budget, seeds and the grid of methods. Unknown keys are errors naming the file; relative
//! paths are relative to the config file (`$SPECX_MODELS`, `$SPECX_DATASETS` and `~` expand).

use super::methods::MethodsConfig;
use anyhow::{Context, Result, bail, ensure};
use serde::{Deserialize, Serialize};
use specx_decoder::coupling::Draws;
use specx_decoder::{SamplingConfig, WeightMode};
use specx_prompts::PromptFormat;
use specx_prompts::PromptsConfig;
use specx_run::config::parse_toml;
use specx_run::paths::{portable_path, resolve_path};
use std::path::{Path, PathBuf};

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct EvalConfig {
    pub models: ModelsConfig,
    /// One or more prompt sets (`[[prompts]]`).
    pub prompts: Vec<PromptSetConfig>,
    /// One or more sampling settings (`[[sampling]]`); greedy if none is given.
    #[serde(default = "greedy_only")]
    pub sampling: Vec<SamplingSetting>,
    #[serde(default)]
    pub budget: BudgetConfig,
    /// Seeds of the sampling streams; each (prompt, sampling setting) runs once per seed.
    /// Greedy settings run once (the seed cannot change them).
    #[serde(default = "seed_zero")]
    pub seeds: Vec<u64>,
    #[serde(default)]
    pub methods: MethodsConfig,
    /// How the losslessness audit judges greedy outputs that differ from AR's.
    #[serde(default)]
    pub audit: AuditConfig,
    pub output: OutputConfig,
    /// The job array `specx slurm eval` submits (not part of the run's identity).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub slurm: Option<specx_run::slurm::SlurmConfig>,
}

/// How the losslessness audit judges a greedy speculative output that differs from AR's.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AuditConfig {
    /// `exact` (the default, right for the CPU, whose kernels are row-invariant): every
    /// difference fails the run. `numerical` (for devices whose matmuls round differently for
    /// K+1 rows than for one): a difference whose first departure is a near-tie of the target
    /// (|logit margin| <= `near_tie`) is reported as numerical, not as a failure.
    #[serde(default)]
    pub mode: AuditMode,
    /// Largest |logit margin| a `numerical` audit accepts as a near-tie.
    #[serde(default = "default_near_tie")]
    pub near_tie: f32,
}

impl Default for AuditConfig {
    fn default() -> Self {
        Self { mode: AuditMode::default(), near_tie: default_near_tie() }
    }
}

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize, clap::ValueEnum)]
#[serde(rename_all = "lowercase")]
pub enum AuditMode {
    #[default]
    Exact,
    Numerical,
}

impl ModelsConfig {
    /// The tokenizer overrides that are set, by key.
    pub fn tokenizers(&self) -> impl Iterator<Item = (&'static str, &PathBuf)> {
        [("draft_tokenizer", &self.draft_tokenizer), ("target_tokenizer", &self.target_tokenizer)]
            .into_iter()
            .filter_map(|(k, p)| Some((k, p.as_ref()?)))
    }

    fn tokenizers_mut(&mut self) -> impl Iterator<Item = &mut PathBuf> {
        self.draft_tokenizer.iter_mut().chain(self.target_tokenizer.iter_mut())
    }
}

fn default_near_tie() -> f32 {
    0.01
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ModelsConfig {
    pub draft: PathBuf,
    pub target: PathBuf,
    /// tokenizer.json to use with the draft instead of its own (the tokenizer.json beside it,
    /// or a GGUF's metadata): for an HF directory without one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub draft_tokenizer: Option<PathBuf>,
    /// tokenizer.json to use with the target instead of its own.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub target_tokenizer: Option<PathBuf>,
    /// `cpu`, `wgpu[:N]` (a Vulkan adapter, in a build with the `wgpu` feature) or `cuda[:N]`
    /// (the `cuda` feature); several joined by `+` (`cuda:0+cuda:1`) split the target's layers
    /// over them in contiguous ranges, the draft on the first.
    #[serde(default = "cpu")]
    pub device: String,
    /// Several devices at once (`["cpu", "wgpu:0"]`): the units are split into one part per
    /// device (part i of N on the i-th, in OUTPUT/parts/i), the parts run side by side in one
    /// process and are merged into the run directory. Replaces `device`. Speedups stay
    /// per-unit ratios on one device; wall times then mix devices.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub devices: Vec<String>,
    /// GGUF weights: `q8` (the default: on the CPU 8-bit activations, integer dot products),
    /// `native` (exact, bit-identical to `f32` on the CPU) or `f32`. On a GPU `q8` and
    /// `native` both keep the blocks on the device.
    #[serde(default)]
    pub weights: WeightMode,
}

/// A prompt set: a file in a standard format, a split of it, a seeded sample of that, and the
/// templates that turn a row into model input.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PromptSetConfig {
    /// Short name used in results and plots (`alpaca`, `gsm8k`, `humaneval`).
    pub name: String,
    pub format: PromptFormat,
    pub path: PathBuf,
    /// `all`, or a part of the seeded split (`train`, `dev`, `test`) given by `split_sizes`.
    #[serde(default = "all")]
    pub split: String,
    #[serde(default)]
    pub split_sizes: Vec<usize>,
    #[serde(default)]
    pub split_seed: u64,
    /// Leave out the split's first this many prompts (in the order a run takes them), before
    /// sampling: the part of a set that another run already holds, such as HumanEval's
    /// problems past those of the committed test traces.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub skip: usize,
    /// A seeded random sample of this many prompts from the split (all of them if absent).
    pub sample: Option<usize>,
    #[serde(default)]
    pub sample_seed: u64,
    /// Instruction template with `{field}` placeholders; the format's default if absent.
    pub template: Option<String>,
    /// `qwen` (ChatML with Qwen's system prompt), `chatml` or `none`.
    #[serde(default = "qwen")]
    pub chat_template: String,
    /// A set the run can go without: when its file is missing, the run leaves it out and says
    /// so, instead of failing (configs meant for any machine, such as the smoke config, whose
    /// Alpaca and GSM8K files a machine may not be able to fetch). A required set that is
    /// missing stays an error.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub optional: bool,
}

fn is_zero(n: &usize) -> bool {
    *n == 0
}

impl PromptSetConfig {
    /// Whether the set's file can be read on this machine (a path that exists, or a hub id
    /// found in the Hugging Face cache).
    pub fn available(&self) -> bool {
        if specx_decoder::hub::is_hub_id(&self.path) {
            specx_decoder::hub::resolve(&self.path).is_ok()
        } else {
            self.path.is_file()
        }
    }

    /// The datagen selection this set starts from (the whole split; sampling comes after).
    pub fn as_prompts_config(&self) -> PromptsConfig {
        PromptsConfig {
            format: self.format,
            path: self.path.clone(),
            split: self.split.clone(),
            split_sizes: self.split_sizes.clone(),
            split_seed: self.split_seed,
            limit: None,
            template: self.template.clone(),
            chat_template: self.chat_template.clone(),
        }
    }
}

/// A named sampling setting.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SamplingSetting {
    pub name: String,
    /// 0 means greedy.
    #[serde(default)]
    pub temperature: f32,
    pub top_k: Option<usize>,
    pub top_p: Option<f32>,
    /// How sampled tokens are drawn: `independent` (rejection sampling, the papers'
    /// acceptance; the default) or `coupled` (one Gumbel noise per position shared by draft and
    /// target: every method commits the AR output, so a sampled run replays for any stop rule).
    #[serde(default, skip_serializing_if = "Draws::is_independent")]
    pub draws: Draws,
}

impl SamplingSetting {
    pub fn config(&self) -> SamplingConfig {
        SamplingConfig { temperature: self.temperature, top_k: self.top_k, top_p: self.top_p }
    }
}

/// How long responses may get: `max_new_tokens`, or the SpecDec++ paper's total length
/// (prompt + response) `max_total_tokens`; with both, the smaller budget applies.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct BudgetConfig {
    pub max_new_tokens: Option<usize>,
    pub max_total_tokens: Option<usize>,
}

impl Default for BudgetConfig {
    fn default() -> Self {
        Self { max_new_tokens: Some(128), max_total_tokens: None }
    }
}

impl BudgetConfig {
    /// New tokens allowed after a prompt of `prompt_len` tokens.
    pub fn new_tokens(&self, prompt_len: usize) -> usize {
        let by_total = self.max_total_tokens.map(|t| t.saturating_sub(prompt_len));
        match (self.max_new_tokens, by_total) {
            (Some(a), Some(b)) => a.min(b),
            (Some(a), None) => a,
            (None, Some(b)) => b,
            (None, None) => 128,
        }
    }
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct OutputConfig {
    /// The run directory (`--out` overrides it).
    pub dir: PathBuf,
}

fn greedy_only() -> Vec<SamplingSetting> {
    vec![SamplingSetting {
        name: "greedy".into(),
        temperature: 0.0,
        top_k: None,
        top_p: None,
        draws: Draws::Independent,
    }]
}
fn seed_zero() -> Vec<u64> {
    vec![0]
}
fn cpu() -> String {
    "cpu".into()
}
fn all() -> String {
    "all".into()
}
fn qwen() -> String {
    "qwen".into()
}

impl specx_run::RunConfig for EvalConfig {
    fn resolve(&mut self, base: &Path) {
        self.models.draft = resolve_path(&self.models.draft, base);
        self.models.target = resolve_path(&self.models.target, base);
        for t in self.models.tokenizers_mut() {
            *t = resolve_path(t, base);
        }
        for p in &mut self.prompts {
            p.path = resolve_path(&p.path, base);
        }
        for p in self.methods.paths_mut() {
            *p = resolve_path(p, base);
        }
        if let Some(p) = self.methods.dsi.as_mut().and_then(|g| g.profile.as_mut()) {
            *p = resolve_path(p, base);
        }
        let drafts =
            self.methods.drafts.iter_mut().chain(self.methods.grid.iter_mut().flat_map(|g| g.drafts.iter_mut()));
        for table in drafts.filter_map(|d| d.vocab_table.as_mut()) {
            *table = resolve_path(table, base);
        }
        self.output.dir = resolve_path(&self.output.dir, base);
    }

    /// The config with its model and prompt-file paths written relative to the caches
    /// (`$SPECX_MODELS/...`, `$SPECX_DATASETS/...`): what a manifest records, so that a run
    /// directory committed on one machine names the same files on another ([`Self::resolve`]
    /// undoes it).
    fn portable(&self) -> Self {
        let mut c = self.clone();
        c.models.draft = portable_path(&c.models.draft);
        c.models.target = portable_path(&c.models.target);
        for t in c.models.tokenizers_mut() {
            *t = portable_path(t);
        }
        for p in &mut c.prompts {
            p.path = portable_path(&p.path);
        }
        c
    }

    fn devices(&self) -> &[String] {
        &self.models.devices
    }
}

impl EvalConfig {
    pub fn parse(text: &str, origin: &Path) -> Result<Self> {
        parse_toml(text, origin)
    }

    /// Reads `path`, resolves its paths against the file's directory and checks it.
    pub fn load(path: &Path) -> Result<Self> {
        let cfg: Self = specx_run::config::load_config(path)?;
        cfg.validate().with_context(|| format!("config {}", path.display()))?;
        Ok(cfg)
    }

    /// What serde cannot check: ranges, unique names, and files that must exist (checked here,
    /// before any model is loaded).
    pub fn validate(&self) -> Result<()> {
        self.models.device.parse::<specx_decoder::Placement>().and_then(|p| p.check()).context("[models] device")?;
        if !self.models.devices.is_empty() {
            let devices = specx_decoder::parse_device_list(&self.models.devices).context("[models] devices")?;
            devices.into_iter().try_for_each(specx_decoder::check_device).context("[models] devices")?;
            let others = self.methods.dsi.as_ref().is_some_and(|g| !g.devices.is_empty())
                || self.methods.easyspec.as_ref().is_some_and(|g| !g.devices.is_empty());
            ensure!(
                !others,
                "[models] devices gives each part a device of its own: it cannot be combined with [methods.dsi] devices or [methods.easyspec] devices"
            );
        }
        ensure!(!self.prompts.is_empty(), "no [[prompts]] set");
        ensure!(!self.sampling.is_empty(), "no [[sampling]] setting");
        ensure!(!self.seeds.is_empty(), "seeds is empty");
        unique(self.prompts.iter().map(|p| p.name.as_str()), "[[prompts]] name")?;
        unique(self.sampling.iter().map(|s| s.name.as_str()), "[[sampling]] name")?;
        for p in &self.prompts {
            ensure!(
                !p.name.is_empty() && p.name.chars().all(|c| c.is_ascii_alphanumeric() || "-_.".contains(c)),
                "prompt set name '{}': use letters, digits, - _ .",
                p.name
            );
            // An optional set may be missing: a run leaves it out (`without_missing_optional_sets`).
            ensure!(
                p.optional || p.available(),
                "prompt set '{}': {} does not exist{}",
                p.name,
                p.path.display(),
                dataset_hint(&p.path)
            );
            ensure!(p.sample != Some(0), "prompt set '{}': sample = 0 selects no prompts", p.name);
            p.as_prompts_config().chat().with_context(|| format!("prompt set '{}'", p.name))?;
        }
        for s in &self.sampling {
            ensure!(
                !s.name.is_empty() && s.name.chars().all(|c| c.is_ascii_alphanumeric() || "-_.".contains(c)),
                "sampling name '{}': use letters, digits, - _ .",
                s.name
            );
            s.config().validate().with_context(|| format!("[[sampling]] '{}'", s.name))?;
        }
        ensure!(
            self.audit.near_tie.is_finite() && self.audit.near_tie >= 0.0,
            "[audit] near_tie must be a finite margin >= 0"
        );
        let b = &self.budget;
        ensure!(
            b.max_new_tokens.is_some() || b.max_total_tokens.is_some(),
            "[budget] needs max_new_tokens or max_total_tokens"
        );
        ensure!(b.max_new_tokens != Some(0) && b.max_total_tokens != Some(0), "[budget] limits must be at least 1");
        for (what, path) in [("draft", &self.models.draft), ("target", &self.models.target)] {
            if specx_decoder::hub::is_hub_id(path) {
                specx_decoder::hub::resolve(path).with_context(|| format!("[models] {what}"))?;
            } else {
                ensure!(
                    path.exists(),
                    "[models] {what} {} does not exist (scripts/fetch-models.sh fetches the Qwen pair)",
                    path.display()
                );
            }
        }
        for (key, path) in self.models.tokenizers() {
            ensure!(path.is_file(), "[models] {key} {} is not a file", path.display());
        }
        let m = &self.methods;
        m.validate()?;
        if let Some(b) = m.ar_batch {
            ensure!(b >= 1, "[methods] ar_batch must be at least 1");
            ensure!(
                m.specdec.is_none()
                    && m.specdecpp.is_none()
                    && m.confidence.is_none()
                    && m.dsi.is_none()
                    && m.easyspec.is_none()
                    && m.grid.is_empty(),
                "[methods] ar_batch makes a greedy trace run (AR only): remove the other methods, or run them in another config"
            );
            ensure!(
                self.sampling.iter().all(|s| s.config().is_greedy()),
                "[methods] ar_batch batches greedy AR only: every [[sampling]] setting must be greedy"
            );
        }
        Ok(())
    }

    pub fn to_toml(&self) -> String {
        toml::to_string(self).expect("a config always serialises")
    }
}

fn unique<'a>(names: impl Iterator<Item = &'a str>, what: &str) -> Result<()> {
    let mut seen = std::collections::BTreeSet::new();
    for n in names {
        if !seen.insert(n) {
            bail!("{what} '{n}' appears twice");
        }
    }
    Ok(())
}

/// How to get a missing prompt file that lives in the dataset cache.
/// An optional prompt set left out of a run because its file is missing.
#[derive(Clone, Debug, PartialEq)]
pub struct SkippedSet {
    pub name: String,
    pub path: PathBuf,
}

impl std::fmt::Display for SkippedSet {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "optional prompt set '{}' skipped: {} does not exist{}",
            self.name,
            self.path.display(),
            dataset_hint(&self.path)
        )
    }
}

impl EvalConfig {
    /// This config without the optional prompt sets whose files are missing, and those sets.
    /// Fails when no set is left, naming the ones skipped.
    pub fn without_missing_optional_sets(&self) -> Result<(Self, Vec<SkippedSet>)> {
        let (kept, skipped): (Vec<_>, Vec<_>) =
            self.prompts.iter().cloned().partition(|p| !p.optional || p.available());
        let skipped: Vec<SkippedSet> = skipped.into_iter().map(|p| SkippedSet { name: p.name, path: p.path }).collect();
        ensure!(
            !kept.is_empty() || skipped.is_empty(),
            "every prompt set is optional and missing: {}",
            skipped.iter().map(|s| s.to_string()).collect::<Vec<_>>().join("; ")
        );
        Ok((Self { prompts: kept, ..self.clone() }, skipped))
    }
}

fn dataset_hint(path: &Path) -> String {
    if path.starts_with(specx_run::paths::dataset_cache_dir()) {
        " (run scripts/fetch-datasets.sh to fill the dataset cache)".into()
    } else {
        String::new()
    }
}
