//! SpecDec++'s product rule on the draft's confidence: stop when 1 - the product of the round's
//! confidences passes `threshold` (the token is kept).

use super::confidence::{Confidence, ConfidencePolicies};
use super::{Flag, HeadBinding, Partners, PolicyFamily, PolicyFlags, Reads};
use anyhow::Result;
use serde::{Deserialize, Serialize};
use specx_decoder::speculative::{ConfidenceProductPolicy, StopPolicy};

/// The confidence rule's parameters, read as a product.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(transparent)]
pub struct ConfidenceProduct(pub Confidence);

impl PolicyFamily for ConfidenceProduct {
    const NAME: &'static str = "confidence-product";
    const HELP: &'static str = "SpecDec++'s product rule on the draft's confidence (--threshold [0.5], --min [1], --max [20]): stop when the chance that some candidate so far is rejected passes the threshold";
    const READS: Reads = Reads::DraftDistribution;
    const FLAGS: &'static [Flag] = Confidence::FLAGS;
    type Grid = ConfidencePolicies;

    fn key(&self) -> String {
        let Confidence { threshold, min, max } = &self.0;
        format!("confidence-product {threshold} [{min},{max}]")
    }
    fn max_candidates(&self) -> usize {
        self.0.max
    }
    fn check(&self, _: Partners) -> Result<()> {
        self.0.check_ranges()
    }
    fn build(&self, _: HeadBinding) -> Result<Box<dyn StopPolicy>> {
        let Confidence { threshold, min, max } = self.0;
        Ok(Box::new(ConfidenceProductPolicy::new(threshold as f32, min, max)))
    }
    fn from_flags(f: &PolicyFlags) -> Result<Self> {
        Ok(Self(Confidence::with_flags(f, 0.5)))
    }
    fn settings(g: &ConfidencePolicies) -> Result<Vec<Self>> {
        Ok(g.settings().into_iter().map(Self).collect())
    }
    fn grid_lists(g: &ConfidencePolicies) -> Vec<(&'static str, usize)> {
        g.lists()
    }
    fn threshold(&self) -> Option<f64> {
        Some(self.0.threshold)
    }
    fn bounds(&self) -> Option<[usize; 2]> {
        Some([self.0.min, self.0.max])
    }
}
