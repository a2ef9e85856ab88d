//! `specx decode`'s drafter flags. Each family's file says which it takes and their defaults
//! ([`DrafterFamily::FLAGS`], [`DrafterFamily::from_flags`]); a flag the chosen drafter does
//! not take is an error naming the drafters that do.

use super::DrafterKind;
use crate::method::family::unused_flag;
use anyhow::Result;
use clap::Args;
use specx_decoder::speculative::{Calibration, Compat};

/// One drafter flag.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DrafterFlag {
    DraftDevices,
    Strategy,
    Calibration,
    Workers,
    Compat,
    NgramMin,
    NgramMax,
    FeatureHead,
    SuffixAlpha,
    SuffixMinProb,
    SuffixDepth,
    SuffixOffset,
    SuffixPaths,
    SuffixCached,
    TreeNodes,
    TreeTopK,
}

impl DrafterFlag {
    pub const ALL: [DrafterFlag; 16] = [
        DrafterFlag::DraftDevices,
        DrafterFlag::Strategy,
        DrafterFlag::Calibration,
        DrafterFlag::Workers,
        DrafterFlag::Compat,
        DrafterFlag::NgramMin,
        DrafterFlag::NgramMax,
        DrafterFlag::FeatureHead,
        DrafterFlag::SuffixAlpha,
        DrafterFlag::SuffixMinProb,
        DrafterFlag::SuffixDepth,
        DrafterFlag::SuffixOffset,
        DrafterFlag::SuffixPaths,
        DrafterFlag::SuffixCached,
        DrafterFlag::TreeNodes,
        DrafterFlag::TreeTopK,
    ];

    pub fn name(self) -> &'static str {
        match self {
            DrafterFlag::DraftDevices => "--draft-devices",
            DrafterFlag::Strategy => "--strategy",
            DrafterFlag::Calibration => "--calibration",
            DrafterFlag::Workers => "--workers",
            DrafterFlag::Compat => "--compat",
            DrafterFlag::NgramMin => "--ngram-min",
            DrafterFlag::NgramMax => "--ngram-max",
            DrafterFlag::FeatureHead => "--feature-head",
            DrafterFlag::SuffixAlpha => "--suffix-alpha",
            DrafterFlag::SuffixMinProb => "--suffix-min-prob",
            DrafterFlag::SuffixDepth => "--suffix-depth",
            DrafterFlag::SuffixOffset => "--suffix-offset",
            DrafterFlag::SuffixPaths => "--suffix-paths",
            DrafterFlag::SuffixCached => "--suffix-cached",
            DrafterFlag::TreeNodes => "--tree-nodes",
            DrafterFlag::TreeTopK => "--tree-top-k",
        }
    }
}

/// The drafter's flags as given.
#[derive(Args, Clone, Debug, Default)]
pub struct DrafterFlags {
    /// EasySpec's attention layers on devices (`cpu,wgpu:0`): the draft's layer i keeps its
    /// attention and cache on the (i mod N)-th device, so each layer group's attentions run on
    /// different devices at once, one thread per device (--workers is then not used). The
    /// draft's embeddings, MLPs and head stay on --device.
    #[arg(long, value_delimiter = ',')]
    pub draft_devices: Vec<String>,
    /// EasySpec's layer-parallel strategy: a preset `lp1`..`lp5` (the paper's Table 6) or the
    /// paper's notation, e.g. `0,1-3,4-7,8-11,12-15,16-19,20-22,23` [default: lp4].
    #[arg(long)]
    pub strategy: Option<String>,
    /// When EasySpec recomputes the draft cache entries its fuzzy forwards wrote: `never`,
    /// `prefill_only`, `every_round` (the paper's description) or `every_mismatch` (the
    /// reference code's default) [default: every_round].
    #[arg(long)]
    pub calibration: Option<Calibration>,
    /// Threads running each of EasySpec's layer groups' attentions (timing only: the tokens
    /// never depend on it) [default: 1].
    #[arg(long)]
    pub workers: Option<usize>,
    /// `reference` picks EasySpec's candidates as the reference code does (the argmax of q,
    /// tested with min(1, p/q)): NOT lossless at temperature > 0, for demonstrating that only
    /// [default: lossless].
    #[arg(long)]
    pub compat: Option<Compat>,
    /// Prompt lookup's (and the hybrid drafter's) shortest n-gram to match [default: 1].
    #[arg(long)]
    pub ngram_min: Option<usize>,
    /// Prompt lookup's longest n-gram to match, tried first [default: 3].
    #[arg(long)]
    pub ngram_max: Option<usize>,
    /// The feature drafter's head: a directory written by `specx train-feature-head`, or
    /// `default` for checkpoints/feature-head of this source tree [default: default].
    #[arg(long)]
    pub feature_head: Option<String>,
    /// The suffix drafter's nodes per matched token: a match of p tokens speculates at most
    /// floor(alpha * p) nodes (SuffixDecoding's max_spec_factor) [default: 1].
    #[arg(long)]
    pub suffix_alpha: Option<f64>,
    /// The suffix drafter's lowest frequency probability of a speculated node: its count over
    /// the match's occurrences (SuffixDecoding's min_token_prob) [default: 0.1].
    #[arg(long)]
    pub suffix_min_prob: Option<f64>,
    /// The suffix drafter's bound on the match plus the speculation, in tokens (SuffixDecoding's
    /// max_tree_depth) [default: 24].
    #[arg(long)]
    pub suffix_depth: Option<usize>,
    /// Nodes added to the suffix drafter's alpha * p: a match of p tokens speculates at most
    /// floor(alpha * p + offset) nodes (SuffixDecoding's max_spec_offset) [default: 0].
    #[arg(long, allow_hyphen_values = true)]
    pub suffix_offset: Option<f64>,
    /// The suffix drafter speculates one path a match (its likeliest continuation, token by
    /// token) instead of a tree (SuffixDecoding's use_tree_spec = false).
    #[arg(long)]
    pub suffix_paths: bool,
    /// The most earlier outputs the suffix drafter matches, the most recent (SuffixDecoding's
    /// max_cached_requests) [default: 0, the request's own text; 100000 with --suffix-corpus].
    #[arg(long)]
    pub suffix_cached: Option<usize>,
    /// The most nodes of one speculation tree: the rows of its verification call besides the
    /// last committed token [default: 16].
    #[arg(long)]
    pub tree_nodes: Option<usize>,
    /// The tree drafter's children per expanded node, and nodes expanded per level (EAGLE-2's
    /// top_k) [default: 4].
    #[arg(long)]
    pub tree_top_k: Option<usize>,
}

impl DrafterFlags {
    fn is_given(&self, flag: DrafterFlag) -> bool {
        match flag {
            DrafterFlag::DraftDevices => !self.draft_devices.is_empty(),
            DrafterFlag::Strategy => self.strategy.is_some(),
            DrafterFlag::Calibration => self.calibration.is_some(),
            DrafterFlag::Workers => self.workers.is_some(),
            DrafterFlag::Compat => self.compat.is_some(),
            DrafterFlag::NgramMin => self.ngram_min.is_some(),
            DrafterFlag::NgramMax => self.ngram_max.is_some(),
            DrafterFlag::FeatureHead => self.feature_head.is_some(),
            DrafterFlag::SuffixAlpha => self.suffix_alpha.is_some(),
            DrafterFlag::SuffixMinProb => self.suffix_min_prob.is_some(),
            DrafterFlag::SuffixDepth => self.suffix_depth.is_some(),
            DrafterFlag::SuffixOffset => self.suffix_offset.is_some(),
            DrafterFlag::SuffixPaths => self.suffix_paths,
            DrafterFlag::SuffixCached => self.suffix_cached.is_some(),
            DrafterFlag::TreeNodes => self.tree_nodes.is_some(),
            DrafterFlag::TreeTopK => self.tree_top_k.is_some(),
        }
    }

    /// The flags given, in `--help`'s order.
    pub fn given(&self) -> Vec<DrafterFlag> {
        DrafterFlag::ALL.into_iter().filter(|&f| self.is_given(f)).collect()
    }

    /// Any flag given that a drafter taking `takes` does not use is an error.
    pub(super) fn refuse_unused(&self, takes: &[DrafterFlag]) -> Result<()> {
        match self.given().into_iter().find(|f| !takes.contains(f)) {
            Some(flag) => Err(unused_flag(flag.name(), &DrafterKind::names_taking(flag), "drafter")),
            None => Ok(()),
        }
    }
}
