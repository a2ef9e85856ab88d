//! The Llama-family model configuration: one struct for Qwen2/2.5 and Llama/SmolLM, read from
//! an HF `config.json` or from GGUF metadata.

use anyhow::{Context, Result, bail};
use serde::{Deserialize, Serialize};
use std::path::Path;

/// Architecture hyper-parameters of a Llama-family decoder.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ModelConfig {
    /// `qwen2` or `llama` (Llama, SmolLM, Mistral-style configs without sliding windows).
    pub architecture: String,
    pub vocab_size: usize,
    pub hidden_size: usize,
    pub intermediate_size: usize,
    pub num_hidden_layers: usize,
    pub num_attention_heads: usize,
    pub num_key_value_heads: usize,
    pub head_dim: usize,
    pub rope_theta: f64,
    pub rms_norm_eps: f64,
    pub max_position_embeddings: usize,
    /// q/k/v projections carry a bias (Qwen2 does).
    pub attention_bias: bool,
    /// The output head reuses the embedding matrix.
    pub tie_word_embeddings: bool,
    pub bos_token_id: Option<u32>,
    pub eos_token_ids: Vec<u32>,
}

/// The subset of HF `config.json` that specx reads; unknown keys are ignored as HF adds many.
#[derive(Deserialize)]
struct HfConfig {
    model_type: Option<String>,
    vocab_size: usize,
    hidden_size: usize,
    intermediate_size: usize,
    num_hidden_layers: usize,
    num_attention_heads: usize,
    num_key_value_heads: Option<usize>,
    head_dim: Option<usize>,
    rope_theta: Option<f64>,
    rms_norm_eps: Option<f64>,
    max_position_embeddings: Option<usize>,
    attention_bias: Option<bool>,
    tie_word_embeddings: Option<bool>,
    bos_token_id: Option<u32>,
    eos_token_id: Option<serde_json::Value>,
    rope_scaling: Option<serde_json::Value>,
    use_sliding_window: Option<bool>,
}

impl ModelConfig {
    /// Reads an HF `config.json`. Qwen2 always has q/k/v biases; Llama has them when
    /// `attention_bias` says so. The loader re-checks both against the weights present.
    pub fn from_hf_json(path: &Path) -> Result<Self> {
        let text = std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
        let hf: HfConfig = serde_json::from_str(&text).with_context(|| format!("parsing {}", path.display()))?;
        let architecture = match hf.model_type.as_deref() {
            Some("qwen2") => "qwen2",
            Some("llama") | Some("mistral") | None => "llama",
            Some(other) => bail!(
                "{}: model_type '{other}' is not a Llama-family model specx runs (qwen2, llama, mistral)",
                path.display()
            ),
        };
        if hf.rope_scaling.as_ref().is_some_and(|v| !v.is_null()) {
            bail!("{}: rope_scaling is set; specx implements plain RoPE only", path.display());
        }
        if hf.use_sliding_window == Some(true) {
            bail!("{}: sliding-window attention is not supported", path.display());
        }
        let eos_token_ids = match hf.eos_token_id {
            Some(serde_json::Value::Number(n)) => n.as_u64().map(|v| vec![v as u32]).unwrap_or_default(),
            Some(serde_json::Value::Array(a)) => a.iter().filter_map(|v| v.as_u64()).map(|v| v as u32).collect(),
            _ => vec![],
        };
        let cfg = Self {
            architecture: architecture.to_string(),
            vocab_size: hf.vocab_size,
            hidden_size: hf.hidden_size,
            intermediate_size: hf.intermediate_size,
            num_hidden_layers: hf.num_hidden_layers,
            num_attention_heads: hf.num_attention_heads,
            num_key_value_heads: hf.num_key_value_heads.unwrap_or(hf.num_attention_heads),
            head_dim: hf.head_dim.unwrap_or(hf.hidden_size / hf.num_attention_heads.max(1)),
            rope_theta: hf.rope_theta.unwrap_or(10_000.0),
            rms_norm_eps: hf.rms_norm_eps.unwrap_or(1e-6),
            max_position_embeddings: hf.max_position_embeddings.unwrap_or(32_768),
            attention_bias: architecture == "qwen2" || hf.attention_bias.unwrap_or(false),
            tie_word_embeddings: hf.tie_word_embeddings.unwrap_or(false),
            bos_token_id: hf.bos_token_id,
            eos_token_ids,
        };
        cfg.validate().with_context(|| format!("{}", path.display()))?;
        Ok(cfg)
    }

    /// Checks the shape relations the model relies on.
    pub fn validate(&self) -> Result<()> {
        let c = self;
        if c.num_attention_heads == 0 || c.num_key_value_heads == 0 || c.num_hidden_layers == 0 {
            bail!("heads, kv heads and layers must be positive");
        }
        if !c.num_attention_heads.is_multiple_of(c.num_key_value_heads) {
            bail!("{} attention heads are not a multiple of {} kv heads", c.num_attention_heads, c.num_key_value_heads);
        }
        if !c.head_dim.is_multiple_of(2) {
            bail!("head_dim {} must be even for RoPE", c.head_dim);
        }
        Ok(())
    }

    /// Number of parameters (embedding included once even when tied).
    pub fn num_parameters(&self) -> usize {
        let (h, i, d) = (self.hidden_size, self.intermediate_size, self.head_dim);
        let (q, kv) = (self.num_attention_heads * d, self.num_key_value_heads * d);
        let bias = if self.attention_bias { q + 2 * kv } else { 0 };
        let layer = h * q + 2 * h * kv + q * h + bias + 3 * h * i + 2 * h;
        let head = if self.tie_word_embeddings { 0 } else { self.vocab_size * h };
        self.vocab_size * h + self.num_hidden_layers * layer + h + head
    }

    /// Bytes of f32 weights one decoded token reads: every layer, the final norm and the output
    /// head (the embedding lookup reads one row and is left out).
    pub fn weight_bytes_per_token(&self) -> usize {
        let embed = self.vocab_size * self.hidden_size;
        let head_read = embed; // tied or not, the head is a full vocab x hidden matrix
        let untied_extra = if self.tie_word_embeddings { 0 } else { embed };
        4 * (self.num_parameters() - embed - untied_extra + head_read)
    }

    /// Bytes of KV cache read per decoded token at context length `ctx` (f32 K and V).
    pub fn kv_bytes_per_token(&self, ctx: usize) -> usize {
        4 * 2 * self.num_hidden_layers * self.num_key_value_heads * self.head_dim * ctx
    }
}
