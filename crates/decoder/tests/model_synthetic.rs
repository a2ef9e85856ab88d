//! The runtime on tiny synthetic models: loaders agree across formats, the KV cache rolls back
//! correctly, multi-token and batched forwards equal their one-at-a-time equivalents.

mod common;
use common::*;
use specx_decoder::Transformer;
use specx_decoder::gguf::GgmlType;
use specx_decoder::synthetic::{StDtype, tiny_llama, tiny_qwen2};

fn qwen_pair() -> (tempfile::TempDir, specx_decoder::LoadedModel, specx_decoder::LoadedModel) {
    let dir = tempfile::tempdir().unwrap();
    let (hf, gguf) = write_both(dir.path(), &tiny_qwen2(VOCAB), 1, StDtype::F32, GgmlType::F32);
    let (a, b) = (load(&hf), load(&gguf));
    (dir, a, b)
}

fn forward_rows(m: &Transformer, toks: &[u32]) -> Vec<Vec<f32>> {
    let mut c = m.new_cache(1);
    rows(&m.forward(toks, &mut c).unwrap())
}

#[test]
fn safetensors_and_gguf_give_the_same_logits() {
    let (_d, hf, gg) = qwen_pair();
    assert_eq!(hf.model.config(), gg.model.config(), "configs from config.json and GGUF metadata differ");
    let t = tokens(12, 3);
    assert_rows_close(&forward_rows(&hf.model, &t), &forward_rows(&gg.model, &t), 1e-5, "hf vs gguf");
}

#[test]
fn llama_gguf_qk_permutation_is_undone() {
    // llama.cpp permutes q/k rows of llama models; without the inverse permutation the
    // logits of the GGUF and HF copies would differ.
    let dir = tempfile::tempdir().unwrap();
    let cfg = tiny_llama(VOCAB);
    let (hf, gguf) = write_both(dir.path(), &cfg, 2, StDtype::F32, GgmlType::F32);
    let (hf, gg) = (load(&hf), load(&gguf));
    assert!(gg.model.config().tie_word_embeddings && !gg.model.config().attention_bias);
    let t = tokens(9, 5);
    assert_rows_close(&forward_rows(&hf.model, &t), &forward_rows(&gg.model, &t), 1e-5, "llama hf vs gguf");
}

/// The reader against a GGUF that specx did not write: the tiny GQA llama converted by
/// llama.cpp's `gguf` package with its converter's q/k permutation
/// (`scripts/reference/llama_gguf_fixture.py`). A wrong inverse permutation in the reader, or
/// one taking the query head count for k, moves the logits by whole units.
#[test]
fn a_llama_gguf_written_by_gguf_py_gives_the_hf_logits() {
    let fixtures = std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures");
    let dir = tempfile::tempdir().unwrap();
    let cfg = specx_decoder::synthetic::tiny_llama_gqa();
    let hf = dir.path().join("hf");
    let tok = specx_decoder::synthetic::word_tokenizer_json(cfg.vocab_size, "w");
    specx_decoder::synthetic::write_hf_dir(
        &hf,
        &cfg,
        &specx_decoder::synthetic::random_weights(&cfg, specx_decoder::synthetic::TINY_LLAMA_SEED),
        StDtype::F32,
        1,
        &tok,
    )
    .unwrap();
    let meta: serde_json::Value =
        serde_json::from_slice(&std::fs::read(fixtures.join("tiny-llama-gqa.gguf.json")).unwrap()).unwrap();
    let sha = specx_decoder::fsutil::sha256_file(&hf.join("model.safetensors")).unwrap();
    assert_eq!(
        meta["source_safetensors_sha256"],
        sha.as_str(),
        "the synthetic weights changed: regenerate the fixture (scripts/reference/llama_gguf_fixture.py)"
    );
    let gdir = dir.path().join("gguf");
    std::fs::create_dir_all(&gdir).unwrap();
    std::fs::copy(fixtures.join("tiny-llama-gqa.gguf"), gdir.join("model.gguf")).unwrap();
    std::fs::write(gdir.join("tokenizer.json"), &tok).unwrap();
    let (hf, gg) = (load(&hf), load(&gdir.join("model.gguf")));
    assert_eq!((gg.model.config().num_attention_heads, gg.model.config().num_key_value_heads), (4, 2));
    let t = tokens(9, 5);
    assert_rows_close(&forward_rows(&hf.model, &t), &forward_rows(&gg.model, &t), 1e-5, "llama hf vs a gguf-py GGUF");
}

#[test]
fn half_precision_files_load() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = tiny_qwen2(VOCAB);
    let (hf16, gg16) = write_both(&dir.path().join("f16"), &cfg, 4, StDtype::F16, GgmlType::F16);
    let (hfb, _) = write_both(&dir.path().join("bf16"), &cfg, 4, StDtype::BF16, GgmlType::F32);
    let (_, gg32) = write_both(&dir.path().join("f32"), &cfg, 4, StDtype::F32, GgmlType::F32);
    let t = tokens(6, 1);
    let reference = forward_rows(&load(&gg32).model, &t);
    // f16 keeps ~3 decimal digits of each weight, bf16 ~2: logits move accordingly.
    assert_rows_close(&forward_rows(&load(&hf16).model, &t), &reference, 0.05, "f16 safetensors");
    assert_rows_close(&forward_rows(&load(&gg16).model, &t), &reference, 0.05, "f16 gguf");
    assert_rows_close(&forward_rows(&load(&hfb).model, &t), &reference, 0.3, "bf16 safetensors");
}

#[test]
fn n_token_forward_equals_n_single_token_forwards() {
    let (_d, m, _) = qwen_pair();
    for n in [2, 7, 40] {
        // 40 > HOST_KERNEL_MAX_ROWS: the prefill goes through burn's gemm, the steps through
        // the few-row kernel; both must agree.
        let t = tokens(n, n as u32);
        let all = forward_rows(&m.model, &t);
        let mut c = m.model.new_cache(1);
        let steps: Vec<Vec<f32>> = t.iter().map(|&x| rows(&m.model.forward(&[x], &mut c).unwrap()).remove(0)).collect();
        assert_eq!(c.len(), n);
        assert_rows_close(&all, &steps, 1e-4, &format!("n={n}"));
    }
}

#[test]
fn truncate_then_reforward_equals_fresh_run() {
    let (_d, m, _) = qwen_pair();
    let model = &m.model;
    let a = tokens(10, 11);
    let b = tokens(4, 12);
    for keep in [0, 1, 5, 9, 10] {
        let mut c = model.new_cache(1);
        model.forward(&a, &mut c).unwrap();
        c.truncate(keep);
        assert_eq!(c.len(), keep);
        let got = if keep == 0 { forward_rows(model, &b) } else { rows(&model.forward(&b, &mut c).unwrap()) };
        let fresh_input: Vec<u32> = a[..keep].iter().chain(&b).copied().collect();
        let fresh = forward_rows(model, &fresh_input);
        assert_rows_close(&got, &fresh[keep..], 1e-4, &format!("keep={keep}"));
    }
}

#[test]
fn repeated_rollback_rounds_stay_consistent() {
    // Speculative decoding's pattern: forward k candidates, keep some, forward again.
    let (_d, m, _) = qwen_pair();
    let model = &m.model;
    let mut c = model.new_cache(1);
    let mut accepted: Vec<u32> = tokens(5, 40);
    model.forward(&accepted, &mut c).unwrap();
    for round in 0..6u32 {
        let cand = tokens(4, 100 + round);
        let out = rows(&model.forward(&cand, &mut c).unwrap());
        let keep = (round as usize) % 5; // 0..=4 candidates kept
        let mut fresh_in = accepted.clone();
        fresh_in.extend_from_slice(&cand);
        let fresh = forward_rows(model, &fresh_in);
        assert_rows_close(&out, &fresh[accepted.len()..], 1e-4, &format!("round {round}"));
        c.truncate(accepted.len() + keep);
        accepted.extend_from_slice(&cand[..keep]);
        assert_eq!(c.len(), accepted.len());
    }
}

#[test]
fn cache_grows_past_its_first_allocation() {
    let (_d, m, _) = qwen_pair();
    let t = tokens(300, 9); // the cache allocates 256 positions at a time
    let mut c = m.model.new_cache(1);
    m.model.forward(&t[..200], &mut c).unwrap();
    let tail = rows(&m.model.forward(&t[200..], &mut c).unwrap());
    assert_rows_close(&tail, &forward_rows(&m.model, &t)[200..], 2e-4, "grown cache");
}

#[test]
fn batched_forward_equals_unbatched() {
    let (_d, m, _) = qwen_pair();
    let model = &m.model;
    let seqs: Vec<Vec<u32>> = (0..3).map(|i| tokens(6, 50 + i)).collect();
    let refs: Vec<&[u32]> = seqs.iter().map(|s| s.as_slice()).collect();
    let mut c = model.new_cache(3);
    let out = model.forward_batch(&refs, &mut c).unwrap();
    let step: Vec<&[u32]> = vec![&[1], &[2], &[3]];
    let out2 = model.forward_batch(&step, &mut c).unwrap();
    let [b, n, v] = out.logits.dims();
    assert_eq!([b, n, v], [3, 6, VOCAB]);
    let flat = out.logits.into_data().try_to_vec::<f32>().unwrap();
    let flat2 = out2.logits.into_data().try_to_vec::<f32>().unwrap();
    for (i, s) in seqs.iter().enumerate() {
        let mut cs = model.new_cache(1);
        let single = rows(&model.forward(s, &mut cs).unwrap());
        let batched: Vec<Vec<f32>> = (0..n).map(|j| flat[(i * n + j) * v..(i * n + j + 1) * v].to_vec()).collect();
        assert_rows_close(&batched, &single, 1e-4, &format!("sequence {i}"));
        let next = rows(&model.forward(&[i as u32 + 1], &mut cs).unwrap());
        assert_rows_close(&[flat2[i * v..(i + 1) * v].to_vec()], &next, 1e-4, &format!("sequence {i} step"));
    }
}

#[test]
fn ragged_forward_equals_separate_forwards() {
    // Three sequences with caches of different lengths, fed 1, 3 and 1 new tokens in one
    // ragged batch, then a second ragged step; each must match its own unbatched run.
    let (_d, m, _) = qwen_pair();
    let model = &m.model;
    let prefixes: Vec<Vec<u32>> = [4, 9, 1].iter().enumerate().map(|(i, &n)| tokens(n, 70 + i as u32)).collect();
    let news: Vec<Vec<u32>> = [1, 3, 1].iter().enumerate().map(|(i, &n)| tokens(n, 90 + i as u32)).collect();
    let mut caches: Vec<_> = prefixes
        .iter()
        .map(|p| {
            let mut c = model.new_cache(1);
            model.forward(p, &mut c).unwrap();
            c
        })
        .collect();
    let mut seqs: Vec<(&[u32], &mut specx_decoder::KvCache)> =
        news.iter().map(|n| n.as_slice()).zip(caches.iter_mut()).collect();
    let h = model.forward_ragged(&mut seqs).unwrap();
    assert_eq!(h.dims(), [5, 32]);
    let step2: Vec<[u32; 1]> = vec![[5], [6], [7]];
    let mut seqs: Vec<(&[u32], &mut specx_decoder::KvCache)> =
        step2.iter().map(|t| t.as_slice()).zip(caches.iter_mut()).collect();
    let h2 = model.forward_ragged(&mut seqs).unwrap();
    let flat = h.into_data().try_to_vec::<f32>().unwrap();
    let flat2 = h2.into_data().try_to_vec::<f32>().unwrap();
    let mut row = 0;
    for (i, (p, n)) in prefixes.iter().zip(&news).enumerate() {
        let mut c = model.new_cache(1);
        model.forward(p, &mut c).unwrap();
        let single = model.forward(n, &mut c).unwrap().hidden_tail(n.len());
        let ragged: Vec<Vec<f32>> = (0..n.len()).map(|j| flat[(row + j) * 32..(row + j + 1) * 32].to_vec()).collect();
        assert_rows_close(&ragged, &single, 1e-5, &format!("sequence {i}"));
        row += n.len();
        let next = model.forward(&step2[i], &mut c).unwrap().hidden_tail(1);
        assert_rows_close(&[flat2[i * 32..(i + 1) * 32].to_vec()], &next, 1e-5, &format!("sequence {i} second step"));
        assert_eq!(caches[i].len(), p.len() + n.len() + 1);
    }
}

#[test]
fn ragged_rows_are_bitwise_independent_of_the_batch() {
    // A 70-token sequence between two 1-token ones spans the kernel's 64-row chunks at other
    // offsets than when it runs alone: every row must still be bitwise the same.
    let (_d, m, _) = qwen_pair();
    let model = &m.model;
    let news: Vec<Vec<u32>> = [1, 70, 1].iter().enumerate().map(|(i, &n)| tokens(n, 40 + i as u32)).collect();
    let prefixed_cache = |seed: u32| {
        let mut c = model.new_cache(1);
        model.forward(&tokens(3, seed), &mut c).unwrap();
        c
    };
    let mut caches: Vec<_> = (0..3).map(|i| prefixed_cache(60 + i)).collect();
    let mut seqs: Vec<(&[u32], &mut specx_decoder::KvCache)> =
        news.iter().map(|n| n.as_slice()).zip(caches.iter_mut()).collect();
    let together = model.forward_ragged(&mut seqs).unwrap().into_data().try_to_vec::<f32>().unwrap();
    let mut row = 0;
    for (i, n) in news.iter().enumerate() {
        let mut c = prefixed_cache(60 + i as u32);
        let alone =
            model.forward_ragged(&mut [(n.as_slice(), &mut c)]).unwrap().into_data().try_to_vec::<f32>().unwrap();
        assert!(alone == together[row * 32..(row + n.len()) * 32], "sequence {i} changed with its batch");
        row += n.len();
    }
}

#[test]
fn hidden_states_are_returned_for_every_position() {
    let (_d, m, _) = qwen_pair();
    let mut c = m.model.new_cache(1);
    let out = m.model.forward(&tokens(5, 1), &mut c).unwrap();
    assert_eq!(out.hidden.dims(), [1, 5, m.model.config().hidden_size]);
    // The logits are the head applied to the returned hidden states.
    let again = m.model.logits(out.hidden.clone());
    let d = max_abs_diff(
        &again.into_data().try_to_vec::<f32>().unwrap(),
        &out.logits.into_data().try_to_vec::<f32>().unwrap(),
    );
    assert!(d < 1e-5);
}

#[test]
fn caches_are_independent_values() {
    let (_d, m, _) = qwen_pair();
    let model = &m.model;
    let mut c1 = model.new_cache(1);
    model.forward(&tokens(6, 1), &mut c1).unwrap();
    let mut c2 = c1.clone();
    model.forward(&tokens(3, 2), &mut c2).unwrap();
    assert_eq!((c1.len(), c2.len()), (6, 9));
    // c1 was not disturbed by writes into its clone.
    let next = rows(&model.forward(&[7], &mut c1).unwrap());
    let mut fresh_in = tokens(6, 1);
    fresh_in.push(7);
    assert_rows_close(&next, &forward_rows(model, &fresh_in)[6..], 1e-4, "clone isolation");
}

#[test]
#[should_panic(expected = "beyond its length")]
fn truncating_beyond_the_length_is_a_bug() {
    let (_d, m, _) = qwen_pair();
    let mut c = m.model.new_cache(1);
    m.model.forward(&tokens(3, 1), &mut c).unwrap();
    c.truncate(4);
}

#[test]
fn out_of_vocabulary_tokens_are_refused() {
    let (_d, m, _) = qwen_pair();
    let mut c = m.model.new_cache(1);
    let err = m.model.forward(&[VOCAB as u32], &mut c).err().expect("must fail");
    assert!(err.to_string().contains("outside the vocabulary"), "{err}");
    assert_eq!(c.len(), 0, "a refused forward must not advance the cache");
}
