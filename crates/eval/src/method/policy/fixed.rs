//! Fixed K: always `k` candidates (SpecDec, and DSI's blocks).

use super::{Flag, HeadBinding, Partners, PolicyFamily, PolicyFlags, Reads};
use anyhow::{Result, ensure};
use serde::{Deserialize, Serialize};
use specx_decoder::speculative::{FixedK, StopPolicy};

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Fixed {
    pub k: usize,
}

/// `policies.fixed = { k = [2, 4] }`: fixed K for every `k`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FixedPolicies {
    pub k: Vec<usize>,
}

impl PolicyFamily for Fixed {
    const NAME: &'static str = "fixed";
    const HELP: &'static str = "Always --k candidates [4]";
    const READS: Reads = Reads::Nothing;
    const FLAGS: &'static [Flag] = &[Flag::K];
    type Grid = FixedPolicies;

    fn key(&self) -> String {
        format!("specdec K={}", self.k)
    }
    fn family(&self) -> &'static str {
        "specdec"
    }
    fn max_candidates(&self) -> usize {
        self.k
    }
    fn check(&self, _: Partners) -> Result<()> {
        ensure!(self.k >= 1, "fixed K needs k >= 1");
        Ok(())
    }
    fn build(&self, _: HeadBinding) -> Result<Box<dyn StopPolicy>> {
        Ok(Box::new(FixedK(self.k)))
    }
    fn from_flags(f: &PolicyFlags) -> Result<Self> {
        Ok(Self { k: f.k().unwrap_or(4) })
    }
    fn settings(g: &FixedPolicies) -> Result<Vec<Self>> {
        Ok(g.k.iter().map(|&k| Self { k }).collect())
    }
    fn grid_lists(g: &FixedPolicies) -> Vec<(&'static str, usize)> {
        vec![("k", g.k.len())]
    }
}
