//! One weight row of ggml blocks unpacked for the integer kernels ([`super::int`]): every
//! quantized value as an unsigned byte in element order, with the block's integer scales and
//! its float scales beside. Unpacking happens once per weight row and call, into a per-thread
//! buffer that stays in L1, and then serves every activation row of the call.
//!
//! Two families, by the activation format they pair with:
//! - **K** (Q4_K, Q5_K, Q6_K; Q8_K activations): per 256-value block, `q` in 0..63, a scale per
//!   16 values (`sc`, multiplying `q * x` in integers), an offset multiplier per 16 values
//!   (`mn`, multiplying the activation sums: the Q4_K/Q5_K minimums, applied in float with
//!   `dmin`; for Q6_K `32 * sc`, its `q - 32` offset, applied in integers), `d` and `dmin`.
//! - **B32** (Q4_0, Q5_0, Q8_0; Q8_0 activations): per 32-value block, `q` unsigned with a
//!   fixed offset per type (8, 16, 128: the signed value is `q - offset`) and `d`.

use crate::gguf::{f16_at, GgmlType};

/// How a weight type meets the integer kernels.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Family {
    /// 256-value blocks with Q8_K activations; `float_mins` (Q4_K, Q5_K) or an integer offset
    /// of `32 * sc` (Q6_K).
    K { float_mins: bool },
    /// 32-value blocks with Q8_0 activations; the stored byte minus `offset` is the value.
    B32 { offset: i32 },
}

/// The integer family of `ty`, `None` for a type without an integer kernel.
pub fn family(ty: GgmlType) -> Option<Family> {
    Some(match ty {
        GgmlType::Q4K | GgmlType::Q5K => Family::K { float_mins: true },
        GgmlType::Q6K => Family::K { float_mins: false },
        GgmlType::Q4_0 => Family::B32 { offset: 8 },
        GgmlType::Q5_0 => Family::B32 { offset: 16 },
        GgmlType::Q8_0 => Family::B32 { offset: 128 },
        _ => return None,
    })
}

/// A weight row unpacked (reused buffer: [`UnpackedRow::unpack`] overwrites it).
#[derive(Clone, Debug, Default)]
pub struct UnpackedRow {
    pub family: Option<Family>,
    /// Blocks in the row.
    pub blocks: usize,
    /// Quantized values, one byte each, in element order.
    pub q: Vec<u8>,
    /// K: 16 scales per block.
    pub sc: Vec<i16>,
    /// K: 16 offset multipliers per block.
    pub mn: Vec<i16>,
    /// Float scale per block.
    pub d: Vec<f32>,
    /// K: float minimum scale per block (Q4_K, Q5_K).
    pub dmin: Vec<f32>,
}

impl UnpackedRow {
    /// Unpacks one row of `ty` blocks (`bytes`, a whole row).
    pub fn unpack(&mut self, ty: GgmlType, bytes: &[u8]) {
        let fam = family(ty).unwrap_or_else(|| panic!("{ty:?} has no integer kernel"));
        let (per, size) = ty.block();
        let blocks = bytes.len() / size;
        self.family = Some(fam);
        self.blocks = blocks;
        self.q.resize(blocks * per, 0);
        self.d.resize(blocks, 0.0);
        if let Family::K { .. } = fam {
            self.sc.resize(blocks * 16, 0);
            self.mn.resize(blocks * 16, 0);
            self.dmin.resize(blocks, 0.0);
        }
        unpack_values(ty, bytes, &mut self.q);
        for (i, b) in bytes.chunks_exact(size).enumerate() {
            match ty {
                GgmlType::Q4K | GgmlType::Q5K => {
                    self.d[i] = f16_at(b, 0);
                    self.dmin[i] = f16_at(b, 2);
                    self.k_scales(i, &b[4..16]);
                }
                GgmlType::Q6K => {
                    self.d[i] = f16_at(b, 208);
                    self.dmin[i] = 0.0;
                    for s in 0..16 {
                        let sc = b[192 + s] as i8 as i16;
                        self.sc[i * 16 + s] = sc;
                        self.mn[i * 16 + s] = 32 * sc;
                    }
                }
                _ => self.d[i] = f16_at(b, 0),
            }
        }
    }

    /// Q4_K/Q5_K: the eight 6-bit scales and minimums of block `i`, one per 16 values. The
    /// 12 bytes are rearranged as three 32-bit words (llama.cpp's masks) into 8 scale bytes
    /// and 8 minimum bytes, then each is written for both 16-value halves of its sub-block.
    fn k_scales(&mut self, i: usize, s: &[u8]) {
        const LOW6: u32 = 0x3f3f_3f3f;
        const LOW4: u32 = 0x0f0f_0f0f;
        const TOP2: u32 = 0x0303_0303;
        let w = |k: usize| u32::from_le_bytes([s[4 * k], s[4 * k + 1], s[4 * k + 2], s[4 * k + 3]]);
        let (w0, w1, w2) = (w(0), w(1), w(2));
        let scales = [w0 & LOW6, (w2 & LOW4) | (((w0 >> 6) & TOP2) << 4)];
        let mins = [w1 & LOW6, ((w2 >> 4) & LOW4) | (((w1 >> 6) & TOP2) << 4)];
        let bytes = |v: [u32; 2]| -> [u8; 8] {
            let mut b = [0u8; 8];
            b[..4].copy_from_slice(&v[0].to_le_bytes());
            b[4..].copy_from_slice(&v[1].to_le_bytes());
            b
        };
        let (sc, mn) = (bytes(scales), bytes(mins));
        let dst_sc: &mut [i16; 16] = (&mut self.sc[i * 16..i * 16 + 16]).try_into().expect("16 scales");
        *dst_sc = std::array::from_fn(|k| sc[k / 2] as i16);
        let dst_mn: &mut [i16; 16] = (&mut self.mn[i * 16..i * 16 + 16]).try_into().expect("16 minimums");
        *dst_mn = std::array::from_fn(|k| mn[k / 2] as i16);
    }
}

/// The values of every block of `ty` in `bytes` into `q` (one byte each, element order): through
/// AVX2 where this CPU has it, else [`scalar_values`] (the reference, tested equal).
fn unpack_values(ty: GgmlType, bytes: &[u8], q: &mut [u8]) {
    #[cfg(target_arch = "x86_64")]
    if is_x86_feature_detected!("avx2") {
        // SAFETY: AVX2 is present; bytes holds whole blocks of ty, q room for their values.
        unsafe { x86::values_row(ty, bytes, q) };
        return;
    }
    let (per, size) = ty.block();
    for (b, out) in bytes.chunks_exact(size).zip(q.chunks_exact_mut(per)) {
        scalar_values(ty, b, out);
    }
}

/// The values of one block `b` of `ty` into `q`, in plain Rust.
fn scalar_values(ty: GgmlType, b: &[u8], q: &mut [u8]) {
    match ty {
        GgmlType::Q4K => {
            for (c, qs) in b[16..144].chunks_exact(32).enumerate() {
                for l in 0..32 {
                    q[64 * c + l] = qs[l] & 0x0f;
                    q[64 * c + 32 + l] = qs[l] >> 4;
                }
            }
        }
        GgmlType::Q5K => {
            let qh = &b[16..48];
            for (c, qs) in b[48..176].chunks_exact(32).enumerate() {
                let (u1, u2) = (1u8 << (2 * c), 2u8 << (2 * c));
                for l in 0..32 {
                    q[64 * c + l] = (qs[l] & 0x0f) | if qh[l] & u1 != 0 { 16 } else { 0 };
                    q[64 * c + 32 + l] = (qs[l] >> 4) | if qh[l] & u2 != 0 { 16 } else { 0 };
                }
            }
        }
        GgmlType::Q6K => {
            for h in 0..2 {
                let ql = &b[64 * h..64 * h + 64];
                let qh = &b[128 + 32 * h..128 + 32 * h + 32];
                let out = &mut q[128 * h..128 * h + 128];
                for l in 0..32 {
                    out[l] = (ql[l] & 0x0f) | ((qh[l] & 3) << 4);
                    out[l + 32] = (ql[l + 32] & 0x0f) | (((qh[l] >> 2) & 3) << 4);
                    out[l + 64] = (ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4);
                    out[l + 96] = (ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4);
                }
            }
        }
        GgmlType::Q4_0 => {
            for j in 0..16 {
                q[j] = b[2 + j] & 0x0f;
                q[j + 16] = b[2 + j] >> 4;
            }
        }
        GgmlType::Q5_0 => {
            let qh = u32::from_le_bytes([b[2], b[3], b[4], b[5]]);
            for j in 0..16 {
                q[j] = (b[6 + j] & 0x0f) | ((((qh >> j) << 4) & 0x10) as u8);
                q[j + 16] = (b[6 + j] >> 4) | (((qh >> (j + 12)) & 0x10) as u8);
            }
        }
        GgmlType::Q8_0 => {
            for j in 0..32 {
                q[j] = b[2 + j] ^ 0x80; // i8 + 128
            }
        }
        _ => unreachable!("no integer family for {ty:?}"),
    }
}

/// AVX2 unpacking of the values (not the scales) of one block, equal to the scalar loops.
#[cfg(target_arch = "x86_64")]
mod x86 {
    use crate::gguf::GgmlType;
    use std::arch::x86_64::*;

    #[inline]
    #[target_feature(enable = "avx2")]
    fn low(v: __m256i) -> __m256i {
        _mm256_and_si256(v, _mm256_set1_epi8(0x0f))
    }

    #[inline]
    #[target_feature(enable = "avx2")]
    fn high(v: __m256i) -> __m256i {
        _mm256_and_si256(_mm256_srli_epi16(v, 4), _mm256_set1_epi8(0x0f))
    }

    /// 32 bytes: 0xFF where bit j of `bits` is set (byte j tests its own bit, as llama.cpp's
    /// `bytes_from_bits_32`).
    #[inline]
    #[target_feature(enable = "avx2")]
    fn bit_bytes(bits: u32) -> __m256i {
        let spread = _mm256_shuffle_epi8(
            _mm256_set1_epi32(bits as i32),
            _mm256_setr_epi8(0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1, 2, 2, 2, 2, 2, 2, 2, 2, 3, 3, 3, 3, 3, 3, 3, 3),
        );
        let bit = _mm256_set1_epi64x(0x8040201008040201u64 as i64);
        _mm256_cmpeq_epi8(_mm256_and_si256(spread, bit), bit)
    }

    /// The values of every block of `ty` in `bytes` into `q`.
    #[target_feature(enable = "avx2")]
    pub unsafe fn values_row(ty: GgmlType, bytes: &[u8], q: &mut [u8]) {
        let (per, size) = ty.block();
        assert!(q.len() >= bytes.len() / size * per);
        for (b, out) in bytes.chunks_exact(size).zip(q.chunks_exact_mut(per)) {
            // SAFETY: one whole block and room for its values.
            unsafe { values(ty, b, out) };
        }
    }

    /// The values of block `b` of `ty` into `q` (one byte each, element order).
    #[inline]
    #[target_feature(enable = "avx2")]
    unsafe fn values(ty: GgmlType, b: &[u8], q: &mut [u8]) {
        let (per, size) = ty.block();
        assert!(b.len() >= size && q.len() >= per);
        let load = |at: usize| -> __m256i { unsafe { _mm256_loadu_si256(b.as_ptr().add(at).cast()) } };
        let mut store = |at: usize, v: __m256i| unsafe { _mm256_storeu_si256(q.as_mut_ptr().add(at).cast(), v) };
        let m16 = _mm256_set1_epi8(0x10);
        // SAFETY (every load and store below): inside the block / value ranges asserted above.
        match ty {
            GgmlType::Q4K => {
                for c in 0..4 {
                    let v = load(16 + 32 * c);
                    store(64 * c, low(v));
                    store(64 * c + 32, high(v));
                }
            }
            GgmlType::Q5K => {
                let qh = load(16);
                for c in 0..4 {
                    let v = load(48 + 32 * c);
                    let (u1, u2) = (_mm256_set1_epi8((1u8 << (2 * c)) as i8), _mm256_set1_epi8((2u8 << (2 * c)) as i8));
                    let h1 = _mm256_and_si256(_mm256_cmpeq_epi8(_mm256_and_si256(qh, u1), u1), m16);
                    let h2 = _mm256_and_si256(_mm256_cmpeq_epi8(_mm256_and_si256(qh, u2), u2), m16);
                    store(64 * c, _mm256_or_si256(low(v), h1));
                    store(64 * c + 32, _mm256_or_si256(high(v), h2));
                }
            }
            GgmlType::Q6K => {
                let three = _mm256_set1_epi8(3);
                for h in 0..2 {
                    let (ql0, ql1, qh) = (load(64 * h), load(64 * h + 32), load(128 + 32 * h));
                    let hb = |shift: i32| -> __m256i {
                        let v = match shift {
                            0 => qh,
                            2 => _mm256_srli_epi16(qh, 2),
                            4 => _mm256_srli_epi16(qh, 4),
                            _ => _mm256_srli_epi16(qh, 6),
                        };
                        _mm256_slli_epi16(_mm256_and_si256(v, three), 4)
                    };
                    store(128 * h, _mm256_or_si256(low(ql0), hb(0)));
                    store(128 * h + 32, _mm256_or_si256(low(ql1), hb(2)));
                    store(128 * h + 64, _mm256_or_si256(high(ql0), hb(4)));
                    store(128 * h + 96, _mm256_or_si256(high(ql1), hb(6)));
                }
            }
            GgmlType::Q4_0 | GgmlType::Q5_0 => {
                let at = if ty == GgmlType::Q4_0 { 2 } else { 6 };
                let qs = unsafe { _mm_loadu_si128(b.as_ptr().add(at).cast()) };
                let both = _mm256_set_m128i(qs, qs);
                let nib = _mm256_blend_epi32(low(both), high(both), 0b1111_0000);
                let v = if ty == GgmlType::Q4_0 {
                    nib
                } else {
                    let qh = u32::from_le_bytes([b[2], b[3], b[4], b[5]]);
                    _mm256_or_si256(nib, _mm256_and_si256(bit_bytes(qh), m16))
                };
                store(0, v);
            }
            GgmlType::Q8_0 => store(0, _mm256_xor_si256(load(2), _mm256_set1_epi8(-128))),
            _ => unreachable!("no integer family for {ty:?}"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::gguf::dequantize_blocks;
    use half::f16;

    /// The unpacked integers, scaled by the block's floats, give the loader's values (up to the
    /// loader's own rounding): the unpacking reads every field where the loader does.
    /// The row unpacker (AVX2 where present) gives the scalar reference's bytes for every type.
    #[test]
    fn row_values_equal_the_scalar_reference() {
        let mut seed = 3u64;
        for ty in [GgmlType::Q4K, GgmlType::Q5K, GgmlType::Q6K, GgmlType::Q4_0, GgmlType::Q5_0, GgmlType::Q8_0] {
            let (per, size) = ty.block();
            let bytes: Vec<u8> = (0..size * 3)
                .map(|_| {
                    seed = seed.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
                    (seed >> 33) as u8
                })
                .collect();
            let mut row = vec![0u8; 3 * per];
            unpack_values(ty, &bytes, &mut row);
            let mut want = vec![0u8; 3 * per];
            for (b, out) in bytes.chunks_exact(size).zip(want.chunks_exact_mut(per)) {
                scalar_values(ty, b, out);
            }
            assert_eq!(row, want, "{ty:?}");
        }
    }

    #[test]
    fn word_scales_equal_the_bytewise_reading() {
        let mut u = UnpackedRow { sc: vec![0; 16], mn: vec![0; 16], ..Default::default() };
        for seed in 0..64u32 {
            let s: Vec<u8> = (0..12u32).map(|i| (seed.wrapping_mul(2654435761).wrapping_add(i * 40503) >> 7) as u8).collect();
            u.k_scales(0, &s);
            for j in 0..8 {
                // The loader's bytewise reading (as f32 values).
                let (sc, m) = crate::gguf::scale_min_k4(j, &s);
                let got = [u.sc[2 * j], u.sc[2 * j + 1], u.mn[2 * j], u.mn[2 * j + 1]].map(|v| v as f32);
                assert_eq!(got, [sc, sc, m, m], "sub-block {j}");
            }
        }
    }

    #[test]
    fn unpacked_values_reproduce_the_loaders_dequantization() {
        let mut seed = 7u64;
        for ty in [GgmlType::Q4K, GgmlType::Q5K, GgmlType::Q6K, GgmlType::Q4_0, GgmlType::Q5_0, GgmlType::Q8_0] {
            let (per, size) = ty.block();
            let mut bytes: Vec<u8> = (0..size * 2)
                .map(|_| {
                    seed = seed.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
                    (seed >> 33) as u8
                })
                .collect();
            for b in bytes.chunks_exact_mut(size) {
                let at = if ty == GgmlType::Q6K { 208 } else { 0 };
                b[at..at + 2].copy_from_slice(&f16::from_f32(0.01).to_le_bytes());
                if matches!(ty, GgmlType::Q4K | GgmlType::Q5K) {
                    b[2..4].copy_from_slice(&f16::from_f32(0.02).to_le_bytes());
                }
            }
            let mut want = vec![0f32; 2 * per];
            dequantize_blocks(ty, &bytes, &mut want);
            let mut u = UnpackedRow::default();
            u.unpack(ty, &bytes);
            for (e, w) in want.iter().enumerate() {
                let (blk, k) = (e / per, e % per);
                let got = match family(ty).unwrap() {
                    Family::K { float_mins: true } => {
                        u.d[blk] * (u.sc[blk * 16 + k / 16] as f32 * u.q[e] as f32) - u.dmin[blk] * u.mn[blk * 16 + k / 16] as f32
                    }
                    Family::K { float_mins: false } => u.d[blk] * (u.sc[blk * 16 + k / 16] as f32 * (u.q[e] as f32 - 32.0)),
                    Family::B32 { offset } => u.d[blk] * (u.q[e] as i32 - offset) as f32,
                };
                assert!((got - w).abs() <= 1e-5 * w.abs().max(1.0), "{ty:?} value {e}: {got} vs {w}");
            }
        }
    }
}
