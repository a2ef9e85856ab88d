//! Drafters propose candidate tokens with the exact distributions they were sampled from.

use super::candidate::Candidate;
use super::policy::{Decision, DraftStep, HiddenState, LazyStats, StopPolicy};
use super::round::{DraftRound, Streams};
use super::tree::DraftTree;
use crate::cache::KvCache;
use crate::coupling::{Draws, coupled_pick};
use crate::generate::RecordedSteps;
use crate::model::{ForwardOutput, Transformer};
use crate::sampling::{SamplingConfig, argmax, sample_from, top_probability};
use anyhow::{Result, ensure};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Instant;

/// Proposes candidates continuing a committed sequence.
pub trait Drafter {
    /// Drafts at most `round.max` candidates after `round.committed`, asking `round.policy`
    /// after each one and stopping at an EOS token. Returns none only when the policy dropped
    /// the first candidate (and `round.keep_first` is false).
    fn draft(&mut self, round: DraftRound<'_>) -> Result<Vec<Candidate>>;

    /// Drafts a token tree of at most `round.max` levels for a scheduler that verifies trees
    /// (siblings are alternatives for one position). A chain drafter's tree is its chain.
    fn draft_tree(&mut self, round: DraftRound<'_>) -> Result<DraftTree> {
        Ok(DraftTree::chain(self.draft(round)?))
    }

    /// After verification: the first `valid` committed tokens are final; forget the rest.
    fn rollback(&mut self, valid: usize);

    /// Where a drafter that reads the target's hidden states wants the target's forwards to
    /// record them (a feature-level head); `None` for the others.
    fn feature_tap(&self) -> Option<super::feature_draft::tap::FeatureTap> {
        None
    }
}

/// Draft logit rows read back by the model drafters of this process ([`draft_rows_read`]).
static ROWS_READ: AtomicU64 = AtomicU64::new(0);

/// Draft logit rows the model drafters of this process have read: none for a greedy step
/// whose stop rule reads nothing of the draft (its argmax is computed where the logits are).
/// A count for tests and profiles, which read it before and after a generation on one thread.
pub fn draft_rows_read() -> u64 {
    ROWS_READ.load(Ordering::Relaxed)
}

/// A draft forward's last position, read back: the logits a candidate is drawn from and the
/// final hidden state a stop rule may read, or only its greedy token (`best`, the logits and
/// hidden state then empty) where nothing else is read.
pub(crate) struct LastPosition {
    pub logits: Vec<f32>,
    pub hidden: Vec<f32>,
    pub best: Option<u32>,
}

impl LastPosition {
    pub fn of(out: ForwardOutput) -> Self {
        let (logits, hidden) = out.last_position();
        Self { logits, hidden, best: None }
    }

    /// A last position of which only the greedy token was read.
    pub fn best(token: u32) -> Self {
        Self { logits: Vec::new(), hidden: Vec::new(), best: Some(token) }
    }

    /// The greedy token of `out`'s last position, computed where its logits are.
    pub fn best_of(out: ForwardOutput) -> Self {
        Self::best(out.best_tokens(1)[0])
    }
}

/// A drafter's KV cache and the tokens whose keys it holds, in order (committed prefix, then
/// this round's candidates fed so far).
pub(crate) struct DraftCache {
    pub cache: KvCache,
    pub fed: Vec<u32>,
}

impl DraftCache {
    pub fn new(model: &Transformer) -> Self {
        Self { cache: model.new_cache(1), fed: Vec::new() }
    }

    /// Where a round's input starts: what the cache lacks of `committed`, and at least the
    /// last committed token (whose logits give the first candidate).
    pub fn resume_at(&self, committed: &[u32]) -> usize {
        debug_assert!(self.fed.len() <= committed.len() && committed.starts_with(&self.fed));
        self.fed.len().min(committed.len() - 1)
    }

    /// Keeps the first `valid` fed tokens.
    pub fn rollback(&mut self, valid: usize) {
        let keep = valid.min(self.fed.len());
        self.fed.truncate(keep);
        self.cache.truncate(keep);
    }

    /// A round from `committed[start..]` (the cache cut back to `start` first): the drafting
    /// loop every drafter shares. `forward(tokens, index, best_only, cache)` is the model step
    /// (`index`: the candidate it predicts, 0 first; `best_only`: greedy drafting under a rule
    /// that reads nothing of the draft, so that the step may return its greedy token alone,
    /// [`LastPosition::best`]); a candidate is drawn (`pick`) from the warped `q` of the last
    /// position (the very `q` the verifier tests), the round's policy decides whether to stop
    /// (or to drop the candidate), and the candidate is fed next. Candidate `i` is drawn from
    /// the draft stream of its absolute position `committed.len() + i`. Every forwarded token
    /// is recorded as fed.
    pub fn draft(
        &mut self,
        round: DraftRound<'_>,
        start: usize,
        pick: Pick,
        mut forward: impl FnMut(&[u32], usize, bool, &mut KvCache) -> Result<LastPosition>,
    ) -> Result<Vec<Candidate>> {
        let DraftRound { committed, max, keep_first, policy, sampling, streams, eos, metrics, .. } = round;
        self.rollback(start);
        let mut candidates = Vec::new();
        policy.begin_round();
        let best_only = sampling.is_greedy() && !policy.reads_draft();
        let mut input: Vec<u32> = committed[start..].to_vec();
        loop {
            let t = Instant::now();
            let LastPosition { logits, hidden, best } = forward(&input, candidates.len(), best_only, &mut self.cache)?;
            self.fed.extend_from_slice(&input);
            metrics.n_draft_calls += 1;
            let (c, confidence) = match best {
                Some(token) => {
                    ensure!(best_only, "a draft step returned its greedy token alone where the round reads its row");
                    // The rule reads no confidence (`StopPolicy::reads_draft`).
                    (Candidate { token, q: Vec::new(), q_token: 1.0, ngram: None }, f32::NAN)
                }
                None => {
                    ROWS_READ.fetch_add(1, Ordering::Relaxed);
                    draw_candidate(&logits, sampling, streams, committed.len() + candidates.len(), pick)
                }
            };
            metrics.draft_time += t.elapsed();
            let Some(stop) =
                ask_policy(policy, &c, confidence, &logits, &hidden, candidates.len(), keep_first, eos, max)?
            else {
                return Ok(candidates);
            };
            input = vec![c.token];
            candidates.push(c);
            if stop {
                return Ok(candidates);
            }
        }
    }
}

/// A candidate drawn from a draft model's scores `logits` for absolute `position`, as every
/// model drafter draws it: the argmax when greedy (q one-hot), else from the warped `q` with the
/// position's draft stream (the coupled draw under coupled draws; or its argmax,
/// [`Pick::Argmax`]). Returns it with the confidence
/// the policies read.
pub(crate) fn draw_candidate(
    logits: &[f32],
    sampling: &SamplingConfig,
    streams: Streams,
    position: usize,
    pick: Pick,
) -> (Candidate, f32) {
    if sampling.is_greedy() {
        let token = argmax(logits);
        return (Candidate { token, q: Vec::new(), q_token: 1.0, ngram: None }, top_probability(logits, token));
    }
    let q = sampling.probabilities(logits);
    let token = match pick {
        Pick::Sample if streams.draws() == Draws::Coupled => coupled_pick(&q, &mut streams.draft(position)),
        Pick::Sample => sample_from(&q, &mut streams.draft(position)),
        Pick::Argmax => argmax(&q),
    };
    let q_token = q[token as usize];
    (Candidate { token, q_token, q, ngram: None }, q_token)
}

/// Asks `policy` about candidate `c` (drawn from `logits`; `hidden` the draft's state it came
/// from), the round's `drafted + 1`-th: `None` when it is dropped (the round ends before it),
/// else whether the round stops after it (the policy, an EOS, or `max` candidates).
#[allow(clippy::too_many_arguments)]
pub(crate) fn ask_policy(
    policy: &mut dyn StopPolicy,
    c: &Candidate,
    confidence: f32,
    logits: &[f32],
    hidden: &[f32],
    drafted: usize,
    keep_first: bool,
    eos: &[u32],
    max: usize,
) -> Result<Option<bool>> {
    let step = DraftStep {
        index: drafted + 1,
        token: c.token,
        q_token: c.q_token,
        confidence,
        ngram: None,
        stats: LazyStats::of_logits(logits, c.token),
        hidden: HiddenState::Vector(hidden),
    };
    let decision = policy.decide(&step)?;
    if decision == Decision::Drop && !(keep_first && drafted == 0) {
        return Ok(None);
    }
    Ok(Some(decision != Decision::Continue || eos.contains(&c.token) || drafted + 1 >= max))
}

/// The plain drafter: the draft model decodes autoregressively with its own KV cache. Where
/// the draft records its calls (GGUF blocks on one GPU), each step is a replay of the call
/// recorded for its row count (`generate::RecordedSteps`: the plain forward's results).
pub struct PlainDrafter<'m> {
    model: &'m Transformer,
    state: DraftCache,
    recorded: Option<RecordedSteps>,
}

impl<'m> PlainDrafter<'m> {
    pub fn new(model: &'m Transformer) -> Self {
        Self { model, state: DraftCache::new(model), recorded: RecordedSteps::when_possible(model) }
    }

    pub fn cache_len(&self) -> usize {
        self.state.cache.len()
    }
}

impl Drafter for PlainDrafter<'_> {
    fn draft(&mut self, round: DraftRound<'_>) -> Result<Vec<Candidate>> {
        if round.max == 0 {
            return Ok(Vec::new());
        }
        let start = self.state.resume_at(round.committed);
        let (model, recorded) = (self.model, &mut self.recorded);
        self.state.draft(round, start, Pick::Sample, |tokens, _, best_only, cache| match recorded.as_mut() {
            Some(r) if tokens.len() <= r.max_rows() && best_only => {
                let best = r.best(model, tokens, cache)?;
                Ok(LastPosition::best(*best.last().expect("a step of at least one token")))
            }
            Some(r) if tokens.len() <= r.max_rows() => {
                let (logits, hidden) = r.last(model, tokens, cache)?;
                Ok(LastPosition { logits, hidden, best: None })
            }
            _ if best_only => model.forward(tokens, cache).map(LastPosition::best_of),
            _ => model.forward(tokens, cache).map(LastPosition::of),
        })
    }

    fn rollback(&mut self, valid: usize) {
        self.state.rollback(valid);
    }
}

/// How a sampling drafter picks its candidate from the warped `q`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Pick {
    /// A draw from `q`: what rejection sampling's min(1, p/q) test assumes (lossless).
    Sample,
    /// The argmax of `q`, still reported with `q` (EasySpec's reference code): the verifier's
    /// test then assumes a draw that never happened, and the output is not the target's
    /// distribution. Exists only to show that in a test.
    Argmax,
}
