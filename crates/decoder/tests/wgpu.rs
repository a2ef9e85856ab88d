//! The generic burn path on a Vulkan device (`--features wgpu`; scripts/test.sh runs these on
//! Mesa's software Vulkan driver, lavapipe, when it can install it) against the CPU path. The
//! tiny-model checks are `specx_decoder::device_check`, the code `specx gpu-check` runs on a
//! real GPU: logits, KV rollback, a fixed-K speculative run, the acceptance head, DSI with a
//! worker on each device, EasySpec's placed attentions, a model split over both, a token
//! tree's call with its accepted path kept, the fused kernels and the GGUF block products
//! against a host reference, and the kernel launches per layer against their bound. Then a few
//! greedy tokens of the real 0.5B model.
//!
//! Tolerance: the device runs burn's matmuls (another summation order than the CPU kernel) in
//! f32. On the tiny models (logits of magnitude ~1-5) lavapipe differs from the CPU path by at
//! most ~6e-6 (measured); we allow 1e-4. A wrong cache slice, a mask off by one or a missing
//! bias moves logits by tenths.
#![cfg(feature = "wgpu")]

mod common;
use common::*;
use specx_decoder::device_check::run_check;
use specx_decoder::speculative::*;
use specx_decoder::{Device, SamplingConfig, default_device, device_from_name, load_model};

const TINY_TOLERANCE: f32 = 1e-4;

fn gpu() -> Device {
    device_from_name("wgpu").unwrap_or_else(|e| panic!("no wgpu device for the GPU tests: {e:#}"))
}

fn check(name: &str) {
    let dir = tempfile::tempdir().unwrap();
    let c = run_check(name, &gpu(), dir.path(), TINY_TOLERANCE);
    eprintln!("{name}: worst {:?} (tolerance {:?}): {}", c.worst_abs_diff, c.tolerance, c.detail);
    assert!(c.passed, "{name}: {}", c.detail);
}

#[test]
fn tiny_models_give_the_cpu_logits_on_the_device() {
    check("logits");
}

#[test]
fn kv_rollback_on_the_device_behaves_as_on_the_cpu() {
    check("kv_rollback");
}

#[test]
fn a_fixed_k_speculative_round_gives_the_cpu_tokens() {
    check("speculative_fixed_k");
}

#[test]
fn the_acceptance_head_gives_the_cpu_probabilities_on_the_device() {
    check("acceptance_head");
}

#[test]
fn dsi_workers_on_the_cpu_and_the_device_reproduce_greedy_decoding() {
    check("dsi_cpu_and_device");
}

/// EasySpec's layer parallelism across devices (see device_check::tiny::easyspec_placed).
#[test]
fn easyspec_attentions_placed_on_the_cpu_and_the_device_compute_as_on_one() {
    check("easyspec_placed");
}

/// One model split in layer ranges over the CPU and the device (device_check::tiny::split_layers).
#[test]
fn a_model_split_over_the_cpu_and_the_device_computes_as_on_one() {
    check("split_layers");
}

#[test]
fn a_tree_call_on_the_device_gives_the_cpu_logits_and_keeps_the_path() {
    check("tree_call");
}

#[test]
fn the_fused_kernels_give_the_reference_rows_whatever_the_row_count() {
    check("kernels");
}

#[test]
fn gguf_blocks_on_the_device_give_the_reference_products_whatever_the_row_count() {
    check("gguf_blocks");
}

#[test]
fn a_layer_launches_no_more_kernels_than_its_bound() {
    check("launches");
}

#[test]
fn a_recorded_decode_step_replays_the_plain_forward() {
    check("captured_decode");
}

#[test]
fn real_qwen_0_5b_greedy_tokens_match_the_cpu_path() {
    let dir = specx_decoder::loader::model_cache_dir().join("qwen2.5-coder-0.5b-instruct");
    let path = dir.join("model.gguf");
    assert!(
        path.exists(),
        "real model missing at {}: run scripts/fetch-models.sh (or set SPECX_MODELS)",
        path.display()
    );
    let cpu = load_model(&path, None, &default_device()).unwrap();
    let dev = load_model(&path, None, &gpu()).unwrap();
    let prompt = cpu.tokenizer.encode("def fibonacci(n):").unwrap();
    let cfg = SpecConfig { max_new_tokens: 6, sampling: SamplingConfig::greedy(), seed: 0 };
    let a = generate_autoregressive(&cpu.model, &prompt, &cfg, &[]).unwrap();
    let b = generate_autoregressive(&dev.model, &prompt, &cfg, &[]).unwrap();
    assert_eq!(
        b.tokens,
        a.tokens,
        "greedy tokens: cpu {:?} vs device {:?}",
        cpu.tokenizer.decode(&a.tokens),
        dev.tokenizer.decode(&b.tokens)
    );
    // The prompt's last logits (the real model's logits are ~10-30): 3.7e-5 apart on Mesa's
    // lavapipe; the bar leaves 25x that for other drivers' summation orders.
    let la = cpu.model.forward_last(&prompt, &mut cpu.model.new_cache(1)).unwrap().logits_tail(1);
    let lb = dev.model.forward_last(&prompt, &mut dev.model.new_cache(1)).unwrap().logits_tail(1);
    let d = max_abs_diff(&la[0], &lb[0]);
    eprintln!("real 0.5B: {} greedy tokens equal; prompt logits differ by at most {d:.2e}", a.tokens.len());
    assert!(d <= 1e-3, "prompt logits differ by {d}");
    // Row invariance: a 5-row verification forward against 5 one-row forwards, on each path.
    // Both are row invariant by construction, so bitwise: the CPU's kernels, and on the device
    // the GGUF block products and the fused kernels (one cube per row, fixed reduction order).
    let rows = &a.tokens[..5];
    for (name, lm) in [("cpu", &cpu), ("device", &dev)] {
        let mut cache = lm.model.new_cache(1);
        lm.model.forward(&prompt, &mut cache).unwrap();
        let together = lm.model.forward(rows, &mut cache).unwrap().logits_tail(rows.len());
        cache.truncate(prompt.len());
        let mut gap = 0f32;
        for (i, &t) in rows.iter().enumerate() {
            let one = lm.model.forward(&[t], &mut cache).unwrap().logits_tail(1);
            gap = specx_decoder::compare::nan_max(gap, max_abs_diff(&one[0], &together[i]));
        }
        eprintln!("real 0.5B on the {name}: 5 rows at once vs one at a time differ by at most {gap:.2e}");
        assert!(gap == 0.0, "{name}: a 5-row forward differs from one-row forwards by {gap}");
    }
}

/// The HF-parity fixtures of the newer families on the device: Llama 3 (llama3 RoPE scaling,
/// Q8_0 blocks, its greedy steps also replayed from recorded calls) and Qwen3 (q/k norms, f32)
/// give the CPU's logits at all 192 positions and its greedy tokens.
#[test]
fn llama3_and_qwen3_give_the_cpu_logits_and_greedy_tokens_on_the_device() {
    let fixtures = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/hf-parity");
    for (family, file) in [("llama3", "model-q8_0.gguf"), ("qwen3", "model-f32.gguf")] {
        let path = fixtures.join(family).join(file);
        let mode = specx_decoder::WeightMode::Native;
        let cpu = specx_decoder::load_model_as(&path, None, &default_device(), mode).unwrap();
        let dev = specx_decoder::load_model_as(&path, None, &gpu(), mode).unwrap();
        let text = "def reverse(s):\n    return s[::-1]\n\nprint(reverse('specx')) # a line of code, long enough\n";
        let mut prompt = cpu.tokenizer.encode(&text.repeat(3)).unwrap();
        prompt.truncate(150);
        let all =
            |m: &specx_decoder::Transformer| m.forward(&prompt, &mut m.new_cache(1)).unwrap().logits_tail(prompt.len());
        let (a, b) = (all(&cpu.model), all(&dev.model));
        let d = a.iter().zip(&b).map(|(x, y)| max_abs_diff(x, y)).fold(0f32, specx_decoder::compare::nan_max);
        assert!(d <= TINY_TOLERANCE, "{family}: device logits differ from the CPU's by {d}");
        let cfg = SpecConfig { max_new_tokens: 30, sampling: SamplingConfig::greedy(), seed: 0 };
        let want = generate_autoregressive(&cpu.model, &prompt, &cfg, &[]).unwrap().tokens;
        assert_eq!(generate_autoregressive(&dev.model, &prompt, &cfg, &[]).unwrap().tokens, want, "{family}: greedy");
        let mut recorded = 0;
        if let Some(mut steps) = specx_decoder::generate::RecordedSteps::when_possible(&dev.model) {
            let mut cache = dev.model.new_cache(1);
            let out = dev.model.forward(&prompt, &mut cache).unwrap();
            let mut token = specx_decoder::generate::greedy_token(out);
            let mut got = vec![token];
            while got.len() < want.len() {
                token = steps.next(&dev.model, token, &mut cache).unwrap();
                got.push(token);
            }
            assert_eq!(got, want, "{family}: recorded greedy steps");
            recorded = got.len() - 1;
        }
        eprintln!(
            "{family} on the device: logits within {d:.2e} of the CPU's over 150 positions, 30 greedy tokens equal ({recorded} from recorded steps)"
        );
    }
}
