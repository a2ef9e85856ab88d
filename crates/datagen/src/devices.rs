//! A datagen run on several devices at once (`[models] devices` or `--devices`): part i of N
//! runs on the i-th device in OUTPUT/parts/i, each on its own thread, and the finished parts
//! are merged into OUTPUT. Every part resumes from what it wrote, so running the same command
//! again continues an interrupted run; the merge happens once every part is complete.

use crate::config::DatagenConfig;
use crate::manifest::Manifest;
use crate::merge::merge;
use crate::run::{RunOptions, run_on_one_device};
use anyhow::Result;
use specx_run::devices::DeviceRun;

/// Runs every part of `cfg` (which lists `devices`) on its device and merges them into the
/// run directory. Per-part progress is logged a line per shard (bars of parallel parts would
/// overwrite each other). Returns the merged manifest, or the parts' state when `opts` stops
/// them early (`max_new_shards`, per part).
pub fn run_on_devices(cfg: &DatagenConfig, opts: &RunOptions) -> Result<Manifest> {
    let run_part = |part, dir| {
        let mut part_cfg = cfg.clone();
        part_cfg.output.dir = dir;
        run_on_one_device(&part_cfg, &RunOptions { part: Some(part), progress: false, ..opts.clone() })
    };
    let merge = |parts: &[std::path::PathBuf]| merge(parts, &cfg.output.dir);
    DeviceRun {
        what: "datagen",
        dir: &cfg.output.dir,
        devices: &cfg.models.devices,
        run_part: &run_part,
        merge: &merge,
    }
    .run(|m: &Manifest| m)
}
