//! Coupled draws: every draw at a position, the draft's and the target's, is a Gumbel-max
//! draw with one noise vector shared by that position (the exponential race). The target's
//! token at a position is then a function of its distribution and the noise alone, whoever
//! drafted: speculative decoding commits exactly the tokens plain sampling with the same
//! seed commits, for every drafter, stop rule and scheduler (*drafter-invariant speculative
//! decoding*, Daliri, Musco and Suresh, arXiv 2408.07978). A draft token is accepted when it
//! is the target's draw; the two agree with probability at least (1 - TV) / (1 + TV), below
//! rejection sampling's 1 - TV. Because a sampled output then fixes every acceptance, a
//! sampled run can be replayed for any stop rule from its output and the draft alone, as a
//! greedy one can.

use crate::sampling::{SamplingConfig, argmax, stream_seed};
use rand::rngs::StdRng;
use rand::{RngExt, SeedableRng};
use serde::{Deserialize, Serialize};

/// How a sampled request draws its tokens. Greedy requests are the same under both.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Draws {
    /// Each draw from its own stream: the draft samples from q, the target's decision is
    /// rejection sampling (Leviathan et al.; the acceptance the papers assume).
    #[default]
    Independent,
    /// Gumbel-max draws with one noise vector per position shared by draft and target.
    Coupled,
}

impl Draws {
    pub fn is_independent(&self) -> bool {
        *self == Self::Independent
    }
}

/// The role of the shared noise in [`stream_seed`] (the independent streams use 1 and 2).
const COUPLED_ROLE: u64 = 3;

/// The noise stream shared by every draw at absolute `position` of a request with `seed`.
pub fn coupled_stream(seed: u64, position: usize) -> StdRng {
    StdRng::seed_from_u64(stream_seed(seed, position as u64, COUPLED_ROLE))
}

/// A draw from `probs` (summing to 1) by the exponential race: `argmax_i p_i / E_i` with
/// `E_i = -ln(1 - u_i)`, one uniform per index taken from `rng` in index order (cut tokens
/// included, so index `i` meets the same noise in every distribution drawn with this state).
/// Token `i` wins with probability `p_i`.
pub fn coupled_pick(probs: &[f32], rng: &mut StdRng) -> u32 {
    let (mut best, mut best_score) = (0usize, f64::NEG_INFINITY);
    for (i, &p) in probs.iter().enumerate() {
        let u: f64 = rng.random::<f64>();
        if p > 0.0 {
            let score = p as f64 / -(1.0 - u).ln();
            if score > best_score {
                (best, best_score) = (i, score);
            }
        }
    }
    best as u32
}

/// The token drawn at absolute `position` from `logits` when that draw does not depend on
/// anything else: the argmax when greedy, the coupled draw under [`Draws::Coupled`] (`seed`
/// the request's); `None` for independent sampled draws.
pub fn position_token(
    logits: &[f32],
    sampling: &SamplingConfig,
    draws: Draws,
    seed: u64,
    position: usize,
) -> Option<u32> {
    if sampling.is_greedy() {
        return Some(argmax(logits));
    }
    match draws {
        Draws::Independent => None,
        Draws::Coupled => Some(coupled_pick(&sampling.probabilities(logits), &mut coupled_stream(seed, position))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Pearson's statistic of `counts` against `probs` over `n` draws.
    fn chi_square(counts: &[usize], probs: &[f64], n: usize) -> f64 {
        counts.iter().zip(probs).map(|(&c, &p)| (c as f64 - n as f64 * p).powi(2) / (n as f64 * p)).sum()
    }

    #[test]
    fn the_race_draws_from_the_distribution_and_a_reversed_race_does_not() {
        let probs = [0.05f32, 0.15, 0.3, 0.5];
        let n = 20_000;
        let mut counts = [0usize; 4];
        let mut reversed = [0usize; 4];
        for s in 0..n {
            counts[coupled_pick(&probs, &mut coupled_stream(7, s)) as usize] += 1;
            // The bug of racing to the smallest p / E: favours unlikely tokens.
            let mut rng = coupled_stream(7, s);
            let scores: Vec<f64> = probs.iter().map(|&p| p as f64 / -(1.0 - rng.random::<f64>()).ln()).collect();
            reversed[(0..4).min_by(|&a, &b| scores[a].total_cmp(&scores[b])).unwrap()] += 1;
        }
        let p: Vec<f64> = probs.iter().map(|&x| x as f64).collect();
        // 3 degrees of freedom: P(chi2 > 21.1) = 1e-4.
        assert!(chi_square(&counts, &p, n) < 21.1, "{counts:?}");
        assert!(chi_square(&reversed, &p, n) > 21.1, "{reversed:?}");
    }

    #[test]
    fn shared_noise_makes_close_distributions_agree() {
        let (p, q) = ([0.1f32, 0.2, 0.3, 0.4], [0.15f32, 0.2, 0.25, 0.4]);
        let tv = 0.05;
        let n = 20_000;
        let agree = (0..n)
            .filter(|&s| coupled_pick(&p, &mut coupled_stream(1, s)) == coupled_pick(&q, &mut coupled_stream(1, s)))
            .count();
        let independent = (0..n)
            .filter(|&s| coupled_pick(&p, &mut coupled_stream(1, s)) == coupled_pick(&q, &mut coupled_stream(2, s)))
            .count();
        let bound = (1.0 - tv) / (1.0 + tv);
        assert!(agree as f64 / n as f64 > bound - 0.01, "agreement {agree} / {n} below the bound {bound}");
        // Independent draws agree with probability sum p q = 0.29.
        assert!((independent as f64 / n as f64 - 0.29).abs() < 0.02, "{independent}");
    }

    #[test]
    fn position_tokens_are_greedy_coupled_or_unknown() {
        let logits = [0.0f32, 2.0, 1.0];
        let greedy = SamplingConfig::greedy();
        let t1 = SamplingConfig { temperature: 1.0, top_k: None, top_p: None };
        assert_eq!(position_token(&logits, &greedy, Draws::Independent, 0, 5), Some(1));
        assert_eq!(position_token(&logits, &t1, Draws::Independent, 0, 5), None);
        let draws: Vec<u32> =
            (0..200).map(|pos| position_token(&logits, &t1, Draws::Coupled, 9, pos).unwrap()).collect();
        assert_eq!(
            draws,
            (0..200).map(|pos| position_token(&logits, &t1, Draws::Coupled, 9, pos).unwrap()).collect::<Vec<_>>()
        );
        assert!((0..3).all(|t| draws.contains(&t)), "every token drawn somewhere: {draws:?}");
    }
}
