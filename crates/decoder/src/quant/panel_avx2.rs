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
//! **Why not the row kernels** ([`super::int_x86`]): those redo each block's unpacking,
//! scale decoding and a horizontal sum for every tile of 4 activation rows; here all of it is
//! paid once per block for the whole pass, and no horizontal sum is needed at all.

use super::act::{Q80Rows, Q8KRows, QK8_0, QK_K};
use super::int_x86_blocks::{b32_offset, high4, low4, ty, Q4K, Q4_0, Q5K, Q5_0, Q6K, Q8_0};
use super::panel::PANEL;
use crate::gguf::GgmlType;
use std::arch::x86_64::*;

/// Activation rows per pass over a panel: their accumulators (16 f32 each, 4 KB) stay in L1.
pub const MAX_ROWS: usize = 64;

/// One panel block unpacked: `w[2q + h]` holds quad q of rows `8h..8h + 8` (Q8_0: the signed
/// values, and their magnitudes at `16 + 2q + h`).
type Quads = [__m256i; 128];

/// The i16 scale pairs of one block: `sc[2g + h]` (both halves of each lane: the scale of
/// group g of that weight row) and `pairs[2k + h]` (the offset multipliers of groups 2k and
/// 2k + 1, against two activation sums).
struct Scales {
    sc: [__m256i; 32],
    pairs: [__m256i; 16],
    d: [__m256; 2],
    dmin: [__m256; 2],
}

/// Dot products of one panel (16 weight rows of `t`, all blocks) with activation rows
/// `r0..r0 + out.len()`: `out[r][lane]` for weight row `lane` of the panel.
///
/// # Safety
/// The CPU must support AVX2, FMA and F16C ([`super::int::IntPath::Avx2`]).
pub unsafe fn panel_dots(t: GgmlType, panel: &[u8], k: Option<&Q8KRows>, b32: Option<&Q80Rows>, r0: usize, out: &mut [[f32; PANEL]]) {
    assert!(out.len() <= MAX_ROWS, "at most {MAX_ROWS} activation rows per pass");
    // SAFETY: the caller guarantees the instructions; the kernels check what they read.
    unsafe {
        match t {
            GgmlType::Q4K => panel_k::<Q4K>(panel, k.expect("Q8_K input"), r0, out),
            GgmlType::Q5K => panel_k::<Q5K>(panel, k.expect("Q8_K input"), r0, out),
            GgmlType::Q6K => panel_k::<Q6K>(panel, k.expect("Q8_K input"), r0, out),
            GgmlType::Q4_0 => panel_b32::<Q4_0>(panel, b32.expect("Q8_0 input"), r0, out),
            GgmlType::Q5_0 => panel_b32::<Q5_0>(panel, b32.expect("Q8_0 input"), r0, out),
            GgmlType::Q8_0 => panel_b32::<Q8_0>(panel, b32.expect("Q8_0 input"), r0, out),
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
    let base = _mm256_setr_epi8(0, 0, 0, 0, 4, 4, 4, 4, 8, 8, 8, 8, 12, 12, 12, 12, 0, 0, 0, 0, 4, 4, 4, 4, 8, 8, 8, 8, 12, 12, 12, 12);
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
            let hb = if j <= 4 { _mm256_sll_epi16(qh, _mm_cvtsi32_si128(4 - j as i32)) } else { _mm256_srl_epi16(qh, _mm_cvtsi32_si128(j as i32 - 4)) };
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

/// Every quad of panel block `pb` into `w` (Q8_0: and their magnitudes).
///
/// # Safety
/// As [`quad`].
#[inline]
#[target_feature(enable = "avx2")]
unsafe fn unpack<const T: u8, const NQ: usize>(pb: *const u8, w: &mut Quads) {
    for q in 0..NQ {
        for h in 0..2 {
            // SAFETY: as the caller's.
            w[2 * q + h] = unsafe { quad::<T>(pb, q, h) };
            if T == Q8_0 {
                w[16 + 2 * q + h] = _mm256_abs_epi8(w[2 * q + h]);
            }
        }
    }
}

/// Scales and float scales of K-family panel block `pb`, half by half.
///
/// # Safety
/// AVX2, F16C; `pb` points at a whole panel block of type `T`.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn scales_k<const T: u8>(pb: *const u8, s: &mut Scales) {
    // SAFETY: every offset lies inside the panel block (its layout: super::panel).
    unsafe {
        for h in 0..2 {
            let at = |off: usize| pb.add(off + 32 * h);
            if T == Q6K {
                let sv: [__m256i; 4] = std::array::from_fn(|c| ld(at(64 * c)));
                for g in 0..16 {
                    s.sc[2 * g + h] = pair_i8(sv[g / 4], (g % 4) as u8, (g % 4) as u8);
                }
                for k in 0..8 {
                    let b = 2 * (k % 2) as u8;
                    s.pairs[2 * k + h] = pair_i8(sv[k / 2], b, b + 1);
                }
                s.d[h] = f16x8(pb.add(3328 + 16 * h));
                continue;
            }
            // Q4_K / Q5_K: 6-bit scales and minimums of sub-blocks 0..4 (bytes of sc_lo,
            // mn_lo) and 4..8 (sc_hi, mn_hi), as llama.cpp reads the 12 bytes.
            let (s0, s1, s2) = (ld(at(64)), ld(at(128)), ld(at(192)));
            let (m63, mc0) = (_mm256_set1_epi8(63), _mm256_set1_epi8(0xc0u8 as i8));
            let sc_lo = _mm256_and_si256(s0, m63);
            let mn_lo = _mm256_and_si256(s1, m63);
            let sc_hi = _mm256_or_si256(low4(s2), _mm256_srli_epi16::<2>(_mm256_and_si256(s0, mc0)));
            let mn_hi = _mm256_or_si256(high4(s2), _mm256_srli_epi16::<2>(_mm256_and_si256(s1, mc0)));
            for j in 0..8 {
                let b = (j % 4) as u8;
                s.sc[2 * j + h] = pair_u8(if j < 4 { sc_lo } else { sc_hi }, b, b);
            }
            for k in 0..4 {
                let b = 2 * (k % 2) as u8;
                s.pairs[2 * k + h] = pair_u8(if k < 2 { mn_lo } else { mn_hi }, b, b + 1);
            }
            s.d[h] = f16x8(pb.add(16 * h));
            s.dmin[h] = f16x8(pb.add(32 + 16 * h));
        }
    }
}

/// The integer totals of `R` activation rows (`x[j]`: their values in this block) with panel
/// block `pb`: per half, `sum over groups of vpmaddwd(i16 sum of C quads, scale pair)`. `QPG`
/// quads share a scale; `scales` is `None` for the 32-wide formats (scale one). Q8_0
/// multiplies magnitudes by sign-corrected activations. `BUF`: the quads come from `w`
/// ([`unpack`]), else they are unpacked from `pb` where they are used.
///
/// # Safety
/// AVX2; `pb` as [`quad`]; each `x[j]` has `4 * NQ` readable bytes.
#[inline]
#[target_feature(enable = "avx2")]
unsafe fn totals<const T: u8, const R: usize, const NQ: usize, const QPG: usize, const C: usize, const BUF: bool>(
    pb: *const u8,
    w: &Quads,
    scales: Option<&[__m256i; 32]>,
    x: [*const i8; R],
) -> [[__m256i; 2]; R] {
    let ones = _mm256_set1_epi16(1);
    let mut tot = [[_mm256_setzero_si256(); 2]; R];
    for g in 0..NQ / QPG {
        for c in 0..QPG / C {
            let mut s = [[_mm256_setzero_si256(); 2]; R];
            for i in 0..C {
                let q = g * QPG + c * C + i;
                // SAFETY: quad q of the block (caller).
                let wq: [__m256i; 2] = std::array::from_fn(|h| if BUF { w[2 * q + h] } else { unsafe { quad::<T>(pb, q, h) } });
                let mag: [__m256i; 2] = std::array::from_fn(|h| if T != Q8_0 { wq[h] } else if BUF { w[16 + 2 * q + h] } else { _mm256_abs_epi8(wq[h]) });
                for (j, xj) in x.iter().enumerate() {
                    // SAFETY: quad q of the block (caller).
                    let xb = unsafe { bcast4(xj.add(4 * q)) };
                    for h in 0..2 {
                        let p = if T == Q8_0 { _mm256_maddubs_epi16(mag[h], _mm256_sign_epi8(xb, wq[h])) } else { _mm256_maddubs_epi16(wq[h], xb) };
                        s[j][h] = _mm256_add_epi16(s[j][h], p);
                    }
                }
            }
            for j in 0..R {
                for h in 0..2 {
                    let scale = scales.map_or(ones, |sc| sc[2 * g + h]);
                    tot[j][h] = _mm256_add_epi32(tot[j][h], _mm256_madd_epi16(s[j][h], scale));
                }
            }
        }
    }
    tot
}

/// `acc[lane] = fma(d[lane] * dx, t[lane], acc[lane])` on the 8 lanes of half `h` of `out`.
#[inline]
#[target_feature(enable = "avx2,fma")]
fn step(out: &mut [f32; PANEL], h: usize, d: __m256, dx: f32, t: __m256i) {
    // SAFETY: 8 f32 read and written at lane 8h of a 16-f32 array.
    unsafe {
        let p = out.as_mut_ptr().add(8 * h);
        _mm256_storeu_ps(p, _mm256_fmadd_ps(_mm256_mul_ps(d, _mm256_set1_ps(dx)), _mm256_cvtepi32_ps(t), _mm256_loadu_ps(p)));
    }
}

/// `acc[lane] = fma(-(dmin[lane] * dx), m[lane], acc[lane])` on half `h` of `out`.
#[inline]
#[target_feature(enable = "avx2,fma")]
fn step_min(out: &mut [f32; PANEL], h: usize, dmin: __m256, dx: f32, m: __m256i) {
    // SAFETY: as step.
    unsafe {
        let p = out.as_mut_ptr().add(8 * h);
        _mm256_storeu_ps(p, _mm256_fnmadd_ps(_mm256_mul_ps(dmin, _mm256_set1_ps(dx)), _mm256_cvtepi32_ps(m), _mm256_loadu_ps(p)));
    }
}

/// Activation rows up to which a pass unpacks each quad where it is used (for each pair of
/// rows) rather than once into the L1 buffer: measured on a Zen 3 with `kbench` (the buffer's
/// stores and loads cost more than they save below 3 rows).
const STREAM_ROWS: usize = 2;

/// K family (Q4_K, Q5_K, Q6_K) on a panel.
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn panel_k<const T: u8>(panel: &[u8], x: &Q8KRows, r0: usize, out: &mut [[f32; PANEL]]) {
    let (m, nb, size) = (out.len(), x.blocks, ty(T).block().1);
    assert!(panel.len() == nb * PANEL * size && r0 + m <= x.rows, "a panel of {} bytes for {nb} blocks, rows {r0}..{} of {}", panel.len(), r0 + m, x.rows);
    let cols = nb * QK_K;
    out.fill([0.0; PANEL]);
    let mut w: Quads = [_mm256_setzero_si256(); 128];
    let zero = _mm256_setzero_si256();
    let mut s = Scales { sc: [zero; 32], pairs: [zero; 16], d: [_mm256_setzero_ps(); 2], dmin: [_mm256_setzero_ps(); 2] };
    let buffered = m > STREAM_ROWS;
    for b in 0..nb {
        // SAFETY: the panel block and every activation block read lie inside their buffers
        // (sizes checked above).
        unsafe {
            let pb = panel.as_ptr().add(b * PANEL * size);
            scales_k::<T>(pb, &mut s);
            if buffered {
                unpack::<T, 64>(pb, &mut w);
            }
            let xq = |r: usize| x.qs.as_ptr().add((r0 + r) * cols + b * QK_K);
            let mut r = 0;
            while r < m {
                if r + 1 < m {
                    let t = if buffered { k_totals::<T, 2, true>(pb, &w, &s.sc, [xq(r), xq(r + 1)]) } else { k_totals::<T, 2, false>(pb, &w, &s.sc, [xq(r), xq(r + 1)]) };
                    k_finish::<T>(&s, x, (r0 + r) * nb + b, t[0], &mut out[r]);
                    k_finish::<T>(&s, x, (r0 + r + 1) * nb + b, t[1], &mut out[r + 1]);
                    r += 2;
                } else {
                    let t = if buffered { k_totals::<T, 1, true>(pb, &w, &s.sc, [xq(r)]) } else { k_totals::<T, 1, false>(pb, &w, &s.sc, [xq(r)]) };
                    k_finish::<T>(&s, x, (r0 + r) * nb + b, t[0], &mut out[r]);
                    r += 1;
                }
            }
        }
    }
}

/// [`totals`] with the K family's group sizes: Q4_K / Q5_K 8 quads a scale (Q5_K's larger
/// values: 4 per i16 sum), Q6_K 4 (2 per i16 sum).
///
/// # Safety
/// As [`totals`] (256 values at each `x[j]`).
#[inline]
#[target_feature(enable = "avx2")]
unsafe fn k_totals<const T: u8, const R: usize, const BUF: bool>(pb: *const u8, w: &Quads, sc: &[__m256i; 32], x: [*const i8; R]) -> [[__m256i; 2]; R] {
    // SAFETY: as the caller's.
    unsafe {
        match T {
            Q4K => totals::<T, R, 64, 8, 8, BUF>(pb, w, Some(sc), x),
            Q5K => totals::<T, R, 64, 8, 4, BUF>(pb, w, Some(sc), x),
            _ => totals::<T, R, 64, 4, 2, BUF>(pb, w, Some(sc), x),
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
unsafe fn k_finish<const T: u8>(s: &Scales, x: &Q8KRows, row: usize, t: [__m256i; 2], out: &mut [f32; PANEL]) {
    let dx = x.d[row];
    for h in 0..2 {
        let mut o = _mm256_setzero_si256();
        if T == Q6K {
            let bs = x.bsums[row * 16..row * 16 + 16].as_ptr();
            for k in 0..8 {
                // SAFETY: sums 2k, 2k + 1 of the block's 16.
                o = _mm256_add_epi32(o, _mm256_madd_epi16(s.pairs[2 * k + h], unsafe { bcast4(bs.add(2 * k)) }));
            }
            step(out, h, s.d[h], dx, _mm256_sub_epi32(t[h], _mm256_slli_epi32::<5>(o)));
        } else {
            let bs = x.bsums32[row * 8..row * 8 + 8].as_ptr();
            for k in 0..4 {
                // SAFETY: sums 2k, 2k + 1 of the block's 8.
                o = _mm256_add_epi32(o, _mm256_madd_epi16(s.pairs[2 * k + h], unsafe { bcast4(bs.add(2 * k)) }));
            }
            step(out, h, s.d[h], dx, t[h]);
            step_min(out, h, s.dmin[h], dx, o);
        }
    }
}

/// B32 family (Q4_0, Q5_0, Q8_0) on a panel.
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn panel_b32<const T: u8>(panel: &[u8], x: &Q80Rows, r0: usize, out: &mut [[f32; PANEL]]) {
    let (m, nb, size) = (out.len(), x.blocks, ty(T).block().1);
    assert!(panel.len() == nb * PANEL * size && r0 + m <= x.rows, "a panel of {} bytes for {nb} blocks, rows {r0}..{} of {}", panel.len(), r0 + m, x.rows);
    let cols = nb * QK8_0;
    out.fill([0.0; PANEL]);
    let mut w: Quads = [_mm256_setzero_si256(); 128];
    let buffered = m > STREAM_ROWS;
    for b in 0..nb {
        // SAFETY: as panel_k.
        unsafe {
            let pb = panel.as_ptr().add(b * PANEL * size);
            let d = [f16x8(pb), f16x8(pb.add(16))];
            if buffered {
                unpack::<T, 8>(pb, &mut w);
            }
            let xq = |r: usize| x.qs.as_ptr().add((r0 + r) * cols + b * QK8_0);
            let mut r = 0;
            while r < m {
                if r + 1 < m {
                    let t = if buffered { b32_totals::<T, 2, true>(pb, &w, [xq(r), xq(r + 1)]) } else { b32_totals::<T, 2, false>(pb, &w, [xq(r), xq(r + 1)]) };
                    b32_finish::<T>(&d, x, t[0], (r0 + r) * nb + b, &mut out[r]);
                    b32_finish::<T>(&d, x, t[1], (r0 + r + 1) * nb + b, &mut out[r + 1]);
                    r += 2;
                } else {
                    let t = if buffered { b32_totals::<T, 1, true>(pb, &w, [xq(r)]) } else { b32_totals::<T, 1, false>(pb, &w, [xq(r)]) };
                    b32_finish::<T>(&d, x, t[0], (r0 + r) * nb + b, &mut out[r]);
                    r += 1;
                }
            }
        }
    }
}

/// A 32-wide block's float step for activation block `row`: `fma(d dx, t - offset * sum)`
/// (Q8_0's products are of the signed values: no offset term).
#[inline]
#[target_feature(enable = "avx2,fma")]
fn b32_finish<const T: u8>(d: &[__m256; 2], x: &Q80Rows, t: [__m256i; 2], row: usize, out: &mut [f32; PANEL]) {
    let off = if T == Q8_0 { 0 } else { b32_offset(T) * x.sums[row] };
    for h in 0..2 {
        step(out, h, d[h], x.d[row], _mm256_sub_epi32(t[h], _mm256_set1_epi32(off)));
    }
}

/// [`totals`] with the 32-wide formats' i16 sums: Q4_0 8 quads, Q5_0 4, Q8_0 1.
///
/// # Safety
/// As [`totals`] (32 values at each `x[j]`).
#[inline]
#[target_feature(enable = "avx2")]
unsafe fn b32_totals<const T: u8, const R: usize, const BUF: bool>(pb: *const u8, w: &Quads, x: [*const i8; R]) -> [[__m256i; 2]; R] {
    // SAFETY: as the caller's.
    unsafe {
        match T {
            Q4_0 => totals::<T, R, 8, 8, 8, BUF>(pb, w, None, x),
            Q5_0 => totals::<T, R, 8, 8, 4, BUF>(pb, w, None, x),
            _ => totals::<T, R, 8, 8, 1, BUF>(pb, w, None, x),
        }
    }
}
