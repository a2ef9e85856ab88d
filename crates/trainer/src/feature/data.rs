//! The text a feature head trains on, with the target's final hidden state at every position:
//! the prompts and responses of a datagen run, forwarded once through the target and cached
//! (f16) under `~/.cache/specx/features/`, keyed by the target's weights and the shard's token
//! table, so a cache is never stale.

use crate::acceptance::data::{data_sha256, prompt_shards};
use anyhow::{Context, Result, bail};
use half::f16;
use indicatif::{ProgressBar, ProgressStyle};
use specx_datagen::features::{cache_dir, read_cache, shard_sequences, write_cache};
use specx_datagen::manifest::Manifest;
use specx_decoder::Transformer;
use specx_decoder::fsutil::short_hash;
use specx_run::RunManifest;
use std::path::{Path, PathBuf};

/// Rows per target forward when computing features.
const ROWS_PER_FORWARD: usize = 1024;

/// One sequence: the prompt, then the response; the target's features at every position.
pub struct FeatureSequence {
    pub tokens: Vec<u32>,
    pub prompt_len: usize,
    /// `[tokens, hidden]`, row-major.
    pub features: Vec<f16>,
}

/// The sequences of a run's first prompts.
pub struct FeatureSet {
    pub dir: PathBuf,
    pub prompts: usize,
    /// sha256 of the token and prompt tables the sequences come from ([`data_sha256`]).
    pub data_sha256: String,
    pub hidden: usize,
    pub sequences: Vec<FeatureSequence>,
}

impl FeatureSet {
    /// Rows a head is trained on or judged by: positions whose prediction is a response token.
    pub fn response_rows(&self) -> usize {
        self.sequences.iter().map(|s| s.tokens.len().saturating_sub(s.prompt_len.max(1))).sum()
    }
}

/// The target an identity for caches: its file's sha256 and how its weights run.
pub struct FeatureTarget<'m> {
    pub model: &'m Transformer,
    pub sha256: String,
    pub weights: specx_decoder::WeightMode,
}

impl FeatureTarget<'_> {
    fn cache_path(&self, tokens_sha256: &str) -> PathBuf {
        let key = format!("{} {:?}", self.sha256, self.weights);
        cache_dir().join(format!(
            "target-{}-{}.safetensors",
            short_hash(&specx_decoder::fsutil::sha256_hex(key.as_bytes())),
            short_hash(tokens_sha256)
        ))
    }
}

/// Loads run `dir`'s first `prompts` prompts (all of a finished run if None) with the target's
/// features, computing those not cached. The run must have been made with this target.
pub fn load_feature_set(
    dir: &Path,
    prompts: Option<usize>,
    target: &FeatureTarget<'_>,
    progress: bool,
) -> Result<FeatureSet> {
    let m = Manifest::read(dir)?;
    if m.target.sha256 != target.sha256 {
        bail!(
            "{} was generated with the target sha256 {}, not the config's target (sha256 {})",
            dir.display(),
            short_hash(&m.target.sha256),
            short_hash(&target.sha256)
        );
    }
    let shards = prompt_shards(dir, &m, prompts)?;
    let hidden = target.model.config().hidden_size;
    let bar = if progress { ProgressBar::new(shards.len() as u64) } else { ProgressBar::hidden() };
    bar.set_style(ProgressStyle::with_template(&format!(
        "target features of {} {{bar:30}} {{pos}}/{{len}} shards, ETA {{eta}}",
        dir.display()
    ))?);
    let mut sequences = Vec::new();
    for rec in &shards {
        let seqs =
            shard_sequences(dir, rec).with_context(|| format!("reading shard {} of {}", rec.index, dir.display()))?;
        let rows: usize = seqs.iter().map(|(t, _)| t.len()).sum();
        let path = target.cache_path(&rec.tokens.sha256);
        let features = match read_cache(&path, rows as u64, hidden) {
            Some(f) => f,
            None => {
                let f = compute(&seqs, target.model)?;
                write_cache(&path, &f, hidden, safetensors::Dtype::F16)?;
                f
            }
        };
        // Held as f16, as cached (a freshly computed shard rounds the same way).
        let features: Vec<f16> = features.into_iter().map(f16::from_f32).collect();
        let mut offset = 0;
        for (tokens, prompt_len) in seqs {
            let n = tokens.len();
            sequences.push(FeatureSequence {
                features: features[offset * hidden..(offset + n) * hidden].to_vec(),
                tokens,
                prompt_len,
            });
            offset += n;
        }
        bar.inc(1);
    }
    bar.finish_and_clear();
    Ok(FeatureSet {
        dir: dir.to_path_buf(),
        prompts: shards.iter().map(|r| r.prompt_count).sum(),
        data_sha256: data_sha256(&shards),
        hidden,
        sequences,
    })
}

/// The target's final hidden states of every position of `seqs`, one after another.
fn compute(seqs: &[(Vec<u32>, usize)], target: &Transformer) -> Result<Vec<f32>> {
    let mut out = Vec::new();
    let mut start = 0;
    while start < seqs.len() {
        let mut end = start + 1;
        let mut rows = seqs[start].0.len();
        while end < seqs.len() && rows + seqs[end].0.len() <= ROWS_PER_FORWARD {
            rows += seqs[end].0.len();
            end += 1;
        }
        let mut caches: Vec<_> = seqs[start..end].iter().map(|_| target.new_cache(1)).collect();
        let mut inputs: Vec<(&[u32], &mut specx_decoder::KvCache)> =
            seqs[start..end].iter().map(|(t, _)| t.as_slice()).zip(caches.iter_mut()).collect();
        let h = target
            .forward_ragged(&mut inputs)?
            .into_data()
            .try_to_vec::<f32>()
            .map_err(|e| anyhow::anyhow!("reading hidden states: {e:?}"))?;
        out.extend(h);
        start = end;
    }
    Ok(out)
}
