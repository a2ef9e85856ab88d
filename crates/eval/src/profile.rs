//! `specx profile`: what a forward of each model costs on this machine, as the timing models
//! of DSI and EasySpec need it: a forward of r new rows (r = 1..max) after contexts of several
//! lengths (the verification cost curve) and the same rows as a token tree's call, per-layer
//! attention and MLP time and the LM head for
//! one row, prefill time (TTFT) and time per output token (TPOT, DSI appendix F.1), and on a
//! GPU the kernel launches and bytes read of a decode step and a 5-row call ([`launches`]).
//! Medians over repetitions; everything is written to JSON and printed as tables.

pub mod launches;

use crate::common::plot;
use crate::common::plot::draw_legend;
use crate::method::models::PairArgs;
use crate::report::markdown_table;
use anyhow::{Result, anyhow, ensure};
use plotters::prelude::*;
use specx_decoder::fsutil::write_atomic;
use specx_decoder::generate::RecordedSteps;
use specx_decoder::tree_mask::TreeMask;
use specx_decoder::{ForwardOutput, KvCache, LoadedModel, WeightMode, load_model_as, pair_up};
use std::path::PathBuf;
use std::time::Instant;

#[derive(clap::Args, Debug)]
pub struct ProfileArgs {
    #[command(flatten)]
    pub pair: PairArgs,
    /// GGUF weight path: q8 (the default: integer dot products on 8-bit activations), native or f32.
    #[arg(long, default_value = "q8")]
    pub weights: WeightMode,
    /// Context lengths (tokens already in the cache) of the r-row forwards.
    #[arg(long, value_delimiter = ',', default_value = "128,512,1024")]
    pub contexts: Vec<usize>,
    /// Largest number of new rows per forward (1..=N are measured).
    #[arg(long, default_value_t = 21)]
    pub max_rows: usize,
    /// Repetitions per measurement (the median is kept).
    #[arg(long, default_value_t = 3)]
    pub reps: usize,
    /// Output tokens of the TPOT measurement (greedy, after a 128-token prompt).
    #[arg(long, default_value_t = 32)]
    pub tpot_tokens: usize,
    /// Device the forwards run on: `cpu`, `cuda[:N]`, `wgpu[:N]` (on a GPU, `--weights q8` and
    /// `native` keep GGUF blocks and f16/bf16 safetensors matrices as stored, decoded in the
    /// device's product). Every timed forward reads its output back to the host, and per-layer
    /// times wait for each sublayer, so GPU times include the work queued, not its launch. On
    /// a GPU the kernel launches of a one-row and a 5-row forward are counted per layer.
    #[arg(long, default_value = "cpu")]
    pub device: String,
    /// JSON output (the plot goes beside it, same name with .png).
    #[arg(long, default_value = "profile.json")]
    pub out: PathBuf,
}

pub use crate::common::profile_data::{ForwardCurve, ModelProfile, Profile};

fn median(mut xs: Vec<f64>) -> f64 {
    xs.sort_by(f64::total_cmp);
    xs[xs.len() / 2]
}

/// Real text of at least `n` tokens: HumanEval-like Python, repeated.
pub(crate) fn context_tokens(lm: &LoadedModel, n: usize) -> Result<Vec<u32>> {
    let text = "def fibonacci(n: int) -> int:\n    \"\"\"Return the n-th Fibonacci number, computed iteratively.\"\"\"\n    a, b = 0, 1\n    for _ in range(n):\n        a, b = b, a + b\n    return a\n\n";
    let mut ids = Vec::new();
    while ids.len() < n {
        ids.extend(lm.tokenizer.encode(text)?);
    }
    ids.truncate(n);
    Ok(ids)
}

/// The most rows of a profiled tree call (the runtime's limit for one).
const TREE_ROWS: usize = 32;

/// A balanced binary tree of `rows` rows: row i's parent is row (i - 1) / 2.
fn balanced_tree(rows: usize) -> TreeMask {
    let parents: Vec<Option<usize>> = (0..rows).map(|i| i.checked_sub(1).map(|j| j / 2)).collect();
    TreeMask::new(&parents).expect("a balanced tree is well formed")
}

fn profile_model(role: &str, lm: &LoadedModel, a: &ProfileArgs) -> Result<ModelProfile> {
    let model = &lm.model;
    let max_ctx = a.contexts.iter().copied().max().unwrap_or(128).max(128);
    let tokens = context_tokens(lm, max_ctx + a.max_rows)?;
    let mut forward = Vec::new();
    let mut ttft = Vec::new();
    for &ctx in &a.contexts {
        let mut cache = model.new_cache(1);
        let mut prefill = Vec::new();
        for _ in 0..a.reps.max(1) {
            cache.truncate(0);
            let t = Instant::now();
            model.forward_last(&tokens[..ctx], &mut cache)?;
            prefill.push(t.elapsed().as_secs_f64());
        }
        ttft.push((ctx, median(prefill)));
        // Median seconds of `call` after the context, its last row read back.
        let mut timed = |call: &dyn Fn(&mut KvCache) -> Result<ForwardOutput>| -> Result<f64> {
            median_seconds(a.reps, ctx, &mut cache, |cache| call(cache).map(|out| drop(out.logits_tail(1))))
        };
        let seconds = (1..=a.max_rows)
            .map(|r| timed(&|cache| model.forward(&tokens[ctx..ctx + r], cache)))
            .collect::<Result<Vec<_>>>()?;
        let tree_seconds = (1..=a.max_rows.min(TREE_ROWS))
            .map(|r| timed(&|cache| model.forward_tree(&tokens[ctx..ctx + r], &balanced_tree(r), cache)))
            .collect::<Result<Vec<_>>>()?;
        let recorded_seconds = recorded_curve(lm, &tokens, ctx, a, &mut cache)?;
        eprintln!(
            "{role}: context {ctx}: 1 row {:.1} ms, {} rows {:.1} ms",
            seconds[0] * 1e3,
            a.max_rows,
            seconds[a.max_rows - 1] * 1e3
        );
        forward.push(ForwardCurve { context: ctx, seconds, tree_seconds, recorded_seconds });
    }
    // Per layer, one row after a 512-token context (or the largest below it).
    let layer_context = a.contexts.iter().copied().filter(|&c| c <= 512).max().unwrap_or(a.contexts[0]);
    let mut cache = model.new_cache(1);
    model.forward_last(&tokens[..layer_context], &mut cache)?;
    let layers = model.config().num_hidden_layers;
    let (mut attn, mut mlp, mut head) = (vec![Vec::new(); layers], vec![Vec::new(); layers], Vec::new());
    for _ in 0..a.reps.max(1) {
        let (_, times) = model.forward_timed(&tokens[layer_context..layer_context + 1], &mut cache)?;
        cache.truncate(layer_context);
        for l in 0..layers {
            attn[l].push(times.attn[l].as_secs_f64());
            mlp[l].push(times.mlp[l].as_secs_f64());
        }
        head.push(times.lm_head.as_secs_f64());
    }
    let mut counted = Vec::new();
    for rows in launches::COUNTED_ROWS.into_iter().filter(|&r| r <= a.max_rows) {
        counted.extend(launches::count(lm, &tokens, layer_context, rows, &mut cache)?);
    }
    // TPOT: greedy generation after a 128-token prompt.
    let mut sampler = specx_decoder::Sampler::new(specx_decoder::SamplingConfig::greedy(), 0);
    let (out, stats) =
        specx_decoder::generate::generate(model, &tokens[..128], a.tpot_tokens, &mut sampler, &[], |_| Ok(()))?;
    ensure!(!out.is_empty(), "no tokens generated");
    Ok(ModelProfile {
        role: role.into(),
        path: lm.path.clone(),
        sha256: lm.weights_sha256()?,
        layers,
        forward,
        layer_context,
        attention_s: attn.into_iter().map(median).collect(),
        mlp_s: mlp.into_iter().map(median).collect(),
        lm_head_s: median(head),
        ttft_s: ttft,
        tpot_s: stats.decode_time.as_secs_f64() / stats.decode_steps.max(1) as f64,
        launches: counted,
    })
}

/// Median seconds of `reps` (at least one) runs of `call` after `ctx` cached tokens, the cache
/// cut back to them after each.
fn median_seconds(
    reps: usize,
    ctx: usize,
    cache: &mut KvCache,
    mut call: impl FnMut(&mut KvCache) -> Result<()>,
) -> Result<f64> {
    let mut seconds = Vec::new();
    for _ in 0..reps.max(1) {
        let t = Instant::now();
        call(cache)?;
        seconds.push(t.elapsed().as_secs_f64());
        cache.truncate(ctx);
    }
    Ok(median(seconds))
}

/// Median seconds of verifications of 1..=N rows after `ctx` tokens (`cache` holds them), each
/// a replay of the call recorded for its rows with every row's logits read back, the cache cut
/// back after each; N is `--max-rows`, at most what a recorded call takes. Empty where the
/// model cannot record its calls.
fn recorded_curve(
    lm: &LoadedModel,
    tokens: &[u32],
    ctx: usize,
    a: &ProfileArgs,
    cache: &mut KvCache,
) -> Result<Vec<f64>> {
    let model = &lm.model;
    let Some(mut recorded) = RecordedSteps::when_possible(model) else { return Ok(Vec::new()) };
    let mut curve = Vec::new();
    for r in 1..=a.max_rows.min(recorded.max_rows()) {
        let rows = &tokens[ctx..ctx + r];
        // The first call records (untimed, as the plain curve's shapes were warmed up).
        recorded.scores(model, rows, cache)?;
        cache.truncate(ctx);
        curve.push(median_seconds(a.reps, ctx, cache, |cache| recorded.scores(model, rows, cache).map(drop))?);
    }
    if let Some(why) = recorded.refused() {
        eprintln!("{}: no verification was replayed: {why}", lm.path.display());
        return Ok(Vec::new());
    }
    Ok(curve)
}

pub fn run(a: ProfileArgs) -> Result<()> {
    ensure!(
        a.max_rows >= 1 && !a.contexts.is_empty() && a.contexts.iter().all(|&c| c >= 1),
        "--max-rows and --contexts need values >= 1"
    );
    let device = specx_decoder::device_from_name(&a.device)?;
    let ((draft_path, target_path), (draft_tok, target_tok)) = (a.pair.paths(), a.pair.tokenizers());
    let mut draft = load_model_as(&draft_path, draft_tok, &device, a.weights)?;
    let target = load_model_as(&target_path, target_tok, &device, a.weights)?;
    pair_up(&mut draft, &target)?;
    let machine = crate::common::machine::Machine::measure();
    let models = vec![profile_model("draft", &draft, &a)?, profile_model("target", &target, &a)?];
    let device_name = a.device.parse::<specx_decoder::DeviceName>()?.to_string();
    let profile = Profile { weights: a.weights.to_string(), device: device_name, machine, reps: a.reps, models };
    write_atomic(&a.out, serde_json::to_string_pretty(&profile)?.as_bytes())?;
    print!("{}", tables(&profile));
    let png = a.out.with_extension("png");
    plot(&profile, &png)?;
    eprintln!("wrote {} and {}", a.out.display(), png.display());
    Ok(())
}

fn tables(p: &Profile) -> String {
    let mut s = format!(
        "Machine: {} ({} cores, {:.1} GB/s); device {}; weights {}; medians of {} runs.\n\n",
        p.machine.cpu, p.machine.cores, p.machine.bandwidth_gb_s, p.device, p.weights, p.reps
    );
    let mut rows = Vec::new();
    for m in &p.models {
        for c in &m.forward {
            let pick = |r: usize| c.seconds.get(r - 1).map_or("-".into(), |v| format!("{:.1}", v * 1e3));
            rows.push(vec![
                m.role.clone(),
                c.context.to_string(),
                pick(1),
                pick(2),
                pick(5),
                pick(9),
                pick(c.seconds.len()),
                format!("{:.2}", c.seconds[c.seconds.len().min(5) - 1] / c.seconds[0]),
            ]);
        }
    }
    s.push_str(&markdown_table(
        &["model", "context", "1 row ms", "2 rows ms", "5 rows ms", "9 rows ms", "max rows ms", "5 rows / 1 row"],
        &rows,
    ));
    s.push('\n');
    s.push_str(&recorded_table(p));
    s.push_str(&tree_table(p));
    let rows: Vec<Vec<String>> = p
        .models
        .iter()
        .map(|m| {
            let attn: f64 = m.attention_s.iter().sum();
            let mlp: f64 = m.mlp_s.iter().sum();
            vec![
                m.role.clone(),
                format!("{:.2} ({:.2}/layer)", attn * 1e3, attn * 1e3 / m.layers as f64),
                format!("{:.2} ({:.2}/layer)", mlp * 1e3, mlp * 1e3 / m.layers as f64),
                format!("{:.2}", m.lm_head_s * 1e3),
                m.ttft_s.iter().map(|(c, t)| format!("{c}: {:.0}", t * 1e3)).collect::<Vec<_>>().join(", "),
                format!("{:.1}", m.tpot_s * 1e3),
            ]
        })
        .collect();
    s.push_str(&markdown_table(
        &["model", "attention ms (1 row)", "MLP ms (1 row)", "LM head ms", "TTFT ms by prompt length", "TPOT ms"],
        &rows,
    ));
    let counted = launches::table(&p.models);
    if !counted.is_empty() {
        s.push('\n');
        s.push_str(&counted);
    }
    s
}

/// Verifications replaying recorded calls against the plain forwards of the same rows, where
/// the profile has them.
fn recorded_table(p: &Profile) -> String {
    let mut rows = Vec::new();
    for m in &p.models {
        for c in m.forward.iter().filter(|c| !c.recorded_seconds.is_empty()) {
            let rec = &c.recorded_seconds;
            let five = rec.len().min(5);
            rows.push(vec![
                m.role.clone(),
                c.context.to_string(),
                format!("{:.2}", c.seconds[0] * 1e3),
                format!("{:.2}", rec[0] * 1e3),
                five.to_string(),
                format!("{:.2}", c.seconds[five - 1] * 1e3),
                format!("{:.2}", rec[five - 1] * 1e3),
                format!("{:.2}", rec[five - 1] / rec[0]),
            ]);
        }
    }
    if rows.is_empty() {
        return String::new();
    }
    let header =
        ["model", "context", "1 row ms", "recorded", "rows", "plain ms", "recorded ms", "recorded rows / 1 row"];
    format!(
        "Verifications replaying recorded calls (every row's logits read back):\n\n{}\n",
        markdown_table(&header, &rows)
    )
}

/// Tree calls beside chain calls of as many rows: what verifying a token tree costs.
fn tree_table(p: &Profile) -> String {
    let mut rows = Vec::new();
    for m in &p.models {
        for c in m.forward.iter().filter(|c| !c.tree_seconds.is_empty()) {
            for r in [2, 5, 9, 17, 32].into_iter().filter(|&r| r <= c.tree_seconds.len()) {
                let (chain, tree) = (c.seconds[r - 1], c.tree_seconds[r - 1]);
                rows.push(vec![
                    m.role.clone(),
                    c.context.to_string(),
                    r.to_string(),
                    format!("{:.1}", chain * 1e3),
                    format!("{:.1}", tree * 1e3),
                    format!("{:.2}", tree / chain),
                    format!("{:.2}", tree / c.seconds[0]),
                ]);
            }
        }
    }
    if rows.is_empty() {
        return String::new();
    }
    let mut s =
        markdown_table(&["model", "context", "rows", "chain ms", "tree ms", "tree / chain", "tree / 1 row"], &rows);
    s.push('\n');
    s
}

/// The verification cost curve: forward time of r rows relative to one row, per model and
/// context.
fn plot(p: &Profile, path: &std::path::Path) -> Result<()> {
    crate::common::plot::render_png(path, |root| {
        let e = |e: DrawingAreaErrorKind<_>| anyhow!("{e}");
        let max_r = p.models.iter().flat_map(|m| m.forward.iter().map(|c| c.seconds.len())).max().unwrap_or(1);
        let ymax = p
            .models
            .iter()
            .flat_map(|m| m.forward.iter().flat_map(|c| c.seconds.iter().map(move |s| s / c.seconds[0])))
            .fold(1.0, f64::max)
            * 1.1;
        let mut chart = ChartBuilder::on(root)
            .caption("verification cost: forward of r rows / forward of 1 row", ("sans-serif", 22))
            .margin(16)
            .x_label_area_size(48)
            .y_label_area_size(64)
            .build_cartesian_2d(1.0..max_r as f64, 0.0..ymax)
            .map_err(e)?;
        plot::draw_mesh(&mut chart, "new rows r", "time relative to 1 row")?;
        let palette = plot::tab10(&[0, 3, 2, 4, 1, 9]);
        let mut i = 0;
        for m in &p.models {
            for c in &m.forward {
                let col = palette[i % palette.len()];
                i += 1;
                let pts: Vec<(f64, f64)> =
                    c.seconds.iter().enumerate().map(|(r, s)| ((r + 1) as f64, s / c.seconds[0])).collect();
                chart
                    .draw_series(LineSeries::new(pts, col.stroke_width(2)))
                    .map_err(e)?
                    .label(format!("{} ctx {} (1 row {:.0} ms)", m.role, c.context, c.seconds[0] * 1e3))
                    .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 16, y)], col.stroke_width(2)));
            }
        }
        draw_legend(&mut chart, None, 0.85, 14)?;
        Ok(())
    })
}
