//! HF's confidence criterion with its online ROC threshold update (from `threshold`), at most
//! `max` candidates.

use super::{Flag, HeadBinding, Partners, PolicyFamily, PolicyFlags, Reads, check_max, product};
use anyhow::{Result, ensure};
use serde::{Deserialize, Serialize};
use specx_decoder::speculative::{ConfidencePolicy, RocThreshold, StopPolicy};

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Roc {
    pub threshold: f64,
    pub max: usize,
}

/// A rule's `thresholds` x `max` (`policies.roc`, `policies.svip`).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ThresholdPolicies {
    pub thresholds: Vec<f64>,
    pub max: Vec<usize>,
}

impl ThresholdPolicies {
    pub(super) fn settings<T>(&self, make: impl Fn(f64, usize) -> T) -> Vec<T> {
        product(&self.thresholds, &self.max, make)
    }

    pub(super) fn lists(&self) -> Vec<(&'static str, usize)> {
        vec![("thresholds", self.thresholds.len()), ("max", self.max.len())]
    }
}

/// A non-negative threshold and a bound of at least one.
pub(super) fn check_open_threshold(threshold: f64, max: usize) -> Result<()> {
    ensure!(threshold >= 0.0 && threshold.is_finite(), "the threshold must be a non-negative number");
    check_max(max)
}

impl PolicyFamily for Roc {
    const NAME: &'static str = "roc";
    const HELP: &'static str =
        "HF's confidence criterion with its online ROC threshold (--threshold: the initial one [0.4], --max [20])";
    const READS: Reads = Reads::DraftDistribution;
    const FLAGS: &'static [Flag] = &[Flag::Threshold, Flag::Max];
    type Grid = ThresholdPolicies;

    fn key(&self) -> String {
        format!("roc {} [1,{}]", self.threshold, self.max)
    }
    fn max_candidates(&self) -> usize {
        self.max
    }
    fn check(&self, _: Partners) -> Result<()> {
        check_open_threshold(self.threshold, self.max)
    }
    fn build(&self, _: HeadBinding) -> Result<Box<dyn StopPolicy>> {
        Ok(Box::new(RocThreshold::new(ConfidencePolicy {
            threshold: self.threshold as f32,
            min_candidates: 1,
            max_candidates: self.max,
        })))
    }
    fn from_flags(f: &PolicyFlags) -> Result<Self> {
        Ok(Self { threshold: f.threshold().unwrap_or(0.4), max: f.max().unwrap_or(20) })
    }
    fn settings(g: &ThresholdPolicies) -> Result<Vec<Self>> {
        Ok(g.settings(|threshold, max| Self { threshold, max }))
    }
    fn grid_lists(g: &ThresholdPolicies) -> Vec<(&'static str, usize)> {
        g.lists()
    }
}
