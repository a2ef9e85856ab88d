//! Real drafting time of layer-parallel forwards on this machine's threads: single-token
//! draft forwards after a 128-token context, sequential vs each strategy with 1..W workers,
//! timed in the same run (medians and spread over repetitions; the ratio to the sequential
//! forward is what to read on a shared machine).

use anyhow::{Context, Result, ensure};
use specx_decoder::layer_groups::LayerGroups;
use specx_decoder::report::markdown_table;
use specx_decoder::{WeightMode, device_from_name, load_model_as};
use std::path::PathBuf;
use std::time::Instant;

#[derive(clap::Args)]
pub struct BenchArgs {
    /// The draft model (HF directory or .gguf).
    #[arg(long)]
    pub model: PathBuf,
    /// tokenizer.json to use instead of the model's own (the one beside it, or a GGUF's
    /// metadata).
    #[arg(long)]
    pub tokenizer: Option<PathBuf>,
    /// Strategies (presets or the paper's notation), comma-separated.
    #[arg(long, value_delimiter = ',', default_value = "lp2,lp3,lp4,lp5")]
    pub strategies: Vec<String>,
    /// Worker-thread counts, comma-separated.
    #[arg(long, value_delimiter = ',', default_value = "1,2")]
    pub workers: Vec<usize>,
    /// Timed forwards per configuration and repetition.
    #[arg(long, default_value_t = 32)]
    pub steps: usize,
    /// Repetitions (configurations interleaved, so drift on a shared machine hits all alike).
    #[arg(long, default_value_t = 5)]
    pub reps: usize,
    /// GGUF weight path on the CPU (`q8`, `native`, `f32`).
    #[arg(long, value_enum, default_value = "q8")]
    pub weights: WeightMode,
    #[arg(long, default_value = "cpu")]
    pub device: String,
}

fn quantiles(mut v: Vec<f64>) -> (f64, f64, f64) {
    v.sort_by(f64::total_cmp);
    let q = |f: f64| v[((v.len() - 1) as f64 * f).round() as usize];
    (q(0.5), q(0.1), q(0.9))
}

pub fn run(a: &BenchArgs) -> Result<()> {
    ensure!(
        a.steps >= 1 && a.reps >= 1 && !a.workers.is_empty() && a.workers.iter().all(|&w| w >= 1),
        "--steps, --reps and --workers need values >= 1"
    );
    for s in &a.strategies {
        LayerGroups::check_syntax(s).with_context(|| format!("--strategies: '{s}'"))?;
    }
    let device = device_from_name(&a.device)?;
    let lm = load_model_as(&a.model, a.tokenizer.as_deref(), &device, a.weights)?;
    let model = &lm.model;
    let layers = model.config().num_hidden_layers;
    let mut configs: Vec<(String, LayerGroups, usize)> =
        vec![("sequential".into(), LayerGroups::sequential(layers), 1)];
    for s in &a.strategies {
        let g = LayerGroups::parse(s, layers)?;
        configs.extend(a.workers.iter().map(|&w| (format!("{s} x{w}"), g.clone(), w)));
    }
    let tokens = crate::profile::context_tokens(&lm, 128 + a.steps)?;
    let mut times: Vec<Vec<f64>> = vec![Vec::new(); configs.len()];
    for _ in 0..a.reps {
        for (c, (_, groups, workers)) in configs.iter().enumerate() {
            let mut cache = model.new_cache(1);
            model.forward(&tokens[..128], &mut cache)?;
            for i in 0..a.steps {
                let t = Instant::now();
                model.forward_fuzzy(&tokens[128 + i..129 + i], &mut cache, groups, *workers)?;
                times[c].push(t.elapsed().as_secs_f64());
            }
        }
    }
    let base = quantiles(times[0].clone()).0;
    let rows: Vec<Vec<String>> = configs
        .iter()
        .zip(times)
        .map(|((name, g, _), t)| {
            let (med, lo, hi) = quantiles(t);
            vec![
                name.clone(),
                g.to_string(),
                format!("{:.2}", med * 1e3),
                format!("{:.2} - {:.2}", lo * 1e3, hi * 1e3),
                format!("{:.3}", base / med),
            ]
        })
        .collect();
    println!(
        "Single-token draft forwards after 128 tokens on {} ({} threads available), {} x {} per configuration, interleaved:\n\n{}",
        a.model.display(),
        std::thread::available_parallelism().map_or(1, |n| n.get()),
        a.reps,
        a.steps,
        markdown_table(&["configuration", "groups", "median ms", "p10 - p90 ms", "speedup vs sequential"], &rows)
    );
    Ok(())
}
