//! `specx bench-decode`: autoregressive vs speculative decoding on a prompt set with the real
//! pair, all methods on the same prompts in the same run (speedups are same-run ratios).

use crate::bench::PairArgs;
use crate::methods::Method;
use crate::report::markdown_table;
use anyhow::{ensure, Result};
use indicatif::{ProgressBar, ProgressStyle};
use specx_decoder::spec::{RequestMetrics, SpecConfig};
use specx_decoder::{check_pair, default_device, load_model, ChatTemplate, SamplingConfig};
use std::path::PathBuf;

/// Options of `specx bench-decode`.
#[derive(clap::Args, Debug)]
pub struct DecodeBenchArgs {
    #[command(flatten)]
    pub pair: PairArgs,
    /// HumanEval JSONL(.gz) file.
    #[arg(long, default_value = "../shared/datasets/humaneval/HumanEval.jsonl.gz")]
    pub prompts: PathBuf,
    /// Number of prompts (the first N of the file).
    #[arg(long, default_value_t = 10)]
    pub n: usize,
    /// Tokens to generate per prompt.
    #[arg(long, default_value_t = 128)]
    pub max_new_tokens: usize,
    /// Candidate lengths K of fixed-K speculative decoding to compare.
    #[arg(long, value_delimiter = ',', default_value = "1,2,3,4,6,8")]
    pub k: Vec<usize>,
    /// Also write per-prompt metrics as JSON here.
    #[arg(long)]
    pub json: Option<PathBuf>,
}

#[derive(serde::Serialize)]
struct Row {
    method: String,
    prompt: String,
    metrics: RequestMetrics,
    identical_to_ar: bool,
}

/// Runs the comparison and prints the table.
pub fn run(a: DecodeBenchArgs) -> Result<()> {
    let device = default_device();
    let (draft_path, target_path) = a.pair.paths();
    let draft = load_model(&draft_path, None, &device)?;
    let target = load_model(&target_path, None, &device)?;
    check_pair(&draft, &target)?;
    let prompts = specx_datagen::prompts::load_humaneval(&a.prompts)?;
    ensure!(a.n <= prompts.len(), "{} has {} prompts, {} requested", a.prompts.display(), prompts.len(), a.n);
    let mut methods = vec![Method::Autoregressive];
    methods.extend(a.k.iter().map(|&k| Method::SpecDec { k }));
    let cfg = SpecConfig { max_new_tokens: a.max_new_tokens, sampling: SamplingConfig::greedy(), seed: 0 };
    let template = ChatTemplate::qwen();

    let bar = ProgressBar::new((a.n * methods.len()) as u64);
    bar.set_style(ProgressStyle::with_template("{bar:40} {pos}/{len} runs, {elapsed} elapsed, ETA {eta} {msg}")?);
    let mut rows = Vec::new();
    let mut totals: Vec<RequestMetrics> = vec![RequestMetrics::default(); methods.len()];
    let mut identical = vec![0usize; methods.len()];
    for p in prompts.iter().take(a.n) {
        let text = template.apply(&specx_datagen::prompts::humaneval_instruction(p));
        let ids = target.tokenizer.encode(&text)?;
        let mut reference: Option<Vec<u32>> = None;
        for (mi, m) in methods.iter().enumerate() {
            bar.set_message(format!("{} {}", p.id, m.name()));
            let g = m.run(&target.model, Some(&draft.model), &ids, &cfg, &target.eos_ids)?;
            let same = reference.get_or_insert_with(|| g.tokens.clone()) == &g.tokens;
            identical[mi] += same as usize;
            totals[mi].accumulate(&g.metrics);
            if bar.is_hidden() {
                // No terminal (CI, redirected output): one log line per run instead of a bar.
                eprintln!(
                    "{} {}: {} tokens, {:.2} tokens/s, {:.2} tokens/target call, same as AR: {same}",
                    p.id,
                    m.name(),
                    g.metrics.n_generated,
                    g.metrics.tokens_per_sec(),
                    g.metrics.tokens_per_target_call()
                );
            }
            rows.push(Row { method: m.name(), prompt: p.id.clone(), metrics: g.metrics, identical_to_ar: same });
            bar.inc(1);
        }
    }
    bar.finish_and_clear();
    let ar_time = totals[0].total_time.as_secs_f64();
    let table: Vec<Vec<String>> = methods
        .iter()
        .zip(&totals)
        .zip(&identical)
        .map(|((m, t), same)| {
            vec![
                m.name(),
                format!("{:.2}", t.tokens_per_sec()),
                format!("{:.2}x", ar_time / t.total_time.as_secs_f64()),
                if t.n_verified > 0 { format!("{:.3}", t.acceptance_rate()) } else { "-".into() },
                format!("{:.2}", t.tokens_per_target_call()),
                format!("{:.3}", t.discard_rate()),
                format!("{}/{}", same, a.n),
            ]
        })
        .collect();
    println!(
        "{} HumanEval prompts, greedy, {} new tokens, draft {} / target {}\n",
        a.n,
        a.max_new_tokens,
        draft.path.display(),
        target.path.display()
    );
    print!(
        "{}",
        markdown_table(&["method", "tokens/s", "speedup", "acceptance rate", "tokens/target call", "discard rate", "same output as AR"], &table)
    );
    if let Some(path) = &a.json {
        specx_decoder::fsutil::write_atomic(path, serde_json::to_string_pretty(&rows)?.as_bytes())?;
    }
    Ok(())
}
