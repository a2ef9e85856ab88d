//! The tokenizer (HF `tokenizer.json` through the `tokenizers` crate, or built from a GGUF's
//! metadata: [`gguf`]), the ChatML template of Qwen, and an incremental detokenizer for
//! streaming.

pub mod gguf;
mod template;

pub use template::ModelTemplate;

use anyhow::{Context, Result, anyhow};
use std::collections::HashMap;
use std::path::{Path, PathBuf};

/// Qwen2.5's default system prompt, used by its ChatML template when none is given.
pub const QWEN_DEFAULT_SYSTEM: &str = "You are Qwen, created by Alibaba Cloud. You are a helpful assistant.";

/// A loaded tokenizer.
pub struct Tokenizer {
    inner: tokenizers::Tokenizer,
    path: PathBuf,
    /// The `tokenizer.json` text built from a GGUF's metadata; `None` for a tokenizer.json file.
    built: Option<String>,
}

impl Tokenizer {
    pub fn from_file(path: &Path) -> Result<Self> {
        let inner = tokenizers::Tokenizer::from_file(path)
            .map_err(|e| anyhow!("{}: cannot load tokenizer: {e}", path.display()))?;
        Ok(Self { inner, path: path.to_path_buf(), built: None })
    }

    /// The tokenizer a GGUF file declares in its `tokenizer.ggml.*` metadata ([`gguf`]).
    pub fn from_gguf(file: &crate::gguf::GgufFile) -> Result<Self> {
        let path = file.path();
        let text = gguf::tokenizer_json(file).with_context(|| format!("{}", path.display()))?;
        let inner: tokenizers::Tokenizer = text
            .parse()
            .map_err(|e| anyhow!("{}: the tokenizer built from its metadata does not load: {e}", path.display()))?;
        Ok(Self { inner, path: path.to_path_buf(), built: Some(text) })
    }

    /// The tokenizer.json file, or the GGUF file whose metadata built it.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// What identifies the tokenizer in manifests: the sha256 of its tokenizer.json file, or
    /// of the tokenizer.json text built from a GGUF's metadata.
    pub fn source_sha256(&self) -> Result<String> {
        match &self.built {
            Some(text) => Ok(crate::fsutil::sha256_hex(text.as_bytes())),
            None => crate::fsutil::sha256_file(&self.path),
        }
    }

    /// Whether the tokenizer was built from a GGUF's metadata (not a tokenizer.json file).
    pub fn is_from_gguf(&self) -> bool {
        self.built.is_some()
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

    /// The token string of an id, if it has one.
    pub fn id_to_token(&self, id: u32) -> Option<String> {
        self.inner.id_to_token(id)
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

    /// The first way `other` tokenizes differently from `self`, in words: a token with another
    /// id, a merge rule (BPE) that differs, an added token of other content or specialness.
    /// `None` when the two give every text the same ids: the vocabularies, merges and added
    /// tokens all agree.
    pub fn first_difference(&self, other: &Tokenizer) -> Option<String> {
        let by_id = |t: &Tokenizer| {
            let mut v: Vec<(u32, String)> = t.vocab().into_iter().map(|(tok, id)| (id, tok)).collect();
            v.sort_unstable();
            v
        };
        let (a, b) = (by_id(self), by_id(other));
        if let Some((x, y)) = a.iter().zip(&b).find(|(x, y)| x != y) {
            return Some(format!("id {} is {:?} in one and id {} is {:?} in the other", x.0, x.1, y.0, y.1));
        }
        if a.len() != b.len() {
            let (longer, n) = if a.len() > b.len() { (&a, b.len()) } else { (&b, a.len()) };
            return Some(format!(
                "{} tokens against {}: the first one beyond is id {} {:?}",
                a.len(),
                b.len(),
                longer[n].0,
                longer[n].1
            ));
        }
        let merges = |t: &Tokenizer| {
            serde_json::to_value(t.inner.get_model()).ok().and_then(|m| m.get("merges").cloned()).unwrap_or_default()
        };
        let (ma, mb) = (merges(self), merges(other));
        if ma != mb {
            let (la, lb) = (ma.as_array().map_or(0, Vec::len), mb.as_array().map_or(0, Vec::len));
            let first = (0..la.max(lb)).find(|&i| ma.get(i) != mb.get(i)).unwrap_or(0);
            return Some(format!(
                "their merge rules differ ({la} against {lb}), first at rule {first}: {} against {}",
                ma.get(first).map_or("none".into(), ToString::to_string),
                mb.get(first).map_or("none".into(), ToString::to_string)
            ));
        }
        let added = |t: &Tokenizer| {
            let mut v: Vec<(u32, String, bool)> =
                t.inner.get_added_tokens_decoder().into_iter().map(|(id, t)| (id, t.content, t.special)).collect();
            v.sort_unstable();
            v
        };
        let (xa, xb) = (added(self), added(other));
        if xa != xb {
            let first = (0..xa.len().max(xb.len())).find(|&i| xa.get(i) != xb.get(i)).unwrap_or(0);
            let show = |t: Option<&(u32, String, bool)>| {
                t.map_or("none".into(), |(id, c, special)| {
                    format!("id {id} {c:?}{}", if *special { " (special)" } else { "" })
                })
            };
            return Some(format!("their added tokens differ: {} against {}", show(xa.get(first)), show(xb.get(first))));
        }
        None
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
    /// The target model's own Jinja template ([`ModelTemplate`]): known once the model is.
    Model,
}

/// The templates by the names configs and `--chat-template` use: `qwen` (ChatML with Qwen's
/// system prompt), `chatml` (ChatML without a system turn), `none`, `model` (the model's own).
impl std::str::FromStr for ChatTemplate {
    type Err = anyhow::Error;
    fn from_str(name: &str) -> anyhow::Result<Self> {
        Ok(match name {
            "qwen" => Self::qwen(),
            "chatml" => Self::ChatMl { system: None },
            "none" => Self::None,
            "model" => Self::Model,
            other => anyhow::bail!("unknown chat template '{other}': expected qwen, chatml, none or model"),
        })
    }
}

impl ChatTemplate {
    /// ChatML with Qwen's default system prompt.
    pub fn qwen() -> Self {
        Self::ChatMl { system: Some(QWEN_DEFAULT_SYSTEM.to_string()) }
    }

    /// The prompt under a built-in template. The model's own ([`ChatTemplate::Model`]) needs
    /// the model: [`ChatTemplate::render`].
    pub fn apply(&self, user: &str) -> String {
        match self {
            Self::Model => unreachable!("the model's own template is rendered with the model (ChatTemplate::render)"),
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

    /// What follows an assistant's answer (its end-of-turn token left out) in a conversation:
    /// the end of that turn, the next user turn, and the start of the next answer. `None` for
    /// `none` (no turns to mark) and for the model's own template (rendered with the model).
    pub fn next_turn(&self, user: &str) -> Option<String> {
        match self {
            Self::ChatMl { .. } => {
                Some(format!("<|im_end|>\n<|im_start|>user\n{user}<|im_end|>\n<|im_start|>assistant\n"))
            }
            Self::None | Self::Model => None,
        }
    }
}

impl ChatTemplate {
    /// The prompt under this template, for a model whose own template is `own`.
    pub fn render(&self, user: &str, own: Option<&ModelTemplate>) -> Result<String> {
        match self {
            Self::Model => own
                .ok_or_else(|| {
                    anyhow!(
                        "chat template 'model': the model declares no chat template (tokenizer_config.json, \
                         chat_template.jinja or the GGUF's tokenizer.chat_template); name qwen, chatml or none"
                    )
                })?
                .render(user),
            builtin => Ok(builtin.apply(user)),
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
