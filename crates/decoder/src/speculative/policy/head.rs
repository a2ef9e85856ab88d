//! SpecDec++'s stop rule (Algorithm 1) over an acceptance head's predictions.

use super::{Decision, DraftStats, DraftStep, HiddenState, StopPolicy, stop_if};
use crate::speculative::acceptance_head::AcceptanceHead;
use anyhow::{Context, Result, bail};
use serde::{Deserialize, Serialize};

/// Anything that predicts the probability that a draft token is accepted from the draft's
/// hidden state at that token's position: the trained [`AcceptanceHead`], a replay's
/// precomputed scores ([`PrecomputedHead`]), or a fixed function in tests.
pub trait AcceptanceModel {
    /// The acceptance probability of the token whose hidden state is `hidden`; `stats` are
    /// those of the draft distribution that token was drawn from (None for the round's first
    /// input, the committed token, which is never scored).
    fn accept_probability(&self, hidden: HiddenState, stats: Option<&DraftStats>) -> Result<f64>;
    /// Whether it reads `stats` (else they need not be computed).
    fn reads_draft_stats(&self) -> bool {
        false
    }
}

impl AcceptanceModel for AcceptanceHead {
    fn accept_probability(&self, hidden: HiddenState, stats: Option<&DraftStats>) -> Result<f64> {
        match hidden {
            HiddenState::Vector(h) if self.reads_draft_stats() => {
                let s =
                    stats.context("this head reads the draft's statistics of the scored token, and none were given")?;
                let input: Vec<f32> = h.iter().copied().chain(s.head_inputs()).collect();
                AcceptanceHead::accept_probability(self, &input)
            }
            HiddenState::Vector(h) => AcceptanceHead::accept_probability(self, h),
            HiddenState::HeadScores(_) => bail!(
                "a head needs the draft's hidden state; this step carries precomputed scores (build the replay's policies with PrecomputedHead)"
            ),
        }
    }
    fn reads_draft_stats(&self) -> bool {
        self.input_size() > self.hidden_width()
    }
}

/// In a replay: head number `index` of the replay's head list, whose scores the replay
/// computed for every look in one batch.
#[derive(Clone, Copy, Debug)]
pub struct PrecomputedHead(pub usize);

impl AcceptanceModel for PrecomputedHead {
    /// The replay scored each look with its predecessor's statistics already.
    fn accept_probability(&self, hidden: HiddenState, _: Option<&DraftStats>) -> Result<f64> {
        match hidden {
            HiddenState::HeadScores(s) => {
                s.get(self.0).copied().with_context(|| format!("head {} is not among the {} scored", self.0, s.len()))
            }
            HiddenState::Vector(_) => bail!("a precomputed head reads scores, not hidden states"),
        }
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

/// SpecDec++: the acceptance head's predictions under [`HeadRule`]; or, with `per_token`, the
/// same rule on the newest prediction alone instead of the running product (stop when the
/// latest scored candidate's predicted chance of a rejection passes the threshold), which
/// tells a weak head from a weak product rule.
pub struct HeadPolicy<H: AcceptanceModel = AcceptanceHead> {
    pub head: H,
    pub rule: HeadRule,
    pub per_token: bool,
    accept_product: f64,
    latest: f64,
    /// The previous candidate's draft statistics (for a head that reads them).
    previous: Option<DraftStats>,
}

impl<H: AcceptanceModel> HeadPolicy<H> {
    pub fn new(head: H, rule: HeadRule) -> Self {
        Self { head, rule, per_token: false, accept_product: 1.0, latest: 1.0, previous: None }
    }

    /// The per-token rule: the newest prediction instead of the product.
    pub fn per_token(head: H, rule: HeadRule) -> Self {
        Self { per_token: true, ..Self::new(head, rule) }
    }
}

impl<H: AcceptanceModel> StopPolicy for HeadPolicy<H> {
    fn begin_round(&mut self) {
        self.accept_product = 1.0;
        self.latest = 1.0;
        self.previous = None;
    }
    fn decide(&mut self, step: &DraftStep) -> Result<Decision> {
        // Step 1's hidden state belongs to the committed token: it contributes 1. Step i's
        // belongs to candidate i - 1, drawn at the previous step.
        if step.index >= 2 {
            self.latest = self.head.accept_probability(step.hidden, self.previous.as_ref())?;
            self.accept_product *= self.latest;
        }
        if self.head.reads_draft_stats() {
            self.previous = Some(*step.stats.get());
        }
        Ok(stop_if(self.rule.stop(step.index, if self.per_token { self.latest } else { self.accept_product })))
    }
    fn max_candidates(&self) -> usize {
        self.rule.max_candidates
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::speculative::LazyStats;

    /// A head that scores every hidden state by its first value.
    struct FirstValue;

    impl AcceptanceModel for FirstValue {
        fn accept_probability(&self, hidden: HiddenState, _: Option<&DraftStats>) -> Result<f64> {
            match hidden {
                HiddenState::Vector(h) => Ok(f64::from(h[0])),
                HiddenState::HeadScores(_) => bail!("vectors only"),
            }
        }
    }

    fn run(policy: &mut HeadPolicy<FirstValue>, scores: &[f32]) -> Vec<Decision> {
        policy.begin_round();
        let rows: Vec<[f32; 1]> = scores.iter().map(|&s| [s]).collect();
        rows.iter()
            .enumerate()
            .map(|(i, h)| {
                policy
                    .decide(&DraftStep {
                        index: i + 1,
                        token: 0,
                        q_token: 1.0,
                        confidence: 1.0,
                        ngram: None,
                        stats: LazyStats::known(DraftStats::default()),
                        hidden: HiddenState::Vector(h),
                    })
                    .unwrap()
            })
            .collect()
    }

    #[test]
    fn per_token_reads_the_latest_prediction_and_the_product_all_of_them() {
        // Predictions 0.8 for candidates 1..3 (read at steps 2..4): the product passes a
        // rejection chance of 0.4 at step 4 (0.512), the latest prediction never does.
        let scores = [1.0, 0.8, 0.8, 0.8, 0.8];
        let rule = HeadRule::new(0.4, 1, 20);
        assert_eq!(
            run(&mut HeadPolicy::new(FirstValue, rule), &scores)[1..4],
            [Decision::Continue, Decision::Continue, Decision::Stop]
        );
        assert!(run(&mut HeadPolicy::per_token(FirstValue, rule), &scores).iter().all(|d| *d == Decision::Continue));
        // One low prediction stops the per-token rule at once.
        assert_eq!(run(&mut HeadPolicy::per_token(FirstValue, rule), &[1.0, 0.5])[1], Decision::Stop);
    }
}
