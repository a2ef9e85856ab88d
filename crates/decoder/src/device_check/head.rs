//! The LM head's choices on the device (`crate::cube::top_k_tail`) against the host's: the
//! argmax and the top k of vocabulary-wide rows with ties at every rank, row-invariant, rows
//! read one off caught; and a sampler's token drawn from the device's top k
//! (`Sampler::next_after`) equal to its draw from the whole row on the host.

use super::kernels::{ROWS, over_row_counts, uniform};
use crate::Device;
use crate::model::ForwardOutput;
use crate::sampler::Sampler;
use crate::sampling::{SamplingConfig, argmax, top_k};
use anyhow::{Result, ensure};
use burn::tensor::{Tensor, TensorData};

/// Columns of a row: more than a cube's units, not a multiple of them, split over 5 segments
/// (`cube::top_k`'s first launch) for every k checked.
const COLS: usize = 3001;

/// The top-k cuts checked: Qwen's recommended 20, and 64 (the largest the sampler asks the
/// device for).
const KS: [usize; 2] = [20, crate::sampler::DEVICE_TOP_K_MAX];

/// Rows of logits on a grid of 1/64 (about five columns share each value, so ties fall at
/// every rank, the k-th included), each row's largest value planted twice (the first copy
/// must win), the first row's at column 0 (no unit has seen a column before it).
fn rows_with_ties() -> Vec<f32> {
    let mut x: Vec<f32> = uniform(ROWS[2] * COLS, 5.0, 20).into_iter().map(|v| (v * 64.0).round() / 64.0).collect();
    for (r, row) in x.chunks_exact_mut(COLS).enumerate() {
        let first = if r == 0 { 0 } else { (r * 389) % (COLS / 2) };
        row[first] = 9.0;
        row[first + 1 + (r * 977) % (COLS / 2)] = 9.0;
    }
    x
}

fn on_device(device: &Device, x: &[f32], rows: usize) -> Tensor<3> {
    Tensor::<3>::from_data(TensorData::new(x[..rows * COLS].to_vec(), [1, rows, COLS]), device)
}

/// The device's top `k` of the last `tail` of the first `rows` rows of `x`, flattened as
/// (column, value) pairs of f32s.
fn top_on(device: &Device, x: &[f32], rows: usize, tail: usize, k: usize) -> Vec<f32> {
    let best = crate::cube::top_k_tail(&on_device(device, x, rows), tail, k);
    best.into_iter().flatten().flat_map(|(i, v)| [i as f32, v]).collect()
}

/// The host's top `k` of each row of `x`, flattened as [`top_on`] flattens.
fn top_on_host(x: &[f32], k: usize) -> Vec<f32> {
    x.chunks_exact(COLS).flat_map(|row| top_k(row, k)).flat_map(|(i, v)| [i as f32, v]).collect()
}

/// Tokens drawn by `Sampler::next_after` from a forward's last row on the device (its top k
/// only) and by `Sampler::sample` from the whole row on the host, with the same seeds, for
/// independent and coupled draws: how many of them differ.
fn sampled_mismatches(device: &Device, x: &[f32]) -> usize {
    let rows = ROWS[1];
    let logits = on_device(device, x, rows);
    let last = &x[(rows - 1) * COLS..rows * COLS];
    let configs = [
        SamplingConfig { temperature: 0.7, top_k: Some(20), top_p: Some(0.8) },
        SamplingConfig { temperature: 1.0, top_k: Some(KS[1]), top_p: None },
    ];
    let mut mismatches = 0;
    for config in configs {
        for seed in 0..32u64 {
            let samplers = || [Sampler::new(config.clone(), seed), Sampler::coupled(config.clone(), seed, 100)];
            for (mut device_side, mut host_side) in samplers().into_iter().zip(samplers()) {
                let hidden = Tensor::<3>::zeros([1, rows, 4], device);
                let token = device_side.next_after(ForwardOutput { logits: logits.clone(), hidden });
                mismatches += usize::from(token != host_side.sample(last));
            }
        }
    }
    mismatches
}

/// The argmax and the top 20 and 64 at 1, 5 and 16 rows against the host's (every row bitwise
/// equal across call sizes), the tail of a call, and the sampler's draws; fails unless a broken
/// call (every row read one row off) got some rows wrong. Returns what was compared.
pub(super) fn head_check(device: &Device) -> Result<String> {
    let caught = compare(device)?;
    ensure!(caught > 0, "rows read one row off gave the same argmax: the check cannot fail");
    Ok(format!(
        "the LM head's argmax and top 20 and 64 ({COLS} columns on a grid of 1/64, ties at every rank, each row's \
         maximum planted twice) equal to the host's, the first maximum winning, 128 tokens drawn from the \
         device's top k equal to the host's draws from the whole row, rows read one off caught ({caught} of 5 \
         rows wrong)"
    ))
}

/// [`head_check`]'s comparisons; how many of 5 rows the broken call got wrong.
fn compare(device: &Device) -> Result<usize> {
    let x = rows_with_ties();
    let host: Vec<f32> = x.chunks_exact(COLS).map(|r| argmax(r) as f32).collect();
    let argmax_on = |x: &[f32], n: usize| -> Vec<f32> { top_on(device, x, n, n, 1).into_iter().step_by(2).collect() };
    let worst = over_row_counts("argmax", |n| argmax_on(&x, n), |n| host[..n].to_vec())?;
    ensure!(worst == 0.0, "the device's argmax differs from the host's (by {worst} columns at most)");
    for k in KS {
        let reference = top_on_host(&x, k);
        let worst =
            over_row_counts(&format!("top {k}"), |n| top_on(device, &x, n, n, k), |n| reference[..n * 2 * k].to_vec())?;
        ensure!(worst == 0.0, "the device's top {k} differs from the host's (by {worst} at most)");
        ensure!(
            top_on(device, &x, ROWS[1], 2, k) == reference[3 * 2 * k..5 * 2 * k],
            "the top {k} of a call's last 2 rows"
        );
    }
    let mismatches = sampled_mismatches(device, &x);
    ensure!(mismatches == 0, "{mismatches} of 128 tokens drawn from the device's top k differ from the host's draws");
    let broken = argmax_on(&x[COLS..], ROWS[1]);
    Ok(broken.iter().zip(&host).filter(|(a, b)| a != b).count())
}
