//! A tiny synthetic draft/target pair in a temporary directory, and an untrained acceptance
//! head for its draft.

use specx_decoder::speculative::{AcceptanceHead, HeadSpec};
use specx_decoder::synthetic::write_tiny_char_pair;
use specx_decoder::{default_device, load_model};
use std::path::{Path, PathBuf};

/// The tiny character-level pair (seed 7, draft noise 0.35) in a directory that lives as long
/// as this value.
pub struct TinyPair {
    _tmp: tempfile::TempDir,
    pub root: PathBuf,
    pub draft: PathBuf,
    pub target: PathBuf,
}

impl TinyPair {
    pub fn new() -> Self {
        let tmp = tempfile::tempdir().unwrap();
        let root = tmp.path().to_path_buf();
        let (draft, target) = write_tiny_char_pair(&root, 7, 0.35).unwrap();
        Self { _tmp: tmp, root, draft, target }
    }

    /// An untrained depth-1 head for the draft, stamped with the draft's sha256, at
    /// `root/name` (initialised from `seed`).
    pub fn random_head(&self, name: &str, seed: u64) -> PathBuf {
        random_head(&self.root.join(name), &self.draft, seed)
    }
}

impl Default for TinyPair {
    fn default() -> Self {
        Self::new()
    }
}

/// An untrained depth-1 head for `draft` at `dir`, stamped with the draft's sha256.
pub fn random_head(dir: &Path, draft: &Path, seed: u64) -> PathBuf {
    let d = load_model(draft, None, &default_device()).unwrap();
    untrained_head(dir, d.model.config().hidden_size, Some(d.weights_sha256().unwrap()), None, seed)
}

/// An untrained depth-1 head of width `hidden` at `dir`, stamped with the draft it claims
/// (`draft_sha256`, `transform`): heads of another draft are made this way.
pub fn untrained_head(
    dir: &Path,
    hidden: usize,
    draft_sha256: Option<String>,
    transform: Option<&str>,
    seed: u64,
) -> PathBuf {
    let spec = HeadSpec {
        hidden_size: hidden,
        depth: 1,
        tied: false,
        draft_model_sha256: draft_sha256,
        draft_transform: transform.map(String::from),
        training: serde_json::json!({}),
        draft_stats: false,
    };
    AcceptanceHead::init_seeded(hidden, 1, false, seed, &default_device()).save(dir, &spec).unwrap();
    dir.to_path_buf()
}
