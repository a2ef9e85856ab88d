//! From panel bytes to AVX2 lanes: loads and broadcasts, the unpacking of a block's values into
//! unsigned quads, and its integer and float scales (the layout: [`crate::quant::panel`]).

use crate::quant::int_x86_blocks::{Q4_0, Q4K, Q5K, Q6K, Q8_0, high4, low4};
use std::arch::x86_64::*;
use std::mem::MaybeUninit;

/// One panel block unpacked: `w[2q + h]` holds quad q of rows `8h..8h + 8` as [`operand`]
/// gives it (Q8_0 on AVX2: the signed values, and their magnitudes at `16 + 2q + h`). Never
/// zeroed: a pass reads only what [`unpack`] wrote for the same block (zeroing its 4 KB per
/// panel pass cost as many stores as unpacking a Q4_K block).
pub(super) type Quads = [MaybeUninit<__m256i>; 128];

/// The scales of one block: `sc[2g + h]`, the scale of group g of each weight row of half h
/// (AVX2: an i16 pair of it for `vpmaddwd`; AVX-VNNI: an i32 for `vpmulld`), and the i16
/// pairs `pairs[2k + h]` (the offset multipliers of groups 2k and 2k + 1, against two
/// activation sums). The float scales are read apart ([`k_floats`]): Q6_K's end its block.
pub(super) struct Scales {
    pub sc: [__m256i; 32],
    pub pairs: [__m256i; 16],
}

/// The float scales of one K block, per half: `d` and (Q4_K / Q5_K) `dmin`.
pub(super) struct Floats {
    pub d: [__m256; 2],
    pub dmin: [__m256; 2],
}

/// The 32 bytes at `p`.
#[inline]
#[target_feature(enable = "avx2")]
pub(super) unsafe fn ld(p: *const u8) -> __m256i {
    // SAFETY: 32 readable bytes at p (caller).
    unsafe { _mm256_loadu_si256(p.cast()) }
}

/// The 4 bytes at `p` in every lane.
#[inline]
#[target_feature(enable = "avx2")]
pub(super) unsafe fn bcast4<P>(p: *const P) -> __m256i {
    // SAFETY: 4 readable bytes at p (caller).
    _mm256_set1_epi32(unsafe { std::ptr::read_unaligned(p.cast::<i32>()) })
}

/// The 8 f16 at `p` as f32.
#[inline]
#[target_feature(enable = "avx2,f16c")]
pub(super) unsafe fn f16x8(p: *const u8) -> __m256 {
    // SAFETY: 16 readable bytes at p (caller).
    unsafe { _mm256_cvtph_ps(_mm_loadu_si128(p.cast())) }
}

/// `pshufb` control that fills every 32-bit lane with bytes `pattern` of that lane (0x80:
/// zero).
#[inline]
#[target_feature(enable = "avx2")]
pub(super) fn lanes(pattern: [u8; 4]) -> __m256i {
    // Lane l of each 128-bit half starts at byte 4l of that half (0x80 + 12 keeps the top bit).
    let base = _mm256_setr_epi8(
        0, 0, 0, 0, 4, 4, 4, 4, 8, 8, 8, 8, 12, 12, 12, 12, 0, 0, 0, 0, 4, 4, 4, 4, 8, 8, 8, 8, 12, 12, 12, 12,
    );
    _mm256_add_epi8(_mm256_set1_epi32(i32::from_le_bytes(pattern)), base)
}

/// i16 pairs of bytes `b0`, `b1` of every lane of `v`, zero-extended.
#[inline]
#[target_feature(enable = "avx2")]
pub(super) fn pair_u8(v: __m256i, b0: u8, b1: u8) -> __m256i {
    _mm256_shuffle_epi8(v, lanes([b0, 0x80, b1, 0x80]))
}

/// i16 pairs of bytes `b0`, `b1` of every lane of `v`, sign-extended.
#[inline]
#[target_feature(enable = "avx2")]
pub(super) fn pair_i8(v: __m256i, b0: u8, b1: u8) -> __m256i {
    _mm256_srai_epi16::<8>(_mm256_shuffle_epi8(v, lanes([0x80, b0, 0x80, b1])))
}

/// Byte `b` of every lane of `v` as the group scale of variant `V`: an i16 pair of it
/// (AVX2) or an i32 (AVX-VNNI); sign-extended if `signed`.
#[inline]
#[target_feature(enable = "avx2")]
pub(super) fn scale_of<const V: bool>(v: __m256i, b: u8, signed: bool) -> __m256i {
    match (V, signed) {
        (false, false) => pair_u8(v, b, b),
        (false, true) => pair_i8(v, b, b),
        (true, false) => _mm256_shuffle_epi8(v, lanes([b, 0x80, 0x80, 0x80])),
        (true, true) => _mm256_srai_epi32::<24>(_mm256_shuffle_epi8(v, lanes([0x80, 0x80, 0x80, b]))),
    }
}

/// `nib | (hb & mask)`.
#[inline]
#[target_feature(enable = "avx2")]
pub(super) fn with_high(nib: __m256i, hb: __m256i, mask: i8) -> __m256i {
    _mm256_or_si256(nib, _mm256_and_si256(hb, _mm256_set1_epi8(mask)))
}

/// Quad `q` (values `4q..4q + 4`) of rows `8h..8h + 8` of panel block `pb`, unsigned (Q8_0:
/// the signed values).
///
/// # Safety
/// AVX2; `pb` points at a whole panel block of type `T`; `q` < the block's values / 4.
#[inline]
#[target_feature(enable = "avx2")]
pub(super) unsafe fn quad<const T: u8>(pb: *const u8, q: usize, h: usize) -> __m256i {
    // SAFETY: every offset lies inside the panel block (its layout: super::panel).
    let at = |off: usize| unsafe { ld(pb.add(off + 32 * h)) };
    match T {
        Q4K | Q5K => {
            // Sub-block j, quad v: byte vector 8 (j / 2) + v, its low (j even) or high nibbles.
            let (j, v) = (q / 8, q % 8);
            let bytes = at(if T == Q5K { 768 } else { 256 } + 64 * (8 * (j / 2) + v));
            let nib = if j % 2 == 0 { low4(bytes) } else { high4(bytes) };
            if T == Q4K {
                return nib;
            }
            // Bit j of each qh byte moved to bit 4 (16-bit shifts carry bits across bytes,
            // but never into bit 4 for shifts of at most 4).
            let qh = at(256 + 64 * v);
            let hb = if j <= 4 {
                _mm256_sll_epi16(qh, _mm_cvtsi32_si128(4 - j as i32))
            } else {
                _mm256_srl_epi16(qh, _mm_cvtsi32_si128(j as i32 - 4))
            };
            with_high(nib, hb, 0x10)
        }
        Q6K => {
            // Half p of the block, quad v of 32: ql regions (0 low, 2 high) and (1 low, 3
            // high), qh bits 2c, 2c + 1 for region c; region c's quad v is 32p + 8c + v.
            let (p, c, v) = (q / 32, q % 32 / 8, q % 8);
            let base = 256 + 192 * (8 * p + v);
            let (ql, qh) = (at(base + 64 * (c % 2)), at(base + 128));
            let nib = if c < 2 { low4(ql) } else { high4(ql) };
            let hb = match c {
                0 => _mm256_slli_epi16::<4>(qh),
                1 => _mm256_slli_epi16::<2>(qh),
                2 => qh,
                _ => _mm256_srli_epi16::<2>(qh),
            };
            with_high(nib, hb, 0x30)
        }
        Q8_0 => at(32 + 64 * q),
        _ => {
            let bytes = at(if T == Q4_0 { 32 } else { 96 } + 64 * (q % 4));
            let nib = if q < 4 { low4(bytes) } else { high4(bytes) };
            if T == Q4_0 {
                return nib;
            }
            // Byte j of quad q takes bit 4q + j of its row's qh: byte q / 2 of the lane,
            // spread over the lane's 4 bytes, tested against bit 4 (q % 2) + j.
            let spread = _mm256_shuffle_epi8(at(32), lanes([q as u8 / 2; 4]));
            let bit = _mm256_set1_epi32(i32::from_le_bytes(std::array::from_fn(|j| 1u8 << (4 * (q % 2) + j))));
            with_high(nib, _mm256_cmpeq_epi8(_mm256_and_si256(spread, bit), bit), 0x10)
        }
    }
}

/// [`quad`] as variant `V` multiplies it: unsigned, so Q8_0's values are offset by 128 on
/// AVX-VNNI (`vpdpbusd` multiplies unsigned by signed bytes) and stay signed on AVX2 (where
/// `vpsignb` moves their signs onto the activations).
///
/// # Safety
/// As [`quad`].
#[inline]
#[target_feature(enable = "avx2")]
pub(super) unsafe fn operand<const T: u8, const V: bool>(pb: *const u8, q: usize, h: usize) -> __m256i {
    // SAFETY: as the caller's.
    let v = unsafe { quad::<T>(pb, q, h) };
    if V && T == Q8_0 { _mm256_xor_si256(v, _mm256_set1_epi8(-128)) } else { v }
}

/// Every quad of panel block `pb` into `w` (Q8_0 on AVX2: and their magnitudes).
///
/// # Safety
/// As [`quad`].
#[inline]
#[target_feature(enable = "avx2")]
pub(super) unsafe fn unpack<const T: u8, const NQ: usize, const V: bool>(pb: *const u8, w: &mut Quads) {
    for q in 0..NQ {
        for h in 0..2 {
            // SAFETY: as the caller's.
            let v = unsafe { operand::<T, V>(pb, q, h) };
            w[2 * q + h] = MaybeUninit::new(v);
            if T == Q8_0 && !V {
                w[16 + 2 * q + h] = MaybeUninit::new(_mm256_abs_epi8(v));
            }
        }
    }
}

/// Integer scales of K-family panel block `pb` (both halves; entries a type does not use are
/// zero). Built per block rather than kept and zeroed per call.
///
/// # Safety
/// AVX2; `pb` points at a whole panel block of type `T`.
#[inline]
#[target_feature(enable = "avx2")]
pub(super) unsafe fn scales_k<const T: u8, const V: bool>(pb: *const u8) -> Scales {
    // SAFETY: every offset lies inside the panel block (its layout: super::panel).
    unsafe {
        let at = |off: usize, h: usize| pb.add(off + 32 * h);
        if T == Q6K {
            let sv: [[__m256i; 4]; 2] = std::array::from_fn(|h| std::array::from_fn(|c| ld(at(64 * c, h))));
            return Scales {
                sc: std::array::from_fn(|i| {
                    let (g, h) = (i / 2, i % 2);
                    scale_of::<V>(sv[h][g / 4], (g % 4) as u8, true)
                }),
                pairs: std::array::from_fn(|i| {
                    let (k, h) = (i / 2, i % 2);
                    let b = 2 * (k % 2) as u8;
                    pair_i8(sv[h][k / 2], b, b + 1)
                }),
            };
        }
        // Q4_K / Q5_K: 6-bit scales and minimums of sub-blocks 0..4 (bytes of sc_lo, mn_lo)
        // and 4..8 (sc_hi, mn_hi), as llama.cpp reads the 12 bytes.
        let (m63, mc0) = (_mm256_set1_epi8(63), _mm256_set1_epi8(0xc0u8 as i8));
        // [sc_lo, mn_lo, sc_hi, mn_hi] of half h.
        let parts: [[__m256i; 4]; 2] = std::array::from_fn(|h| {
            let (s0, s1, s2) = (ld(at(64, h)), ld(at(128, h)), ld(at(192, h)));
            [
                _mm256_and_si256(s0, m63),
                _mm256_and_si256(s1, m63),
                _mm256_or_si256(low4(s2), _mm256_srli_epi16::<2>(_mm256_and_si256(s0, mc0))),
                _mm256_or_si256(high4(s2), _mm256_srli_epi16::<2>(_mm256_and_si256(s1, mc0))),
            ]
        });
        Scales {
            sc: std::array::from_fn(|i| {
                let (j, h) = (i / 2, i % 2);
                if j < 8 {
                    scale_of::<V>(parts[h][if j < 4 { 0 } else { 2 }], (j % 4) as u8, false)
                } else {
                    _mm256_setzero_si256()
                }
            }),
            pairs: std::array::from_fn(|i| {
                let (k, h) = (i / 2, i % 2);
                let b = 2 * (k % 2) as u8;
                if k < 4 { pair_u8(parts[h][if k < 2 { 1 } else { 3 }], b, b + 1) } else { _mm256_setzero_si256() }
            }),
        }
    }
}

/// The float scales of K-family panel block `pb`: Q4_K / Q5_K's `d` and `dmin` lead the
/// block, Q6_K's `d` ends it (so a pass reads it after the quads, in address order).
///
/// # Safety
/// AVX2, F16C; `pb` points at a whole panel block of type `T`.
#[inline]
#[target_feature(enable = "avx2,f16c")]
pub(super) unsafe fn k_floats<const T: u8>(pb: *const u8) -> Floats {
    // SAFETY: as the caller's.
    unsafe {
        if T == Q6K {
            let d = [f16x8(pb.add(3328)), f16x8(pb.add(3344))];
            Floats { d, dmin: [_mm256_setzero_ps(); 2] }
        } else {
            Floats { d: [f16x8(pb), f16x8(pb.add(16))], dmin: [f16x8(pb.add(32)), f16x8(pb.add(48))] }
        }
    }
}
