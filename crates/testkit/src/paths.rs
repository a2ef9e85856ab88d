//! Where the repository is, and the prompt sets that sit beside it (`../shared/datasets`).

use std::path::PathBuf;

/// The repository root.
pub fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// The repository's `configs/`.
pub fn configs() -> PathBuf {
    repo().join("configs")
}

/// The prompt sets beside the repository.
pub fn shared_datasets() -> PathBuf {
    repo().join("../shared/datasets")
}

/// Alpaca's 5,000 prompts.
pub fn alpaca() -> PathBuf {
    shared_datasets().join("alpaca/alpaca_5000.json")
}
