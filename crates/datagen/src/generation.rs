//! The target/draft passes of SpecDec++ §4.4, batched over prompts.
//!
//! The paper's recipe is three passes per prompt: the target writes X, teacher-forced target
//! and draft passes over prompt+X give p and q at every position, and a draft pass over the
//! token-mixed prompt+Z gives the features. Here the passes run in lockstep, one token per
//! step, so nothing is computed twice: when the target has produced `p_t` (the distribution it
//! samples X_t from) the draft, fed the same prefix X_<t, has produced `q_t`; Y_t, the label,
//! Z_t follow; then one step feeds X_t to the target and to the draft's X stream, and Z_t to
//! the draft's Z stream (one per mixing draw), whose hidden state is the feature of position
//! t. p_t here is exactly the teacher-forced p(. | X_<t) (same model, same prefix); the tests
//! check the labels against separate teacher-forced passes.
//!
//! Several prompts are in flight at once ("continuous batching"): each step forwards every
//! active sequence in one ragged batch, and a finished prompt's slot is refilled at once.

use crate::config::MixingConfig;
use crate::labels::{PositionLabel, label_position};
use anyhow::{Result, bail};
use rand::rngs::StdRng;
use rand::{RngExt, SeedableRng};
use rayon::prelude::*;
use specx_decoder::{KvCache, Sampler, SamplingConfig, Transformer};
use specx_run::seed::named_seed;
use std::time::{Duration, Instant};

/// One prompt to process: its position in the run's prompt order, id, and token ids (chat
/// template applied).
#[derive(Clone, Debug)]
pub struct PromptInput {
    pub index: usize,
    pub id: String,
    pub tokens: Vec<u32>,
}

/// One mixing draw of a prompt: where Z came from Y, and the draft's final hidden states at
/// those positions (row-major, `hidden` floats per labelled position, in position order).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct MixDraw {
    pub from_y: Vec<bool>,
    pub features: Vec<f32>,
}

/// Everything datagen keeps of one prompt.
#[derive(Clone, Debug, PartialEq)]
pub struct PromptData {
    pub index: usize,
    pub id: String,
    /// The prompt's token ids (chat template applied): with the token table, all a feature
    /// recomputation needs.
    pub prompt_tokens: Vec<u32>,
    pub positions: Vec<PositionLabel>,
    pub draws: Vec<MixDraw>,
}

impl PromptData {
    pub fn labelled_rows(&self) -> u64 {
        self.draws.iter().map(|d| d.from_y.iter().filter(|&&f| f).count() as u64).sum()
    }
}

/// What the passes need besides the models.
#[derive(Clone, Debug)]
pub struct PassSettings {
    pub generation: SamplingConfig,
    pub max_new_tokens: usize,
    pub labels: SamplingConfig,
    pub mixing: MixingConfig,
    pub batch_size: usize,
    pub seed: u64,
    /// Target tokens that end a response (the EOS position is kept, as decoding drafts it too).
    pub eos: Vec<u32>,
    /// Run the draft's Z streams and keep their hidden states (else the features are
    /// recomputed later from the token table: see `features.rs`, and the Z streams are skipped).
    pub keep_features: bool,
}

/// Time spent per model, for the run's report.
#[derive(Clone, Copy, Debug, Default)]
pub struct PassTimes {
    /// Prompt prefill (one forward per prompt) and batched steps, per model.
    pub target_prefill: Duration,
    pub draft_prefill: Duration,
    pub target_steps: Duration,
    pub draft_steps: Duration,
    pub sampling: Duration,
    /// Batched steps taken and rows they carried (for the mean batch size).
    pub steps: u64,
    pub step_rows: u64,
}

/// A prompt in flight.
struct Active {
    input: usize,
    target: KvCache,
    draft_x: KvCache,
    draft_z: Vec<KvCache>,
    /// Next-token logits of the target and of the draft's X stream at the current position.
    p_logits: Vec<f32>,
    q_logits: Vec<f32>,
    gen_rng: StdRng,
    label_rng: StdRng,
    mix_rng: StdRng,
    positions: Vec<PositionLabel>,
    draws: Vec<MixDraw>,
    /// This step's tokens: X_t, and Z_t per draw.
    x: u32,
    z: Vec<u32>,
    done: bool,
}

/// Runs the passes over `prompts`, admitting them in order, `settings.batch_size` in flight.
/// Each finished prompt goes to `on_done`, which returns false to stop early (the prompts
/// still in flight are dropped). `on_step` is called after each step with the number of
/// response tokens it produced and of prompts it finished (for progress bars). Every prompt's
/// data depend only on the prompt, the models and the seed: not on batching or order.
pub fn run_passes(
    target: &Transformer,
    draft: &Transformer,
    prompts: &[PromptInput],
    settings: &PassSettings,
    times: &mut PassTimes,
    on_step: &mut dyn FnMut(usize, usize),
    on_done: &mut dyn FnMut(PromptData) -> Result<bool>,
) -> Result<()> {
    let max_pos = target.config().max_position_embeddings.min(draft.config().max_position_embeddings);
    for p in prompts {
        if p.tokens.is_empty() {
            bail!("prompt {} has no tokens after templating", p.id);
        }
        if p.tokens.len() + settings.max_new_tokens > max_pos {
            bail!(
                "prompt {} ({} tokens) + {} new tokens exceeds the models' context of {max_pos}",
                p.id,
                p.tokens.len(),
                settings.max_new_tokens
            );
        }
    }
    let mut active: Vec<Active> = Vec::new();
    let mut next = 0;
    loop {
        while active.len() < settings.batch_size && next < prompts.len() {
            active.push(start(target, draft, &prompts[next], next, settings, times)?);
            next += 1;
        }
        if active.is_empty() {
            break;
        }
        // Sample X_t, Y_t, the label and Z_t for every sequence (independent, so in parallel).
        let t0 = Instant::now();
        active.par_iter_mut().for_each(|a| choose_tokens(a, settings));
        times.sampling += t0.elapsed();
        // One ragged step per model: X_t to the target and to the draft's X stream of the
        // unfinished sequences, Z_t to every Z stream.
        let t0 = Instant::now();
        target_step(target, &mut active)?;
        times.target_steps += t0.elapsed();
        let t0 = Instant::now();
        draft_step(draft, &mut active)?;
        times.draft_steps += t0.elapsed();
        times.steps += 1;
        times.step_rows += active.len() as u64;
        let produced = active.len();
        let (done, still): (Vec<Active>, Vec<Active>) = active.drain(..).partition(|a| a.done);
        active = still;
        on_step(produced, done.len());
        for a in done {
            let p = &prompts[a.input];
            if !on_done(PromptData {
                index: p.index,
                id: p.id.clone(),
                prompt_tokens: p.tokens.clone(),
                positions: a.positions,
                draws: a.draws,
            })? {
                return Ok(());
            }
        }
    }
    Ok(())
}

/// Feeds X_t to the target for every unfinished sequence; stores p_{t+1}.
fn target_step(target: &Transformer, active: &mut [Active]) -> Result<()> {
    let mut live: Vec<&mut Active> = active.iter_mut().filter(|a| !a.done).collect();
    if live.is_empty() {
        return Ok(());
    }
    let xs: Vec<[u32; 1]> = live.iter().map(|a| [a.x]).collect();
    let mut seqs: Vec<(&[u32], &mut KvCache)> =
        xs.iter().map(|x| x.as_slice()).zip(live.iter_mut().map(|a| &mut a.target)).collect();
    let h = target.forward_ragged(&mut seqs)?;
    for (a, logits) in live.into_iter().zip(target.logits_ragged(h)) {
        a.p_logits = logits;
    }
    Ok(())
}

/// Feeds X_t to the draft's X stream of every unfinished sequence (storing q_{t+1}) and Z_t to
/// every Z stream (when features are kept), in one ragged batch; keeps the hidden state of each
/// Z row that came from Y.
fn draft_step(draft: &Transformer, active: &mut [Active]) -> Result<()> {
    let hidden = draft.config().hidden_size;
    let mut tokens: Vec<[u32; 1]> = active.iter().filter(|a| !a.done).map(|a| [a.x]).collect();
    let n_live = tokens.len();
    tokens.extend(active.iter().flat_map(|a| a.z.iter().take(a.draft_z.len()).map(|&z| [z])));
    if tokens.is_empty() {
        return Ok(());
    }
    let mut x_caches: Vec<&mut KvCache> = Vec::new();
    let mut z_caches: Vec<&mut KvCache> = Vec::new();
    for a in active.iter_mut() {
        if !a.done {
            x_caches.push(&mut a.draft_x);
        }
        z_caches.extend(a.draft_z.iter_mut());
    }
    x_caches.extend(z_caches);
    let mut seqs: Vec<(&[u32], &mut KvCache)> = tokens.iter().map(|t| t.as_slice()).zip(x_caches).collect();
    let h = draft.forward_ragged(&mut seqs)?;
    let rows = tokens.len();
    let mut q_next =
        if n_live > 0 { draft.logits_ragged(h.clone().slice([0..n_live, 0..hidden])) } else { Vec::new() }.into_iter();
    let z_hidden = if rows > n_live {
        h.slice([n_live..rows, 0..hidden])
            .into_data()
            .try_to_vec::<f32>()
            .map_err(|e| anyhow::anyhow!("reading hidden states: {e:?}"))?
    } else {
        Vec::new()
    };
    let mut z_rows = z_hidden.chunks_exact(hidden);
    for a in active.iter_mut() {
        for d in a.draws.iter_mut().take(a.draft_z.len()) {
            let row = z_rows.next().expect("a Z row per draw");
            if *d.from_y.last().expect("a mixing flag per position") {
                d.features.extend_from_slice(row);
            }
        }
        if !a.done {
            a.q_logits = q_next.next().expect("draft logits per unfinished sequence");
        }
    }
    Ok(())
}

/// Prefills a prompt into the target and the draft (the Z streams start from copies of the
/// draft's cache: the prompt is shared).
fn start(
    target: &Transformer,
    draft: &Transformer,
    p: &PromptInput,
    input: usize,
    s: &PassSettings,
    times: &mut PassTimes,
) -> Result<Active> {
    let t0 = Instant::now();
    let mut tc = target.new_cache(1);
    let p_logits = target.forward_last(&p.tokens, &mut tc)?.logits_tail(1).remove(0);
    times.target_prefill += t0.elapsed();
    let t0 = Instant::now();
    let mut dc = draft.new_cache(1);
    let q_logits = draft.forward_last(&p.tokens, &mut dc)?.logits_tail(1).remove(0);
    times.draft_prefill += t0.elapsed();
    let seeded = |stream: &str| StdRng::seed_from_u64(named_seed(s.seed, stream, &p.id));
    Ok(Active {
        input,
        target: tc,
        draft_z: if s.keep_features { vec![dc.clone(); s.mixing.draws] } else { Vec::new() },
        draft_x: dc,
        p_logits,
        q_logits,
        gen_rng: seeded("target-sampling"),
        label_rng: seeded("draft-sampling"),
        mix_rng: seeded("mixing"),
        positions: Vec::new(),
        draws: vec![MixDraw::default(); s.mixing.draws],
        x: 0,
        z: Vec::new(),
        done: false,
    })
}

/// X_t from the target's warped p, Y_t and the label, Z_t per draw; marks the sequence done
/// at EOS or at the token budget.
fn choose_tokens(a: &mut Active, s: &PassSettings) {
    let x = Sampler::draw(&s.generation, &a.p_logits, &mut a.gen_rng);
    let label = label_position(x, &a.p_logits, &a.q_logits, &s.labels, &mut a.label_rng);
    a.z.clear();
    for d in &mut a.draws {
        let from_y = a.mix_rng.random::<f64>() >= s.mixing.target_ratio;
        d.from_y.push(from_y);
        a.z.push(if from_y { label.y } else { x });
    }
    a.positions.push(label);
    a.x = x;
    a.done = s.eos.contains(&x) || a.positions.len() >= s.max_new_tokens;
}
