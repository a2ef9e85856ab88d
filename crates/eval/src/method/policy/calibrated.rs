//! A calibrated acceptance model (logistic regression on the draft's statistics and depth,
//! temperatures per depth) under the per-token or the product rule, with fitted parameters
//! (`specx eval tune` writes them).

use super::fitted::{Fitted, FittedParams};
use super::{Flag, PolicyFlags};
use anyhow::Result;
use specx_decoder::speculative::{CalibratedParams, CalibratedPolicy, StopPolicy};
use std::path::Path;

pub type Calibrated = Fitted<CalibratedParams>;

impl FittedParams for CalibratedParams {
    const NAME: &'static str = "calibrated";
    const HELP: &'static str = "A calibrated acceptance model (logistic regression on the draft's statistics and depth) under the per-token or the product rule, with the fitted parameters of --calibrated FILE (`specx eval tune`)";
    const WHAT: &'static str = "calibrated-model";
    const FLAG: Flag = Flag::Calibrated;

    fn file(flags: &PolicyFlags) -> Option<&Path> {
        flags.calibrated()
    }
    fn max_candidates(&self) -> usize {
        self.max_candidates
    }
    fn check(&self) -> Result<()> {
        CalibratedParams::check(self)
    }
    fn build(&self) -> Result<Box<dyn StopPolicy>> {
        Ok(Box::new(CalibratedPolicy::new(self.clone())?))
    }
}
