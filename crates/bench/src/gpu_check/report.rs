//! The device checks as a command, and the check directory's report with the GPU targets.

use anyhow::{Result, bail};
use serde::Serialize;
use serde_json::Value;
use specx_decoder::device_check::{Check, run_all, run_two_device_check};
use specx_decoder::fsutil::write_atomic;
use specx_decoder::{DeviceName, check_device, open_device, parse_device_list};
use specx_eval::profile::Profile;
use specx_eval::report::markdown_table;
use std::path::{Path, PathBuf};

use super::target::target;

/// The bar on a GPU: tiny-model logits within this of the CPU.
const LOGIT_TARGET: f64 = 1e-3;
/// How a check on a device that could not be opened begins its detail.
const UNAVAILABLE: &str = "device unavailable";
/// A 5-row call at most this many times one row.
const FIVE_ROW_TARGET: f64 = 1.2;
/// 1.5B-shape decode at least this many times HF transformers' eager bf16.
const DECODE_TARGET: f64 = 2.0;

#[derive(clap::Args, Debug)]
pub struct CorrectnessArgs {
    /// Devices to check against the CPU (`cuda`, `wgpu:0`, ...). With two or more, the first
    /// two also run the multi-device check (a layer split over both, EasySpec's placement and
    /// DSI with a target on each, bit for bit against the first alone).
    #[arg(long, value_delimiter = ',', default_value = "cuda")]
    pub devices: Vec<String>,
    /// Largest |device - CPU| logit difference accepted on the tiny models (logits ~1-5).
    #[arg(long, default_value_t = 1e-3)]
    pub tolerance: f32,
    /// JSON output.
    #[arg(long)]
    pub out: PathBuf,
}

#[derive(Serialize)]
struct DeviceChecks {
    device: String,
    checks: Vec<Check>,
}

pub fn correctness(a: &CorrectnessArgs) -> Result<()> {
    let names = parse_device_list(&a.devices)?;
    if names.contains(&DeviceName::Cpu) {
        bail!("--devices: the checks compare each device with the CPU; list the other devices only");
    }
    let mut out = Vec::new();
    for &name in &names {
        let checks = match check_device(name).and_then(|()| open_device(name)) {
            Ok(device) => {
                let scratch = std::env::temp_dir().join(format!("specx-device-check-{}", std::process::id()));
                let checks = run_all(&device, &scratch, a.tolerance);
                let _ = std::fs::remove_dir_all(&scratch);
                checks
            }
            // An unavailable device is a result too: every check failed, saying why.
            Err(e) => specx_decoder::device_check::CHECKS
                .iter()
                .map(|c| Check {
                    name: c.to_string(),
                    passed: false,
                    worst_abs_diff: None,
                    tolerance: None,
                    detail: format!("{UNAVAILABLE}: {e:#}"),
                })
                .collect(),
        };
        out.push(DeviceChecks { device: name.to_string(), checks });
    }
    if let [first, second, ..] = names[..] {
        let check = match open_device(first).and_then(|a| Ok((a, open_device(second)?))) {
            Ok((a, b)) => {
                let scratch = std::env::temp_dir().join(format!("specx-two-device-check-{}", std::process::id()));
                let check = run_two_device_check(&a, &b, &scratch);
                let _ = std::fs::remove_dir_all(&scratch);
                check
            }
            Err(e) => Check {
                name: "two_devices".into(),
                passed: false,
                worst_abs_diff: None,
                tolerance: None,
                detail: format!("{UNAVAILABLE}: {e:#}"),
            },
        };
        out.push(DeviceChecks { device: format!("{first}+{second}"), checks: vec![check] });
    }
    let json = serde_json::json!({ "tolerance": a.tolerance, "devices": out });
    write_atomic(&a.out, serde_json::to_string_pretty(&json)?.as_bytes())?;
    print!("{}", correctness_table(&json));
    let failed: usize = out.iter().flat_map(|d| &d.checks).filter(|c| !c.passed).count();
    if failed > 0 {
        bail!("{failed} device check(s) failed (see {})", a.out.display());
    }
    Ok(())
}

fn correctness_table(json: &Value) -> String {
    let mut rows = Vec::new();
    for d in json["devices"].as_array().into_iter().flatten() {
        for c in d["checks"].as_array().into_iter().flatten() {
            let num = |v: &Value| v.as_f64().map_or("-".into(), |x| format!("{x:.1e}"));
            rows.push(vec![
                d["device"].as_str().unwrap_or("?").into(),
                c["name"].as_str().unwrap_or("?").into(),
                if c["passed"].as_bool() == Some(true) { "pass".into() } else { "FAIL".into() },
                num(&c["worst_abs_diff"]),
                num(&c["tolerance"]),
                c["detail"].as_str().unwrap_or("").into(),
            ]);
        }
    }
    markdown_table(&["device", "check", "result", "worst |diff|", "tolerance", "what"], &rows)
}

#[derive(clap::Args, Debug)]
pub struct ReportArgs {
    /// The check directory (scripts/gpu-check.sh's $OUT).
    #[arg(long)]
    pub dir: PathBuf,
}

fn read_json(dir: &Path, name: &str) -> Option<Value> {
    let text = std::fs::read_to_string(dir.join(name)).ok()?;
    serde_json::from_str(&text).ok()
}

/// (prefill, decode tok/s) of `role` on `device` in specx bench's JSON.
fn bench_speed(bench: &Value, role: &str, device: &str) -> Option<(f64, f64)> {
    let m = bench_entry(bench, role, device)?;
    Some((m["prefill_tokens_per_sec"].as_f64()?, m["decode_tokens_per_sec"].as_f64()?))
}

fn bench_entry<'a>(bench: &'a Value, role: &str, device: &str) -> Option<&'a Value> {
    bench["models"].as_array()?.iter().find(|m| m["role"] == role && m["device"] == device)
}

/// The decode rate of the compiled HF anchor (`hf_anchor.py --compiled`) for `role`.
fn compiled_decode(hf: &Value, role: &str) -> Option<f64> {
    hf["models"].as_array()?.iter().find(|m| m["role"] == role)?["decode_tokens_per_sec"].as_f64()
}

fn anchor_speed(hf: &Value, role: &str) -> Option<(f64, f64)> {
    let m = hf["models"].as_array()?.iter().find(|m| m["role"] == role)?;
    Some((m["prefill_tokens_per_sec"].as_f64()?, m["decode_tokens_per_sec"].as_f64()?))
}

/// Seconds of 1..N-row calls after the first context, per model role: the plain forwards and
/// the replays of recorded calls (empty where the profile has none).
fn profile_curve(p: &Profile, role: &str) -> Option<(usize, Vec<f64>, Vec<f64>)> {
    let m = p.models.iter().find(|m| m.role == role)?;
    let c = m.forward.first()?;
    Some((c.context, c.seconds.clone(), c.recorded_seconds.clone()))
}

/// The 5-row target's verdict: judged on the recorded calls where the profile has them (what
/// a sequential verification replays), the plain forwards' ratio beside it.
fn five_row_verdict(ctx: usize, plain: &[f64], recorded: &[f64]) -> (String, bool) {
    let plain_text = format!("{:.2}x plain ({:.2} / {:.2} ms)", plain[4] / plain[0], plain[4] * 1e3, plain[0] * 1e3);
    if recorded.len() >= 5 {
        let r = recorded[4] / recorded[0];
        let text = format!(
            "{r:.2}x recorded ({:.2} / {:.2} ms), {plain_text}, after {ctx} tokens",
            recorded[4] * 1e3,
            recorded[0] * 1e3
        );
        return (text, r <= FIVE_ROW_TARGET);
    }
    (format!("{plain_text} after {ctx} tokens"), plain[4] / plain[0] <= FIVE_ROW_TARGET)
}

fn anchor_curve(hf: &Value, role: &str) -> Option<Vec<f64>> {
    let m = hf["models"].as_array()?.iter().find(|m| m["role"] == role)?;
    m["call_secs"].as_array()?.iter().map(Value::as_f64).collect()
}

/// The runtime's refusals to record a call, from every step's log (`file: line`), once each.
fn refused_recordings(dir: &Path) -> Vec<String> {
    let mut logs: Vec<PathBuf> = std::fs::read_dir(dir)
        .into_iter()
        .flatten()
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|e| e == "log"))
        .collect();
    logs.sort();
    let mut out: Vec<String> = Vec::new();
    for log in logs {
        let text = std::fs::read_to_string(&log).unwrap_or_default();
        for line in text.lines().filter(|l| l.contains("refused to record")) {
            let name = log.file_name().map_or_else(String::new, |n| n.to_string_lossy().into_owned());
            let said = format!("{name}: {}", line.trim());
            if !out.contains(&said) {
                out.push(said);
            }
        }
    }
    out
}

pub fn report(a: &ReportArgs) -> Result<()> {
    let dir = &a.dir;
    let steps = std::fs::read_to_string(dir.join("steps.tsv")).unwrap_or_default();
    let gpu = std::fs::read_to_string(dir.join("gpu.csv")).unwrap_or_default().trim().to_string();
    let correctness = read_json(dir, "correctness.json");
    // specx bench's JSON, one file per device kind (cuda, then Vulkan), models joined.
    let bench_models: Vec<Value> = ["bench-cuda.json", "bench-wgpu.json"]
        .iter()
        .filter_map(|n| read_json(dir, n))
        .flat_map(|b| b["models"].as_array().cloned().unwrap_or_default())
        .collect();
    let bench = (!bench_models.is_empty()).then(|| serde_json::json!({ "models": bench_models }));
    // specx on the bf16 safetensors the anchor reads, kept in 16 bits on the device.
    let bench_bf16 = read_json(dir, "bench-cuda-bf16.json");
    let hf = read_json(dir, "hf.json");
    let hf_compiled = read_json(dir, "hf-compiled.json");
    let bandwidth = read_json(dir, "bandwidth.json");
    let profiles: Vec<Profile> = ["profile-cuda.json", "profile-wgpu.json"]
        .iter()
        .map(|n| dir.join(n))
        .filter(|p| p.exists())
        .map(|p| Profile::read(&p))
        .collect::<Result<_>>()?;
    let cuda_profile = profiles.iter().find(|p| p.device.starts_with("cuda"));

    let cuda_checks: Vec<Value> = correctness
        .as_ref()
        .and_then(|c| c["devices"].as_array().cloned())
        .into_iter()
        .flatten()
        .filter(|d| d["device"].as_str().is_some_and(|s| s.starts_with("cuda")))
        .flat_map(|d| d["checks"].as_array().cloned().unwrap_or_default())
        // A device that could not be opened measured nothing: its targets are not judged.
        .filter(|c| !c["detail"].as_str().is_some_and(|d| d.starts_with(UNAVAILABLE)))
        .collect();
    let logits = cuda_checks
        .iter()
        .filter(|c| c["name"] == "logits" || c["name"] == "kv_rollback")
        .filter_map(|c| c["worst_abs_diff"].as_f64())
        .reduce(f64::max);
    let token_checks: Vec<&Value> = cuda_checks
        .iter()
        .filter(|c| {
            ["speculative_fixed_k", "dsi_cpu_and_device", "easyspec_placed"].contains(&c["name"].as_str().unwrap_or(""))
        })
        .collect();
    let specx_decode = bench.as_ref().and_then(|b| bench_speed(b, "target", "cuda:0"));
    let hf_decode = hf.as_ref().and_then(|h| anchor_speed(h, "target"));
    let five = cuda_profile.and_then(|p| profile_curve(p, "target")).filter(|(_, s, _)| s.len() >= 5);
    let targets = vec![
        target(
            &format!("tiny-model logits within {LOGIT_TARGET:.0e} of the CPU (cuda)"),
            logits.map(|w| (format!("{w:.2e}"), w <= LOGIT_TARGET)),
            "no cuda correctness results (see correctness.log)",
        ),
        target(
            "greedy speculative = greedy on every method (fixed K, DSI cpu+cuda, EasySpec on cuda)",
            (token_checks.len() == 3).then(|| {
                let passed = token_checks.iter().filter(|c| c["passed"] == true).count();
                (format!("{passed}/3 passed"), passed == 3)
            }),
            "no cuda correctness results (see correctness.log)",
        ),
        target(
            &format!("1.5B-shape decode at least {DECODE_TARGET}x HF transformers' (eager, bf16), same weights"),
            specx_decode.zip(hf_decode).map(|((_, s), (_, h))| {
                (format!("specx {s:.1} tok/s vs HF {h:.1} tok/s ({:.2}x)", s / h), s >= DECODE_TARGET * h)
            }),
            "bench-cuda.json or hf.json missing",
        ),
        target(
            &format!("a 5-row call at most {FIVE_ROW_TARGET}x one row (1.5B shape, cuda)"),
            five.map(|(ctx, plain, recorded)| five_row_verdict(ctx, &plain, &recorded)),
            "profile-cuda.json missing",
        ),
        super::bound::launches(cuda_profile),
        super::bound::memory_bound(cuda_profile, bandwidth.as_ref()),
        target(
            "two GPUs compute as one, bit for bit (layer split, EasySpec placement, DSI with a target on each)",
            cuda_checks.iter().find(|c| c["name"] == "two_devices").map(|c| {
                let passed = c["passed"] == true;
                (
                    if passed { "passed".into() } else { format!("failed: {}", c["detail"].as_str().unwrap_or("?")) },
                    passed,
                )
            }),
            "one CUDA device (the check needs two; CI runs it on two logical Vulkan devices)",
        ),
    ];
    let refused = refused_recordings(dir);

    let mut md = format!(
        "# specx GPU check\n\nGPU (nvidia-smi: name, driver, memory): {}\n\n",
        if gpu.is_empty() { "not recorded" } else { &gpu }
    );
    for line in &refused {
        md.push_str(&format!(
            "**RECORDING REFUSED**: {line}. Every recorded-call figure below is a plain forward's.\n\n"
        ));
    }
    md.push_str("## Targets\n\n");
    let rows: Vec<Vec<String>> = targets
        .iter()
        .map(|t| {
            vec![
                t.target.clone(),
                t.measured.clone(),
                t.met.map_or("-".into(), |m| if m { "met".into() } else { "NOT met".into() }),
            ]
        })
        .collect();
    md.push_str(&markdown_table(&["target", "measured", "verdict"], &rows));
    md.push_str("\n## Steps (name, exit status (124: over its time limit), seconds)\n\n```\n");
    md.push_str(&steps);
    md.push_str("```\n\n## Devices (`specx devices`)\n\n");
    md.push_str(&std::fs::read_to_string(dir.join("devices.log")).unwrap_or_else(|_| "not recorded\n".into()));
    if let Some(c) = &correctness {
        md.push_str("\n## Correctness: tiny models against the CPU\n\n");
        md.push_str(&correctness_table(c));
    }
    md.push_str("\n## Speed on random weights of the real pair's shapes\n\n");
    let mut rows = Vec::new();
    for role in ["draft", "target"] {
        for dev in ["cuda:0", "wgpu:0"] {
            if let Some((p, d)) = bench.as_ref().and_then(|b| bench_speed(b, role, dev)) {
                let weights = bench.as_ref().and_then(|b| bench_entry(b, role, dev)?["weights"].as_str());
                rows.push(vec![
                    role.into(),
                    format!("specx {dev} ({} weights)", weights.unwrap_or("?")),
                    format!("{p:.0}"),
                    format!("{d:.1}"),
                ]);
                if let Some(r) =
                    bench.as_ref().and_then(|b| bench_entry(b, role, dev)?["recorded_decode_tokens_per_sec"].as_f64())
                {
                    rows.push(vec![
                        role.into(),
                        format!(
                            "specx {dev} ({} weights), each step a replay of a recorded one",
                            weights.unwrap_or("?")
                        ),
                        "-".into(),
                        format!("{r:.1}"),
                    ]);
                }
            }
        }
        if let Some((p, d)) = bench_bf16.as_ref().and_then(|b| bench_speed(b, role, "cuda:0")) {
            rows.push(vec![
                role.into(),
                "specx cuda:0 (bf16 safetensors)".into(),
                format!("{p:.0}"),
                format!("{d:.1}"),
            ]);
        }
        if let Some((p, d)) = hf.as_ref().and_then(|h| anchor_speed(h, role)) {
            rows.push(vec![
                role.into(),
                format!("HF transformers (eager, {})", hf.as_ref().and_then(|h| h["dtype"].as_str()).unwrap_or("?")),
                format!("{p:.0}"),
                format!("{d:.1}"),
            ]);
        }
    }
    if let Some(d) = hf_compiled.as_ref().and_then(|h| compiled_decode(h, "target")) {
        rows.push(vec![
            "target".into(),
            "HF transformers (SDPA, static cache, torch.compile)".into(),
            "-".into(),
            format!("{d:.1}"),
        ]);
    }
    md.push_str(&markdown_table(&["model", "runtime", "prefill tok/s", "decode tok/s"], &rows));
    md.push_str(
        "\nCall cost, r new rows after the context, relative to one row (milliseconds of one row in brackets):\n\n",
    );
    let mut rows = Vec::new();
    let pick = |s: &[f64]| {
        [1usize, 2, 5, 9, 21]
            .iter()
            .map(|&r| s.get(r - 1).map_or("-".into(), |v| format!("{:.2}", v / s[0])))
            .collect::<Vec<String>>()
    };
    for p in &profiles {
        for role in ["draft", "target"] {
            if let Some((ctx, s, recorded)) = profile_curve(p, role) {
                let mut row = vec![role.to_string(), format!("specx {} (ctx {ctx}, {:.2} ms)", p.device, s[0] * 1e3)];
                row.extend(pick(&s));
                rows.push(row);
                if !recorded.is_empty() {
                    let runtime =
                        format!("specx {}, recorded calls (ctx {ctx}, {:.2} ms)", p.device, recorded[0] * 1e3);
                    let mut row = vec![role.to_string(), runtime];
                    row.extend(pick(&recorded));
                    rows.push(row);
                }
            }
        }
    }
    for role in ["draft", "target"] {
        if let Some(s) = hf.as_ref().and_then(|h| anchor_curve(h, role)).filter(|s| !s.is_empty()) {
            let ctx = hf.as_ref().and_then(|h| h["context"].as_u64()).unwrap_or(0);
            let mut row = vec![role.to_string(), format!("HF transformers (ctx {ctx}, {:.2} ms)", s[0] * 1e3)];
            row.extend(pick(&s));
            rows.push(row);
        }
    }
    md.push_str(&markdown_table(&["model", "runtime", "1", "2", "5", "9", "21"], &rows));
    for p in &profiles {
        let counted = specx_eval::profile::launches::table(&p.models);
        if !counted.is_empty() {
            md.push_str(&format!("\n### Kernel launches on {} (`specx profile`)\n\n{counted}", p.device));
        }
    }
    if let Some(b) = &bandwidth {
        let gb = |k: &str| b[k].as_f64().map_or("-".into(), |v| format!("{v:.0} GB/s"));
        md.push_str(&format!(
            "\nMemory bound: peak {} ({}), device copy {}.\n",
            gb("peak_gb_s"),
            b["peak_source"].as_str().or(b["error"].as_str()).unwrap_or("-"),
            gb("copy_gb_s")
        ));
    }
    let json = serde_json::json!({ "gpu": gpu, "recording_refused": refused, "targets": targets, "steps": steps, "correctness": correctness, "bench": bench, "bench_bf16": bench_bf16, "profiles": profiles, "hf_anchor": hf, "hf_compiled": hf_compiled, "bandwidth": bandwidth });
    write_atomic(&dir.join("report.json"), serde_json::to_string_pretty(&json)?.as_bytes())?;
    write_atomic(&dir.join("report.md"), md.as_bytes())?;
    print!("{md}");
    Ok(())
}
