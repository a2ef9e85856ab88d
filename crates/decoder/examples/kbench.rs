//! Micro-benchmark of `x W^T` on the real models' weight matrices, in the same run: the integer
//! kernels (`q8` weights) on every path this CPU supports and on weight panels (the layout the
//! runtime uses on x86: AVX-512 VNNI, AVX-VNNI, AVX2; `SPECX_INT_PATH` picks the path), the native kernel on the GGUF
//! blocks, the f32 kernel on the same matrix dequantized, and burn-flex's matmul on that f32
//! matrix. The last column is the cost of the call as a multiple of a one-row call of the
//! runtime's integer path and layout.
//!
//!     cargo run --release --example kbench -p specx-decoder
//!
//! `KBENCH_ROWS=1,2,5` picks the row counts (default 1, 2, 5, 9, 21, 40). Reads the fetched
//! Qwen pair (scripts/fetch-models.sh; `SPECX_MODELS` moves it). Each matrix is cycled through
//! enough copies (>= 96 MB per path) that its weights come from memory, not the caches.

use burn::tensor::{Device, Tensor, TensorData};
use rand::SeedableRng;
use specx_decoder::gguf::GgmlType;
use specx_decoder::kernels::matmul_wt;
use specx_decoder::quant::{IntPath, QuantMatrix, QuantPart, int};
use specx_decoder::weights::{GgufSource, WeightSource};
use std::time::Instant;

/// Seconds per call of `f` over `copies` (best of 3 passes over all copies).
fn time_per_call(copies: usize, mut f: impl FnMut(usize)) -> f64 {
    (0..3)
        .map(|_| {
            let t = Instant::now();
            for c in 0..copies {
                f(c);
            }
            t.elapsed().as_secs_f64() / copies as f64
        })
        .fold(f64::MAX, f64::min)
}

fn main() -> anyhow::Result<()> {
    let device = Device::flex();
    let dir = specx_decoder::loader::model_cache_dir();
    let cases = [
        ("qwen2.5-coder-1.5b-instruct", "model.layers.0.mlp.gate_proj.weight"),
        ("qwen2.5-coder-1.5b-instruct", "model.layers.0.mlp.down_proj.weight"),
        ("qwen2.5-coder-1.5b-instruct", "model.layers.0.self_attn.q_proj.weight"),
        ("qwen2.5-coder-1.5b-instruct", "output.weight"),
        ("qwen2.5-coder-0.5b-instruct", "model.layers.0.mlp.gate_proj.weight"),
        ("qwen2.5-coder-0.5b-instruct", "model.layers.0.self_attn.q_proj.weight"),
        ("qwen2.5-coder-0.5b-instruct", "lm_head.weight"),
    ];
    let row_counts: Vec<usize> = match std::env::var("KBENCH_ROWS") {
        Ok(s) => s.split(',').map(|x| x.trim().parse().expect("KBENCH_ROWS: comma-separated row counts")).collect(),
        Err(_) => vec![1, 2, 5, 9, 21, 40],
    };
    let paths = IntPath::all_supported();
    let mut int_cols: Vec<String> = paths.iter().map(|p| format!("{} ms", p.name())).collect();
    if specx_decoder::quant::panels_in_use() {
        int_cols.insert(0, format!("{} panels ms", IntPath::active().name()));
    }
    println!(
        "| model | tensor | type | n x k | rows | {} | native ms | f32 kernel ms | burn ms | native/runtime | x 1 row |",
        int_cols.join(" | ")
    );
    println!("|---|---|---|---|---:|{}---:|---:|---:|---:|---:|", "---:|".repeat(int_cols.len()));
    for (model, name) in cases {
        let path = dir.join(model).join("model.gguf");
        anyhow::ensure!(path.exists(), "{} is missing: run scripts/fetch-models.sh", path.display());
        let src = GgufSource::open(&path)?;
        let name = if src.contains(name) { name.to_string() } else { name.replace("output.weight", "lm_head.weight") };
        let Some((shape, part)) = src.load_blocks(&name)? else {
            println!("| {model} | {name} | {:?} | - | - | no native kernel |", src.stored_type(&name));
            continue;
        };
        let (n, k) = (shape[0], shape[1]);
        let short = model.trim_start_matches("qwen2.5-coder-").trim_end_matches("-instruct");
        bench_matrix(
            short,
            name.trim_start_matches("model.layers.").trim_end_matches(".weight"),
            QuantMatrix::new(vec![part], k)?,
            n,
            &row_counts,
            &paths,
            &device,
        );
    }
    // Q5_K, which the pair does not use (Q5_K_M files do): random valid blocks of the target
    // gate's shape.
    let (n, k) = (8960, 1536);
    let mut rng = rand::rngs::StdRng::seed_from_u64(5);
    let data = specx_decoder::quant::testutil::random_blocks(GgmlType::Q5K, n, k, &mut rng);
    bench_matrix(
        "random",
        "Q5_K of the 1.5b gate's shape",
        QuantMatrix::new(vec![QuantPart::rows(GgmlType::Q5K, n, data)], k)?,
        n,
        &row_counts,
        &paths,
        &device,
    );
    Ok(())
}

/// One matrix's row of the table for every row count.
fn bench_matrix(
    model: &str,
    tensor: &str,
    q: QuantMatrix,
    n: usize,
    row_counts: &[usize],
    paths: &[IntPath],
    device: &Device,
) {
    let panels = specx_decoder::quant::panels_in_use();
    let (k, ty) = (q.cols(), q.parts()[0].ty);
    let copies_q = (96_000_000usize).div_ceil(q.byte_len()).max(1);
    let copies_f = (96_000_000usize).div_ceil(n * k * 4).max(1);
    let natives: Vec<QuantMatrix> = (0..copies_q).map(|_| q.clone()).collect();
    // The layout the runtime gives `q8` matrices on this CPU (panels on AVX-512 VNNI and AVX2).
    let laid_out: Vec<QuantMatrix> =
        if panels { natives.iter().map(|q| q.clone().into_int_layout()).collect() } else { Vec::new() };
    let dense = q.to_f32();
    let denses: Vec<Vec<f32>> = (0..copies_f).map(|_| dense.clone()).collect();
    let tensors: Vec<Tensor<2>> =
        denses.iter().map(|w| Tensor::from_data(TensorData::new(w.clone(), [n, k]), device)).collect();
    let mut one_row = None;
    for &m in row_counts {
        let x: Vec<f32> = (0..m * k).map(|i| ((i % 7) as f32 - 3.0) / 7.0).collect();
        let mut out = vec![0f32; m * n];
        let mut ints: Vec<f64> =
            paths.iter().map(|&p| time_per_call(copies_q, |c| int::matmul(&natives[c], &x, m, &mut out, p))).collect();
        if panels {
            ints.insert(0, time_per_call(copies_q, |c| int::matmul(&laid_out[c], &x, m, &mut out, IntPath::active())));
        }
        let native = time_per_call(copies_q, |c| natives[c].matmul(&x, m, &mut out));
        let f32k = time_per_call(copies_f, |c| matmul_wt(&x, m, &denses[c], n, k, &mut out));
        let xt = Tensor::<2>::from_data(TensorData::new(x.clone(), [m, k]), device);
        let burn = time_per_call(copies_f, |c| {
            let _ = xt.clone().matmul(tensors[c].clone().transpose()).into_data();
        });
        if m == 1 {
            one_row = Some(ints[0]);
        }
        println!(
            "| {model} | {tensor} | {ty:?} | {n} x {k} | {m} | {} | {:.3} | {:.3} | {:.3} | {:.2} | {} |",
            ints.iter().map(|t| format!("{:.3}", t * 1e3)).collect::<Vec<_>>().join(" | "),
            native * 1e3,
            f32k * 1e3,
            burn * 1e3,
            native / ints[0],
            one_row.map_or("-".into(), |one| format!("{:.2}", ints[0] / one)),
        );
    }
}
