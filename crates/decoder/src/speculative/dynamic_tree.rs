//! EAGLE-2's dynamic draft trees (Li et al., arXiv 2406.16858) from the draft model: the tree
//! grows level by level from the nodes the draft is most confident of, and the nodes kept for
//! verification are the most likely ones overall.
//!
//! A node's value is the product of the draft's probabilities along its path (its chance of
//! being accepted, as the draft sees it). At each level, the `top_k` nodes of the newest level
//! with the highest value are expanded: one draft tree call forwards them, each attending to
//! its ancestors that earlier levels left in the draft's cache
//! ([`crate::tree_mask::TreeMask::continuing`]), and each gets its `top_k` most likely tokens as
//! children. After the last level the `max_nodes` nodes of highest value are kept (EAGLE-2's
//! rerank); a node's value never exceeds its parent's, so the kept nodes form a tree. A policy
//! that prices rows may keep fewer ([`super::StopPolicy::tree_nodes`]: the values are the
//! nodes' estimated chances of acceptance).
//!
//! The children of a node are chosen deterministically, so each is a point mass (`q` empty):
//! the rejection sampler tries them in order against the residual (SpecInfer's multi-round
//! rule for point masses, as EAGLE's own code verifies its top-k trees), and the output keeps
//! the target's distribution at any temperature ([`super::RejectionSampler`]).
//!
//! Where this follows EAGLE-2 and where not: values come from the draft's plain softmax
//! (temperature 1) whatever the sampling settings, as in EAGLE-2; the depth is the stop
//! policy's K (the sequential scheduler's `max`); an EOS node is kept but not expanded; the
//! draft is a separate small model, not EAGLE's feature-level head; and the tree is capped at
//! `max_nodes` rows so that one verification is one tree call. Under a policy that prices
//! rows and draft calls (tree-price), a level is grown only while it can pay for its draft
//! call ([`super::StopPolicy::tree_level_pays`]), so the depth adapts per round. After verification the draft's
//! cache keeps the rows of the accepted path's expanded nodes (`KvCache::retain_rows`), so the
//! next round forwards only what it lacks, as the plain drafter does.

use super::candidate::Candidate;
use super::drafter::{DraftCache, Drafter, LastPosition, Pick};
use super::round::DraftRound;
use super::tree::DraftTree;
use crate::model::Transformer;
use crate::tree_mask::TreeMask;
use anyhow::{Result, ensure};
use std::time::Instant;

/// The shape of EAGLE-2's trees.
#[derive(Clone, Debug, PartialEq)]
pub struct DynamicTreeParams {
    /// Children per expanded node, and nodes expanded per level (EAGLE-2's `top_k`, 10).
    pub top_k: usize,
    /// The most nodes kept for verification (EAGLE-2's `total_token`, 60): the rows of one tree
    /// call besides the last committed token.
    pub max_nodes: usize,
}

impl Default for DynamicTreeParams {
    /// Four children and 16 nodes: a tree of one 17-row call, what two CPU cores verify in
    /// about three one-row steps.
    fn default() -> Self {
        Self { top_k: 4, max_nodes: 16 }
    }
}

impl DynamicTreeParams {
    pub fn check(&self) -> Result<()> {
        ensure!(self.top_k >= 1, "dynamic draft trees need top_k >= 1 (got {})", self.top_k);
        super::tree::check_max_nodes("dynamic draft trees", self.max_nodes)
    }
}

/// A node while the tree grows.
#[derive(Clone, Debug)]
struct Grown {
    token: u32,
    parent: Option<usize>,
    /// The product of the draft's probabilities from the first level to this node.
    value: f64,
    /// Its row in the draft's tree calls once expanded.
    row: Option<usize>,
}

/// Drafts EAGLE-2's dynamic trees from the draft model; as a chain drafter (DSI, and the
/// proposal at a sampled bonus position) it is the plain drafter.
pub struct DynamicTreeDrafter<'m> {
    model: &'m Transformer,
    state: DraftCache,
    params: DynamicTreeParams,
    /// The last tree's expanded rows, after the fed prefix in the cache: (token, parent row).
    expanded: Vec<(u32, Option<usize>)>,
}

impl<'m> DynamicTreeDrafter<'m> {
    pub fn new(model: &'m Transformer, params: DynamicTreeParams) -> Result<Self> {
        params.check()?;
        Ok(Self { model, state: DraftCache::new(model), params, expanded: Vec::new() })
    }

    /// Keeps the cached rows of the last tree's expanded nodes that `committed` accepted (the
    /// longest path of them that it continues with), as if forwarded in a chain: by row
    /// invariance their keys and values are a chain's. The other rows are dropped.
    fn adopt_accepted(&mut self, committed: &[u32]) {
        if self.expanded.is_empty() {
            return;
        }
        let base = self.state.fed.len();
        let mut path: Vec<usize> = Vec::new();
        for &token in committed.get(base..).unwrap_or(&[]) {
            let parent = path.last().copied();
            match self.expanded.iter().position(|&(t, p)| t == token && p == parent) {
                Some(row) => path.push(row),
                None => break,
            }
        }
        self.state.cache.retain_rows(base, &path);
        self.state.fed.extend_from_slice(&committed[base..base + path.len()]);
        self.expanded.clear();
    }

    /// Grows the tree of at most `depth` levels after `committed` (the draft's cache then holds
    /// the committed prefix and the expanded nodes' rows).
    fn grow(&mut self, round: &mut DraftRound<'_>, depth: usize) -> Result<Vec<Grown>> {
        let committed = round.committed;
        self.adopt_accepted(committed);
        let start = self.state.resume_at(committed);
        self.state.rollback(start);
        let t = Instant::now();
        let out = self.model.forward(&committed[start..], &mut self.state.cache)?;
        self.state.fed.extend_from_slice(&committed[start..]);
        round.metrics.n_draft_calls += 1;
        let mut nodes: Vec<Grown> = top_children(&out.logits_tail(1)[0], self.params.top_k)
            .into_iter()
            .map(|(token, p)| Grown { token, parent: None, value: p, row: None })
            .collect();
        let mut level: Vec<usize> = (0..nodes.len()).collect();
        // `levels` levels are grown when the loop body starts.
        for levels in 1..depth {
            let expand = to_expand(&nodes, level, round.eos, self.params.top_k);
            if expand.is_empty() {
                break;
            }
            // A level the stop policy prices may not be worth its draft call.
            let mut kept = by_value(&nodes);
            kept.truncate(self.params.max_nodes);
            let values: Vec<f64> = kept.iter().map(|&i| nodes[i].value).collect();
            let frontier: Vec<f64> = expand.iter().map(|&i| nodes[i].value).collect();
            if !round.policy.tree_level_pays(&values, levels, &frontier) {
                break;
            }
            let cached = self.expanded.len();
            for &i in &expand {
                let parent_row =
                    nodes[i].parent.map(|p| nodes[p].row.expect("a parent is expanded before its children"));
                nodes[i].row = Some(self.expanded.len());
                self.expanded.push((nodes[i].token, parent_row));
            }
            let tokens: Vec<u32> = expand.iter().map(|&i| nodes[i].token).collect();
            let row_parents: Vec<Option<usize>> = self.expanded.iter().map(|&(_, parent)| parent).collect();
            let mask = TreeMask::continuing(&row_parents, cached)?;
            let out = self.model.forward_tree(&tokens, &mask, &mut self.state.cache)?;
            round.metrics.n_draft_calls += 1;
            level = Vec::new();
            for (&i, logits) in expand.iter().zip(out.logits_tail(tokens.len())) {
                for (token, p) in top_children(&logits, self.params.top_k) {
                    level.push(nodes.len());
                    nodes.push(Grown { token, parent: Some(i), value: nodes[i].value * p, row: None });
                }
            }
        }
        round.metrics.draft_time += t.elapsed();
        Ok(nodes)
    }
}

/// The `k` most likely tokens of `logits` under the plain softmax, most likely first (ties:
/// the lower id, [`crate::sampling::rank_order`]), with their probabilities: the softmax's sum
/// in f64, in index order, as [`crate::sampling::top_probability`] sums it.
fn top_children(logits: &[f32], k: usize) -> Vec<(u32, f64)> {
    let top = crate::sampling::top_k(logits, k);
    let Some(&(_, max)) = top.first() else { return Vec::new() };
    let sum: f64 = logits.iter().map(|&l| ((l - max) as f64).exp()).sum();
    top.into_iter().map(|(id, l)| (id, ((l - max) as f64).exp() / sum)).collect()
}

/// The nodes of `level` to expand next: its `top_k` likeliest (ties: the earlier grown), an
/// EOS node never, in the order they were grown.
fn to_expand(nodes: &[Grown], level: Vec<usize>, eos: &[u32], top_k: usize) -> Vec<usize> {
    let mut expand: Vec<usize> = level.into_iter().filter(|&i| !eos.contains(&nodes[i].token)).collect();
    expand.sort_by(|&a, &b| likelier_first(nodes, a, b));
    expand.truncate(top_k);
    expand.sort_unstable();
    expand
}

/// EAGLE-2's rerank order: the nodes by value, highest first (ties: the earlier grown, so a
/// parent before its child); every prefix is a tree.
fn by_value(nodes: &[Grown]) -> Vec<usize> {
    let mut order: Vec<usize> = (0..nodes.len()).collect();
    order.sort_by(|&a, &b| likelier_first(nodes, a, b));
    order
}

/// Node `a` before node `b` when its value is higher (ties: the earlier grown).
fn likelier_first(nodes: &[Grown], a: usize, b: usize) -> std::cmp::Ordering {
    nodes[b].value.total_cmp(&nodes[a].value).then(a.cmp(&b))
}

/// The tree of the nodes `keep` (a prefix of [`by_value`]) in the order they were grown, so
/// siblings come most likely first.
fn tree_of(nodes: &[Grown], keep: &[usize]) -> DraftTree {
    let mut keep = keep.to_vec();
    keep.sort_unstable();
    let mut index = vec![None; nodes.len()];
    let mut tree = DraftTree::default();
    for &i in &keep {
        let n = &nodes[i];
        let parent = n.parent.map(|p| index[p].expect("a kept node's parent has a higher value, so it is kept"));
        let candidate = Candidate { token: n.token, q: Vec::new(), q_token: 1.0, ngram: None };
        index[i] = Some(tree.push(candidate, parent));
    }
    tree
}

impl Drafter for DynamicTreeDrafter<'_> {
    /// The plain drafter's chain: candidates drawn from the draft's `q`, asked to the policy.
    fn draft(&mut self, round: DraftRound<'_>) -> Result<Vec<Candidate>> {
        if round.max == 0 {
            return Ok(Vec::new());
        }
        self.adopt_accepted(round.committed);
        let start = self.state.resume_at(round.committed);
        let model = self.model;
        self.state
            .draft(round, start, Pick::Sample, |tokens, _, _, cache| model.forward(tokens, cache).map(LastPosition::of))
    }

    /// A tree of at most `round.max` levels and `max_nodes` nodes.
    fn draft_tree(&mut self, mut round: DraftRound<'_>) -> Result<DraftTree> {
        if round.max == 0 {
            return Ok(DraftTree::default());
        }
        round.policy.begin_round();
        let depth = round.max;
        let nodes = self.grow(&mut round, depth)?;
        let mut order = by_value(&nodes);
        order.truncate(self.params.max_nodes);
        let values: Vec<f64> = order.iter().map(|&i| nodes[i].value).collect();
        let keep = round.policy.tree_nodes(&values).min(order.len());
        Ok(tree_of(&nodes, &order[..keep]))
    }

    /// The tree's rows stay cached until the next round keeps the accepted ones; a rollback
    /// into the committed prefix drops them.
    fn rollback(&mut self, valid: usize) {
        if valid < self.state.fed.len() {
            let fed = self.state.fed.len();
            self.state.cache.truncate(fed);
            self.expanded.clear();
            self.state.rollback(valid);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sampling::top_probability;

    fn grown(parents: &[(Option<usize>, f64)]) -> Vec<Grown> {
        parents
            .iter()
            .enumerate()
            .map(|(i, &(parent, value))| Grown { token: i as u32, parent, value, row: None })
            .collect()
    }

    #[test]
    fn the_rerank_keeps_the_most_likely_nodes_as_a_tree() {
        // Roots 0 (0.6) and 1 (0.3); 0's children 2 (0.5) and 3 (0.05); 1's child 4 (0.2); 2's
        // child 5 (0.45).
        let nodes =
            grown(&[(None, 0.6), (None, 0.3), (Some(0), 0.5), (Some(0), 0.05), (Some(1), 0.2), (Some(2), 0.45)]);
        let rerank = |n: usize| tree_of(&nodes, &by_value(&nodes)[..n]);
        let t = rerank(4);
        assert_eq!(t.tokens(), vec![0, 1, 2, 5], "0.6, 0.5, 0.45, 0.3");
        assert_eq!(t.children(None), vec![0, 1]);
        assert_eq!(t.children(Some(2)), vec![3]);
        let t = rerank(2);
        assert_eq!(t.tokens(), vec![0, 2]);
        assert!(t.is_chain());
        assert!(t.node(0).candidate.q.is_empty() && t.node(0).candidate.q_token == 1.0, "point masses");
    }

    #[test]
    fn each_level_expands_its_likeliest_nodes_and_no_eos() {
        // A level of five (tokens 0..5): values 0.1, 0.5, 0.3, 0.05, 0.4; token 4 is an EOS.
        let nodes = grown(&[(None, 0.1), (None, 0.5), (None, 0.3), (None, 0.05), (None, 0.4)]);
        assert_eq!(to_expand(&nodes, (0..5).collect(), &[], 2), vec![1, 4], "the two likeliest, in grown order");
        assert_eq!(to_expand(&nodes, (0..5).collect(), &[4], 2), vec![1, 2], "the EOS node is not expanded");
        assert_eq!(to_expand(&nodes, vec![0, 3], &[], 1), vec![0], "only the level's own nodes");
        let ties = grown(&[(None, 0.2), (None, 0.2), (None, 0.2)]);
        assert_eq!(to_expand(&ties, (0..3).collect(), &[], 2), vec![0, 1], "ties: the earlier grown");
    }

    #[test]
    fn children_are_the_most_likely_tokens_first() {
        let logits = [0.0, 3.0, 1.0, 3.0, -1.0];
        let c = top_children(&logits, 3);
        assert_eq!(c.iter().map(|&(t, _)| t).collect::<Vec<_>>(), vec![1, 3, 2], "ties: the lower id");
        let sum: f64 = top_children(&logits, 9).iter().map(|&(_, p)| p).sum();
        assert!((sum - 1.0).abs() < 1e-6, "all five tokens, probabilities of the plain softmax");
        for (t, p) in top_children(&logits, 5) {
            assert_eq!(p as f32, top_probability(&logits, t), "token {t}");
        }
    }
}
