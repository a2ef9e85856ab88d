//! Hugging Face hub ids in place of paths: `hf:ORG/NAME[@REV]` (an HF model directory:
//! config.json, tokenizer.json, safetensors), `hf:ORG/NAME[@REV]/FILE` (one file of a model
//! repository, e.g. a .gguf, with tokenizer.json fetched beside it when the repository has one)
//! and `hf:datasets/ORG/NAME[@REV]/FILE` (a prompt-set file of a dataset repository).
//!
//! Ids resolve to files in the hub's own cache (`HF_HUB_CACHE`, else `$HF_HOME/hub`, else
//! `~/.cache/huggingface/hub`), laid out as huggingface_hub lays it out, so models downloaded by
//! Python tools are found. A file in the cache is used without network; a missing one is
//! downloaded through hf-hub when the `hub` feature is built and `HF_HUB_OFFLINE` is not set.
//! Ids parse in every build, so a config naming one fails clearly in a build without `hub`.

use anyhow::{Context, Result, anyhow, bail, ensure};
use std::path::{Path, PathBuf};

/// What every hub id starts with.
pub const PREFIX: &str = "hf:";

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RepoKind {
    Model,
    Dataset,
}

/// A parsed hub id.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HubRef {
    pub kind: RepoKind,
    /// ORG/NAME.
    pub repo: String,
    /// A branch, tag or commit (default `main`).
    pub revision: String,
    /// A file inside the repository; `None` for a whole model directory.
    pub file: Option<String>,
}

/// Whether `p` is written as a hub id.
pub fn is_hub_id(p: &Path) -> bool {
    p.to_str().is_some_and(|s| s.starts_with(PREFIX))
}

impl std::str::FromStr for HubRef {
    type Err = anyhow::Error;

    fn from_str(id: &str) -> Result<Self> {
        let usage = "expected hf:ORG/NAME[@REV], hf:ORG/NAME[@REV]/FILE or hf:datasets/ORG/NAME[@REV]/FILE";
        let rest = id.strip_prefix(PREFIX).ok_or_else(|| anyhow!("'{id}' is not a hub id ({usage})"))?;
        let (kind, rest) = match rest.strip_prefix("datasets/") {
            Some(r) => (RepoKind::Dataset, r),
            None => (RepoKind::Model, rest),
        };
        let mut parts = rest.splitn(3, '/');
        let (org, name_rev, file) = (parts.next().unwrap_or(""), parts.next().unwrap_or(""), parts.next());
        let (name, revision) = name_rev.split_once('@').unwrap_or((name_rev, "main"));
        ensure!(!org.is_empty() && !name.is_empty() && !revision.is_empty(), "hub id '{id}': {usage}");
        ensure!(
            file.is_none_or(|f| !f.is_empty() && !f.split('/').any(|c| c.is_empty() || c == "..")),
            "hub id '{id}': the file part must be a path inside the repository"
        );
        ensure!(
            kind == RepoKind::Model || file.is_some(),
            "hub id '{id}': a dataset id names a file (hf:datasets/ORG/NAME[@REV]/FILE)"
        );
        Ok(Self { kind, repo: format!("{org}/{name}"), revision: revision.into(), file: file.map(str::to_string) })
    }
}

/// The hub's cache directory, as huggingface_hub finds it.
pub fn cache_dir() -> PathBuf {
    if let Some(p) = std::env::var_os("HF_HUB_CACHE").or_else(|| std::env::var_os("HUGGINGFACE_HUB_CACHE")) {
        return PathBuf::from(p);
    }
    let home = std::env::var_os("HF_HOME").map(PathBuf::from).unwrap_or_else(|| {
        std::env::var_os("XDG_CACHE_HOME")
            .map(PathBuf::from)
            .unwrap_or_else(|| PathBuf::from(std::env::var_os("HOME").unwrap_or_default()).join(".cache"))
            .join("huggingface")
    });
    home.join("hub")
}

/// `p` itself, or for a hub id the local path it names (see the module doc), fetching what
/// the cache lacks unless offline.
pub fn resolve(p: &Path) -> Result<PathBuf> {
    if !is_hub_id(p) {
        return Ok(p.to_path_buf());
    }
    let id = p.to_string_lossy();
    let offline = std::env::var("HF_HUB_OFFLINE").is_ok_and(|v| !v.is_empty() && v != "0");
    resolve_in(&id.parse()?, &cache_dir(), offline).with_context(|| format!("hub id '{id}'"))
}

/// [`resolve`] against a given cache directory.
pub fn resolve_in(r: &HubRef, cache: &Path, offline: bool) -> Result<PathBuf> {
    let fetcher = Fetcher { r, cache, offline };
    match (&r.file, r.kind) {
        (Some(file), kind) => {
            let path = fetcher.get(file)?;
            if kind == RepoKind::Model && !file.ends_with(".json") {
                // A model file (GGUF) reads tokenizer.json beside it, where the repository has one.
                let _ = fetcher.get("tokenizer.json");
            }
            Ok(path)
        }
        (None, _) => {
            let config = fetcher.get("config.json")?;
            fetcher.get("tokenizer.json")?;
            if fetcher.get("model.safetensors").is_err() {
                let index = fetcher.get("model.safetensors.index.json").map_err(|_| {
                    anyhow!("{} has neither model.safetensors nor model.safetensors.index.json", r.repo)
                })?;
                let text = std::fs::read_to_string(&index).with_context(|| format!("reading {}", index.display()))?;
                let json: serde_json::Value =
                    serde_json::from_str(&text).with_context(|| format!("{}: not JSON", index.display()))?;
                let map =
                    json["weight_map"].as_object().ok_or_else(|| anyhow!("{}: no weight_map", index.display()))?;
                let mut shards: Vec<&str> = map.values().filter_map(|v| v.as_str()).collect();
                shards.sort_unstable();
                shards.dedup();
                for shard in shards {
                    fetcher.get(shard)?;
                }
            }
            Ok(config.parent().expect("a file in a snapshot directory").to_path_buf())
        }
    }
}

struct Fetcher<'a> {
    r: &'a HubRef,
    cache: &'a Path,
    offline: bool,
}

impl Fetcher<'_> {
    /// The repository's folder in the cache (`models--ORG--NAME`, `datasets--ORG--NAME`).
    fn repo_dir(&self) -> PathBuf {
        let kind = match self.r.kind {
            RepoKind::Model => "models",
            RepoKind::Dataset => "datasets",
        };
        self.cache.join(format!("{kind}--{}", self.r.repo.replace('/', "--")))
    }

    /// The snapshot directory of the revision: a ref (branch, tag) names a commit in
    /// refs/REV; a commit is its own snapshot.
    fn snapshot(&self) -> Option<PathBuf> {
        let dir = self.repo_dir();
        let rev = &self.r.revision;
        let commit = match std::fs::read_to_string(dir.join("refs").join(rev)) {
            Ok(c) => c.trim().to_string(),
            Err(_) if rev.len() == 40 && rev.bytes().all(|b| b.is_ascii_hexdigit()) => rev.clone(),
            Err(_) => return None,
        };
        Some(dir.join("snapshots").join(commit))
    }

    fn cached(&self, file: &str) -> Option<PathBuf> {
        let path = self.snapshot()?.join(file);
        path.exists().then_some(path)
    }

    fn get(&self, file: &str) -> Result<PathBuf> {
        if let Some(p) = self.cached(file) {
            return Ok(p);
        }
        let what =
            format!("{file} of {}@{} is not in the hub cache {}", self.r.repo, self.r.revision, self.cache.display());
        if self.offline {
            bail!("{what}, and HF_HUB_OFFLINE is set");
        }
        download(self.r, self.cache, file).with_context(|| format!("{what}, and downloading it failed (no network? fetch it where there is one, e.g. `hf download {}`, and copy the cache)", self.r.repo))
    }
}

#[cfg(feature = "hub")]
fn download(r: &HubRef, cache: &Path, file: &str) -> Result<PathBuf> {
    use hf_hub::{Repo, RepoType, api::sync::ApiBuilder};
    let kind = match r.kind {
        RepoKind::Model => RepoType::Model,
        RepoKind::Dataset => RepoType::Dataset,
    };
    let api = ApiBuilder::new().with_cache_dir(cache.to_path_buf()).with_progress(true).build()?;
    Ok(api.repo(Repo::with_revision(r.repo.clone(), kind, r.revision.clone())).get(file)?)
}

#[cfg(not(feature = "hub"))]
fn download(_: &HubRef, _: &Path, _: &str) -> Result<PathBuf> {
    bail!("this build cannot download from the hub: rebuild with `--features hub`")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_parse_and_bad_ones_are_refused() {
        let r: HubRef = "hf:Qwen/Qwen2.5-0.5B@v1".parse().unwrap();
        assert_eq!(
            (r.kind, r.repo.as_str(), r.revision.as_str(), r.file),
            (RepoKind::Model, "Qwen/Qwen2.5-0.5B", "v1", None)
        );
        let r: HubRef = "hf:Qwen/Q-GGUF/q4_k_m.gguf".parse().unwrap();
        assert_eq!((r.revision.as_str(), r.file.as_deref()), ("main", Some("q4_k_m.gguf")));
        let r: HubRef =
            "hf:datasets/openai/openai_humaneval/openai_humaneval/test-00000-of-00001.parquet".parse().unwrap();
        assert_eq!(
            (r.kind, r.file.as_deref()),
            (RepoKind::Dataset, Some("openai_humaneval/test-00000-of-00001.parquet"))
        );
        for bad in ["hf:", "hf:Qwen", "hf:/x", "hf:Qwen/x@", "hf:datasets/a/b", "hf:a/b/../x", "Qwen/x"] {
            assert!(bad.parse::<HubRef>().is_err(), "{bad} parsed");
        }
    }
}
