//! Drafters as data: who proposes the candidates, as a results row records it, a grid's
//! `drafters.*` table lists it and `specx decode --drafter` builds it. Each family is one file
//! that says everything about it once (name, key, checks, grid table, flags and defaults, and
//! how it becomes the decoder's [`Drafter`]); the list at the bottom registers each with one
//! line, and [`DrafterSpec`], [`DrafterKind`] and [`DrafterAxis`] are generated from it.

mod flags;
mod registry;

pub use flags::{DrafterFlag, DrafterFlags};

use super::family::check_lists;
use super::policy::{PolicyKind, PolicySpec};
use anyhow::{Context, Result};
use serde::Serialize;
use serde::de::DeserializeOwned;
use specx_decoder::speculative::{Drafter, FeatureDraft};
use specx_decoder::{DraftTransform, Transformer};
use std::collections::BTreeMap;
use std::fmt::Debug;
use std::path::PathBuf;

/// Loaded feature heads by the name settings give them (a directory, or `default`).
pub type FeatureHeads = BTreeMap<String, FeatureDraft>;

/// What a drafter may be built from: the draft model, the target with its feature heads for
/// the drafters that read the target's hidden states, and earlier requests' outputs for the
/// suffix drafter's cross-request corpus (oldest first; empty outside an eval run).
#[derive(Clone, Copy)]
pub struct DraftModels<'m> {
    pub draft: Option<&'m Transformer>,
    pub target: Option<&'m Transformer>,
    pub feature_heads: Option<&'m FeatureHeads>,
    pub earlier_outputs: &'m [Vec<u32>],
}

impl<'m> DraftModels<'m> {
    /// The draft model, which every drafter but prompt lookup and the feature head runs.
    pub fn draft(&self) -> Result<&'m Transformer> {
        self.draft.context("speculative methods need a draft model")
    }
}

/// A family of drafters: one file implements it, one line in the registry lists it.
pub trait DrafterFamily: Sized + Clone + Debug + PartialEq + Serialize + DeserializeOwned {
    /// `--drafter`'s value and the results' `drafter` column.
    const NAME: &'static str;
    /// `--drafter NAME`'s line in `specx decode --help`.
    const HELP: &'static str;
    /// Whether it runs the draft model (prompt lookup and the feature head do not).
    const RUNS_DRAFT_MODEL: bool = true;
    /// The `specx decode` drafter flags it takes; any other given is an error.
    const FLAGS: &'static [DrafterFlag];
    /// Its `drafters.*` table of a grid.
    type Grid: Clone + Debug + PartialEq + Serialize + DeserializeOwned;

    /// A method's key from the policy and scheduler's part `body`.
    fn key(&self, body: String) -> String;
    /// The group a method with it is summarised under (`None`: the scheduler's or policy's).
    fn family(&self) -> Option<&'static str> {
        Some(Self::NAME)
    }
    /// Its parameters' ranges, and the policies and drafts it cannot run with.
    fn check(&self, policy: &PolicySpec, draft: &DraftTransform) -> Result<()>;
    /// A fresh drafter for one generation.
    fn build<'m>(&self, models: DraftModels<'m>) -> Result<Box<dyn Drafter + 'm>>;
    /// The setting `specx decode`'s flags describe, with the family's defaults.
    fn from_flags(flags: &DrafterFlags) -> Result<Self>;
    /// Every setting of a grid table, in order.
    fn settings(grid: &Self::Grid) -> Vec<Self>;
    /// The table's lists by name (an empty one is an error).
    fn grid_lists(grid: &Self::Grid) -> Vec<(&'static str, usize)>;
    /// Checks of a table beyond its lists.
    fn check_grid(_grid: &Self::Grid) -> Result<()> {
        Ok(())
    }
    /// Every path a table names, relative to its config until resolved.
    fn grid_paths_mut(_grid: &mut Self::Grid) -> Vec<&mut PathBuf> {
        Vec::new()
    }
}

/// The policies a tree drafter takes: fixed K (K caps the depth) and tree-price (which prices
/// the tree's rows); a policy that stops token by token has nothing to stop in a tree.
fn check_tree_policy(drafter: &str, policy: &PolicySpec) -> Result<()> {
    let (fixed, price) = (PolicyKind::Fixed.name(), PolicyKind::TreePrice.name());
    anyhow::ensure!(
        [fixed, price].contains(&policy.name()),
        "the {drafter} drafter shapes its own trees, so only the {fixed} policy (its K caps the depth) or {price} (which prices the tree's rows) applies"
    );
    Ok(())
}

registry::drafter_families! {
    Plain(plain::Plain) = "plain",
    EasySpec(easyspec::EasySpec) = "easyspec",
    Lookup(lookup::Lookup) = "lookup",
    Hybrid(hybrid::Hybrid) = "hybrid",
    Feature(feature::Feature) = "feature",
    Suffix(suffix::Suffix) = "suffix",
    Tree(tree::Tree) = "tree",
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(Parser)]
    struct Cli {
        #[command(flatten)]
        flags: DrafterFlags,
    }

    fn flags(args: &[&str]) -> DrafterFlags {
        Cli::try_parse_from(std::iter::once("x").chain(args.iter().copied())).unwrap().flags
    }

    /// A value for `flag` that no family has as its default.
    fn given(flag: DrafterFlag) -> Vec<&'static str> {
        match flag {
            DrafterFlag::DraftDevices => vec!["--draft-devices", "cpu"],
            DrafterFlag::Strategy => vec!["--strategy", "lp2"],
            DrafterFlag::Calibration => vec!["--calibration", "never"],
            DrafterFlag::Workers => vec!["--workers", "3"],
            DrafterFlag::Compat => vec!["--compat", "reference"],
            DrafterFlag::NgramMin => vec!["--ngram-min", "2"],
            DrafterFlag::NgramMax => vec!["--ngram-max", "5"],
            DrafterFlag::FeatureHead => vec!["--feature-head", "fh"],
            DrafterFlag::SuffixAlpha => vec!["--suffix-alpha", "2"],
            DrafterFlag::SuffixMinProb => vec!["--suffix-min-prob", "0.2"],
            DrafterFlag::SuffixDepth => vec!["--suffix-depth", "12"],
            DrafterFlag::SuffixOffset => vec!["--suffix-offset", "-1"],
            DrafterFlag::SuffixPaths => vec!["--suffix-paths"],
            DrafterFlag::SuffixCached => vec!["--suffix-cached", "7"],
            DrafterFlag::TreeNodes => vec!["--tree-nodes", "8"],
            DrafterFlag::TreeTopK => vec!["--tree-top-k", "2"],
        }
    }

    #[test]
    fn every_family_reads_the_flags_it_declares_and_refuses_the_others() {
        for &kind in DrafterKind::ALL {
            let default = kind.from_flags(&flags(&[])).unwrap();
            for flag in DrafterFlag::ALL {
                let with = kind.from_flags(&flags(&given(flag)));
                if !kind.flags().contains(&flag) {
                    let e = format!("{:#}", with.unwrap_err());
                    assert!(e.contains(&format!("{} is not used", flag.name())), "{}: {e}", kind.name());
                } else if flag != DrafterFlag::DraftDevices {
                    // (The draft's devices place the model; `specx decode` reads them.)
                    assert_ne!(with.unwrap(), default, "{} ignores {}", kind.name(), flag.name());
                }
            }
            let json = serde_json::to_value(&default).unwrap();
            assert_eq!(json["kind"], kind.name(), "the tag and the name of {}", kind.name());
            assert_eq!(serde_json::from_value::<DrafterSpec>(json).unwrap(), default);
        }
        let fields = serde_json::to_value(DrafterAxis::default()).unwrap();
        let mut tables: Vec<&str> = fields.as_object().unwrap().keys().map(String::as_str).collect();
        tables.sort();
        let mut names: Vec<&str> = DrafterKind::ALL.iter().map(|k| k.name()).collect();
        names.sort();
        assert_eq!(tables, names, "a grid's drafters tables are the registered names");
    }
}
