//! GGUF v3: reading the container (metadata and tensor table), dequantizing tensors to f32,
//! and writing small files (tests build their synthetic models with it).
//!
//! Written here rather than taken from a crate: the GGUF crates on crates.io either leave the
//! K-quant dequantizers unimplemented (`ggml-quants` 0.1 has `todo!()` for Q4_K/Q5_K/Q6_K) or
//! panic on a truncated file, and candle-core would bring a second tensor framework and a
//! second `tokenizers`. Every block type is tested against values produced by the reference
//! `gguf` Python package (see `tests/fixtures/quant_blocks.json`).

mod dequant;
mod quantize;
mod reader;
mod writer;

pub use dequant::{GgmlType, dequantize};
pub(crate) use dequant::{dequantize_blocks, f16_at, scale_min_k4};
pub use quantize::quantize;
pub use reader::{GgufFile, MetaValue, TensorInfo};
pub use writer::GgufWriter;
