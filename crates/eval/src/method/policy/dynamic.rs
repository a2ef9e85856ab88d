//! HF's dynamic schedule: K from `initial`, +2 after a fully accepted round, -1 otherwise, at
//! most `cap`.

use super::{Flag, HeadBinding, Partners, PolicyFamily, PolicyFlags, Reads};
use anyhow::{Result, ensure};
use serde::{Deserialize, Serialize};
use specx_decoder::speculative::{DynamicK, StopPolicy};

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Dynamic {
    pub initial: usize,
    pub cap: usize,
}

/// `policies.dynamic = { initial = [5], cap = 64 }`: every initial K, all with one cap.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DynamicPolicies {
    pub initial: Vec<usize>,
    /// Largest K the schedule may reach [default 64].
    #[serde(default = "default_cap")]
    pub cap: usize,
}

fn default_cap() -> usize {
    64
}

impl PolicyFamily for Dynamic {
    const NAME: &'static str = "dynamic";
    const HELP: &'static str = "HF's dynamic schedule (--k: the initial K [5], --max: its cap [64])";
    const READS: Reads = Reads::Nothing;
    const FLAGS: &'static [Flag] = &[Flag::K, Flag::Max];
    type Grid = DynamicPolicies;

    fn key(&self) -> String {
        format!("dynamic K0={} cap={}", self.initial, self.cap)
    }
    fn max_candidates(&self) -> usize {
        self.cap
    }
    fn check(&self, _: Partners) -> Result<()> {
        ensure!(self.initial >= 1 && self.initial <= self.cap, "need 1 <= K0 <= cap");
        Ok(())
    }
    fn build(&self, _: HeadBinding) -> Result<Box<dyn StopPolicy>> {
        Ok(Box::new(DynamicK::new(self.initial, self.cap)))
    }
    fn from_flags(f: &PolicyFlags) -> Result<Self> {
        Ok(Self { initial: f.k().unwrap_or(5), cap: f.max().unwrap_or(default_cap()) })
    }
    fn settings(g: &DynamicPolicies) -> Result<Vec<Self>> {
        Ok(g.initial.iter().map(|&initial| Self { initial, cap: g.cap }).collect())
    }
    fn grid_lists(g: &DynamicPolicies) -> Vec<(&'static str, usize)> {
        vec![("initial", g.initial.len())]
    }
}
