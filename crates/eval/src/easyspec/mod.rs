//! EasySpec (`../shared/papers/easyspec.txt`) measurements behind `specx easyspec`: the
//! approximation precision of fuzzy layers (the paper's Table 5). Decoding with EasySpec is
//! the `easyspec` method of `specx decode` and `specx eval`.

pub mod similarity;

use anyhow::Result;
use clap::{Args, Subcommand};

#[derive(Args)]
pub struct EasySpecArgs {
    #[command(subcommand)]
    pub command: EasySpecCommand,
}

#[derive(Subcommand)]
pub enum EasySpecCommand {
    /// The analogue of the paper's Table 5: cosine similarity between the precise and the
    /// fuzzy attention input, q, k, v and attention output of the draft, per layer-parallel
    /// strategy, over positions of a finished eval run's greedy outputs (each position drafted
    /// once with an exact cache, as the first fuzzy step after a calibration). Writes
    /// similarity.json (per layer) and summary.md.
    Similarity(similarity::SimilarityArgs),
}

pub fn run_cli(a: EasySpecArgs) -> Result<()> {
    match a.command {
        EasySpecCommand::Similarity(a) => similarity::run(&a),
    }
}
