//! specx-eval: benchmarks of the runtime, decoding methods as combinations of the decoder's
//! parts, method comparisons on prompt sets, and reports.

pub mod bench;
pub mod common;
pub mod decode;
pub mod decode_bench;
pub mod draft_cost;
pub mod dsi;
pub mod easyspec;
pub mod experiment;
pub mod gpu_check;
pub mod llamacpp;
pub mod method;
pub mod numerics;
pub mod profile;
pub use specx_decoder::report;
pub mod reproduce;
pub mod slurm;
pub mod tune;
