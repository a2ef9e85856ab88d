//! A recorded decode step against the forward it records (`model::CapturedDecode`): greedy
//! decoding of a tiny GGUF model past 256 positions, where the cache grows and attention takes
//! a second chunk of keys (a second recording), gives the tokens and every cached key and value
//! of the plain forward bit for bit; replays whose inputs are not rewritten are caught.

use super::Check;
use super::tiny::{tokens, write_tiny_gguf};
use crate::cache::KvCache;
use crate::generate::greedy_token;
use crate::gguf::GgmlType;
use crate::model::{CapturedDecode, Transformer};
use crate::synthetic::{TINY_VOCAB, tiny_qwen2};
use crate::{Device, load_model};
use anyhow::{Result, ensure};
use std::path::Path;

/// Prompt tokens, then decode steps: the last steps run past 256 cached positions.
const PROMPT: usize = 8;
const STEPS: usize = 300;

/// The greedy tokens after the prompt and the cache they leave, by the plain forward or by
/// `captured` (`None`: plain).
fn decode(model: &Transformer, captured: Option<&mut CapturedDecode>) -> Result<(Vec<u32>, KvCache)> {
    let mut cache = model.new_cache(1);
    let mut next = greedy_token(model.forward_last(&tokens(PROMPT, 5), &mut cache)?);
    let mut out = vec![next];
    let mut captured = captured;
    for _ in 0..STEPS {
        next = match captured.as_deref_mut() {
            Some(c) => c.next(model, next, &mut cache)?,
            None => greedy_token(model.forward(&[next], &mut cache)?),
        };
        out.push(next);
    }
    Ok((out, cache))
}

/// Whether two caches hold the same keys and values, bit for bit, in every layer.
fn same_cache(a: &KvCache, b: &KvCache, layers: usize) -> bool {
    a.len() == b.len() && (0..layers).all(|l| a.layer_data(l) == b.layer_data(l))
}

pub(super) fn captured_decode(device: &Device, dir: &Path) -> Result<Check> {
    let cfg = tiny_qwen2(TINY_VOCAB);
    let model = load_model(&write_tiny_gguf(dir, &cfg, 41, GgmlType::Q8_0)?, None, device)?.model;
    ensure!(model.can_capture(), "the tiny GGUF model's decode step cannot be recorded on {device:?}");
    let (plain, plain_cache) = decode(&model, None)?;
    let mut captured = CapturedDecode::new();
    let (replayed, replayed_cache) = decode(&model, Some(&mut captured))?;
    let layers = cfg.num_hidden_layers;
    let first_off = plain.iter().zip(&replayed).position(|(a, b)| a != b);
    ensure!(first_off.is_none(), "replayed steps depart from the plain forward's tokens at step {first_off:?}");
    ensure!(same_cache(&plain_cache, &replayed_cache, layers), "replayed steps cached other keys or values");
    let recordings = captured.recordings;
    ensure!(recordings == 2, "{recordings} recordings for {STEPS} steps across a cache growth (2 expected)");
    // The same recorder on a new cache records for it (the old recording writes the old cache).
    let (again, _) = decode(&model, Some(&mut captured))?;
    ensure!(again == plain, "replayed steps on a second cache depart from the plain forward's tokens");
    ensure!(captured.recordings == 4, "a second cache did not start its own recordings");
    let mut stale = CapturedDecode::new();
    stale.stale_inputs = true;
    let (broken, broken_cache) = decode(&model, Some(&mut stale))?;
    let caught = broken != plain || !same_cache(&plain_cache, &broken_cache, layers);
    ensure!(caught, "replays without their inputs rewritten gave the plain forward's results: the check cannot fail");
    Ok(Check {
        name: "captured_decode".into(),
        passed: true,
        worst_abs_diff: None,
        tolerance: None,
        detail: format!(
            "tiny qwen2 in Q8_0 blocks, greedy, {PROMPT} prompt tokens then {STEPS} steps: the replayed steps' \
             tokens and every layer's cached keys and values equal the plain forward's bit for bit, with \
             {recordings} recordings (the cache growing past 256 positions and attention taking a second chunk \
             at the same step), and the same on a second cache; replays without their token, position and \
             length rewritten caught"
        ),
    })
}
