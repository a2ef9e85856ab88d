//! Threshold-plus: the confidence threshold moved by depth and this request's recent
//! acceptance, with fitted parameters (`specx eval tune` writes them) named `name`.

use super::{Flag, HeadBinding, Partners, PolicyFamily, PolicyFlags, Reads};
use anyhow::{Context, Result};
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};
use specx_decoder::speculative::{StopPolicy, ThresholdPlusParams, ThresholdPlusPolicy};
use std::path::{Path, PathBuf};

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ThresholdPlus {
    pub name: String,
    pub params: ThresholdPlusParams,
}

/// `policies.threshold_plus = { params = ["tuned/threshold-plus/x.json"] }`: one setting per
/// fitted-parameter file (JSON, as `specx eval tune` writes them; named by the file's stem).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ParamFiles {
    pub params: Vec<PathBuf>,
}

/// A fitted policy's parameters from a JSON file, and the setting's name (the file's stem).
pub fn fitted<T: DeserializeOwned>(path: &Path, what: &str) -> Result<(String, T)> {
    let text =
        std::fs::read_to_string(path).with_context(|| format!("reading {what} parameters {}", path.display()))?;
    let params = serde_json::from_str(&text).with_context(|| format!("{}: not {what} parameters", path.display()))?;
    let name = path.file_stem().map_or_else(|| path.display().to_string(), |s| s.to_string_lossy().into_owned());
    Ok((name, params))
}

impl ThresholdPlus {
    /// The setting of a fitted-parameter file, named by the file's stem.
    pub fn fitted(path: &Path) -> Result<Self> {
        let (name, params) = fitted(path, "threshold-plus")?;
        Ok(Self { name, params })
    }
}

impl PolicyFamily for ThresholdPlus {
    const NAME: &'static str = "threshold-plus";
    const HELP: &'static str = "Threshold-plus: the confidence threshold moved by depth and this request's recent acceptance, with the fitted parameters of --threshold-plus FILE (`specx eval tune`)";
    const READS: Reads = Reads::DraftDistribution;
    const FLAGS: &'static [Flag] = &[Flag::ThresholdPlus];
    type Grid = ParamFiles;

    fn key(&self) -> String {
        format!("threshold-plus {}", self.name)
    }
    fn max_candidates(&self) -> usize {
        self.params.max_candidates
    }
    fn check(&self, _: Partners) -> Result<()> {
        self.params.check()
    }
    fn build(&self, _: HeadBinding) -> Result<Box<dyn StopPolicy>> {
        Ok(Box::new(ThresholdPlusPolicy::new(self.params.clone())?))
    }
    fn from_flags(f: &PolicyFlags) -> Result<Self> {
        let file = f
            .threshold_plus()
            .context("--policy threshold-plus needs --threshold-plus FILE (fitted by specx eval tune)")?;
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
