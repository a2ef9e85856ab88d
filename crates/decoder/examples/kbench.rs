//! Micro-benchmark of the few-row `x W^T` kernel against burn-flex's matmul on the same
//! shapes, in the same run: `cargo run --release --example kbench -p specx-decoder`.
//! Weight matrices are cycled through several copies so they come from memory, not cache.

use burn::tensor::{Device, Tensor, TensorData};
use std::time::Instant;

fn main() {
    let device = Device::flex();
    println!("| n x k | rows | kernel ms | kernel GB/s | burn ms | burn/kernel |");
    println!("|---|---:|---:|---:|---:|---:|");
    for &(n, k) in &[(151936usize, 896usize), (9728, 896), (896, 4864), (17920, 1536)] {
        let copies = (1_500_000_000 / (n * k * 4)).max(1);
        let ws: Vec<Vec<f32>> = (0..copies).map(|c| (0..n * k).map(|i| ((i + c) % 13) as f32 / 13.0).collect()).collect();
        let wts: Vec<Tensor<2>> = ws.iter().map(|w| Tensor::from_data(TensorData::new(w.clone(), [n, k]), &device)).collect();
        for m in std::env::var("KBENCH_ROWS").ok().map(|s| s.split(',').map(|x| x.parse::<usize>().expect("KBENCH_ROWS: comma-separated row counts")).collect::<Vec<_>>()).unwrap_or(vec![1, 2, 4, 8]) {
            let x: Vec<f32> = (0..m * k).map(|i| (i % 7) as f32 / 7.0).collect();
            let mut out = vec![0f32; m * n];
            let reps = 3;
            let t = Instant::now();
            for _ in 0..reps {
                for w in &ws {
                    specx_decoder::kernels::matmul_wt(&x, m, w, n, k, &mut out);
                }
            }
            let ours = t.elapsed().as_secs_f64() / (reps * copies) as f64;
            let xt = Tensor::<2>::from_data(TensorData::new(x.clone(), [m, k]), &device);
            let t = Instant::now();
            for _ in 0..reps {
                for w in &wts {
                    let _ = xt.clone().matmul(w.clone().transpose()).into_data();
                }
            }
            let burn = t.elapsed().as_secs_f64() / (reps * copies) as f64;
            println!(
                "| {n} x {k} | {m} | {:.3} | {:.1} | {:.3} | {:.2} |",
                ours * 1e3,
                (n * k * 4) as f64 / ours / 1e9,
                burn * 1e3,
                burn / ours
            );
        }
    }
}
