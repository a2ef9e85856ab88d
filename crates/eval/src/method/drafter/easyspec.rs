//! EasySpec's layer-parallel ("fuzzy") draft with bonus calibration.

use super::{DraftModels, DrafterFamily, DrafterFlag, DrafterFlags};
use crate::method::policy::PolicySpec;
use anyhow::{Context, Result, ensure};
use serde::{Deserialize, Serialize};
use specx_decoder::DraftTransform;
use specx_decoder::layer_groups::LayerGroups;
use specx_decoder::speculative::{Calibration, Compat, Drafter, FuzzyDrafter};

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct EasySpec {
    /// Layer groups: `lp1`..`lp5` (the paper's Table 6) or its notation `0,1-3,4-7,...`.
    pub strategy: String,
    pub calibration: Calibration,
    /// Threads running a group's attentions (timing only: the tokens never depend on it).
    pub workers: usize,
    /// `reference` picks the argmax of q as EasySpec's code does (not lossless at T > 0).
    #[serde(default, skip_serializing_if = "is_lossless")]
    pub compat: Compat,
}

fn is_lossless(c: &Compat) -> bool {
    *c == Compat::Lossless
}

/// `drafters.easyspec = { strategies = ["lp4"], calibrations = ["every_round"] }`: every
/// strategy x calibration.
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

impl DrafterFamily for EasySpec {
    const NAME: &'static str = "easyspec";
    const HELP: &'static str = "EasySpec's layer-parallel (\"fuzzy\") draft";
    const FLAGS: &'static [DrafterFlag] = &[
        DrafterFlag::DraftDevices,
        DrafterFlag::Strategy,
        DrafterFlag::Calibration,
        DrafterFlag::Workers,
        DrafterFlag::Compat,
    ];
    type Grid = EasySpecDrafters;

    fn key(&self, body: String) -> String {
        let workers = if self.workers > 1 { format!(" x{}", self.workers) } else { String::new() };
        let compat = if self.compat == Compat::Reference { " (reference compat)" } else { "" };
        format!("easyspec {} {}{workers}{compat} | {body}", self.strategy, self.calibration.name())
    }
    fn check(&self, _: &PolicySpec, _: &DraftTransform) -> Result<()> {
        LayerGroups::check_syntax(&self.strategy)
            .map_err(|e| anyhow::anyhow!("strategy '{}': {e:#}", self.strategy))?;
        ensure!(self.workers >= 1, "EasySpec needs at least 1 worker");
        Ok(())
    }
    fn build<'m>(&self, models: DraftModels<'m>) -> Result<Box<dyn Drafter + 'm>> {
        let draft = models.draft()?;
        let groups = LayerGroups::parse(&self.strategy, draft.config().num_hidden_layers)
            .with_context(|| format!("strategy '{}'", self.strategy))?;
        Ok(Box::new(FuzzyDrafter::new(draft, groups, self.calibration)?.with_workers(self.workers).with_compat(self.compat)))
    }
    fn from_flags(f: &DrafterFlags) -> Result<Self> {
        Ok(Self {
            strategy: f.strategy.clone().unwrap_or_else(|| "lp4".into()),
            calibration: f.calibration.unwrap_or(Calibration::EveryRound),
            workers: f.workers.unwrap_or(1),
            compat: f.compat.unwrap_or_default(),
        })
    }
    fn settings(g: &EasySpecDrafters) -> Vec<Self> {
        let mut out = Vec::new();
        for strategy in &g.strategies {
            out.extend(g.calibrations.iter().map(|&calibration| Self {
                strategy: strategy.clone(),
                calibration,
                workers: g.workers.unwrap_or(1),
                compat: Compat::Lossless,
            }));
        }
        out
    }
    fn grid_lists(g: &EasySpecDrafters) -> Vec<(&'static str, usize)> {
        vec![("strategies", g.strategies.len()), ("calibrations", g.calibrations.len())]
    }
}
