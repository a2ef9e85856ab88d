//! The tree's size as the adaptive decision: of the nodes a tree drafter proposes, verify the
//! number that maximises the expected tokens per unit of time, at the device's price of a
//! verification row (Sequoia's hardware-aware sizing, decided per round from the drafter's own
//! estimates instead of once per workload).
//!
//! A tree drafter estimates each node's chance of being accepted (the suffix drafter: the share
//! of the match's occurrences that continue so; the draft trees: the product of the draft's
//! probabilities along the path) and orders its nodes so that every prefix is a tree. For a
//! tree of the first n nodes, the expected accepted length is the sum of their chances (a node
//! is accepted exactly when its whole path is), so a round commits `1 + s · Σ v_i` tokens on
//! average, where `s` scales the estimates to this request's experience: accepted tokens over
//! estimated ones so far, with a prior of [`PRIOR`] tokens on 1. It costs one target call of
//! n + 1 rows, `1 + row_cost · n` one-row calls, after drafting that cost `draft_cost` one-row
//! calls per level. The policy verifies the n of the highest ratio (ties: fewer nodes).
//!
//! A drafter that grows its tree level by level asks before each level whether it pays
//! ([`StopPolicy::tree_level_pays`]): a level's nodes are children of the nodes it expands, and
//! a node's children's values add up to at most its own, so the level adds at most `s · V`
//! expected tokens (V: the expanded nodes' values) for one more draft call. It is grown when
//! that bound beats the best ratio so far times the draft call's cost,
//! `s · V > rate · draft_cost`; the tree then pays for the levels it grew, not for `depth`.

use super::{Decision, DraftStep, RoundOutcome, StopPolicy, stop_if};
use anyhow::Result;

/// Pseudo-tokens of the prior that the drafter's estimates are right (s = 1).
pub const PRIOR: f64 = 4.0;

/// Verifies the prefix of a tree that is worth its rows.
#[derive(Clone, Debug)]
pub struct TreePricePolicy {
    depth: usize,
    row_cost: f64,
    draft_cost: f64,
    /// This request's accepted tokens and the estimates of the nodes verified, so far.
    accepted: f64,
    estimated: f64,
    /// The estimate of the last round's verified nodes.
    last_estimate: f64,
    /// Levels drafted this round, when the drafter says (else `depth`).
    levels: Option<usize>,
}

impl TreePricePolicy {
    /// Trees of at most `depth` levels; a verification row costs `row_cost` one-row target
    /// calls, a draft level `draft_cost`.
    pub fn new(depth: usize, row_cost: f64, draft_cost: f64) -> Self {
        Self { depth, row_cost, draft_cost, accepted: 0.0, estimated: 0.0, last_estimate: 0.0, levels: None }
    }

    /// The prefix of `values` with the highest expected tokens per unit of time after
    /// `levels` draft levels (ties: fewer nodes), and that rate.
    fn best_prefix(&self, values: &[f64], levels: usize) -> (usize, f64) {
        let (s, drafting) = (self.scale(), 1.0 + self.draft_cost * levels as f64);
        let (mut best, mut best_rate, mut sum) = (0, 1.0 / drafting, 0.0);
        for (i, v) in values.iter().enumerate() {
            sum += v;
            let rate = (1.0 + s * sum) / (drafting + self.row_cost * (i + 1) as f64);
            if rate > best_rate {
                (best, best_rate) = (i + 1, rate);
            }
        }
        (best, best_rate)
    }

    /// The scale of the drafter's estimates: accepted over estimated tokens, with the prior.
    pub fn scale(&self) -> f64 {
        (self.accepted + PRIOR) / (self.estimated + PRIOR)
    }
}

impl StopPolicy for TreePricePolicy {
    fn begin_request(&mut self) {
        (self.accepted, self.estimated, self.last_estimate) = (0.0, 0.0, 0.0);
    }

    /// A chain drafter's candidates: `depth` of them (as fixed K).
    fn decide(&mut self, step: &DraftStep) -> Result<Decision> {
        Ok(stop_if(step.index >= self.depth))
    }

    fn begin_round(&mut self) {
        self.levels = None;
    }

    fn tree_nodes(&mut self, values: &[f64]) -> usize {
        let (best, _) = self.best_prefix(values, self.levels.unwrap_or(self.depth));
        self.last_estimate = values[..best].iter().sum();
        best
    }

    fn tree_level_pays(&mut self, values: &[f64], levels: usize, frontier: &[f64]) -> bool {
        let (_, rate) = self.best_prefix(values, levels);
        let pays = self.scale() * frontier.iter().sum::<f64>() > rate * self.draft_cost;
        self.levels = Some(levels + usize::from(pays));
        pays
    }

    fn end_round(&mut self, outcome: &RoundOutcome) {
        self.accepted += outcome.accepted as f64;
        self.estimated += self.last_estimate;
        self.last_estimate = 0.0;
    }

    fn max_candidates(&self) -> usize {
        self.depth
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn outcome(drafted: usize, accepted: usize) -> RoundOutcome {
        RoundOutcome { drafted, accepted, committed: accepted + 1, seconds: 0.0, ngram: None }
    }

    #[test]
    fn rows_are_verified_while_they_pay_for_themselves() {
        let values = [0.9, 0.8, 0.5, 0.3, 0.1, 0.05];
        // Free rows: everything; dear rows: only the likeliest.
        assert_eq!(TreePricePolicy::new(8, 0.0, 0.0).tree_nodes(&values), 6);
        assert_eq!(TreePricePolicy::new(8, 0.11, 0.0).tree_nodes(&values), 4);
        assert_eq!(TreePricePolicy::new(8, 0.5, 0.0).tree_nodes(&values), 2);
        assert_eq!(TreePricePolicy::new(8, 2.0, 0.0).tree_nodes(&values), 0, "no row is worth two calls");
        // Drafting already spent makes a row relatively cheaper.
        assert_eq!(TreePricePolicy::new(8, 0.5, 0.5).tree_nodes(&values), 4);
        assert_eq!(TreePricePolicy::new(8, 0.1, 0.0).tree_nodes(&[]), 0);
    }

    #[test]
    fn a_level_is_grown_while_its_best_case_pays_for_its_draft_call() {
        let mut p = TreePricePolicy::new(8, 0.1, 0.3);
        p.begin_round();
        let values = [0.9, 0.8, 0.7];
        // Best so far: all three, (1 + 2.4) / (1 + 0.3 * 2 + 0.3) = 1.789 a unit; a level costs
        // 0.3, so it must be able to add more than 0.537 tokens.
        assert!(p.tree_level_pays(&values, 2, &[0.7, 0.1]), "0.8 possible");
        assert!(!p.tree_level_pays(&values, 2, &[0.3, 0.2]), "0.5 possible");
        // The tree is charged the 2 levels grown, not 8: with less drafting sunk, a row is
        // relatively dearer and the last one no longer pays.
        let values = [0.9, 0.5, 0.3, 0.2, 0.12];
        let grown = p.tree_nodes(&values);
        p.begin_round();
        assert_eq!((grown, p.tree_nodes(&values)), (4, 5));
        // Free draft calls: every level that can add anything.
        let mut free = TreePricePolicy::new(8, 0.1, 0.0);
        assert!(free.tree_level_pays(&values, 5, &[0.01]));
        assert!(!free.tree_level_pays(&values, 5, &[]));
    }

    #[test]
    fn the_estimates_are_scaled_to_the_requests_acceptance() {
        let values = [0.6, 0.4, 0.3];
        let mut p = TreePricePolicy::new(8, 0.25, 0.0);
        assert_eq!(p.tree_nodes(&values), 2);
        // Nothing accepted three rounds running: the estimates shrink, and so does the tree.
        for _ in 0..3 {
            let n = p.tree_nodes(&values);
            p.end_round(&outcome(n, 0));
        }
        assert!(p.scale() < 0.65, "{}", p.scale());
        assert_eq!(p.tree_nodes(&values), 1);
        p.begin_request();
        assert_eq!(p.scale(), 1.0, "a new request starts from the prior");
    }
}
