//! `specx`: command-line front end. Parses arguments and dispatches; the work lives in the
//! library crates.

mod reference;

use anyhow::{Context, Result};
use clap::{Args, CommandFactory, Parser, Subcommand};
use specx_decoder::generate::{RecordedSteps, generate_with};
use specx_decoder::tokenizer::TextStream;
use specx_decoder::{Placement, Sampler, load_model_split};
use specx_eval::report::markdown_table;
use std::io::Write;
use std::path::PathBuf;
use std::time::Instant;

#[derive(Parser)]
#[command(
    name = "specx",
    version,
    about = "Adaptive drafting for speculative decoding: runtime, data generation, training and evaluation"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Generate text with one model, streaming it, and report prefill and decode speed.
    Generate(GenerateArgs),
    /// Decode one prompt with a draft/target pair and a method: a paper's preset (ar, specdec,
    /// specdecpp, confidence, dsi, easyspec) or any drafter x stop policy x scheduler; print
    /// the text and the request's metrics.
    Decode(specx_eval::decode::DecodeArgs),
    /// Measure decode/prefill speed of the draft and target, peak memory, and the machine's
    /// memory-bandwidth bound, all in one run.
    Bench(specx_bench::runtime::BenchArgs),
    /// Compare autoregressive and fixed-K speculative decoding on HumanEval prompts in one run
    /// (greedy): tokens/s, speedup, acceptance, tokens per target call.
    BenchDecode(specx_bench::decode::DecodeBenchArgs),
    /// Time one suffix-drafter speculation against the size of its corpus of earlier outputs
    /// (1 to 100,000 synthetic outputs), with the suffix tree's build time, nodes and memory.
    BenchSuffix(specx_bench::suffix::SuffixBenchArgs),
    /// What a cheaper draft costs: c = draft step / target step for every vocabulary subset x
    /// weight type, and each model's 1..N-row call curve, in one run.
    DraftCost(specx_bench::draft_cost::DraftCostArgs),
    /// How far a weight mode's numbers are from the exact path's: perplexity, KL divergence
    /// against the reference mode and top-1 agreement over a fixed text (llama.cpp's
    /// perplexity tool's measure).
    Numerics(specx_eval::numerics::NumericsArgs),
    /// Build a SpecDec++ token-mixing acceptance dataset from a target/draft pair (config
    /// driven, resumable, shardable over machines); `merge` joins parts, `summary` reports.
    Datagen(specx_datagen::cli::DatagenArgs),
    /// Train SpecDec++ acceptance heads (weighted BCE, burn) on datagen runs; `--sweep` trains
    /// the paper's w_rej x depth grid and writes a summary table.
    Train(specx_trainer::acceptance::cli::TrainArgs),
    /// Train an EAGLE-style feature head (one decoder layer on the target's last hidden state,
    /// sharing its embedding and output head) on datagen text; writes its learning curve.
    TrainFeatureHead(specx_trainer::feature::cli::FeatureTrainArgs),
    /// FR-Spec's token frequency table from training text (Alpaca's train split, GSM8K's train
    /// set, optionally a code directory): the source of a draft's vocabulary subset
    /// (`--draft-vocab N`).
    TokenFreq(specx_datagen::token_freq::TokenFreqArgs),
    /// Run a config-driven evaluation (models, prompt sets, sampling settings, a grid of
    /// methods): AR reference and losslessness audit per prompt, resumable results.parquet,
    /// summary.md, timing model and plots; `merge` joins `--shard` parts.
    Eval(specx_eval::experiment::cli::EvalArgs),
    /// Run a datagen or eval config as a Slurm job array: one task per part (`--shard i/N`),
    /// a merge job after them, resumable tasks; `status` reports from the run directory.
    Slurm(specx_eval::slurm::SlurmArgs),
    /// Profile both models: forward time of 1..N new rows at several context lengths (the
    /// verification cost curve), per-layer attention and MLP time, LM head, TTFT and TPOT;
    /// writes JSON (input of the DSI and EasySpec timing models) and a plot.
    Profile(specx_eval::profile::ProfileArgs),
    /// DSI (speculation parallelism) simulators: `offline` simulates SI, DSI and non-SI over a
    /// grid of drafter latencies, acceptance rates and lookaheads and draws the paper's
    /// heatmaps; `online` runs them on threads with profiled latencies and measured acceptance.
    /// (Real DSI decoding is the `dsi` method of `specx decode` and `specx eval`.)
    Dsi(specx_eval::dsi::DsiArgs),
    /// EasySpec measurements: `acceptance` (the paper's Figure 4 from replays or real runs),
    /// `similarity` (cosine similarity of precise and fuzzy attention inputs, q, k, v and
    /// outputs per layer-parallel strategy: its Table 5), `timing` (the N-device model from a
    /// profile) and `bench` (real fuzzy forwards on this machine). (Decoding with EasySpec is
    /// the `easyspec` method of `specx decode` and `specx eval`.)
    Easyspec(specx_eval::easyspec::EasySpecArgs),
    /// List the compute devices this build can use: the CPU, each Vulkan adapter as
    /// `wgpu:N` (builds with `--features wgpu`), each CUDA GPU as `cuda:N` (`--features cuda`).
    Devices,
    /// The GPU check's specx steps (scripts/gpu-check.sh runs them on a GPU machine): the real
    /// pair's shapes, random-weight models of them, device correctness checks, the report.
    GpuCheck(specx_bench::gpu_check::GpuCheckArgs),
    /// Assemble a paper reproduction's tables (results.md, claims.json) and PNG figures from
    /// finished runs (replay, real eval runs, head sweeps); runs nothing itself.
    #[command(subcommand)]
    Reproduce(Reproduce),
    /// Print every command and option as one Markdown page (docs/reference/cli.md is its
    /// output).
    CliReference,
}

#[derive(Subcommand)]
enum Reproduce {
    /// SpecDec++: best fixed K vs best acceptance-head setting vs the Theorem 4.1 oracle
    /// under eq. 5.1 (paper and CPU times), Figure 3 frontiers, thresholds per w_rej, the
    /// eq. 3.1 timing fit, measured speedups, head sweeps and data scaling.
    Specdecpp(specx_reproduce::specdecpp::ReproArgs),
    /// Adaptive drafting: every stop rule's published default and best setting per prompt set
    /// (discard and verification rates, tokens per target call, throughput at the paper's and
    /// this CPU's costs) and Figure 3 with every rule, from greedy replays.
    Adaptive(specx_reproduce::adaptive::AdaptiveArgs),
}

#[derive(Args)]
struct GenerateArgs {
    /// Model: an HF directory (config.json, *.safetensors, tokenizer.json), a .gguf file (its
    /// tokenizer the tokenizer.json beside it, else its own metadata), or a hub id `hf:ORG/NAME[@REV]` (`hf:ORG/NAME/FILE.gguf`)
    /// resolved through the Hugging Face cache (downloads need `--features hub`). Default: the
    /// 1.5B target `scripts/fetch-models.sh` fetches.
    #[arg(long)]
    model: Option<PathBuf>,
    /// tokenizer.json to use instead of the model's own (the one beside it, or a GGUF's
    /// metadata).
    #[arg(long)]
    tokenizer: Option<PathBuf>,
    /// Replay one recorded decode step on the GPU instead of launching each kernel of every
    /// step (a CUDA graph on cuda, CubeCL's software graph on wgpu): the same tokens. A GGUF
    /// model on one GPU only; greedy steps read their token back, sampled ones their row.
    #[arg(long)]
    recorded_steps: bool,
    #[command(flatten)]
    run: specx_eval::decode::GenerationArgs,
}

fn run_generate(a: GenerateArgs) -> Result<()> {
    let sampling = a.run.sampling.config()?;
    let placement: Placement = a.run.device.parse()?;
    placement.check()?;
    let t = Instant::now();
    let model = a.model.clone().unwrap_or_else(specx_eval::method::models::default_target);
    let lm = load_model_split(&model, a.tokenizer.as_deref(), &placement.open()?, a.run.weights)?;
    eprintln!("loaded {} in {:.1} s", model.display(), t.elapsed().as_secs_f64());
    let steps = if a.recorded_steps { Some(RecordedSteps::new(&lm.model)?) } else { None };
    let prompt = lm.tokenizer.encode(&a.run.prompt_text(&lm)?)?;
    let mut sampler = Sampler::new(sampling, a.run.sampling.seed);
    let mut stream = TextStream::new(&lm.tokenizer);
    let mut stdout = std::io::stdout();
    let max_new = a.run.max_new_tokens;
    let (tokens, stats) = generate_with(&lm.model, &prompt, max_new, &mut sampler, &lm.eos_ids, steps, |id| {
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
        Command::Decode(a) => specx_eval::decode::run(a),
        Command::Bench(a) => specx_bench::runtime::run(a),
        Command::BenchDecode(a) => specx_bench::decode::run(a),
        Command::BenchSuffix(a) => specx_bench::suffix::run(a),
        Command::DraftCost(a) => specx_bench::draft_cost::run(a),
        Command::Numerics(a) => specx_eval::numerics::run(a),
        Command::Datagen(a) => specx_datagen::cli::run_cli(a),
        Command::Train(a) => specx_trainer::acceptance::cli::run_cli(a),
        Command::TrainFeatureHead(a) => {
            let dir = specx_trainer::feature::cli::run_cli(a)?;
            let png = specx_eval::common::curve_plot::plot_feature_curve(&dir)?;
            eprintln!("wrote {}", png.display());
            Ok(())
        }
        Command::TokenFreq(a) => specx_datagen::token_freq::run(&a),
        Command::Eval(a) => specx_eval::experiment::cli::run_cli(a),
        Command::Slurm(a) => specx_eval::slurm::run_cli(a),
        Command::Profile(a) => specx_eval::profile::run(a),
        Command::Dsi(a) => specx_eval::dsi::run_cli(a),
        Command::Easyspec(a) => specx_eval::easyspec::run_cli(a),
        Command::Reproduce(Reproduce::Specdecpp(a)) => specx_reproduce::specdecpp::run(a),
        Command::Reproduce(Reproduce::Adaptive(a)) => specx_reproduce::adaptive::run(&a),
        Command::Devices => list_devices(),
        Command::GpuCheck(a) => specx_bench::gpu_check::run_cli(a),
        Command::CliReference => {
            print!("{}", reference::markdown(&Cli::command()));
            Ok(())
        }
    }
}

/// `specx devices`: what `--device` accepts on this machine with this build.
fn list_devices() -> Result<()> {
    let mut rows = vec![vec![
        "cpu".to_string(),
        "host CPU".into(),
        "burn-flex + specx kernels".into(),
        format!("{} threads", std::thread::available_parallelism().map_or(1, |n| n.get())),
        "-".into(),
    ]];
    let vulkan = specx_decoder::device::vulkan_adapters();
    if let Ok(adapters) = &vulkan {
        rows.extend(adapters.iter().map(|a| {
            vec![
                a.device.to_string(),
                a.name.clone(),
                a.kind.clone(),
                a.driver.clone(),
                format!("{} MiB", a.max_buffer_bytes >> 20),
            ]
        }));
    }
    let cuda = specx_decoder::device::cuda_devices();
    if let Ok(devices) = &cuda {
        rows.extend(devices.iter().map(|d| {
            vec![
                d.device.to_string(),
                d.name.clone(),
                format!("CUDA, compute {}", d.compute_capability),
                format!("CUDA {}", d.driver),
                format!("{} MiB memory", d.memory_bytes >> 20),
            ]
        }));
    }
    print!("{}", markdown_table(&["--device", "name", "kind", "driver", "largest buffer"], &rows));
    match vulkan {
        Ok(a) if a.is_empty() => println!(
            "\nwgpu: no Vulkan adapter (install the GPU's driver, or for testing Mesa's software Vulkan: apt-get install mesa-vulkan-drivers libvulkan1)"
        ),
        Ok(_) => {}
        Err(e) => println!("\nwgpu: {e:#}"),
    }
    match cuda {
        Ok(d) if d.is_empty() => println!("cuda: the CUDA driver found no GPU on this machine"),
        Ok(_) => {}
        Err(e) => println!("cuda: {e:#}"),
    }
    Ok(())
}
