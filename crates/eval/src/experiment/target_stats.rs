//! The target's side of a greedy trace: for every AR token, the statistics of the target's
//! softmax (temperature 1) where it chose that token. A live sequential run knows them for the
//! last committed token of every round (the verification or the prefill computed that row), so
//! a stop rule may read them ([`specx_decoder::speculative::StopPolicy::observe_target`]); the
//! replay gives them to it from here. One target forward per trace (the prompt, then the
//! output in chunks), checked token by token: the target's argmax (for a coupled sampled
//! trace, its coupled draw) must be the traced token, since the trace is the target's own output (the forward is row-invariant, so a
//! chunk's rows are bitwise those of one-token steps); a mismatch means another model or other
//! weights than the trace was made with.

use super::trace_builder::TraceInput;
use crate::common::results::tokens_sha256;
use anyhow::{Context, Result, ensure};
use serde::{Deserialize, Serialize};
use specx_decoder::Transformer;
use specx_decoder::fsutil::write_atomic;
use specx_decoder::speculative::DraftStats;
use std::path::Path;

/// Output tokens per forward after the prompt (bounds the logits held at once: a row is a
/// vocabulary of floats).
pub const CHUNK: usize = 64;

/// The target's statistics at each AR token of `input`, and the rows forwarded.
pub fn target_stats(target: &Transformer, input: &TraceInput) -> Result<(Vec<DraftStats>, usize)> {
    let (ar, n) = (input.ar, input.ar.len());
    let mut out = Vec::with_capacity(n);
    if n == 0 {
        return Ok((out, 0));
    }
    ensure!(!input.prompt.is_empty(), "empty prompt");
    let mut cache = target.new_cache(1);
    let mut rows = target
        .forward_scores(input.prompt, &mut cache, 1, None)?
        .context("a forward without a cancel flag was cancelled")?;
    let mut forwarded = input.prompt.len();
    loop {
        for row in &rows {
            let j = out.len();
            let (best, _, _) = input.draws.pick(row, input.prompt.len() + j);
            ensure!(
                best == ar[j],
                "the target's token at output position {j} is {best}, the trace has {}: the trace was made with another model, other weights or other draws",
                ar[j]
            );
            out.push(DraftStats::of(row, ar[j]));
        }
        let done = out.len();
        if done == n {
            return Ok((out, forwarded));
        }
        let feed = &ar[done - 1..(done - 1 + CHUNK).min(n - 1)];
        rows = target
            .forward_scores(feed, &mut cache, feed.len(), None)?
            .context("a forward without a cancel flag was cancelled")?;
        forwarded += feed.len();
    }
}

/// A trace's statistics as cached on disk, with what they were computed from.
#[derive(Serialize, Deserialize)]
struct Cached {
    target_sha256: String,
    weights: String,
    prompt_sha256: String,
    ar_sha256: String,
    /// Per AR token: the draft-statistics fields of the target's softmax there.
    stats: Vec<[f32; 5]>,
}

fn to_row(s: &DraftStats) -> [f32; 5] {
    [s.token_prob, s.top1, s.margin, s.entropy, s.top10_top1]
}

fn of_row(r: &[f32; 5]) -> DraftStats {
    DraftStats { token_prob: r[0], top1: r[1], margin: r[2], entropy: r[3], top10_top1: r[4] }
}

/// [`target_stats`] through a cache file at `path` (one per trace; the forward costs about
/// what decoding the trace once did): kept when it was computed for this target, these
/// weights, this prompt and this output, else computed and written. Returns the statistics and
/// the rows forwarded (0 when cached).
pub fn cached_target_stats(
    target: &Transformer,
    target_sha256: &str,
    weights: &str,
    input: &TraceInput,
    path: &Path,
) -> Result<(Vec<DraftStats>, usize)> {
    let (prompt_sha256, ar_sha256) = (tokens_sha256(input.prompt), tokens_sha256(input.ar));
    let fits = |c: &Cached| {
        c.target_sha256 == target_sha256
            && c.weights == weights
            && c.prompt_sha256 == prompt_sha256
            && c.ar_sha256 == ar_sha256
            && c.stats.len() == input.ar.len()
    };
    if let Some(c) = std::fs::read(path).ok().and_then(|b| serde_json::from_slice::<Cached>(&b).ok()).filter(fits) {
        return Ok((c.stats.iter().map(of_row).collect(), 0));
    }
    let (stats, rows) = target_stats(target, input)?;
    let c = Cached {
        target_sha256: target_sha256.into(),
        weights: weights.into(),
        prompt_sha256,
        ar_sha256,
        stats: stats.iter().map(to_row).collect(),
    };
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    }
    write_atomic(path, serde_json::to_string(&c)?.as_bytes())?;
    Ok((stats, rows))
}
