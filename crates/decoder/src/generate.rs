//! Plain autoregressive generation with one model: the reference every speculative method is
//! compared against, and the engine of `specx generate`.

use crate::cache::KvCache;
use crate::model::{Transformer, TreeRows};
use crate::sampler::Sampler;
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

/// The greedy token after a forward's last position: on a GPU the device's argmax (one number
/// comes back), on the CPU the argmax of the host row, read before the forward's tensors are
/// freed and taken after.
pub fn greedy_token(out: crate::model::ForwardOutput) -> u32 {
    if let Some(tokens) = out.device_argmax(1) {
        return tokens[0];
    }
    let row = last_logits(&out);
    drop(out);
    crate::sampling::argmax(&row)
}

/// A recorded step in a build with GPU kernels (`model::CapturedDecode`); a type with no
/// values in one without, where no model can be recorded.
#[cfg(any(feature = "wgpu", feature = "cuda"))]
type Recorder = crate::model::CapturedDecode;
#[cfg(not(any(feature = "wgpu", feature = "cuda")))]
type Recorder = std::convert::Infallible;

/// Decode steps, verification calls and draft steps, each a replay of a call recorded for its
/// row count on a GPU (`model::CapturedDecode`: the plain forward's results, without launching each
/// kernel).
pub struct RecordedSteps {
    recorder: Recorder,
}

impl RecordedSteps {
    /// Steps of a model whose step can be recorded (`Transformer::can_capture`: GGUF blocks on
    /// one GPU).
    pub fn new(model: &Transformer) -> Result<Self> {
        anyhow::ensure!(
            model.can_capture(),
            "a recorded decode step needs a model in GGUF blocks on one GPU (wgpu or cuda), with its full vocabulary"
        );
        #[cfg(any(feature = "wgpu", feature = "cuda"))]
        return Ok(Self { recorder: crate::model::CapturedDecode::new() });
        #[cfg(not(any(feature = "wgpu", feature = "cuda")))]
        unreachable!("a build without GPU kernels has no GPU model")
    }

    /// [`RecordedSteps::new`] where the model's calls can be recorded; `None` elsewhere (the
    /// CPU, a model not in GGUF blocks), whose callers forward plainly.
    pub fn when_possible(model: &Transformer) -> Option<Self> {
        model.can_capture().then(|| Self::new(model).expect("a model whose calls can be recorded"))
    }

    /// The greedy token after `token`, which is forwarded after what `cache` holds.
    pub fn next(&mut self, model: &Transformer, token: u32, cache: &mut KvCache) -> Result<u32> {
        #[cfg(any(feature = "wgpu", feature = "cuda"))]
        return self.recorder.next(model, token, cache);
        #[cfg(not(any(feature = "wgpu", feature = "cuda")))]
        {
            let _ = (model, token, cache);
            match self.recorder {}
        }
    }

    /// The logits of each of `tokens` (at most `model::RECORDED_ROWS_MAX` on a GPU), which are
    /// forwarded after what `cache` holds: a verification's scores, from a replay of the call
    /// recorded for that many rows.
    pub fn scores(&mut self, model: &Transformer, tokens: &[u32], cache: &mut KvCache) -> Result<Vec<Vec<f32>>> {
        #[cfg(any(feature = "wgpu", feature = "cuda"))]
        return self.recorder.scores(model, tokens, cache);
        #[cfg(not(any(feature = "wgpu", feature = "cuda")))]
        {
            let _ = (model, tokens, cache);
            match self.recorder {}
        }
    }

    /// The greedy token after each of `tokens` (at most `model::RECORDED_ROWS_MAX` on a GPU),
    /// which are forwarded after what `cache` holds: a greedy verification's decisions,
    /// computed on the device, from a replay of the call recorded for that many rows.
    pub fn best(&mut self, model: &Transformer, tokens: &[u32], cache: &mut KvCache) -> Result<Vec<u32>> {
        #[cfg(any(feature = "wgpu", feature = "cuda"))]
        return self.recorder.best(model, tokens, cache);
        #[cfg(not(any(feature = "wgpu", feature = "cuda")))]
        {
            let _ = (model, tokens, cache);
            match self.recorder {}
        }
    }

    /// A tree call's logits (`tokens` the rows of `tree`, at most `model::RECORDED_ROWS_MAX` on
    /// a GPU) when `greedy` is false, or each row's greedy token when it is true: what `model.forward_tree(tokens, tree, cache)` gives, from a replay of
    /// the call recorded for that many rows, the tree's mask rewritten.
    pub fn tree(
        &mut self,
        model: &Transformer,
        tokens: &[u32],
        tree: &crate::tree_mask::TreeMask,
        cache: &mut KvCache,
        greedy: bool,
    ) -> Result<TreeRows> {
        #[cfg(any(feature = "wgpu", feature = "cuda"))]
        return self.recorder.tree(model, tokens, tree, cache, greedy);
        #[cfg(not(any(feature = "wgpu", feature = "cuda")))]
        {
            let _ = (model, tokens, tree, cache, greedy);
            match self.recorder {}
        }
    }

    /// The last of `tokens` (at most `model::RECORDED_ROWS_MAX` on a GPU), which are forwarded
    /// after what `cache` holds: its logits and final hidden state (a draft step's), from a
    /// replay of the call recorded for that many rows.
    pub fn last(&mut self, model: &Transformer, tokens: &[u32], cache: &mut KvCache) -> Result<(Vec<f32>, Vec<f32>)> {
        #[cfg(any(feature = "wgpu", feature = "cuda"))]
        return self.recorder.last(model, tokens, cache);
        #[cfg(not(any(feature = "wgpu", feature = "cuda")))]
        {
            let _ = (model, tokens, cache);
            match self.recorder {}
        }
    }

    /// Why the runtime refused to record a call, if it did: every call since (and this one)
    /// forwarded plainly, with the same results.
    pub fn refused(&self) -> Option<&str> {
        #[cfg(any(feature = "wgpu", feature = "cuda"))]
        return self.recorder.refused();
        #[cfg(not(any(feature = "wgpu", feature = "cuda")))]
        match self.recorder {}
    }

    /// The most rows [`RecordedSteps::scores`] takes in one call.
    pub fn max_rows(&self) -> usize {
        #[cfg(any(feature = "wgpu", feature = "cuda"))]
        return crate::model::RECORDED_ROWS_MAX;
        #[cfg(not(any(feature = "wgpu", feature = "cuda")))]
        match self.recorder {}
    }
}

/// Generates up to `max_new` tokens after `prompt`, stopping after an EOS token (which is
/// included). `on_token` sees each token as it is produced.
pub fn generate(
    model: &Transformer,
    prompt: &[u32],
    max_new: usize,
    sampler: &mut Sampler,
    eos_ids: &[u32],
    on_token: impl FnMut(u32) -> Result<()>,
) -> Result<(Vec<u32>, GenerateStats)> {
    generate_with(model, prompt, max_new, sampler, eos_ids, None, on_token)
}

/// [`generate`], its decode steps replayed by `steps` when given ([`RecordedSteps`]): a greedy
/// step takes its token from the device, a sampled one draws from the row read back.
pub fn generate_with(
    model: &Transformer,
    prompt: &[u32],
    max_new: usize,
    sampler: &mut Sampler,
    eos_ids: &[u32],
    mut steps: Option<RecordedSteps>,
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
    let mut next = sampler.next_after(model.forward_last(prompt, &mut cache)?);
    stats.prefill_time = t.elapsed();
    let t = Instant::now();
    loop {
        out.push(next);
        on_token(next)?;
        if out.len() >= max_new || eos_ids.contains(&next) {
            break;
        }
        next = match &mut steps {
            Some(steps) if sampler.config.is_greedy() => {
                sampler.advance();
                steps.next(model, next, &mut cache)?
            }
            Some(steps) => sampler.sample(&steps.scores(model, &[next], &mut cache)?.remove(0)),
            None => sampler.next_after(model.forward(&[next], &mut cache)?),
        };
        stats.decode_steps += 1;
    }
    stats.decode_time = t.elapsed();
    Ok((out, stats))
}

/// One prompt of a batched greedy generation: the prompt and its new-token budget.
pub struct BatchItem<'a> {
    pub prompt: &'a [u32],
    pub max_new: usize,
}

/// A finished sequence of [`generate_greedy_batched`]. `decode_time` is this sequence's share
/// of the batched steps it took part in (each step's time split evenly over its rows): not
/// the time it would take alone.
#[derive(Clone, Debug)]
pub struct BatchedOutput {
    pub index: usize,
    pub tokens: Vec<u32>,
    pub stats: GenerateStats,
}

/// Greedy generation of many prompts with up to `batch` in flight at once: each prompt is
/// prefilled alone exactly as [`generate`] does, then the decode steps of every live sequence
/// run as one ragged forward, and a finished sequence's slot is refilled from the queue. On
/// the CPU the decode rows run the row-invariant kernel, so every output is bitwise the
/// output [`generate`] gives for that prompt alone (tested); only the time per sequence
/// changes. `on_done` sees each sequence as it finishes (in finishing order).
pub fn generate_greedy_batched(
    model: &Transformer,
    items: &[BatchItem],
    batch: usize,
    eos_ids: &[u32],
    mut on_done: impl FnMut(BatchedOutput) -> Result<()>,
) -> Result<()> {
    struct Live {
        index: usize,
        cache: KvCache,
        out: Vec<u32>,
        stats: GenerateStats,
        max_new: usize,
    }
    let finished = |l: &Live| l.out.len() >= l.max_new || l.out.last().is_some_and(|t| eos_ids.contains(t));
    let mut queue = items.iter().enumerate();
    let mut live: Vec<Live> = Vec::new();
    loop {
        while live.len() < batch.max(1) {
            let Some((index, item)) = queue.next() else { break };
            anyhow::ensure!(!item.prompt.is_empty(), "prompt {index} is empty");
            let mut l = Live {
                index,
                cache: model.new_cache(1),
                out: Vec::new(),
                stats: GenerateStats { prompt_tokens: item.prompt.len(), ..Default::default() },
                max_new: item.max_new,
            };
            if item.max_new > 0 {
                let t = Instant::now();
                l.out.push(greedy_token(model.forward_last(item.prompt, &mut l.cache)?));
                l.stats.prefill_time = t.elapsed();
            }
            if finished(&l) || item.max_new == 0 {
                on_done(BatchedOutput { index, tokens: l.out, stats: l.stats })?;
            } else {
                live.push(l);
            }
        }
        if live.is_empty() {
            return Ok(());
        }
        let t = Instant::now();
        let inputs: Vec<[u32; 1]> =
            live.iter().map(|l| [*l.out.last().expect("live sequences have a token")]).collect();
        let logits = {
            let mut rows: Vec<(&[u32], &mut KvCache)> =
                live.iter_mut().zip(&inputs).map(|(l, i)| (&i[..], &mut l.cache)).collect();
            let hidden = model.forward_ragged(&mut rows)?;
            model.logits_ragged(hidden)
        };
        let share = t.elapsed() / live.len() as u32;
        for (l, row) in live.iter_mut().zip(&logits) {
            l.out.push(crate::sampling::argmax(row));
            l.stats.decode_steps += 1;
            l.stats.decode_time += share;
        }
        let mut i = 0;
        while i < live.len() {
            if finished(&live[i]) {
                let l = live.remove(i);
                on_done(BatchedOutput { index: l.index, tokens: l.out, stats: l.stats })?;
            } else {
                i += 1;
            }
        }
    }
}
