//! `specx decode` and `specx eval` with pairs of the newer families, as a user runs them: a
//! Llama 3 pair (llama3 RoPE scaling), a Qwen3 pair (q/k norms), each target the HF-parity
//! fixture checked against transformers with a Q8_0 GGUF draft made from it, and a Qwen2 pair
//! whose target pads its head past the shared vocabulary. Greedy decoding gives AR's text with
//! each, and `specx eval` over three Alpaca prompts (greedy and T = 1) passes its losslessness
//! audit with every greedy row identical to AR.

mod common;
use common::{repo, s};
use specx_decoder::gguf::GgmlType;
use specx_decoder::synthetic::{
    CHAR_VOCAB, StDtype, char_tokenizer_json, random_weights, tiny_qwen2, write_hf_dir, write_noisy_draft_of,
};
use std::path::{Path, PathBuf};
use std::process::Command;

/// (name, draft, target) of the three pairs, written under `root`.
fn pairs(root: &Path) -> Vec<(&'static str, PathBuf, PathBuf)> {
    let fixtures = repo().join("crates/decoder/tests/fixtures/hf-parity");
    let mut out = Vec::new();
    for family in ["llama3", "qwen3"] {
        let target = fixtures.join(family);
        let draft = write_noisy_draft_of(&target, &root.join(family), 0.05, 1, GgmlType::Q8_0).unwrap();
        out.push((family, draft, target));
    }
    let (dcfg, tcfg) = (tiny_qwen2(CHAR_VOCAB), tiny_qwen2(CHAR_VOCAB + 30));
    let (d, t) = (root.join("padded/draft"), root.join("padded/target"));
    write_hf_dir(&d, &dcfg, &random_weights(&dcfg, 3), StDtype::F32, 1, &char_tokenizer_json()).unwrap();
    write_hf_dir(&t, &tcfg, &random_weights(&tcfg, 4), StDtype::F32, 1, &char_tokenizer_json()).unwrap();
    out.push(("padded qwen2", d, t));
    out
}

/// `specx decode` of one prompt with `method`: its stdout (the text).
fn decode(draft: &Path, target: &Path, method: &str) -> String {
    let out = Command::new(env!("CARGO_BIN_EXE_specx"))
        .args(["decode", "--draft", &s(draft), "--target", &s(target), "--method", method])
        .args(if method == "specdec" { &["--k", "3"][..] } else { &[] })
        .args(["--prompt", "def reverse(s):\n    return ", "--max-new-tokens", "24"])
        .output()
        .unwrap();
    assert!(out.status.success(), "specx decode --method {method}: {}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8(out.stdout).unwrap()
}

#[test]
fn llama3_qwen3_and_padded_pairs_run_decode_and_eval() {
    let tmp = tempfile::tempdir().unwrap();
    for (name, draft, target) in pairs(tmp.path()) {
        let ar = decode(&draft, &target, "ar");
        for method in ["specdec", "confidence"] {
            assert_eq!(decode(&draft, &target, method), ar, "{name}: specx decode --method {method}");
        }
        let dir = tmp.path().join(format!("eval-{}", name.replace(' ', "-")));
        let config = dir.with_extension("toml");
        let methods = "specdec = { k = [2, 4] }\nconfidence = { thresholds = [0.4] }\n";
        let text = specx_testkit::config::small_eval(&draft, &target, methods)
            .replace("dir = \"out\"", &format!("dir = {:?}", s(&dir)));
        std::fs::write(&config, text).unwrap();
        let out = Command::new(env!("CARGO_BIN_EXE_specx"))
            .args(["eval", "--config", &s(&config), "--no-progress"])
            .output()
            .unwrap();
        assert!(out.status.success(), "{name}: specx eval: {}", String::from_utf8_lossy(&out.stderr));
        let summary = std::fs::read_to_string(dir.join("summary.md")).unwrap();
        assert!(summary.contains("Losslessness audit: passed"), "{name}: {summary}");
        let mut rows = Vec::new();
        for f in specx_eval::experiment::merge::unit_files(&dir).unwrap() {
            rows.extend(specx_eval::common::results::UnitFile::read_path(&f).unwrap().rows);
        }
        let greedy: Vec<_> = rows.iter().filter(|r| r.greedy()).collect();
        assert!(!greedy.is_empty() && greedy.iter().all(|r| r.identical_to_ar), "{name}: a greedy row differs from AR");
        eprintln!("{name}: decode = AR's text ({:?}); eval: {} rows, audit passed", ar.trim_end(), rows.len());
    }
}

/// `specx` with the output of a failed or passed command.
fn specx(args: &[&str]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_specx")).args(args).output().unwrap()
}

/// An HF pair without tokenizer.json beside it (a directory with only config.json and weights)
/// is refused by name, and runs when each command is pointed at the tokenizer: `--tokenizer`,
/// `--draft-tokenizer`/`--target-tokenizer`, or `[models] draft_tokenizer`/`target_tokenizer`.
#[test]
fn a_pair_without_tokenizer_json_runs_with_the_tokenizer_named() {
    let tmp = tempfile::tempdir().unwrap();
    let (_, draft, target) = pairs(tmp.path()).pop().unwrap();
    let ar = decode(&draft, &target, "ar");
    let tok = tmp.path().join("tokenizer.json");
    std::fs::copy(target.join("tokenizer.json"), &tok).unwrap();
    for d in [&draft, &target] {
        std::fs::remove_file(d.join("tokenizer.json")).unwrap();
    }
    let (d, t, k) = (s(&draft), s(&target), s(&tok));
    let prompt = ["--prompt", "def reverse(s):\n    return ", "--max-new-tokens", "24"];
    let without = specx(&[&["decode", "--draft", &d, "--target", &t, "--method", "specdec"][..], &prompt].concat());
    let e = String::from_utf8_lossy(&without.stderr);
    assert!(!without.status.success() && e.contains("no tokenizer at") && e.contains("--draft-tokenizer"), "{e}");

    let named = ["--draft", &d, "--target", &t, "--draft-tokenizer", &k, "--target-tokenizer", &k];
    let out = specx(&[&["decode"][..], &named, &["--method", "specdec", "--k", "3"], &prompt].concat());
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert_eq!(String::from_utf8(out.stdout).unwrap(), ar, "specx decode with the tokenizer named");
    let out = specx(&[&["generate", "--model", &t, "--tokenizer", &k][..], &prompt].concat());
    assert!(out.status.success(), "specx generate: {}", String::from_utf8_lossy(&out.stderr));

    let dir = tmp.path().join("eval");
    let config = dir.with_extension("toml");
    let text = specx_testkit::config::small_eval(&draft, &target, "specdec = { k = [2] }\n")
        .replacen("[models]\n", &format!("[models]\ndraft_tokenizer = {k:?}\ntarget_tokenizer = {k:?}\n"), 1)
        .replace("dir = \"out\"", &format!("dir = {:?}", s(&dir)));
    std::fs::write(&config, text).unwrap();
    let out = specx(&["eval", "--config", &s(&config), "--no-progress"]);
    assert!(out.status.success(), "specx eval: {}", String::from_utf8_lossy(&out.stderr));
    let summary = std::fs::read_to_string(dir.join("summary.md")).unwrap();
    assert!(summary.contains("Losslessness audit: passed"), "{summary}");

    let (config, out) = (s(&repo().join("configs/datagen-tiny.toml")), s(&tmp.path().join("datagen")));
    let datagen = [
        &["datagen", "--config", &config, "--out", &out][..],
        &["--limit", "2", "--max-new-tokens", "8", "--no-progress"],
        &named,
    ]
    .concat();
    let out = specx(&datagen);
    assert!(out.status.success(), "specx datagen: {}", String::from_utf8_lossy(&out.stderr));

    let text = tmp.path().join("text.txt");
    std::fs::write(&text, "def reverse(s):\n    return s[::-1]\n".repeat(8)).unwrap();
    let numerics = ["numerics", "--model", &t, "--tokenizer", &k, "--text", &s(&text), "--tokens", "6", "--ctx", "8"];
    let out = specx(&[&numerics[..], &["--weights", "f32,native"]].concat());
    assert!(out.status.success(), "specx numerics: {}", String::from_utf8_lossy(&out.stderr));
}
