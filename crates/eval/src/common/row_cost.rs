//! This machine's cost of a verification row, as `specx bench` measured it: the price the
//! tree-price policy (`specx decode --policy tree-price`) sizes its trees with when no
//! `--row-cost` is given. A row's cost depends on the CPU, the thread count, the device, the
//! weight path and the target, so a figure is stored under all five and read back only for the
//! same five: a figure from another machine or model is never used silently.
//!
//! The store is one JSON file, `~/.cache/specx/machine/row-costs.json` (or
//! `$SPECX_MACHINE/row-costs.json`), replaced atomically; a newer measurement of the same key
//! replaces the older.

use super::machine::cpuinfo;
use anyhow::{Context, Result};
use serde::{Deserialize, Serialize};
use std::path::{Path, PathBuf};

/// The figure used when this machine has none stored: a 17-row call costs 2.8 one-row calls on
/// two cores of a Xeon VM (family 6 model 167, docs/performance/drafters.md), (2.8 - 1) / 16 = 0.11.
pub const DEFAULT_ROW_COST: f64 = 0.11;

/// What a stored figure was measured on.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct RowCostKey {
    /// /proc/cpuinfo's model name with its family and model numbers (`AMD EPYC (family 25
    /// model 1)`): the model name alone does not tell a Zen 3 from a Zen 4.
    pub cpu: String,
    pub threads: usize,
    /// The target's device (`cpu`, `wgpu:0`, ...).
    pub device: String,
    /// The weight path (`q8`, `native`, `f32`).
    pub weights: String,
    /// The target's file name and size in bytes (a directory: its name and its files' total).
    pub target: String,
    pub target_bytes: u64,
}

/// One stored figure.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct StoredRowCost {
    #[serde(flatten)]
    pub key: RowCostKey,
    /// A verification row's cost in one-row target calls.
    pub row_cost: f64,
    /// The row counts of the calls it was fitted over.
    pub rows: Vec<usize>,
    /// When it was measured (UTC date).
    pub measured: String,
}

impl RowCostKey {
    /// The key of this machine and thread count for `target` on `device` with `weights`.
    pub fn here(device: &str, weights: &str, target: &Path) -> Result<Self> {
        let name = cpuinfo("model name").unwrap_or_else(|| std::env::consts::ARCH.to_string());
        let cpu = match (cpuinfo("cpu family"), cpuinfo("model")) {
            (Some(family), Some(model)) => format!("{name} (family {family} model {model})"),
            _ => name,
        };
        let target_bytes = path_bytes(target).with_context(|| format!("reading {}", target.display()))?;
        let file = target.file_name().map_or_else(|| target.display().to_string(), |n| n.to_string_lossy().into());
        Ok(Self {
            cpu,
            threads: rayon::current_num_threads(),
            device: device.to_string(),
            weights: weights.to_string(),
            target: file,
            target_bytes,
        })
    }
}

/// A file's size, or the total of a directory's files (an HF model directory).
fn path_bytes(p: &Path) -> Result<u64> {
    let meta = std::fs::metadata(p)?;
    if meta.is_file() {
        return Ok(meta.len());
    }
    let mut total = 0;
    for entry in std::fs::read_dir(p)? {
        let entry = entry?;
        if entry.file_type()?.is_file() {
            total += entry.metadata()?.len();
        }
    }
    Ok(total)
}

/// A row's cost in one-row calls from `(rows, seconds)` of calls of several row counts: the
/// least-squares slope through the one-row call, `t(r) / t(1) = 1 + c (r - 1)`, never below 0.
/// `None` without a one-row call and a longer one, or with a time that is not positive.
pub fn fit_row_cost(call_secs: &[(usize, f64)]) -> Option<f64> {
    let one = call_secs.iter().find(|c| c.0 == 1)?.1;
    if !(one > 0.0) || call_secs.iter().any(|c| !(c.1 > 0.0)) {
        return None;
    }
    let (mut sxy, mut sxx) = (0.0, 0.0);
    for &(r, t) in call_secs.iter().filter(|c| c.0 > 1) {
        let x = (r - 1) as f64;
        sxy += x * (t / one - 1.0);
        sxx += x * x;
    }
    (sxx > 0.0).then(|| (sxy / sxx).max(0.0))
}

/// The store's path.
pub fn store_path() -> PathBuf {
    specx_decoder::loader::cache_dir("SPECX_MACHINE", "machine").join("row-costs.json")
}

/// Every stored figure (none when the file does not exist).
pub fn read_store(path: &Path) -> Result<Vec<StoredRowCost>> {
    match std::fs::read(path) {
        Ok(bytes) => {
            serde_json::from_slice(&bytes).with_context(|| format!("{}: not a row-cost store", path.display()))
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(Vec::new()),
        Err(e) => Err(e).with_context(|| format!("reading {}", path.display())),
    }
}

/// Stores `entry` in `path`, replacing a figure of the same key.
pub fn store(path: &Path, entry: StoredRowCost) -> Result<()> {
    let mut all = read_store(path)?;
    all.retain(|e| e.key != entry.key);
    all.push(entry);
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    }
    specx_decoder::fsutil::write_atomic(path, serde_json::to_string_pretty(&all)?.as_bytes())
}

/// The figure stored in `path` for `key`, if any.
pub fn lookup(path: &Path, key: &RowCostKey) -> Result<Option<StoredRowCost>> {
    Ok(read_store(path)?.into_iter().find(|e| &e.key == key))
}

/// Today's date in UTC, `YYYY-MM-DD`, from the system clock (days to civil date, proleptic
/// Gregorian).
pub fn utc_date() -> String {
    let secs = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_secs());
    let days = (secs / 86_400) as i64 + 719_468;
    let era = days.div_euclid(146_097);
    let doe = days.rem_euclid(146_097);
    let yoe = (doe - doe / 1_460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    format!("{year:04}-{month:02}-{day:02}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_fit_is_the_slope_through_the_one_row_call() {
        // t(r) = 10 ms + 1.1 ms a row: c = 0.1 of a one-row call (11 ms) a row.
        let calls: Vec<(usize, f64)> = [1, 2, 5, 9, 21].iter().map(|&r| (r, 0.0099 + 0.0011 * r as f64)).collect();
        assert!((fit_row_cost(&calls).unwrap() - 0.1).abs() < 1e-12);
        assert_eq!(fit_row_cost(&[(2, 0.01), (5, 0.02)]), None, "no one-row call");
        assert_eq!(fit_row_cost(&[(1, 0.01)]), None, "no longer call");
        assert_eq!(fit_row_cost(&[(1, 0.01), (5, f64::NAN)]), None);
        assert_eq!(fit_row_cost(&[(1, 0.01), (5, 0.009)]), Some(0.0), "a cost is never negative");
    }

    #[test]
    fn a_figure_is_read_back_for_its_own_key_only_and_replaced_by_a_newer_one() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("machine/row-costs.json");
        let target = dir.path().join("target.gguf");
        std::fs::write(&target, [0u8; 100]).unwrap();
        let key = RowCostKey::here("cpu", "q8", &target).unwrap();
        assert_eq!(key.target_bytes, 100);
        assert!(lookup(&path, &key).unwrap().is_none(), "an empty store has nothing");
        let entry = |c| StoredRowCost { key: key.clone(), row_cost: c, rows: vec![1, 5], measured: utc_date() };
        store(&path, entry(0.2)).unwrap();
        store(&path, entry(0.16)).unwrap();
        assert_eq!(lookup(&path, &key).unwrap().unwrap().row_cost, 0.16);
        assert_eq!(read_store(&path).unwrap().len(), 1);
        for other in [
            RowCostKey::here("cpu", "native", &target).unwrap(),
            RowCostKey { threads: key.threads + 1, ..key.clone() },
            RowCostKey { target_bytes: 101, ..key.clone() },
        ] {
            assert!(lookup(&path, &other).unwrap().is_none(), "{other:?}");
        }
        std::fs::write(&path, "{").unwrap();
        let err = lookup(&path, &key).unwrap_err().to_string();
        assert!(err.contains("not a row-cost store"), "{err}");
    }

    #[test]
    fn the_date_is_a_calendar_date() {
        let d = utc_date();
        assert_eq!(d.len(), 10);
        assert!(d.as_str() >= "2026-01-01", "{d}");
        let m: u32 = d[5..7].parse().unwrap();
        let day: u32 = d[8..].parse().unwrap();
        assert!((1..=12).contains(&m) && (1..=31).contains(&day));
    }
}
