//! AVX2 kernels on weight panels ([`super::panel`]): the AVX-512 layout read as two 32-byte
//! halves (weight rows 0..8 and 8..16 of the panel), one i32 lane per weight row.
//!
//! **What a pass does.** Per block, the panel's scales are decoded into i16 pairs and, from 3
//! activation rows, its values unpacked once into an L1 buffer of unsigned 4-value quads
//! (`w[2q + h]`: values `4q..4q + 4` of the half's 8 rows) that serves every activation row of
//! the pass (up to [`MAX_ROWS`]); with 1 or 2 rows each quad is unpacked where it is used.
//! `vpmaddubsw` multiplies a quad of each row by four activation bytes broadcast to every
//! lane (two i16 pair sums per lane), `vpaddw` sums as many quads in i16 as cannot overflow
//! (Q4_0 / Q4_K 8, Q5_0 / Q5_K 4, Q6_K 2: at most 8 * 2 * 15 * 127 = 30,480), and one
//! `vpmaddwd` against the sub-block's scale pair (ones for the 32-wide formats) turns them
//! into i32. Q8_0's signed values go through `vpsignb` (|w| <= 128, one quad per `vpmaddwd`).
//! Activation rows run in pairs, so each weight vector loaded from the buffer serves two
//! rows and each broadcast both halves. The float steps are the reference's ([`super::int`])
//! on 8 outputs per instruction, and the integers are exact, so the results are the portable
//! path's bits for any number of rows.
//!
//! **With AVX-VNNI** ([`super::int::IntPath::AvxVnni`]) the same passes multiply with the
//! 256-bit `vpdpbusd`: four products summed into each i32 lane in one instruction, so a
//! group's quads accumulate in i32 with no i16 limit, and `vpmulld` applies the group's
//! scale. Q8_0's values are offset to unsigned (`w + 128`, as on AVX-512) and the offset term
//! `128 * (sum of the activations)` subtracted. Both variants come from one source: the
//! kernels are generic over `V` and inlined into two entry points compiled with and without
//! the instruction set ([`dots_avx2`], [`dots_vnni`]).
//!
//! **Why not the row kernels** ([`super::int_x86`]): those redo each block's unpacking,
//! scale decoding and a horizontal sum for every tile of 4 activation rows; here all of it is
//! paid once per block for the whole pass, and no horizontal sum is needed at all.

use super::act::{Q8KRows, Q80Rows, QK_K, QK8_0};
use super::int_x86_blocks::{Q4_0, Q4K, Q5_0, Q5K, Q6K, Q8_0, b32_offset, high4, low4, ty};
use super::panel::{Kernels, PANEL, prefetch_ahead, prefetches};
use crate::gguf::GgmlType;
use std::arch::x86_64::*;
use std::mem::MaybeUninit;

/// Activation rows per pass over a panel: their accumulators (16 f32 each, 4 KB) stay in L1.
pub const MAX_ROWS: usize = 64;

/// One panel block unpacked: `w[2q + h]` holds quad q of rows `8h..8h + 8` as [`operand`]
/// gives it (Q8_0 on AVX2: the signed values, and their magnitudes at `16 + 2q + h`). Never
/// zeroed: a pass reads only what [`unpack`] wrote for the same block (zeroing its 4 KB per
/// panel pass cost as many stores as unpacking a Q4_K block).
type Quads = [MaybeUninit<__m256i>; 128];

/// The scales of one block: `sc[2g + h]`, the scale of group g of each weight row of half h
/// (AVX2: an i16 pair of it for `vpmaddwd`; AVX-VNNI: an i32 for `vpmulld`), and the i16
/// pairs `pairs[2k + h]` (the offset multipliers of groups 2k and 2k + 1, against two
/// activation sums). The float scales are read apart ([`k_floats`]): Q6_K's end its block.
struct Scales {
    sc: [__m256i; 32],
    pairs: [__m256i; 16],
}

/// The float scales of one K block, per half: `d` and (Q4_K / Q5_K) `dmin`.
struct Floats {
    d: [__m256; 2],
    dmin: [__m256; 2],
}

/// Dot products of one panel (16 weight rows of `t`, all blocks) with activation rows
/// `r0..r0 + out.len()`: `out[r][lane]` for weight row `lane` of the panel; with `vnni`, by
/// the AVX-VNNI kernels.
///
/// # Safety
/// The CPU must support AVX2, FMA and F16C ([`super::int::IntPath::Avx2`]), and AVX-VNNI
/// with `vnni` ([`super::int::IntPath::AvxVnni`]).
pub unsafe fn panel_dots(
    t: GgmlType,
    panel: &[u8],
    k: Option<&Q8KRows>,
    b32: Option<&Q80Rows>,
    r0: usize,
    out: &mut [[f32; PANEL]],
    vnni: bool,
) {
    assert!(out.len() <= MAX_ROWS, "at most {MAX_ROWS} activation rows per pass");
    // SAFETY: the caller guarantees the instructions.
    unsafe { if vnni { dots_vnni(t, panel, k, b32, r0, out) } else { dots_avx2(t, panel, k, b32, r0, out) } }
}

/// The kernels compiled for AVX2 (`vpmaddubsw`).
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn dots_avx2(
    t: GgmlType,
    panel: &[u8],
    k: Option<&Q8KRows>,
    b32: Option<&Q80Rows>,
    r0: usize,
    out: &mut [[f32; PANEL]],
) {
    // SAFETY: as the caller's.
    unsafe { dispatch::<false>(t, panel, k, b32, r0, out) }
}

/// The kernels compiled for AVX-VNNI (`vpdpbusd`).
#[target_feature(enable = "avx2,fma,f16c,avxvnni")]
unsafe fn dots_vnni(
    t: GgmlType,
    panel: &[u8],
    k: Option<&Q8KRows>,
    b32: Option<&Q80Rows>,
    r0: usize,
    out: &mut [[f32; PANEL]],
) {
    // SAFETY: as the caller's.
    unsafe { dispatch::<true>(t, panel, k, b32, r0, out) }
}

/// The kernel of type `t`, inlined into its entry point (whose instruction set its
/// intrinsics then inline under).
///
/// # Safety
/// The instructions of variant `V`; the kernels check what they read.
#[inline(always)]
unsafe fn dispatch<const V: bool>(
    t: GgmlType,
    panel: &[u8],
    k: Option<&Q8KRows>,
    b32: Option<&Q80Rows>,
    r0: usize,
    out: &mut [[f32; PANEL]],
) {
    // SAFETY: as the caller's.
    unsafe {
        match t {
            GgmlType::Q4K => panel_k::<Q4K, V>(panel, k.expect("Q8_K input"), r0, out),
            GgmlType::Q5K => panel_k::<Q5K, V>(panel, k.expect("Q8_K input"), r0, out),
            GgmlType::Q6K => panel_k::<Q6K, V>(panel, k.expect("Q8_K input"), r0, out),
            GgmlType::Q4_0 => panel_b32::<Q4_0, V>(panel, b32.expect("Q8_0 input"), r0, out),
            GgmlType::Q5_0 => panel_b32::<Q5_0, V>(panel, b32.expect("Q8_0 input"), r0, out),
            GgmlType::Q8_0 => panel_b32::<Q8_0, V>(panel, b32.expect("Q8_0 input"), r0, out),
            _ => unreachable!("{t:?} has no panel kernel"),
        }
    }
}

/// The 32 bytes at `p`.
#[inline]
#[target_feature(enable = "avx2")]
unsafe fn ld(p: *const u8) -> __m256i {
    // SAFETY: 32 readable bytes at p (caller).
    unsafe { _mm256_loadu_si256(p.cast()) }
}

/// The 4 bytes at `p` in every lane.
#[inline]
#[target_feature(enable = "avx2")]
unsafe fn bcast4<P>(p: *const P) -> __m256i {
    // SAFETY: 4 readable bytes at p (caller).
    _mm256_set1_epi32(unsafe { std::ptr::read_unaligned(p.cast::<i32>()) })
}

/// The 8 f16 at `p` as f32.
#[inline]
#[target_feature(enable = "avx2,f16c")]
unsafe fn f16x8(p: *const u8) -> __m256 {
    // SAFETY: 16 readable bytes at p (caller).
    unsafe { _mm256_cvtph_ps(_mm_loadu_si128(p.cast())) }
}

/// `pshufb` control that fills every 32-bit lane with bytes `pattern` of that lane (0x80:
/// zero).
#[inline]
#[target_feature(enable = "avx2")]
fn lanes(pattern: [u8; 4]) -> __m256i {
    // Lane l of each 128-bit half starts at byte 4l of that half (0x80 + 12 keeps the top bit).
    let base = _mm256_setr_epi8(
        0, 0, 0, 0, 4, 4, 4, 4, 8, 8, 8, 8, 12, 12, 12, 12, 0, 0, 0, 0, 4, 4, 4, 4, 8, 8, 8, 8, 12, 12, 12, 12,
    );
    _mm256_add_epi8(_mm256_set1_epi32(i32::from_le_bytes(pattern)), base)
}

/// i16 pairs of bytes `b0`, `b1` of every lane of `v`, zero-extended.
#[inline]
#[target_feature(enable = "avx2")]
fn pair_u8(v: __m256i, b0: u8, b1: u8) -> __m256i {
    _mm256_shuffle_epi8(v, lanes([b0, 0x80, b1, 0x80]))
}

/// i16 pairs of bytes `b0`, `b1` of every lane of `v`, sign-extended.
#[inline]
#[target_feature(enable = "avx2")]
fn pair_i8(v: __m256i, b0: u8, b1: u8) -> __m256i {
    _mm256_srai_epi16::<8>(_mm256_shuffle_epi8(v, lanes([0x80, b0, 0x80, b1])))
}

/// Byte `b` of every lane of `v` as the group scale of variant `V`: an i16 pair of it
/// (AVX2) or an i32 (AVX-VNNI); sign-extended if `signed`.
#[inline]
#[target_feature(enable = "avx2")]
fn scale_of<const V: bool>(v: __m256i, b: u8, signed: bool) -> __m256i {
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
fn with_high(nib: __m256i, hb: __m256i, mask: i8) -> __m256i {
    _mm256_or_si256(nib, _mm256_and_si256(hb, _mm256_set1_epi8(mask)))
}

/// Quad `q` (values `4q..4q + 4`) of rows `8h..8h + 8` of panel block `pb`, unsigned (Q8_0:
/// the signed values).
///
/// # Safety
/// AVX2; `pb` points at a whole panel block of type `T`; `q` < the block's values / 4.
#[inline]
#[target_feature(enable = "avx2")]
unsafe fn quad<const T: u8>(pb: *const u8, q: usize, h: usize) -> __m256i {
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
unsafe fn operand<const T: u8, const V: bool>(pb: *const u8, q: usize, h: usize) -> __m256i {
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
unsafe fn unpack<const T: u8, const NQ: usize, const V: bool>(pb: *const u8, w: &mut Quads) {
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
unsafe fn scales_k<const T: u8, const V: bool>(pb: *const u8) -> Scales {
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
unsafe fn k_floats<const T: u8>(pb: *const u8) -> Floats {
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

/// The integer totals of `R` activation rows (`x[j]`: their values in this block) with panel
/// block `pb`: per half, the sum over groups of (sum of the group's quad products) times the
/// group's scale. `QPG` quads share a scale; `scales` is `None` for the 32-wide formats
/// (scale one). AVX2 (`V` false) sums `C` quads in i16 (`vpmaddubsw`), then `vpmaddwd`
/// against the scale pair; Q8_0 multiplies magnitudes by sign-corrected activations.
/// AVX-VNNI sums a whole group with `vpdpbusd` in i32 (no i16 limit, so `C` does not apply),
/// then `vpmulld` by the scale. `BUF`:
/// the quads come from `w` ([`unpack`]), else they are unpacked from `pb` where they are
/// used.
///
/// # Safety
/// The instructions of variant `V`; `pb` as [`quad`]; each `x[j]` has `4 * NQ` readable
/// bytes.
#[inline(always)]
unsafe fn totals<
    const T: u8,
    const R: usize,
    const NQ: usize,
    const QPG: usize,
    const C: usize,
    const BUF: bool,
    const V: bool,
>(
    pb: *const u8,
    w: &Quads,
    scales: Option<&[__m256i; 32]>,
    x: [*const i8; R],
) -> [[__m256i; 2]; R] {
    // Quads summed before their scale is applied.
    let chunk = if V { QPG } else { C };
    // SAFETY: the caller's instructions; quad q of the block and its activations (caller).
    unsafe {
        let ones = _mm256_set1_epi16(1);
        let mut tot = [[_mm256_setzero_si256(); 2]; R];
        for g in 0..NQ / QPG {
            for c in 0..QPG / chunk {
                let mut s = [[_mm256_setzero_si256(); 2]; R];
                for i in 0..chunk {
                    let q = g * QPG + c * chunk + i;
                    let wq: [__m256i; 2] =
                        std::array::from_fn(
                            |h| if BUF { w[2 * q + h].assume_init() } else { operand::<T, V>(pb, q, h) },
                        );
                    let mag: [__m256i; 2] = std::array::from_fn(|h| {
                        if T != Q8_0 || V {
                            wq[h]
                        } else if BUF {
                            w[16 + 2 * q + h].assume_init()
                        } else {
                            _mm256_abs_epi8(wq[h])
                        }
                    });
                    for (j, xj) in x.iter().enumerate() {
                        let xb = bcast4(xj.add(4 * q));
                        for h in 0..2 {
                            s[j][h] = if V {
                                _mm256_dpbusd_avx_epi32(s[j][h], wq[h], xb)
                            } else if T == Q8_0 {
                                _mm256_add_epi16(s[j][h], _mm256_maddubs_epi16(mag[h], _mm256_sign_epi8(xb, wq[h])))
                            } else {
                                _mm256_add_epi16(s[j][h], _mm256_maddubs_epi16(wq[h], xb))
                            };
                        }
                    }
                }
                for j in 0..R {
                    for h in 0..2 {
                        let scaled = match (V, scales) {
                            (false, _) => _mm256_madd_epi16(s[j][h], scales.map_or(ones, |sc| sc[2 * g + h])),
                            (true, Some(sc)) => _mm256_mullo_epi32(s[j][h], sc[2 * g + h]),
                            (true, None) => s[j][h],
                        };
                        tot[j][h] = _mm256_add_epi32(tot[j][h], scaled);
                    }
                }
            }
        }
        tot
    }
}

/// `acc[lane] = fma(d[lane] * dx, t[lane], acc[lane])` on the 8 lanes of half `h` of `out`.
#[inline]
#[target_feature(enable = "avx2,fma")]
fn step(out: &mut [f32; PANEL], h: usize, d: __m256, dx: f32, t: __m256i) {
    // SAFETY: 8 f32 read and written at lane 8h of a 16-f32 array.
    unsafe {
        let p = out.as_mut_ptr().add(8 * h);
        _mm256_storeu_ps(
            p,
            _mm256_fmadd_ps(_mm256_mul_ps(d, _mm256_set1_ps(dx)), _mm256_cvtepi32_ps(t), _mm256_loadu_ps(p)),
        );
    }
}

/// `acc[lane] = fma(-(dmin[lane] * dx), m[lane], acc[lane])` on half `h` of `out`.
#[inline]
#[target_feature(enable = "avx2,fma")]
fn step_min(out: &mut [f32; PANEL], h: usize, dmin: __m256, dx: f32, m: __m256i) {
    // SAFETY: as step.
    unsafe {
        let p = out.as_mut_ptr().add(8 * h);
        _mm256_storeu_ps(
            p,
            _mm256_fnmadd_ps(_mm256_mul_ps(dmin, _mm256_set1_ps(dx)), _mm256_cvtepi32_ps(m), _mm256_loadu_ps(p)),
        );
    }
}

/// Activation rows up to which a pass unpacks each quad where it is used (for each pair of
/// rows) rather than once into the L1 buffer: measured on a Zen 3 with `kbench` (the buffer's
/// stores and loads cost more than they save below 3 rows).
const STREAM_ROWS: usize = 2;

/// K family (Q4_K, Q5_K, Q6_K) on a panel.
///
/// # Safety
/// The instructions of variant `V`.
#[inline(always)]
unsafe fn panel_k<const T: u8, const V: bool>(panel: &[u8], x: &Q8KRows, r0: usize, out: &mut [[f32; PANEL]]) {
    let (m, nb, size) = (out.len(), x.blocks, ty(T).block().1);
    let prefetch = prefetches(Kernels::Avx2, m);
    assert!(
        panel.len() == nb * PANEL * size && r0 + m <= x.rows,
        "a panel of {} bytes for {nb} blocks, rows {r0}..{} of {}",
        panel.len(),
        r0 + m,
        x.rows
    );
    let cols = nb * QK_K;
    out.fill([0.0; PANEL]);
    // SAFETY: the caller's instructions; the panel block and every activation block read lie
    // inside their buffers (sizes checked above).
    unsafe {
        let mut w: Quads = [MaybeUninit::uninit(); 128];
        let buffered = m > STREAM_ROWS;
        for b in 0..nb {
            let pb = panel.as_ptr().add(b * PANEL * size);
            if prefetch {
                prefetch_ahead(pb, PANEL * size);
            }
            let s = scales_k::<T, V>(pb);
            // Fields in address order (one ascending stream the hardware prefetcher follows):
            // Q4_K's float scales lead the block, Q6_K's end it and are read after the quads.
            let mut f = if T == Q6K { None } else { Some(k_floats::<T>(pb)) };
            if buffered {
                unpack::<T, 64, V>(pb, &mut w);
            }
            let xq = |r: usize| x.qs.as_ptr().add((r0 + r) * cols + b * QK_K);
            let mut r = 0;
            while r < m {
                if r + 1 < m {
                    let t = if buffered {
                        k_totals::<T, 2, true, V>(pb, &w, &s.sc, [xq(r), xq(r + 1)])
                    } else {
                        k_totals::<T, 2, false, V>(pb, &w, &s.sc, [xq(r), xq(r + 1)])
                    };
                    let f = f.get_or_insert_with(|| k_floats::<T>(pb));
                    k_finish::<T>(&s, f, x, (r0 + r) * nb + b, t[0], &mut out[r]);
                    k_finish::<T>(&s, f, x, (r0 + r + 1) * nb + b, t[1], &mut out[r + 1]);
                    r += 2;
                } else {
                    let t = if buffered {
                        k_totals::<T, 1, true, V>(pb, &w, &s.sc, [xq(r)])
                    } else {
                        k_totals::<T, 1, false, V>(pb, &w, &s.sc, [xq(r)])
                    };
                    let f = f.get_or_insert_with(|| k_floats::<T>(pb));
                    k_finish::<T>(&s, f, x, (r0 + r) * nb + b, t[0], &mut out[r]);
                    r += 1;
                }
            }
        }
    }
}

/// [`totals`] with the K family's group sizes: Q4_K / Q5_K 8 quads a scale, Q6_K 4; AVX2's
/// i16 sums hold 8 quads of Q4_K, 4 of Q5_K (larger values) and 2 of Q6_K.
///
/// # Safety
/// As [`totals`] (256 values at each `x[j]`).
#[inline(always)]
unsafe fn k_totals<const T: u8, const R: usize, const BUF: bool, const V: bool>(
    pb: *const u8,
    w: &Quads,
    sc: &[__m256i; 32],
    x: [*const i8; R],
) -> [[__m256i; 2]; R] {
    // SAFETY: as the caller's.
    unsafe {
        match T {
            Q4K => totals::<T, R, 64, 8, 8, BUF, V>(pb, w, Some(sc), x),
            Q5K => totals::<T, R, 64, 8, 4, BUF, V>(pb, w, Some(sc), x),
            _ => totals::<T, R, 64, 4, 2, BUF, V>(pb, w, Some(sc), x),
        }
    }
}

/// A K block's float steps for activation block `row` (`row = r * blocks + b`): Q4_K / Q5_K
/// `fma(d dx, t)` then `fma(-(dmin dx), m)` with the minimum term from the sub-block sums;
/// Q6_K `fma(d dx, t - 32 sum_g sc_g bsum_g)`.
///
/// # Safety
/// AVX2, FMA; `row` is a block of `x`.
#[inline]
#[target_feature(enable = "avx2,fma")]
unsafe fn k_finish<const T: u8>(
    s: &Scales,
    f: &Floats,
    x: &Q8KRows,
    row: usize,
    t: [__m256i; 2],
    out: &mut [f32; PANEL],
) {
    let dx = x.d[row];
    for h in 0..2 {
        let mut o = _mm256_setzero_si256();
        if T == Q6K {
            let bs = x.bsums[row * 16..row * 16 + 16].as_ptr();
            for k in 0..8 {
                // SAFETY: sums 2k, 2k + 1 of the block's 16.
                o = _mm256_add_epi32(o, _mm256_madd_epi16(s.pairs[2 * k + h], unsafe { bcast4(bs.add(2 * k)) }));
            }
            step(out, h, f.d[h], dx, _mm256_sub_epi32(t[h], _mm256_slli_epi32::<5>(o)));
        } else {
            let bs = x.bsums32[row * 8..row * 8 + 8].as_ptr();
            for k in 0..4 {
                // SAFETY: sums 2k, 2k + 1 of the block's 8.
                o = _mm256_add_epi32(o, _mm256_madd_epi16(s.pairs[2 * k + h], unsafe { bcast4(bs.add(2 * k)) }));
            }
            step(out, h, f.d[h], dx, t[h]);
            step_min(out, h, f.dmin[h], dx, o);
        }
    }
}

/// B32 family (Q4_0, Q5_0, Q8_0) on a panel.
///
/// # Safety
/// The instructions of variant `V`.
#[inline(always)]
unsafe fn panel_b32<const T: u8, const V: bool>(panel: &[u8], x: &Q80Rows, r0: usize, out: &mut [[f32; PANEL]]) {
    let (m, nb, size) = (out.len(), x.blocks, ty(T).block().1);
    let prefetch = prefetches(Kernels::Avx2, m);
    assert!(
        panel.len() == nb * PANEL * size && r0 + m <= x.rows,
        "a panel of {} bytes for {nb} blocks, rows {r0}..{} of {}",
        panel.len(),
        r0 + m,
        x.rows
    );
    let cols = nb * QK8_0;
    out.fill([0.0; PANEL]);
    // SAFETY: as panel_k.
    unsafe {
        let mut w: Quads = [MaybeUninit::uninit(); 128];
        let buffered = m > STREAM_ROWS;
        for b in 0..nb {
            let pb = panel.as_ptr().add(b * PANEL * size);
            if prefetch {
                prefetch_ahead(pb, PANEL * size);
            }
            let d = [f16x8(pb), f16x8(pb.add(16))];
            if buffered {
                unpack::<T, 8, V>(pb, &mut w);
            }
            let xq = |r: usize| x.qs.as_ptr().add((r0 + r) * cols + b * QK8_0);
            let mut r = 0;
            while r < m {
                if r + 1 < m {
                    let t = if buffered {
                        b32_totals::<T, 2, true, V>(pb, &w, [xq(r), xq(r + 1)])
                    } else {
                        b32_totals::<T, 2, false, V>(pb, &w, [xq(r), xq(r + 1)])
                    };
                    b32_finish::<T, V>(&d, x, t[0], (r0 + r) * nb + b, &mut out[r]);
                    b32_finish::<T, V>(&d, x, t[1], (r0 + r + 1) * nb + b, &mut out[r + 1]);
                    r += 2;
                } else {
                    let t = if buffered {
                        b32_totals::<T, 1, true, V>(pb, &w, [xq(r)])
                    } else {
                        b32_totals::<T, 1, false, V>(pb, &w, [xq(r)])
                    };
                    b32_finish::<T, V>(&d, x, t[0], (r0 + r) * nb + b, &mut out[r]);
                    r += 1;
                }
            }
        }
    }
}

/// A 32-wide block's float step for activation block `row`: `fma(d dx, t - offset * sum)`
/// (Q8_0's products on AVX2 are of the signed values: no offset term).
#[inline]
#[target_feature(enable = "avx2,fma")]
fn b32_finish<const T: u8, const V: bool>(
    d: &[__m256; 2],
    x: &Q80Rows,
    t: [__m256i; 2],
    row: usize,
    out: &mut [f32; PANEL],
) {
    let off = if T == Q8_0 && !V { 0 } else { b32_offset(T) * x.sums[row] };
    for h in 0..2 {
        step(out, h, d[h], x.d[row], _mm256_sub_epi32(t[h], _mm256_set1_epi32(off)));
    }
}

/// [`totals`] with the 32-wide formats' sums: AVX2's i16 sums hold Q4_0 8 quads, Q5_0 4,
/// Q8_0 1; AVX-VNNI's i32 sums all 8.
///
/// # Safety
/// As [`totals`] (32 values at each `x[j]`).
#[inline(always)]
unsafe fn b32_totals<const T: u8, const R: usize, const BUF: bool, const V: bool>(
    pb: *const u8,
    w: &Quads,
    x: [*const i8; R],
) -> [[__m256i; 2]; R] {
    // SAFETY: as the caller's.
    unsafe {
        match T {
            Q4_0 => totals::<T, R, 8, 8, 8, BUF, V>(pb, w, None, x),
            Q5_0 => totals::<T, R, 8, 8, 4, BUF, V>(pb, w, None, x),
            _ => totals::<T, R, 8, 8, 1, BUF, V>(pb, w, None, x),
        }
    }
}
