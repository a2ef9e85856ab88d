//! x86 kernels of the integer arithmetic defined in [`super::int`]: AVX2 (`vpmaddubsw`,
//! `vpmaddwd`, 32-byte vectors: lanes 0..8 and 8..16 in two registers) and AVX-512 with VNNI
//! (`vpdpbusd`, `vpdpwssd`, 64-byte vectors: all 16 lanes in one register).
//!
//! They read the GGUF blocks as stored: each block's values are unpacked in registers
//! ([`blocks`]) and its scales decoded once, then serve up to 8 (AVX-512) or 4 (AVX2)
//! activation rows, so a weight byte is read once per tile of rows and never written back.
//! Each block's integer total is summed exactly from the lanes, then the reference's float
//! steps run in its order, so both kernels give the portable path's bits. The runtime stores
//! weights as panels ([`super::panel`]) on every x86 path; these kernels serve weights stored
//! as rows (`SPECX_PANELS=0`), the AVX-VNNI path with the AVX2 kernels.

use super::act::{Q8KRows, Q80Rows, QK_K, QK8_0, QuantizedInput};
use super::int_x86_blocks as blocks;
use super::int_x86_blocks::{KScales, Q4_0, Q4K, Q5_0, Q5K, Q6K, Q8_0};
use super::path::IntPath;
use crate::gguf::GgmlType;
use std::arch::x86_64::*;

/// Activation rows per pass over a weight row: AVX-512 has 32 vector registers (8 rows: 16
/// accumulators), AVX2 16 (4 rows).
const TILE_512: usize = 8;
const TILE_256: usize = 4;

/// Dot products of one weight row (`row`: whole blocks of `ty`) with every activation row
/// (`out[r]` for row r) on `path` (AVX2 or AVX-512).
///
/// # Safety
/// The CPU must support `path` (the caller checks [`IntPath::supported`] once per call).
pub unsafe fn row_dots(path: IntPath, ty: GgmlType, row: &[u8], x: &QuantizedInput, out: &mut [f32]) {
    // SAFETY: as rows_dots.
    unsafe { rows_dots(path, ty, row, row.len(), x, out) }
}

/// [`row_dots`] for consecutive weight rows of one type (`rows`: `row_bytes` each; `out`:
/// each row's dots with every activation row, row after row): the type and path are matched
/// once, then each row's tiles of activation rows run in one loop (the draft's rows are
/// short: a dispatch per row cost a measurable share of its arithmetic).
///
/// # Safety
/// As [`row_dots`].
pub unsafe fn rows_dots(
    path: IntPath,
    ty: GgmlType,
    rows: &[u8],
    row_bytes: usize,
    x: &QuantizedInput,
    out: &mut [f32],
) {
    let avx512 = path == IntPath::Avx512Vnni;
    // SAFETY: the caller guarantees the path's instructions.
    unsafe {
        macro_rules! each {
            ($t:expr) => {
                if avx512 {
                    rows512::<{ $t }>(rows, row_bytes, x, out)
                } else {
                    rows256::<{ $t }>(rows, row_bytes, x, out)
                }
            };
        }
        match ty {
            GgmlType::Q4K => each!(Q4K),
            GgmlType::Q5K => each!(Q5K),
            GgmlType::Q6K => each!(Q6K),
            GgmlType::Q4_0 => each!(Q4_0),
            GgmlType::Q5_0 => each!(Q5_0),
            GgmlType::Q8_0 => each!(Q8_0),
            _ => unreachable!("{ty:?} has no integer kernel"),
        }
    }
}

#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c")]
unsafe fn rows512<const T: u8>(rows: &[u8], row_bytes: usize, x: &QuantizedInput, out: &mut [f32]) {
    let m = out.len() / (rows.len() / row_bytes);
    for (row, dst) in rows.chunks_exact(row_bytes).zip(out.chunks_exact_mut(m)) {
        for (i, d) in dst.chunks_mut(TILE_512).enumerate() {
            let r0 = i * TILE_512;
            // SAFETY: the features are enabled; the kernels check what they read.
            unsafe {
                match d.len() {
                    8 => dots512::<T, 8>(row, x, r0, d),
                    7 => dots512::<T, 7>(row, x, r0, d),
                    6 => dots512::<T, 6>(row, x, r0, d),
                    5 => dots512::<T, 5>(row, x, r0, d),
                    4 => dots512::<T, 4>(row, x, r0, d),
                    3 => dots512::<T, 3>(row, x, r0, d),
                    2 => dots512::<T, 2>(row, x, r0, d),
                    _ => dots512::<T, 1>(row, x, r0, d),
                }
            }
        }
    }
}

#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn rows256<const T: u8>(rows: &[u8], row_bytes: usize, x: &QuantizedInput, out: &mut [f32]) {
    let m = out.len() / (rows.len() / row_bytes);
    for (row, dst) in rows.chunks_exact(row_bytes).zip(out.chunks_exact_mut(m)) {
        for (i, d) in dst.chunks_mut(TILE_256).enumerate() {
            let r0 = i * TILE_256;
            // SAFETY: the features are enabled; the kernels check what they read.
            unsafe {
                match d.len() {
                    4 => dots256::<T, 4>(row, x, r0, d),
                    3 => dots256::<T, 3>(row, x, r0, d),
                    2 => dots256::<T, 2>(row, x, r0, d),
                    _ => dots256::<T, 1>(row, x, r0, d),
                }
            }
        }
    }
}

#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c")]
unsafe fn dots512<const T: u8, const R: usize>(row: &[u8], x: &QuantizedInput, r0: usize, out: &mut [f32]) {
    // SAFETY: the features are enabled; the kernels check what they read.
    let got: [f32; R] = unsafe {
        if blocks::is_k(T) {
            k_avx512::<T, R>(row, x.k.as_ref().expect("Q8_K input"), r0)
        } else {
            b32_avx512::<T, R>(row, x.b32.as_ref().expect("Q8_0 input"), r0)
        }
    };
    out.copy_from_slice(&got);
}

#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn dots256<const T: u8, const R: usize>(row: &[u8], x: &QuantizedInput, r0: usize, out: &mut [f32]) {
    // SAFETY: as dots512.
    let got: [f32; R] = unsafe {
        if blocks::is_k(T) {
            k_avx2::<T, R>(row, x.k.as_ref().expect("Q8_K input"), r0)
        } else {
            b32_avx2::<T, R>(row, x.b32.as_ref().expect("Q8_0 input"), r0)
        }
    };
    out.copy_from_slice(&got);
}

/// The exact sum of 8 i32 lanes (any order: the reference's block totals fit in i32).
#[inline]
#[target_feature(enable = "avx2")]
fn hsum8(v: __m256i) -> i32 {
    let s = _mm_add_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
    let s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0b01_00_11_10));
    let s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0b10_11_00_01));
    _mm_cvtsi128_si32(s)
}

/// The exact sum of 16 i32 lanes.
#[inline]
#[target_feature(enable = "avx512f,avx2")]
fn hsum16(v: __m512i) -> i32 {
    hsum8(_mm256_add_epi32(_mm512_castsi512_si256(v), _mm512_extracti64x4_epi64(v, 1)))
}

/// The reference's float steps for one block: `acc = fma(d_w d_x, t, acc)`, then (Q4_K/Q5_K)
/// `acc = fma(-(dmin_w d_x), m, acc)`.
#[inline(always)]
fn block_step(acc: f32, dd: f32, t: i32, dm: Option<(f32, i32)>) -> f32 {
    let acc = dd.mul_add(t as f32, acc);
    match dm {
        Some((dm, m)) => dm.mul_add(m as f32, acc),
        None => acc,
    }
}

/// Block count of `row` for type `T`, checking it holds whole blocks matching `cols`.
fn row_blocks<const T: u8>(row: &[u8], cols: usize) -> usize {
    let (per, size) = blocks::ty(T).block();
    assert!(
        row.len().is_multiple_of(size) && row.len() / size * per == cols,
        "weight row of {} bytes for {cols} values",
        row.len()
    );
    row.len() / size
}

/// Row `r`'s activation data pointers for `x` (checks the row exists).
fn k_row(x: &Q8KRows, r: usize) -> (*const i8, *const i16, &[f32]) {
    assert!(r < x.rows, "activation row {r} of {}", x.rows);
    let b0 = r * x.blocks;
    (x.qs[b0 * QK_K..].as_ptr(), x.bsums[b0 * 16..].as_ptr(), &x.d[b0..b0 + x.blocks])
}

fn b32_row(x: &Q80Rows, r: usize) -> (*const i8, *const i32, &[f32]) {
    assert!(r < x.rows, "activation row {r} of {}", x.rows);
    let b0 = r * x.blocks;
    (x.qs[b0 * QK8_0..].as_ptr(), x.sums4[b0 * 8..].as_ptr(), &x.d[b0..b0 + x.blocks])
}

/// K family, AVX2: chunk `c` (32 values) goes to `s0` (c even) or `s1` (c odd).
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn k_avx2<const T: u8, const R: usize>(row: &[u8], x: &Q8KRows, r0: usize) -> [f32; R] {
    let nb = row_blocks::<T>(row, x.blocks * QK_K);
    let size = blocks::ty(T).block().1;
    let rows: [(*const i8, *const i16, &[f32]); R] = std::array::from_fn(|j| k_row(x, r0 + j));
    // From an i32 lane holding (sc[2c], sc[2c+1]): sc[2c] in i16 lanes 0..8, sc[2c+1] in 8..16.
    let spread = _mm256_setr_epi8(
        0, 1, 0, 1, 0, 1, 0, 1, 0, 1, 0, 1, 0, 1, 0, 1, 2, 3, 2, 3, 2, 3, 2, 3, 2, 3, 2, 3, 2, 3, 2, 3,
    );
    let mut acc = [0f32; R];
    for b in 0..nb {
        // SAFETY: block b lies inside `row` (row_blocks); activation pointers stay inside
        // block b of their rows (k_row checks the row, `x.blocks == nb`).
        unsafe {
            let blk = row.as_ptr().add(b * size);
            let ks: KScales = blocks::k_scales::<T>(blk);
            let mut s0 = [_mm256_setzero_si256(); R];
            let mut s1 = [_mm256_setzero_si256(); R];
            for c in 0..8 {
                let qv = blocks::k_chunk256::<T>(blk, c);
                let scv =
                    _mm256_shuffle_epi8(_mm256_permutevar8x32_epi32(ks.sc16, _mm256_set1_epi32(c as i32)), spread);
                for j in 0..R {
                    let xv = _mm256_loadu_si256(rows[j].0.add(b * QK_K + 32 * c).cast());
                    let t = _mm256_madd_epi16(_mm256_maddubs_epi16(qv, xv), scv);
                    if c % 2 == 0 {
                        s0[j] = _mm256_add_epi32(s0[j], t);
                    } else {
                        s1[j] = _mm256_add_epi32(s1[j], t);
                    }
                }
            }
            for j in 0..R {
                let corr = _mm256_madd_epi16(ks.mn16, _mm256_loadu_si256(rows[j].1.add(b * 16).cast()));
                let dx = rows[j].2[b];
                let t = hsum8(_mm256_add_epi32(s0[j], s1[j]));
                let m = hsum8(corr);
                acc[j] = if blocks::float_mins(T) {
                    block_step(acc[j], ks.d * dx, t, Some((-(ks.dmin * dx), m)))
                } else {
                    block_step(acc[j], ks.d * dx, t - m, None)
                };
            }
        }
    }
    acc
}

/// K family, AVX-512 VNNI: each 64-byte span holds chunks 2s (lanes 0..8) and 2s+1 (8..16).
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c")]
unsafe fn k_avx512<const T: u8, const R: usize>(row: &[u8], x: &Q8KRows, r0: usize) -> [f32; R] {
    let nb = row_blocks::<T>(row, x.blocks * QK_K);
    let size = blocks::ty(T).block().1;
    let rows: [(*const i8, *const i16, &[f32]); R] = std::array::from_fn(|j| k_row(x, r0 + j));
    // i16 lane k of span s takes scale 4s + k / 8.
    let idx: [__m512i; 4] = std::array::from_fn(|s| {
        let v: [i16; 32] = std::array::from_fn(|k| (4 * s + k / 8) as i16);
        // SAFETY: 64 bytes read from a 64-byte array.
        unsafe { _mm512_loadu_si512(v.as_ptr().cast()) }
    });
    let mut acc = [0f32; R];
    for b in 0..nb {
        // SAFETY: as k_avx2.
        unsafe {
            let blk = row.as_ptr().add(b * size);
            let ks: KScales = blocks::k_scales::<T>(blk);
            let sc = _mm512_zextsi256_si512(ks.sc16);
            let mut s = [_mm512_setzero_si512(); R];
            for span in 0..4 {
                let qv = blocks::k_span512::<T>(blk, span);
                let scv = _mm512_permutexvar_epi16(idx[span], sc);
                for j in 0..R {
                    let xv = _mm512_loadu_si512(rows[j].0.add(b * QK_K + 64 * span).cast());
                    s[j] = _mm512_dpwssd_epi32(s[j], _mm512_maddubs_epi16(qv, xv), scv);
                }
            }
            for j in 0..R {
                let corr = _mm256_madd_epi16(ks.mn16, _mm256_loadu_si256(rows[j].1.add(b * 16).cast()));
                let dx = rows[j].2[b];
                let (t, m) = (hsum16(s[j]), hsum8(corr));
                acc[j] = if blocks::float_mins(T) {
                    block_step(acc[j], ks.d * dx, t, Some((-(ks.dmin * dx), m)))
                } else {
                    block_step(acc[j], ks.d * dx, t - m, None)
                };
            }
        }
    }
    acc
}

/// `log2(offset)` of type `T` as a shift count.
fn offset_shift<const T: u8>() -> __m128i {
    let offset = blocks::b32_offset(T);
    // SAFETY: SSE2 is part of x86_64.
    unsafe { _mm_cvtsi32_si128(offset.trailing_zeros() as i32) }
}

/// B32 family, AVX2: one block per 32-byte vector.
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn b32_avx2<const T: u8, const R: usize>(row: &[u8], x: &Q80Rows, r0: usize) -> [f32; R] {
    let nb = row_blocks::<T>(row, x.blocks * QK8_0);
    let size = blocks::ty(T).block().1;
    let shift = offset_shift::<T>();
    let rows: [(*const i8, *const i32, &[f32]); R] = std::array::from_fn(|j| b32_row(x, r0 + j));
    let ones = _mm256_set1_epi16(1);
    let mut acc = [0f32; R];
    for b in 0..nb {
        // SAFETY: as k_avx2.
        unsafe {
            let blk = row.as_ptr().add(b * size);
            let dw = blocks::f16_ptr(blk);
            for j in 0..R {
                let xv = _mm256_loadu_si256(rows[j].0.add(b * QK8_0).cast());
                let s = if T == Q8_0 {
                    // The signed weights (|w| <= 128 keeps pairs of |w| * |x| <= 127 unsaturated).
                    let signed = _mm256_loadu_si256(blk.add(2).cast());
                    _mm256_madd_epi16(_mm256_maddubs_epi16(_mm256_abs_epi8(signed), _mm256_sign_epi8(xv, signed)), ones)
                } else {
                    let dot = _mm256_madd_epi16(_mm256_maddubs_epi16(blocks::b32_block256::<T>(blk), xv), ones);
                    _mm256_sub_epi32(dot, _mm256_sll_epi32(_mm256_loadu_si256(rows[j].1.add(b * 8).cast()), shift))
                };
                acc[j] = block_step(acc[j], dw * rows[j].2[b], hsum8(s), None);
            }
        }
    }
    acc
}

/// B32 family, AVX-512 VNNI: blocks b (lanes 0..8) and b + 1 (8..16) per 64-byte vector; an odd
/// last block uses a 32-byte vector.
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c")]
unsafe fn b32_avx512<const T: u8, const R: usize>(row: &[u8], x: &Q80Rows, r0: usize) -> [f32; R] {
    let nb = row_blocks::<T>(row, x.blocks * QK8_0);
    let size = blocks::ty(T).block().1;
    let shift = offset_shift::<T>();
    let rows: [(*const i8, *const i32, &[f32]); R] = std::array::from_fn(|j| b32_row(x, r0 + j));
    let mut acc = [0f32; R];
    for p in 0..nb / 2 {
        let b = 2 * p;
        // SAFETY: blocks b and b + 1 exist (b + 1 < nb); pointers stay inside them.
        unsafe {
            let blk = row.as_ptr().add(b * size);
            let qv = blocks::b32_pair512::<T>(blk);
            let (dw0, dw1) = (blocks::f16_ptr(blk), blocks::f16_ptr(blk.add(size)));
            for j in 0..R {
                let xv = _mm512_loadu_si512(rows[j].0.add(b * QK8_0).cast());
                let dot = _mm512_dpbusd_epi32(_mm512_setzero_si512(), qv, xv);
                let s = _mm512_sub_epi32(dot, _mm512_sll_epi32(_mm512_loadu_si512(rows[j].1.add(b * 8).cast()), shift));
                let (t0, t1) = (hsum8(_mm512_castsi512_si256(s)), hsum8(_mm512_extracti64x4_epi64(s, 1)));
                acc[j] = block_step(acc[j], dw0 * rows[j].2[b], t0, None);
                acc[j] = block_step(acc[j], dw1 * rows[j].2[b + 1], t1, None);
            }
        }
    }
    if nb % 2 == 1 {
        let b = nb - 1;
        // SAFETY: block b exists; pointers stay inside it.
        unsafe {
            let blk = row.as_ptr().add(b * size);
            let qv = blocks::b32_block256::<T>(blk);
            let dw = blocks::f16_ptr(blk);
            for j in 0..R {
                let xv = _mm256_loadu_si256(rows[j].0.add(b * QK8_0).cast());
                let dot = _mm256_dpbusd_epi32(_mm256_setzero_si256(), qv, xv);
                let s = _mm256_sub_epi32(dot, _mm256_sll_epi32(_mm256_loadu_si256(rows[j].1.add(b * 8).cast()), shift));
                acc[j] = block_step(acc[j], dw * rows[j].2[b], hsum8(s), None);
            }
        }
    }
    acc
}
