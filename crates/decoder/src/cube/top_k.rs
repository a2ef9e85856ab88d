//! The LM head's best columns on the device: each row's k largest logits with their columns,
//! best first, ties to the smaller column (`sampling::rank_order`), so that a greedy step reads
//! one number back and a top-k sampled step 2k, instead of a vocabulary row (151,936 floats,
//! 0.6 MB, for the Qwen2.5 pair).

use super::{contiguous, units_for};
use burn::tensor::{DType, Tensor};
use burn_cubecl::Cube;
use burn_cubecl::cubecl;
use burn_cubecl::ops::numeric::empty_device_dtype;
use burn_cubecl::tensor::CubeTensor;
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

/// Columns a first-stage cube aims at: a vocabulary row (151,936 columns for the Qwen2.5 pair)
/// is split over some 300 cubes for an argmax, instead of one cube walking all of it.
const SEGMENT_TARGET: usize = 512;
/// Most candidates the second stage merges per row (segments times `k`): a top 64 is split
/// over fewer segments than an argmax, so that the merge stays one cube's small job.
const CANDIDATES_MAX: usize = 4096;

/// Segments of a `cols`-wide row for a top `k`: fixed by the width and `k`, never by the rows
/// of a call. Every segment has at least `k` columns (a short last one would yield none).
fn segments_for(cols: usize, k: usize) -> usize {
    let mut segments = (cols / SEGMENT_TARGET).min(CANDIDATES_MAX / k).max(1);
    while segments > 1 && cols - (segments - 1) * cols.div_ceil(segments) < k {
        segments -= 1;
    }
    segments
}

/// Cube `(CUBE_POS_X, CUBE_POS_Y)` takes segment `CUBE_POS_X` (`span` entries wide) of input
/// row `first + CUBE_POS_Y` (`width` entries a row) and finds its `k` best entries in `k`
/// rounds: round r finds the best entry ranked after round r - 1's pick. An entry's column is
/// its place in the row, or `ids` of it (`indexed`: a second stage over the first's
/// candidates). Each unit keeps the best of the entries it strides over, and the units' bests
/// fold in a tree; the winner is the same whatever the fold's order, so the result is exact.
///
/// The first stage (`last` false) writes round r's value and column to `cand_v` and `cand_i`
/// at `(row segments + segment) k + r`; the last writes them to `picks[2 (row k + r)]` and the
/// next (the column as an f32, exact below 2^24 columns).
#[cube(launch)]
#[allow(clippy::too_many_arguments)]
fn top_k_rows(
    values: &[f32],
    ids: &[u32],
    cand_v: &mut [f32],
    cand_i: &mut [u32],
    picks: &mut [f32],
    width: u32,
    span: u32,
    first: u32,
    k: u32,
    #[comptime] units: usize,
    #[comptime] indexed: bool,
    #[comptime] last: bool,
) {
    let row = first + CUBE_POS_Y;
    let begin = CUBE_POS_X * span;
    let end = min(begin + span, width);
    let unit = UNIT_POS as usize;
    let mut best_values = Shared::<[f32]>::new_slice(units);
    let mut best_columns = Shared::<[u32]>::new_slice(units);
    let mut picked_v = 0.0f32;
    let mut picked_i = u32::new(NONE_LITERAL);
    let mut round = 0u32;
    while round < k {
        let mut best_v = 0.0f32;
        let mut best_i = u32::new(NONE_LITERAL);
        let mut j = begin + UNIT_POS;
        if round > 0 && picked_i == NONE {
            // Fewer than k entries (a row narrower than k never comes here): none is left.
            j = end;
        }
        while j < end {
            let v = values[(row * width + j) as usize];
            let mut column = j;
            if indexed {
                column = ids[(row * width + j) as usize];
            }
            let untaken = picked_i == NONE || ranks_before(picked_v, picked_i, v, column);
            if untaken && ranks_before(v, column, best_v, best_i) {
                best_v = v;
                best_i = column;
            }
            j += CUBE_DIM;
        }
        best_values[unit] = best_v;
        best_columns[unit] = best_i;
        sync_cube();
        let mut active = CUBE_DIM / 2;
        while active > 0 {
            if UNIT_POS < active {
                let other = unit + active as usize;
                if ranks_before(best_values[other], best_columns[other], best_values[unit], best_columns[unit]) {
                    best_values[unit] = best_values[other];
                    best_columns[unit] = best_columns[other];
                }
            }
            sync_cube();
            active /= 2;
        }
        picked_v = best_values[0];
        picked_i = best_columns[0];
        if UNIT_POS == 0 {
            if last {
                let at = ((CUBE_POS_Y * k + round) * 2) as usize;
                picks[at] = picked_v;
                picks[at + 1] = f32::cast_from(picked_i);
            } else {
                let at = ((CUBE_POS_Y * CUBE_COUNT_X + CUBE_POS_X) * k + round) as usize;
                cand_v[at] = picked_v;
                cand_i[at] = picked_i;
            }
        }
        // Every unit has read the pick before the next round overwrites the shared slots.
        sync_cube();
        round += 1;
    }
}

/// One launch of [`top_k_rows`]: cubes per row, units per cube, entries per input row and per
/// cube, the first input row, and whether the entries are indexed candidates and the picks
/// final.
struct Stage {
    cubes: usize,
    units: u32,
    width: usize,
    span: usize,
    first: u32,
    indexed: bool,
    last: bool,
}

/// The `k` best columns of each of the last `rows` rows of `logits` (`[1, n, cols]`, on a
/// CubeCL device) with their values, best first: what `sampling::top_k` gives for rows
/// without NaN. Two launches where the row is split (see [`launch_top_k`]).
pub(crate) fn top_k_tail(logits: &Tensor<3>, rows: usize, k: usize) -> Vec<Vec<(u32, f32)>> {
    read_picks(launch_top_k(logits, rows, k), k)
}

/// The top `k` of the last `rows` rows of `logits`: the picks, `2 k` values a row (value,
/// column), still on the device ([`read_picks`] reads them). Each row is split into
/// [`segments_for`] segments, one cube each, whose `k` best entries a second launch merges
/// (one cube a row); the top k of a row is among its segments' top k's, and the order is
/// total (ties to the smaller column), so the result is exactly the one-cube result.
pub(crate) fn launch_top_k(logits: &Tensor<3>, rows: usize, k: usize) -> Tensor<1> {
    let [b, n, cols] = logits.dims();
    assert!(b == 1 && (1..=n).contains(&rows), "the top of {rows} rows of a [{b}, {n}, {cols}] tensor");
    assert!((1..=cols).contains(&k), "the top {k} of {cols} columns");
    assert!(cols < 1 << 24, "{cols} columns: indices past 2^24 are not exact in f32");
    let logits = contiguous(logits.clone());
    let client = logits.client.clone();
    let device = logits.device.clone();
    let picks = empty_device_dtype(client.clone(), device.clone(), [rows * k * 2].into(), logits.dtype);
    let segments = segments_for(cols, k);
    let span = cols.div_ceil(segments);
    let units = units_for(&logits, span);
    let first = (n - rows) as u32;
    let stage = |values: &CubeTensor, ids: &CubeTensor, cand: [&CubeTensor; 2], shape: Stage| {
        top_k_rows::launch(
            &client,
            CubeCount::Static(shape.cubes as u32, rows as u32, 1),
            CubeDim::new_1d(shape.units),
            values.clone().into_buffer_arg(),
            ids.clone().into_buffer_arg(),
            cand[0].clone().into_buffer_arg(),
            cand[1].clone().into_buffer_arg(),
            picks.clone().into_buffer_arg(),
            shape.width as u32,
            shape.span as u32,
            shape.first,
            k as u32,
            shape.units as usize,
            shape.indexed,
            shape.last,
        )
    };
    let whole = Stage { cubes: segments, units, width: cols, span, first, indexed: false, last: segments == 1 };
    if segments == 1 {
        // The candidates and ids are never touched: any buffer stands in for them.
        stage(&logits, &picks, [&picks, &picks], whole);
    } else {
        let width = segments * k;
        let cand_v = empty_device_dtype(client.clone(), device.clone(), [rows * width].into(), DType::F32);
        let cand_i = empty_device_dtype(client.clone(), device, [rows * width].into(), DType::U32);
        stage(&logits, &cand_i, [&cand_v, &cand_i], whole);
        let units = units_for(&cand_v, width);
        let merge = Stage { cubes: 1, units, width, span: width, first: 0, indexed: true, last: true };
        stage(&cand_v, &cand_i, [&cand_v, &cand_i], merge);
    }
    Tensor::from_primitive::<Cube>(picks)
}

/// The picks of [`launch_top_k`] on the host: per row, `k` (column, value) pairs.
pub(crate) fn read_picks(picks: Tensor<1>, k: usize) -> Vec<Vec<(u32, f32)>> {
    let out = picks.into_data().try_to_vec::<f32>().expect("f32 picks");
    out.chunks_exact(2 * k).map(|row| row.chunks_exact(2).map(|p| (p[1] as u32, p[0])).collect()).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_segment_yields_k_candidates_and_the_merge_stays_small() {
        for k in [1, 2, 20, 64] {
            for cols in (k..20_000).step_by(7).chain([151_936, 152_064, 128_256]) {
                let segments = segments_for(cols, k);
                let span = cols.div_ceil(segments);
                assert!(segments >= 1 && cols - (segments - 1) * span >= k, "{cols} columns, top {k}");
                assert!(segments == 1 || segments * k <= CANDIDATES_MAX, "{cols} columns, top {k}");
            }
        }
        // The Qwen2.5 vocabulary's argmax is spread over hundreds of cubes.
        assert_eq!(segments_for(151_936, 1), 296);
    }
}
