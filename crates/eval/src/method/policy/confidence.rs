//! HF transformers' confidence criterion: stop when the draft's probability of its token falls
//! below `threshold` (the token is kept), within `[min, max]` candidates.

use super::head::{PAPER_BOUNDS, paper_bounds};
use super::{Flag, HeadBinding, Partners, PolicyFamily, PolicyFlags, Reads, check_bounds, check_unit_threshold};
use anyhow::Result;
use serde::{Deserialize, Serialize};
use specx_decoder::speculative::{ConfidencePolicy, StopPolicy};

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Confidence {
    pub threshold: f64,
    pub min: usize,
    pub max: usize,
}

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
    pub fn settings(&self) -> Vec<Confidence> {
        let bounds = &self.bounds;
        self.thresholds
            .iter()
            .flat_map(|&threshold| bounds.iter().map(move |&[min, max]| Confidence { threshold, min, max }))
            .collect()
    }

    pub(super) fn lists(&self) -> Vec<(&'static str, usize)> {
        vec![("thresholds", self.thresholds.len()), ("bounds", self.bounds.len())]
    }
}

impl Confidence {
    /// `default_threshold`, HF's bounds [1, 20] unless flags say otherwise.
    pub(super) fn with_flags(f: &PolicyFlags, default_threshold: f64) -> Self {
        Self {
            threshold: f.threshold().unwrap_or(default_threshold),
            min: f.min().unwrap_or(1),
            max: f.max().unwrap_or(PAPER_BOUNDS[1]),
        }
    }

    pub(super) fn check_ranges(&self) -> Result<()> {
        check_unit_threshold(self.threshold)?;
        check_bounds(self.min, self.max)
    }
}

impl PolicyFamily for Confidence {
    const NAME: &'static str = "confidence";
    const HELP: &'static str = "HF's confidence criterion (--threshold [0.4], --min [1], --max [20]): the low-confidence token is kept";
    const READS: Reads = Reads::DraftDistribution;
    const FLAGS: &'static [Flag] = &[Flag::Threshold, Flag::Min, Flag::Max];
    type Grid = ConfidencePolicies;

    fn key(&self) -> String {
        format!("confidence {} [{},{}]", self.threshold, self.min, self.max)
    }
    fn max_candidates(&self) -> usize {
        self.max
    }
    fn check(&self, _: Partners) -> Result<()> {
        self.check_ranges()
    }
    fn build(&self, _: HeadBinding) -> Result<Box<dyn StopPolicy>> {
        Ok(Box::new(ConfidencePolicy {
            threshold: self.threshold as f32,
            min_candidates: self.min,
            max_candidates: self.max,
        }))
    }
    fn from_flags(f: &PolicyFlags) -> Result<Self> {
        // HF transformers' defaults: assistant_confidence_threshold 0.4, 1..20 tokens.
        Ok(Self::with_flags(f, 0.4))
    }
    fn settings(g: &ConfidencePolicies) -> Result<Vec<Self>> {
        Ok(g.settings())
    }
    fn grid_lists(g: &ConfidencePolicies) -> Vec<(&'static str, usize)> {
        g.lists()
    }
    fn threshold(&self) -> Option<f64> {
        Some(self.threshold)
    }
    fn bounds(&self) -> Option<[usize; 2]> {
        Some([self.min, self.max])
    }
}
