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

use crate::method::{DrafterSpec, MethodSpec, PAPER_BOUNDS, PolicySpec, SchedulerSpec, head_name};
use anyhow::{Result, ensure};
use serde::{Deserialize, Serialize};
use specx_decoder::DraftTransform;
use specx_decoder::speculative::{Calibration, Compat};
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

/// The shipped rule at the settings chosen for these price models.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AdaptivePolicies {
    pub hardware: Vec<crate::method::adaptive::Hardware>,
}

/// A part without parameters (`plain = {}`, `sequential = {}`).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct NoParameters {}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DrafterAxis {
    pub plain: Option<NoParameters>,
    /// EasySpec's layer-parallel drafter: every strategy x calibration.
    pub easyspec: Option<EasySpecDrafters>,
    /// Prompt lookup, for every `[ngram_min, ngram_max]` (policies: fixed, dynamic, bandit,
    /// matchrate).
    pub lookup: Option<LookupDrafters>,
    /// Prompt lookup, else the draft model, for every `[ngram_min, ngram_max]`.
    pub hybrid: Option<LookupDrafters>,
    /// An EAGLE-style feature head, for every head directory (`specx train-feature-head`).
    pub feature: Option<FeatureDrafters>,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FeatureDrafters {
    pub heads: Vec<PathBuf>,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LookupDrafters {
    pub ngrams: Vec<[usize; 2]>,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct EasySpecDrafters {
    /// `lp1`..`lp5` (the paper's Table 6) or the paper's notation `"0,1-3,4-7,..."`.
    pub strategies: Vec<String>,
    /// `never`, `prefill_only`, `every_round`, `every_mismatch`.
    pub calibrations: Vec<Calibration>,
    /// Threads running a group's attentions (timing only) [default 1].
    pub workers: Option<usize>,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PolicyAxis {
    /// Fixed K, for every `k`.
    pub fixed: Option<FixedPolicies>,
    /// SpecDec++'s acceptance head: every head x threshold x bounds.
    pub head: Option<HeadPolicies>,
    /// SpecDec++'s rule on the newest head prediction alone: every head x threshold x bounds.
    pub head_token: Option<HeadPolicies>,
    /// HF's confidence criterion: every threshold x bounds.
    pub confidence: Option<ConfidencePolicies>,
    /// SpecDec++'s product rule on the draft's confidence: every threshold x bounds.
    pub confidence_product: Option<ConfidencePolicies>,
    /// HF's confidence criterion with the online ROC threshold: every threshold x max.
    pub roc: Option<ThresholdPolicies>,
    /// llama.cpp's p_min: every p_min x n_max.
    pub pmin: Option<PMinPolicies>,
    /// HF's dynamic schedule: every initial K (all with one cap).
    pub dynamic: Option<DynamicPolicies>,
    /// SVIP: every threshold x max.
    pub svip: Option<ThresholdPolicies>,
    /// AdaEDL: every initial lambda x gamma x max.
    pub adaedl: Option<AdaEdlPolicies>,
    /// A bandit over K: every arm set.
    pub bandit: Option<BanditPolicies>,
    /// Prompt lookup's rule on its matches' acceptance: every threshold x max (x model K).
    pub matchrate: Option<MatchRatePolicies>,
    /// Threshold-plus, one setting per fitted-parameter file (JSON, as `specx eval tune`
    /// writes them; named by the file's stem).
    pub threshold_plus: Option<ParamFiles>,
    /// The calibrated acceptance model, one setting per fitted-parameter file (JSON, as
    /// `specx eval tune` writes them; named by the file's stem).
    pub calibrated: Option<ParamFiles>,
    /// SpecDec++'s oracle (greedy replays only).
    pub oracle: Option<NoParameters>,
    /// The stop rule that ships (`checkpoints/adaptive/rule.json`), at its setting for each of
    /// `hardware` (`gpu`, `cpu`); the results name the rule and setting it resolved to.
    pub adaptive: Option<AdaptivePolicies>,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ParamFiles {
    pub params: Vec<PathBuf>,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ThresholdPolicies {
    pub thresholds: Vec<f64>,
    pub max: Vec<usize>,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct MatchRatePolicies {
    pub thresholds: Vec<f64>,
    pub max: Vec<usize>,
    /// The hybrid's draft-model rounds at fixed K, for every K listed; none: by the draft's
    /// confidence under the same threshold.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub model_k: Vec<usize>,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PMinPolicies {
    pub p_min: Vec<f64>,
    pub n_max: Vec<usize>,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DynamicPolicies {
    pub initial: Vec<usize>,
    /// Largest K the schedule may reach [default 64].
    #[serde(default = "dynamic_cap")]
    pub cap: usize,
}

fn dynamic_cap() -> usize {
    64
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AdaEdlPolicies {
    pub lambda: Vec<f64>,
    #[serde(default = "adaedl_gamma")]
    pub gamma: Vec<f64>,
    #[serde(default = "adaedl_max")]
    pub max: Vec<usize>,
}

fn adaedl_gamma() -> Vec<f64> {
    vec![0.2]
}
fn adaedl_max() -> Vec<usize> {
    vec![16]
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct BanditPolicies {
    pub arms: Vec<Vec<usize>>,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FixedPolicies {
    pub k: Vec<usize>,
}

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

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ConfidencePolicies {
    /// f64 like the head's thresholds, so a setting's key reads as written (0.7); the policy
    /// takes it as f32.
    pub thresholds: Vec<f64>,
    #[serde(default = "paper_bounds")]
    pub bounds: Vec<[usize; 2]>,
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

fn paper_bounds() -> Vec<[usize; 2]> {
    vec![PAPER_BOUNDS]
}

impl DrafterAxis {
    pub fn expand(&self) -> Vec<DrafterSpec> {
        let mut out = Vec::new();
        if self.plain.is_some()
            || (self.easyspec.is_none() && self.lookup.is_none() && self.hybrid.is_none() && self.feature.is_none())
        {
            out.push(DrafterSpec::Plain);
        }
        if let Some(g) = &self.easyspec {
            for s in &g.strategies {
                for &calibration in &g.calibrations {
                    out.push(DrafterSpec::EasySpec {
                        strategy: s.clone(),
                        calibration,
                        workers: g.workers.unwrap_or(1),
                        compat: Compat::Lossless,
                    });
                }
            }
        }
        if let Some(g) = &self.lookup {
            out.extend(g.ngrams.iter().map(|&[ngram_min, ngram_max]| DrafterSpec::Lookup { ngram_min, ngram_max }));
        }
        if let Some(g) = &self.hybrid {
            out.extend(g.ngrams.iter().map(|&[ngram_min, ngram_max]| DrafterSpec::Hybrid { ngram_min, ngram_max }));
        }
        if let Some(g) = &self.feature {
            out.extend(g.heads.iter().map(|h| DrafterSpec::Feature { head: h.to_string_lossy().into_owned() }));
        }
        out
    }
}

impl FixedPolicies {
    pub fn specs(&self) -> Vec<PolicySpec> {
        self.k.iter().map(|&k| PolicySpec::Fixed { k }).collect()
    }
}

impl HeadPolicies {
    /// Every head x threshold x bounds under SpecDec++'s rule, heads named by their directories.
    pub fn specs(&self) -> Vec<PolicySpec> {
        self.specs_as(|head, threshold, min, max| PolicySpec::Head { head, threshold, min, max })
    }

    /// Every head x threshold x bounds as `make(head, threshold, min, max)`.
    pub fn specs_as(&self, make: fn(String, f64, usize, usize) -> PolicySpec) -> Vec<PolicySpec> {
        let mut out = Vec::new();
        for h in &self.heads {
            for &threshold in &self.thresholds {
                out.extend(self.bounds.iter().map(|&[min, max]| make(head_name(h), threshold, min, max)));
            }
        }
        out
    }
}

impl ConfidencePolicies {
    /// Every threshold x bounds under HF's per-token rule.
    pub fn specs(&self) -> Vec<PolicySpec> {
        self.specs_as(|threshold, min, max| PolicySpec::Confidence { threshold, min, max })
    }

    /// Every threshold x bounds as `make(threshold, min, max)`.
    pub fn specs_as(&self, make: fn(f64, usize, usize) -> PolicySpec) -> Vec<PolicySpec> {
        self.thresholds
            .iter()
            .flat_map(|&threshold| self.bounds.iter().map(move |&[min, max]| make(threshold, min, max)))
            .collect()
    }
}

/// Every `a` x `b` as `make(a, b)`.
fn product<A: Copy, B: Copy>(a: &[A], b: &[B], make: impl Fn(A, B) -> PolicySpec) -> Vec<PolicySpec> {
    a.iter().flat_map(|&x| b.iter().map(move |&y| (x, y))).map(|(x, y)| make(x, y)).collect()
}

impl PolicyAxis {
    pub fn expand(&self) -> Result<Vec<PolicySpec>> {
        let mut out = Vec::new();
        out.extend(self.fixed.iter().flat_map(FixedPolicies::specs));
        out.extend(self.head.iter().flat_map(HeadPolicies::specs));
        out.extend(
            self.head_token.iter().flat_map(|g| {
                g.specs_as(|head, threshold, min, max| PolicySpec::HeadToken { head, threshold, min, max })
            }),
        );
        out.extend(self.confidence.iter().flat_map(ConfidencePolicies::specs));
        out.extend(
            self.confidence_product
                .iter()
                .flat_map(|g| g.specs_as(|threshold, min, max| PolicySpec::ConfidenceProduct { threshold, min, max })),
        );
        out.extend(
            self.roc
                .iter()
                .flat_map(|g| product(&g.thresholds, &g.max, |threshold, max| PolicySpec::Roc { threshold, max })),
        );
        out.extend(
            self.pmin
                .iter()
                .flat_map(|g| product(&g.p_min, &g.n_max, |p_min, n_max| PolicySpec::PMin { p_min, n_max })),
        );
        out.extend(
            self.dynamic
                .iter()
                .flat_map(|g| g.initial.iter().map(|&initial| PolicySpec::Dynamic { initial, cap: g.cap })),
        );
        out.extend(
            self.svip
                .iter()
                .flat_map(|g| product(&g.thresholds, &g.max, |threshold, max| PolicySpec::Svip { threshold, max })),
        );
        if let Some(g) = &self.adaedl {
            for &lambda in &g.lambda {
                out.extend(product(&g.gamma, &g.max, |gamma, max| PolicySpec::AdaEdl { lambda, gamma, max }));
            }
        }
        out.extend(
            self.bandit.iter().flat_map(|g| g.arms.iter().map(|arms| PolicySpec::Bandit { arms: arms.clone() })),
        );
        if let Some(g) = &self.matchrate {
            let model_k: Vec<Option<usize>> =
                if g.model_k.is_empty() { vec![None] } else { g.model_k.iter().map(|&k| Some(k)).collect() };
            for &threshold in &g.thresholds {
                out.extend(product(&g.max, &model_k, |max, model_k| PolicySpec::MatchRate { threshold, max, model_k }));
            }
        }
        for path in self.threshold_plus.iter().flat_map(|g| &g.params) {
            out.push(PolicySpec::fitted_threshold_plus(path)?);
        }
        for path in self.calibrated.iter().flat_map(|g| &g.params) {
            out.push(PolicySpec::fitted_calibrated(path)?);
        }
        for &h in self.adaptive.iter().flat_map(|g| &g.hardware) {
            out.push(crate::method::adaptive::shipped_policy(h)?);
        }
        out.extend(self.oracle.iter().map(|_| PolicySpec::Oracle));
        Ok(out)
    }
}

impl SchedulerAxis {
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
            "[[methods.grid]] lists no policy: give policies.fixed, head, confidence, roc, pmin, dynamic, svip, adaedl, bandit or oracle"
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

    /// Every head directory the grid names.
    pub fn head_dirs(&self) -> impl Iterator<Item = &PathBuf> {
        self.policies.head.iter().chain(&self.policies.head_token).flat_map(|g| &g.heads)
    }

    pub fn head_dirs_mut(&mut self) -> impl Iterator<Item = &mut PathBuf> {
        self.policies.head.iter_mut().chain(&mut self.policies.head_token).flat_map(|g| &mut g.heads)
    }

    /// Threshold-plus's and the calibrated model's parameter files (resolved against the
    /// config's directory).
    pub fn fitted_files_mut(&mut self) -> impl Iterator<Item = &mut PathBuf> {
        self.policies.threshold_plus.iter_mut().chain(&mut self.policies.calibrated).flat_map(|g| &mut g.params)
    }

    /// The feature heads' directories (resolved against the config's directory like the
    /// acceptance heads').
    pub fn feature_head_dirs_mut(&mut self) -> impl Iterator<Item = &mut PathBuf> {
        self.drafters.feature.iter_mut().flat_map(|g| &mut g.heads)
    }

    /// Empty lists (a part given with nothing to run) are mistakes, not empty products.
    pub fn validate(&self) -> Result<()> {
        let empty = |what: &str| format!("[[methods.grid]] {what} is empty");
        if let Some(g) = &self.drafters.easyspec {
            ensure!(
                !g.strategies.is_empty() && !g.calibrations.is_empty(),
                "{}",
                empty("drafters.easyspec strategies or calibrations")
            );
        }
        for (name, g) in [("lookup", &self.drafters.lookup), ("hybrid", &self.drafters.hybrid)] {
            ensure!(g.as_ref().is_none_or(|g| !g.ngrams.is_empty()), "{}", empty(&format!("drafters.{name} ngrams")));
        }
        if let Some(g) = &self.drafters.feature {
            ensure!(!g.heads.is_empty(), "{}", empty("drafters.feature heads"));
            for h in &g.heads {
                ensure!(
                    h.join("feature-head.json").is_file(),
                    "[[methods.grid]] feature head {} is not a feature head (no feature-head.json; `specx train-feature-head` writes one)",
                    h.display()
                );
            }
        }
        if let Some(g) = &self.policies.fixed {
            ensure!(!g.k.is_empty(), "{}", empty("policies.fixed k"));
        }
        if let Some(g) = &self.policies.head {
            ensure!(
                !g.heads.is_empty() && !g.thresholds.is_empty() && !g.bounds.is_empty(),
                "{}",
                empty("policies.head heads, thresholds or bounds")
            );
            for h in &g.heads {
                ensure!(
                    h.join("head.json").is_file(),
                    "[[methods.grid]] head {} is not a head checkpoint (no head.json; `specx train` writes one)",
                    h.display()
                );
            }
        }
        if let Some(g) = &self.policies.confidence {
            ensure!(
                !g.thresholds.is_empty() && !g.bounds.is_empty(),
                "{}",
                empty("policies.confidence thresholds or bounds")
            );
        }
        let p = &self.policies;
        for (name, lists) in [
            ("roc thresholds or max", p.roc.as_ref().map(|g| [g.thresholds.len(), g.max.len()])),
            ("pmin p_min or n_max", p.pmin.as_ref().map(|g| [g.p_min.len(), g.n_max.len()])),
            ("dynamic initial", p.dynamic.as_ref().map(|g| [g.initial.len(), 1])),
            ("svip thresholds or max", p.svip.as_ref().map(|g| [g.thresholds.len(), g.max.len()])),
            (
                "adaedl lambda, gamma or max",
                p.adaedl.as_ref().map(|g| [g.lambda.len(), g.gamma.len().min(g.max.len())]),
            ),
            ("bandit arms", p.bandit.as_ref().map(|g| [g.arms.len(), 1])),
        ] {
            ensure!(lists.is_none_or(|l| l.iter().all(|&n| n > 0)), "{}", empty(&format!("policies.{name}")));
        }
        if let Some(g) = &self.schedulers.dsi {
            ensure!(!g.servers.is_empty(), "{}", empty("schedulers.dsi servers"));
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
