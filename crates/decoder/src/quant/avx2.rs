//! AVX2 block decoders: the values of [`crate::gguf::dequantize`], eight at a time.
//!
//! Each value goes through the scalar decoder's operations in the same order: the quantized
//! integer is assembled exactly, converted to f32, then multiplied by the same f32 scale (and
//! the same f32 minimum subtracted, never fused into one rounding), so every value is
//! bit-identical to the loader's. The per-block scales are computed with the scalar code's
//! f32 arithmetic.

use crate::gguf::{scale_min_k4, GgmlType};
use half::f16;
use std::arch::x86_64::*;

/// Whether this CPU has what the decoders use (AVX2 for the integer work, F16C for F16).
pub fn available() -> bool {
    is_x86_feature_detected!("avx2") && is_x86_feature_detected!("fma") && is_x86_feature_detected!("f16c")
}

fn f16_at(b: &[u8], i: usize) -> f32 {
    f16::from_le_bytes([b[i], b[i + 1]]).to_f32()
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

/// Where a row's decoded values go, sixteen at a time (two vectors), in ascending order.
struct Store(*mut f32);

impl Store {
    /// Stores the next sixteen values.
    #[inline(always)]
    unsafe fn take(&mut self, v0: __m256, v1: __m256) {
        // SAFETY: the caller sized the output for every value it decodes.
        unsafe {
            _mm256_storeu_ps(self.0, v0);
            _mm256_storeu_ps(self.0.add(8), v1);
            self.0 = self.0.add(16);
        }
    }
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
    unsafe { blocks(ty, src, &mut Store(dst.as_mut_ptr())) }
}

/// Feeds every block of `src` to `out`; false for a type without a decoder here.
#[inline]
#[target_feature(enable = "avx2,fma")]
unsafe fn blocks(ty: GgmlType, src: &[u8], out: &mut Store) -> bool {
    let (_, bytes) = ty.block();
    let each = src.chunks_exact(bytes);
    // SAFETY (every arm): each block slice holds `bytes` bytes, what its decoder reads.
    unsafe {
        match ty {
            GgmlType::Q4_0 => each.for_each(|b| q4_0(b, out)),
            GgmlType::Q5_0 => each.for_each(|b| q5_0(b, out)),
            GgmlType::Q8_0 => each.for_each(|b| q8_0(b, out)),
            GgmlType::Q4K => each.for_each(|b| q4_k(b, out)),
            GgmlType::Q5K => each.for_each(|b| q5_k(b, out)),
            GgmlType::Q6K => each.for_each(|b| q6_k(b, out)),
            _ => return false,
        }
    }
    true
}

#[inline]
#[target_feature(enable = "avx2,fma")]
unsafe fn q4_0(b: &[u8], sink: &mut Store) {
    let d = f16_at(b, 0);
    let (mask, eight) = (_mm256_set1_epi32(0x0f), _mm256_set1_epi32(8));
    // SAFETY: bytes 2 .. 18 lie within the 18-byte block.
    unsafe {
        let lo = |j: usize| scaled(_mm256_sub_epi32(_mm256_and_si256(u8x8(b.as_ptr().add(2 + j)), mask), eight), d);
        let hi = |j: usize| scaled(_mm256_sub_epi32(_mm256_srli_epi32(u8x8(b.as_ptr().add(2 + j)), 4), eight), d);
        sink.take(lo(0), lo(8));
        sink.take(hi(0), hi(8));
    }
}

#[inline]
#[target_feature(enable = "avx2,fma")]
unsafe fn q5_0(b: &[u8], sink: &mut Store) {
    let d = f16_at(b, 0);
    let qh = _mm256_set1_epi32(u32::from_le_bytes([b[2], b[3], b[4], b[5]]) as i32);
    let (mask, one, sixteen) = (_mm256_set1_epi32(0x0f), _mm256_set1_epi32(1), _mm256_set1_epi32(16));
    // Bit j of qh is the 5th bit of value j (j < 32).
    let bit = |first: i32| {
        let idx = _mm256_setr_epi32(first, first + 1, first + 2, first + 3, first + 4, first + 5, first + 6, first + 7);
        _mm256_slli_epi32(_mm256_and_si256(_mm256_srlv_epi32(qh, idx), one), 4)
    };
    // SAFETY: bytes 6 .. 22 lie within the 22-byte block.
    unsafe {
        let lo = |j: usize| {
            let q = _mm256_and_si256(u8x8(b.as_ptr().add(6 + j)), mask);
            scaled(_mm256_sub_epi32(_mm256_or_si256(q, bit(j as i32)), sixteen), d)
        };
        let hi = |j: usize| {
            let q = _mm256_srli_epi32(u8x8(b.as_ptr().add(6 + j)), 4);
            scaled(_mm256_sub_epi32(_mm256_or_si256(q, bit(j as i32 + 16)), sixteen), d)
        };
        sink.take(lo(0), lo(8));
        sink.take(hi(0), hi(8));
    }
}

#[inline]
#[target_feature(enable = "avx2,fma")]
unsafe fn q8_0(b: &[u8], sink: &mut Store) {
    let d = f16_at(b, 0);
    // SAFETY: bytes 2 + j .. 2 + j + 8 lie within the 34-byte block for j < 32.
    let v = |j: usize| unsafe { scaled(_mm256_cvtepi8_epi32(_mm_loadl_epi64(b.as_ptr().add(2 + j).cast())), d) };
    // SAFETY: the sink takes what the caller sized it for.
    unsafe {
        sink.take(v(0), v(8));
        sink.take(v(16), v(24));
    }
}

#[inline]
#[target_feature(enable = "avx2,fma")]
unsafe fn q4_k(b: &[u8], sink: &mut Store) {
    let (d, dmin) = (f16_at(b, 0), f16_at(b, 2));
    let scales = &b[4..16];
    let mask = _mm256_set1_epi32(0x0f);
    for chunk in 0..4 {
        let (sc1, m1) = scale_min_k4(2 * chunk, scales);
        let (sc2, m2) = scale_min_k4(2 * chunk + 1, scales);
        let (d1, m1, d2, m2) = (d * sc1, dmin * m1, d * sc2, dmin * m2);
        let q = |l: usize| {
            // SAFETY: bytes 16 + 32 chunk + l + 8 <= 144.
            unsafe { u8x8(b.as_ptr().add(16 + 32 * chunk + l)) }
        };
        // SAFETY: the sink takes what the caller sized it for.
        unsafe {
            let lo = |l: usize| scaled_min(_mm256_and_si256(q(l), mask), d1, m1);
            let hi = |l: usize| scaled_min(_mm256_srli_epi32(q(l), 4), d2, m2);
            sink.take(lo(0), lo(8));
            sink.take(lo(16), lo(24));
            sink.take(hi(0), hi(8));
            sink.take(hi(16), hi(24));
        }
    }
}

#[inline]
#[target_feature(enable = "avx2,fma")]
unsafe fn q5_k(b: &[u8], sink: &mut Store) {
    let (d, dmin) = (f16_at(b, 0), f16_at(b, 2));
    let scales = &b[4..16];
    let (mask, one) = (_mm256_set1_epi32(0x0f), _mm256_set1_epi32(1));
    for chunk in 0..4 {
        let (sc1, m1) = scale_min_k4(2 * chunk, scales);
        let (sc2, m2) = scale_min_k4(2 * chunk + 1, scales);
        let (d1, m1, d2, m2) = (d * sc1, dmin * m1, d * sc2, dmin * m2);
        // Bit 2 chunk of qh[l] adds 16 to the low-nibble value, bit 2 chunk + 1 to the high one.
        let fifth = |l: usize, bit: i32| {
            // SAFETY: qh bytes 16 + l + 8 <= 48.
            let h = unsafe { u8x8(b.as_ptr().add(16 + l)) };
            _mm256_slli_epi32(_mm256_and_si256(_mm256_srl_epi32(h, _mm_cvtsi32_si128(bit)), one), 4)
        };
        let q = |l: usize| {
            // SAFETY: qs bytes 48 + 32 chunk + l + 8 <= 176.
            unsafe { u8x8(b.as_ptr().add(48 + 32 * chunk + l)) }
        };
        // SAFETY: the sink takes what the caller sized it for.
        unsafe {
            let lo = |l: usize| scaled_min(_mm256_add_epi32(_mm256_and_si256(q(l), mask), fifth(l, 2 * chunk as i32)), d1, m1);
            let hi = |l: usize| scaled_min(_mm256_add_epi32(_mm256_srli_epi32(q(l), 4), fifth(l, 2 * chunk as i32 + 1)), d2, m2);
            sink.take(lo(0), lo(8));
            sink.take(lo(16), lo(24));
            sink.take(hi(0), hi(8));
            sink.take(hi(16), hi(24));
        }
    }
}

#[inline]
#[target_feature(enable = "avx2,fma")]
unsafe fn q6_k(b: &[u8], sink: &mut Store) {
    let d = f16_at(b, 208);
    let (mask, three, off) = (_mm256_set1_epi32(0x0f), _mm256_set1_epi32(3), _mm256_set1_epi32(32));
    for half in 0..2 {
        let sc = &b[192 + 8 * half..200 + 8 * half];
        // Quarter t of the half: low 4 bits from ql (low nibbles of bytes 0..32 for t = 0,
        // of bytes 32..64 for t = 1, high nibbles for t = 2, 3), high 2 bits at 2t of qh.
        for t in 0..4 {
            let v = |l: usize| {
                // SAFETY: ql bytes 64 half + 32 + l + 8 <= 128, qh bytes 128 + 32 half + l + 8 <= 192.
                let (ql, h) = unsafe { (u8x8(b.as_ptr().add(64 * half + 32 * (t & 1) + l)), u8x8(b.as_ptr().add(128 + 32 * half + l))) };
                let low = if t < 2 { _mm256_and_si256(ql, mask) } else { _mm256_srli_epi32(ql, 4) };
                let high = _mm256_and_si256(_mm256_srl_epi32(h, _mm_cvtsi32_si128(2 * t as i32)), three);
                let q = _mm256_sub_epi32(_mm256_or_si256(low, _mm256_slli_epi32(high, 4)), off);
                scaled(q, d * (sc[l / 16 + 2 * t] as i8) as f32)
            };
            // SAFETY: the sink takes what the caller sized it for.
            unsafe {
                sink.take(v(0), v(8));
                sink.take(v(16), v(24));
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
        unsafe { _mm256_storeu_ps(dst.as_mut_ptr().add(i), _mm256_cvtph_ps(_mm_loadu_si128(src.as_ptr().add(2 * i).cast()))) }
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
