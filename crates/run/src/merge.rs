//! The checks before the parts of a `--shard I/N` run merge, whichever machines they ran on.

use crate::manifest::{RunManifest, identity_difference};
use anyhow::{Result, bail, ensure};
use std::path::PathBuf;

/// Reads the manifests of the part directories of one run before a merge: at least one, all
/// of the same run as the first, each complete.
pub fn read_parts<M: RunManifest>(parts: &[PathBuf]) -> Result<Vec<M>> {
    ensure!(!parts.is_empty(), "a merge needs at least one part directory");
    let manifests: Vec<M> = parts.iter().map(|p| crate::manifest::read(p)).collect::<Result<_>>()?;
    for (m, p) in manifests.iter().zip(parts) {
        let (first, this) = (manifests[0].identity(), m.identity());
        if this != first {
            bail!(
                "{} and {} are not parts of the same run ({} differs)",
                parts[0].display(),
                p.display(),
                identity_difference(&first, &this)
            );
        }
        ensure!(
            m.complete(),
            "{} is incomplete ({}): run the unfinished part to completion before merging",
            p.display(),
            m.progress()
        );
    }
    Ok(manifests)
}
