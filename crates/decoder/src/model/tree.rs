//! The tree call: one forward of a token tree's rows, each attending to the cache and its own
//! ancestors at the position of its depth (SpecInfer's tree attention), and the cache kept to
//! the path a verification accepted ([`KvCache::retain_rows`]).

use super::linear::HOST_KERNEL_MAX_ROWS;
use super::{ForwardOutput, Transformer};
use crate::cache::KvCache;
use crate::tree_mask::TreeMask;
use anyhow::{Result, ensure};
use std::sync::Arc;

/// What a tree call gives back when only part of its rows is read (a recorded call on a GPU).
pub enum TreeRows {
    /// Every row's logits.
    Scores(Vec<Vec<f32>>),
    /// Every row's greedy token.
    Best(Vec<u32>),
}

impl Transformer {
    /// Forwards the rows of a token tree after what `cache` holds: `tokens[i]` is row i of
    /// `tree` and sits at position `cache.len() + tree.depth(i)`. All rows' keys and values are
    /// appended to the cache in row order; keep the accepted path with
    /// [`KvCache::retain_rows`]. On the CPU each row's logits are bitwise those of a chain
    /// forward of its root-to-row path (the row invariance of the runtime, extended to trees).
    ///
    /// Trees of up to [`HOST_KERNEL_MAX_ROWS`] rows: longer calls would take burn's gemm on the
    /// f32 and native paths, whose rounding depends on the row count.
    pub fn forward_tree(&self, tokens: &[u32], tree: &TreeMask, cache: &mut KvCache) -> Result<ForwardOutput> {
        ensure!(!tokens.is_empty(), "a tree forward needs at least one row");
        ensure!(tokens.len() == tree.len(), "{} tokens for a tree of {} rows", tokens.len(), tree.len());
        ensure!(
            tokens.len() <= HOST_KERNEL_MAX_ROWS,
            "a tree of {} rows: tree calls take at most {HOST_KERNEL_MAX_ROWS}",
            tokens.len()
        );
        let tree = Arc::new(tree.clone());
        let hidden = self
            .hidden_states_until(&[tokens], cache, None, None, &self.sequential, 1, None, Some(&tree))?
            .expect("no cancel flag, never cancelled");
        let logits = self.logits(hidden.clone());
        Ok(ForwardOutput { logits, hidden })
    }
}
