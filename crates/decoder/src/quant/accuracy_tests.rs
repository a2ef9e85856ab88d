//! The integer kernels against an independent reference, statistically: the f64 product of the
//! dequantized weights (the decoder, itself checked against gguf-py) and the unquantized
//! activations. The bitwise tests (`int_tests`) prove every path does the portable path's
//! arithmetic; these prove that arithmetic is the right one, with a bound tight enough that a
//! 20% scale error, a wrong nibble merge or a wrong block offset each fail it by far.
//!
//! The model: quantizing an activation to 8 bits moves it by a rounding error spread evenly
//! over half a step either way (variance `step² / 12`, the step being its block's
//! `max |x| / 127`), independently from value to value. The kernel's error against the exact
//! product is then `Σ wᵢ eᵢ`, close to normal with variance `σ² = Σ wᵢ² stepᵢ² / 12` (f32
//! rounding adds ~1e-7 relative, far below). Over every output, `z = error / σ` must have a
//! mean square near 1 and no value beyond [`Z_MAX`]: a worst-case bound would be ~√n times
//! looser.
//!
//! A gain error (every output off by the same small factor, as from a wrong activation scale)
//! hides in that spread: with outliers widening σ, a 1% gain moves the mean z² by far less
//! than its allowance. So the output is also regressed on the exact product through the origin
//! on activations without outliers, and the slope must be 1 within [`SLOPE_TOLERANCE`].

use super::act::QK_K;
use super::int::{IntPath, matmul};
use super::testutil::random_blocks;
use super::{QuantMatrix, QuantPart};
use crate::gguf::GgmlType;
use rand::rngs::StdRng;
use rand::{RngExt, SeedableRng};

/// Widths with at least two blocks per row, so that a wrong block offset reads other weights.
const CASES: [(GgmlType, usize); 6] = [
    (GgmlType::Q4_0, 128),
    (GgmlType::Q5_0, 128),
    (GgmlType::Q8_0, 128),
    (GgmlType::Q4K, 768),
    (GgmlType::Q5K, 768),
    (GgmlType::Q6K, 768),
];
const ROWS: usize = 64;
const M: usize = 4;
/// Activation rows of the slope check: enough outputs that its standard error is a fifth of
/// [`SLOPE_TOLERANCE`] or less on every block type.
const M_SLOPE: usize = 64;
/// Mean of z² allowed: 1 within ~5 standard deviations of the mean of 256 squared normals
/// (sd sqrt(2/256) = 0.09), widened for the model's approximations (the largest value of a
/// block is exact, f16 scales).
const MEAN_Z2: (f64, f64) = (0.6, 1.5);
/// No |z| beyond this: a normal exceeds 5 once in 1.7 million draws.
const Z_MAX: f64 = 5.0;

/// The slope of the kernel's output on the exact product may differ from 1 by less than this.
const SLOPE_TOLERANCE: f64 = 1e-3;

/// Activation rows with a spread of magnitudes (a few large values, as real hidden states).
fn activations(seed: u64, k: usize) -> Vec<f32> {
    let mut rng = StdRng::seed_from_u64(seed);
    (0..M * k).map(|i| rng.random_range(-1.0f32..1.0) * if i % 97 == 0 { 8.0 } else { 1.0 }).collect()
}

/// Activation rows without outliers: the rounding error is small against the product, so
/// that the slope resolves a gain error of a tenth of a percent.
fn even_activations(seed: u64, k: usize) -> Vec<f32> {
    let mut rng = StdRng::seed_from_u64(seed);
    (0..M_SLOPE * k).map(|_| rng.random_range(-1.0f32..1.0)).collect()
}

/// Every output of `got` (the kernel's `[rows of x, rows of reference]` output) with the exact
/// product of `reference`'s dequantized weights and `x` and the variance the activation
/// rounding gives it (the module's model): (got, exact, variance).
fn outputs(reference: &QuantMatrix, x: &[f32], got: &[f32]) -> Vec<(f64, f64, f64)> {
    let (k, n) = (reference.cols(), reference.rows());
    let dense = reference.to_f32();
    let block = if reference.parts()[0].ty.block().0 == QK_K { QK_K } else { 32 };
    let mut out = Vec::with_capacity(got.len());
    for (r, xr) in x.chunks_exact(k).enumerate() {
        // The activations are quantized per 32 values for the 32-wide formats, per 256 for
        // the K-quants.
        let steps: Vec<f64> =
            xr.chunks(block).map(|c| c.iter().fold(0f32, |m, v| m.max(v.abs())) as f64 / 127.0).collect();
        for o in 0..n {
            let w = &dense[o * k..(o + 1) * k];
            let exact: f64 = w.iter().zip(xr).map(|(&a, &b)| a as f64 * b as f64).sum();
            let var: f64 = w.iter().enumerate().map(|(i, &a)| (a as f64 * steps[i / block]).powi(2) / 12.0).sum();
            out.push((got[r * n + o] as f64, exact, var));
        }
    }
    out
}

/// The kernel's output `got` regressed on the exact product through the origin: (slope, its
/// standard error under the rounding model).
fn slope(reference: &QuantMatrix, x: &[f32], got: &[f32]) -> (f64, f64) {
    let (mut ge, mut ee, mut ee_var) = (0.0, 0.0, 0.0);
    for (g, exact, var) in outputs(reference, x, got) {
        ge += g * exact;
        ee += exact * exact;
        ee_var += exact * exact * var;
    }
    (ge / ee, ee_var.sqrt() / ee)
}

/// (mean z², max |z|) of the kernel's output `got` against the exact product.
fn z_stats(reference: &QuantMatrix, x: &[f32], got: &[f32]) -> (f64, f64) {
    let all = outputs(reference, x, got);
    let (mut sum_z2, mut max_z) = (0.0, 0.0f64);
    for &(g, exact, var) in &all {
        let z = (g - exact) / var.sqrt();
        sum_z2 += z * z;
        max_z = max_z.max(z.abs());
    }
    (sum_z2 / all.len() as f64, max_z)
}

fn passes((mean_z2, max_z): (f64, f64)) -> bool {
    (MEAN_Z2.0..=MEAN_Z2.1).contains(&mean_z2) && max_z <= Z_MAX
}

/// Ways the kernel could read a block wrongly, applied to the bytes it is given.
#[derive(Clone, Copy, Debug)]
enum Fault {
    /// The block's scale `d` decoded 20% too large.
    Scale20,
    /// The block's scale `d` decoded 1% too small: a gain error the z statistics cannot see
    /// and the slope must.
    Scale1,
    /// Low and high nibbles swapped: values `j` and `j + 16` (Q4_0, Q5_0; the K-quants' pairs of
    /// 32-value halves) merged in the wrong order.
    NibbleMerge,
    /// Each block read from the next block's bytes (the last from the first).
    BlockOffset,
}

/// Byte range of a block's 4-bit values, if it has any.
fn nibbles(ty: GgmlType) -> Option<std::ops::Range<usize>> {
    match ty {
        GgmlType::Q4_0 => Some(2..18),
        GgmlType::Q5_0 => Some(6..22),
        GgmlType::Q4K => Some(16..144),
        GgmlType::Q5K => Some(48..176),
        GgmlType::Q6K => Some(0..128),
        _ => None,
    }
}

/// Offset of a block's f16 scale `d`.
fn scale_at(ty: GgmlType) -> usize {
    if ty == GgmlType::Q6K { 208 } else { 0 }
}

/// `data` (rows of `k` values of type `ty`) as a faulty kernel would read it, or `None` when
/// the fault does not apply to the type.
fn with_fault(ty: GgmlType, k: usize, data: &[u8], fault: Fault) -> Option<Vec<u8>> {
    let (values, bytes) = ty.block();
    let per_row = k / values;
    let mut out = data.to_vec();
    for (b, block) in out.chunks_exact_mut(bytes).enumerate() {
        match fault {
            Fault::Scale20 | Fault::Scale1 => {
                let at = scale_at(ty);
                let factor = if matches!(fault, Fault::Scale20) { 1.2 } else { 0.99 };
                let d = half::f16::from_le_bytes([block[at], block[at + 1]]).to_f32() * factor;
                block[at..at + 2].copy_from_slice(&half::f16::from_f32(d).to_le_bytes());
            }
            Fault::NibbleMerge => block[nibbles(ty)?].iter_mut().for_each(|x| *x = x.rotate_left(4)),
            Fault::BlockOffset => {
                let (row, i) = (b / per_row, b % per_row);
                let from = (row * per_row + (i + 1) % per_row) * bytes;
                block.copy_from_slice(&data[from..from + bytes]);
            }
        }
    }
    Some(out)
}

#[test]
fn the_integer_product_is_within_its_rounding_distribution_and_faults_fall_far_outside() {
    let mut report = Vec::new();
    for (ty, k) in CASES {
        let data = random_blocks(ty, ROWS, k, &mut StdRng::seed_from_u64(ty.id() as u64));
        let reference = QuantMatrix::new(vec![QuantPart::rows(ty, ROWS, data.clone())], k).unwrap();
        let (x, even) = (activations(k as u64 + 1, k), even_activations(k as u64 + 2, k));
        let kernel = |q: &QuantMatrix, x: &[f32], path: IntPath| {
            let m = x.len() / k;
            let mut out = vec![0f32; m * ROWS];
            matmul(q, x, m, &mut out, path);
            out
        };
        for path in IntPath::all_supported() {
            for (name, x) in [("outliers", &x[..]), ("even", &even[..M * k])] {
                let stats = z_stats(&reference, x, &kernel(&reference, x, path));
                report.push(format!("{ty:?} {} ({name}): mean z² {:.3}, max |z| {:.2}", path.name(), stats.0, stats.1));
                assert!(
                    passes(stats),
                    "{ty:?} k={k} on {} ({name}): mean z² {:.3} (allowed {MEAN_Z2:?}), max |z| {:.2} (allowed {Z_MAX})",
                    path.name(),
                    stats.0,
                    stats.1
                );
            }
            let (b, se) = slope(&reference, &even, &kernel(&reference, &even, path));
            report.push(format!("{ty:?} {}: slope 1 {:+.2e} (standard error {se:.1e})", path.name(), b - 1.0));
            // The slope's own noise must be far below the tolerance, or the check could not
            // tell a gain error from rounding.
            assert!(
                5.0 * se < SLOPE_TOLERANCE,
                "{ty:?} k={k}: the slope's standard error {se:.1e} is too large to resolve {SLOPE_TOLERANCE}"
            );
            assert!(
                (b - 1.0).abs() < SLOPE_TOLERANCE,
                "{ty:?} k={k} on {}: slope {b:.5}, a gain error (allowed 1 ± {SLOPE_TOLERANCE})",
                path.name()
            );
        }
        for fault in [Fault::Scale20, Fault::Scale1, Fault::NibbleMerge, Fault::BlockOffset] {
            let Some(faulty) = with_fault(ty, k, &data, fault) else { continue };
            let q = QuantMatrix::new(vec![QuantPart::rows(ty, ROWS, faulty)], k).unwrap();
            let stats = z_stats(&reference, &x, &kernel(&q, &x, IntPath::active()));
            let (b, _) = slope(&reference, &even, &kernel(&q, &even, IntPath::active()));
            report.push(format!("{ty:?} {fault:?}: mean z² {:.3e}, max |z| {:.3e}, slope {b:.4}", stats.0, stats.1));
            let caught = !passes(stats) || (b - 1.0).abs() >= SLOPE_TOLERANCE;
            assert!(
                caught,
                "{ty:?} k={k}: {fault:?} passed the check (mean z² {:.3}, max |z| {:.2}, slope {b:.5})",
                stats.0, stats.1
            );
        }
    }
    eprintln!("{}", report.join("\n"));
}
