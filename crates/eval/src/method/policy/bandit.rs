//! A UCB bandit over the round length K in `arms`, rewarded with each round's throughput.

use super::{Flag, HeadBinding, Partners, PolicyFamily, PolicyFlags, Reads};
use anyhow::{Result, ensure};
use serde::{Deserialize, Serialize};
use specx_decoder::speculative::{BanditK, StopPolicy};

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Bandit {
    pub arms: Vec<usize>,
}

/// `policies.bandit = { arms = [[1, 2, 3, 4]] }`: every arm set.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct BanditPolicies {
    pub arms: Vec<Vec<usize>>,
}

impl PolicyFamily for Bandit {
    const NAME: &'static str = "bandit";
    const HELP: &'static str = "A UCB bandit over K (--arms [1,2,3,4])";
    const READS: Reads = Reads::Nothing;
    const FLAGS: &'static [Flag] = &[Flag::Arms];
    /// Its reward is tokens per second.
    const LEARNS_FROM_TIME: bool = true;
    type Grid = BanditPolicies;

    fn key(&self) -> String {
        format!("bandit K={}", self.arms.iter().map(usize::to_string).collect::<Vec<_>>().join(","))
    }
    fn max_candidates(&self) -> usize {
        self.arms.iter().copied().max().unwrap_or(1)
    }
    fn check(&self, _: Partners) -> Result<()> {
        ensure!(
            !self.arms.is_empty() && self.arms.iter().all(|&k| k >= 1),
            "a bandit needs arms of at least 1 candidate"
        );
        Ok(())
    }
    fn build(&self, _: HeadBinding) -> Result<Box<dyn StopPolicy>> {
        Ok(Box::new(BanditK::new(self.arms.clone(), BanditK::EXPLORATION)))
    }
    fn from_flags(f: &PolicyFlags) -> Result<Self> {
        let arms = f.arms();
        Ok(Self { arms: if arms.is_empty() { vec![1, 2, 3, 4] } else { arms.to_vec() } })
    }
    fn settings(g: &BanditPolicies) -> Result<Vec<Self>> {
        Ok(g.arms.iter().map(|arms| Self { arms: arms.clone() }).collect())
    }
    fn grid_lists(g: &BanditPolicies) -> Vec<(&'static str, usize)> {
        vec![("arms", g.arms.len())]
    }
}
