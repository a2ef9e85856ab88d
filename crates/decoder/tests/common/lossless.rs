//! Losslessness helpers shared by the schedulers' tests: the exact distribution of short
//! continuations under the warped target, and a chi-square test of sampled counts against it.

use specx_decoder::sampling::SamplingConfig;
use specx_decoder::Transformer;
use std::collections::HashMap;

pub const SMALL_VOCAB: usize = 6;
pub const STEPS: usize = 3;

/// Exact probability of every 3-token continuation under the warped target.
pub fn exact_distribution(target: &Transformer, prompt: &[u32], s: &SamplingConfig) -> HashMap<Vec<u32>, f64> {
    fn rec(t: &Transformer, seq: &mut Vec<u32>, depth: usize, p: f64, s: &SamplingConfig, out: &mut HashMap<Vec<u32>, f64>, plen: usize) {
        if depth == STEPS {
            out.insert(seq[plen..].to_vec(), p);
            return;
        }
        let mut c = t.new_cache(1);
        let logits = specx_decoder::generate::last_logits(&t.forward(seq, &mut c).unwrap());
        let probs = s.probabilities(&logits);
        for (tok, &q) in probs.iter().enumerate() {
            if q > 0.0 {
                seq.push(tok as u32);
                rec(t, seq, depth + 1, p * q as f64, s, out, plen);
                seq.pop();
            }
        }
    }
    let mut out = HashMap::new();
    rec(target, &mut prompt.to_vec(), 0, 1.0, s, &mut out, prompt.len());
    out
}

/// Pearson chi-square p-value (Wilson-Hilferty approximation), cells with expected < 5
/// pooled into one.
pub fn chi_square_p(counts: &HashMap<Vec<u32>, usize>, exact: &HashMap<Vec<u32>, f64>, n: usize) -> f64 {
    let (mut stat, mut cells, mut pool_e, mut pool_o) = (0.0, 0usize, 0.0, 0.0);
    for (k, &p) in exact {
        let e = p * n as f64;
        let o = *counts.get(k).unwrap_or(&0) as f64;
        if e < 5.0 {
            pool_e += e;
            pool_o += o;
        } else {
            stat += (o - e) * (o - e) / e;
            cells += 1;
        }
    }
    let unseen: usize = counts.iter().filter(|(k, _)| !exact.contains_key(*k)).map(|(_, c)| c).sum();
    assert_eq!(unseen, 0, "sampled a sequence of probability 0");
    if pool_e > 0.0 {
        stat += (pool_o - pool_e) * (pool_o - pool_e) / pool_e;
        cells += 1;
    }
    assert!(cells >= 3, "too few cells ({cells}) for a meaningful test");
    let df = (cells - 1) as f64;
    let z = ((stat / df).powf(1.0 / 3.0) - (1.0 - 2.0 / (9.0 * df))) / (2.0 / (9.0 * df)).sqrt();
    0.5 * libm_erfc(z / std::f64::consts::SQRT_2)
}

/// Complementary error function (Numerical Recipes' erfc, relative error < 1.2e-7).
fn libm_erfc(x: f64) -> f64 {
    let z = x.abs();
    let t = 1.0 / (1.0 + 0.5 * z);
    let r = t * (-z * z - 1.26551223 + t * (1.00002368 + t * (0.37409196 + t * (0.09678418 + t * (-0.18628806 + t * (0.27886807 + t * (-1.13520398 + t * (1.48851587 + t * (-0.82215223 + t * 0.17087277))))))))).exp();
    if x >= 0.0 { r } else { 2.0 - r }
}

pub fn sample_counts(n: usize, mut run: impl FnMut(u64) -> Vec<u32>) -> HashMap<Vec<u32>, usize> {
    let mut counts = HashMap::new();
    for seed in 0..n as u64 {
        *counts.entry(run(seed)).or_insert(0) += 1;
    }
    counts
}

