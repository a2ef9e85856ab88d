//! The tree call on a device: a token tree's rows in one forward, each attending to the cache
//! and its ancestors, and the accepted path kept in the cache.

use super::Check;
use super::tiny::{both, numeric, rows, rows_diff, tokens, write_tiny};
use crate::Device;
use crate::compare::nan_max;
use crate::synthetic::{TINY_VOCAB, tiny_llama, tiny_qwen2};
use crate::tree_mask::TreeMask;
use anyhow::Result;
use std::path::Path;

/// A 12-row tree (the last committed token, two branches, twins among the siblings) after a
/// 40-token prefix, on the device against the CPU; each root-to-leaf path against a chain
/// forward of that path on the device; then one path kept (`KvCache::retain_rows`) and two
/// more tokens against a fresh device cache that saw only the prefix and the path.
pub(super) fn tree_call(device: &Device, dir: &Path, tol: f32) -> Result<Check> {
    let parents =
        [None, Some(0), Some(0), Some(1), Some(1), Some(3), Some(2), Some(6), Some(6), Some(4), Some(9), Some(0)];
    let tree = TreeMask::new(&parents)?;
    let mut nodes = tokens(parents.len(), 21);
    // Twins: siblings proposing the same token.
    nodes[2] = nodes[1];
    let prefix = tokens(40, 22);
    let mut worst = 0f32;
    for cfg in [tiny_qwen2(TINY_VOCAB), tiny_llama(TINY_VOCAB)] {
        let (cpu, dev) = both(&write_tiny(dir, &cfg, 23)?, device)?;
        let (mut cc, mut dc) = (cpu.model.new_cache(1), dev.model.new_cache(1));
        cpu.model.forward(&prefix, &mut cc)?;
        dev.model.forward(&prefix, &mut dc)?;
        let on_cpu = rows(&cpu.model.forward_tree(&nodes, &tree, &mut cc)?);
        let on_dev = rows(&dev.model.forward_tree(&nodes, &tree, &mut dc)?);
        worst = nan_max(worst, rows_diff(&on_cpu, &on_dev)?);
        // The device's rows of `chain` forwarded after the prefix in a fresh cache.
        let chain_after_prefix = |chain: &[u32]| -> Result<Vec<Vec<f32>>> {
            let mut fresh = dev.model.new_cache(1);
            dev.model.forward(&prefix, &mut fresh)?;
            Ok(rows(&dev.model.forward(chain, &mut fresh)?))
        };
        let tokens_of = |path: &[usize]| -> Vec<u32> { path.iter().map(|&i| nodes[i]).collect() };
        for leaf in tree.leaves() {
            let path = tree.path(leaf);
            let want = chain_after_prefix(&tokens_of(path))?;
            let got: Vec<Vec<f32>> = path.iter().map(|&i| on_dev[i].clone()).collect();
            worst = nan_max(worst, rows_diff(&got, &want)?);
        }
        // Keep the path to row 10 (0, 1, 4, 9, 10), then two new tokens.
        let kept = tree.path(10).to_vec();
        cc.retain_rows(prefix.len(), &kept);
        dc.retain_rows(prefix.len(), &kept);
        let next = [3u32, 4];
        let after_cpu = rows(&cpu.model.forward(&next, &mut cc)?);
        let after_dev = rows(&dev.model.forward(&next, &mut dc)?);
        // The reference: the prefix, then the path and the new tokens as one chain.
        let mut chain = tokens_of(&kept);
        chain.extend_from_slice(&next);
        let want = chain_after_prefix(&chain)?.split_off(kept.len());
        worst = nan_max(worst, nan_max(rows_diff(&after_dev, &want)?, rows_diff(&after_dev, &after_cpu)?));
    }
    Ok(numeric(
        "tree_call",
        worst,
        tol,
        "tiny qwen2 and llama: a 12-row tree after 40 tokens vs the CPU and every path vs its chain; a kept path then 2 tokens vs a fresh cache and the CPU",
    ))
}
