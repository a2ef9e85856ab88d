//! `--weights q8` on tiny synthetic models: row invariance of the whole forward (integer
//! kernels and host attention over a cache) for calls of 2..40 rows, and the fallback of a
//! matrix type that has no integer kernel.

mod common;
use common::*;
use specx_decoder::gguf::GgmlType;
use specx_decoder::synthetic::{StDtype, tiny_qwen2};
use specx_decoder::{Transformer, WeightMode, default_device, load_model_as};
use std::path::Path;

fn load_as(path: &Path, mode: WeightMode) -> Transformer {
    load_model_as(path, None, &default_device(), mode)
        .unwrap_or_else(|e| panic!("loading {}: {e:#}", path.display()))
        .model
}

fn bits(rows: &[Vec<f32>]) -> Vec<Vec<u32>> {
    rows.iter().map(|r| r.iter().map(|v| v.to_bits()).collect()).collect()
}

/// Logits of `new` after a `prefix` already in the cache: all in one call (`together`) or
/// one token per call.
fn after_prefix(m: &Transformer, prefix: &[u32], new: &[u32], together: bool) -> Vec<Vec<f32>> {
    let mut c = m.new_cache(1);
    m.forward(prefix, &mut c).unwrap();
    if together {
        return rows(&m.forward(new, &mut c).unwrap());
    }
    new.iter().flat_map(|&t| rows(&m.forward(&[t], &mut c).unwrap())).collect()
}

#[test]
fn q8_rows_are_bitwise_independent_of_the_call_size() {
    let dir = tempfile::tempdir().unwrap();
    for (i, ty) in [GgmlType::Q8_0, GgmlType::Q4_0, GgmlType::Q5_0].into_iter().enumerate() {
        let (_, gguf) =
            write_both(&dir.path().join(format!("{i}")), &tiny_qwen2(VOCAB), 11 + i as u64, StDtype::F32, ty);
        let m = load_as(&gguf, WeightMode::Q8);
        assert!(m.runs_integer(), "{ty:?}: q8 was not applied");
        let prefix = tokens(5, 3);
        for n in 2..=40 {
            let new = tokens(n, 100 + n as u32);
            let steps = after_prefix(&m, &prefix, &new, false);
            assert_eq!(
                bits(&after_prefix(&m, &prefix, &new, true)),
                bits(&steps),
                "{ty:?}: {n} rows in one call vs {n} one-row calls"
            );
        }
        // A sequence in a ragged batch, at another offset of the call, keeps its bits too.
        let (s1, s2) = (tokens(3, 4), tokens(9, 5));
        let (mut c1, mut c2) = (m.new_cache(1), m.new_cache(1));
        let ragged = m.logits_ragged(m.forward_ragged(&mut [(&s1[..], &mut c1), (&s2[..], &mut c2)]).unwrap());
        let one_by_one = |s: &[u32]| -> Vec<Vec<f32>> {
            let mut c = m.new_cache(1);
            s.iter().flat_map(|&t| rows(&m.forward(&[t], &mut c).unwrap())).collect()
        };
        assert_eq!(
            bits(&ragged),
            bits(&[one_by_one(&s1), one_by_one(&s2)].concat()),
            "{ty:?}: ragged batch vs one token per call"
        );
    }
}

#[test]
fn a_type_without_integer_kernel_keeps_its_native_kernel() {
    // F16 has a native kernel but no integer one: q8 loads it natively (one log line) and
    // computes exactly what the native mode computes.
    let dir = tempfile::tempdir().unwrap();
    let (_, gguf) = write_both(dir.path(), &tiny_qwen2(VOCAB), 6, StDtype::F32, GgmlType::F16);
    let (q8, native) = (load_as(&gguf, WeightMode::Q8), load_as(&gguf, WeightMode::Native));
    assert!(!q8.runs_integer() && q8.is_native(), "F16 matrices should fall back to the native kernel");
    let t = tokens(10, 3);
    let run = |m: &Transformer| rows(&m.forward(&t, &mut m.new_cache(1)).unwrap());
    assert_eq!(bits(&run(&q8)), bits(&run(&native)));
}
