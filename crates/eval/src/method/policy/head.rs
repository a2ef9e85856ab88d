//! SpecDec++'s acceptance head: stop when the predicted chance that some candidate of the round
//! is rejected passes `threshold`, within `[min, max]` candidates.

use super::{Flag, HeadBinding, Partners, PolicyFamily, PolicyFlags, Reads, check_bounds, check_unit_threshold};
use crate::method::family::{DEFAULT_HEAD, head_name};
use anyhow::{Context, Result, ensure};
use serde::{Deserialize, Serialize};
use specx_decoder::speculative::{AcceptanceModel, HeadPolicy, HeadRule, PrecomputedHead, StopPolicy};
use std::path::PathBuf;

/// `head`: a head's name (its checkpoint directory's name).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Head {
    pub head: String,
    pub threshold: f64,
    pub min: usize,
    pub max: usize,
}

/// `policies.head = { heads = ["../checkpoints/w6-d3"], thresholds = [0.7] }`: every head x
/// threshold x bounds.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct HeadPolicies {
    /// Head checkpoint directories (`specx train` output), relative to the config.
    pub heads: Vec<PathBuf>,
    pub thresholds: Vec<f64>,
    /// `[min, max]` candidates per round; the paper's `[2, 20]` if absent.
    #[serde(default = "paper_bounds")]
    pub bounds: Vec<[usize; 2]>,
}

/// `HeadRule`'s paper bounds, the default of every adaptive policy's grid table.
pub const PAPER_BOUNDS: [usize; 2] = [HeadRule::PAPER_MIN, HeadRule::PAPER_MAX];

pub fn paper_bounds() -> Vec<[usize; 2]> {
    vec![PAPER_BOUNDS]
}

impl Head {
    /// SpecDec++'s rule over the bound head, on the running product or (`per_token`) the
    /// newest prediction.
    pub(super) fn build_rule(&self, heads: HeadBinding, per_token: bool) -> Result<Box<dyn StopPolicy>> {
        let rule = HeadRule::new(self.threshold, self.min, self.max);
        let missing = || format!("head '{}' is not loaded", self.head);
        Ok(match heads {
            HeadBinding::Loaded(h) => rule_over(h.get(&self.head).with_context(missing)?.clone(), rule, per_token),
            HeadBinding::Precomputed(index) => {
                rule_over(PrecomputedHead(*index.get(&self.head).with_context(missing)?), rule, per_token)
            }
        })
    }

    pub(super) fn with_flags(f: &PolicyFlags) -> Self {
        let [min, max] = PAPER_BOUNDS;
        Self {
            head: f.head().unwrap_or(DEFAULT_HEAD).to_string(),
            threshold: f.threshold().unwrap_or(0.7),
            min: f.min().unwrap_or(min),
            max: f.max().unwrap_or(max),
        }
    }

    pub(super) fn check_ranges(&self) -> Result<()> {
        check_unit_threshold(self.threshold)?;
        check_bounds(self.min, self.max)
    }
}

fn rule_over<H: AcceptanceModel + 'static>(head: H, rule: HeadRule, per_token: bool) -> Box<dyn StopPolicy> {
    Box::new(if per_token { HeadPolicy::per_token(head, rule) } else { HeadPolicy::new(head, rule) })
}

impl HeadPolicies {
    /// Every head x threshold x bounds, heads named by their directories.
    pub fn settings(&self) -> Vec<Head> {
        let mut out = Vec::new();
        for h in &self.heads {
            for &threshold in &self.thresholds {
                let head = head_name(h);
                out.extend(self.bounds.iter().map(|&[min, max]| Head { head: head.clone(), threshold, min, max }));
            }
        }
        out
    }

    pub(super) fn lists(&self) -> Vec<(&'static str, usize)> {
        vec![("heads", self.heads.len()), ("thresholds", self.thresholds.len()), ("bounds", self.bounds.len())]
    }

    pub(super) fn check_heads(&self) -> Result<()> {
        for h in &self.heads {
            ensure!(
                h.join("head.json").is_file(),
                "[[methods.grid]] head {} is not a head checkpoint (no head.json; `specx train` writes one)",
                h.display()
            );
        }
        Ok(())
    }
}

impl PolicyFamily for Head {
    const NAME: &'static str = "head";
    const HELP: &'static str = "SpecDec++'s acceptance head (--head, --threshold [0.7], --min [2], --max [20])";
    const READS: Reads = Reads::DraftHiddenState;
    const FLAGS: &'static [Flag] = &[Flag::Head, Flag::Threshold, Flag::Min, Flag::Max];
    type Grid = HeadPolicies;

    fn key(&self) -> String {
        format!("specdecpp {} h={} [{},{}]", self.head, self.threshold, self.min, self.max)
    }
    fn family(&self) -> &'static str {
        "specdecpp"
    }
    fn max_candidates(&self) -> usize {
        self.max
    }
    fn check(&self, _: Partners) -> Result<()> {
        self.check_ranges()
    }
    fn build(&self, heads: HeadBinding) -> Result<Box<dyn StopPolicy>> {
        self.build_rule(heads, false)
    }
    fn from_flags(f: &PolicyFlags) -> Result<Self> {
        Ok(Self::with_flags(f))
    }
    fn settings(g: &HeadPolicies) -> Result<Vec<Self>> {
        Ok(g.settings())
    }
    fn grid_lists(g: &HeadPolicies) -> Vec<(&'static str, usize)> {
        g.lists()
    }
    fn check_grid(g: &HeadPolicies) -> Result<()> {
        g.check_heads()
    }
    fn grid_heads(g: &HeadPolicies) -> Vec<&PathBuf> {
        g.heads.iter().collect()
    }
    fn grid_paths_mut(g: &mut HeadPolicies) -> Vec<&mut PathBuf> {
        g.heads.iter_mut().collect()
    }
    fn head(&self) -> Option<&str> {
        Some(&self.head)
    }
    fn threshold(&self) -> Option<f64> {
        Some(self.threshold)
    }
    fn bounds(&self) -> Option<[usize; 2]> {
        Some([self.min, self.max])
    }
}
