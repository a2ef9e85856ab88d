//! The tokenizer (HF `tokenizer.json` through the `tokenizers` crate), the ChatML template of
//! Qwen, and an incremental detokenizer for streaming.

use anyhow::{Context, Result, anyhow};
use std::collections::HashMap;
use std::path::{Path, PathBuf};

/// Qwen2.5's default system prompt, used by its ChatML template when none is given.
pub const QWEN_DEFAULT_SYSTEM: &str = "You are Qwen, created by Alibaba Cloud. You are a helpful assistant.";

/// A loaded tokenizer.
pub struct Tokenizer {
    inner: tokenizers::Tokenizer,
    path: PathBuf,
}

impl Tokenizer {
    pub fn from_file(path: &Path) -> Result<Self> {
        let inner = tokenizers::Tokenizer::from_file(path)
            .map_err(|e| anyhow!("{}: cannot load tokenizer: {e}", path.display()))?;
        Ok(Self { inner, path: path.to_path_buf() })
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Token ids of `text`; special-token markup such as `<|im_start|>` is recognised.
    pub fn encode(&self, text: &str) -> Result<Vec<u32>> {
        let enc = self.inner.encode(text, false).map_err(|e| anyhow!("tokenizing: {e}"))?;
        Ok(enc.get_ids().to_vec())
    }

    /// Text of `ids`, special tokens dropped.
    pub fn decode(&self, ids: &[u32]) -> Result<String> {
        self.inner.decode(ids, true).map_err(|e| anyhow!("detokenizing: {e}"))
    }

    /// The id of a token string, if it is in the vocabulary.
    pub fn token_id(&self, token: &str) -> Option<u32> {
        self.inner.token_to_id(token)
    }

    /// The full vocabulary (added tokens included).
    pub fn vocab(&self) -> HashMap<String, u32> {
        self.inner.get_vocab(true)
    }

    /// sha256 over the vocabulary (`id<TAB>token<LF>` by id, added tokens included): what
    /// identifies a tokenizer's ids whatever its file's formatting.
    pub fn vocab_sha256(&self) -> String {
        let mut pairs: Vec<(u32, String)> = self.vocab().into_iter().map(|(t, id)| (id, t)).collect();
        pairs.sort_unstable();
        let text: String = pairs.iter().map(|(id, t)| format!("{id}\t{t}\n")).collect();
        crate::fsutil::sha256_hex(text.as_bytes())
    }

    /// The ids of the added tokens marked special (chat markup, EOS), ascending.
    pub fn special_ids(&self) -> Vec<u32> {
        let mut ids: Vec<u32> =
            self.inner.get_added_tokens_decoder().into_iter().filter(|(_, t)| t.special).map(|(id, _)| id).collect();
        ids.sort_unstable();
        ids
    }

    /// End-of-sequence ids known by name in this vocabulary (`<|im_end|>`, `<|endoftext|>`,
    /// `</s>`, `<|end_of_text|>`, `<|eot_id|>`).
    pub fn named_eos_ids(&self) -> Vec<u32> {
        ["<|im_end|>", "<|endoftext|>", "</s>", "<|end_of_text|>", "<|eot_id|>"]
            .iter()
            .filter_map(|t| self.token_id(t))
            .collect()
    }
}

/// How a raw user prompt becomes model input.
#[derive(Clone, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
pub enum ChatTemplate {
    /// The prompt is used as is.
    None,
    /// Qwen's ChatML: `<|im_start|>system ...<|im_end|>\n<|im_start|>user\n...<|im_end|>\n<|im_start|>assistant\n`.
    ChatMl { system: Option<String> },
}

/// The templates by the names configs and `--chat-template` use: `qwen` (ChatML with Qwen's
/// system prompt), `chatml` (ChatML without a system turn), `none`.
impl std::str::FromStr for ChatTemplate {
    type Err = anyhow::Error;
    fn from_str(name: &str) -> anyhow::Result<Self> {
        Ok(match name {
            "qwen" => Self::qwen(),
            "chatml" => Self::ChatMl { system: None },
            "none" => Self::None,
            other => anyhow::bail!("unknown chat template '{other}': expected qwen, chatml or none"),
        })
    }
}

impl ChatTemplate {
    /// ChatML with Qwen's default system prompt.
    pub fn qwen() -> Self {
        Self::ChatMl { system: Some(QWEN_DEFAULT_SYSTEM.to_string()) }
    }

    pub fn apply(&self, user: &str) -> String {
        match self {
            Self::None => user.to_string(),
            Self::ChatMl { system } => {
                let mut s = String::new();
                if let Some(sys) = system {
                    s.push_str(&format!("<|im_start|>system\n{sys}<|im_end|>\n"));
                }
                s.push_str(&format!("<|im_start|>user\n{user}<|im_end|>\n<|im_start|>assistant\n"));
                s
            }
        }
    }
}

/// Turns a growing list of token ids into text pieces as soon as they are complete UTF-8:
/// a multi-byte character split over tokens is held back until its last byte arrives.
pub struct TextStream<'a> {
    tokenizer: &'a Tokenizer,
    ids: Vec<u32>,
    emitted: usize,
}

impl<'a> TextStream<'a> {
    pub fn new(tokenizer: &'a Tokenizer) -> Self {
        Self { tokenizer, ids: Vec::new(), emitted: 0 }
    }

    /// Adds a token; returns the new text it completes, if any.
    pub fn push(&mut self, id: u32) -> Result<Option<String>> {
        self.ids.push(id);
        let text = self.tokenizer.decode(&self.ids).context("streaming decode")?;
        if text.ends_with('\u{FFFD}') || text.len() <= self.emitted || !text.is_char_boundary(self.emitted) {
            return Ok(None);
        }
        let piece = text[self.emitted..].to_string();
        self.emitted = text.len();
        Ok(Some(piece))
    }
}
