//! EAGLE-2's dynamic draft trees from the draft model: the `top_k` most likely children of the
//! most likely nodes, level by level, of which the `max_nodes` most likely are verified in one
//! tree call. The stop policy only caps the depth.

use super::{DraftModels, DrafterFamily, DrafterFlag, DrafterFlags};
use crate::method::policy::PolicySpec;
use anyhow::Result;
use serde::{Deserialize, Serialize};
use specx_decoder::DraftTransform;
use specx_decoder::speculative::{Drafter, DynamicTreeDrafter, DynamicTreeParams};

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Tree {
    /// Children per expanded node, and nodes expanded per level.
    pub top_k: usize,
    /// The most nodes of one tree.
    pub max_nodes: usize,
}

/// `drafters.tree = { top_k = [2, 4], max_nodes = [8, 16] }`: every pair (the defaults, 4 and
/// 16, when a list is not given).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TreeDrafters {
    #[serde(default = "default_top_k")]
    pub top_k: Vec<usize>,
    #[serde(default = "default_max_nodes")]
    pub max_nodes: Vec<usize>,
}

fn default_top_k() -> Vec<usize> {
    vec![DynamicTreeParams::default().top_k]
}

fn default_max_nodes() -> Vec<usize> {
    vec![DynamicTreeParams::default().max_nodes]
}

impl Tree {
    pub fn params(&self) -> DynamicTreeParams {
        DynamicTreeParams { top_k: self.top_k, max_nodes: self.max_nodes }
    }
}

impl DrafterFamily for Tree {
    const NAME: &'static str = "tree";
    const HELP: &'static str = "EAGLE-2's dynamic draft trees: the draft model expands the --tree-top-k most likely children of the most likely nodes level by level, and the --tree-nodes most likely nodes are verified in one tree call. Policy: fixed (--k is the depth) or tree-price";
    const FLAGS: &'static [DrafterFlag] = &[DrafterFlag::TreeTopK, DrafterFlag::TreeNodes];
    type Grid = TreeDrafters;

    fn key(&self, body: String) -> String {
        format!("tree k={} nodes={} | {body}", self.top_k, self.max_nodes)
    }
    fn check(&self, policy: &PolicySpec, _: &DraftTransform) -> Result<()> {
        self.params().check()?;
        super::check_tree_policy(Self::NAME, policy)?;
        Ok(())
    }
    fn build<'m>(&self, models: DraftModels<'m>) -> Result<Box<dyn Drafter + 'm>> {
        Ok(Box::new(DynamicTreeDrafter::new(models.draft()?, self.params())?))
    }
    fn from_flags(f: &DrafterFlags) -> Result<Self> {
        let d = DynamicTreeParams::default();
        Ok(Self { top_k: f.tree_top_k.unwrap_or(d.top_k), max_nodes: f.tree_nodes.unwrap_or(d.max_nodes) })
    }
    fn settings(g: &TreeDrafters) -> Vec<Self> {
        g.top_k
            .iter()
            .flat_map(|&top_k| g.max_nodes.iter().map(move |&max_nodes| Self { top_k, max_nodes }))
            .collect()
    }
    fn grid_lists(g: &TreeDrafters) -> Vec<(&'static str, usize)> {
        vec![("top_k", g.top_k.len()), ("max_nodes", g.max_nodes.len())]
    }
    fn check_grid(g: &TreeDrafters) -> Result<()> {
        Self::settings(g).iter().try_for_each(|s| s.params().check())
    }
}
