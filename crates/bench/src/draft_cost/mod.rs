//! `specx draft-cost`: what a cheaper draft costs, measured against the target in the same
//! run. For every draft setting (vocabulary subset x weight type, [`DraftTransform`]) it times a
//! one-token draft step and the draft's 1..N-row calls; the target's one-token step and its
//! calls are timed between them, so c = draft step / target step compares numbers taken
//! minutes apart at most. Every timed step includes what decoding does with its logits (to the
//! host, argmax), so a vocabulary subset is charged its scatter into the full vocabulary.
//! With `--eval`, [`frontier`] joins the costs with an eval run of the same drafts.

pub mod frontier;

use anyhow::{Context, Result, ensure};
use specx_decoder::generate::last_logits;
use specx_decoder::report::markdown_table;
use specx_decoder::sampling::argmax;
use specx_decoder::{
    DeviceName, DraftTransform, DraftWeights, LoadedModel, Transformer, WeightMode, load_model_as, open_device,
};
use specx_eval::method::models::PairArgs;
use std::path::PathBuf;
use std::time::Instant;

#[derive(clap::Args, Debug)]
pub struct DraftCostArgs {
    #[command(flatten)]
    pub pair: PairArgs,
    /// Draft vocabulary sizes (`full`: the whole vocabulary), from the frequency table.
    #[arg(long, value_delimiter = ',', default_value = "full,65536,32768,16384,8192")]
    pub vocab: Vec<String>,
    /// The token frequency table [default: the shipped one].
    #[arg(long)]
    pub vocab_table: Option<PathBuf>,
    /// Draft weight types (`stored`: as in the file; q4_0, q5_0, q8_0: requantized).
    #[arg(long, value_delimiter = ',', default_value = "stored,q4_0")]
    pub draft_weights: Vec<String>,
    /// Weight path of both models (the integer kernels by default: the fastest here).
    #[arg(long, default_value = "q8")]
    pub weights: WeightMode,
    /// Prompt tokens before the timed steps (the context they attend to).
    #[arg(long, default_value_t = 128)]
    pub context: usize,
    /// One-token steps per timing.
    #[arg(long, default_value_t = 32)]
    pub steps: usize,
    /// Timings per setting (interleaved across settings; medians and ranges are over these).
    #[arg(long, default_value_t = 5)]
    pub reps: usize,
    /// Row counts of the call-cost curve, as multiples of a one-row call of the same model.
    #[arg(long, value_delimiter = ',', default_value = "1,2,3,5,9,13,21")]
    pub call_rows: Vec<usize>,
    /// Also write the results as JSON.
    #[arg(long)]
    pub json: Option<PathBuf>,
    /// Instead of measuring, read the results of an earlier run (its --json).
    #[arg(long, value_name = "JSON")]
    pub from: Option<PathBuf>,
    /// An eval run of the same drafts (`[methods] drafts`, e.g. configs/eval/cheap-drafts.toml):
    /// print tokens per target call and acceptance per draft next to c, and how much of the
    /// target's greedy output each vocabulary subset covers.
    #[arg(long, value_name = "RUN_DIR")]
    pub eval: Option<PathBuf>,
    /// With --eval: draw c against tokens per target call (greedy, fixed K) into this PNG.
    #[arg(long, value_name = "PNG")]
    pub plot: Option<PathBuf>,
}

/// One draft setting's figures.
#[derive(Debug, serde::Serialize, serde::Deserialize)]
pub struct DraftCost {
    pub label: String,
    pub identity: String,
    pub weight_bytes_per_token: usize,
    /// Median and range of one-token step seconds, and of c (per rep, against the target's
    /// step of the same rep).
    pub step_secs: [f64; 3],
    pub c: [f64; 3],
    /// (rows, median seconds, median multiple of a one-row call).
    pub calls: Vec<(usize, f64, f64)>,
}

#[derive(Debug, serde::Serialize, serde::Deserialize)]
pub struct DraftCostReport {
    pub weights: String,
    pub context: usize,
    pub target_step_secs: [f64; 3],
    pub target_calls: Vec<(usize, f64, f64)>,
    pub drafts: Vec<DraftCost>,
}

/// The settings the flags describe, in order (vocabulary outer).
fn settings(a: &DraftCostArgs) -> Result<Vec<DraftTransform>> {
    let mut out = Vec::new();
    for v in &a.vocab {
        let vocab = if v == "full" {
            None
        } else {
            Some(v.parse::<usize>().map_err(|_| anyhow::anyhow!("--vocab '{v}': a token count or full"))?)
        };
        for w in &a.draft_weights {
            let weights = if w == "stored" { None } else { Some(w.parse::<DraftWeights>()?) };
            let t = DraftTransform { vocab, vocab_table: vocab.and(a.vocab_table.clone()), weights };
            t.check()?;
            out.push(t);
        }
    }
    Ok(out)
}

/// Seconds of `steps` one-token greedy steps after `context`, per step.
fn step_time(model: &Transformer, context: &[u32], steps: usize) -> Result<f64> {
    let mut cache = model.new_cache(1);
    let mut next = argmax(&last_logits(&model.forward_last(context, &mut cache)?));
    let t = Instant::now();
    for _ in 0..steps {
        next = argmax(&last_logits(&model.forward(&[next], &mut cache)?));
    }
    Ok(t.elapsed().as_secs_f64() / steps as f64)
}

/// Median seconds of calls of each row count after `context` (rolled back after each; the
/// shapes interleaved, 5 times), with each as a multiple of the one-row call.
fn call_curve(model: &Transformer, context: &[u32], rows: &[usize]) -> Result<Vec<(usize, f64, f64)>> {
    let mut cache = model.new_cache(1);
    model.forward_last(context, &mut cache)?;
    let mut shapes = rows.to_vec();
    if !shapes.contains(&1) {
        shapes.insert(0, 1);
    }
    let mut times = vec![Vec::new(); shapes.len()];
    for _ in 0..5 {
        for (i, &r) in shapes.iter().enumerate() {
            let input: Vec<u32> = context.iter().cycle().take(r).copied().collect();
            let t = Instant::now();
            let _ = last_logits(&model.forward(&input, &mut cache)?);
            times[i].push(t.elapsed().as_secs_f64());
            cache.truncate(context.len());
        }
    }
    let med: Vec<f64> = times.into_iter().map(|v| spread(&v)[0]).collect();
    let one = med[shapes.iter().position(|&r| r == 1).expect("one row is timed")];
    Ok(shapes.iter().zip(&med).filter(|(r, _)| rows.contains(r)).map(|(&r, &s)| (r, s, s / one)).collect())
}

/// [median, min, max].
fn spread(v: &[f64]) -> [f64; 3] {
    let mut s = v.to_vec();
    s.sort_by(f64::total_cmp);
    [s[s.len() / 2], s[0], s[s.len() - 1]]
}

pub fn measure(a: &DraftCostArgs) -> Result<DraftCostReport> {
    ensure!(a.reps >= 1 && a.steps >= 1, "--reps and --steps must be at least 1");
    ensure!(a.call_rows.iter().all(|&r| r >= 1), "--call-rows takes row counts of at least 1");
    let drafts = settings(a)?;
    let (draft_path, target_path) = a.pair.paths();
    let device = open_device(DeviceName::Cpu)?;
    eprintln!("loading draft {} and target {} ({} weights)...", draft_path.display(), target_path.display(), a.weights);
    let (draft_tok, target_tok) = a.pair.tokenizers();
    let mut draft: LoadedModel = load_model_as(&draft_path, draft_tok, &device, a.weights)?;
    let target = load_model_as(&target_path, target_tok, &device, a.weights)?;
    specx_decoder::pair_up(&mut draft, &target)?;
    let context: Vec<u32> = crate::runtime::bench_prompt(&target, a.context)?;
    let mut models = Vec::with_capacity(drafts.len());
    for t in &drafts {
        eprintln!("making the draft {}...", t.label());
        models.push(t.apply(draft.model.clone(), &draft.tokenizer)?);
    }
    // Warm-up (first touch of every buffer), then interleaved reps.
    step_time(&target.model, &context, 2)?;
    models.iter().try_for_each(|m| step_time(m, &context, 2).map(|_| ()))?;
    let mut target_steps = Vec::new();
    let mut draft_steps = vec![Vec::new(); models.len()];
    let mut ratios = vec![Vec::new(); models.len()];
    for rep in 0..a.reps {
        eprintln!("rep {}/{}...", rep + 1, a.reps);
        let t = step_time(&target.model, &context, a.steps)?;
        target_steps.push(t);
        for (i, m) in models.iter().enumerate() {
            let d = step_time(m, &context, a.steps)?;
            draft_steps[i].push(d);
            ratios[i].push(d / t);
        }
    }
    eprintln!("call curves...");
    let target_calls = call_curve(&target.model, &context, &a.call_rows)?;
    let mut out = Vec::with_capacity(models.len());
    for (i, (t, m)) in drafts.iter().zip(&models).enumerate() {
        out.push(DraftCost {
            label: t.label(),
            identity: t.identity()?,
            weight_bytes_per_token: m.weight_bytes_per_token(),
            step_secs: spread(&draft_steps[i]),
            c: spread(&ratios[i]),
            calls: call_curve(m, &context, &a.call_rows)?,
        });
    }
    Ok(DraftCostReport {
        weights: a.weights.to_string(),
        context: a.context,
        target_step_secs: spread(&target_steps),
        target_calls,
        drafts: out,
    })
}

pub fn print_report(r: &DraftCostReport) {
    let ms = |s: [f64; 3]| format!("{:.2} [{:.2}-{:.2}]", s[0] * 1e3, s[1] * 1e3, s[2] * 1e3);
    println!("target step ({} weights, context {}): {} ms\n", r.weights, r.context, ms(r.target_step_secs));
    let rows: Vec<Vec<String>> = r
        .drafts
        .iter()
        .map(|d| {
            vec![
                d.label.clone(),
                format!("{:.1}", d.weight_bytes_per_token as f64 / 1e6),
                ms(d.step_secs),
                format!("{:.3} [{:.3}-{:.3}]", d.c[0], d.c[1], d.c[2]),
            ]
        })
        .collect();
    println!("{}", markdown_table(&["draft", "MB read/token", "step ms", "c = draft / target step"], &rows));
    let mut header = vec!["model".to_string()];
    header.extend(r.target_calls.iter().map(|(n, _, _)| format!("{n} rows")));
    let curve = |name: &str, calls: &[(usize, f64, f64)]| {
        let mut row = vec![name.to_string()];
        row.extend(calls.iter().map(|(_, s, x)| format!("{:.1} ms ({x:.2}x)", s * 1e3)));
        row
    };
    let mut rows = vec![curve("target", &r.target_calls)];
    rows.extend(r.drafts.iter().map(|d| curve(&format!("draft {}", d.label), &d.calls)));
    let header: Vec<&str> = header.iter().map(String::as_str).collect();
    println!(
        "\ncalls of N rows after the context (median of 5; x a one-row call):\n\n{}",
        markdown_table(&header, &rows)
    );
}

pub fn run(a: DraftCostArgs) -> Result<()> {
    ensure!(a.plot.is_none() || a.eval.is_some(), "--plot draws the eval run of --eval: give it too");
    let report = match &a.from {
        Some(path) => {
            serde_json::from_slice(&std::fs::read(path).with_context(|| format!("reading {}", path.display()))?)
                .with_context(|| format!("{}: not a draft-cost JSON", path.display()))?
        }
        None => measure(&a)?,
    };
    print_report(&report);
    if let Some(path) = &a.json {
        specx_decoder::fsutil::write_atomic(path, serde_json::to_string_pretty(&report)?.as_bytes())?;
    }
    if let Some(dir) = &a.eval {
        println!("\n{}", frontier::join(dir, Some(&report), a.plot.as_deref())?);
    }
    Ok(())
}
