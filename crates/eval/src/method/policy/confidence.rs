//! HF transformers' confidence criterion: stop when the draft's probability of its token falls
//! below `threshold` (the token is kept), within `[min, max]` candidates. SpecDec++'s product
//! rule on the same confidences is [`super::confidence_product`].

use super::head::{PAPER_BOUNDS, paper_bounds};
use super::{Flag, HeadBinding, Partners, PolicyFamily, PolicyFlags, Reads, check_bounds, check_unit_threshold};
use anyhow::Result;
use serde::{Deserialize, Serialize};
use specx_decoder::speculative::{ConfidencePolicy, ConfidenceProductPolicy, StopPolicy};

/// A rule on the draft's confidences: each one against `threshold` (HF's), or with `PRODUCT`
/// 1 - their product over the round (SpecDec++'s rule on the draft's own confidence).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ConfidenceRule<const PRODUCT: bool> {
    pub threshold: f64,
    pub min: usize,
    pub max: usize,
}

/// HF's per-token rule.
pub type Confidence = ConfidenceRule<false>;

/// `policies.confidence = { thresholds = [0.5], bounds = [[1, 12]] }`: every threshold x bounds.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ConfidencePolicies {
    /// f64 like the head's thresholds, so a setting's key reads as written (0.7); the policy
    /// takes it as f32.
    pub thresholds: Vec<f64>,
    #[serde(default = "paper_bounds")]
    pub bounds: Vec<[usize; 2]>,
}

impl ConfidencePolicies {
    pub fn settings<const PRODUCT: bool>(&self) -> Vec<ConfidenceRule<PRODUCT>> {
        let bounds = &self.bounds;
        self.thresholds
            .iter()
            .flat_map(|&threshold| bounds.iter().map(move |&[min, max]| ConfidenceRule { threshold, min, max }))
            .collect()
    }
}

impl<const PRODUCT: bool> PolicyFamily for ConfidenceRule<PRODUCT> {
    const NAME: &'static str = if PRODUCT { "confidence-product" } else { "confidence" };
    const HELP: &'static str = if PRODUCT {
        "SpecDec++'s product rule on the draft's confidence (--threshold [0.5], --min [1], --max [20]): stop when the chance that some candidate so far is rejected passes the threshold"
    } else {
        "HF's confidence criterion (--threshold [0.4], --min [1], --max [20]): the low-confidence token is kept"
    };
    const READS: Reads = Reads::DraftDistribution;
    const FLAGS: &'static [Flag] = &[Flag::Threshold, Flag::Min, Flag::Max];
    type Grid = ConfidencePolicies;

    fn key(&self) -> String {
        format!("{} {} [{},{}]", Self::NAME, self.threshold, self.min, self.max)
    }
    fn max_candidates(&self) -> usize {
        self.max
    }
    fn check(&self, _: Partners) -> Result<()> {
        check_unit_threshold(self.threshold)?;
        check_bounds(self.min, self.max)
    }
    fn build(&self, _: HeadBinding) -> Result<Box<dyn StopPolicy>> {
        let (threshold, min, max) = (self.threshold as f32, self.min, self.max);
        Ok(if PRODUCT {
            Box::new(ConfidenceProductPolicy::new(threshold, min, max))
        } else {
            Box::new(ConfidencePolicy { threshold, min_candidates: min, max_candidates: max })
        })
    }
    fn from_flags(f: &PolicyFlags) -> Result<Self> {
        // HF transformers' defaults: assistant_confidence_threshold 0.4, 1..20 tokens.
        Ok(Self {
            threshold: f.threshold().unwrap_or(if PRODUCT { 0.5 } else { 0.4 }),
            min: f.min().unwrap_or(1),
            max: f.max().unwrap_or(PAPER_BOUNDS[1]),
        })
    }
    fn settings(g: &ConfidencePolicies) -> Result<Vec<Self>> {
        Ok(g.settings())
    }
    fn grid_lists(g: &ConfidencePolicies) -> Vec<(&'static str, usize)> {
        vec![("thresholds", g.thresholds.len()), ("bounds", g.bounds.len())]
    }
    fn threshold(&self) -> Option<f64> {
        Some(self.threshold)
    }
    fn bounds(&self) -> Option<[usize; 2]> {
        Some([self.min, self.max])
    }
}
