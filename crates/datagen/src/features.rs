//! Features recomputed from a shard's token ids, for runs that do not store them
//! (`[output] features = "recompute"`).
//!
//! Generation fed the draft the mixed sequence Z one token per step and kept, at each labelled
//! position t, the final (normed) hidden state after reading Z_t. The same states come from
//! one forward of the draft over prompt + Z_0..Z_{n-1} (Z_t = Y_t where the row is labelled,
//! else X_t), read at rows `prompt_len + t`. They are the same function of the same tokens;
//! only the order of the float sums differs (a many-row prefill instead of single-token steps),
//! so they agree to rounding: `datagen_tiny.rs` bounds the difference, and the SpecDec++
//! reproduction compares heads trained on either.
//!
//! Beyond the paper, a head may also read three statistics of the draft distribution each
//! labelled token was drawn from in the Z context (its probability at temperature 1, the
//! entropy, the top-2 margin: [`DraftStats::head_inputs`]), read from the logits of the row
//! before, `prompt_len + t - 1`: what a live head sees of the candidate it scores.
//!
//! The results are cached under `~/.cache/specx/features/` (or `$SPECX_FEATURES`), keyed by the
//! draft's weights checksum and the shard's token-table checksum, so they are never stale.

use crate::manifest::Manifest;
use crate::shard::{ShardRecord, read_features_file, read_prompts, read_tokens};
use anyhow::{Context, Result, bail, ensure};
use specx_decoder::Transformer;
use specx_decoder::fsutil::{short_hash, write_atomic};
use specx_decoder::speculative::{DraftStats, HEAD_STAT_INPUTS};
use std::path::{Path, PathBuf};

/// Rows per draft forward when recomputing (sequences are batched up to this many rows).
const ROWS_PER_FORWARD: usize = 1024;

/// Where recomputed features are cached.
pub fn cache_dir() -> PathBuf {
    specx_decoder::loader::cache_dir("SPECX_FEATURES", "features")
}

/// The cache file of shard `rec`'s features under the draft whose outputs are keyed by
/// `draft_key` ([`specx_run::ModelRecord::weights_key`]).
pub fn cache_path(draft_key: &str, rec: &ShardRecord) -> PathBuf {
    cache_dir().join(format!("{}-{}.safetensors", short_hash(draft_key), short_hash(&rec.tokens.sha256)))
}

/// The cache file of shard `rec`'s draft statistics (`[labelled rows, 3]`, f32).
pub fn stats_cache_path(draft_sha256: &str, rec: &ShardRecord) -> PathBuf {
    cache_dir().join(format!("{}-{}-stats.safetensors", short_hash(draft_sha256), short_hash(&rec.tokens.sha256)))
}

/// Rows of vocabulary-wide logits computed at once for the statistics (~0.6 MB each).
const LOGIT_ROWS: usize = 128;

/// One mixed sequence to forward: the prompt, then Z; and where its labelled rows go.
struct MixedSequence {
    tokens: Vec<u32>,
    prompt_len: usize,
    /// (response position, feature row) of every labelled position.
    labelled: Vec<(usize, usize)>,
}

/// The mixed sequences of a shard, from its prompt and token tables.
fn mixed_sequences(dir: &Path, rec: &ShardRecord) -> Result<(Vec<MixedSequence>, usize)> {
    let prompts = read_prompts(dir, rec)?;
    let df = read_tokens(dir, rec)?;
    let name = &rec.tokens.name;
    let col = |c: &str| df.column(c).with_context(|| format!("{}: no column '{c}'", dir.join(name).display()));
    let (pi, draw, pos) = (col("prompt_index")?.u32()?, col("draw")?.u32()?, col("position")?.u32()?);
    let (x, y, from_y, row) = (col("x")?.u32()?, col("y")?.u32()?, col("from_y")?.bool()?, col("feature_row")?.i64()?);
    let mut seqs: Vec<MixedSequence> = Vec::new();
    let mut key = None;
    let mut labelled_rows = 0;
    for i in 0..df.height() {
        let get = |v: Option<u32>| v.with_context(|| format!("{}: a null in row {i}", dir.join(name).display()));
        let (p, d, t) = (get(pi.get(i))? as usize, get(draw.get(i))?, get(pos.get(i))? as usize);
        if key != Some((p, d)) {
            let (_, _, tokens) = prompts.iter().find(|(index, _, _)| *index == p).with_context(|| {
                format!("{}: prompt {p} is not in the shard's prompt table", dir.join(name).display())
            })?;
            seqs.push(MixedSequence { tokens: tokens.clone(), prompt_len: tokens.len(), labelled: Vec::new() });
            key = Some((p, d));
        }
        let s = seqs.last_mut().expect("pushed above");
        ensure!(
            s.tokens.len() == s.prompt_len + t,
            "{}: row {i} is position {t}, expected {}",
            dir.join(name).display(),
            s.tokens.len() - s.prompt_len
        );
        let fy = from_y.get(i).with_context(|| format!("{}: a null in row {i}", dir.join(name).display()))?;
        s.tokens.push(if fy { get(y.get(i))? } else { get(x.get(i))? });
        if fy {
            let r = row
                .get(i)
                .filter(|&r| r >= 0)
                .with_context(|| format!("{}: labelled row {i} has no feature row", dir.join(name).display()))?;
            s.labelled.push((t, r as usize));
            labelled_rows += 1;
        }
    }
    ensure!(
        labelled_rows as u64 == rec.labelled_rows,
        "{}: {labelled_rows} labelled rows, the shard record says {}",
        dir.join(name).display(),
        rec.labelled_rows
    );
    Ok((seqs, labelled_rows))
}

/// The token sequences of a shard (the prompt, then the mixed response Z) with their prompt
/// lengths: the text a feature-level draft head trains on.
pub fn shard_sequences(dir: &Path, rec: &ShardRecord) -> Result<Vec<(Vec<u32>, usize)>> {
    Ok(mixed_sequences(dir, rec)?.0.into_iter().map(|s| (s.tokens, s.prompt_len)).collect())
}

/// Computes shard `rec`'s features with `draft`: `[labelled rows, hidden]` row-major, in
/// feature-row order (no cache).
pub fn recompute(dir: &Path, rec: &ShardRecord, draft: &Transformer) -> Result<Vec<f32>> {
    Ok(recompute_with(dir, rec, draft, false)?.0)
}

/// [`recompute`], and with `stats` the draft statistics of every labelled row
/// (`[labelled rows, 3]`).
pub fn recompute_with(
    dir: &Path,
    rec: &ShardRecord,
    draft: &Transformer,
    stats: bool,
) -> Result<(Vec<f32>, Option<Vec<f32>>)> {
    let hidden = draft.config().hidden_size;
    let (seqs, rows) = mixed_sequences(dir, rec)?;
    let mut out = vec![f32::NAN; rows * hidden];
    let mut stat_rows = stats.then(|| vec![f32::NAN; rows * HEAD_STAT_INPUTS]);
    let mut start = 0;
    while start < seqs.len() {
        // A batch of whole sequences, up to ROWS_PER_FORWARD rows (at least one sequence).
        let mut end = start + 1;
        let mut batch_rows = seqs[start].tokens.len();
        while end < seqs.len() && batch_rows + seqs[end].tokens.len() <= ROWS_PER_FORWARD {
            batch_rows += seqs[end].tokens.len();
            end += 1;
        }
        let batch = &seqs[start..end];
        let mut caches: Vec<_> = batch.iter().map(|_| draft.new_cache(1)).collect();
        let mut inputs: Vec<(&[u32], &mut specx_decoder::KvCache)> =
            batch.iter().map(|s| s.tokens.as_slice()).zip(caches.iter_mut()).collect();
        let h = draft
            .forward_ragged(&mut inputs)?
            .into_data()
            .try_to_vec::<f32>()
            .map_err(|e| anyhow::anyhow!("reading hidden states: {e:?}"))?;
        // (row of the previous position, drafted token, feature row) of every labelled row.
        let mut wanted: Vec<(usize, u32, usize)> = Vec::new();
        let mut offset = 0;
        for s in batch {
            for &(t, r) in &s.labelled {
                let row = offset + s.prompt_len + t;
                out[r * hidden..(r + 1) * hidden].copy_from_slice(&h[row * hidden..(row + 1) * hidden]);
                wanted.push((row - 1, s.tokens[s.prompt_len + t], r));
            }
            offset += s.tokens.len();
        }
        if let Some(st) = stat_rows.as_mut() {
            for chunk in wanted.chunks(LOGIT_ROWS) {
                let rows_h: Vec<f32> =
                    chunk.iter().flat_map(|&(row, _, _)| h[row * hidden..(row + 1) * hidden].iter().copied()).collect();
                let x = burn::tensor::Tensor::<2>::from_data(
                    burn::tensor::TensorData::new(rows_h, [chunk.len(), hidden]),
                    draft.device(),
                );
                for (logits, &(_, token, r)) in draft.logits_ragged(x).iter().zip(chunk) {
                    st[r * HEAD_STAT_INPUTS..(r + 1) * HEAD_STAT_INPUTS]
                        .copy_from_slice(&DraftStats::of(logits, token).head_inputs());
                }
            }
        }
        start = end;
    }
    if let Some(missing) = out.chunks_exact(hidden).position(|r| r[0].is_nan()) {
        bail!("shard {} of {}: feature row {missing} belongs to no labelled position", rec.index, dir.display());
    }
    Ok((out, stat_rows))
}

/// Writes a feature cache file: `values` (`[rows, width]`) stored as `dtype` (f16 or f32).
pub fn write_cache(path: &Path, values: &[f32], width: usize, dtype: safetensors::Dtype) -> Result<()> {
    let bytes: Vec<u8> = match dtype {
        safetensors::Dtype::F16 => values.iter().flat_map(|v| half::f16::from_f32(*v).to_le_bytes()).collect(),
        _ => values.iter().flat_map(|v| v.to_le_bytes()).collect(),
    };
    let view = safetensors::tensor::TensorView::new(dtype, vec![values.len() / width, width], &bytes)?;
    std::fs::create_dir_all(cache_dir()).with_context(|| format!("creating {}", cache_dir().display()))?;
    write_atomic(path, &safetensors::serialize([("features", view)], None)?)
}

/// A cache file if it is intact and of the expected shape.
pub fn read_cache(path: &Path, rows: u64, width: usize) -> Option<Vec<f32>> {
    if !path.exists() {
        return None;
    }
    match read_features_file(path) {
        Ok((values, w)) if w == width && values.len() as u64 == rows * width as u64 => Some(values),
        _ => {
            eprintln!("{}: a damaged feature cache; recomputing it", path.display());
            None
        }
    }
}

/// Shard `rec`'s features: stored in the shard, else from the cache, else recomputed with
/// `draft` (which must be the run's draft: its checksum is compared with the manifest's) and
/// cached. With `stats`, each row is followed by the draft statistics of its token (cached
/// too). Returns (values, width).
pub fn shard_features(
    dir: &Path,
    manifest: &Manifest,
    rec: &ShardRecord,
    draft: Option<(&Transformer, &str)>,
    stats: bool,
) -> Result<(Vec<f32>, usize)> {
    let hidden = manifest.hidden_size;
    let key = manifest.draft.weights_key();
    let (fpath, spath) = (cache_path(&key, rec), stats_cache_path(&key, rec));
    let stored = if rec.features.is_some() {
        Some(crate::shard::read_features(dir, rec)?.0)
    } else {
        read_cache(&fpath, rec.labelled_rows, hidden)
    };
    let cached_stats = if stats { read_cache(&spath, rec.labelled_rows, HEAD_STAT_INPUTS) } else { None };
    let (features, stat_rows) = match (stored, cached_stats) {
        (Some(f), s) if !stats || s.is_some() => (f, s),
        (stored, _) => {
            let (draft, sha) = draft.with_context(|| {
                format!(
                    "shard {} of {} {}: the draft model is needed to recompute them",
                    rec.index,
                    dir.display(),
                    if stored.is_none() {
                        "stores no features and none are cached"
                    } else {
                        "has no cached draft statistics"
                    }
                )
            })?;
            if sha != manifest.draft.sha256 {
                bail!(
                    "{}: made with the draft of weights sha256 {}, but the draft loaded to recompute its features has {}",
                    dir.display(),
                    short_hash(&manifest.draft.sha256),
                    short_hash(sha)
                );
            }
            let (values, st) = recompute_with(dir, rec, draft, stats)?;
            if let Some(st) = &st {
                write_cache(&spath, st, HEAD_STAT_INPUTS, safetensors::Dtype::F32)?;
            }
            let features = match stored {
                Some(f) => f,
                None => {
                    write_cache(&fpath, &values, hidden, safetensors::Dtype::F16)?;
                    // The cache holds f16: use what a later read of it returns, so a first and
                    // a second training run see the same numbers.
                    read_features_file(&fpath)?.0
                }
            };
            (features, st)
        }
    };
    match stat_rows {
        None => Ok((features, hidden)),
        Some(st) => {
            let width = hidden + HEAD_STAT_INPUTS;
            let joined = features
                .chunks_exact(hidden)
                .zip(st.chunks_exact(HEAD_STAT_INPUTS))
                .flat_map(|(f, s)| f.iter().chain(s).copied())
                .collect();
            Ok((joined, width))
        }
    }
}
