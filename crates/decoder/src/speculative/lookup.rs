//! Prompt lookup (n-gram) drafting, as HF transformers' `prompt_lookup_num_tokens`, vLLM's
//! n-gram proposer and llama.cpp's `ngram-simple` do it: no draft model. The text's last n
//! tokens (n from `ngram_max` down to `ngram_min`, longest first) are looked for earlier in the
//! prompt and the generated text; the tokens that followed the most recent occurrence are the
//! candidates. HF takes the first occurrence from the start; the most recent one is taken here
//! because generated text that repeats tends to repeat what it just wrote.
//!
//! The proposal is a point mass: `q` is one-hot on the looked-up token (an empty
//! [`Candidate::q`] with `q_token = 1`), so the rejection sampler accepts it with the target's
//! probability `p(y)` and, after a rejection, samples from `p` without `y`, renormalised: the
//! committed token is distributed exactly as the target's. Policies see a point mass too
//! (confidence 1, entropy 0), so the rules that read the draft's probabilities never stop a
//! lookup early; fixed K, the dynamic schedule, the bandit and [`MatchRatePolicy`] (which
//! reads the matched n-gram size, [`DraftStep::ngram`]) do.
//!
//! [`MatchRatePolicy`]: super::policy::MatchRatePolicy

use super::candidate::Candidate;
use super::drafter::Drafter;
use super::policy::{Decision, DraftStats, DraftStep, HiddenState, LazyStats};
use super::round::DraftRound;
use anyhow::{Result, ensure};
use std::time::Instant;

/// What a policy sees of a looked-up token: a draft certain of it.
const POINT_MASS: DraftStats = DraftStats { token_prob: 1.0, top1: 1.0, margin: 1.0, entropy: 0.0, top10_top1: 1.0 };

/// Drafts by copying the continuation of an earlier occurrence of the text's last n tokens.
#[derive(Clone, Debug)]
pub struct PromptLookupDrafter {
    ngram_min: usize,
    ngram_max: usize,
}

impl PromptLookupDrafter {
    /// Matches of `ngram_min..=ngram_max` tokens, longest first.
    pub fn new(ngram_min: usize, ngram_max: usize) -> Result<Self> {
        ensure!(
            ngram_min >= 1 && ngram_min <= ngram_max,
            "prompt lookup needs 1 <= ngram_min <= ngram_max (got {ngram_min} and {ngram_max})"
        );
        Ok(Self { ngram_min, ngram_max })
    }

    /// The n-gram size matched and at most `max` tokens that followed the most recent earlier
    /// occurrence of `seq`'s last n tokens, the longest n first; `(0, [])` when none occurs.
    /// An occurrence may overlap the suffix itself (a period shorter than n), but it must end
    /// before the last token, so its continuation is never empty.
    pub fn lookup<'s>(&self, seq: &'s [u32], max: usize) -> (usize, &'s [u32]) {
        for n in (self.ngram_min..=self.ngram_max).rev() {
            if seq.len() <= n {
                continue;
            }
            let suffix = &seq[seq.len() - n..];
            if let Some(start) = (0..seq.len() - n).rev().find(|&j| &seq[j..j + n] == suffix) {
                let from = start + n;
                return (n, &seq[from..(from + max).min(seq.len())]);
            }
        }
        (0, &[])
    }

    /// The round's candidates from `found`, the continuation of an `ngram`-token match
    /// (drafting began at `started`), asked to the policy token by token. When `found` is
    /// empty, no candidate; a round that must propose one (`keep_first`: a sampled bonus
    /// position, a DSI task) proposes the last committed token again (reported as n-gram size
    /// 0), which rejection sampling keeps lossless like any proposal.
    pub(super) fn propose(
        round: DraftRound<'_>,
        ngram: usize,
        found: &[u32],
        started: Instant,
    ) -> Result<Vec<Candidate>> {
        let DraftRound { committed, keep_first, policy, eos, metrics, .. } = round;
        let mut proposal = found.to_vec();
        let mut ngram = ngram;
        if proposal.is_empty() && keep_first {
            proposal.extend(committed.last());
            ngram = 0;
        }
        policy.begin_round();
        let mut candidates = Vec::new();
        for token in proposal {
            let step = DraftStep {
                index: candidates.len() + 1,
                token,
                q_token: 1.0,
                confidence: 1.0,
                ngram: Some(ngram),
                stats: LazyStats::known(POINT_MASS),
                hidden: HiddenState::Vector(&[]),
            };
            let decision = policy.decide(&step)?;
            if decision == Decision::Drop && !(keep_first && candidates.is_empty()) {
                break;
            }
            candidates.push(Candidate { token, q: Vec::new(), q_token: 1.0, ngram: Some(ngram) });
            if decision != Decision::Continue || eos.contains(&token) {
                break;
            }
        }
        metrics.draft_time += started.elapsed();
        Ok(candidates)
    }
}

impl Drafter for PromptLookupDrafter {
    /// The continuation [`PromptLookupDrafter::lookup`] finds, through
    /// [`PromptLookupDrafter::propose`].
    fn draft(&mut self, round: DraftRound<'_>) -> Result<Vec<Candidate>> {
        if round.max == 0 {
            return Ok(Vec::new());
        }
        let started = Instant::now();
        let (ngram, found) = self.lookup(round.committed, round.max);
        Self::propose(round, ngram, found, started)
    }

    /// Nothing to forget: the lookup reads the committed text anew each round.
    fn rollback(&mut self, _valid: usize) {}
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lookup(min: usize, max: usize, seq: &[u32], k: usize) -> (usize, Vec<u32>) {
        let (n, found) = PromptLookupDrafter::new(min, max).unwrap().lookup(seq, k);
        (n, found.to_vec())
    }

    #[test]
    fn the_longest_n_gram_wins_and_its_most_recent_occurrence() {
        // "5 6" occurs twice (followed by 7 then by 9); "4 5 6" once, followed by 7.
        let seq = [4, 5, 6, 7, 8, 1, 5, 6, 9, 4, 5, 6];
        assert_eq!(lookup(1, 3, &seq, 3), (3, vec![7, 8, 1]));
        // Without 3-grams the most recent "5 6" wins.
        assert_eq!(lookup(1, 2, &seq, 3), (2, vec![9, 4, 5]));
    }

    #[test]
    fn a_match_at_the_end_of_the_prompt_is_cut_by_the_text_and_by_max() {
        // The only earlier "2 3" is right before the suffix: its continuation is the suffix.
        let seq = [1, 2, 3, 2, 3];
        assert_eq!(lookup(2, 2, &seq, 5), (2, vec![2, 3]));
        assert_eq!(lookup(2, 2, &seq, 1), (2, vec![2]));
    }

    #[test]
    fn overlapping_occurrences_of_a_short_period_are_found() {
        // "7 7" occurs at 0 and 1 (overlapping the suffix at 2); the most recent ends before
        // the last token.
        let seq = [7, 7, 7];
        assert_eq!(lookup(2, 2, &seq, 4), (2, vec![7]));
        assert_eq!(lookup(1, 1, &[3, 7, 7, 7], 4), (1, vec![7]));
    }

    #[test]
    fn no_match_and_too_short_texts_propose_nothing() {
        assert_eq!(lookup(1, 3, &[1, 2, 3, 4], 4), (0, vec![]));
        assert_eq!(lookup(2, 3, &[5, 5], 4), (0, vec![]));
        assert_eq!(lookup(1, 1, &[5], 4), (0, vec![]));
        assert!(PromptLookupDrafter::new(0, 2).is_err() && PromptLookupDrafter::new(3, 2).is_err());
    }
}
