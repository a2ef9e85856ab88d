//! What the drafter and policy registries share: the words their messages are made of and the
//! checks of a grid table's lists.

use anyhow::{Result, bail};
use serde::{Deserialize, Serialize};

/// The name settings give a head or checkpoint directory: its last path component.
pub fn head_name(dir: &std::path::Path) -> String {
    dir.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_else(|| dir.display().to_string())
}

/// The name of the heads that ship with specx: the acceptance head `--method specdecpp` uses
/// when no `--head` is given, and the feature head of `--drafter feature`.
pub const DEFAULT_HEAD: &str = "default";

/// `a, b or c`.
pub fn either(names: &[&str]) -> String {
    match names {
        [] => String::new(),
        [one] => one.to_string(),
        [rest @ .., last] => format!("{} or {last}", rest.join(", ")),
    }
}

/// Every `a` x `b` as `make(a, b)`.
pub fn product<A: Copy, B: Copy, T>(a: &[A], b: &[B], make: impl Fn(A, B) -> T) -> Vec<T> {
    a.iter().flat_map(|&x| b.iter().map(move |&y| (x, y))).map(|(x, y)| make(x, y)).collect()
}

/// A grid table (`policies.bandit`) whose lists are all non-empty: an empty one is a mistake,
/// not an empty product.
pub fn check_lists(table: &str, lists: &[(&'static str, usize)]) -> Result<()> {
    for (name, len) in lists {
        if *len == 0 {
            bail!("[[methods.grid]] {table} {name} is empty");
        }
    }
    Ok(())
}

/// A flag given to a part that does not take it.
pub fn unused_flag(flag: &str, users: &[&str], part: &str) -> anyhow::Error {
    anyhow::anyhow!("{flag} is not used by this method: it needs the {} {part}", either(users))
}

/// A part without parameters (`plain = {}`, `oracle = {}`).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct NoParameters {}
