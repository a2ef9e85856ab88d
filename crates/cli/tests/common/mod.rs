//! Helpers shared by the CLI's end-to-end tests.
#![allow(dead_code)] // not every test binary uses each

use std::path::{Path, PathBuf};

/// The repository root.
pub fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// Alpaca's 5,000 prompts, beside the repository.
pub fn alpaca() -> PathBuf {
    repo().join("../shared/datasets/alpaca/alpaca_5000.json")
}

/// A path as a command-line argument.
pub fn s(p: &Path) -> String {
    p.display().to_string()
}

/// Copies a file or a directory tree.
pub fn copy(from: &Path, to: &Path) {
    if from.is_dir() {
        std::fs::create_dir_all(to).unwrap();
        for e in std::fs::read_dir(from).unwrap() {
            let e = e.unwrap();
            copy(&e.path(), &to.join(e.file_name()));
        }
    } else {
        std::fs::copy(from, to).unwrap();
    }
}
