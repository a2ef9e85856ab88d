//! Policies whose parameters `specx eval tune` fits and writes as JSON (threshold-plus, the
//! calibrated model): a setting is a file's parameters, named by the file's stem.

use super::{Flag, HeadBinding, Partners, PolicyFamily, PolicyFlags, Reads};
use anyhow::{Context, Result};
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};
use specx_decoder::speculative::StopPolicy;
use std::fmt::Debug;
use std::path::{Path, PathBuf};

/// Fitted parameters of one policy family.
pub trait FittedParams: Clone + Debug + PartialEq + Serialize + DeserializeOwned {
    /// The family's name ([`PolicyFamily::NAME`]).
    const NAME: &'static str;
    const HELP: &'static str;
    /// What the parameters are, in messages (`threshold-plus parameters`).
    const WHAT: &'static str;
    /// The `specx decode` flag naming the file.
    const FLAG: Flag;
    fn file(flags: &PolicyFlags) -> Option<&Path>;
    fn max_candidates(&self) -> usize;
    fn check(&self) -> Result<()>;
    fn build(&self) -> Result<Box<dyn StopPolicy>>;
}

/// A fitted setting: the parameters of one file, named `name` (the file's stem).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Fitted<P> {
    pub name: String,
    pub params: P,
}

/// `policies.threshold_plus = { params = ["tuned/threshold-plus/x.json"] }`: one setting per
/// fitted-parameter file (JSON, as `specx eval tune` writes them; named by the file's stem).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ParamFiles {
    pub params: Vec<PathBuf>,
}

impl<P: FittedParams> Fitted<P> {
    /// The setting of a fitted-parameter file.
    pub fn read(path: &Path) -> Result<Self> {
        let what = P::WHAT;
        let text =
            std::fs::read_to_string(path).with_context(|| format!("reading {what} parameters {}", path.display()))?;
        let params =
            serde_json::from_str(&text).with_context(|| format!("{}: not {what} parameters", path.display()))?;
        let name = path.file_stem().map_or_else(|| path.display().to_string(), |s| s.to_string_lossy().into_owned());
        Ok(Self { name, params })
    }
}

impl<P: FittedParams> PolicyFamily for Fitted<P> {
    const NAME: &'static str = P::NAME;
    const HELP: &'static str = P::HELP;
    const READS: Reads = Reads::DraftDistribution;
    const FLAGS: &'static [Flag] = &[P::FLAG];
    type Grid = ParamFiles;

    fn key(&self) -> String {
        format!("{} {}", P::NAME, self.name)
    }
    fn max_candidates(&self) -> usize {
        self.params.max_candidates()
    }
    fn check(&self, _: Partners) -> Result<()> {
        self.params.check()
    }
    fn build(&self, _: HeadBinding) -> Result<Box<dyn StopPolicy>> {
        self.params.build()
    }
    fn from_flags(f: &PolicyFlags) -> Result<Self> {
        let file = P::file(f).with_context(|| {
            format!("--policy {} needs {} FILE (fitted by specx eval tune)", P::NAME, P::FLAG.name())
        })?;
        Self::read(file)
    }
    fn settings(g: &ParamFiles) -> Result<Vec<Self>> {
        g.params.iter().map(|p| Self::read(p)).collect()
    }
    fn grid_lists(g: &ParamFiles) -> Vec<(&'static str, usize)> {
        vec![("params", g.params.len())]
    }
    fn grid_paths_mut(g: &mut ParamFiles) -> Vec<&mut PathBuf> {
        g.params.iter_mut().collect()
    }
}
