//! The integer kernels against their reference: every path this CPU has gives the portable
//! path's bits for 1..70 activation rows, each row's result is the same alone or in a call of
//! any size, and the comparison catches a broken arithmetic. That the numbers are the right
//! ones, close to the exact product, is `accuracy_tests`.

use super::QuantMatrix;
use super::act::{Q8KRows, QK_K};
use super::int::{IntPath, dot_k_portable, matmul};
use super::testutil::matrix;
use super::unpack::UnpackedRow;
use crate::gguf::GgmlType;
use rand::rngs::StdRng;
use rand::{RngExt, SeedableRng};

/// Activation rows with a spread of magnitudes (a few large values, as real hidden states).
fn activations(rows: usize, k: usize, seed: u64) -> Vec<f32> {
    let mut rng = StdRng::seed_from_u64(seed);
    (0..rows * k).map(|i| rng.random_range(-1.0f32..1.0) * if i % 97 == 0 { 8.0 } else { 1.0 }).collect()
}

fn run(q: &QuantMatrix, x: &[f32], m: usize, path: IntPath) -> Vec<f32> {
    let mut out = vec![0f32; m * q.rows()];
    matmul(q, &x[..m * q.cols()], m, &mut out, path);
    out
}

/// `q` with every part that has a panel layout stored as panels.
fn panels(q: &QuantMatrix) -> QuantMatrix {
    let mut p = q.clone();
    p.repack_panels();
    p
}

fn same_bits(a: &[f32], b: &[f32]) -> bool {
    a.len() == b.len() && a.iter().zip(b).all(|(x, y)| x.to_bits() == y.to_bits())
}

/// Types and widths: 32-wide formats with an odd and an even block count, K-quants over one
/// and three blocks.
const CASES: [(GgmlType, usize); 10] = [
    (GgmlType::Q4_0, 96),
    (GgmlType::Q4_0, 128),
    (GgmlType::Q5_0, 96),
    (GgmlType::Q5_0, 896),
    (GgmlType::Q8_0, 96),
    (GgmlType::Q8_0, 128),
    (GgmlType::Q4K, 768),
    (GgmlType::Q5K, 256),
    (GgmlType::Q5K, 768),
    (GgmlType::Q6K, 768),
];

#[test]
fn every_path_gives_the_portable_bits_for_1_to_70_rows() {
    let paths = IntPath::all_supported();
    eprintln!("integer paths on this CPU: {:?}", paths.iter().map(|p| p.name()).collect::<Vec<_>>());
    for (ty, k) in CASES {
        // 37 weight rows: two parallel tasks of 16 and a short one.
        let q = matrix(&[(ty, 37)], k, ty.id() as u64 + k as u64);
        let paneled = panels(&q);
        let x = activations(70, k, 3);
        for m in (1..=17).chain([20, 21, 31, 33, 40, 64, 70]) {
            let want = run(&q, &x, m, IntPath::Portable);
            for &p in &paths {
                assert!(
                    same_bits(&run(&q, &x, m, p), &want),
                    "{ty:?} k={k}: {} differs from portable at {m} rows",
                    p.name()
                );
                assert!(
                    same_bits(&run(&paneled, &x, m, p), &want),
                    "{ty:?} k={k}: {} on panels differs from portable at {m} rows",
                    p.name()
                );
            }
        }
    }
}

#[test]
fn the_largest_quants_and_activations_give_the_portable_bits() {
    // Every quant at its largest magnitude against activations of +-127 (each block's values of
    // one size): the bounds of the kernels' narrow sums (i16 chains, saturating pair adds).
    let put = |b: &mut [u8], at: usize, v: f32| b[at..at + 2].copy_from_slice(&half::f16::from_f32(v).to_le_bytes());
    for (ty, k) in CASES {
        let (_, size) = ty.block();
        let mut data = vec![0xffu8; ty.byte_size(16 * k).unwrap()];
        for b in data.chunks_exact_mut(size) {
            match ty {
                GgmlType::Q6K => {
                    b[192..208].fill(0x7f);
                    put(b, 208, 0.01);
                }
                GgmlType::Q4K | GgmlType::Q5K => {
                    put(b, 0, 0.01);
                    put(b, 2, 0.002);
                }
                _ => put(b, 0, 0.01),
            }
        }
        let q = QuantMatrix::new(vec![super::QuantPart::rows(ty, 16, data)], k).unwrap();
        let signs: [fn(usize) -> f32; 3] = [|_| 1.0, |_| -1.0, |i| if i % 2 == 0 { 1.0 } else { -1.0 }];
        let x: Vec<f32> = signs.iter().flat_map(|s| (0..k).map(s)).collect();
        let m = signs.len();
        let want = run(&q, &x, m, IntPath::Portable);
        for &p in &IntPath::all_supported() {
            assert!(
                same_bits(&run(&q, &x, m, p), &want),
                "{ty:?}: {} differs from portable at the largest values",
                p.name()
            );
            assert!(
                same_bits(&run(&panels(&q), &x, m, p), &want),
                "{ty:?}: {} on panels differs from portable at the largest values",
                p.name()
            );
        }
    }
}

#[test]
fn a_row_alone_equals_the_same_row_in_any_call() {
    for (ty, k) in CASES {
        let rows = matrix(&[(ty, 20)], k, 11);
        let x = activations(40, k, 5);
        let n = rows.rows();
        for (q, p) in
            [&rows, &panels(&rows)].into_iter().flat_map(|q| IntPath::all_supported().into_iter().map(move |p| (q, p)))
        {
            let all = run(q, &x, 40, p);
            for r in [0, 1, 7, 39] {
                let alone = run(q, &x[r * k..], 1, p);
                assert!(same_bits(&alone, &all[r * n..(r + 1) * n]), "{ty:?} {}: row {r} alone differs", p.name());
            }
            // Row 3 at the front of a 2-row call and in the middle of a 9-row one.
            let two = run(q, &x[3 * k..], 2, p);
            let nine = run(q, &x[k..], 9, p);
            assert!(
                same_bits(&two[..n], &all[3 * n..4 * n]) && same_bits(&nine[2 * n..3 * n], &all[3 * n..4 * n]),
                "{ty:?} {}",
                p.name()
            );
        }
    }
}

#[test]
fn stacked_parts_of_both_families() {
    // A fused projection mixing K-quants and a 32-wide format (both need their own activations).
    // Parts of 9, 5, 3 and 7 rows: as panels, each padded to 16.
    let q = matrix(&[(GgmlType::Q4K, 9), (GgmlType::Q8_0, 5), (GgmlType::Q5K, 3), (GgmlType::Q6K, 7)], 256, 4);
    let x = activations(6, 256, 8);
    let want = run(&q, &x, 6, IntPath::Portable);
    for &p in &IntPath::all_supported() {
        assert!(same_bits(&run(&q, &x, 6, p), &want), "{}", p.name());
        assert!(same_bits(&run(&panels(&q), &x, 6, p), &want), "{} on panels", p.name());
    }
}

/// The reference with one deliberate mistake: each 16-value group takes the next group's scale.
fn broken_dot_k(w: &UnpackedRow, x: &Q8KRows, r: usize) -> f32 {
    let mut acc = 0f32;
    for b in 0..w.blocks {
        let (dx, xq, bsums) = x.block(r, b);
        let t: i32 =
            (0..QK_K).map(|e| w.q[b * QK_K + e] as i32 * xq[e] as i32 * w.sc[b * 16 + (e / 16 + 1) % 16] as i32).sum();
        let m: i32 = (0..16).map(|g| w.mn[b * 16 + g] as i32 * bsums[g] as i32).sum();
        acc = (w.d[b] * dx).mul_add(t as f32, acc);
        acc = (-(w.dmin[b] * dx)).mul_add(m as f32, acc);
    }
    acc
}

#[test]
fn the_bitwise_check_catches_a_wrong_scale_offset() {
    let q = matrix(&[(GgmlType::Q4K, 8)], 512, 13);
    let x = activations(1, 512, 2);
    let xq = Q8KRows::quantize(&x, 1, 512);
    let got = run(&q, &x, 1, IntPath::active());
    let mut w = UnpackedRow::default();
    let (mut differ, mut agree) = (0, 0);
    for o in 0..q.rows() {
        let (ty, bytes) = q.row_blocks(o);
        w.unpack(ty, &bytes);
        agree += (dot_k_portable(&w, &xq, 0, true).to_bits() == got[o].to_bits()) as usize;
        differ += (broken_dot_k(&w, &xq, 0).to_bits() != got[o].to_bits()) as usize;
    }
    assert_eq!((agree, differ), (8, 8), "the reference must match every row and the broken one none");
}
