//! Stop policies as data: what a results row records, what a grid's `policies.*` table expands
//! to and what `specx decode --policy` builds. Each family is one file that says everything
//! about it once: its name and key, its parameters' ranges, its grid table, its flags and
//! their defaults, and how it becomes the decoder's [`StopPolicy`]. The list at the bottom
//! registers each family with one line; [`PolicySpec`], [`PolicyKind`] (`--policy`) and
//! [`PolicyAxis`] (`policies.*`) are generated from it.

pub mod fitted;
mod flags;
mod registry;
pub mod shipped;

pub use flags::{Flag, PolicyFlags};

use super::family::check_lists;
pub use super::family::product;
use anyhow::{Result, ensure};
use serde::Serialize;
use serde::de::DeserializeOwned;
use specx_decoder::speculative::{AcceptanceHead, StopPolicy};
use std::collections::{BTreeMap, HashMap};
use std::fmt::Debug;
use std::path::PathBuf;

/// Loaded acceptance heads by name (a checkpoint directory's name).
pub type Heads = BTreeMap<String, AcceptanceHead>;

/// Where a head policy's acceptance probabilities come from: a loaded head applied to the
/// draft's hidden states (decoding), or a replay's precomputed scores (the head's index in the
/// replay's head list).
#[derive(Clone, Copy)]
pub enum HeadBinding<'a> {
    Loaded(&'a Heads),
    Precomputed(&'a HashMap<String, usize>),
}

/// What a policy reads of a round besides the candidates: drafters that have no draft model
/// (prompt lookup, the feature head) cannot feed every policy.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Reads {
    /// Only the round's own count and outcomes.
    Nothing,
    /// The draft's distribution over its token (confidence, entropy).
    DraftDistribution,
    /// The draft model's hidden state (an acceptance head).
    DraftHiddenState,
    /// Prompt lookup's n-gram matches (and a draft model's confidence where it drafts).
    Matches,
    /// The target's output in advance (the oracle).
    ArOutput,
    /// A tree drafter's estimates of its nodes' chances of acceptance (the suffix and tree
    /// drafters').
    TreeEstimates,
}

/// The drafter and scheduler a policy runs with, by name, for the combinations a policy
/// refuses.
#[derive(Clone, Copy, Debug)]
pub struct Partners<'a> {
    pub drafter: &'a str,
    pub scheduler: &'a str,
}

/// A family of stop policies: one file implements it, one line in the registry lists it.
pub trait PolicyFamily: Sized + Clone + Debug + PartialEq + Serialize + DeserializeOwned {
    /// `--policy`'s value and the results' `policy` column.
    const NAME: &'static str;
    /// `--policy NAME`'s line in `specx decode --help`.
    const HELP: &'static str;
    /// What it reads of a round.
    const READS: Reads;
    /// The `specx decode` policy flags it takes; any other given is an error.
    const FLAGS: &'static [Flag];
    /// Whether it learns from the time its rounds took (a replay then prices each round, and
    /// its counts depend on the prices).
    const LEARNS_FROM_TIME: bool = false;
    /// Its `policies.*` table of a grid: lists whose product are its settings.
    type Grid: Clone + Debug + PartialEq + Serialize + DeserializeOwned;

    /// The setting's part of a method's key (`specdec K=4`, `confidence 0.4 [1,20]`).
    fn key(&self) -> String;
    /// The group its rows are summarised under (fixed K is SpecDec's, the head SpecDec++'s).
    fn family(&self) -> &'static str {
        Self::NAME
    }
    /// The most candidates a round may hold (DSI's block length).
    fn max_candidates(&self) -> usize;
    /// Its parameters' ranges, and the drafters or schedulers it cannot run with.
    fn check(&self, partners: Partners) -> Result<()>;
    /// A fresh decoder policy (its own state per request).
    fn build(&self, heads: HeadBinding) -> Result<Box<dyn StopPolicy>>;
    /// The setting `specx decode`'s flags describe, with the family's defaults.
    fn from_flags(flags: &PolicyFlags) -> Result<Self>;
    /// Every setting of a grid table, in order.
    fn settings(grid: &Self::Grid) -> Result<Vec<Self>>;
    /// The table's lists by name: an empty one is a mistake, not an empty product.
    fn grid_lists(grid: &Self::Grid) -> Vec<(&'static str, usize)>;
    /// Checks of a table beyond its lists (the files it names exist).
    fn check_grid(_grid: &Self::Grid) -> Result<()> {
        Ok(())
    }
    /// The acceptance-head directories a table names (they are loaded before decoding).
    fn grid_heads(_grid: &Self::Grid) -> Vec<&PathBuf> {
        Vec::new()
    }
    /// Every path a table names, relative to its config until resolved.
    fn grid_paths_mut(_grid: &mut Self::Grid) -> Vec<&mut PathBuf> {
        Vec::new()
    }
    /// The acceptance head the setting stops with.
    fn head(&self) -> Option<&str> {
        None
    }
    /// The threshold of a head or confidence rule (a results column).
    fn threshold(&self) -> Option<f64> {
        None
    }
    /// `[min, max]` candidates of a bounded rule (a results column).
    fn bounds(&self) -> Option<[usize; 2]> {
        None
    }
}

/// A probability-like threshold.
pub fn check_unit_threshold(threshold: f64) -> Result<()> {
    ensure!((0.0..=1.0).contains(&threshold), "the threshold must be in [0, 1]");
    Ok(())
}

/// `[min, max]` candidates per round.
pub fn check_bounds(min: usize, max: usize) -> Result<()> {
    ensure!(min >= 1 && min <= max, "bounds [{min}, {max}]: need 1 <= min <= max");
    Ok(())
}

/// At most `max` candidates per round.
pub fn check_max(max: usize) -> Result<()> {
    ensure!(max >= 1, "at most {max} candidates: need at least 1");
    Ok(())
}

registry::policy_families! {
    Fixed(fixed::Fixed) = "fixed",
    Head(head::Head) = "head",
    HeadToken(head_token::HeadToken) = "head_token",
    Confidence(confidence::Confidence) = "confidence",
    ConfidenceProduct(confidence_product::ConfidenceProduct) = "confidence_product",
    Roc(roc::Roc) = "roc",
    PMin(pmin::PMin) = "pmin",
    Dynamic(dynamic::Dynamic) = "dynamic",
    Svip(svip::Svip) = "svip",
    AdaEdl(adaedl::AdaEdl) = "adaedl",
    Bandit(bandit::Bandit) = "bandit",
    MatchRate(matchrate::MatchRate) = "matchrate",
    ThresholdPlus(threshold_plus::ThresholdPlus) = "threshold_plus",
    Calibrated(calibrated::Calibrated) = "calibrated",
    TreePrice(tree_price::TreePrice) = "tree_price",
    Oracle(oracle::Oracle) = "oracle",
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(Parser)]
    struct Cli {
        #[command(flatten)]
        flags: PolicyFlags,
    }

    fn flags(args: &[&str]) -> PolicyFlags {
        Cli::try_parse_from(std::iter::once("x").chain(args.iter().copied())).unwrap().flags
    }

    /// A value for `flag` that no family has as its default.
    fn given(flag: Flag) -> Vec<&'static str> {
        match flag {
            Flag::K => vec!["--k", "7"],
            Flag::Head => vec!["--head", "h7"],
            Flag::Threshold => vec!["--threshold", "0.07"],
            Flag::Min => vec!["--min", "3"],
            Flag::Max => vec!["--max", "17"],
            Flag::Arms => vec!["--arms", "7"],
            Flag::ThresholdPlus => vec!["--threshold-plus", "none.json"],
            Flag::Calibrated => vec!["--calibrated", "none.json"],
            Flag::RowCost => vec!["--row-cost", "0.3"],
            Flag::DraftCost => vec!["--draft-cost", "0.3"],
        }
    }

    #[test]
    fn every_family_reads_the_flags_it_declares_and_refuses_the_others() {
        for &kind in PolicyKind::ALL.iter().filter(|k| k.runnable()) {
            let default = kind.from_flags(&flags(&[]));
            for &flag in Flag::ALL.iter() {
                let with = kind.from_flags(&flags(&given(flag)));
                if !kind.flags().contains(&flag) {
                    let e = format!("{:#}", with.unwrap_err());
                    assert!(e.contains(&format!("{} is not used", flag.name())), "{}: {e}", kind.name());
                } else if let Ok(d) = &default {
                    assert_ne!(&with.unwrap(), d, "{} ignores {}", kind.name(), flag.name());
                } else {
                    // A required file flag: the file named is read.
                    assert!(format!("{:#}", with.unwrap_err()).contains("none.json"), "{}", kind.name());
                }
            }
        }
        assert!(format!("{:#}", PolicyKind::Oracle.from_flags(&flags(&[])).unwrap_err()).contains("only be replayed"));
    }

    #[test]
    fn a_setting_is_recorded_under_its_grid_table_and_read_back() {
        let fields = serde_json::to_value(PolicyAxis::default()).unwrap();
        let fields: Vec<&str> = fields.as_object().unwrap().keys().map(String::as_str).collect();
        let mut tables = PolicyAxis::tables();
        tables.sort();
        assert_eq!(fields, tables, "a grid's policies tables are the registered tags");
        for &kind in PolicyKind::ALL.iter().filter(|k| k.runnable()) {
            let Ok(spec) = kind.from_flags(&flags(&[])) else { continue };
            let json = serde_json::to_value(&spec).unwrap();
            let tag = json["kind"].as_str().unwrap();
            assert_eq!(tag.replace('_', "-"), kind.name(), "the tag and the name of {}", kind.name());
            assert!(PolicyAxis::tables().contains(&tag), "{tag} has no grid table");
            assert_eq!(serde_json::from_value::<PolicySpec>(json).unwrap(), spec);
        }
    }
}
