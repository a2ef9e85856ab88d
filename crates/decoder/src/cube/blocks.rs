//! Reading GGUF blocks inside a kernel, for every block type that has a native kernel on the
//! CPU (`crate::quant::has_native_kernel`): a chunk's scales and offset, read once, and each
//! value's quant, so a weight is `scale * quant - offset`.
//!
//! The bytes stay as the file stores them (llama.cpp's CUDA backend reads them the same way):
//! rows start at any byte, so values are gathered from 32-bit words with shifts. Each value is
//! computed with the operations of the CPU's dequantization ([`crate::gguf::dequantize`]) in
//! the same order, so the values agree with the CPU's exactly, except where the device's
//! compiler fuses a product and a difference into one rounding (a K-quant's `d1 q - m1`).
//!
//! A *chunk* is 32 consecutive values of a row: every supported type's blocks split into
//! whole chunks, so a kernel can hand chunks to its units whatever the type.

use burn_cubecl::cubecl;
use cubecl::prelude::*;

/// Values per chunk.
pub(super) const CHUNK: u32 = 32;

/// ggml's type ids (`crate::gguf::GgmlType::id`), the tag a kernel branches on.
pub(super) const F16: u32 = 1;
pub(super) const Q4_0: u32 = 2;
pub(super) const Q5_0: u32 = 6;
pub(super) const Q8_0: u32 = 8;
pub(super) const Q4_K: u32 = 12;
pub(super) const Q5_K: u32 = 13;
pub(super) const Q6_K: u32 = 14;
pub(super) const BF16: u32 = 30;

/// Byte `at` of the words `w` (little-endian).
#[cube]
fn byte(w: &[u32], at: u32) -> u32 {
    (w[(at / 4) as usize] >> ((at % 4) * 8)) & 255u32
}

/// The 16 bits at byte `at`.
#[cube]
fn half_bits(w: &[u32], at: u32) -> u32 {
    byte(w, at) | (byte(w, at + 1) << 8)
}

/// The f16 at byte `at`, as f32 (exact: every f16 is an f32).
#[cube]
fn f16_at(w: &[u32], at: u32) -> f32 {
    let bits = half_bits(w, at);
    let exp = (bits >> 10) & 31u32;
    let mant = bits & 1023u32;
    // Zero and subnormals: mant 2^-24, exact.
    let mut v = f32::cast_from(mant) * f32::reinterpret(103u32 << 23);
    if exp != 0 {
        let e = select(exp == 31u32, 255u32, exp + 112u32);
        v = f32::reinterpret((e << 23) | (mant << 13));
    }
    if (bits >> 15) == 1u32 {
        v = -v;
    }
    v
}

/// A byte read as a two's-complement i8, as f32.
#[cube]
fn signed(b: u32) -> f32 {
    f32::cast_from(i32::cast_from(b) - i32::cast_from(select(b > 127u32, 256u32, 0u32)))
}

/// The 6-bit scale (`min` false) or min (`min` true) of sub-block `sub` (0..8) in the 12
/// scale bytes of a Q4_K/Q5_K block at byte `at`.
#[cube]
fn scale_min_k4(w: &[u32], at: u32, sub: u32, min: bool) -> f32 {
    let mut v = byte(w, at + sub % 4 + select(min, 4u32, 0u32)) & 63u32;
    if sub >= 4 {
        if min {
            v = (byte(w, at + sub + 4) >> 4) | ((byte(w, at + sub) >> 6) << 4);
        } else {
            v = (byte(w, at + sub + 4) & 15u32) | ((byte(w, at + sub - 4) >> 6) << 4);
        }
    }
    f32::cast_from(v)
}

/// A chunk's scales (for its first and last 16 values) and offset, read once for its values.
#[derive(CubeType)]
pub(super) struct Chunk {
    low: f32,
    high: f32,
    offset: f32,
}

/// Chunk `c` of the row of type `ty` whose bytes start at byte `row`.
#[cube]
pub(super) fn chunk(w: &[u32], ty: u32, row: u32, c: u32) -> Chunk {
    Chunk {
        low: chunk_scale(w, ty, row, c, 0u32),
        high: chunk_scale(w, ty, row, c, 1u32),
        offset: chunk_offset(w, ty, row, c),
    }
}

/// Value `l` (0..32) of chunk `c` (`scales` its [`chunk`]): `scale * quant - offset`.
#[cube]
pub(super) fn value(w: &[u32], ty: u32, row: u32, c: u32, l: u32, scales: &Chunk) -> f32 {
    select(l < 16, scales.low, scales.high) * quant(w, ty, row, c, l) - scales.offset
}

/// The scale of values `16 half..16 half + 16` of chunk `c` of the row of type `ty` whose
/// bytes start at byte `row` (1 for F16 and BF16). A value is `scale * quant - offset`, the
/// CPU's dequantization in its order (Q6_K: `(d sc) q`; the K-quants' `d1 q - m1`).
#[cube]
fn chunk_scale(w: &[u32], ty: u32, row: u32, c: u32, half: u32) -> f32 {
    let mut s = 1.0f32;
    if ty == Q8_0 {
        s = f16_at(w, row + 34 * c);
    } else if ty == Q4_0 {
        s = f16_at(w, row + 18 * c);
    } else if ty == Q5_0 {
        s = f16_at(w, row + 22 * c);
    } else if ty == Q4_K {
        let base = row + 144 * (c / 8);
        s = f16_at(w, base) * scale_min_k4(w, base + 4, c % 8, false);
    } else if ty == Q5_K {
        let base = row + 176 * (c / 8);
        s = f16_at(w, base) * scale_min_k4(w, base + 4, c % 8, false);
    } else if ty == Q6_K {
        // Chunk `sub` of a 256-value block: half `sub / 4`, quarter `sub % 4` of that half.
        let base = row + 210 * (c / 8);
        let sub = c % 8;
        s = f16_at(w, base + 208) * signed(byte(w, base + 192 + 8 * (sub / 4) + half + 2 * (sub % 4)));
    }
    s
}

/// What chunk `c`'s values subtract after scaling: the K-quants' `m1`, else 0.
#[cube]
fn chunk_offset(w: &[u32], ty: u32, row: u32, c: u32) -> f32 {
    let mut m = 0.0f32;
    if ty == Q4_K {
        let base = row + 144 * (c / 8);
        m = f16_at(w, base + 2) * scale_min_k4(w, base + 4, c % 8, true);
    } else if ty == Q5_K {
        let base = row + 176 * (c / 8);
        m = f16_at(w, base + 2) * scale_min_k4(w, base + 4, c % 8, true);
    }
    m
}

/// The quantized value `l` (0..32) of chunk `c`, its zero point subtracted (F16 and BF16: the
/// value itself).
#[cube]
fn quant(w: &[u32], ty: u32, row: u32, c: u32, l: u32) -> f32 {
    let mut q = 0.0f32;
    if ty == Q8_0 {
        q = signed(byte(w, row + 34 * c + 2 + l));
    } else if ty == Q4_0 {
        let nibble = (byte(w, row + 18 * c + 2 + l % 16) >> (4 * (l / 16))) & 15u32;
        q = f32::cast_from(i32::cast_from(nibble) - 8);
    } else if ty == Q5_0 {
        let base = row + 22 * c;
        let j = l % 16;
        let nibble = (byte(w, base + 6 + j) >> (4 * (l / 16))) & 15u32;
        // The fifth bits: bit j of the 32-bit qh for the first 16 values, bit j + 16 after.
        let fifth = ((byte(w, base + 2 + (j + 16 * (l / 16)) / 8) >> ((j + 16 * (l / 16)) % 8)) & 1u32) << 4;
        q = f32::cast_from(i32::cast_from(nibble | fifth) - 16);
    } else if ty == Q4_K {
        let sub = c % 8;
        let at = row + 144 * (c / 8) + 16 + 32 * (sub / 2) + l;
        q = f32::cast_from((byte(w, at) >> (4 * (sub % 2))) & 15u32);
    } else if ty == Q5_K {
        let base = row + 176 * (c / 8);
        let sub = c % 8;
        let low = (byte(w, base + 48 + 32 * (sub / 2) + l) >> (4 * (sub % 2))) & 15u32;
        let high = ((byte(w, base + 16 + l) >> sub) & 1u32) << 4;
        q = f32::cast_from(low + high);
    } else if ty == Q6_K {
        let base = row + 210 * (c / 8);
        let sub = c % 8;
        let half = sub / 4;
        let quarter = sub % 4;
        let low = (byte(w, base + 64 * half + 32 * (quarter % 2) + l) >> (4 * (quarter / 2))) & 15u32;
        let high = (byte(w, base + 128 + 32 * half + l) >> (2 * quarter)) & 3u32;
        q = f32::cast_from(i32::cast_from(low | (high << 4)) - 32);
    } else if ty == F16 {
        q = f16_at(w, row + 64 * c + 2 * l);
    } else if ty == BF16 {
        q = f32::reinterpret(half_bits(w, row + 64 * c + 2 * l) << 16);
    }
    q
}
