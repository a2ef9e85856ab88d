//! Stop policies: when to stop drafting and verify.
//!
//! A policy sees each candidate as it is drafted ([`DraftStep`]: the token, the draft's
//! probabilities there, its hidden state) and answers [`Decision::Continue`], [`Decision::Stop`]
//! (verify what was drafted, this candidate included) or [`Decision::Drop`] (discard this
//! candidate and verify the ones before it: the rules that test a token before trusting it,
//! llama.cpp's `p_min` and AdaEDL). After verification it hears how the round went
//! ([`RoundOutcome`]), which the adaptive rules learn from (HF's dynamic schedule and its ROC
//! threshold, AdaEDL's threshold, a bandit over K). Every rule lives in one place and is used
//! by live decoding and by the exact greedy replay alike: the replay feeds the same policy
//! objects the draft's recorded looks ([`HiddenState::HeadScores`] stands for the hidden state
//! there). See `../shared/STOP-RULES.md` and `docs/reproductions/adaptive-drafting.md` for the
//! sources of each rule.

pub mod calibrated;
mod confidence;
mod entropy;
mod head;
mod matchrate;
mod schedule;
pub(crate) mod stats;
mod threshold_plus;
mod tree_price;

pub use calibrated::{CalibratedParams, CalibratedPolicy, CalibratedRule};
pub use confidence::{ConfidencePolicy, ConfidenceProductPolicy, PMinPolicy, RocThreshold};
pub use entropy::{AdaEdlParams, AdaEdlPolicy, SvipPolicy};
pub use head::{AcceptanceModel, HeadPolicy, HeadRule, PrecomputedHead};
pub use matchrate::MatchRatePolicy;
pub use schedule::{BanditK, DynamicK};
pub use stats::{DraftStats, HEAD_STAT_INPUTS, LazyStats};
pub use threshold_plus::{ThresholdPlusParams, ThresholdPlusPolicy};
pub use tree_price::TreePricePolicy;

use anyhow::Result;

/// The draft's hidden state at a step's input position, or (in a replay, which keeps no
/// hidden states) the replay's heads' acceptance probabilities for it, by head index.
#[derive(Clone, Copy, Debug)]
pub enum HiddenState<'a> {
    Vector(&'a [f32]),
    HeadScores(&'a [f64]),
}

/// What a policy sees after the draft produced candidate number `index` (1-based).
pub struct DraftStep<'a> {
    /// Number of candidates drafted so far this round, this one included.
    pub index: usize,
    pub token: u32,
    /// Draft probability of `token` under the warped `q` it was sampled from (1 when greedy).
    pub q_token: f32,
    /// The draft's confidence in `token`: `q_token` when sampling; when greedy (q one-hot),
    /// the probability of the argmax token under the draft's plain softmax (temperature 1).
    /// HF's confidence criterion reads this (the processed scores the token came from).
    pub confidence: f32,
    /// The n-gram size whose match proposed `token` (prompt lookup; 0 for the filler proposed
    /// where nothing matched), `None` when a draft model drew it.
    pub ngram: Option<usize>,
    /// Statistics of the draft's plain softmax (temperature 1, whole vocabulary) at the
    /// position `token` was drawn at: entropy, top-2 margin, llama.cpp's top-10 probability.
    pub stats: LazyStats<'a>,
    /// At the input position of this step: the token before `token` (the last committed token
    /// for `index == 1`). SpecDec++'s head scores the acceptance of that token, so its product
    /// lags one candidate behind the newest draft (Algorithm 1).
    pub hidden: HiddenState<'a>,
}

#[cfg(test)]
impl DraftStep<'static> {
    /// A step of a draft model's candidate number `index` with `confidence` (also its `q`
    /// probability's stand-in: 1), no n-gram, default statistics and no hidden state: what a
    /// rule's unit tests feed it, changed field by field where a rule reads more.
    pub(crate) fn at(index: usize, confidence: f32) -> Self {
        DraftStep {
            index,
            token: 0,
            q_token: 1.0,
            confidence,
            ngram: None,
            stats: super::LazyStats::known(super::DraftStats::default()),
            hidden: HiddenState::HeadScores(&[]),
        }
    }
}

/// A policy's answer after a candidate.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Decision {
    Continue,
    /// Stop; the candidate is verified.
    Stop,
    /// Stop and discard the candidate (its draft forward is spent). A round may then verify
    /// nothing (a plain target step); DSI, whose tasks verify at least one candidate, keeps a
    /// first candidate instead.
    Drop,
}

/// How a verified round went, for the policies that adapt.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct RoundOutcome {
    /// Candidates verified (after a drop, the ones before it).
    pub drafted: usize,
    pub accepted: usize,
    /// Tokens the round committed (accepted + the correction or bonus).
    pub committed: usize,
    /// Time the round took (drafting and its verification): measured when decoding, from a
    /// cost model in a replay.
    pub seconds: f64,
    /// The n-gram size whose match proposed the round's candidates (prompt lookup), `None`
    /// when a draft model drew them.
    pub ngram: Option<usize>,
}

/// Decides after each drafted candidate whether to stop drafting.
pub trait StopPolicy {
    /// Called before the first round of a request (state that lives for one request resets).
    fn begin_request(&mut self) {}
    /// Called before the first candidate of a round.
    fn begin_round(&mut self) {}
    /// Whether the rule reads the target's statistics at the last committed token
    /// ([`StopPolicy::observe_target`]); schedulers compute them only for such rules.
    fn reads_target(&self) -> bool {
        false
    }
    /// Whether [`StopPolicy::decide`] reads anything of a step but its index and token (the
    /// draft's confidence, probabilities, statistics or hidden state). A greedy model drafter
    /// whose rule reads none of them takes each candidate as the draft's argmax, computed
    /// where the logits are (on a GPU, a token id comes back instead of a row).
    fn reads_draft(&self) -> bool {
        true
    }
    /// Called before [`StopPolicy::begin_round`] with the statistics of the target's softmax
    /// (temperature 1) at the position of the last committed token, which the last
    /// verification (or the prefill) computed anyway. The sequential scheduler and the greedy
    /// replay call it; DSI drafts ahead of verification and does not.
    fn observe_target(&mut self, _last: &DraftStats) {}
    fn decide(&mut self, step: &DraftStep) -> Result<Decision>;
    /// For a tree drafter: how many of the nodes it proposes to verify. `values` are their
    /// estimated chances of acceptance in the drafter's keep order, every prefix of which is a
    /// tree. Rules that stop token by token verify them all.
    fn tree_nodes(&mut self, values: &[f64]) -> usize {
        values.len()
    }
    /// For a tree drafter that grows level by level (EAGLE-2's): whether one more level is
    /// worth its draft call, after `levels` levels whose nodes' values are `values` (in the
    /// drafter's keep order, as [`Self::tree_nodes`] sees them), the next level growing from
    /// nodes whose values are `frontier`. Rules that do not price a level grow to their depth.
    fn tree_level_pays(&mut self, values: &[f64], levels: usize, frontier: &[f64]) -> bool {
        let _ = (values, levels, frontier);
        true
    }
    /// Called after each round's verification.
    fn end_round(&mut self, _outcome: &RoundOutcome) {}
    /// Most candidates the next round may draft (constant for most rules; the dynamic
    /// schedules change it in `end_round` only).
    fn max_candidates(&self) -> usize;
}

/// The SpecDec baseline: always `k` candidates.
pub struct FixedK(pub usize);

impl StopPolicy for FixedK {
    fn decide(&mut self, step: &DraftStep) -> Result<Decision> {
        Ok(if step.index >= self.0 { Decision::Stop } else { Decision::Continue })
    }
    fn reads_draft(&self) -> bool {
        false
    }
    fn max_candidates(&self) -> usize {
        self.0
    }
}

/// `Stop` when `stop` holds, else `Continue`.
pub(crate) fn stop_if(stop: bool) -> Decision {
    if stop { Decision::Stop } else { Decision::Continue }
}
