//! GGUF blocks on the device (`crate::cube::DeviceBlocks`): the product kernel for every block
//! type it reads, against an f64 product of the host's dequantized matrix, at 1, 5, 16 and 40 rows
//! with every row bitwise equal across call sizes; the row lookup (the embedding) against the
//! host's decoding; the blocks read back unchanged; a broken matrix (every row's blocks one
//! block off) caught; the product with RMSNorm, SwiGLU and the residual fused; a tiny GGUF
//! model whose matrices stay in blocks on the device against the CPU's native path; and a tiny
//! safetensors model stored in F16 and BF16, its matrices kept in 16 bits on the device,
//! against the CPU's f32 path on the same values.

use super::Check;
use super::kernels::{ROWS, over_these_row_counts, uniform};
use super::tiny::{numeric, rows, rows_diff, tokens, write_tiny_as, write_tiny_gguf};
use crate::compare::{max_abs_diff, nan_max};
use crate::cube::DeviceBlocks;
use crate::fusion::Fused;
use crate::gguf::GgmlType;
use crate::quant::{QuantMatrix, QuantPart};
use crate::synthetic::{StDtype, TINY_VOCAB, blocks_for, tiny_qwen2};
use crate::{Device, WeightMode, default_device, load_model, load_model_as};
use anyhow::{Result, ensure};
use burn::tensor::{Tensor, TensorData};
use std::path::Path;

/// The block types the device reads (the reference pair stores Q4_K, Q5_0, Q6_K and Q8_0).
const TYPES: [GgmlType; 8] = [
    GgmlType::Q8_0,
    GgmlType::Q4_0,
    GgmlType::Q5_0,
    GgmlType::Q4K,
    GgmlType::Q5K,
    GgmlType::Q6K,
    GgmlType::F16,
    GgmlType::BF16,
];
/// Columns of the test matrices: two K-quant blocks, sixteen 32-value blocks (a product cube
/// of two warps).
const COLS: usize = 512;
/// Wider rows for the types of the pair's largest matrices: a product cube of four warps.
const WIDE_COLS: usize = 2048;
const WIDE_TYPES: [GgmlType; 2] = [GgmlType::Q4K, GgmlType::Q6K];
/// Rows of the type under test, then rows of Q8_0 below them (a fused q/k/v mixes types).
const PART_ROWS: [usize; 2] = [24, 16];
/// Row counts of the products compared: those of the other kernels, and a prompt of 40 rows
/// (the product's two passes of 32 rows, the second partial).
const PRODUCT_ROWS: [usize; 4] = [ROWS[0], ROWS[1], ROWS[2], 40];
const WIDEST: usize = PRODUCT_ROWS[3];

/// `rows` rows of `ty` blocks: uniform values through ggml's reference quantizers, the
/// K-quants as random blocks ([`blocks_for`]).
fn blocks_of(ty: GgmlType, rows: usize, cols: usize, seed: u64) -> Result<Vec<u8>> {
    blocks_for(ty, &uniform(rows * cols, 1.0, seed), seed)
}

/// `x W^T + bias` of the first `n` rows of `x` (`cols` wide), in f64, on the host's
/// dequantized `w`.
fn product_reference(w: &[f32], x: &[f32], bias: &[f32], cols: usize, n: usize) -> Vec<f32> {
    let out = bias.len();
    (0..n)
        .flat_map(|r| {
            let xr = &x[r * cols..(r + 1) * cols];
            (0..out).map(move |o| {
                let dot: f64 = w[o * cols..(o + 1) * cols].iter().zip(xr).map(|(a, b)| *a as f64 * *b as f64).sum();
                (dot + bias[o] as f64) as f32
            })
        })
        .collect()
}

/// The product of `blocks` with the first `n` rows of `x` on the device, back on the host.
fn product_on(device: &Device, blocks: &DeviceBlocks, x: &[f32], bias: &[f32], n: usize) -> Vec<f32> {
    let cols = x.len() / WIDEST;
    let xt = Tensor::<3>::from_data(TensorData::new(x[..n * cols].to_vec(), [1, n, cols]), device);
    let bt = Tensor::<1>::from_data(TensorData::new(bias.to_vec(), [bias.len()]), device);
    blocks.matmul(xt, Some(&bt)).into_data().try_to_vec::<f32>().expect("f32 outputs")
}

/// One type at `cols` columns: the product's worst difference, the lookup's, and the broken
/// matrix's.
fn type_check(device: &Device, ty: GgmlType, cols: usize, seed: u64) -> Result<[f32; 3]> {
    let parts = vec![
        QuantPart::rows(ty, PART_ROWS[0], blocks_of(ty, PART_ROWS[0], cols, seed)?),
        QuantPart::rows(GgmlType::Q8_0, PART_ROWS[1], blocks_of(GgmlType::Q8_0, PART_ROWS[1], cols, seed + 1)?),
    ];
    let q = QuantMatrix::new(parts.clone(), cols)?;
    let w = q.to_f32();
    let out = q.rows();
    let x = uniform(WIDEST * cols, 1.0, seed + 2);
    let bias = uniform(out, 0.5, seed + 3);
    let on_device = DeviceBlocks::upload(&q, device)?;
    let back = on_device.to_host()?;
    ensure!(
        back.rows() == out && (0..out).all(|o| back.row_blocks(o) == q.row_blocks(o)),
        "{ty:?}: the blocks read back from the device differ from those uploaded"
    );
    let worst = over_these_row_counts(
        &PRODUCT_ROWS,
        &format!("{ty:?} product"),
        |n| product_on(device, &on_device, &x, &bias, n),
        |n| product_reference(&w, &x, &bias, cols, n),
    )?;
    let ids = [out as u32 - 1, 0, 17, PART_ROWS[0] as u32, 5];
    let looked_up = on_device.lookup(&ids).into_data().try_to_vec::<f32>().expect("f32 rows");
    let want: Vec<f32> = ids.iter().flat_map(|&i| w[i as usize * cols..][..cols].to_vec()).collect();
    let lookup = max_abs_diff(&looked_up, &want);
    // Broken: every row of the first part read one block further on.
    let mut shifted = parts;
    shifted[0].data.rotate_left(ty.block().1);
    let broken = DeviceBlocks::upload(&QuantMatrix::new(shifted, cols)?, device)?;
    let caught = max_abs_diff(
        &product_on(device, &broken, &x, &bias, ROWS[1]),
        &product_reference(&w, &x, &bias, cols, ROWS[1]),
    );
    Ok([worst, lookup, caught])
}

/// Each row of `x` (`COLS` wide) RMS-normalised with `weight`, in f64.
fn normed_reference(x: &[f32], weight: &[f32], eps: f64) -> Vec<f64> {
    x.chunks_exact(COLS)
        .flat_map(|row| {
            let inv = 1.0 / (row.iter().map(|&v| v as f64 * v as f64).sum::<f64>() / COLS as f64 + eps).sqrt();
            row.iter().zip(weight).map(move |(&v, &g)| v as f64 * inv * g as f64)
        })
        .collect()
}

/// What the fused products compute, in f64 on the host's dequantized `w` (`rows` rows): the
/// first `n` rows of `x` normalised with `norm`, times `w`, then `silu(gate) * up` of the two
/// halves and plus `residual`.
fn fused_reference(w: &[f32], x: &[f32], norm: &[f32], residual: &[f32], n: usize) -> Vec<f32> {
    let xs = normed_reference(&x[..n * COLS], norm, EPS);
    let half = w.len() / COLS / 2;
    let dot = |r: usize, o: usize| -> f64 {
        w[o * COLS..(o + 1) * COLS].iter().zip(&xs[r * COLS..(r + 1) * COLS]).map(|(a, b)| *a as f64 * b).sum()
    };
    (0..n)
        .flat_map(|r| {
            (0..half).map(move |o| {
                let (g, u) = (dot(r, o), dot(r, half + o));
                (g / (1.0 + (-g).exp()) * u + residual[r * half + o] as f64) as f32
            })
        })
        .collect()
}

const EPS: f64 = 1e-6;

/// The fused product (the norm, SwiGLU and the residual in one launch) on a Q4_K-above-Q8_0
/// matrix: the worst difference over 1, 5, 16 and 40 rows, and that of the broken call (the norm's
/// weight read one element off).
fn fused_check(device: &Device) -> Result<(f32, f32)> {
    let parts = vec![
        QuantPart::rows(GgmlType::Q4K, PART_ROWS[0], blocks_of(GgmlType::Q4K, PART_ROWS[0], COLS, 7)?),
        QuantPart::rows(GgmlType::Q8_0, PART_ROWS[0], blocks_of(GgmlType::Q8_0, PART_ROWS[0], COLS, 8)?),
    ];
    let q = QuantMatrix::new(parts, COLS)?;
    let w = q.to_f32();
    let half = PART_ROWS[0];
    let x = uniform(WIDEST * COLS, 2.0, 9);
    let norm: Vec<f32> = uniform(COLS, 0.5, 10).into_iter().map(|g| 1.0 + g).collect();
    let residual = uniform(WIDEST * half, 1.0, 11);
    let blocks = DeviceBlocks::upload(&q, device)?;
    let call = |norm: &[f32], n: usize| -> Vec<f32> {
        let xt = Tensor::<3>::from_data(TensorData::new(x[..n * COLS].to_vec(), [1, n, COLS]), device);
        let nt = Tensor::<1>::from_data(TensorData::new(norm.to_vec(), [COLS]), device);
        let rt = Tensor::<3>::from_data(TensorData::new(residual[..n * half].to_vec(), [1, n, half]), device);
        let fused = Fused { norm: Some((&nt, EPS)), glu: true, residual: Some(rt), ..Fused::default() };
        blocks.product(xt, fused).into_data().try_to_vec::<f32>().expect("f32 outputs")
    };
    let reference = |n: usize| fused_reference(&w, &x, &norm, &residual, n);
    let worst = over_these_row_counts(&PRODUCT_ROWS, "fused product", |n| call(&norm, n), reference)?;
    let mut shifted = norm.clone();
    shifted.rotate_left(1);
    Ok((worst, max_abs_diff(&call(&shifted, ROWS[1]), &reference(ROWS[1]))))
}

/// A tiny Qwen2-shaped GGUF model (biases included) in `ty` blocks, on the CPU's native path,
/// in blocks on the device, and with every other layer's attention placed on the device: the
/// worst logit difference from the CPU over a prefill, a step and a 4-row verification.
fn tiny_model(device: &Device, dir: &Path, ty: GgmlType) -> Result<f32> {
    let path = write_tiny_gguf(dir, &tiny_qwen2(TINY_VOCAB), 41, ty)?;
    let cpu = load_model_as(&path, None, &default_device(), WeightMode::Native)?;
    let dev = load_model_as(&path, None, device, WeightMode::Native)?;
    ensure!(dev.model.is_native(), "{ty:?}: the device model was not loaded in blocks");
    // EasySpec's placement: every other layer's attention (its blocks) moved to the device.
    let placed = load_model_as(&path, None, &default_device(), WeightMode::Native)?
        .model
        .place_attention(&[default_device(), device.clone()])?;
    Ok(nan_max(forward_diff(&cpu.model, &dev.model)?, forward_diff(&cpu.model, &placed)?))
}

/// The worst logit difference between two models over a prefill, a step and a 4-row
/// verification.
fn forward_diff(a: &crate::Transformer, b: &crate::Transformer) -> Result<f32> {
    let (mut ca, mut cb) = (a.new_cache(1), b.new_cache(1));
    let mut worst = 0f32;
    for chunk in [tokens(9, 1), vec![5], tokens(4, 2)] {
        worst = nan_max(worst, rows_diff(&rows(&a.forward(&chunk, &mut ca)?), &rows(&b.forward(&chunk, &mut cb)?))?);
    }
    Ok(worst)
}

/// A tiny Qwen2-shaped safetensors model stored as `dtype` (16-bit floats): its matrices stay
/// in 16 bits on the device (the default weight mode) and give the CPU's f32 logits.
fn half_model(device: &Device, dir: &Path, dtype: StDtype) -> Result<f32> {
    let path = write_tiny_as(dir, &tiny_qwen2(TINY_VOCAB), 43, dtype)?;
    let (cpu, dev) = (load_model(&path, None, &default_device())?, load_model(&path, None, device)?);
    ensure!(!cpu.model.is_native(), "{dtype:?}: the CPU took a block path for a safetensors model");
    ensure!(dev.model.is_native(), "{dtype:?}: the device model did not keep its matrices in 16 bits");
    forward_diff(&cpu.model, &dev.model)
}

/// Bytes of quants (and high bits) in 4 chunks of each type: what a warp's first pass must
/// request, no more, no less.
fn quant_bytes(ty: GgmlType) -> usize {
    match ty {
        GgmlType::Q8_0 => 128,
        GgmlType::Q4_0 | GgmlType::Q4K => 64,
        GgmlType::Q5_0 => 80,
        GgmlType::Q5K | GgmlType::Q6K => 96,
        _ => 256,
    }
}

/// What one warp's quant loads request and touch: `(bytes requested, bytes of the 32-byte
/// sectors the loaded words lie in)`, over its first pass (loads at `(low, high)` byte
/// addresses, 4 bytes each, read as the one or two aligned words they straddle).
pub(crate) fn warp_bytes(loads: &[(u32, u32)]) -> (usize, usize) {
    let starts = loads.iter().flat_map(|&(low, high)| [low, high]).filter(|&at| at != crate::cube::NO_WORD);
    let (mut requested, mut sectors) = (std::collections::BTreeSet::new(), std::collections::BTreeSet::new());
    for at in starts {
        requested.extend(at..at + 4);
        sectors.insert(at / 32);
        sectors.insert((at + 3) / 32);
    }
    (requested.len(), 32 * sectors.len())
}

/// A warp's first pass over each type's row ([`crate::cube::warp_quad_loads`], the product's
/// own index functions on the device): it must request exactly 4 chunks' quants and use at
/// least 60% of the sectors it touches (the one-chunk-a-unit layout used 3%). Returns each
/// type's fraction.
fn warp_loads(device: &Device) -> Result<String> {
    let mut used = Vec::new();
    for ty in TYPES {
        let (requested, touched) = warp_bytes(&crate::cube::warp_quad_loads(ty, device));
        ensure!(
            requested == quant_bytes(ty),
            "{ty:?}: a warp's first pass requests {requested} bytes, not 4 chunks' {}",
            quant_bytes(ty)
        );
        let fraction = requested as f64 / touched as f64;
        ensure!(fraction >= 0.6, "{ty:?}: a warp's loads use {requested} of the {touched} bytes they touch");
        used.push(format!("{ty:?} {requested}/{touched}"));
    }
    Ok(used.join(", "))
}

pub(super) fn gguf_blocks(device: &Device, dir: &Path, tol: f32) -> Result<Check> {
    let loads = warp_loads(device)?;
    let (mut worst, mut lookup, mut caught) = (0f32, 0f32, f32::INFINITY);
    let widths = TYPES.map(|ty| (ty, COLS)).into_iter().chain(WIDE_TYPES.map(|ty| (ty, WIDE_COLS)));
    for (i, (ty, cols)) in widths.enumerate() {
        let [w, l, c] = type_check(device, ty, cols, 100 + 10 * i as u64)?;
        ensure!(c > tol, "{ty:?}: rows read one block off moved the product by only {c:e}: the check cannot fail");
        (worst, lookup, caught) = (nan_max(worst, w), nan_max(lookup, l), caught.min(c));
    }
    let (fused, fused_caught) = fused_check(device)?;
    ensure!(
        fused_caught > tol,
        "a norm weight read one element off moved the fused product by only {fused_caught:e}: the check cannot fail"
    );
    let mut model = 0f32;
    for ty in [GgmlType::Q8_0, GgmlType::Q5_0] {
        model = nan_max(model, tiny_model(device, dir, ty)?);
    }
    let half = nan_max(half_model(device, dir, StDtype::F16)?, half_model(device, dir, StDtype::BF16)?);
    Ok(numeric(
        "gguf_blocks",
        [lookup, fused, model, half].into_iter().fold(worst, nan_max),
        tol,
        &format!(
            "products of {} blocks (each above 16 Q8_0 rows, 512 columns, with a bias; Q4_K and Q6_K at 2048 too) at 1/5/16/40 rows (passes of 8 and of 32 rows) against \
             f64 on the host's dequantized matrix, worst {worst:.1e}, every row bitwise equal across call sizes; \
             row lookups {lookup:.1e} from the host's decoding; blocks read back unchanged; rows read one block \
             off caught ({caught:.1e} away at least); the fused product (RMSNorm, SwiGLU and the residual of \
             Q4_K gate and Q8_0 up rows) {fused:.1e}, a norm weight one element off caught ({fused_caught:.1e}); \
             a tiny Qwen2 GGUF in Q8_0 and Q5_0 blocks on the device, and with its attentions placed on the \
             device every other layer, against the CPU's native path {model:.1e}; a tiny Qwen2 safetensors \
             model in F16 and BF16, kept in 16 bits on the device, against the CPU's f32 path {half:.1e}; \
             a warp's first pass requests exactly 4 chunks' quants, bytes used of those its loads touch: {loads}",
            TYPES.map(|t| format!("{t:?}")).join(", ")
        ),
    ))
}
