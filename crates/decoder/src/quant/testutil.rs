//! Random but valid quantized matrices for the kernels' tests and benchmarks (`kbench`'s
//! formats the real pair does not use).

use crate::gguf::GgmlType;
use half::{bf16, f16};
use rand::RngExt;
use rand::rngs::StdRng;

/// Random but valid blocks: random quant bits, finite scales (f16 fields overwritten).
pub fn random_blocks(ty: GgmlType, rows: usize, cols: usize, rng: &mut StdRng) -> Vec<u8> {
    let n = rows * cols;
    let put = |b: &mut [u8], at: usize, v: f32| b[at..at + 2].copy_from_slice(&f16::from_f32(v).to_le_bytes());
    match ty {
        GgmlType::F16 => (0..n).flat_map(|_| f16::from_f32(rng.random_range(-1.0..1.0)).to_le_bytes()).collect(),
        GgmlType::BF16 => (0..n).flat_map(|_| bf16::from_f32(rng.random_range(-1.0..1.0)).to_le_bytes()).collect(),
        _ => {
            let (_, bytes) = ty.block();
            let mut data: Vec<u8> = (0..ty.byte_size(n).unwrap()).map(|_| rng.random()).collect();
            for b in data.chunks_exact_mut(bytes) {
                let (d, m) = (rng.random_range(-0.05..0.05), rng.random_range(0.0..0.05));
                match ty {
                    GgmlType::Q6K => put(b, 208, d),
                    GgmlType::Q4K | GgmlType::Q5K => {
                        put(b, 0, d);
                        put(b, 2, m);
                    }
                    _ => put(b, 0, d),
                }
            }
            data
        }
    }
}

/// A matrix of parts `(type, rows)` of random blocks, seeded.
#[cfg(test)]
pub fn matrix(parts: &[(GgmlType, usize)], cols: usize, seed: u64) -> super::QuantMatrix {
    use super::{QuantMatrix, QuantPart};
    use rand::SeedableRng;
    let mut rng = StdRng::seed_from_u64(seed);
    let parts =
        parts.iter().map(|&(ty, rows)| QuantPart::rows(ty, rows, random_blocks(ty, rows, cols, &mut rng))).collect();
    QuantMatrix::new(parts, cols).unwrap()
}
