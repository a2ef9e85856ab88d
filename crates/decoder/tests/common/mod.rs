//! Shared helpers for the decoder's integration tests: tiny synthetic models on disk.
#![allow(dead_code)]

pub mod lossless;

use specx_decoder::gguf::GgmlType;
use specx_decoder::synthetic::{StDtype, random_weights, word_tokenizer_json, write_gguf, write_hf_dir};
use specx_decoder::{LoadedModel, ModelConfig, default_device, load_model};
use std::path::{Path, PathBuf};

pub const VOCAB: usize = specx_decoder::device_check::TINY_VOCAB;

/// Writes `cfg` with seeded weights as an HF directory (`hf/`) and a GGUF file
/// (`gguf/model.gguf` + tokenizer.json) under `root`; returns (hf dir, gguf file).
pub fn write_both(root: &Path, cfg: &ModelConfig, seed: u64, st: StDtype, gg: GgmlType) -> (PathBuf, PathBuf) {
    let w = random_weights(cfg, seed);
    let tok = word_tokenizer_json(cfg.vocab_size, "w");
    let hf = root.join("hf");
    write_hf_dir(&hf, cfg, &w, st, 2, &tok).unwrap();
    let gdir = root.join("gguf");
    std::fs::create_dir_all(&gdir).unwrap();
    let tokens: Vec<String> = (0..cfg.vocab_size).map(|i| format!("w{i}")).collect();
    let gguf = gdir.join("model.gguf");
    write_gguf(&gguf, cfg, &w, gg, &tokens).unwrap();
    std::fs::write(gdir.join("tokenizer.json"), &tok).unwrap();
    (hf, gguf)
}

pub fn load(path: &Path) -> LoadedModel {
    load_model(path, None, &default_device()).unwrap_or_else(|e| panic!("loading {}: {e:#}", path.display()))
}

/// Logits `[n, vocab]` of a forward as host rows.
pub fn rows(out: &specx_decoder::ForwardOutput) -> Vec<Vec<f32>> {
    out.logits_tail(out.logits.dims()[1])
}

#[allow(unused_imports)] // not every test binary uses both
pub use specx_decoder::device_check::{max_abs_diff, tokens};

pub fn assert_rows_close(a: &[Vec<f32>], b: &[Vec<f32>], tol: f32, what: &str) {
    assert_eq!(a.len(), b.len(), "{what}: different number of positions");
    for (i, (x, y)) in a.iter().zip(b).enumerate() {
        let d = max_abs_diff(x, y);
        assert!(d <= tol, "{what}: position {i} differs by {d} (tolerance {tol})");
    }
}

/// A target and a draft of the tiny architecture with independent random weights.
pub fn pair(vocab: usize, target_seed: u64, draft_seed: u64) -> (tempfile::TempDir, LoadedModel, LoadedModel) {
    let dir = tempfile::tempdir().unwrap();
    let cfg = specx_decoder::synthetic::tiny_qwen2(vocab);
    let (t, _) = write_both(&dir.path().join("t"), &cfg, target_seed, StDtype::F32, GgmlType::F32);
    let (d, _) = write_both(&dir.path().join("d"), &cfg, draft_seed, StDtype::F32, GgmlType::F32);
    let (t, d) = (load(&t), load(&d));
    (dir, t, d)
}

/// A draft close to the target (its weights plus noise): rounds accept some, not all.
pub fn noisy_draft(dir: &std::path::Path, vocab: usize, target_seed: u64, noise: f32) -> LoadedModel {
    specx_decoder::device_check::noisy_draft(dir, vocab, target_seed, noise).unwrap()
}

/// A generation of `n` new tokens under `s` with `seed`.
pub fn cfg(s: specx_decoder::SamplingConfig, seed: u64, n: usize) -> specx_decoder::speculative::SpecConfig {
    specx_decoder::speculative::SpecConfig { max_new_tokens: n, sampling: s, seed }
}

/// Greedy decoding.
pub fn greedy() -> specx_decoder::SamplingConfig {
    specx_decoder::SamplingConfig { temperature: 0.0, top_k: None, top_p: None }
}

/// Plain sampling at temperature 1.
pub fn t1() -> specx_decoder::SamplingConfig {
    specx_decoder::SamplingConfig { temperature: 1.0, top_k: None, top_p: None }
}

/// `drafter` and `policy` under the sequential scheduler, verified by rejection sampling.
pub fn run_sequential(
    target: &specx_decoder::Transformer,
    drafter: &mut dyn specx_decoder::speculative::Drafter,
    policy: &mut dyn specx_decoder::speculative::StopPolicy,
    prompt: &[u32],
    c: &specx_decoder::speculative::SpecConfig,
    eos: &[u32],
) -> specx_decoder::speculative::Generation {
    use specx_decoder::speculative::{RejectionSampler, generate_speculative};
    generate_speculative(target, drafter, policy, &mut RejectionSampler, prompt, c, eos).unwrap()
}

/// The same under DSI on two instances of `target` (lookahead 3), no end-of-sequence ids.
pub fn run_dsi(
    target: &specx_decoder::Transformer,
    drafter: &mut dyn specx_decoder::speculative::Drafter,
    policy: &mut dyn specx_decoder::speculative::StopPolicy,
    prompt: &[u32],
    c: &specx_decoder::speculative::SpecConfig,
) -> specx_decoder::speculative::Generation {
    use specx_decoder::speculative::{DsiConfig, RejectionSampler, generate_dsi};
    let dsi = DsiConfig::new(2, 3);
    generate_dsi(&[target, target], drafter, policy, &mut RejectionSampler, prompt, c, &dsi, &[]).unwrap().generation
}

/// A target (seed 1) with three drafts of rising agreement: a random one (seed 2), a close
/// one (the target's weights with noise 0.3) and one identical to it (everything accepted).
pub struct ThreeDrafts {
    _dirs: (tempfile::TempDir, tempfile::TempDir),
    pub target: LoadedModel,
    pub random: LoadedModel,
    pub close: LoadedModel,
    pub same: LoadedModel,
}

impl ThreeDrafts {
    pub fn new() -> Self {
        let (dir, target, random) = pair(VOCAB, 1, 2);
        let (dir2, _, same) = pair(VOCAB, 1, 1);
        let close = noisy_draft(dir.path(), VOCAB, 1, 0.3);
        Self { _dirs: (dir, dir2), target, random, close, same }
    }

    /// The drafts by name, in the order the greedy tests report them.
    pub fn named(&self) -> [(&'static str, &specx_decoder::Transformer); 3] {
        [
            ("random draft", &self.random.model),
            ("identical draft", &self.same.model),
            ("close draft", &self.close.model),
        ]
    }
}

/// Checks that greedy `run(prompt, cfg, eos)` (a scheduler with the target `t` as its own
/// draft, so rounds accept everything) ends where `t`'s own greedy decoding does: at every
/// budget (1, 2, 5, 11: inside long rounds) and right after an end-of-sequence token (the
/// 4th greedy token made one).
pub fn assert_budget_and_eos_respected(
    t: &specx_decoder::Transformer,
    mut run: impl FnMut(&[u32], &specx_decoder::speculative::SpecConfig, &[u32]) -> Vec<u32>,
) {
    use specx_decoder::speculative::generate_autoregressive;
    let prompt = tokens(4, 3);
    for max_new in [1, 2, 5, 11] {
        let c = cfg(greedy(), 0, max_new);
        let want = generate_autoregressive(t, &prompt, &c, &[]).unwrap().tokens;
        let got = run(&prompt, &c, &[]);
        assert_eq!(got, want, "max_new {max_new}");
        assert_eq!(got.len(), max_new);
    }
    let c = cfg(greedy(), 0, 12);
    let free = generate_autoregressive(t, &prompt, &c, &[]).unwrap().tokens;
    let eos = [free[3]];
    let want = generate_autoregressive(t, &prompt, &c, &eos).unwrap().tokens;
    let got = run(&prompt, &c, &eos);
    assert_eq!(got, want);
    assert!(eos.contains(got.last().unwrap()));
}
