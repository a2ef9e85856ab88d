//! The generic burn path on a Vulkan device (`--features wgpu`; scripts/test.sh runs these on
//! Mesa's software Vulkan driver, lavapipe, when it can install it) against the CPU path: the
//! same logits within a stated tolerance, KV rollback behaving as on the CPU, a fixed-K
//! speculative round giving the CPU's tokens, the acceptance head's probabilities, and a few
//! greedy tokens of the real 0.5B model.
//!
//! Tolerance: the device runs burn's matmuls (another summation order than the CPU kernel) in
//! f32. On the tiny models (logits of magnitude ~1-5) lavapipe differs from the CPU path by at
//! most ~1e-6 (measured: see TINY_TOLERANCE); we allow 1e-4. A wrong cache slice, a mask off by
//! one or a missing bias moves logits by tenths.
#![cfg(feature = "wgpu")]

mod common;
use common::*;
use specx_decoder::speculative::*;
use specx_decoder::synthetic::{random_weights, tiny_llama, tiny_qwen2, word_tokenizer_json, write_hf_dir, StDtype};
use specx_decoder::{default_device, device_from_name, load_model, Device, LoadedModel, SamplingConfig};
use std::path::Path;

const TINY_TOLERANCE: f32 = 1e-4;

fn gpu() -> Device {
    device_from_name("wgpu").unwrap_or_else(|e| panic!("no wgpu device for the GPU tests: {e:#}"))
}

/// The same HF directory loaded on the CPU and on the device.
fn both(path: &Path) -> (LoadedModel, LoadedModel) {
    let cpu = load_model(path, None, &default_device()).unwrap();
    let dev = load_model(path, None, &gpu()).unwrap();
    (cpu, dev)
}

fn write_tiny(dir: &Path, cfg: &specx_decoder::ModelConfig, seed: u64) -> std::path::PathBuf {
    let path = dir.join(format!("{}-{seed}", cfg.architecture));
    write_hf_dir(&path, cfg, &random_weights(cfg, seed), StDtype::F32, 1, &word_tokenizer_json(cfg.vocab_size, "w")).unwrap();
    path
}

#[test]
fn tiny_models_give_the_cpu_logits_on_the_device() {
    let dir = tempfile::tempdir().unwrap();
    let mut worst = 0f32;
    for cfg in [tiny_qwen2(VOCAB), tiny_llama(VOCAB)] {
        let (cpu, dev) = both(&write_tiny(dir.path(), &cfg, 3));
        assert!(!dev.model.is_native() && *dev.model.device() != default_device());
        let (mut cc, mut dc) = (cpu.model.new_cache(1), dev.model.new_cache(1));
        // A prefill of several rows, then single-token steps, then a 4-row verification.
        for chunk in [tokens(9, 1), vec![5], vec![17], tokens(4, 2)] {
            let a = rows(&cpu.model.forward(&chunk, &mut cc).unwrap());
            let b = rows(&dev.model.forward(&chunk, &mut dc).unwrap());
            for (x, y) in a.iter().zip(&b) {
                worst = worst.max(max_abs_diff(x, y));
            }
            assert_rows_close(&a, &b, TINY_TOLERANCE, &format!("{} after {} cached", cfg.architecture, cc.len()));
        }
        // Batched forwards and the hidden states the head reads.
        let seqs = [tokens(6, 3), tokens(6, 4)];
        let refs: Vec<&[u32]> = seqs.iter().map(Vec::as_slice).collect();
        let a = cpu.model.forward_batch(&refs, &mut cpu.model.new_cache(2)).unwrap();
        let b = dev.model.forward_batch(&refs, &mut dev.model.new_cache(2)).unwrap();
        let flat = |t: burn::tensor::Tensor<3>| t.into_data().try_to_vec::<f32>().unwrap();
        assert!(max_abs_diff(&flat(a.logits), &flat(b.logits)) <= TINY_TOLERANCE, "batched logits");
        assert!(max_abs_diff(&flat(a.hidden), &flat(b.hidden)) <= TINY_TOLERANCE, "batched hidden states");
    }
    eprintln!("largest |cpu - device| logit difference on the tiny models: {worst:.2e}");
}

#[test]
fn kv_rollback_on_the_device_behaves_as_on_the_cpu() {
    let dir = tempfile::tempdir().unwrap();
    let (cpu, dev) = both(&write_tiny(dir.path(), &tiny_qwen2(VOCAB), 5));
    // More than one growth step of the cache (256 positions), so the device copy on growth runs.
    let prefix = tokens(300, 7);
    let (mut cc, mut dc) = (cpu.model.new_cache(1), dev.model.new_cache(1));
    cpu.model.forward(&prefix, &mut cc).unwrap();
    dev.model.forward(&prefix, &mut dc).unwrap();
    // A rejected speculation: five tokens in, three rolled back, then a different token.
    let spec = tokens(5, 8);
    cpu.model.forward(&spec, &mut cc).unwrap();
    dev.model.forward(&spec, &mut dc).unwrap();
    cc.truncate(prefix.len() + 2);
    dc.truncate(prefix.len() + 2);
    let next = [11u32, 12];
    let after_cpu = rows(&cpu.model.forward(&next, &mut cc).unwrap());
    let after_dev = rows(&dev.model.forward(&next, &mut dc).unwrap());
    // Reference on the device: a fresh cache that never saw the rolled-back tokens.
    let mut fresh = prefix.clone();
    fresh.extend_from_slice(&spec[..2]);
    fresh.extend_from_slice(&next);
    let full = dev.model.forward(&fresh, &mut dev.model.new_cache(1)).unwrap();
    let want = full.logits_tail(next.len());
    assert_rows_close(&after_dev, &want, TINY_TOLERANCE, "device: rolled-back cache vs a fresh one");
    assert_rows_close(&after_dev, &after_cpu, TINY_TOLERANCE, "device vs cpu after rollback");
    assert_eq!(dc.len(), fresh.len());
    // The stored keys and values agree with the CPU's too.
    for layer in [0, 1] {
        let (ck, cv) = cc.layer_data(layer);
        let (dk, dv) = dc.layer_data(layer);
        assert!(max_abs_diff(&ck, &dk) <= TINY_TOLERANCE && max_abs_diff(&cv, &dv) <= TINY_TOLERANCE, "layer {layer} cache");
    }
}

#[test]
fn a_fixed_k_speculative_round_gives_the_cpu_tokens() {
    let dir = tempfile::tempdir().unwrap();
    let (tc, td) = both(&write_tiny(dir.path(), &tiny_qwen2(VOCAB), 1));
    let close = noisy_draft(dir.path(), VOCAB, 1, 0.1);
    let dd = load_model(&dir.path().join("noisy"), None, &gpu()).unwrap();
    let eos = [VOCAB as u32 - 1];
    let mut rounds = (0, 0); // rounds with a rejection, rounds with every draft accepted
    for p in 0..4u32 {
        let prompt = tokens(5 + p as usize, 20 + p);
        let cfg = SpecConfig { max_new_tokens: 12, sampling: SamplingConfig::greedy(), seed: 0 };
        let ar_cpu = generate_autoregressive(&tc.model, &prompt, &cfg, &eos).unwrap();
        let ar_dev = generate_autoregressive(&td.model, &prompt, &cfg, &eos).unwrap();
        assert_eq!(ar_dev.tokens, ar_cpu.tokens, "prompt {p}: greedy on the device");
        let run = |target: &specx_decoder::Transformer, draft: &specx_decoder::Transformer| {
            let mut drafter = PlainDrafter::new(draft);
            generate_speculative(target, &mut drafter, &mut FixedK(3), &mut RejectionSampler, &prompt, &cfg, &eos).unwrap()
        };
        let cpu = run(&tc.model, &close.model);
        let dev = run(&td.model, &dd.model);
        assert_eq!(dev.tokens, ar_cpu.tokens, "prompt {p}: speculative on the device");
        assert_eq!(dev.metrics.accepted_per_round, cpu.metrics.accepted_per_round, "prompt {p}: rounds");
        for (&a, &k) in dev.metrics.accepted_per_round.iter().zip(&dev.metrics.drafted_per_round) {
            if a < k { rounds.0 += 1 } else { rounds.1 += 1 }
        }
    }
    assert!(rounds.0 > 0 && rounds.1 > 0, "rounds with a rejection / fully accepted: {rounds:?}");
}

#[test]
fn the_acceptance_head_gives_the_cpu_probabilities_on_the_device() {
    let hidden = 32;
    for (depth, tied) in [(0, false), (3, false), (3, true)] {
        let cpu = AcceptanceHead::init_seeded(hidden, depth, tied, 11, &default_device());
        let dev = AcceptanceHead::init_seeded(hidden, depth, tied, 11, &gpu());
        for s in 0..8u32 {
            let h: Vec<f32> = tokens(hidden, s).iter().map(|&t| t as f32 / VOCAB as f32 - 0.5).collect();
            let (a, b) = (cpu.accept_probability(&h).unwrap(), dev.accept_probability(&h).unwrap());
            assert!((a - b).abs() <= 1e-6, "depth {depth} tied {tied}: cpu {a} vs device {b}");
        }
        // A checkpoint written from the device loads on the CPU with the same predictions.
        let dir = tempfile::tempdir().unwrap();
        let spec = HeadSpec { hidden_size: hidden, depth, tied, draft_model_sha256: None, training: serde_json::Value::Null, draft_stats: false };
        dev.save(dir.path(), &spec).unwrap();
        let (back, _) = AcceptanceHead::load(dir.path(), &default_device()).unwrap();
        let h = vec![0.25f32; hidden];
        assert_eq!(back.accept_probability(&h).unwrap(), cpu.accept_probability(&h).unwrap());
    }
}

#[test]
fn real_qwen_0_5b_greedy_tokens_match_the_cpu_path() {
    let dir = specx_decoder::loader::model_cache_dir().join("qwen2.5-coder-0.5b-instruct");
    let path = dir.join("model.gguf");
    assert!(path.exists(), "real model missing at {}: run scripts/fetch-models.sh (or set SPECX_MODELS)", path.display());
    let cpu = load_model(&path, None, &default_device()).unwrap();
    let dev = load_model(&path, None, &gpu()).unwrap();
    let prompt = cpu.tokenizer.encode("def fibonacci(n):").unwrap();
    let cfg = SpecConfig { max_new_tokens: 6, sampling: SamplingConfig::greedy(), seed: 0 };
    let a = generate_autoregressive(&cpu.model, &prompt, &cfg, &[]).unwrap();
    let b = generate_autoregressive(&dev.model, &prompt, &cfg, &[]).unwrap();
    assert_eq!(b.tokens, a.tokens, "greedy tokens: cpu {:?} vs device {:?}", cpu.tokenizer.decode(&a.tokens), dev.tokenizer.decode(&b.tokens));
    // The prompt's last logits, for the record (the real model's logits are ~10-30).
    let la = cpu.model.forward_last(&prompt, &mut cpu.model.new_cache(1)).unwrap().logits_tail(1);
    let lb = dev.model.forward_last(&prompt, &mut dev.model.new_cache(1)).unwrap().logits_tail(1);
    let d = max_abs_diff(&la[0], &lb[0]);
    eprintln!("real 0.5B: {} greedy tokens equal; prompt logits differ by at most {d:.2e}", a.tokens.len());
    assert!(d < 5e-2, "prompt logits differ by {d}");
    // Row invariance: a 5-row verification forward against 5 one-row forwards, on each path.
    // The CPU's projections are row-invariant by construction; the device's matmuls need not
    // be, which is what can flip greedy near-ties (the eval's numerical audit). Printed for the
    // record: the tolerance above is the bar.
    let rows = &a.tokens[..5];
    for (name, lm) in [("cpu", &cpu), ("device", &dev)] {
        let mut cache = lm.model.new_cache(1);
        lm.model.forward(&prompt, &mut cache).unwrap();
        let together = lm.model.forward(rows, &mut cache).unwrap().logits_tail(rows.len());
        cache.truncate(prompt.len());
        let mut gap = 0f32;
        for (i, &t) in rows.iter().enumerate() {
            let one = lm.model.forward(&[t], &mut cache).unwrap().logits_tail(1);
            gap = gap.max(max_abs_diff(&one[0], &together[i]));
        }
        eprintln!("real 0.5B on the {name}: 5 rows at once vs one at a time differ by at most {gap:.2e}");
    }
}

#[test]
fn dsi_workers_on_the_cpu_and_the_device_reproduce_greedy_decoding() {
    let dir = tempfile::tempdir().unwrap();
    let (tc, td) = both(&write_tiny(dir.path(), &tiny_qwen2(VOCAB), 1));
    let close = noisy_draft(dir.path(), VOCAB, 1, 0.3);
    let eos = [VOCAB as u32 - 1];
    for p in 0..3u32 {
        let prompt = tokens(6 + p as usize, 40 + p);
        let cfg = SpecConfig { max_new_tokens: 14, sampling: SamplingConfig::greedy(), seed: 0 };
        let want = generate_autoregressive(&tc.model, &prompt, &cfg, &eos).unwrap().tokens;
        let mut drafter = PlainDrafter::new(&close.model);
        let targets = [&tc.model, &td.model];
        let got = generate_dsi(&targets, &mut drafter, &mut FixedK(3), &mut RejectionSampler, &prompt, &cfg, &DsiConfig::new(2, 3), &eos).unwrap();
        assert_eq!(got.generation.tokens, want, "prompt {p}");
        assert!(got.stats.worker_busy_s.iter().all(|&s| s > 0.0) || got.stats.tasks < 2, "both workers verified: {:?}", got.stats);
    }
    let mut drafter = PlainDrafter::new(&close.model);
    let cfg = SpecConfig { max_new_tokens: 4, sampling: SamplingConfig::greedy(), seed: 0 };
    let e = generate_dsi(&[&tc.model], &mut drafter, &mut FixedK(3), &mut RejectionSampler, &[1, 2], &cfg, &DsiConfig::new(2, 3), &eos).unwrap_err();
    assert!(e.to_string().contains("one per worker"), "{e}");
}

/// EasySpec's layer parallelism across devices: a draft whose attention layers alternate
/// between the CPU and the device computes what the draft on one device computes (within the
/// tiny-model tolerance), for the exact and fuzzy forwards alike, its cache layers sit on
/// their attention's device, and a greedy EasySpec run with it reproduces the target.
#[test]
fn easyspec_attentions_placed_on_the_cpu_and_the_device_compute_as_on_one() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = specx_decoder::ModelConfig { num_hidden_layers: 5, ..tiny_qwen2(VOCAB) };
    let path = write_tiny(dir.path(), &cfg, 4);
    let one = load_model(&path, None, &default_device()).unwrap();
    let placed = load_model(&path, None, &default_device()).unwrap().model.place_attention(&[default_device(), gpu()]).unwrap();
    assert!(placed.is_placed() && !one.model.is_placed());
    let on_cpu: Vec<bool> = placed.layer_devices().iter().map(|d| *d == default_device()).collect();
    assert_eq!(on_cpu, [true, false, true, false, true], "layer i on devices[i % 2]");
    let mut worst = 0f32;
    for lp in [1, 2, 4] {
        let groups = specx_decoder::layer_groups::LayerGroups::preset(lp, 5).unwrap();
        let (mut a, mut b) = (one.model.new_cache(1), placed.new_cache(1));
        for (step, chunk) in [tokens(7, 1), vec![5], tokens(3, 2), vec![9]].into_iter().enumerate() {
            // Every other step exact (a calibration), the rest fuzzy; one rollback on the way.
            let (x, y) = if step % 2 == 0 {
                (one.model.forward(&chunk, &mut a).unwrap(), placed.forward(&chunk, &mut b).unwrap())
            } else {
                (one.model.forward_fuzzy(&chunk, &mut a, &groups, 1).unwrap(), placed.forward_fuzzy(&chunk, &mut b, &groups, 1).unwrap())
            };
            let (x, y) = (rows(&x), rows(&y));
            for (p, q) in x.iter().zip(&y) {
                worst = worst.max(max_abs_diff(p, q));
            }
            assert_rows_close(&x, &y, TINY_TOLERANCE, &format!("lp {lp}, step {step}"));
            if step == 2 {
                a.truncate(a.len() - 1);
                b.truncate(b.len() - 1);
            }
        }
        assert_eq!(a.layer_precise_lens(), b.layer_precise_lens(), "lp {lp}: exact watermarks");
        for layer in 0..5 {
            let ((ak, av), (bk, bv)) = (a.layer_data(layer), b.layer_data(layer));
            assert!(max_abs_diff(&ak, &bk) <= TINY_TOLERANCE && max_abs_diff(&av, &bv) <= TINY_TOLERANCE, "lp {lp}: layer {layer} cache");
        }
    }
    eprintln!("largest |one device - placed| logit difference: {worst:.2e}");
    // Ragged (batched) forwards are for one-device models and say so.
    let e = placed.forward_ragged(&mut [(&[1u32, 2][..], &mut placed.new_cache(1))]).unwrap_err();
    assert!(e.to_string().contains("one device"), "{e}");
    // Greedy EasySpec with the placed draft is the target's greedy output.
    let target = load_model(&write_tiny(dir.path(), &cfg, 5), None, &default_device()).unwrap();
    let eos = [VOCAB as u32 - 1];
    for p in 0..2u32 {
        let prompt = tokens(6 + p as usize, 50 + p);
        let spec = SpecConfig { max_new_tokens: 12, sampling: SamplingConfig::greedy(), seed: 0 };
        let want = generate_autoregressive(&target.model, &prompt, &spec, &eos).unwrap().tokens;
        let groups = specx_decoder::layer_groups::LayerGroups::preset(2, 5).unwrap();
        let mut drafter = FuzzyDrafter::new(&placed, groups, Calibration::EveryRound).unwrap();
        let got = generate_speculative(&target.model, &mut drafter, &mut FixedK(3), &mut RejectionSampler, &prompt, &spec, &eos).unwrap();
        assert_eq!(got.tokens, want, "prompt {p}");
    }
}
