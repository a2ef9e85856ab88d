//! The draft model decoding autoregressively with its own KV cache.

use super::{DraftModels, DrafterFamily, DrafterFlag, DrafterFlags};
use crate::method::family::NoParameters;
use crate::method::policy::PolicySpec;
use anyhow::Result;
use serde::{Deserialize, Serialize};
use specx_decoder::DraftTransform;
use specx_decoder::speculative::{Drafter, PlainDrafter};

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Plain {}

impl DrafterFamily for Plain {
    const NAME: &'static str = "plain";
    const HELP: &'static str = "The draft model decoding autoregressively";
    const FLAGS: &'static [DrafterFlag] = &[];
    type Grid = NoParameters;

    fn key(&self, body: String) -> String {
        body
    }
    fn family(&self) -> Option<&'static str> {
        None
    }
    fn check(&self, _: &PolicySpec, _: &DraftTransform) -> Result<()> {
        Ok(())
    }
    fn build<'m>(&self, models: DraftModels<'m>) -> Result<Box<dyn Drafter + 'm>> {
        Ok(Box::new(PlainDrafter::new(models.draft()?)))
    }
    fn from_flags(_: &DrafterFlags) -> Result<Self> {
        Ok(Self {})
    }
    fn settings(_: &NoParameters) -> Vec<Self> {
        vec![Self {}]
    }
    fn grid_lists(_: &NoParameters) -> Vec<(&'static str, usize)> {
        Vec::new()
    }
}
