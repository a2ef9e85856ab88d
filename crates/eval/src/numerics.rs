//! `specx numerics`: how far a weight mode's numbers are from the exact path's, measured as
//! llama.cpp's perplexity tool does (`--kl-divergence`): the same text is cut into windows of
//! `ctx` tokens, each evaluated from an empty cache; the second half of each window is scored.
//! Per mode: perplexity of the text; against the reference mode (`native`, bit-identical to
//! f32): mean and 99th percentile of KL(reference || mode) per position, and the share of
//! positions where both pick the same top-1 token.

use crate::report::markdown_table;
use anyhow::{Context, Result, ensure};
use specx_decoder::{WeightMode, default_device, load_model_as};
use std::path::{Path, PathBuf};

/// Options of `specx numerics`.
#[derive(clap::Args, Debug)]
pub struct NumericsArgs {
    /// Model (HF directory, .gguf, or hub id hf:ORG/NAME[@REV]). Default: the fetched target.
    #[arg(long)]
    pub model: Option<PathBuf>,
    /// tokenizer.json to use instead of the model's own (the one beside it, or a GGUF's
    /// metadata).
    #[arg(long)]
    pub tokenizer: Option<PathBuf>,
    /// Text to score (UTF-8). Default: Alpaca responses from the dataset cache
    /// (`$SPECX_DATASETS/alpaca/alpaca_5000.json`), in file order.
    #[arg(long)]
    pub text: Option<PathBuf>,
    /// Tokens scored in all (at least; whole windows are used).
    #[arg(long, default_value_t = 2048)]
    pub tokens: usize,
    /// Window length; the second half of each window is scored.
    #[arg(long, default_value_t = 512)]
    pub ctx: usize,
    /// The reference mode and the modes compared with it (the first is the reference).
    #[arg(long, value_delimiter = ',', default_value = "native,q8")]
    pub weights: Vec<WeightMode>,
    /// Also write the results as JSON here.
    #[arg(long)]
    pub json: Option<PathBuf>,
}

/// One mode's figures.
#[derive(Debug, Clone, serde::Serialize)]
pub struct ModeNumerics {
    pub weights: String,
    pub perplexity: f64,
    /// Against the reference mode (0 for the reference itself).
    pub mean_kl: f64,
    pub p99_kl: f64,
    pub max_kl: f64,
    pub top1_agreement: f64,
}

#[derive(Debug, serde::Serialize)]
pub struct NumericsReport {
    pub model: String,
    pub scored_tokens: usize,
    pub windows: usize,
    pub ctx: usize,
    pub modes: Vec<ModeNumerics>,
}

/// The default text: Alpaca responses joined by blank lines.
fn default_text() -> Result<String> {
    let path = specx_run::paths::dataset_cache_dir().join("alpaca/alpaca_5000.json");
    let raw = std::fs::read_to_string(&path)
        .with_context(|| format!("reading {} (run scripts/fetch-datasets.sh, or pass --text)", path.display()))?;
    let rows: Vec<serde_json::Value> =
        serde_json::from_str(&raw).with_context(|| format!("{}: not a JSON array", path.display()))?;
    Ok(rows.iter().filter_map(|r| r.get("output").and_then(|o| o.as_str())).collect::<Vec<_>>().join("\n\n"))
}

/// Log-softmax of `logits` in f64.
fn log_softmax(logits: &[f32]) -> Vec<f64> {
    let max = logits.iter().fold(f32::NEG_INFINITY, |m, &v| m.max(v)) as f64;
    let sum: f64 = logits.iter().map(|&v| (v as f64 - max).exp()).sum();
    let lse = max + sum.ln();
    logits.iter().map(|&v| v as f64 - lse).collect()
}

/// KL(p || q) from log-probabilities.
fn kl(logp: &[f64], logq: &[f64]) -> f64 {
    logp.iter().zip(logq).map(|(&a, &b)| if a > -745.0 { a.exp() * (a - b) } else { 0.0 }).sum::<f64>().max(0.0)
}

fn argmax(v: &[f64]) -> usize {
    v.iter().enumerate().fold((0, f64::NEG_INFINITY), |best, (i, &x)| if x > best.1 { (i, x) } else { best }).0
}

/// Scored log-probabilities of every mode over the same windows: per mode, per scored
/// position, the log-softmax row (only what the comparisons need is kept: see `summarise`).
pub fn measure(
    model: &Path,
    tokenizer: Option<&Path>,
    tokens: &[u32],
    ctx: usize,
    windows: usize,
    modes: &[WeightMode],
) -> Result<Vec<ModeNumerics>> {
    let device = default_device();
    let half = ctx / 2;
    // Reference rows are kept (per position: log-probs) to compare each mode as it runs.
    let mut reference: Vec<Vec<f64>> = Vec::new();
    let mut out = Vec::new();
    for (mi, &mode) in modes.iter().enumerate() {
        eprintln!("numerics: {} weights, {windows} windows of {ctx} tokens...", mode);
        let lm = load_model_as(model, tokenizer, &device, mode)?;
        let (mut nll, mut kls, mut agree, mut n) = (0f64, Vec::new(), 0usize, 0usize);
        for w in 0..windows {
            let win = &tokens[w * ctx..(w + 1) * ctx];
            let mut cache = lm.model.new_cache(1);
            let logits = lm.model.forward(win, &mut cache)?.logits_tail(ctx);
            for (p, row) in logits.iter().enumerate().take(ctx - 1).skip(half) {
                let lp = log_softmax(row);
                nll -= lp[win[p + 1] as usize];
                if mi == 0 {
                    reference.push(lp);
                } else {
                    let r = &reference[n];
                    kls.push(kl(r, &lp));
                    agree += (argmax(r) == argmax(&lp)) as usize;
                }
                n += 1;
            }
        }
        kls.sort_by(f64::total_cmp);
        let q = |f: f64| if kls.is_empty() { 0.0 } else { kls[((kls.len() - 1) as f64 * f).round() as usize] };
        out.push(ModeNumerics {
            weights: mode.to_string(),
            perplexity: (nll / n as f64).exp(),
            mean_kl: if kls.is_empty() { 0.0 } else { kls.iter().sum::<f64>() / kls.len() as f64 },
            p99_kl: q(0.99),
            max_kl: q(1.0),
            top1_agreement: if mi == 0 { 1.0 } else { agree as f64 / n as f64 },
        });
    }
    Ok(out)
}

pub fn run(a: NumericsArgs) -> Result<()> {
    ensure!(a.weights.len() >= 2, "--weights needs the reference mode and at least one more");
    ensure!(a.ctx >= 4 && a.ctx.is_multiple_of(2), "--ctx must be an even number of at least 4");
    let model = a.model.clone().unwrap_or_else(crate::method::models::default_target);
    let text = match &a.text {
        Some(p) => std::fs::read_to_string(p).with_context(|| format!("reading {}", p.display()))?,
        None => default_text()?,
    };
    let tok = specx_decoder::loader::load_tokenizer(&model, a.tokenizer.as_deref())?;
    let ids = tok.encode(&text)?;
    let scored_per_window = a.ctx / 2 - 1;
    let windows = a.tokens.div_ceil(scored_per_window);
    ensure!(
        ids.len() >= windows * a.ctx,
        "the text has {} tokens; {} windows of {} need {}",
        ids.len(),
        windows,
        a.ctx,
        windows * a.ctx
    );
    let modes = measure(&model, a.tokenizer.as_deref(), &ids, a.ctx, windows, &a.weights)?;
    let report = NumericsReport {
        model: model.display().to_string(),
        scored_tokens: windows * scored_per_window,
        windows,
        ctx: a.ctx,
        modes,
    };
    println!(
        "{}: {} scored tokens ({} windows of {}, second halves), reference {}",
        report.model, report.scored_tokens, windows, a.ctx, a.weights[0]
    );
    let rows: Vec<Vec<String>> = report
        .modes
        .iter()
        .map(|m| {
            vec![
                m.weights.clone(),
                format!("{:.4}", m.perplexity),
                format!("{:.2e}", m.mean_kl),
                format!("{:.2e}", m.p99_kl),
                format!("{:.2e}", m.max_kl),
                format!("{:.4}", m.top1_agreement),
            ]
        })
        .collect();
    print!("{}", markdown_table(&["weights", "perplexity", "mean KL", "p99 KL", "max KL", "top-1 agreement"], &rows));
    if let Some(path) = &a.json {
        specx_decoder::fsutil::write_atomic(path, serde_json::to_string_pretty(&report)?.as_bytes())?;
    }
    Ok(())
}
