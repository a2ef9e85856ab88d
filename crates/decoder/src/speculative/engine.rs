//! Schedulers: plain autoregressive decoding and sequential speculative decoding, both
//! reporting [`RequestMetrics`].

use super::drafter::{Candidate, DraftRound, Drafter};
use super::metrics::RequestMetrics;
use super::policy::StopPolicy;
use super::verifier::Verifier;
use crate::model::Transformer;
use crate::sampling::{Sampler, SamplingConfig};
use anyhow::{ensure, Result};
use rand::rngs::StdRng;
use rand::SeedableRng;
use serde::{Deserialize, Serialize};
use std::time::Instant;

/// Options shared by every method.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct SpecConfig {
    pub max_new_tokens: usize,
    pub sampling: SamplingConfig,
    pub seed: u64,
}

/// Generated tokens (prompt excluded, EOS included) and the request's metrics.
#[derive(Clone, Debug)]
pub struct Generation {
    pub tokens: Vec<u32>,
    pub metrics: RequestMetrics,
}

/// The autoregressive baseline with the target alone.
pub fn generate_autoregressive(target: &Transformer, prompt: &[u32], cfg: &SpecConfig, eos: &[u32]) -> Result<Generation> {
    let t0 = Instant::now();
    let mut sampler = Sampler::new(cfg.sampling.clone(), cfg.seed);
    let (tokens, stats) = crate::generate::generate(target, prompt, cfg.max_new_tokens, &mut sampler, eos, |_| Ok(()))?;
    let metrics = RequestMetrics {
        n_generated: tokens.len(),
        n_target_calls: if tokens.is_empty() { 0 } else { 1 + stats.decode_steps },
        target_time: stats.prefill_time + stats.decode_time,
        total_time: t0.elapsed(),
        ..Default::default()
    };
    Ok(Generation { tokens, metrics })
}

/// Sequential speculative decoding: draft with `drafter` until `policy` stops (or EOS, or the
/// token budget), verify all candidates in one target forward with `verifier`, commit the
/// accepted prefix plus the correction or bonus token, roll both caches back, repeat.
///
/// The first token comes from the target's prefill, as in autoregressive decoding.
pub fn generate_speculative(
    target: &Transformer,
    drafter: &mut dyn Drafter,
    policy: &mut dyn StopPolicy,
    verifier: &mut dyn Verifier,
    prompt: &[u32],
    cfg: &SpecConfig,
    eos: &[u32],
) -> Result<Generation> {
    ensure!(!prompt.is_empty(), "the prompt is empty");
    let t0 = Instant::now();
    let mut m = RequestMetrics::default();
    let mut rng = StdRng::seed_from_u64(cfg.seed);
    let mut out_tokens = Vec::new();
    if cfg.max_new_tokens == 0 {
        return Ok(Generation { tokens: out_tokens, metrics: m });
    }
    let mut cache = target.new_cache(1);
    let t = Instant::now();
    let prefill = target.forward_last(prompt, &mut cache)?;
    let first_logits = crate::generate::last_logits(&prefill);
    m.target_time += t.elapsed();
    m.n_target_calls += 1;
    let first = Sampler::draw(&cfg.sampling, &first_logits, &mut rng);
    let mut committed: Vec<u32> = prompt.to_vec();
    committed.push(first);
    out_tokens.push(first);

    while out_tokens.len() < cfg.max_new_tokens && !eos.contains(out_tokens.last().unwrap()) {
        let remaining = cfg.max_new_tokens - out_tokens.len();
        let max = remaining.min(policy.max_candidates());
        let candidates: Vec<Candidate> = drafter.draft(DraftRound { committed: &committed, max, policy, sampling: &cfg.sampling, rng: &mut rng, eos, metrics: &mut m })?;
        ensure!(!candidates.is_empty() && candidates.len() <= max, "drafter returned {} candidates (1..={max} allowed)", candidates.len());
        let k = candidates.len();

        // One target forward over the committed tokens its cache lacks plus the candidates.
        let base = committed.len();
        let mut input: Vec<u32> = committed[cache.len()..].to_vec();
        input.extend(candidates.iter().map(|c| c.token));
        let t = Instant::now();
        let out = target.forward(&input, &mut cache)?;
        let rows = out.logits_tail(k + 1);
        m.target_time += t.elapsed();
        m.n_target_calls += 1;

        let verdict = verifier.verify(&candidates, &rows, &cfg.sampling, &mut rng);
        let a = verdict.accepted;
        m.n_drafted += k;
        m.n_accepted += a;
        m.n_verified += if a < k { a + 1 } else { k };
        m.accepted_per_round.push(a);
        m.drafted_per_round.push(k);

        // Keep positions of committed tokens only; the new last token is fed next round.
        cache.truncate(base + a);
        drafter.rollback(base + a);
        let mut new: Vec<u32> = candidates[..a].iter().map(|c| c.token).collect();
        match new.iter().position(|t| eos.contains(t)) {
            Some(i) => new.truncate(i + 1),
            None => new.push(verdict.next),
        }
        new.truncate(remaining);
        committed.extend_from_slice(&new);
        out_tokens.extend_from_slice(&new);
    }
    m.n_generated = out_tokens.len();
    m.total_time = t0.elapsed();
    Ok(Generation { tokens: out_tokens, metrics: m })
}
