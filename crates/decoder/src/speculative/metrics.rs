//! The per-request metrics of DESIGN.md, identical for every method.

use serde::Serialize;
use std::time::Duration;

/// Counters and timings of one request.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct RequestMetrics {
    /// New tokens, EOS included, prompt excluded.
    pub n_generated: usize,
    /// Target forward passes, prefill included.
    pub n_target_calls: usize,
    /// Draft forward passes (calibration passes included, for drafters that have them).
    pub n_draft_calls: usize,
    /// Calibrating draft forwards (EasySpec's bonus calibration: an exact forward over the
    /// draft cache's inexact entries; counted in `n_draft_calls` too).
    pub n_calibrations: usize,
    /// Candidate tokens proposed.
    pub n_drafted: usize,
    /// Candidates accepted by verification.
    pub n_accepted: usize,
    /// Candidates verified up to and including the first rejection (the acceptance-rate
    /// denominator; candidates after a rejection were never tested).
    pub n_verified: usize,
    pub draft_time: Duration,
    pub target_time: Duration,
    pub total_time: Duration,
    /// Accepted candidates of every verification round, in order.
    pub accepted_per_round: Vec<usize>,
    /// Candidates proposed in every round, in order.
    pub drafted_per_round: Vec<usize>,
}

impl RequestMetrics {
    pub fn n_discarded(&self) -> usize {
        self.n_drafted - self.n_accepted
    }
    /// Time outside draft and target forwards (sampling, verification, bookkeeping).
    pub fn other_time(&self) -> Duration {
        self.total_time.saturating_sub(self.draft_time + self.target_time)
    }
    pub fn discard_rate(&self) -> f64 {
        ratio(self.n_discarded(), self.n_generated)
    }
    /// SpecDec++ eq. 5.1: target calls per generated token.
    pub fn verification_rate(&self) -> f64 {
        ratio(self.n_target_calls, self.n_generated)
    }
    pub fn tokens_per_target_call(&self) -> f64 {
        ratio(self.n_generated, self.n_target_calls)
    }
    /// Accepted / candidates verified up to and including the first rejection.
    pub fn acceptance_rate(&self) -> f64 {
        ratio(self.n_accepted, self.n_verified)
    }
    pub fn tokens_per_sec(&self) -> f64 {
        self.n_generated as f64 / self.total_time.as_secs_f64().max(1e-9)
    }
    /// The same request without its timings (the counts a greedy replay reproduces).
    pub fn counts_only(&self) -> Self {
        Self { draft_time: Duration::ZERO, target_time: Duration::ZERO, total_time: Duration::ZERO, ..self.clone() }
    }
    /// Adds another request's counters and appends its rounds (totals over a prompt set, the
    /// turns of one conversation).
    pub fn accumulate(&mut self, o: &RequestMetrics) {
        self.n_generated += o.n_generated;
        self.n_target_calls += o.n_target_calls;
        self.n_draft_calls += o.n_draft_calls;
        self.n_calibrations += o.n_calibrations;
        self.n_drafted += o.n_drafted;
        self.n_accepted += o.n_accepted;
        self.n_verified += o.n_verified;
        self.draft_time += o.draft_time;
        self.target_time += o.target_time;
        self.total_time += o.total_time;
        self.accepted_per_round.extend_from_slice(&o.accepted_per_round);
        self.drafted_per_round.extend_from_slice(&o.drafted_per_round);
    }
}

fn ratio(a: usize, b: usize) -> f64 {
    if b == 0 { 0.0 } else { a as f64 / b as f64 }
}
