//! AVX2 block decoders: the values of [`crate::gguf::dequantize`], eight at a time.
//!
//! Each value goes through the scalar decoder's operations in the same order: the quantized
//! integer is assembled exactly, converted to f32, then multiplied by the same f32 scale (and
//! the same f32 minimum subtracted, never fused into one rounding), so every value is
//! bit-identical to the loader's. The per-block scales are computed with the scalar code's
//! f32 arithmetic.

use crate::gguf::{GgmlType, f16_at, scale_min_k4};
use std::arch::x86_64::*;

/// Whether this CPU has what the decoders use (AVX2 for the integer work, F16C for F16).
pub fn available() -> bool {
    is_x86_feature_detected!("avx2") && is_x86_feature_detected!("fma") && is_x86_feature_detected!("f16c")
}

/// Eight bytes at `p`, zero-extended to 32-bit lanes.
#[inline]
#[target_feature(enable = "avx2")]
unsafe fn u8x8(p: *const u8) -> __m256i {
    // SAFETY: the caller guarantees 8 readable bytes at p.
    unsafe { _mm256_cvtepu8_epi32(_mm_loadl_epi64(p.cast())) }
}

/// `scale * q` (q converted to f32).
#[inline]
#[target_feature(enable = "avx2")]
fn scaled(q: __m256i, scale: f32) -> __m256 {
    _mm256_mul_ps(_mm256_cvtepi32_ps(q), _mm256_set1_ps(scale))
}

/// `scale * q - min`: two roundings, as the scalar code (never one fused multiply-add).
#[inline]
#[target_feature(enable = "avx2")]
fn scaled_min(q: __m256i, scale: f32, min: f32) -> __m256 {
    _mm256_sub_ps(_mm256_mul_ps(_mm256_set1_ps(scale), _mm256_cvtepi32_ps(q)), _mm256_set1_ps(min))
}

/// Stores eight values at `out + at`.
#[inline]
#[target_feature(enable = "avx2")]
unsafe fn put(out: *mut f32, at: usize, v: __m256) {
    // SAFETY: the caller sized the output for every value it decodes.
    unsafe { _mm256_storeu_ps(out.add(at), v) }
}

/// Decodes `src` (whole blocks of `ty`) into `dst`; false for a type without an AVX2 decoder.
///
/// # Safety
/// The CPU must support AVX2, FMA and F16C ([`available`]).
#[target_feature(enable = "avx2,fma,f16c")]
pub unsafe fn decode(ty: GgmlType, src: &[u8], dst: &mut [f32]) -> bool {
    let (per, bytes) = ty.block();
    assert_eq!(src.len() / bytes * per, dst.len(), "{ty:?}: {} bytes for {} values", src.len(), dst.len());
    if matches!(ty, GgmlType::F16 | GgmlType::BF16) {
        // SAFETY: two bytes per value in src.
        unsafe { halves(ty, src, dst) };
        return true;
    }
    // SAFETY: dst holds every value of src's blocks.
    unsafe { blocks(ty, src, dst) }
}

/// Decodes every block of `src` into `dst`; false for a type without a decoder here. Each
/// group of bytes is widened to 32-bit lanes once (a shuffle, the scarce operation here) and
/// serves every value it holds bits of.
#[inline]
#[target_feature(enable = "avx2,fma")]
unsafe fn blocks(ty: GgmlType, src: &[u8], dst: &mut [f32]) -> bool {
    let (per, bytes) = ty.block();
    let each = src.chunks_exact(bytes).zip(dst.chunks_exact_mut(per));
    // SAFETY (every arm): each block slice holds `bytes` bytes and each output `per` values,
    // what the decoders read and write.
    unsafe {
        match ty {
            GgmlType::Q4_0 => each.for_each(|(b, y)| q4_0(b, y.as_mut_ptr())),
            GgmlType::Q5_0 => each.for_each(|(b, y)| q5_0(b, y.as_mut_ptr())),
            GgmlType::Q8_0 => each.for_each(|(b, y)| q8_0(b, y.as_mut_ptr())),
            GgmlType::Q4K => each.for_each(|(b, y)| q4_k(b, y.as_mut_ptr())),
            GgmlType::Q5K => each.for_each(|(b, y)| q5_k(b, y.as_mut_ptr())),
            GgmlType::Q6K => each.for_each(|(b, y)| q6_k(b, y.as_mut_ptr())),
            _ => return false,
        }
    }
    true
}

/// Q4_0: 32 values, `y[j] = (lo(q[j]) - 8) d`, `y[j + 16] = (hi(q[j]) - 8) d`.
#[inline]
#[target_feature(enable = "avx2,fma")]
unsafe fn q4_0(b: &[u8], y: *mut f32) {
    let d = f16_at(b, 0);
    let (mask, eight) = (_mm256_set1_epi32(0x0f), _mm256_set1_epi32(8));
    for j in [0, 8] {
        // SAFETY: bytes 2 + j + 8 <= 18; outputs end at j + 24 <= 32.
        unsafe {
            let q = u8x8(b.as_ptr().add(2 + j));
            put(y, j, scaled(_mm256_sub_epi32(_mm256_and_si256(q, mask), eight), d));
            put(y, j + 16, scaled(_mm256_sub_epi32(_mm256_srli_epi32(q, 4), eight), d));
        }
    }
}

/// Q5_0: as Q4_0 with a 5th bit per value from the 32-bit `qh` (bit j for value j), offset 16.
#[inline]
#[target_feature(enable = "avx2,fma")]
unsafe fn q5_0(b: &[u8], y: *mut f32) {
    let d = f16_at(b, 0);
    let qh = _mm256_set1_epi32(u32::from_le_bytes([b[2], b[3], b[4], b[5]]) as i32);
    let (mask, one, sixteen) = (_mm256_set1_epi32(0x0f), _mm256_set1_epi32(1), _mm256_set1_epi32(16));
    for j in [0i32, 8] {
        let idx = _mm256_setr_epi32(j, j + 1, j + 2, j + 3, j + 4, j + 5, j + 6, j + 7);
        let bit = |shift: __m256i| _mm256_slli_epi32(_mm256_and_si256(_mm256_srlv_epi32(qh, shift), one), 4);
        let (lo5, hi5) = (bit(idx), bit(_mm256_add_epi32(idx, sixteen)));
        // SAFETY: bytes 6 + j + 8 <= 22; outputs end at j + 24 <= 32.
        unsafe {
            let q = u8x8(b.as_ptr().add(6 + j as usize));
            let lo = _mm256_sub_epi32(_mm256_or_si256(_mm256_and_si256(q, mask), lo5), sixteen);
            let hi = _mm256_sub_epi32(_mm256_or_si256(_mm256_srli_epi32(q, 4), hi5), sixteen);
            put(y, j as usize, scaled(lo, d));
            put(y, j as usize + 16, scaled(hi, d));
        }
    }
}

/// Q8_0: 32 signed bytes times d.
#[inline]
#[target_feature(enable = "avx2,fma")]
unsafe fn q8_0(b: &[u8], y: *mut f32) {
    let d = f16_at(b, 0);
    for j in (0..32).step_by(8) {
        // SAFETY: bytes 2 + j + 8 <= 34; outputs end at j + 8 <= 32.
        unsafe { put(y, j, scaled(_mm256_cvtepi8_epi32(_mm_loadl_epi64(b.as_ptr().add(2 + j).cast())), d)) }
    }
}

/// Q4_K: 256 values in four chunks of 64; in chunk c, low nibbles of 32 bytes are values
/// 64c..64c+32 (scale and min of sub-block 2c), high nibbles the next 32 (sub-block 2c + 1).
#[inline]
#[target_feature(enable = "avx2,fma")]
unsafe fn q4_k(b: &[u8], y: *mut f32) {
    let (d, dmin) = (f16_at(b, 0), f16_at(b, 2));
    let scales = &b[4..16];
    let mask = _mm256_set1_epi32(0x0f);
    for chunk in 0..4 {
        let (sc1, m1) = scale_min_k4(2 * chunk, scales);
        let (sc2, m2) = scale_min_k4(2 * chunk + 1, scales);
        let (d1, m1, d2, m2) = (d * sc1, dmin * m1, d * sc2, dmin * m2);
        for l in (0..32).step_by(8) {
            // SAFETY: bytes 16 + 32 chunk + l + 8 <= 144; outputs end at 64 chunk + 64 <= 256.
            unsafe {
                let q = u8x8(b.as_ptr().add(16 + 32 * chunk + l));
                put(y, 64 * chunk + l, scaled_min(_mm256_and_si256(q, mask), d1, m1));
                put(y, 64 * chunk + 32 + l, scaled_min(_mm256_srli_epi32(q, 4), d2, m2));
            }
        }
    }
}

/// Q5_K: Q4_K's layout plus 32 bytes of 5th bits: bit 2c of `qh[l]` for the low-nibble value
/// of chunk c, bit 2c + 1 for the high one.
#[inline]
#[target_feature(enable = "avx2,fma")]
unsafe fn q5_k(b: &[u8], y: *mut f32) {
    let (d, dmin) = (f16_at(b, 0), f16_at(b, 2));
    let scales = &b[4..16];
    let (mask, one) = (_mm256_set1_epi32(0x0f), _mm256_set1_epi32(1));
    for chunk in 0..4 {
        let (sc1, m1) = scale_min_k4(2 * chunk, scales);
        let (sc2, m2) = scale_min_k4(2 * chunk + 1, scales);
        let (d1, m1, d2, m2) = (d * sc1, dmin * m1, d * sc2, dmin * m2);
        let (s1, s2) = (_mm_cvtsi32_si128(2 * chunk as i32), _mm_cvtsi32_si128(2 * chunk as i32 + 1));
        for l in (0..32).step_by(8) {
            // SAFETY: qh bytes 16 + l + 8 <= 48, qs bytes 48 + 32 chunk + l + 8 <= 176;
            // outputs end at 64 chunk + 64 <= 256.
            unsafe {
                let h = u8x8(b.as_ptr().add(16 + l));
                let q = u8x8(b.as_ptr().add(48 + 32 * chunk + l));
                let h1 = _mm256_slli_epi32(_mm256_and_si256(_mm256_srl_epi32(h, s1), one), 4);
                let h2 = _mm256_slli_epi32(_mm256_and_si256(_mm256_srl_epi32(h, s2), one), 4);
                put(y, 64 * chunk + l, scaled_min(_mm256_add_epi32(_mm256_and_si256(q, mask), h1), d1, m1));
                put(y, 64 * chunk + 32 + l, scaled_min(_mm256_add_epi32(_mm256_srli_epi32(q, 4), h2), d2, m2));
            }
        }
    }
}

/// Q6_K: two halves of 128 values; in half h, byte l of `ql` (low nibble: value l, high:
/// l + 64), byte l + 32 (values l + 32, l + 96) and 2-bit fields of `qh[l]` (bits 0-1, 2-3,
/// 4-5, 6-7 for values l, l + 32, l + 64, l + 96); 8-bit scales per 16 values, offset 32.
#[inline]
#[target_feature(enable = "avx2,fma")]
unsafe fn q6_k(b: &[u8], y: *mut f32) {
    let d = f16_at(b, 208);
    let (mask, three, off) = (_mm256_set1_epi32(0x0f), _mm256_set1_epi32(3), _mm256_set1_epi32(32));
    let six = |low: __m256i, h: __m256i, shift: i32| {
        let high = _mm256_and_si256(_mm256_srl_epi32(h, _mm_cvtsi32_si128(shift)), three);
        _mm256_sub_epi32(_mm256_or_si256(low, _mm256_slli_epi32(high, 4)), off)
    };
    for half in 0..2 {
        let sc = &b[192 + 8 * half..200 + 8 * half];
        for l in (0..32).step_by(8) {
            let is = l / 16;
            let ds = |i: usize| d * (sc[i] as i8) as f32;
            // SAFETY: ql bytes 64 half + l + 32 + 8 <= 128, qh bytes 128 + 32 half + l + 8 <=
            // 192; outputs end at 128 half + 96 + l + 8 <= 256.
            unsafe {
                let a = u8x8(b.as_ptr().add(64 * half + l));
                let c = u8x8(b.as_ptr().add(64 * half + l + 32));
                let h = u8x8(b.as_ptr().add(128 + 32 * half + l));
                let out = 128 * half + l;
                put(y, out, scaled(six(_mm256_and_si256(a, mask), h, 0), ds(is)));
                put(y, out + 32, scaled(six(_mm256_and_si256(c, mask), h, 2), ds(is + 2)));
                put(y, out + 64, scaled(six(_mm256_srli_epi32(a, 4), h, 4), ds(is + 4)));
                put(y, out + 96, scaled(six(_mm256_srli_epi32(c, 4), h, 6), ds(is + 6)));
            }
        }
    }
}

/// F16 or BF16 values (exact conversions to f32).
#[target_feature(enable = "avx2,f16c")]
unsafe fn halves(ty: GgmlType, src: &[u8], dst: &mut [f32]) {
    match ty {
        GgmlType::F16 => f16s(src, dst),
        _ => bf16s(src, dst),
    }
}

#[target_feature(enable = "avx2,f16c")]
fn f16s(src: &[u8], dst: &mut [f32]) {
    let body = dst.len() / 8 * 8;
    for i in (0..body).step_by(8) {
        // SAFETY: values i..i+8 exist in both (2 bytes each in src).
        unsafe {
            _mm256_storeu_ps(dst.as_mut_ptr().add(i), _mm256_cvtph_ps(_mm_loadu_si128(src.as_ptr().add(2 * i).cast())))
        }
    }
    for i in body..dst.len() {
        dst[i] = f16_at(src, 2 * i);
    }
}

#[target_feature(enable = "avx2")]
fn bf16s(src: &[u8], dst: &mut [f32]) {
    let body = dst.len() / 8 * 8;
    for i in (0..body).step_by(8) {
        // SAFETY: values i..i+8 exist in both (2 bytes each in src).
        unsafe {
            let h = _mm256_cvtepu16_epi32(_mm_loadu_si128(src.as_ptr().add(2 * i).cast()));
            _mm256_storeu_ps(dst.as_mut_ptr().add(i), _mm256_castsi256_ps(_mm256_slli_epi32(h, 16)));
        }
    }
    for i in body..dst.len() {
        dst[i] = half::bf16::from_le_bytes([src[2 * i], src[2 * i + 1]]).to_f32();
    }
}
