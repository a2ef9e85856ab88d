//! Threshold-plus: the confidence threshold moved by depth and this request's recent
//! acceptance, with fitted parameters (`specx eval tune` writes them).

use super::fitted::{Fitted, FittedParams};
use super::{Flag, PolicyFlags};
use anyhow::Result;
use specx_decoder::speculative::{StopPolicy, ThresholdPlusParams, ThresholdPlusPolicy};
use std::path::Path;

pub type ThresholdPlus = Fitted<ThresholdPlusParams>;

impl FittedParams for ThresholdPlusParams {
    const NAME: &'static str = "threshold-plus";
    const HELP: &'static str = "Threshold-plus: the confidence threshold moved by depth and this request's recent acceptance, with the fitted parameters of --threshold-plus FILE (`specx eval tune`)";
    const WHAT: &'static str = "threshold-plus";
    const FLAG: Flag = Flag::ThresholdPlus;

    fn file(flags: &PolicyFlags) -> Option<&Path> {
        flags.threshold_plus()
    }
    fn max_candidates(&self) -> usize {
        self.max_candidates
    }
    fn check(&self) -> Result<()> {
        ThresholdPlusParams::check(self)
    }
    fn build(&self) -> Result<Box<dyn StopPolicy>> {
        Ok(Box::new(ThresholdPlusPolicy::new(self.clone())?))
    }
}
