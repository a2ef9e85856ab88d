//! An eval run on several devices at once (`[models] devices` or `--devices`): part i of N
//! (units u with u % N == i) runs on the i-th device in OUTPUT/parts/i, each on its own
//! thread, and the finished parts are merged into OUTPUT with its results and reports. Every
//! part resumes from its finished units, so the same command continues an interrupted run.

use super::config::EvalConfig;
use super::manifest::{EvalManifest, MANIFEST};
use super::merge::merge;
use super::audit::EvalOutcome;
use super::run::{run_on_one_device, EvalOptions};
use anyhow::{bail, Result};
use specx_datagen::devices::{part_dir, run_parts};
use specx_datagen::manifest::Part;

/// Runs every part of `cfg` (which lists `devices`) on its device and merges them into the
/// run directory. Parts log a line per unit (bars of parallel parts would overwrite each
/// other). Returns the merged outcome, or an unfinished part's when `opts` stops the parts
/// early (`max_new_units`, per part).
pub fn run_on_devices(cfg: &EvalConfig, opts: &EvalOptions) -> Result<EvalOutcome> {
    let devices = &cfg.models.devices;
    let n = devices.len();
    let dir = &cfg.output.dir;
    if dir.join(MANIFEST).exists() {
        let old = EvalManifest::read(dir)?;
        if old.config.models.devices != *devices {
            bail!("{} holds a run made on devices {:?}, not {:?}; choose another output directory", dir.display(), old.config.models.devices, devices);
        }
    }
    eprintln!("eval on {n} devices: part i of {n} on the i-th of {} (in {})", devices.join(", "), dir.join("parts").display());
    let mut outcomes = run_parts(devices, |index| {
        let mut part_cfg = cfg.clone();
        part_cfg.output.dir = part_dir(dir, index);
        run_on_one_device(&part_cfg, &EvalOptions { part: Some(Part { index, count: n }), progress: false, ..opts.clone() })
    })?;
    if let Some(unfinished) = outcomes.iter().position(|o| !o.manifest.complete) {
        eprintln!("part {unfinished} is unfinished: run the same command again to continue; the parts merge once all are complete");
        return Ok(outcomes.swap_remove(unfinished));
    }
    if dir.join(MANIFEST).exists() {
        let old = EvalManifest::read(dir)?;
        let new = &outcomes[0].manifest;
        if old.identity() != new.identity() {
            bail!("{} holds another run ({} differs); choose another output directory", dir.display(), specx_datagen::manifest::identity_difference(&old.identity(), &new.identity()));
        }
    }
    merge(&(0..n).map(|i| part_dir(dir, i)).collect::<Vec<_>>(), dir)
}
