//! specx-eval: benchmarks of the runtime and (later) evaluation runs of the decoding methods.

pub mod bench;
pub mod sysmem;
