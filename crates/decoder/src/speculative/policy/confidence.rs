//! The rules that read the draft's confidence in its token: HF transformers' confidence
//! criterion (the low-confidence token is kept), with or without its online ROC threshold,
//! and llama.cpp's `p_min` (the low-confidence token is dropped).

use super::{Decision, DraftStep, RoundOutcome, StopPolicy, stop_if};
use anyhow::Result;
use serde::{Deserialize, Serialize};

/// HF transformers' `ConfidenceCriteria` (`assistant_confidence_threshold`, default 0.4 with
/// `num_assistant_tokens` 20): stop after a candidate whose confidence ([`DraftStep::confidence`])
/// is below `threshold`; the candidate is kept and verified. Within `[min, max]` candidates.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct ConfidencePolicy {
    pub threshold: f32,
    pub min_candidates: usize,
    pub max_candidates: usize,
}

impl ConfidencePolicy {
    /// HF's defaults: threshold 0.4, at most 20 candidates.
    pub const HF_THRESHOLD: f32 = 0.4;
    pub const HF_MAX: usize = 20;

    /// Whether to stop after candidate `index` whose confidence is `confidence`.
    pub fn stop(&self, index: usize, confidence: f32) -> bool {
        index >= self.max_candidates || (index >= self.min_candidates.max(1) && confidence < self.threshold)
    }
}

impl StopPolicy for ConfidencePolicy {
    fn decide(&mut self, step: &DraftStep) -> Result<Decision> {
        Ok(stop_if(self.stop(step.index, step.confidence)))
    }
    fn max_candidates(&self) -> usize {
        self.max_candidates
    }
}

/// SpecDec++'s product rule on the draft's own confidence: stop after candidate `i` when
/// `1 - prod_{j <= i} c_j > threshold`, `c_j` each candidate's [`DraftStep::confidence`] (read as
/// the chance it is accepted); within `[min, max]` candidates; the candidate is kept. With
/// [`ConfidencePolicy`] and the head's two rules it completes the comparison of signal (the
/// draft's probability or a trained head) against rule (per token or cumulative).
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct ConfidenceProductPolicy {
    pub threshold: f32,
    pub min_candidates: usize,
    pub max_candidates: usize,
    #[serde(skip)]
    product: f64,
}

impl ConfidenceProductPolicy {
    pub fn new(threshold: f32, min_candidates: usize, max_candidates: usize) -> Self {
        Self { threshold, min_candidates, max_candidates, product: 1.0 }
    }
}

impl StopPolicy for ConfidenceProductPolicy {
    fn begin_round(&mut self) {
        self.product = 1.0;
    }
    fn decide(&mut self, step: &DraftStep) -> Result<Decision> {
        self.product *= f64::from(step.confidence);
        let stop = step.index >= self.max_candidates
            || (step.index >= self.min_candidates.max(1) && 1.0 - self.product > f64::from(self.threshold));
        Ok(stop_if(stop))
    }
    fn max_candidates(&self) -> usize {
        self.max_candidates
    }
}

/// HF's confidence criterion with its online threshold update (transformers PR #34156): every
/// drafted candidate's confidence is recorded; after verification the accepted ones are
/// labelled 1 and the first rejected one 0 (later ones are never labelled); once more than 5
/// samples with both labels exist, the ROC curve of all samples of the request is computed and
/// the threshold becomes the one minimising FPR + 3 FNR (a missed acceptable token costs three
/// times a wasted draft), applied from the next round. Samples and threshold start afresh with
/// each request (HF's intended semantics per `STOP-RULES.md` §1c; carrying the threshold
/// across requests would make a replay depend on the order of its units).
#[derive(Clone, Debug)]
pub struct RocThreshold {
    pub rule: ConfidencePolicy,
    initial: f32,
    scores: Vec<f32>,
    labels: Vec<bool>,
    round: Vec<f32>,
}

impl RocThreshold {
    /// FNR's weight against FPR in the cost HF minimises.
    pub const FN_COST: f64 = 3.0;
    /// Samples needed before the first refit (HF: `len(probs) > 5`).
    pub const MIN_SAMPLES: usize = 6;

    pub fn new(rule: ConfidencePolicy) -> Self {
        Self { rule, initial: rule.threshold, scores: Vec::new(), labels: Vec::new(), round: Vec::new() }
    }

    pub fn threshold(&self) -> f32 {
        self.rule.threshold
    }
}

/// The threshold minimising `fpr + fn_cost * (1 - tpr)` when "keep drafting" is predicted for
/// scores `>= threshold`, over sklearn's `roc_curve` thresholds (+inf, then the distinct scores
/// in decreasing order; the first on ties). None unless both labels are present.
pub fn roc_threshold(scores: &[f32], labels: &[bool], fn_cost: f64) -> Option<f32> {
    let positives = labels.iter().filter(|&&l| l).count();
    let negatives = labels.len() - positives;
    if positives == 0 || negatives == 0 {
        return None;
    }
    let mut order: Vec<usize> = (0..scores.len()).collect();
    order.sort_by(|&a, &b| scores[b].total_cmp(&scores[a]));
    // Threshold +inf: nothing predicted positive, tpr = fpr = 0.
    let (mut best, mut best_cost) = (f32::INFINITY, fn_cost);
    let (mut tp, mut fp) = (0usize, 0usize);
    let mut i = 0;
    while i < order.len() {
        let s = scores[order[i]];
        while i < order.len() && scores[order[i]] == s {
            if labels[order[i]] {
                tp += 1;
            } else {
                fp += 1;
            }
            i += 1;
        }
        let cost = fp as f64 / negatives as f64 + fn_cost * (1.0 - tp as f64 / positives as f64);
        if cost < best_cost {
            (best, best_cost) = (s, cost);
        }
    }
    Some(best)
}

impl StopPolicy for RocThreshold {
    fn begin_request(&mut self) {
        self.rule.threshold = self.initial;
        self.scores.clear();
        self.labels.clear();
    }
    fn begin_round(&mut self) {
        self.round.clear();
    }
    fn decide(&mut self, step: &DraftStep) -> Result<Decision> {
        self.round.push(step.confidence);
        self.rule.decide(step)
    }
    fn end_round(&mut self, o: &RoundOutcome) {
        // The verified candidates are the first `drafted` recorded (a drop adds none here).
        let verified = &self.round[..o.drafted.min(self.round.len())];
        let labelled = (o.accepted + usize::from(o.accepted < verified.len())).min(verified.len());
        for (i, &s) in verified[..labelled].iter().enumerate() {
            self.scores.push(s);
            self.labels.push(i < o.accepted);
        }
        if self.scores.len() >= Self::MIN_SAMPLES
            && let Some(t) = roc_threshold(&self.scores, &self.labels, Self::FN_COST)
        {
            self.rule.threshold = t;
        }
    }
    fn max_candidates(&self) -> usize {
        self.rule.max_candidates
    }
}

/// llama.cpp's draft stop (`common/speculative.cpp`, draft-simple): before appending a
/// candidate, stop if the draft's top-1 probability renormalised over its 10 most likely
/// tokens is below `p_min`, and **drop** it; stop after `n_max` candidates. (llama.cpp's
/// `n_min`, which discards a whole draft shorter than it, defaults to 0 and is not modelled.)
/// The rule reads the draft's top token whichever token was sampled (llama.cpp's draft is
/// always greedy; specx samples candidates from q when decoding with temperature, as the
/// rejection test requires).
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct PMinPolicy {
    pub p_min: f32,
    pub n_max: usize,
}

impl PMinPolicy {
    /// llama.cpp's defaults from Feb 2025 (PR #11954) to May 2026: p_min 0.75, n_max 16.
    pub const LONGSTANDING: Self = Self { p_min: 0.75, n_max: 16 };
    /// Since PR #23269 (May 2026): p_min 0 (never fires), n_max 3.
    pub const CURRENT: Self = Self { p_min: 0.0, n_max: 3 };
}

impl StopPolicy for PMinPolicy {
    fn decide(&mut self, step: &DraftStep) -> Result<Decision> {
        Ok(if step.stats.get().top10_top1 < self.p_min { Decision::Drop } else { stop_if(step.index >= self.n_max) })
    }
    fn max_candidates(&self) -> usize {
        self.n_max
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn step(index: usize, confidence: f32) -> DraftStep<'static> {
        DraftStep::at(index, confidence)
    }

    #[test]
    fn the_product_rule_stops_when_the_chance_of_a_rejection_so_far_passes_the_threshold() {
        // 0.9 x 0.9 = 0.81 (1 - 0.81 = 0.19 <= 0.2), x 0.9 = 0.729 (0.271 > 0.2): stop at 3,
        // where the per-token rule at 0.8 would never stop.
        let mut p = ConfidenceProductPolicy::new(0.2, 1, 20);
        p.begin_round();
        let d: Vec<Decision> = (1..=3).map(|i| p.decide(&step(i, 0.9)).unwrap()).collect();
        assert_eq!(d, [Decision::Continue, Decision::Continue, Decision::Stop]);
        // A new round starts the product afresh; the bounds hold.
        p.begin_round();
        assert_eq!(p.decide(&step(1, 0.9)).unwrap(), Decision::Continue);
        let mut low_min = ConfidenceProductPolicy::new(0.2, 2, 20);
        assert_eq!(low_min.decide(&step(1, 0.1)).unwrap(), Decision::Continue);
        assert_eq!(low_min.decide(&step(2, 1.0)).unwrap(), Decision::Stop);
    }

    #[test]
    fn roc_threshold_minimises_fpr_plus_three_fnr() {
        // Accepted tokens score high; one rejected token at 0.3 sits among them.
        let scores = [0.9, 0.8, 0.7, 0.3, 0.35, 0.2, 0.1];
        let labels = [true, true, true, false, true, false, false];
        // Thresholds: inf (cost 3), 0.9 (fnr 3/4: 2.25), 0.8 (1.5), 0.7 (0.75), 0.35 (0),
        // 0.3 (fpr 1/3), ...: 0.35.
        assert_eq!(roc_threshold(&scores, &labels, 3.0), Some(0.35));
        // When the most confident token was rejected and misses cost little, the best is to
        // predict nothing positive: threshold +inf (stop after every first candidate).
        assert_eq!(roc_threshold(&[0.9, 0.5, 0.4, 0.3], &[false, true, false, true], 0.1), Some(f32::INFINITY));
        assert_eq!(roc_threshold(&[0.5, 0.6], &[true, true], 3.0), None);
    }
}
