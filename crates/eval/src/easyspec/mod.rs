//! EasySpec (`../shared/papers/easyspec.txt`) measurements behind `specx easyspec`: the
//! approximation precision of fuzzy layers (the paper's Table 5) and a timing model for N
//! devices. Decoding with EasySpec is
//! the `easyspec` method of `specx decode` and `specx eval`.

pub mod acceptance;
pub mod bench;
pub mod similarity;
pub mod timing;

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
    /// The analogue of the paper's Figure 4 from finished runs (greedy replays or real runs):
    /// acceptance α and accepted length per LP size x calibration policy x K against the plain
    /// drafter, the relative drop, calibrations per token; writes summary.md, acceptance.json
    /// and one PNG per prompt set and sampling setting.
    Acceptance(acceptance::AcceptanceArgs),
    /// A timing model for N devices: per-layer draft times from `specx profile`, a
    /// communication cost per group (a parameter), and the exact counts of greedy easyspec
    /// replays give each setting's draft-forward, drafting-stage and end-to-end speedup over
    /// the plain drafter. Writes timing.json and summary.md.
    Timing(timing::TimingArgs),
    /// Real drafting time here: single-token draft forwards, sequential vs each strategy on
    /// 1..W worker threads, timed interleaved in one run (median, p10-p90, ratio).
    Bench(bench::BenchArgs),
}

pub fn run_cli(a: EasySpecArgs) -> Result<()> {
    match a.command {
        EasySpecCommand::Similarity(a) => similarity::run(&a),
        EasySpecCommand::Acceptance(a) => acceptance::run(&a),
        EasySpecCommand::Timing(a) => timing::run(&a),
        EasySpecCommand::Bench(a) => bench::run(&a),
    }
}
