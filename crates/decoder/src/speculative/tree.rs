//! A drafting round's proposal as a token tree (SpecInfer): candidates that each continue the
//! committed sequence or another candidate. Siblings are alternatives for the same position,
//! so one target call scores every branch ([`crate::Transformer::forward_tree`]) and the
//! verification follows the branch the target accepts ([`super::round::Committed::decide_tree`]).
//! A chain, each candidate the child of the one before, is what every chain drafter proposes.

use super::candidate::Candidate;
use crate::model::HOST_KERNEL_MAX_ROWS;
use crate::tree_mask::TreeMask;
use anyhow::{Result, ensure};

/// The most nodes a drafter's tree may have: one tree call holds the last committed token and
/// the nodes, within the rows the host kernels keep row-invariant.
pub const MAX_TREE_NODES: usize = HOST_KERNEL_MAX_ROWS - 1;

/// Refuses a node cap no single tree call can verify (`drafter` names the drafter).
pub fn check_max_nodes(drafter: &str, max_nodes: usize) -> Result<()> {
    ensure!(
        (1..=MAX_TREE_NODES).contains(&max_nodes),
        "{drafter}'s max_nodes must lie in 1..={MAX_TREE_NODES} (one tree call holds the committed token and at most {MAX_TREE_NODES} nodes; got {max_nodes})"
    );
    Ok(())
}

/// One proposed token and the node it continues (`None`: the committed sequence).
#[derive(Clone, Debug)]
pub struct TreeNode {
    pub candidate: Candidate,
    pub parent: Option<usize>,
}

/// Candidates in topological order (a parent before its children; siblings in the order the
/// verifier tries them).
#[derive(Clone, Debug, Default)]
pub struct DraftTree {
    nodes: Vec<TreeNode>,
}

impl DraftTree {
    /// Each candidate the child of the one before.
    pub fn chain(candidates: Vec<Candidate>) -> Self {
        let mut tree = Self::default();
        let mut parent = None;
        for c in candidates {
            parent = Some(tree.push(c, parent));
        }
        tree
    }

    /// Adds `candidate` under `parent` (an earlier node, or `None`); returns its index.
    pub fn push(&mut self, candidate: Candidate, parent: Option<usize>) -> usize {
        assert!(parent.is_none_or(|p| p < self.nodes.len()), "a tree node's parent must come before it");
        self.nodes.push(TreeNode { candidate, parent });
        self.nodes.len() - 1
    }

    /// Keeps the first `n` nodes (a tree still: parents come first).
    pub fn truncate(&mut self, n: usize) {
        self.nodes.truncate(n);
    }

    pub fn len(&self) -> usize {
        self.nodes.len()
    }

    pub fn is_empty(&self) -> bool {
        self.nodes.is_empty()
    }

    pub fn node(&self, i: usize) -> &TreeNode {
        &self.nodes[i]
    }

    /// The children of `node` (`None`: the candidates for the next position), in order.
    pub fn children(&self, node: Option<usize>) -> Vec<usize> {
        (0..self.nodes.len()).filter(|&i| self.nodes[i].parent == node).collect()
    }

    /// Whether no node has a sibling: a chain (the empty tree included).
    pub fn is_chain(&self) -> bool {
        self.nodes.iter().enumerate().all(|(i, n)| n.parent == i.checked_sub(1))
    }

    /// The nodes' tokens in order.
    pub fn tokens(&self) -> Vec<u32> {
        self.nodes.iter().map(|n| n.candidate.token).collect()
    }

    /// The candidates in order (a chain's proposal).
    pub fn into_candidates(self) -> Vec<Candidate> {
        self.nodes.into_iter().map(|n| n.candidate).collect()
    }

    /// The deepest branch's length (0 for the empty tree).
    pub fn depth(&self) -> usize {
        let mut depths: Vec<usize> = Vec::with_capacity(self.nodes.len());
        for n in &self.nodes {
            depths.push(n.parent.map_or(1, |p| depths[p] + 1));
        }
        depths.into_iter().max().unwrap_or(0)
    }

    /// The n-gram size of the match that proposed the first candidate (what `matchrate` and
    /// the round's outcome record), if any.
    pub fn ngram(&self) -> Option<usize> {
        self.nodes.first().and_then(|n| n.candidate.ngram)
    }

    /// The mask of a verification call: row 0 the last committed token (whose scores decide
    /// the roots), row i + 1 node i.
    pub fn verification_mask(&self) -> TreeMask {
        let parents: Vec<Option<usize>> =
            std::iter::once(None).chain(self.nodes.iter().map(|n| Some(n.parent.map_or(0, |p| p + 1)))).collect();
        TreeMask::new(&parents).expect("parents come first")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn c(token: u32) -> Candidate {
        Candidate { token, q: Vec::new(), q_token: 1.0, ngram: None }
    }

    #[test]
    fn a_chain_verifies_as_one_path_after_the_last_committed_token() {
        let t = DraftTree::chain(vec![c(5), c(6), c(7)]);
        assert!(t.is_chain());
        assert_eq!(t.verification_mask(), TreeMask::chain(4));
        assert_eq!(t.depth(), 3);
    }

    #[test]
    fn branches_hang_under_the_committed_token_and_their_parents() {
        let mut t = DraftTree::default();
        let a = t.push(c(1), None);
        let b = t.push(c(2), None);
        t.push(c(3), Some(a));
        t.push(c(4), Some(b));
        assert!(!t.is_chain());
        assert_eq!(t.children(None), vec![0, 1]);
        assert_eq!(t.children(Some(1)), vec![3]);
        let m = t.verification_mask();
        assert_eq!(m.path(4), &[0, 2, 4], "node 3 (row 4) under node 1 (row 2) under the committed token");
        assert_eq!(t.depth(), 2);
    }
}
