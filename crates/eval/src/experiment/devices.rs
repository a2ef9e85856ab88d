//! An eval run on several devices at once (`[models] devices` or `--devices`): part i of N
//! (units u with u % N == i) runs on the i-th device in OUTPUT/parts/i, each on its own
//! thread, and the finished parts are merged into OUTPUT with its results and reports. Every
//! part resumes from its finished units, so the same command continues an interrupted run.

use super::audit::EvalOutcome;
use super::config::EvalConfig;
use super::merge::merge;
use super::run::{EvalOptions, run_on_one_device};
use anyhow::Result;
use specx_run::devices::DeviceRun;

/// Runs every part of `cfg` (which lists `devices`) on its device and merges them into the
/// run directory. Parts log a line per unit (bars of parallel parts would overwrite each
/// other). Returns the merged outcome, or an unfinished part's when `opts` stops the parts
/// early (`max_new_units`, per part).
pub fn run_on_devices(cfg: &EvalConfig, opts: &EvalOptions) -> Result<EvalOutcome> {
    let run_part = |part, dir| {
        let mut part_cfg = cfg.clone();
        part_cfg.output.dir = dir;
        run_on_one_device(&part_cfg, &EvalOptions { part: Some(part), progress: false, ..opts.clone() })
    };
    let merge = |parts: &[std::path::PathBuf]| merge(parts, &cfg.output.dir);
    DeviceRun { what: "eval", dir: &cfg.output.dir, devices: &cfg.models.devices, run_part: &run_part, merge: &merge }
        .run(|o: &EvalOutcome| &o.manifest)
}
