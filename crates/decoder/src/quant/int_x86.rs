//! x86 kernels of the integer arithmetic defined in [`super::int`]: AVX2 (`vpmaddubsw`,
//! `vpmaddwd`, 32-byte vectors: lanes 0..8 and 8..16 in two registers) and AVX-512 with VNNI
//! (`vpdpbusd`, `vpdpwssd`, 64-byte vectors: all 16 lanes in one register).
//!
//! They read the GGUF blocks as stored: each block's values are unpacked in registers
//! ([`blocks`]) and its scales decoded once, then serve up to 8 (AVX-512) or 4 (AVX2) activation rows, so a
//! weight byte is read once per tile of rows and never written back. Integer lanes
//! are exact and the float steps are the reference's, in its order, so both kernels give the
//! portable path's bits.

use super::act::{Q80Rows, Q8KRows, QK8_0, QK_K};
use super::int::{IntPath, QuantizedInput};
use super::int_x86_blocks as blocks;
use super::int_x86_blocks::{KScales, Q4K, Q4_0, Q5K, Q5_0, Q6K, Q8_0};
use crate::gguf::GgmlType;
use std::arch::x86_64::*;

/// Activation rows per pass over a weight row: AVX-512 has 32 vector registers (8 rows: 16
/// accumulators), AVX2 16 (4 rows).
const TILE_512: usize = 8;
const TILE_256: usize = 4;

pub fn avx2_available() -> bool {
    is_x86_feature_detected!("avx2") && is_x86_feature_detected!("fma") && is_x86_feature_detected!("f16c")
}

pub fn avx512_available() -> bool {
    avx2_available()
        && is_x86_feature_detected!("avx512f")
        && is_x86_feature_detected!("avx512bw")
        && is_x86_feature_detected!("avx512vl")
        && is_x86_feature_detected!("avx512vnni")
}

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
pub unsafe fn rows_dots(path: IntPath, ty: GgmlType, rows: &[u8], row_bytes: usize, x: &QuantizedInput, out: &mut [f32]) {
    let avx512 = path == IntPath::Avx512Vnni;
    // SAFETY: the caller guarantees the path's instructions.
    unsafe {
        macro_rules! each {
            ($t:expr) => {
                if avx512 { rows512::<{ $t }>(rows, row_bytes, x, out) } else { rows256::<{ $t }>(rows, row_bytes, x, out) }
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
        if blocks::is_k(T) { k_avx512::<T, R>(row, x.k.as_ref().expect("Q8_K input"), r0) } else { b32_avx512::<T, R>(row, x.b32.as_ref().expect("Q8_0 input"), r0) }
    };
    out.copy_from_slice(&got);
}

#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn dots256<const T: u8, const R: usize>(row: &[u8], x: &QuantizedInput, r0: usize, out: &mut [f32]) {
    // SAFETY: as dots512.
    let got: [f32; R] = unsafe {
        if blocks::is_k(T) { k_avx2::<T, R>(row, x.k.as_ref().expect("Q8_K input"), r0) } else { b32_avx2::<T, R>(row, x.b32.as_ref().expect("Q8_0 input"), r0) }
    };
    out.copy_from_slice(&got);
}

/// 8 lanes -> 1 in the reference's order (i + 4, then i + 2, then i + 1).
#[inline]
#[target_feature(enable = "avx2")]
fn reduce8(v: __m256) -> f32 {
    let v = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    let v = _mm_add_ps(v, _mm_movehl_ps(v, v));
    let v = _mm_add_ss(v, _mm_shuffle_ps(v, v, 1));
    _mm_cvtss_f32(v)
}

/// 16 lanes -> 1 in the reference's order.
#[inline]
#[target_feature(enable = "avx512f,avx2")]
fn reduce16(v: __m512) -> f32 {
    let lo = _mm512_castps512_ps256(v);
    let hi = _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(v), 1));
    reduce8(_mm256_add_ps(lo, hi))
}

/// Block count of `row` for type `T`, checking it holds whole blocks matching `cols`.
fn row_blocks<const T: u8>(row: &[u8], cols: usize) -> usize {
    let (per, size) = blocks::ty(T).block();
    assert!(row.len() % size == 0 && row.len() / size * per == cols, "weight row of {} bytes for {cols} values", row.len());
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
    let spread = _mm256_setr_epi8(0, 1, 0, 1, 0, 1, 0, 1, 0, 1, 0, 1, 0, 1, 0, 1, 2, 3, 2, 3, 2, 3, 2, 3, 2, 3, 2, 3, 2, 3, 2, 3);
    let mut acc0 = [_mm256_setzero_ps(); R];
    let mut acc1 = [_mm256_setzero_ps(); R];
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
                let scv = _mm256_shuffle_epi8(_mm256_permutevar8x32_epi32(ks.sc16, _mm256_set1_epi32(c as i32)), spread);
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
                let dd = _mm256_set1_ps(ks.d * dx);
                if !blocks::float_mins(T) {
                    s0[j] = _mm256_sub_epi32(s0[j], corr);
                }
                acc0[j] = _mm256_fmadd_ps(dd, _mm256_cvtepi32_ps(s0[j]), acc0[j]);
                acc1[j] = _mm256_fmadd_ps(dd, _mm256_cvtepi32_ps(s1[j]), acc1[j]);
                if blocks::float_mins(T) {
                    let dm = _mm256_set1_ps(-(ks.dmin * dx));
                    acc0[j] = _mm256_fmadd_ps(dm, _mm256_cvtepi32_ps(corr), acc0[j]);
                }
            }
        }
    }
    std::array::from_fn(|j| reduce8(_mm256_add_ps(acc0[j], acc1[j])))
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
    let mut acc = [_mm512_setzero_ps(); R];
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
                if !blocks::float_mins(T) {
                    s[j] = _mm512_sub_epi32(s[j], _mm512_zextsi256_si512(corr));
                }
                acc[j] = _mm512_fmadd_ps(_mm512_set1_ps(ks.d * dx), _mm512_cvtepi32_ps(s[j]), acc[j]);
                if blocks::float_mins(T) {
                    let dm = _mm512_set1_ps(-(ks.dmin * dx));
                    let c = _mm512_cvtepi32_ps(_mm512_zextsi256_si512(corr));
                    acc[j] = _mm512_mask3_fmadd_ps(dm, c, acc[j], 0x00ff);
                }
            }
        }
    }
    std::array::from_fn(|j| reduce16(acc[j]))
}

/// `log2(offset)` of type `T` as a shift count.
fn offset_shift<const T: u8>() -> __m128i {
    let offset = blocks::b32_offset(T);
    // SAFETY: SSE2 is part of x86_64.
    unsafe { _mm_cvtsi32_si128(offset.trailing_zeros() as i32) }
}

/// B32 family, AVX2: block b goes to `acc0` (b even) or `acc1` (b odd).
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn b32_avx2<const T: u8, const R: usize>(row: &[u8], x: &Q80Rows, r0: usize) -> [f32; R] {
    let nb = row_blocks::<T>(row, x.blocks * QK8_0);
    let size = blocks::ty(T).block().1;
    let shift = offset_shift::<T>();
    let rows: [(*const i8, *const i32, &[f32]); R] = std::array::from_fn(|j| b32_row(x, r0 + j));
    let ones = _mm256_set1_epi16(1);
    let mut acc0 = [_mm256_setzero_ps(); R];
    let mut acc1 = [_mm256_setzero_ps(); R];
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
                let dd = _mm256_set1_ps(dw * rows[j].2[b]);
                if b % 2 == 0 {
                    acc0[j] = _mm256_fmadd_ps(dd, _mm256_cvtepi32_ps(s), acc0[j]);
                } else {
                    acc1[j] = _mm256_fmadd_ps(dd, _mm256_cvtepi32_ps(s), acc1[j]);
                }
            }
        }
    }
    std::array::from_fn(|j| reduce8(_mm256_add_ps(acc0[j], acc1[j])))
}

/// B32 family, AVX-512 VNNI: blocks b (lanes 0..8) and b + 1 (8..16) per 64-byte vector; an odd
/// last block uses the low half alone.
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c")]
unsafe fn b32_avx512<const T: u8, const R: usize>(row: &[u8], x: &Q80Rows, r0: usize) -> [f32; R] {
    let nb = row_blocks::<T>(row, x.blocks * QK8_0);
    let size = blocks::ty(T).block().1;
    let shift = offset_shift::<T>();
    let rows: [(*const i8, *const i32, &[f32]); R] = std::array::from_fn(|j| b32_row(x, r0 + j));
    let mut acc = [_mm512_setzero_ps(); R];
    // Lanes 0..8 take product 0, lanes 8..16 product 1.
    let spread = _mm512_setr_epi32(0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1);
    for p in 0..nb / 2 {
        let b = 2 * p;
        // SAFETY: blocks b and b + 1 exist (b + 1 < nb); pointers stay inside them.
        unsafe {
            let blk = row.as_ptr().add(b * size);
            let qv = blocks::b32_pair512::<T>(blk);
            let dw = _mm_setr_ps(blocks::f16_ptr(blk), blocks::f16_ptr(blk.add(size)), 0.0, 0.0);
            for j in 0..R {
                let xv = _mm512_loadu_si512(rows[j].0.add(b * QK8_0).cast());
                let dot = _mm512_dpbusd_epi32(_mm512_setzero_si512(), qv, xv);
                let s = _mm512_sub_epi32(dot, _mm512_sll_epi32(_mm512_loadu_si512(rows[j].1.add(b * 8).cast()), shift));
                // (d_w[b] * d_x[b], d_w[b+1] * d_x[b+1]): the reference's two f32 products.
                let prods = _mm_mul_ps(dw, _mm_castpd_ps(_mm_load_sd(rows[j].2.as_ptr().add(b).cast())));
                let dd = _mm512_permutexvar_ps(spread, _mm512_castps128_ps512(prods));
                acc[j] = _mm512_fmadd_ps(dd, _mm512_cvtepi32_ps(s), acc[j]);
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
                let dd = _mm256_set1_ps(dw * rows[j].2[b]);
                let lo = _mm256_fmadd_ps(dd, _mm256_cvtepi32_ps(s), _mm512_castps512_ps256(acc[j]));
                acc[j] = _mm512_castpd_ps(_mm512_insertf64x4(_mm512_castps_pd(acc[j]), _mm256_castps_pd(lo), 0));
            }
        }
    }
    std::array::from_fn(|j| reduce16(acc[j]))
}
