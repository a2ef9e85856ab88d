//! A build without `--features wgpu`: every wgpu device is refused by name.

use super::AdapterInfo;
use anyhow::{Result, bail};

const NOT_BUILT: &str = "this build has no wgpu backend: rebuild with `--features wgpu` (see docs/guide/gpu.md)";

pub(super) fn adapters() -> Result<Vec<AdapterInfo>> {
    bail!("{NOT_BUILT}")
}

pub(super) fn check(index: usize) -> Result<()> {
    bail!("device 'wgpu:{index}': {NOT_BUILT}")
}

pub(super) fn max_buffer_bytes(_: &burn::tensor::Device) -> Option<usize> {
    None
}

pub(super) fn open(index: usize) -> Result<burn::tensor::Device> {
    bail!("device 'wgpu:{index}': {NOT_BUILT}")
}
