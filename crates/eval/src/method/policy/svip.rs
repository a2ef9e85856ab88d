//! SVIP: stop when sqrt(0.15 H) of the draft's distribution exceeds `threshold` (the token is
//! kept); at most `max` candidates.

use super::roc::{ThresholdPolicies, check_open_threshold};
use super::{Flag, HeadBinding, Partners, PolicyFamily, PolicyFlags, Reads};
use anyhow::Result;
use serde::{Deserialize, Serialize};
use specx_decoder::speculative::{StopPolicy, SvipPolicy};

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Svip {
    pub threshold: f64,
    pub max: usize,
}

impl PolicyFamily for Svip {
    const NAME: &'static str = "svip";
    const HELP: &'static str = "SVIP's entropy rule (--threshold [0.3], --max [40])";
    const READS: Reads = Reads::DraftDistribution;
    const FLAGS: &'static [Flag] = &[Flag::Threshold, Flag::Max];
    type Grid = ThresholdPolicies;

    fn key(&self) -> String {
        format!("svip {} [1,{}]", self.threshold, self.max)
    }
    fn max_candidates(&self) -> usize {
        self.max
    }
    fn check(&self, _: Partners) -> Result<()> {
        check_open_threshold(self.threshold, self.max)
    }
    fn build(&self, _: HeadBinding) -> Result<Box<dyn StopPolicy>> {
        Ok(Box::new(SvipPolicy { threshold: self.threshold as f32, max_candidates: self.max }))
    }
    fn from_flags(f: &PolicyFlags) -> Result<Self> {
        Ok(Self { threshold: f.threshold().unwrap_or(0.3), max: f.max().unwrap_or(40) })
    }
    fn settings(g: &ThresholdPolicies) -> Result<Vec<Self>> {
        Ok(g.settings(|threshold, max| Self { threshold, max }))
    }
    fn grid_lists(g: &ThresholdPolicies) -> Vec<(&'static str, usize)> {
        g.lists()
    }
}
