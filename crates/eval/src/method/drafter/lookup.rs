//! Prompt lookup: the continuation of the most recent earlier occurrence of the text's last n
//! tokens, n from `ngram_max` down to `ngram_min`; no draft model (a point-mass proposal).

use super::{DraftModels, DrafterFamily, DrafterFlag, DrafterFlags};
use crate::method::family::either;
use crate::method::policy::{PolicyKind, PolicySpec, Reads};
use anyhow::{Result, ensure};
use serde::{Deserialize, Serialize};
use specx_decoder::DraftTransform;
use specx_decoder::speculative::{Drafter, PromptLookupDrafter};

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Lookup {
    pub ngram_min: usize,
    pub ngram_max: usize,
}

/// `drafters.lookup = { ngrams = [[1, 3]] }`: every `[ngram_min, ngram_max]`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LookupDrafters {
    pub ngrams: Vec<[usize; 2]>,
}

impl Lookup {
    pub(super) fn with_flags(f: &DrafterFlags) -> Self {
        Self { ngram_min: f.ngram_min.unwrap_or(1), ngram_max: f.ngram_max.unwrap_or(3) }
    }

    /// The n-gram range, and a policy that can stop a lookup's rounds.
    pub(super) fn check_lookup(&self, policy: &PolicySpec) -> Result<()> {
        ensure!(
            self.ngram_min >= 1 && self.ngram_min <= self.ngram_max,
            "prompt lookup needs 1 <= ngram_min <= ngram_max"
        );
        // A lookup's proposal is a point mass (probability 1, entropy 0, no hidden state): the
        // rules that read the draft's distribution would never stop it.
        let fits = |r: Reads| matches!(r, Reads::Nothing | Reads::Matches);
        let what = match policy.reads() {
            Reads::TreeEstimates => "a tree drafter's node estimates",
            _ => "the draft model's probabilities or hidden state",
        };
        ensure!(
            fits(policy.reads()),
            "the {} policy reads {what}, which prompt lookup does not have; use {}",
            policy.name(),
            either(&PolicyKind::names_reading(fits))
        );
        Ok(())
    }

    pub(super) fn drafter(&self) -> Result<PromptLookupDrafter> {
        PromptLookupDrafter::new(self.ngram_min, self.ngram_max)
    }
}

impl LookupDrafters {
    pub(super) fn ranges(&self) -> impl Iterator<Item = Lookup> + '_ {
        self.ngrams.iter().map(|&[ngram_min, ngram_max]| Lookup { ngram_min, ngram_max })
    }
}

impl DrafterFamily for Lookup {
    const NAME: &'static str = "lookup";
    const HELP: &'static str = "Prompt lookup: copies the continuation of an earlier occurrence of the text's last n tokens (--ngram-min, --ngram-max); no draft model runs. Policies: fixed, dynamic, bandit, matchrate";
    const RUNS_DRAFT_MODEL: bool = false;
    const FLAGS: &'static [DrafterFlag] = &[DrafterFlag::NgramMin, DrafterFlag::NgramMax];
    type Grid = LookupDrafters;

    fn key(&self, body: String) -> String {
        format!("lookup n={}..{} | {body}", self.ngram_min, self.ngram_max)
    }
    fn check(&self, policy: &PolicySpec, draft: &DraftTransform) -> Result<()> {
        self.check_lookup(policy)?;
        ensure!(draft.is_identity(), "prompt lookup runs no draft model, so a cheaper draft changes nothing");
        Ok(())
    }
    fn build<'m>(&self, _: DraftModels<'m>) -> Result<Box<dyn Drafter + 'm>> {
        Ok(Box::new(self.drafter()?))
    }
    fn from_flags(f: &DrafterFlags) -> Result<Self> {
        Ok(Self::with_flags(f))
    }
    fn settings(g: &LookupDrafters) -> Vec<Self> {
        g.ranges().collect()
    }
    fn grid_lists(g: &LookupDrafters) -> Vec<(&'static str, usize)> {
        vec![("ngrams", g.ngrams.len())]
    }
}
