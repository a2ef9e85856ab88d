//! Weight matrices kept in their GGUF block formats ("native" weights) and multiplied without
//! a resident f32 copy.
//!
//! A [`QuantMatrix`] holds the raw ggml blocks of one linear map (several row-stacked parts
//! for fused projections such as q/k/v, each in its own block type). The few-row kernel asks
//! it for one weight row at a time ([`crate::kernels::WeightRows`]); the row is decoded into a
//! small per-thread buffer (L1/L2) and then multiplied with every row of `x` by the same f32
//! micro-kernel the f32 path uses. Decoding gives exactly the values the loader's
//! dequantization gives ([`crate::gguf::dequantize`]), so a product is bit-identical to the
//! f32 kernel's on the dequantized matrix while reading 4-8x fewer bytes from memory.
//!
//! Why decode into a buffer rather than in registers straight into the products: the buffer
//! path reuses the f32 micro-kernel unchanged (its AVX-512 variant included, which cannot be
//! run on every development machine), amortises decoding over all rows of `x` (verification,
//! batched datagen), and measured as fast as a fused one-row variant on a Zen 3 CPU (whose
//! single accumulator chains are latency-bound).

use crate::gguf::{GgmlType, dequantize_blocks};
use crate::kernels::{WeightRows, matmul_rows};
use anyhow::{Result, bail, ensure};
use std::borrow::Cow;

pub mod act;
#[cfg(target_arch = "x86_64")]
mod avx2;
pub mod int;
#[cfg(target_arch = "x86_64")]
mod int_x86;
#[cfg(target_arch = "x86_64")]
mod int_x86_blocks;
pub mod panel;
#[cfg(target_arch = "x86_64")]
mod panel_avx2;
#[cfg(target_arch = "x86_64")]
mod panel_families;
#[cfg(target_arch = "x86_64")]
mod panel_x86;
pub mod path;
pub mod transform;
pub mod unpack;

pub use int::IntPath;

#[cfg(test)]
mod accuracy_tests;
#[cfg(test)]
mod int_tests;
pub mod testutil;

/// Whether [`QuantMatrix`] can hold rows of this type. The legacy Q4_1 / Q5_1 formats have no
/// fast decoder: a model with them gets its f32 path (dequantized on load) for those matrices.
pub fn has_native_kernel(ty: GgmlType) -> bool {
    !matches!(ty, GgmlType::Q4_1 | GgmlType::Q5_1)
}

/// Row-stacked ggml blocks of one type: `rows` rows of the matrix's `cols` values.
#[derive(Clone, Debug)]
pub struct QuantPart {
    pub ty: GgmlType,
    pub rows: usize,
    /// `rows * row_bytes` bytes, row after row; or, with `panels`, the rows as panels of 16
    /// ([`panel`]), padded to a multiple of 16 rows.
    pub data: Vec<u8>,
    pub panels: bool,
}

impl QuantPart {
    /// `rows` rows of `ty` in GGUF order.
    pub fn rows(ty: GgmlType, rows: usize, data: Vec<u8>) -> Self {
        Self { ty, rows, data, panels: false }
    }

    /// Bytes of one row.
    fn row_bytes(&self) -> usize {
        self.data.len() / if self.panels { self.rows.next_multiple_of(panel::PANEL) } else { self.rows }
    }
}

/// A `[rows, cols]` weight matrix (HF `[out, in]` layout) stored as ggml blocks, possibly in
/// several row-stacked parts of different types.
#[derive(Clone, Debug)]
pub struct QuantMatrix {
    parts: Vec<QuantPart>,
    /// First row of each part.
    starts: Vec<usize>,
    rows: usize,
    cols: usize,
}

impl QuantMatrix {
    /// Stacks `parts` (top to bottom). Every part must hold whole rows of `cols` values in
    /// a type with a native kernel.
    pub fn new(parts: Vec<QuantPart>, cols: usize) -> Result<Self> {
        ensure!(!parts.is_empty(), "a quantized matrix needs at least one part");
        let mut starts = Vec::with_capacity(parts.len());
        let mut rows = 0;
        for p in &parts {
            ensure!(has_native_kernel(p.ty), "{:?} has no native kernel", p.ty);
            let row_bytes = p.ty.byte_size(cols)?;
            let stored = if p.panels { p.rows.next_multiple_of(panel::PANEL) } else { p.rows };
            ensure!(!p.panels || panel::has_panel(p.ty), "{:?} has no panel layout", p.ty);
            if p.data.len() != stored * row_bytes {
                bail!(
                    "{:?} part: {} bytes for {} rows of {cols} values ({} expected)",
                    p.ty,
                    p.data.len(),
                    p.rows,
                    stored * row_bytes
                );
            }
            starts.push(rows);
            rows += p.rows;
        }
        Ok(Self { parts, starts, rows, cols })
    }

    pub fn rows(&self) -> usize {
        self.rows
    }

    pub fn cols(&self) -> usize {
        self.cols
    }

    pub fn parts(&self) -> &[QuantPart] {
        &self.parts
    }

    /// Bytes of weight data (what one pass over the matrix reads).
    pub fn byte_len(&self) -> usize {
        self.parts.iter().map(|p| p.data.len()).sum()
    }

    /// First row of each part.
    pub(crate) fn part_starts(&self) -> &[usize] {
        &self.starts
    }

    /// Rows `start..end` when one part holds them all in GGUF order: their type, their bytes
    /// (row after row) and the bytes of one row.
    pub(crate) fn row_span(&self, start: usize, end: usize) -> Option<(GgmlType, &[u8], usize)> {
        let i = self.starts.partition_point(|&s| s <= start) - 1;
        let p = &self.parts[i];
        let first = start - self.starts[i];
        (end - self.starts[i] <= p.rows && !p.panels).then(|| {
            let row_bytes = p.row_bytes();
            (p.ty, &p.data[first * row_bytes..(end - self.starts[i]) * row_bytes], row_bytes)
        })
    }

    /// The raw blocks of row `o` in GGUF order (gathered from its panel if the part has
    /// panels) and their type.
    pub(crate) fn row_blocks(&self, o: usize) -> (GgmlType, Cow<'_, [u8]>) {
        let i = self.starts.partition_point(|&s| s <= o) - 1;
        let p = &self.parts[i];
        let row_bytes = p.row_bytes();
        let r = o - self.starts[i];
        if p.panels {
            let mut row = Vec::with_capacity(row_bytes);
            panel::gather_row(p.ty, &p.data, row_bytes, r, &mut row);
            return (p.ty, Cow::Owned(row));
        }
        (p.ty, Cow::Borrowed(&p.data[r * row_bytes..(r + 1) * row_bytes]))
    }

    /// Stores every part whose type has a panel layout as panels of 16 rows ([`panel`]): the
    /// layout of the AVX-512 VNNI and AVX2 integer kernels. Results are unchanged on every path.
    pub fn repack_panels(&mut self) {
        let cols = self.cols;
        for p in self.parts.iter_mut().filter(|p| panel::has_panel(p.ty) && !p.panels) {
            let row_bytes = p.ty.byte_size(cols).expect("checked by new");
            panel::repack(p.ty, &mut p.data, p.rows, row_bytes);
            p.panels = true;
        }
    }

    /// `self` laid out for the runtime's integer path ([`IntPath::active`]): as panels where
    /// that path has panel kernels (AVX-512 VNNI, AVX2), else unchanged. `SPECX_PANELS=0` keeps
    /// the rows (the row kernels; to measure the difference).
    pub fn into_int_layout(mut self) -> Self {
        if panels_in_use() {
            self.repack_panels();
        }
        self
    }

    /// Row `o` decoded to f32 into `out` (`cols` values).
    pub fn decode_row(&self, o: usize, out: &mut [f32]) {
        let (ty, blocks) = self.row_blocks(o);
        decode(ty, &blocks, out);
    }

    /// `x W^T`: `x` is `[m, cols]`, `out` is `[m, rows]`. Bit-identical to
    /// [`crate::kernels::matmul_wt`] on the dequantized matrix.
    pub fn matmul(&self, x: &[f32], m: usize, out: &mut [f32]) {
        matmul_rows(x, m, self, out);
    }

    /// Whether every part has an integer kernel ([`unpack::family`]): [`QuantMatrix::matmul_int`]
    /// applies.
    pub fn has_int_kernel(&self) -> bool {
        self.parts.iter().all(|p| unpack::family(p.ty).is_some())
    }

    /// `x W^T` with `x` quantized to 8 bits per row and integer dot products
    /// ([`int`]), on the runtime's path ([`IntPath::active`]).
    pub fn matmul_int(&self, x: &[f32], m: usize, out: &mut [f32]) {
        int::matmul(self, x, m, out, IntPath::active());
    }

    /// The whole matrix dequantized to f32, row-major.
    pub fn to_f32(&self) -> Vec<f32> {
        let mut out = vec![0f32; self.rows * self.cols];
        self.decode_into(&mut out);
        out
    }

    /// Decodes the whole matrix into `out` (`rows * cols` values, row-major), rows in parallel.
    pub fn decode_into(&self, out: &mut [f32]) {
        use rayon::prelude::*;
        assert_eq!(out.len(), self.rows * self.cols, "output is not [rows, cols]");
        out.par_chunks_mut(self.cols).enumerate().for_each(|(o, row)| self.decode_row(o, row));
    }
}

impl WeightRows for QuantMatrix {
    fn rows(&self) -> usize {
        self.rows
    }

    fn cols(&self) -> usize {
        self.cols
    }

    const DECODES: bool = true;

    #[inline]
    fn row<'a>(&'a self, o: usize, scratch: &'a mut [f32]) -> &'a [f32] {
        self.decode_row(o, scratch);
        scratch
    }
}

/// Whether the runtime's integer path ([`IntPath::active`]) stores weights as panels: where it
/// has panel kernels, unless `SPECX_PANELS=0` (the row kernels, to compare).
pub fn panels_in_use() -> bool {
    IntPath::active().has_panels() && std::env::var("SPECX_PANELS").map_or(true, |v| v != "0")
}

/// Decodes whole blocks of `ty` into f32 values, exactly as the loader dequantizes them:
/// AVX2 decoders where this CPU has them (tested bitwise against the loader's), else the
/// loader's own block decoders.
fn decode(ty: GgmlType, blocks: &[u8], out: &mut [f32]) {
    #[cfg(target_arch = "x86_64")]
    {
        if avx2::available() {
            // SAFETY: the CPU supports AVX2, FMA and F16C (checked by `available`).
            if unsafe { avx2::decode(ty, blocks, out) } {
                return;
            }
        }
    }
    dequantize_blocks(ty, blocks, out);
}

#[cfg(test)]
mod tests {
    use super::testutil::matrix;
    use super::*;
    use crate::gguf::dequantize;
    use crate::kernels::matmul_wt;
    use rand::rngs::StdRng;
    use rand::{RngExt, SeedableRng};

    /// The native kernel against the loader's dequantization + the f32 kernel: bitwise, for
    /// 1..=70 rows of x (crossing the 3-row tiles and the 32-row tasks) and 70 weight rows
    /// (a short last block of 4).
    fn check_bitwise(q: &QuantMatrix) {
        let (n, k) = (q.rows(), q.cols());
        let mut dense = Vec::with_capacity(n * k);
        for p in q.parts() {
            let mut part = vec![0f32; p.rows * k];
            dequantize(p.ty, &p.data, &mut part).unwrap();
            dense.extend(part);
        }
        assert_eq!(q.to_f32(), dense, "decoded rows differ from the loader's values");
        let mut rng = StdRng::seed_from_u64(9);
        let x: Vec<f32> = (0..70 * k).map(|_| rng.random_range(-1.0..1.0)).collect();
        for m in 1..=70 {
            let (mut native, mut f32_path) = (vec![0f32; m * n], vec![0f32; m * n]);
            q.matmul(&x[..m * k], m, &mut native);
            matmul_wt(&x[..m * k], m, &dense, n, k, &mut f32_path);
            let same = native.iter().zip(&f32_path).all(|(a, b)| a.to_bits() == b.to_bits());
            assert!(
                same,
                "{:?}: {m} rows differ from dequantize + f32 kernel",
                q.parts().iter().map(|p| p.ty).collect::<Vec<_>>()
            );
        }
    }

    #[test]
    fn every_native_type_equals_dequantize_then_f32_kernel() {
        for (ty, k) in [
            (GgmlType::Q4_0, 96),
            (GgmlType::Q5_0, 96),
            (GgmlType::Q8_0, 96),
            (GgmlType::Q4K, 512),
            (GgmlType::Q5K, 512),
            (GgmlType::Q6K, 512),
            // k not a multiple of 32: the kernel's scalar tail.
            (GgmlType::F16, 101),
            (GgmlType::BF16, 101),
        ] {
            check_bitwise(&matrix(&[(ty, 70)], k, ty.id() as u64));
        }
    }

    #[test]
    fn stacked_parts_of_different_types() {
        // As a fused q/k/v projection of a Q4_K_M file: parts of 36, 17 and 17 rows.
        check_bitwise(&matrix(&[(GgmlType::Q4K, 36), (GgmlType::Q4K, 17), (GgmlType::Q6K, 17)], 256, 3));
    }

    #[test]
    fn refuses_types_without_a_kernel_and_wrong_sizes() {
        let err = QuantMatrix::new(vec![QuantPart::rows(GgmlType::Q4_1, 1, vec![0; 20])], 32).unwrap_err();
        assert!(err.to_string().contains("no native kernel"), "{err}");
        let err = QuantMatrix::new(vec![QuantPart::rows(GgmlType::Q8_0, 2, vec![0; 34])], 32).unwrap_err();
        assert!(err.to_string().contains("68 expected"), "{err}");
    }
}
