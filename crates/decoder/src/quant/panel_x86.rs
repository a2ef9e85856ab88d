//! AVX-512 VNNI kernels on weight panels ([`super::panel`]): 16 weight rows in the 16 i32
//! lanes, four activation bytes broadcast to every lane, one `vpdpbusd` per 64 products.
//!
//! Per block, the panel's values are unpacked once in registers and serve every activation
//! row of the call (up to [`MAX_ROWS`] per pass, in groups of [`ROW_GROUP`]): sub-block sums
//! (exact i32) times their scales (`vpmulld`, or `vpdpwssd` for Q4_K's i16-sized sums), the
//! offset terms through the activation sums in `vpdpwssd` pairs, then the reference's two
//! float steps per block ([`super::int`]) on 16 outputs at once. Integer
//! results are exact and the float steps are the reference's in its order, so the results
//! are the portable path's bits.

use super::act::{Q8KRows, Q80Rows, QK_K, QK8_0};
use super::int_x86_blocks::{Q4_0, Q4K, Q5K, Q6K, Q8_0, b32_offset, ty};
use super::panel::{Kernels, PANEL, prefetch_ahead, prefetches};
use super::panel_families::{PanelFamilies, PanelPass, by_type, check_pass};
use std::arch::x86_64::*;
use std::mem::MaybeUninit;

/// Activation rows per pass over a panel: one i32 total and one f32 accumulator each, kept
/// in L1 between sub-blocks (4 KB at 32 rows). Each pass unpacks every panel block once, so
/// longer passes unpack less per row: 32 rows made 128-row target forwards 4-8% faster
/// than 16 on an Emerald Rapids Xeon, and 64 no faster than 32 (docs/performance).
pub const MAX_ROWS: usize = 32;

/// Dot products of one panel (16 weight rows of `ty`, all blocks) with activation rows
/// `r0..r0 + out.len()` of `x`: `out[r][lane]` for weight row `lane` of the panel.
///
/// # Safety
/// The CPU must support AVX-512 F/BW/VL and VNNI ([`super::int::IntPath::Avx512Vnni`]).
pub unsafe fn panel_dots(pass: PanelPass, out: &mut [[f32; PANEL]]) {
    assert!(out.len() <= MAX_ROWS, "at most {MAX_ROWS} activation rows per pass");
    // SAFETY: the caller guarantees the instructions.
    unsafe { by_type::<Avx512>(pass, out) }
}

/// The AVX-512 VNNI kernels as a [`PanelFamilies`] set.
struct Avx512;

impl PanelFamilies for Avx512 {
    #[inline(always)]
    unsafe fn k<const T: u8>(panel: &[u8], x: &Q8KRows, r0: usize, out: &mut [[f32; PANEL]]) {
        // SAFETY: as the caller's.
        unsafe { panel_k::<T>(panel, x, r0, out) }
    }
    #[inline(always)]
    unsafe fn b32<const T: u8>(panel: &[u8], x: &Q80Rows, r0: usize, out: &mut [[f32; PANEL]]) {
        // SAFETY: as the caller's.
        unsafe { panel_b32::<T>(panel, x, r0, out) }
    }
}

/// The 64 bytes at `p`.
#[inline]
#[target_feature(enable = "avx512f")]
unsafe fn ld(p: *const u8) -> __m512i {
    // SAFETY: 64 readable bytes at p (caller).
    unsafe { _mm512_loadu_si512(p.cast()) }
}

/// The 4 bytes at `p` in every lane.
#[inline]
#[target_feature(enable = "avx512f")]
unsafe fn bcast4<P>(p: *const P) -> __m512i {
    // SAFETY: 4 readable bytes at p (caller).
    _mm512_set1_epi32(unsafe { std::ptr::read_unaligned(p.cast::<i32>()) })
}

/// Lane-wise `(v >> 8 * byte) & 0xff`: byte `byte` of every lane, zero-extended.
#[inline]
#[target_feature(enable = "avx512f")]
fn byte_u32(v: __m512i, byte: u32) -> __m512i {
    _mm512_and_si512(_mm512_srlv_epi32(v, _mm512_set1_epi32(8 * byte as i32)), _mm512_set1_epi32(0xff))
}

/// Byte `byte` of every lane, sign-extended.
#[inline]
#[target_feature(enable = "avx512f")]
fn byte_i32(v: __m512i, byte: u32) -> __m512i {
    _mm512_srai_epi32::<24>(_mm512_sllv_epi32(v, _mm512_set1_epi32(24 - 8 * byte as i32)))
}

/// Lanes of two i16 halves: `lo` (its low 16 bits) and `hi`.
#[inline]
#[target_feature(enable = "avx512f")]
fn pair16(lo: __m512i, hi: __m512i) -> __m512i {
    _mm512_or_si512(_mm512_and_si512(lo, _mm512_set1_epi32(0xffff)), _mm512_slli_epi32::<16>(hi))
}

/// The 16 f16 at `p` as f32.
#[inline]
#[target_feature(enable = "avx512f,avx2")]
unsafe fn f16x16(p: *const u8) -> __m512 {
    // SAFETY: 32 readable bytes at p (caller).
    unsafe { _mm512_cvtph_ps(_mm256_loadu_si256(p.cast())) }
}

/// Dot products of `quads` with `R` activation rows at once (`xs[i]`: row i's bytes), each
/// row's sum in two chains (even and odd quads: half the latency of one), left apart. The
/// rows' chains are interleaved instruction by instruction: `2 R` independent chains keep both
/// `vpdpbusd` ports busy, where one row at a time left each of its two chains waiting on the
/// 5-cycle latency and the out-of-order window overlapped too few rows to hide it. A weight vector is read once for the `R` rows (Q6_K's
/// come from L1).
#[inline]
#[target_feature(enable = "avx512f,avx512bw,avx512vnni")]
unsafe fn dot_chains<const Q: usize, const R: usize>(quads: &[__m512i; Q], xs: &[*const i8; R]) -> [[__m512i; 2]; R] {
    let mut acc = [[_mm512_setzero_si512(); 2]; R];
    for (i, q) in quads.iter().enumerate() {
        for (a, x) in acc.iter_mut().zip(xs) {
            // SAFETY: 4 * Q readable bytes at each x (caller).
            a[i % 2] = _mm512_dpbusd_epi32(a[i % 2], *q, unsafe { bcast4(x.add(4 * i)) });
        }
    }
    acc
}

/// Rows per group of [`dot_chains`]: measured on Emerald Rapids (docs/performance).
const ROW_GROUP: usize = 4;

/// `tot[r] += scale * sum` of `quads` against row r's bytes at `x_of(r)`, for every row of
/// `tot` (`first`: `=`, the block's first term, which spares clearing the totals per block):
/// in groups of [`ROW_GROUP`], the rest one at a time.
///
/// `narrow`: each chain's sum fits an i16 (Q4_K: 16 products of at most 15 x 127), so one
/// `vpdpwssd` per chain multiplies it by the scale (in each lane's low i16, the high one zero)
/// and adds it, where the chains' sum, `vpmulld` (2 uops) and the add take 4 uops (LLVM emits
/// the second `vpdpwssd` as `vpmaddwd` + `vpaddd`: 3).
#[inline]
#[target_feature(enable = "avx512f,avx512bw,avx512vnni")]
unsafe fn add_scaled_dots<const Q: usize>(
    quads: &[__m512i; Q],
    scale: __m512i,
    narrow: bool,
    first: bool,
    tot: &mut [MaybeUninit<__m512i>],
    x_of: impl Fn(usize) -> *const i8,
) {
    let add = |t: &mut MaybeUninit<__m512i>, [a, b]: [__m512i; 2]| {
        // SAFETY: after the first term every total has been written.
        let prev = if first { _mm512_setzero_si512() } else { unsafe { t.assume_init() } };
        t.write(if narrow {
            _mm512_dpwssd_epi32(_mm512_dpwssd_epi32(prev, a, scale), b, scale)
        } else {
            _mm512_add_epi32(prev, _mm512_mullo_epi32(_mm512_add_epi32(a, b), scale))
        });
    };
    let mut groups = tot.chunks_exact_mut(ROW_GROUP);
    let mut r = 0;
    for group in &mut groups {
        let xs: [*const i8; ROW_GROUP] = std::array::from_fn(|i| x_of(r + i));
        // SAFETY: x_of gives rows with 4 * Q readable bytes (caller).
        let chains = unsafe { dot_chains(quads, &xs) };
        for (t, c) in group.iter_mut().zip(chains) {
            add(t, c);
        }
        r += ROW_GROUP;
    }
    for t in groups.into_remainder() {
        // SAFETY: as above.
        let [c] = unsafe { dot_chains(quads, &[x_of(r)]) };
        add(t, c);
        r += 1;
    }
}

/// Q6_K's block totals `sum_g scale_g * (quads of group g . row's values 16g..)` of `R` rows
/// at `xs`: the rows' totals stay in registers over the 16 groups, each group's quads read
/// from L1 once for the `R` rows.
#[inline]
#[target_feature(enable = "avx512f,avx512bw,avx512vnni")]
unsafe fn q6k_totals<const R: usize>(
    quads: &[__m512i; 64],
    scales: &[__m512i; 16],
    xs: [*const i8; R],
) -> [__m512i; R] {
    let mut tot = [_mm512_setzero_si512(); R];
    for g in 0..16 {
        let q4: &[__m512i; 4] = quads[4 * g..4 * g + 4].try_into().expect("four quads");
        // SAFETY: each row's 256 values lie at xs[i] (caller).
        let chains = unsafe { dot_chains(q4, &xs.map(|x| x.add(16 * g))) };
        for (t, [a, b]) in tot.iter_mut().zip(chains) {
            *t = _mm512_add_epi32(*t, _mm512_mullo_epi32(_mm512_add_epi32(a, b), scales[g]));
        }
    }
    tot
}

/// K family (Q4_K, Q5_K, Q6_K) on a panel. Per block, the scales are decoded once; Q6_K
/// unpacks its 64 quads (4 values of 16 rows each) into L1, then groups of activation rows run
/// its 16 groups with their block totals in registers (a total kept in memory across groups
/// made one row a chain of store-to-load latencies); Q4_K and Q5_K unpack sub-block by
/// sub-block and serve every row from registers (Q5_K with its 8 `qh` vectors held for the
/// whole block), the rows' totals in L1. Rows go in groups of [`ROW_GROUP`] ([`dot_chains`]).
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c")]
unsafe fn panel_k<const T: u8>(panel: &[u8], x: &Q8KRows, r0: usize, out: &mut [[f32; PANEL]]) {
    let (m, nb, size) = (out.len(), x.blocks, ty(T).block().1);
    let prefetch = prefetches(Kernels::Avx512, m);
    check_pass(panel, nb, size, r0, m, x.rows);
    let cols = nb * QK_K;
    let m0f = _mm512_set1_epi8(0x0f);
    // No array is zeroed: every block writes what it reads (zeroing them per call cost a 9 KB
    // memset per panel pass, 4.8% of a 128-row prefill), and the sums accumulate in `out`.
    // Each activation row's block total.
    let mut tot = [MaybeUninit::<__m512i>::uninit(); MAX_ROWS];
    for b in 0..nb {
        // SAFETY: the panel block and every activation block read lie inside their buffers
        // (sizes checked above).
        unsafe {
            let pb = panel.as_ptr().add(b * PANEL * size);
            if prefetch {
                prefetch_ahead(pb, PANEL * size);
            }
            // Every field in address order (one ascending stream the hardware prefetcher
            // follows; reading Q6_K's trailing `d` first made one-row calls 1.5x slower):
            // Q4_K's `d` and `dmin` lead its block, Q6_K's `d` ends it.
            // i16 pairs for the offset terms: Q4_K's minimums (4 pairs), Q6_K's scales (8).
            let (d, dmin, pairs): (_, _, [__m512i; 8]);
            if T == Q4K || T == Q5K {
                (d, dmin) = (f16x16(pb), f16x16(pb.add(32)));
                // 6-bit scales and minimums of sub-blocks 0..4 (bytes of sc_lo, mn_lo) and 4..8.
                let (s0, s1, s2) = (ld(pb.add(64)), ld(pb.add(128)), ld(pb.add(192)));
                let (m63, mc0) = (_mm512_set1_epi8(63), _mm512_set1_epi8(0xc0u8 as i8));
                let sc_lo = _mm512_and_si512(s0, m63);
                let mn_lo = _mm512_and_si512(s1, m63);
                let sc_hi =
                    _mm512_or_si512(_mm512_and_si512(s2, m0f), _mm512_srli_epi16::<2>(_mm512_and_si512(s0, mc0)));
                let mn_hi = _mm512_or_si512(
                    _mm512_and_si512(_mm512_srli_epi16::<4>(s2), m0f),
                    _mm512_srli_epi16::<2>(_mm512_and_si512(s1, mc0)),
                );
                let scales: [__m512i; 8] =
                    std::array::from_fn(|j| byte_u32(if j < 4 { sc_lo } else { sc_hi }, (j % 4) as u32));
                pairs = std::array::from_fn(|k| {
                    let v = if k < 2 { mn_lo } else { mn_hi };
                    if k < 4 {
                        pair16(byte_u32(v, 2 * (k % 2) as u32), byte_u32(v, 2 * (k % 2) as u32 + 1))
                    } else {
                        _mm512_setzero_si512()
                    }
                });
                // Q5_K: the fifth bits of all 256 values, then `qs` after them.
                let qh: [__m512i; 8] =
                    std::array::from_fn(|v| if T == Q5K { ld(pb.add(256 + 64 * v)) } else { _mm512_setzero_si512() });
                let qs_at = if T == Q5K { 768 } else { 256 };
                let m10 = _mm512_set1_epi8(0x10);
                // Sub-block by sub-block straight from the panel (through an L1 buffer of all
                // 64 quads, one-row calls from memory ran at half speed), totals in L1.
                for j in 0..8 {
                    let q: [__m512i; 8] = std::array::from_fn(|v| {
                        let w = ld(pb.add(qs_at + 64 * (8 * (j / 2) + v)));
                        let nib = if j % 2 == 0 {
                            _mm512_and_si512(w, m0f)
                        } else {
                            _mm512_and_si512(_mm512_srli_epi16::<4>(w), m0f)
                        };
                        if T == Q5K {
                            // Bit j of each qh byte moved to bit 4 (16-bit shifts carry bits
                            // across bytes, but never into bit 4 for shifts of at most 4).
                            let hb = if j <= 4 {
                                _mm512_sll_epi16(qh[v], _mm_cvtsi32_si128(4 - j as i32))
                            } else {
                                _mm512_srl_epi16(qh[v], _mm_cvtsi32_si128(j as i32 - 4))
                            };
                            // nib | (hb & 0x10)
                            _mm512_ternarylogic_epi32::<0xf8>(nib, hb, m10)
                        } else {
                            nib
                        }
                    });
                    add_scaled_dots(&q, scales[j], T == Q4K, j == 0, &mut tot[..m], |r| {
                        x.qs.as_ptr().add((r0 + r) * cols + b * QK_K + 32 * j)
                    });
                }
            } else {
                let sv: [__m512i; 4] = std::array::from_fn(|c| ld(pb.add(64 * c)));
                let scales: [__m512i; 16] = std::array::from_fn(|g| byte_i32(sv[g / 4], (g % 4) as u32));
                pairs = std::array::from_fn(|k| {
                    let byte = 2 * (k % 2) as u32;
                    pair16(byte_i32(sv[k / 2], byte), byte_i32(sv[k / 2], byte + 1))
                });
                // The 64 quads in value order (group g's four at 4g), every one written below.
                let mut quads = [MaybeUninit::<__m512i>::uninit(); 64];
                // Half h, quad v of 32: ql bytes (region 0 low, 2 high) and (1 low, 3 high), qh
                // bits 2c, 2c + 1 for region c; region c's quad v is in group 8h + 2c + v / 4.
                let m30 = _mm512_set1_epi8(0x30);
                for h in 0..2 {
                    for v in 0..8 {
                        let at_hv = pb.add(256 + 192 * (8 * h + v));
                        let (a, bb, qh) = (ld(at_hv), ld(at_hv.add(64)), ld(at_hv.add(128)));
                        let at = |c: usize| 4 * (8 * h + 2 * c + v / 4) + v % 4;
                        // nib | (hb & 0x30)
                        quads[at(0)].write(_mm512_ternarylogic_epi32::<0xf8>(
                            _mm512_and_si512(a, m0f),
                            _mm512_slli_epi16::<4>(qh),
                            m30,
                        ));
                        quads[at(1)].write(_mm512_ternarylogic_epi32::<0xf8>(
                            _mm512_and_si512(bb, m0f),
                            _mm512_slli_epi16::<2>(qh),
                            m30,
                        ));
                        quads[at(2)].write(_mm512_ternarylogic_epi32::<0xf8>(
                            _mm512_and_si512(_mm512_srli_epi16::<4>(a), m0f),
                            qh,
                            m30,
                        ));
                        quads[at(3)].write(_mm512_ternarylogic_epi32::<0xf8>(
                            _mm512_and_si512(_mm512_srli_epi16::<4>(bb), m0f),
                            _mm512_srli_epi16::<2>(qh),
                            m30,
                        ));
                    }
                }
                (d, dmin) = (f16x16(pb.add(3328)), _mm512_setzero_ps());
                // at(c) over h < 2, c < 4, v < 8 covers 0..64 once: every quad is written.
                let quads = &*quads.as_ptr().cast::<[__m512i; 64]>();
                let x_at = |r: usize| x.qs.as_ptr().add((r0 + r) * cols + b * QK_K);
                let mut groups = tot[..m].chunks_exact_mut(ROW_GROUP);
                let mut r = 0;
                for group in &mut groups {
                    let totals = q6k_totals::<ROW_GROUP>(quads, &scales, std::array::from_fn(|i| x_at(r + i)));
                    for (t, v) in group.iter_mut().zip(totals) {
                        t.write(v);
                    }
                    r += ROW_GROUP;
                }
                for t in groups.into_remainder() {
                    let [v] = q6k_totals(quads, &scales, [x_at(r)]);
                    t.write(v);
                    r += 1;
                }
            }
            for r in 0..m {
                let row = (r0 + r) * nb + b;
                let dx = _mm512_set1_ps(x.d[row]);
                let t = tot[r].assume_init();
                let acc = if b == 0 { _mm512_setzero_ps() } else { _mm512_loadu_ps(out[r].as_ptr()) };
                if T != Q6K {
                    // m_b = sum_j mn_j * (sum of sub-block j's activations), two per step.
                    let bs = x.bsums32.as_ptr().add(row * 8);
                    let mut mm = _mm512_setzero_si512();
                    for (k, mv) in pairs[..4].iter().enumerate() {
                        mm = _mm512_dpwssd_epi32(mm, *mv, bcast4(bs.add(2 * k)));
                    }
                    let acc = _mm512_fmadd_ps(_mm512_mul_ps(d, dx), _mm512_cvtepi32_ps(t), acc);
                    _mm512_storeu_ps(
                        out[r].as_mut_ptr(),
                        _mm512_fnmadd_ps(_mm512_mul_ps(dmin, dx), _mm512_cvtepi32_ps(mm), acc),
                    );
                } else {
                    // The `q - 32` offset: 32 * sum_g sc_g * bsum_g, two groups per step.
                    let bs = x.bsums.as_ptr().add(row * 16);
                    let mut o = _mm512_setzero_si512();
                    for (k, sv2) in pairs.iter().enumerate() {
                        o = _mm512_dpwssd_epi32(o, *sv2, bcast4(bs.add(2 * k)));
                    }
                    let total = _mm512_sub_epi32(t, _mm512_slli_epi32::<5>(o));
                    _mm512_storeu_ps(
                        out[r].as_mut_ptr(),
                        _mm512_fmadd_ps(_mm512_mul_ps(d, dx), _mm512_cvtepi32_ps(total), acc),
                    );
                }
            }
        }
    }
}

/// B32 family (Q4_0, Q5_0, Q8_0) on a panel.
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c")]
unsafe fn panel_b32<const T: u8>(panel: &[u8], x: &Q80Rows, r0: usize, out: &mut [[f32; PANEL]]) {
    let (m, nb, size) = (out.len(), x.blocks, ty(T).block().1);
    let prefetch = prefetches(Kernels::Avx512, m);
    check_pass(panel, nb, size, r0, m, x.rows);
    let cols = nb * QK8_0;
    let offset = b32_offset(T);
    let m0f = _mm512_set1_epi8(0x0f);
    // Q5_0: byte j of quad t takes bit 4t + j of its row's qh: byte t / 2 of the lane, spread
    // over the lane's 4 bytes, tested against bit 4 (t % 2) + j.
    let spread: [__m512i; 4] = std::array::from_fn(|s| {
        let v: [u8; 64] = std::array::from_fn(|i| ((i % 16) / 4 * 4 + s) as u8);
        // SAFETY: 64 bytes read from a 64-byte array.
        unsafe { _mm512_loadu_si512(v.as_ptr().cast()) }
    });
    let bit: [__m512i; 2] =
        std::array::from_fn(|h| _mm512_set1_epi32(i32::from_le_bytes(std::array::from_fn(|j| 1u8 << (4 * h + j)))));
    for b in 0..nb {
        // SAFETY: as panel_k.
        unsafe {
            let pb = panel.as_ptr().add(b * PANEL * size);
            if prefetch {
                prefetch_ahead(pb, PANEL * size);
            }
            let q: [__m512i; 8] = match T {
                Q8_0 => std::array::from_fn(|t| _mm512_xor_si512(ld(pb.add(32 + 64 * t)), _mm512_set1_epi8(-128))),
                _ => {
                    let at = if T == Q4_0 { 32 } else { 96 };
                    let qh = ld(pb.add(32));
                    std::array::from_fn(|t| {
                        let w = ld(pb.add(at + 64 * (t % 4)));
                        let nib = if t < 4 {
                            _mm512_and_si512(w, m0f)
                        } else {
                            _mm512_and_si512(_mm512_srli_epi16::<4>(w), m0f)
                        };
                        if T == Q4_0 {
                            return nib;
                        }
                        let k = _mm512_test_epi8_mask(_mm512_shuffle_epi8(qh, spread[t / 2]), bit[t % 2]);
                        _mm512_mask_add_epi8(nib, k, nib, _mm512_set1_epi8(0x10))
                    })
                }
            };
            let d = f16x16(pb);
            for r in 0..m {
                let xp = x.qs.as_ptr().add((r0 + r) * cols + b * QK8_0);
                let [[even, odd]] = dot_chains(&q, &[xp]);
                let g = _mm512_add_epi32(even, odd);
                let i = (r0 + r) * nb + b;
                let total = _mm512_sub_epi32(g, _mm512_set1_epi32(offset * x.sums[i]));
                // The block sums accumulate in `out` (no array to zero per call).
                let acc = if b == 0 { _mm512_setzero_ps() } else { _mm512_loadu_ps(out[r].as_ptr()) };
                _mm512_storeu_ps(
                    out[r].as_mut_ptr(),
                    _mm512_fmadd_ps(_mm512_mul_ps(d, _mm512_set1_ps(x.d[i])), _mm512_cvtepi32_ps(total), acc),
                );
            }
        }
    }
}
