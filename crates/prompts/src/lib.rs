//! specx-prompts: the prompt sets runs read, for data generation and evaluation alike.
//!
//! [`sets`] reads a set in its standard format (Alpaca, GSM8K, HumanEval, generic JSON lines)
//! and applies instruction templates; [`split`] is the seeded train/dev/test split; [`select`]
//! is a config's `[prompts]` table and the prompts it selects, templated for the model.

pub mod select;
pub mod sets;
pub mod split;

pub use select::{PromptsConfig, SelectedPrompt};
pub use sets::{HUMANEVAL_EDIT_TEMPLATE, PromptFormat, PromptRecord, apply_template, load};
pub use split::SplitSpec;
