//! SpecDec++'s rule on the newest head prediction alone: stop when the latest scored
//! candidate's predicted chance of a rejection passes `threshold`.

use super::head::{Head, HeadPolicies};
use super::{Flag, HeadBinding, Partners, PolicyFamily, PolicyFlags, Reads};
use anyhow::Result;
use serde::{Deserialize, Serialize};
use specx_decoder::speculative::StopPolicy;
use std::path::PathBuf;

/// The head rule's parameters, read per token.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(transparent)]
pub struct HeadToken(pub Head);

impl PolicyFamily for HeadToken {
    const NAME: &'static str = "head-token";
    const HELP: &'static str =
        "SpecDec++'s rule on the newest head prediction alone (--head, --threshold [0.7], --min [2], --max [20])";
    const READS: Reads = Reads::DraftHiddenState;
    const FLAGS: &'static [Flag] = Head::FLAGS;
    type Grid = HeadPolicies;

    fn key(&self) -> String {
        let Head { head, threshold, min, max } = &self.0;
        format!("head-token {head} h={threshold} [{min},{max}]")
    }
    fn max_candidates(&self) -> usize {
        self.0.max
    }
    fn check(&self, _: Partners) -> Result<()> {
        self.0.check_ranges()
    }
    fn build(&self, heads: HeadBinding) -> Result<Box<dyn StopPolicy>> {
        self.0.build_rule(heads, true)
    }
    fn from_flags(f: &PolicyFlags) -> Result<Self> {
        Ok(Self(Head::with_flags(f)))
    }
    fn settings(g: &HeadPolicies) -> Result<Vec<Self>> {
        Ok(g.settings().into_iter().map(Self).collect())
    }
    fn grid_lists(g: &HeadPolicies) -> Vec<(&'static str, usize)> {
        g.lists()
    }
    fn check_grid(g: &HeadPolicies) -> Result<()> {
        g.check_heads()
    }
    fn grid_heads(g: &HeadPolicies) -> Vec<&PathBuf> {
        g.heads.iter().collect()
    }
    fn grid_paths_mut(g: &mut HeadPolicies) -> Vec<&mut PathBuf> {
        g.heads.iter_mut().collect()
    }
    fn head(&self) -> Option<&str> {
        Some(&self.0.head)
    }
    fn threshold(&self) -> Option<f64> {
        Some(self.0.threshold)
    }
    fn bounds(&self) -> Option<[usize; 2]> {
        Some([self.0.min, self.0.max])
    }
}
