//! The LM head's greedy choice on the device: the index of each row's largest logit, so that a
//! greedy step reads one number back instead of a vocabulary row (151,936 floats, 0.6 MB, for
//! the Qwen2.5 pair).

use super::{contiguous, units_for};
use burn::tensor::Tensor;
use burn_cubecl::Cube;
use burn_cubecl::cubecl;
use burn_cubecl::ops::numeric::empty_device_dtype;
use cubecl::prelude::*;

/// A unit that has seen no column yet (the literal a runtime variable starts from, as i64).
const NONE: u32 = u32::MAX;
const NONE_LITERAL: i64 = NONE as i64;

/// Whether `(v, i)` beats `(best_v, best_i)`: a larger value, or the same value at a smaller
/// index (the first maximum wins, as in `sampling::argmax`).
#[cube]
fn beats(v: f32, i: u32, best_v: f32, best_i: u32) -> bool {
    i != NONE && (best_i == NONE || v > best_v || (v == best_v && i < best_i))
}

/// One cube per row from `first` of `logits` (`cols` values a row). Each unit keeps the best
/// of the columns it strides over; the units' bests fold in a tree. The winner is the largest
/// value at its smallest index whatever the fold's order, so the result is exact. The index
/// goes to `out` as an f32 (exact below 2^24 columns).
#[cube(launch)]
fn argmax_rows(logits: &[f32], out: &mut [f32], cols: u32, first: u32, #[comptime] units: usize) {
    let row = first + CUBE_POS_X;
    let unit = UNIT_POS as usize;
    let mut values = Shared::<[f32]>::new_slice(units);
    let mut indices = Shared::<[u32]>::new_slice(units);
    let mut best_v = 0.0f32;
    let mut best_i = u32::new(NONE_LITERAL);
    let mut j = UNIT_POS;
    while j < cols {
        let v = logits[(row * cols + j) as usize];
        if beats(v, j, best_v, best_i) {
            best_v = v;
            best_i = j;
        }
        j += CUBE_DIM;
    }
    values[unit] = best_v;
    indices[unit] = best_i;
    sync_cube();
    let mut active = CUBE_DIM / 2;
    while active > 0 {
        if UNIT_POS < active {
            let other = unit + active as usize;
            if beats(values[other], indices[other], values[unit], indices[unit]) {
                values[unit] = values[other];
                indices[unit] = indices[other];
            }
        }
        sync_cube();
        active /= 2;
    }
    if UNIT_POS == 0 {
        out[CUBE_POS_X as usize] = f32::cast_from(indices[0]);
    }
}

/// The index of the largest logit in each of the last `k` rows of `logits` (`[1, n, vocab]`,
/// on a CubeCL device), the first on ties: what `sampling::argmax` gives for rows without NaN.
pub(crate) fn argmax_tail(logits: &Tensor<3>, k: usize) -> Vec<u32> {
    let [b, n, cols] = logits.dims();
    assert!(b == 1 && (1..=n).contains(&k), "argmax of {k} rows of a [{b}, {n}, {cols}] tensor");
    assert!(cols < 1 << 24, "{cols} columns: indices past 2^24 are not exact in f32");
    let logits = contiguous(logits.clone());
    let units = units_for(&logits, cols);
    let client = logits.client.clone();
    let out = empty_device_dtype(client.clone(), logits.device.clone(), [k].into(), logits.dtype);
    argmax_rows::launch(
        &client,
        CubeCount::Static(k as u32, 1, 1),
        CubeDim::new_1d(units),
        logits.into_buffer_arg(),
        out.clone().into_buffer_arg(),
        cols as u32,
        (n - k) as u32,
        units as usize,
    );
    let out = Tensor::<1>::from_primitive::<Cube>(out);
    out.into_data().try_to_vec::<f32>().expect("f32 indices").into_iter().map(|i| i as u32).collect()
}
