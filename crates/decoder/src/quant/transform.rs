//! New matrices made from a loaded one: a subset of its rows (a draft's vocabulary subset) and
//! its values requantized to a cheaper block type (a requantized draft). Both keep the result a
//! [`QuantMatrix`], so the native and integer kernels run it unchanged.

use super::{QuantMatrix, QuantPart};
use crate::gguf::{GgmlType, quantize};
use anyhow::{Result, ensure};
use rayon::prelude::*;

/// Bits per weight of a block type (a Q4_0 block: 18 bytes for 32 values, 4.5 bits).
pub fn bits_per_weight(ty: GgmlType) -> f64 {
    let (per, bytes) = ty.block();
    bytes as f64 * 8.0 / per as f64
}

impl QuantMatrix {
    /// The rows `ids` in that order, each row's blocks copied as they are: row `i` of the
    /// result multiplies exactly as row `ids[i]` of `self` (the kernels treat every weight row
    /// on its own). Consecutive rows of one type share a part.
    pub fn select_rows(&self, ids: &[u32]) -> Result<QuantMatrix> {
        ensure!(!ids.is_empty(), "a row subset needs at least one row");
        if let Some(&bad) = ids.iter().find(|&&o| o as usize >= self.rows()) {
            anyhow::bail!("row {bad} is outside a matrix of {} rows", self.rows());
        }
        let mut parts: Vec<QuantPart> = Vec::new();
        for &o in ids {
            let (ty, blocks) = self.row_blocks(o as usize);
            match parts.last_mut() {
                Some(p) if p.ty == ty => {
                    p.data.extend_from_slice(&blocks);
                    p.rows += 1;
                }
                _ => parts.push(QuantPart::rows(ty, 1, blocks.into_owned())),
            }
        }
        QuantMatrix::new(parts, self.cols())
    }

    /// Every part stored with more bits per weight than `ty` decoded and quantized to `ty`
    /// (ggml's round-to-nearest reference quantizer, [`crate::gguf::quantize`]); parts already
    /// as cheap or cheaper are kept. The values change (a second rounding), the layout does not.
    pub fn requantized(&self, ty: GgmlType) -> Result<QuantMatrix> {
        let cols = self.cols();
        ty.byte_size(cols)?;
        let target_bits = bits_per_weight(ty);
        let mut parts = Vec::with_capacity(self.parts().len());
        let mut start = 0;
        for p in self.parts() {
            if bits_per_weight(p.ty) <= target_bits {
                parts.push(p.clone());
            } else {
                let rows: Vec<Vec<u8>> = (start..start + p.rows)
                    .into_par_iter()
                    .map(|o| {
                        let mut row = vec![0f32; cols];
                        self.decode_row(o, &mut row);
                        quantize(ty, &row)
                    })
                    .collect::<Result<_>>()?;
                parts.push(QuantPart::rows(ty, p.rows, rows.concat()));
            }
            start += p.rows;
        }
        QuantMatrix::new(parts, cols)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn matrix(ty: GgmlType, rows: usize, cols: usize) -> QuantMatrix {
        let x: Vec<f32> = (0..rows * cols).map(|i| ((i * 7919 % 1013) as f32 - 506.0) / 300.0).collect();
        QuantMatrix::new(vec![QuantPart::rows(ty, rows, quantize(ty, &x).unwrap())], cols).unwrap()
    }

    #[test]
    fn a_row_subset_multiplies_exactly_as_those_rows_of_the_whole() {
        let (rows, cols, m) = (40, 64, 3);
        let w = matrix(GgmlType::Q8_0, rows, cols);
        let ids = [31u32, 2, 17, 39, 0];
        let sub = w.select_rows(&ids).unwrap();
        let x: Vec<f32> = (0..m * cols).map(|i| (i as f32 * 0.37).sin()).collect();
        for int in [false, true] {
            let (mut full, mut part) = (vec![0f32; m * rows], vec![0f32; m * ids.len()]);
            if int {
                w.matmul_int(&x, m, &mut full);
                sub.matmul_int(&x, m, &mut part);
            } else {
                w.matmul(&x, m, &mut full);
                sub.matmul(&x, m, &mut part);
            }
            for r in 0..m {
                for (j, &o) in ids.iter().enumerate() {
                    assert_eq!(
                        part[r * ids.len() + j].to_bits(),
                        full[r * rows + o as usize].to_bits(),
                        "int {int}, row {r}, id {o}"
                    );
                }
            }
        }
        assert!(format!("{:#}", w.select_rows(&[40]).unwrap_err()).contains("outside a matrix of 40 rows"));
    }

    #[test]
    fn requantizing_lowers_the_bytes_and_keeps_cheaper_parts() {
        let w = matrix(GgmlType::Q8_0, 8, 64);
        let q4 = w.requantized(GgmlType::Q4_0).unwrap();
        assert_eq!((q4.parts()[0].ty, q4.byte_len()), (GgmlType::Q4_0, 8 * 2 * 18));
        // A value moves by at most about one Q4_0 step of its block.
        let (a, b) = (w.to_f32(), q4.to_f32());
        for (blk_a, blk_b) in a.chunks(32).zip(b.chunks(32)) {
            let step = blk_a.iter().fold(0f32, |m, v| m.max(v.abs())) / 8.0;
            assert!(blk_a.iter().zip(blk_b).all(|(x, y)| (x - y).abs() <= step * 1.01 + 1e-3));
        }
        // Already cheaper than Q8_0: kept bit for bit.
        let again = q4.requantized(GgmlType::Q8_0).unwrap();
        assert_eq!(again.parts()[0].data, q4.parts()[0].data);
    }
}
