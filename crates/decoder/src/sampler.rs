//! The token sampler of plain decoding: independent seeded draws, or the coupled draws of
//! [`crate::coupling`] that speculative decoding with the same seed reproduces. It stands on
//! both the warping of [`crate::sampling`] and the coupling, so it lives apart from either.

use crate::coupling::{Draws, position_token};
use crate::model::ForwardOutput;
use crate::sampling::{SamplingConfig, argmax, row_of_top, sample_from};
use rand::SeedableRng;
use rand::rngs::StdRng;

/// The largest top-k cut a GPU applies itself ([`Sampler::next_after`]). Its kernel reads the
/// row once per token kept, so past some k reading the row back costs less; 64 covers the
/// cuts in common use (HF transformers' default 50, Qwen's 20), and the crossing point has not
/// been measured.
pub const DEVICE_TOP_K_MAX: usize = 64;

/// A seeded sampler: the same seed and logits give the same tokens.
pub struct Sampler {
    pub config: SamplingConfig,
    rng: StdRng,
    /// Coupled draws ([`crate::coupling`]): the request's seed and the absolute position of
    /// the next token.
    coupled: Option<(u64, usize)>,
}

impl Sampler {
    pub fn new(config: SamplingConfig, seed: u64) -> Self {
        Self { config, rng: StdRng::seed_from_u64(seed), coupled: None }
    }

    /// A sampler whose token at each position is the coupled draw there, the first at
    /// absolute position `first` (the prompt's length): the tokens speculative decoding with
    /// [`crate::speculative::CoupledSampler`] and the same seed commits.
    pub fn coupled(config: SamplingConfig, seed: u64, first: usize) -> Self {
        Self { config, rng: StdRng::seed_from_u64(seed), coupled: Some((seed, first)) }
    }

    pub fn rng(&mut self) -> &mut StdRng {
        &mut self.rng
    }

    /// The next token after the last position of a forward. On a GPU the device picks what
    /// the draw needs: the argmax when greedy (one number comes back instead of a vocabulary
    /// row), the top k under a top-k cut of at most [`DEVICE_TOP_K_MAX`] (2k numbers, drawn
    /// from as the whole row: `sampling::row_of_top`). Otherwise [`Self::sample`] of the row on
    /// the host, the forward's tensors freed first (as [`crate::generate::greedy_token`]).
    pub fn next_after(&mut self, out: ForwardOutput) -> u32 {
        if self.config.is_greedy() {
            if let Some(tokens) = out.device_argmax(1) {
                self.advance();
                return tokens[0];
            }
        } else if let Some(k) = self.config.top_k.filter(|&k| k <= DEVICE_TOP_K_MAX && k < out.vocab())
            && let Some(best) = out.device_top_k(1, k)
        {
            let row = row_of_top(out.vocab(), &best[0]);
            drop(out);
            return self.sample(&row);
        }
        let row = out.logits_tail(1).remove(0);
        drop(out);
        self.sample(&row)
    }

    /// Counts a token chosen without this sampler's draw (the device's greedy choice) as its
    /// next draw, so that coupled draws stay at their positions.
    pub fn advance(&mut self) {
        if let Some((_, position)) = &mut self.coupled {
            *position += 1;
        }
    }

    /// The next token for `logits`.
    pub fn sample(&mut self, logits: &[f32]) -> u32 {
        if let Some((seed, position)) = &mut self.coupled {
            let token = position_token(logits, &self.config, Draws::Coupled, *seed, *position);
            *position += 1;
            return token.expect("coupled draws always give the token");
        }
        Self::draw(&self.config, logits, &mut self.rng)
    }

    /// One token from `logits` warped by `config`, with an external generator.
    pub fn draw(config: &SamplingConfig, logits: &[f32], rng: &mut StdRng) -> u32 {
        if config.is_greedy() {
            return argmax(logits);
        }
        sample_from(&config.probabilities(logits), rng)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn seeded_sampling_is_reproducible_and_follows_the_distribution() {
        let logits = [0.0f32, (3.0f32).ln()]; // p = [0.25, 0.75]
        let draw = |seed| {
            let mut s = Sampler::new(SamplingConfig { temperature: 1.0, top_k: None, top_p: None }, seed);
            (0..4000).map(|_| s.sample(&logits)).collect::<Vec<_>>()
        };
        assert_eq!(draw(7), draw(7));
        let ones = draw(7).iter().filter(|&&t| t == 1).count() as f64 / 4000.0;
        // 4000 draws: standard error 0.0068; 5 sigma.
        assert!((ones - 0.75).abs() < 0.035, "{ones}");
    }
}
