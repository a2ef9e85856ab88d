//! A datagen run on several devices at once (`[models] devices` or `--devices`): part i of N
//! runs on the i-th device in OUTPUT/parts/i, each on its own thread, and the finished parts
//! are merged into OUTPUT. Every part resumes from what it wrote, so running the same command
//! again continues an interrupted run; the merge happens once every part is complete.

use crate::manifest::{identity_difference, Manifest, Part};
use crate::merge::merge;
use crate::run::{run_on_one_device, RunOptions};
use crate::config::DatagenConfig;
use anyhow::{anyhow, bail, Result};
use std::path::PathBuf;

/// The directory of part `index` of a run in `dir`.
pub fn part_dir(dir: &std::path::Path, index: usize) -> PathBuf {
    dir.join("parts").join(index.to_string())
}

/// Runs `part(i)` for each device `devices[i]`, each on its own thread; an error names the
/// part and its device. (Shared with `specx eval`'s parts.)
pub fn run_parts<T: Send>(devices: &[String], part: impl Fn(usize) -> Result<T> + Sync) -> Result<Vec<T>> {
    let results: Vec<Result<T>> = std::thread::scope(|scope| {
        let part = &part;
        let handles: Vec<_> = (0..devices.len()).map(|i| scope.spawn(move || part(i))).collect();
        handles.into_iter().map(|h| h.join().unwrap_or_else(|_| Err(anyhow!("a part panicked")))).collect()
    });
    results.into_iter().enumerate().map(|(i, r)| r.map_err(|e| e.context(format!("part {i} on {}", devices[i])))).collect()
}

/// Runs every part of `cfg` (which lists `devices`) on its device and merges them into the
/// run directory. Per-part progress is logged a line per shard (bars of parallel parts would
/// overwrite each other). Returns the merged manifest, or the parts' state when `opts` stops
/// them early (`max_new_shards`, per part).
pub fn run_on_devices(cfg: &DatagenConfig, opts: &RunOptions) -> Result<Manifest> {
    let n = cfg.models.devices.len();
    let dir = &cfg.output.dir;
    if dir.join(crate::manifest::MANIFEST).exists() {
        let old = Manifest::read(dir)?;
        if old.config.models.devices != cfg.models.devices {
            bail!("{} holds a run made on devices {:?}, not {:?}; choose another output directory", dir.display(), old.config.models.devices, cfg.models.devices);
        }
    }
    eprintln!("datagen on {n} devices: part i of {n} on the i-th of {} (in {})", cfg.models.devices.join(", "), dir.join("parts").display());
    let mut manifests = run_parts(&cfg.models.devices, |index| {
        let mut part_cfg = cfg.clone();
        part_cfg.output.dir = part_dir(dir, index);
        run_on_one_device(&part_cfg, &RunOptions { part: Some(Part { index, count: n }), progress: false, ..opts.clone() })
    })?;
    if let Some(unfinished) = manifests.iter().position(|m| !m.complete) {
        eprintln!("part {unfinished} is unfinished: run the same command again to continue; the parts merge once all are complete");
        return Ok(manifests.swap_remove(unfinished));
    }
    // Never merge over a different run that already lives in the directory.
    if dir.join(crate::manifest::MANIFEST).exists() {
        let old = Manifest::read(dir)?;
        if old.identity() != manifests[0].identity() {
            bail!("{} holds another run ({} differs); choose another output directory", dir.display(), identity_difference(&old.identity(), &manifests[0].identity()));
        }
    }
    let dirs: Vec<PathBuf> = (0..n).map(|i| part_dir(dir, i)).collect();
    merge(&dirs, dir)
}
