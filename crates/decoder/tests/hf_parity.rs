//! specx against HF transformers' own modelling code, family by family: tiny random models that
//! `scripts/reference/hf_parity_fixtures.py` built with transformers (the versions are in
//! `tests/fixtures/hf-parity/manifest.json`), saved as an HF directory and as GGUF files laid
//! out by llama.cpp's `gguf` package, with HF's logits at every one of 192 positions and HF's
//! greedy continuation of a 150-token prefix. specx must give HF's logits within a tolerance
//! and HF's greedy tokens exactly, from the HF directory and the GGUF, on every CPU weight
//! path; each family's characteristic part, broken, must fail the same comparison.
//!
//! Tolerances. HF and specx both compute in f32 but sum in different orders (HF's eager
//! attention and torch's GEMM against specx's row-invariant kernels); over two layers of width
//! 32 with logits of magnitude ~5 that moves a logit by at most 4.4e-6 (a Zen 3, AVX2).
//! `F32_TOL` is 2e-4, 45 times that. The Q8_0 file is compared with HF on its own decoded
//! weights, so its exact (`native`) path takes `F32_TOL` too; `q8` also rounds each activation
//! row to 8 bits (a step of 1/127 of the row's largest value), which moved a logit by 0.11 at
//! most: `Q8_TOL` is 0.3. Each broken variant misses its bound by more than 10x (3.3 and 3.5).

mod common;
use specx_decoder::config::RopeScaling;
use specx_decoder::weights::{GgufSource, SafetensorsDir};
use specx_decoder::{LoadedModel, ModelConfig, Transformer, WeightMode, default_device, load_model_as};
use std::path::{Path, PathBuf};

const F32_TOL: f32 = 2e-4;
const Q8_TOL: f32 = 0.3;

fn fixtures() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/hf-parity")
}

/// HF's side of one family: the token sequence, its logits, the greedy continuation.
struct Reference {
    tokens: Vec<u32>,
    logits: Vec<Vec<f32>>,
    prompt: usize,
    greedy: Vec<u32>,
}

/// HF's outputs on the family's weights (`quant` `None`), or on a quantized file's decoded
/// weights (`Some("q8_0")`).
fn reference(family: &str, quant: Option<&str>) -> Reference {
    let dir = fixtures().join(family);
    let suffix = quant.map_or(String::new(), |q| format!("-{q}"));
    let meta: serde_json::Value = serde_json::from_slice(&std::fs::read(dir.join("reference.json")).unwrap()).unwrap();
    let ids =
        |key: &str| -> Vec<u32> { meta[key].as_array().unwrap().iter().map(|v| v.as_u64().unwrap() as u32).collect() };
    let vocab = meta["vocab"].as_u64().unwrap() as usize;
    let bytes = std::fs::read(dir.join(format!("logits{suffix}.bin"))).unwrap();
    let flat: Vec<f32> = bytes.chunks_exact(4).map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]])).collect();
    let tokens = ids("tokens");
    assert_eq!(flat.len(), tokens.len() * vocab, "{family}: logits.bin does not match reference.json");
    Reference {
        tokens,
        logits: flat.chunks(vocab).map(<[f32]>::to_vec).collect(),
        prompt: meta["prompt"].as_u64().unwrap() as usize,
        greedy: ids(&format!("greedy{suffix}")),
    }
}

/// The versions of torch and transformers that made the fixtures, for failure messages.
fn made_by() -> String {
    let m: serde_json::Value =
        serde_json::from_slice(&std::fs::read(fixtures().join("manifest.json")).unwrap()).unwrap();
    format!("fixtures made by transformers {} on torch {}", m["transformers"], m["torch"])
}

fn load(path: &Path, mode: WeightMode) -> LoadedModel {
    load_model_as(path, None, &default_device(), mode).unwrap_or_else(|e| panic!("loading {}: {e:#}", path.display()))
}

/// Logits of every position of `tokens` in one forward.
fn all_logits(model: &Transformer, tokens: &[u32]) -> Vec<Vec<f32>> {
    let mut cache = model.new_cache(1);
    let out = model.forward(tokens, &mut cache).unwrap();
    out.logits_tail(tokens.len())
}

/// `n` greedy tokens after `prompt`, one forward a token (the decode path, cache and all).
fn greedy(model: &Transformer, prompt: &[u32], n: usize) -> Vec<u32> {
    let mut cache = model.new_cache(1);
    let mut last = model.forward(prompt, &mut cache).unwrap().logits_tail(1).remove(0);
    let mut out = Vec::new();
    for _ in 0..n {
        let t = specx_decoder::sampling::argmax(&last);
        out.push(t);
        last = model.forward(&[t], &mut cache).unwrap().logits_tail(1).remove(0);
    }
    out
}

fn worst(a: &[Vec<f32>], b: &[Vec<f32>]) -> (f32, usize) {
    a.iter()
        .zip(b)
        .enumerate()
        .map(|(i, (x, y))| (common::max_abs_diff(x, y), i))
        .fold((0.0, 0), |m, d| if d.0 > m.0 { d } else { m })
}

/// Checks `model` against `r`: logits within `tol` at every position, and (`exact_greedy`)
/// HF's greedy tokens. Returns the worst difference for the report.
fn check(model: &Transformer, r: &Reference, tol: f32, exact_greedy: bool, what: &str) -> f32 {
    let (d, at) = worst(&all_logits(model, &r.tokens), &r.logits);
    assert!(d <= tol, "{what}: logits differ from HF's by {d} at position {at} (tolerance {tol}; {})", made_by());
    let ours = greedy(model, &r.tokens[..r.prompt], r.greedy.len());
    let agree = ours.iter().zip(&r.greedy).take_while(|(a, b)| a == b).count();
    if exact_greedy {
        assert_eq!(ours, r.greedy, "{what}: greedy continuation differs from HF's after {agree} tokens");
    }
    eprintln!("{what}: max |logit - HF| {d:.2e} (position {at}), greedy agrees for {agree}/{}", r.greedy.len());
    d
}

/// Every way specx loads a family's fixture: the HF directory (f32), the f32 GGUF on the f32
/// and native paths, and where the family has one, the Q8_0 GGUF on native (against HF on the
/// file's decoded weights: the same arithmetic) and q8 (8-bit activations too). A
/// sliding-window model is compared within its window, and refuses to run past it.
fn check_family(family: &str) -> Reference {
    let dir = fixtures().join(family);
    let window = ModelConfig::from_hf_json(&dir.join("config.json")).unwrap().sliding_window;
    let within = |mut r: Reference| {
        if let Some(w) = window {
            r.tokens.truncate(w);
            r.logits.truncate(w);
        }
        r
    };
    let full = reference(family, None);
    if window.is_some() {
        let m = load(&dir, WeightMode::F32);
        let err =
            format!("{:#}", m.model.forward(&full.tokens, &mut m.model.new_cache(1)).err().expect("past the window"));
        assert!(err.contains("sliding window of 128"), "{err}");
    }
    let r = within(full);
    check(&load(&dir, WeightMode::F32).model, &r, F32_TOL, true, &format!("{family} HF safetensors"));
    for mode in [WeightMode::F32, WeightMode::Native] {
        let m = load(&dir.join("model-f32.gguf"), mode);
        check(&m.model, &r, F32_TOL, true, &format!("{family} GGUF f32, {mode}"));
    }
    let q8 = dir.join("model-q8_0.gguf");
    if q8.exists() {
        let decoded = within(reference(family, Some("q8_0")));
        check(&load(&q8, WeightMode::Native).model, &decoded, F32_TOL, true, &format!("{family} GGUF Q8_0, native"));
        check(&load(&q8, WeightMode::Q8).model, &decoded, Q8_TOL, false, &format!("{family} GGUF Q8_0, q8"));
    }
    r
}

/// The family's HF directory loaded with a configuration `broken` changed.
fn broken_hf(family: &str, broken: impl FnOnce(&mut ModelConfig)) -> Transformer {
    let dir = fixtures().join(family);
    let mut cfg = ModelConfig::from_hf_json(&dir.join("config.json")).unwrap();
    broken(&mut cfg);
    Transformer::load(cfg, &SafetensorsDir::open(&dir).unwrap(), &default_device(), WeightMode::F32).unwrap()
}

/// The worst logit difference of `model` from HF's, which a broken model must push far past
/// the tolerance.
fn broken_diff(model: &Transformer, r: &Reference) -> f32 {
    worst(&all_logits(model, &r.tokens), &r.logits).0
}

#[test]
fn llama3_with_rope_scaling_matches_hf() {
    let r = check_family("llama3");
    let dir = fixtures().join("llama3");
    // Both sources read the scaling: the HF config's llama3 parameters, the GGUF's rope_freqs.
    let hf_cfg = ModelConfig::from_hf_json(&dir.join("config.json")).unwrap();
    assert!(matches!(hf_cfg.rope_scaling, RopeScaling::Llama3 { .. }), "{:?}", hf_cfg.rope_scaling);
    let gguf_cfg = GgufSource::open(&dir.join("model-f32.gguf")).unwrap().config().unwrap();
    assert!(matches!(gguf_cfg.rope_scaling, RopeScaling::FreqFactors(_)), "{:?}", gguf_cfg.rope_scaling);
    // Plain RoPE (what specx computed before it read the scaling) is caught.
    let d = broken_diff(&broken_hf("llama3", |c| c.rope_scaling = RopeScaling::None), &r);
    assert!(d > 100.0 * F32_TOL, "dropping the RoPE scaling moved the logits by only {d}");
    eprintln!("llama3 without its RoPE scaling: max |logit - HF| {d:.2e}");
}

#[test]
fn qwen3_with_qk_norm_matches_hf() {
    let r = check_family("qwen3");
    let d = broken_diff(&broken_hf("qwen3", |c| c.qk_norm = false), &r);
    assert!(d > 100.0 * F32_TOL, "skipping the q/k norm moved the logits by only {d}");
    eprintln!("qwen3 without its q/k norm: max |logit - HF| {d:.2e}");
}

#[test]
fn mistral_matches_hf_within_its_sliding_window() {
    let r = check_family("mistral");
    assert_eq!(r.tokens.len(), 128);
    let gguf = GgufSource::open(&fixtures().join("mistral/model-f32.gguf")).unwrap().config().unwrap();
    assert_eq!(gguf.sliding_window, Some(128));
}

#[test]
fn qwen2_with_biases_matches_hf() {
    let r = check_family("qwen2");
    let d = broken_diff(&broken_hf("qwen2", |c| c.rope_theta = 10_000.0), &r);
    assert!(d > 100.0 * F32_TOL, "a wrong RoPE base moved the logits by only {d}");
}

#[test]
fn fixtures_are_the_ones_the_manifest_lists() {
    let m: serde_json::Value =
        serde_json::from_slice(&std::fs::read(fixtures().join("manifest.json")).unwrap()).unwrap();
    for (family, files) in m["families"].as_object().unwrap() {
        for (file, sha) in files.as_object().unwrap() {
            let got = specx_decoder::fsutil::sha256_file(&fixtures().join(family).join(file)).unwrap();
            assert_eq!(got, sha.as_str().unwrap(), "{family}/{file} changed since the generator wrote it");
        }
    }
}

#[test]
fn chat_templates_render_as_transformers_renders_them() {
    for family in ["llama3", "qwen3"] {
        let dir = fixtures().join(family);
        let meta: serde_json::Value =
            serde_json::from_slice(&std::fs::read(dir.join("reference.json")).unwrap()).unwrap();
        let (user, want) = (meta["chat"]["user"].as_str().unwrap(), meta["chat"]["rendered"].as_str().unwrap());
        let from_dir = specx_decoder::tokenizer::ModelTemplate::from_hf_dir(&dir).unwrap().expect("a template");
        assert_eq!(from_dir.render(user).unwrap(), want, "{family}: tokenizer_config.json's template ({})", made_by());
        let gguf = load(&dir.join("model-f32.gguf"), WeightMode::F32);
        let rendered = gguf.chat_template.as_ref().expect("the GGUF's template").render(user).unwrap();
        assert_eq!(rendered, want, "{family}: the GGUF's template");
        let chosen = specx_decoder::ChatTemplate::Model.render(user, gguf.chat_template.as_ref()).unwrap();
        assert_eq!(chosen, want);
    }
    let none = load(&fixtures().join("mistral"), WeightMode::F32);
    let e = specx_decoder::ChatTemplate::Model.render("hi", none.chat_template.as_ref()).unwrap_err().to_string();
    assert!(e.contains("declares no chat template"), "{e}");
}
