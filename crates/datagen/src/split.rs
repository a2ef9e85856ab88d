//! Deterministic, seeded train/dev/test splits of a prompt set, and the seed derivation used
//! for every per-prompt random stream.
//!
//! Both use SplitMix64, written out here, rather than a `rand` generator: a split recorded in
//! a manifest must come out the same with any future version of any dependency.

use anyhow::{bail, Result};
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

/// SplitMix64 (Steele, Lea, Flood 2014): a tiny generator with a fixed, published definition.
pub struct SplitMix64(u64);

impl SplitMix64 {
    pub fn new(seed: u64) -> Self {
        Self(seed)
    }

    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// Fisher-Yates shuffle of `items` in place.
    pub fn shuffle<T>(&mut self, items: &mut [T]) {
        for i in (1..items.len()).rev() {
            items.swap(i, self.below(i + 1));
        }
    }

    /// Uniform in `0..n` (Lemire's multiply-shift; the bias is below 2^-40 for our sizes).
    pub fn below(&mut self, n: usize) -> usize {
        ((self.next_u64() as u128 * n as u128) >> 64) as usize
    }
}

/// The seed of one random stream (`stream` names its purpose) of one prompt, from the run's
/// seed and the prompt's id: a prompt's data never depend on which other prompts are in the
/// run, on batching, on sharding or on resuming.
pub fn stream_seed(run_seed: u64, stream: &str, prompt_id: &str) -> u64 {
    let mut h = Sha256::new();
    h.update(run_seed.to_le_bytes());
    h.update(stream.as_bytes());
    h.update([0]);
    h.update(prompt_id.as_bytes());
    let d = h.finalize();
    u64::from_le_bytes(d[..8].try_into().expect("8 bytes"))
}

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
            bail!("split '{}' asked for, but no split sizes are given (use split = \"all\" or set split_sizes)", self.name);
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
    fn splitmix_matches_its_published_sequence() {
        // First outputs for seed 1234567 from the reference C implementation.
        let mut g = SplitMix64::new(1234567);
        assert_eq!(g.next_u64(), 6457827717110365317);
        assert_eq!(g.next_u64(), 3203168211198807973);
    }

    #[test]
    fn parts_are_disjoint_cover_and_depend_on_the_seed() {
        let parts: Vec<Vec<usize>> = ["train", "dev", "test"].iter().map(|n| spec(n, 0).indices(5000).unwrap()).collect();
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
        assert!(format!("{:#}", spec("validation", 0).indices(5000).unwrap_err()).contains("unknown split 'validation'"));
        assert!(format!("{:#}", spec("train", 0).indices(100).unwrap_err()).contains("more than the 100 rows"));
        let no_sizes = SplitSpec { sizes: vec![], ..spec("train", 0) };
        assert!(no_sizes.indices(10).is_err());
    }
}
