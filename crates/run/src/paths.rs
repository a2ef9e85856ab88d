//! Paths in configs and manifests. Relative paths are relative to the config file's
//! directory; a leading `$SPECX_MODELS` means the model cache of `scripts/fetch-models.sh`,
//! `$SPECX_DATASETS` the prompt-set cache of `scripts/fetch-datasets.sh`, `~` the home. A
//! manifest writes paths inside the caches back with the variable, so a run committed on one
//! machine names the same files on another.

use anyhow::{Context, Result};
use std::path::{Component, Path, PathBuf};

/// The prompt-set cache filled by `scripts/fetch-datasets.sh`: `$SPECX_DATASETS`, else
/// `~/.cache/specx/datasets`.
pub fn dataset_cache_dir() -> PathBuf {
    specx_decoder::loader::cache_dir("SPECX_DATASETS", "datasets")
}

/// Expands `$SPECX_MODELS`, `$SPECX_DATASETS` and `~` at the start of a path, then makes a
/// relative path relative to `base`; hub ids stay as written.
pub fn resolve_path(p: &Path, base: &Path) -> PathBuf {
    // A hub id (hf:ORG/NAME) is resolved where it is used (specx_decoder::hub), not joined.
    if specx_decoder::hub::is_hub_id(p) {
        return p.to_path_buf();
    }
    let s = p.to_string_lossy();
    let expanded = if let Some(rest) = s.strip_prefix("$SPECX_MODELS") {
        PathBuf::from(format!("{}{rest}", specx_decoder::loader::model_cache_dir().display()))
    } else if let Some(rest) = s.strip_prefix("$SPECX_DATASETS") {
        PathBuf::from(format!("{}{rest}", dataset_cache_dir().display()))
    } else if let Some(rest) = s.strip_prefix("~/") {
        PathBuf::from(std::env::var_os("HOME").unwrap_or_default()).join(rest)
    } else {
        p.to_path_buf()
    };
    lexically_normal(&if expanded.is_absolute() { expanded } else { base.join(expanded) })
}

/// [`resolve_path`] against the working directory: what a command-line path means.
pub fn resolve_from_cwd(p: &Path) -> Result<PathBuf> {
    let cwd = std::env::current_dir().context("reading the working directory")?;
    Ok(resolve_path(p, &cwd))
}

/// The inverse of [`resolve_path`] for the two caches: a path inside the model or prompt-set
/// cache is written `$SPECX_MODELS/...` / `$SPECX_DATASETS/...`.
pub fn portable_path(p: &Path) -> PathBuf {
    for (var, root) in
        [("$SPECX_MODELS", specx_decoder::loader::model_cache_dir()), ("$SPECX_DATASETS", dataset_cache_dir())]
    {
        if let Ok(rest) = p.strip_prefix(&root) {
            return Path::new(var).join(rest);
        }
    }
    p.to_path_buf()
}

/// Drops `.` and folds `dir/..` without touching the file system (so manifests and messages
/// show `/work/specx/datasets/x`, not `/work/specx/configs/../datasets/x`).
fn lexically_normal(p: &Path) -> PathBuf {
    let mut out = PathBuf::new();
    for c in p.components() {
        match c {
            Component::CurDir => {}
            Component::ParentDir => match out.components().next_back() {
                Some(Component::Normal(_)) => {
                    out.pop();
                }
                Some(Component::RootDir | Component::Prefix(_)) => {} // "/.." is "/"
                _ => out.push(".."),
            },
            other => out.push(other),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn relative_paths_fold_and_cache_paths_round_trip() {
        assert_eq!(resolve_path(Path::new("../x/./y"), Path::new("/a/b")), PathBuf::from("/a/x/y"));
        assert_eq!(resolve_path(Path::new("../../../z"), Path::new("/a")), PathBuf::from("/z"));
        assert_eq!(resolve_path(Path::new("/abs/f"), Path::new("/a")), PathBuf::from("/abs/f"));
        assert_eq!(
            resolve_path(Path::new("hf:Qwen/Qwen2.5-0.5B"), Path::new("/a")),
            PathBuf::from("hf:Qwen/Qwen2.5-0.5B")
        );
        let in_cache = resolve_path(Path::new("$SPECX_MODELS/t.gguf"), Path::new("/elsewhere"));
        assert!(in_cache.is_absolute() && in_cache.ends_with("t.gguf"), "{}", in_cache.display());
        assert_eq!(portable_path(&in_cache), PathBuf::from("$SPECX_MODELS/t.gguf"));
        assert_eq!(resolve_path(&portable_path(&in_cache), Path::new("/other")), in_cache);
        let data = resolve_path(Path::new("$SPECX_DATASETS/alpaca/a.json"), Path::new("/x"));
        assert_eq!(portable_path(&data), PathBuf::from("$SPECX_DATASETS/alpaca/a.json"));
        assert_eq!(portable_path(Path::new("/not/a/cache")), PathBuf::from("/not/a/cache"));
    }
}
