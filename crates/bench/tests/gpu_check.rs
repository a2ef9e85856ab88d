//! `specx gpu-check` without a GPU: `synth` writes loadable models of given shapes (and their
//! GGUF copies) that HF's config reader would accept; `correctness` on a device this build or
//! machine lacks fails every check with the reason; `report` judges the targets from a check
//! directory's files and says why a figure is missing.

#[cfg(not(feature = "cuda"))]
use specx_bench::gpu_check::report::{CorrectnessArgs, correctness};
use specx_bench::gpu_check::report::{ReportArgs, report};
use specx_bench::gpu_check::synth::{PairShapes, SynthArgs, synth};
use specx_decoder::synthetic::tiny_qwen2;
use specx_decoder::{check_pair, default_device, load_model};
use std::path::Path;

#[test]
fn synth_writes_a_loadable_pair_of_the_recorded_shapes() {
    let dir = tempfile::tempdir().unwrap();
    let vocab = 64;
    let shapes = PairShapes {
        draft: tiny_qwen2(vocab),
        target: specx_decoder::ModelConfig { num_hidden_layers: 3, ..tiny_qwen2(vocab) },
        source: vec!["a.gguf".into(), "b.gguf".into()],
        draft_types: Default::default(),
        target_types: Default::default(),
    };
    std::fs::write(dir.path().join("shapes.json"), serde_json::to_string(&shapes).unwrap()).unwrap();
    std::fs::write(dir.path().join("tokenizer.json"), specx_decoder::synthetic::word_tokenizer_json(vocab, "w"))
        .unwrap();
    let out = dir.path().join("models");
    synth(&SynthArgs {
        shapes: dir.path().join("shapes.json"),
        tokenizer: dir.path().join("tokenizer.json"),
        out: out.clone(),
        seed: 0,
    })
    .unwrap();
    let (d, t) = (
        load_model(&out.join("draft"), None, &default_device()).unwrap(),
        load_model(&out.join("target"), None, &default_device()).unwrap(),
    );
    check_pair(&d, &t).unwrap();
    assert_eq!(t.model.config().num_hidden_layers, 3);
    // The GGUF copies: the same shapes, their matrices in blocks.
    let gguf = |role: &str| load_model(&out.join(format!("{role}-gguf/model.gguf")), None, &default_device()).unwrap();
    let (dg, tg) = (gguf("draft"), gguf("target"));
    check_pair(&dg, &tg).unwrap();
    assert_eq!(tg.model.config().num_hidden_layers, 3);
    assert!(dg.model.is_native() && tg.model.is_native(), "the GGUF copies keep their blocks");
    let config: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(out.join("target/config.json")).unwrap()).unwrap();
    assert_eq!(
        (config["architectures"][0].as_str(), config["torch_dtype"].as_str(), config["hidden_act"].as_str()),
        (Some("Qwen2ForCausalLM"), Some("bfloat16"), Some("silu"))
    );
    // A missing shapes file is an error naming it.
    let e = synth(&SynthArgs {
        shapes: dir.path().join("nope.json"),
        tokenizer: dir.path().join("tokenizer.json"),
        out: out.clone(),
        seed: 0,
    })
    .unwrap_err();
    assert!(format!("{e:#}").contains("nope.json"), "{e:#}");
}

/// With the real files' types recorded, the GGUF copies store every matrix in its recorded
/// type (K-quants included, as random blocks of the type); a type specx cannot read, or a
/// matrix without a recorded type, is an error naming it.
#[test]
fn synth_stores_each_matrix_in_the_recorded_type() {
    use specx_decoder::gguf::{GgmlType, GgufFile};
    let dir = tempfile::tempdir().unwrap();
    let vocab = 64;
    // K-quant rows need 256 columns.
    let cfg = specx_decoder::ModelConfig {
        hidden_size: 256,
        intermediate_size: 256,
        head_dim: 64,
        num_attention_heads: 4,
        num_key_value_heads: 2,
        ..tiny_qwen2(vocab)
    };
    let names: Vec<String> = specx_decoder::synthetic::random_weights(&cfg, 0)
        .iter()
        .filter(|(_, t)| t.shape.len() == 2)
        .map(|(n, _)| specx_decoder::weights::gguf_name(n).unwrap())
        .collect();
    let pick = |n: &str| match n {
        n if n.contains("ffn_down") => GgmlType::Q6K,
        n if n.contains("ffn_") => GgmlType::Q4K,
        n if n.contains("attn_v") => GgmlType::Q5_0,
        _ => GgmlType::Q8_0,
    };
    let types: std::collections::BTreeMap<String, u32> = names.iter().map(|n| (n.clone(), pick(n).id())).collect();
    let mut shapes =
        PairShapes { draft: cfg.clone(), target: cfg, source: vec![], draft_types: types.clone(), target_types: types };
    let write = |shapes: &PairShapes| {
        std::fs::write(dir.path().join("shapes.json"), serde_json::to_string(shapes).unwrap()).unwrap();
        std::fs::write(dir.path().join("tokenizer.json"), specx_decoder::synthetic::word_tokenizer_json(vocab, "w"))
            .unwrap();
        synth(&SynthArgs {
            shapes: dir.path().join("shapes.json"),
            tokenizer: dir.path().join("tokenizer.json"),
            out: dir.path().join("models"),
            seed: 0,
        })
    };
    write(&shapes).unwrap();
    let file = GgufFile::open(dir.path().join("models/target-gguf/model.gguf")).unwrap();
    for n in &names {
        assert_eq!(GgmlType::from_id(file.tensors[n].type_id), Some(pick(n)), "{n}");
    }
    let t = load_model(&dir.path().join("models/target-gguf/model.gguf"), None, &default_device()).unwrap();
    assert!(t.model.is_native());
    let out = t.model.forward(&[1, 2, 3], &mut t.model.new_cache(1)).unwrap();
    assert!(out.logits_tail(1)[0].iter().all(|v| v.is_finite()), "the random K-quant blocks give finite logits");
    // A type specx does not read, then a matrix with no recorded type.
    shapes.draft_types.insert(names[0].clone(), 99);
    let e = format!("{:#}", write(&shapes).unwrap_err());
    assert!(e.contains(&names[0]) && e.contains("ggml type 99"), "{e}");
    shapes.draft_types.remove(&names[0]);
    let e = format!("{:#}", write(&shapes).unwrap_err());
    assert!(e.contains(&names[0]) && e.contains("no type recorded"), "{e}");
}

#[cfg(not(feature = "cuda"))]
#[test]
fn correctness_on_a_device_this_build_lacks_fails_every_check_saying_why() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("correctness.json");
    let e = correctness(&CorrectnessArgs { devices: vec!["cuda".into()], tolerance: 1e-3, out: out.clone() })
        .unwrap_err()
        .to_string();
    let n = specx_decoder::device_check::CHECKS.len();
    assert!(e.contains(&format!("{n} device check(s) failed")), "{e}");
    let json: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(out).unwrap()).unwrap();
    let checks = json["devices"][0]["checks"].as_array().unwrap();
    assert_eq!(checks.len(), n);
    assert!(checks.iter().all(|c| c["passed"] == false && c["detail"].as_str().unwrap().contains("--features cuda")));
    assert!(
        correctness(&CorrectnessArgs { devices: vec!["cpu".into()], tolerance: 1e-3, out: dir.path().join("x.json") })
            .is_err()
    );
}

fn write(dir: &Path, name: &str, v: serde_json::Value) {
    std::fs::write(dir.join(name), serde_json::to_string_pretty(&v).unwrap()).unwrap();
}

#[test]
fn the_report_judges_each_target_and_names_what_is_missing() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    std::fs::write(d.join("steps.tsv"), "devices\t0\t0.2\nhf-anchor\t124\t120.0\n").unwrap();
    std::fs::write(d.join("gpu.csv"), "NVIDIA H100 80GB HBM3, 580.65.06, 81559 MiB\n").unwrap();
    let check = |name: &str, worst: Option<f64>, passed: bool| serde_json::json!({ "name": name, "passed": passed, "worst_abs_diff": worst, "tolerance": worst.map(|_| 1e-3), "detail": "" });
    let checks = vec![
        check("logits", Some(2e-4), true),
        check("kv_rollback", Some(3e-4), true),
        check("speculative_fixed_k", None, true),
        check("acceptance_head", Some(1e-7), true),
        check("dsi_cpu_and_device", None, true),
        check("easyspec_placed", Some(1e-4), false),
        check("split_layers", Some(1e-4), true),
    ];
    write(
        d,
        "correctness.json",
        serde_json::json!({ "tolerance": 1e-3, "devices": [{ "device": "cuda:0", "checks": checks }] }),
    );
    write(
        d,
        "bench-cuda.json",
        serde_json::json!({ "models": [{ "role": "target", "device": "cuda:0", "weights": "native", "prefill_tokens_per_sec": 9000.0, "decode_tokens_per_sec": 150.0 }] }),
    );
    let curve: Vec<f64> = (1..=21).map(|r| 0.006 + 0.0001 * r as f64).collect();
    let target = serde_json::json!({ "role": "target", "path": "t", "sha256": "", "layers": 28, "forward": [{ "context": 128, "seconds": curve }], "layer_context": 128, "attention_s": [], "mlp_s": [], "lm_head_s": 0.0, "ttft_s": [], "tpot_s": 0.0065, "launches": [
        { "rows": 1, "context": 128, "attention": [3, 4], "mlp": [2, 2], "lm_head": 1, "total": 16, "bytes_read": 2_013_000_000u64, "by_kernel": [["matmul", 8]] },
        { "rows": 5, "context": 128, "attention": [5, 5], "mlp": [2, 2], "lm_head": 1, "total": 18, "bytes_read": 2_014_000_000u64, "by_kernel": [["matmul", 8]] }
    ] });
    write(
        d,
        "profile-cuda.json",
        serde_json::json!({ "weights": "f32", "device": "cuda:0", "machine": { "cpu": "x", "cores": 16, "bandwidth_gb_s": 1.0 }, "reps": 5, "models": [target] }),
    );
    report(&ReportArgs { dir: d.to_path_buf() }).unwrap();
    let md = std::fs::read_to_string(d.join("report.md")).unwrap();
    assert!(md.contains("NVIDIA H100") && md.contains("hf-anchor\t124"), "{md}");
    let targets = |d: &Path| -> Vec<(String, Option<bool>)> {
        let json: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(d.join("report.json")).unwrap()).unwrap();
        json["targets"]
            .as_array()
            .unwrap()
            .iter()
            .map(|t| (t["measured"].as_str().unwrap().to_string(), t["met"].as_bool()))
            .collect()
    };
    let t = targets(d);
    // The worst of the logit checks (rollback 3e-4), EasySpec's failure, the missing anchor,
    // and (0.006 + 5e-4) / (0.006 + 1e-4) for five rows.
    assert_eq!(t[0], ("3.00e-4".to_string(), Some(true)));
    assert_eq!(t[1], ("2/3 passed".to_string(), Some(false)));
    assert_eq!(t[2], ("not measured: bench-cuda.json or hf.json missing".to_string(), None));
    assert_eq!(t[3], ("1.07x plain (6.50 / 6.10 ms) after 128 tokens".to_string(), Some(true)));
    // The worst layer of each counted call, then no bound without bandwidth.json.
    assert_eq!(t[4], ("6 at 1 row, 7 at 5 rows a layer".to_string(), Some(false)));
    assert_eq!(t[5], ("not measured: no peak bandwidth: bandwidth.json missing".to_string(), None));
    // One CUDA device: no two-device figure, and the report says why; no refusal, no loud line.
    assert_eq!(t[6].1, None);
    assert!(t[6].0.contains("one CUDA device"), "{}", t[6].0);
    assert!(!md.contains("RECORDING REFUSED"), "{md}");
    assert!(md.contains("Kernel launches on cuda:0"), "{md}");
    // With the anchor: specx 150 vs HF 100 tok/s.
    write(
        d,
        "hf.json",
        serde_json::json!({ "dtype": "bfloat16", "context": 128, "models": [{ "role": "target", "prefill_tokens_per_sec": 8000.0, "decode_tokens_per_sec": 100.0, "call_secs": [0.01, 0.011] }] }),
    );
    write(
        d,
        "bandwidth.json",
        serde_json::json!({ "device": "x", "peak_gb_s": 1000.0, "peak_source": "clock x bus", "copy_gb_s": 800.0, "error": null }),
    );
    report(&ReportArgs { dir: d.to_path_buf() }).unwrap();
    let t = targets(d);
    // 1.5x is short of the 2x target; 2013 MB in 6.1 ms is 330 GB/s, 33% of 1000.
    assert_eq!(t[2], ("specx 150.0 tok/s vs HF 100.0 tok/s (1.50x)".to_string(), Some(false)));
    // Judged at one row; the 5-row call (2014 MB in 6.5 ms) stated beside it.
    assert_eq!(
        t[5],
        ("33.0% (2013 MB in 6.10 ms after 128 tokens: 330 of 1000 GB/s); 31.0% at 5 rows".to_string(), Some(true))
    );
    // The compiled anchor is a row of the speed table; the speed table names specx's weights.
    write(
        d,
        "hf-compiled.json",
        serde_json::json!({ "compiled": true, "models": [{ "role": "target", "decode_tokens_per_sec": 210.0 }] }),
    );
    report(&ReportArgs { dir: d.to_path_buf() }).unwrap();
    let md = std::fs::read_to_string(d.join("report.md")).unwrap();
    let row = md.lines().find(|l| l.contains("HF transformers (SDPA, static cache, torch.compile)"));
    assert!(row.is_some_and(|r| r.contains("| 210.0")), "{md}");
    assert!(md.contains("specx cuda:0 (native weights)"), "{md}");
    // specx on the anchor's own bf16 files is a row of its own.
    write(
        d,
        "bench-cuda-bf16.json",
        serde_json::json!({ "models": [{ "role": "target", "device": "cuda:0", "weights": "q8", "prefill_tokens_per_sec": 7000.0, "decode_tokens_per_sec": 90.0 }] }),
    );
    report(&ReportArgs { dir: d.to_path_buf() }).unwrap();
    let md = std::fs::read_to_string(d.join("report.md")).unwrap();
    let row = md.lines().find(|l| l.contains("specx cuda:0 (bf16 safetensors)"));
    assert!(row.is_some_and(|r| r.contains(" 7000 ") && r.contains(" 90.0 ")), "{md}");
    // A replayed recorded step is a row of its own, only where the bench measured one.
    assert!(!md.contains("a replay of a recorded one"), "{md}");
    write(
        d,
        "bench-cuda.json",
        serde_json::json!({ "models": [{ "role": "target", "device": "cuda:0", "weights": "native", "prefill_tokens_per_sec": 9000.0, "decode_tokens_per_sec": 150.0, "recorded_decode_tokens_per_sec": 420.0 }] }),
    );
    report(&ReportArgs { dir: d.to_path_buf() }).unwrap();
    let md = std::fs::read_to_string(d.join("report.md")).unwrap();
    let row = md.lines().find(|l| l.contains("specx cuda:0 (native weights), each step a replay of a recorded one"));
    assert!(row.is_some_and(|r| r.contains("| 420.0")), "{md}");
    // Where the profile replayed recorded calls, the 5-row target is judged on them: 2 ms and
    // 3 ms is 1.5x, over 1.2x though the plain forwards meet it.
    let mut target = target;
    target["forward"][0]["recorded_seconds"] = serde_json::json!([0.002, 0.0022, 0.0024, 0.0027, 0.003]);
    write(
        d,
        "profile-cuda.json",
        serde_json::json!({ "weights": "f32", "device": "cuda:0", "machine": { "cpu": "x", "cores": 16, "bandwidth_gb_s": 1.0 }, "reps": 5, "models": [target] }),
    );
    report(&ReportArgs { dir: d.to_path_buf() }).unwrap();
    let five = "1.50x recorded (3.00 / 2.00 ms), 1.07x plain (6.50 / 6.10 ms), after 128 tokens";
    assert_eq!(targets(d)[3], (five.to_string(), Some(false)));
    // A refused recording in any step's log is said first, once, naming the log; two GPUs
    // checked as one are judged.
    let refusal = "specx: the runtime refused to record a decode call (stream capture unsupported); forwarding plainly";
    std::fs::write(d.join("bench-cuda.log"), format!("{refusal}\n{refusal}\n")).unwrap();
    let mut checks = checks;
    checks.push(check("two_devices", Some(0.0), true));
    write(
        d,
        "correctness.json",
        serde_json::json!({ "tolerance": 1e-3, "devices": [{ "device": "cuda:0", "checks": checks[..7] }, { "device": "cuda:0+cuda:1", "checks": checks[7..] }] }),
    );
    report(&ReportArgs { dir: d.to_path_buf() }).unwrap();
    let md = std::fs::read_to_string(d.join("report.md")).unwrap();
    assert_eq!(md.matches("RECORDING REFUSED").count(), 1, "{md}");
    assert!(md.find("RECORDING REFUSED").unwrap() < md.find("## Targets").unwrap(), "{md}");
    assert!(md.contains(&format!("bench-cuda.log: {refusal}")), "{md}");
    assert_eq!(targets(d)[6], ("passed".to_string(), Some(true)));
}
