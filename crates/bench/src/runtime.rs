//! `specx bench`: decode, prefill and verification speed of the draft and the target on each
//! weight path (native GGUF blocks, f32), peak memory per path, the memory-bandwidth bound of
//! this machine, and optionally llama.cpp's `llama-bench` on the same files, all in one run.
//!
//! Decoding one token reads every weight once, so tokens/s can never exceed
//! `bandwidth / bytes_per_token`, with the weights counted as stored (blocks on the native
//! path, f32 otherwise). The report prints that bound and the achieved fraction of it.

use crate::llamacpp::{LlamaCppBench, run_llama_bench};
use anyhow::{Result, ensure};
use specx_decoder::generate::{RecordedSteps, greedy_token, last_logits};
use specx_decoder::{
    DeviceName, KvCache, LoadedModel, Transformer, WeightMode, check_device, load_model_as, open_device,
    parse_device_list,
};
use specx_eval::common::row_cost::{RowCostKey, StoredRowCost, fit_row_cost, store, store_path, utc_date};
use specx_eval::common::sysmem::{current_rss_bytes, peak_rss_bytes, read_bandwidth, read_bandwidth_threads};
use specx_eval::method::models::PairArgs;
use specx_eval::report::markdown_table;
use std::path::PathBuf;
use std::time::Instant;

/// Options of `specx bench`.
#[derive(clap::Args, Debug)]
pub struct BenchArgs {
    #[command(flatten)]
    pub pair: PairArgs,
    /// Prompt length used to measure prefill.
    #[arg(long, default_value_t = 128)]
    pub prompt_tokens: usize,
    /// Tokens decoded (greedy, one at a time) to measure decode speed.
    #[arg(long, default_value_t = 64)]
    pub decode_tokens: usize,
    /// Rows of the verification call that is timed (a speculative round of K = rows - 1).
    #[arg(long, default_value_t = 5)]
    pub verify_rows: usize,
    /// Weight paths to measure, one after the other in this run (`q8`: GGUF blocks with 8-bit
    /// activations and integer dot products; `native`: GGUF blocks decoded to f32 in the
    /// kernel; `f32`: dequantized on load), so their ratios come from the same run. `f32`
    /// is left out by default: it holds both models as f32 (about 10 GB of RAM); add it for
    /// the exact reference path (`--weights q8,native,f32`). On a GPU `q8` and `native` are
    /// one path (GGUF blocks decoded in the device's product kernel), measured as `native`.
    #[arg(long, value_delimiter = ',', default_value = "q8,native")]
    pub weights: Vec<WeightMode>,
    /// Row counts of the timed calls after the prompt (a verification of K + 1 rows, a batched
    /// step), reported as multiples of a one-row call of the same path.
    #[arg(long, value_delimiter = ',', default_value = "1,2,5,9,21")]
    pub call_rows: Vec<usize>,
    /// Devices to measure, one after the other in this run: `cpu` (each of --weights),
    /// `wgpu[:N]` (a Vulkan adapter; build with `--features wgpu`), `cuda[:N]`, each with the
    /// weight paths a GPU has (f32, GGUF blocks). With a device besides the CPU, a table of device/CPU ratios follows.
    #[arg(long, value_delimiter = ',', default_value = "cpu")]
    pub devices: Vec<String>,
    /// llama.cpp's `llama-bench` binary (build one with scripts/bench-llamacpp.sh): run it on the
    /// same GGUF files with the same thread count, prompt and decode lengths in this run, with
    /// its weight repacking off and on (`--repack 0,1`; on a CPU with AMX-INT8 `1` is its AMX
    /// path), and print specx/llama.cpp ratios against each.
    #[arg(long, value_name = "PATH")]
    pub llamacpp: Option<PathBuf>,
    /// Size of the buffer read to measure memory bandwidth, in MiB.
    #[arg(long, default_value_t = 2048)]
    pub bandwidth_mib: usize,
    /// Also write the results as JSON to this file.
    #[arg(long)]
    pub json: Option<PathBuf>,
}

/// One model's measurements on one weight path.
#[derive(Debug, serde::Serialize)]
pub struct ModelBench {
    pub role: String,
    pub device: String,
    pub weights: String,
    pub path: String,
    pub parameters: usize,
    pub prefill_tokens: usize,
    pub prefill_tokens_per_sec: f64,
    pub decode_tokens: usize,
    pub decode_tokens_per_sec: f64,
    /// The same greedy decode from the same prompt, each step a replay of one recorded step
    /// (`RecordedSteps`); `None` where the model's step cannot be recorded (the CPU, a
    /// model not in GGUF blocks).
    pub recorded_decode_tokens_per_sec: Option<f64>,
    /// Median seconds of one verification call of `verify_rows` tokens after the prompt.
    pub verify_secs: f64,
    pub verify_rows: usize,
    /// (rows, median seconds) of calls of each `--call-rows` count after the prompt.
    pub call_secs: Vec<(usize, f64)>,
    /// A verification row's cost in one-row calls, fitted over `call_secs`
    /// ([`fit_row_cost`]); `None` without a one-row call and a longer one.
    pub row_cost: Option<f64>,
    /// Weight bytes (as stored) plus mean KV-cache bytes read per decoded token.
    pub bytes_per_token: f64,
    /// bandwidth / bytes_per_token.
    pub bound_tokens_per_sec: f64,
    pub fraction_of_bound: f64,
}

/// Memory of one weight path, measured with only its two models loaded.
#[derive(Debug, serde::Serialize)]
pub struct PathMemory {
    pub device: String,
    pub weights: String,
    pub rss_both_loaded_gb: f64,
    /// Peak RSS while this path loaded and ran (the peak is reset before each path).
    pub peak_rss_gb: f64,
}

#[derive(Debug, serde::Serialize)]
pub struct BenchReport {
    pub bandwidth_gb_s: f64,
    pub bandwidth_one_thread_gb_s: f64,
    pub threads: usize,
    /// The integer kernels' path on this CPU (`q8` weights) with its weight layout and whether
    /// it was forced, and the paths this CPU supports.
    pub int_path: String,
    pub int_paths_supported: Vec<String>,
    pub models: Vec<ModelBench>,
    pub memory: Vec<PathMemory>,
    pub llamacpp: Vec<LlamaCppBench>,
    /// llama.cpp's paths that did not run, with the reason (`role path: reason`).
    pub llamacpp_failed: Vec<String>,
    /// Where the targets' row costs were stored for `specx decode --policy tree-price`, or why
    /// not.
    pub row_cost_store: String,
}

/// A prompt of exactly `n` tokens: a fixed English/code text, repeated as needed.
pub fn bench_prompt(lm: &LoadedModel, n: usize) -> Result<Vec<u32>> {
    let text = "def fibonacci(n):\n    \"\"\"Return the n-th Fibonacci number.\"\"\"\n    a, b = 0, 1\n    for _ in range(n):\n        a, b = b, a + b\n    return a\n\n# Speculative decoding lets a small model draft tokens that a large model verifies.\n";
    let ids = lm.tokenizer.encode(text)?;
    Ok(ids.iter().cycle().take(n.max(1)).copied().collect())
}

/// Raw timings of one model, before the bound is applied.
struct Timing {
    role: String,
    device: String,
    weights: String,
    path: String,
    parameters: usize,
    prefill_tokens: usize,
    prefill_secs: f64,
    decode_tokens: usize,
    decode_secs: f64,
    recorded_decode_secs: Option<f64>,
    verify_secs: f64,
    verify_rows: usize,
    call_secs: Vec<(usize, f64)>,
    bytes_per_token: f64,
}

impl Timing {
    fn against(self, bandwidth: f64) -> ModelBench {
        let decode_tps = self.decode_tokens as f64 / self.decode_secs;
        let bound = bandwidth / self.bytes_per_token;
        ModelBench {
            role: self.role,
            device: self.device,
            weights: self.weights,
            path: self.path,
            parameters: self.parameters,
            prefill_tokens: self.prefill_tokens,
            prefill_tokens_per_sec: self.prefill_tokens as f64 / self.prefill_secs,
            decode_tokens: self.decode_tokens,
            decode_tokens_per_sec: decode_tps,
            recorded_decode_tokens_per_sec: self.recorded_decode_secs.map(|s| self.decode_tokens as f64 / s),
            verify_secs: self.verify_secs,
            verify_rows: self.verify_rows,
            row_cost: fit_row_cost(&self.call_secs),
            call_secs: self.call_secs,
            bytes_per_token: self.bytes_per_token,
            bound_tokens_per_sec: bound,
            fraction_of_bound: decode_tps / bound,
        }
    }
}

fn time_model(role: &str, device: DeviceName, weights: WeightMode, lm: &LoadedModel, a: &BenchArgs) -> Result<Timing> {
    let model = &lm.model;
    let prompt = bench_prompt(lm, a.prompt_tokens)?;
    // Warm-up: first-touch allocation on the CPU; on a GPU also shader compilation and
    // autotuning, which happen per shape, so every timed shape runs once first.
    let mut warm = model.new_cache(1);
    // Greedy steps take their argmax where the logits are (on a GPU, a kernel of its own).
    let _ = greedy_token(model.forward_last(&prompt, &mut warm)?);
    if device != DeviceName::Cpu {
        let _ = last_logits(&model.forward(&prompt[..a.verify_rows.max(1).min(prompt.len())], &mut warm)?);
        let _ = greedy_token(model.forward(&prompt[..1], &mut warm)?);
    }
    drop(warm);

    let mut cache = model.new_cache(1);
    let t = Instant::now();
    let mut next = greedy_token(model.forward_last(&prompt, &mut cache)?);
    let prefill_secs = t.elapsed().as_secs_f64();
    // Calls of r tokens after the prompt, rolled back after each: the verification of
    // `verify_rows`, and the cost curve of `call_rows` (median of 5, the shapes interleaved so
    // that drift on a shared host hits them alike). Each reads its last row back, so that on a
    // GPU the time is the work queued, not its launch.
    let rows_of = |r: usize| -> Vec<u32> { prompt.iter().cycle().take(r.max(1)).copied().collect() };
    let verify_rows = a.verify_rows.max(1);
    let mut shapes: Vec<usize> = a.call_rows.clone();
    if !shapes.contains(&verify_rows) {
        shapes.push(verify_rows);
    }
    let mut times: Vec<Vec<f64>> = vec![Vec::new(); shapes.len()];
    for _ in 0..5 {
        for (i, &r) in shapes.iter().enumerate() {
            let rows = rows_of(r);
            let t = Instant::now();
            let _ = last_logits(&model.forward(&rows, &mut cache)?);
            times[i].push(t.elapsed().as_secs_f64());
            cache.truncate(prompt.len());
        }
    }
    let median = |mut v: Vec<f64>| {
        v.sort_by(f64::total_cmp);
        v[v.len() / 2]
    };
    let medians: Vec<(usize, f64)> = shapes.iter().copied().zip(times.into_iter().map(median)).collect();
    let verify = medians.iter().find(|(r, _)| *r == verify_rows).expect("the verification shape is timed").1;
    let call_secs: Vec<(usize, f64)> = medians.into_iter().filter(|(r, _)| a.call_rows.contains(r)).collect();
    let first = next;
    let t = Instant::now();
    for _ in 0..a.decode_tokens {
        next = greedy_token(model.forward(&[next], &mut cache)?);
    }
    let decode_secs = t.elapsed().as_secs_f64();
    // The same steps replaying a recorded one, after one step that records it (untimed, as the
    // plain steps' shapes were warmed up).
    let recorded_decode_secs = if model.can_capture() {
        cache.truncate(prompt.len());
        let timed = recorded_decode(model, &mut cache, first, a.decode_tokens);
        if let Err(e) = &timed {
            eprintln!("specx bench: the {role}'s recorded decode step failed on {device}: {e:#}");
        }
        timed.ok()
    } else {
        None
    };

    let cfg = model.config();
    let mean_ctx = prompt.len() + a.decode_tokens / 2;
    Ok(Timing {
        role: role.into(),
        device: device.to_string(),
        weights: weights.to_string(),
        path: lm.path.display().to_string(),
        parameters: cfg.num_parameters(),
        prefill_tokens: prompt.len(),
        prefill_secs,
        decode_tokens: a.decode_tokens,
        decode_secs,
        recorded_decode_secs,
        verify_secs: verify,
        verify_rows,
        call_secs,
        bytes_per_token: (model.weight_bytes_per_token() + cfg.kv_bytes_per_token(mean_ctx)) as f64,
    })
}

/// Seconds of `steps` greedy steps after `first`, each a replay of a recorded step, after one
/// step that records it (untimed, as the plain steps' shapes were warmed up); `cache` is cut
/// back to its length before the first.
fn recorded_decode(model: &Transformer, cache: &mut KvCache, first: u32, steps: usize) -> Result<f64> {
    let start = cache.len();
    let mut recorded = RecordedSteps::new(model)?;
    recorded.next(model, first, cache)?;
    cache.truncate(start);
    let mut next = first;
    let t = Instant::now();
    for _ in 0..steps {
        next = recorded.next(model, next, cache)?;
    }
    let secs = t.elapsed().as_secs_f64();
    if let Some(why) = recorded.refused() {
        anyhow::bail!("no step was replayed: {why}");
    }
    Ok(secs)
}

/// Runs the benchmark and prints a table.
pub fn run(a: BenchArgs) -> Result<()> {
    let report = measure(&a)?;
    print_report(&report);
    if let Some(path) = &a.json {
        specx_decoder::fsutil::write_atomic(path, serde_json::to_string_pretty(&report)?.as_bytes())?;
    }
    Ok(())
}

/// Runs the benchmark.
pub fn measure(a: &BenchArgs) -> Result<BenchReport> {
    let (draft_path, target_path) = a.pair.paths();
    ensure!(!a.weights.is_empty(), "--weights needs at least one of q8, native, f32");
    ensure!(a.call_rows.iter().all(|&r| r >= 1), "--call-rows takes row counts of at least 1");
    if let Some(bin) = &a.llamacpp {
        ensure!(bin.is_file(), "--llamacpp {}: no such file (build it with scripts/bench-llamacpp.sh)", bin.display());
    }
    let threads = rayon::current_num_threads();
    eprintln!("measuring memory bandwidth ({} MiB buffer)...", a.bandwidth_mib);
    let bandwidth = read_bandwidth(a.bandwidth_mib << 20, 5);
    let bandwidth_one = read_bandwidth_threads(a.bandwidth_mib << 20, 3, 1);
    let devices = parse_device_list(&a.devices)?;
    devices.iter().try_for_each(|&d| check_device(d))?;
    // The CPU runs every weight path; a GPU runs f32 and GGUF blocks, where `native` and `q8`
    // are one path (f32 activations; integer activations are CPU-only), measured once as native.
    let mut paths: Vec<(DeviceName, WeightMode)> = Vec::new();
    for &d in &devices {
        for &w in &a.weights {
            let w = if d != DeviceName::Cpu && w == WeightMode::Q8 { WeightMode::Native } else { w };
            if !paths.contains(&(d, w)) {
                paths.push((d, w));
            }
        }
    }
    let mut timings = Vec::new();
    let mut memory = Vec::new();
    for (name, mode) in paths {
        let device = open_device(name)?;
        reset_peak_rss();
        eprintln!(
            "loading draft {} and target {} on {name} ({mode} weights)...",
            draft_path.display(),
            target_path.display()
        );
        let (draft_tok, target_tok) = a.pair.tokenizers();
        let draft = load_model_as(&draft_path, draft_tok, &device, mode)?;
        let target = load_model_as(&target_path, target_tok, &device, mode)?;
        let rss_both = current_rss_bytes().unwrap_or(0) as f64 / 1e9;
        for (role, lm) in [("draft", &draft), ("target", &target)] {
            eprintln!("benchmarking {role} on {name} ({mode})...");
            timings.push(time_model(role, name, mode, lm, a)?);
        }
        let peak = peak_rss_bytes().unwrap_or(0) as f64 / 1e9;
        memory.push(PathMemory {
            device: name.to_string(),
            weights: mode.to_string(),
            rss_both_loaded_gb: rss_both,
            peak_rss_gb: peak,
        });
    }
    let llama = match &a.llamacpp {
        Some(bin) => run_llama_bench(
            bin,
            &[("draft", &draft_path), ("target", &target_path)],
            threads,
            a.prompt_tokens,
            a.decode_tokens,
        )?,
        None => Default::default(),
    };
    // The machine's bandwidth varies from minute to minute (shared host): measure again after
    // the runs and bound with the best figure seen, which can only lower achieved/bound.
    let bandwidth = bandwidth.max(read_bandwidth(a.bandwidth_mib << 20, 5));
    let models: Vec<ModelBench> = timings.into_iter().map(|t| t.against(bandwidth)).collect();
    let row_cost_store = store_row_costs(&models)?;
    let int_path = specx_decoder::quant::int::runtime_kernels();
    let int_paths_supported =
        specx_decoder::quant::IntPath::all_supported().iter().map(|p| p.name().to_string()).collect();
    Ok(BenchReport {
        bandwidth_gb_s: bandwidth / 1e9,
        bandwidth_one_thread_gb_s: bandwidth_one / 1e9,
        threads,
        int_path,
        int_paths_supported,
        models,
        memory,
        llamacpp: llama.runs,
        llamacpp_failed: llama.failed,
        row_cost_store,
    })
}

/// Stores each target's fitted row cost (one per device and weight path) as this machine's
/// figure, which `specx decode --policy tree-price` reads when no `--row-cost` is given.
/// Returns what was stored where, or why nothing was.
fn store_row_costs(models: &[ModelBench]) -> Result<String> {
    let path = store_path();
    let mut stored = Vec::new();
    for m in models.iter().filter(|m| m.role == "target") {
        // Three decimals: the figure names the setting (`tree-price row=0.233`), and the fit's
        // spread from run to run is larger than that.
        let Some(row_cost) = m.row_cost.map(|c| (c * 1e3).round() / 1e3) else { continue };
        let key = RowCostKey::here(&m.device, &m.weights, std::path::Path::new(&m.path))?;
        let rows = m.call_secs.iter().map(|c| c.0).collect();
        store(&path, StoredRowCost { key, row_cost, rows, measured: utc_date() })?;
        stored.push(format!("{} {} {row_cost:.3}", m.device, m.weights));
    }
    Ok(if stored.is_empty() {
        "no row cost stored: --call-rows needs 1 and a longer call to fit one".into()
    } else {
        format!(
            "the target's row cost ({}) stored in {}: specx decode --policy tree-price uses it on this machine unless --row-cost is given",
            stored.join(", "),
            path.display()
        )
    })
}

/// Resets the kernel's peak-RSS counter of this process (Linux: `5` to `/proc/self/clear_refs`),
/// so each weight path's peak is its own. Best effort: elsewhere the peak is the process's.
fn reset_peak_rss() {
    let _ = std::fs::write("/proc/self/clear_refs", "5");
}

fn print_report(r: &BenchReport) {
    println!(
        "memory read bandwidth: {:.2} GB/s (all {} threads, best of before and after the runs), {:.2} GB/s (one thread)",
        r.bandwidth_gb_s, r.threads, r.bandwidth_one_thread_gb_s
    );
    println!("integer kernels (q8 weights): {} (this CPU supports: {})", r.int_path, r.int_paths_supported.join(", "));
    println!();
    let rows: Vec<Vec<String>> = r
        .models
        .iter()
        .map(|m| {
            // The bound is the host's memory bandwidth: it says nothing about another device.
            let host = m.device == "cpu";
            vec![
                m.role.clone(),
                m.device.clone(),
                m.weights.clone(),
                format!("{:.2}B", m.parameters as f64 / 1e9),
                format!("{:.1}", m.prefill_tokens_per_sec),
                format!("{:.2}", m.decode_tokens_per_sec),
                format!("{:.1}", m.verify_secs * 1e3),
                format!("{:.3}", m.bytes_per_token / 1e9),
                if host { format!("{:.2}", m.bound_tokens_per_sec) } else { "-".into() },
                if host { format!("{:.2}", m.fraction_of_bound) } else { "-".into() },
            ]
        })
        .collect();
    let verify = format!("verify {} rows ms", r.models.first().map_or(0, |m| m.verify_rows));
    print!(
        "{}",
        markdown_table(
            &[
                "model",
                "device",
                "weights",
                "params",
                "prefill tok/s",
                "decode tok/s",
                &verify,
                "GB read/token",
                "host bound tok/s",
                "achieved/bound"
            ],
            &rows
        )
    );
    // Ratios between the paths, same run: q8 against native and f32, native against f32.
    let find = |role: &str, w: &str| r.models.iter().find(|m| m.role == role && m.device == "cpu" && m.weights == w);
    let mut ratios = Vec::new();
    for role in ["draft", "target"] {
        for w in ["q8", "native"] {
            for base in ["native", "f32"].into_iter().filter(|b| *b != w) {
                if let (Some(n), Some(f)) = (find(role, w), find(role, base)) {
                    ratios.push(vec![
                        role.to_string(),
                        format!("{w}/{base}"),
                        format!("{}x", ratio_text(n.decode_tokens_per_sec / f.decode_tokens_per_sec)),
                        format!("{}x", ratio_text(n.prefill_tokens_per_sec / f.prefill_tokens_per_sec)),
                        ratio_text(n.verify_secs / f.verify_secs),
                    ]);
                }
            }
        }
    }
    if !ratios.is_empty() {
        println!();
        print!("{}", markdown_table(&["model", "paths", "decode", "prefill", "verify time"], &ratios));
    }
    // The cost of a call of r rows as a multiple of one row, per path.
    let shapes: Vec<usize> = r.models.first().map(|m| m.call_secs.iter().map(|c| c.0).collect()).unwrap_or_default();
    if !shapes.is_empty() {
        let mut header = vec!["model".to_string(), "device".into(), "weights".into()];
        header.extend(shapes.iter().map(|r| format!("{r} rows ms (x 1 row)")));
        header.push("row cost".into());
        let rows: Vec<Vec<String>> = r
            .models
            .iter()
            .map(|m| {
                let one = m.call_secs.iter().find(|c| c.0 == 1).map(|c| c.1);
                let mut row = vec![m.role.clone(), m.device.clone(), m.weights.clone()];
                row.extend(m.call_secs.iter().map(|&(_, t)| match one {
                    Some(one) => format!("{:.1} ({:.2}x)", t * 1e3, t / one),
                    None => format!("{:.1}", t * 1e3),
                }));
                row.push(m.row_cost.map_or_else(|| "-".into(), |c| format!("{c:.3}")));
                row
            })
            .collect();
        println!();
        let header: Vec<&str> = header.iter().map(String::as_str).collect();
        print!("{}", markdown_table(&header, &rows));
        println!(
            "row cost: a verification row's cost in one-row calls, the least-squares slope of t(r) / t(1) = 1 + c (r - 1); {}",
            r.row_cost_store
        );
    }
    // Decode replaying a recorded step against plain decode, same model, device and run.
    let recorded: Vec<Vec<String>> = r
        .models
        .iter()
        .filter_map(|m| {
            let replayed = m.recorded_decode_tokens_per_sec?;
            Some(vec![
                m.role.clone(),
                m.device.clone(),
                m.weights.clone(),
                format!("{:.2}", m.decode_tokens_per_sec),
                format!("{replayed:.2}"),
                format!("{}x", ratio_text(replayed / m.decode_tokens_per_sec)),
            ])
        })
        .collect();
    if !recorded.is_empty() {
        println!();
        let header = ["model", "device", "weights", "decode tok/s", "recorded step tok/s", "recorded/plain"];
        print!("{}", markdown_table(&header, &recorded));
    }
    // Each other device against the CPU's best path (native if measured), same run.
    let mut device_ratios = Vec::new();
    for m in r.models.iter().filter(|m| m.device != "cpu") {
        if let Some(c) = find(&m.role, "q8").or_else(|| find(&m.role, "native")).or_else(|| find(&m.role, "f32")) {
            device_ratios.push(vec![
                m.role.clone(),
                format!("{} / cpu {}", m.device, c.weights),
                format!("{}x", ratio_text(m.decode_tokens_per_sec / c.decode_tokens_per_sec)),
                format!("{}x", ratio_text(m.prefill_tokens_per_sec / c.prefill_tokens_per_sec)),
                ratio_text(m.verify_secs / c.verify_secs),
            ]);
        }
    }
    if !device_ratios.is_empty() {
        println!();
        print!("{}", markdown_table(&["model", "paths", "decode", "prefill", "verify time"], &device_ratios));
    }
    if !r.llamacpp.is_empty() {
        // Every specx path on the CPU against llama.cpp on the same file, same run.
        let rows: Vec<Vec<String>> = r
            .llamacpp
            .iter()
            .flat_map(|l| {
                r.models.iter().filter(|m| m.role == l.role && m.device == "cpu").map(move |m| {
                    vec![
                        l.role.clone(),
                        m.weights.clone(),
                        l.path.clone(),
                        format!("{:.1} ± {:.1}", l.prefill_tokens_per_sec, l.prefill_sd),
                        format!("{:.2} ± {:.2}", l.decode_tokens_per_sec, l.decode_sd),
                        format!("{:.2}", m.prefill_tokens_per_sec / l.prefill_tokens_per_sec),
                        format!("{:.2}", m.decode_tokens_per_sec / l.decode_tokens_per_sec),
                    ]
                })
            })
            .collect();
        println!();
        print!(
            "{}",
            markdown_table(
                &[
                    "model",
                    "specx weights",
                    "llama.cpp path",
                    "llama.cpp prefill tok/s",
                    "llama.cpp decode tok/s",
                    "specx/llama.cpp prefill",
                    "specx/llama.cpp decode"
                ],
                &rows
            )
        );
    }
    for f in &r.llamacpp_failed {
        println!("llama.cpp path not measured, so no ratio against it: {f}");
    }
    println!();
    for m in &r.memory {
        println!(
            "{} {} weights: host RSS with both models loaded {:.2} GB; peak RSS {:.2} GB",
            m.device, m.weights, m.rss_both_loaded_gb, m.peak_rss_gb
        );
    }
}

/// A ratio with two decimals, or two significant digits below 0.1 (a software device can be
/// hundreds of times slower than the CPU, and "0.00x" would hide by how much).
fn ratio_text(x: f64) -> String {
    if x > 0.0 && x < 0.1 {
        let decimals = (-x.log10()).ceil() as usize + 1;
        format!("{x:.decimals$}")
    } else {
        format!("{x:.2}")
    }
}

#[cfg(test)]
mod tests {
    use super::ratio_text;

    #[test]
    fn small_ratios_keep_two_significant_digits() {
        assert_eq!(ratio_text(0.0033), "0.0033");
        assert_eq!(ratio_text(0.05), "0.050");
        assert_eq!(ratio_text(0.01), "0.010");
        assert_eq!(ratio_text(0.1), "0.10");
        assert_eq!(ratio_text(407.594), "407.59");
        assert_eq!(ratio_text(0.0), "0.00");
    }
}
