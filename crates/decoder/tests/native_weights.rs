//! GGUF weights kept in their block formats (the native path) against the same files
//! dequantized to f32 on load, on tiny synthetic models written with quantized matrices.
//!
//! Both paths multiply the same f32 weight values in the same order: the few-row kernel for
//! calls of up to 32 rows, burn's gemm for longer ones (the native path decodes the matrix for
//! such a call), so their logits are compared bitwise. (n tokens at once vs one at a time agree
//! within 1e-4 here: calls over 32 rows go through burn's gemm, whose rounding depends on the
//! row count; a sequence inside a ragged batch is bitwise the same as alone. The q8 path has no
//! gemm and is bitwise row invariant for any call size: tests/q8_weights.rs.)

mod common;
use common::*;
use specx_decoder::gguf::GgmlType;
use specx_decoder::synthetic::{StDtype, tiny_llama, tiny_qwen2};
use specx_decoder::{LoadedModel, Transformer, WeightMode, default_device, load_model_as};
use std::path::Path;

fn load_as(path: &Path, mode: WeightMode) -> LoadedModel {
    load_model_as(path, None, &default_device(), mode).unwrap_or_else(|e| panic!("loading {}: {e:#}", path.display()))
}

fn bits(rows: &[Vec<f32>]) -> Vec<Vec<u32>> {
    rows.iter().map(|r| r.iter().map(|v| v.to_bits()).collect()).collect()
}

/// Logits of a forward of `first` tokens, then of each of `steps` fed one at a time.
fn run(m: &Transformer, first: &[u32], steps: &[u32]) -> Vec<Vec<f32>> {
    let mut c = m.new_cache(1);
    let mut out = rows(&m.forward(first, &mut c).unwrap());
    for &t in steps {
        out.extend(rows(&m.forward(&[t], &mut c).unwrap()));
    }
    out
}

#[test]
fn native_logits_equal_the_f32_path_bitwise() {
    let dir = tempfile::tempdir().unwrap();
    for (i, ty) in
        [GgmlType::Q8_0, GgmlType::Q4_0, GgmlType::Q5_0, GgmlType::F16, GgmlType::BF16].into_iter().enumerate()
    {
        for (j, cfg) in [tiny_qwen2(VOCAB), tiny_llama(VOCAB)].iter().enumerate() {
            let (_, gguf) = write_both(&dir.path().join(format!("{i}-{j}")), cfg, 3 + i as u64, StDtype::F32, ty);
            let (native, dense) = (load_as(&gguf, WeightMode::Native), load_as(&gguf, WeightMode::F32));
            assert!(native.model.is_native() && !dense.model.is_native(), "{ty:?}: the modes were not applied");
            let (first, steps) = (tokens(20, 7), tokens(6, 8));
            let want = run(&dense.model, &first, &steps);
            let got = run(&native.model, &first, &steps);
            assert_eq!(bits(&got), bits(&want), "{ty:?} {}: native logits differ from the f32 path", cfg.architecture);
            // A 40-token forward: both through burn's gemm.
            let long = tokens(40, 9);
            assert_eq!(bits(&run(&native.model, &long, &[])), bits(&run(&dense.model, &long, &[])), "{ty:?} 40 tokens");
        }
    }
}

#[test]
fn native_forwards_are_row_invariant_and_roll_back() {
    let dir = tempfile::tempdir().unwrap();
    let (_, gguf) = write_both(dir.path(), &tiny_qwen2(VOCAB), 5, StDtype::F32, GgmlType::Q8_0);
    let m = load_as(&gguf, WeightMode::Native).model;
    // n tokens at once equal n single-token steps (n > 32: the prefill goes through the gemm).
    for n in [2, 7, 40, 70] {
        let t = tokens(n, n as u32);
        assert_rows_close(&run(&m, &t, &[]), &run(&m, &t[..1], &t[1..]), 1e-4, &format!("n={n}"));
    }
    // Truncating and re-forwarding equals a fresh run.
    let (a, b) = (tokens(12, 1), tokens(5, 2));
    let mut c = m.new_cache(1);
    m.forward(&a, &mut c).unwrap();
    c.truncate(7);
    let again = rows(&m.forward(&b, &mut c).unwrap());
    let fresh = run(&m, &[&a[..7], &b[..]].concat(), &[]);
    assert_rows_close(&again, &fresh[7..], 1e-4, "truncate + forward vs fresh run");
    // A ragged batch gives each sequence its own numbers bitwise.
    let (s1, s2) = (tokens(3, 4), tokens(9, 5));
    let (mut c1, mut c2) = (m.new_cache(1), m.new_cache(1));
    let hidden = m.forward_ragged(&mut [(&s1[..], &mut c1), (&s2[..], &mut c2)]).unwrap();
    let ragged = m.logits_ragged(hidden);
    let alone: Vec<Vec<f32>> = [run(&m, &s1, &[]), run(&m, &s2, &[])].concat();
    assert_eq!(bits(&ragged), bits(&alone), "ragged batch vs sequences alone");
}

#[test]
fn a_type_without_native_kernel_falls_back_to_f32() {
    // Q4_1 has no native kernel: the native mode loads it dequantized (with a log line on
    // stderr), not as an error, and computes exactly what the f32 mode computes.
    let dir = tempfile::tempdir().unwrap();
    let (_, gguf) = write_both(dir.path(), &tiny_qwen2(VOCAB), 6, StDtype::F32, GgmlType::Q4_1);
    let (native, dense) = (load_as(&gguf, WeightMode::Native), load_as(&gguf, WeightMode::F32));
    assert!(!native.model.is_native(), "Q4_1 matrices cannot run natively");
    let t = tokens(10, 3);
    assert_eq!(bits(&run(&native.model, &t, &[])), bits(&run(&dense.model, &t, &[])));
}

#[test]
fn native_weights_read_fewer_bytes() {
    let dir = tempfile::tempdir().unwrap();
    let (_, gguf) = write_both(dir.path(), &tiny_qwen2(VOCAB), 7, StDtype::F32, GgmlType::Q8_0);
    let (native, dense) = (load_as(&gguf, WeightMode::Native), load_as(&gguf, WeightMode::F32));
    let (n, f) = (native.model.weight_bytes_per_token(), dense.model.weight_bytes_per_token());
    // Q8_0 stores 34 bytes per 32 values against 128; norms and biases stay f32.
    assert!(n * 3 < f, "native {n} bytes vs f32 {f}");
    assert_eq!(f, dense.model.config().weight_bytes_per_token(), "f32 path: stored bytes = the config's f32 count");
}

#[test]
fn batched_greedy_generation_equals_generating_each_prompt_alone() {
    use specx_decoder::generate::{BatchItem, generate, generate_greedy_batched};
    let dir = tempfile::tempdir().unwrap();
    let (_, gguf) = write_both(dir.path(), &tiny_qwen2(VOCAB), 6, StDtype::F32, GgmlType::Q8_0);
    let m = load_as(&gguf, WeightMode::Native).model;
    // Prompts short and long (over 32 tokens: the prefill takes the gemm path), budgets
    // uneven, more prompts than slots (slots are refilled), one EOS id that some runs hit.
    let prompts: Vec<Vec<u32>> =
        [3, 40, 7, 1, 35, 12].iter().enumerate().map(|(i, &n)| tokens(n, 10 + i as u32)).collect();
    let budgets = [9, 4, 17, 1, 12, 0];
    let eos = [5u32];
    let items: Vec<BatchItem> = prompts.iter().zip(budgets).map(|(p, b)| BatchItem { prompt: p, max_new: b }).collect();
    let mut got = vec![None; items.len()];
    generate_greedy_batched(&m, &items, 3, &eos, |o| {
        assert_eq!(o.stats.decode_steps + usize::from(!o.tokens.is_empty()), o.tokens.len());
        got[o.index] = Some(o.tokens);
        Ok(())
    })
    .unwrap();
    for (i, (p, b)) in prompts.iter().zip(budgets).enumerate() {
        let mut sampler = specx_decoder::Sampler::new(specx_decoder::SamplingConfig::greedy(), 0);
        let (alone, _) = generate(&m, p, b, &mut sampler, &eos, |_| Ok(())).unwrap();
        assert_eq!(
            got[i].as_ref().unwrap(),
            &alone,
            "prompt {i}: batched greedy output differs from generating it alone"
        );
    }
}
