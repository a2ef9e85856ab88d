//! Stop policies: when to stop drafting and verify.

use super::head::AcceptanceHead;
use anyhow::Result;

/// What a policy sees after the draft sampled candidate number `index` (1-based).
pub struct DraftStep<'a> {
    /// Number of candidates drafted so far this round (the newest is `token`).
    pub index: usize,
    pub token: u32,
    /// Draft probability of `token` under the warped `q` it was sampled from.
    pub q_token: f32,
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

/// SpecDec++: stop when the predicted probability that some candidate is rejected,
/// `1 - prod_i sigmoid(head(e_{i-1}))`, exceeds `threshold`, within `[min, max]` candidates.
/// Following the paper's Algorithm 1, the product after candidate `i` covers the hidden
/// states `e_0 .. e_{i-1}` (see [`DraftStep::hidden`]).
pub struct HeadPolicy {
    pub head: AcceptanceHead,
    pub threshold: f64,
    pub min_candidates: usize,
    pub max_candidates: usize,
    accept_product: f64,
}

impl HeadPolicy {
    pub fn new(head: AcceptanceHead, threshold: f64, min_candidates: usize, max_candidates: usize) -> Self {
        Self { head, threshold, min_candidates: min_candidates.max(1), max_candidates: max_candidates.max(1), accept_product: 1.0 }
    }
}

impl StopPolicy for HeadPolicy {
    fn begin_round(&mut self) {
        self.accept_product = 1.0;
    }
    fn should_stop(&mut self, step: &DraftStep) -> Result<bool> {
        self.accept_product *= self.head.accept_probability(step.hidden)?;
        if step.index >= self.max_candidates {
            return Ok(true);
        }
        Ok(step.index >= self.min_candidates && 1.0 - self.accept_product > self.threshold)
    }
    fn max_candidates(&self) -> usize {
        self.max_candidates
    }
}

/// Training-free baseline: stop when the draft's probability of its own sampled token falls
/// below `threshold` (within `[min, max]` candidates).
pub struct ConfidencePolicy {
    pub threshold: f32,
    pub min_candidates: usize,
    pub max_candidates: usize,
}

impl StopPolicy for ConfidencePolicy {
    fn should_stop(&mut self, step: &DraftStep) -> Result<bool> {
        if step.index >= self.max_candidates {
            return Ok(true);
        }
        Ok(step.index >= self.min_candidates.max(1) && step.q_token < self.threshold)
    }
    fn max_candidates(&self) -> usize {
        self.max_candidates
    }
}
