//! `specx`: command-line front end. Parses arguments and dispatches; the work lives in the
//! library crates.

use anyhow::{ensure, Context, Result};
use clap::{Args, Parser, Subcommand};
use specx_decoder::generate::generate;
use specx_decoder::tokenizer::TextStream;
use specx_decoder::speculative::{Calibration, Compat, HeadRule, SpecConfig};
use specx_decoder::{check_device, check_pair, device_from_name, load_model_as, open_device, parse_device_list, ChatTemplate, DeviceName, Sampler, SamplingConfig, WeightMode};
use specx_eval::experiment::grid::Setting;
use specx_eval::methods::{load_head, Method, MethodKind};
use specx_eval::report::markdown_table;
use std::collections::BTreeMap;
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
    /// Decode one prompt with a draft/target pair and a method (ar, specdec, specdec++,
    /// confidence, dsi, easyspec); print the text and the request's metrics.
    Decode(DecodeArgs),
    /// Measure decode/prefill speed of the draft and target, peak memory, and the machine's
    /// memory-bandwidth bound, all in one run.
    Bench(specx_eval::bench::BenchArgs),
    /// Compare autoregressive and fixed-K speculative decoding on HumanEval prompts in one run
    /// (greedy): tokens/s, speedup, acceptance, tokens per target call.
    BenchDecode(specx_eval::decode_bench::DecodeBenchArgs),
    /// How far a weight mode's numbers are from the exact path's: perplexity, KL divergence
    /// against the reference mode and top-1 agreement over a fixed text (llama.cpp's
    /// perplexity tool's measure).
    Numerics(specx_eval::numerics::NumericsArgs),
    /// Build a SpecDec++ token-mixing acceptance dataset from a target/draft pair (config
    /// driven, resumable, shardable over machines); `merge` joins parts, `summary` reports.
    Datagen(specx_datagen::cli::DatagenArgs),
    /// Train SpecDec++ acceptance heads (weighted BCE, burn) on datagen runs; `--sweep` trains
    /// the paper's w_rej x depth grid and writes a summary table.
    Train(specx_trainer::cli::TrainArgs),
    /// Run a config-driven evaluation (models, prompt sets, sampling settings, a grid of
    /// methods): AR reference and losslessness audit per prompt, resumable results.parquet,
    /// summary.md, timing model and plots; `merge` joins `--shard` parts.
    Eval(specx_eval::experiment::cli::EvalArgs),
    /// Profile both models: forward time of 1..N new rows at several context lengths (the
    /// verification cost curve), per-layer attention and MLP time, LM head, TTFT and TPOT;
    /// writes JSON (input of the DSI and EasySpec timing models) and a plot.
    Profile(specx_eval::profile::ProfileArgs),
    /// DSI (speculation parallelism) simulators: `offline` simulates SI, DSI and non-SI over a
    /// grid of drafter latencies, acceptance rates and lookaheads and draws the paper's
    /// heatmaps; `online` runs them on threads with profiled latencies and measured acceptance.
    /// (Real DSI decoding is the `dsi` method of `specx decode` and `specx eval`.)
    Dsi(specx_eval::dsi::DsiArgs),
    /// EasySpec measurements: `similarity` gives the cosine similarity between precise and
    /// fuzzy attention inputs, q, k, v and outputs per layer-parallel strategy (the paper's
    /// Table 5). (Decoding with EasySpec is the `easyspec` method of `specx decode` and
    /// `specx eval`.)
    Easyspec(specx_eval::easyspec::EasySpecArgs),
    /// List the compute devices this build can use: the CPU, each Vulkan adapter as
    /// `wgpu:N` (builds with `--features wgpu`), and whether CUDA is compiled in.
    Devices,
    /// Assemble a paper reproduction's tables (results.md, claims.json) and PNG figures from
    /// finished runs (replay, real eval runs, head sweeps); runs nothing itself.
    #[command(subcommand)]
    Reproduce(Reproduce),
}

#[derive(Subcommand)]
enum Reproduce {
    /// SpecDec++: best fixed K vs best acceptance-head setting vs the Theorem 4.1 oracle
    /// under eq. 5.1 (paper and CPU times), Figure 3 frontiers, thresholds per w_rej, the
    /// eq. 3.1 timing fit, measured speedups, head sweeps and data scaling.
    Specdecpp(specx_eval::reproduce::specdecpp::ReproArgs),
}

#[derive(Args)]
struct DecodeArgs {
    /// Draft model (HF directory or .gguf); it must share the target's tokenizer.
    #[arg(long)]
    draft: PathBuf,
    /// Target model (HF directory or .gguf).
    #[arg(long)]
    target: PathBuf,
    /// Decoding method.
    #[arg(long, value_enum, default_value = "specdec")]
    method: MethodKind,
    /// Candidates per round for `specdec` (and `easyspec` without a head); draft tokens per
    /// verification task for `dsi`.
    #[arg(long, default_value_t = 4)]
    k: usize,
    /// Target workers (threads, each with its own KV cache) for `dsi` (default 2); with
    /// `easyspec`, runs DSI's scheduler with this many workers.
    #[arg(long)]
    servers: Option<usize>,
    /// DSI's target workers on devices, one worker per device (`cpu,wgpu:0`): the target is
    /// loaded on each (the --device copy is reused). Sets --servers to the list's length.
    /// The drafter runs on --device.
    #[arg(long, value_delimiter = ',')]
    devices: Vec<String>,
    /// EasySpec's group workers on devices (`cpu,wgpu:0`): the draft's layer i keeps its
    /// attention and cache on the (i mod N)-th device, so each layer group's attentions run on
    /// different devices at once, one thread per device (--workers is then not used). The
    /// draft's embeddings, MLPs and head stay on --device. `easyspec` only.
    #[arg(long, value_delimiter = ',')]
    draft_devices: Vec<String>,
    /// Acceptance head for `specdecpp` (and `easyspec` with SpecDec++'s stop rule): a
    /// checkpoint directory (specx train), or `random[:SEED]` for an untrained head (pipeline
    /// testing only).
    #[arg(long)]
    head: Option<String>,
    /// Stop threshold: `specdecpp` stops when the predicted chance of a rejection exceeds it
    /// (default 0.7, the paper's best); `confidence` (and `easyspec` with a threshold but no
    /// head) stops when the draft's probability of its token falls below it (default 0.5).
    #[arg(long)]
    threshold: Option<f64>,
    /// Fewest candidates per round for `specdecpp` and `confidence` (the SpecDec++ paper's
    /// bounds are [2, 20]; its rule never stops after one candidate, so 1 acts as 2 there).
    #[arg(long, default_value_t = HeadRule::PAPER_MIN)]
    min: usize,
    /// Most candidates per round for `specdecpp` and `confidence`.
    #[arg(long, default_value_t = HeadRule::PAPER_MAX)]
    max: usize,
    /// EasySpec's layer-parallel strategy for `easyspec`: a preset `lp1`..`lp5` (the paper's
    /// Table 6) or the paper's notation, e.g. `0,1-3,4-7,8-11,12-15,16-19,20-22,23`.
    #[arg(long, default_value = "lp4")]
    strategy: String,
    /// When `easyspec` recomputes the draft cache entries its fuzzy forwards wrote: `never`,
    /// `prefill_only`, `every_round` (the paper's description) or `every_mismatch` (the
    /// reference code's default).
    #[arg(long, default_value = "every_round")]
    calibration: Calibration,
    /// Threads running each layer group's attentions for `easyspec` (timing only: the tokens
    /// never depend on it).
    #[arg(long, default_value_t = 1)]
    workers: usize,
    /// `reference` picks EasySpec's candidates as the reference code does (the argmax of q,
    /// tested with min(1, p/q)): NOT lossless at temperature > 0, for demonstrating that only.
    #[arg(long, default_value = "lossless")]
    compat: Compat,
    #[command(flatten)]
    run: RunArgs,
}

fn run_decode(a: DecodeArgs) -> Result<()> {
    let sampling = a.run.sampling.config()?;
    // Devices are checked before any model loads.
    let main_device: DeviceName = a.run.device.parse()?;
    check_device(main_device)?;
    let worker_devices = if a.devices.is_empty() { Vec::new() } else { parse_device_list(&a.devices)? };
    worker_devices.iter().try_for_each(|&d| check_device(d))?;
    let draft_devices = if a.draft_devices.is_empty() { Vec::new() } else { parse_device_list(&a.draft_devices)? };
    draft_devices.iter().try_for_each(|&d| check_device(d))?;
    ensure!(draft_devices.is_empty() || a.method == MethodKind::Easyspec, "--draft-devices places EasySpec's attention layers: it needs --method easyspec");
    let dsi_scheduler = a.method == MethodKind::Dsi || (a.method == MethodKind::Easyspec && a.servers.is_some());
    ensure!(worker_devices.is_empty() || dsi_scheduler, "--devices places DSI's target workers: it needs --method dsi (or easyspec with --servers)");
    ensure!(worker_devices.is_empty() || a.servers.is_none_or(|s| s == worker_devices.len()), "--servers {} and --devices with {} devices disagree (one worker per device)", a.servers.unwrap_or(0), worker_devices.len());
    let device = open_device(main_device)?;
    let target = load_model_as(&a.target, None, &device, a.run.weights)?;
    let mut draft = if a.method == MethodKind::Ar { None } else { Some(load_model_as(&a.draft, None, &device, a.run.weights)?) };
    if let Some(d) = draft.take_if(|_| !draft_devices.is_empty()) {
        let devices = draft_devices.iter().map(|&n| open_device(n)).collect::<Result<Vec<_>>>()?;
        eprintln!("placing the draft's attention layers on {}", a.draft_devices.join(", "));
        draft = Some(specx_decoder::LoadedModel { model: d.model.place_attention(&devices)?, ..d });
    }
    if let Some(d) = &draft {
        check_pair(d, &target)?;
    }
    ensure!(a.method != MethodKind::Specdecpp || a.head.is_some(), "--method specdecpp needs --head DIR (or --head random for an untrained head)");
    ensure!(a.compat == Compat::Lossless || a.method == MethodKind::Easyspec, "--compat applies to --method easyspec only");
    let mut heads = BTreeMap::new();
    if let (Some(spec), Some(d)) = (&a.head, &draft) {
        heads.insert(spec.clone(), load_head(spec, d, &device)?);
    }
    // The same setting an eval grid would hold, so that both build methods one way.
    let setting = Setting {
        method: a.method,
        k: Some(a.k),
        head: a.head.clone(),
        threshold: a.threshold,
        min: Some(a.min),
        max: Some(a.max),
        servers: if !worker_devices.is_empty() { Some(worker_devices.len()) } else if a.method == MethodKind::Dsi { Some(a.servers.unwrap_or(2)) } else { a.servers },
        strategy: Some(a.strategy.clone()),
        calibration: Some(a.calibration),
        workers: Some(a.workers),
    };
    let mut method = setting.method(&heads, draft.as_ref().map_or(0, |d| d.model.config().num_hidden_layers))?;
    if let Method::EasySpec { fuzzy, .. } = &mut method {
        fuzzy.compat = a.compat;
    }
    let prompt = target.tokenizer.encode(&a.run.prompt_text())?;
    let cfg = SpecConfig { max_new_tokens: a.run.max_new_tokens, sampling, seed: a.run.sampling.seed };
    // One target per worker device (the main device's copy reused).
    let mut replicas = Vec::new();
    for &d in worker_devices.iter().filter(|&&d| d != main_device) {
        eprintln!("loading the target on {d} for a DSI worker");
        replicas.push((d, load_model_as(&a.target, None, &open_device(d)?, a.run.weights)?));
    }
    let workers: Vec<&specx_decoder::Transformer> = worker_devices.iter().map(|&d| replicas.iter().find(|(r, _)| *r == d).map_or(&target.model, |(_, lm)| &lm.model)).collect();
    let (g, dsi) = method.run_with_workers(&target.model, &workers, draft.as_ref().map(|d| &d.model), &prompt, &cfg, &target.eos_ids)?;
    println!("{}", target.tokenizer.decode(&g.tokens)?);
    let m = &g.metrics;
    let mut rows = vec![
        vec!["method".into(), method.name()],
        vec!["n_generated".into(), m.n_generated.to_string()],
        vec!["n_target_calls".into(), m.n_target_calls.to_string()],
        vec!["n_draft_calls".into(), m.n_draft_calls.to_string()],
        vec!["n_calibrations".into(), m.n_calibrations.to_string()],
        vec!["n_drafted".into(), m.n_drafted.to_string()],
        vec!["n_accepted".into(), m.n_accepted.to_string()],
        vec!["n_discarded".into(), m.n_discarded().to_string()],
        vec!["acceptance rate".into(), format!("{:.3}", m.acceptance_rate())],
        vec!["tokens per target call".into(), format!("{:.2}", m.tokens_per_target_call())],
        vec!["verification rate".into(), format!("{:.3}", m.verification_rate())],
        vec!["discard rate".into(), format!("{:.3}", m.discard_rate())],
        vec!["accepted per round".into(), format!("{:?}", m.accepted_per_round)],
        vec!["time draft / target / other (s)".into(), format!("{:.2} / {:.2} / {:.2}", m.draft_time.as_secs_f64(), m.target_time.as_secs_f64(), m.other_time().as_secs_f64())],
        vec!["tokens/s".into(), format!("{:.2}", m.tokens_per_sec())],
    ];
    if let Some(d) = dsi {
        rows.push(vec!["DSI tasks / preempted / stale".into(), format!("{} / {} / {}", d.tasks, d.preempted, d.stale)]);
        rows.push(vec!["DSI waits for a free worker".into(), d.waits.to_string()]);
        rows.push(vec!["DSI worker busy (s)".into(), d.worker_busy_s.iter().map(|b| format!("{b:.2}")).collect::<Vec<_>>().join(", ")]);
    }
    eprint!("{}", markdown_table(&["metric", "value"], &rows));
    Ok(())
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

/// Prompt, length, sampling and device options shared by `generate` and `decode`.
#[derive(Args)]
struct RunArgs {
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
    /// Compute device: `cpu`, `wgpu[:N]` (the N-th Vulkan adapter, `specx devices` lists them;
    /// builds with `--features wgpu`) or `cuda[:N]` (builds with `--features cuda`).
    #[arg(long, default_value = "cpu")]
    device: String,
    /// GGUF weights on the CPU: `native` keeps them in their block formats and decodes them
    /// inside the matmul kernel (4-8x fewer bytes per token, bit-identical results); `q8`
    /// keeps the blocks and quantizes each activation row to 8 bits for integer dot products
    /// (llama.cpp's arithmetic; close to, not bit-identical with, `native`); `f32` dequantizes
    /// them on load. HF safetensors models and other devices always use f32.
    #[arg(long, default_value = "native")]
    weights: WeightMode,
}

impl RunArgs {
    /// The prompt as text, wrapped in the chat template if asked.
    fn prompt_text(&self) -> String {
        let template = if self.chat { ChatTemplate::qwen() } else { ChatTemplate::None };
        template.apply(&self.prompt)
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
    #[command(flatten)]
    run: RunArgs,
}

fn run_generate(a: GenerateArgs) -> Result<()> {
    let sampling = a.run.sampling.config()?;
    let device = device_from_name(&a.run.device)?;
    let t = Instant::now();
    let lm = load_model_as(&a.model, a.tokenizer.as_deref(), &device, a.run.weights)?;
    eprintln!("loaded {} in {:.1} s", a.model.display(), t.elapsed().as_secs_f64());
    let prompt = lm.tokenizer.encode(&a.run.prompt_text())?;
    let mut sampler = Sampler::new(sampling, a.run.sampling.seed);
    let mut stream = TextStream::new(&lm.tokenizer);
    let mut stdout = std::io::stdout();
    let (tokens, stats) = generate(&lm.model, &prompt, a.run.max_new_tokens, &mut sampler, &lm.eos_ids, |id| {
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
        Command::Decode(a) => run_decode(a),
        Command::Bench(a) => specx_eval::bench::run(a),
        Command::BenchDecode(a) => specx_eval::decode_bench::run(a),
        Command::Numerics(a) => specx_eval::numerics::run(a),
        Command::Datagen(a) => specx_datagen::cli::run_cli(a),
        Command::Train(a) => specx_trainer::cli::run_cli(a),
        Command::Eval(a) => specx_eval::experiment::cli::run_cli(a),
        Command::Profile(a) => specx_eval::profile::run(a),
        Command::Dsi(a) => specx_eval::dsi::run_cli(a),
        Command::Easyspec(a) => specx_eval::easyspec::run_cli(a),
        Command::Reproduce(Reproduce::Specdecpp(a)) => specx_eval::reproduce::specdecpp::run(a),
        Command::Devices => list_devices(),
    }
}

/// `specx devices`: what `--device` accepts on this machine with this build.
fn list_devices() -> Result<()> {
    let mut rows = vec![vec!["cpu".to_string(), "host CPU".into(), "burn-flex + specx kernels".into(), format!("{} threads", std::thread::available_parallelism().map_or(1, |n| n.get())), "-".into()]];
    let vulkan = specx_decoder::device::vulkan_adapters();
    if let Ok(adapters) = &vulkan {
        rows.extend(adapters.iter().map(|a| vec![a.device.to_string(), a.name.clone(), a.kind.clone(), a.driver.clone(), format!("{} MiB", a.max_buffer_bytes >> 20)]));
    }
    print!("{}", markdown_table(&["--device", "name", "kind", "driver", "largest buffer"], &rows));
    match vulkan {
        Ok(a) if a.is_empty() => println!("\nwgpu: no Vulkan adapter (install the GPU's driver, or for testing Mesa's software Vulkan: apt-get install mesa-vulkan-drivers libvulkan1)"),
        Ok(_) => {}
        Err(e) => println!("\nwgpu: {e:#}"),
    }
    println!("cuda: {}", if cfg!(feature = "cuda") { "compiled in (cuda:N)" } else { "not in this build (--features cuda; see the README's GPU section)" });
    Ok(())
}
