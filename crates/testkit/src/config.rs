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

/// The small eval config the end-to-end tests start from: two seeds, 3 Alpaca test prompts,
/// greedy and sampled at temperature 1, 12 new tokens, the methods `methods` lists (the lines
/// of a `[methods]` table), results in `out`.
pub fn small_eval(draft: &Path, target: &Path, methods: &str) -> String {
    format!(
        r#"seeds = [0, 1]
{}{}[[sampling]]
name = "greedy"
[[sampling]]
name = "t1"
temperature = 1.0
[budget]
max_new_tokens = 12
[methods]
{methods}[output]
dir = "out"
"#,
        models(draft, target),
        alpaca_prompts("test", 3, 5)
    )
}
