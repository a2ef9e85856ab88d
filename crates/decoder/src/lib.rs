//! specx-decoder: the LM runtime of specx and, on top of it, the decoding algorithms.
//!
//! The runtime is one Llama-family [`Transformer`] (Qwen2/2.5, Llama, SmolLM) written against
//! burn's backend-agnostic tensor API, weights from HF safetensors directories or GGUF files
//! ([`load_model`]), an explicit [`KvCache`] owned by the caller with `len()`/`truncate(n)`,
//! forwards over any number of new tokens that return logits and final hidden states, and
//! sampling utilities whose warping applies identically to draft and target.
//!
//! Devices: [`default_device`] is burn's pure-Rust `flex` CPU backend; with the `cuda` cargo
//! feature a `Device::cuda(0)` runs the same code on an NVIDIA GPU.

pub mod cache;
pub mod config;
pub mod fsutil;
pub mod generate;
pub mod gguf;
pub mod kernels;
pub mod layer_groups;
pub mod loader;
pub mod model;
pub mod quant;
pub mod report;
pub mod sampling;
pub mod spec;
pub mod synthetic;
pub mod tokenizer;
pub mod weights;

pub use burn::tensor::Device;
pub use cache::KvCache;
pub use config::ModelConfig;
pub use loader::{check_pair, load_model, load_model_as, LoadedModel};
pub use model::{AttentionProbe, ForwardOutput, LayerTimes, ProbedLayer, Transformer, WeightMode};
pub use sampling::{Sampler, SamplingConfig};
pub use tokenizer::{ChatTemplate, Tokenizer};

/// The CPU device (burn-flex, multi-threaded with SIMD).
pub fn default_device() -> Device {
    Device::flex()
}

/// The device called `name`: `cpu` (burn-flex), or with the `cuda` feature `cuda` / `cuda:N`.
pub fn device_from_name(name: &str) -> anyhow::Result<Device> {
    match name {
        "cpu" => Ok(Device::flex()),
        #[cfg(feature = "cuda")]
        n if n == "cuda" || n.starts_with("cuda:") => {
            let index: usize = n.strip_prefix("cuda:").map_or(Ok(0), str::parse)?;
            Ok(Device::cuda(index))
        }
        other => anyhow::bail!(
            "unknown device '{other}': this build knows 'cpu'{}",
            if cfg!(feature = "cuda") { " and 'cuda[:N]'" } else { " (build with --features cuda for NVIDIA GPUs)" }
        ),
    }
}
