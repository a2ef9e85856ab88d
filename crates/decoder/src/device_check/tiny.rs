//! The tiny-model checks (see the module above): each compares a device against the CPU path.

use super::Check;
use crate::gguf::GgmlType;
use crate::speculative::*;
use crate::synthetic::{
    StDtype, TINY_VOCAB, random_weights, tiny_llama, tiny_qwen2, word_tokenizer_json, write_gguf, write_hf_dir,
};
use crate::weights::HostTensor;
use crate::{
    Device, ForwardOutput, LoadedModel, ModelConfig, SamplingConfig, Transformer, default_device, load_model,
    load_model_split,
};
use anyhow::{Context, Result, ensure};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// A pseudo-random token sequence over the tiny vocabulary.
pub fn tokens(n: usize, seed: u32) -> Vec<u32> {
    (0..n as u32)
        .map(|i| (i.wrapping_mul(2654435761).wrapping_add(seed.wrapping_mul(40503)) >> 7) % TINY_VOCAB as u32)
        .collect()
}

pub use crate::compare::max_abs_diff;
use crate::compare::nan_max;

/// The weights of the tiny target of `target_seed` plus `noise` times another seed's: a draft
/// whose rounds accept some tokens, not all.
pub(super) fn noisy_weights(cfg: &ModelConfig, target_seed: u64, noise: f32) -> BTreeMap<String, HostTensor> {
    let mut w = random_weights(cfg, target_seed);
    let n = random_weights(cfg, 999);
    for (name, t) in w.iter_mut() {
        for (a, b) in t.data.iter_mut().zip(&n[name].data) {
            *a += noise * b;
        }
    }
    w
}

/// A draft close to the tiny target of `target_seed` ([`noisy_weights`]), written as
/// `dir/noisy` and loaded on the CPU.
pub fn noisy_draft(dir: &Path, vocab: usize, target_seed: u64, noise: f32) -> Result<LoadedModel> {
    let cfg = tiny_qwen2(vocab);
    let w = noisy_weights(&cfg, target_seed, noise);
    let path = dir.join("noisy");
    write_hf_dir(&path, &cfg, &w, StDtype::F32, 1, &word_tokenizer_json(vocab, "w"))?;
    load_model(&path, None, &default_device())
}

pub(super) fn write_tiny(dir: &Path, cfg: &ModelConfig, seed: u64) -> Result<PathBuf> {
    write_tiny_as(dir, cfg, seed, StDtype::F32)
}

/// [`write_tiny`] with the safetensors stored as `dtype`.
pub(super) fn write_tiny_as(dir: &Path, cfg: &ModelConfig, seed: u64, dtype: StDtype) -> Result<PathBuf> {
    let path = dir.join(format!("{}-{seed}-{dtype:?}", cfg.architecture));
    write_hf_dir(&path, cfg, &random_weights(cfg, seed), dtype, 1, &word_tokenizer_json(cfg.vocab_size, "w"))?;
    Ok(path)
}

/// A tiny model of `cfg` as a GGUF file with its matrices in `ty` blocks (norms and biases
/// F32, as llama.cpp writes them), a tokenizer beside it.
pub(super) fn write_tiny_gguf(dir: &Path, cfg: &ModelConfig, seed: u64, ty: GgmlType) -> Result<PathBuf> {
    write_gguf_weights(&dir.join(format!("{}-{seed}-{ty:?}", cfg.architecture)), cfg, &random_weights(cfg, seed), ty)
}

/// `weights` of `cfg` as `dir/model.gguf` in `ty` blocks, a tokenizer beside it.
pub(super) fn write_gguf_weights(
    dir: &Path,
    cfg: &ModelConfig,
    weights: &BTreeMap<String, HostTensor>,
    ty: GgmlType,
) -> Result<PathBuf> {
    std::fs::create_dir_all(dir)?;
    std::fs::write(dir.join("tokenizer.json"), word_tokenizer_json(cfg.vocab_size, "w"))?;
    let names: Vec<String> = (0..cfg.vocab_size).map(|i| format!("w{i}")).collect();
    write_gguf(&dir.join("model.gguf"), cfg, weights, ty, &names)?;
    Ok(dir.join("model.gguf"))
}

/// The same HF directory loaded on the CPU and on the device.
pub(super) fn both(path: &Path, device: &Device) -> Result<(LoadedModel, LoadedModel)> {
    Ok((load_model(path, None, &default_device())?, load_model(path, None, device)?))
}

pub(super) fn rows(out: &ForwardOutput) -> Vec<Vec<f32>> {
    out.logits_tail(out.logits.dims()[1])
}

/// Largest difference between two sets of logit rows.
pub(super) fn rows_diff(a: &[Vec<f32>], b: &[Vec<f32>]) -> Result<f32> {
    ensure!(a.len() == b.len(), "different numbers of positions: {} and {}", a.len(), b.len());
    Ok(a.iter().zip(b).map(|(x, y)| max_abs_diff(x, y)).fold(0.0, nan_max))
}

pub(super) fn numeric(name: &str, worst: f32, tol: f32, detail: &str) -> Check {
    Check {
        name: name.into(),
        passed: worst <= tol,
        worst_abs_diff: Some(worst as f64),
        tolerance: Some(tol as f64),
        detail: detail.into(),
    }
}

/// Prefill, single steps, a 4-row verification and a batched forward (logits and hidden
/// states), on a Qwen2-shaped and a Llama-shaped tiny model.
pub(super) fn logits(device: &Device, dir: &Path, tol: f32) -> Result<Check> {
    let mut worst = 0f32;
    for cfg in [tiny_qwen2(TINY_VOCAB), tiny_llama(TINY_VOCAB)] {
        let (cpu, dev) = both(&write_tiny(dir, &cfg, 3)?, device)?;
        let (mut cc, mut dc) = (cpu.model.new_cache(1), dev.model.new_cache(1));
        for chunk in [tokens(9, 1), vec![5], vec![17], tokens(4, 2)] {
            let a = rows(&cpu.model.forward(&chunk, &mut cc)?);
            let b = rows(&dev.model.forward(&chunk, &mut dc)?);
            worst = nan_max(worst, rows_diff(&a, &b)?);
        }
        let seqs = [tokens(6, 3), tokens(6, 4)];
        let refs: Vec<&[u32]> = seqs.iter().map(Vec::as_slice).collect();
        let a = cpu.model.forward_batch(&refs, &mut cpu.model.new_cache(2))?;
        let b = dev.model.forward_batch(&refs, &mut dev.model.new_cache(2))?;
        let flat = |t: burn::tensor::Tensor<3>| t.into_data().try_to_vec::<f32>().map_err(|e| anyhow::anyhow!("{e:?}"));
        worst = nan_max(worst, max_abs_diff(&flat(a.logits)?, &flat(b.logits)?));
        worst = nan_max(worst, max_abs_diff(&flat(a.hidden)?, &flat(b.hidden)?));
    }
    Ok(numeric(
        "logits",
        worst,
        tol,
        "tiny qwen2 and llama: 9-row prefill, two 1-row steps, a 4-row verification, a 2-sequence batch (logits and hidden states)",
    ))
}

/// A 300-token cache (past one growth step) with five speculative rows of which three are
/// rolled back, then two new tokens: the device's logits against a fresh device cache that
/// never saw the rolled-back rows and against the CPU, and the stored keys and values.
pub(super) fn kv_rollback(device: &Device, dir: &Path, tol: f32) -> Result<Check> {
    let (cpu, dev) = both(&write_tiny(dir, &tiny_qwen2(TINY_VOCAB), 5)?, device)?;
    let prefix = tokens(300, 7);
    let (mut cc, mut dc) = (cpu.model.new_cache(1), dev.model.new_cache(1));
    cpu.model.forward(&prefix, &mut cc)?;
    dev.model.forward(&prefix, &mut dc)?;
    let spec = tokens(5, 8);
    cpu.model.forward(&spec, &mut cc)?;
    dev.model.forward(&spec, &mut dc)?;
    cc.truncate(prefix.len() + 2);
    dc.truncate(prefix.len() + 2);
    let next = [11u32, 12];
    let after_cpu = rows(&cpu.model.forward(&next, &mut cc)?);
    let after_dev = rows(&dev.model.forward(&next, &mut dc)?);
    let mut fresh = prefix.clone();
    fresh.extend_from_slice(&spec[..2]);
    fresh.extend_from_slice(&next);
    let want = dev.model.forward(&fresh, &mut dev.model.new_cache(1))?.logits_tail(next.len());
    ensure!(
        dc.len() == fresh.len(),
        "device cache holds {} positions after the rollback, expected {}",
        dc.len(),
        fresh.len()
    );
    let mut worst = nan_max(rows_diff(&after_dev, &want)?, rows_diff(&after_dev, &after_cpu)?);
    for layer in [0, 1] {
        let ((ck, cv), (dk, dv)) = (cc.layer_data(layer), dc.layer_data(layer));
        worst = nan_max(nan_max(worst, max_abs_diff(&ck, &dk)), max_abs_diff(&cv, &dv));
    }
    Ok(numeric(
        "kv_rollback",
        worst,
        tol,
        "300-token cache, 5 speculative rows, 3 rolled back: logits vs a fresh device cache and vs the CPU; keys and values vs the CPU",
    ))
}

/// A check that compares numbers within `tol` and tokens exactly: it fails on either.
fn numeric_and_tokens(name: &str, worst: f32, tol: f32, detail: &str, mismatches: Vec<String>) -> Check {
    let check = numeric(name, worst, tol, detail);
    if mismatches.is_empty() {
        return check;
    }
    Check { passed: false, detail: format!("{}; MISMATCH: {}", check.detail, mismatches.join("; ")), ..check }
}

fn tokens_check(name: &str, mismatches: Vec<String>, detail: &str) -> Check {
    let passed = mismatches.is_empty();
    let detail = if passed { detail.to_string() } else { format!("{detail}; MISMATCH: {}", mismatches.join("; ")) };
    Check { name: name.into(), passed, worst_abs_diff: None, tolerance: None, detail }
}

/// Greedy fixed-K (K=3) speculative decoding with target and draft on the device gives the
/// CPU's greedy AR tokens and the CPU speculative run's accepted counts, over rounds with and
/// without rejections.
pub(super) fn speculative_fixed_k(device: &Device, dir: &Path) -> Result<Check> {
    let target = write_tiny(dir, &tiny_qwen2(TINY_VOCAB), 1)?;
    let (tc, td) = both(&target, device)?;
    let close = noisy_draft(dir, TINY_VOCAB, 1, 0.1)?;
    let dd = load_model(&dir.join("noisy"), None, device)?;
    let eos = [TINY_VOCAB as u32 - 1];
    let (mut bad, mut rounds) = (Vec::new(), (0, 0));
    for p in 0..4u32 {
        let prompt = tokens(5 + p as usize, 20 + p);
        let cfg = SpecConfig { max_new_tokens: 12, sampling: SamplingConfig::greedy(), seed: 0 };
        let ar_cpu = generate_autoregressive(&tc.model, &prompt, &cfg, &eos)?;
        let ar_dev = generate_autoregressive(&td.model, &prompt, &cfg, &eos)?;
        let run = |target: &Transformer, draft: &Transformer, verifier: &mut dyn Verifier| {
            generate_speculative(target, &mut PlainDrafter::new(draft), &mut FixedK(3), verifier, &prompt, &cfg, &eos)
        };
        let cpu = run(&tc.model, &close.model, &mut RejectionSampler)?;
        // Greedy under RejectionSampler and FixedK is decided on the device: no target or
        // draft row comes back.
        let rows_before = (target_rows_read(), draft_rows_read());
        let dev = run(&td.model, &dd.model, &mut RejectionSampler)?;
        let rows_read = (target_rows_read() - rows_before.0, draft_rows_read() - rows_before.1);
        if rows_read != (0, 0) {
            bad.push(format!(
                "prompt {p}: a greedy run decided on the device read {rows_read:?} target and draft rows"
            ));
        }
        let from_rows = run(&td.model, &dd.model, &mut FromRows)?;
        if (&from_rows.tokens, &from_rows.metrics.accepted_per_round) != (&dev.tokens, &dev.metrics.accepted_per_round)
        {
            bad.push(format!(
                "prompt {p}: decided from the rows {:?} {:?} vs on the device {:?} {:?}",
                from_rows.tokens, from_rows.metrics.accepted_per_round, dev.tokens, dev.metrics.accepted_per_round
            ));
        }
        if ar_dev.tokens != ar_cpu.tokens {
            bad.push(format!("prompt {p}: greedy AR on the device {:?} vs the CPU {:?}", ar_dev.tokens, ar_cpu.tokens));
        }
        if dev.tokens != ar_cpu.tokens {
            bad.push(format!("prompt {p}: speculative on the device {:?} vs greedy {:?}", dev.tokens, ar_cpu.tokens));
        }
        if dev.metrics.accepted_per_round != cpu.metrics.accepted_per_round {
            bad.push(format!(
                "prompt {p}: accepted per round {:?} vs the CPU's {:?}",
                dev.metrics.accepted_per_round, cpu.metrics.accepted_per_round
            ));
        }
        for (&a, &k) in dev.metrics.accepted_per_round.iter().zip(&dev.metrics.drafted_per_round) {
            if a < k { rounds.0 += 1 } else { rounds.1 += 1 }
        }
    }
    ensure!(rounds.0 > 0 && rounds.1 > 0, "the check needs rounds with and without a rejection, got {rounds:?}");
    Ok(tokens_check(
        "speculative_fixed_k",
        bad,
        &format!(
            "4 prompts, 12 tokens, K=3, greedy: {} rounds with a rejection, {} fully accepted; decided on the device (no target or draft rows read) as from the rows",
            rounds.0, rounds.1
        ),
    ))
}

/// Greedy verification that reads the target's rows (a verifier that does not declare
/// [`Verifier::decides_by_argmax`]): the path a verification takes when something reads the
/// scores, against which the device's decisions are compared.
struct FromRows;

impl Verifier for FromRows {
    fn decide(&mut self, c: &Candidate, logits: &[f32], s: &SamplingConfig, rng: &mut rand::rngs::StdRng) -> Verdict {
        RejectionSampler.decide(c, logits, s, rng)
    }
}

/// The acceptance head's probabilities on the device against the CPU's (seeded heads of depth
/// 0 and 3, tied and not), and a checkpoint written from the device loading on the CPU.
pub(super) fn acceptance_head(device: &Device, dir: &Path) -> Result<Check> {
    let (hidden, tol) = (32, 1e-6f32);
    let mut worst = 0f32;
    for (depth, tied) in [(0, false), (3, false), (3, true)] {
        let cpu = AcceptanceHead::init_seeded(hidden, depth, tied, 11, &default_device());
        let dev = AcceptanceHead::init_seeded(hidden, depth, tied, 11, device);
        for s in 0..8u32 {
            let h: Vec<f32> = tokens(hidden, s).iter().map(|&t| t as f32 / TINY_VOCAB as f32 - 0.5).collect();
            worst = nan_max(worst, (cpu.accept_probability(&h)? - dev.accept_probability(&h)?).abs() as f32);
        }
        let ckpt = dir.join(format!("head-{depth}-{tied}"));
        let spec = HeadSpec {
            hidden_size: hidden,
            depth,
            tied,
            draft_model_sha256: None,
            draft_transform: None,
            training: serde_json::Value::Null,
            draft_stats: false,
        };
        dev.save(&ckpt, &spec)?;
        let (back, _) =
            AcceptanceHead::load(&ckpt, &default_device()).context("loading the head saved from the device")?;
        let h = vec![0.25f32; hidden];
        worst = nan_max(worst, (back.accept_probability(&h)? - cpu.accept_probability(&h)?).abs() as f32);
    }
    Ok(numeric(
        "acceptance_head",
        worst,
        tol,
        "probabilities of seeded heads (depth 0 and 3, tied and untied) and of a checkpoint saved from the device and loaded on the CPU",
    ))
}

/// DSI with two target workers, one on the CPU and one on the device, gives greedy AR's tokens.
pub(super) fn dsi_cpu_and_device(device: &Device, dir: &Path) -> Result<Check> {
    let (tc, td) = both(&write_tiny(dir, &tiny_qwen2(TINY_VOCAB), 1)?, device)?;
    let close = noisy_draft(dir, TINY_VOCAB, 1, 0.3)?;
    let mut bad = Vec::new();
    let stats = dsi_against_greedy(&[&tc.model, &td.model], &close.model, 14, 3, &mut bad)?;
    let busy = [0, 1].map(|w| stats.worker_busy_s.get(w).copied().unwrap_or(0.0));
    if stats.tasks >= 2 && busy.iter().any(|&s| s <= 0.0) {
        bad.push(format!("a worker never verified ({} tasks; busy {busy:?} s)", stats.tasks));
    }
    Ok(tokens_check(
        "dsi_cpu_and_device",
        bad,
        &format!(
            "3 prompts, 14 tokens, K=3, workers on the CPU and the device (busy {:.3} s / {:.3} s)",
            busy[0], busy[1]
        ),
    ))
}

/// Greedy DSI with a worker on each of `targets` and K = `k` on 3 prompts of `new_tokens`
/// tokens, against greedy decoding with the first target, decided from the workers' argmaxes
/// (no target row read back) and from their rows: each differing output or row read is
/// pushed to `bad`; the argmax runs' scheduler counters, summed.
pub(super) fn dsi_against_greedy(
    targets: &[&Transformer],
    draft: &Transformer,
    new_tokens: usize,
    k: usize,
    bad: &mut Vec<String>,
) -> Result<DsiStats> {
    let eos = [TINY_VOCAB as u32 - 1];
    let mut stats = DsiStats::default();
    for p in 0..3u32 {
        let prompt = tokens(6 + p as usize, 40 + p);
        let cfg = SpecConfig { max_new_tokens: new_tokens, sampling: SamplingConfig::greedy(), seed: 0 };
        let want = generate_autoregressive(targets[0], &prompt, &cfg, &eos)?.tokens;
        let run = |verifier: &mut dyn Verifier| {
            let mut drafter = PlainDrafter::new(draft);
            let dsi = DsiConfig::new(targets.len(), k);
            generate_dsi(targets, &mut drafter, &mut FixedK(k), verifier, &prompt, &cfg, &dsi, &eos)
        };
        // Greedy under RejectionSampler: the workers return argmaxes, no row comes back.
        let rows_before = target_rows_read();
        let got = run(&mut RejectionSampler)?;
        let rows_read = target_rows_read() - rows_before;
        if got.generation.tokens != want {
            bad.push(format!("prompt {p}: DSI {:?} vs greedy {want:?}", got.generation.tokens));
        }
        if rows_read != 0 {
            bad.push(format!("prompt {p}: greedy DSI read {rows_read} target rows"));
        }
        let from_rows = run(&mut FromRows)?.generation.tokens;
        if from_rows != want {
            bad.push(format!("prompt {p}: DSI decided from the rows {from_rows:?} vs greedy {want:?}"));
        }
        stats.add(&got.stats);
    }
    Ok(stats)
}

/// EasySpec's layer placement: a draft whose attention layers alternate between the CPU and
/// the device computes the one-device draft's exact and fuzzy logits (layer-parallel 1, 2, 4,
/// with a rollback), keeps the exact watermarks and cache, and greedy EasySpec with it gives the
/// target's greedy tokens.
pub(super) fn easyspec_placed(device: &Device, dir: &Path, tol: f32) -> Result<Check> {
    let cfg = ModelConfig { num_hidden_layers: 5, ..tiny_qwen2(TINY_VOCAB) };
    let path = write_tiny(dir, &cfg, 4)?;
    let one = load_model(&path, None, &default_device())?;
    let placed =
        load_model(&path, None, &default_device())?.model.place_attention(&[default_device(), device.clone()])?;
    let mut worst = 0f32;
    let mut bad = Vec::new();
    let on_cpu: Vec<bool> = placed.layer_devices().iter().map(|d| *d == default_device()).collect();
    if on_cpu != [true, false, true, false, true] {
        bad.push(format!("layer i should sit on devices[i % 2]; on the CPU: {on_cpu:?}"));
    }
    // Ragged (batched) forwards are for one-device models and say so.
    match placed.forward_ragged(&mut [(&[1u32, 2][..], &mut placed.new_cache(1))]) {
        Err(e) if e.to_string().contains("one device") => {}
        other => bad.push(format!("a ragged forward of a placed model should be refused, got {:?}", other.map(|_| ()))),
    }
    for lp in [1, 2, 4] {
        let calls = placed_calls(&one.model, &placed, lp)?;
        worst = nan_max(worst, calls.worst);
        let (a, b) = (&calls.one, &calls.placed);
        if a.layer_precise_lens() != b.layer_precise_lens() {
            bad.push(format!(
                "layer-parallel {lp}: exact watermarks {:?} vs {:?}",
                b.layer_precise_lens(),
                a.layer_precise_lens()
            ));
        }
        for layer in 0..5 {
            let ((ak, av), (bk, bv)) = (a.layer_data(layer), b.layer_data(layer));
            worst = nan_max(nan_max(worst, max_abs_diff(&ak, &bk)), max_abs_diff(&av, &bv));
        }
    }
    let target = load_model(&write_tiny(dir, &cfg, 5)?, None, &default_device())?;
    let eos = [TINY_VOCAB as u32 - 1];
    for p in 0..2u32 {
        let prompt = tokens(6 + p as usize, 50 + p);
        let spec = SpecConfig { max_new_tokens: 12, sampling: SamplingConfig::greedy(), seed: 0 };
        let want = generate_autoregressive(&target.model, &prompt, &spec, &eos)?.tokens;
        let mut drafter =
            FuzzyDrafter::new(&placed, crate::layer_groups::LayerGroups::preset(2, 5)?, Calibration::EveryRound)?;
        let got = generate_speculative(
            &target.model,
            &mut drafter,
            &mut FixedK(3),
            &mut RejectionSampler,
            &prompt,
            &spec,
            &eos,
        )?;
        if got.tokens != want {
            bad.push(format!("prompt {p}: EasySpec {:?} vs greedy {want:?}", got.tokens));
        }
    }
    Ok(numeric_and_tokens(
        "easyspec_placed",
        worst,
        tol,
        "5-layer draft, attentions alternating CPU/device, layer-parallel 1/2/4, exact and fuzzy forwards with a rollback; greedy EasySpec = greedy",
        bad,
    ))
}

/// What [`split_calls`] saw: the worst logit difference, each call's rows and the tensors the
/// split model moved for it, and greedy speculative decoding's tokens with the split model as
/// the target where they differ from the one-device model's greedy tokens (got, wanted).
pub(super) struct SplitCalls {
    pub(super) worst: f32,
    pub(super) moved: Vec<(usize, crate::DeviceMoves)>,
    pub(super) greedy_differs: Option<(Vec<u32>, Vec<u32>)>,
}

/// A model split in layer ranges against the same model on one device: a 9-token prefill, a
/// step, a 4-row verification of which 3 rows are rolled back (across both ranges' caches), a
/// step; then greedy speculative decoding (K = 3, the one-device model drafting) with the split
/// model as the target.
pub(super) fn split_calls(one: &Transformer, split: &Transformer) -> Result<SplitCalls> {
    let (mut a, mut b) = (one.new_cache(1), split.new_cache(1));
    let (mut worst, mut moved) = (0f32, Vec::new());
    for (step, chunk) in [tokens(9, 1), vec![5], tokens(4, 2), vec![7]].into_iter().enumerate() {
        let before = split.device_moves();
        let got = rows(&split.forward(&chunk, &mut b)?);
        moved.push((chunk.len(), split.device_moves() - before));
        worst = nan_max(worst, rows_diff(&rows(&one.forward(&chunk, &mut a)?), &got)?);
        if step == 2 {
            a.truncate(a.len() - 3);
            b.truncate(b.len() - 3);
        }
    }
    let eos = [TINY_VOCAB as u32 - 1];
    let spec = SpecConfig { max_new_tokens: 10, sampling: SamplingConfig::greedy(), seed: 0 };
    let prompt = tokens(6, 60);
    let want = generate_autoregressive(one, &prompt, &spec, &eos)?.tokens;
    let got = generate_speculative(
        split,
        &mut PlainDrafter::new(one),
        &mut FixedK(3),
        &mut RejectionSampler,
        &prompt,
        &spec,
        &eos,
    )?
    .tokens;
    Ok(SplitCalls { worst, moved, greedy_differs: (got != want).then_some((got, want)) })
}

/// What [`placed_calls`] saw: the worst logit difference, each call's (rows, exact) and the
/// tensors the placed model moved for it, and both caches after the calls.
pub(super) struct PlacedCalls {
    pub(super) worst: f32,
    pub(super) moved: Vec<(usize, bool, crate::DeviceMoves)>,
    pub(super) one: crate::cache::KvCache,
    pub(super) placed: crate::cache::KvCache,
}

/// EasySpec's calls on `one` and on `placed` (the same draft with its attentions placed on
/// other devices) under layer-parallel `lp`: a 7-token exact prefill, a fuzzy step, 3 exact
/// tokens of which the last is rolled back, a fuzzy step.
pub(super) fn placed_calls(one: &Transformer, placed: &Transformer, lp: usize) -> Result<PlacedCalls> {
    let groups = crate::layer_groups::LayerGroups::preset(lp, one.config().num_hidden_layers)?;
    let (mut a, mut b) = (one.new_cache(1), placed.new_cache(1));
    let (mut worst, mut moved) = (0f32, Vec::new());
    for (step, chunk) in [tokens(7, 1), vec![5], tokens(3, 2), vec![9]].into_iter().enumerate() {
        let exact = step % 2 == 0;
        let before = placed.device_moves();
        let (x, y) = if exact {
            (one.forward(&chunk, &mut a)?, placed.forward(&chunk, &mut b)?)
        } else {
            (one.forward_fuzzy(&chunk, &mut a, &groups, 1)?, placed.forward_fuzzy(&chunk, &mut b, &groups, 1)?)
        };
        moved.push((chunk.len(), exact, placed.device_moves() - before));
        worst = nan_max(worst, rows_diff(&rows(&x), &rows(&y))?);
        if step == 2 {
            a.truncate(a.len() - 1);
            b.truncate(b.len() - 1);
        }
    }
    Ok(PlacedCalls { worst, moved, one: a, placed: b })
}

/// One model's layers split in two ranges over the CPU and the device (both orders: the
/// embedding on one, the head on the other) computes the one-device CPU model's logits: a
/// prefill, steps, a verification, and a rollback that crosses back over both ranges' caches;
/// greedy decoding with the split model as the target gives the CPU's tokens.
pub(super) fn split_layers(device: &Device, dir: &Path, tol: f32) -> Result<Check> {
    let mut worst = 0f32;
    let mut bad = Vec::new();
    let cpu = default_device();
    for cfg in [ModelConfig { num_hidden_layers: 3, ..tiny_qwen2(TINY_VOCAB) }, tiny_llama(TINY_VOCAB)] {
        let path = write_tiny(dir, &cfg, 6)?;
        let one = load_model(&path, None, &cpu)?;
        for order in [[cpu.clone(), device.clone()], [device.clone(), cpu.clone()]] {
            let split = load_model_split(&path, None, &order, crate::WeightMode::Native)?;
            ensure!(split.model.is_split(), "the model did not split");
            let calls = split_calls(&one.model, &split.model)?;
            worst = nan_max(worst, calls.worst);
            if let Some((got, want)) = calls.greedy_differs {
                bad.push(format!("{}: greedy speculative with the split target {got:?} vs {want:?}", cfg.architecture));
            }
        }
    }
    Ok(numeric_and_tokens(
        "split_layers",
        worst,
        tol,
        "tiny qwen2 (3 layers) and tied llama split CPU|device and device|CPU: prefill, steps, verification, a 3-row rollback; greedy speculative with the split target",
        bad,
    ))
}
