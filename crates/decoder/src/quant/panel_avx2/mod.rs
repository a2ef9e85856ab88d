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
use super::int_x86_blocks::{Q4_0, Q4K, Q5_0, Q5K, Q6K, Q8_0, b32_offset, ty};
use super::panel::{Kernels, PANEL, prefetch_ahead, prefetches};
use super::panel_families::{PanelFamilies, PanelPass, by_type, check_pass};
mod lanes;

use lanes::{Floats, Quads, Scales, bcast4, f16x8, k_floats, operand, scales_k, unpack};
use std::arch::x86_64::*;
use std::mem::MaybeUninit;

/// Activation rows per pass over a panel: their accumulators (16 f32 each, 4 KB) stay in L1.
pub const MAX_ROWS: usize = 64;

/// Dot products of one panel (16 weight rows of `t`, all blocks) with activation rows
/// `r0..r0 + out.len()`: `out[r][lane]` for weight row `lane` of the panel; with `vnni`, by
/// the AVX-VNNI kernels.
///
/// # Safety
/// The CPU must support AVX2, FMA and F16C ([`super::int::IntPath::Avx2`]), and AVX-VNNI
/// with `vnni` ([`super::int::IntPath::AvxVnni`]).
pub unsafe fn panel_dots(pass: PanelPass, out: &mut [[f32; PANEL]], vnni: bool) {
    assert!(out.len() <= MAX_ROWS, "at most {MAX_ROWS} activation rows per pass");
    // SAFETY: the caller guarantees the instructions.
    unsafe { if vnni { dots_vnni(pass, out) } else { dots_avx2(pass, out) } }
}

/// The kernels compiled for AVX2 (`vpmaddubsw`).
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn dots_avx2(pass: PanelPass, out: &mut [[f32; PANEL]]) {
    // SAFETY: as the caller's.
    unsafe { by_type::<Avx2<false>>(pass, out) }
}

/// The kernels compiled for AVX-VNNI (`vpdpbusd`).
#[target_feature(enable = "avx2,fma,f16c,avxvnni")]
unsafe fn dots_vnni(pass: PanelPass, out: &mut [[f32; PANEL]]) {
    // SAFETY: as the caller's.
    unsafe { by_type::<Avx2<true>>(pass, out) }
}

/// The kernels of variant `V` as a [`PanelFamilies`] set.
struct Avx2<const V: bool>;

impl<const V: bool> PanelFamilies for Avx2<V> {
    #[inline(always)]
    unsafe fn k<const T: u8>(panel: &[u8], x: &Q8KRows, r0: usize, out: &mut [[f32; PANEL]]) {
        // SAFETY: as the caller's.
        unsafe { panel_k::<T, V>(panel, x, r0, out) }
    }
    #[inline(always)]
    unsafe fn b32<const T: u8>(panel: &[u8], x: &Q80Rows, r0: usize, out: &mut [[f32; PANEL]]) {
        // SAFETY: as the caller's.
        unsafe { panel_b32::<T, V>(panel, x, r0, out) }
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
    check_pass(panel, nb, size, r0, m, x.rows);
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

/// B32 family (Q4_0, Q5_0, Q8_0) on a panel. Its block loop mirrors [`panel_k`]'s on purpose:
/// one generic pass for both families (a block trait driven in row pairs) made Q8_0 passes of
/// 40 rows 13-16% slower on the AVX2 path.
///
/// # Safety
/// The instructions of variant `V`.
#[inline(always)]
unsafe fn panel_b32<const T: u8, const V: bool>(panel: &[u8], x: &Q80Rows, r0: usize, out: &mut [[f32; PANEL]]) {
    let (m, nb, size) = (out.len(), x.blocks, ty(T).block().1);
    let prefetch = prefetches(Kernels::Avx2, m);
    check_pass(panel, nb, size, r0, m, x.rows);
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
