//! One shard of a datagen run: a Parquet token table, a Parquet prompt table, optionally a
//! safetensors feature file aligned with its labelled rows (`[output] features = "store"`; with
//! `"recompute"` the draft recomputes them from the two tables when a head is trained, see
//! `features.rs`), and a small JSON record written last (its presence, with matching checksums,
//! is what marks the shard finished). Every file is written atomically.
//!
//! Token table, one row per (prompt, mixing draw, response position), ordered that way:
//! `prompt_index` (u32, position in the run's prompt order), `prompt_id` (str), `draw` (u32),
//! `position` (u32, 0-based in the response), `x` (u32, target token), `y` (u32, draft token),
//! `log_p` (f32, ln p_target(y)), `log_q` (f32, ln q_draft(y)), `label` (f32, min(1, p/q)),
//! `from_y` (bool, Z took y here: the row is labelled), `feature_row` (i64, its row in the
//! shard's `features` tensor, -1 when unlabelled), `greedy_match` (bool, argmax q == x).
//! Prompt table, one row per prompt: `prompt_index` (u32), `prompt_id` (str), `tokens`
//! (list of u32: the prompt's token ids, chat template applied).
//! Features: one tensor `features` `[labelled rows, hidden]` (f16 or f32): the draft's final
//! (normed) hidden state after reading Z_t, for every labelled row, in token-table order.

use crate::config::{FeatureDtype, FeatureStorage};
use crate::generation::PromptData;
use crate::labels::LabelStats;
use anyhow::{Context, Result, bail, ensure};
use polars::prelude::{Column, DataFrame, NamedFrom, Series};
use polars_io::SerReader;
use polars_io::parquet::read::ParquetReader;
use polars_io::parquet::write::ParquetWriter;
use serde::{Deserialize, Serialize};
use specx_decoder::fsutil::{sha256_file, sha256_hex, short_hash, write_atomic};
use std::path::Path;

/// A file of a shard with its size and checksum.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct FileRecord {
    pub name: String,
    pub bytes: u64,
    pub sha256: String,
}

/// What a finished shard holds.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ShardRecord {
    pub index: usize,
    /// Positions of its prompts in the run's prompt order (`first..first + count`).
    pub first_prompt: usize,
    pub prompt_count: usize,
    pub rows: u64,
    pub labelled_rows: u64,
    pub stats: LabelStats,
    pub tokens: FileRecord,
    pub prompts: FileRecord,
    /// None when the run recomputes features instead of storing them.
    pub features: Option<FileRecord>,
    /// Seconds since the previous shard of the run was written (prompts of neighbouring shards
    /// are generated together, so this is a share of the wall time; not part of the data).
    pub seconds: f64,
}

pub fn tokens_name(index: usize) -> String {
    format!("tokens-{index:05}.parquet")
}
pub fn prompts_name(index: usize) -> String {
    format!("prompts-{index:05}.parquet")
}
pub fn features_name(index: usize) -> String {
    format!("features-{index:05}.safetensors")
}
pub fn record_name(index: usize) -> String {
    format!("shard-{index:05}.json")
}

fn record(name: String, bytes: &[u8]) -> FileRecord {
    FileRecord { name, bytes: bytes.len() as u64, sha256: sha256_hex(bytes) }
}

/// The token table of `prompts` as a DataFrame.
pub fn token_table(prompts: &[PromptData]) -> Result<DataFrame> {
    let mut prompt_index = Vec::new();
    let mut prompt_id = Vec::new();
    let mut draw = Vec::new();
    let mut position = Vec::new();
    let (mut x, mut y, mut log_p, mut log_q, mut label) = (Vec::new(), Vec::new(), Vec::new(), Vec::new(), Vec::new());
    let mut from_y = Vec::new();
    let mut feature_row = Vec::new();
    let mut greedy_match = Vec::new();
    let mut next_feature = 0i64;
    for p in prompts {
        for (d, mix) in p.draws.iter().enumerate() {
            ensure!(
                mix.from_y.len() == p.positions.len(),
                "prompt {}: {} mixing flags for {} positions",
                p.id,
                mix.from_y.len(),
                p.positions.len()
            );
            for (i, (pos, &fy)) in p.positions.iter().zip(&mix.from_y).enumerate() {
                prompt_index.push(p.index as u32);
                prompt_id.push(p.id.clone());
                draw.push(d as u32);
                position.push(i as u32);
                x.push(pos.x);
                y.push(pos.y);
                log_p.push(pos.log_p as f32);
                log_q.push(pos.log_q as f32);
                label.push(pos.label as f32);
                from_y.push(fy);
                feature_row.push(if fy { next_feature } else { -1 });
                next_feature += fy as i64;
                greedy_match.push(pos.greedy_match);
            }
        }
    }
    let columns = vec![
        Column::new("prompt_index".into(), prompt_index),
        Column::new("prompt_id".into(), prompt_id),
        Column::new("draw".into(), draw),
        Column::new("position".into(), position),
        Column::new("x".into(), x),
        Column::new("y".into(), y),
        Column::new("log_p".into(), log_p),
        Column::new("log_q".into(), log_q),
        Column::new("label".into(), label),
        Column::new("from_y".into(), from_y),
        Column::new("feature_row".into(), feature_row),
        Column::new("greedy_match".into(), greedy_match),
    ];
    Ok(DataFrame::new_infer_height(columns)?)
}

/// The prompt table of `prompts` as a DataFrame.
pub fn prompt_table(prompts: &[PromptData]) -> Result<DataFrame> {
    let index: Vec<u32> = prompts.iter().map(|p| p.index as u32).collect();
    let id: Vec<String> = prompts.iter().map(|p| p.id.clone()).collect();
    let tokens: Vec<Series> = prompts.iter().map(|p| Series::new("".into(), p.prompt_tokens.as_slice())).collect();
    let columns = vec![
        Column::new("prompt_index".into(), index),
        Column::new("prompt_id".into(), id),
        Column::new("tokens".into(), tokens),
    ];
    Ok(DataFrame::new_infer_height(columns)?)
}

fn parquet_bytes(mut df: DataFrame, what: &str) -> Result<Vec<u8>> {
    let mut bytes = Vec::new();
    ParquetWriter::new(&mut bytes).finish(&mut df).with_context(|| format!("encoding the {what} as Parquet"))?;
    Ok(bytes)
}

/// The labelled rows' features of `prompts`, in token-table order, as safetensors bytes.
fn features_bytes(prompts: &[PromptData], hidden: usize, dtype: FeatureDtype) -> Result<Vec<u8>> {
    let mut data: Vec<u8> = Vec::new();
    let mut rows = 0usize;
    for p in prompts {
        for mix in &p.draws {
            let n = mix.from_y.iter().filter(|&&f| f).count();
            ensure!(
                mix.features.len() == n * hidden,
                "prompt {}: {} feature values for {n} labelled rows of width {hidden}",
                p.id,
                mix.features.len()
            );
            rows += n;
            match dtype {
                FeatureDtype::F32 => mix.features.iter().for_each(|v| data.extend_from_slice(&v.to_le_bytes())),
                FeatureDtype::F16 => {
                    mix.features.iter().for_each(|v| data.extend_from_slice(&half::f16::from_f32(*v).to_le_bytes()))
                }
            }
        }
    }
    let st_dtype = match dtype {
        FeatureDtype::F16 => safetensors::Dtype::F16,
        FeatureDtype::F32 => safetensors::Dtype::F32,
    };
    let view = safetensors::tensor::TensorView::new(st_dtype, vec![rows, hidden], &data)?;
    Ok(safetensors::serialize([("features", view)], None)?)
}

/// Writes shard `index` of `prompts` into `dir` (features only when `storage` stores them);
/// the record goes last.
#[allow(clippy::too_many_arguments)] // the shard's whole record, written in one place
pub fn write_shard(
    dir: &Path,
    index: usize,
    first_prompt: usize,
    prompts: &[PromptData],
    hidden: usize,
    storage: FeatureStorage,
    dtype: FeatureDtype,
    seconds: f64,
) -> Result<ShardRecord> {
    let df = token_table(prompts)?;
    let rows = df.height() as u64;
    let tokens = parquet_bytes(df, "token table")?;
    let prompt_rows = parquet_bytes(prompt_table(prompts)?, "prompt table")?;
    let features = match storage {
        FeatureStorage::Store => Some(features_bytes(prompts, hidden, dtype)?),
        FeatureStorage::Recompute => None,
    };
    let mut stats = LabelStats::default();
    for p in prompts {
        stats.add_prompt(&p.positions, p.labelled_rows());
    }
    let rec = ShardRecord {
        index,
        first_prompt,
        prompt_count: prompts.len(),
        rows,
        labelled_rows: stats.labelled_rows,
        stats,
        tokens: record(tokens_name(index), &tokens),
        prompts: record(prompts_name(index), &prompt_rows),
        features: features.as_ref().map(|f| record(features_name(index), f)),
        seconds,
    };
    write_atomic(&dir.join(&rec.tokens.name), &tokens)?;
    write_atomic(&dir.join(&rec.prompts.name), &prompt_rows)?;
    if let (Some(f), Some(bytes)) = (&rec.features, &features) {
        write_atomic(&dir.join(&f.name), bytes)?;
    }
    write_atomic(&dir.join(record_name(index)), serde_json::to_string_pretty(&rec)?.as_bytes())?;
    Ok(rec)
}

impl ShardRecord {
    /// The shard's data files (not the record itself).
    pub fn files(&self) -> Vec<&FileRecord> {
        [&self.tokens, &self.prompts].into_iter().chain(&self.features).collect()
    }
}

/// The record of shard `index` in `dir` if the shard is finished and intact: the record
/// exists and both files match its sizes and checksums. A damaged shard is reported.
pub fn finished_shard(dir: &Path, index: usize) -> Result<Option<ShardRecord>> {
    let path = dir.join(record_name(index));
    if !path.exists() {
        return Ok(None);
    }
    let rec: ShardRecord = serde_json::from_slice(&std::fs::read(&path)?)
        .with_context(|| format!("{}: malformed shard record", path.display()))?;
    for f in rec.files() {
        let p = dir.join(&f.name);
        if !p.exists() || std::fs::metadata(&p)?.len() != f.bytes || sha256_file(&p)? != f.sha256 {
            eprintln!(
                "shard {index}: {} is missing or does not match its record; producing the shard again",
                p.display()
            );
            return Ok(None);
        }
    }
    Ok(Some(rec))
}

/// The bytes of a shard's file, checked against its record: a damaged or changed file (a
/// flipped byte would otherwise be read as data) is an error that names it.
pub fn read_recorded(dir: &Path, f: &FileRecord) -> Result<Vec<u8>> {
    let p = dir.join(&f.name);
    let bytes = std::fs::read(&p).with_context(|| format!("reading {}", p.display()))?;
    let sha = sha256_hex(&bytes);
    ensure!(
        bytes.len() as u64 == f.bytes && sha == f.sha256,
        "{}: {} bytes with sha256 {}, but its shard record says {} bytes with sha256 {}: the file was damaged or changed (delete it and rerun `specx datagen` into {} to produce the shard again)",
        p.display(),
        bytes.len(),
        short_hash(&sha),
        f.bytes,
        short_hash(&f.sha256),
        dir.display()
    );
    Ok(bytes)
}

fn read_parquet(dir: &Path, f: &FileRecord, what: &str) -> Result<DataFrame> {
    let bytes = read_recorded(dir, f)?;
    ParquetReader::new(std::io::Cursor::new(bytes))
        .finish()
        .with_context(|| format!("{}: not a readable Parquet {what}", dir.join(&f.name).display()))
}

/// Reads a shard's token table.
pub fn read_tokens(dir: &Path, rec: &ShardRecord) -> Result<DataFrame> {
    read_parquet(dir, &rec.tokens, "token table")
}

/// Reads a shard's prompt table: (prompt_index, prompt_id, token ids) per prompt, in order.
pub fn read_prompts(dir: &Path, rec: &ShardRecord) -> Result<Vec<(usize, String, Vec<u32>)>> {
    let p = dir.join(&rec.prompts.name);
    let df = read_parquet(dir, &rec.prompts, "prompt table")?;
    let col = |name: &str| df.column(name).with_context(|| format!("{}: no column '{name}'", p.display()));
    let index = col("prompt_index")?.u32().context("prompt_index is not u32")?;
    let id = col("prompt_id")?.str().context("prompt_id is not a string")?;
    let tokens = col("tokens")?.list().context("tokens is not a list")?;
    let mut out = Vec::with_capacity(df.height());
    for ((i, id), t) in index.iter().zip(id.iter()).zip(tokens.amortized_iter()) {
        let (Some(i), Some(id), Some(t)) = (i, id, t) else { bail!("{}: a null in the prompt table", p.display()) };
        let t: Vec<u32> = t.as_ref().u32().context("prompt tokens are not u32")?.into_no_null_iter().collect();
        out.push((i as usize, id.to_string(), t));
    }
    Ok(out)
}

/// Reads a shard's stored features as f32, `[rows, hidden]` row-major; returns (values, hidden).
pub fn read_features(dir: &Path, rec: &ShardRecord) -> Result<(Vec<f32>, usize)> {
    let f = rec.features.as_ref().with_context(|| {
        format!("shard {} of {} stores no features (they are recomputed)", rec.index, dir.display())
    })?;
    features_from_bytes(&dir.join(&f.name), &read_recorded(dir, f)?)
}

/// Reads a safetensors feature file (a recomputation's cache) as f32.
pub fn read_features_file(p: &Path) -> Result<(Vec<f32>, usize)> {
    let bytes = std::fs::read(p).with_context(|| format!("reading {}", p.display()))?;
    features_from_bytes(p, &bytes)
}

/// The f32 features of a safetensors file's bytes (`p` names it in errors).
fn features_from_bytes(p: &Path, bytes: &[u8]) -> Result<(Vec<f32>, usize)> {
    let st = safetensors::SafeTensors::deserialize(bytes)
        .with_context(|| format!("{}: not a safetensors file", p.display()))?;
    let t = st.tensor("features").with_context(|| format!("{}: no 'features' tensor", p.display()))?;
    let shape = t.shape();
    if shape.len() != 2 {
        bail!("{}: features have shape {shape:?}, expected [rows, hidden]", p.display());
    }
    let values = match t.dtype() {
        safetensors::Dtype::F32 => {
            t.data().chunks_exact(4).map(|b| f32::from_le_bytes(b.try_into().unwrap())).collect()
        }
        safetensors::Dtype::F16 => {
            t.data().chunks_exact(2).map(|b| half::f16::from_le_bytes(b.try_into().unwrap()).to_f32()).collect()
        }
        other => bail!("{}: features stored as {other:?}, expected F16 or F32", p.display()),
    };
    Ok((values, shape[1]))
}

/// The labelled rows of a shard (Z took Y): labels in feature-row order and their features.
pub struct LabelledRows {
    pub labels: Vec<f32>,
    /// Row-major `[labels.len(), hidden]`.
    pub features: Vec<f32>,
    pub hidden: usize,
}

/// Reads a shard's labelled rows with its stored features, checking that the token table and
/// the features agree.
pub fn read_labelled(dir: &Path, rec: &ShardRecord) -> Result<LabelledRows> {
    let (features, hidden) = read_features(dir, rec)?;
    labelled_rows(dir, rec, features, hidden)
}

/// A shard's labels in feature-row order joined with `features` (stored or recomputed),
/// checking that they agree.
pub fn labelled_rows(dir: &Path, rec: &ShardRecord, features: Vec<f32>, hidden: usize) -> Result<LabelledRows> {
    let df = read_tokens(dir, rec)?;
    let labels = by_feature_row(&df, "label", features.len() / hidden.max(1), &dir.join(&rec.tokens.name))?;
    Ok(LabelledRows { labels, features, hidden })
}

/// The draft's log-probability of its token (`log_q`) and the label of every labelled row of
/// a shard, in feature-row order: what the draft's own probability says about acceptance,
/// without any feature.
pub fn labelled_log_q(dir: &Path, rec: &ShardRecord) -> Result<(Vec<f32>, Vec<f32>)> {
    let df = read_tokens(dir, rec)?;
    let n = usize::try_from(rec.labelled_rows)?;
    let table = dir.join(&rec.tokens.name);
    Ok((by_feature_row(&df, "log_q", n, &table)?, by_feature_row(&df, "label", n, &table)?))
}

/// Column `name` (f32) of token table `df`'s labelled rows, placed at their feature rows
/// (`rows` of them); every feature row must hold exactly one labelled token row. `table` names
/// the file in errors.
fn by_feature_row(df: &DataFrame, name: &str, rows: usize, table: &Path) -> Result<Vec<f32>> {
    let col = |name: &str| df.column(name).with_context(|| format!("{}: no column '{name}'", table.display()));
    let feature_rows = col("feature_row")?.i64().context("feature_row is not i64")?;
    let values = col(name)?.f32().with_context(|| format!("{name} is not f32"))?;
    let mut out = vec![f32::NAN; rows];
    let mut seen = vec![false; rows];
    for (row, v) in feature_rows.iter().zip(values.iter()) {
        if let (Some(r), Some(v)) = (row, v)
            && r >= 0
        {
            let r = r as usize;
            ensure!(r < rows, "{}: feature_row {r} beyond the {rows} feature rows", table.display());
            ensure!(
                !std::mem::replace(&mut seen[r], true),
                "{}: feature row {r} belongs to two labelled token rows",
                table.display()
            );
            out[r] = v;
        }
    }
    if let Some(missing) = seen.iter().position(|s| !s) {
        bail!("{}: feature row {missing} has no labelled token row", table.display());
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn table(feature_rows: Vec<i64>, labels: Vec<f32>) -> DataFrame {
        DataFrame::new(
            labels.len(),
            vec![Column::new("feature_row".into(), feature_rows), Column::new("label".into(), labels)],
        )
        .unwrap()
    }

    /// Labelled token rows land at their feature rows, whatever the token order; unlabelled
    /// rows (-1) are skipped; a feature row with two token rows or none is an error.
    #[test]
    fn columns_are_placed_at_their_feature_rows() {
        let t = Path::new("tokens-00000.parquet");
        let df = table(vec![-1, 2, 0, -1, 1], vec![9.0, 0.2, 0.5, 9.0, 0.7]);
        assert_eq!(by_feature_row(&df, "label", 3, t).unwrap(), [0.5, 0.7, 0.2]);
        let twice = by_feature_row(&table(vec![0, 1, 0], vec![0.1, 0.2, 0.3]), "label", 2, t).unwrap_err();
        assert!(twice.to_string().contains("feature row 0 belongs to two labelled token rows"), "{twice}");
        let missing = by_feature_row(&table(vec![0, -1, 2], vec![0.1, 0.2, 0.3]), "label", 3, t).unwrap_err();
        assert!(missing.to_string().contains("feature row 1 has no labelled token row"), "{missing}");
        let beyond = by_feature_row(&table(vec![0, 3], vec![0.1, 0.2]), "label", 2, t).unwrap_err();
        assert!(beyond.to_string().contains("feature_row 3 beyond the 2 feature rows"), "{beyond}");
    }
}
