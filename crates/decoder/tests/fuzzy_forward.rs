//! EasySpec's fuzzy forward on a 6-layer tiny model: the exact strategy is the exact forward
//! bitwise, a layer-parallel strategy changes the logits and marks its layers' cache entries
//! inexact, and calibration (truncate to the precise watermark, one exact forward) gives back,
//! bitwise, the cache of the exact forward over the same tokens; running a group's attentions
//! on several threads changes nothing.

mod common;
use common::*;
use specx_decoder::gguf::GgmlType;
use specx_decoder::layer_groups::LayerGroups;
use specx_decoder::synthetic::StDtype;
use specx_decoder::synthetic::tiny_qwen2;
use specx_decoder::{KvCache, LoadedModel};

fn six_layers() -> (tempfile::TempDir, LoadedModel) {
    let dir = tempfile::tempdir().unwrap();
    let cfg = specx_decoder::config::ModelConfig { num_hidden_layers: 6, ..tiny_qwen2(VOCAB) };
    let (path, _) = write_both(&dir.path().join("m"), &cfg, 5, StDtype::F32, GgmlType::F32);
    let m = load(&path);
    (dir, m)
}

fn same_cache(a: &KvCache, b: &KvCache, layers: usize) -> bool {
    a.len() == b.len() && (0..layers).all(|l| a.layer_data(l) == b.layer_data(l))
}

#[test]
fn exact_strategy_is_the_exact_forward_bitwise() {
    let (_d, m) = six_layers();
    let prompt = tokens(7, 1);
    let (mut a, mut b) = (m.model.new_cache(1), m.model.new_cache(1));
    let exact = m.model.forward(&prompt, &mut a).unwrap();
    let seq = m.model.forward_fuzzy(&prompt, &mut b, &LayerGroups::sequential(6), 1).unwrap();
    assert_eq!(rows(&exact), rows(&seq));
    assert!(same_cache(&a, &b, 6));
    assert_eq!((b.precise_len(), b.layer_precise_lens()), (7, &[7usize; 6][..]));
    // LP size 1 named as a preset is the same strategy.
    assert!(LayerGroups::parse("lp1", 6).unwrap().is_sequential());
}

#[test]
fn fuzzy_forward_marks_inexact_layers_and_calibration_restores_the_cache() {
    let (_d, m) = six_layers();
    let groups = LayerGroups::parse("0,1-3,4-5", 6).unwrap();
    let prompt = tokens(6, 2);
    let more = tokens(4, 3);
    let mut fuzzy = m.model.new_cache(1);
    m.model.forward(&prompt, &mut fuzzy).unwrap();
    // Fuzzy single-token steps, as a drafter takes them.
    let mut fuzzy_rows = Vec::new();
    for &t in &more {
        fuzzy_rows.extend(rows(&m.model.forward_fuzzy(&[t], &mut fuzzy, &groups, 1).unwrap()));
    }
    // Layers 0 and 1 (the group's leading layer) saw exact inputs; 2..5 did not.
    assert_eq!(fuzzy.layer_precise_lens(), &[10, 10, 6, 6, 6, 6]);
    assert_eq!(fuzzy.precise_len(), 6);
    let mut exact = m.model.new_cache(1);
    m.model.forward(&prompt, &mut exact).unwrap();
    let mut exact_rows = Vec::new();
    for &t in &more {
        exact_rows.extend(rows(&m.model.forward(&[t], &mut exact).unwrap()));
    }
    // A layer-parallel strategy changes the numerics, by a little: the stale inputs are a
    // residual stream apart.
    let gap =
        fuzzy_rows.iter().zip(&exact_rows).map(|(a, b)| max_abs_diff(a, b)).fold(0f32, specx_decoder::compare::nan_max);
    let scale =
        exact_rows.iter().map(|r| specx_decoder::compare::max_abs(r)).fold(0f32, specx_decoder::compare::nan_max);
    eprintln!("fuzzy vs exact logits: max difference {gap:.3e} (largest logit {scale:.3})");
    assert!(gap > 0.0 && gap < 0.5 * scale, "fuzzy logits {gap} from the exact ones (largest logit {scale})");
    assert_eq!(fuzzy.layer_data(0), exact.layer_data(0));
    assert_eq!(fuzzy.layer_data(1), exact.layer_data(1));
    assert_ne!(fuzzy.layer_data(2), exact.layer_data(2));

    // Calibration: back to the watermark, then one exact forward over every token since.
    let w = fuzzy.precise_len();
    fuzzy.truncate(w);
    let calibrated = m.model.forward(&more, &mut fuzzy).unwrap();
    let mut fresh = m.model.new_cache(1);
    m.model.forward(&prompt, &mut fresh).unwrap();
    let fresh_out = m.model.forward(&more, &mut fresh).unwrap();
    assert!(same_cache(&fuzzy, &fresh, 6), "calibrated cache differs from the exact forward's");
    assert_eq!(rows(&calibrated), rows(&fresh_out));
    assert_eq!(fuzzy.layer_precise_lens(), &[10; 6]);

    // Truncation lowers the watermarks; a mismatched strategy is an error, not a panic.
    fuzzy.truncate(8);
    assert_eq!(fuzzy.precise_len(), 8);
    let err = match m.model.forward_fuzzy(&[1], &mut fuzzy, &LayerGroups::preset(2, 8).unwrap(), 1) {
        Ok(_) => panic!("a strategy for 8 layers ran on a 6-layer model"),
        Err(e) => format!("{e:#}"),
    };
    assert!(err.contains("8 layers") && err.contains("has 6"), "{err}");
}

#[test]
fn an_exact_forward_after_fuzzy_entries_stays_marked_inexact() {
    let (_d, m) = six_layers();
    let groups = LayerGroups::preset(2, 6).unwrap();
    let mut c = m.model.new_cache(1);
    m.model.forward(&tokens(5, 4), &mut c).unwrap();
    m.model.forward_fuzzy(&[3], &mut c, &groups, 1).unwrap();
    let before = c.layer_precise_lens().to_vec();
    // Exact layers reading an inexact cache are not exact: the watermarks do not move.
    m.model.forward(&[4], &mut c).unwrap();
    assert_eq!(c.layer_precise_lens()[0], 7, "layer 0 never sees a stale input");
    assert_eq!(&c.layer_precise_lens()[2..], &before[2..]);
}

#[test]
fn worker_threads_never_change_the_numerics() {
    let (_d, m) = six_layers();
    let groups = LayerGroups::parse("0,1-4,5", 6).unwrap();
    let run = |workers: usize| {
        let mut c = m.model.new_cache(1);
        // A multi-token fuzzy prefill, then single-token steps, as a drafter takes them.
        let mut out = rows(&m.model.forward_fuzzy(&tokens(5, 6), &mut c, &groups, workers).unwrap());
        for t in [3u32, 9, 1] {
            out.extend(rows(&m.model.forward_fuzzy(&[t], &mut c, &groups, workers).unwrap()));
        }
        let cache: Vec<_> = (0..6).map(|l| c.layer_data(l)).collect();
        (out, cache, c.layer_precise_lens().to_vec())
    };
    let one = run(1);
    for workers in [2, 3, 4, 8] {
        assert!(run(workers) == one, "{workers} workers changed the logits, the cache or its watermarks");
    }
}

#[test]
fn probes_record_the_fuzzy_and_the_precise_attention() {
    let (_d, m) = six_layers();
    let prompt = tokens(6, 7);
    let mut exact_cache = m.model.new_cache(1);
    m.model.forward(&prompt, &mut exact_cache).unwrap();
    let mut fuzzy_cache = exact_cache.clone();
    // The exact strategy: every layer leads its group, both records equal.
    let (out, seq) = m.model.probe_fuzzy(&[5], &mut exact_cache.clone(), &LayerGroups::sequential(6)).unwrap();
    assert_eq!(rows(&out), rows(&m.model.forward(&[5], &mut exact_cache.clone()).unwrap()));
    assert!(seq.iter().all(|p| p.leading && p.fuzzy == p.precise && !p.fuzzy.q.is_empty()));
    // "0,1-2,3-5": layers 1 and 3 lead; layer 2's precise record reads the running state after
    // the exact layers 0-1, so it is the exact forward's layer 2 bitwise; layers 2, 4, 5 differ.
    let groups = LayerGroups::parse("0,1-2,3-5", 6).unwrap();
    let (out, probes) = m.model.probe_fuzzy(&[5], &mut fuzzy_cache, &groups).unwrap();
    assert_eq!(rows(&out), rows(&m.model.forward_fuzzy(&[5], &mut exact_cache.clone(), &groups, 1).unwrap()));
    assert_eq!(probes.iter().map(|p| p.leading).collect::<Vec<_>>(), [true, true, false, true, false, false]);
    assert_eq!(probes[2].precise, seq[2].fuzzy);
    assert_eq!(probes[1].fuzzy, seq[1].fuzzy);
    // Every attention of a group reads the group's input, the leading layer's (Algorithm 2):
    // bitwise, and not the running state it would read in the precise model.
    for (l, lead) in [(2, 1), (4, 3), (5, 3)] {
        assert_eq!(probes[l].fuzzy.input, probes[lead].fuzzy.input, "layer {l} reads another input than its group's");
        assert_ne!(probes[l].fuzzy.input, probes[l].precise.input, "layer {l}");
        assert_ne!(probes[l].fuzzy.out, probes[l].precise.out, "layer {l}");
    }
    // The probed forward leaves the fuzzy forward's cache (the precise pass wrote a copy).
    let mut plain = exact_cache.clone();
    m.model.forward_fuzzy(&[5], &mut plain, &groups, 1).unwrap();
    assert!(same_cache(&fuzzy_cache, &plain, 6));
}
