//! What both schedulers share: the request's options, the random streams keyed by position,
//! what a drafting round works from, and the committed sequence with the one rule that
//! extends it (candidates decided in position order).

use super::candidate::Candidate;
use super::metrics::RequestMetrics;
use super::policy::StopPolicy;
use super::tree::DraftTree;
use super::verifier::{Choice, Verdict, Verifier, child_with};
use crate::coupling::{Draws, coupled_stream, position_token};
use crate::sampling::{SamplingConfig, stream_seed};
use rand::SeedableRng;
use rand::rngs::StdRng;
use serde::{Deserialize, Serialize};

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

/// The request's randomness: one stream per (seed, absolute position, role). The draft
/// proposal at a position and the decision there each draw from their own stream, so the
/// token at a position depends only on the prefix, the two models and the seed, never on how
/// drafting was cut into rounds or blocks or on thread timing: the sequential and DSI
/// schedulers give the same tokens for the same seed. Under [`Draws::Coupled`] both roles
/// read the position's one shared noise stream.
#[derive(Clone, Copy, Debug)]
pub struct Streams {
    seed: u64,
    draws: Draws,
}

const DRAFT_STREAM: u64 = 1;
const VERIFY_STREAM: u64 = 2;

impl Streams {
    pub fn new(seed: u64) -> Self {
        Self { seed, draws: Draws::Independent }
    }

    pub fn with_draws(seed: u64, draws: Draws) -> Self {
        Self { seed, draws }
    }

    pub fn draws(&self) -> Draws {
        self.draws
    }

    /// The stream the draft's proposal at `position` is drawn from.
    pub fn draft(&self, position: usize) -> StdRng {
        self.stream(position, DRAFT_STREAM)
    }

    /// The stream of the decision at `position` (acceptance test, then the correction).
    pub fn verify(&self, position: usize) -> StdRng {
        self.stream(position, VERIFY_STREAM)
    }

    fn stream(&self, position: usize, role: u64) -> StdRng {
        match self.draws {
            Draws::Independent => StdRng::seed_from_u64(stream_seed(self.seed, position as u64, role)),
            Draws::Coupled => coupled_stream(self.seed, position),
        }
    }
}

/// What one drafting round works from, whoever schedules it: the committed sequence (or, for
/// DSI, the committed tokens and the speculative chain after them), the most candidates it
/// may propose, whether a dropped first candidate is kept anyway (DSI's tasks verify at least
/// one), the stop rule asked after each one, how candidates are drawn (candidate `i`
/// at absolute position `committed.len() + i` from that position's draft stream), the EOS
/// tokens (drafting stops at one) and the request's counters.
pub struct DraftRound<'a> {
    pub committed: &'a [u32],
    /// How many of `committed`'s tokens are the prompt (the rest is the output so far).
    pub prompt_len: usize,
    pub max: usize,
    pub keep_first: bool,
    pub policy: &'a mut dyn StopPolicy,
    pub sampling: &'a SamplingConfig,
    pub streams: Streams,
    pub eos: &'a [u32],
    pub metrics: &'a mut RequestMetrics,
}

impl DraftRound<'_> {
    /// The same round, borrowed again: a drafter that may hand the round on after trying it
    /// (the hybrid's lookup, then its draft model) drafts from this.
    pub fn reborrow(&mut self) -> DraftRound<'_> {
        DraftRound {
            committed: self.committed,
            prompt_len: self.prompt_len,
            max: self.max,
            keep_first: self.keep_first,
            policy: &mut *self.policy,
            sampling: self.sampling,
            streams: self.streams,
            eos: self.eos,
            metrics: &mut *self.metrics,
        }
    }
}

/// The prompt and the committed tokens, with the rule that extends them.
pub(crate) struct Committed<'a> {
    pub seq: Vec<u32>,
    prompt_len: usize,
    max_new_tokens: usize,
    eos: &'a [u32],
    sampling: &'a SamplingConfig,
    streams: Streams,
    /// EOS committed or the token budget reached.
    pub finished: bool,
}

/// What deciding a block of candidates did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Decided {
    pub accepted: usize,
    /// A candidate was rejected and its correction committed.
    pub corrected: bool,
}

impl<'a> Committed<'a> {
    /// A request drawn as `verifier` draws ([`Verifier::draws`]).
    pub fn new(prompt: &[u32], cfg: &'a SpecConfig, eos: &'a [u32], verifier: &dyn Verifier) -> Self {
        let streams = Streams::with_draws(cfg.seed, verifier.draws());
        Self {
            seq: prompt.to_vec(),
            prompt_len: prompt.len(),
            max_new_tokens: cfg.max_new_tokens,
            eos,
            sampling: &cfg.sampling,
            streams,
            finished: cfg.max_new_tokens == 0,
        }
    }

    pub fn eos(&self) -> &'a [u32] {
        self.eos
    }

    /// The token the target commits at the next position from its scores `p` there when no
    /// proposal can change it: greedy, or coupled draws. `None` for independent draws.
    pub fn known_token(&self, p: &[f32]) -> Option<u32> {
        position_token(p, self.sampling, self.streams.draws(), self.streams.seed, self.seq.len())
    }

    /// A drafting round after `context` (the committed tokens; for DSI, those and the
    /// speculative chain) with this request's sampling, random streams and EOS tokens.
    pub fn draft_round<'r>(
        &'r self,
        context: &'r [u32],
        max: usize,
        keep_first: bool,
        policy: &'r mut dyn StopPolicy,
        metrics: &'r mut RequestMetrics,
    ) -> DraftRound<'r> {
        DraftRound {
            committed: context,
            prompt_len: self.prompt_len,
            max,
            keep_first,
            policy,
            sampling: self.sampling,
            streams: self.streams,
            eos: self.eos,
            metrics,
        }
    }

    pub fn sampling(&self) -> &SamplingConfig {
        self.sampling
    }

    pub fn generated(&self) -> usize {
        self.seq.len() - self.prompt_len
    }

    /// Tokens the budget still allows.
    pub fn remaining(&self) -> usize {
        self.max_new_tokens - self.generated()
    }

    pub fn tokens(&self) -> &[u32] {
        &self.seq[self.prompt_len..]
    }

    pub fn push(&mut self, token: u32) {
        debug_assert!(!self.finished);
        self.seq.push(token);
        self.finished = self.eos.contains(&token) || self.generated() >= self.max_new_tokens;
    }

    /// Decides `candidates`, which continue the committed sequence, in position order:
    /// `rows[i]` is the target's scores at candidate `i`'s position. Accepted candidates are
    /// committed; the first rejected one is replaced by its correction and ends the block; so
    /// does the end of the generation. Each decision draws from its position's stream.
    pub fn decide<R: AsRef<[f32]>>(
        &mut self,
        verifier: &mut dyn Verifier,
        candidates: &[Candidate],
        rows: &[R],
    ) -> Decided {
        let mut accepted = 0;
        for (c, row) in candidates.iter().zip(rows) {
            if self.finished {
                break;
            }
            let mut rng = self.streams.verify(self.seq.len());
            match verifier.decide(c, row.as_ref(), self.sampling, &mut rng) {
                Verdict::Accept => {
                    accepted += 1;
                    self.push(c.token);
                }
                Verdict::Reject(token) => {
                    self.push(token);
                    return Decided { accepted, corrected: true };
                }
            }
        }
        Decided { accepted, corrected: false }
    }

    /// [`Self::decide`] for a verifier that decides by argmax ([`Verifier::decides_by_argmax`]),
    /// from `best`, the target's greedy token at each candidate's position: a candidate equal
    /// to it is accepted, the first other one is replaced by it. The same tokens as from the
    /// rows, without them.
    pub fn decide_best(&mut self, candidates: &[Candidate], best: &[u32]) -> Decided {
        let mut accepted = 0;
        for (c, &token) in candidates.iter().zip(best) {
            if self.finished {
                break;
            }
            self.push(token);
            if c.token != token {
                return Decided { accepted, corrected: true };
            }
            accepted += 1;
        }
        Decided { accepted, corrected: false }
    }

    /// Decides a token tree: `rows[0]` is the target's scores after the committed sequence,
    /// `rows[i + 1]` after node i. From the committed sequence down, the verifier chooses among
    /// the current node's children ([`Verifier::decide_among`], with the position's stream):
    /// an accepted child is committed and its children are decided next; a rejection commits
    /// the correction and ends the walk; so do a leaf and the end of the generation. Returns
    /// the decision and the accepted nodes, root first. A chain decides as [`Self::decide`].
    pub fn decide_tree<R: AsRef<[f32]>>(
        &mut self,
        verifier: &mut dyn Verifier,
        tree: &DraftTree,
        rows: &[R],
    ) -> (Decided, Vec<usize>) {
        let sampling = self.sampling;
        self.walk_tree(tree, |proposals, row, rng| verifier.decide_among(proposals, rows[row].as_ref(), sampling, rng))
    }

    /// [`Self::decide_tree`] for a verifier that decides by argmax
    /// ([`Verifier::decides_by_argmax`]), from `best`, the argmax of each row in the same
    /// order: the same walk and the same tokens, without the rows.
    pub fn decide_tree_best(&mut self, tree: &DraftTree, best: &[u32]) -> (Decided, Vec<usize>) {
        self.walk_tree(tree, |proposals, row, _| child_with(proposals, best[row]))
    }

    /// The walk of [`Self::decide_tree`], each node's children decided by `choose(children,
    /// row, stream)`, where `row` indexes the scores after the current node.
    fn walk_tree(
        &mut self,
        tree: &DraftTree,
        mut choose: impl FnMut(&[&Candidate], usize, &mut StdRng) -> Choice,
    ) -> (Decided, Vec<usize>) {
        let mut path = Vec::new();
        let mut node = None;
        while !self.finished {
            let children = tree.children(node);
            if children.is_empty() {
                break;
            }
            let proposals: Vec<&Candidate> = children.iter().map(|&i| &tree.node(i).candidate).collect();
            let mut rng = self.streams.verify(self.seq.len());
            match choose(&proposals, node.map_or(0, |n| n + 1), &mut rng) {
                Choice::Accept(j) => {
                    self.push(proposals[j].token);
                    path.push(children[j]);
                    node = Some(children[j]);
                }
                Choice::Reject(token) => {
                    self.push(token);
                    return (Decided { accepted: path.len(), corrected: true }, path);
                }
            }
        }
        (Decided { accepted: path.len(), corrected: false }, path)
    }
}

impl RequestMetrics {
    /// Counts a decided block of `drafted` candidates.
    pub(crate) fn record_round(&mut self, drafted: usize, d: Decided) {
        self.n_accepted += d.accepted;
        self.n_verified += d.accepted + usize::from(d.corrected);
        self.accepted_per_round.push(d.accepted);
        self.drafted_per_round.push(drafted);
    }
}
