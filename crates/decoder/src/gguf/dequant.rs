//! Block formats of ggml and their dequantization to f32.
//!
//! Layouts follow ggml's `ggml-common.h`; the K-quants use super-blocks of 256 values.

use anyhow::{Result, bail};
use half::{bf16, f16};

/// The ggml tensor types specx can read (numbering as in ggml).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum GgmlType {
    F32,
    F16,
    Q4_0,
    Q4_1,
    Q5_0,
    Q5_1,
    Q8_0,
    Q4K,
    Q5K,
    Q6K,
    BF16,
}

impl GgmlType {
    /// Maps ggml's numeric type id; `None` for types specx cannot dequantize.
    pub fn from_id(id: u32) -> Option<Self> {
        Some(match id {
            0 => Self::F32,
            1 => Self::F16,
            2 => Self::Q4_0,
            3 => Self::Q4_1,
            6 => Self::Q5_0,
            7 => Self::Q5_1,
            8 => Self::Q8_0,
            12 => Self::Q4K,
            13 => Self::Q5K,
            14 => Self::Q6K,
            30 => Self::BF16,
            _ => return None,
        })
    }

    /// ggml's numeric id of this type.
    pub fn id(self) -> u32 {
        match self {
            Self::F32 => 0,
            Self::F16 => 1,
            Self::Q4_0 => 2,
            Self::Q4_1 => 3,
            Self::Q5_0 => 6,
            Self::Q5_1 => 7,
            Self::Q8_0 => 8,
            Self::Q4K => 12,
            Self::Q5K => 13,
            Self::Q6K => 14,
            Self::BF16 => 30,
        }
    }

    /// (values per block, bytes per block).
    pub fn block(self) -> (usize, usize) {
        match self {
            Self::F32 => (1, 4),
            Self::F16 | Self::BF16 => (1, 2),
            Self::Q4_0 => (32, 18),
            Self::Q4_1 => (32, 20),
            Self::Q5_0 => (32, 22),
            Self::Q5_1 => (32, 24),
            Self::Q8_0 => (32, 34),
            Self::Q4K => (256, 144),
            Self::Q5K => (256, 176),
            Self::Q6K => (256, 210),
        }
    }

    /// Bytes taken by `n` values, or an error when `n` is not a whole number of blocks.
    pub fn byte_size(self, n: usize) -> Result<usize> {
        let (per, bytes) = self.block();
        if !n.is_multiple_of(per) {
            bail!("{n} values is not a whole number of {self:?} blocks of {per}");
        }
        Ok(n / per * bytes)
    }
}

pub(crate) fn f16_at(b: &[u8], i: usize) -> f32 {
    f16::from_le_bytes([b[i], b[i + 1]]).to_f32()
}

/// Dequantizes `src` (a whole number of blocks of `ty`) into `dst` (one f32 per value).
/// Runs block rows in parallel on the scoped threads of the machine.
pub fn dequantize(ty: GgmlType, src: &[u8], dst: &mut [f32]) -> Result<()> {
    let (per, bytes) = ty.block();
    if src.len() != ty.byte_size(dst.len())? {
        bail!("{ty:?}: {} bytes cannot hold {} values ({} expected)", src.len(), dst.len(), dst.len() / per * bytes);
    }
    let threads = std::thread::available_parallelism().map_or(1, |n| n.get());
    let blocks = dst.len() / per;
    let chunk_blocks = blocks.div_ceil(threads).max(1);
    if threads == 1 || blocks < 4096 {
        dequantize_blocks(ty, src, dst);
        return Ok(());
    }
    std::thread::scope(|s| {
        for (d, sr) in dst.chunks_mut(chunk_blocks * per).zip(src.chunks(chunk_blocks * bytes)) {
            s.spawn(move || dequantize_blocks(ty, sr, d));
        }
    });
    Ok(())
}

pub(crate) fn dequantize_blocks(ty: GgmlType, src: &[u8], dst: &mut [f32]) {
    let (per, bytes) = ty.block();
    for (b, y) in src.chunks_exact(bytes).zip(dst.chunks_exact_mut(per)) {
        match ty {
            GgmlType::F32 => y[0] = f32::from_le_bytes([b[0], b[1], b[2], b[3]]),
            GgmlType::F16 => y[0] = f16_at(b, 0),
            GgmlType::BF16 => y[0] = bf16::from_le_bytes([b[0], b[1]]).to_f32(),
            GgmlType::Q4_0 => q4_0(b, y),
            GgmlType::Q4_1 => q4_1(b, y),
            GgmlType::Q5_0 => q5_0(b, y),
            GgmlType::Q5_1 => q5_1(b, y),
            GgmlType::Q8_0 => q8_0(b, y),
            GgmlType::Q4K => q4_k(b, y),
            GgmlType::Q5K => q5_k(b, y),
            GgmlType::Q6K => q6_k(b, y),
        }
    }
}

/// d: f16, qs: 16 bytes of 4-bit values (low nibbles first half, high nibbles second half).
fn q4_0(b: &[u8], y: &mut [f32]) {
    let d = f16_at(b, 0);
    let qs = &b[2..18];
    for j in 0..16 {
        y[j] = ((qs[j] & 0x0f) as i32 - 8) as f32 * d;
        y[j + 16] = ((qs[j] >> 4) as i32 - 8) as f32 * d;
    }
}

/// d, m: f16; qs as Q4_0 but unsigned with an offset m.
fn q4_1(b: &[u8], y: &mut [f32]) {
    let (d, m) = (f16_at(b, 0), f16_at(b, 2));
    let qs = &b[4..20];
    for j in 0..16 {
        y[j] = (qs[j] & 0x0f) as f32 * d + m;
        y[j + 16] = (qs[j] >> 4) as f32 * d + m;
    }
}

/// 5th bit of each value j comes from bit j of the 32-bit `qh`.
fn fifth_bits(qh: u32, j: usize) -> (u8, u8) {
    let lo = (((qh >> j) << 4) & 0x10) as u8;
    let hi = ((qh >> (j + 12)) & 0x10) as u8;
    (lo, hi)
}

fn q5_0(b: &[u8], y: &mut [f32]) {
    let d = f16_at(b, 0);
    let qh = u32::from_le_bytes([b[2], b[3], b[4], b[5]]);
    let qs = &b[6..22];
    for j in 0..16 {
        let (lo, hi) = fifth_bits(qh, j);
        y[j] = (((qs[j] & 0x0f) | lo) as i32 - 16) as f32 * d;
        y[j + 16] = (((qs[j] >> 4) | hi) as i32 - 16) as f32 * d;
    }
}

fn q5_1(b: &[u8], y: &mut [f32]) {
    let (d, m) = (f16_at(b, 0), f16_at(b, 2));
    let qh = u32::from_le_bytes([b[4], b[5], b[6], b[7]]);
    let qs = &b[8..24];
    for j in 0..16 {
        let (lo, hi) = fifth_bits(qh, j);
        y[j] = ((qs[j] & 0x0f) | lo) as f32 * d + m;
        y[j + 16] = ((qs[j] >> 4) | hi) as f32 * d + m;
    }
}

fn q8_0(b: &[u8], y: &mut [f32]) {
    let d = f16_at(b, 0);
    for j in 0..32 {
        y[j] = (b[2 + j] as i8) as f32 * d;
    }
}

/// The 6-bit scale and min of sub-block `j` (0..8) packed in the 12 scale bytes of Q4_K/Q5_K.
pub(crate) fn scale_min_k4(j: usize, q: &[u8]) -> (f32, f32) {
    let (sc, m) = if j < 4 {
        (q[j] & 63, q[j + 4] & 63)
    } else {
        ((q[j + 4] & 0x0f) | ((q[j - 4] >> 6) << 4), (q[j + 4] >> 4) | ((q[j] >> 6) << 4))
    };
    (sc as f32, m as f32)
}

/// d, dmin: f16; scales: 12 bytes; qs: 128 bytes. Eight sub-blocks of 32 values.
fn q4_k(b: &[u8], y: &mut [f32]) {
    let (d, dmin) = (f16_at(b, 0), f16_at(b, 2));
    let scales = &b[4..16];
    let qs = &b[16..144];
    for (chunk, (q, out)) in qs.chunks_exact(32).zip(y.chunks_exact_mut(64)).enumerate() {
        let (sc1, m1) = scale_min_k4(2 * chunk, scales);
        let (sc2, m2) = scale_min_k4(2 * chunk + 1, scales);
        let (d1, m1, d2, m2) = (d * sc1, dmin * m1, d * sc2, dmin * m2);
        for l in 0..32 {
            out[l] = d1 * (q[l] & 0x0f) as f32 - m1;
            out[l + 32] = d2 * (q[l] >> 4) as f32 - m2;
        }
    }
}

/// d, dmin: f16; scales: 12 bytes; qh: 32 bytes (5th bits); qs: 128 bytes.
fn q5_k(b: &[u8], y: &mut [f32]) {
    let (d, dmin) = (f16_at(b, 0), f16_at(b, 2));
    let scales = &b[4..16];
    let qh = &b[16..48];
    let qs = &b[48..176];
    for (chunk, (ql, out)) in qs.chunks_exact(32).zip(y.chunks_exact_mut(64)).enumerate() {
        let (sc1, m1) = scale_min_k4(2 * chunk, scales);
        let (sc2, m2) = scale_min_k4(2 * chunk + 1, scales);
        let (d1, m1, d2, m2) = (d * sc1, dmin * m1, d * sc2, dmin * m2);
        let (u1, u2) = (1u8 << (2 * chunk), 2u8 << (2 * chunk));
        for l in 0..32 {
            let h1 = if qh[l] & u1 != 0 { 16 } else { 0 };
            let h2 = if qh[l] & u2 != 0 { 16 } else { 0 };
            out[l] = d1 * ((ql[l] & 0x0f) + h1) as f32 - m1;
            out[l + 32] = d2 * ((ql[l] >> 4) + h2) as f32 - m2;
        }
    }
}

/// ql: 128 bytes (low 4 bits), qh: 64 bytes (high 2 bits), scales: 16 i8, d: f16.
fn q6_k(b: &[u8], y: &mut [f32]) {
    let d = f16_at(b, 208);
    for half in 0..2 {
        let ql = &b[64 * half..64 * half + 64];
        let qh = &b[128 + 32 * half..128 + 32 * half + 32];
        let sc = &b[192 + 8 * half..192 + 8 * half + 8];
        let out = &mut y[128 * half..128 * half + 128];
        for l in 0..32 {
            let is = l / 16;
            let q1 = ((ql[l] & 0x0f) | ((qh[l] & 3) << 4)) as i32 - 32;
            let q2 = ((ql[l + 32] & 0x0f) | (((qh[l] >> 2) & 3) << 4)) as i32 - 32;
            let q3 = ((ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4)) as i32 - 32;
            let q4 = ((ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4)) as i32 - 32;
            out[l] = d * (sc[is] as i8) as f32 * q1 as f32;
            out[l + 32] = d * (sc[is + 2] as i8) as f32 * q2 as f32;
            out[l + 64] = d * (sc[is + 4] as i8) as f32 * q3 as f32;
            out[l + 96] = d * (sc[is + 6] as i8) as f32 * q4 as f32;
        }
    }
}
