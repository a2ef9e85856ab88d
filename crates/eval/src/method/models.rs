//! Loading what methods run on, one way for `specx eval` and `specx decode`: the pair on the
//! main device, DSI's target workers on their devices, EasySpec's draft with its attention
//! layers placed on devices, and the acceptance heads (each checked against the draft).

use super::build::RunModels;
use super::drafter::FeatureHeads;
use super::family::{DEFAULT_HEAD, head_name};
use super::policy::Heads;
use super::spec::{DrafterSpec, Setting};
use anyhow::{Context, Result, bail, ensure};
use specx_decoder::DraftTransform;
use specx_decoder::cheap_draft::check_same_transform;
use specx_decoder::fsutil::short_hash;
use specx_decoder::loader::model_cache_dir;
use specx_decoder::speculative::{AcceptanceHead, FeatureDraft};
use specx_decoder::{
    Device, DeviceName, LoadedModel, Placement, Transformer, WeightMode, load_model_as, load_model_split, open_device,
    pair_up,
};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// The model pair of a command that measures the pair (bench, profile, draft-cost, gpu-check),
/// defaulting to the fetched Qwen pair.
#[derive(clap::Args, Debug)]
pub struct PairArgs {
    /// Draft model (HF directory, .gguf, or hub id hf:ORG/NAME[@REV]). Default: the fetched Qwen2.5-Coder-0.5B-Instruct.
    #[arg(long)]
    pub draft: Option<PathBuf>,
    /// Target model (HF directory, .gguf, or hub id hf:ORG/NAME[@REV]). Default: the fetched Qwen2.5-Coder-1.5B-Instruct.
    #[arg(long)]
    pub target: Option<PathBuf>,
    /// tokenizer.json to use with the draft instead of its own (the tokenizer.json beside it,
    /// or a GGUF's metadata).
    #[arg(long)]
    pub draft_tokenizer: Option<PathBuf>,
    /// tokenizer.json to use with the target instead of its own.
    #[arg(long)]
    pub target_tokenizer: Option<PathBuf>,
}

impl PairArgs {
    /// (draft path, target path) with defaults applied.
    pub fn paths(&self) -> (PathBuf, PathBuf) {
        (self.draft.clone().unwrap_or_else(default_draft), self.target.clone().unwrap_or_else(default_target))
    }

    /// The (draft, target) tokenizer overrides.
    pub fn tokenizers(&self) -> (Option<&Path>, Option<&Path>) {
        (self.draft_tokenizer.as_deref(), self.target_tokenizer.as_deref())
    }
}

/// Default draft model path (Qwen2.5-Coder-0.5B-Instruct GGUF in the model cache).
pub fn default_draft() -> PathBuf {
    model_cache_dir().join("qwen2.5-coder-0.5b-instruct/model.gguf")
}

/// Default target model path (Qwen2.5-Coder-1.5B-Instruct Q4_K_M GGUF in the model cache).
pub fn default_target() -> PathBuf {
    model_cache_dir().join("qwen2.5-coder-1.5b-instruct/model.gguf")
}

/// What to load.
#[derive(Clone, Debug)]
pub struct ModelPlan {
    pub target: PathBuf,
    /// `None` when only AR runs.
    pub draft: Option<PathBuf>,
    /// tokenizer.json files to use instead of the models' own.
    pub target_tokenizer: Option<PathBuf>,
    pub draft_tokenizer: Option<PathBuf>,
    /// The target's placement (one device, or several its layers are split over); the draft
    /// and the heads go on its first device.
    pub device: Placement,
    pub weights: WeightMode,
    /// DSI's target workers, one placement each (a worker may span several devices), in worker
    /// order (the main placement's copy reused).
    pub worker_devices: Vec<Placement>,
    /// Devices of the EasySpec draft's attention layers (layer i on the (i mod N)-th): a copy
    /// of the draft placed so runs EasySpec's settings. Empty: EasySpec runs on `draft`.
    pub draft_devices: Vec<DeviceName>,
    /// Heads by name: a checkpoint directory, or `random[:SEED]` for an untrained head.
    pub heads: Vec<(String, String)>,
    /// Cheaper drafts the methods run (made from `draft` after loading); the draft as loaded
    /// needs no entry.
    pub drafts: Vec<DraftTransform>,
    /// Feature heads the methods draft with: a directory, or [`DEFAULT_HEAD`] for the shipped
    /// one (each checked against the target).
    pub feature_heads: Vec<String>,
}

/// The loaded models of a [`ModelPlan`].
pub struct Models {
    pub target: LoadedModel,
    pub draft: Option<LoadedModel>,
    /// The draft with its attention layers on `draft_devices`.
    pub placed_draft: Option<Transformer>,
    /// The target on each worker device; `None` where it is the main device.
    replicas: Vec<Option<LoadedModel>>,
    /// The cheaper drafts of [`ModelPlan::drafts`], with their identities.
    transformed: BTreeMap<DraftTransform, (Transformer, String)>,
    pub heads: Heads,
    pub feature_heads: FeatureHeads,
    /// The draft transform each head was trained with ([`DraftTransform::identity`]).
    head_drafts: BTreeMap<String, String>,
}

impl Models {
    pub fn load(plan: &ModelPlan) -> Result<Self> {
        let devices = plan.device.open()?;
        let device = devices[0].clone();
        let mut draft = match &plan.draft {
            Some(path) => {
                eprintln!("loading draft {} and target {}", path.display(), plan.target.display());
                Some(load_model_as(path, plan.draft_tokenizer.as_deref(), &device, plan.weights)?)
            }
            None => None,
        };
        if plan.device.is_split() {
            eprintln!("the target's layers split over {}", plan.device);
        }
        let target = load_model_split(&plan.target, plan.target_tokenizer.as_deref(), &devices, plan.weights)?;
        if let Some(d) = &mut draft {
            pair_up(d, &target)?;
        }
        let mut replicas = Vec::with_capacity(plan.worker_devices.len());
        for d in &plan.worker_devices {
            replicas.push(if *d == plan.device {
                None
            } else {
                eprintln!("loading the target on {d} for a DSI worker");
                Some(load_model_split(&plan.target, plan.target_tokenizer.as_deref(), &d.open()?, plan.weights)?)
            });
        }
        let placed_draft = match (&plan.draft, plan.draft_devices.is_empty()) {
            (Some(path), false) => {
                let devices = plan.draft_devices.iter().map(|&d| open_device(d)).collect::<Result<Vec<_>>>()?;
                let names: Vec<String> = plan.draft_devices.iter().map(|d| d.to_string()).collect();
                eprintln!("loading the draft with its attention layers on {} for EasySpec", names.join(", "));
                let placed = load_model_as(path, plan.draft_tokenizer.as_deref(), &device, plan.weights)?
                    .model
                    .place_attention(&devices)?;
                Some(placed.pad_vocab(target.model.config().vocab_size)?)
            }
            _ => None,
        };
        let mut transformed = BTreeMap::new();
        let wanted: std::collections::BTreeSet<&DraftTransform> =
            plan.drafts.iter().filter(|t| !t.is_identity()).collect();
        for t in wanted {
            let d = draft.as_ref().context("a cheaper draft is made from the draft model: a draft model is needed")?;
            ensure!(
                plan.draft_devices.is_empty(),
                "EasySpec's placed draft (--draft-devices) runs the draft as loaded: it cannot be combined with a cheaper draft ({})",
                t.label()
            );
            eprintln!("making the draft {}", t.label());
            transformed.insert(t.clone(), (t.apply(d.model.clone(), &d.tokenizer)?, t.identity()?));
        }
        let mut heads = Heads::new();
        let mut head_drafts = BTreeMap::new();
        for (name, spec) in &plan.heads {
            let d =
                draft.as_ref().context("acceptance heads read the draft's hidden states: a draft model is needed")?;
            let (head, transform) = load_head(spec, d, &device)?;
            heads.insert(name.clone(), head);
            head_drafts.insert(name.clone(), transform.unwrap_or_else(|| "none".into()));
        }
        let mut feature_heads = FeatureHeads::new();
        if !plan.feature_heads.is_empty() {
            let sha = target.weights_sha256()?;
            for spec in &plan.feature_heads {
                let dir = if spec == DEFAULT_HEAD { default_feature_head_dir() } else { PathBuf::from(spec) };
                eprintln!("loading the feature head {}", dir.display());
                feature_heads.insert(spec.clone(), FeatureDraft::load(&dir, &target.model, Some(&sha))?);
            }
        }
        Ok(Self { target, draft, placed_draft, replicas, transformed, heads, feature_heads, head_drafts })
    }

    /// The cheaper drafts made: label and identity of each.
    pub fn draft_identities(&self) -> Vec<(String, String)> {
        self.transformed.iter().map(|(t, (_, id))| (t.label(), id.clone())).collect()
    }

    /// What needs the loaded models besides the method's own parts: a head policy's head was
    /// trained on the draft this setting runs (the same transform).
    pub fn check_setting(&self, setting: &Setting) -> Result<()> {
        let Some(m) = setting.spec() else { return Ok(()) };
        let used = if m.draft.is_identity() {
            "none".to_string()
        } else {
            self.transformed
                .get(&m.draft)
                .map(|(_, id)| id.clone())
                .with_context(|| format!("{}: the draft {} was not made", m.key(), m.draft.label()))?
        };
        if let Some(head) = setting.head() {
            let recorded = self.head_drafts.get(head).map(String::as_str);
            check_same_transform(&format!("{}: head '{head}'", m.key()), recorded, &used)?;
        }
        Ok(())
    }

    /// DSI's target workers, one per worker device (empty: the workers share the target).
    pub fn workers(&self) -> Vec<&Transformer> {
        self.replicas.iter().map(|r| r.as_ref().map_or(&self.target.model, |lm| &lm.model)).collect()
    }

    /// What `setting` runs on: EasySpec's settings take the placed draft when there is one.
    pub fn for_setting<'a>(&'a self, setting: &Setting, workers: &'a [&'a Transformer]) -> RunModels<'a> {
        let easyspec = setting.spec().is_some_and(|m| matches!(m.drafter, DrafterSpec::EasySpec(_)));
        let cheaper = setting.spec().and_then(|m| self.transformed.get(&m.draft)).map(|(t, _)| t);
        let draft = self.draft.as_ref().map(|d| match (&self.placed_draft, easyspec, cheaper) {
            (_, _, Some(t)) => t,
            (Some(placed), true, None) => placed,
            _ => &d.model,
        });
        RunModels {
            target: &self.target.model,
            workers,
            draft,
            heads: &self.heads,
            feature_heads: &self.feature_heads,
            earlier_outputs: &[],
        }
    }
}

/// Where the shipped head lives: `checkpoints/specdecpp-default` of the source tree this
/// binary was built from (committed: trained on the committed datasets for the Qwen2.5-Coder
/// 0.5B/1.5B pair; its `head.json` records the data, config and metrics).
pub fn default_head_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../checkpoints/specdecpp-default")
}

/// Where the shipped feature head lives: `checkpoints/feature-head` of the source tree (trained
/// by `specx train-feature-head --config configs/train-feature-head.toml` for the Qwen2.5-Coder
/// 1.5B target; its `feature-head.json` records the data, config and learning curve).
pub fn default_feature_head_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../checkpoints/feature-head")
}

/// The heads in `dirs`, by name, for `draft` as loaded: what replays of its traces read (a
/// head made for a cheaper draft is refused, naming both).
pub fn load_heads_for_draft_as_loaded<'a>(
    dirs: impl IntoIterator<Item = &'a PathBuf>,
    draft: &LoadedModel,
    device: &Device,
) -> Result<Heads> {
    let mut heads = Heads::new();
    for dir in dirs {
        let (head, transform) = load_head(&dir.to_string_lossy(), draft, device)?;
        check_same_transform(&format!("head {}", dir.display()), transform.as_deref(), "none")?;
        heads.insert(head_name(dir), head);
    }
    Ok(heads)
}

/// Loads an acceptance head: a checkpoint directory, [`DEFAULT_HEAD`], or `random[:SEED]` for
/// a randomly initialised head (for testing the pipeline before a head is trained). Returns
/// the draft transform it was trained with (`None`: the draft as loaded; a random head fits
/// any draft and returns `None` too).
pub fn load_head(spec: &str, draft: &LoadedModel, device: &Device) -> Result<(AcceptanceHead, Option<String>)> {
    let hidden_size = draft.model.config().hidden_size;
    if let Some(rest) = spec.strip_prefix("random") {
        let seed: u64 =
            rest.strip_prefix(':').map_or(Ok(0), str::parse).context("--head random:SEED needs an integer seed")?;
        return Ok((AcceptanceHead::init_seeded(hidden_size, 3, false, seed, device), None));
    }
    let dir = if spec == DEFAULT_HEAD {
        let dir = default_head_dir();
        if !dir.join("head.json").is_file() {
            bail!(
                "the default head {} is missing (it ships in the specx repository this binary was built from); pass --head DIR",
                dir.display()
            );
        }
        dir
    } else {
        PathBuf::from(spec)
    };
    let (head, hs) = AcceptanceHead::load(&dir, device)?;
    if hs.hidden_size != hidden_size {
        bail!("head {spec} reads hidden states of size {}, the draft model has {hidden_size}", hs.hidden_size);
    }
    // A head only means something on the hidden states of the draft it was trained on.
    if let Some(trained_on) = &hs.draft_model_sha256 {
        let this = draft.weights_sha256()?;
        if *trained_on != this {
            bail!(
                "head {spec} was trained on the hidden states of another draft model (sha256 {}), not {} (sha256 {})",
                short_hash(trained_on),
                draft.path.display(),
                short_hash(&this)
            );
        }
    }
    Ok((head, hs.draft_transform))
}
