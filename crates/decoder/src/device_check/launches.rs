//! How many kernels a forward launches per layer on the device: a launch-bound GPU path is
//! slow whatever its kernels do, so the count is bounded like an error is. A one-row step and
//! a 5-row call of a tiny Qwen2-shaped model are counted after a short prefix, and with blocks
//! after a long one too (attention splits the context past 256 keys).

use super::Check;
use super::tiny::{tokens, write_tiny, write_tiny_gguf};
use crate::gguf::GgmlType;
use crate::synthetic::{TINY_VOCAB, tiny_qwen2};
use crate::{Device, load_model};
use anyhow::{Context, Result, ensure};
use std::path::Path;

/// The most kernel launches one layer (attention and MLP sublayers together) may take in a
/// one-row step or a 5-row call, with the weights in GGUF blocks (a GPU's default). It pins the
/// current count so that a change that adds launches fails here; lower it with every fused
/// kernel.
pub const LAUNCH_BOUND_PER_LAYER: u64 = 6;

/// f32 weights (`--weights f32`, safetensors models) take six launches more: burn's matmul
/// leaves the two norms, the q/k/v bias, SwiGLU and both residual adds to kernels of their
/// own, where the block product does them itself.
const F32_EXTRA: u64 = 6;

/// Past 256 cached positions attention splits the context over cubes and merges their partial
/// softmaxes in a kernel of its own (`crate::cube::attention`): one launch more.
const LONG_CONTEXT_EXTRA: u64 = 1;

/// The prefixes counted after: within one chunk of keys, and past it.
const SHORT_PREFIX: usize = 24;
const LONG_PREFIX: usize = 300;

/// Counts the launches of a one-row and a 5-row forward per layer: the tiny model in Q8_0
/// blocks after a short and a long prefix, then in f32 after the short one.
pub(super) fn launches(device: &Device, dir: &Path) -> Result<Check> {
    let cfg = tiny_qwen2(TINY_VOCAB);
    let blocks = write_tiny_gguf(dir, &cfg, 31, GgmlType::Q8_0)?;
    let (mut passed, mut detail) = (true, Vec::new());
    for (what, path, prefix, bound) in [
        ("Q8_0 blocks", &blocks, SHORT_PREFIX, LAUNCH_BOUND_PER_LAYER),
        ("Q8_0 blocks", &blocks, LONG_PREFIX, LAUNCH_BOUND_PER_LAYER + LONG_CONTEXT_EXTRA),
        ("f32", &write_tiny(dir, &cfg, 31)?, SHORT_PREFIX, LAUNCH_BOUND_PER_LAYER + F32_EXTRA),
    ] {
        let worst = count(device, path, prefix, &mut detail, &format!("{what} after {prefix} tokens"))?;
        detail.push(format!("at most {bound} allowed"));
        passed &= worst <= bound;
    }
    Ok(Check {
        name: "launches".into(),
        passed,
        worst_abs_diff: None,
        tolerance: None,
        detail: format!("tiny qwen2: {}", detail.join("; ")),
    })
}

/// The most launches a layer of the model at `path` takes in a one-row and a 5-row call after
/// `prefix` tokens; each count goes into `detail`.
fn count(device: &Device, path: &Path, prefix: usize, detail: &mut Vec<String>, what: &str) -> Result<u64> {
    let model = load_model(path, None, device)?.model;
    let prefix = tokens(prefix, 32);
    let mut cache = model.new_cache(1);
    model.forward(&prefix, &mut cache)?;
    let mut worst = 0u64;
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
            "{what}, {rows} row{}: {} per layer (attention {}, MLP {}), LM head {}, forward {} ({kernels} kernels)",
            if rows == 1 { "" } else { "s" },
            per_layer[0],
            l.attn[0],
            l.mlp[0],
            l.lm_head,
            l.total
        ));
    }
    Ok(worst)
}
