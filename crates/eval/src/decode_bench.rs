//! `specx bench-decode`: autoregressive vs speculative decoding on a prompt set with the real
//! pair, all methods on the same prompts in the same run (speedups are same-run ratios).

use crate::bench::PairArgs;
use crate::methods::Method;
use crate::report::markdown_table;
use anyhow::{ensure, Result};
use indicatif::{ProgressBar, ProgressStyle};
use specx_decoder::spec::{RequestMetrics, SpecConfig};
use specx_decoder::{check_pair, default_device, load_model_as, ChatTemplate, SamplingConfig, WeightMode};
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
    /// Weight paths to compare, one after the other (`native`, `f32`); speedups are against
    /// the autoregressive run of the same path, and of the first path listed.
    #[arg(long, value_delimiter = ',', default_value = "native")]
    pub weights: Vec<WeightMode>,
    /// Also write per-prompt metrics as JSON here.
    #[arg(long)]
    pub json: Option<PathBuf>,
}

#[derive(serde::Serialize)]
struct Row {
    weights: String,
    method: String,
    prompt: String,
    metrics: RequestMetrics,
    identical_to_ar: bool,
}

/// Totals of one method on one weight path.
struct MethodTotals {
    name: String,
    metrics: RequestMetrics,
    identical: usize,
}

/// Runs the comparison and prints the table.
pub fn run(a: DecodeBenchArgs) -> Result<()> {
    ensure!(!a.weights.is_empty(), "--weights needs at least one of native, f32");
    let prompts = specx_datagen::prompts::load_humaneval(&a.prompts)?;
    ensure!(a.n <= prompts.len(), "{} has {} prompts, {} requested", a.prompts.display(), prompts.len(), a.n);
    let mut rows = Vec::new();
    let mut results = Vec::new();
    let mut pair = String::new();
    for &mode in &a.weights {
        let (totals, mut mode_rows, names) = run_path(&a, mode, &prompts)?;
        pair = names;
        rows.append(&mut mode_rows);
        results.push((mode, totals));
    }
    let first_ar = results[0].1[0].metrics.total_time.as_secs_f64();
    let mut table = Vec::new();
    for (mode, totals) in &results {
        let ar_time = totals[0].metrics.total_time.as_secs_f64();
        for t in totals {
            let m = &t.metrics;
            let secs = m.total_time.as_secs_f64();
            let mut row = vec![mode.to_string(), t.name.clone(), format!("{:.2}", m.tokens_per_sec()), format!("{:.2}x", ar_time / secs)];
            if results.len() > 1 {
                row.push(format!("{:.2}x", first_ar / secs));
            }
            row.extend([
                if m.n_verified > 0 { format!("{:.3}", m.acceptance_rate()) } else { "-".into() },
                format!("{:.2}", m.tokens_per_target_call()),
                format!("{:.3}", m.discard_rate()),
                format!("{}/{}", t.identical, a.n),
            ]);
            table.push(row);
        }
    }
    println!("{} HumanEval prompts, greedy, {} new tokens, {pair}\n", a.n, a.max_new_tokens);
    let first_label = format!("speedup vs {} AR", a.weights[0]);
    let mut header = vec!["weights", "method", "tokens/s", "speedup"];
    if results.len() > 1 {
        header.push(&first_label);
    }
    header.extend(["acceptance rate", "tokens/target call", "discard rate", "same output as AR"]);
    print!("{}", markdown_table(&header, &table));
    if let Some(path) = &a.json {
        specx_decoder::fsutil::write_atomic(path, serde_json::to_string_pretty(&rows)?.as_bytes())?;
    }
    Ok(())
}

/// Every method on every prompt with the pair loaded on one weight path. Returns the totals
/// per method (AR first), the per-prompt rows, and a description of the pair.
fn run_path(a: &DecodeBenchArgs, mode: WeightMode, prompts: &[specx_datagen::prompts::PromptRecord]) -> Result<(Vec<MethodTotals>, Vec<Row>, String)> {
    let device = default_device();
    let (draft_path, target_path) = a.pair.paths();
    let draft = load_model_as(&draft_path, None, &device, mode)?;
    let target = load_model_as(&target_path, None, &device, mode)?;
    check_pair(&draft, &target)?;
    let mut methods = vec![Method::Autoregressive];
    methods.extend(a.k.iter().map(|&k| Method::SpecDec { k }));
    let cfg = SpecConfig { max_new_tokens: a.max_new_tokens, sampling: SamplingConfig::greedy(), seed: 0 };
    let template = ChatTemplate::qwen();

    let bar = ProgressBar::new((a.n * methods.len()) as u64);
    bar.set_style(ProgressStyle::with_template("{bar:40} {pos}/{len} runs, {elapsed} elapsed, ETA {eta} {msg}")?);
    let mut rows = Vec::new();
    let mut totals: Vec<MethodTotals> = methods.iter().map(|m| MethodTotals { name: m.name(), metrics: RequestMetrics::default(), identical: 0 }).collect();
    for p in prompts.iter().take(a.n) {
        let text = template.apply(&specx_datagen::prompts::humaneval_instruction(p));
        let ids = target.tokenizer.encode(&text)?;
        let mut reference: Option<Vec<u32>> = None;
        for (m, total) in methods.iter().zip(totals.iter_mut()) {
            bar.set_message(format!("{mode} {} {}", p.id, m.name()));
            let g = m.run(&target.model, Some(&draft.model), &ids, &cfg, &target.eos_ids)?;
            let same = reference.get_or_insert_with(|| g.tokens.clone()) == &g.tokens;
            total.identical += same as usize;
            total.metrics.accumulate(&g.metrics);
            if bar.is_hidden() {
                // No terminal (CI, redirected output): one log line per run instead of a bar.
                eprintln!(
                    "{mode} {} {}: {} tokens, {:.2} tokens/s, {:.2} tokens/target call, same as AR: {same}",
                    p.id,
                    m.name(),
                    g.metrics.n_generated,
                    g.metrics.tokens_per_sec(),
                    g.metrics.tokens_per_target_call()
                );
            }
            rows.push(Row { weights: mode.to_string(), method: m.name(), prompt: p.id.clone(), metrics: g.metrics, identical_to_ar: same });
            bar.inc(1);
        }
    }
    bar.finish_and_clear();
    let pair = format!("draft {} / target {}", draft.path.display(), target.path.display());
    Ok((totals, rows, pair))
}
