//! llama.cpp's `p_min`: stop and drop the token when the draft's top-10-renormalised top
//! probability is below `p_min`; at most `n_max` candidates.

use super::{Flag, HeadBinding, Partners, PolicyFamily, PolicyFlags, Reads, product};
use anyhow::{Result, ensure};
use serde::{Deserialize, Serialize};
use specx_decoder::speculative::{PMinPolicy, StopPolicy};

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct PMin {
    pub p_min: f64,
    pub n_max: usize,
}

/// `policies.pmin = { p_min = [0.75], n_max = [16] }`: every p_min x n_max.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PMinPolicies {
    pub p_min: Vec<f64>,
    pub n_max: Vec<usize>,
}

impl PolicyFamily for PMin {
    const NAME: &'static str = "pmin";
    const HELP: &'static str =
        "llama.cpp's p_min (--threshold: p_min [0.75], --max: n_max [16]): the low-confidence token is dropped";
    const READS: Reads = Reads::DraftDistribution;
    const FLAGS: &'static [Flag] = &[Flag::Threshold, Flag::Max];
    type Grid = PMinPolicies;

    fn key(&self) -> String {
        format!("pmin {} n_max={}", self.p_min, self.n_max)
    }
    fn max_candidates(&self) -> usize {
        self.n_max
    }
    fn check(&self, _: Partners) -> Result<()> {
        ensure!((0.0..=1.0).contains(&self.p_min), "p_min must be in [0, 1]");
        ensure!(self.n_max >= 1, "n_max must be at least 1");
        Ok(())
    }
    fn build(&self, _: HeadBinding) -> Result<Box<dyn StopPolicy>> {
        Ok(Box::new(PMinPolicy { p_min: self.p_min as f32, n_max: self.n_max }))
    }
    fn from_flags(f: &PolicyFlags) -> Result<Self> {
        Ok(Self { p_min: f.threshold().unwrap_or(0.75), n_max: f.max().unwrap_or(16) })
    }
    fn settings(g: &PMinPolicies) -> Result<Vec<Self>> {
        Ok(product(&g.p_min, &g.n_max, |p_min, n_max| Self { p_min, n_max }))
    }
    fn grid_lists(g: &PMinPolicies) -> Vec<(&'static str, usize)> {
        vec![("p_min", g.p_min.len()), ("n_max", g.n_max.len())]
    }
}
