//! The tables every eval config of the tests starts with.

use crate::paths::alpaca;
use std::path::Path;

/// `[models]` with the pair.
pub fn models(draft: &Path, target: &Path) -> String {
    format!("[models]\ndraft = \"{}\"\ntarget = \"{}\"\n", draft.display(), target.display())
}

/// `[[prompts]]`: `sample` Alpaca prompts of `split` (the 4000/800/200 split), drawn with
/// `sample_seed`, without a chat template.
pub fn alpaca_prompts(split: &str, sample: usize, sample_seed: u64) -> String {
    format!(
        r#"[[prompts]]
name = "alpaca"
format = "alpaca"
path = "{}"
split = "{split}"
split_sizes = [4000, 800, 200]
sample = {sample}
sample_seed = {sample_seed}
chat_template = "none"
"#,
        alpaca().display()
    )
}
