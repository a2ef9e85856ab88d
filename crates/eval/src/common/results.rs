//! One results row per (prompt set, prompt, sampling setting, seed, method setting), the
//! per-unit files a run resumes from, and `results.parquet`.

use crate::method::Setting;
use anyhow::{Context, Result};
use polars::prelude::{Column, DataFrame, NamedFrom, Series};
use polars_io::SerReader;
use polars_io::parquet::read::ParquetReader;
use polars_io::parquet::write::ParquetWriter;
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};
use specx_decoder::coupling::Draws;
use specx_decoder::fsutil::write_atomic;
use specx_decoder::speculative::{DsiStats, RequestMetrics};
use std::path::{Path, PathBuf};

/// Every `RequestMetrics` field plus where the row comes from. Times are seconds.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ResultRow {
    pub dataset: String,
    pub prompt_index: usize,
    pub prompt_id: String,
    pub sampling: String,
    pub temperature: f32,
    pub top_k: Option<usize>,
    pub top_p: Option<f32>,
    /// How sampled tokens were drawn (coupled draws make a sampled output replayable).
    #[serde(default, skip_serializing_if = "Draws::is_independent")]
    pub draws: Draws,
    pub seed: u64,
    pub setting: Setting,
    /// True for rows computed by `specx eval replay` from a greedy trace (counts exact,
    /// times predicted by the timing model), false for rows of real runs.
    pub replayed: bool,
    pub prompt_tokens: usize,
    pub max_new_tokens: usize,
    pub n_generated: usize,
    pub n_target_calls: usize,
    pub n_draft_calls: usize,
    /// EasySpec's calibrating draft forwards (0 for other methods).
    #[serde(default)]
    pub n_calibrations: usize,
    pub n_drafted: usize,
    pub n_accepted: usize,
    pub n_verified: usize,
    pub draft_time_s: f64,
    pub target_time_s: f64,
    pub total_time_s: f64,
    pub accepted_per_round: Vec<usize>,
    pub drafted_per_round: Vec<usize>,
    /// sha256 of the output token ids (little-endian u32s).
    pub output_sha256: String,
    /// Output identical to the AR row of the same unit.
    pub identical_to_ar: bool,
    /// AR wall time / this row's wall time, same prompt, same run.
    pub speedup: f64,
    /// Greedy AR streams decoded together when this row ran: 1 for a single stream (times
    /// are wall times); more for an AR row of a batched trace run (`[methods] ar_batch`), whose
    /// decode time is its share of the batched steps, not a single-stream time.
    #[serde(default = "one")]
    pub batch: usize,
    /// Where a greedy output that differs from AR's first departs from it, with the target's
    /// logit margin there (`None` when the outputs agree, and for sampled rows).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub divergence: Option<Divergence>,
    /// DSI's scheduler counters for a real DSI row (`None` for every other method).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dsi: Option<DsiStats>,
    /// Each turn of a multi-turn prompt (empty for a single turn): the row's counts and times
    /// are the sums over its turns, its per-round lists the turns' in order, its output their
    /// answers one after the other.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub turns: Vec<TurnRow>,
}

/// One turn of a conversation: its prompt is the conversation so far (re-prefilled), its
/// answer this setting's own.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct TurnRow {
    pub prompt_tokens: usize,
    pub max_new_tokens: usize,
    pub n_generated: usize,
    pub n_target_calls: usize,
    /// Its speculative rounds (entries of the row's `accepted_per_round`).
    pub rounds: usize,
    pub total_time_s: f64,
    /// The answer's token ids.
    pub tokens: Vec<u32>,
}

/// The first position at which a greedy speculative output departs from AR's, and how close
/// the target's choice was there. On a device whose matmuls are not row-invariant (a GPU
/// forward over K+1 rows need not round like K+1 single-row forwards), a near-tie (a margin
/// of the order of the device's rounding) can flip without any algorithmic error; a large
/// margin cannot.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Divergence {
    /// Index in the generated tokens.
    pub position: usize,
    pub ar_token: u32,
    pub token: u32,
    /// `logit[ar_token] - logit[token]` of the target at that position, recomputed by one
    /// forward of the common prefix on the run's device.
    pub margin: f32,
}

fn one() -> usize {
    1
}

impl ResultRow {
    /// A greedy row of one prompt with 8 tokens in 3 target calls and no times, for tests.
    #[cfg(test)]
    pub fn example(setting: Setting) -> Self {
        Self {
            dataset: "d".into(),
            prompt_index: 0,
            prompt_id: "p".into(),
            sampling: "greedy".into(),
            temperature: 0.0,
            top_k: None,
            top_p: None,
            draws: Default::default(),
            seed: 0,
            setting,
            replayed: false,
            prompt_tokens: 3,
            max_new_tokens: 8,
            n_generated: 8,
            n_target_calls: 3,
            n_draft_calls: 8,
            n_calibrations: 0,
            n_drafted: 8,
            n_accepted: 6,
            n_verified: 8,
            draft_time_s: 0.0,
            target_time_s: 0.0,
            total_time_s: 0.0,
            accepted_per_round: vec![4, 2],
            drafted_per_round: vec![4, 4],
            output_sha256: String::new(),
            identical_to_ar: true,
            speedup: 1.0,
            batch: 1,
            divergence: None,
            dsi: None,
            turns: Vec::new(),
        }
    }

    pub fn n_discarded(&self) -> usize {
        self.n_drafted - self.n_accepted
    }
    pub fn other_time_s(&self) -> f64 {
        (self.total_time_s - self.draft_time_s - self.target_time_s).max(0.0)
    }
    pub fn greedy(&self) -> bool {
        self.temperature <= 0.0 || self.top_k == Some(1)
    }
    /// The metrics view of the row (for the derived rates, one definition everywhere).
    pub fn metrics(&self) -> RequestMetrics {
        let d = std::time::Duration::from_secs_f64;
        RequestMetrics {
            n_generated: self.n_generated,
            n_target_calls: self.n_target_calls,
            n_draft_calls: self.n_draft_calls,
            n_calibrations: self.n_calibrations,
            n_drafted: self.n_drafted,
            n_accepted: self.n_accepted,
            n_verified: self.n_verified,
            draft_time: d(self.draft_time_s),
            target_time: d(self.target_time_s),
            total_time: d(self.total_time_s),
            accepted_per_round: self.accepted_per_round.clone(),
            drafted_per_round: self.drafted_per_round.clone(),
        }
    }
}

/// sha256 of a token sequence.
pub fn tokens_sha256(tokens: &[u32]) -> String {
    let mut h = Sha256::new();
    for t in tokens {
        h.update(t.to_le_bytes());
    }
    format!("{:x}", h.finalize())
}

/// Which prompt, sampling setting and seed a unit is: the unit of running, resuming and
/// sharding (all methods of one unit run together, AR first).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct UnitKey {
    /// Position in the run's unit order (what `--shard i/n` partitions).
    pub index: usize,
    pub dataset: String,
    pub prompt_index: usize,
    pub prompt_id: String,
    pub sampling: String,
    pub seed: u64,
}

impl UnitKey {
    /// `units/<dataset>/<sampling>/s<seed>/<prompt index>.json` under the run directory.
    pub fn path(&self, dir: &Path) -> PathBuf {
        dir.join("units")
            .join(&self.dataset)
            .join(&self.sampling)
            .join(format!("s{}", self.seed))
            .join(format!("{:05}.json", self.prompt_index))
    }
}

/// Which earlier outputs a unit's suffix settings could match (the cross-request corpus of
/// `crate::experiment::earlier`), as its unit file records it.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct EarlierRecord {
    /// The earlier units, oldest first, as `dataset/prompt_id`.
    pub units: Vec<String>,
    /// sha256 of their outputs' tokens, concatenated in that order.
    pub sha256: String,
}

/// What a unit leaves on disk: its rows and the AR output (what a replay starts from).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct UnitFile {
    pub unit: UnitKey,
    pub prompt: Vec<u32>,
    pub ar_tokens: Vec<u32>,
    pub rows: Vec<ResultRow>,
    /// The earlier outputs its suffix settings could match (absent when none reads them).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub earlier: Option<EarlierRecord>,
}

impl UnitFile {
    pub fn write(&self, dir: &Path) -> Result<()> {
        write_atomic(&self.unit.path(dir), serde_json::to_string(self)?.as_bytes())
    }

    /// Whether the unit is a conversation of several turns (its rows carry them).
    pub fn is_conversation(&self) -> bool {
        self.rows.first().is_some_and(|r| !r.turns.is_empty())
    }

    /// An error for a reader of single-turn traces (`prompt` then `ar_tokens`, one request)
    /// given a conversation, whose later turns' prompts hold tokens the target did not generate.
    pub fn single_turn(&self, reader: &str) -> Result<()> {
        anyhow::ensure!(
            !self.is_conversation(),
            "{} {}: a conversation of {} turns; {reader} reads single-turn runs",
            self.unit.dataset,
            self.unit.prompt_id,
            self.rows[0].turns.len()
        );
        Ok(())
    }

    /// The unit file at `path`.
    pub fn read_path(path: &Path) -> Result<Self> {
        let text = std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
        serde_json::from_str(&text)
            .with_context(|| format!("{}: malformed unit file (delete it to rerun the unit)", path.display()))
    }

    /// The unit's file if it was written (a finished unit); None if absent.
    pub fn read(dir: &Path, unit: &UnitKey) -> Result<Option<Self>> {
        let path = unit.path(dir);
        if !path.exists() {
            return Ok(None);
        }
        let f = Self::read_path(&path)?;
        anyhow::ensure!(f.unit == *unit, "{} holds unit {:?}, expected {:?}", path.display(), f.unit, unit);
        Ok(Some(f))
    }
}

/// The rows as a DataFrame (list columns for the per-round lengths).
pub fn rows_frame(rows: &[ResultRow]) -> Result<DataFrame> {
    fn col<T, P>(name: &str, rows: &[ResultRow], f: impl Fn(&ResultRow) -> T) -> Column
    where
        Series: NamedFrom<Vec<T>, P>,
        P: ?Sized,
    {
        Column::from(Series::new(name.into(), rows.iter().map(f).collect::<Vec<T>>()))
    }
    let u = |v: usize| v as u64;
    let lists = |name: &str, f: &dyn Fn(&ResultRow) -> &Vec<usize>| {
        let series: Vec<Series> =
            rows.iter().map(|r| Series::new("".into(), f(r).iter().map(|&v| v as u32).collect::<Vec<u32>>())).collect();
        Column::from(Series::new(name.into(), series))
    };
    let columns =
        vec![
            col("dataset", rows, |r| r.dataset.clone()),
            col("prompt_index", rows, |r| u(r.prompt_index)),
            col("prompt_id", rows, |r| r.prompt_id.clone()),
            col("sampling", rows, |r| r.sampling.clone()),
            col("temperature", rows, |r| r.temperature),
            col("top_k", rows, |r| r.top_k.map(|k| k as u64)),
            col("top_p", rows, |r| r.top_p),
            col("draws", rows, |r| {
                if r.draws.is_independent() { "independent".to_string() } else { "coupled".to_string() }
            }),
            col("seed", rows, |r| r.seed),
            col("method", rows, |r| r.setting.family().to_string()),
            col("setting", rows, |r| r.setting.key()),
            col("drafter", rows, |r| r.setting.drafter().map(str::to_string)),
            col("policy", rows, |r| r.setting.policy().map(str::to_string)),
            col("scheduler", rows, |r| r.setting.scheduler().map(str::to_string)),
            col("k", rows, |r| r.setting.k().map(|k| k as u64)),
            col("head", rows, |r| r.setting.head().map(str::to_string)),
            col("threshold", rows, |r| r.setting.threshold()),
            col("min", rows, |r| r.setting.bounds().map(|b| b[0] as u64)),
            col("max", rows, |r| r.setting.bounds().map(|b| b[1] as u64)),
            col("servers", rows, |r| r.setting.servers().map(|k| k as u64)),
            col("strategy", rows, |r| r.setting.easyspec().map(|e| e.0.to_string())),
            col("calibration", rows, |r| r.setting.easyspec().map(|e| e.1.name().to_string())),
            col("workers", rows, |r| r.setting.easyspec().map(|e| e.2 as u64)),
            col("replayed", rows, |r| r.replayed),
            col("diverged_at", rows, |r| r.divergence.as_ref().map(|d| d.position as u64)),
            col("divergence_margin", rows, |r| r.divergence.as_ref().map(|d| d.margin)),
            col("dsi_tasks", rows, |r| r.dsi.as_ref().map(|d| d.tasks as u64)),
            col("dsi_preempted", rows, |r| r.dsi.as_ref().map(|d| d.preempted as u64)),
            col("dsi_stale", rows, |r| r.dsi.as_ref().map(|d| d.stale as u64)),
            col("dsi_waits", rows, |r| r.dsi.as_ref().map(|d| d.waits as u64)),
            col("dsi_worker_busy_s", rows, |r| r.dsi.as_ref().map(|d| d.worker_busy_s.iter().sum::<f64>())),
            col("prompt_tokens", rows, |r| u(r.prompt_tokens)),
            col("max_new_tokens", rows, |r| u(r.max_new_tokens)),
            col("n_generated", rows, |r| u(r.n_generated)),
            col("n_target_calls", rows, |r| u(r.n_target_calls)),
            col("n_draft_calls", rows, |r| u(r.n_draft_calls)),
            col("n_calibrations", rows, |r| u(r.n_calibrations)),
            col("n_drafted", rows, |r| u(r.n_drafted)),
            col("n_accepted", rows, |r| u(r.n_accepted)),
            col("n_verified", rows, |r| u(r.n_verified)),
            col("n_discarded", rows, |r| u(r.n_discarded())),
            col("draft_time_s", rows, |r| r.draft_time_s),
            col("target_time_s", rows, |r| r.target_time_s),
            col("other_time_s", rows, |r| r.other_time_s()),
            col("total_time_s", rows, |r| r.total_time_s),
            col("tokens_per_s", rows, |r| r.metrics().tokens_per_sec()),
            col("speedup", rows, |r| r.speedup),
            col("acceptance_rate", rows, |r| r.metrics().acceptance_rate()),
            col("discard_rate", rows, |r| r.metrics().discard_rate()),
            col("verification_rate", rows, |r| r.metrics().verification_rate()),
            lists("accepted_per_round", &|r| &r.accepted_per_round),
            lists("drafted_per_round", &|r| &r.drafted_per_round),
            col("output_sha256", rows, |r| r.output_sha256.clone()),
            col("identical_to_ar", rows, |r| r.identical_to_ar),
            col("batch", rows, |r| u(r.batch)),
        ];
    Ok(DataFrame::new_infer_height(columns)?)
}

/// The `results.parquet` of a finished `specx eval` or `specx eval replay` run, read back with
/// typed columns whose errors name the file and the column.
pub struct ResultsTable {
    df: DataFrame,
    path: PathBuf,
}

impl ResultsTable {
    /// Reads `dir/results.parquet`.
    pub fn read(dir: &Path) -> Result<Self> {
        let path = dir.join("results.parquet");
        let f = std::fs::File::open(&path).with_context(|| {
            format!("opening {} (is the run finished? `specx eval` and `specx eval replay` write it)", path.display())
        })?;
        let df = ParquetReader::new(f)
            .finish()
            .with_context(|| format!("{}: not a readable results table", path.display()))?;
        Ok(Self { df, path })
    }

    pub fn height(&self) -> usize {
        self.df.height()
    }

    pub fn has(&self, name: &str) -> bool {
        self.df.column(name).is_ok()
    }

    fn context(&self, name: &str) -> String {
        format!("{}: column {name} (a results table of this specx version?)", self.path.display())
    }

    fn column(&self, name: &str) -> Result<&Column> {
        self.df.column(name).with_context(|| self.context(name))
    }

    pub fn strs(&self, name: &str) -> Result<Vec<Option<String>>> {
        Ok(self
            .column(name)?
            .str()
            .with_context(|| self.context(name))?
            .iter()
            .map(|v| v.map(str::to_string))
            .collect())
    }

    pub fn u64s(&self, name: &str) -> Result<Vec<Option<u64>>> {
        Ok(self.column(name)?.u64().with_context(|| self.context(name))?.iter().collect())
    }

    pub fn f64s(&self, name: &str) -> Result<Vec<Option<f64>>> {
        Ok(self.column(name)?.f64().with_context(|| self.context(name))?.iter().collect())
    }

    pub fn bools(&self, name: &str) -> Result<Vec<Option<bool>>> {
        Ok(self.column(name)?.bool().with_context(|| self.context(name))?.iter().collect())
    }

    /// A list-of-u32 column (per-round counts) of row `i`.
    pub fn u32_list(&self, name: &str, i: usize) -> Result<Vec<usize>> {
        let lists = self.column(name)?.list().with_context(|| self.context(name))?;
        Ok(match lists.get_as_series(i) {
            Some(series) => {
                series.u32().with_context(|| self.context(name))?.into_no_null_iter().map(|v| v as usize).collect()
            }
            None => Vec::new(),
        })
    }
}

/// Writes `rows` to `path` as Parquet, atomically.
pub fn write_parquet(path: &Path, rows: &[ResultRow]) -> Result<()> {
    let mut df = rows_frame(rows)?;
    let mut bytes = Vec::new();
    ParquetWriter::new(&mut bytes).finish(&mut df).context("encoding results as Parquet")?;
    write_atomic(path, &bytes)
}
