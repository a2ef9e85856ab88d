//! The config of `specx eval tune`: the two trace runs, the candidate settings of every
//! training-free rule and head, the cost models, and how threshold-plus is fitted.

use crate::common::costs::Costs;
use crate::experiment::methods::MethodsConfig;
use crate::experiment::replay_run::resolve_method_paths;
use anyhow::{Context, Result, ensure};
use serde::{Deserialize, Serialize};
use specx_run::config::read_toml;
use specx_run::paths::resolve_path;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TuneConfig {
    /// Run directory of the tuning traces (greedy AR outputs of prompts that are not test
    /// prompts): every free parameter is chosen on them.
    pub tuning: PathBuf,
    /// Run directory of the test traces: replayed once, with the chosen settings only.
    pub test: PathBuf,
    /// The candidate settings (a `[methods]` table as in replay grids): each family's best on
    /// the tuning traces is the one reported. Fixed K is the reference; the oracle, if listed,
    /// is reported as the headroom.
    pub methods: MethodsConfig,
    /// Cost models; each picks its own settings (the best K and threshold depend on prices).
    pub costs: Vec<Costs>,
    /// Heads that form a family of their own (family name -> head names).
    #[serde(default)]
    pub head_families: BTreeMap<String, Vec<String>>,
    /// Threshold-plus's fit (absent: not fitted).
    pub threshold_plus: Option<ThresholdPlusFit>,
    /// The calibrated acceptance model's fit (absent: not fitted).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub calibrated: Option<CalibratedFit>,
    /// Bootstrap resamples of the prompts for every interval.
    #[serde(default = "default_resamples")]
    pub bootstrap: usize,
    #[serde(default)]
    pub seed: u64,
    /// Where the tables, the fitted parameters and the per-set results go.
    pub out: PathBuf,
    /// An earlier replay of the test traces holding the candidates (`specx eval replay`): the
    /// report then also shows what picking each family's setting on the test traces themselves
    /// would have claimed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub in_sample: Option<PathBuf>,
    /// An earlier tune output (its `out`) over the same traces and cost models: the settings it
    /// chose (every family but the learned ones) join the tables, their test counts read, not
    /// replayed. Fixed K may then be left out of the candidates.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rules_from: Option<PathBuf>,
}

fn default_resamples() -> usize {
    2000
}

/// How threshold-plus is fitted: coordinate search from the tuned confidence threshold.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ThresholdPlusFit {
    /// Most candidates per round.
    #[serde(default = "default_max")]
    pub max_candidates: usize,
    /// Passes over the coordinates (step sizes halve after each).
    #[serde(default = "default_passes")]
    pub passes: usize,
}

/// How the calibrated acceptance model is fitted: a logistic regression on the tuning traces'
/// trunk positions (labels: the draft's token equals the target's), temperatures per depth on
/// held-out tuning prompts, each rule's threshold by replayed throughput, and optionally the
/// product rule's weights moved further by coordinate search on replayed throughput.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CalibratedFit {
    /// Thresholds tried for each rule (probabilities).
    pub thresholds: Vec<f64>,
    /// Most candidates per round.
    #[serde(default = "default_max")]
    pub max_candidates: usize,
    /// Every n-th tuning prompt (the n-th, 2n-th, ...) is held out for the temperatures.
    #[serde(default = "default_holdout")]
    pub holdout_every: usize,
    /// L2 penalty on the weights (not the constant) of the logistic regression.
    #[serde(default = "default_l2")]
    pub l2: f64,
    /// Passes of the coordinate search on throughput (0: no search).
    #[serde(default)]
    pub passes: usize,
    /// Also read the target's top-1 probability and entropy at the last committed token (one
    /// target forward over every trace computes them, with the traces' weights); the rules
    /// are then named `calibrated+target`, `calibrated-product+target`, `calibrated-fit+target`.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub target: bool,
}

fn default_holdout() -> usize {
    4
}

fn default_l2() -> f64 {
    1.0
}

fn default_max() -> usize {
    20
}

fn default_passes() -> usize {
    3
}

/// `path` relative to `base`, both absolute: the shared leading components dropped, one `..`
/// per remaining component of `base`.
pub fn relative(path: &Path, base: &Path) -> PathBuf {
    let (p, b): (Vec<_>, Vec<_>) = (path.components().collect(), base.components().collect());
    let shared = p.iter().zip(&b).take_while(|(x, y)| x == y).count();
    if shared == 0 {
        return path.to_path_buf();
    }
    let mut out: PathBuf = b[shared..].iter().map(|_| "..").collect();
    out.extend(&p[shared..]);
    out
}

impl TuneConfig {
    /// Every path of the config mapped through `f`.
    fn map_paths(&self, f: impl Fn(&Path) -> PathBuf) -> Self {
        let mut c = self.clone();
        for p in [&mut c.tuning, &mut c.test, &mut c.out]
            .into_iter()
            .chain(c.in_sample.as_mut())
            .chain(c.rules_from.as_mut())
            .chain(c.costs.iter_mut().filter_map(|c| c.profile.as_mut()))
        {
            *p = f(p);
        }
        for p in c.methods.paths_mut() {
            *p = f(p);
        }
        c
    }

    /// The config with its paths relative to `base` (as written beside results, so that they
    /// read the same in every clone).
    pub fn relative_to(&self, base: &Path) -> Self {
        self.map_paths(|p| relative(p, base))
    }

    /// The config with its relative paths resolved against `base`.
    pub fn resolved_against(&self, base: &Path) -> Self {
        self.map_paths(|p| resolve_path(p, base))
    }

    /// Whether `other` computes the same results (it may report them differently: intervals,
    /// the in-sample comparison, the rules joined from elsewhere, where the report goes).
    pub fn same_computation(&self, other: &Self) -> bool {
        (
            &self.tuning,
            &self.test,
            &self.methods,
            &self.costs,
            &self.head_families,
            &self.threshold_plus,
            &self.calibrated,
        ) == (
            &other.tuning,
            &other.test,
            &other.methods,
            &other.costs,
            &other.head_families,
            &other.threshold_plus,
            &other.calibrated,
        )
    }

    pub fn load(path: &Path) -> Result<Self> {
        let (mut c, base): (Self, PathBuf) = read_toml(path)?;
        c.tuning = resolve_path(&c.tuning, &base);
        c.test = resolve_path(&c.test, &base);
        c.out = resolve_path(&c.out, &base);
        c.in_sample = c.in_sample.map(|p| resolve_path(&p, &base));
        c.rules_from = c.rules_from.map(|p| resolve_path(&p, &base));
        resolve_method_paths(&mut c.methods, &base, path)?;
        ensure!(!c.costs.is_empty(), "{}: give at least one [[costs]] model", path.display());
        for costs in &mut c.costs {
            costs.resolve(&base).with_context(|| format!("{}", path.display()))?;
        }
        ensure!(
            c.tuning != c.test,
            "{}: the tuning and test traces are the same run ({})",
            path.display(),
            c.test.display()
        );
        if let Some(f) = &c.threshold_plus {
            ensure!(
                f.max_candidates >= 1 && f.passes >= 1,
                "{}: [threshold_plus] needs max_candidates >= 1 and passes >= 1",
                path.display()
            );
        }
        if let Some(f) = &c.calibrated {
            ensure!(
                !f.thresholds.is_empty() && f.thresholds.iter().all(|t| (0.0..=1.0).contains(t)),
                "{}: [calibrated] needs thresholds in [0, 1]",
                path.display()
            );
            ensure!(
                f.max_candidates >= 1 && f.holdout_every >= 2 && f.l2 >= 0.0,
                "{}: [calibrated] needs max_candidates >= 1, holdout_every >= 2 and l2 >= 0",
                path.display()
            );
        }
        Ok(c)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn relative_paths_climb_to_the_shared_directory() {
        let r = |p: &str, b: &str| relative(Path::new(p), Path::new(b));
        assert_eq!(r("/repo/traces/tuning", "/repo/docs/out/sets"), PathBuf::from("../../../traces/tuning"));
        assert_eq!(r("/repo/docs/out/sets/a.json", "/repo/docs/out/sets"), PathBuf::from("a.json"));
        assert_eq!(
            resolve_path(&r("/repo/traces/tuning", "/repo/docs/out/sets"), Path::new("/repo/docs/out/sets")),
            PathBuf::from("/repo/traces/tuning")
        );
    }
}
