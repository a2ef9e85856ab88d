//! The shipped token frequency table (datasets/token-frequencies/) is rebuilt byte for byte by
//! `specx token-freq` from the training sets beside the project (../shared/datasets), the
//! committed datagen run's first shards and the fetched Qwen2.5 tokenizer: the draft
//! vocabulary every config names is reproducible.

use specx_datagen::token_freq::{TokenFreqArgs, run};
use specx_testkit::paths::repo as root;

#[test]
fn the_shipped_frequency_table_is_rebuilt_byte_for_byte() {
    let tmp = tempfile::tempdir().unwrap();
    let shared = root().join("../shared/datasets");
    let tokenizer = specx_decoder::loader::model_cache_dir().join("qwen2.5-coder-0.5b-instruct/tokenizer.json");
    assert!(tokenizer.is_file(), "{} missing: run scripts/fetch-models.sh", tokenizer.display());
    let out = tmp.path().join("freq.tsv");
    // The shards the shipped table counted (the committed run keeps growing).
    let shipped = specx_decoder::cheap_draft::frequencies::TokenFrequencies::read(
        &specx_decoder::cheap_draft::default_table_path(),
    )
    .unwrap();
    let datagen =
        shipped.header.sources.iter().find(|s| s.name == "datagen").expect("the shipped table counts a datagen run");
    let args = TokenFreqArgs {
        out: out.clone(),
        tokenizer: Some(tokenizer),
        alpaca: Some(shared.join("alpaca/alpaca_5000.json")),
        gsm8k: Some(shared.join("gsm8k/train.jsonl")),
        code: None,
        datagen: Some(root().join("datasets").join(&datagen.file)),
        datagen_shards: Some(datagen.count),
        no_progress: true,
    };
    run(&args).unwrap();
    let shipped = std::fs::read(specx_decoder::cheap_draft::default_table_path()).unwrap();
    assert!(
        std::fs::read(&out).unwrap() == shipped,
        "the rebuilt table differs from {}",
        specx_decoder::cheap_draft::default_table_path().display()
    );
    // The draft's GGUF file alone (its own tokenizer, from its metadata) gives the same table.
    let gguf = specx_decoder::loader::model_cache_dir().join("qwen2.5-coder-0.5b-instruct/model.gguf");
    let from_gguf = tmp.path().join("freq-gguf.tsv");
    run(&TokenFreqArgs { out: from_gguf.clone(), tokenizer: Some(gguf), ..args.clone() }).unwrap();
    assert!(std::fs::read(&from_gguf).unwrap() == shipped, "the table from the GGUF's own tokenizer differs");
    // A test set is refused by name.
    let e = format!("{:#}", run(&TokenFreqArgs { gsm8k: Some(shared.join("gsm8k/test.jsonl")), ..args }).unwrap_err());
    assert!(e.contains("test.jsonl") && e.contains("training text only"), "{e}");
}

/// GSM8K's test file is refused by its name; a training file under a directory that says
/// "tests" is counted.
#[test]
fn a_test_set_is_refused_by_its_file_name_not_by_its_directory() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("tests");
    std::fs::create_dir_all(&dir).unwrap();
    let tokenizer = specx_decoder::loader::model_cache_dir().join("qwen2.5-coder-0.5b-instruct/tokenizer.json");
    let gsm8k = |name: &str| {
        let p = dir.join(name);
        std::fs::copy(root().join("../shared/datasets/gsm8k/train.jsonl"), &p).unwrap();
        TokenFreqArgs {
            out: tmp.path().join(format!("{name}.tsv")),
            tokenizer: Some(tokenizer.clone()),
            alpaca: Some("none".into()),
            gsm8k: Some(p),
            code: None,
            datagen: None,
            datagen_shards: None,
            no_progress: true,
        }
    };
    let e = format!("{:#}", run(&gsm8k("test.jsonl")).unwrap_err());
    assert!(e.contains("looks like a test set"), "{e}");
    run(&gsm8k("train.jsonl")).unwrap();
    assert!(tmp.path().join("train.jsonl.tsv").is_file());
}
