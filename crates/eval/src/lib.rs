//! specx-eval: decoding methods as combinations of the decoder's parts, method comparisons on
//! prompt sets, replays and tuning, the papers' analyses, and reports (the benchmarks that
//! measure speed are specx-bench).

pub mod common;
pub mod decode;
pub mod dsi;
pub mod easyspec;
pub mod experiment;
pub mod method;
pub mod numerics;
pub mod profile;
pub use specx_decoder::report;
pub mod slurm;
pub mod tune;
