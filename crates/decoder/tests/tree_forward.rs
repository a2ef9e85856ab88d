//! The tree call on tiny synthetic models: every root-to-row path's logits in one tree call
//! are bitwise those of a chain call of that path, on every CPU weight path (f32, native GGUF
//! blocks, q8 integer kernels), a wrong parent is caught, and the cache kept to an accepted
//! path continues as if that path had been forwarded alone.

mod common;
use common::*;
use specx_decoder::gguf::GgmlType;
use specx_decoder::synthetic::{StDtype, tiny_llama, tiny_qwen2};
use specx_decoder::tree_mask::TreeMask;
use specx_decoder::{Transformer, WeightMode, default_device, load_model_as};
use std::path::Path;

fn load_as(path: &Path, mode: WeightMode) -> Transformer {
    load_model_as(path, None, &default_device(), mode)
        .unwrap_or_else(|e| panic!("loading {}: {e:#}", path.display()))
        .model
}

fn bits(row: &[f32]) -> Vec<u32> {
    row.iter().map(|v| v.to_bits()).collect()
}

/// A tree of 14 rows: a root with three children, branches of depth up to 5, a second root.
const PARENTS: [Option<usize>; 14] = [
    None,
    Some(0),
    Some(0),
    Some(0),
    Some(1),
    Some(1),
    Some(2),
    Some(4),
    Some(7),
    Some(8),
    Some(6),
    None,
    Some(11),
    Some(3),
];

/// The model's logits of each row of one tree call after `prefix`.
fn tree_rows(m: &Transformer, prefix: &[u32], tokens: &[u32], tree: &TreeMask) -> Vec<Vec<f32>> {
    let mut c = m.new_cache(1);
    m.forward(prefix, &mut c).unwrap();
    let out = m.forward_tree(tokens, tree, &mut c).unwrap();
    assert_eq!(c.len(), prefix.len() + tokens.len(), "a tree call appends every row");
    out.logits_tail(tokens.len())
}

/// The rows of `tree` whose logits differ from a chain call of their root-to-row path in
/// `truth` (the tree the tokens were drawn for).
fn rows_unlike_their_chains(
    m: &Transformer,
    prefix: &[u32],
    tokens: &[u32],
    got: &[Vec<f32>],
    truth: &TreeMask,
) -> Vec<usize> {
    let mut wrong = Vec::new();
    for leaf in truth.leaves() {
        let path = truth.path(leaf);
        let chain_tokens: Vec<u32> = path.iter().map(|&r| tokens[r]).collect();
        let mut c = m.new_cache(1);
        m.forward(prefix, &mut c).unwrap();
        let chain = rows(&m.forward(&chain_tokens, &mut c).unwrap());
        for (depth, &row) in path.iter().enumerate() {
            if bits(&got[row]) != bits(&chain[depth]) && !wrong.contains(&row) {
                wrong.push(row);
            }
        }
    }
    wrong
}

#[test]
fn every_path_of_a_tree_call_has_the_bits_of_its_chain_on_every_weight_path() {
    let dir = tempfile::tempdir().unwrap();
    let tree = TreeMask::new(&PARENTS).unwrap();
    let (prefix, tokens) = (tokens(9, 21), tokens(PARENTS.len(), 22));
    let mut paths = 0;
    for (i, ty) in [GgmlType::Q8_0, GgmlType::Q4_0, GgmlType::Q5_0, GgmlType::F16].into_iter().enumerate() {
        for (j, cfg) in [tiny_qwen2(VOCAB), tiny_llama(VOCAB)].iter().enumerate() {
            let (_, gguf) = write_both(&dir.path().join(format!("{i}-{j}")), cfg, 31 + i as u64, StDtype::F32, ty);
            for mode in [WeightMode::F32, WeightMode::Native, WeightMode::Q8] {
                let m = load_as(&gguf, mode);
                let what = format!("{ty:?} {} {mode:?}", cfg.architecture);
                let got = tree_rows(&m, &prefix, &tokens, &tree);
                let wrong = rows_unlike_their_chains(&m, &prefix, &tokens, &got, &tree);
                assert!(wrong.is_empty(), "{what}: rows {wrong:?} differ from a chain call of their path");
                paths += 1;
            }
        }
    }
    assert_eq!(paths, 24, "every type x architecture x weight path was checked");
}

#[test]
fn a_wrong_parent_in_the_mask_is_caught() {
    let dir = tempfile::tempdir().unwrap();
    let (_, gguf) = write_both(dir.path(), &tiny_qwen2(VOCAB), 41, StDtype::F32, GgmlType::Q8_0);
    let truth = TreeMask::new(&PARENTS).unwrap();
    // Row 6 attends to row 1's branch instead of row 2's: its subtree (6, 10) sees a wrong
    // ancestor, everything else is unchanged.
    let mut parents = PARENTS;
    parents[6] = Some(1);
    let broken = TreeMask::new(&parents).unwrap();
    let (prefix, tokens) = (tokens(7, 23), tokens(PARENTS.len(), 24));
    for mode in [WeightMode::F32, WeightMode::Q8] {
        let m = load_as(&gguf, mode);
        let got = tree_rows(&m, &prefix, &tokens, &broken);
        let mut wrong = rows_unlike_their_chains(&m, &prefix, &tokens, &got, &truth);
        wrong.sort();
        assert_eq!(wrong, vec![6, 10], "{mode:?}: the rows under the wrong parent, and only they, differ");
    }
}

#[test]
fn a_chain_mask_computes_what_an_ordinary_forward_does() {
    let dir = tempfile::tempdir().unwrap();
    let (_, gguf) = write_both(dir.path(), &tiny_qwen2(VOCAB), 43, StDtype::F32, GgmlType::Q4_0);
    let (prefix, new) = (tokens(6, 25), tokens(8, 26));
    for mode in [WeightMode::F32, WeightMode::Native, WeightMode::Q8] {
        let m = load_as(&gguf, mode);
        let tree = tree_rows(&m, &prefix, &new, &TreeMask::chain(new.len()));
        let mut c = m.new_cache(1);
        m.forward(&prefix, &mut c).unwrap();
        let chain = rows(&m.forward(&new, &mut c).unwrap());
        assert!(tree.iter().zip(&chain).all(|(a, b)| bits(a) == bits(b)), "{mode:?}");
    }
}

#[test]
fn a_tree_grown_over_several_calls_has_the_bits_of_one_call() {
    // What a draft growing its tree level by level does: each call computes the next rows,
    // attending to ancestors that earlier calls left in the cache.
    let dir = tempfile::tempdir().unwrap();
    let (prefix, tokens) = (tokens(8, 51), tokens(PARENTS.len(), 52));
    for (i, ty) in [GgmlType::Q8_0, GgmlType::Q4_0].into_iter().enumerate() {
        let (_, gguf) =
            write_both(&dir.path().join(format!("{i}")), &tiny_qwen2(VOCAB), 53 + i as u64, StDtype::F32, ty);
        for mode in [WeightMode::F32, WeightMode::Native, WeightMode::Q8] {
            let m = load_as(&gguf, mode);
            let whole = tree_rows(&m, &prefix, &tokens, &TreeMask::new(&PARENTS).unwrap());
            let mut c = m.new_cache(1);
            m.forward(&prefix, &mut c).unwrap();
            let mut grown = Vec::new();
            for (from, to) in [(0, 4), (4, 9), (9, 14)] {
                let call = TreeMask::continuing(&PARENTS[..to], from).unwrap();
                grown.extend(m.forward_tree(&tokens[from..to], &call, &mut c).unwrap().logits_tail(to - from));
            }
            assert_eq!(c.len(), prefix.len() + PARENTS.len());
            for (r, (a, b)) in grown.iter().zip(&whole).enumerate() {
                assert_eq!(bits(a), bits(b), "{ty:?} {mode:?}: row {r}");
            }
            // A continuing call whose rows name a wrong cached ancestor differs.
            let mut wrong = PARENTS;
            wrong[9] = Some(7);
            let mut c = m.new_cache(1);
            m.forward(&prefix, &mut c).unwrap();
            m.forward_tree(&tokens[..9], &TreeMask::new(&PARENTS[..9]).unwrap(), &mut c).unwrap();
            let call = TreeMask::continuing(&wrong[..10], 9).unwrap();
            let row9 = m.forward_tree(&tokens[9..10], &call, &mut c).unwrap().logits_tail(1).remove(0);
            assert_ne!(bits(&row9), bits(&whole[9]), "{ty:?} {mode:?}: a wrong cached parent is seen");
        }
    }
}

#[test]
fn the_cache_kept_to_an_accepted_path_continues_as_that_path_alone() {
    let dir = tempfile::tempdir().unwrap();
    let (_, gguf) = write_both(dir.path(), &tiny_qwen2(VOCAB), 47, StDtype::F32, GgmlType::Q8_0);
    let tree = TreeMask::new(&PARENTS).unwrap();
    let (prefix, tokens, next) = (tokens(5, 27), tokens(PARENTS.len(), 28), tokens(3, 29));
    for mode in [WeightMode::F32, WeightMode::Q8] {
        let m = load_as(&gguf, mode);
        // A path already in place (rows 0, 1) and paths moved (0, 1, 4; 0, 2, 6, 10; 11, 12; ...).
        for leaf in [1, 4, 10, 12, 13, 9] {
            let path = tree.path(leaf).to_vec();
            let mut c = m.new_cache(1);
            m.forward(&prefix, &mut c).unwrap();
            m.forward_tree(&tokens, &tree, &mut c).unwrap();
            c.retain_rows(prefix.len(), &path);
            assert_eq!(c.len(), prefix.len() + path.len());
            assert_eq!(c.precise_len(), c.len(), "an exact tree call leaves an exact cache");
            let after = rows(&m.forward(&next, &mut c).unwrap());
            let mut alone = m.new_cache(1);
            let kept: Vec<u32> = path.iter().map(|&r| tokens[r]).collect();
            m.forward(&[&prefix[..], &kept[..]].concat(), &mut alone).unwrap();
            let want = rows(&m.forward(&next, &mut alone).unwrap());
            assert!(after.iter().zip(&want).all(|(a, b)| bits(a) == bits(b)), "{mode:?}: path to row {leaf}");
            for l in 0..m.config().num_hidden_layers {
                assert_eq!(c.layer_data(l), alone.layer_data(l), "{mode:?} layer {l}: kept keys and values");
            }
        }
    }
}

#[test]
fn malformed_tree_calls_are_refused() {
    let dir = tempfile::tempdir().unwrap();
    let (_, gguf) = write_both(dir.path(), &tiny_qwen2(VOCAB), 49, StDtype::F32, GgmlType::Q8_0);
    let m = load_as(&gguf, WeightMode::Native);
    let mut c = m.new_cache(1);
    let refused = |toks: &[u32], tree: &TreeMask, c: &mut specx_decoder::KvCache| match m.forward_tree(toks, tree, c) {
        Ok(_) => panic!("a malformed tree call ran"),
        Err(e) => e.to_string(),
    };
    let e = refused(&tokens(3, 1), &TreeMask::chain(4), &mut c);
    assert!(e.contains("3 tokens for a tree of 4 rows"), "{e}");
    let e = refused(&tokens(33, 1), &TreeMask::chain(33), &mut c);
    assert!(e.contains("at most 32"), "{e}");
    assert_eq!(c.len(), 0, "a refused call leaves the cache as it was");
}

#[test]
fn the_device_checks_tree_call_holds_bitwise_on_the_cpu() {
    // The check `specx gpu-check` and the wgpu tests run on a device, here with the CPU as
    // the device and no tolerance: every path equals its chain, and a kept path continues.
    let dir = tempfile::tempdir().unwrap();
    let c = specx_decoder::device_check::run_check("tree_call", &specx_decoder::default_device(), dir.path(), 0.0);
    assert!(c.passed, "{}", c.detail);
}
