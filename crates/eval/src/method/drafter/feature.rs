//! An EAGLE-style feature head (`head`: a directory, or `default` for the shipped one)
//! drafting from the target's hidden states; no draft model.

use super::{DraftModels, DrafterFamily, DrafterFlag, DrafterFlags};
use crate::method::family::{DEFAULT_HEAD, head_name};
use crate::method::policy::{PolicySpec, Reads};
use anyhow::{Context, Result, ensure};
use serde::{Deserialize, Serialize};
use specx_decoder::DraftTransform;
use specx_decoder::speculative::{Drafter, FeatureHeadDrafter};
use std::path::PathBuf;

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Feature {
    pub head: String,
}

/// `drafters.feature = { heads = ["../checkpoints/feature-head"] }`: every head directory
/// (`specx train-feature-head`).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FeatureDrafters {
    pub heads: Vec<PathBuf>,
}

impl DrafterFamily for Feature {
    const NAME: &'static str = "feature";
    const HELP: &'static str = "An EAGLE-style feature head on the target's hidden states (--feature-head); no draft model runs";
    const RUNS_DRAFT_MODEL: bool = false;
    const FLAGS: &'static [DrafterFlag] = &[DrafterFlag::FeatureHead];
    type Grid = FeatureDrafters;

    fn key(&self, body: String) -> String {
        format!("feature {} | {body}", head_name(std::path::Path::new(&self.head)))
    }
    fn check(&self, policy: &PolicySpec, draft: &DraftTransform) -> Result<()> {
        ensure!(draft.is_identity(), "the feature head runs no draft model, so a cheaper draft changes nothing");
        // An acceptance head reads the draft model's hidden states; matchrate reads n-gram
        // matches: neither exists here.
        ensure!(
            !matches!(policy.reads(), Reads::DraftHiddenState | Reads::Matches | Reads::ArOutput | Reads::TreeEstimates),
            "the {} policy needs a draft model's hidden states, n-gram matches or a tree drafter's estimates, which the feature head does not have",
            policy.name()
        );
        Ok(())
    }
    fn build<'m>(&self, models: DraftModels<'m>) -> Result<Box<dyn Drafter + 'm>> {
        let (Some(target), Some(heads)) = (models.target, models.feature_heads) else {
            anyhow::bail!("the feature head drafts from the target's hidden states: it is built with the target, not from the draft model")
        };
        let draft = heads.get(&self.head).with_context(|| format!("feature head '{}' is not loaded", self.head))?;
        Ok(Box::new(FeatureHeadDrafter::new(target, draft)))
    }
    fn from_flags(f: &DrafterFlags) -> Result<Self> {
        Ok(Self { head: f.feature_head.clone().unwrap_or_else(|| DEFAULT_HEAD.into()) })
    }
    fn settings(g: &FeatureDrafters) -> Vec<Self> {
        g.heads.iter().map(|h| Self { head: h.to_string_lossy().into_owned() }).collect()
    }
    fn grid_lists(g: &FeatureDrafters) -> Vec<(&'static str, usize)> {
        vec![("heads", g.heads.len())]
    }
    fn check_grid(g: &FeatureDrafters) -> Result<()> {
        for h in &g.heads {
            ensure!(
                h.join("feature-head.json").is_file(),
                "[[methods.grid]] feature head {} is not a feature head (no feature-head.json; `specx train-feature-head` writes one)",
                h.display()
            );
        }
        Ok(())
    }
    fn grid_paths_mut(g: &mut FeatureDrafters) -> Vec<&mut PathBuf> {
        g.heads.iter_mut().collect()
    }
}
