//! Prompt lookup when the text's last n tokens occurred before, else the draft model.

use super::lookup::{Lookup, LookupDrafters};
use super::{DraftModels, DrafterFamily, DrafterFlag, DrafterFlags};
use crate::method::policy::PolicySpec;
use anyhow::Result;
use serde::{Deserialize, Serialize};
use specx_decoder::DraftTransform;
use specx_decoder::speculative::{Drafter, HybridDrafter};

/// The lookup's n-gram range; the draft model fills in where nothing matches.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(transparent)]
pub struct Hybrid(pub Lookup);

impl DrafterFamily for Hybrid {
    const NAME: &'static str = "hybrid";
    const HELP: &'static str = "Prompt lookup when the text's last n tokens occurred before, else the draft model";
    const FLAGS: &'static [DrafterFlag] = Lookup::FLAGS;
    type Grid = LookupDrafters;

    fn key(&self, body: String) -> String {
        format!("lookup+draft n={}..{} | {body}", self.0.ngram_min, self.0.ngram_max)
    }
    fn check(&self, policy: &PolicySpec, _: &DraftTransform) -> Result<()> {
        self.0.check_lookup(policy)
    }
    fn build<'m>(&self, models: DraftModels<'m>) -> Result<Box<dyn Drafter + 'm>> {
        Ok(Box::new(HybridDrafter::new(self.0.drafter()?, models.draft()?)))
    }
    fn from_flags(f: &DrafterFlags) -> Result<Self> {
        Ok(Self(Lookup::with_flags(f)))
    }
    fn settings(g: &LookupDrafters) -> Vec<Self> {
        g.ranges().map(Self).collect()
    }
    fn grid_lists(g: &LookupDrafters) -> Vec<(&'static str, usize)> {
        vec![("ngrams", g.ngrams.len())]
    }
}
