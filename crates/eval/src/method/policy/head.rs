//! SpecDec++'s acceptance head: stop when the predicted chance that some candidate of the round
//! is rejected passes `threshold`, within `[min, max]` candidates. The same rule on the newest
//! prediction alone is [`super::head_token`].

use super::{Flag, HeadBinding, Partners, PolicyFamily, PolicyFlags, Reads, check_bounds, check_unit_threshold};
use crate::method::family::{DEFAULT_HEAD, head_name};
use anyhow::{Context, Result, ensure};
use serde::{Deserialize, Serialize};
use specx_decoder::speculative::{AcceptanceModel, HeadPolicy, HeadRule, PrecomputedHead, StopPolicy};
use std::path::{Path, PathBuf};

/// SpecDec++'s rule over the head named `head` (its checkpoint directory's name): on the
/// running product of the round's predictions, or with `PER_TOKEN` on the newest one.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct HeadRuleSpec<const PER_TOKEN: bool> {
    pub head: String,
    pub threshold: f64,
    pub min: usize,
    pub max: usize,
}

/// The rule on the running product (the paper's).
pub type Head = HeadRuleSpec<false>;

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

/// Every directory of `heads` holds a head checkpoint (`table` names the config's table).
pub fn check_head_dirs<'a>(heads: impl IntoIterator<Item = &'a Path>, table: &str) -> Result<()> {
    for h in heads {
        ensure!(
            h.join("head.json").is_file(),
            "{table} head {} is not a head checkpoint (no head.json; `specx train` writes one)",
            h.display()
        );
    }
    Ok(())
}

fn rule_over<H: AcceptanceModel + 'static>(head: H, rule: HeadRule, per_token: bool) -> Box<dyn StopPolicy> {
    Box::new(if per_token { HeadPolicy::per_token(head, rule) } else { HeadPolicy::new(head, rule) })
}

impl HeadPolicies {
    /// Every head x threshold x bounds, heads named by their directories.
    pub fn settings<const PER_TOKEN: bool>(&self) -> Vec<HeadRuleSpec<PER_TOKEN>> {
        let mut out = Vec::new();
        for h in &self.heads {
            for &threshold in &self.thresholds {
                let head = head_name(h);
                out.extend(self.bounds.iter().map(|&[min, max]| HeadRuleSpec { head: head.clone(), threshold, min, max }));
            }
        }
        out
    }
}

impl<const PER_TOKEN: bool> PolicyFamily for HeadRuleSpec<PER_TOKEN> {
    const NAME: &'static str = if PER_TOKEN { "head-token" } else { "head" };
    const HELP: &'static str = if PER_TOKEN {
        "SpecDec++'s rule on the newest head prediction alone (--head, --threshold [0.7], --min [2], --max [20])"
    } else {
        "SpecDec++'s acceptance head (--head, --threshold [0.7], --min [2], --max [20])"
    };
    const READS: Reads = Reads::DraftHiddenState;
    const FLAGS: &'static [Flag] = &[Flag::Head, Flag::Threshold, Flag::Min, Flag::Max];
    type Grid = HeadPolicies;

    fn key(&self) -> String {
        let name = if PER_TOKEN { "head-token" } else { "specdecpp" };
        format!("{name} {} h={} [{},{}]", self.head, self.threshold, self.min, self.max)
    }
    fn family(&self) -> &'static str {
        if PER_TOKEN { Self::NAME } else { "specdecpp" }
    }
    fn max_candidates(&self) -> usize {
        self.max
    }
    fn check(&self, _: Partners) -> Result<()> {
        check_unit_threshold(self.threshold)?;
        check_bounds(self.min, self.max)
    }
    fn build(&self, heads: HeadBinding) -> Result<Box<dyn StopPolicy>> {
        let rule = HeadRule::new(self.threshold, self.min, self.max);
        let missing = || format!("head '{}' is not loaded", self.head);
        Ok(match heads {
            HeadBinding::Loaded(h) => rule_over(h.get(&self.head).with_context(missing)?.clone(), rule, PER_TOKEN),
            HeadBinding::Precomputed(index) => {
                rule_over(PrecomputedHead(*index.get(&self.head).with_context(missing)?), rule, PER_TOKEN)
            }
        })
    }
    fn from_flags(f: &PolicyFlags) -> Result<Self> {
        let [min, max] = PAPER_BOUNDS;
        Ok(Self {
            head: f.head().unwrap_or(DEFAULT_HEAD).to_string(),
            threshold: f.threshold().unwrap_or(0.7),
            min: f.min().unwrap_or(min),
            max: f.max().unwrap_or(max),
        })
    }
    fn settings(g: &HeadPolicies) -> Result<Vec<Self>> {
        Ok(g.settings())
    }
    fn grid_lists(g: &HeadPolicies) -> Vec<(&'static str, usize)> {
        vec![("heads", g.heads.len()), ("thresholds", g.thresholds.len()), ("bounds", g.bounds.len())]
    }
    fn check_grid(g: &HeadPolicies) -> Result<()> {
        check_head_dirs(g.heads.iter().map(PathBuf::as_path), "[[methods.grid]]")
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
