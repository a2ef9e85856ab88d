//! One weight row of ggml blocks unpacked for the integer kernels ([`super::int`]): every
//! quantized value as an unsigned byte in element order, with the block's integer scales and
//! its float scales beside: the reference layout of the portable path ([`super::int`]). The x86
//! kernels make the same values and scales in registers from the stored blocks
//! (`int_x86_blocks`) and are tested bitwise against the reference.
//!
//! Two families, by the activation format they pair with:
//! - **K** (Q4_K, Q5_K, Q6_K; Q8_K activations): per 256-value block, `q` in 0..63, a scale per
//!   16 values (`sc`, multiplying `q * x` in integers), an offset multiplier per 16 values
//!   (`mn`, multiplying the activation sums: the Q4_K/Q5_K minimums, applied in float with
//!   `dmin`; for Q6_K `32 * sc`, its `q - 32` offset, applied in integers), `d` and `dmin`.
//! - **B32** (Q4_0, Q5_0, Q8_0; Q8_0 activations): per 32-value block, `q` unsigned with a
//!   fixed offset per type (8, 16, 128: the signed value is `q - offset`) and `d`.

use crate::gguf::{GgmlType, f16_at};

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

    /// Q4_K/Q5_K: the eight 6-bit scales and minimums of block `i` ([`k_scale_bytes`]), each
    /// written for both 16-value halves of its sub-block.
    fn k_scales(&mut self, i: usize, s: &[u8]) {
        let (sc, mn) = k_scale_bytes(s);
        let (sc, mn) = (sc.to_le_bytes(), mn.to_le_bytes());
        let dst_sc: &mut [i16; 16] = (&mut self.sc[i * 16..i * 16 + 16]).try_into().expect("16 scales");
        *dst_sc = std::array::from_fn(|k| sc[k / 2] as i16);
        let dst_mn: &mut [i16; 16] = (&mut self.mn[i * 16..i * 16 + 16]).try_into().expect("16 minimums");
        *dst_mn = std::array::from_fn(|k| mn[k / 2] as i16);
    }
}

/// Q4_K/Q5_K's 12 scale bytes `s` as the eight scales and the eight minimums, one byte per
/// 32-value sub-block, packed little-endian in a u64 each: the bytes read as three 32-bit
/// words with llama.cpp's masks (tested against the loader's bytewise reading). The x86
/// kernels decode each block's scales with this too.
#[inline(always)] // in the x86 kernels' block loops a call would spill every vector register
pub(crate) fn k_scale_bytes(s: &[u8]) -> (u64, u64) {
    const LOW6: u32 = 0x3f3f_3f3f;
    const LOW4: u32 = 0x0f0f_0f0f;
    const TOP2: u32 = 0x0303_0303;
    let w = |k: usize| u32::from_le_bytes([s[4 * k], s[4 * k + 1], s[4 * k + 2], s[4 * k + 3]]);
    let (w0, w1, w2) = (w(0), w(1), w(2));
    let pack = |lo: u32, hi: u32| lo as u64 | ((hi as u64) << 32);
    let scales = pack(w0 & LOW6, (w2 & LOW4) | (((w0 >> 6) & TOP2) << 4));
    let mins = pack(w1 & LOW6, ((w2 >> 4) & LOW4) | (((w1 >> 6) & TOP2) << 4));
    (scales, mins)
}

/// The values of every block of `ty` in `bytes` into `q` (one byte each, element order).
fn unpack_values(ty: GgmlType, bytes: &[u8], q: &mut [u8]) {
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::gguf::dequantize_blocks;
    use half::f16;

    #[test]
    fn word_scales_equal_the_bytewise_reading() {
        let mut u = UnpackedRow { sc: vec![0; 16], mn: vec![0; 16], ..Default::default() };
        for seed in 0..64u32 {
            let s: Vec<u8> =
                (0..12u32).map(|i| (seed.wrapping_mul(2654435761).wrapping_add(i * 40503) >> 7) as u8).collect();
            u.k_scales(0, &s);
            for j in 0..8 {
                // The loader's bytewise reading (as f32 values).
                let (sc, m) = crate::gguf::scale_min_k4(j, &s);
                let got = [u.sc[2 * j], u.sc[2 * j + 1], u.mn[2 * j], u.mn[2 * j + 1]].map(|v| v as f32);
                assert_eq!(got, [sc, sc, m, m], "sub-block {j}");
            }
        }
    }

    /// The unpacked integers, scaled by the block's floats, give the loader's values (up to the
    /// loader's own rounding): the unpacking reads every field where the loader does.
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
                        u.d[blk] * (u.sc[blk * 16 + k / 16] as f32 * u.q[e] as f32)
                            - u.dmin[blk] * u.mn[blk * 16 + k / 16] as f32
                    }
                    Family::K { float_mins: false } => {
                        u.d[blk] * (u.sc[blk * 16 + k / 16] as f32 * (u.q[e] as f32 - 32.0))
                    }
                    Family::B32 { offset } => u.d[blk] * (u.q[e] as i32 - offset) as f32,
                };
                assert!((got - w).abs() <= 1e-5 * w.abs().max(1.0), "{ty:?} value {e}: {got} vs {w}");
            }
        }
    }
}
