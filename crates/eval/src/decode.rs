//! `specx decode`: one prompt with a draft/target pair and one method (a preset or any
//! drafter x policy x scheduler), the text and the request's metrics. Models load through the
//! same loader as `specx eval`'s, methods run through the same builder.

use crate::common::row_cost::{self, DEFAULT_ROW_COST, RowCostKey};
use crate::common::suffix_corpus::CorpusFile;
use crate::method::policy::Flag;
use crate::method::{MethodArgs, ModelPlan, Models, PolicySpec, RunModels, Setting, generate};
use anyhow::{Context, Result, ensure};
use clap::Args;
use specx_decoder::coupling::Draws;
use specx_decoder::report::markdown_table;
use specx_decoder::speculative::SpecConfig;
use specx_decoder::{ChatTemplate, Placement, SamplingConfig, WeightMode, check_device};
use std::path::{Path, PathBuf};

#[derive(Args)]
pub struct DecodeArgs {
    /// The pair (the draft must share the target's tokenizer).
    #[command(flatten)]
    pub pair: crate::method::models::PairArgs,
    #[command(flatten)]
    pub method: MethodArgs,
    #[command(flatten)]
    pub run: GenerationArgs,
    /// A file of earlier outputs the suffix drafter matches (SuffixDecoding's global tree,
    /// kept between runs): read before decoding (absent: an empty corpus), this output
    /// appended after. JSON lines of token ids under a header naming the vocabulary.
    #[arg(long, value_name = "FILE")]
    pub suffix_corpus: Option<PathBuf>,
}

/// The most earlier outputs a suffix corpus file offers the drafter unless `--suffix-cached`
/// says otherwise.
pub const CORPUS_OUTPUTS_DEFAULT: usize = 100_000;

/// Sampling options shared by every command that generates.
#[derive(Args, Clone, Debug)]
pub struct SamplingArgs {
    /// Softmax temperature; 0 means greedy decoding.
    #[arg(long, default_value_t = 0.0)]
    pub temperature: f32,
    /// Keep only the k most likely tokens before sampling.
    #[arg(long)]
    pub top_k: Option<usize>,
    /// Keep the smallest set of most likely tokens whose probability reaches p (nucleus).
    #[arg(long)]
    pub top_p: Option<f32>,
    /// Seed of the sampling random number generator.
    #[arg(long, default_value_t = 0)]
    pub seed: u64,
}

impl SamplingArgs {
    pub fn config(&self) -> Result<SamplingConfig> {
        let c = SamplingConfig { temperature: self.temperature, top_k: self.top_k, top_p: self.top_p };
        c.validate()?;
        Ok(c)
    }
}

/// Prompt, length, sampling and device options shared by `generate` and `decode`.
#[derive(Args)]
pub struct GenerationArgs {
    /// The prompt text.
    #[arg(long)]
    pub prompt: String,
    /// Wrap the prompt in Qwen's ChatML chat template (for instruct models); the same as
    /// `--chat-template qwen`.
    #[arg(long)]
    pub chat: bool,
    /// Wrap the prompt in a chat template: `model` (the target's own Jinja template, from its
    /// tokenizer_config.json, chat_template.jinja or GGUF metadata), `qwen` (ChatML with Qwen's
    /// system prompt), `chatml` (ChatML without a system turn) or `none` (the prompt as is, the
    /// default without `--chat`).
    #[arg(long, value_name = "NAME", conflicts_with = "chat")]
    pub chat_template: Option<ChatTemplate>,
    /// Maximum number of tokens to generate (generation also stops at an end-of-sequence token).
    #[arg(long, default_value_t = 128)]
    pub max_new_tokens: usize,
    #[command(flatten)]
    pub sampling: SamplingArgs,
    /// Compute device: `cpu`, `wgpu[:N]` (the N-th Vulkan adapter, `specx devices` lists them;
    /// builds with `--features wgpu`) or `cuda[:N]` (builds with `--features cuda`). Several
    /// joined by `+` (`cuda:0+cuda:1`) split the model's layers over them in contiguous ranges
    /// (embedding with the first, head with the last); a pair's draft goes on the first.
    #[arg(long, default_value = "cpu")]
    pub device: String,
    /// GGUF weights: `q8` (the default) keeps them in their block formats and, on the CPU,
    /// quantizes each activation row to 8 bits for integer dot products (llama.cpp's
    /// arithmetic; close to, not bit-identical with, `native`); `native` keeps the blocks and
    /// decodes them inside the matmul kernel (bit-identical to `f32` on the CPU); `f32`
    /// dequantizes them on load. On a GPU `q8` and `native` both decode the blocks in the
    /// device's product kernel, which also reads HF safetensors models' f16/bf16 matrices as
    /// stored; on the CPU safetensors models use f32.
    #[arg(long, default_value = "q8")]
    pub weights: WeightMode,
}

impl GenerationArgs {
    /// The prompt as text, wrapped in the chat template if asked (`model`: `target`'s own).
    pub fn prompt_text(&self, target: &specx_decoder::LoadedModel) -> Result<String> {
        let template = match (&self.chat_template, self.chat) {
            (Some(t), _) => t.clone(),
            (None, true) => ChatTemplate::qwen(),
            (None, false) => ChatTemplate::None,
        };
        template.render(&self.prompt, target.chat_template.as_ref())
    }
}

/// Under the tree-price policy without `--row-cost`, a verification row is priced at this
/// machine's figure for this target, device and weight path as `specx bench` stored it
/// ([`row_cost`]), else at [`DEFAULT_ROW_COST`]. Returns the cost used and where it came from
/// (`None` for other policies).
fn price_rows(
    method: &mut MethodArgs,
    setting: &mut Setting,
    device: &Placement,
    weights: WeightMode,
    target: &Path,
    on_cpu: bool,
) -> Result<Option<String>> {
    let Some(PolicySpec::TreePrice(price)) = setting.spec().map(|m| &m.policy) else { return Ok(None) };
    if method.policy_flags.given().contains(&Flag::RowCost) {
        return Ok(Some(format!("{} (--row-cost)", price.row_cost)));
    }
    let stored = if device.is_split() {
        None
    } else {
        // A GPU has one block path, which `specx bench` measures as `native`.
        let weights = if on_cpu || weights != WeightMode::Q8 { weights } else { WeightMode::Native };
        let key = RowCostKey::here(&device.first().to_string(), &weights.to_string(), target)?;
        row_cost::lookup(&row_cost::store_path(), &key)?
    };
    let Some(stored) = stored else {
        return Ok(Some(format!(
            "{DEFAULT_ROW_COST} (the default, a 2-core Xeon's: no figure of this machine for this target, device and weights; `specx bench` stores one)"
        )));
    };
    method.policy_flags = method.policy_flags.with_default_row_cost(stored.row_cost);
    *setting = method.setting(on_cpu)?;
    Ok(Some(format!(
        "{:.3} (this machine's, fitted over {:?}-row calls by specx bench on {})",
        stored.row_cost, stored.rows, stored.measured
    )))
}

pub fn run(mut a: DecodeArgs) -> Result<()> {
    // The method, its flags and the devices are checked before any model loads.
    let sampling = a.run.sampling.config()?;
    let device: Placement = a.run.device.parse()?;
    let on_cpu = device.devices() == [specx_decoder::DeviceName::Cpu];
    let corpus = match &a.suffix_corpus {
        Some(path) => {
            a.method.drafter_flags.suffix_cached.get_or_insert(CORPUS_OUTPUTS_DEFAULT);
            let file = CorpusFile::read(path)?;
            if file.torn {
                eprintln!(
                    "decode: the last line of {} was cut short by an interrupted write: it is skipped, and cut off when this output is appended",
                    path.display()
                );
            }
            Some((path.clone(), file))
        }
        None => None,
    };
    let mut setting = a.method.setting(on_cpu)?;
    ensure!(
        corpus.is_none() || setting.drafter() == Some("suffix"),
        "--suffix-corpus feeds the suffix drafter's earlier outputs: add --drafter suffix"
    );
    device.check()?;
    let (worker_devices, draft_devices) = a.method.device_lists()?;
    worker_devices.iter().try_for_each(Placement::check)?;
    draft_devices.iter().try_for_each(|&d| check_device(d))?;
    // The setting names its head by the spec it was given (`--head`, or the shipped default).
    let head = setting.head().map(|h| (h.to_string(), h.to_string()));
    let (draft, target) = a.pair.paths();
    let plan = ModelPlan {
        target,
        draft: setting.needs_draft_model().then_some(draft),
        target_tokenizer: a.pair.target_tokenizer.clone(),
        draft_tokenizer: a.pair.draft_tokenizer.clone(),
        device: device.clone(),
        weights: a.run.weights,
        worker_devices,
        draft_devices,
        heads: head.into_iter().collect(),
        drafts: setting.spec().map(|m| m.draft.clone()).into_iter().collect(),
        feature_heads: setting.feature_head().map(str::to_string).into_iter().collect(),
    };
    let models = Models::load(&plan)?;
    if let (Some(m), Some(d)) = (setting.spec(), &models.draft) {
        m.check_models(&d.model, &models.heads)?;
    }
    let row_cost = price_rows(&mut a.method, &mut setting, &device, a.run.weights, &models.target.path, on_cpu)?;
    models.check_setting(&setting)?;
    let target = &models.target;
    let prompt = target.tokenizer.encode(&a.run.prompt_text(target)?)?;
    let cfg = SpecConfig { max_new_tokens: a.run.max_new_tokens, sampling, seed: a.run.sampling.seed };
    let vocab = target.tokenizer.vocab_sha256();
    if let Some((path, file)) = &corpus {
        file.check_vocab(path, &vocab)?;
    }
    let workers = models.workers();
    let earlier = corpus.as_ref().map_or(&[][..], |(_, f)| &f.outputs[..]);
    let run_models = RunModels { earlier_outputs: earlier, ..models.for_setting(&setting, &workers) };
    let (g, dsi) =
        generate(&setting, run_models, &prompt, &cfg, Draws::Independent, &target.eos_ids).context("decoding")?;
    println!("{}", target.tokenizer.decode(&g.tokens)?);
    if let Some((path, file)) = &corpus {
        file.append(path, &vocab, std::slice::from_ref(&g.tokens))?;
    }
    let m = &g.metrics;
    let part = |p: Option<&str>| p.unwrap_or("-").to_string();
    let mut rows = vec![
        vec!["method".into(), setting.key()],
        vec![
            "drafter / policy / scheduler".into(),
            format!("{} / {} / {}", part(setting.drafter()), part(setting.policy()), part(setting.scheduler())),
        ],
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
        vec![
            "time draft / target / other (s)".into(),
            format!(
                "{:.2} / {:.2} / {:.2}",
                m.draft_time.as_secs_f64(),
                m.target_time.as_secs_f64(),
                m.other_time().as_secs_f64()
            ),
        ],
        vec!["tokens/s".into(), format!("{:.2}", m.tokens_per_sec())],
    ];
    if let Some(source) = row_cost {
        rows.insert(2, vec!["tree-price row cost".into(), source]);
    }
    if let Some((path, file)) = &corpus {
        rows.push(vec![
            "suffix corpus".into(),
            format!("{} earlier outputs read from {}, this one appended", file.outputs.len(), path.display()),
        ]);
    }
    if let Some(d) = dsi {
        rows.push(vec!["DSI tasks / preempted / stale".into(), format!("{} / {} / {}", d.tasks, d.preempted, d.stale)]);
        rows.push(vec!["DSI waits for a free worker".into(), d.waits.to_string()]);
        rows.push(vec![
            "DSI worker busy (s)".into(),
            d.worker_busy_s.iter().map(|b| format!("{b:.2}")).collect::<Vec<_>>().join(", "),
        ]);
        rows.push(vec!["DSI workers busy together (s)".into(), format!("{:.2}", d.concurrent_s)]);
    }
    eprint!("{}", markdown_table(&["metric", "value"], &rows));
    Ok(())
}
