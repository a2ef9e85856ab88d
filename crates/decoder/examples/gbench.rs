//! Long-call benchmark of the integer kernels (`q8` weights): `x W^T` of the target's
//! projections at the row counts of a prompt's prefill and of datagen's batches, in the
//! runtime's layout and path (`SPECX_INT_PATH` forces one). Prints ms per call, µs per
//! activation row and the multiply-adds per second, so that the per-row cost can be read
//! against the row count: a kernel whose working set leaves the caches as rows grow shows a
//! rising µs per row.
//!
//!     GBENCH_ROWS=64,128,512,1024 cargo run --release --example gbench -p specx-decoder
//!
//! Reads the fetched Qwen pair (scripts/fetch-models.sh; `SPECX_MODELS` moves it). The
//! weights are small next to the activations at these row counts, so one copy is cycled.

use specx_decoder::quant::{IntPath, QuantMatrix, int};
use specx_decoder::weights::{GgufSource, WeightSource};
use std::time::Instant;

fn main() -> anyhow::Result<()> {
    let dir = specx_decoder::loader::model_cache_dir();
    let model = "qwen2.5-coder-1.5b-instruct";
    let tensors = [
        "model.layers.0.self_attn.q_proj.weight",
        "model.layers.0.mlp.gate_proj.weight",
        "model.layers.0.mlp.down_proj.weight",
    ];
    let rows: Vec<usize> = match std::env::var("GBENCH_ROWS") {
        Ok(s) => s.split(',').map(|x| x.trim().parse().expect("GBENCH_ROWS: comma-separated row counts")).collect(),
        Err(_) => vec![16, 64, 128, 256, 512, 1024],
    };
    let reps: usize = std::env::var("GBENCH_REPS").map_or(5, |s| s.parse().expect("GBENCH_REPS: a count"));
    let path = dir.join(model).join("model.gguf");
    anyhow::ensure!(path.exists(), "{} is missing: run scripts/fetch-models.sh", path.display());
    let src = GgufSource::open(&path)?;
    let active = IntPath::active();
    println!(
        "integer path: {}{}",
        active.name(),
        if specx_decoder::quant::panels_in_use() { " on weight panels" } else { "" }
    );
    println!("| tensor | type | n x k | rows | median ms | min ms | max ms | µs / row | G mul-add / s |");
    println!("|---|---|---|---:|---:|---:|---:|---:|---:|");
    for name in tensors {
        let Some((shape, part)) = src.load_blocks(name)? else { anyhow::bail!("{name}: no integer kernel") };
        let (n, k) = (shape[0], shape[1]);
        let q = QuantMatrix::new(vec![part], k)?.into_int_layout();
        let ty = q.parts()[0].ty;
        for &m in &rows {
            let x: Vec<f32> = (0..m * k).map(|i| ((i % 7) as f32 - 3.0) / 7.0).collect();
            let mut out = vec![0f32; m * n];
            int::matmul(&q, &x, m, &mut out, active);
            let mut times: Vec<f64> = (0..reps)
                .map(|_| {
                    let t = Instant::now();
                    int::matmul(&q, &x, m, &mut out, active);
                    t.elapsed().as_secs_f64()
                })
                .collect();
            times.sort_by(f64::total_cmp);
            let median = times[times.len() / 2];
            println!(
                "| {} | {ty:?} | {n} x {k} | {m} | {:.2} | {:.2} | {:.2} | {:.1} | {:.1} |",
                name.trim_start_matches("model.layers.").trim_end_matches(".weight"),
                median * 1e3,
                times[0] * 1e3,
                times[times.len() - 1] * 1e3,
                median * 1e6 / m as f64,
                (m * n * k) as f64 / median / 1e9,
            );
        }
    }
    Ok(())
}
