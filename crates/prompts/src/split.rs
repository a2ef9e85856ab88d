//! Deterministic, seeded train/dev/test splits of a prompt set ([`SplitMix64`], whose
//! definition is fixed, so a split recorded in a manifest comes out the same with any future
//! version of any dependency).

use anyhow::{Result, bail};
use serde::{Deserialize, Serialize};
use specx_run::seed::SplitMix64;

/// Which rows of a prompt set a run uses.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SplitSpec {
    /// `all`, or one of `names` when `sizes` is given.
    pub name: String,
    /// Sizes of the named parts, taken in order from a seeded permutation of the rows; rows
    /// beyond their sum belong to no part. Empty: no split (only `all`).
    #[serde(default)]
    pub sizes: Vec<usize>,
    /// Names of the parts; defaults to train, dev, test.
    #[serde(default = "default_names")]
    pub names: Vec<String>,
    #[serde(default)]
    pub seed: u64,
}

fn default_names() -> Vec<String> {
    ["train", "dev", "test"].iter().map(|s| s.to_string()).collect()
}

impl SplitSpec {
    pub fn all() -> Self {
        Self { name: "all".into(), sizes: Vec::new(), names: default_names(), seed: 0 }
    }

    /// Row indices of this split of a set of `n` rows, in the order the run uses them
    /// (`all`: file order; a named part: its order in the seeded permutation).
    pub fn indices(&self, n: usize) -> Result<Vec<usize>> {
        if self.name == "all" {
            return Ok((0..n).collect());
        }
        if self.sizes.is_empty() {
            bail!(
                "split '{}' asked for, but no split sizes are given (use split = \"all\" or set split_sizes)",
                self.name
            );
        }
        if self.sizes.len() > self.names.len() {
            bail!("{} split sizes but only {} names ({:?})", self.sizes.len(), self.names.len(), self.names);
        }
        let total: usize = self.sizes.iter().sum();
        if total > n {
            bail!("split sizes {:?} add up to {total}, more than the {n} rows of the prompt set", self.sizes);
        }
        let Some(part) = self.names.iter().position(|p| *p == self.name) else {
            bail!("unknown split '{}': expected 'all' or one of {:?}", self.name, &self.names[..self.sizes.len()]);
        };
        if part >= self.sizes.len() {
            bail!("split '{}' has no size in {:?}", self.name, self.sizes);
        }
        let mut order: Vec<usize> = (0..n).collect();
        SplitMix64::new(self.seed).shuffle(&mut order);
        let start: usize = self.sizes[..part].iter().sum();
        Ok(order[start..start + self.sizes[part]].to_vec())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(name: &str, seed: u64) -> SplitSpec {
        SplitSpec { name: name.into(), sizes: vec![4000, 800, 200], names: default_names(), seed }
    }

    #[test]
    fn parts_are_disjoint_cover_and_depend_on_the_seed() {
        let parts: Vec<Vec<usize>> =
            ["train", "dev", "test"].iter().map(|n| spec(n, 0).indices(5000).unwrap()).collect();
        assert_eq!(parts.iter().map(Vec::len).collect::<Vec<_>>(), vec![4000, 800, 200]);
        let mut all: Vec<usize> = parts.concat();
        all.sort_unstable();
        assert_eq!(all, (0..5000).collect::<Vec<_>>());
        assert_eq!(spec("dev", 0).indices(5000).unwrap(), parts[1]);
        assert_ne!(spec("dev", 1).indices(5000).unwrap(), parts[1]);
        assert_eq!(SplitSpec::all().indices(3).unwrap(), vec![0, 1, 2]);
    }

    #[test]
    fn bad_splits_are_explained() {
        assert!(
            format!("{:#}", spec("validation", 0).indices(5000).unwrap_err()).contains("unknown split 'validation'")
        );
        assert!(format!("{:#}", spec("train", 0).indices(100).unwrap_err()).contains("more than the 100 rows"));
        let no_sizes = SplitSpec { sizes: vec![], ..spec("train", 0) };
        assert!(no_sizes.indices(10).is_err());
    }
}
