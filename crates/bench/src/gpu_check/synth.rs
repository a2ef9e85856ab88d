//! The real pair's shapes, and random-weight models of those shapes for the GPU check.

use anyhow::{Context, Result, ensure};
use serde::{Deserialize, Serialize};
use specx_decoder::ModelConfig;
use specx_decoder::fsutil::write_atomic;
use specx_decoder::gguf::GgmlType;
use specx_decoder::synthetic::{StDtype, random_weights, write_gguf, write_hf_dir};
use specx_decoder::weights::GgufSource;
use std::path::{Path, PathBuf};

/// The pair's configurations, with where they came from.
#[derive(Debug, Serialize, Deserialize)]
pub struct PairShapes {
    pub draft: ModelConfig,
    pub target: ModelConfig,
    /// The files the shapes were read from (file names only: the weights do not travel).
    pub source: Vec<String>,
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
    /// and DIR/draft-gguf and DIR/target-gguf (the same weights as a GGUF file with Q4_0
    /// matrices: the bytes per weight of the reference pair's Q4_K, for specx's block path).
    #[arg(long)]
    pub out: PathBuf,
    /// Seed of the random weights (the draft uses seed + 1).
    #[arg(long, default_value_t = 0)]
    pub seed: u64,
}

fn gguf_config(path: &Path) -> Result<ModelConfig> {
    ensure!(
        path.extension().is_some_and(|e| e == "gguf"),
        "{}: `shapes` reads GGUF files (the fetched pair); pass --draft/--target .gguf paths",
        path.display()
    );
    GgufSource::open(path)?.config().with_context(|| format!("reading the shape of {}", path.display()))
}

pub fn shapes(a: &ShapesArgs) -> Result<()> {
    use specx_eval::method::models::{default_draft, default_target};
    let (draft, target) =
        (a.draft.clone().unwrap_or_else(default_draft), a.target.clone().unwrap_or_else(default_target));
    let shapes = PairShapes {
        draft: gguf_config(&draft)?,
        target: gguf_config(&target)?,
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
    for (role, cfg, seed) in [("target", &shapes.target, a.seed), ("draft", &shapes.draft, a.seed + 1)] {
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
        write_gguf(&gguf.join("model.gguf"), cfg, &weights, GgmlType::Q4_0, &names)?;
        eprintln!(
            "{role}: {:.2}B parameters written to {} and {} in {:.1} s",
            cfg.num_parameters() as f64 / 1e9,
            dir.display(),
            gguf.display(),
            t.elapsed().as_secs_f64()
        );
    }
    Ok(())
}
