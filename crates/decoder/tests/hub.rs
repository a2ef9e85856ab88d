//! Hub ids (`hf:ORG/NAME[@REV]`) resolved from a cache laid out as the Hugging Face hub lays it
//! out (refs/REV naming a commit, snapshots/COMMIT/FILE symlinks into blobs/), without network:
//! a model directory (single file and sharded), a GGUF file with its tokenizer, a dataset file,
//! a revision by commit; and the errors for what the cache lacks.

mod common;
use common::*;
use specx_decoder::gguf::GgmlType;
use specx_decoder::hub::{HubRef, resolve_in};
use specx_decoder::synthetic::{StDtype, tiny_qwen2};
use specx_decoder::{default_device, load_model};
use std::path::{Path, PathBuf};

const COMMIT: &str = "0123456789abcdef0123456789abcdef01234567";

/// Puts `files` (name in the repository, source) into `cache` as repository `folder`
/// (`models--ORG--NAME`) at commit COMMIT with ref `main`, each a symlink to its blob.
fn publish(cache: &Path, folder: &str, files: &[(&str, PathBuf)]) {
    let repo = cache.join(folder);
    let snapshot = repo.join("snapshots").join(COMMIT);
    std::fs::create_dir_all(repo.join("blobs")).unwrap();
    std::fs::create_dir_all(repo.join("refs")).unwrap();
    std::fs::write(repo.join("refs/main"), COMMIT).unwrap();
    for (i, (name, src)) in files.iter().enumerate() {
        let bytes = std::fs::read(src).unwrap();
        let blob = repo.join("blobs").join(format!("blob{i}"));
        std::fs::write(&blob, &bytes).unwrap();
        let link = snapshot.join(name);
        std::fs::create_dir_all(link.parent().unwrap()).unwrap();
        std::os::unix::fs::symlink(&blob, &link).unwrap();
    }
}

/// The files of an HF directory as a sharded repository has them: write_both's two shards and
/// the index naming them (HF writes one with every sharded checkpoint).
fn repo_files(hf: &Path) -> Vec<(String, PathBuf)> {
    let mut files: Vec<(String, PathBuf)> = std::fs::read_dir(hf)
        .unwrap()
        .map(|e| e.unwrap().path())
        .map(|p| (p.file_name().unwrap().to_string_lossy().into_owned(), p))
        .collect();
    let shards: Vec<&String> = files.iter().map(|(n, _)| n).filter(|n| n.ends_with(".safetensors")).collect();
    assert_eq!(shards.len(), 2, "{files:?}");
    let map: serde_json::Map<String, serde_json::Value> =
        shards.iter().enumerate().map(|(i, n)| (format!("tensor{i}"), serde_json::Value::from(n.as_str()))).collect();
    let index = hf.with_file_name("index.json");
    std::fs::write(&index, serde_json::json!({ "weight_map": map }).to_string()).unwrap();
    files.push(("model.safetensors.index.json".into(), index));
    files
}

fn id(s: &str) -> HubRef {
    s.parse().unwrap()
}

#[test]
fn cached_models_and_files_resolve_offline_and_load_as_the_originals() {
    let dir = tempfile::tempdir().unwrap();
    let cache = dir.path().join("hub");
    let cfg = tiny_qwen2(VOCAB);
    let (hf, gguf) = write_both(&dir.path().join("src"), &cfg, 4, StDtype::F32, GgmlType::Q8_0);
    let files = repo_files(&hf);
    let refs: Vec<(&str, PathBuf)> = files.iter().map(|(n, p)| (n.as_str(), p.clone())).collect();
    publish(&cache, "models--specx--tiny", &refs);
    publish(
        &cache,
        "models--specx--tiny-gguf",
        &[("q8/model.gguf", gguf.clone()), ("q8/tokenizer.json", gguf.with_file_name("tokenizer.json"))],
    );
    publish(&cache, "datasets--specx--prompts", &[("test.jsonl", hf.join("config.json"))]);

    let want = load_model(&hf, None, &default_device()).unwrap();
    let prompt = tokens(7, 3);
    let logits =
        |lm: &specx_decoder::LoadedModel| rows(&lm.model.forward(&prompt, &mut lm.model.new_cache(1)).unwrap());
    for rev in ["main", COMMIT] {
        let path = resolve_in(&id(&format!("hf:specx/tiny@{rev}")), &cache, true).unwrap();
        assert_eq!(path, cache.join("models--specx--tiny/snapshots").join(COMMIT), "{rev}");
        assert_eq!(logits(&load_model(&path, None, &default_device()).unwrap()), logits(&want), "{rev}");
    }
    let g = resolve_in(&id("hf:specx/tiny-gguf/q8/model.gguf"), &cache, true).unwrap();
    assert!(g.ends_with("q8/model.gguf"));
    let from_gguf = load_model(&g, None, &default_device()).unwrap();
    assert_eq!(logits(&from_gguf), logits(&load_model(&gguf, None, &default_device()).unwrap()));
    let d = resolve_in(&id("hf:datasets/specx/prompts/test.jsonl"), &cache, true).unwrap();
    assert_eq!(std::fs::read(d).unwrap(), std::fs::read(hf.join("config.json")).unwrap());
}

#[test]
fn what_the_cache_lacks_is_named_with_the_cache_and_why_nothing_was_downloaded() {
    let dir = tempfile::tempdir().unwrap();
    let cache = dir.path().join("hub");
    let e = format!("{:#}", resolve_in(&id("hf:specx/absent"), &cache, true).unwrap_err());
    assert!(
        e.contains("config.json of specx/absent@main is not in the hub cache") && e.contains("HF_HUB_OFFLINE"),
        "{e}"
    );
    let cfg = tiny_qwen2(VOCAB);
    let (hf, _) = write_both(&dir.path().join("src"), &cfg, 4, StDtype::F32, GgmlType::F32);
    publish(
        &cache,
        "models--specx--no-weights",
        &[("config.json", hf.join("config.json")), ("tokenizer.json", hf.join("tokenizer.json"))],
    );
    let e = format!("{:#}", resolve_in(&id("hf:specx/no-weights"), &cache, true).unwrap_err());
    assert!(e.contains("neither model.safetensors nor model.safetensors.index.json"), "{e}");
    let e = format!("{:#}", resolve_in(&id("hf:specx/no-weights@v2"), &cache, true).unwrap_err());
    assert!(e.contains("specx/no-weights@v2 is not in the hub cache"), "{e}");
    // Not offline: a build without the `hub` feature says it cannot download.
    #[cfg(not(feature = "hub"))]
    {
        let e = format!("{:#}", resolve_in(&id("hf:specx/absent"), &cache, false).unwrap_err());
        assert!(e.contains("--features hub"), "{e}");
    }
}

/// The path every command takes (`load_model` of `hf:...`, through HF_HUB_CACHE): the only test
/// here that sets the environment.
#[test]
fn load_model_takes_hub_ids_through_the_environment() {
    let dir = tempfile::tempdir().unwrap();
    let cache = dir.path().join("hub");
    let (hf, _) = write_both(&dir.path().join("src"), &tiny_qwen2(VOCAB), 5, StDtype::F32, GgmlType::F32);
    let files = repo_files(&hf);
    let refs: Vec<(&str, PathBuf)> = files.iter().map(|(n, p)| (n.as_str(), p.clone())).collect();
    publish(&cache, "models--specx--env", &refs);
    // SAFETY: no other test in this binary reads or writes the environment.
    unsafe {
        std::env::set_var("HF_HUB_CACHE", &cache);
        std::env::set_var("HF_HUB_OFFLINE", "1");
    }
    let lm = load_model(Path::new("hf:specx/env"), None, &default_device()).unwrap();
    assert_eq!(lm.path, cache.join("models--specx--env/snapshots").join(COMMIT));
    let e = format!("{:#}", load_model(Path::new("hf:specx/other"), None, &default_device()).err().unwrap());
    assert!(e.starts_with("hub id 'hf:specx/other'") && e.contains("HF_HUB_OFFLINE"), "{e}");
}
