//! Prompt lookup first, the draft model when nothing matches (or when the policy drops the
//! match's first candidate as too weak, as [`MatchRatePolicy`] does): the copy costs nothing where the
//! text repeats itself, and the draft model drafts everywhere else (llama.cpp tries its n-gram
//! speculators before its draft model the same way). The draft model's cache is fed only in its
//! own rounds: a round it drafts after lookup rounds first feeds the tokens those committed
//! (one multi-row draft forward), as any round feeds what its cache lacks.
//!
//! [`MatchRatePolicy`]: super::policy::MatchRatePolicy

use super::candidate::Candidate;
use super::drafter::{Drafter, PlainDrafter};
use super::lookup::PromptLookupDrafter;
use super::round::DraftRound;
use crate::model::Transformer;
use anyhow::Result;
use std::time::Instant;

/// [`PromptLookupDrafter`] when the text's last n tokens occurred before and the policy keeps
/// the match, else [`PlainDrafter`].
pub struct HybridDrafter<'m> {
    lookup: PromptLookupDrafter,
    model: PlainDrafter<'m>,
    /// Rounds drafted by lookup and by the draft model, for reports.
    pub rounds: [usize; 2],
    /// Matches whose first candidate the policy dropped (the draft model drafted instead).
    pub dropped_matches: usize,
}

impl<'m> HybridDrafter<'m> {
    pub fn new(lookup: PromptLookupDrafter, draft: &'m Transformer) -> Self {
        Self { lookup, model: PlainDrafter::new(draft), rounds: [0, 0], dropped_matches: 0 }
    }
}

impl Drafter for HybridDrafter<'_> {
    fn draft(&mut self, mut round: DraftRound<'_>) -> Result<Vec<Candidate>> {
        if round.max == 0 {
            return Ok(Vec::new());
        }
        let started = Instant::now();
        let (matched, found) = self.lookup.lookup(round.committed, round.max);
        if matched > 0 {
            let candidates = PromptLookupDrafter::propose(round.reborrow(), matched, found, started)?;
            // The policy dropped the match's first candidate (a weak match): the draft model
            // drafts the round instead.
            if !candidates.is_empty() {
                self.rounds[0] += 1;
                return Ok(candidates);
            }
            self.dropped_matches += 1;
        }
        self.rounds[1] += 1;
        self.model.draft(round)
    }

    /// The draft model's cache keeps the committed positions it holds (lookup keeps nothing).
    fn rollback(&mut self, valid: usize) {
        self.model.rollback(valid);
    }
}
