//! The LM head's best columns on the device: each row's k largest logits with their columns,
//! best first, ties to the smaller column (`sampling::rank_order`), so that a greedy step reads
//! one number back and a top-k sampled step 2k, instead of a vocabulary row (151,936 floats,
//! 0.6 MB, for the Qwen2.5 pair).

use super::{contiguous, units_for};
use burn::tensor::Tensor;
use burn_cubecl::Cube;
use burn_cubecl::cubecl;
use burn_cubecl::ops::numeric::empty_device_dtype;
use cubecl::prelude::*;

/// A unit that has seen no column yet (the literal a runtime variable starts from, as i64).
const NONE: u32 = u32::MAX;
const NONE_LITERAL: i64 = NONE as i64;

/// Whether `(v, i)` ranks before `(best_v, best_i)`: a larger value, or the same value at a
/// smaller column (the first maximum wins, as in `sampling::argmax`); any column ranks before
/// `NONE` (no column), and `NONE` before none.
#[cube]
fn ranks_before(v: f32, i: u32, best_v: f32, best_i: u32) -> bool {
    i != NONE && (best_i == NONE || v > best_v || (v == best_v && i < best_i))
}

/// One cube per row from `first` of `logits` (`cols` values a row), `k` rounds: round r finds
/// the best column ranked after round r - 1's pick. Each unit keeps the best of the columns it
/// strides over, and the units' bests fold in a tree; the winner is the same whatever the
/// fold's order, so the result is exact. Round r of the cube's row writes its value and its
/// column (as an f32, exact below 2^24 columns) to `out[2 (row k + r)]` and the next.
#[cube(launch)]
fn top_k_rows(logits: &[f32], out: &mut [f32], cols: u32, first: u32, k: u32, #[comptime] units: usize) {
    let row = first + CUBE_POS_X;
    let unit = UNIT_POS as usize;
    let mut values = Shared::<[f32]>::new_slice(units);
    let mut indices = Shared::<[u32]>::new_slice(units);
    let mut picked_v = 0.0f32;
    let mut picked_i = u32::new(NONE_LITERAL);
    let mut round = 0u32;
    while round < k {
        let mut best_v = 0.0f32;
        let mut best_i = u32::new(NONE_LITERAL);
        let mut j = UNIT_POS;
        while j < cols {
            let v = logits[(row * cols + j) as usize];
            let untaken = picked_i == NONE || ranks_before(picked_v, picked_i, v, j);
            if untaken && ranks_before(v, j, best_v, best_i) {
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
                if ranks_before(values[other], indices[other], values[unit], indices[unit]) {
                    values[unit] = values[other];
                    indices[unit] = indices[other];
                }
            }
            sync_cube();
            active /= 2;
        }
        picked_v = values[0];
        picked_i = indices[0];
        if UNIT_POS == 0 {
            let at = ((CUBE_POS_X * k + round) * 2) as usize;
            out[at] = picked_v;
            out[at + 1] = f32::cast_from(picked_i);
        }
        // Every unit has read the pick before the next round overwrites the shared slots.
        sync_cube();
        round += 1;
    }
}

/// The `k` best columns of each of the last `rows` rows of `logits` (`[1, n, cols]`, on a
/// CubeCL device) with their values, best first: what `sampling::top_k` gives for rows
/// without NaN. One launch; a round reads the row once, so it is meant for small `k`.
pub(crate) fn top_k_tail(logits: &Tensor<3>, rows: usize, k: usize) -> Vec<Vec<(u32, f32)>> {
    read_picks(launch_top_k(logits, rows, k), k)
}

/// Launches [`top_k_rows`] on the last `rows` rows of `logits`: the picks, `2 k` values a row
/// (value, column), still on the device ([`read_picks`] reads them).
pub(crate) fn launch_top_k(logits: &Tensor<3>, rows: usize, k: usize) -> Tensor<1> {
    let [b, n, cols] = logits.dims();
    assert!(b == 1 && (1..=n).contains(&rows), "the top of {rows} rows of a [{b}, {n}, {cols}] tensor");
    assert!((1..=cols).contains(&k), "the top {k} of {cols} columns");
    assert!(cols < 1 << 24, "{cols} columns: indices past 2^24 are not exact in f32");
    let logits = contiguous(logits.clone());
    let units = units_for(&logits, cols);
    let client = logits.client.clone();
    let out = empty_device_dtype(client.clone(), logits.device.clone(), [rows * k * 2].into(), logits.dtype);
    top_k_rows::launch(
        &client,
        CubeCount::Static(rows as u32, 1, 1),
        CubeDim::new_1d(units),
        logits.into_buffer_arg(),
        out.clone().into_buffer_arg(),
        cols as u32,
        (n - rows) as u32,
        k as u32,
        units as usize,
    );
    Tensor::from_primitive::<Cube>(out)
}

/// The picks of [`launch_top_k`] on the host: per row, `k` (column, value) pairs.
pub(crate) fn read_picks(picks: Tensor<1>, k: usize) -> Vec<Vec<(u32, f32)>> {
    let out = picks.into_data().try_to_vec::<f32>().expect("f32 picks");
    out.chunks_exact(2 * k).map(|row| row.chunks_exact(2).map(|p| (p[1] as u32, p[0])).collect()).collect()
}
