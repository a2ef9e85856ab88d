//! Activation rows quantized to 8 bits for the integer kernels ([`super::int`]), in the two
//! formats llama.cpp pairs with the weight types:
//!
//! - **Q8_K** (256-value blocks: one f32 scale, 256 i8, 16 sums of 16 values) for the
//!   K-quants (Q4_K, Q5_K, Q6_K), whose sub-block minimums and offsets are applied through
//!   the sums;
//! - **Q8_0** (32-value blocks: one f32 scale, 32 i8, 8 sums of 4 values) for the 32-wide
//!   formats (Q4_0, Q5_0, Q8_0), whose offsets (8, 16, 128) are applied through the sums.
//!
//! Each block is scaled symmetrically to [-127, 127] (`d = max|x| / 127`, `q =
//! round_ties_even(x * 127 / max|x|)`): never -128, so the AVX2 sign trick and `vpmaddubsw`
//! pairs cannot saturate. A row's quantization depends on that row alone (row invariance).
//! The scale is kept in f32 (llama.cpp rounds Q8_0's to f16): a little more precise, same
//! cost.

use super::QuantMatrix;
use super::unpack::{Family, family};

/// Values per Q8_K block.
pub const QK_K: usize = 256;
/// Values per Q8_0 block.
pub const QK8_0: usize = 32;

/// `rows` activation rows of `cols` values in Q8_K blocks (`cols` a multiple of 256).
#[derive(Clone, Debug, Default)]
pub struct Q8KRows {
    pub rows: usize,
    /// Blocks per row.
    pub blocks: usize,
    /// One scale per block, row after row.
    pub d: Vec<f32>,
    /// 256 values per block.
    pub qs: Vec<i8>,
    /// 16 sums (of 16 consecutive values) per block.
    pub bsums: Vec<i16>,
    /// 8 sums (of 32 consecutive values) per block: the Q4_K sub-blocks' (|sum| <= 4064).
    pub bsums32: Vec<i16>,
}

/// `rows` activation rows in Q8_0 blocks (`cols` a multiple of 32).
#[derive(Clone, Debug, Default)]
pub struct Q80Rows {
    pub rows: usize,
    pub blocks: usize,
    pub d: Vec<f32>,
    /// 32 values per block.
    pub qs: Vec<i8>,
    /// 8 sums per block: sum `l` covers values `4l..4l+4`, the lane of an integer dot product
    /// that holds those four products.
    pub sums4: Vec<i32>,
    /// The sum of each block's 32 values.
    pub sums: Vec<i32>,
}

/// Scale and inverse scale of a block whose largest magnitude is `amax`.
fn scales(amax: f32) -> (f32, f32) {
    if amax == 0.0 { (0.0, 0.0) } else { (amax / 127.0, 127.0 / amax) }
}

/// Quantizes one block `x` into `q` and returns its scale.
#[inline]
fn quantize_block(x: &[f32], q: &mut [i8]) -> f32 {
    let amax = x.iter().fold(0f32, |m, v| m.max(v.abs()));
    let (d, id) = scales(amax);
    for (q, &v) in q.iter_mut().zip(x) {
        // |v * id| <= 127 up to rounding of id; the clamp keeps -128 out in any case.
        *q = (v * id).round_ties_even().clamp(-127.0, 127.0) as i8;
    }
    d
}

/// Quantizes `x` (`[rows, cols]`) in blocks of `block` values: one scale per block, the
/// values, and the sum of every `group` consecutive values.
fn quantize_rows(x: &[f32], rows: usize, cols: usize, block: usize, group: usize) -> (Vec<f32>, Vec<i8>, Vec<i32>) {
    assert!(cols.is_multiple_of(block), "blocks of {block} values need a multiple of {block} per row, got {cols}");
    assert_eq!(x.len(), rows * cols, "x is not [rows, cols]");
    let n = rows * cols / block;
    let (mut d, mut qs) = (vec![0f32; n], vec![0i8; rows * cols]);
    for (b, (xb, qb)) in x.chunks_exact(block).zip(qs.chunks_exact_mut(block)).enumerate() {
        d[b] = quantize_block(xb, qb);
    }
    let sums = qs.chunks_exact(group).map(|g| g.iter().map(|&v| v as i32).sum()).collect();
    (d, qs, sums)
}

impl Q8KRows {
    /// Quantizes `x` (`[rows, cols]`, row-major).
    pub fn quantize(x: &[f32], rows: usize, cols: usize) -> Self {
        let (d, qs, sums) = quantize_rows(x, rows, cols, QK_K, 16);
        // |sum of 16 values| <= 16 * 127: an i16 holds it.
        let bsums32 = sums.chunks_exact(2).map(|p| (p[0] + p[1]) as i16).collect();
        Self { rows, blocks: cols / QK_K, d, qs, bsums: sums.into_iter().map(|s| s as i16).collect(), bsums32 }
    }

    /// Block `b` of row `r`: scale, values, sums.
    #[inline(always)]
    pub fn block(&self, r: usize, b: usize) -> (f32, &[i8], &[i16]) {
        let i = r * self.blocks + b;
        (self.d[i], &self.qs[i * QK_K..(i + 1) * QK_K], &self.bsums[i * 16..(i + 1) * 16])
    }
}

impl Q80Rows {
    /// Quantizes `x` (`[rows, cols]`, row-major).
    pub fn quantize(x: &[f32], rows: usize, cols: usize) -> Self {
        let (d, qs, sums4) = quantize_rows(x, rows, cols, QK8_0, 4);
        let sums = sums4.chunks_exact(8).map(|s| s.iter().sum()).collect();
        Self { rows, blocks: cols / QK8_0, d, qs, sums4, sums }
    }

    /// Block `b` of row `r`: scale, values, sums of four.
    #[inline(always)]
    pub fn block(&self, r: usize, b: usize) -> (f32, &[i8], &[i32]) {
        let i = r * self.blocks + b;
        (self.d[i], &self.qs[i * QK8_0..(i + 1) * QK8_0], &self.sums4[i * 8..(i + 1) * 8])
    }
}

/// The activation rows of one call, quantized in the formats the matrix's parts need.
pub struct QuantizedInput {
    pub k: Option<Q8KRows>,
    pub b32: Option<Q80Rows>,
}

impl QuantizedInput {
    pub fn new(q: &QuantMatrix, x: &[f32], m: usize) -> Self {
        let fams: Vec<Family> = q.parts().iter().filter_map(|p| family(p.ty)).collect();
        let cols = q.cols();
        Self {
            k: fams.iter().any(|f| matches!(f, Family::K { .. })).then(|| Q8KRows::quantize(x, m, cols)),
            b32: fams.iter().any(|f| matches!(f, Family::B32 { .. })).then(|| Q80Rows::quantize(x, m, cols)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn blocks_round_trip_within_half_a_step_and_never_reach_minus_128() {
        let x: Vec<f32> = (0..512).map(|i| ((i * 37 % 101) as f32 - 50.0) / 7.0).collect();
        let q = Q8KRows::quantize(&x, 2, 256);
        for r in 0..2 {
            let (d, qs, bsums) = q.block(r, 0);
            for (v, &qv) in x[r * 256..(r + 1) * 256].iter().zip(qs) {
                assert!((v - d * qv as f32).abs() <= d * 0.5001, "{v} vs {}", d * qv as f32);
                assert!(qv > -128);
            }
            assert_eq!(bsums[3], qs[48..64].iter().map(|&v| v as i16).sum::<i16>());
        }
        let z = Q80Rows::quantize(&[0.0; 32], 1, 32);
        assert_eq!((z.d[0], z.qs.iter().all(|&v| v == 0)), (0.0, true));
        let q0 = Q80Rows::quantize(&x[..64], 1, 64);
        let (_, qs, s4) = q0.block(0, 1);
        assert_eq!(s4[7], qs[28..32].iter().map(|&v| v as i32).sum::<i32>());
    }
}
