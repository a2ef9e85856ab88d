//! Two devices of one kind as two GPUs (two CUDA devices, or two logical devices of one Vulkan
//! adapter: `SPECX_WGPU_DEVICES_PER_ADAPTER=2`). The same kernels run on both, so every
//! multi-device placement must give the one-device numbers bit for bit, not within a
//! tolerance:
//! - a model split in layer ranges over both (both orders) gives the logits of the model on
//!   the first alone, and moves one hidden state and one set of position tables a call;
//! - EasySpec's attentions placed on the second device give the one-device exact and fuzzy
//!   logits, and move two hidden states per placed layer and exact call;
//! - DSI with one target on each device gives greedy decoding's tokens, the two targets give
//!   the same logits, and the two workers verify at the same time.
//!
//! The models are GGUF files in Q8_0 blocks (the reference pair's draft type), so the
//! products are specx's block kernels, whose summation order is fixed.

use super::Check;
use super::tiny::{
    dsi_against_greedy, noisy_draft, placed_calls, rows, rows_diff, split_calls, tokens, write_tiny_gguf,
};
use crate::compare::nan_max;
use crate::gguf::GgmlType;
use crate::synthetic::{TINY_VOCAB, tiny_llama, tiny_qwen2};
use crate::{Device, DeviceMoves, ModelConfig, WeightMode, load_model, load_model_split};
use anyhow::{Result, ensure};
use std::path::Path;

/// Runs the three parts; the check passes when every logit is identical and nothing is off.
pub(super) fn two_devices(a: &Device, b: &Device, dir: &Path) -> Result<Check> {
    ensure!(a != b, "the two-device check needs two different devices");
    let mut bad = Vec::new();
    let worst = nan_max(split(a, b, dir, &mut bad)?, placed(a, b, dir, &mut bad)?);
    let (dsi_worst, dsi_detail) = dsi(a, b, dir, &mut bad)?;
    let worst = nan_max(worst, dsi_worst);
    let passed = worst == 0.0 && bad.is_empty();
    let mut detail = format!(
        "layer split (tiny qwen2 and llama, both orders), EasySpec placement (5 layers, layer-parallel 1/2/4), {dsi_detail}; Q8_0 blocks, logits compared bit for bit"
    );
    if !bad.is_empty() {
        detail = format!("{detail}; {}", bad.join("; "));
    }
    Ok(Check { name: "two_devices".into(), passed, worst_abs_diff: Some(worst as f64), tolerance: Some(0.0), detail })
}

/// Bytes of `n` hidden states of `cfg` (f32).
fn hidden_bytes(cfg: &ModelConfig, n: usize) -> u64 {
    (4 * n * cfg.hidden_size) as u64
}

/// The layer split: a prefill, steps, a verification and a rollback across both ranges, each
/// call moving exactly one hidden state and one set of tables; greedy speculative decoding
/// with the split target gives the one-device tokens.
fn split(a: &Device, b: &Device, dir: &Path, bad: &mut Vec<String>) -> Result<f32> {
    let mut worst = 0f32;
    for cfg in [ModelConfig { num_hidden_layers: 3, ..tiny_qwen2(TINY_VOCAB) }, tiny_llama(TINY_VOCAB)] {
        let path = write_tiny_gguf(dir, &cfg, 6, GgmlType::Q8_0)?;
        let one = load_model(&path, None, a)?;
        for order in [[a.clone(), b.clone()], [b.clone(), a.clone()]] {
            let split = load_model_split(&path, None, &order, WeightMode::Native)?;
            ensure!(split.model.is_split(), "the model did not split");
            let calls = split_calls(&one.model, &split.model)?;
            worst = nan_max(worst, calls.worst);
            for (rows, moved) in calls.moved {
                let want = DeviceMoves { hidden: 1, hidden_bytes: hidden_bytes(&cfg, rows), tables: 1 };
                if moved != want {
                    bad.push(format!("{}: a {rows}-row call moved {moved:?}, expected {want:?}", cfg.architecture));
                }
            }
            if let Some((got, want)) = calls.greedy_differs {
                bad.push(format!("{}: greedy with the split target {got:?} vs {want:?}", cfg.architecture));
            }
        }
    }
    Ok(worst)
}

/// EasySpec's placement: a 5-layer draft with layers 1 and 3's attentions on the second
/// device, exact and fuzzy forwards with a rollback, against the draft on the first alone.
fn placed(a: &Device, b: &Device, dir: &Path, bad: &mut Vec<String>) -> Result<f32> {
    let cfg = ModelConfig { num_hidden_layers: 5, ..tiny_qwen2(TINY_VOCAB) };
    let path = write_tiny_gguf(dir, &cfg, 4, GgmlType::Q8_0)?;
    let one = load_model(&path, None, a)?;
    let placed = load_model(&path, None, a)?.model.place_attention(&[a.clone(), b.clone()])?;
    let remote = placed.layer_devices().iter().filter(|d| *d == b).count() as u64;
    ensure!(remote == 2, "layers 1 and 3 should sit on the second device; {remote} do");
    let mut worst = 0f32;
    for lp in [1, 2, 4] {
        let calls = placed_calls(&one.model, &placed, lp)?;
        worst = nan_max(worst, calls.worst);
        for (call, &(rows, exact, moved)) in calls.moved.iter().enumerate() {
            // Each placed attention takes its input over and sends its output back; a fuzzy
            // call may reach fewer (its groups' stale inputs are shared).
            let bound =
                DeviceMoves { hidden: 2 * remote, hidden_bytes: 2 * remote * hidden_bytes(&cfg, rows), tables: 1 };
            if (exact && moved != bound) || moved.hidden > bound.hidden || moved.tables > 1 {
                bad.push(format!("placed, layer-parallel {lp}, call {call}: moved {moved:?}, bound {bound:?}"));
            }
        }
        let (x, y) = (&calls.one, &calls.placed);
        if x.layer_precise_lens() != y.layer_precise_lens() {
            bad.push(format!(
                "layer-parallel {lp}: exact watermarks {:?} vs {:?}",
                y.layer_precise_lens(),
                x.layer_precise_lens()
            ));
        }
    }
    Ok(worst)
}

/// DSI with a target on each device and a draft on the CPU: greedy tokens, the two targets'
/// logits, and the time both workers were busy at once.
fn dsi(a: &Device, b: &Device, dir: &Path, bad: &mut Vec<String>) -> Result<(f32, String)> {
    let path = write_tiny_gguf(dir, &tiny_qwen2(TINY_VOCAB), 1, GgmlType::Q8_0)?;
    let (ta, tb) = (load_model(&path, None, a)?, load_model(&path, None, b)?);
    let probe = tokens(11, 3);
    let worst = rows_diff(
        &rows(&ta.model.forward(&probe, &mut ta.model.new_cache(1))?),
        &rows(&tb.model.forward(&probe, &mut tb.model.new_cache(1))?),
    )?;
    let draft = noisy_draft(dir, TINY_VOCAB, 1, 0.3)?;
    let replays_before = replays_so_far();
    let stats = dsi_against_greedy(&[&ta.model, &tb.model], &draft.model, 24, 2, bad)?;
    // Each worker's target is in GGUF blocks on one device: its verifications replay recorded
    // calls where the runtime records them.
    let replayed = replays_so_far() - replays_before;
    if ta.model.can_capture() && replayed == 0 {
        bad.push("DSI's verifications replayed no recorded call".into());
    }
    if stats.worker_busy_s.len() != 2 || stats.worker_busy_s.iter().any(|&s| s <= 0.0) {
        bad.push(format!("a DSI worker never verified ({} tasks; busy {:?} s)", stats.tasks, stats.worker_busy_s));
    }
    if stats.concurrent_s <= 0.0 {
        bad.push(format!("the DSI workers never verified at the same time ({} tasks)", stats.tasks));
    }
    let detail = format!(
        "DSI with a target on each device ({} tasks, {replayed} recorded calls replayed, busy {:.3} s / {:.3} s, both at once {:.3} s)",
        stats.tasks, stats.worker_busy_s[0], stats.worker_busy_s[1], stats.concurrent_s
    );
    Ok((worst, detail))
}

/// Recorded calls replayed so far in this process (none in a build without GPU kernels).
fn replays_so_far() -> u64 {
    #[cfg(any(feature = "wgpu", feature = "cuda"))]
    return crate::model::replays();
    #[cfg(not(any(feature = "wgpu", feature = "cuda")))]
    0
}
