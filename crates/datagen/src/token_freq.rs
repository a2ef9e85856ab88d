//! `specx token-freq`: FR-Spec's token frequency table from training text, the source of a
//! draft's frequency-ranked vocabulary subset ([`specx_decoder::cheap_draft`]). Only training data
//! is counted: Alpaca's train split (the split every specx config uses: 4,000 / 800 / 200 rows,
//! seed 0), GSM8K's train set, and optionally a directory of source files; never a test set.

use anyhow::{Context, Result, ensure};
use clap::Args;
use indicatif::{ProgressBar, ProgressStyle};
use rayon::prelude::*;
use specx_decoder::Tokenizer;
use specx_decoder::cheap_draft::frequencies::{CorpusSource, TokenFrequencies};
use specx_decoder::fsutil::sha256_file;
use specx_decoder::loader::model_cache_dir;
use specx_prompts::{PromptFormat, SplitSpec, load};
use specx_run::RunManifest;
use specx_run::paths::dataset_cache_dir;
use std::path::{Path, PathBuf};

#[derive(Args, Clone, Debug)]
pub struct TokenFreqArgs {
    /// Where to write the table (text: a JSON header line, then `id<TAB>count` by rank).
    #[arg(long)]
    pub out: PathBuf,
    /// The draft's tokenizer: a tokenizer.json, or the draft model itself (an HF directory or
    /// a GGUF file, whose own tokenizer is read) [default: the Qwen2.5 pair's, in the model
    /// cache].
    #[arg(long)]
    pub tokenizer: Option<PathBuf>,
    /// Alpaca JSON: its train split is counted (instruction, input and output)
    /// [default: $SPECX_DATASETS/alpaca/alpaca_5000.json]. `none` leaves it out.
    #[arg(long)]
    pub alpaca: Option<PathBuf>,
    /// GSM8K's train set, JSON lines (question and answer) [default:
    /// $SPECX_DATASETS/gsm8k/train.jsonl]. `none` leaves it out.
    #[arg(long)]
    pub gsm8k: Option<PathBuf>,
    /// Also count every `*.py` file under this directory, in path order (a code corpus).
    #[arg(long)]
    pub code: Option<PathBuf>,
    /// Also count the target's response tokens (`y`) of a `specx datagen` run on training
    /// prompts (e.g. datasets/qwen-alpaca-train-4000): the chat-formatted text the pair
    /// actually generates. Its split must not be a test split.
    #[arg(long, value_name = "RUN_DIR")]
    pub datagen: Option<PathBuf>,
    /// Count only the first N shards of --datagen (a growing run then gives the same table)
    /// [default: every shard written].
    #[arg(long, value_name = "N")]
    pub datagen_shards: Option<usize>,
    /// No progress bar.
    #[arg(long)]
    pub no_progress: bool,
}

/// The Alpaca split every specx config uses.
fn alpaca_train() -> SplitSpec {
    SplitSpec { name: "train".into(), sizes: vec![4000, 800, 200], ..SplitSpec::all() }
}

/// `given`, else the default, `none` for leaving the source out.
fn source_path(given: &Option<PathBuf>, default: PathBuf) -> Option<PathBuf> {
    match given {
        Some(p) if p.as_os_str() == "none" => None,
        Some(p) => Some(p.clone()),
        None => Some(default),
    }
}

/// One source's texts, and how it is recorded.
pub struct Corpus {
    pub texts: Vec<String>,
    pub source: CorpusSource,
}

fn prompt_corpus(name: &str, format: PromptFormat, path: &Path, split: &SplitSpec, fields: &[&str]) -> Result<Corpus> {
    let rows = load(format, path)?;
    let idx = split.indices(rows.len()).with_context(|| format!("{}: the {} split", path.display(), split.name))?;
    let mut texts = Vec::new();
    for &i in &idx {
        texts.extend(fields.iter().filter_map(|f| rows[i].fields.get(*f)).filter(|t| !t.is_empty()).cloned());
    }
    let rows_label = if split.name == "all" {
        "all".to_string()
    } else {
        format!("{} of {:?} seed {}", split.name, split.sizes, split.seed)
    };
    let file = path.file_name().map(|f| f.to_string_lossy().into_owned()).unwrap_or_default();
    Ok(Corpus {
        texts,
        source: CorpusSource {
            name: name.into(),
            file,
            sha256: sha256_file(path)?,
            rows: rows_label,
            count: idx.len(),
            tokens: 0,
        },
    })
}

fn code_corpus(dir: &Path) -> Result<Corpus> {
    let mut files = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).with_context(|| format!("reading {}", d.display()))? {
            let p = e?.path();
            if p.is_dir() {
                stack.push(p);
            } else if p.extension().is_some_and(|x| x == "py") {
                files.push(p);
            }
        }
    }
    files.sort();
    ensure!(!files.is_empty(), "{}: no *.py files", dir.display());
    // The corpus's checksum: over every file's relative path and sha256, in order.
    let mut listing = String::new();
    let mut texts = Vec::with_capacity(files.len());
    for f in &files {
        let bytes = std::fs::read(f).with_context(|| format!("reading {}", f.display()))?;
        listing.push_str(&format!(
            "{}\t{}\n",
            f.strip_prefix(dir).unwrap_or(f).display(),
            specx_decoder::fsutil::sha256_hex(&bytes)
        ));
        texts.push(String::from_utf8_lossy(&bytes).into_owned());
    }
    let file = dir.file_name().map(|f| f.to_string_lossy().into_owned()).unwrap_or_default();
    Ok(Corpus {
        texts,
        source: CorpusSource {
            name: "code".into(),
            file,
            sha256: specx_decoder::fsutil::sha256_hex(listing.as_bytes()),
            rows: "all *.py".into(),
            count: files.len(),
            tokens: 0,
        },
    })
}

/// The target's response tokens of a datagen run (already token ids), and how they are recorded.
fn datagen_tokens(dir: &Path, shards: Option<usize>) -> Result<(Vec<u32>, CorpusSource)> {
    let mut m = crate::manifest::Manifest::read(dir)?;
    ensure!(
        m.prompts.split != "test",
        "{}: a datagen run on a test split; the table counts training text only",
        dir.display()
    );
    m.shards.sort_by_key(|r| r.index);
    if let Some(n) = shards {
        ensure!(
            m.shards.iter().take(n).enumerate().all(|(i, r)| r.index == i) && m.shards.len() >= n,
            "{}: --datagen-shards {n}, but shards 0..{n} are not all written",
            dir.display()
        );
        m.shards.truncate(n);
    }
    let mut ids = Vec::new();
    let mut listing = String::new();
    for rec in &m.shards {
        let df = crate::shard::read_tokens(dir, rec)?;
        let y = df.column("y").with_context(|| format!("{}: shard {} has no column 'y'", dir.display(), rec.index))?;
        ids.extend(y.u32().context("y is not u32")?.into_no_null_iter());
        listing.push_str(&format!("{}\n", rec.tokens.sha256));
    }
    let file = dir.file_name().map(|f| f.to_string_lossy().into_owned()).unwrap_or_default();
    let rows = format!(
        "{} prompts of the {} split, shards 0..{}",
        m.shards.iter().map(|r| r.prompt_count).sum::<usize>(),
        m.prompts.split,
        m.shards.len()
    );
    let source = CorpusSource {
        name: "datagen".into(),
        file,
        sha256: specx_decoder::fsutil::sha256_hex(listing.as_bytes()),
        rows,
        count: m.shards.len(),
        tokens: ids.len() as u64,
    };
    Ok((ids, source))
}

/// Counts every corpus's tokens with `tokenizer` (and the already tokenized `ids`) and builds
/// the table.
pub fn build(
    tokenizer: &Tokenizer,
    corpora: Vec<Corpus>,
    ids: Vec<(Vec<u32>, CorpusSource)>,
    progress: bool,
) -> Result<TokenFrequencies> {
    let vocab_size = tokenizer.vocab().values().max().map_or(0, |&m| m as usize + 1);
    let mut counts = vec![0u64; vocab_size];
    let total: usize = corpora.iter().map(|c| c.texts.len()).sum();
    let bar = if progress { ProgressBar::new(total as u64) } else { ProgressBar::hidden() };
    bar.set_style(
        ProgressStyle::with_template("counting tokens {bar:40} {pos}/{len} texts {elapsed}").expect("a valid template"),
    );
    let mut sources = Vec::new();
    for mut c in corpora {
        let ids: Vec<Vec<u32>> =
            c.texts.par_iter().map(|t| tokenizer.encode(t).inspect(|_| bar.inc(1))).collect::<Result<_>>()?;
        for &id in ids.iter().flatten() {
            counts[id as usize] += 1;
        }
        c.source.tokens = ids.iter().map(|v| v.len() as u64).sum();
        sources.push(c.source);
    }
    bar.finish_and_clear();
    for (tokens, source) in ids {
        for &id in &tokens {
            ensure!(
                (id as usize) < vocab_size,
                "{}: token {id} is outside the tokenizer's vocabulary of {vocab_size}",
                source.file
            );
            counts[id as usize] += 1;
        }
        sources.push(source);
    }
    Ok(TokenFrequencies::from_counts(&counts, tokenizer.special_ids(), tokenizer.vocab_sha256(), vocab_size, sources))
}

pub fn run(args: &TokenFreqArgs) -> Result<()> {
    let tok_path =
        args.tokenizer.clone().unwrap_or_else(|| model_cache_dir().join("qwen2.5-coder-0.5b-instruct/tokenizer.json"));
    let tokenizer = if tok_path.extension().is_some_and(|e| e == "json") {
        Tokenizer::from_file(&tok_path)?
    } else {
        specx_decoder::loader::load_tokenizer(&tok_path, None)?
    };
    let mut corpora = Vec::new();
    if let Some(p) = source_path(&args.alpaca, dataset_cache_dir().join("alpaca/alpaca_5000.json")) {
        corpora.push(prompt_corpus(
            "alpaca",
            PromptFormat::Alpaca,
            &p,
            &alpaca_train(),
            &["instruction", "input", "output"],
        )?);
    }
    if let Some(p) = source_path(&args.gsm8k, dataset_cache_dir().join("gsm8k/train.jsonl")) {
        // The file's own name: a directory on the way to it may well say "test".
        ensure!(
            !p.file_name().is_some_and(|n| n.to_string_lossy().contains("test")),
            "{}: looks like a test set; the table counts training text only",
            p.display()
        );
        corpora.push(prompt_corpus("gsm8k", PromptFormat::Gsm8k, &p, &SplitSpec::all(), &["question", "answer"])?);
    }
    if let Some(dir) = &args.code {
        corpora.push(code_corpus(dir)?);
    }
    let mut extra_counts = Vec::new();
    if let Some(dir) = &args.datagen {
        extra_counts.push(datagen_tokens(dir, args.datagen_shards)?);
    }
    ensure!(
        !corpora.is_empty() || !extra_counts.is_empty(),
        "no corpus to count: give --alpaca, --gsm8k, --code or --datagen"
    );

    let table = build(&tokenizer, corpora, extra_counts, !args.no_progress)?;
    table.write(&args.out)?;
    let h = &table.header;
    println!(
        "{}: {} tokens, {} distinct ids of {} ({} special tokens first)",
        args.out.display(),
        h.tokens,
        h.distinct,
        h.vocab_size,
        h.always.len()
    );
    println!("| top N | share of the counted tokens |\n|---:|---:|");
    for n in [4096, 8192, 16384, 32768, 65536] {
        println!("| {n} | {:.4} |", table.coverage(n));
    }
    println!("sha256 {}", table.sha256());
    Ok(())
}
