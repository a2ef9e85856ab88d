use std::time::Instant;
fn main() {
    for &(n, k) in &[(151936usize, 896usize), (4864, 896), (896, 4864), (8960, 1536)] {
        let copies = (2_000_000_000 / (n * k * 4)).max(1);
        let ws: Vec<Vec<f32>> = (0..copies).map(|c| (0..n * k).map(|i| ((i + c) % 13) as f32).collect()).collect();
        for m in [1usize, 4, 8, 16, 32] {
            let x: Vec<f32> = (0..m * k).map(|i| (i % 7) as f32).collect();
            let mut out = vec![0f32; m * n];
            let t = Instant::now();
            let reps = 3;
            for _ in 0..reps { for w in &ws { specx_decoder::kernels::matmul_wt(&x, m, w, n, k, &mut out); } }
            let dt = t.elapsed().as_secs_f64() / (reps * copies) as f64;
            println!("n={n} k={k} m={m}: {:.3} ms, {:.1} GB/s, {:.1} GFLOP/s", dt * 1e3, (n * k * 4) as f64 / dt / 1e9, (2 * m * n * k) as f64 / dt / 1e9);
        }
    }
}
