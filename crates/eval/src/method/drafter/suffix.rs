//! SuffixDecoding: speculation trees from the frequencies of the text's earlier continuations
//! of its longest matching suffix; no draft model. The tree's size follows the match (at most
//! `alpha` nodes per matched token); the stop policy only caps its depth. With
//! `cached_requests`, earlier units' outputs are matched too (see
//! [`crate::experiment::earlier`]).

use super::{DraftModels, DrafterFamily, DrafterFlag, DrafterFlags};
use crate::method::policy::PolicySpec;
use anyhow::{Result, ensure};
use serde::{Deserialize, Serialize};
use specx_decoder::DraftTransform;
use specx_decoder::speculative::{Drafter, SuffixDrafter, SuffixParams};

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Suffix {
    /// Nodes per matched token.
    pub alpha: f64,
    /// The lowest frequency probability of a speculated node.
    pub min_token_prob: f64,
    /// The match plus the speculation's depth.
    pub max_depth: usize,
    /// The most nodes of one tree.
    pub max_nodes: usize,
    /// The most earlier outputs matched (0: the request's own text only).
    #[serde(default)]
    pub cached_requests: usize,
    /// Nodes added to `alpha` times the match (left out of files at its default, so files
    /// written before it existed read and write back the same).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub offset: f64,
    /// One path a match instead of a tree.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub paths_only: bool,
}

/// `drafters.suffix = { alphas = [1.0, 4.0], min_token_probs = [0.1], cached_requests = [0, 256] }`:
/// every combination, with one `max_depth` and `max_nodes` (SuffixDecoding's defaults when not
/// given; `cached_requests` defaults to [0], the request's own text only; `offsets` to [0];
/// `paths_only` to [false], trees: `[false, true]` compares trees with paths).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SuffixDrafters {
    pub alphas: Vec<f64>,
    #[serde(default = "default_min_token_probs")]
    pub min_token_probs: Vec<f64>,
    #[serde(default = "default_cached_requests")]
    pub cached_requests: Vec<usize>,
    pub max_depth: Option<usize>,
    pub max_nodes: Option<usize>,
    #[serde(default = "default_offsets", skip_serializing_if = "is_default_offsets")]
    pub offsets: Vec<f64>,
    #[serde(default = "default_paths_only", skip_serializing_if = "is_default_paths_only")]
    pub paths_only: Vec<bool>,
}

fn is_zero(x: &f64) -> bool {
    *x == 0.0
}

fn is_default_offsets(v: &[f64]) -> bool {
    v == default_offsets().as_slice()
}

fn is_default_paths_only(v: &[bool]) -> bool {
    v == default_paths_only().as_slice()
}

fn default_offsets() -> Vec<f64> {
    vec![0.0]
}

fn default_paths_only() -> Vec<bool> {
    vec![false]
}

fn default_cached_requests() -> Vec<usize> {
    vec![0]
}

fn default_min_token_probs() -> Vec<f64> {
    vec![SuffixParams::default().min_token_prob]
}

impl Suffix {
    fn params(&self) -> SuffixParams {
        SuffixParams {
            max_depth: self.max_depth,
            alpha: self.alpha,
            min_token_prob: self.min_token_prob,
            max_nodes: self.max_nodes,
            cached_requests: self.cached_requests,
            offset: self.offset,
            paths_only: self.paths_only,
        }
    }
}

impl From<SuffixParams> for Suffix {
    fn from(p: SuffixParams) -> Self {
        Self {
            alpha: p.alpha,
            min_token_prob: p.min_token_prob,
            max_depth: p.max_depth,
            max_nodes: p.max_nodes,
            cached_requests: p.cached_requests,
            offset: p.offset,
            paths_only: p.paths_only,
        }
    }
}

impl DrafterFamily for Suffix {
    const NAME: &'static str = "suffix";
    const HELP: &'static str = "SuffixDecoding: a token tree of the earlier continuations of the text's longest matching suffix, verified in one tree call (--suffix-alpha, --suffix-min-prob, --suffix-depth, --tree-nodes); no draft model runs. Policy: fixed (--k caps the depth) or tree-price";
    const RUNS_DRAFT_MODEL: bool = false;
    const FLAGS: &'static [DrafterFlag] =
        &[DrafterFlag::SuffixAlpha, DrafterFlag::SuffixMinProb, DrafterFlag::SuffixDepth, DrafterFlag::SuffixOffset, DrafterFlag::SuffixPaths, DrafterFlag::SuffixCached, DrafterFlag::TreeNodes];
    type Grid = SuffixDrafters;

    fn key(&self, body: String) -> String {
        let d = SuffixParams::default();
        let mut key = format!("suffix a={} p>={}", self.alpha, self.min_token_prob);
        if self.max_depth != d.max_depth {
            key += &format!(" depth={}", self.max_depth);
        }
        if self.max_nodes != d.max_nodes {
            key += &format!(" nodes={}", self.max_nodes);
        }
        if self.offset != d.offset {
            key += &format!(" offset={}", self.offset);
        }
        if self.paths_only {
            key += " paths";
        }
        if self.cached_requests > 0 {
            key += &format!(" cached={}", self.cached_requests);
        }
        format!("{key} | {body}")
    }
    fn check(&self, policy: &PolicySpec, draft: &DraftTransform) -> Result<()> {
        self.params().check()?;
        super::check_tree_policy(Self::NAME, policy)?;
        ensure!(draft.is_identity(), "the suffix drafter runs no draft model, so a cheaper draft changes nothing");
        Ok(())
    }
    fn build<'m>(&self, models: DraftModels<'m>) -> Result<Box<dyn Drafter + 'm>> {
        Ok(Box::new(SuffixDrafter::new(self.params())?.with_earlier(models.earlier_outputs)))
    }
    fn from_flags(f: &DrafterFlags) -> Result<Self> {
        let d = SuffixParams::default();
        Ok(Self {
            alpha: f.suffix_alpha.unwrap_or(d.alpha),
            min_token_prob: f.suffix_min_prob.unwrap_or(d.min_token_prob),
            max_depth: f.suffix_depth.unwrap_or(d.max_depth),
            max_nodes: f.tree_nodes.unwrap_or(d.max_nodes),
            cached_requests: f.suffix_cached.unwrap_or(d.cached_requests),
            offset: f.suffix_offset.unwrap_or(d.offset),
            paths_only: f.suffix_paths,
        })
    }
    fn settings(g: &SuffixDrafters) -> Vec<Self> {
        let d = SuffixParams::default();
        let (max_depth, max_nodes) = (g.max_depth.unwrap_or(d.max_depth), g.max_nodes.unwrap_or(d.max_nodes));
        let mut out = Vec::new();
        for &alpha in &g.alphas {
            for &min_token_prob in &g.min_token_probs {
                for &cached_requests in &g.cached_requests {
                    for &offset in &g.offsets {
                        for &paths_only in &g.paths_only {
                            out.push(Self {
                                alpha,
                                min_token_prob,
                                max_depth,
                                max_nodes,
                                cached_requests,
                                offset,
                                paths_only,
                            });
                        }
                    }
                }
            }
        }
        out
    }
    fn grid_lists(g: &SuffixDrafters) -> Vec<(&'static str, usize)> {
        vec![
            ("alphas", g.alphas.len()),
            ("min_token_probs", g.min_token_probs.len()),
            ("cached_requests", g.cached_requests.len()),
            ("offsets", g.offsets.len()),
            ("paths_only", g.paths_only.len()),
        ]
    }
    fn check_grid(g: &SuffixDrafters) -> Result<()> {
        for s in Self::settings(g) {
            s.params().check()?;
        }
        Ok(())
    }
}
