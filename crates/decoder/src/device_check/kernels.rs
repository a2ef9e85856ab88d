//! The GPU path's fused kernels (`crate::cube`) on the device against a host reference in f64:
//! each at 1, 5 and 16 rows, every row bitwise equal to the same row in a call of another
//! size (row invariance), and a broken call caught by the same comparison, so the check can
//! fail: RMSNorm with its weight read one element off, the RoPE and cache-write kernel with
//! its rows written one position off, SwiGLU with gate and up swapped, attention with a mask
//! that hides nothing (`super::attention`, which also runs a long prefill). (The LM head's
//! argmax and top k, `super::head`, report under the same name.)

use super::Check;
use crate::Device;
use crate::compare::{max_abs_diff, nan_max};
use anyhow::{Result, ensure};
use burn::tensor::{Tensor, TensorData};
use rand::rngs::StdRng;
use rand::{RngExt, SeedableRng};

/// Row counts of the calls compared: a decode step, a verification of K = 4, a tree call.
pub(super) const ROWS: [usize; 3] = [1, 5, 16];

/// Uniform values in `[-scale, scale)`.
pub(super) fn uniform(n: usize, scale: f32, seed: u64) -> Vec<f32> {
    let mut rng = StdRng::seed_from_u64(seed);
    (0..n).map(|_| (rng.random::<f32>() * 2.0 - 1.0) * scale).collect()
}

/// The worst difference of `call(n)` from `reference(n)` over calls of 1, 5 and 16 rows, each
/// call's output bit for bit the first rows of the widest call's (row invariance).
pub(super) fn over_row_counts(
    what: &str,
    call: impl Fn(usize) -> Vec<f32>,
    reference: impl Fn(usize) -> Vec<f32>,
) -> Result<f32> {
    over_these_row_counts(&ROWS, what, call, reference)
}

/// [`over_row_counts`] over calls of `rows` rows, the widest last.
pub(super) fn over_these_row_counts(
    rows: &[usize],
    what: &str,
    call: impl Fn(usize) -> Vec<f32>,
    reference: impl Fn(usize) -> Vec<f32>,
) -> Result<f32> {
    let most = *rows.last().expect("a row count");
    let widest = call(most);
    let mut worst = 0f32;
    for &n in rows {
        let out = call(n);
        ensure!(
            out[..] == widest[..out.len()],
            "{what}: a {n}-row call's rows differ from the same rows in a {most}-row call"
        );
        worst = nan_max(worst, max_abs_diff(&out, &reference(n)));
    }
    Ok(worst)
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
fn rms_norm_on(device: &Device, x: &[f32], weight: &[f32], rows: usize, eps: f64) -> Vec<f32> {
    let cols = weight.len();
    let xt = Tensor::<3>::from_data(TensorData::new(x[..rows * cols].to_vec(), [1, rows, cols]), device);
    let wt = Tensor::<1>::from_data(TensorData::new(weight.to_vec(), [cols]), device);
    crate::cube::rms_norm(xt, &wt, eps).into_data().try_to_vec::<f32>().expect("f32 outputs")
}

/// Heads of the RoPE check: q heads, kv heads, head size (two q heads share a kv head).
pub(super) const ROPE_HEADS: [usize; 3] = [4, 2, 16];
/// The cache positions before the rows of the RoPE check, and the cache's capacity.
const ROPE_PAST: usize = 3;
const ROPE_CAPACITY: usize = 32;
/// What the RoPE check's cache holds where no row is written: must stay as it is.
const SENTINEL: f32 = 7.0;

/// RoPE (rotate-half) of the q and k heads of `rows` fused qkv rows, in f64, and the v heads
/// as they are: q `[heads, rows, d]`, k and v `[kv_heads, rows, d]`.
fn rope_reference(qkv: &[f32], cos: &[f32], sin: &[f32], rows: usize) -> [Vec<f32>; 3] {
    let [h, kvh, d] = ROPE_HEADS;
    let width = (h + 2 * kvh) * d;
    let value = |head: usize, row: usize, j: usize| -> f32 {
        let x = |j: usize| qkv[row * width + head * d + j] as f64;
        if head >= h + kvh {
            return x(j) as f32;
        }
        let partner = if j < d / 2 { -x(j + d / 2) } else { x(j - d / 2) };
        (x(j) * cos[row * d + j] as f64 + partner * sin[row * d + j] as f64) as f32
    };
    let heads = |range: std::ops::Range<usize>| -> Vec<f32> {
        range.flat_map(|head| (0..rows).flat_map(move |row| (0..d).map(move |j| value(head, row, j)))).collect()
    };
    [heads(0..h), heads(h..h + kvh), heads(h + kvh..h + 2 * kvh)]
}

/// `crate::cube::rope_qkv` of the first `rows` rows on `device`, after `past` positions of a
/// cache of [`SENTINEL`]s: q, and the whole key and value storage.
fn rope_on(device: &Device, qkv: &[f32], cos: &[f32], sin: &[f32], rows: usize, past: usize) -> [Vec<f32>; 3] {
    let [h, kvh, d] = ROPE_HEADS;
    let width = (h + 2 * kvh) * d;
    let qkv = Tensor::<3>::from_data(TensorData::new(qkv[..rows * width].to_vec(), [1, rows, width]), device);
    let table = |t: &[f32]| Tensor::<2>::from_data(TensorData::new(t[..rows * d].to_vec(), [rows, d]), device);
    let (cos, sin) = (table(cos), table(sin));
    let cache = || Tensor::<4>::full([1, kvh, ROPE_CAPACITY, d], SENTINEL, device);
    let (mut keys, mut values) = (cache(), cache());
    let step = crate::cube::step_buffer(past, device);
    let q = crate::cube::rope_qkv(qkv, (&cos, &sin), ROPE_HEADS, (&mut keys, &mut values), (past, &step));
    let host = |t: Tensor<4>| t.into_data().try_to_vec::<f32>().expect("f32 outputs");
    [host(q), host(keys), host(values)]
}

/// The largest difference of a RoPE call's outputs from the reference: q, the cache rows at
/// `past..past + rows` against k and v, and every other cache entry against the sentinel.
fn rope_diff(out: &[Vec<f32>; 3], reference: &[Vec<f32>; 3], rows: usize) -> f32 {
    let [_, kvh, d] = ROPE_HEADS;
    let mut worst = max_abs_diff(&out[0], &reference[0]);
    for (cache, want) in out[1..].iter().zip(&reference[1..]) {
        for head in 0..kvh {
            for pos in 0..ROPE_CAPACITY {
                let got = &cache[(head * ROPE_CAPACITY + pos) * d..][..d];
                let expected: Vec<f32> = if (ROPE_PAST..ROPE_PAST + rows).contains(&pos) {
                    want[(head * rows + pos - ROPE_PAST) * d..][..d].to_vec()
                } else {
                    vec![SENTINEL; d]
                };
                worst = nan_max(worst, max_abs_diff(got, &expected));
            }
        }
    }
    worst
}

/// The RoPE and cache-write kernel: the worst difference over 1, 5 and 16 rows, and that of
/// the broken call (rows written one position off).
fn rope_check(device: &Device) -> Result<(f32, f32)> {
    let [h, kvh, d] = ROPE_HEADS;
    let rows = ROWS[2];
    let qkv = uniform(rows * (h + 2 * kvh) * d, 2.0, 3);
    let angles = uniform(rows * d, 3.0, 4);
    let cos: Vec<f32> = angles.iter().map(|a| a.cos()).collect();
    let sin: Vec<f32> = angles.iter().map(|a| a.sin()).collect();
    let widest = rope_on(device, &qkv, &cos, &sin, rows, ROPE_PAST);
    let mut worst = 0f32;
    for n in ROWS {
        let out = rope_on(device, &qkv, &cos, &sin, n, ROPE_PAST);
        for (part, (a, b)) in ["q", "keys", "values"].iter().zip(out.iter().zip(&widest)) {
            let same = match *part {
                "q" => (0..h).all(|head| a[head * n * d..][..n * d] == b[head * rows * d..][..n * d]),
                _ => (0..kvh).all(|head| {
                    let at = (head * ROPE_CAPACITY + ROPE_PAST) * d;
                    a[at..at + n * d] == b[at..at + n * d]
                }),
            };
            ensure!(same, "RoPE: a {n}-row call's {part} differ from the same rows in a {rows}-row call");
        }
        worst = nan_max(worst, rope_diff(&out, &rope_reference(&qkv, &cos, &sin, n), n));
    }
    let broken = rope_on(device, &qkv, &cos, &sin, ROWS[1], ROPE_PAST + 1);
    Ok((worst, rope_diff(&broken, &rope_reference(&qkv, &cos, &sin, ROWS[1]), ROWS[1])))
}

/// `silu(gate) * up` of `cols / 2`-wide halves of each row, in f64.
fn swiglu_reference(gate_up: &[f32], cols: usize) -> Vec<f32> {
    let inter = cols / 2;
    gate_up
        .chunks_exact(cols)
        .flat_map(|row| {
            (0..inter).map(move |i| {
                let (g, u) = (row[i] as f64, row[inter + i] as f64);
                (g / (1.0 + (-g).exp()) * u) as f32
            })
        })
        .collect()
}

/// `crate::cube::swiglu` of the first `rows` rows on `device`.
fn swiglu_on(device: &Device, gate_up: &[f32], cols: usize, rows: usize) -> Vec<f32> {
    let t = Tensor::<3>::from_data(TensorData::new(gate_up[..rows * cols].to_vec(), [1, rows, cols]), device);
    crate::cube::swiglu(t).into_data().try_to_vec::<f32>().expect("f32 outputs")
}

/// SwiGLU at 1, 5 and 16 rows of 2 x 300 values: the worst difference, and that of the broken
/// call (gate and up swapped).
fn swiglu_check(device: &Device) -> Result<(f32, f32)> {
    let (cols, rows) = (600, ROWS[2]);
    let gate_up = uniform(rows * cols, 4.0, 5);
    let reference = swiglu_reference(&gate_up, cols);
    let inter = cols / 2;
    let worst =
        over_row_counts("SwiGLU", |n| swiglu_on(device, &gate_up, cols, n), |n| reference[..n * inter].to_vec())?;
    let swapped: Vec<f32> =
        gate_up.chunks_exact(cols).flat_map(|r| [&r[cols / 2..], &r[..cols / 2]].concat()).collect();
    let broken = swiglu_on(device, &swapped, cols, ROWS[1]);
    Ok((worst, max_abs_diff(&broken, &reference[..broken.len()])))
}

/// The fused kernels' check: RMSNorm at two widths, under the cube's units (each unit one
/// column or none) and over them (each unit strides over several columns), RoPE with the cache
/// write and SwiGLU; with attention's worst difference and its broken call's (`attention`, from
/// the attention check) and the LM head check's description (`head`) in the report.
pub(super) fn kernels(device: &Device, tol: f32, attention: (f32, f32), head: &str) -> Result<Check> {
    let (eps, mut worst, mut caught) = (1e-6, 0f32, f32::INFINITY);
    for (cols, seed) in [(96, 1), (700, 2)] {
        let x = uniform(ROWS[2] * cols, 3.0, seed);
        let weight: Vec<f32> = uniform(cols, 1.0, seed + 10).into_iter().map(|w| 1.0 + w).collect();
        let reference = rms_norm_reference(&x, &weight, eps);
        let width = format!("RMSNorm of width {cols}");
        let call = |n: usize| rms_norm_on(device, &x, &weight, n, eps);
        worst = nan_max(worst, over_row_counts(&width, call, |n| reference[..n * cols].to_vec())?);
        // The broken call: the weight read one element off.
        let mut shifted = weight.clone();
        shifted.rotate_left(1);
        let broken = rms_norm_on(device, &x, &shifted, ROWS[1], eps);
        caught = caught.min(max_abs_diff(&broken, &reference[..ROWS[1] * cols]));
    }
    ensure!(caught > tol, "a weight read one element off moved RMSNorm by only {caught:e}: the check cannot fail");
    let (rope_worst, rope_caught) = rope_check(device)?;
    ensure!(
        rope_caught > tol,
        "rows cached one position off moved RoPE by only {rope_caught:e}: the check cannot fail"
    );
    let (swiglu_worst, swiglu_caught) = swiglu_check(device)?;
    ensure!(swiglu_caught > tol, "gate and up swapped moved SwiGLU by only {swiglu_caught:e}: the check cannot fail");
    let (attention_worst, attention_caught) = attention;
    ensure!(
        attention_caught > tol,
        "attention whose mask hides nothing moved by only {attention_caught:e}: the check cannot fail"
    );

    Ok(super::tiny::numeric(
        "kernels",
        [rope_worst, swiglu_worst, attention_worst].into_iter().fold(worst, nan_max),
        tol,
        &format!(
            "fused RMSNorm (widths 96 and 700), RoPE with the cache write (4 q and 2 kv heads of 16, after \
             3 positions), SwiGLU (2 x 300) and causal attention (the same heads, after 8, 255 and 600 positions: one chunk \
             of keys, a call at the split, three chunks; masked by the kernel and by an additive mask), 1/5/16 \
             rows, against f64 on the host; every row bitwise equal across call sizes; a 1,100-row attention \
             prefill of 64 heads (70,400 cubes, run in row groups) against f64, its last 5 rows bitwise a \
             5-row call's; broken calls caught: \
             a weight read one element off {caught:.1e} away, rows cached one position off \
             {rope_caught:.1e}, gate and up swapped {swiglu_caught:.1e}, attention unmasked \
             {attention_caught:.1e}; {head}"
        ),
    ))
}
