//! A model's own chat template: the Jinja text an HF model keeps in `chat_template.jinja` or
//! `tokenizer_config.json`, and a GGUF in `tokenizer.chat_template`, rendered with minijinja
//! in the environment transformers' `apply_chat_template` renders it in (blocks trimmed and
//! left-stripped, Python's string methods, `raise_exception`, `tools` and `documents` none, the
//! special tokens by name). A template that asks for the date (`strftime_now`, as Llama 3.1's
//! does) finds none and takes its own default: a prompt does not change with the day.

use super::Tokenizer;
use crate::gguf::{GgufFile, MetaValue};
use anyhow::{Context, Result, anyhow};
use minijinja::{Environment, ErrorKind, context};
use serde_json::Value;
use std::path::Path;

/// A chat template and the special tokens it names.
#[derive(Clone, Debug, PartialEq)]
pub struct ModelTemplate {
    source: String,
    bos_token: String,
    eos_token: String,
}

impl ModelTemplate {
    /// The template of an HF model directory: `chat_template.jinja`, else
    /// `tokenizer_config.json`'s `chat_template` (the one named `default` where it lists
    /// several). `None` when the model has none.
    pub fn from_hf_dir(dir: &Path) -> Result<Option<Self>> {
        let config_path = dir.join("tokenizer_config.json");
        let config: Value = if config_path.exists() {
            let text =
                std::fs::read_to_string(&config_path).with_context(|| format!("reading {}", config_path.display()))?;
            serde_json::from_str(&text).with_context(|| format!("parsing {}", config_path.display()))?
        } else {
            Value::Null
        };
        let jinja = dir.join("chat_template.jinja");
        let source = if jinja.exists() {
            Some(std::fs::read_to_string(&jinja).with_context(|| format!("reading {}", jinja.display()))?)
        } else {
            match config.get("chat_template") {
                Some(Value::String(s)) => Some(s.clone()),
                Some(Value::Array(named)) => named
                    .iter()
                    .find(|t| t.get("name").and_then(Value::as_str) == Some("default"))
                    .or_else(|| named.first())
                    .and_then(|t| t.get("template").and_then(Value::as_str))
                    .map(String::from),
                _ => None,
            }
        };
        let token = |key: &str| match config.get(key) {
            Some(Value::String(s)) => s.clone(),
            Some(Value::Object(o)) => o.get("content").and_then(Value::as_str).unwrap_or_default().to_string(),
            _ => String::new(),
        };
        Ok(source.map(|source| Self { source, bos_token: token("bos_token"), eos_token: token("eos_token") }))
    }

    /// The template a GGUF file declares (`tokenizer.chat_template`), its special tokens
    /// named by the file's BOS and EOS ids in `tokenizer`. `None` when it has none.
    pub fn from_gguf(file: &GgufFile, tokenizer: &Tokenizer) -> Option<Self> {
        let source = file.get("tokenizer.chat_template").and_then(MetaValue::as_str)?.to_string();
        let token = |key: &str| {
            file.get(key)
                .and_then(MetaValue::as_u64)
                .and_then(|id| tokenizer.id_to_token(id as u32))
                .unwrap_or_default()
        };
        Some(Self {
            source,
            bos_token: token("tokenizer.ggml.bos_token_id"),
            eos_token: token("tokenizer.ggml.eos_token_id"),
        })
    }

    /// One user turn and the assistant's opening, as the model's template writes them.
    pub fn render(&self, user: &str) -> Result<String> {
        let mut env = Environment::new();
        let syntax = minijinja::syntax::SyntaxConfig::builder().trim_blocks(true).lstrip_blocks(true).build();
        env.set_syntax(syntax.map_err(|e| anyhow!("the chat template environment: {e:#}"))?);
        env.set_unknown_method_callback(minijinja_contrib::pycompat::unknown_method_callback);
        env.add_function("raise_exception", |message: String| -> Result<String, minijinja::Error> {
            Err(minijinja::Error::new(ErrorKind::InvalidOperation, message))
        });
        let template = env.template_from_str(&self.source).map_err(|e| anyhow!("the model's chat template: {e:#}"))?;
        let messages = vec![context! { role => "user", content => user }];
        template
            .render(context! {
                messages => messages,
                add_generation_prompt => true,
                tools => (),
                documents => (),
                bos_token => &self.bos_token,
                eos_token => &self.eos_token,
            })
            .map_err(|e| anyhow!("rendering the model's chat template: {e:#}"))
    }
}
