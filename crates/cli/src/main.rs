//! `specx`: command-line front end. Parses arguments and dispatches; the work lives in the
//! library crates.

use anyhow::{Context, Result};
use clap::{Args, Parser, Subcommand};
use specx_decoder::generate::generate;
use specx_decoder::tokenizer::TextStream;
use specx_decoder::{device_from_name, load_model, ChatTemplate, Sampler, SamplingConfig};
use std::io::Write;
use std::path::PathBuf;
use std::time::Instant;

#[derive(Parser)]
#[command(name = "specx", version, about = "Adaptive drafting for speculative decoding: runtime, data generation, training and evaluation")]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Generate text with one model, streaming it, and report prefill and decode speed.
    Generate(GenerateArgs),
    /// Measure decode/prefill speed of the draft and target, peak memory, and the machine's
    /// memory-bandwidth bound, all in one run.
    Bench(specx_eval::bench::BenchArgs),
}

/// Sampling options shared by every command that generates.
#[derive(Args, Clone, Debug)]
pub struct SamplingArgs {
    /// Softmax temperature; 0 means greedy decoding.
    #[arg(long, default_value_t = 0.0)]
    temperature: f32,
    /// Keep only the k most likely tokens before sampling.
    #[arg(long)]
    top_k: Option<usize>,
    /// Keep the smallest set of most likely tokens whose probability reaches p (nucleus).
    #[arg(long)]
    top_p: Option<f32>,
    /// Seed of the sampling random number generator.
    #[arg(long, default_value_t = 0)]
    seed: u64,
}

impl SamplingArgs {
    fn config(&self) -> Result<SamplingConfig> {
        let c = SamplingConfig { temperature: self.temperature, top_k: self.top_k, top_p: self.top_p };
        c.validate()?;
        Ok(c)
    }
}

#[derive(Args)]
struct GenerateArgs {
    /// Model: an HF directory (config.json, *.safetensors, tokenizer.json) or a .gguf file
    /// with tokenizer.json beside it.
    #[arg(long)]
    model: PathBuf,
    /// tokenizer.json to use instead of the one beside the model.
    #[arg(long)]
    tokenizer: Option<PathBuf>,
    /// The prompt text.
    #[arg(long)]
    prompt: String,
    /// Wrap the prompt in Qwen's ChatML chat template (for instruct models).
    #[arg(long)]
    chat: bool,
    /// Maximum number of tokens to generate (generation also stops at an end-of-sequence token).
    #[arg(long, default_value_t = 128)]
    max_new_tokens: usize,
    #[command(flatten)]
    sampling: SamplingArgs,
    /// Compute device: cpu, or cuda[:N] in builds with the `cuda` feature.
    #[arg(long, default_value = "cpu")]
    device: String,
}

fn run_generate(a: GenerateArgs) -> Result<()> {
    let sampling = a.sampling.config()?;
    let device = device_from_name(&a.device)?;
    let t = Instant::now();
    let lm = load_model(&a.model, a.tokenizer.as_deref(), &device)?;
    eprintln!("loaded {} in {:.1} s", a.model.display(), t.elapsed().as_secs_f64());
    let template = if a.chat { ChatTemplate::qwen() } else { ChatTemplate::None };
    let prompt = lm.tokenizer.encode(&template.apply(&a.prompt))?;
    let mut sampler = Sampler::new(sampling, a.sampling.seed);
    let mut stream = TextStream::new(&lm.tokenizer);
    let mut stdout = std::io::stdout();
    let (tokens, stats) = generate(&lm.model, &prompt, a.max_new_tokens, &mut sampler, &lm.eos_ids, |id| {
        if let Some(piece) = stream.push(id)? {
            print!("{piece}");
            stdout.flush().context("writing to stdout")?;
        }
        Ok(())
    })?;
    println!();
    eprintln!(
        "prompt {} tokens: prefill {:.1} tokens/s | generated {} tokens: decode {:.2} tokens/s",
        stats.prompt_tokens,
        stats.prefill_tokens_per_sec(),
        tokens.len(),
        stats.decode_tokens_per_sec()
    );
    Ok(())
}

fn main() -> Result<()> {
    let cli = Cli::parse();
    match cli.command {
        Command::Generate(a) => run_generate(a),
        Command::Bench(a) => specx_eval::bench::run(a),
    }
}
