//! The target's hidden states handed to a feature-level drafter: the target scorer (of either
//! scheduler, every DSI worker) records the final hidden state of every position it forwards,
//! keyed by a hash of the tokens up to and including that position, so a drafter finds the
//! state of a prefix whichever forward computed it, and never one of another prefix.

use crate::sampling::stream_seed;
use std::collections::HashMap;
use std::sync::{Arc, Mutex};

/// The role that sets prefix hashes apart from the random streams' seeds.
const PREFIX_ROLE: u64 = 3;

/// Hashes of every prefix of `tokens`: element `i` names `tokens[..=i]`, continuing from
/// `seed` (the hash of the tokens before, 0 for none).
pub fn prefix_hashes(tokens: &[u32], seed: u64) -> Vec<u64> {
    let mut h = seed;
    tokens
        .iter()
        .map(|&t| {
            // The random streams' splitmix64 finaliser over the running hash and the token.
            h = stream_seed(h, t as u64, PREFIX_ROLE);
            h
        })
        .collect()
}

/// Hidden states by prefix hash, shared between the scorers that write and the drafter that
/// takes them.
#[derive(Clone, Default)]
pub struct FeatureTap(Arc<Mutex<HashMap<u64, Arc<[f32]>>>>);

impl FeatureTap {
    pub fn new() -> Self {
        Self::default()
    }

    /// Records the states of the positions named by `hashes` (`states` row `i` for `hashes[i]`).
    pub fn record(&self, hashes: &[u64], states: &[f32]) {
        if hashes.is_empty() {
            return;
        }
        let width = states.len() / hashes.len();
        let mut map = self.0.lock().expect("feature tap poisoned");
        for (h, row) in hashes.iter().zip(states.chunks_exact(width)) {
            map.insert(*h, row.into());
        }
    }

    /// The state of the prefix named `hash`, if a forward recorded it.
    pub fn get(&self, hash: u64) -> Option<Arc<[f32]>> {
        self.0.lock().expect("feature tap poisoned").get(&hash).cloned()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_prefix_hash_names_the_whole_prefix() {
        let a = prefix_hashes(&[1, 2, 3], 0);
        let b = prefix_hashes(&[1, 5, 3], 0);
        assert_eq!(a[0], b[0]);
        assert_ne!(a[1], b[1]);
        assert_ne!(a[2], b[2], "the same last token after another prefix");
        assert_eq!(prefix_hashes(&[3], a[1]), vec![a[2]], "continuing from a prefix's hash");
        let tap = FeatureTap::new();
        tap.record(&a, &[0.0, 1.0, 2.0, 3.0, 4.0, 5.0]);
        assert_eq!(&*tap.get(a[1]).unwrap(), &[2.0, 3.0]);
        assert!(tap.get(b[1]).is_none());
    }
}
