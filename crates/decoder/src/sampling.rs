//! Logits warping and sampling. Speculative decoding applies the very same [`SamplingConfig`]
//! to draft and target logits, so both distributions are warped identically.

use rand::RngExt;
use rand::rngs::StdRng;
use serde::{Deserialize, Serialize};
use std::cmp::Ordering;

/// Temperature, top-k and top-p, applied in that order (as HF transformers does).
/// `temperature == 0` means greedy: the warped distribution is one-hot on the argmax.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SamplingConfig {
    pub temperature: f32,
    pub top_k: Option<usize>,
    pub top_p: Option<f32>,
}

impl Default for SamplingConfig {
    fn default() -> Self {
        Self::greedy()
    }
}

/// The seed of one random stream, keyed by a run seed, an index (a position, a cell) and a
/// role: a splitmix64 finaliser over the three, so that streams are independent of the order
/// in which a concurrent scheduler or a parallel simulation consumes them.
pub fn stream_seed(seed: u64, index: u64, role: u64) -> u64 {
    let mut z = seed ^ index.wrapping_mul(0x9E37_79B9_7F4A_7C15) ^ role.wrapping_mul(0xD1B5_4A32_D192_ED03);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// Index of the largest value; the first on ties (the same rule everywhere in specx, so that
/// greedy speculative decoding reproduces greedy decoding exactly).
pub fn argmax(xs: &[f32]) -> u32 {
    let mut best = 0;
    for (i, &x) in xs.iter().enumerate() {
        if x > xs[best] {
            best = i;
        }
    }
    best as u32
}

/// The order tokens rank in wherever specx picks the best ones (top-k, the GPU's top-k, draft
/// trees' children): a larger logit first, the smaller token on ties, so that the first of
/// the top k is [`argmax`]. -0 and +0 tie, as they do for `>`, which the GPU kernel compares
/// with; a total order for rows without NaN.
pub fn rank_order(logits: &[f32], a: u32, b: u32) -> Ordering {
    let key = |i: u32| {
        let l = logits[i as usize];
        if l == 0.0 { 0.0 } else { l }
    };
    key(b).total_cmp(&key(a)).then(a.cmp(&b))
}

/// Cuts up to this many tokens are kept in one pass over the row; wider ones select.
const STREAMED_TOP_K: usize = 256;

/// The `k` best tokens of `logits` by [`rank_order`], best first (all of them, ranked, when
/// `k >= logits.len()`). A small `k` (top-k sampling, draft-tree children) takes one pass that
/// keeps the best so far in order, with no vocabulary-sized allocation; a wide one selects.
fn ranked_top(logits: &[f32], k: usize) -> Vec<u32> {
    if k == 0 {
        return Vec::new();
    }
    if k <= STREAMED_TOP_K && k < logits.len() {
        // `>` and `>=` rank as `rank_order` does without NaN: tokens come in increasing order,
        // so a tie goes after the tokens already kept.
        let mut top: Vec<(f32, u32)> = Vec::with_capacity(k + 1);
        for (i, &l) in logits.iter().enumerate() {
            if top.len() < k || top.last().is_some_and(|&(worst, _)| l > worst) {
                let at = top.partition_point(|&(v, _)| v >= l);
                top.insert(at, (l, i as u32));
                top.truncate(k);
            }
        }
        return top.into_iter().map(|(_, i)| i).collect();
    }
    let mut top: Vec<u32> = (0..logits.len() as u32).collect();
    if k < logits.len() {
        top.select_nth_unstable_by(k - 1, |&a, &b| rank_order(logits, a, b));
    }
    top.truncate(k);
    top.sort_unstable_by(|&a, &b| rank_order(logits, a, b));
    top
}

/// The `k` best tokens of `logits` with their logits, best first ([`rank_order`]): what the
/// GPU's top-k (`ForwardOutput::device_top_k`) reads back.
pub fn top_k(logits: &[f32], k: usize) -> Vec<(u32, f32)> {
    ranked_top(logits, k).into_iter().map(|i| (i, logits[i as usize])).collect()
}

/// A `vocab`-wide row holding the logits of `best` (a row's [`top_k`]) and -inf elsewhere.
/// Under a top-k cut of at most `best.len()` tokens, [`SamplingConfig::warp`] gives it the
/// very probabilities it gives the whole row (the cut keeps the same tokens, ranked and
/// summed in the same order), so a sampler can draw from the 2k numbers a GPU reads back.
pub fn row_of_top(vocab: usize, best: &[(u32, f32)]) -> Vec<f32> {
    let mut row = vec![f32::NEG_INFINITY; vocab];
    for &(token, logit) in best {
        row[token as usize] = logit;
    }
    row
}

/// Probability of `token` under the plain softmax of `logits` (temperature 1, no cuts),
/// summed in f64 in index order so that every caller gets the same value.
pub fn top_probability(logits: &[f32], token: u32) -> f32 {
    let max = logits.iter().copied().fold(f32::NEG_INFINITY, f32::max);
    let sum: f64 = logits.iter().map(|&l| ((l - max) as f64).exp()).sum();
    (((logits[token as usize] - max) as f64).exp() / sum) as f32
}

impl SamplingConfig {
    pub fn greedy() -> Self {
        Self { temperature: 0.0, top_k: None, top_p: None }
    }

    pub fn is_greedy(&self) -> bool {
        self.temperature <= 0.0 || self.top_k == Some(1)
    }

    /// Checks the ranges: temperature >= 0, top_k >= 1, 0 < top_p <= 1.
    pub fn validate(&self) -> anyhow::Result<()> {
        anyhow::ensure!(
            self.temperature >= 0.0 && self.temperature.is_finite(),
            "temperature must be >= 0, got {}",
            self.temperature
        );
        anyhow::ensure!(self.top_k != Some(0), "top_k must be >= 1");
        if let Some(p) = self.top_p {
            anyhow::ensure!(p > 0.0 && p <= 1.0, "top_p must be in (0, 1], got {p}");
        }
        Ok(())
    }

    /// The warped next-token distribution of `logits` (sums to 1).
    pub fn probabilities(&self, logits: &[f32]) -> Vec<f32> {
        self.warp(logits).probs
    }

    /// The warped distribution together with what exact log-probabilities need.
    pub fn warp(&self, logits: &[f32]) -> Warped {
        let mut probs = vec![0f32; logits.len()];
        if self.is_greedy() {
            probs[argmax(logits) as usize] = 1.0;
            return Warped { probs, scaled_max: 0.0, temperature: 0.0, log_norm: 0.0, kept: None };
        }
        let t = self.temperature;
        let max = logits.iter().cloned().fold(f32::NEG_INFINITY, f32::max);
        // Candidates surviving top-k, ranked (`rank_order`) when a cut is needed, so that the
        // sum below runs in an order the other tokens' logits cannot change.
        let mut keep: Vec<u32> = match self.top_k.filter(|&k| k < logits.len()) {
            Some(k) => ranked_top(logits, k),
            None => (0..logits.len() as u32).collect(),
        };
        let mut sum = 0f64;
        for &i in &keep {
            let e = (((logits[i as usize] - max) / t) as f64).exp();
            probs[i as usize] = e as f32;
            sum += e;
        }
        let mut cut_any = keep.len() < logits.len();
        if let Some(p) = self.top_p.filter(|&p| p < 1.0) {
            keep.sort_unstable_by(|&a, &b| rank_order(logits, a, b));
            let mut cum = 0f64;
            let mut cut = keep.len();
            for (rank, &i) in keep.iter().enumerate() {
                cum += probs[i as usize] as f64 / sum;
                if cum >= p as f64 {
                    cut = rank + 1;
                    break;
                }
            }
            for &i in &keep[cut..] {
                probs[i as usize] = 0.0;
            }
            cut_any |= cut < keep.len();
            keep.truncate(cut);
            sum = keep.iter().map(|&i| probs[i as usize] as f64).sum();
        }
        let inv = (1.0 / sum) as f32;
        for &i in &keep {
            probs[i as usize] *= inv;
        }
        let kept = cut_any.then_some(keep);
        Warped { probs, scaled_max: max as f64 / t as f64, temperature: t, log_norm: sum.ln(), kept }
    }
}

/// A warped distribution ([`SamplingConfig::warp`]): the probabilities, and the normaliser
/// that gives exact log-probabilities even where an f32 probability underflows.
pub struct Warped {
    pub probs: Vec<f32>,
    scaled_max: f64,
    temperature: f32,
    /// ln of the sum of `exp((l - max) / T)` over the tokens that survive the cuts.
    log_norm: f64,
    /// The surviving tokens when top-k / top-p cut any (None: all survive).
    kept: Option<Vec<u32>>,
}

impl Warped {
    /// ln of the warped probability of `token`, given the logits this was warped from:
    /// `(l / T - max / T) - ln Z` for a surviving token, `-inf` for a cut one, and 0 or `-inf`
    /// when greedy.
    pub fn log_prob(&self, logits: &[f32], token: u32) -> f64 {
        let p = self.probs[token as usize];
        if p == 0.0 && !self.survives(token) {
            return f64::NEG_INFINITY;
        }
        if self.temperature == 0.0 {
            return 0.0;
        }
        logits[token as usize] as f64 / self.temperature as f64 - self.scaled_max - self.log_norm
    }

    /// Whether `token` survived the cuts (its f32 probability may still have underflowed).
    fn survives(&self, token: u32) -> bool {
        self.temperature > 0.0 && self.kept.as_ref().is_none_or(|k| k.contains(&token))
    }
}

/// Draws an index from a distribution that sums to 1 (up to rounding: the last non-zero entry
/// absorbs the remainder).
pub fn sample_from(probs: &[f32], rng: &mut StdRng) -> u32 {
    let u: f64 = rng.random::<f64>();
    let mut cum = 0f64;
    let mut last = 0;
    for (i, &p) in probs.iter().enumerate() {
        if p > 0.0 {
            cum += p as f64;
            last = i;
            if u < cum {
                return i as u32;
            }
        }
    }
    last as u32
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cfg(t: f32, k: Option<usize>, p: Option<f32>) -> SamplingConfig {
        SamplingConfig { temperature: t, top_k: k, top_p: p }
    }

    #[test]
    fn greedy_is_one_hot_on_the_first_maximum() {
        let probs = SamplingConfig::greedy().probabilities(&[1.0, 3.0, 3.0, -1.0]);
        assert_eq!(probs, vec![0.0, 1.0, 0.0, 0.0]);
        assert_eq!(argmax(&[1.0, 3.0, 3.0]), 1);
    }

    #[test]
    fn temperature_matches_softmax() {
        let logits = [0.0f32, 1.0, 2.0];
        let p = cfg(2.0, None, None).probabilities(&logits);
        let e: Vec<f64> = logits.iter().map(|&x| (x as f64 / 2.0).exp()).collect();
        let s: f64 = e.iter().sum();
        for (a, b) in p.iter().zip(&e) {
            assert!((*a as f64 - b / s).abs() < 1e-6);
        }
    }

    #[test]
    fn top_k_and_top_p_cut_and_renormalise() {
        let logits = [(0.1f32).ln(), (0.2f32).ln(), (0.3f32).ln(), (0.4f32).ln()];
        let p = cfg(1.0, Some(2), None).probabilities(&logits);
        assert!((p[3] - 4.0 / 7.0).abs() < 1e-6 && (p[2] - 3.0 / 7.0).abs() < 1e-6 && p[0] == 0.0 && p[1] == 0.0);
        // top-p 0.65: 0.4 + 0.3 = 0.7 >= 0.65 keeps two tokens.
        let p = cfg(1.0, None, Some(0.65)).probabilities(&logits);
        assert!((p[3] - 4.0 / 7.0).abs() < 1e-6 && p[1] == 0.0);
        // top-p 0.75 needs a third token.
        let p = cfg(1.0, None, Some(0.75)).probabilities(&logits);
        assert!(p[1] > 0.0 && p[0] == 0.0);
        assert!((p.iter().sum::<f32>() - 1.0).abs() < 1e-6);
    }

    #[test]
    fn log_prob_is_exact_where_f32_underflows() {
        let logits = [0.0f32, -120.0, 5.0, -3.0];
        let w = cfg(1.0, None, None).warp(&logits);
        let z: f64 = logits.iter().map(|&l| (l as f64).exp()).sum();
        for (i, &l) in logits.iter().enumerate() {
            assert!((w.log_prob(&logits, i as u32) - (l as f64 - z.ln())).abs() < 1e-9);
        }
        assert_eq!(w.probs[1], 0.0); // e^-125 underflows in f32 but its log is finite
        let w = cfg(0.5, Some(2), None).warp(&logits);
        assert_eq!(w.log_prob(&logits, 3), f64::NEG_INFINITY);
        let z2 = ((0.0f64) / 0.5).exp() + (5.0f64 / 0.5).exp();
        assert!((w.log_prob(&logits, 0) - (0.0 - z2.ln())).abs() < 1e-9);
        let g = SamplingConfig::greedy().warp(&logits);
        assert_eq!((g.log_prob(&logits, 2), g.log_prob(&logits, 0)), (0.0, f64::NEG_INFINITY));
    }

    #[test]
    fn top_k_ranks_ties_to_the_smaller_token_and_signed_zeros_as_equal() {
        let logits = [1.0f32, 3.0, 3.0, 0.0, -0.0, 2.0];
        assert_eq!(top_k(&logits, 4), vec![(1, 3.0), (2, 3.0), (5, 2.0), (0, 1.0)]);
        let all: Vec<u32> = top_k(&logits, 9).into_iter().map(|(t, _)| t).collect();
        assert_eq!(all, vec![1, 2, 5, 0, 3, 4]);
        assert_eq!(top_k(&logits, 1)[0].0, argmax(&logits));
        assert!(top_k(&logits, 0).is_empty());
    }

    #[test]
    fn the_one_pass_top_k_ranks_as_the_selection_does() {
        let logits = tied_logits(5000, 3);
        let mut all: Vec<u32> = (0..logits.len() as u32).collect();
        all.sort_by(|&a, &b| rank_order(&logits, a, b));
        for k in [1, 7, 64, STREAMED_TOP_K, STREAMED_TOP_K + 1, 4999, 5000, 6000] {
            assert_eq!(ranked_top(&logits, k), all[..k.min(all.len())], "k = {k}");
        }
    }

    /// Logits on a coarse grid, so that ties fall at the cut.
    fn tied_logits(n: usize, seed: u64) -> Vec<f32> {
        let mut rng = <StdRng as rand::SeedableRng>::seed_from_u64(seed);
        (0..n).map(|_| (rng.random::<f32>() * 40.0).round() / 4.0 - 5.0).collect()
    }

    #[test]
    fn a_top_k_cut_warps_the_row_of_its_top_as_the_whole_row() {
        let configs = [cfg(0.7, Some(20), Some(0.8)), cfg(1.0, Some(50), None), cfg(1.3, Some(4), Some(0.9))];
        for seed in 0..20 {
            let logits = tied_logits(3000, seed);
            for c in &configs {
                let k = c.top_k.unwrap();
                let top = top_k(&logits, k);
                let (whole, part) = (c.warp(&logits), c.warp(&row_of_top(logits.len(), &top)));
                assert_eq!(whole.probs, part.probs, "seed {seed}, {c:?}");
                for &(t, _) in &top {
                    assert_eq!(whole.log_prob(&logits, t), part.log_prob(&logits, t));
                }
                let draw =
                    |row: &[f32]| sample_from(&c.probabilities(row), &mut rand::SeedableRng::seed_from_u64(seed));
                assert_eq!(draw(&logits), draw(&row_of_top(logits.len(), &top)));
            }
        }
        // A cut wider than the row of the top keeps tokens the row lacks: not the same warp.
        let logits = tied_logits(3000, 99);
        let narrow = row_of_top(logits.len(), &top_k(&logits, 10));
        let c = cfg(1.0, Some(20), None);
        assert_ne!(c.warp(&logits).probs, c.warp(&narrow).probs);
    }

    #[test]
    fn invalid_settings_are_refused() {
        assert!(cfg(-1.0, None, None).validate().is_err());
        assert!(cfg(1.0, Some(0), None).validate().is_err());
        assert!(cfg(1.0, None, Some(1.5)).validate().is_err());
        assert!(cfg(0.7, Some(40), Some(0.9)).validate().is_ok());
    }
}
