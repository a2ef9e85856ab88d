//! A build without `--features cuda`: every CUDA device is refused by name.

use super::CudaDeviceInfo;
use anyhow::{Result, bail};

const NOT_BUILT: &str = "this build has no CUDA backend: rebuild with `--features cuda` (see docs/guide/gpu.md; it builds offline and needs no CUDA toolkit)";

pub(super) fn devices() -> Result<Vec<CudaDeviceInfo>> {
    bail!("{NOT_BUILT}")
}

pub(super) fn check(index: usize) -> Result<()> {
    bail!(
        "device 'cuda:{index}' needs a build with `--features cuda` (see docs/guide/gpu.md: it builds offline and needs no CUDA toolkit; `wgpu` also runs NVIDIA GPUs, through Vulkan)"
    )
}
