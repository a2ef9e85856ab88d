//! SpecDec++ Theorem 4.1's oracle: stop right before each mismatch. It needs the AR output in
//! advance, so it exists only in replays of greedy runs (the replay implements it).

use crate::method::family::NoParameters;
use super::{Flag, HeadBinding, Partners, PolicyFamily, PolicyFlags, Reads};
use anyhow::{Result, bail, ensure};
use serde::{Deserialize, Serialize};
use specx_decoder::speculative::StopPolicy;

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Oracle {}

const REPLAY_ONLY: &str = "the oracle needs the AR output in advance: it can only be replayed (specx eval replay)";

impl PolicyFamily for Oracle {
    const NAME: &'static str = "oracle";
    const HELP: &'static str = "SpecDec++'s oracle: replays of greedy runs only";
    const READS: Reads = Reads::ArOutput;
    const FLAGS: &'static [Flag] = &[];
    type Grid = NoParameters;

    fn key(&self) -> String {
        "oracle".into()
    }
    fn max_candidates(&self) -> usize {
        usize::MAX
    }
    fn check(&self, partners: Partners) -> Result<()> {
        ensure!(
            partners.drafter == "plain" && partners.scheduler == "sequential",
            "the oracle replays the plain drafter's traces under the sequential scheduler only"
        );
        Ok(())
    }
    fn build(&self, _: HeadBinding) -> Result<Box<dyn StopPolicy>> {
        bail!(REPLAY_ONLY)
    }
    fn from_flags(_: &PolicyFlags) -> Result<Self> {
        bail!(REPLAY_ONLY)
    }
    fn settings(_: &NoParameters) -> Result<Vec<Self>> {
        Ok(vec![Self {}])
    }
    fn grid_lists(_: &NoParameters) -> Vec<(&'static str, usize)> {
        Vec::new()
    }
}
