//! `[[methods.grid]]`: a product of axes. Each axis lists its parts with their parameters; the
//! settings are every drafter x every policy x every scheduler:
//!
//! ```toml
//! [[methods.grid]]
//! drafters.plain = {}
//! drafters.easyspec = { strategies = ["lp4"], calibrations = ["every_round"] }
//! drafters.lookup = { ngrams = [[1, 3]] }                      # prompt lookup, n-gram range
//! drafters.hybrid = { ngrams = [[2, 3]] }                      # lookup, else the draft model
//! drafters.feature = { heads = ["../checkpoints/feature-head"] } # an EAGLE-style feature head
//! policies.fixed = { k = [2, 4] }
//! policies.head = { heads = ["../../checkpoints/w6-d3"], thresholds = [0.7] }
//! policies.roc = { thresholds = [0.4], max = [20] }            # HF confidence + ROC update
//! policies.pmin = { p_min = [0.75], n_max = [16] }             # llama.cpp
//! policies.dynamic = { initial = [5], cap = 64 }               # HF's dynamic schedule
//! policies.svip = { thresholds = [0.3], max = [40] }
//! policies.adaedl = { lambda = [0.7], gamma = [0.2], max = [16] }
//! policies.bandit = { arms = [[1, 2, 3, 4]] }
//! policies.matchrate = { thresholds = [0.3], max = [16], model_k = [4] }  # lookup's matches
//! policies.oracle = {}                                         # replays only
//! schedulers.sequential = {}
//! schedulers.dsi = { servers = [2] }
//! drafts = [{}, { vocab = 32768 }, { vocab = 16384, weights = "q4_0" }]   # cheaper drafts
//! ```
//!
//! Without `drafters` the drafter is plain; without `schedulers` the scheduler is sequential;
//! without `drafts` the draft runs as loaded (`{}`).

pub use crate::method::drafter::DrafterAxis;
pub use crate::method::family::NoParameters;
use crate::method::family::check_lists;
pub use crate::method::policy::PolicyAxis;
use crate::method::{MethodSpec, SchedulerSpec};
use anyhow::{Result, ensure};
use serde::{Deserialize, Serialize};
use specx_decoder::DraftTransform;
use std::path::PathBuf;

/// One product of axes.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct MethodGrid {
    #[serde(default)]
    pub drafters: DrafterAxis,
    pub policies: PolicyAxis,
    #[serde(default)]
    pub schedulers: SchedulerAxis,
    /// The draft as loaded (`{}`) or made cheaper: `vocab` (the N most frequent tokens of
    /// `vocab_table`, default the shipped table), `weights` (`q4_0`, `q5_0`, `q8_0`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub drafts: Vec<DraftTransform>,
}

/// `drafts`, or the draft as loaded when none is listed.
pub fn drafts_or_loaded(drafts: &[DraftTransform]) -> Vec<DraftTransform> {
    if drafts.is_empty() { vec![DraftTransform::default()] } else { drafts.to_vec() }
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SchedulerAxis {
    pub sequential: Option<NoParameters>,
    /// DSI, for every server count (blocks end where the policy stops them).
    pub dsi: Option<DsiSchedulers>,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DsiSchedulers {
    pub servers: Vec<usize>,
}

impl SchedulerAxis {
    /// Each table's name and keys, for the config reference.
    pub fn table_keys() -> Vec<(&'static str, &'static [&'static str])> {
        vec![
            ("sequential", specx_run::config_keys::struct_fields::<NoParameters>()),
            ("dsi", specx_run::config_keys::struct_fields::<DsiSchedulers>()),
        ]
    }

    pub fn expand(&self) -> Vec<SchedulerSpec> {
        let mut out = Vec::new();
        if self.sequential.is_some() || self.dsi.is_none() {
            out.push(SchedulerSpec::Sequential);
        }
        if let Some(g) = &self.dsi {
            out.extend(g.servers.iter().map(|&servers| SchedulerSpec::Dsi { servers }));
        }
        out
    }
}

impl MethodGrid {
    /// Every drafter x policy x scheduler, in that nesting order, each checked.
    pub fn expand(&self) -> Result<Vec<MethodSpec>> {
        let policies = self.policies.expand()?;
        ensure!(
            !policies.is_empty(),
            "[[methods.grid]] lists no policy: give policies.{}",
            crate::method::family::either(&PolicyAxis::tables())
        );
        let mut out = Vec::new();
        for drafter in self.drafters.expand() {
            for draft in drafts_or_loaded(&self.drafts) {
                for policy in &policies {
                    for scheduler in self.schedulers.expand() {
                        let m = MethodSpec {
                            drafter: drafter.clone(),
                            draft: draft.clone(),
                            policy: policy.clone(),
                            scheduler,
                        };
                        m.check()?;
                        out.push(m);
                    }
                }
            }
        }
        Ok(out)
    }

    /// Every acceptance-head directory the grid names.
    pub fn head_dirs(&self) -> Vec<&PathBuf> {
        self.policies.head_dirs()
    }

    /// Every path the grid names: heads, feature heads, fitted-parameter files (resolved
    /// against the config's directory).
    pub fn paths_mut(&mut self) -> Vec<&mut PathBuf> {
        let mut out = self.policies.paths_mut();
        out.extend(self.drafters.paths_mut());
        out
    }

    /// Empty lists (a part given with nothing to run) are mistakes, not empty products.
    pub fn validate(&self) -> Result<()> {
        self.drafters.validate()?;
        self.policies.validate()?;
        if let Some(g) = &self.schedulers.dsi {
            check_lists("schedulers.dsi", &[("servers", g.servers.len())])?;
        }
        self.expand().map(|_| ())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_grid_is_the_product_of_its_axes() {
        let g: MethodGrid = toml::from_str(
            r#"
            drafters.plain = {}
            drafters.easyspec = { strategies = ["lp4"], calibrations = ["every_round", "never"] }
            policies.fixed = { k = [2, 4] }
            policies.head = { heads = ["ck/w6-d3"], thresholds = [0.7] }
            schedulers.sequential = {}
            schedulers.dsi = { servers = [2] }
            "#,
        )
        .unwrap();
        let keys: Vec<String> = g.expand().unwrap().iter().map(MethodSpec::key).collect();
        assert_eq!(keys.len(), 3 * 3 * 2);
        assert_eq!(
            &keys[..6],
            [
                "specdec K=2",
                "dsi SP=2 k=2",
                "specdec K=4",
                "dsi SP=2 k=4",
                "specdecpp w6-d3 h=0.7 [2,20]",
                "dsi SP=2 specdecpp w6-d3 h=0.7 [2,20]"
            ]
        );
        assert_eq!(keys[17], "easyspec lp4 never | dsi SP=2 specdecpp w6-d3 h=0.7 [2,20]");
        // Prompt lookup under fixed K and the dynamic schedule, both schedulers.
        let lookup: MethodGrid = toml::from_str("drafters.lookup = { ngrams = [[1, 3], [2, 2]] }\npolicies.fixed = { k = [8] }\nschedulers.dsi = { servers = [2] }").unwrap();
        assert_eq!(
            lookup.expand().unwrap().iter().map(MethodSpec::key).collect::<Vec<_>>(),
            ["lookup n=1..3 | dsi SP=2 k=8", "lookup n=2..2 | dsi SP=2 k=8"]
        );
        let rate: MethodGrid = toml::from_str("drafters.hybrid = { ngrams = [[2, 4]] }\npolicies.matchrate = { thresholds = [0.2, 0.4], max = [16], model_k = [4] }").unwrap();
        assert_eq!(
            rate.expand().unwrap().iter().map(MethodSpec::key).collect::<Vec<_>>(),
            [
                "lookup+draft n=2..4 | matchrate 0.2 [1,16] model K=4",
                "lookup+draft n=2..4 | matchrate 0.4 [1,16] model K=4"
            ]
        );
        let mixed: MethodGrid =
            toml::from_str("drafters.lookup = { ngrams = [[1, 3]] }\npolicies.confidence = { thresholds = [0.5] }")
                .unwrap();
        assert!(format!("{:#}", mixed.expand().unwrap_err()).contains("use fixed, dynamic, bandit or matchrate"));
        // Plain and sequential are the defaults of their axes.
        let only: MethodGrid = toml::from_str("policies.confidence = { thresholds = [0.5] }").unwrap();
        assert_eq!(only.expand().unwrap().iter().map(MethodSpec::key).collect::<Vec<_>>(), ["confidence 0.5 [2,20]"]);
        // Out-of-range parameters are refused with the setting's name.
        let bad: MethodGrid = toml::from_str("policies.confidence = { thresholds = [1.5] }").unwrap();
        assert!(
            format!("{:#}", bad.expand().unwrap_err())
                .contains("confidence 1.5 [2,20]: the threshold must be in [0, 1]")
        );
        // Every training-free rule, with its parameters in the key.
        let rules: MethodGrid = toml::from_str(
            r#"
            policies.roc = { thresholds = [0.4], max = [20] }
            policies.pmin = { p_min = [0.75, 0.0], n_max = [16] }
            policies.dynamic = { initial = [5] }
            policies.svip = { thresholds = [0.3], max = [40] }
            policies.adaedl = { lambda = [0.5, 0.7] }
            policies.bandit = { arms = [[1, 2, 3, 4]] }
            policies.oracle = {}
            "#,
        )
        .unwrap();
        rules.validate().unwrap();
        let keys: Vec<String> = rules.expand().unwrap().iter().map(MethodSpec::key).collect();
        assert_eq!(
            keys,
            [
                "roc 0.4 [1,20]",
                "pmin 0.75 n_max=16",
                "pmin 0 n_max=16",
                "dynamic K0=5 cap=64",
                "svip 0.3 [1,40]",
                "adaedl lambda=0.5 gamma=0.2 [1,16]",
                "adaedl lambda=0.7 gamma=0.2 [1,16]",
                "bandit K=1,2,3,4",
                "oracle"
            ]
        );
        let empty: MethodGrid = toml::from_str("policies.bandit = { arms = [] }").unwrap();
        assert!(format!("{:#}", empty.validate().unwrap_err()).contains("policies.bandit arms is empty"));
        let unknown = toml::from_str::<MethodGrid>("policies.fixed = { k = [2] }\nschedulers.tree = {}").unwrap_err();
        assert!(unknown.to_string().contains("unknown field `tree`"), "{unknown}");
    }
}
