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

/// A tiny llama GGUF with `extra` metadata and tensors added, beside its tokenizer.
fn gguf_with(
    dir: &std::path::Path,
    cfg: &specx_decoder::ModelConfig,
    extra: impl FnOnce(&mut specx_decoder::gguf::GgufWriter),
) -> std::path::PathBuf {
    std::fs::create_dir_all(dir).unwrap();
    let tokens: Vec<String> = (0..cfg.vocab_size).map(|i| format!("w{i}")).collect();
    let mut w = specx_decoder::synthetic::gguf_writer(cfg, &random_weights(cfg, 1), GgmlType::F32, &tokens).unwrap();
    extra(&mut w);
    let path = dir.join("model.gguf");
    w.write(&path).unwrap();
    std::fs::write(dir.join("tokenizer.json"), word_tokenizer_json(cfg.vocab_size, "w")).unwrap();
    path
}

#[test]
fn gguf_metadata_asking_for_arithmetic_specx_lacks_is_refused_by_name() {
    use specx_decoder::gguf::MetaValue::{F32, String as Str, U32};
    let dir = tempfile::tempdir().unwrap();
    let cfg = specx_decoder::synthetic::tiny_llama(VOCAB);
    let cases = [
        ("llama.rope.scaling.type", Str("yarn".into())),
        ("llama.rope.scaling.attn_factor", F32(1.2)),
        ("llama.attn_logit_softcapping", F32(50.0)),
        ("llama.final_logit_softcapping", F32(30.0)),
        ("llama.expert_count", U32(8)),
        ("llama.expert_used_count", U32(2)),
        ("llama.attention.layer_norm_epsilon", F32(1e-5)),
        ("llama.attention.scale", F32(0.1)),
        ("llama.embedding_scale", F32(12.0)),
        ("llama.residual_scale", F32(0.2)),
        ("llama.logit_scale", F32(4.0)),
        ("llama.rope.dimension_count", U32(4)),
    ];
    for (i, (key, value)) in cases.into_iter().enumerate() {
        let path = gguf_with(&dir.path().join(i.to_string()), &cfg, |w| {
            w.meta(key, value);
        });
        let e = err_of(&path);
        assert!(e.contains(key), "{key}: {e}");
    }
    // A part of another architecture (Gemma's sandwich norm) is a tensor specx would not read.
    let path = gguf_with(&dir.path().join("sandwich"), &cfg, |w| {
        w.tensor_f32("blk.0.post_attention_norm.weight", &[cfg.hidden_size], &vec![1.0; cfg.hidden_size]).unwrap();
    });
    let e = err_of(&path);
    assert!(e.contains("blk.0.post_attention_norm.weight") && e.contains("not part of the llama"), "{e}");
    for arch in ["gemma2", "phi3", "qwen2moe"] {
        let other = specx_decoder::ModelConfig { architecture: arch.into(), ..cfg.clone() };
        let e = err_of(&gguf_with(&dir.path().join(arch), &other, |_| {}));
        assert!(e.contains(&format!("architecture '{arch}'")), "{e}");
    }
    // Neutral values pass: no scaling named "none", a factor of 1, a window-free file.
    let path = gguf_with(&dir.path().join("neutral"), &cfg, |w| {
        w.meta("llama.rope.scaling.type", Str("none".into())).meta("llama.rope.scaling.factor", F32(1.0));
    });
    load(&path);
}

#[test]
fn hf_configs_and_tensors_asking_for_arithmetic_specx_lacks_are_refused_by_name() {
    let dir = tempfile::tempdir().unwrap();
    let (hf, _) = write_both(dir.path(), &specx_decoder::synthetic::tiny_llama(VOCAB), 1, StDtype::F32, GgmlType::F32);
    let config = hf.join("config.json");
    let original: serde_json::Value = serde_json::from_slice(&std::fs::read(&config).unwrap()).unwrap();
    let with = |key: &str, v: serde_json::Value| {
        let mut c = original.clone();
        c[key] = v;
        std::fs::write(&config, serde_json::to_string(&c).unwrap()).unwrap();
        err_of(&hf)
    };
    let e = with("rope_scaling", serde_json::json!({"rope_type": "yarn", "factor": 4.0}));
    assert!(e.contains("rope_scaling type 'yarn'"), "{e}");
    assert!(with("final_logit_softcapping", 30.0.into()).contains("final_logit_softcapping"));
    assert!(with("model_type", "gemma2".into()).contains("model_type 'gemma2'"));
    std::fs::write(&config, serde_json::to_string(&original).unwrap()).unwrap();
    // A tensor the model would not read (Qwen3's q norm in a llama checkpoint).
    let cfg = specx_decoder::synthetic::tiny_llama(VOCAB);
    let mut w = random_weights(&cfg, 1);
    w.insert(
        "model.layers.1.self_attn.q_norm.weight".into(),
        specx_decoder::weights::HostTensor { shape: vec![cfg.head_dim], data: vec![1.0; cfg.head_dim] },
    );
    let extra = dir.path().join("extra");
    write_hf_dir(&extra, &cfg, &w, StDtype::F32, 1, &word_tokenizer_json(VOCAB, "w")).unwrap();
    let e = err_of(&extra);
    assert!(e.contains("model.layers.1.self_attn.q_norm.weight"), "{e}");
}
