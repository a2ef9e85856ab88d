//! Speculative decoding with pairs of the newer families: the HF-parity fixtures of Llama 3
//! (llama3 RoPE scaling) and Qwen3 (q/k norms) as targets, each with a draft made from it
//! (its weights plus noise, written as a Q8_0 GGUF: rope_freqs.weight and the q/k norms
//! through specx's GGUF writer and reader). Greedy output equals the target's own for the
//! plain drafter, EAGLE-2's draft trees, EasySpec's fuzzy drafter and prompt lookup, under the
//! sequential scheduler and DSI, on the target's f32 path and on its q8 GGUF; sampled output
//! at T = 1 is distributed as the target's (a chi-square over whole sequences).

mod common;
use common::lossless::sequence_chi_square_p;
use common::{cfg, greedy, load, run_dsi, run_sequential, t1};
use specx_decoder::gguf::GgmlType;
use specx_decoder::layer_groups::LayerGroups;
use specx_decoder::speculative::*;
use specx_decoder::synthetic::write_noisy_draft_of;
use specx_decoder::{LoadedModel, WeightMode, default_device, load_model_as};
use std::path::PathBuf;

fn fixture(family: &str) -> PathBuf {
    std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/hf-parity").join(family)
}

/// The family's fixture as the target (`mode` on its GGUF, or the HF directory for `None`)
/// and a draft near it.
fn family_pair(family: &str, dir: &std::path::Path, mode: Option<WeightMode>) -> (LoadedModel, LoadedModel) {
    let draft = write_noisy_draft_of(&fixture(family), dir, 0.05, 1, GgmlType::Q8_0).unwrap();
    let target = match mode {
        None => load(&fixture(family)),
        Some(mode) => {
            let file = if mode == WeightMode::F32 { "model-f32.gguf" } else { "model-q8_0.gguf" };
            let path = fixture(family).join(file);
            let path = if path.exists() { path } else { fixture(family).join("model-f32.gguf") };
            load_model_as(&path, None, &default_device(), mode).unwrap()
        }
    };
    let mut d = load_model_as(&draft, None, &default_device(), mode.unwrap_or(WeightMode::F32)).unwrap();
    specx_decoder::pair_up(&mut d, &target).unwrap();
    (target, d)
}

/// A prompt of real text for the character tokenizer.
fn prompt(m: &LoadedModel) -> Vec<u32> {
    m.tokenizer.encode("def reverse(s):\n    return s[::-1]\n\nprint(reverse(").unwrap()
}

#[test]
fn llama3_and_qwen3_pairs_decode_the_targets_own_greedy_output_with_every_drafter() {
    for family in ["llama3", "qwen3"] {
        for mode in [None, Some(WeightMode::Q8)] {
            let dir = tempfile::tempdir().unwrap();
            let (t, d) = family_pair(family, dir.path(), mode);
            let (p, c) = (prompt(&t), cfg(greedy(), 0, 60));
            let want = generate_autoregressive(&t.model, &p, &c, &t.eos_ids).unwrap().tokens;
            let layers = d.model.config().num_hidden_layers;
            let what = |drafter: &str| format!("{family} ({mode:?}), {drafter}");
            let mut accepted = 0;
            let mut check = |drafter: &mut dyn Drafter, name: &str| {
                let g = run_sequential(&t.model, drafter, &mut FixedK(4), &p, &c, &t.eos_ids);
                assert_eq!(g.tokens, want, "{}", what(name));
                accepted += g.metrics.n_accepted;
            };
            check(&mut PlainDrafter::new(&d.model), "plain");
            let tree = DynamicTreeParams { top_k: 3, max_nodes: 10 };
            check(&mut DynamicTreeDrafter::new(&d.model, tree).unwrap(), "draft trees");
            let groups = LayerGroups::parse(&format!("0-{}", layers - 1), layers).unwrap();
            check(&mut FuzzyDrafter::new(&d.model, groups, Calibration::EveryRound).unwrap(), "EasySpec fuzzy");
            check(&mut PromptLookupDrafter::new(1, 3).unwrap(), "prompt lookup");
            assert!(accepted > 0, "{family}: no drafter had a candidate accepted");
            let dsi = run_dsi(&t.model, &mut PlainDrafter::new(&d.model), &mut FixedK(3), &p, &c);
            assert_eq!(
                &dsi.tokens[..],
                &generate_autoregressive(&t.model, &p, &c, &[]).unwrap().tokens[..],
                "{}",
                what("DSI")
            );
        }
    }
}

#[test]
fn llama3_and_qwen3_pairs_sample_as_their_targets() {
    const N: usize = 1500;
    const ALPHA: f64 = 1e-4;
    for family in ["llama3", "qwen3"] {
        let dir = tempfile::tempdir().unwrap();
        let (t, d) = family_pair(family, dir.path(), None);
        let p = prompt(&t);
        let samples: Vec<Vec<u32>> = (0..N as u64)
            .map(|seed| {
                run_sequential(&t.model, &mut PlainDrafter::new(&d.model), &mut FixedK(3), &p, &cfg(t1(), seed, 4), &[])
                    .tokens
            })
            .collect();
        let pv = sequence_chi_square_p(&t.model, &p, &t1(), &samples);
        assert!(pv > ALPHA, "{family}: speculative samples rejected as the target's (p = {pv:.2e})");
        eprintln!("{family}: chi-square p = {pv:.3} over {N} sampled 4-token continuations");
    }
}
