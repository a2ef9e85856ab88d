//! Drafters propose candidate tokens with the exact distributions they were sampled from.

use super::metrics::RequestMetrics;
use super::policy::{DraftStep, StopPolicy};
use crate::cache::KvCache;
use crate::model::Transformer;
use crate::sampling::{argmax, sample_from, top_probability, SamplingConfig};
use anyhow::Result;
use rand::rngs::StdRng;
use std::time::Instant;

/// One proposed token.
#[derive(Clone, Debug)]
pub struct Candidate {
    pub token: u32,
    /// The warped draft distribution `q` the token was sampled from (the verifier tests
    /// against this very `q`). Empty in greedy mode, where `q` is one-hot on `token`.
    pub q: Vec<f32>,
    /// `q[token]` (1 in greedy mode).
    pub q_token: f32,
}

/// Proposes candidates continuing a committed sequence.
pub trait Drafter {
    /// Drafts at most `max` candidates after `committed`, asking `policy` after each one and
    /// stopping at an EOS token.
    #[allow(clippy::too_many_arguments)]
    fn draft(
        &mut self,
        committed: &[u32],
        max: usize,
        policy: &mut dyn StopPolicy,
        sampling: &SamplingConfig,
        rng: &mut StdRng,
        eos: &[u32],
        metrics: &mut RequestMetrics,
    ) -> Result<Vec<Candidate>>;

    /// After verification: the first `valid` committed tokens are final; forget the rest.
    fn rollback(&mut self, valid: usize);
}

/// The plain drafter: the draft model decodes autoregressively with its own KV cache.
pub struct PlainDrafter<'m> {
    model: &'m Transformer,
    cache: KvCache,
    /// Tokens whose keys are in `cache`, in order (committed prefix, then this round's
    /// candidates fed so far).
    fed: Vec<u32>,
}

impl<'m> PlainDrafter<'m> {
    pub fn new(model: &'m Transformer) -> Self {
        Self { model, cache: model.new_cache(1), fed: Vec::new() }
    }

    pub fn cache_len(&self) -> usize {
        self.cache.len()
    }

    /// Forwards `tokens`; returns last-position logits and hidden state on the host.
    fn step(&mut self, tokens: &[u32], metrics: &mut RequestMetrics) -> Result<(Vec<f32>, Vec<f32>)> {
        let t = Instant::now();
        let out = self.model.forward(tokens, &mut self.cache)?;
        self.fed.extend_from_slice(tokens);
        let logits = out.logits_tail(1).remove(0);
        let hidden = out.hidden_tail(1).remove(0);
        metrics.n_draft_calls += 1;
        metrics.draft_time += t.elapsed();
        Ok((logits, hidden))
    }
}

impl Drafter for PlainDrafter<'_> {
    fn draft(
        &mut self,
        committed: &[u32],
        max: usize,
        policy: &mut dyn StopPolicy,
        sampling: &SamplingConfig,
        rng: &mut StdRng,
        eos: &[u32],
        metrics: &mut RequestMetrics,
    ) -> Result<Vec<Candidate>> {
        debug_assert!(self.fed.len() <= committed.len() && committed.starts_with(&self.fed));
        let mut candidates = Vec::new();
        if max == 0 {
            return Ok(candidates);
        }
        policy.begin_round();
        // Feed what the cache lacks: at least the last committed token.
        let start = self.fed.len().min(committed.len() - 1);
        self.rollback(start);
        let mut input: Vec<u32> = committed[start..].to_vec();
        loop {
            let (logits, hidden) = self.step(&input, metrics)?;
            let t = Instant::now();
            let (c, confidence) = if sampling.is_greedy() {
                let token = argmax(&logits);
                (Candidate { token, q: Vec::new(), q_token: 1.0 }, top_probability(&logits, token))
            } else {
                let q = sampling.probabilities(&logits);
                let token = sample_from(&q, rng);
                let q_token = q[token as usize];
                (Candidate { token, q_token, q }, q_token)
            };
            metrics.draft_time += t.elapsed();
            let step = DraftStep { index: candidates.len() + 1, token: c.token, q_token: c.q_token, confidence, hidden: &hidden };
            let stop = policy.should_stop(&step)? || eos.contains(&c.token) || candidates.len() + 1 >= max;
            input = vec![c.token];
            candidates.push(c);
            if stop {
                return Ok(candidates);
            }
        }
    }

    fn rollback(&mut self, valid: usize) {
        let keep = valid.min(self.fed.len());
        self.fed.truncate(keep);
        self.cache.truncate(keep);
    }
}
