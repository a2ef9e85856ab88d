//! A GGUF alone is enough: the tokenizer its `tokenizer.ggml.*` metadata declares, built by
//! specx, against the reference pair's tokenizer.json (fetched by scripts/fetch-models.sh),
//! token for token: every id of the vocabulary, and the ids of a corpus of code, prose, chat
//! markup, digits, whitespace runs and non-Latin text (the repository's own docs among it).

use specx_decoder::gguf::GgufFile;
use specx_decoder::tokenizer::Tokenizer;
use std::path::{Path, PathBuf};

fn model_dir(name: &str) -> PathBuf {
    let dir = specx_decoder::loader::model_cache_dir().join(name);
    assert!(dir.join("model.gguf").exists(), "real model missing at {}: run scripts/fetch-models.sh", dir.display());
    dir
}

/// Texts that exercise the pre-tokenizer's every branch, and the docs as real prose and code.
fn corpus() -> Vec<String> {
    let mut texts: Vec<String> = [
        "def add(a, b):\n    return a + b\n\n\nprint(add(12345, 67))\r\n",
        "I'll say it's 'quoted' and they've, we'd, you're, I'm DON'T.",
        "<|im_start|>system\nYou are Qwen.<|im_end|>\n<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n",
        "<|fim_prefix|>x = <|fim_suffix|>\n<|fim_middle|><|endoftext|><tool_call></tool_call>",
        "数学 is 数学; Ελληνικά, русский, العربية, हिन्दी 🚀🔥 e\u{301} é ﬁ ①②",
        "   leading and trailing spaces   \t\ttabs\n\n\n\nnewlines",
        "3.14159 1,000,000 0x1F 2026-12-07 a1b2c3",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    let repo = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    for page in ["README.md", "LICENSE-APACHE", "docs/getting-started.md", "crates/decoder/src/sampling.rs"] {
        texts.push(std::fs::read_to_string(repo.join(page)).unwrap());
    }
    // The 4 tokens only the tokenizer.json has would be split by the GGUF's tokenizer.
    for extra in ["<tool_response>", "</tool_response>", "<think>", "</think>"] {
        texts.iter_mut().for_each(|t| *t = t.replace(extra, ""));
    }
    texts
}

#[test]
fn the_reference_pairs_gguf_tokenizers_equal_their_tokenizer_json_token_for_token() {
    for name in ["qwen2.5-coder-0.5b-instruct", "qwen2.5-coder-1.5b-instruct"] {
        let dir = model_dir(name);
        let built = Tokenizer::from_gguf(&GgufFile::open(dir.join("model.gguf")).unwrap()).unwrap();
        let file = Tokenizer::from_file(&dir.join("tokenizer.json")).unwrap();
        // The vocabularies agree on every id the GGUF gives text. The fetched tokenizer.json is
        // the family's later one: it adds 4 tokens (151665-151668: <tool_response>,
        // </tool_response>, <think>, </think>) where the GGUF keeps unused padding rows.
        let (b, f) = (built.vocab(), file.vocab());
        let mut by_id: Vec<(u32, &String)> = b.iter().map(|(t, &id)| (id, t)).collect();
        by_id.sort();
        assert_eq!(by_id.len(), 151_665, "{name}: ids the GGUF's tokenizer produces");
        for (id, token) in &by_id {
            assert_eq!(f.get(*token), Some(id), "{name}: token {token:?}");
        }
        let extra: Vec<&String> = f.iter().filter(|(_, id)| **id >= 151_665).map(|(t, _)| t).collect();
        assert_eq!(extra.len(), 4, "{name}: {extra:?}");
        let mut tokens = 0;
        for text in corpus() {
            let (x, y) = (built.encode(&text).unwrap(), file.encode(&text).unwrap());
            if let Some(i) = (0..x.len().max(y.len())).find(|&i| x.get(i) != y.get(i)) {
                let window = |v: &[u32]| v[i.saturating_sub(3)..(i + 3).min(v.len())].to_vec();
                panic!(
                    "{name}: the ids of {:?}... differ at token {i}: {:?} against tokenizer.json's {:?}",
                    &text[..text.len().min(60)],
                    window(&x),
                    window(&y)
                );
            }
            assert_eq!(
                built.decode(&x).unwrap(),
                file.decode(&y)
                    .unwrap()
                    .replace("<|fim_prefix|>", "")
                    .replace("<|fim_suffix|>", "")
                    .replace("<|fim_middle|>", "")
            );
            tokens += x.len();
        }
        eprintln!("{name}: the GGUF's tokenizer gives tokenizer.json's ids on {tokens} tokens of text");
    }
}

#[test]
fn a_gguf_alone_loads_and_decodes_as_with_its_tokenizer_json() {
    let dir = model_dir("qwen2.5-coder-0.5b-instruct");
    let alone = tempfile::tempdir().unwrap();
    std::os::unix::fs::symlink(dir.join("model.gguf"), alone.path().join("model.gguf")).unwrap();
    let device = specx_decoder::default_device();
    let load = |p: &Path| specx_decoder::load_model_as(p, None, &device, specx_decoder::WeightMode::Q8).unwrap();
    let (m, reference) = (load(&alone.path().join("model.gguf")), load(&dir.join("model.gguf")));
    assert!(m.tokenizer.is_from_gguf() && !reference.tokenizer.is_from_gguf());
    assert_eq!(m.eos_ids, reference.eos_ids);
    let prompt = specx_decoder::ChatTemplate::qwen().apply("Write a Python function that reverses a string.");
    let ids = m.tokenizer.encode(&prompt).unwrap();
    assert_eq!(ids, reference.tokenizer.encode(&prompt).unwrap());
    let greedy = specx_decoder::speculative::SpecConfig {
        max_new_tokens: 12,
        sampling: specx_decoder::SamplingConfig::greedy(),
        seed: 0,
    };
    let out = specx_decoder::speculative::generate_autoregressive(&m.model, &ids, &greedy, &m.eos_ids).unwrap().tokens;
    let text = m.tokenizer.decode(&out).unwrap();
    assert_eq!(text, reference.tokenizer.decode(&out).unwrap());
    eprintln!("a GGUF alone: {text:?}");
}

#[test]
fn the_reference_pairs_own_chat_template_renders_qwens_chatml() {
    let dir = model_dir("qwen2.5-coder-0.5b-instruct");
    let tokenizer = Tokenizer::from_file(&dir.join("tokenizer.json")).unwrap();
    let file = GgufFile::open(dir.join("model.gguf")).unwrap();
    let template = specx_decoder::tokenizer::ModelTemplate::from_gguf(&file, &tokenizer).expect("a template");
    for user in ["Write a Python function that reverses a string.", "  spaces\nand lines  "] {
        assert_eq!(template.render(user).unwrap(), specx_decoder::ChatTemplate::qwen().apply(user));
    }
}
