//! A stop rule for prompt lookup: it reads the n-gram size of the match and how often this
//! request's matches of that size were accepted.
//!
//! A looked-up candidate is a point mass, so the rules that read the draft's distribution
//! cannot tell a good match from a bad one. What tells them apart is the text itself: a
//! request that copies (a code edit, a summary quoting its source) has its matches accepted
//! again and again, one that does not has them rejected early; and a longer matched n-gram is
//! a stronger hint. The rule estimates each candidate's chance of acceptance and drafts while
//! the chance that every candidate so far is accepted stays at or above `threshold` (the
//! expected gain of one more verified row against its cost, as SpecDec++'s cumulative rule
//! weighs it):
//!
//! - a looked-up candidate from an n-gram match: this request's acceptance rate of candidates
//!   from n-gram matches, `(a_n + w r) / (a_n + j_n + w)`, where `a_n` counts accepted
//!   candidates and `j_n` rejections (the geometric model's estimate: a fully accepted round
//!   shows no rejection), shrunk with weight `w = 2` towards the rate `r` of all sizes pooled,
//!   itself `(a + 1) / (a + j + 2)` (one accepted and one rejected candidate of prior);
//! - a candidate the draft model drew (the hybrid drafter's other rounds): the draft's
//!   confidence in it ([`DraftStep::confidence`]); or, with `model_k`, those rounds draft a
//!   fixed K. A draft-model candidate costs a draft forward besides its verified row, a
//!   looked-up one only the row, so one threshold rarely suits both: on a CPU whose draft
//!   costs half a target step the hybrid's model rounds do best at the draft model's own
//!   best K.
//!
//! A first looked-up candidate whose chance is below `threshold` is dropped: the round
//! verifies nothing (a plain target step) and the hybrid drafter asks the draft model
//! instead. A dropped match teaches nothing, so a size whose rate fell below the threshold
//! would never be tried again: every [`MatchRatePolicy::PROBE_EVERY`]-th weak match of a size
//! is verified anyway, its first candidate only (a probe), and the rate can recover. The
//! estimates live for one request.

use super::{Decision, DraftStep, RoundOutcome, StopPolicy, stop_if};
use anyhow::Result;

/// Drafts while the estimated chance that every candidate so far is accepted is at least
/// `threshold`, at most `max_candidates`; draft-model rounds draft `model_k` when given.
#[derive(Clone, Debug)]
pub struct MatchRatePolicy {
    pub threshold: f64,
    pub max_candidates: usize,
    pub model_k: Option<usize>,
    /// This request's counts by n-gram size (index n; 0: a filler proposed where nothing
    /// matched).
    sizes: Vec<SizeCounts>,
    /// The chance that every candidate of this round so far is accepted.
    chance: f64,
}

/// What one n-gram size's matches did in this request.
#[derive(Clone, Copy, Debug, Default)]
struct SizeCounts {
    accepted: u64,
    rejected: u64,
    /// Weak matches dropped since the last probe.
    dropped: u64,
}

impl MatchRatePolicy {
    /// Pseudo-counts pulling a size's rate towards the pooled one.
    pub const SHRINK: f64 = 2.0;
    /// One weak match of a size in this many is verified (its first candidate) instead of
    /// dropped.
    pub const PROBE_EVERY: u64 = 4;

    pub fn new(threshold: f64, max_candidates: usize) -> Self {
        Self::with_model_k(threshold, max_candidates, None)
    }

    /// Draft-model rounds (the hybrid's) draft `model_k` candidates when given.
    pub fn with_model_k(threshold: f64, max_candidates: usize, model_k: Option<usize>) -> Self {
        Self {
            threshold,
            max_candidates: max_candidates.max(1),
            model_k: model_k.map(|k| k.max(1)),
            sizes: Vec::new(),
            chance: 1.0,
        }
    }

    /// This request's estimated acceptance rate of candidates looked up from n-gram matches.
    pub fn rate(&self, n: usize) -> f64 {
        let (all_a, all_j) = self.sizes.iter().fold((0, 0), |(a, j), s| (a + s.accepted, j + s.rejected));
        let pooled = (all_a as f64 + 1.0) / ((all_a + all_j) as f64 + 2.0);
        let s = self.sizes.get(n).copied().unwrap_or_default();
        (s.accepted as f64 + Self::SHRINK * pooled) / ((s.accepted + s.rejected) as f64 + Self::SHRINK)
    }

    /// The counts of size `n`, made when first met.
    fn size(&mut self, n: usize) -> &mut SizeCounts {
        if self.sizes.len() <= n {
            self.sizes.resize(n + 1, SizeCounts::default());
        }
        &mut self.sizes[n]
    }
}

impl StopPolicy for MatchRatePolicy {
    fn begin_request(&mut self) {
        self.sizes.clear();
    }
    fn begin_round(&mut self) {
        self.chance = 1.0;
    }
    fn decide(&mut self, step: &DraftStep) -> Result<Decision> {
        if let (None, Some(k)) = (step.ngram, self.model_k) {
            return Ok(stop_if(step.index >= k));
        }
        let p = match step.ngram {
            Some(n) => self.rate(n),
            None => f64::from(step.confidence),
        };
        self.chance *= p;
        if let (1, Some(n)) = (step.index, step.ngram)
            && self.chance < self.threshold
        {
            let size = self.size(n);
            size.dropped += 1;
            if size.dropped < Self::PROBE_EVERY {
                return Ok(Decision::Drop);
            }
            size.dropped = 0;
            return Ok(Decision::Stop);
        }
        Ok(stop_if(step.index >= self.max_candidates || self.chance < self.threshold))
    }
    fn end_round(&mut self, o: &RoundOutcome) {
        let Some(n) = o.ngram else { return };
        let size = self.size(n);
        size.accepted += o.accepted as u64;
        // A rejection shows as a correction committed after fewer accepted than drafted (the
        // end of the budget can also cut a round short, committing nothing more).
        if o.accepted < o.drafted && o.committed > o.accepted {
            size.rejected += 1;
        }
    }
    fn max_candidates(&self) -> usize {
        self.max_candidates.max(self.model_k.unwrap_or(0))
    }
}

#[cfg(test)]
mod tests {
    use super::super::HiddenState;
    use super::*;

    fn step(index: usize, ngram: Option<usize>, confidence: f32) -> DraftStep<'static> {
        DraftStep { ngram, hidden: HiddenState::Vector(&[]), ..DraftStep::at(index, confidence) }
    }

    fn round(p: &mut MatchRatePolicy, ngram: Option<usize>, confidence: f32, max: usize) -> Vec<Decision> {
        p.begin_round();
        let mut out = Vec::new();
        for i in 1..=max {
            let d = p.decide(&step(i, ngram, confidence)).unwrap();
            out.push(d);
            if d != Decision::Continue {
                break;
            }
        }
        out
    }

    fn outcome(ngram: usize, drafted: usize, accepted: usize) -> RoundOutcome {
        RoundOutcome { drafted, accepted, committed: accepted + 1, seconds: 1.0, ngram: Some(ngram) }
    }

    #[test]
    fn rates_start_at_one_half_and_follow_the_request_by_ngram_size() {
        let mut p = MatchRatePolicy::new(0.3, 16);
        p.begin_request();
        assert_eq!(p.rate(3), 0.5);
        // 0.5, then 0.25 < 0.3: two candidates, the second kept.
        assert_eq!(round(&mut p, Some(3), 1.0, 16), [Decision::Continue, Decision::Stop]);
        // Three fully accepted rounds of 8 from 3-grams: 24 accepted, no rejection.
        for _ in 0..3 {
            p.end_round(&outcome(3, 8, 8));
        }
        let pooled = 25.0 / 26.0;
        assert!((p.rate(3) - (24.0 + 2.0 * pooled) / 26.0).abs() < 1e-12);
        assert!((p.rate(1) - pooled).abs() < 1e-12, "an unseen size takes the pooled rate");
        assert_eq!(round(&mut p, Some(3), 1.0, 16).len(), 16, "a copying request drafts to the bound");
        // Unigram matches rejected at once, again and again.
        for _ in 0..10 {
            p.end_round(&outcome(1, 2, 0));
        }
        assert!(p.rate(1) < 0.3 && p.rate(3) > 0.9, "{} {}", p.rate(1), p.rate(3));
        for _ in 0..MatchRatePolicy::PROBE_EVERY - 1 {
            assert_eq!(round(&mut p, Some(1), 1.0, 16), [Decision::Drop], "a weak first match is dropped");
        }
        assert_eq!(
            round(&mut p, Some(1), 1.0, 16),
            [Decision::Stop],
            "every fourth weak match is verified, one candidate"
        );
        assert_eq!(round(&mut p, Some(1), 1.0, 16), [Decision::Drop], "and the count starts again");
        p.begin_request();
        assert_eq!(p.rate(1), 0.5, "estimates live for one request");
    }

    #[test]
    fn a_draft_model_step_reads_the_confidence_and_teaches_nothing() {
        let mut p = MatchRatePolicy::new(0.3, 16);
        p.begin_request();
        // 0.8, 0.64, 0.512, 0.41, 0.328, 0.262 < 0.3: six candidates.
        assert_eq!(round(&mut p, None, 0.8, 16).len(), 6);
        // A low-confidence first candidate is kept (the draft's forward is spent).
        assert_eq!(round(&mut p, None, 0.1, 16), [Decision::Stop]);
        p.end_round(&RoundOutcome { drafted: 4, accepted: 0, committed: 1, seconds: 1.0, ngram: None });
        assert_eq!(p.rate(2), 0.5);
        // With model_k, draft-model rounds draft exactly K whatever the confidence.
        let mut p = MatchRatePolicy::with_model_k(0.3, 16, Some(4));
        p.begin_request();
        assert_eq!(round(&mut p, None, 0.1, 16).len(), 4);
        assert_eq!(round(&mut p, None, 1.0, 16).len(), 4);
        assert_eq!(round(&mut p, Some(3), 1.0, 16), [Decision::Continue, Decision::Stop], "matches keep their rule");
        assert_eq!((p.max_candidates(), MatchRatePolicy::with_model_k(0.3, 2, Some(4)).max_candidates()), (16, 4));
    }

    #[test]
    fn a_round_cut_by_the_budget_is_no_rejection() {
        let mut p = MatchRatePolicy::new(0.3, 16);
        p.begin_request();
        p.end_round(&RoundOutcome { drafted: 4, accepted: 2, committed: 2, seconds: 1.0, ngram: Some(2) });
        assert!((p.rate(2) - (2.0 + 2.0 * 0.75) / 4.0).abs() < 1e-12);
    }
}
