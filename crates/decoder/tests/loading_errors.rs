//! Bad input is refused with a message that says what and where.

mod common;
use common::*;
use specx_decoder::gguf::GgmlType;
use specx_decoder::synthetic::{StDtype, random_weights, tiny_qwen2, word_tokenizer_json, write_hf_dir};
use specx_decoder::{check_pair, default_device, load_model};

fn err_of(path: &std::path::Path) -> String {
    format!("{:#}", load_model(path, None, &default_device()).err().expect("load must fail"))
}

#[test]
fn a_pair_with_different_tokenizers_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = tiny_qwen2(VOCAB);
    let (a, _) = write_both(&dir.path().join("a"), &cfg, 1, StDtype::F32, GgmlType::F32);
    let other = dir.path().join("b");
    write_hf_dir(&other, &cfg, &random_weights(&cfg, 2), StDtype::F32, 1, &word_tokenizer_json(VOCAB, "z")).unwrap();
    let err = check_pair(&load(&a), &load(&other)).unwrap_err().to_string();
    assert!(err.contains("do not share a tokenizer"), "{err}");
    // The same tokenizer passes.
    let (c, _) = write_both(&dir.path().join("c"), &cfg, 3, StDtype::F32, GgmlType::F32);
    check_pair(&load(&a), &load(&c)).unwrap();
}

#[test]
fn gguf_files_declaring_different_vocabularies_are_refused() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = tiny_qwen2(VOCAB);
    let (_, a) = write_both(&dir.path().join("a"), &cfg, 1, StDtype::F32, GgmlType::F32);
    let bdir = dir.path().join("b");
    std::fs::create_dir_all(&bdir).unwrap();
    let tokens: Vec<String> = (0..VOCAB).map(|i| format!("other{i}")).collect();
    specx_decoder::synthetic::write_gguf(
        &bdir.join("model.gguf"),
        &cfg,
        &random_weights(&cfg, 1),
        GgmlType::F32,
        &tokens,
    )
    .unwrap();
    std::fs::copy(a.with_file_name("tokenizer.json"), bdir.join("tokenizer.json")).unwrap();
    let err = check_pair(&load(&a), &load(&bdir.join("model.gguf"))).unwrap_err().to_string();
    assert!(err.contains("different vocabularies"), "{err}");
}

#[test]
fn truncated_safetensors_names_the_file() {
    let dir = tempfile::tempdir().unwrap();
    let (hf, _) = write_both(dir.path(), &tiny_qwen2(VOCAB), 1, StDtype::F32, GgmlType::F32);
    let shard = std::fs::read_dir(&hf)
        .unwrap()
        .map(|e| e.unwrap().path())
        .find(|p| p.extension().is_some_and(|x| x == "safetensors"))
        .unwrap();
    let bytes = std::fs::read(&shard).unwrap();
    std::fs::write(&shard, &bytes[..bytes.len() / 2]).unwrap();
    let err = err_of(&hf);
    assert!(
        err.contains(shard.file_name().unwrap().to_str().unwrap()) && err.contains("malformed or truncated"),
        "{err}"
    );
}

#[test]
fn missing_files_are_reported() {
    let dir = tempfile::tempdir().unwrap();
    assert!(err_of(&dir.path().join("nope.gguf")).contains("does not exist"));
    let (hf, gguf) = write_both(dir.path(), &tiny_qwen2(VOCAB), 1, StDtype::F32, GgmlType::F32);
    std::fs::remove_file(gguf.with_file_name("tokenizer.json")).unwrap();
    assert!(err_of(&gguf).contains("no tokenizer"));
    std::fs::remove_file(hf.join("config.json")).unwrap();
    assert!(err_of(&hf).contains("config.json"));
}

#[test]
fn a_weight_with_the_wrong_shape_is_named() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = tiny_qwen2(VOCAB);
    let mut w = random_weights(&cfg, 1);
    w.get_mut("model.layers.1.mlp.down_proj.weight").unwrap().shape.reverse();
    let hf = dir.path().join("hf");
    write_hf_dir(&hf, &cfg, &w, StDtype::F32, 1, &word_tokenizer_json(VOCAB, "w")).unwrap();
    let err = err_of(&hf);
    assert!(err.contains("model.layers.1.mlp.down_proj") && err.contains("shape"), "{err}");
}

#[test]
fn a_tokenizer_larger_than_the_model_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = tiny_qwen2(VOCAB);
    let hf = dir.path().join("hf");
    write_hf_dir(&hf, &cfg, &random_weights(&cfg, 1), StDtype::F32, 1, &word_tokenizer_json(VOCAB + 5, "w")).unwrap();
    assert!(err_of(&hf).contains("wrong tokenizer"));
}
