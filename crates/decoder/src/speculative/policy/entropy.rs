//! The rules that read the entropy of the draft's distribution (nats, temperature 1, whole
//! vocabulary): SVIP keeps the high-entropy token, AdaEDL drops it and adapts its threshold.

use super::{Decision, DraftStep, RoundOutcome, StopPolicy, stop_if};
use anyhow::Result;
use serde::{Deserialize, Serialize};

/// SVIP (arXiv 2411.18462; Geralt-Targaryen/SVIP `vanilla-sd/eval_specbench.py`): after
/// appending a candidate, stop if `sqrt(0.15 H) > threshold`, H the entropy of the draft
/// distribution the candidate came from; the candidate is kept. At most `max` candidates.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct SvipPolicy {
    pub threshold: f32,
    pub max_candidates: usize,
}

impl SvipPolicy {
    /// The constant under the square root, hard-coded in the reference code.
    pub const C: f32 = 0.15;
    /// The reference code's defaults: threshold 0.3, at most 40 candidates per round.
    pub const DEFAULT: Self = Self { threshold: 0.3, max_candidates: 40 };
}

impl StopPolicy for SvipPolicy {
    fn decide(&mut self, step: &DraftStep) -> Result<Decision> {
        let h = step.stats.get().entropy;
        Ok(stop_if(step.index >= self.max_candidates || (Self::C * h).sqrt() > self.threshold))
    }
    fn max_candidates(&self) -> usize {
        self.max_candidates
    }
}

/// AdaEDL's constants (arXiv 2410.18351 §3.1 as read by two reimplementations: the paper body
/// was not available, see `STOP-RULES.md` §3).
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct AdaEdlParams {
    /// Initial threshold lambda (the paper sweeps 0.3-0.9).
    pub lambda: f64,
    pub gamma: f64,
    pub beta1: f64,
    pub beta2: f64,
    pub epsilon: f64,
    /// Target acceptance rate alpha.
    pub alpha: f64,
    /// Most candidates per round (the headline setting: 16).
    pub max_candidates: usize,
}

impl AdaEdlParams {
    pub const DEFAULT: Self =
        Self { lambda: 0.7, gamma: 0.2, beta1: 0.5, beta2: 0.9, epsilon: 0.01, alpha: 0.9, max_candidates: 16 };
}

/// AdaEDL: before trusting candidate `i >= 2`, estimate a lower bound on its acceptance
/// `1 - sqrt(gamma H)` from the entropy H of the distribution it was drawn from; below lambda,
/// stop and **drop** it (the first candidate is always drafted). After each round a moving
/// average of the round's acceptance ratio moves lambda up (below the target rate alpha) or
/// down (when the round did not accept `max` candidates), smoothed by beta2. State lives for
/// one request (whether the paper carries it across requests is unverified).
#[derive(Clone, Debug)]
pub struct AdaEdlPolicy {
    pub params: AdaEdlParams,
    lambda: f64,
    acceptance: f64,
}

impl AdaEdlPolicy {
    pub fn new(params: AdaEdlParams) -> Self {
        Self { params, lambda: params.lambda, acceptance: params.alpha }
    }

    pub fn lambda(&self) -> f64 {
        self.lambda
    }
}

impl StopPolicy for AdaEdlPolicy {
    fn begin_request(&mut self) {
        self.lambda = self.params.lambda;
        self.acceptance = self.params.alpha;
    }
    fn decide(&mut self, step: &DraftStep) -> Result<Decision> {
        let bound = 1.0 - (self.params.gamma * step.stats.get().entropy as f64).sqrt();
        Ok(if step.index >= 2 && bound < self.lambda {
            Decision::Drop
        } else {
            stop_if(step.index >= self.params.max_candidates)
        })
    }
    fn end_round(&mut self, o: &RoundOutcome) {
        if o.drafted == 0 {
            return;
        }
        let p = &self.params;
        self.acceptance = p.beta1 * self.acceptance + (1.0 - p.beta1) * o.accepted as f64 / o.drafted as f64;
        let target = if self.acceptance < p.alpha {
            self.lambda + p.epsilon
        } else if o.accepted != p.max_candidates {
            self.lambda - p.epsilon
        } else {
            self.lambda
        };
        self.lambda = p.beta2 * self.lambda + (1.0 - p.beta2) * target;
    }
    fn max_candidates(&self) -> usize {
        self.params.max_candidates
    }
}
