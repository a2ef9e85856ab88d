//! Recorded decode calls against the forwards they record (`model::CapturedDecode`): greedy
//! decoding of a tiny GGUF model past 256 positions, where the cache grows and attention takes
//! a second chunk of keys (a second recording), gives the tokens and every cached key and value
//! of the plain forward bit for bit; so do verification calls of 1 to 16 rows and draft steps
//! (the last row's logits and hidden state) and tree calls (a new tree each call, its mask
//! rewritten) with rejected rows cut off between them, and greedy
//! speculative decoding, whose draft steps and verifications replay recordings, gives the
//! target's own greedy tokens. A clone of a cache keeps its keys while the cache replays over
//! them. Where recording is refused, calls forward plainly to the same results. Replays whose
//! inputs are not rewritten, or that write storage a clone shares, are caught.

use super::Check;
use super::tiny::{noisy_weights, tokens, write_gguf_weights, write_tiny_gguf};
use crate::cache::KvCache;
use crate::generate::greedy_token;
use crate::gguf::GgmlType;
use crate::model::TreeRows;
use crate::model::{CapturedDecode, Transformer, replays};
use crate::speculative::{
    ConfidenceProductPolicy, DynamicTreeDrafter, DynamicTreeParams, FixedK, PlainDrafter, RejectionSampler, SpecConfig,
    draft_rows_read, generate_speculative,
};
use crate::synthetic::{TINY_VOCAB, tiny_qwen2};
use crate::tree_mask::TreeMask;
use crate::{Device, SamplingConfig, load_model};
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

/// A kind of call and the rows of its successive calls (each after cutting the previous
/// call's last `call % 3` rows, as a rejection does), cycled until the cache passes [`PROMPT`]
/// + [`STEPS`].
#[derive(Clone, Copy)]
enum Calls {
    /// Verifications: every row's logits.
    Verify,
    /// Greedy verifications: every row's argmax, computed on the device.
    Best,
    /// Draft steps (a round's first takes what the draft's cache lacks): the last row's
    /// logits and hidden state.
    Draft,
    /// Tree calls, every row's logits: a new tree each call ([`tree_for`]), every other one
    /// continuing two tree rows the cache holds.
    Tree,
    /// The same tree calls' argmaxes, computed on the device.
    TreeBest,
}

/// Call `i`'s tree of `rows` rows: each row's parent an earlier row or none (a root), drawn
/// from `i`; from the second call on, every other tree continues two rows the cache holds.
fn tree_for(rows: usize, i: usize) -> Result<TreeMask> {
    let cached = if i % 2 == 1 { 2 } else { 0 };
    let parents: Vec<Option<usize>> = (0..rows + cached)
        .map(|r| (r > 0 && !(r * 7 + i * 13).is_multiple_of(5)).then(|| (r * 31 + i * 17) % r))
        .collect();
    TreeMask::continuing(&parents, cached)
}

impl Calls {
    fn rows(self) -> &'static [usize] {
        match self {
            Calls::Verify | Calls::Best | Calls::Tree | Calls::TreeBest => &[5, 3, 1, 6, 16, 2, 4],
            Calls::Draft => &[2, 1, 1, 1, 3, 1],
        }
    }
}

/// What each call of `kind` returns and the cache they leave, by the plain forward or by
/// `captured` (`None`: plain).
fn calls(
    model: &Transformer,
    kind: Calls,
    mut captured: Option<&mut CapturedDecode>,
) -> Result<(Vec<Vec<f32>>, KvCache)> {
    let mut cache = model.new_cache(1);
    model.forward_last(&tokens(PROMPT, 5), &mut cache)?;
    let mut values = Vec::new();
    for (i, &rows) in kind.rows().iter().cycle().enumerate() {
        if cache.len() > PROMPT + STEPS {
            break;
        }
        let input = tokens(rows, 100 + i as u32);
        values.extend(match (kind, captured.as_deref_mut()) {
            (Calls::Verify, Some(c)) => c.scores(model, &input, &mut cache)?,
            (Calls::Verify, None) => model.forward_scores(&input, &mut cache, rows, None)?.expect("no cancel flag"),
            (Calls::Best, Some(c)) => vec![c.best(model, &input, &mut cache)?.into_iter().map(|t| t as f32).collect()],
            (Calls::Best, None) => {
                vec![
                    model
                        .forward_best(&input, &mut cache, rows, None)?
                        .expect("no cancel flag")
                        .into_iter()
                        .map(|t| t as f32)
                        .collect(),
                ]
            }
            (Calls::Draft, Some(c)) => {
                let (logits, hidden) = c.last(model, &input, &mut cache)?;
                vec![logits, hidden]
            }
            (Calls::Draft, None) => {
                let (logits, hidden) = model.forward(&input, &mut cache)?.last_position();
                vec![logits, hidden]
            }
            (Calls::Tree | Calls::TreeBest, Some(c)) => {
                match c.tree(model, &input, &tree_for(rows, i)?, &mut cache, matches!(kind, Calls::TreeBest))? {
                    TreeRows::Scores(scores) => scores,
                    TreeRows::Best(best) => vec![best.into_iter().map(|t| t as f32).collect()],
                }
            }
            (Calls::Tree | Calls::TreeBest, None) => {
                let out = model.forward_tree(&input, &tree_for(rows, i)?, &mut cache)?;
                match kind {
                    Calls::Tree => out.logits_tail(rows),
                    _ => vec![out.best_tokens(rows).into_iter().map(|t| t as f32).collect()],
                }
            }
        });
        cache.truncate(cache.len() - (rows - 1).min(i % 3));
    }
    Ok((values, cache))
}

/// Greedy speculative decoding on `model` as the target with a draft close to it in GGUF
/// blocks on the same device (three candidates a round, drafted from argmaxes and from rows;
/// then EAGLE-2 draft trees of 6 nodes) against the target's own greedy tokens: mismatching
/// prompts, and the replays the draft steps and verifications made.
fn speculative(model: &Transformer, dir: &Path, device: &Device) -> Result<(Vec<String>, u64)> {
    let cfg = tiny_qwen2(TINY_VOCAB);
    let close = write_gguf_weights(&dir.join("close-q8_0"), &cfg, &noisy_weights(&cfg, 41, 0.1), GgmlType::Q8_0)?;
    let draft = load_model(&close, None, device)?;
    ensure!(draft.model.can_capture(), "the tiny GGUF draft's steps cannot be recorded on {device:?}");
    let eos = [TINY_VOCAB as u32 - 1];
    let cfg = SpecConfig { max_new_tokens: 40, sampling: SamplingConfig::greedy(), seed: 0 };
    let (mut bad, before) = (Vec::new(), replays());
    for p in 0..3u32 {
        let prompt = tokens(6 + p as usize, 30 + p);
        // The plain forward's greedy tokens (the autoregressive baseline would replay, too).
        let mut greedy = crate::Sampler::new(SamplingConfig::greedy(), 0);
        let (ar, _) = crate::generate::generate(model, &prompt, cfg.max_new_tokens, &mut greedy, &eos, |_| Ok(()))?;
        let mut drafter = PlainDrafter::new(&draft.model);
        let draft_rows = draft_rows_read();
        let spec =
            generate_speculative(model, &mut drafter, &mut FixedK(3), &mut RejectionSampler, &prompt, &cfg, &eos)?;
        if spec.tokens != ar {
            bad.push(format!("prompt {p}: speculative {:?} vs greedy {:?}", spec.tokens, ar));
        }
        // FixedK reads nothing of the draft: its steps replay argmax calls, no row comes back.
        // A rule that reads the rows (a confidence product that never stops early) must draft
        // and accept the same.
        if draft_rows_read() != draft_rows {
            bad.push(format!("prompt {p}: greedy FixedK read {} draft rows", draft_rows_read() - draft_rows));
        }
        let mut reading = ConfidenceProductPolicy::new(1.0, 1, 3);
        let mut drafter = PlainDrafter::new(&draft.model);
        let from_rows =
            generate_speculative(model, &mut drafter, &mut reading, &mut RejectionSampler, &prompt, &cfg, &eos)?;
        let rounds = |g: &crate::speculative::Generation| (g.tokens.clone(), g.metrics.accepted_per_round.clone());
        if rounds(&from_rows) != rounds(&spec) {
            bad.push(format!(
                "prompt {p}: drafted from argmaxes {:?} vs from rows {:?} (tokens, accepted per round)",
                rounds(&spec),
                rounds(&from_rows)
            ));
        }
        // EAGLE-2 draft trees: the target verifies each tree in a recorded tree call.
        let trees_before = replays();
        let mut drafter = DynamicTreeDrafter::new(&draft.model, DynamicTreeParams { top_k: 2, max_nodes: 6 })?;
        let spec =
            generate_speculative(model, &mut drafter, &mut FixedK(3), &mut RejectionSampler, &prompt, &cfg, &eos)?;
        if spec.tokens != ar {
            bad.push(format!("prompt {p}: draft trees {:?} vs greedy {:?}", spec.tokens, ar));
        }
        if replays() == trees_before {
            bad.push(format!("prompt {p}: no tree verification replayed a recorded call"));
        }
    }
    Ok((bad, replays() - before))
}

/// Whether a clone of a cache keeps its keys and values while `captured` replays steps of other
/// tokens on the cache it was cloned from, rolled back below the clone's length, over the
/// positions the clone holds (a rejection after a snapshot, as a scheduler may take).
fn clone_kept(model: &Transformer, captured: &mut CapturedDecode, layers: usize) -> Result<bool> {
    let mut cache = model.new_cache(1);
    let mut next = greedy_token(model.forward_last(&tokens(PROMPT, 5), &mut cache)?);
    for _ in 0..4 {
        next = captured.next(model, next, &mut cache)?;
    }
    let clone = cache.clone();
    let before: Vec<_> = (0..layers).map(|l| clone.layer_data(l)).collect();
    cache.truncate(cache.len() - 3);
    for t in tokens(3, 200) {
        captured.next(model, t, &mut cache)?;
    }
    Ok((0..layers).all(|l| clone.layer_data(l) == before[l]))
}

/// A new recorder with `set` applied: one of its broken calls for the check to catch, or every
/// recording refused, as on a runtime without graph capture.
fn recorder(set: fn(&mut CapturedDecode)) -> CapturedDecode {
    let mut captured = CapturedDecode::new();
    set(&mut captured);
    captured
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
    ensure!(clone_kept(&model, &mut CapturedDecode::new(), layers)?, "replays rewrote a clone's cached keys");
    let mut shared = recorder(|c| c.shared_storage = true);
    ensure!(!clone_kept(&model, &mut shared, layers)?, "replays into storage a clone shares were not caught");
    // A runtime that refuses to record: every call forwards plainly, to the same results.
    let (mut refused, before) = (recorder(|c| c.refuse = true), replays());
    let (fallback, fallback_cache) = decode(&model, Some(&mut refused))?;
    ensure!(fallback == plain, "steps after a refused recording depart from the plain forward's tokens");
    ensure!(same_cache(&plain_cache, &fallback_cache, layers), "steps after a refused recording cached other values");
    let kept = (refused.recordings, replays() - before);
    ensure!(refused.refused().is_some() && kept == (0, 0), "a refused recording was kept or replayed: {kept:?}");
    let mut recorded_calls = Vec::new();
    for (kind, what) in [
        (Calls::Verify, "verification calls"),
        (Calls::Best, "greedy verification calls"),
        (Calls::Draft, "draft steps"),
        (Calls::Tree, "tree calls"),
        (Calls::TreeBest, "greedy tree calls"),
    ] {
        let (plain, plain_cache) = calls(&model, kind, None)?;
        let mut captured = CapturedDecode::new();
        let (replayed, replayed_cache) = calls(&model, kind, Some(&mut captured))?;
        ensure!(replayed == plain, "replayed {what} return other values than the plain forward's");
        ensure!(same_cache(&plain_cache, &replayed_cache, layers), "replayed {what} cached other values");
        let (fallback, _) = calls(&model, kind, Some(&mut recorder(|c| c.refuse = true)))?;
        ensure!(fallback == plain, "{what} after a refused recording return other values than the plain forward's");
        recorded_calls.push((plain.len(), captured.recordings));
        let (broken, _) = calls(&model, kind, Some(&mut recorder(|c| c.stale_inputs = true)))?;
        ensure!(broken != plain, "{what} replayed without their inputs rewritten were not caught");
    }
    let (bad, spec_replays) = speculative(&model, dir, device)?;
    ensure!(bad.is_empty(), "greedy speculative decoding with recorded calls: {}", bad.join("; "));
    ensure!(spec_replays > 0, "greedy speculative decoding replayed no recorded call");
    let (broken, broken_cache) = decode(&model, Some(&mut recorder(|c| c.stale_inputs = true)))?;
    let caught = broken != plain || !same_cache(&plain_cache, &broken_cache, layers);
    ensure!(caught, "replays without their inputs rewritten gave the plain forward's results: the check cannot fail");
    let [
        (verified, verify_recordings),
        (_, best_recordings),
        (drafted, draft_recordings),
        (tree_rows, tree_recordings),
        (_, tree_best_recordings),
    ] = recorded_calls[..]
    else {
        unreachable!("five kinds of call")
    };
    Ok(Check {
        name: "captured_decode".into(),
        passed: true,
        worst_abs_diff: None,
        tolerance: None,
        detail: format!(
            "tiny qwen2 in Q8_0 blocks, greedy, {PROMPT} prompt tokens then {STEPS} steps: the replayed steps' \
             tokens and every layer's cached keys and values equal the plain forward's bit for bit, with \
             {recordings} recordings (the cache growing past 256 positions and attention taking a second chunk \
             at the same step), and the same on a second cache; a clone keeps its keys while the cache it \
             was cloned from, rolled back, replays over them (replays into the shared storage caught); \
             where recording is refused, steps, verifications and draft steps forward plainly to the same \
             values; verification calls of 1 to 16 rows ({verified} rows of logits, {verify_recordings} \
             recordings), the same calls' greedy tokens picked on the device ({best_recordings} recordings) \
             and draft steps of 1 to 3 rows ({} last rows, {draft_recordings} recordings), tree calls of 1 to 16 rows, \
             a new tree each call and every other one continuing two cached tree rows ({tree_rows} rows of logits, \
             {tree_recordings} recordings; their argmaxes {tree_best_recordings}), rejected rows cut between them, give the plain forward's values and \
             cache bit for bit; greedy speculative decoding with a Q8_0 draft on the device (3 candidates a \
             round, drafted from argmaxes with no draft row read and from rows to the same rounds, and EAGLE-2 draft trees of 6 nodes; {spec_replays} replayed draft steps, verifications and \
             tree verifications) gives the target's greedy tokens; \
             replays without their tokens, positions and length rewritten caught, for each kind of call",
            drafted / 2
        ),
    })
}
