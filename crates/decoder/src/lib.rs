//! specx-decoder: the LM runtime of specx and, on top of it, the decoding algorithms.
//!
//! The runtime is one Llama-family [`Transformer`] (Qwen2/2.5, Llama, SmolLM) written against
//! burn's backend-agnostic tensor API, weights from HF safetensors directories or GGUF files
//! ([`load_model`]), an explicit [`KvCache`] owned by the caller with `len()`/`truncate(n)`,
//! forwards over any number of new tokens that return logits and final hidden states, and
//! sampling utilities whose warping applies identically to draft and target.
//!
//! Devices ([`device`]): `cpu` is burn's pure-Rust `flex` backend with specx's own few-row
//! kernels; with the `wgpu` cargo feature `wgpu[:N]` runs the generic burn path on a Vulkan
//! adapter (NVIDIA, AMD, Intel, or Mesa's software lavapipe), and with `cuda` on CUDA.

pub mod cache;
pub mod cheap_draft;
pub mod compare;
pub mod config;
pub mod coupling;
#[cfg(any(feature = "wgpu", feature = "cuda"))]
mod cube;
pub mod device;
pub mod device_check;
pub mod fsutil;
mod fusion;
pub mod generate;
pub mod gguf;
pub mod host_attention;
pub mod hub;
pub mod hugepages;
pub mod kernels;
pub mod layer_groups;
pub mod loader;
pub mod model;
pub mod quant;
pub mod report;
pub mod sampler;
pub mod sampling;
pub mod speculative;
pub mod synthetic;
pub mod tokenizer;
pub mod tree_mask;
pub mod weights;

pub use burn::tensor::Device;
pub use cache::KvCache;
pub use cheap_draft::{DraftTransform, DraftWeights};
pub use config::ModelConfig;
pub use device::launches::LaunchCounter;
pub use device::{
    DeviceName, Placement, check_device, device_from_name, open_device, parse_device_list, parse_placement_list,
};
pub use loader::{LoadedModel, check_pair, load_model, load_model_as, load_model_split, pair_up};
pub use model::{
    AttentionProbe, DeviceMoves, ForwardOutput, LayerLaunches, LayerTimes, ProbedLayer, Transformer, WeightMode,
};
pub use sampler::Sampler;
pub use sampling::SamplingConfig;
pub use tokenizer::{ChatTemplate, Tokenizer};

/// The CPU device (burn-flex, multi-threaded with SIMD).
pub fn default_device() -> Device {
    Device::flex()
}
