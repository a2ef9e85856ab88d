//! `specx gpu-check`: the parts of the one-command GPU check (scripts/gpu-check.sh) that need
//! specx itself. The GPU machine has no Rust toolchain and receives about 64 MiB per command,
//! so the check carries a stripped binary and writes its models there: `shapes` records the
//! real pair's shapes here, `synth` writes random-weight models of those shapes there (the HF
//! transformers anchor loads the same files), `correctness` runs the tiny-model device checks
//! against the CPU, and `report` gathers every step's output into report.json and report.md.

mod bound;
pub mod report;
pub mod synth;
mod target;

use anyhow::Result;

#[derive(clap::Args, Debug)]
pub struct GpuCheckArgs {
    #[command(subcommand)]
    pub command: GpuCheckCommand,
}

#[derive(clap::Subcommand, Debug)]
pub enum GpuCheckCommand {
    /// Record the real draft/target pair's shapes (from the fetched GGUF files) as JSON, so
    /// that `synth` can write models of the same shapes on a machine without the weights.
    Shapes(synth::ShapesArgs),
    /// Write random-weight HF models (config.json, bf16 safetensors, tokenizer.json) of the
    /// shapes recorded by `shapes`: DIR/draft and DIR/target.
    Synth(synth::SynthArgs),
    /// Run the tiny-model checks (logits, KV rollback, greedy speculative, head, DSI across
    /// devices, EasySpec placement) on each device against the CPU; write JSON, print a table.
    Correctness(report::CorrectnessArgs),
    /// Gather a check directory's outputs (devices, correctness, bench, profiles, the HF
    /// anchor, the step log) into report.json and report.md, with the GPU targets judged.
    Report(report::ReportArgs),
}

pub fn run_cli(a: GpuCheckArgs) -> Result<()> {
    match a.command {
        GpuCheckCommand::Shapes(a) => synth::shapes(&a),
        GpuCheckCommand::Synth(a) => synth::synth(&a),
        GpuCheckCommand::Correctness(a) => report::correctness(&a),
        GpuCheckCommand::Report(a) => report::report(&a),
    }
}
