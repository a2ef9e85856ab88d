//! GGUF blocks unpacked in x86 registers for the integer kernels ([`super::int_x86`]): the same
//! unsigned values and integer scales as [`super::unpack`]'s reference (`q`, `sc`, `mn`), but
//! made where they are used, from the stored bytes, with no copy of the row in memory.
//!
//! Types are const parameters (`T`: one of the constants below), so every kernel is compiled
//! once per type with its unpacking inlined.

use crate::gguf::GgmlType;
use std::arch::x86_64::*;

pub const Q4K: u8 = 0;
pub const Q5K: u8 = 1;
pub const Q6K: u8 = 2;
pub const Q4_0: u8 = 3;
pub const Q5_0: u8 = 4;
pub const Q8_0: u8 = 5;

pub const fn ty(t: u8) -> GgmlType {
    match t {
        Q4K => GgmlType::Q4K,
        Q5K => GgmlType::Q5K,
        Q6K => GgmlType::Q6K,
        Q4_0 => GgmlType::Q4_0,
        Q5_0 => GgmlType::Q5_0,
        _ => GgmlType::Q8_0,
    }
}

/// 256-value blocks with Q8_K activations.
pub const fn is_k(t: u8) -> bool {
    t <= Q6K
}

/// Q4_K/Q5_K apply their minimums in float; Q6_K its offset in integers.
pub const fn float_mins(t: u8) -> bool {
    t == Q4K || t == Q5K
}

/// The stored byte minus this is the value (32-wide formats).
pub const fn b32_offset(t: u8) -> i32 {
    match t {
        Q4_0 => 8,
        Q5_0 => 16,
        _ => 128,
    }
}

/// The f16 at `p` as f32.
///
/// # Safety
/// Two readable bytes at `p`.
#[inline]
pub unsafe fn f16_ptr(p: *const u8) -> f32 {
    // SAFETY: two bytes at p (caller).
    let bits = unsafe { std::ptr::read_unaligned(p.cast::<u16>()) };
    half::f16::from_bits(u16::from_le(bits)).to_f32()
}

/// A K block's scales: 16 per-16-value scales and offset multipliers as i16 (the reference's
/// `sc`, `mn`), `d` and `dmin`.
pub struct KScales {
    pub sc16: __m256i,
    pub mn16: __m256i,
    pub d: f32,
    pub dmin: f32,
}

/// Scales of the K block at `blk`.
///
/// # Safety
/// AVX2; `blk` points at a whole block of type `T`.
#[inline]
#[target_feature(enable = "avx2,f16c")]
pub unsafe fn k_scales<const T: u8>(blk: *const u8) -> KScales {
    // SAFETY: inside the block (caller).
    unsafe {
        if T == Q6K {
            let sc16 = _mm256_cvtepi8_epi16(_mm_loadu_si128(blk.add(192).cast()));
            // Q6_K's values are q - 32: the offset multiplier is 32 * sc.
            return KScales { sc16, mn16: _mm256_slli_epi16(sc16, 5), d: f16_ptr(blk.add(208)), dmin: 0.0 };
        }
        // Q4_K/Q5_K: eight 6-bit scales and minimums in 12 bytes.
        let (sc, mn) = super::unpack::k_scale_bytes(std::slice::from_raw_parts(blk.add(4), 12));
        // Each of the 8 bytes serves both 16-value halves of its 32-value sub-block.
        let wide = |v: u64| {
            let b = _mm_cvtsi64_si128(v as i64);
            _mm256_cvtepu8_epi16(_mm_unpacklo_epi8(b, b))
        };
        KScales { sc16: wide(sc), mn16: wide(mn), d: f16_ptr(blk), dmin: f16_ptr(blk.add(2)) }
    }
}

/// The low nibble of every byte.
#[inline]
#[target_feature(enable = "avx2")]
pub fn low4(v: __m256i) -> __m256i {
    _mm256_and_si256(v, _mm256_set1_epi8(0x0f))
}

/// The high nibble of every byte.
#[inline]
#[target_feature(enable = "avx2")]
pub fn high4(v: __m256i) -> __m256i {
    _mm256_and_si256(_mm256_srli_epi16(v, 4), _mm256_set1_epi8(0x0f))
}

/// Values `32c..32c+32` of the K block at `blk` (AVX2).
///
/// # Safety
/// AVX2; `blk` points at a whole block of type `T`; `c < 8`.
#[inline]
#[target_feature(enable = "avx2")]
pub unsafe fn k_chunk256<const T: u8>(blk: *const u8, c: usize) -> __m256i {
    // SAFETY: every load stays inside the block (caller).
    let load = |at: usize| unsafe { _mm256_loadu_si256(blk.add(at).cast()) };
    let nib = |v: __m256i| if c.is_multiple_of(2) { low4(v) } else { high4(v) };
    match T {
        Q4K => nib(load(16 + 32 * (c / 2))),
        Q5K => {
            let bit = _mm256_set1_epi8((1u8 << c) as i8);
            let high =
                _mm256_and_si256(_mm256_cmpeq_epi8(_mm256_and_si256(load(16), bit), bit), _mm256_set1_epi8(0x10));
            _mm256_or_si256(nib(load(48 + 32 * (c / 2))), high)
        }
        _ => {
            // Q6_K: half h = c / 4; chunk m = c % 4 takes ql[32 (m % 2)..] (low nibbles for
            // m < 2) and bits 2m, 2m+1 of qh, moved to bits 4, 5.
            let (h, m) = (c / 4, c % 4);
            let ql = load(64 * h + 32 * (m % 2));
            let qh = load(128 + 32 * h);
            let nib = if m < 2 { low4(ql) } else { high4(ql) };
            let hb = match m {
                0 => _mm256_slli_epi16(qh, 4),
                1 => _mm256_slli_epi16(qh, 2),
                2 => qh,
                _ => _mm256_srli_epi16(qh, 2),
            };
            _mm256_or_si256(nib, _mm256_and_si256(hb, _mm256_set1_epi8(0x30)))
        }
    }
}

/// Values `64s..64s+64` of the K block at `blk` (AVX-512: chunk 2s in the low half, 2s+1 in
/// the high half).
///
/// # Safety
/// AVX-512BW; `blk` points at a whole block of type `T`; `s < 4`.
#[inline]
#[target_feature(enable = "avx512f,avx512bw,avx2")]
pub unsafe fn k_span512<const T: u8>(blk: *const u8, s: usize) -> __m512i {
    // SAFETY: every load stays inside the block (caller).
    let load2 = |at: usize| unsafe { _mm512_broadcast_i64x4(_mm256_loadu_si256(blk.add(at).cast())) };
    let m0f = _mm512_set1_epi8(0x0f);
    // Low nibbles in the low half, high nibbles in the high half.
    let split = |v: __m512i| _mm512_and_si512(_mm512_mask_srli_epi16(v, 0xffff_0000, v, 4), m0f);
    match T {
        Q4K => split(load2(16 + 32 * s)),
        Q5K => {
            // Chunk 2s takes bit 2s of qh, chunk 2s + 1 bit 2s + 1.
            let bits = _mm512_mask_blend_epi64(
                0xf0,
                _mm512_set1_epi8((1u8 << (2 * s)) as i8),
                _mm512_set1_epi8((2u8 << (2 * s)) as i8),
            );
            let k = _mm512_test_epi8_mask(load2(16), bits);
            let v = split(load2(48 + 32 * s));
            _mm512_mask_add_epi8(v, k, v, _mm512_set1_epi8(0x10))
        }
        _ => {
            // Q6_K: span s is chunks 4h + 2(s % 2) and + 1 of half h = s / 2: the 64 ql bytes'
            // low (s even) or high nibbles, with qh bits (0, 2) or (4, 6) moved to bits 4, 5.
            let h = s / 2;
            // SAFETY: inside the block (caller).
            let ql = unsafe { _mm512_loadu_si512(blk.add(64 * h).cast()) };
            let qh = load2(128 + 32 * h);
            let (nib, hb) = if s.is_multiple_of(2) {
                let left = _mm512_setr_epi64(
                    0x0004_0004_0004_0004,
                    0x0004_0004_0004_0004,
                    0x0004_0004_0004_0004,
                    0x0004_0004_0004_0004,
                    0x0002_0002_0002_0002,
                    0x0002_0002_0002_0002,
                    0x0002_0002_0002_0002,
                    0x0002_0002_0002_0002,
                );
                (_mm512_and_si512(ql, m0f), _mm512_sllv_epi16(qh, left))
            } else {
                let right = _mm512_setr_epi64(
                    0,
                    0,
                    0,
                    0,
                    0x0002_0002_0002_0002,
                    0x0002_0002_0002_0002,
                    0x0002_0002_0002_0002,
                    0x0002_0002_0002_0002,
                );
                (_mm512_and_si512(_mm512_srli_epi16(ql, 4), m0f), _mm512_srlv_epi16(qh, right))
            };
            // nib | (hb & 0x30)
            _mm512_ternarylogic_epi32(nib, hb, _mm512_set1_epi8(0x30), 0xf8)
        }
    }
}

/// The 32 values of the 32-wide block at `blk`, unsigned (AVX2; Q8_0 as `w + 128`).
///
/// # Safety
/// AVX2; `blk` points at a whole block of type `T`.
#[inline]
#[target_feature(enable = "avx2")]
pub unsafe fn b32_block256<const T: u8>(blk: *const u8) -> __m256i {
    // SAFETY: every load stays inside the block (caller).
    unsafe {
        match T {
            Q8_0 => _mm256_xor_si256(_mm256_loadu_si256(blk.add(2).cast()), _mm256_set1_epi8(-128)),
            _ => {
                let at = if T == Q4_0 { 2 } else { 6 };
                let qs = _mm_loadu_si128(blk.add(at).cast());
                let both = _mm256_set_m128i(qs, qs);
                let nib = _mm256_blend_epi32(low4(both), high4(both), 0b1111_0000);
                if T == Q4_0 {
                    nib
                } else {
                    let qh = std::ptr::read_unaligned(blk.add(2).cast::<u32>());
                    _mm256_or_si256(nib, _mm256_and_si256(bit_bytes(u32::from_le(qh)), _mm256_set1_epi8(0x10)))
                }
            }
        }
    }
}

/// 32 bytes: 0xFF where bit j of `bits` is set (byte j tests its own bit).
#[inline]
#[target_feature(enable = "avx2")]
fn bit_bytes(bits: u32) -> __m256i {
    let spread = _mm256_shuffle_epi8(
        _mm256_set1_epi32(bits as i32),
        _mm256_setr_epi8(
            0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1, 2, 2, 2, 2, 2, 2, 2, 2, 3, 3, 3, 3, 3, 3, 3, 3,
        ),
    );
    let bit = _mm256_set1_epi64x(0x8040201008040201u64 as i64);
    _mm256_cmpeq_epi8(_mm256_and_si256(spread, bit), bit)
}

/// The values of the two consecutive 32-wide blocks at `blk` (AVX-512: the first in the low
/// half), unsigned.
///
/// # Safety
/// AVX-512BW; `blk` points at two whole blocks of type `T`.
#[inline]
#[target_feature(enable = "avx512f,avx512bw,avx2")]
pub unsafe fn b32_pair512<const T: u8>(blk: *const u8) -> __m512i {
    let size = ty(T).block().1;
    // SAFETY: every load stays inside the two blocks (caller).
    unsafe {
        if T == Q8_0 {
            let v = _mm512_inserti64x4(
                _mm512_castsi256_si512(_mm256_loadu_si256(blk.add(2).cast())),
                _mm256_loadu_si256(blk.add(size + 2).cast()),
                1,
            );
            return _mm512_xor_si512(v, _mm512_set1_epi8(-128));
        }
        let at = if T == Q4_0 { 2 } else { 6 };
        let (a, b) = (_mm_loadu_si128(blk.add(at).cast()), _mm_loadu_si128(blk.add(size + at).cast()));
        let v = _mm512_inserti64x4(_mm512_castsi256_si512(_mm256_set_m128i(a, a)), _mm256_set_m128i(b, b), 1);
        // Low nibbles in 128-bit quarters 0 and 2, high nibbles in 1 and 3.
        let nib = _mm512_and_si512(_mm512_mask_srli_epi16(v, 0xff00_ff00, v, 4), _mm512_set1_epi8(0x0f));
        if T == Q4_0 {
            return nib;
        }
        let qh = |p: *const u8| u32::from_le(std::ptr::read_unaligned(p.add(2).cast::<u32>())) as u64;
        let k: __mmask64 = qh(blk) | (qh(blk.add(size)) << 32);
        _mm512_mask_add_epi8(nib, k, nib, _mm512_set1_epi8(0x10))
    }
}
