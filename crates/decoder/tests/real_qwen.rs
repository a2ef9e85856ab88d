//! The real Qwen2.5-Coder pair (fetched by scripts/fetch-models.sh): parity of both models with
//! an independent float64 numpy implementation (and of `q8` with that implementation's 8-bit
//! activations), the pair loading together, native GGUF weights against the f32 path, and
//! greedy speculative decoding reproducing the target. The models load with native weights
//! unless a test says otherwise. The decoding methods run on `q8` weights (2-3x faster here than
//! native f32): losslessness rests on row invariance, which
//! `a_verification_call_gives_each_row_the_logits_of_a_one_row_step` checks for both paths.
//!
//! Tolerance: specx computes in f32 with another summation order than the f64 reference. The
//! largest difference measured over all compared logits (magnitude ~10-30) is 1.0e-4 (0.5B) and
//! 2.9e-5 (1.5B) on a Zen 4, 3.0e-4 on other CPUs; we
//! require 5e-3 absolute (a 16x margin for other CPUs' SIMD widths) and the same argmax
//! wherever the reference's top-2 gap exceeds that. A wrong RoPE, norm, bias or dequantizer
//! moves logits by whole units.

mod common;
use common::run_sequential;

use specx_decoder::{WeightMode, check_pair, default_device, load_model_as};
use std::path::PathBuf;
use std::sync::Mutex;

/// The models take ~10 GB together: run these tests one at a time.
static SERIAL: Mutex<()> = Mutex::new(());

const TOLERANCE: f32 = 5e-3;

fn model_dir(name: &str) -> PathBuf {
    let dir = specx_decoder::loader::model_cache_dir().join(name);
    assert!(
        dir.join("model.gguf").exists(),
        "real model missing at {}: run scripts/fetch-models.sh (or set SPECX_MODELS)",
        dir.display()
    );
    dir
}

/// The draft and the target, loaded together (exact `native` weights).
fn load_pair() -> (specx_decoder::LoadedModel, specx_decoder::LoadedModel) {
    load_pair_as(WeightMode::Native)
}

/// The draft and the target with `mode` weights.
fn load_pair_as(mode: WeightMode) -> (specx_decoder::LoadedModel, specx_decoder::LoadedModel) {
    let device = default_device();
    let load = |name: &str| load_model_as(&model_dir(name).join("model.gguf"), None, &device, mode).unwrap();
    (load("qwen2.5-coder-0.5b-instruct"), load("qwen2.5-coder-1.5b-instruct"))
}

#[derive(serde::Deserialize)]
struct Position {
    top_ids: Vec<u32>,
    top_logits: Vec<f32>,
    probe_logits: Vec<f32>,
    logsumexp: f32,
}

#[derive(serde::Deserialize)]
struct Reference {
    model_sha256: String,
    prompt: String,
    token_ids: Vec<u32>,
    probe_ids: Vec<u32>,
    positions: Vec<Position>,
}

fn logsumexp(xs: &[f32]) -> f32 {
    let m = xs.iter().cloned().fold(f32::NEG_INFINITY, f32::max);
    m + xs.iter().map(|x| ((x - m) as f64).exp()).sum::<f64>().ln() as f32
}

/// How a model's logits compare with its numpy reference over the fixture's positions.
struct Agreement {
    /// Largest |specx - reference| over the compared logits and log-sum-exps.
    worst: f32,
    /// KL(reference || specx) per position, over the reference's top-32 tokens and the rest
    /// as one class (a lower bound of the full KL, short of it by the tail's share only).
    kl: Vec<f64>,
    /// Positions whose argmax is the reference's, and positions.
    top1: (usize, usize),
    /// Positions whose argmax differs although the reference's top-2 gap exceeds `gap`.
    clear_misses: Vec<usize>,
}

/// Runs the prompt of `name`'s fixture (`-reference.json`, or `-q8-reference.json` with the
/// activations rounded as `q8` rounds them) through the model with `mode` weights and compares
/// every position.
fn against_reference(name: &str, fixture: &str, mode: WeightMode, gap: f32) -> Agreement {
    let fixture = manifest_dir().join(format!("tests/fixtures/{}-{fixture}.json", name.trim_end_matches("-instruct")));
    let r: Reference = serde_json::from_str(&std::fs::read_to_string(&fixture).unwrap()).unwrap();
    let dir = model_dir(name);
    let sha = specx_decoder::fsutil::sha256_file(&dir.join("model.gguf")).unwrap();
    assert_eq!(sha, r.model_sha256, "{} was made from another file", fixture.display());
    let lm = load_model_as(&dir.join("model.gguf"), None, &default_device(), mode).unwrap();
    assert_eq!(lm.tokenizer.encode(&r.prompt).unwrap(), r.token_ids, "tokenizer differs from HF tokenizers");
    let out = lm.model.forward(&r.token_ids, &mut lm.model.new_cache(1)).unwrap();
    let rows = out.logits_tail(r.token_ids.len());
    let mut a = Agreement { worst: 0.0, kl: Vec::new(), top1: (0, rows.len()), clear_misses: Vec::new() };
    for (i, (row, p)) in rows.iter().zip(&r.positions).enumerate() {
        let pairs = p.top_ids.iter().zip(&p.top_logits).chain(r.probe_ids.iter().zip(&p.probe_logits));
        for (&id, &want) in pairs {
            a.worst = specx_decoder::compare::nan_max(a.worst, (row[id as usize] - want).abs());
        }
        let lse = logsumexp(row);
        a.worst = specx_decoder::compare::nan_max(a.worst, (lse - p.logsumexp).abs());
        let (mut kl, mut rest_p, mut rest_q) = (0.0f64, 1.0f64, 1.0f64);
        for (&id, &l) in p.top_ids.iter().zip(&p.top_logits) {
            let (pr, q) = (((l - p.logsumexp) as f64).exp(), ((row[id as usize] - lse) as f64).exp());
            kl += pr * (pr / q).ln();
            rest_p -= pr;
            rest_q -= q;
        }
        let (rest_p, rest_q) = (rest_p.max(1e-300), rest_q.max(1e-300));
        a.kl.push(kl + rest_p * (rest_p / rest_q).ln());
        let best = specx_decoder::sampling::argmax(row);
        if best == p.top_ids[0] {
            a.top1.0 += 1;
        } else if p.top_logits[0] - p.top_logits[1] > gap {
            a.clear_misses.push(i);
        }
    }
    a
}

#[test]
fn both_models_logits_match_the_numpy_reference() {
    let _g = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    for name in ["qwen2.5-coder-0.5b-instruct", "qwen2.5-coder-1.5b-instruct"] {
        let a = against_reference(name, "reference", WeightMode::Native, TOLERANCE);
        eprintln!("{name}: max |specx - reference| over compared logits {:.2e}", a.worst);
        assert!(a.worst <= TOLERANCE, "{name}: logits differ from the reference by {}", a.worst);
        assert!(a.clear_misses.is_empty(), "{name}: argmax differs at positions {:?}", a.clear_misses);
    }
}

/// `q8` rounds activations to 8 bits, so its logits move by far more than the f32 tolerance;
/// what must hold is the distribution, against two float64 numpy references: the exact model,
/// and the model with its activations rounded as `q8` defines it (`--q8`: what 8-bit
/// activations cost, computed independently). Measured (the bits are the same on every CPU):
///
/// | | KL to the q8 reference: mean / max | KL to the exact reference: median / max | top-1 vs exact |
/// |---|---|---|---|
/// | 0.5B | 1.1e-3 / 8.1e-3 | 3.9e-4 / 0.40 (position 14) | 18/18 |
/// | 1.5B | 1.0e-3 / 5.2e-3 | 7.2e-4 / 3.7 (position 0) | 17/18 |
///
/// The two large KLs to the exact model are what 8-bit rounding does there, not a kernel error:
/// the q8 reference has them too (its argmax moves at the same positions) and specx agrees with
/// it within 2e-3 at both. The first `<|im_start|>` and the newline after `<|im_end|>` carry the
/// model's attention-sink activations, a few values thousands of times larger than the rest of
/// their 256-value block, whose other values then round to a few levels. Bars (~4x the
/// measured): against the q8 reference, every position within KL 3e-2, the mean within 5e-3
/// and the argmax equal wherever its top-2 gap exceeds 0.5; against the exact reference, the
/// median within 3e-3 and the argmax equal at 17 of 18 positions or more.
#[test]
fn q8_logits_match_the_numpy_reference_of_8_bit_activations() {
    let _g = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    for name in ["qwen2.5-coder-0.5b-instruct", "qwen2.5-coder-1.5b-instruct"] {
        let sim = against_reference(name, "q8-reference", WeightMode::Q8, 0.5);
        let exact = against_reference(name, "reference", WeightMode::Q8, f32::INFINITY);
        let mean = sim.kl.iter().sum::<f64>() / sim.kl.len() as f64;
        let max = sim.kl.iter().copied().fold(0.0, f64::max);
        let mut sorted = exact.kl.clone();
        sorted.sort_by(f64::total_cmp);
        let median = sorted[sorted.len() / 2];
        let per_position = |kl: &[f64]| kl.iter().map(|k| format!("{k:.1e}")).collect::<Vec<_>>().join(" ");
        eprintln!(
            "{name} q8: KL to the q8 reference mean {mean:.1e}, max {max:.1e}; to the exact reference median {median:.1e}, top-1 {}/{}",
            exact.top1.0, exact.top1.1
        );
        eprintln!(
            "  per position, to the q8 reference: {}\n  to the exact reference: {}",
            per_position(&sim.kl),
            per_position(&exact.kl)
        );
        assert!(
            sim.kl.iter().all(|k| k.is_finite() && *k <= 3e-2) && mean <= 5e-3,
            "{name}: KL to the q8 reference {}",
            per_position(&sim.kl)
        );
        assert!(
            sim.clear_misses.is_empty(),
            "{name}: argmax differs from the q8 reference at positions {:?}",
            sim.clear_misses
        );
        assert!(
            median <= 3e-3 && exact.top1.0 + 1 >= exact.top1.1,
            "{name}: KL to the exact reference {} (top-1 {}/{})",
            per_position(&exact.kl),
            exact.top1.0,
            exact.top1.1
        );
    }
}

#[test]
fn the_real_pair_loads_together_and_shares_a_tokenizer() {
    let _g = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let (draft, target) = load_pair();
    check_pair(&draft, &target).unwrap();
    let (d, t) = (draft.model.config(), target.model.config());
    assert_eq!((d.num_hidden_layers, d.hidden_size, t.num_hidden_layers, t.hidden_size), (24, 896, 28, 1536));
    assert_eq!((d.num_key_value_heads, t.num_key_value_heads, d.rope_theta), (2, 2, 1e6));
    assert!(target.eos_ids.contains(&target.tokenizer.token_id("<|im_end|>").unwrap()));
    // Both models answer a chat prompt with the same first greedy token on an easy question.
    let prompt = specx_decoder::ChatTemplate::qwen().apply("Print hello world in Python. Reply with code only.");
    let ids = target.tokenizer.encode(&prompt).unwrap();
    let first = |m: &specx_decoder::Transformer| {
        let mut c = m.new_cache(1);
        specx_decoder::sampling::argmax(&specx_decoder::generate::last_logits(&m.forward_last(&ids, &mut c).unwrap()))
    };
    let (a, b) = (first(&draft.model), first(&target.model));
    assert_eq!(target.tokenizer.decode(&[a]).unwrap(), target.tokenizer.decode(&[b]).unwrap());
}

#[test]
fn greedy_dsi_reproduces_the_target_on_the_real_pair_for_every_sp_degree() {
    use specx_decoder::speculative::*;
    let _g = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let (draft, target) = load_pair_as(WeightMode::Q8);
    let cfg = SpecConfig { max_new_tokens: 24, sampling: specx_decoder::SamplingConfig::greedy(), seed: 0 };
    let ids = target
        .tokenizer
        .encode(
            &specx_decoder::ChatTemplate::qwen()
                .apply("Write a Python function that checks whether a string is a palindrome."),
        )
        .unwrap();
    let want = generate_autoregressive(&target.model, &ids, &cfg, &target.eos_ids).unwrap().tokens;
    for servers in [1, 2, 4] {
        let mut drafter = PlainDrafter::new(&draft.model);
        let got = generate_dsi(
            &vec![&target.model; servers],
            &mut drafter,
            &mut FixedK(3),
            &mut RejectionSampler,
            &ids,
            &cfg,
            &DsiConfig::new(servers, 3),
            &target.eos_ids,
        )
        .unwrap();
        let tokens = &got.generation.tokens;
        assert_eq!(
            tokens,
            &want,
            "sp {servers}: {:?} vs {:?}",
            target.tokenizer.decode(tokens),
            target.tokenizer.decode(&want)
        );
        assert!(got.generation.metrics.n_accepted > 0, "the Qwen pair should agree on some tokens");
    }
}

#[test]
fn greedy_easyspec_reproduces_the_target_on_the_real_pair() {
    use specx_decoder::layer_groups::LayerGroups;
    use specx_decoder::speculative::*;
    let _g = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let (draft, target) = load_pair_as(WeightMode::Q8);
    let layers = draft.model.config().num_hidden_layers;
    let cfg = SpecConfig { max_new_tokens: 24, sampling: specx_decoder::SamplingConfig::greedy(), seed: 0 };
    let prompts =
        ["Write a Python function that checks whether a string is a palindrome.", "What is 17 * 23? Answer briefly."];
    let ids: Vec<Vec<u32>> = prompts
        .iter()
        .map(|q| target.tokenizer.encode(&specx_decoder::ChatTemplate::qwen().apply(q)).unwrap())
        .collect();
    let want: Vec<Vec<u32>> =
        ids.iter().map(|p| generate_autoregressive(&target.model, p, &cfg, &target.eos_ids).unwrap().tokens).collect();
    // LP4 (the paper's default for our depth) under every calibration policy with fixed K on
    // one prompt; other sizes, the confidence rule, worker threads and DSI on the other.
    let confidence = || -> Box<dyn StopPolicy> {
        Box::new(ConfidencePolicy { threshold: 0.6, min_candidates: 1, max_candidates: 8 })
    };
    let mut runs: Vec<(usize, &str, Calibration, Box<dyn StopPolicy>, usize, usize)> = Vec::new();
    for c in [Calibration::Never, Calibration::PrefillOnly, Calibration::EveryRound, Calibration::EveryMismatch] {
        runs.push((0, "lp4", c, Box::new(FixedK(3)), 1, 0));
    }
    runs.push((1, "lp2", Calibration::EveryMismatch, confidence(), 1, 0));
    runs.push((1, "lp5", Calibration::EveryRound, confidence(), 2, 0));
    runs.push((1, "lp4", Calibration::EveryRound, Box::new(FixedK(3)), 1, 2));
    let mut calibrations = 0;
    for (p, strategy, calibration, mut policy, workers, servers) in runs {
        let what = format!("prompt {p}, {strategy}, {calibration:?}, {workers} workers, {servers} DSI servers");
        let mut drafter = FuzzyDrafter::new(&draft.model, LayerGroups::parse(strategy, layers).unwrap(), calibration)
            .unwrap()
            .with_workers(workers);
        let got = if servers > 0 {
            generate_dsi(
                &vec![&target.model; servers],
                &mut drafter,
                policy.as_mut(),
                &mut RejectionSampler,
                &ids[p],
                &cfg,
                &DsiConfig::new(servers, 3),
                &target.eos_ids,
            )
            .unwrap()
            .generation
        } else {
            generate_speculative(
                &target.model,
                &mut drafter,
                policy.as_mut(),
                &mut RejectionSampler,
                &ids[p],
                &cfg,
                &target.eos_ids,
            )
            .unwrap()
        };
        assert_eq!(
            got.tokens,
            want[p],
            "{what}: {:?} vs {:?}",
            target.tokenizer.decode(&got.tokens),
            target.tokenizer.decode(&want[p])
        );
        assert!(got.metrics.n_accepted > 0, "{what}: the fuzzy draft should still agree on some tokens");
        calibrations += got.metrics.n_calibrations;
    }
    assert!(calibrations > 0, "no calibration ran");
}

#[test]
fn a_verification_call_gives_each_row_the_logits_of_a_one_row_step() {
    // Row invariance of the whole forward (kernels, norms, RoPE, attention): after the same
    // prompt, 5 tokens in one call give, row by row, the bits of 5 one-token steps, for both
    // weight paths the CPU decodes GGUF with.
    let _g = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let device = default_device();
    let path = model_dir("qwen2.5-coder-0.5b-instruct").join("model.gguf");
    for mode in [WeightMode::Native, WeightMode::Q8] {
        let lm = load_model_as(&path, None, &device, mode).unwrap();
        let ids = lm
            .tokenizer
            .encode(&specx_decoder::ChatTemplate::qwen().apply("Write a Python function that reverses a list."))
            .unwrap();
        let (prompt, rows) = ids.split_at(ids.len() - 5);
        let v = lm.model.config().vocab_size;
        let mut cache = lm.model.new_cache(1);
        lm.model.forward_last(prompt, &mut cache).unwrap();
        let mut one_by_one = cache.clone();
        let together = lm.model.forward(rows, &mut cache).unwrap().logits.into_data().try_to_vec::<f32>().unwrap();
        for (i, &t) in rows.iter().enumerate() {
            let step = lm.model.forward(&[t], &mut one_by_one).unwrap().logits.into_data().try_to_vec::<f32>().unwrap();
            let row = &together[i * v..(i + 1) * v];
            let differ = step.iter().zip(row).filter(|(a, b)| a.to_bits() != b.to_bits()).count();
            let worst = specx_decoder::compare::max_abs_diff(&step, row);
            assert_eq!(
                differ, 0,
                "{mode} weights, row {i}: {differ} of {v} logits differ from a one-row step (max {worst:.2e})"
            );
        }
    }
}

#[test]
fn q8_weights_keep_every_method_lossless_on_the_real_pair() {
    // Integer dot products on 8-bit activations change the numbers (README: perplexity
    // +0.13% on the target), not the contract: a row's result depends on that row alone, so a
    // verification of K + 1 rows gives each row the logits of a one-row step, and every
    // method reproduces the greedy output of the same q8 target token for token.
    use specx_decoder::layer_groups::LayerGroups;
    use specx_decoder::speculative::*;
    let _g = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let (draft, target) = load_pair_as(WeightMode::Q8);
    let hidden = draft.model.config().hidden_size;
    let layers = draft.model.config().num_hidden_layers;
    let cfg = SpecConfig { max_new_tokens: 24, sampling: specx_decoder::SamplingConfig::greedy(), seed: 0 };
    for (p, q) in
        ["Write a Python function that checks whether a string is a palindrome.", "What is 17 * 23? Answer briefly."]
            .iter()
            .enumerate()
    {
        let ids = target.tokenizer.encode(&specx_decoder::ChatTemplate::qwen().apply(q)).unwrap();
        let want = generate_autoregressive(&target.model, &ids, &cfg, &target.eos_ids).unwrap().tokens;
        // An untrained head is as good as a trained one for losslessness: it only moves the stops.
        let head = || {
            HeadPolicy::new(
                AcceptanceHead::init_seeded(hidden, 3, false, 5, draft.model.device()),
                HeadRule::new(0.5, 2, 8),
            )
        };
        let confidence = ConfidencePolicy { threshold: 0.6, min_candidates: 1, max_candidates: 8 };
        let mut policies: Vec<(&str, Box<dyn StopPolicy>)> =
            vec![("fixed K=3", Box::new(FixedK(3))), ("confidence", Box::new(confidence)), ("head", Box::new(head()))];
        for (name, policy) in policies.iter_mut() {
            let mut drafter = PlainDrafter::new(&draft.model);
            let got = run_sequential(&target.model, &mut drafter, policy.as_mut(), &ids, &cfg, &target.eos_ids);
            assert_eq!(
                got.tokens,
                want,
                "prompt {p}, {name}: {:?} vs {:?}",
                target.tokenizer.decode(&got.tokens),
                target.tokenizer.decode(&want)
            );
            assert!(got.metrics.n_accepted > 0, "prompt {p}, {name}: the Qwen pair should agree on some tokens");
        }
        let mut drafter = PlainDrafter::new(&draft.model);
        let dsi = generate_dsi(
            &[&target.model; 2],
            &mut drafter,
            &mut FixedK(3),
            &mut RejectionSampler,
            &ids,
            &cfg,
            &DsiConfig::new(2, 3),
            &target.eos_ids,
        )
        .unwrap();
        assert_eq!(dsi.generation.tokens, want, "prompt {p}, DSI with 2 servers");
        let mut fuzzy =
            FuzzyDrafter::new(&draft.model, LayerGroups::parse("lp4", layers).unwrap(), Calibration::EveryRound)
                .unwrap();
        let easy = generate_speculative(
            &target.model,
            &mut fuzzy,
            &mut FixedK(3),
            &mut RejectionSampler,
            &ids,
            &cfg,
            &target.eos_ids,
        )
        .unwrap();
        assert_eq!(easy.tokens, want, "prompt {p}, EasySpec lp4");
    }
}

#[test]
fn cheaper_drafts_keep_the_real_pair_lossless_and_read_fewer_bytes() {
    // The shipped frequency table's vocabulary subset and a Q4_0 requantization:
    // each is a different q, so greedy output must still be the target's, token for token,
    // under a fixed K and a policy that reads the draft's probabilities.
    use specx_decoder::speculative::*;
    use specx_decoder::{DraftTransform, DraftWeights};
    let _g = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let (draft, target) = load_pair_as(WeightMode::Q8);
    let cfg = SpecConfig { max_new_tokens: 24, sampling: specx_decoder::SamplingConfig::greedy(), seed: 0 };
    let full_bytes = draft.model.weight_bytes_per_token();
    for t in [
        DraftTransform { vocab: Some(16384), ..Default::default() },
        DraftTransform { vocab: Some(32768), vocab_table: None, weights: Some(DraftWeights::Q4_0) },
    ] {
        let cheap = t.apply(draft.model.clone(), &draft.tokenizer).unwrap();
        assert!(
            cheap.weight_bytes_per_token() < full_bytes * 3 / 4,
            "{}: {} of {} bytes",
            t.label(),
            cheap.weight_bytes_per_token(),
            full_bytes
        );
        for q in [
            "Write a Python function that checks whether a string is a palindrome.",
            "What is 17 * 23? Answer briefly.",
        ] {
            let ids = target.tokenizer.encode(&specx_decoder::ChatTemplate::qwen().apply(q)).unwrap();
            let want = generate_autoregressive(&target.model, &ids, &cfg, &target.eos_ids).unwrap().tokens;
            let confidence = ConfidencePolicy { threshold: 0.6, min_candidates: 1, max_candidates: 8 };
            let mut policies: Vec<(&str, Box<dyn StopPolicy>)> =
                vec![("fixed K=4", Box::new(FixedK(4))), ("confidence", Box::new(confidence))];
            for (name, policy) in policies.iter_mut() {
                let mut drafter = PlainDrafter::new(&cheap);
                let got = run_sequential(&target.model, &mut drafter, policy.as_mut(), &ids, &cfg, &target.eos_ids);
                assert_eq!(got.tokens, want, "{}, {name}, {q}", t.label());
                assert!(
                    got.metrics.n_accepted > 0,
                    "{}, {name}: the cheaper draft should still agree on some tokens",
                    t.label()
                );
            }
        }
    }
}

#[test]
fn native_weights_give_the_f32_paths_logits_on_the_real_pair() {
    // Both paths multiply the same dequantized values in the same order: the few-row kernel for
    // a prompt of <= 32 tokens and single-token steps, burn's gemm for a 48-token prompt (the
    // native path decodes each matrix for that call). Bitwise equal logits.
    let _g = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let device = default_device();
    for name in ["qwen2.5-coder-0.5b-instruct", "qwen2.5-coder-1.5b-instruct"] {
        let path = model_dir(name).join("model.gguf");
        let native = load_model_as(&path, None, &device, WeightMode::Native).unwrap();
        let dense = load_model_as(&path, None, &device, WeightMode::F32).unwrap();
        assert!(native.model.is_native() && !dense.model.is_native());
        let prompt = native
            .tokenizer
            .encode("def quicksort(xs):\n    \"\"\"Sort a list of numbers in ascending order.\"\"\"\n")
            .unwrap();
        assert!(prompt.len() <= 32, "{} prompt tokens", prompt.len());
        let run = |m: &specx_decoder::Transformer| {
            let mut c = m.new_cache(1);
            let out = m.forward(&prompt, &mut c).unwrap();
            let mut logits = out.logits_tail(prompt.len());
            for _ in 0..6 {
                let next = specx_decoder::sampling::argmax(logits.last().unwrap());
                logits.extend(m.forward(&[next], &mut c).unwrap().logits_tail(1));
            }
            logits
        };
        let (a, b) = (run(&native.model), run(&dense.model));
        for (i, (x, y)) in a.iter().zip(&b).enumerate() {
            assert!(
                x.iter().zip(y).all(|(p, q)| p.to_bits() == q.to_bits()),
                "{name}: position {i} differs between native and f32"
            );
        }
        let long: Vec<u32> = prompt.iter().cycle().take(48).copied().collect();
        let all = |m: &specx_decoder::Transformer| m.forward(&long, &mut m.new_cache(1)).unwrap().logits_tail(48);
        let (a, b) = (all(&native.model), all(&dense.model));
        for (i, (x, y)) in a.iter().zip(&b).enumerate() {
            assert!(
                x.iter().zip(y).all(|(p, q)| p.to_bits() == q.to_bits()),
                "{name}: 48-token forward, position {i} differs"
            );
        }
        eprintln!("{name}: native = f32 bitwise over {} positions and a 48-token forward", prompt.len() + 6);
    }
}

/// This crate's directory as cargo reports it when running the test (a build directory shared
/// between checkouts can hold a binary compiled in another checkout, so the compile-time value
/// is only the fallback).
fn manifest_dir() -> std::path::PathBuf {
    std::env::var_os("CARGO_MANIFEST_DIR").map_or_else(|| env!("CARGO_MANIFEST_DIR").into(), Into::into)
}
