//! Loading a model and its tokenizer from a path (an HF directory or a GGUF file), and
//! refusing draft/target pairs that do not share a tokenizer.

use crate::config::ModelConfig;
use crate::model::{Transformer, WeightMode};
use crate::tokenizer::{ModelTemplate, Tokenizer};
use crate::weights::{GgufSource, SafetensorsDir};
use anyhow::{Context, Result, bail};
use burn::tensor::Device;
use sha2::{Digest, Sha256};
use std::path::{Path, PathBuf};

/// The on-disk format a model came from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ModelFormat {
    HfSafetensors,
    Gguf,
}

/// A model ready to run, with where it came from.
pub struct LoadedModel {
    pub model: Transformer,
    pub tokenizer: Tokenizer,
    /// Token ids that end generation: the config's and the tokenizer's named EOS tokens.
    pub eos_ids: Vec<u32>,
    pub path: PathBuf,
    pub format: ModelFormat,
    /// Weight files read (for checksums in run manifests).
    pub files: Vec<PathBuf>,
    /// sha256 over the token strings the weight file itself declares (GGUF), if any.
    pub embedded_vocab_hash: Option<String>,
    /// The model's own chat template, if it declares one (`--chat-template model`).
    pub chat_template: Option<ModelTemplate>,
}

/// The model cache laid out by `scripts/fetch-models.sh`: `$SPECX_MODELS`, else
/// `~/.cache/specx/models`.
pub fn model_cache_dir() -> PathBuf {
    cache_dir("SPECX_MODELS", "models")
}

/// A specx cache directory: the environment variable `var` if set, else
/// `~/.cache/specx/<name>`.
pub fn cache_dir(var: &str, name: &str) -> PathBuf {
    if let Some(d) = std::env::var_os(var) {
        return PathBuf::from(d);
    }
    let home = std::env::var_os("HOME").map(PathBuf::from).unwrap_or_else(|| PathBuf::from("."));
    home.join(".cache/specx").join(name)
}

/// Where the tokenizer of a model at `path` lives: `DIR/tokenizer.json` for a directory, the
/// sibling `tokenizer.json` for a GGUF file.
pub fn default_tokenizer_path(path: &Path) -> PathBuf {
    if path.is_dir() { path.join("tokenizer.json") } else { path.with_file_name("tokenizer.json") }
}

/// Loads the model at `path` (HF directory or `.gguf` file) onto `device`, GGUF weights kept
/// in their block formats on the CPU ([`WeightMode::Native`]: exact, bit-identical to `f32`;
/// the commands default to `q8`, see [`load_model_as`]). `tokenizer` overrides the default
/// tokenizer location.
pub fn load_model(path: &Path, tokenizer: Option<&Path>, device: &Device) -> Result<LoadedModel> {
    load_model_as(path, tokenizer, device, WeightMode::Native)
}

/// [`load_model`] with an explicit [`WeightMode`] (`--weights f32|native`).
pub fn load_model_as(path: &Path, tokenizer: Option<&Path>, device: &Device, mode: WeightMode) -> Result<LoadedModel> {
    load_model_split(path, tokenizer, std::slice::from_ref(device), mode)
}

/// [`load_model_as`] with the layers split in contiguous ranges over `devices`
/// ([`Transformer::load_split`]; one device: not split).
pub fn load_model_split(
    path: &Path,
    tokenizer: Option<&Path>,
    devices: &[Device],
    mode: WeightMode,
) -> Result<LoadedModel> {
    let resolved = crate::hub::resolve(path)?;
    let path = resolved.as_path();
    if !path.exists() {
        bail!("model path {} does not exist (run scripts/fetch-models.sh for the Qwen pair)", path.display());
    }
    // A GGUF is opened once: its metadata may hold the tokenizer as well as the model.
    let gguf = if path.is_dir() { None } else { Some(GgufSource::open(path)?) };
    let tokenizer = open_tokenizer(path, tokenizer, gguf.as_ref().map(|src| &src.file))?;
    let tok_path = tokenizer.path().to_path_buf();
    let (model, format, files, embedded_vocab_hash, chat_template) = if let Some(src) = gguf {
        let cfg = src.config()?;
        check_tensors(&cfg, &src, path)?;
        let hash = src.token_list().map(|toks| {
            let mut h = Sha256::new();
            for t in toks {
                h.update(t.as_bytes());
                h.update([0]);
            }
            format!("{:x}", h.finalize())
        });
        let model =
            Transformer::load_split(cfg, &src, devices, mode).with_context(|| format!("model {}", path.display()))?;
        let template = ModelTemplate::from_gguf(&src.file, &tokenizer);
        (model, ModelFormat::Gguf, vec![path.to_path_buf()], hash, template)
    } else {
        let cfg = ModelConfig::from_hf_json(&path.join("config.json"))?;
        let src = SafetensorsDir::open(path)?;
        let files = src.files().map(Path::to_path_buf).collect();
        let cfg = adjust_to_weights(cfg, &src);
        check_tensors(&cfg, &src, path)?;
        let model =
            Transformer::load_split(cfg, &src, devices, mode).with_context(|| format!("model {}", path.display()))?;
        (model, ModelFormat::HfSafetensors, files, None, ModelTemplate::from_hf_dir(path)?)
    };
    let cfg = model.config();
    if tokenizer.vocab().values().any(|&id| id as usize >= cfg.vocab_size) {
        bail!(
            "tokenizer {} has ids beyond the model's vocabulary of {} ({}): wrong tokenizer for this model",
            tok_path.display(),
            cfg.vocab_size,
            path.display()
        );
    }
    let mut eos_ids = cfg.eos_token_ids.clone();
    for id in tokenizer.named_eos_ids() {
        if !eos_ids.contains(&id) {
            eos_ids.push(id);
        }
    }
    Ok(LoadedModel {
        model,
        tokenizer,
        eos_ids,
        path: path.to_path_buf(),
        format,
        files,
        embedded_vocab_hash,
        chat_template,
    })
}

/// The tokenizer of the model at `path`: `explicit` (`--tokenizer`), else the tokenizer.json
/// beside it ([`default_tokenizer_path`]), else for a GGUF the one its metadata declares.
fn open_tokenizer(path: &Path, explicit: Option<&Path>, gguf: Option<&crate::gguf::GgufFile>) -> Result<Tokenizer> {
    let file = explicit.map(Path::to_path_buf).unwrap_or_else(|| default_tokenizer_path(path));
    if file.exists() {
        return Tokenizer::from_file(&file);
    }
    if let (None, Some(gguf)) = (explicit, gguf) {
        return Tokenizer::from_gguf(gguf)
            .with_context(|| format!("no tokenizer at {}, nor one from the GGUF's metadata", file.display()));
    }
    bail!(
        "no tokenizer at {} (point the command at a tokenizer.json: --tokenizer, --draft-tokenizer/--target-tokenizer, \
         or [models] draft_tokenizer/target_tokenizer in a config)",
        file.display()
    )
}

/// The tokenizer the model at `path` loads with (`explicit` in place of its own), without
/// reading its weights.
pub fn load_tokenizer(path: &Path, explicit: Option<&Path>) -> Result<Tokenizer> {
    let resolved = crate::hub::resolve(path)?;
    let path = resolved.as_path();
    let gguf = if path.is_file() { Some(GgufSource::open(path)?) } else { None };
    open_tokenizer(path, explicit, gguf.as_ref().map(|src| &src.file))
}

/// Refuses a checkpoint holding tensors the model would not read ([`ModelConfig::check_tensors`]).
fn check_tensors(cfg: &ModelConfig, src: &dyn crate::weights::WeightSource, path: &Path) -> Result<()> {
    cfg.check_tensors(src.tensor_names().iter().map(String::as_str)).with_context(|| format!("{}", path.display()))
}

/// Trusts the weights over `config.json` about q/k/v biases and a tied head.
fn adjust_to_weights(mut cfg: ModelConfig, src: &dyn crate::weights::WeightSource) -> ModelConfig {
    cfg.attention_bias = src.contains("model.layers.0.self_attn.q_proj.bias");
    cfg.tie_word_embeddings = !src.contains("lm_head.weight");
    cfg
}

/// Refuses a draft/target pair that cannot do speculative decoding together, naming the
/// first difference: the two must tokenize alike (the same vocabulary, merges and added tokens;
/// a GGUF's own token list too) and the target must score every token the draft does. A target
/// that pads its head past the shared vocabulary (Qwen2.5's 7B and larger: 152,064 logits
/// against 151,936) is fine: [`pair_up`] pads the draft's rows to match.
pub fn check_pair(draft: &LoadedModel, target: &LoadedModel) -> Result<()> {
    let names = || format!("draft {} and target {}", draft.path.display(), target.path.display());
    if let Some(difference) = draft.tokenizer.first_difference(&target.tokenizer) {
        bail!("{} do not share a tokenizer: {difference}", names());
    }
    if let (Some(a), Some(b)) = (&draft.embedded_vocab_hash, &target.embedded_vocab_hash)
        && a != b
    {
        bail!("{} declare different vocabularies in their GGUF metadata", names());
    }
    let (dn, tn) = (draft.model.config().vocab_size, target.model.config().vocab_size);
    if dn > tn {
        bail!(
            "{}: the draft scores {dn} tokens but the target only {tn}: the draft could propose ids the target \
             cannot score (a padded head belongs on the target's side)",
            names()
        );
    }
    Ok(())
}

/// [`check_pair`], then the draft's rows padded to the target's length
/// ([`crate::Transformer::pad_vocab`]) where the target's head is larger: what every command
/// that runs a pair calls before decoding.
pub fn pair_up(draft: &mut LoadedModel, target: &LoadedModel) -> Result<()> {
    check_pair(draft, target)?;
    let tn = target.model.config().vocab_size;
    if draft.model.output_vocab() != tn {
        eprintln!(
            "specx: the target scores {tn} tokens, the draft {}: the draft's rows are padded with probability 0",
            draft.model.config().vocab_size
        );
        draft.model = draft.model.clone().pad_vocab(tn)?;
    }
    Ok(())
}

impl LoadedModel {
    /// The model's identity as recorded in manifests and head checkpoints: the sha256 of the
    /// weight file, or for a multi-file checkpoint the sha256 of its `"<file name> <sha256>\n"`
    /// lines in file-name order. Reads every weight byte once (a few seconds per GB).
    pub fn weights_sha256(&self) -> Result<String> {
        let mut per_file = self
            .files
            .iter()
            .map(|f| {
                Ok((
                    f.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default(),
                    crate::fsutil::sha256_file(f)?,
                ))
            })
            .collect::<Result<Vec<_>>>()?;
        if let [(_, only)] = per_file.as_slice() {
            return Ok(only.clone());
        }
        per_file.sort();
        let mut h = Sha256::new();
        for (name, sha) in per_file {
            h.update(format!("{name} {sha}\n"));
        }
        Ok(format!("{:x}", h.finalize()))
    }
}
