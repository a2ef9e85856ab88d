//! Reading a model configuration from GGUF metadata and tensor shapes, with llama.cpp's
//! meaning of each key, and a refusal by name of every key whose arithmetic specx lacks.

use super::rope::RopeScaling;
use super::{ModelConfig, SUPPORTED_ARCHITECTURES};
use crate::gguf::{GgufFile, MetaValue};
use anyhow::{Context, Result, anyhow, bail};

/// The GGUF architectures specx runs (llama.cpp writes Mistral and SmolLM as `llama`).
const GGUF_ARCHITECTURES: [&str; 3] = ["qwen2", "qwen3", "llama"];

/// Keys (after the `{arch}.` prefix) that ask for arithmetic specx does not implement when
/// set to anything but 0 (or 1 for a factor): `(key, what)`.
const UNIMPLEMENTED: &[(&str, &str)] = &[
    ("attn_logit_softcapping", "soft-capping of attention scores"),
    ("final_logit_softcapping", "soft-capping of the output logits"),
    ("expert_count", "a mixture of experts"),
    ("expert_used_count", "a mixture of experts"),
    ("attention.layer_norm_epsilon", "LayerNorm (specx's norms are RMSNorm)"),
    ("attention.scale", "a configured attention scale"),
    ("embedding_scale", "a scaled embedding"),
    ("residual_scale", "a scaled residual stream"),
    ("logit_scale", "scaled output logits"),
    ("rope.scaling.attn_factor", "an attention factor of scaled RoPE (YaRN)"),
];

impl ModelConfig {
    /// The configuration a GGUF file declares. `rope_freqs` holds the file's
    /// `rope_freqs.weight` values where it has that tensor.
    pub fn from_gguf(f: &GgufFile, rope_freqs: Option<Vec<f32>>) -> Result<Self> {
        from_gguf(f, rope_freqs).with_context(|| format!("{}", f.path().display()))
    }
}

fn from_gguf(f: &GgufFile, rope_freqs: Option<Vec<f32>>) -> Result<ModelConfig> {
    let a = f.str("general.architecture")?.to_string();
    if !GGUF_ARCHITECTURES.contains(&a.as_str()) {
        bail!(
            "architecture '{a}' is not a family specx runs ({SUPPORTED_ARCHITECTURES}; docs/guide/models.md lists what \
             each refusal means)"
        );
    }
    let key = |k: &str| format!("{a}.{k}");
    let get = |k: &str| f.get(&key(k));
    for (k, what) in UNIMPLEMENTED {
        let neutral = if k.ends_with("factor") { 1.0 } else { 0.0 };
        if let Some(v) = get(k)
            && v.as_f64() != Some(neutral)
        {
            bail!("metadata '{}' is set ({}): it asks for {what}, which specx does not implement", key(k), show(v));
        }
    }
    let n_head = f.u64(&key("attention.head_count"))? as usize;
    let hidden = f.u64(&key("embedding_length"))? as usize;
    let embd = f.tensors.get("token_embd.weight").ok_or_else(|| anyhow!("tensor 'token_embd.weight' is missing"))?;
    let head_dim =
        get("attention.key_length").and_then(MetaValue::as_u64).map_or(hidden / n_head.max(1), |v| v as usize);
    if let Some(rot) = get("rope.dimension_count").and_then(MetaValue::as_u64)
        && rot as usize != head_dim
    {
        bail!(
            "metadata '{}' is {rot} but a head has {head_dim} values: RoPE on part of a head is not implemented",
            key("rope.dimension_count")
        );
    }
    let rope_scaling = rope_scaling(f, &a, rope_freqs)?;
    let eos = f.get("tokenizer.ggml.eos_token_id").and_then(MetaValue::as_u64).map(|v| v as u32);
    let cfg = ModelConfig {
        architecture: a.clone(),
        vocab_size: embd.shape()[0],
        hidden_size: hidden,
        intermediate_size: f.u64(&key("feed_forward_length"))? as usize,
        num_hidden_layers: f.u64(&key("block_count"))? as usize,
        num_attention_heads: n_head,
        num_key_value_heads: get("attention.head_count_kv").and_then(MetaValue::as_u64).map_or(n_head, |v| v as usize),
        head_dim,
        rope_theta: get("rope.freq_base").and_then(MetaValue::as_f64).unwrap_or(10_000.0),
        rope_scaling,
        rms_norm_eps: get("attention.layer_norm_rms_epsilon").and_then(MetaValue::as_f64).unwrap_or(1e-6),
        max_position_embeddings: get("context_length").and_then(MetaValue::as_u64).unwrap_or(32_768) as usize,
        sliding_window: get("attention.sliding_window").and_then(MetaValue::as_u64).map(|v| v as usize),
        attention_bias: f.tensors.contains_key("blk.0.attn_q.bias"),
        // Qwen3's q/k norms; another family holding such tensors is refused as reading
        // tensors the model would not read.
        qk_norm: a == "qwen3",
        tie_word_embeddings: !f.tensors.contains_key("output.weight"),
        bos_token_id: f.get("tokenizer.ggml.bos_token_id").and_then(MetaValue::as_u64).map(|v| v as u32),
        eos_token_ids: eos.into_iter().collect(),
    };
    cfg.validate()?;
    Ok(cfg)
}

/// RoPE scaling as llama.cpp reads it: `rope.scaling.type` (linear when only a factor is
/// given, as llama.cpp defaults), the older `rope.scale_linear`, and `rope_freqs.weight`.
fn rope_scaling(f: &GgufFile, a: &str, rope_freqs: Option<Vec<f32>>) -> Result<RopeScaling> {
    let kind = f.get(&format!("{a}.rope.scaling.type")).and_then(MetaValue::as_str);
    let factor = [format!("{a}.rope.scaling.factor"), format!("{a}.rope.scale_linear")]
        .iter()
        .find_map(|k| f.get(k).and_then(MetaValue::as_f64))
        .filter(|&v| v != 0.0 && v != 1.0);
    let scaled = match (kind, factor) {
        (None | Some("none"), None) | (Some("none"), Some(_)) => RopeScaling::None,
        (None | Some("linear"), Some(factor)) => RopeScaling::Linear { factor },
        (Some("linear"), None) => RopeScaling::None,
        (Some(other), _) => bail!(
            "metadata '{a}.rope.scaling.type' is '{other}': specx implements plain, linear and llama3 \
             (rope_freqs.weight) RoPE; running it with plain RoPE would compute wrong angles"
        ),
    };
    match (rope_freqs, scaled) {
        (None, s) => Ok(s),
        (Some(factors), RopeScaling::None) => Ok(RopeScaling::FreqFactors(factors)),
        (Some(_), s) => {
            bail!("the file has both rope_freqs.weight and RoPE scaling '{}': llama.cpp would apply both", s.describe())
        }
    }
}

fn show(v: &MetaValue) -> String {
    match v {
        MetaValue::String(s) => format!("'{s}'"),
        MetaValue::Array(a) => format!("an array of {}", a.len()),
        other => other.as_f64().map_or_else(|| format!("{other:?}"), |x| x.to_string()),
    }
}
