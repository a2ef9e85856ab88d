//! Reading GGUF blocks inside a kernel, for every block type that has a native kernel on the
//! CPU (`crate::quant::has_native_kernel`): a chunk's scales and offset, read once, and a
//! *quad*'s quants, so a weight is `scale * quant - offset`.
//!
//! The bytes stay as the file stores them (llama.cpp's CUDA backend reads them the same way).
//! Each value is computed with the operations of the CPU's dequantization
//! ([`crate::gguf::dequantize`]) in the same order, so the values agree with the CPU's exactly,
//! except where the device's compiler fuses a product and a difference into one rounding (a
//! K-quant's `d1 q - m1`).
//!
//! A *chunk* is 32 consecutive values of a row: every supported type's blocks split into
//! whole chunks, so a kernel can hand chunks to its units whatever the type. A *quad* is 4
//! consecutive values of a chunk (quad `p` holds values `4p..4p + 4`): in every type its quants
//! lie in one 32-bit word of the block, and its high bits (Q5_0, Q5_K, Q6_K) or second half
//! (F16, BF16) in one more, so a unit reads a quad with one or two word loads, and 8 units
//! reading a chunk's 8 quads read its quants as consecutive words ([`quad_words`]).

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
    f16_bits(half_bits(w, at))
}

/// The f16 with bits `bits` (the low 16), as f32.
#[cube]
fn f16_bits(bits: u32) -> f32 {
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

/// The scale of quad `p`'s values in chunk `scales`: its first 16 values' or its last 16's.
#[cube]
pub(super) fn quad_scale(scales: &Chunk, p: u32) -> f32 {
    select(p < 4, scales.low, scales.high)
}

/// Value `i` (0..4) of a quad: `scale * quant - offset`, `scale` its [`quad_scale`].
#[cube]
pub(super) fn quad_value(ty: u32, quad: &Quad, c: u32, p: u32, scale: f32, scales: &Chunk, i: u32) -> f32 {
    scale * quad_quant(ty, quad, c, p, i) - scales.offset
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

/// No second word (a quad whose quants are all in its first).
pub(crate) const NO_WORD: u32 = u32::MAX;
const NO_WORD_LITERAL: i64 = NO_WORD as i64;

/// A quad's two words: the bytes they start at ([`quad_words`]) or what they hold ([`quad`]).
#[derive(CubeType)]
pub(super) struct Quad {
    pub(super) low: u32,
    pub(super) high: u32,
}

/// The bytes at which quad `p` of chunk `c` of the row of type `ty` starting at byte `row` is
/// read: its quants' word (`low`) and its high bits' or second half's word (`high`, or
/// [`NO_WORD`]), each 4 bytes from that byte. Quad `p`'s value `i` is value `l = 4p + i` of the
/// chunk; in every type, the 4 values' bytes (or nibbles) are consecutive, so these are the
/// CPU decoder's byte addresses for value `4p`.
#[cube]
pub(super) fn quad_words(ty: u32, row: u32, c: u32, p: u32) -> Quad {
    let sub = c % 8;
    let none = u32::new(NO_WORD_LITERAL);
    // F16 and BF16: 8 bytes a quad.
    let mut low = row + 64 * c + 8 * p;
    let mut high = low + 4;
    if ty == Q8_0 {
        low = row + 34 * c + 2 + 4 * p;
        high = none;
    } else if ty == Q4_0 {
        // Values l and l + 16 share byte l: quads 0..4 read the low nibbles, 4..8 the high.
        low = row + 18 * c + 2 + 4 * (p % 4);
        high = none;
    } else if ty == Q5_0 {
        low = row + 22 * c + 6 + 4 * (p % 4);
        high = row + 22 * c + 2;
    } else if ty == Q4_K {
        low = row + 144 * (c / 8) + 16 + 32 * (sub / 2) + 4 * p;
        high = none;
    } else if ty == Q5_K {
        low = row + 176 * (c / 8) + 48 + 32 * (sub / 2) + 4 * p;
        high = row + 176 * (c / 8) + 16 + 4 * p;
    } else if ty == Q6_K {
        let base = row + 210 * (c / 8);
        let quarter = sub % 4;
        low = base + 64 * (sub / 4) + 32 * (quarter % 2) + 4 * p;
        high = base + 128 + 32 * (sub / 4) + 4 * p;
    }
    Quad { low, high }
}

/// The 4 bytes from byte `at` (any alignment) as a little-endian word: one load when `at` is a
/// word's start, else the two words it straddles.
#[cube]
fn word_at(w: &[u32], at: u32) -> u32 {
    let shift = (at % 4) * 8;
    let mut v = w[(at / 4) as usize];
    if shift != 0 {
        v = (v >> shift) | (w[(at / 4 + 1) as usize] << (32 - shift));
    }
    v
}

/// Quad `p` of chunk `c`: its words, read.
#[cube]
pub(super) fn quad(w: &[u32], ty: u32, row: u32, c: u32, p: u32) -> Quad {
    let at = quad_words(ty, row, c, p);
    let mut high = 0u32;
    if at.high != NO_WORD {
        high = word_at(w, at.high);
    }
    Quad { low: word_at(w, at.low), high }
}

/// Quant `i` (0..4) of quad `p` of chunk `c` (`q` its words), its zero point subtracted (F16
/// and BF16: the value itself): the CPU decoder's bit operations on value `4p + i`'s bytes.
#[cube]
fn quad_quant(ty: u32, q: &Quad, c: u32, p: u32, i: u32) -> f32 {
    let sub = c % 8;
    let byte_i = (q.low >> (8 * i)) & 255u32;
    let high_i = (q.high >> (8 * i)) & 255u32;
    let mut v = 0.0f32;
    if ty == Q8_0 {
        v = signed(byte_i);
    } else if ty == Q4_0 {
        v = f32::cast_from(i32::cast_from((byte_i >> (4 * (p / 4))) & 15u32) - 8);
    } else if ty == Q5_0 {
        // The fifth bit of value l is bit l of the block's 32-bit qh.
        let fifth = ((q.high >> (4 * p + i)) & 1u32) << 4;
        v = f32::cast_from(i32::cast_from(((byte_i >> (4 * (p / 4))) & 15u32) | fifth) - 16);
    } else if ty == Q4_K {
        v = f32::cast_from((byte_i >> (4 * (sub % 2))) & 15u32);
    } else if ty == Q5_K {
        v = f32::cast_from(((byte_i >> (4 * (sub % 2))) & 15u32) + (((high_i >> sub) & 1u32) << 4));
    } else if ty == Q6_K {
        let quarter = sub % 4;
        let low = (byte_i >> (4 * (quarter / 2))) & 15u32;
        let high = (high_i >> (2 * quarter)) & 3u32;
        v = f32::cast_from(i32::cast_from(low | (high << 4)) - 32);
    } else if ty == F16 {
        v = f16_bits((select(i < 2, q.low, q.high) >> (16 * (i % 2))) & 65535u32);
    } else if ty == BF16 {
        v = f32::reinterpret(((select(i < 2, q.low, q.high) >> (16 * (i % 2))) & 65535u32) << 16);
    }
    v
}
