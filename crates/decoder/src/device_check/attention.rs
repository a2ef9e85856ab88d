//! The attention kernel (`crate::cube::attention`) on the device against a host reference in
//! f64: 1, 5 and 16 rows after a short context, at the split into chunks of keys and over three
//! chunks, masked by the kernel and by an additive mask, every row bitwise equal across call
//! sizes, and a call whose mask hides nothing caught; then a prefill long enough to run its
//! rows in several launches, whose last rows equal a short call's bit for bit.

use super::kernels::{ROPE_HEADS, ROWS, over_row_counts, uniform};
use crate::Device;
use crate::compare::{max_abs_diff, nan_max};
use anyhow::{Result, ensure};
use burn::tensor::{Tensor, TensorData};
use std::ops::Range;

/// Query heads, kv heads and head size of a check.
type Heads = [usize; 3];

/// Cached positions before the rows of the short checks: a short context (one chunk of keys),
/// one where a single row's keys fill the first chunk and wider calls reach the second (a
/// one-chunk launch against a split one, bit for bit), and one over three chunks.
const ATTENTION_PASTS: [usize; 3] = [8, 255, 600];

/// The long prefill: 64 query heads over 8 kv heads of 8 values, 1,100 rows from an empty
/// cache. Its 70,400 (head, row) cubes are more than a Vulkan launch takes along one axis
/// (65,535), and its 5 chunks of keys would have every row's scores in one buffer of 360 MB
/// (lavapipe's buffers stop at 128 MiB); the kernel runs its rows in groups instead.
const LONG_HEADS: Heads = [64, 8, 8];
const LONG_ROWS: usize = 1100;

/// The short checks' cache capacity after `past` positions: room for the widest call, and
/// storage past the view that the kernel must not read.
fn capacity_after(past: usize) -> usize {
    past + ROWS[2] + 7
}

/// Causal attention of `rows` query rows (`[heads, rows, d]`, row i at position `past + i`)
/// over `[kv_heads, past + rows, d]` keys and values (stored `capacity` positions apart), in
/// f64: `[rows, heads d]`.
fn reference(
    q: &[f32],
    (keys, values): (&[f32], &[f32]),
    [h, kvh, d]: Heads,
    capacity: usize,
    past: usize,
    rows: usize,
) -> Vec<f32> {
    let mut out = vec![0f32; rows * h * d];
    for head in 0..h {
        let kv = head / (h / kvh);
        let at = |p: usize| (kv * capacity + p) * d;
        for i in 0..rows {
            let qi = &q[(head * rows + i) * d..][..d];
            let seen = past + i + 1;
            let scores: Vec<f64> = (0..seen)
                .map(|p| qi.iter().zip(&keys[at(p)..at(p) + d]).map(|(a, b)| *a as f64 * *b as f64).sum::<f64>())
                .map(|s| s / (d as f64).sqrt())
                .collect();
            let top = scores.iter().copied().fold(f64::NEG_INFINITY, f64::max);
            let weights: Vec<f64> = scores.iter().map(|s| (s - top).exp()).collect();
            let norm: f64 = weights.iter().sum();
            for j in 0..d {
                let v: f64 = (0..seen).map(|p| weights[p] * values[at(p) + j] as f64).sum();
                out[(i * h + head) * d + j] = (v / norm) as f32;
            }
        }
    }
    out
}

/// Rows `range` of each head of `q` (`[heads, rows, d]`): `[heads, range, d]`.
fn head_rows(q: &[f32], [h, _, d]: Heads, rows: usize, range: Range<usize>) -> Vec<f32> {
    (0..h).flat_map(|head| q[(head * rows + range.start) * d..(head * rows + range.end) * d].to_vec()).collect()
}

/// How an attention call is masked.
#[derive(Clone, Copy, PartialEq)]
enum Masking {
    /// The kernel's own causal mask (no mask passed): what a chain call gets.
    Causal,
    /// The causal mask passed as an additive mask: the path of a tree call's mask.
    Additive,
    /// An additive mask that hides nothing: the broken call.
    Nothing,
}

/// `crate::cube::attention` of query rows `q` (`[heads, rows, d]`) on `device`, over the
/// cache's storage (`capacity` positions a kv head) viewed up to `past + rows`, masked as
/// `masking` says: `[rows, heads d]`.
fn on_device(
    device: &Device,
    (q, keys, values): (&[f32], &[f32], &[f32]),
    [h, kvh, d]: Heads,
    (capacity, past): (usize, usize),
    masking: Masking,
) -> Vec<f32> {
    let rows = q.len() / (h * d);
    let total = past + rows;
    let q = Tensor::<4>::from_data(TensorData::new(q.to_vec(), [1, h, rows, d]), device);
    let view = |t: &[f32]| {
        let storage = Tensor::<4>::from_data(TensorData::new(t.to_vec(), [1, kvh, capacity, d]), device);
        storage.slice([0..1, 0..kvh, 0..total, 0..d])
    };
    let groups = h / kvh;
    let mask = (masking != Masking::Causal).then(|| {
        let hide = if masking == Masking::Nothing { 0.0 } else { f32::NEG_INFINITY };
        let m: Vec<f32> = (0..groups * rows)
            .flat_map(|r| (0..total).map(move |p| if p <= past + r % rows { 0.0 } else { hide }))
            .collect();
        Tensor::<2>::from_data(TensorData::new(m, [groups * rows, total]), device)
    });
    let step = crate::cube::step_buffer(past, device);
    crate::cube::attention(q, view(keys), view(values), mask.as_ref(), &step)
        .into_data()
        .try_to_vec::<f32>()
        .expect("f32")
}

/// Attention at 1, 5 and 16 rows after each of [`ATTENTION_PASTS`], masked by the kernel and by
/// an additive mask, then the long prefill: the worst difference, and the least that of a
/// broken call moved (a 5-row call whose mask hides nothing).
pub(super) fn attention_check(device: &Device) -> Result<(f32, f32)> {
    let [h, kvh, d] = ROPE_HEADS;
    let (mut worst, mut caught) = (0f32, f32::INFINITY);
    for (i, past) in ATTENTION_PASTS.into_iter().enumerate() {
        let (seed, capacity) = (6 + 3 * i as u64, capacity_after(past));
        let cached = kvh * capacity * d;
        let q = uniform(h * ROWS[2] * d, 1.0, seed);
        let (keys, values) = (uniform(cached, 1.0, seed + 1), uniform(cached, 1.0, seed + 2));
        let first = |n: usize| head_rows(&q, ROPE_HEADS, ROWS[2], 0..n);
        let expected = |n: usize| reference(&first(n), (&keys, &values), ROPE_HEADS, capacity, past, n);
        let what = format!("attention after {past} positions");
        for masking in [Masking::Causal, Masking::Additive] {
            let call = |n: usize| on_device(device, (&first(n), &keys, &values), ROPE_HEADS, (capacity, past), masking);
            worst = nan_max(worst, over_row_counts(&what, call, expected)?);
        }
        let inputs = (&first(ROWS[1])[..], &keys[..], &values[..]);
        let broken = on_device(device, inputs, ROPE_HEADS, (capacity, past), Masking::Nothing);
        caught = caught.min(max_abs_diff(&broken, &expected(ROWS[1])));
    }
    Ok((nan_max(worst, long_prefill(device)?), caught))
}

/// The long prefill ([`LONG_HEADS`], [`LONG_ROWS`]) against f64, its last 5 rows bit for bit a
/// 5-row call's over the same keys: the worst difference.
fn long_prefill(device: &Device) -> Result<f32> {
    let [h, kvh, d] = LONG_HEADS;
    let n = LONG_ROWS;
    let q = uniform(h * n * d, 1.0, 30);
    let (keys, values) = (uniform(kvh * n * d, 1.0, 31), uniform(kvh * n * d, 1.0, 32));
    let prefill = on_device(device, (&q, &keys, &values), LONG_HEADS, (n, 0), Masking::Causal);
    let worst = max_abs_diff(&prefill, &reference(&q, (&keys, &values), LONG_HEADS, n, 0, n));
    let tail = head_rows(&q, LONG_HEADS, n, n - ROWS[1]..n);
    let short = on_device(device, (&tail, &keys, &values), LONG_HEADS, (n, n - ROWS[1]), Masking::Causal);
    ensure!(
        short[..] == prefill[(n - ROWS[1]) * h * d..],
        "attention: the last rows of a {n}-row prefill differ from the same rows in a {}-row call",
        ROWS[1]
    );
    Ok(worst)
}
