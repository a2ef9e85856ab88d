//! Parts of a run: `--shard I/N` splits a run's units (datagen's shards of prompts, eval's
//! prompt x setting x seed units) so that part I holds the units u with u % N == I. Parts run
//! on separate machines (Slurm arrays) or side by side on the devices of one machine, each in
//! its own directory, and merge into one run directory once every part is complete.

use anyhow::{Context, Result, ensure};
use serde::{Deserialize, Serialize};
use std::path::{Path, PathBuf};

/// Which part of a `--shard I/N` run a directory holds.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Part {
    pub index: usize,
    pub count: usize,
}

impl Part {
    /// Whether unit (or shard) `u` belongs to this part.
    pub fn holds(&self, u: usize) -> bool {
        u % self.count == self.index
    }

    /// `0 <= index < count`, checked where library callers arrive as well as the command line.
    pub fn check(&self) -> Result<()> {
        ensure!(self.count > 0 && self.index < self.count, "part {}/{}: expected 0 <= I < N", self.index, self.count);
        Ok(())
    }
}

impl std::str::FromStr for Part {
    type Err = anyhow::Error;

    /// Parses `I/N` (the range is left to [`Part::check`]).
    fn from_str(s: &str) -> Result<Self> {
        let (i, n) = s.split_once('/').with_context(|| format!("--shard {s}: expected I/N, e.g. 0/4"))?;
        Ok(Self {
            index: i.trim().parse().with_context(|| format!("--shard {s}: bad index"))?,
            count: n.trim().parse().with_context(|| format!("--shard {s}: bad count"))?,
        })
    }
}

/// The directory of part `index` of a run in `dir`, when the parts run side by side on one
/// machine (and where `specx slurm` puts the parts of an array).
pub fn part_dir(dir: &Path, index: usize) -> PathBuf {
    dir.join("parts").join(index.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parts_parse_check_and_cover_every_unit_once() {
        let p: Part = "1/3".parse().unwrap();
        assert_eq!(p, Part { index: 1, count: 3 });
        p.check().unwrap();
        assert!(" 2 / 4 ".parse::<Part>().is_ok());
        for bad in ["3", "a/2", "1/b"] {
            assert!(format!("{:#}", bad.parse::<Part>().unwrap_err()).contains("--shard"), "{bad}");
        }
        assert!("2/2".parse::<Part>().unwrap().check().is_err());
        assert!("0/0".parse::<Part>().unwrap().check().is_err());
        let parts: Vec<Part> = (0..3).map(|index| Part { index, count: 3 }).collect();
        assert!((0..10).all(|u| parts.iter().filter(|p| p.holds(u)).count() == 1));
        assert_eq!(part_dir(Path::new("/r"), 1), PathBuf::from("/r/parts/1"));
    }
}
