//! Plain autoregressive generation with one model: the reference every speculative method is
//! compared against, and the engine of `specx generate`.

use crate::cache::KvCache;
use crate::model::Transformer;
use crate::sampling::Sampler;
use anyhow::Result;
use std::time::{Duration, Instant};

/// Timings of one generation.
#[derive(Clone, Debug, Default)]
pub struct GenerateStats {
    pub prompt_tokens: usize,
    pub prefill_time: Duration,
    /// Tokens produced after the first (each needs one decode step).
    pub decode_steps: usize,
    pub decode_time: Duration,
}

impl GenerateStats {
    pub fn prefill_tokens_per_sec(&self) -> f64 {
        self.prompt_tokens as f64 / self.prefill_time.as_secs_f64().max(1e-9)
    }
    pub fn decode_tokens_per_sec(&self) -> f64 {
        self.decode_steps as f64 / self.decode_time.as_secs_f64().max(1e-9)
    }
}

/// Last-position logits of a forward output as a host vector.
pub fn last_logits(out: &crate::model::ForwardOutput) -> Vec<f32> {
    out.logits_tail(1).remove(0)
}

/// Generates up to `max_new` tokens after `prompt`, stopping after an EOS token (which is
/// included). `on_token` sees each token as it is produced.
pub fn generate(
    model: &Transformer,
    prompt: &[u32],
    max_new: usize,
    sampler: &mut Sampler,
    eos_ids: &[u32],
    mut on_token: impl FnMut(u32) -> Result<()>,
) -> Result<(Vec<u32>, GenerateStats)> {
    anyhow::ensure!(!prompt.is_empty(), "the prompt is empty");
    let mut cache: KvCache = model.new_cache(1);
    let mut stats = GenerateStats { prompt_tokens: prompt.len(), ..Default::default() };
    let mut out = Vec::new();
    if max_new == 0 {
        return Ok((out, stats));
    }
    let t = Instant::now();
    let logits = last_logits(&model.forward_last(prompt, &mut cache)?);
    let mut next = sampler.sample(&logits);
    stats.prefill_time = t.elapsed();
    let t = Instant::now();
    loop {
        out.push(next);
        on_token(next)?;
        if out.len() >= max_new || eos_ids.contains(&next) {
            break;
        }
        let logits = last_logits(&model.forward(&[next], &mut cache)?);
        next = sampler.sample(&logits);
        stats.decode_steps += 1;
    }
    stats.decode_time = t.elapsed();
    Ok((out, stats))
}
