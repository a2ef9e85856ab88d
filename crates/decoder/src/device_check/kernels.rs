//! The GPU path's fused kernels (`crate::cube`) on the device against a host reference in f64:
//! each at 1, 5 and 16 rows, every row bitwise equal to the same row in a call of another
//! size (row invariance), and a broken call (the weight read one element off) caught by the
//! same comparison, so the check can fail.

use super::Check;
use crate::Device;
use crate::compare::nan_max;
use anyhow::{Result, ensure};
use rand::rngs::StdRng;
use rand::{RngExt, SeedableRng};

/// Row counts of the calls compared: a decode step, a verification of K = 4, a tree call.
const ROWS: [usize; 3] = [1, 5, 16];

/// Uniform values in `[-scale, scale)`.
fn uniform(n: usize, scale: f32, seed: u64) -> Vec<f32> {
    let mut rng = StdRng::seed_from_u64(seed);
    (0..n).map(|_| (rng.random::<f32>() * 2.0 - 1.0) * scale).collect()
}

/// RMSNorm of each `cols`-wide row of `x` in f64.
fn rms_norm_reference(x: &[f32], weight: &[f32], eps: f64) -> Vec<f32> {
    let cols = weight.len();
    x.chunks_exact(cols)
        .flat_map(|row| {
            let mean = row.iter().map(|&v| v as f64 * v as f64).sum::<f64>() / cols as f64;
            let inv = 1.0 / (mean + eps).sqrt();
            row.iter().zip(weight).map(move |(&v, &w)| (v as f64 * inv * w as f64) as f32)
        })
        .collect()
}

/// `crate::cube::rms_norm` of the first `rows` rows of `x` on `device`, back on the host.
#[cfg(any(feature = "wgpu", feature = "cuda"))]
fn rms_norm_on(device: &Device, x: &[f32], weight: &[f32], rows: usize, eps: f64) -> Vec<f32> {
    use burn::tensor::{Tensor, TensorData};
    let cols = weight.len();
    let xt = Tensor::<3>::from_data(TensorData::new(x[..rows * cols].to_vec(), [1, rows, cols]), device);
    let wt = Tensor::<1>::from_data(TensorData::new(weight.to_vec(), [cols]), device);
    crate::cube::rms_norm(xt, &wt, eps).into_data().try_to_vec::<f32>().expect("f32 outputs")
}

#[cfg(not(any(feature = "wgpu", feature = "cuda")))]
fn rms_norm_on(_: &Device, _: &[f32], _: &[f32], _: usize, _: f64) -> Vec<f32> {
    panic!("this build has no GPU kernels (build with --features wgpu or cuda)")
}

/// RMSNorm at two widths: under the cube's units (each unit one column or none) and over them
/// (each unit strides over several columns).
pub(super) fn kernels(device: &Device, tol: f32) -> Result<Check> {
    let (eps, mut worst, mut caught) = (1e-6, 0f32, f32::INFINITY);
    for (cols, seed) in [(96, 1), (700, 2)] {
        let x = uniform(ROWS[2] * cols, 3.0, seed);
        let weight: Vec<f32> = uniform(cols, 1.0, seed + 10).into_iter().map(|w| 1.0 + w).collect();
        let reference = rms_norm_reference(&x, &weight, eps);
        let widest = rms_norm_on(device, &x, &weight, ROWS[2], eps);
        for rows in ROWS {
            let out = rms_norm_on(device, &x, &weight, rows, eps);
            ensure!(
                out[..] == widest[..rows * cols],
                "RMSNorm of width {cols}: a {rows}-row call's rows differ from the same rows in a {}-row call",
                ROWS[2]
            );
            worst = nan_max(worst, crate::compare::max_abs_diff(&out, &reference[..rows * cols]));
        }
        // The broken call: the weight read one element off.
        let mut shifted = weight.clone();
        shifted.rotate_left(1);
        let broken = rms_norm_on(device, &x, &shifted, ROWS[1], eps);
        caught = caught.min(crate::compare::max_abs_diff(&broken, &reference[..ROWS[1] * cols]));
    }
    ensure!(caught > tol, "a weight read one element off moved RMSNorm by only {caught:e}: the check cannot fail");
    Ok(super::tiny::numeric(
        "kernels",
        worst,
        tol,
        &format!(
            "fused RMSNorm at widths 96 and 700, 1/5/16 rows, against f64 on the host; every row bitwise \
             equal across call sizes; a weight read one element off is {caught:.1e} away"
        ),
    ))
}
