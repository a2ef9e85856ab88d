//! x86 kernels of the integer arithmetic defined in [`super::int`]: AVX2 (`vpmaddubsw`,
//! `vpmaddwd`, 32-byte vectors: lanes 0..8 and 8..16 in two registers) and AVX-512 with VNNI
//! (`vpdpbusd`, `vpdpwssd`, 64-byte vectors: all 16 lanes in one register). One weight row
//! meets up to [`TILE`] activation rows at a time, so its values and scales are loaded once for
//! all of them. Integer lanes are exact and the float steps are the reference's, in its order,
//! so both kernels give the portable path's bits.

use super::act::{Q80Rows, Q8KRows, QK8_0, QK_K};
use super::int::{IntPath, QuantizedInput};
use super::unpack::{Family, UnpackedRow};
use std::arch::x86_64::*;

/// Activation rows per pass over a weight row.
const TILE: usize = 4;

pub fn avx2_available() -> bool {
    is_x86_feature_detected!("avx2") && is_x86_feature_detected!("fma")
}

pub fn avx512_available() -> bool {
    avx2_available()
        && is_x86_feature_detected!("avx512f")
        && is_x86_feature_detected!("avx512bw")
        && is_x86_feature_detected!("avx512vl")
        && is_x86_feature_detected!("avx512vnni")
}

/// Dot products of `w` with every activation row (`out[r]` for row r) on `path` (AVX2 or
/// AVX-512).
pub fn row_dots(path: IntPath, w: &UnpackedRow, x: &QuantizedInput, out: &mut [f32]) {
    assert!(path.supported(), "{} is not supported on this CPU", path.name());
    let avx512 = path == IntPath::Avx512Vnni;
    let mut r = 0;
    while r < out.len() {
        let n = (out.len() - r).min(TILE);
        let dst = &mut out[r..r + n];
        // SAFETY: the CPU supports the path's instructions (asserted above); the kernels check
        // every row index and length they read.
        unsafe {
            match (w.family.expect("an unpacked row"), n) {
                (Family::K { float_mins }, n) => {
                    let x = x.k.as_ref().expect("Q8_K input");
                    match (avx512, n) {
                        (true, 4) => dst.copy_from_slice(&k_avx512::<4>(w, x, r, float_mins)),
                        (true, 3) => dst.copy_from_slice(&k_avx512::<3>(w, x, r, float_mins)),
                        (true, 2) => dst.copy_from_slice(&k_avx512::<2>(w, x, r, float_mins)),
                        (true, _) => dst.copy_from_slice(&k_avx512::<1>(w, x, r, float_mins)),
                        (false, 4) => dst.copy_from_slice(&k_avx2::<4>(w, x, r, float_mins)),
                        (false, 3) => dst.copy_from_slice(&k_avx2::<3>(w, x, r, float_mins)),
                        (false, 2) => dst.copy_from_slice(&k_avx2::<2>(w, x, r, float_mins)),
                        (false, _) => dst.copy_from_slice(&k_avx2::<1>(w, x, r, float_mins)),
                    }
                }
                (Family::B32 { offset }, n) => {
                    let x = x.b32.as_ref().expect("Q8_0 input");
                    match (avx512, n) {
                        (true, 4) => dst.copy_from_slice(&b32_avx512::<4>(w, x, r, offset)),
                        (true, 3) => dst.copy_from_slice(&b32_avx512::<3>(w, x, r, offset)),
                        (true, 2) => dst.copy_from_slice(&b32_avx512::<2>(w, x, r, offset)),
                        (true, _) => dst.copy_from_slice(&b32_avx512::<1>(w, x, r, offset)),
                        (false, 4) => dst.copy_from_slice(&b32_avx2::<4>(w, x, r, offset)),
                        (false, 3) => dst.copy_from_slice(&b32_avx2::<3>(w, x, r, offset)),
                        (false, 2) => dst.copy_from_slice(&b32_avx2::<2>(w, x, r, offset)),
                        (false, _) => dst.copy_from_slice(&b32_avx2::<1>(w, x, r, offset)),
                    }
                }
            }
        }
        r += n;
    }
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

/// Row `r`'s activation data pointers for `x` (checks the row exists).
fn k_row(x: &Q8KRows, r: usize, blocks: usize) -> (*const i8, *const i16, &[f32]) {
    assert!(r < x.rows && x.blocks == blocks, "activation row {r} of {} ({} blocks, weight {blocks})", x.rows, x.blocks);
    let b0 = r * blocks;
    (x.qs[b0 * QK_K..].as_ptr(), x.bsums[b0 * 16..].as_ptr(), &x.d[b0..b0 + blocks])
}

fn b32_row(x: &Q80Rows, r: usize, blocks: usize) -> (*const i8, *const i32, &[f32]) {
    assert!(r < x.rows && x.blocks == blocks, "activation row {r} of {} ({} blocks, weight {blocks})", x.rows, x.blocks);
    let b0 = r * blocks;
    (x.qs[b0 * QK8_0..].as_ptr(), x.sums4[b0 * 8..].as_ptr(), &x.d[b0..b0 + blocks])
}

fn check_k(w: &UnpackedRow) {
    assert!(w.q.len() >= w.blocks * QK_K && w.sc.len() >= w.blocks * 16 && w.mn.len() >= w.blocks * 16 && w.d.len() >= w.blocks && w.dmin.len() >= w.blocks);
}

/// K family, AVX2: chunk `c` (32 values) goes to `s0` (c even) or `s1` (c odd).
#[target_feature(enable = "avx2,fma")]
unsafe fn k_avx2<const R: usize>(w: &UnpackedRow, x: &Q8KRows, r0: usize, float_mins: bool) -> [f32; R] {
    check_k(w);
    let rows: [(*const i8, *const i16, &[f32]); R] = std::array::from_fn(|j| k_row(x, r0 + j, w.blocks));
    // From an i32 lane holding (sc[2c], sc[2c+1]): sc[2c] in i16 lanes 0..8, sc[2c+1] in 8..16.
    let spread = _mm256_setr_epi8(0, 1, 0, 1, 0, 1, 0, 1, 0, 1, 0, 1, 0, 1, 0, 1, 2, 3, 2, 3, 2, 3, 2, 3, 2, 3, 2, 3, 2, 3, 2, 3);
    let mut acc0 = [_mm256_setzero_ps(); R];
    let mut acc1 = [_mm256_setzero_ps(); R];
    for b in 0..w.blocks {
        // SAFETY: every pointer below stays inside block b of the row (lengths checked above).
        unsafe {
            let q = w.q.as_ptr().add(b * QK_K);
            let sc16 = _mm256_loadu_si256(w.sc.as_ptr().add(b * 16).cast());
            let mn16 = _mm256_loadu_si256(w.mn.as_ptr().add(b * 16).cast());
            let mut s0 = [_mm256_setzero_si256(); R];
            let mut s1 = [_mm256_setzero_si256(); R];
            for c in 0..8 {
                let qv = _mm256_loadu_si256(q.add(32 * c).cast());
                let scv = _mm256_shuffle_epi8(_mm256_permutevar8x32_epi32(sc16, _mm256_set1_epi32(c as i32)), spread);
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
                let corr = _mm256_madd_epi16(mn16, _mm256_loadu_si256(rows[j].1.add(b * 16).cast()));
                let dx = rows[j].2[b];
                let dd = _mm256_set1_ps(w.d[b] * dx);
                if !float_mins {
                    s0[j] = _mm256_sub_epi32(s0[j], corr);
                }
                acc0[j] = _mm256_fmadd_ps(dd, _mm256_cvtepi32_ps(s0[j]), acc0[j]);
                acc1[j] = _mm256_fmadd_ps(dd, _mm256_cvtepi32_ps(s1[j]), acc1[j]);
                if float_mins {
                    let dm = _mm256_set1_ps(-(w.dmin[b] * dx));
                    acc0[j] = _mm256_fmadd_ps(dm, _mm256_cvtepi32_ps(corr), acc0[j]);
                }
            }
        }
    }
    std::array::from_fn(|j| reduce8(_mm256_add_ps(acc0[j], acc1[j])))
}

/// K family, AVX-512 VNNI: each 64-byte span holds chunks 2s (lanes 0..8) and 2s+1 (8..16).
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma")]
unsafe fn k_avx512<const R: usize>(w: &UnpackedRow, x: &Q8KRows, r0: usize, float_mins: bool) -> [f32; R] {
    check_k(w);
    let rows: [(*const i8, *const i16, &[f32]); R] = std::array::from_fn(|j| k_row(x, r0 + j, w.blocks));
    // i16 lane k of span s takes scale 4s + k / 8.
    let idx: [__m512i; 4] = std::array::from_fn(|s| {
        let v: [i16; 32] = std::array::from_fn(|k| (4 * s + k / 8) as i16);
        // SAFETY: 64 bytes read from a 64-byte array.
        unsafe { _mm512_loadu_si512(v.as_ptr().cast()) }
    });
    let mut acc = [_mm512_setzero_ps(); R];
    for b in 0..w.blocks {
        // SAFETY: every pointer below stays inside block b of the row (lengths checked above).
        unsafe {
            let q = w.q.as_ptr().add(b * QK_K);
            let sc = _mm512_zextsi256_si512(_mm256_loadu_si256(w.sc.as_ptr().add(b * 16).cast()));
            let mn16 = _mm256_loadu_si256(w.mn.as_ptr().add(b * 16).cast());
            let mut s = [_mm512_setzero_si512(); R];
            for span in 0..4 {
                let qv = _mm512_loadu_si512(q.add(64 * span).cast());
                let scv = _mm512_permutexvar_epi16(idx[span], sc);
                for j in 0..R {
                    let xv = _mm512_loadu_si512(rows[j].0.add(b * QK_K + 64 * span).cast());
                    s[j] = _mm512_dpwssd_epi32(s[j], _mm512_maddubs_epi16(qv, xv), scv);
                }
            }
            for j in 0..R {
                let corr = _mm256_madd_epi16(mn16, _mm256_loadu_si256(rows[j].1.add(b * 16).cast()));
                let dx = rows[j].2[b];
                if !float_mins {
                    s[j] = _mm512_sub_epi32(s[j], _mm512_zextsi256_si512(corr));
                }
                acc[j] = _mm512_fmadd_ps(_mm512_set1_ps(w.d[b] * dx), _mm512_cvtepi32_ps(s[j]), acc[j]);
                if float_mins {
                    let dm = _mm512_set1_ps(-(w.dmin[b] * dx));
                    let c = _mm512_cvtepi32_ps(_mm512_zextsi256_si512(corr));
                    acc[j] = _mm512_mask3_fmadd_ps(dm, c, acc[j], 0x00ff);
                }
            }
        }
    }
    std::array::from_fn(|j| reduce16(acc[j]))
}

fn check_b32(w: &UnpackedRow, offset: i32) -> __m128i {
    assert!(w.q.len() >= w.blocks * QK8_0 && w.d.len() >= w.blocks);
    assert!(offset > 0 && (offset as u32).is_power_of_two(), "offset {offset}");
    // SAFETY: SSE2 is part of x86_64.
    unsafe { _mm_cvtsi32_si128(offset.trailing_zeros() as i32) }
}

/// B32 family, AVX2: block b goes to `acc0` (b even) or `acc1` (b odd).
#[target_feature(enable = "avx2,fma")]
unsafe fn b32_avx2<const R: usize>(w: &UnpackedRow, x: &Q80Rows, r0: usize, offset: i32) -> [f32; R] {
    let shift = check_b32(w, offset);
    let rows: [(*const i8, *const i32, &[f32]); R] = std::array::from_fn(|j| b32_row(x, r0 + j, w.blocks));
    let ones = _mm256_set1_epi16(1);
    let flip = _mm256_set1_epi8(-128);
    let mut acc0 = [_mm256_setzero_ps(); R];
    let mut acc1 = [_mm256_setzero_ps(); R];
    for b in 0..w.blocks {
        // SAFETY: every pointer below stays inside block b of the row (lengths checked above).
        unsafe {
            let qv = _mm256_loadu_si256(w.q.as_ptr().add(b * QK8_0).cast());
            // Q8_0: the signed weights (|w| <= 128 keeps pairs of |w| * |x| <= 127 unsaturated).
            let signed = _mm256_xor_si256(qv, flip);
            let abs = _mm256_abs_epi8(signed);
            for j in 0..R {
                let xv = _mm256_loadu_si256(rows[j].0.add(b * QK8_0).cast());
                let s = if offset == 128 {
                    _mm256_madd_epi16(_mm256_maddubs_epi16(abs, _mm256_sign_epi8(xv, signed)), ones)
                } else {
                    let dot = _mm256_madd_epi16(_mm256_maddubs_epi16(qv, xv), ones);
                    _mm256_sub_epi32(dot, _mm256_sll_epi32(_mm256_loadu_si256(rows[j].1.add(b * 8).cast()), shift))
                };
                let dd = _mm256_set1_ps(w.d[b] * rows[j].2[b]);
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
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma")]
unsafe fn b32_avx512<const R: usize>(w: &UnpackedRow, x: &Q80Rows, r0: usize, offset: i32) -> [f32; R] {
    let shift = check_b32(w, offset);
    let rows: [(*const i8, *const i32, &[f32]); R] = std::array::from_fn(|j| b32_row(x, r0 + j, w.blocks));
    let mut acc = [_mm512_setzero_ps(); R];
    let pairs = w.blocks / 2;
    // Lanes 0..8 take product 0, lanes 8..16 product 1.
    let spread = _mm512_setr_epi32(0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1);
    for p in 0..pairs {
        let b = 2 * p;
        // SAFETY: blocks b and b + 1 exist (b + 1 < blocks); pointers stay inside them.
        unsafe {
            let qv = _mm512_loadu_si512(w.q.as_ptr().add(b * QK8_0).cast());
            let dw = _mm_castpd_ps(_mm_load_sd(w.d.as_ptr().add(b).cast()));
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
    if w.blocks % 2 == 1 {
        let b = w.blocks - 1;
        // SAFETY: block b exists; pointers stay inside it.
        unsafe {
            let qv = _mm256_loadu_si256(w.q.as_ptr().add(b * QK8_0).cast());
            for j in 0..R {
                let xv = _mm256_loadu_si256(rows[j].0.add(b * QK8_0).cast());
                let dot = _mm256_dpbusd_epi32(_mm256_setzero_si256(), qv, xv);
                let s = _mm256_sub_epi32(dot, _mm256_sll_epi32(_mm256_loadu_si256(rows[j].1.add(b * 8).cast()), shift));
                let dd = _mm256_set1_ps(w.d[b] * rows[j].2[b]);
                let lo = _mm256_fmadd_ps(dd, _mm256_cvtepi32_ps(s), _mm512_castps512_ps256(acc[j]));
                acc[j] = _mm512_castpd_ps(_mm512_insertf64x4(_mm512_castps_pd(acc[j]), _mm256_castps_pd(lo), 0));
            }
        }
    }
    std::array::from_fn(|j| reduce16(acc[j]))
}
