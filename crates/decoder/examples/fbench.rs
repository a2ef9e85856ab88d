//! Forward-call benchmark of one model on the CPU: after a prompt, calls of r new rows
//! (rolled back after each), timed with the minor page faults each call takes, for
//! profiling what a verification call spends outside the matrix kernels (run it under
//! `perf record`).
//!
//!   FBENCH_MODEL=qwen2.5-coder-1.5b-instruct FBENCH_ROWS=1,5 FBENCH_REPS=20 \
//!     cargo run --release --example fbench -p specx-decoder
//!
//! Weights: `q8` (FBENCH_WEIGHTS=native for the exact path). `FBENCH_LOGITS=last` computes
//! only the last row's logits, as a prompt's prefill does (`forward_last`); by default every
//! row's, as a verification does.
use burn::tensor::Device;
use specx_decoder::WeightMode;
use std::time::Instant;

/// Minor page faults of this process so far (0 where getrusage is not linked).
#[cfg(not(target_os = "linux"))]
fn minor_faults() -> i64 {
    0
}

/// Minor page faults of this process so far.
#[cfg(target_os = "linux")]
fn minor_faults() -> i64 {
    // SAFETY: getrusage writes the struct it is given.
    unsafe {
        let mut u: libc::rusage = std::mem::zeroed();
        libc::getrusage(libc::RUSAGE_SELF, &mut u);
        u.ru_minflt
    }
}

fn main() -> anyhow::Result<()> {
    let env = |k: &str, d: &str| std::env::var(k).unwrap_or_else(|_| d.to_string());
    let model = env("FBENCH_MODEL", "qwen2.5-coder-1.5b-instruct");
    let rows: Vec<usize> =
        env("FBENCH_ROWS", "1,5").split(',').map(|x| x.trim().parse().expect("FBENCH_ROWS: row counts")).collect();
    let reps: usize = env("FBENCH_REPS", "20").parse()?;
    let mode = match env("FBENCH_WEIGHTS", "q8").as_str() {
        "native" => WeightMode::Native,
        _ => WeightMode::Q8,
    };
    let last_only = match env("FBENCH_LOGITS", "all").as_str() {
        "all" => false,
        "last" => true,
        other => anyhow::bail!("FBENCH_LOGITS: `all` or `last`, not `{other}`"),
    };
    let path = specx_decoder::loader::model_cache_dir().join(&model).join("model.gguf");
    anyhow::ensure!(path.exists(), "{} is missing: run scripts/fetch-models.sh", path.display());
    let lm = specx_decoder::loader::load_model_as(&path, None, &Device::flex(), mode)?;
    let prompt: Vec<u32> = (0..128u32).map(|i| 1000 + i * 7).collect();
    let mut cache = lm.model.new_cache(1);
    lm.model.forward_last(&prompt, &mut cache)?;
    println!("| rows | median ms | min ms | max ms | minor faults / call |");
    println!("|---:|---:|---:|---:|---:|");
    for &r in &rows {
        let tokens: Vec<u32> = (0..r as u32).map(|i| 2000 + i).collect();
        lm.model.forward(&tokens, &mut cache)?; // warm-up
        cache.truncate(prompt.len());
        let (mut ms, f0) = (Vec::new(), minor_faults());
        for _ in 0..reps {
            let t = Instant::now();
            if last_only {
                lm.model.forward_last(&tokens, &mut cache)?;
            } else {
                let _ = lm.model.forward(&tokens, &mut cache)?.logits_tail(1);
            }
            ms.push(t.elapsed().as_secs_f64() * 1e3);
            cache.truncate(prompt.len());
        }
        let faults = (minor_faults() - f0) as f64 / reps as f64;
        ms.sort_by(f64::total_cmp);
        println!("| {r} | {:.2} | {:.2} | {:.2} | {faults:.0} |", ms[ms.len() / 2], ms[0], ms[ms.len() - 1]);
    }
    Ok(())
}
