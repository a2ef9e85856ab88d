//! A calibrated acceptance model (logistic regression on the draft's statistics and depth,
//! temperatures per depth) under the per-token or the product rule, with fitted parameters
//! (`specx eval tune` writes them) named `name`.

use super::threshold_plus::{ParamFiles, fitted};
use super::{Flag, HeadBinding, Partners, PolicyFamily, PolicyFlags, Reads};
use anyhow::{Context, Result};
use serde::{Deserialize, Serialize};
use specx_decoder::speculative::{CalibratedParams, CalibratedPolicy, StopPolicy};
use std::path::{Path, PathBuf};

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Calibrated {
    pub name: String,
    pub params: CalibratedParams,
}

impl Calibrated {
    /// The setting of a fitted-parameter file, named by the file's stem.
    pub fn fitted(path: &Path) -> Result<Self> {
        let (name, params) = fitted(path, "calibrated-model")?;
        Ok(Self { name, params })
    }
}

impl PolicyFamily for Calibrated {
    const NAME: &'static str = "calibrated";
    const HELP: &'static str = "A calibrated acceptance model (logistic regression on the draft's statistics and depth) under the per-token or the product rule, with the fitted parameters of --calibrated FILE (`specx eval tune`)";
    const READS: Reads = Reads::DraftDistribution;
    const FLAGS: &'static [Flag] = &[Flag::Calibrated];
    type Grid = ParamFiles;

    fn key(&self) -> String {
        format!("calibrated {}", self.name)
    }
    fn max_candidates(&self) -> usize {
        self.params.max_candidates
    }
    fn check(&self, _: Partners) -> Result<()> {
        self.params.check()
    }
    fn build(&self, _: HeadBinding) -> Result<Box<dyn StopPolicy>> {
        Ok(Box::new(CalibratedPolicy::new(self.params.clone())?))
    }
    fn from_flags(f: &PolicyFlags) -> Result<Self> {
        let file = f.calibrated().context("--policy calibrated needs --calibrated FILE (fitted by specx eval tune)")?;
        Self::fitted(file)
    }
    fn settings(g: &ParamFiles) -> Result<Vec<Self>> {
        g.params.iter().map(|p| Self::fitted(p)).collect()
    }
    fn grid_lists(g: &ParamFiles) -> Vec<(&'static str, usize)> {
        vec![("params", g.params.len())]
    }
    fn grid_paths_mut(g: &mut ParamFiles) -> Vec<&mut PathBuf> {
        g.params.iter_mut().collect()
    }
}
