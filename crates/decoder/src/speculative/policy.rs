//! Stop policies: when to stop drafting and verify.
//!
//! Each policy is a pure rule ([`HeadRule`], [`ConfidencePolicy`], [`FixedK`]) over what the
//! drafter saw, so that replaying a recorded greedy run applies the very rule a live run
//! applies.

use super::head::AcceptanceHead;
use anyhow::Result;
use serde::{Deserialize, Serialize};

/// What a policy sees after the draft produced candidate number `index` (1-based).
pub struct DraftStep<'a> {
    /// Number of candidates drafted so far this round (the newest is `token`).
    pub index: usize,
    pub token: u32,
    /// Draft probability of `token` under the warped `q` it was sampled from (1 when greedy).
    pub q_token: f32,
    /// The draft's confidence in `token`: `q_token` when sampling; when greedy (q one-hot),
    /// the probability of the argmax token under the draft's plain softmax (temperature 1).
    pub confidence: f32,
    /// Draft final hidden state at the input position of this step: the token before `token`
    /// (the last committed token for `index == 1`). SpecDec++'s head scores the acceptance of
    /// that token, so its product lags one candidate behind the newest draft (Algorithm 1).
    pub hidden: &'a [f32],
}

/// Decides after each drafted candidate whether to stop drafting.
pub trait StopPolicy {
    /// Called before the first candidate of a round.
    fn begin_round(&mut self) {}
    /// True to stop after this candidate (it is kept and verified).
    fn should_stop(&mut self, step: &DraftStep) -> Result<bool>;
    /// Largest number of candidates this policy can ask for in one round.
    fn max_candidates(&self) -> usize;
}

/// The SpecDec baseline: always `k` candidates.
pub struct FixedK(pub usize);

impl StopPolicy for FixedK {
    fn should_stop(&mut self, step: &DraftStep) -> Result<bool> {
        Ok(step.index >= self.0)
    }
    fn max_candidates(&self) -> usize {
        self.0
    }
}

/// Anything that predicts the probability that a draft token is accepted from the draft's
/// hidden state at that token's position: the trained [`AcceptanceHead`], or a fixed
/// function in tests.
pub trait AcceptanceModel {
    fn accept_probability(&self, hidden: &[f32]) -> Result<f64>;
}

impl AcceptanceModel for AcceptanceHead {
    fn accept_probability(&self, hidden: &[f32]) -> Result<f64> {
        AcceptanceHead::accept_probability(self, hidden)
    }
}

/// SpecDec++'s stop rule (Algorithm 1), apart from where the probabilities come from.
///
/// After candidate `i` the running product is `prod_{j=1}^{i-1} P(Y_j accepted)`, the head's
/// predictions for the candidates before the newest one (the newest one's prediction needs
/// the hidden state at its own position, which only the next step computes). The first step
/// contributes 1: its hidden state is that of the last committed token, which the target
/// chose and which is never verified (the official code's `if assist_steps == 1: acc_prob = 1`).
/// Drafting stops after candidate `i` when `1 - product > threshold` and `i >= min`, or at
/// `i = max`. So the rule can never stop after one candidate (unless `max = 1`): the first
/// decision with information comes after candidate 2, and bounds `[1, max]` act as `[2, max]`.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct HeadRule {
    pub threshold: f64,
    pub min_candidates: usize,
    pub max_candidates: usize,
}

impl HeadRule {
    /// The paper's bounds: at least 2 and at most 20 candidates per round.
    pub const PAPER_MIN: usize = 2;
    pub const PAPER_MAX: usize = 20;

    /// Bounds are clamped to at least one candidate.
    pub fn new(threshold: f64, min_candidates: usize, max_candidates: usize) -> Self {
        Self { threshold, min_candidates: min_candidates.max(1), max_candidates: max_candidates.max(1) }
    }

    /// Whether to stop after candidate `index` given the running acceptance `product`.
    pub fn stop(&self, index: usize, product: f64) -> bool {
        index >= self.max_candidates || (index >= self.min_candidates && 1.0 - product > self.threshold)
    }
}

/// SpecDec++: the acceptance head's predictions under [`HeadRule`].
pub struct HeadPolicy<H: AcceptanceModel = AcceptanceHead> {
    pub head: H,
    pub rule: HeadRule,
    accept_product: f64,
}

impl<H: AcceptanceModel> HeadPolicy<H> {
    pub fn new(head: H, rule: HeadRule) -> Self {
        Self { head, rule, accept_product: 1.0 }
    }
}

impl<H: AcceptanceModel> StopPolicy for HeadPolicy<H> {
    fn begin_round(&mut self) {
        self.accept_product = 1.0;
    }
    fn should_stop(&mut self, step: &DraftStep) -> Result<bool> {
        // Step 1's hidden state belongs to the committed token: it contributes 1.
        if step.index >= 2 {
            self.accept_product *= self.head.accept_probability(step.hidden)?;
        }
        Ok(self.rule.stop(step.index, self.accept_product))
    }
    fn max_candidates(&self) -> usize {
        self.rule.max_candidates
    }
}

/// Training-free baseline: stop when the draft's confidence in its newest token
/// ([`DraftStep::confidence`]) falls below `threshold` (within `[min, max]` candidates).
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct ConfidencePolicy {
    pub threshold: f32,
    pub min_candidates: usize,
    pub max_candidates: usize,
}

impl ConfidencePolicy {
    /// Whether to stop after candidate `index` whose confidence is `confidence`.
    pub fn stop(&self, index: usize, confidence: f32) -> bool {
        index >= self.max_candidates || (index >= self.min_candidates.max(1) && confidence < self.threshold)
    }
}

impl StopPolicy for ConfidencePolicy {
    fn should_stop(&mut self, step: &DraftStep) -> Result<bool> {
        Ok(self.stop(step.index, step.confidence))
    }
    fn max_candidates(&self) -> usize {
        self.max_candidates
    }
}
