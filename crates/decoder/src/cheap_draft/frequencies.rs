//! FR-Spec's token frequency table (arXiv 2502.14856): how often each token id occurs in a
//! tokenized corpus, from which a draft's vocabulary subset is the N most frequent tokens.
//!
//! The file is text: one JSON header line (format, the tokenizer's vocabulary sha256, the
//! special tokens ranked first, the corpus sources with their checksums, totals), then one
//! `id<TAB>count` line per token seen, most frequent first, ties by id. The same counts give
//! the same bytes, so a table rebuilt from the same corpus is identical.

use crate::fsutil::{sha256_hex, short_hash, write_atomic};
use anyhow::{Context, Result, bail, ensure};
use serde::{Deserialize, Serialize};
use std::path::Path;

pub const FORMAT: &str = "specx-token-frequencies/1";

/// One corpus a table counted.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct CorpusSource {
    /// The prompt set's name (`alpaca`, `gsm8k`).
    pub name: String,
    /// The file's name (where it lives differs between machines; its sha256 does not).
    pub file: String,
    pub sha256: String,
    /// Which rows were counted (`train of [4000, 800, 200] seed 0`, `all`).
    pub rows: String,
    /// Rows counted and the tokens they gave.
    pub count: usize,
    pub tokens: u64,
}

/// The header line of a table.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TableHeader {
    pub format: String,
    /// [`crate::Tokenizer::vocab_sha256`] of the tokenizer that made the counts.
    pub tokenizer_vocab_sha256: String,
    /// Token ids the tokenizer has (a subset may not be larger).
    pub vocab_size: usize,
    /// Special tokens (chat markup, EOS): first in every subset, whatever their counts.
    pub always: Vec<u32>,
    pub sources: Vec<CorpusSource>,
    /// Tokens counted, and distinct ids among them.
    pub tokens: u64,
    pub distinct: usize,
}

/// A frequency table: its header and the tokens seen, most frequent first.
#[derive(Clone, Debug, PartialEq)]
pub struct TokenFrequencies {
    pub header: TableHeader,
    pub ranked: Vec<(u32, u64)>,
}

impl TokenFrequencies {
    /// The table of `counts` (indexed by token id).
    pub fn from_counts(
        counts: &[u64],
        always: Vec<u32>,
        tokenizer_vocab_sha256: String,
        vocab_size: usize,
        sources: Vec<CorpusSource>,
    ) -> Self {
        let mut ranked: Vec<(u32, u64)> =
            counts.iter().enumerate().filter(|&(_, &c)| c > 0).map(|(id, &c)| (id as u32, c)).collect();
        ranked.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(&b.0)));
        let header = TableHeader {
            format: FORMAT.into(),
            tokenizer_vocab_sha256,
            vocab_size,
            always,
            sources,
            tokens: counts.iter().sum(),
            distinct: ranked.len(),
        };
        Self { header, ranked }
    }

    pub fn to_bytes(&self) -> Vec<u8> {
        let mut out = serde_json::to_string(&self.header).expect("a header serialises");
        out.push('\n');
        for (id, c) in &self.ranked {
            out.push_str(&format!("{id}\t{c}\n"));
        }
        out.into_bytes()
    }

    /// Writes the table atomically.
    pub fn write(&self, path: &Path) -> Result<()> {
        write_atomic(path, &self.to_bytes())
    }

    /// Reads and checks a table (`path` names it in errors).
    pub fn read(path: &Path) -> Result<Self> {
        let bytes =
            std::fs::read(path).with_context(|| format!("reading the token frequency table {}", path.display()))?;
        Self::parse(&bytes).with_context(|| format!("{}: not a token frequency table", path.display()))
    }

    pub fn parse(bytes: &[u8]) -> Result<Self> {
        let text = std::str::from_utf8(bytes).context("not UTF-8 text")?;
        let mut lines = text.lines();
        let header: TableHeader =
            serde_json::from_str(lines.next().context("empty file")?).context("malformed header line")?;
        ensure!(header.format == FORMAT, "format '{}', this specx reads '{FORMAT}'", header.format);
        let mut ranked = Vec::with_capacity(header.distinct);
        for (i, line) in lines.enumerate() {
            let bad = || format!("line {}: '{line}' is not 'id<TAB>count'", i + 2);
            let (id, count) = line.split_once('\t').with_context(bad)?;
            ranked.push((id.parse::<u32>().with_context(bad)?, count.parse::<u64>().with_context(bad)?));
        }
        ensure!(ranked.len() == header.distinct, "{} token lines, the header says {}", ranked.len(), header.distinct);
        ensure!(
            ranked.windows(2).all(|w| w[0].1 > w[1].1 || (w[0].1 == w[1].1 && w[0].0 < w[1].0)),
            "the lines are not ranked (count descending, then id)"
        );
        Ok(Self { header, ranked })
    }

    /// sha256 of the table's bytes (what a draft's identity records).
    pub fn sha256(&self) -> String {
        sha256_hex(&self.to_bytes())
    }

    /// Refuses a table made with another tokenizer than the one whose vocabulary hashes to
    /// `tokenizer_vocab_sha256` (`tokenizer` names it).
    pub fn check_tokenizer(&self, tokenizer_vocab_sha256: &str, tokenizer: &Path) -> Result<()> {
        if self.header.tokenizer_vocab_sha256 != tokenizer_vocab_sha256 {
            bail!(
                "the token frequency table was made with another tokenizer (vocabulary sha256 {}), not {} (vocabulary sha256 {})",
                short_hash(&self.header.tokenizer_vocab_sha256),
                tokenizer.display(),
                short_hash(tokenizer_vocab_sha256)
            );
        }
        Ok(())
    }

    /// The `n` token ids of a draft vocabulary of `n` over a model vocabulary of `vocab`: the
    /// special tokens, then the most frequent, then (when `n` exceeds what the corpus saw) the
    /// unseen ids in ascending order. Returned ascending (the head's rows in file order).
    pub fn top(&self, n: usize, vocab: usize) -> Result<Vec<u32>> {
        self.check_size(n)?;
        ensure!(n <= vocab, "a draft vocabulary of {n} tokens: need 1..={vocab} (the model's vocabulary)");
        let always = &self.header.always;
        let mut taken = vec![false; vocab];
        let mut out = Vec::with_capacity(n);
        let ranked = self.ranked.iter().map(|&(id, _)| id);
        for id in always.iter().copied().chain(ranked).chain(0..vocab as u32) {
            if out.len() == n {
                break;
            }
            ensure!((id as usize) < vocab, "token {id} of the table is outside the model's vocabulary of {vocab}");
            if !std::mem::replace(&mut taken[id as usize], true) {
                out.push(id);
            }
        }
        out.sort_unstable();
        Ok(out)
    }

    /// Refuses a subset size of zero, beyond the tokenizer's vocabulary, or too small for the
    /// special tokens (what can be said before any model loads).
    pub fn check_size(&self, n: usize) -> Result<()> {
        let v = self.header.vocab_size;
        ensure!(n >= 1 && n <= v, "a draft vocabulary of {n} tokens: need 1..={v} (the tokenizer's vocabulary)");
        let specials = self.header.always.len();
        ensure!(
            n >= specials,
            "a draft vocabulary of {n} tokens cannot hold the {specials} special tokens it always keeps"
        );
        Ok(())
    }

    /// Share of the counted tokens that a subset of the `n` most frequent covers.
    pub fn coverage(&self, n: usize) -> f64 {
        let covered: u64 = self.ranked.iter().take(n).map(|&(_, c)| c).sum();
        covered as f64 / self.header.tokens.max(1) as f64
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn table() -> TokenFrequencies {
        let counts = [0u64, 5, 9, 5, 0, 1, 0, 0];
        TokenFrequencies::from_counts(&counts, vec![7], "abc".into(), 8, Vec::new())
    }

    #[test]
    fn ranks_by_count_then_id_and_round_trips_byte_for_byte() {
        let t = table();
        assert_eq!(t.ranked, vec![(2, 9), (1, 5), (3, 5), (5, 1)]);
        let bytes = t.to_bytes();
        let back = TokenFrequencies::parse(&bytes).unwrap();
        assert_eq!((back.to_bytes(), back.sha256()), (bytes, t.sha256()));
        // Specials first, then by frequency, then unseen ids; returned ascending.
        assert_eq!(t.top(3, 8).unwrap(), vec![1, 2, 7]);
        assert_eq!(t.top(7, 8).unwrap(), vec![0, 1, 2, 3, 4, 5, 7]);
        assert!((t.coverage(2) - 14.0 / 20.0).abs() < 1e-12);
    }

    #[test]
    fn bad_sizes_tokenizers_and_files_are_refused_by_name() {
        let t = table();
        assert!(format!("{:#}", t.top(0, 8).unwrap_err()).contains("need 1..=8"));
        assert!(format!("{:#}", t.top(9, 8).unwrap_err()).contains("need 1..=8"));
        let e = format!("{:#}", t.check_tokenizer("def", Path::new("tok.json")).unwrap_err());
        assert!(
            e.contains("another tokenizer") && e.contains("tok.json") && e.contains("abc") && e.contains("def"),
            "{e}"
        );
        let mut bytes = t.to_bytes();
        bytes.extend_from_slice(b"9\tx\n");
        assert!(format!("{:#}", TokenFrequencies::parse(&bytes).unwrap_err()).contains("line 6"));
        let swapped = String::from_utf8(t.to_bytes()).unwrap().replace("2\t9\n1\t5\n", "1\t5\n2\t9\n");
        assert!(format!("{:#}", TokenFrequencies::parse(swapped.as_bytes()).unwrap_err()).contains("not ranked"));
    }
}
