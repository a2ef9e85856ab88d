//! The prompts a run uses: a prompt set's file and format, its seeded split, a limit, and the
//! instruction and chat templates, as a config's `[prompts]` table names them.

use crate::sets::{PromptFormat, apply_template, load};
use crate::split::SplitSpec;
use anyhow::{Context, Result, bail};
use serde::{Deserialize, Serialize};
use std::path::PathBuf;

/// One selected prompt: its id, its first turn as the model reads it (instruction and chat
/// templates applied), and each later user turn of a conversation as the text that follows the
/// previous answer ([`specx_decoder::ChatTemplate::next_turn`]).
#[derive(Clone, Debug, PartialEq)]
pub struct SelectedPrompt {
    pub id: String,
    pub text: String,
    pub follow_ups: Vec<String>,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PromptsConfig {
    pub format: PromptFormat,
    pub path: PathBuf,
    /// `all`, or a part of the seeded split (`train`, `dev`, `test`).
    #[serde(default = "default_split")]
    pub split: String,
    /// Sizes of train, dev, test (e.g. `[4000, 800, 200]` for the 5,000 Alpaca rows).
    #[serde(default)]
    pub split_sizes: Vec<usize>,
    #[serde(default)]
    pub split_seed: u64,
    /// Use only the first `limit` prompts of the split (in split order).
    pub limit: Option<usize>,
    /// Instruction template with `{field}` placeholders; the format's default if absent.
    pub template: Option<String>,
    /// `qwen` (ChatML with Qwen's system prompt), `chatml` (no system prompt) or `none`.
    #[serde(default = "default_chat")]
    pub chat_template: String,
}

fn default_split() -> String {
    "all".into()
}

fn default_chat() -> String {
    "none".into()
}

impl PromptsConfig {
    pub fn split_spec(&self) -> SplitSpec {
        SplitSpec {
            name: self.split.clone(),
            sizes: self.split_sizes.clone(),
            seed: self.split_seed,
            ..SplitSpec::all()
        }
    }

    pub fn template(&self) -> &str {
        self.template.as_deref().unwrap_or(self.format.default_template())
    }

    pub fn chat(&self) -> Result<specx_decoder::ChatTemplate> {
        self.chat_template.parse().context("chat_template")
    }

    /// The prompts this selects, in split order (the first `limit`), as (id, model input
    /// text): the instruction template applied, then the chat template. A multi-turn row gives
    /// its first turn (see [`Self::select_conversations`] for all). Also returns the rows in
    /// the file.
    pub fn select(&self) -> Result<(Vec<(String, String)>, usize)> {
        let (prompts, rows) = self.select_conversations_as(false)?;
        Ok((prompts.into_iter().map(|p| (p.id, p.text)).collect(), rows))
    }

    /// The prompts this selects as [`select`](Self::select) does, with the turns that follow
    /// the first in a multi-turn row, each under the chat template's turn markers. A set with
    /// several turns in a row needs a chat template with turns (`qwen`, `chatml`).
    pub fn select_conversations(&self) -> Result<(Vec<SelectedPrompt>, usize)> {
        self.select_conversations_as(true)
    }

    fn select_conversations_as(&self, turns: bool) -> Result<(Vec<SelectedPrompt>, usize)> {
        let records = load(self.format, &self.path)?;
        let indices =
            self.split_spec().indices(records.len()).with_context(|| format!("splitting {}", self.path.display()))?;
        let take = self.limit.unwrap_or(usize::MAX).min(indices.len());
        let chat = self.chat()?;
        if chat == specx_decoder::ChatTemplate::Model {
            bail!(
                "chat_template = \"model\" (the model's own template) is for specx decode and generate; a prompt set \
                 names qwen, chatml or none"
            );
        }
        let mut out = Vec::with_capacity(take);
        for &i in &indices[..take] {
            let r = &records[i];
            let text = chat.apply(&apply_template(self.template(), r)?);
            let mut follow_ups = Vec::new();
            for user in r.follow_ups.iter().filter(|_| turns) {
                follow_ups.push(chat.next_turn(user).with_context(|| {
                    format!(
                        "{}: prompt {} has {} turns; a conversation needs a chat template with turns \
                         (chat_template = \"qwen\" or \"chatml\"), not \"{}\"",
                        self.path.display(),
                        r.id,
                        r.follow_ups.len() + 1,
                        self.chat_template
                    )
                })?);
            }
            out.push(SelectedPrompt { id: r.id.clone(), text, follow_ups });
        }
        if out.is_empty() {
            bail!("{}: split '{}' selects no prompts", self.path.display(), self.split);
        }
        Ok((out, records.len()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_split_and_a_limit_select_templated_prompts_in_split_order() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("p.jsonl");
        let rows: Vec<String> = (0..10).map(|i| format!("{{\"id\": \"q{i}\", \"prompt\": \"task {i}\"}}")).collect();
        std::fs::write(&path, rows.join("\n")).unwrap();
        let cfg = PromptsConfig {
            format: PromptFormat::Jsonl,
            path,
            split: "dev".into(),
            split_sizes: vec![6, 3, 1],
            split_seed: 5,
            limit: Some(2),
            template: Some("Do: {prompt}".into()),
            chat_template: "none".into(),
        };
        let (selected, rows_in_file) = cfg.select().unwrap();
        assert_eq!(rows_in_file, 10);
        let dev = cfg.split_spec().indices(10).unwrap();
        assert_eq!(selected, dev[..2].iter().map(|i| (format!("q{i}"), format!("Do: task {i}"))).collect::<Vec<_>>());
        let none = PromptsConfig { split: "test".into(), split_sizes: vec![10], ..cfg.clone() };
        assert!(none.select().is_err());
        let bad_chat = PromptsConfig { chat_template: "llama9".into(), ..cfg };
        assert!(format!("{:#}", bad_chat.select().unwrap_err()).contains("llama9"));
    }

    /// A multi-turn row keeps its later turns under the chat template's turn markers; a
    /// template without turns refuses it by name (its first turn alone serves `select`).
    #[test]
    fn conversations_keep_their_later_turns() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("q.jsonl");
        std::fs::write(&path, "{\"question_id\": 81, \"category\": \"writing\", \"turns\": [\"one\", \"two\"]}\n")
            .unwrap();
        let cfg = PromptsConfig {
            format: PromptFormat::Jsonl,
            path,
            split: "all".into(),
            split_sizes: vec![],
            split_seed: 0,
            limit: None,
            template: None,
            chat_template: "chatml".into(),
        };
        let (selected, _) = cfg.select_conversations().unwrap();
        assert_eq!(selected[0].text, "<|im_start|>user\none<|im_end|>\n<|im_start|>assistant\n");
        assert_eq!(selected[0].follow_ups, ["<|im_end|>\n<|im_start|>user\ntwo<|im_end|>\n<|im_start|>assistant\n"]);
        let none = PromptsConfig { chat_template: "none".into(), ..cfg };
        let e = format!("{:#}", none.select_conversations().unwrap_err());
        assert!(e.contains("prompt 81 has 2 turns") && e.contains("chatml"), "{e}");
        assert_eq!(none.select().unwrap().0, vec![("81".to_string(), "one".to_string())]);
    }
}
