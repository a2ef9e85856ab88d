//! How many kernels a forward launches per layer on the device: a launch-bound GPU path is
//! slow whatever its kernels do, so the count is bounded like an error is. A one-row step and
//! a 5-row call of a tiny Qwen2-shaped model are counted after a warm-up call of each shape
//! (autotuning launches kernels of its own on a shape's first call).

use super::Check;
use super::tiny::{tokens, write_tiny};
use crate::synthetic::{TINY_VOCAB, tiny_qwen2};
use crate::{Device, load_model};
use anyhow::{Context, Result, ensure};
use std::path::Path;

/// The most kernel launches one layer (attention and MLP sublayers together) may take in a
/// one-row step or a 5-row call. It pins the current count so that a change that adds launches
/// fails here; lower it with every fused kernel.
pub const LAUNCH_BOUND_PER_LAYER: u64 = 12;

/// Counts the launches of a one-row and a 5-row forward after a 24-token prefix, per layer.
pub(super) fn launches(device: &Device, dir: &Path) -> Result<Check> {
    let model = load_model(&write_tiny(dir, &tiny_qwen2(TINY_VOCAB), 31)?, None, device)?.model;
    let prefix = tokens(24, 32);
    let mut cache = model.new_cache(1);
    model.forward(&prefix, &mut cache)?;
    let (mut worst, mut detail) = (0u64, Vec::new());
    for rows in [1, 5] {
        let new = tokens(rows, 33 + rows as u32);
        let (l, by_kernel) =
            model.forward_counted(&new, &mut cache)?.context("this build has no GPU backend to count launches on")?;
        let kernels = by_kernel.len();
        let per_layer = l.per_layer();
        let layers: u64 = per_layer.iter().sum();
        ensure!(
            l.attn.iter().chain(&l.mlp).all(|&n| n > 0),
            "a sublayer launched nothing on {device:?} ({l:?}): the counter does not see this device's launches"
        );
        ensure!(l.total >= layers + l.lm_head, "the forward's {} launches are fewer than its parts' ({l:?})", l.total);
        worst = worst.max(*per_layer.iter().max().expect("a model has layers"));
        detail.push(format!(
            "{rows} row{}: {} per layer (attention {}, MLP {}), LM head {}, forward {} ({kernels} kernels)",
            if rows == 1 { "" } else { "s" },
            per_layer[0],
            l.attn[0],
            l.mlp[0],
            l.lm_head,
            l.total
        ));
    }
    Ok(Check {
        name: "launches".into(),
        passed: worst <= LAUNCH_BOUND_PER_LAYER,
        worst_abs_diff: None,
        tolerance: None,
        detail: format!(
            "tiny qwen2 after 24 tokens, at most {LAUNCH_BOUND_PER_LAYER} launches a layer: {}",
            detail.join("; ")
        ),
    })
}
