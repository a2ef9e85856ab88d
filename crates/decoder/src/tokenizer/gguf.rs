//! A tokenizer from a GGUF file's own `tokenizer.ggml.*` metadata, so that a GGUF alone is
//! enough to run: the byte-level BPE of GPT-2, Qwen and Llama 3 (`tokenizer.ggml.model =
//! gpt2`), written as the `tokenizer.json` HF's tokenizers library reads, with the
//! pre-tokenizer llama.cpp applies for the file's `tokenizer.ggml.pre`.

use crate::gguf::{GgufFile, MetaValue};
use anyhow::{Result, anyhow, bail};
use serde_json::{Value, json};

/// llama.cpp's token types (`tokenizer.ggml.token_type`).
const NORMAL: i64 = 1;
const CONTROL: i64 = 3;
const USER_DEFINED: i64 = 4;
const UNUSED: i64 = 5;

/// The split before byte-level BPE, as each `tokenizer.ggml.pre` names it: the regex of the
/// model's own tokenizer.json, whether it normalises to NFC first, and whether a word found
/// whole in the vocabulary skips the merges (Llama 3's `ignore_merges`).
struct PreTokenizer {
    regex: Option<&'static str>,
    nfc: bool,
    ignore_merges: bool,
}

fn pre_tokenizer(pre: &str) -> Result<PreTokenizer> {
    const QWEN2: &str = r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+";
    const LLAMA3: &str = r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+";
    Ok(match pre {
        "qwen2" => PreTokenizer { regex: Some(QWEN2), nfc: true, ignore_merges: false },
        "llama3" | "llama-bpe" => PreTokenizer { regex: Some(LLAMA3), nfc: false, ignore_merges: true },
        "default" | "gpt-2" | "gpt2" => PreTokenizer { regex: None, nfc: false, ignore_merges: false },
        other => bail!(
            "tokenizer.ggml.pre '{other}' is a pre-tokenizer specx cannot build from GGUF metadata (qwen2, llama-bpe, \
             gpt-2): put the model's tokenizer.json beside the file or name it (--tokenizer, --draft-tokenizer, \
             --target-tokenizer)"
        ),
    })
}

/// The `tokenizer.json` text of the tokenizer `file` declares.
pub fn tokenizer_json(file: &GgufFile) -> Result<String> {
    let model = file.get("tokenizer.ggml.model").and_then(MetaValue::as_str).ok_or_else(|| {
        anyhow!("the file declares no tokenizer (tokenizer.ggml.model): name a tokenizer.json (--tokenizer, --draft-tokenizer, --target-tokenizer)")
    })?;
    if model != "gpt2" {
        bail!(
            "tokenizer.ggml.model is '{model}': specx builds byte-level BPE tokenizers (gpt2) from GGUF metadata; for \
             this one put the model's tokenizer.json beside the file or name it (--tokenizer, --draft-tokenizer, --target-tokenizer)"
        );
    }
    let pre = pre_tokenizer(file.get("tokenizer.ggml.pre").and_then(MetaValue::as_str).unwrap_or("default"))?;
    let strings = |key: &str| -> Result<Vec<&str>> {
        match file.get(key) {
            Some(MetaValue::Array(items)) => {
                items.iter().map(|v| v.as_str().ok_or_else(|| anyhow!("{key} holds a non-string"))).collect()
            }
            _ => bail!("metadata '{key}' is missing: the tokenizer cannot be built from this file"),
        }
    };
    let tokens = strings("tokenizer.ggml.tokens")?;
    let merges = strings("tokenizer.ggml.merges")?;
    let types: Vec<i64> = match file.get("tokenizer.ggml.token_type") {
        Some(MetaValue::Array(items)) => items.iter().map(type_of).collect(),
        _ => vec![NORMAL; tokens.len()],
    };
    if types.len() != tokens.len() {
        bail!("tokenizer.ggml.token_type has {} entries for {} tokens", types.len(), tokens.len());
    }
    let mut vocab = serde_json::Map::new();
    let mut added = Vec::new();
    for (id, (&token, &ty)) in tokens.iter().zip(&types).enumerate() {
        match ty {
            CONTROL | USER_DEFINED => added.push(json!({
                "id": id, "content": token, "single_word": false, "lstrip": false, "rstrip": false,
                "normalized": false, "special": ty == CONTROL,
            })),
            UNUSED => {} // padding rows ([PAD151665], ...): no text produces them
            _ => {
                vocab.insert(token.to_string(), json!(id));
            }
        }
    }
    let byte_level = |use_regex: bool| json!({"type": "ByteLevel", "add_prefix_space": false, "trim_offsets": false, "use_regex": use_regex});
    let pre_tokenizer = match pre.regex {
        Some(regex) => json!({"type": "Sequence", "pretokenizers": [
            {"type": "Split", "pattern": {"Regex": regex}, "behavior": "Isolated", "invert": false},
            byte_level(false),
        ]}),
        None => byte_level(true),
    };
    let doc = json!({
        "version": "1.0", "truncation": null, "padding": null, "added_tokens": added,
        "normalizer": if pre.nfc { json!({"type": "NFC"}) } else { Value::Null },
        "pre_tokenizer": pre_tokenizer, "post_processor": null, "decoder": byte_level(false),
        "model": {
            "type": "BPE", "dropout": null, "unk_token": null, "continuing_subword_prefix": "",
            "end_of_word_suffix": "", "fuse_unk": false, "byte_fallback": false,
            "ignore_merges": pre.ignore_merges, "vocab": vocab, "merges": merges,
        },
    });
    Ok(serde_json::to_string(&doc)?)
}

fn type_of(v: &MetaValue) -> i64 {
    match *v {
        MetaValue::I32(t) => t.into(),
        ref other => other.as_u64().map_or(NORMAL, |t| t as i64),
    }
}
