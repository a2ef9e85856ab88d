//! For the tree drafters: verify the prefix of each tree (likeliest nodes first) that maximises
//! the expected tokens per unit of time at the device's price of a verification row and of a
//! draft level, the drafter's estimates scaled to the request's acceptance so far. At most
//! `depth` levels.

use super::{Flag, HeadBinding, Partners, PolicyFamily, PolicyFlags, Reads, check_max};
use anyhow::{Result, ensure};
use serde::{Deserialize, Serialize};
use specx_decoder::speculative::{StopPolicy, TreePricePolicy};

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct TreePrice {
    pub depth: usize,
    /// A verification row's cost in one-row target calls.
    pub row_cost: f64,
    /// A draft level's cost in one-row target calls.
    pub draft_cost: f64,
}

/// `policies.tree_price = { depth = [24], row_costs = [0.11], draft_costs = [0.0] }`: every
/// combination (`draft_costs` defaults to [0.0]).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TreePricePolicies {
    pub depth: Vec<usize>,
    pub row_costs: Vec<f64>,
    #[serde(default = "no_draft_cost")]
    pub draft_costs: Vec<f64>,
}

fn no_draft_cost() -> Vec<f64> {
    vec![0.0]
}

/// The tree drafters this policy sizes.
const TREE_DRAFTERS: [&str; 2] = ["suffix", "tree"];

impl PolicyFamily for TreePrice {
    const NAME: &'static str = "tree-price";
    const HELP: &'static str = "For the tree drafters (suffix, tree): verify the likeliest nodes while they pay for their rows, a row costing --row-cost one-row target calls [this machine's, stored by specx bench, else 0.11] and a draft level --draft-cost [0]; at most --k levels [4]";
    const READS: Reads = Reads::TreeEstimates;
    const FLAGS: &'static [Flag] = &[Flag::K, Flag::RowCost, Flag::DraftCost];
    type Grid = TreePricePolicies;

    fn key(&self) -> String {
        format!("tree-price row={} draft={} K={}", self.row_cost, self.draft_cost, self.depth)
    }
    fn max_candidates(&self) -> usize {
        self.depth
    }
    fn check(&self, partners: Partners) -> Result<()> {
        check_max(self.depth)?;
        ensure!(
            self.row_cost >= 0.0 && self.row_cost.is_finite() && self.draft_cost >= 0.0 && self.draft_cost.is_finite(),
            "row and draft costs must be non-negative numbers"
        );
        ensure!(
            TREE_DRAFTERS.contains(&partners.drafter) && partners.scheduler == "sequential",
            "the tree-price policy sizes the trees of the suffix and tree drafters under the sequential scheduler (got the {} drafter under {})",
            partners.drafter,
            partners.scheduler
        );
        Ok(())
    }
    fn build(&self, _: HeadBinding) -> Result<Box<dyn StopPolicy>> {
        Ok(Box::new(TreePricePolicy::new(self.depth, self.row_cost, self.draft_cost)))
    }
    fn from_flags(f: &PolicyFlags) -> Result<Self> {
        Ok(Self {
            depth: f.k().unwrap_or(4),
            row_cost: f.row_cost().unwrap_or(crate::common::row_cost::DEFAULT_ROW_COST),
            draft_cost: f.draft_cost().unwrap_or(0.0),
        })
    }
    fn settings(g: &TreePricePolicies) -> Result<Vec<Self>> {
        let mut out = Vec::new();
        for &depth in &g.depth {
            for &row_cost in &g.row_costs {
                out.extend(g.draft_costs.iter().map(|&draft_cost| Self { depth, row_cost, draft_cost }));
            }
        }
        Ok(out)
    }
    fn grid_lists(g: &TreePricePolicies) -> Vec<(&'static str, usize)> {
        vec![("depth", g.depth.len()), ("row_costs", g.row_costs.len()), ("draft_costs", g.draft_costs.len())]
    }
}
