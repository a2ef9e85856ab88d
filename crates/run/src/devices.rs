//! Parts of one run side by side on the devices of one machine (`--devices cpu,wgpu:0`): part
//! I of N computes on the I-th device in `OUT/parts/I`, each on its own thread, and the parts
//! merge into `OUT` once all are complete.

use crate::manifest::{MANIFEST, RunManifest, identity_difference};
use crate::part::{Part, part_dir};
use anyhow::{Result, anyhow, bail, ensure};
use std::path::{Path, PathBuf};

/// Runs `part(i)` for each device `devices[i]`, each on its own thread; an error names the
/// part and its device.
pub fn run_parts<T: Send>(devices: &[String], part: impl Fn(usize) -> Result<T> + Sync) -> Result<Vec<T>> {
    let results: Vec<Result<T>> = std::thread::scope(|scope| {
        let part = &part;
        let handles: Vec<_> = (0..devices.len()).map(|i| scope.spawn(move || part(i))).collect();
        handles.into_iter().map(|h| h.join().unwrap_or_else(|_| Err(anyhow!("a part panicked")))).collect()
    });
    results
        .into_iter()
        .enumerate()
        .map(|(i, r)| r.map_err(|e| e.context(format!("part {i} on {}", devices[i]))))
        .collect()
}

/// The device one process of a run computes on: the config's `device`, or with `[models]
/// devices` the device of its part (part i on the i-th); `runner` names what starts the
/// parts, for the error when none is given.
pub fn device_of_part<'a>(device: &'a str, devices: &'a [String], part: Option<Part>, runner: &str) -> Result<&'a str> {
    match (devices, part) {
        ([], _) => Ok(device),
        (_, None) => bail!("[models] devices runs one part per device: run it with {runner}, which starts them"),
        (devices, Some(p)) => {
            ensure!(
                p.count == devices.len(),
                "[models] devices runs one part per device: --shard {}/{} needs {} parts",
                p.index,
                p.count,
                devices.len()
            );
            Ok(&devices[p.index])
        }
    }
}

/// What one kind of run does on several devices at once: run part i of N on the i-th device in
/// `dir/parts/i`, and merge the parts.
pub struct DeviceRun<'a, T> {
    /// The command, for messages (`datagen`, `eval`).
    pub what: &'a str,
    /// The run directory.
    pub dir: &'a Path,
    pub devices: &'a [String],
    /// Runs one part into its directory; resumes from what that directory holds.
    pub run_part: &'a (dyn Fn(Part, PathBuf) -> Result<T> + Sync),
    /// Joins the complete parts' directories into `dir`.
    pub merge: &'a dyn Fn(&[PathBuf]) -> Result<T>,
}

impl<T: Send> DeviceRun<'_, T> {
    /// Runs every part side by side and merges them into the run directory once all are
    /// complete; returns an unfinished part's result otherwise (the same command continues).
    /// A directory holding a run made on other devices, or another run, is refused.
    pub fn run<M: RunManifest>(&self, manifest: impl Fn(&T) -> &M) -> Result<T> {
        let (dir, devices, n) = (self.dir, self.devices, self.devices.len());
        let old: Option<M> = if dir.join(MANIFEST).exists() { Some(crate::manifest::read(dir)?) } else { None };
        if let Some(old) = &old
            && old.devices() != devices
        {
            bail!(
                "{} holds a run made on devices {:?}, not {:?}; choose another output directory",
                dir.display(),
                old.devices(),
                devices
            );
        }
        eprintln!(
            "{} on {n} devices: part i of {n} on the i-th of {} (in {})",
            self.what,
            devices.join(", "),
            dir.join("parts").display()
        );
        let mut parts = run_parts(devices, |index| (self.run_part)(Part { index, count: n }, part_dir(dir, index)))?;
        if let Some(unfinished) = parts.iter().position(|p| !manifest(p).complete()) {
            eprintln!(
                "part {unfinished} is unfinished: run the same command again to continue; the parts merge once all are complete"
            );
            return Ok(parts.swap_remove(unfinished));
        }
        // Never merge over a different run that already lives in the directory.
        if let Some(old) = &old {
            let new = manifest(&parts[0]);
            if old.identity() != new.identity() {
                bail!(
                    "{} holds another run ({} differs); choose another output directory",
                    dir.display(),
                    identity_difference(&old.identity(), &new.identity())
                );
            }
        }
        (self.merge)(&(0..n).map(|i| part_dir(dir, i)).collect::<Vec<_>>())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_failing_part_is_named_with_its_device() {
        let devices = vec!["cpu".to_string(), "wgpu:0".to_string()];
        let e = run_parts(&devices, |i| if i == 1 { bail!("out of memory") } else { Ok(i) }).unwrap_err();
        assert!(format!("{e:#}").contains("part 1 on wgpu:0") && format!("{e:#}").contains("out of memory"), "{e:#}");
        assert_eq!(run_parts(&devices, Ok).unwrap(), vec![0, 1]);
        assert_eq!(device_of_part("cuda:0", &[], None, "x").unwrap(), "cuda:0");
        assert_eq!(device_of_part("cpu", &devices, Some(Part { index: 1, count: 2 }), "x").unwrap(), "wgpu:0");
        assert!(device_of_part("cpu", &devices, None, "specx eval").unwrap_err().to_string().contains("specx eval"));
        assert!(
            device_of_part("cpu", &devices, Some(Part { index: 0, count: 3 }), "x")
                .unwrap_err()
                .to_string()
                .contains("needs 2 parts")
        );
    }
}
