//! Scaled dot-product attention over the cache as one kernel: scores, scaling, the mask, the
//! softmax and the weighted sum of values; past [`CHUNK`] keys, split over the context and
//! merged by a second kernel (flash-decoding). burn's tensor form is about ten launches (the
//! cache's views made contiguous, two matmuls, the scaling, the mask, a softmax in five).

use super::{contiguous, whole_buffer};
use burn::tensor::{Int, Tensor};
use burn_cubecl::Cube;
use burn_cubecl::cubecl;
use burn_cubecl::ops::numeric::empty_device_dtype;
use cubecl::prelude::*;

/// Units of an attention cube: fixed, so that a row's reductions run in the same order however
/// many keys the call has (keys a row may not see add exact zeros).
const UNITS: u32 = 64;

/// Keys one cube takes (flash-decoding's split of the context, at the 256 keys of llama.cpp's
/// CUDA flash attention): a context up to this long is one launch; a longer one is split into
/// chunks of this many keys, one cube each, and a second launch merges their partial softmaxes
/// in chunk order. A one-row decode step then spreads over `heads x chunks` cubes instead of
/// `heads`. Chunks start at fixed positions, so a key's chunk never depends on the call.
pub(crate) const CHUNK: u32 = 256;

/// One cube per (sequence, head, row) of `q` (`[batch, heads, rows, head_dim]`) along x, for
/// the `group` rows from `row0` ([`row_group`]), and per chunk of keys along y. Units stride
/// over the chunk's keys: each score is a dot product in order of the head's dimensions,
/// scaled and masked, kept in shared memory (the chunk's [`CHUNK`] scores, however long the
/// call): with `masked` 1 by `mask` (`[groups rows, mask_width]` additive over the last
/// `mask_width` keys, the tree's own; the keys before them are the prefix every row sees: a
/// tree call's), otherwise
/// causally (row `r` sees the keys up to `step[0] + r`; a hidden key weighs exactly 0, as an
/// additive minus infinity would); the max and the sum of the exponentials fold in a fixed
/// tree; then each unit sums its dimensions of the weighted values over the chunk's keys in
/// order. With one chunk, the normalised result goes to `out` (`[batch, rows, heads
/// head_dim]`); with several, the chunk's max and sum go to `stats` and its unnormalised sums
/// to `partial` (slots of the group's cubes), for [`attention_merge`]. Keys and values are
/// read at `seq_stride`, `kv_stride` and `pos_stride` (the cache's storage, whatever its
/// capacity). The keys are the cache's first `step[0] + rows` (`step` a device buffer, not a
/// launch argument, so that a recorded launch serves every length its `chunks` cover).
#[cube(launch)]
#[allow(clippy::too_many_arguments)]
fn attention_chunk(
    q: &[f32],
    keys: &[f32],
    values: &[f32],
    mask: &[f32],
    out: &mut [f32],
    stats: &mut [f32],
    partial: &mut [f32],
    rows: u32,
    row0: u32,
    group: u32,
    heads: u32,
    kv_heads: u32,
    head_dim: u32,
    step: &[u32],
    seq_stride: u32,
    kv_stride: u32,
    pos_stride: u32,
    scale: f32,
    masked: u32,
    mask_width: u32,
    chunks: u32,
    #[comptime] units: usize,
) {
    let total = step[0] + rows;
    let cube = CUBE_POS_X;
    let chunk = CUBE_POS_Y;
    let row = row0 + cube % group;
    let head = (cube / group) % heads;
    let seq = cube / (group * heads);
    let groups = heads / kv_heads;
    let base = seq * seq_stride + (head / groups) * kv_stride;
    let qbase = ((seq * heads + head) * rows + row) * head_dim;
    let mbase = ((head % groups) * rows + row) * mask_width;
    let lead = total - mask_width;
    let first = chunk * CHUNK;
    let end = min(total, first + CHUNK);
    // The last key the row sees causally (every key under an additive mask).
    let causal_end = select(masked == 1, total, step[0] + row);
    let unit = UNIT_POS as usize;
    let mut part = Shared::<[f32]>::new_slice(units);
    let mut scores = Shared::<[f32]>::new_slice(CHUNK as usize);

    let mut local = f32::new(-3.0e38);
    let mut j = first + UNIT_POS;
    while j < end {
        let at = base + j * pos_stride;
        let mut dot = 0.0f32;
        let mut t = 0u32;
        while t < head_dim {
            dot += q[(qbase + t) as usize] * keys[(at + t) as usize];
            t += 1;
        }
        let mut s = dot * scale;
        if masked == 1 && j >= lead {
            s += mask[(mbase + j - lead) as usize];
        }
        scores[(j - first) as usize] = s;
        local = select(j > causal_end, local, max(local, s));
        j += CUBE_DIM;
    }
    part[unit] = local;
    sync_cube();
    let mut active = CUBE_DIM / 2;
    while active > 0 {
        if UNIT_POS < active {
            let other = part[unit + active as usize];
            part[unit] = max(part[unit], other);
        }
        sync_cube();
        active /= 2;
    }
    let top = part[0];
    sync_cube();

    let mut sum = 0.0f32;
    let mut k = first + UNIT_POS;
    while k < end {
        let e = select(k > causal_end, 0.0f32, f32::exp(scores[(k - first) as usize] - top));
        scores[(k - first) as usize] = e;
        sum += e;
        k += CUBE_DIM;
    }
    part[unit] = sum;
    sync_cube();
    let mut active = CUBE_DIM / 2;
    while active > 0 {
        if UNIT_POS < active {
            let other = part[unit + active as usize];
            part[unit] += other;
        }
        sync_cube();
        active /= 2;
    }
    let norm = part[0];

    let slot = cube * chunks + chunk;
    if chunks > 1 && UNIT_POS == 0 {
        stats[(slot * 2) as usize] = top;
        stats[(slot * 2 + 1) as usize] = norm;
    }
    let mut dim = UNIT_POS;
    while dim < head_dim {
        let mut acc = 0.0f32;
        let mut p = first;
        while p < end {
            acc += scores[(p - first) as usize] * values[(base + p * pos_stride + dim) as usize];
            p += 1;
        }
        if chunks == 1 {
            out[(((seq * rows + row) * heads + head) * head_dim + dim) as usize] = acc / norm;
        } else {
            partial[(slot * head_dim + dim) as usize] = acc;
        }
        dim += CUBE_DIM;
    }
}

/// How much chunk `c`'s sums count against the row's max `top`: exactly 1 for the chunk that
/// holds the max, so that a row whose keys all sit in one chunk gets bit for bit what a
/// one-chunk launch gives it (the other chunks' keys are masked for it and weigh exactly 0).
#[cube]
fn chunk_weight(stats: &[f32], slot: u32, top: f32) -> f32 {
    let m = stats[(slot * 2) as usize];
    select(m == top, 1.0f32, f32::exp(m - top))
}

/// Merges the chunks of [`attention_chunk`]: one cube per (sequence, head, row) of the `group`
/// rows from `row0`, its units over the head's dimensions. Every unit folds the chunks' maxima
/// and sums in chunk order.
#[cube(launch)]
#[allow(clippy::too_many_arguments)]
fn attention_merge(
    stats: &[f32],
    partial: &[f32],
    out: &mut [f32],
    rows: u32,
    row0: u32,
    group: u32,
    heads: u32,
    head_dim: u32,
    chunks: u32,
) {
    let cube = CUBE_POS_X;
    let row = row0 + cube % group;
    let head = (cube / group) % heads;
    let seq = cube / (group * heads);
    let slots = cube * chunks;
    let mut top = f32::new(-3.0e38);
    for c in 0..chunks {
        top = max(top, stats[((slots + c) * 2) as usize]);
    }
    let mut norm = 0.0f32;
    for c in 0..chunks {
        norm += stats[((slots + c) * 2 + 1) as usize] * chunk_weight(stats, slots + c, top);
    }
    let mut dim = UNIT_POS;
    while dim < head_dim {
        let mut acc = 0.0f32;
        for c in 0..chunks {
            acc += partial[((slots + c) * head_dim + dim) as usize] * chunk_weight(stats, slots + c, top);
        }
        out[(((seq * rows + row) * heads + head) * head_dim + dim) as usize] = acc / norm;
        dim += CUBE_DIM;
    }
}

/// The most (sequence, head) cubes of one launch along x: under every backend's least limit
/// (Vulkan guarantees 65,535 workgroups along a dimension).
const MAX_CUBES: usize = 32768;

/// Bytes a launch's partial softmaxes may take: a long prefill then runs its rows in groups
/// whose scratch stays small whatever its length.
const SPLIT_SCRATCH: usize = 32 << 20;

/// Rows of `n` one launch takes, with `heads` (sequence, head) cubes a row and `per_cube`
/// scratch values a cube: all of a decode call's, a long prefill's in groups. A row's
/// result does not depend on its group.
fn row_group(n: usize, heads: usize, per_cube: usize) -> usize {
    let by_cubes = MAX_CUBES / heads.max(1);
    let by_scratch = SPLIT_SCRATCH / (4 * heads * per_cube).max(1);
    n.min(by_cubes).min(by_scratch).max(1)
}

/// Attention of `q: [b, heads, n, head_dim]` over the cache's `keys` and `values` (`[b,
/// kv_heads, total, head_dim]` views of its storage; query heads share kv heads in groups),
/// with `mask` (`[groups n, width]`, additive over the last `width` keys, the tree's: a tree
/// call's) when given, else causal: `[b, n,
/// heads head_dim]`. `step` holds `total - n` on the device ([`super::step_buffer`]).
pub(crate) fn attention(
    q: Tensor<4>,
    keys: Tensor<4>,
    values: Tensor<4>,
    mask: Option<&Tensor<2>>,
    step: &Tensor<1, Int>,
) -> Tensor<3> {
    let [b, heads, n, head_dim] = q.dims();
    let [_, kv_heads, total, _] = keys.dims();
    let q = contiguous(q);
    let storage = |t: Tensor<4>| t.try_into_primitive::<Cube>().expect("a tensor on a CubeCL device");
    let (keys, values) = (storage(keys), storage(values));
    let strides = keys.meta.strides().to_vec();
    assert!(
        strides[3] == 1 && values.meta.strides().to_vec() == strides,
        "keys and values laid out alike, each position's values together: strides {strides:?}"
    );
    let client = q.client.clone();
    let scratch = |shape: Vec<usize>| empty_device_dtype(client.clone(), q.device.clone(), shape.into(), q.dtype);
    let chunks = total.div_ceil(CHUNK as usize).max(1);
    let out = scratch(vec![b, n, heads * head_dim]);
    let (mask, masked, mask_width) = match mask {
        Some(m) => (contiguous(m.clone()), 1u32, m.dims()[1] as u32),
        None => (scratch(vec![1]), 0u32, 0),
    };
    let cap = client.properties().hardware.max_units_per_cube.clamp(1, UNITS);
    let units = if cap.is_power_of_two() { cap } else { cap.next_power_of_two() / 2 };
    let split = chunks > 1;
    let group = row_group(n, b * heads, if split { chunks * (2 + head_dim) } else { 0 });
    // A group's chunk maxima and sums, and its unnormalised outputs (placeholders for one chunk).
    let slots = b * heads * group * chunks;
    let stats = scratch(vec![if split { slots * 2 } else { 1 }]);
    let partial = scratch(vec![if split { slots * head_dim } else { 1 }]);
    let step = super::words(step);
    for row0 in (0..n).step_by(group) {
        let rows = group.min(n - row0);
        let cubes = (b * heads * rows) as u32;
        attention_chunk::launch(
            &client,
            CubeCount::Static(cubes, chunks as u32, 1),
            CubeDim::new_1d(units),
            q.clone().into_buffer_arg(),
            whole_buffer(keys.clone()),
            whole_buffer(values.clone()),
            mask.clone().into_buffer_arg(),
            out.clone().into_buffer_arg(),
            stats.clone().into_buffer_arg(),
            partial.clone().into_buffer_arg(),
            n as u32,
            row0 as u32,
            rows as u32,
            heads as u32,
            kv_heads as u32,
            head_dim as u32,
            step.clone().into_buffer_arg(),
            strides[0] as u32,
            strides[1] as u32,
            strides[2] as u32,
            1.0 / (head_dim as f32).sqrt(),
            masked,
            mask_width,
            chunks as u32,
            units as usize,
        );
        if split {
            attention_merge::launch(
                &client,
                CubeCount::Static(cubes, 1, 1),
                CubeDim::new_1d(units),
                stats.clone().into_buffer_arg(),
                partial.clone().into_buffer_arg(),
                out.clone().into_buffer_arg(),
                n as u32,
                row0 as u32,
                rows as u32,
                heads as u32,
                head_dim as u32,
                chunks as u32,
            );
        }
    }
    Tensor::from_primitive::<Cube>(out)
}
