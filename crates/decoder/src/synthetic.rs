//! Tiny synthetic models with seeded random weights, saved in the real formats (HF
//! safetensors directory, GGUF) so that tests exercise the same loaders, model and decoding
//! code as the real Qwen pair, in milliseconds.

use crate::config::ModelConfig;
use crate::config::RopeScaling;
use crate::gguf::{GgmlType, GgufWriter, MetaValue};
use crate::weights::{HostTensor, gguf_name, permute_qk_rows};
use anyhow::{Context, Result};
use half::{bf16, f16};
use rand::rngs::StdRng;
use rand::{RngExt, SeedableRng};
use safetensors::tensor::{Dtype, TensorView};
use std::collections::BTreeMap;
use std::path::Path;

/// Vocabulary of the tiny models of the device checks and tests (small, so greedy rounds
/// both accept and reject).
pub const TINY_VOCAB: usize = 48;

/// A small Qwen2-shaped config: q/k/v bias, untied head, GQA with 2 query heads per kv head.
pub fn tiny_qwen2(vocab: usize) -> ModelConfig {
    ModelConfig {
        architecture: "qwen2".into(),
        vocab_size: vocab,
        hidden_size: 32,
        intermediate_size: 64,
        num_hidden_layers: 2,
        num_attention_heads: 4,
        num_key_value_heads: 2,
        head_dim: 8,
        rope_theta: 10_000.0,
        rope_scaling: crate::config::RopeScaling::None,
        rms_norm_eps: 1e-6,
        max_position_embeddings: 512,
        sliding_window: None,
        attention_bias: true,
        qk_norm: false,
        tie_word_embeddings: false,
        bos_token_id: None,
        eos_token_ids: vec![vocab as u32 - 1],
    }
}

/// A small Llama-shaped config: no bias, tied head, one kv head per query head.
pub fn tiny_llama(vocab: usize) -> ModelConfig {
    ModelConfig {
        architecture: "llama".into(),
        num_key_value_heads: 4,
        attention_bias: false,
        tie_word_embeddings: true,
        rope_theta: 500_000.0,
        ..tiny_qwen2(vocab)
    }
}

/// The tiny llama of the GGUF reader's independent check: grouped-query attention (4 query
/// heads, 2 key/value heads), so that q and k are permuted with different head counts.
pub fn tiny_llama_gqa() -> ModelConfig {
    ModelConfig { num_key_value_heads: 2, ..tiny_llama(TINY_VOCAB) }
}

/// The seed of [`tiny_llama_gqa`]'s weights in that check.
pub const TINY_LLAMA_SEED: u64 = 5;

/// HF-named random weights for `cfg`, uniform in +-sqrt(3/fan_in) (unit variance outputs),
/// norms near 1. The same seed gives the same weights.
pub fn random_weights(cfg: &ModelConfig, seed: u64) -> BTreeMap<String, HostTensor> {
    let mut rng = StdRng::seed_from_u64(seed);
    let mut w = BTreeMap::new();
    let mut add = |name: String, shape: Vec<usize>, scale: f32, offset: f32, rng: &mut StdRng| {
        let n = shape.iter().product();
        let data = (0..n).map(|_| offset + scale * (2.0 * rng.random::<f32>() - 1.0)).collect();
        w.insert(name, HostTensor { shape, data });
    };
    let (h, i, v) = (cfg.hidden_size, cfg.intermediate_size, cfg.vocab_size);
    let (q, kv) = (cfg.num_attention_heads * cfg.head_dim, cfg.num_key_value_heads * cfg.head_dim);
    let lin = |fan_in: usize| (3.0 / fan_in as f32).sqrt();
    add("model.embed_tokens.weight".into(), vec![v, h], 1.0, 0.0, &mut rng);
    for l in 0..cfg.num_hidden_layers {
        let p = format!("model.layers.{l}");
        add(format!("{p}.input_layernorm.weight"), vec![h], 0.2, 1.0, &mut rng);
        add(format!("{p}.post_attention_layernorm.weight"), vec![h], 0.2, 1.0, &mut rng);
        add(format!("{p}.self_attn.q_proj.weight"), vec![q, h], lin(h), 0.0, &mut rng);
        add(format!("{p}.self_attn.k_proj.weight"), vec![kv, h], lin(h), 0.0, &mut rng);
        add(format!("{p}.self_attn.v_proj.weight"), vec![kv, h], lin(h), 0.0, &mut rng);
        if cfg.attention_bias {
            add(format!("{p}.self_attn.q_proj.bias"), vec![q], 0.5, 0.0, &mut rng);
            add(format!("{p}.self_attn.k_proj.bias"), vec![kv], 0.5, 0.0, &mut rng);
            add(format!("{p}.self_attn.v_proj.bias"), vec![kv], 0.5, 0.0, &mut rng);
        }
        if cfg.qk_norm {
            add(format!("{p}.self_attn.q_norm.weight"), vec![cfg.head_dim], 0.2, 1.0, &mut rng);
            add(format!("{p}.self_attn.k_norm.weight"), vec![cfg.head_dim], 0.2, 1.0, &mut rng);
        }
        add(format!("{p}.self_attn.o_proj.weight"), vec![h, q], lin(q), 0.0, &mut rng);
        add(format!("{p}.mlp.gate_proj.weight"), vec![i, h], lin(h), 0.0, &mut rng);
        add(format!("{p}.mlp.up_proj.weight"), vec![i, h], lin(h), 0.0, &mut rng);
        add(format!("{p}.mlp.down_proj.weight"), vec![h, i], lin(i), 0.0, &mut rng);
    }
    add("model.norm.weight".into(), vec![h], 0.2, 1.0, &mut rng);
    if !cfg.tie_word_embeddings {
        add("lm_head.weight".into(), vec![v, h], 3.0 * lin(h), 0.0, &mut rng);
    }
    w
}

/// A word-level `tokenizer.json` with tokens `{prefix}0 .. {prefix}{vocab-1}` split on
/// whitespace. Two prefixes give two incompatible vocabularies.
pub fn word_tokenizer_json(vocab: usize, prefix: &str) -> String {
    let entries: Vec<String> = (0..vocab).map(|i| format!("\"{prefix}{i}\":{i}")).collect();
    format!(
        r#"{{"version":"1.0","truncation":null,"padding":null,"added_tokens":[],"normalizer":null,
"pre_tokenizer":{{"type":"Whitespace"}},"post_processor":null,
"decoder":null,
"model":{{"type":"WordLevel","vocab":{{{}}},"unk_token":"{prefix}0"}}}}"#,
        entries.join(",")
    )
}

/// Vocabulary size of [`char_tokenizer_json`].
pub const CHAR_VOCAB: usize = 98;

/// A character-level `tokenizer.json` for real text: `<unk>` (0), the 95 printable ASCII
/// characters (1-95), newline (96) and `</s>` (97, the EOS of [`tiny_qwen2`]`(98)`). Any other
/// character is `<unk>`. Lets tiny models run over real prompt sets in tests.
pub fn char_tokenizer_json() -> String {
    let mut vocab = serde_json::Map::new();
    vocab.insert("<unk>".into(), 0.into());
    for (i, c) in (32u8..=126).enumerate() {
        vocab.insert((c as char).to_string(), (i + 1).into());
    }
    vocab.insert("\n".into(), 96.into());
    vocab.insert("</s>".into(), 97.into());
    let eos = serde_json::json!({"id": 97, "content": "</s>", "single_word": false, "lstrip": false, "rstrip": false, "normalized": false, "special": true});
    serde_json::json!({
        "version": "1.0", "truncation": null, "padding": null, "added_tokens": [eos], "normalizer": null,
        "pre_tokenizer": {"type": "Split", "pattern": {"Regex": "[\\s\\S]"}, "behavior": "Isolated", "invert": false},
        "post_processor": null, "decoder": null,
        "model": {"type": "WordLevel", "vocab": vocab, "unk_token": "<unk>"}
    })
    .to_string()
}

/// Writes a tiny character-level pair under `root` (`target/`, `draft/` HF directories): a
/// Qwen2-shaped target with seeded random weights and a draft equal to the target plus noise
/// (`noise` times other random weights), so acceptance labels spread over (0, 1) instead of
/// sitting near 0 as for two unrelated models. Returns (draft, target).
pub fn write_tiny_char_pair(root: &Path, seed: u64, noise: f32) -> Result<(std::path::PathBuf, std::path::PathBuf)> {
    let (cfg, target, draft) = tiny_char_pair_weights(seed, noise);
    let (t, d) = (root.join("target"), root.join("draft"));
    write_hf_dir(&t, &cfg, &target, StDtype::F32, 1, &char_tokenizer_json())?;
    write_hf_dir(&d, &cfg, &draft, StDtype::F32, 1, &char_tokenizer_json())?;
    Ok((d, t))
}

/// The pair of [`write_tiny_char_pair`] as GGUF files with their 2-D weights in `ty` (e.g.
/// Q8_0, so the CPU runs them natively from blocks): `root/{target,draft}/model.gguf` with a
/// `tokenizer.json` beside each. Returns the two model files (draft, target).
pub fn write_tiny_char_pair_gguf(
    root: &Path,
    seed: u64,
    noise: f32,
    ty: GgmlType,
) -> Result<(std::path::PathBuf, std::path::PathBuf)> {
    let (cfg, target, draft) = tiny_char_pair_weights(seed, noise);
    let tokens: Vec<String> = (0..CHAR_VOCAB).map(|i| format!("c{i}")).collect();
    let mut files = Vec::new();
    for (name, w) in [("draft", &draft), ("target", &target)] {
        let dir = root.join(name);
        std::fs::create_dir_all(&dir)?;
        std::fs::write(dir.join("tokenizer.json"), char_tokenizer_json())?;
        write_gguf(&dir.join("model.gguf"), &cfg, w, ty, &tokens)?;
        files.push(dir.join("model.gguf"));
    }
    Ok((files[0].clone(), files[1].clone()))
}

/// A draft for the HF model at `target`: its weights plus `noise` times seeded random values
/// of the same shapes, written as a GGUF file of 2-D weights in `ty` at `out/model.gguf` with
/// the target's `tokenizer.json` beside it (so the pair shares a tokenizer). Rounds then
/// accept some candidates, not all: a pair of any family specx reads, made from one model.
pub fn write_noisy_draft_of(
    target: &Path,
    out: &Path,
    noise: f32,
    seed: u64,
    ty: GgmlType,
) -> Result<std::path::PathBuf> {
    use crate::weights::WeightSource;
    let cfg = ModelConfig::from_hf_json(&target.join("config.json"))?;
    let src = crate::weights::SafetensorsDir::open(target)?;
    let mut rng = StdRng::seed_from_u64(seed);
    let mut weights = BTreeMap::new();
    for name in cfg.tensor_names() {
        let mut t = src.load(&name)?;
        for v in &mut t.data {
            *v += noise * (2.0 * rng.random::<f32>() - 1.0);
        }
        weights.insert(name, t);
    }
    std::fs::create_dir_all(out)?;
    std::fs::copy(target.join("tokenizer.json"), out.join("tokenizer.json"))?;
    let tokenizer = crate::tokenizer::Tokenizer::from_file(&target.join("tokenizer.json"))?;
    let mut tokens = vec![String::new(); cfg.vocab_size];
    for (token, id) in tokenizer.vocab() {
        tokens[id as usize] = token;
    }
    let path = out.join("model.gguf");
    write_gguf(&path, &cfg, &weights, ty, &tokens)?;
    Ok(path)
}

/// (config, target weights, draft weights = target + `noise` x other random weights).
fn tiny_char_pair_weights(
    seed: u64,
    noise: f32,
) -> (ModelConfig, BTreeMap<String, HostTensor>, BTreeMap<String, HostTensor>) {
    let cfg = tiny_qwen2(CHAR_VOCAB);
    let w = random_weights(&cfg, seed);
    let perturbation = random_weights(&cfg, seed + 1);
    let mut draft = w.clone();
    for (name, t) in draft.iter_mut() {
        for (v, n) in t.data.iter_mut().zip(&perturbation[name].data) {
            *v += noise * n;
        }
    }
    (cfg, w, draft)
}

/// Storage dtype of a synthetic safetensors file.
#[derive(Clone, Copy, Debug)]
pub enum StDtype {
    F32,
    F16,
    BF16,
}

/// Writes an HF directory: `config.json`, `model.safetensors` (split in two files when
/// `shards == 2`) and `tokenizer.json`.
pub fn write_hf_dir(
    dir: &Path,
    cfg: &ModelConfig,
    weights: &BTreeMap<String, HostTensor>,
    dtype: StDtype,
    shards: usize,
    tokenizer_json: &str,
) -> Result<()> {
    std::fs::create_dir_all(dir)?;
    // HF's own fields too (architectures, hidden_act, torch_dtype), so that transformers loads
    // the directory as it loads a real checkpoint (the GPU check's anchor does).
    let hf_class = match cfg.architecture.as_str() {
        "qwen2" => "Qwen2ForCausalLM",
        "qwen3" => "Qwen3ForCausalLM",
        _ => "LlamaForCausalLM",
    };
    let rope_scaling = match &cfg.rope_scaling {
        RopeScaling::None => serde_json::Value::Null,
        RopeScaling::Linear { factor } => serde_json::json!({"rope_type": "linear", "factor": factor}),
        RopeScaling::Llama3 { factor, low_freq_factor, high_freq_factor, original_max_position_embeddings } => {
            serde_json::json!({"rope_type": "llama3", "factor": factor, "low_freq_factor": low_freq_factor,
                "high_freq_factor": high_freq_factor, "original_max_position_embeddings": original_max_position_embeddings})
        }
        RopeScaling::FreqFactors(_) => anyhow::bail!("an HF config has no per-frequency RoPE factors"),
    };
    let torch_dtype = match dtype {
        StDtype::F32 => "float32",
        StDtype::F16 => "float16",
        StDtype::BF16 => "bfloat16",
    };
    let config = serde_json::json!({
        "architectures": [hf_class],
        "model_type": cfg.architecture,
        "hidden_act": "silu",
        "torch_dtype": torch_dtype,
        "head_dim": cfg.head_dim,
        "vocab_size": cfg.vocab_size,
        "hidden_size": cfg.hidden_size,
        "intermediate_size": cfg.intermediate_size,
        "num_hidden_layers": cfg.num_hidden_layers,
        "num_attention_heads": cfg.num_attention_heads,
        "num_key_value_heads": cfg.num_key_value_heads,
        "rope_theta": cfg.rope_theta,
        "rms_norm_eps": cfg.rms_norm_eps,
        "max_position_embeddings": cfg.max_position_embeddings,
        "tie_word_embeddings": cfg.tie_word_embeddings,
        "attention_bias": cfg.attention_bias,
        "eos_token_id": cfg.eos_token_ids.first(),
        "rope_scaling": rope_scaling,
        "sliding_window": cfg.sliding_window,
    });
    std::fs::write(dir.join("config.json"), serde_json::to_string_pretty(&config)?)?;
    std::fs::write(dir.join("tokenizer.json"), tokenizer_json)?;
    let encoded: Vec<(String, Vec<usize>, Vec<u8>)> = weights
        .iter()
        .map(|(name, t)| {
            let bytes = match dtype {
                StDtype::F32 => t.data.iter().flat_map(|v| v.to_le_bytes()).collect(),
                StDtype::F16 => t.data.iter().flat_map(|v| f16::from_f32(*v).to_le_bytes()).collect(),
                StDtype::BF16 => t.data.iter().flat_map(|v| bf16::from_f32(*v).to_le_bytes()).collect(),
            };
            (name.clone(), t.shape.clone(), bytes)
        })
        .collect();
    let st_dtype = match dtype {
        StDtype::F32 => Dtype::F32,
        StDtype::F16 => Dtype::F16,
        StDtype::BF16 => Dtype::BF16,
    };
    let per_shard = encoded.len().div_ceil(shards.max(1));
    for (s, chunk) in encoded.chunks(per_shard).enumerate() {
        let views: Vec<(String, TensorView)> = chunk
            .iter()
            .map(|(n, shape, b)| Ok((n.clone(), TensorView::new(st_dtype, shape.clone(), b)?)))
            .collect::<Result<_, safetensors::SafeTensorError>>()?;
        let name = if shards <= 1 {
            "model.safetensors".to_string()
        } else {
            format!("model-{:05}-of-{shards:05}.safetensors", s + 1)
        };
        safetensors::serialize_to_file(views, None, &dir.join(name)).context("writing safetensors")?;
    }
    Ok(())
}

/// Writes a GGUF file as llama.cpp's converter would: ggml names, metadata under the
/// architecture's prefix, and for `llama` the q/k rows permuted for interleaved RoPE.
/// `ty` is the storage type of the 2-D weights (F32, F16, BF16, Q8_0, Q4_0, Q5_0; see
/// [`crate::gguf::quantize`]); norms and biases stay F32, as llama.cpp writes them.
pub fn write_gguf(
    path: &Path,
    cfg: &ModelConfig,
    weights: &BTreeMap<String, HostTensor>,
    ty: GgmlType,
    vocab_tokens: &[String],
) -> Result<()> {
    gguf_writer(cfg, weights, ty, vocab_tokens)?.write(path)
}

/// [`write_gguf`] with each matrix stored as `encode` says: given its GGUF name and values, its
/// type and bytes ([`blocks_for`] encodes any type specx reads).
pub fn write_gguf_with(
    path: &Path,
    cfg: &ModelConfig,
    weights: &BTreeMap<String, HostTensor>,
    encode: MatrixEncoder,
    vocab_tokens: &[String],
) -> Result<()> {
    gguf_writer_with(cfg, weights, encode, vocab_tokens)?.write(path)
}

/// How a matrix is stored: its GGUF name and values in, its type and bytes out.
pub type MatrixEncoder<'a> = &'a dyn Fn(&str, &[f32]) -> Result<(GgmlType, Vec<u8>)>;

/// `values` as `ty` blocks: ggml's reference quantizers where specx has one (Q8_0, Q4_0,
/// Q4_1, Q5_0, F16, BF16, F32); the K-quants, which have none here, as random blocks (seeded
/// by `seed`) with small finite scales, so every scale, min and quant is exercised: the bytes
/// per weight and the kernel of the type, not the values.
pub fn blocks_for(ty: GgmlType, values: &[f32], seed: u64) -> Result<Vec<u8>> {
    if !matches!(ty, GgmlType::Q4K | GgmlType::Q5K | GgmlType::Q6K) {
        return crate::gguf::quantize(ty, values);
    }
    let mut rng = StdRng::seed_from_u64(seed);
    let mut bytes: Vec<u8> = (0..ty.byte_size(values.len())?).map(|_| rng.random::<u8>()).collect();
    let (_, block) = ty.block();
    // Where each block keeps its f16 super-scales: d and dmin first (Q4_K, Q5_K), d last (Q6_K).
    let scales: &[usize] = if ty == GgmlType::Q6K { &[208] } else { &[0, 2] };
    for b in bytes.chunks_exact_mut(block) {
        for &at in scales {
            let d = f16::from_f32(1e-4 + 2e-4 * rng.random::<f32>());
            b[at..at + 2].copy_from_slice(&d.to_le_bytes());
        }
    }
    Ok(bytes)
}

/// The writer [`write_gguf`] fills, before it writes: tests add metadata or tensors to it.
pub fn gguf_writer(
    cfg: &ModelConfig,
    weights: &BTreeMap<String, HostTensor>,
    ty: GgmlType,
    vocab_tokens: &[String],
) -> Result<GgufWriter> {
    gguf_writer_with(cfg, weights, &|_, data| Ok((ty, crate::gguf::quantize(ty, data)?)), vocab_tokens)
}

/// [`gguf_writer`] with each matrix stored as `encode` says.
pub fn gguf_writer_with(
    cfg: &ModelConfig,
    weights: &BTreeMap<String, HostTensor>,
    encode: MatrixEncoder,
    vocab_tokens: &[String],
) -> Result<GgufWriter> {
    let a = &cfg.architecture;
    let mut w = GgufWriter::new();
    w.meta("general.architecture", MetaValue::String(a.clone()))
        .meta(&format!("{a}.embedding_length"), MetaValue::U32(cfg.hidden_size as u32))
        .meta(&format!("{a}.feed_forward_length"), MetaValue::U32(cfg.intermediate_size as u32))
        .meta(&format!("{a}.block_count"), MetaValue::U32(cfg.num_hidden_layers as u32))
        .meta(&format!("{a}.attention.head_count"), MetaValue::U32(cfg.num_attention_heads as u32))
        .meta(&format!("{a}.attention.head_count_kv"), MetaValue::U32(cfg.num_key_value_heads as u32))
        .meta(&format!("{a}.attention.key_length"), MetaValue::U32(cfg.head_dim as u32))
        .meta(&format!("{a}.attention.value_length"), MetaValue::U32(cfg.head_dim as u32))
        .meta(&format!("{a}.rope.freq_base"), MetaValue::F32(cfg.rope_theta as f32))
        .meta(&format!("{a}.attention.layer_norm_rms_epsilon"), MetaValue::F32(cfg.rms_norm_eps as f32))
        .meta(&format!("{a}.context_length"), MetaValue::U32(cfg.max_position_embeddings as u32))
        .meta(
            "tokenizer.ggml.tokens",
            MetaValue::Array(vocab_tokens.iter().map(|t| MetaValue::String(t.clone())).collect()),
        );
    if let Some(&eos) = cfg.eos_token_ids.first() {
        w.meta("tokenizer.ggml.eos_token_id", MetaValue::U32(eos));
    }
    if let Some(window) = cfg.sliding_window {
        w.meta(&format!("{a}.attention.sliding_window"), MetaValue::U32(window as u32));
    }
    // As llama.cpp's converter: linear scaling as metadata, llama3's as per-frequency divisors.
    match &cfg.rope_scaling {
        RopeScaling::None => {}
        RopeScaling::Linear { factor } => {
            w.meta(&format!("{a}.rope.scaling.type"), MetaValue::String("linear".into()))
                .meta(&format!("{a}.rope.scaling.factor"), MetaValue::F32(*factor as f32));
        }
        scaling => {
            let plain = RopeScaling::None.inv_freqs(cfg.rope_theta, cfg.head_dim);
            let scaled = scaling.inv_freqs(cfg.rope_theta, cfg.head_dim);
            let factors: Vec<f32> = plain.iter().zip(&scaled).map(|(p, s)| (p / s) as f32).collect();
            w.tensor_f32("rope_freqs.weight", &[factors.len()], &factors)?;
        }
    }
    for (name, t) in weights {
        let gname = gguf_name(name).with_context(|| format!("no GGUF name for '{name}'"))?;
        let mut data = t.data.clone();
        if a == "llama" && (gname.contains("attn_q.") || gname.contains("attn_k.")) {
            let heads = if gname.contains("attn_q.") { cfg.num_attention_heads } else { cfg.num_key_value_heads };
            let cols = if t.shape.len() == 2 { t.shape[1] } else { 1 };
            permute_qk_rows(&mut data, t.shape[0], cols, heads);
        }
        if t.shape.len() == 2 {
            let (ty, bytes) = encode(&gname, &data).with_context(|| format!("storing '{gname}'"))?;
            w.tensor_raw(&gname, &t.shape, ty, bytes)?;
        } else {
            w.tensor_f32(&gname, &t.shape, &data)?;
        }
    }
    Ok(w)
}
