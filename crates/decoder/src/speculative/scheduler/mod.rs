//! Schedulers: how drafting and verification interleave. Both run the same round (a
//! [`super::Drafter`] under a [`super::StopPolicy`], candidates decided in position order by a
//! [`super::Verifier`] with per-position random streams) against the same target scorer:
//! [`generate_speculative`] drafts, verifies and commits in turn; [`generate_dsi`] keeps
//! drafting while target workers verify. [`generate_autoregressive`] is the target alone.

mod dsi;
mod sequential;

pub use dsi::{DsiConfig, DsiGeneration, DsiStats, generate_dsi, lookahead_for};
pub use sequential::generate_speculative;

use super::metrics::RequestMetrics;
use super::round::{Generation, SpecConfig};
use crate::coupling::Draws;
use crate::model::Transformer;
use crate::sampler::Sampler;
use anyhow::Result;
use std::time::Instant;

/// The autoregressive baseline with the target alone.
pub fn generate_autoregressive(
    target: &Transformer,
    prompt: &[u32],
    cfg: &SpecConfig,
    eos: &[u32],
) -> Result<Generation> {
    generate_autoregressive_drawn(target, prompt, cfg, eos, Draws::Independent)
}

/// The autoregressive baseline with `draws`: under [`Draws::Coupled`] its tokens are those
/// speculative decoding with [`super::CoupledSampler`] and the same seed commits.
pub fn generate_autoregressive_drawn(
    target: &Transformer,
    prompt: &[u32],
    cfg: &SpecConfig,
    eos: &[u32],
    draws: Draws,
) -> Result<Generation> {
    let t0 = Instant::now();
    let mut sampler = match draws {
        Draws::Independent => Sampler::new(cfg.sampling.clone(), cfg.seed),
        Draws::Coupled => Sampler::coupled(cfg.sampling.clone(), cfg.seed, prompt.len()),
    };
    // Where the target records its calls, its steps are replays, as the sequential scheduler's
    // verifications are: the baseline and the methods pay for launches alike.
    let steps = crate::generate::RecordedSteps::when_possible(target);
    let (tokens, stats) =
        crate::generate::generate_with(target, prompt, cfg.max_new_tokens, &mut sampler, eos, steps, |_| Ok(()))?;
    let metrics = RequestMetrics {
        n_generated: tokens.len(),
        n_target_calls: if tokens.is_empty() { 0 } else { 1 + stats.decode_steps },
        target_time: stats.prefill_time + stats.decode_time,
        total_time: t0.elapsed(),
        ..Default::default()
    };
    Ok(Generation { tokens, metrics })
}
