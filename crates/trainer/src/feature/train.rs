//! Training a feature head (EAGLE-1's objective, [`specx_decoder::speculative::FeatureHead`]):
//! each row is a position `j` of a sequence; the head reads the target's features `f_j` (with
//! uniform noise, EAGLE's augmentation) and the embedding of `s_{j+1}` and predicts `f_{j+1}`.
//! Loss: smooth L1 to `f_{j+1}` plus `cls_weight` x the cross-entropy from the target's
//! distribution (the softmax of `f_{j+1}` through the shared head, over the subset) to the
//! head's. Only rows whose prediction is a response token count (as EAGLE masks the prompt).
//!
//! The learning curve: every `eval_every` steps, the dev text's acceptance at depth 1 (the
//! head's argmax over the subset equals the target's argmax over the full vocabulary, what a
//! greedy verification accepts) and both losses, against the training rows seen.
//!
//! Output directory: `feature-head.json` + `feature-head.safetensors` (the final head, f16),
//! `curve.json` and `curve.md` (the learning curve), `curve/rows-N/` (the head at each curve
//! point) and `last/` (f32 head, optimiser, `state.json`): an interrupted run resumes from the
//! last curve point.

use crate::feature::config::FeatureHeadConfig;
use crate::feature::data::{FeatureSet, FeatureTarget, load_feature_set};
use crate::schedule::warmup_cosine;
use anyhow::{Context, Result, bail, ensure};
use burn::module::Module;
use burn::optim::{AdamWConfig, GradientsParams};
use burn::tensor::activation::{log_softmax, softmax};
use burn::tensor::{Tensor, TensorData};
use indicatif::{ProgressBar, ProgressStyle};
use serde::{Deserialize, Serialize};
use specx_decoder::cheap_draft::frequencies::TokenFrequencies;
use specx_decoder::fsutil::write_atomic;
use specx_decoder::speculative::{FeatureHead, FeatureHeadSpec, packed_causal_mask};
use specx_decoder::{Device, Transformer};
use specx_run::seed::{SplitMix64, named_seed};
use std::path::Path;
use std::time::Instant;

/// One point of the learning curve.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct CurvePoint {
    pub step: usize,
    /// Training rows (response positions) seen so far, repeats across epochs included.
    pub rows_seen: usize,
    pub seconds: f64,
    /// Dev rows where the head's argmax is the target's greedy token.
    pub dev_acceptance: f64,
    pub dev_regression: f64,
    pub dev_cross_entropy: f64,
}

/// What `last/state.json` and `curve.json` hold.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct FeatureTrainState {
    pub config: FeatureHeadConfig,
    pub steps_done: usize,
    pub rows_seen: usize,
    /// Training time of all runs so far (evaluations excluded).
    pub seconds: f64,
    pub curve: Vec<CurvePoint>,
    pub param_ids: Vec<u64>,
    pub train_rows: usize,
    pub dev_rows: usize,
    pub parameters: usize,
}

/// The shared output head's rows of the subset, transposed: `[hidden, subset]`.
struct SubsetHead {
    ids: Vec<u32>,
    rows_t: Vec<f32>,
    hidden: usize,
}

impl SubsetHead {
    fn tensor(&self, device: &Device) -> Tensor<2> {
        Tensor::from_data(TensorData::new(self.rows_t.clone(), [self.hidden, self.ids.len()]), device)
    }
}

/// A batch: rows of several sequences packed in one, with what the loss needs.
struct Batch {
    features: Tensor<2>,
    embeds: Tensor<2>,
    targets: Tensor<2>,
    positions: Vec<usize>,
    mask: Tensor<2>,
    /// 1 on rows whose prediction is a response token, else 0: `[rows, 1]`.
    counted: Tensor<2>,
    counted_rows: usize,
    /// Each row's sequence and position (for the dev's target argmax).
    index: Vec<(usize, usize)>,
}

/// Packs sequences (`order`) into batches of at most `rows` rows (a longer sequence is a batch
/// of its own).
fn pack(set: &FeatureSet, order: &[usize], rows: usize) -> Vec<Vec<usize>> {
    let mut batches: Vec<Vec<usize>> = Vec::new();
    let mut used = 0;
    for &s in order {
        let n = set.sequences[s].tokens.len().saturating_sub(1);
        if n == 0 {
            continue;
        }
        if batches.is_empty() || used + n > rows {
            batches.push(Vec::new());
            used = 0;
        }
        batches.last_mut().expect("pushed above").push(s);
        used += n;
    }
    batches
}

fn build_batch(
    set: &FeatureSet,
    seqs: &[usize],
    target: &Transformer,
    noise: Option<(f64, &mut SplitMix64)>,
    device: &Device,
) -> Result<Batch> {
    let h = set.hidden;
    let (mut feats, mut targets, mut next_tokens, mut positions, mut counted, mut lengths, mut index) =
        (Vec::new(), Vec::new(), Vec::new(), Vec::new(), Vec::new(), Vec::new(), Vec::new());
    let mut noise = noise;
    for &s in seqs {
        let seq = &set.sequences[s];
        let n = seq.tokens.len();
        for j in 0..n - 1 {
            let row = &seq.features[j * h..(j + 1) * h];
            let amp = noise.as_ref().map_or(0.0, |(a, _)| {
                *a * (row.iter().map(|v| (v.to_f32() as f64).powi(2)).sum::<f64>() / h as f64).sqrt()
            });
            for v in row {
                let e = match noise.as_mut() {
                    Some((_, rng)) if amp > 0.0 => {
                        amp * (2.0 * (rng.next_u64() >> 11) as f64 / (1u64 << 53) as f64 - 1.0)
                    }
                    _ => 0.0,
                };
                feats.push(v.to_f32() + e as f32);
            }
            targets.extend(seq.features[(j + 1) * h..(j + 2) * h].iter().map(|v| v.to_f32()));
            positions.push(j);
            counted.push(if j + 1 >= seq.prompt_len { 1.0f32 } else { 0.0 });
            index.push((s, j));
        }
        next_tokens.extend_from_slice(&seq.tokens[1..]);
        lengths.push(n - 1);
    }
    let rows = positions.len();
    let embeds = target.embedding_rows(&next_tokens)?.into_data();
    let counted_rows = counted.iter().filter(|&&c| c > 0.0).count();
    Ok(Batch {
        features: Tensor::from_data(TensorData::new(feats, [rows, h]), device),
        embeds: Tensor::from_data(embeds, device),
        targets: Tensor::from_data(TensorData::new(targets, [rows, h]), device),
        positions,
        mask: packed_causal_mask(&lengths, device),
        counted: Tensor::from_data(TensorData::new(counted, [rows, 1]), device),
        counted_rows,
        index,
    })
}

/// Per-row smooth L1 (beta 1), mean over the hidden dimension: `[rows, 1]`.
fn smooth_l1(pred: Tensor<2>, target: Tensor<2>) -> Tensor<2> {
    let d = (pred - target).abs();
    let small = d.clone().clamp_max(1.0);
    (small.clone().square().mul_scalar(0.5) + d - small).mean_dim(1)
}

/// The losses of a batch: (regression, cross-entropy), each a masked mean `[1]`, and the
/// head's logits over the subset.
fn losses(head: &FeatureHead, b: &Batch, sub: &Tensor<2>) -> (Tensor<1>, Tensor<1>, Tensor<2>) {
    let pred = head.forward(b.features.clone(), b.embeds.clone(), &b.positions, Some(b.mask.clone()), None);
    let denom = b.counted_rows.max(1) as f64;
    let reg = (smooth_l1(pred.clone(), b.targets.clone()) * b.counted.clone()).sum().div_scalar(denom);
    let logits = pred.matmul(sub.clone());
    let p = softmax(b.targets.clone().matmul(sub.clone()), 1);
    let ce = (p * log_softmax(logits.clone(), 1)).sum_dim(1).neg();
    let ce = (ce * b.counted.clone()).sum().div_scalar(denom);
    (reg, ce, logits)
}

fn scalar(t: Tensor<1>) -> f64 {
    t.into_data().try_to_vec::<f32>().map(|v| v[0] as f64).unwrap_or(f64::NAN)
}

/// The target's greedy token after each position `j + 1` of the dev rows, by sequence.
fn dev_greedy(dev: &FeatureSet, target: &Transformer, device: &Device) -> Vec<Vec<u32>> {
    let h = dev.hidden;
    dev.sequences
        .iter()
        .map(|s| {
            let n = s.tokens.len();
            let feats: Vec<f32> = s.features.iter().map(|v| v.to_f32()).collect();
            let x = Tensor::<2>::from_data(TensorData::new(feats, [n, h]), device);
            target.logits_ragged(x).iter().map(|row| specx_decoder::sampling::argmax(row)).collect()
        })
        .collect()
}

/// What a curve point is measured on.
struct Eval<'a> {
    dev: &'a FeatureSet,
    greedy: &'a [Vec<u32>],
    sub: &'a SubsetHead,
    target: &'a Transformer,
    rows: usize,
    device: &'a Device,
}

impl Eval<'_> {
    /// Appends a curve point for `head` to `state`.
    fn point(&self, head: &FeatureHead, state: &mut FeatureTrainState, bar: &ProgressBar) -> Result<()> {
        let (acc, reg, ce) = evaluate(&head.valid(), self)?;
        state.curve.push(CurvePoint {
            step: state.steps_done,
            rows_seen: state.rows_seen,
            seconds: state.seconds,
            dev_acceptance: acc,
            dev_regression: reg,
            dev_cross_entropy: ce,
        });
        let line = format!(
            "step {}: {} rows seen, dev acceptance {acc:.4}, regression {reg:.4}, cross-entropy {ce:.4}",
            state.steps_done, state.rows_seen
        );
        if bar.is_hidden() {
            eprintln!("{line}")
        } else {
            bar.println(line)
        }
        Ok(())
    }
}

/// Depth-1 acceptance, regression and cross-entropy of `head` on the dev text.
fn evaluate(head: &FeatureHead, e: &Eval<'_>) -> Result<(f64, f64, f64)> {
    let (dev, greedy, sub, target, rows, device) = (e.dev, e.greedy, e.sub, e.target, e.rows, e.device);
    let w = sub.tensor(device);
    let order: Vec<usize> = (0..dev.sequences.len()).collect();
    let (mut reg, mut ce, mut hits, mut total) = (0.0, 0.0, 0usize, 0usize);
    for seqs in pack(dev, &order, rows) {
        let b = build_batch(dev, &seqs, target, None, device)?;
        let (r, c, logits) = losses(head, &b, &w);
        reg += scalar(r) * b.counted_rows as f64;
        ce += scalar(c) * b.counted_rows as f64;
        let best: Vec<i64> =
            logits.argmax(1).into_data().convert::<i64>().try_to_vec::<i64>().map_err(|e| anyhow::anyhow!("{e:?}"))?;
        for (&(s, j), &k) in b.index.iter().zip(&best) {
            if j + 1 >= dev.sequences[s].prompt_len {
                total += 1;
                hits += usize::from(sub.ids[k as usize] == greedy[s][j + 1]);
            }
        }
    }
    ensure!(total > 0, "{}: no response rows to evaluate on", dev.dir.display());
    Ok((hits as f64 / total as f64, reg / total as f64, ce / total as f64))
}

/// Options that do not change the result.
#[derive(Clone, Debug, Default)]
pub struct FeatureTrainOptions {
    /// Stop after this many steps in this process (resumable).
    pub max_steps_this_run: Option<usize>,
    pub progress: bool,
}

/// Trains the head `cfg` describes, resuming an unfinished run of the same config.
pub fn train_feature_head(cfg: &FeatureHeadConfig, opts: &FeatureTrainOptions) -> Result<FeatureTrainState> {
    cfg.validate()?;
    let table = TokenFrequencies::read(&cfg.head.vocab_table)?;
    table.check_size(cfg.head.vocab)?;
    let dir = &cfg.output.dir;
    let state_path = dir.join("last").join("state.json");
    let resumed: Option<FeatureTrainState> = match std::fs::read(&state_path) {
        Ok(bytes) => {
            Some(serde_json::from_slice(&bytes).with_context(|| format!("{}: malformed", state_path.display()))?)
        }
        Err(_) => None,
    };
    if let Some(s) = &resumed {
        let mut theirs = s.config.clone();
        theirs.output.dir = cfg.output.dir.clone();
        if theirs != *cfg {
            bail!("{} holds a training run with another config; use another output dir or delete it", dir.display());
        }
    }
    let plain = specx_decoder::device_from_name("cpu")?;
    let loaded =
        specx_decoder::load_model_as(&cfg.model.target, cfg.model.tokenizer.as_deref(), &plain, cfg.model.weights)
            .with_context(|| format!("loading the target {}", cfg.model.target.display()))?;
    let target = &loaded.model;
    let mc = target.config();
    let sha = loaded.weights_sha256()?;
    let ft = FeatureTarget { model: target, sha256: sha.clone(), weights: cfg.model.weights };
    let train_set = load_feature_set(&cfg.data.train, cfg.data.train_prompts, &ft, opts.progress)?;
    let dev_set = load_feature_set(&cfg.data.dev, cfg.data.dev_prompts, &ft, opts.progress)?;
    let ids = table.top(cfg.head.vocab, mc.vocab_size)?;
    let h = mc.hidden_size;
    let rows = target.output_rows(&ids)?;
    let rows_t = (0..h).flat_map(|c| rows.iter().skip(c).step_by(h).copied().collect::<Vec<f32>>()).collect();
    let sub = SubsetHead { ids, rows_t, hidden: h };
    eprintln!("target greedy tokens of the dev text ({} sequences)", dev_set.sequences.len());
    let greedy = dev_greedy(&dev_set, target, &plain);
    let spec = FeatureHeadSpec {
        hidden_size: h,
        width: cfg.head.width,
        intermediate: cfg.head.intermediate,
        rope_theta: mc.rope_theta,
        rms_eps: mc.rms_norm_eps,
        target_model_sha256: sha,
        vocab_size: cfg.head.vocab,
        vocab_table_sha256: table.sha256(),
        training: serde_json::Value::Null,
    };
    let device = plain.clone().autodiff();
    let optim_config = AdamWConfig::new()
        .with_weight_decay(0.0)
        .with_grad_clipping(Some(burn::grad_clipping::GradientClippingConfig::Norm(0.5)));
    let (mut head, mut optim, mut state) = match resumed {
        Some(state) => {
            let (head, _, _) = FeatureHead::load(&dir.join("last"), &device)?;
            let head = head.with_param_ids(&state.param_ids)?;
            let optim = optim_config
                .init()
                .load(dir.join("last").join("optimizer.bpk"))
                .map_err(|e| anyhow::anyhow!("{}: {e:?}", dir.display()))?;
            eprintln!("resuming {} after step {}", dir.display(), state.steps_done);
            (head, optim, state)
        }
        None => {
            let head = FeatureHead::init_seeded(&spec, cfg.seed, &device)?;
            let state = FeatureTrainState {
                config: cfg.clone(),
                steps_done: 0,
                rows_seen: 0,
                seconds: 0.0,
                curve: Vec::new(),
                param_ids: head.param_ids(),
                train_rows: train_set.response_rows(),
                dev_rows: dev_set.response_rows(),
                parameters: head.parameter_count(),
            };
            (head, optim_config.init(), state)
        }
    };
    let o = &cfg.optim;
    let epoch_batches = |epoch: usize| {
        let mut order: Vec<usize> = (0..train_set.sequences.len()).collect();
        SplitMix64::new(named_seed(cfg.seed, "feature-batches", &epoch.to_string())).shuffle(&mut order);
        pack(&train_set, &order, o.batch_tokens)
    };
    // Every step's sequences, epoch after epoch (packing depends on each epoch's order).
    let schedule: Vec<Vec<usize>> = (0..o.epochs).flat_map(epoch_batches).collect();
    let total = schedule.len();
    let warmup = (o.warmup_ratio * total as f64).round() as usize;
    let sub_train = sub.tensor(&device);
    let bar = if opts.progress { ProgressBar::new(total as u64) } else { ProgressBar::hidden() };
    bar.set_style(ProgressStyle::with_template("training {bar:30} {pos}/{len} steps, ETA {eta} {msg}")?);
    bar.set_position(state.steps_done as u64);
    let mut this_run = 0;
    let eval = Eval { dev: &dev_set, greedy: &greedy, sub: &sub, target, rows: o.batch_tokens, device: &plain };
    let data = serde_json::json!({
        "train": { "dir": train_set.dir, "prompts": train_set.prompts, "sha256": train_set.data_sha256 },
        "dev": { "dir": dev_set.dir, "prompts": dev_set.prompts, "sha256": dev_set.data_sha256 },
    });
    if state.curve.is_empty() {
        eval.point(&head, &mut state, &bar)?;
        save(dir, &head, &optim, &spec, &sub.ids, &state, &data)?;
    }
    while state.steps_done < total && opts.max_steps_this_run.is_none_or(|m| this_run < m) {
        let seqs = &schedule[state.steps_done];
        let t0 = Instant::now();
        let mut rng = SplitMix64::new(named_seed(cfg.seed, "feature-noise", &state.steps_done.to_string()));
        let b = build_batch(&train_set, seqs, target, Some((o.noise, &mut rng)), &device)?;
        let (reg, ce, _) = losses(&head, &b, &sub_train);
        let loss = reg.mul_scalar(o.reg_weight) + ce.mul_scalar(o.cls_weight);
        let grads = GradientsParams::from_grads(loss.backward(), &head);
        let lr = warmup_cosine(o.lr, state.steps_done, warmup, total);
        head = optim.step(lr, head, grads);
        state.steps_done += 1;
        state.rows_seen += b.counted_rows;
        state.seconds += t0.elapsed().as_secs_f64();
        this_run += 1;
        bar.inc(1);
        if state.steps_done % o.eval_every == 0 || state.steps_done == total {
            eval.point(&head, &mut state, &bar)?;
            save(dir, &head, &optim, &spec, &sub.ids, &state, &data)?;
        }
    }
    bar.finish_and_clear();
    Ok(state)
}

/// Writes the run's state after a curve point: `last/` (f32 head, optimiser, state; the state
/// file last, so an interruption leaves the previous point resumable), the head of this point
/// under `curve/rows-N/`, the final-so-far head and the curve as JSON and markdown.
#[allow(clippy::too_many_arguments)]
fn save(
    dir: &Path,
    head: &FeatureHead,
    optim: &burn::optim::ModuleOptimizer,
    spec: &FeatureHeadSpec,
    ids: &[u32],
    state: &FeatureTrainState,
    data: &serde_json::Value,
) -> Result<()> {
    let last = dir.join("last");
    head.save_f32(&last, spec, ids)?;
    optim.save(last.join("optimizer.bpk")).map_err(|e| anyhow::anyhow!("saving optimizer state: {e:?}"))?;
    let state_json = serde_json::to_string_pretty(state)?;
    write_atomic(&last.join("state.json"), state_json.as_bytes())?;
    let point = state.curve.last().expect("saved after a curve point");
    let mut spec = spec.clone();
    spec.training = serde_json::json!({ "config": state.config, "data": data, "steps": state.steps_done, "rows_seen": state.rows_seen, "seconds": state.seconds, "dev": point });
    head.save(&dir.join("curve").join(format!("rows-{}", point.rows_seen)), &spec, ids)?;
    head.save(dir, &spec, ids)?;
    write_atomic(&dir.join("curve.json"), state_json.as_bytes())?;
    write_atomic(&dir.join("curve.md"), curve_table(state).as_bytes())
}

/// The learning curve as a markdown table.
pub fn curve_table(state: &FeatureTrainState) -> String {
    let rows: Vec<Vec<String>> = state
        .curve
        .iter()
        .map(|p| {
            vec![
                p.step.to_string(),
                p.rows_seen.to_string(),
                format!("{:.0}", p.seconds),
                format!("{:.4}", p.dev_acceptance),
                format!("{:.4}", p.dev_regression),
                format!("{:.4}", p.dev_cross_entropy),
            ]
        })
        .collect();
    specx_decoder::report::markdown_table(
        &["step", "training rows seen", "training s", "dev acceptance (depth 1)", "dev smooth L1", "dev cross-entropy"],
        &rows,
    )
}
