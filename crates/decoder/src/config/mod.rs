//! The Llama-family model configuration: one struct for Qwen2/2.5, Qwen3, Llama 2/3.x, SmolLM
//! and Mistral, read from an HF `config.json` ([`hf`]) or from GGUF metadata ([`gguf`]), each
//! refusing by name what specx does not implement.

mod gguf;
mod hf;
mod rope;

pub use rope::RopeScaling;

use anyhow::{Result, bail};
use serde::{Deserialize, Serialize};

/// The families specx runs, as messages name them.
pub const SUPPORTED_ARCHITECTURES: &str = "qwen2, qwen3, llama, mistral";

/// Architecture hyper-parameters of a Llama-family decoder.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ModelConfig {
    /// `qwen2`, `qwen3` or `llama` (Llama, SmolLM, Mistral).
    pub architecture: String,
    pub vocab_size: usize,
    pub hidden_size: usize,
    pub intermediate_size: usize,
    pub num_hidden_layers: usize,
    pub num_attention_heads: usize,
    pub num_key_value_heads: usize,
    pub head_dim: usize,
    pub rope_theta: f64,
    /// How RoPE's frequencies are scaled (Llama 3.1+).
    #[serde(default)]
    pub rope_scaling: RopeScaling,
    pub rms_norm_eps: f64,
    pub max_position_embeddings: usize,
    /// The attention window of a sliding-window model (Mistral). Within it, sliding-window
    /// attention is full causal attention; a forward past it is refused
    /// ([`ModelConfig::check_positions`]).
    #[serde(default)]
    pub sliding_window: Option<usize>,
    /// q/k/v projections carry a bias (Qwen2 does).
    pub attention_bias: bool,
    /// Each head's queries and keys pass an RMSNorm of their own before RoPE (Qwen3).
    #[serde(default)]
    pub qk_norm: bool,
    /// The output head reuses the embedding matrix.
    pub tie_word_embeddings: bool,
    pub bos_token_id: Option<u32>,
    pub eos_token_ids: Vec<u32>,
}

impl ModelConfig {
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
        c.rope_scaling.validate(c.head_dim)?;
        Ok(())
    }

    /// RoPE's inverse frequencies, scaling applied (`head_dim / 2` of them).
    pub fn rope_inv_freqs(&self) -> Vec<f64> {
        self.rope_scaling.inv_freqs(self.rope_theta, self.head_dim)
    }

    /// Refuses a forward that would reach `positions` positions past the model's attention
    /// window, where sliding-window attention differs from the full attention specx computes.
    pub fn check_positions(&self, positions: usize) -> Result<()> {
        if let Some(w) = self.sliding_window
            && positions > w
        {
            bail!(
                "this model attends over a sliding window of {w} positions and the sequence would reach {positions}: \
                 specx computes full attention, which equals the window's only within it (sliding-window attention \
                 is not implemented)"
            );
        }
        Ok(())
    }

    /// The HF names of every tensor the model reads.
    pub fn tensor_names(&self) -> Vec<String> {
        let mut names = vec!["model.embed_tokens.weight".to_string(), "model.norm.weight".to_string()];
        if !self.tie_word_embeddings {
            names.push("lm_head.weight".into());
        }
        for l in 0..self.num_hidden_layers {
            let p = format!("model.layers.{l}");
            for part in ["input_layernorm", "post_attention_layernorm", "mlp.gate_proj", "mlp.up_proj", "mlp.down_proj"]
            {
                names.push(format!("{p}.{part}.weight"));
            }
            for proj in ["q", "k", "v", "o"] {
                names.push(format!("{p}.self_attn.{proj}_proj.weight"));
                if self.attention_bias && proj != "o" {
                    names.push(format!("{p}.self_attn.{proj}_proj.bias"));
                }
            }
            if self.qk_norm {
                names.push(format!("{p}.self_attn.q_norm.weight"));
                names.push(format!("{p}.self_attn.k_norm.weight"));
            }
        }
        names
    }

    /// Refuses a checkpoint holding a tensor the model would not read: a part of the
    /// architecture specx does not implement (a q/k norm, a sandwich norm, an expert, ...),
    /// which ignored would run the model silently wrong. `names` are HF names where the
    /// tensor has one, else as stored.
    pub fn check_tensors<'a>(&self, names: impl IntoIterator<Item = &'a str>) -> Result<()> {
        let read: std::collections::HashSet<String> = self.tensor_names().into_iter().collect();
        let mut unread: Vec<&str> = names
            .into_iter()
            .filter(|n| !read.contains(*n) && !n.ends_with("rotary_emb.inv_freq")) // a buffer RoPE recomputes
            .collect();
        unread.sort();
        if let Some(first) = unread.first() {
            bail!(
                "{} tensor(s) are not part of the {} architecture specx runs, e.g. '{first}': the model would run \
                 without them, so specx refuses it",
                unread.len(),
                self.architecture
            );
        }
        Ok(())
    }

    /// Number of parameters (embedding included once even when tied).
    pub fn num_parameters(&self) -> usize {
        let (h, i, d) = (self.hidden_size, self.intermediate_size, self.head_dim);
        let (q, kv) = (self.num_attention_heads * d, self.num_key_value_heads * d);
        let bias = if self.attention_bias { q + 2 * kv } else { 0 };
        let qk_norm = if self.qk_norm { 2 * d } else { 0 };
        let layer = h * q + 2 * h * kv + q * h + bias + qk_norm + 3 * h * i + 2 * h;
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
