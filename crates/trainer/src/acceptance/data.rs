//! Labelled rows of a datagen run directory, held in memory as f32 (a 100-prompt run is ~30
//! MB; the full 4,000-prompt Alpaca train split would be ~1.3 GB), with seeded shuffling.
//! Shards that do not store their features get them from the local cache or, the first time,
//! from the run's draft model ([`specx_datagen::features`]).

use anyhow::{Context, Result, bail};
use specx_datagen::features::{cache_path, shard_features, stats_cache_path};
use specx_datagen::manifest::Manifest;
use specx_datagen::shard::{ShardRecord, labelled_log_q, labelled_rows};
use specx_decoder::fsutil::{sha256_hex, short_hash};
use specx_decoder::speculative::calibrated::ln_complement;
use specx_run::RunManifest;
use specx_run::seed::SplitMix64;
use std::path::{Path, PathBuf};

/// Features and acceptance labels of every labelled row of a run, in shard order.
pub struct LabelledSet {
    pub dir: PathBuf,
    pub features: Vec<f32>,
    pub labels: Vec<f32>,
    /// Width of a row of `features`: the draft's hidden size, plus the three draft statistics
    /// when `draft_stats`.
    pub hidden: usize,
    /// Rows end with the draft statistics of their token (a head beyond the paper reads them).
    pub draft_stats: bool,
    /// The draft model whose hidden states these are (a head must be trained and used with it).
    pub draft_sha256: String,
    /// The draft's transform ([`specx_decoder::DraftTransform::identity`], `none` as loaded).
    pub draft_transform: String,
    /// Which prompts the run covered (`alpaca`/`train`, ...), for reports.
    pub split: String,
    /// Prompts the rows come from (the run's first ones).
    pub prompts: usize,
    /// sha256 of the data the rows come from: the sha256s of the loaded shards' token and
    /// prompt tables, one per line in shard order (a head's provenance names its data by it).
    pub data_sha256: String,
}

impl LabelledSet {
    /// Loads the shards holding the run's first `prompts` prompts (all of a finished run if
    /// None). A run still being generated serves as long as those shards are written; the
    /// count must end on a shard boundary, so nested subsets are whole shards.
    pub fn load_prompts(dir: &Path, prompts: Option<usize>) -> Result<Self> {
        Self::load_prompts_with(dir, prompts, false)
    }

    /// [`LabelledSet::load_prompts`], each row followed by its token's draft statistics when
    /// `draft_stats` (computed with the run's draft and cached, like recomputed features).
    pub fn load_prompts_with(dir: &Path, prompts: Option<usize>, draft_stats: bool) -> Result<Self> {
        let m = Manifest::read(dir)?;
        if m.part.is_some() {
            bail!(
                "{} is one part of a sharded run (part {:?}); merge the parts first (specx datagen merge)",
                dir.display(),
                m.part
            );
        }
        let shards = prompt_shards(dir, &m, prompts)?;
        let mut set = Self {
            dir: dir.to_path_buf(),
            features: Vec::new(),
            labels: Vec::new(),
            hidden: m.hidden_size + if draft_stats { specx_decoder::speculative::HEAD_STAT_INPUTS } else { 0 },
            draft_stats,
            draft_sha256: m.draft.sha256.clone(),
            draft_transform: m.draft.transform.clone(),
            split: format!("{:?}/{}", m.config.prompts.format, m.prompts.split).to_lowercase(),
            prompts: shards.iter().map(|r| r.prompt_count).sum(),
            data_sha256: data_sha256(&shards),
        };
        let draft = load_draft_if_needed(dir, &m, &shards, draft_stats)?;
        let draft = draft.as_ref().map(|(model, sha)| (&model.model, sha.as_str()));
        for rec in shards {
            let (features, hidden) = shard_features(dir, &m, rec, draft, draft_stats)
                .with_context(|| format!("features of shard {} of {}", rec.index, dir.display()))?;
            let rows = labelled_rows(dir, rec, features, hidden)
                .with_context(|| format!("reading shard {} of {}", rec.index, dir.display()))?;
            if rows.hidden != set.hidden {
                bail!(
                    "{}: shard {} has rows of width {}, expected {} (hidden size {} in the manifest)",
                    dir.display(),
                    rec.index,
                    rows.hidden,
                    set.hidden,
                    m.hidden_size
                );
            }
            set.features.extend_from_slice(&rows.features);
            set.labels.extend_from_slice(&rows.labels);
        }
        if set.labels.is_empty() {
            bail!("{}: no labelled rows", dir.display());
        }
        Ok(set)
    }

    /// An in-memory set (tests, synthetic data).
    pub fn from_rows(features: Vec<f32>, labels: Vec<f32>, hidden: usize, draft_sha256: &str) -> Self {
        assert_eq!(features.len(), labels.len() * hidden, "features must be [labels, hidden]");
        Self {
            dir: PathBuf::new(),
            features,
            labels,
            hidden,
            draft_stats: false,
            draft_sha256: draft_sha256.into(),
            draft_transform: "none".into(),
            split: "memory".into(),
            prompts: 0,
            data_sha256: String::new(),
        }
    }

    pub fn len(&self) -> usize {
        self.labels.len()
    }

    pub fn is_empty(&self) -> bool {
        self.labels.is_empty()
    }

    /// Row indices in batches of `batch_size`, shuffled by `seed` (Fisher-Yates with SplitMix64,
    /// the same seed always giving the same order); the last batch may be short.
    pub fn batches(&self, batch_size: usize, seed: u64) -> Vec<Vec<usize>> {
        let mut order: Vec<usize> = (0..self.len()).collect();
        SplitMix64::new(seed).shuffle(&mut order);
        order.chunks(batch_size.max(1)).map(<[usize]>::to_vec).collect()
    }

    /// Features and labels of `rows`.
    pub fn gather(&self, rows: &[usize]) -> (Vec<f32>, Vec<f32>) {
        let h = self.hidden;
        let mut x = Vec::with_capacity(rows.len() * h);
        for &r in rows {
            x.extend_from_slice(&self.features[r * h..(r + 1) * h]);
        }
        (x, rows.iter().map(|&r| self.labels[r]).collect())
    }
}

/// The shards holding run `dir`'s first `prompts` prompts, in order (all shards of a finished
/// run if None): what [`LabelledSet::load_prompts`] loads and [`data_sha256`] names. The count
/// must end on a shard boundary and those shards must all be written.
pub fn prompt_shards<'a>(dir: &Path, m: &'a Manifest, prompts: Option<usize>) -> Result<Vec<&'a ShardRecord>> {
    let mut shards: Vec<_> = m.shards.iter().collect();
    shards.sort_by_key(|r| r.index);
    Ok(match prompts {
        None if !m.complete => bail!(
            "{} is not a finished run ({} of {} shards written); finish it, or train on its first shards with [data] train_prompts",
            dir.display(),
            m.shards.len(),
            m.shard_count
        ),
        None => shards,
        Some(n) => {
            let mut taken = Vec::new();
            let mut covered = 0;
            for (k, rec) in shards.iter().enumerate() {
                if covered >= n {
                    break;
                }
                if rec.index != k {
                    bail!(
                        "{}: train_prompts = {n} needs shards 0..; shard {k} is not written yet ({covered} prompts available in order)",
                        dir.display()
                    );
                }
                covered += rec.prompt_count;
                taken.push(*rec);
            }
            if covered != n {
                let per = m.config.output.prompts_per_shard;
                bail!(
                    "{}: train_prompts = {n}, but {} (shards of {per} prompts; {} written in order, of {} selected)",
                    dir.display(),
                    if covered < n {
                        format!("only {covered} prompts are written in order")
                    } else {
                        format!("{n} is not a shard boundary")
                    },
                    shards
                        .iter()
                        .enumerate()
                        .take_while(|(k, r)| r.index == *k)
                        .map(|(_, r)| r.prompt_count)
                        .sum::<usize>(),
                    m.prompts.selected
                );
            }
            taken
        }
    })
}

/// The draft's own probability of its token, read as the predicted label, on the labelled
/// rows of run `dir`'s first `prompts` prompts (all: None): (logit of q, label) per row, in
/// the order [`LabelledSet::load_prompts`] loads them. The reference every head must beat: it
/// needs no feature and no training.
pub fn draft_probability_rows(dir: &Path, prompts: Option<usize>) -> Result<(Vec<f32>, Vec<f32>)> {
    let m = Manifest::read(dir)?;
    let (mut logits, mut labels) = (Vec::new(), Vec::new());
    for rec in prompt_shards(dir, &m, prompts)? {
        let (log_q, l) =
            labelled_log_q(dir, rec).with_context(|| format!("reading shard {} of {}", rec.index, dir.display()))?;
        // logit q = ln q - ln(1 - q), with 1 - q floored as the calibrated model floors it.
        logits.extend(log_q.iter().map(|&lq| (f64::from(lq) - ln_complement(f64::from(lq).exp())) as f32));
        labels.extend(l);
    }
    Ok((logits, labels))
}

/// sha256 naming the data of `shards` (in shard order): of their token and prompt tables
/// sha256s, one shard per line. A head's `head.json` records it for its train and dev rows.
pub fn data_sha256(shards: &[&ShardRecord]) -> String {
    sha256_hex(
        shards.iter().map(|r| format!("{} {}\n", r.tokens.sha256, r.prompts.sha256)).collect::<String>().as_bytes(),
    )
}

/// The run's draft model (and its weights checksum), loaded on the CPU when some shard's
/// features (or, with `stats`, draft statistics) are neither stored nor cached; the manifest
/// names it relative to the model cache.
fn load_draft_if_needed(
    dir: &Path,
    m: &Manifest,
    shards: &[&ShardRecord],
    stats: bool,
) -> Result<Option<(specx_decoder::LoadedModel, String)>> {
    let key = m.draft.weights_key();
    let missing = shards
        .iter()
        .filter(|r| {
            (r.features.is_none() && !cache_path(&key, r).exists()) || (stats && !stats_cache_path(&key, r).exists())
        })
        .count();
    if missing == 0 {
        return Ok(None);
    }
    let path = &m.config.models.draft;
    eprintln!(
        "{}: recomputing the features of {missing} shard(s) with the draft {} (cached in {})",
        dir.display(),
        path.display(),
        specx_datagen::features::cache_dir().display()
    );
    let device = specx_decoder::device_from_name("cpu")?;
    let mut model = specx_decoder::load_model_as(
        path,
        m.config.models.draft_tokenizer.as_deref(),
        &device,
        m.config.models.weights,
    )
    .with_context(|| format!("loading the draft of {} to recompute its features", dir.display()))?;
    let sha = model.weights_sha256()?;
    let transform = &m.config.models.draft_transform;
    if !transform.is_identity() {
        specx_decoder::cheap_draft::check_same_transform(
            &format!("{}", dir.display()),
            Some(&m.draft.transform),
            &transform.identity()?,
        )?;
        model.model = transform.apply(model.model.clone(), &model.tokenizer)?;
    }
    Ok(Some((model, sha)))
}

/// Loads the train and dev runs of a config and checks that they fit together.
pub fn load_sets(cfg: &crate::acceptance::config::TrainConfig) -> Result<(LabelledSet, LabelledSet)> {
    let stats = cfg.head.draft_stats;
    let train = LabelledSet::load_prompts_with(&cfg.data.train, cfg.data.train_prompts, stats)?;
    let dev = LabelledSet::load_prompts_with(&cfg.data.dev, None, stats)?;
    check_compatible(&train, &dev)?;
    Ok((train, dev))
}

/// Refuses to train or validate across different draft models or hidden sizes.
pub fn check_compatible(train: &LabelledSet, dev: &LabelledSet) -> Result<()> {
    if train.hidden != dev.hidden {
        bail!("{} has hidden size {} but {} has {}", train.dir.display(), train.hidden, dev.dir.display(), dev.hidden);
    }
    if train.draft_sha256 != dev.draft_sha256 {
        bail!(
            "{} and {} were generated with different draft models (sha256 {} vs {})",
            train.dir.display(),
            dev.dir.display(),
            short_hash(&train.draft_sha256),
            short_hash(&dev.draft_sha256)
        );
    }
    specx_decoder::cheap_draft::check_same_transform(
        &format!("{} (dev rows of {})", dev.dir.display(), train.dir.display()),
        Some(&dev.draft_transform),
        &train.draft_transform,
    )?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn batches_cover_every_row_once_and_depend_on_the_seed() {
        let set = LabelledSet::from_rows(vec![0.0; 70 * 2], vec![0.5; 70], 2, "x");
        let b = set.batches(32, 1);
        assert_eq!(b.iter().map(Vec::len).collect::<Vec<_>>(), vec![32, 32, 6]);
        let mut all: Vec<usize> = b.concat();
        all.sort_unstable();
        assert_eq!(all, (0..70).collect::<Vec<_>>());
        assert_eq!(set.batches(32, 1), b);
        assert_ne!(set.batches(32, 2), b);
    }

    #[test]
    fn rows_of_another_draft_transform_are_refused_naming_both() {
        let train =
            LabelledSet { dir: "train-run".into(), ..LabelledSet::from_rows(vec![0.0; 4], vec![1.0; 2], 2, "x") };
        let dev = LabelledSet {
            dir: "dev-run".into(),
            draft_transform: "vocab=32768 table=329af048363c".into(),
            ..LabelledSet::from_rows(vec![0.0; 4], vec![1.0; 2], 2, "x")
        };
        let e = format!("{:#}", check_compatible(&train, &dev).unwrap_err());
        assert!(e.contains("dev-run") && e.contains("'vocab=32768 table=329af048363c'") && e.contains("'none'"), "{e}");
        assert!(check_compatible(&train, &train).is_ok());
    }
}
