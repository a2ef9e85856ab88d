//! Resuming into a run directory: what an interrupted run leaves is either a finished file
//! (written atomically, through [`specx_decoder::fsutil::write_atomic`]) or a temporary of a
//! killed write, which the next run deletes before it starts.

use anyhow::{Context, Result};
use std::path::Path;

/// Deletes, in `dir` and below, the temporaries that atomic writes of killed processes left
/// behind (`.NAME.tmp-PID`). Those of this process may be live writes of its other threads and
/// are kept.
pub fn remove_stale_temporaries(dir: &Path) -> Result<()> {
    let own = format!(".tmp-{}", std::process::id());
    for entry in std::fs::read_dir(dir).with_context(|| format!("listing {}", dir.display()))? {
        let entry = entry?;
        let path = entry.path();
        let name = entry.file_name().to_string_lossy().into_owned();
        if entry.file_type()?.is_dir() {
            remove_stale_temporaries(&path)?;
        } else if name.starts_with('.') && name.contains(".tmp-") && !name.ends_with(&own) {
            std::fs::remove_file(&path).with_context(|| format!("removing {}", path.display()))?;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn killed_writes_go_and_live_ones_and_finished_files_stay() {
        let dir = tempfile::tempdir().unwrap();
        let sub = dir.path().join("units/0");
        std::fs::create_dir_all(&sub).unwrap();
        let dead = sub.join(".u.json.tmp-4242");
        let live = dir.path().join(format!(".m.json.tmp-{}", std::process::id()));
        let done = sub.join("u.json");
        for f in [&dead, &live, &done] {
            std::fs::write(f, b"x").unwrap();
        }
        remove_stale_temporaries(dir.path()).unwrap();
        assert!(!dead.exists() && live.exists() && done.exists());
    }
}
