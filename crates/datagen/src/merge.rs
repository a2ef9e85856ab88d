//! `specx datagen merge`: joins the part directories of a `--shard i/n` run into one run
//! directory with a single manifest.

use crate::manifest::{Manifest, PROMPT_LIST};
use crate::shard::{finished_shard, record_name};
use anyhow::{Context, Result, bail};
use specx_decoder::fsutil::write_atomic;
use specx_run::RunConfig;
use specx_run::RunManifest;
use specx_run::config::write_run_config;
use std::path::{Path, PathBuf};

/// Copies every shard of `parts` into `out` (verifying checksums) and writes the merged
/// manifest. The parts must come from the same setup and together hold every shard once.
pub fn merge(parts: &[PathBuf], out: &Path) -> Result<Manifest> {
    let manifests: Vec<Manifest> = specx_run::merge::read_parts(parts)?;
    let first = &manifests[0];
    let mut merged = first.clone();
    merged.part = None;
    merged.shards.clear();
    merged.seconds = manifests.iter().map(|m| m.seconds).sum();
    merged.config.output.dir = out.to_path_buf();
    std::fs::create_dir_all(out).with_context(|| format!("creating {}", out.display()))?;
    for (m, dir) in manifests.iter().zip(parts) {
        for rec in &m.shards {
            if merged.shards.iter().any(|s| s.index == rec.index) {
                bail!("shard {} is in more than one part (again in {})", rec.index, dir.display());
            }
            if finished_shard(dir, rec.index)?.as_ref() != Some(rec) {
                bail!("{}: shard {} does not match the part's manifest", dir.display(), rec.index);
            }
            let record = record_name(rec.index);
            for f in rec.files().into_iter().map(|f| &f.name).chain([&record]) {
                let bytes = std::fs::read(dir.join(f)).with_context(|| format!("reading {}", dir.join(f).display()))?;
                write_atomic(&out.join(f), &bytes)?;
            }
            merged.shards.push(rec.clone());
        }
    }
    let missing: Vec<usize> =
        (0..merged.shard_count).filter(|k| !merged.shards.iter().any(|s| s.index == *k)).collect();
    if !missing.is_empty() {
        let whose = match first.part {
            Some(p) => {
                let mut absent: Vec<usize> = missing.iter().map(|k| k % p.count).collect();
                absent.sort();
                absent.dedup();
                format!(
                    " (they belong to part {} of {})",
                    absent.iter().map(usize::to_string).collect::<Vec<_>>().join(", "),
                    p.count
                )
            }
            None => String::new(),
        };
        bail!("the parts lack shards {missing:?} of {}{whose}; merge all parts of the run", merged.shard_count);
    }
    let list = std::fs::read(parts[0].join(PROMPT_LIST))
        .with_context(|| format!("reading {}", parts[0].join(PROMPT_LIST).display()))?;
    write_atomic(&out.join(PROMPT_LIST), &list)?;
    merged.refresh_summary();
    merged.complete = true;
    write_run_config(out, &merged.config.portable().to_toml())?;
    merged.write(out)?;
    Ok(merged)
}
