//! The real pair's shapes, and random-weight models of those shapes for the GPU check.

use anyhow::{Context, Result, bail, ensure};
use serde::{Deserialize, Serialize};
use specx_decoder::ModelConfig;
use specx_decoder::fsutil::write_atomic;
use specx_decoder::gguf::GgmlType;
use specx_decoder::synthetic::{StDtype, blocks_for, random_weights, write_gguf_with, write_hf_dir};
use specx_decoder::weights::GgufSource;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// The pair's configurations, with where they came from.
#[derive(Debug, Serialize, Deserialize)]
pub struct PairShapes {
    pub draft: ModelConfig,
    pub target: ModelConfig,
    /// The files the shapes were read from (file names only: the weights do not travel).
    pub source: Vec<String>,
    /// Each matrix's ggml type id in the draft's file, by GGUF tensor name, so that the GGUF
    /// copies store what the pair stores (empty in shapes files written before types were
    /// recorded: Q4_0 then).
    #[serde(default)]
    pub draft_types: BTreeMap<String, u32>,
    /// The same for the target's file.
    #[serde(default)]
    pub target_types: BTreeMap<String, u32>,
}

#[derive(clap::Args, Debug)]
pub struct ShapesArgs {
    /// Draft GGUF file. Default: the fetched Qwen2.5-Coder-0.5B-Instruct.
    #[arg(long)]
    pub draft: Option<PathBuf>,
    /// Target GGUF file. Default: the fetched Qwen2.5-Coder-1.5B-Instruct.
    #[arg(long)]
    pub target: Option<PathBuf>,
    /// JSON output.
    #[arg(long)]
    pub out: PathBuf,
}

#[derive(clap::Args, Debug)]
pub struct SynthArgs {
    /// The shapes JSON written by `specx gpu-check shapes`.
    #[arg(long)]
    pub shapes: PathBuf,
    /// tokenizer.json to place beside each model (the real pair's, so prompts encode as usual).
    #[arg(long)]
    pub tokenizer: PathBuf,
    /// Output directory: DIR/draft and DIR/target (bf16 safetensors, what the HF anchor reads),
    /// and DIR/draft-gguf and DIR/target-gguf (GGUF files whose matrices have the block types
    /// of the real pair's, recorded by `shapes`: the same weights quantized where specx has
    /// the type's quantizer, random blocks of the type for the K-quants).
    #[arg(long)]
    pub out: PathBuf,
    /// Seed of the random weights (the draft uses seed + 1).
    #[arg(long, default_value_t = 0)]
    pub seed: u64,
}

/// A GGUF file's configuration and its matrices' ggml type ids by tensor name.
fn gguf_shape(path: &Path) -> Result<(ModelConfig, BTreeMap<String, u32>)> {
    ensure!(
        path.extension().is_some_and(|e| e == "gguf"),
        "{}: `shapes` reads GGUF files (the fetched pair); pass --draft/--target .gguf paths",
        path.display()
    );
    let source = GgufSource::open(path)?;
    let cfg = source.config().with_context(|| format!("reading the shape of {}", path.display()))?;
    let types =
        source.file.tensors.values().filter(|t| t.dims.len() == 2).map(|t| (t.name.clone(), t.type_id)).collect();
    Ok((cfg, types))
}

pub fn shapes(a: &ShapesArgs) -> Result<()> {
    use specx_eval::method::models::{default_draft, default_target};
    let (draft, target) =
        (a.draft.clone().unwrap_or_else(default_draft), a.target.clone().unwrap_or_else(default_target));
    let ((draft_cfg, draft_types), (target_cfg, target_types)) = (gguf_shape(&draft)?, gguf_shape(&target)?);
    let shapes = PairShapes {
        draft: draft_cfg,
        target: target_cfg,
        draft_types,
        target_types,
        source: [&draft, &target]
            .iter()
            .map(|p| p.file_name().map_or_else(|| p.display().to_string(), |n| n.to_string_lossy().into_owned()))
            .collect(),
    };
    ensure!(
        shapes.draft.vocab_size == shapes.target.vocab_size,
        "draft and target vocabularies differ ({} vs {})",
        shapes.draft.vocab_size,
        shapes.target.vocab_size
    );
    write_atomic(&a.out, serde_json::to_string_pretty(&shapes)?.as_bytes())?;
    for (role, c) in [("draft", &shapes.draft), ("target", &shapes.target)] {
        eprintln!(
            "{role}: {} layers, hidden {}, {:.2}B parameters",
            c.num_hidden_layers,
            c.hidden_size,
            c.num_parameters() as f64 / 1e9
        );
    }
    eprintln!("wrote {}", a.out.display());
    Ok(())
}

pub fn synth(a: &SynthArgs) -> Result<()> {
    let text = std::fs::read_to_string(&a.shapes).with_context(|| format!("reading {}", a.shapes.display()))?;
    let shapes: PairShapes = serde_json::from_str(&text)
        .with_context(|| format!("{}: not a shapes file of `specx gpu-check shapes`", a.shapes.display()))?;
    let tokenizer =
        std::fs::read_to_string(&a.tokenizer).with_context(|| format!("reading {}", a.tokenizer.display()))?;
    for (role, cfg, types, seed) in [
        ("target", &shapes.target, &shapes.target_types, a.seed),
        ("draft", &shapes.draft, &shapes.draft_types, a.seed + 1),
    ] {
        cfg.validate()?;
        let dir = a.out.join(role);
        let t = std::time::Instant::now();
        // Random weights in bf16, as HF checkpoints ship: specx and the anchor read the same file.
        let weights = random_weights(cfg, seed);
        write_hf_dir(&dir, cfg, &weights, StDtype::BF16, 1, &tokenizer)?;
        let gguf = a.out.join(format!("{role}-gguf"));
        std::fs::create_dir_all(&gguf)?;
        std::fs::write(gguf.join("tokenizer.json"), &tokenizer)?;
        let names: Vec<String> = (0..cfg.vocab_size).map(|i| format!("t{i}")).collect();
        let used = std::sync::Mutex::new(BTreeMap::<String, usize>::new());
        let encode = |name: &str, values: &[f32]| -> Result<(GgmlType, Vec<u8>)> {
            let ty = match types.get(name) {
                Some(&id) => GgmlType::from_id(id)
                    .with_context(|| format!("{role} tensor '{name}': ggml type {id} is not one specx reads"))?,
                None if types.is_empty() => GgmlType::Q4_0,
                None => bail!("{}: no type recorded for the {role}'s tensor '{name}'", a.shapes.display()),
            };
            *used.lock().unwrap_or_else(|e| e.into_inner()).entry(format!("{ty:?}")).or_default() += 1;
            // Each tensor its own random blocks (for the K-quants): the seed and the name.
            let tensor_seed = name.bytes().fold(seed, |h, b| h.wrapping_mul(1_000_003).wrapping_add(b.into()));
            Ok((ty, blocks_for(ty, values, tensor_seed)?))
        };
        write_gguf_with(&gguf.join("model.gguf"), cfg, &weights, &encode, &names)?;
        let used = used.into_inner().unwrap_or_else(|e| e.into_inner());
        let used: Vec<String> = used.iter().map(|(ty, n)| format!("{n} {ty}")).collect();
        eprintln!(
            "{role}: {:.2}B parameters written to {} and {} ({}{}) in {:.1} s",
            cfg.num_parameters() as f64 / 1e9,
            dir.display(),
            gguf.display(),
            used.join(", "),
            if types.is_empty() { "; no types recorded in the shapes file, so Q4_0" } else { "" },
            t.elapsed().as_secs_f64()
        );
    }
    Ok(())
}
