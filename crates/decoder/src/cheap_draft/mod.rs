//! A cheaper draft: the draft model's output head restricted to a frequency-ranked
//! vocabulary subset (FR-Spec) and its matrices requantized to a cheaper block type, applied
//! once after loading. Both change only the draft distribution q, so speculative decoding stays
//! lossless; both change what a SpecDec++ head sees, so a transform is part of the draft's
//! identity that datasets, heads and results record ([`DraftTransform::identity`]).

pub mod frequencies;

use crate::fsutil::short_hash;
use crate::gguf::GgmlType;
use crate::model::Transformer;
use crate::tokenizer::Tokenizer;
use anyhow::{Context, Result, bail};
use frequencies::TokenFrequencies;
use serde::{Deserialize, Serialize};
use std::path::{Path, PathBuf};

/// The block types a draft can be requantized to (those with a round-to-nearest quantizer and
/// integer kernels here).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub enum DraftWeights {
    #[serde(rename = "q4_0")]
    Q4_0,
    #[serde(rename = "q5_0")]
    Q5_0,
    #[serde(rename = "q8_0")]
    Q8_0,
}

impl DraftWeights {
    pub fn ggml(self) -> GgmlType {
        match self {
            Self::Q4_0 => GgmlType::Q4_0,
            Self::Q5_0 => GgmlType::Q5_0,
            Self::Q8_0 => GgmlType::Q8_0,
        }
    }
}

impl std::str::FromStr for DraftWeights {
    type Err = anyhow::Error;
    fn from_str(s: &str) -> Result<Self> {
        match s.to_ascii_lowercase().as_str() {
            "q4_0" => Ok(Self::Q4_0),
            "q5_0" => Ok(Self::Q5_0),
            "q8_0" => Ok(Self::Q8_0),
            _ => bail!("unknown draft weight type '{s}' (q4_0, q5_0 or q8_0)"),
        }
    }
}

impl std::fmt::Display for DraftWeights {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Self::Q4_0 => "q4_0",
            Self::Q5_0 => "q5_0",
            Self::Q8_0 => "q8_0",
        })
    }
}

/// How a draft model is changed after loading. The default changes nothing.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DraftTransform {
    /// FR-Spec: the draft's head restricted to the `vocab` most frequent tokens of the table.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub vocab: Option<usize>,
    /// The token frequency table (default: the one that ships, [`default_table_path`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub vocab_table: Option<PathBuf>,
    /// Every draft matrix stored with more bits per weight requantized to this type.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub weights: Option<DraftWeights>,
}

/// The frequency table that ships with specx: `datasets/token-frequencies/` of the source tree
/// this binary was built from (Qwen2.5's tokenizer; Alpaca's train split, GSM8K's train set and
/// the target's responses of the committed datagen run on Alpaca train prompts; `specx
/// token-freq` rebuilds it byte for byte).
pub fn default_table_path() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../datasets/token-frequencies/qwen2.5-train.tsv")
}

impl DraftTransform {
    pub fn is_identity(&self) -> bool {
        self.vocab.is_none() && self.weights.is_none()
    }

    /// The table a vocabulary subset is taken from.
    pub fn table_path(&self) -> PathBuf {
        self.vocab_table.clone().unwrap_or_else(default_table_path)
    }

    /// A short label for method names: `full`, `v32768`, `q4_0`, `v16384+q4_0` (a table other
    /// than the shipped one adds its file stem: `v32768:code`).
    pub fn label(&self) -> String {
        let mut parts = Vec::new();
        if let Some(n) = self.vocab {
            let table = self
                .vocab_table
                .as_ref()
                .and_then(|p| p.file_stem())
                .map(|s| format!(":{}", s.to_string_lossy()))
                .unwrap_or_default();
            parts.push(format!("v{n}{table}"));
        }
        parts.extend(self.weights.map(|w| w.to_string()));
        if parts.is_empty() { "full".into() } else { parts.join("+") }
    }

    /// The table, read and checked against the subset size (before any model loads).
    pub fn table(&self) -> Result<Option<TokenFrequencies>> {
        let Some(n) = self.vocab else { return Ok(None) };
        let path = self.table_path();
        let table = TokenFrequencies::read(&path)?;
        table.check_size(n).with_context(|| format!("draft vocabulary from {}", path.display()))?;
        Ok(Some(table))
    }

    /// Everything that can be refused before a model loads: the subset's size against its
    /// table, the table itself.
    pub fn check(&self) -> Result<()> {
        self.table().map(|_| ())
    }

    /// What a draft made with this transform is recorded as, next to its file's sha256:
    /// `none`, or `vocab=N table=<sha256 of the table> weights=TYPE` (the parts that apply).
    /// The table enters by its content, not its path.
    pub fn identity(&self) -> Result<String> {
        let mut parts = Vec::new();
        if let (Some(n), Some(table)) = (self.vocab, self.table()?) {
            parts.push(format!("vocab={n} table={}", short_hash(&table.sha256())));
        }
        parts.extend(self.weights.map(|w| format!("weights={w}")));
        Ok(if parts.is_empty() { "none".into() } else { parts.join(" ") })
    }

    /// `model` (loaded with `tokenizer`) transformed: the head restricted first (fewer rows to
    /// requantize; each row is quantized on its own, so the order does not change a value),
    /// then requantized.
    pub fn apply(&self, model: Transformer, tokenizer: &Tokenizer) -> Result<Transformer> {
        let mut model = model;
        if let (Some(n), Some(table)) = (self.vocab, self.table()?) {
            table.check_tokenizer(&tokenizer.vocab_sha256(), tokenizer.path())?;
            let ids = table.top(n, model.config().vocab_size)?;
            model = model.restrict_vocab(&ids)?;
        }
        if let Some(w) = self.weights {
            model = model.requantize(w.ggml())?;
        }
        Ok(model)
    }
}

impl std::str::FromStr for DraftTransform {
    type Err = anyhow::Error;
    /// A [`DraftTransform::label`] of the shipped table: `full`, `v32768`, `q4_0`,
    /// `v16384+q4_0`.
    fn from_str(s: &str) -> Result<Self> {
        let mut t = Self::default();
        for part in s.split('+').filter(|p| *p != "full") {
            match part.strip_prefix('v') {
                Some(n) => {
                    t.vocab =
                        Some(n.parse().with_context(|| format!("draft '{s}': '{part}' is not vN (a token count)"))?)
                }
                None => t.weights = Some(part.parse().with_context(|| format!("draft '{s}'"))?),
            }
        }
        Ok(t)
    }
}

/// Refuses a record (a head, a dataset) made with one draft transform where another is used,
/// naming both. `what` says what the record is; identities as [`DraftTransform::identity`]
/// (a record without one was made before transforms existed: `none`).
pub fn check_same_transform(what: &str, recorded: Option<&str>, used: &str) -> Result<()> {
    let recorded = recorded.unwrap_or("none");
    if recorded != used {
        bail!(
            "{what} was made with the draft transform '{recorded}', and this draft runs with '{used}': a head or dataset only fits the draft it was made with"
        );
    }
    Ok(())
}
