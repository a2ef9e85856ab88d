//! The suffix drafter's cross-request corpus in an eval run (SuffixDecoding's global tree of
//! earlier responses). A unit's earlier requests are the units before it in the run's fixed
//! order that share its sampling setting and seed (one stream of requests, each prompt once)
//! and that the same process runs: with `--shard` or one part per device, each part is its
//! own serving history. Their outputs are their AR outputs, which every lossless method
//! reproduces under greedy decoding and which a unit file keeps, so a resumed run rebuilds
//! the same corpus from the unit files it finds. Bounded: the last `bound` per stream
//! (the largest `cached_requests` of the run's settings). A replay gives each unit every
//! earlier unit of the run it replays, as an unsharded run would have.

use crate::common::results::{EarlierRecord, UnitFile, UnitKey, tokens_sha256};
use crate::method::{DrafterSpec, Setting};
use anyhow::{Result, bail};
use std::collections::BTreeMap;
use std::path::Path;

/// The most earlier outputs any of `settings` matches (0: none reads them).
pub fn bound(settings: &[Setting]) -> usize {
    settings
        .iter()
        .filter_map(Setting::spec)
        .filter_map(|m| match &m.drafter {
            DrafterSpec::Suffix(s) => Some(s.cached_requests),
            _ => None,
        })
        .max()
        .unwrap_or(0)
}

/// The AR outputs of the units one process runs, by unit index, for the units after them.
pub struct EarlierOutputs<'u> {
    bound: usize,
    /// The units this process runs, in run order.
    held: Vec<&'u UnitKey>,
    outputs: BTreeMap<usize, Vec<u32>>,
}

impl<'u> EarlierOutputs<'u> {
    /// Empty for `held` (in run order), keeping at most `bound` outputs per stream; the
    /// outputs of units already done are read from their files in `dir`.
    pub fn new(bound: usize, held: &[&'u UnitKey], dir: &Path) -> Result<Self> {
        let mut outputs = BTreeMap::new();
        if bound > 0 {
            for u in held {
                if let Some(file) = UnitFile::read(dir, u)? {
                    outputs.insert(u.index, file.ar_tokens);
                }
            }
        }
        Ok(Self { bound, held: held.to_vec(), outputs })
    }

    /// Every unit of `files` (a finished run's, in unit order) with its output: a replay's
    /// corpus, as one process running them all in order would have had it.
    pub fn of_files(bound: usize, files: &'u [UnitFile]) -> Self {
        let outputs = if bound > 0 {
            files.iter().map(|f| (f.unit.index, f.ar_tokens.clone())).collect()
        } else {
            BTreeMap::new()
        };
        Self { bound, held: files.iter().map(|f| &f.unit).collect(), outputs }
    }

    /// Whether any setting reads earlier outputs.
    pub fn enabled(&self) -> bool {
        self.bound > 0
    }

    /// Keeps `u`'s AR output for the units after it.
    pub fn push(&mut self, u: &UnitKey, ar_tokens: &[u32]) {
        if self.enabled() {
            self.outputs.insert(u.index, ar_tokens.to_vec());
        }
    }

    /// The earlier outputs `u` may match, oldest first, and their record; refused when an
    /// earlier unit of its stream has not run (units run in order, so a missing one means
    /// its file was removed while a later one was kept).
    pub fn for_unit(&self, u: &UnitKey) -> Result<(Vec<Vec<u32>>, Option<EarlierRecord>)> {
        if !self.enabled() {
            return Ok((Vec::new(), None));
        }
        let stream: Vec<&UnitKey> = self
            .held
            .iter()
            .copied()
            .filter(|e| e.index < u.index && e.sampling == u.sampling && e.seed == u.seed)
            .collect();
        let kept = &stream[stream.len().saturating_sub(self.bound)..];
        let mut texts = Vec::with_capacity(kept.len());
        for e in kept {
            let Some(t) = self.outputs.get(&e.index) else {
                bail!(
                    "{} {} ({} s{}): the earlier unit {} {} has no unit file, so the suffix drafter's earlier outputs cannot be rebuilt; rerun it first (delete the later unit files) or start a fresh run directory",
                    u.dataset,
                    u.prompt_id,
                    u.sampling,
                    u.seed,
                    e.dataset,
                    e.prompt_id
                )
            };
            texts.push(t.clone());
        }
        let record = EarlierRecord {
            units: kept.iter().map(|e| format!("{}/{}", e.dataset, e.prompt_id)).collect(),
            sha256: tokens_sha256(&texts.concat()),
        };
        Ok((texts, Some(record)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn unit(index: usize, prompt: &str, sampling: &str) -> UnitKey {
        UnitKey {
            index,
            dataset: "set".into(),
            prompt_index: index,
            prompt_id: prompt.into(),
            sampling: sampling.into(),
            seed: 0,
        }
    }

    #[test]
    fn a_unit_sees_the_last_outputs_of_its_own_stream_before_it() {
        let units = [unit(0, "a", "greedy"), unit(1, "a", "t1"), unit(2, "b", "greedy"), unit(3, "c", "greedy")];
        let held: Vec<&UnitKey> = units.iter().collect();
        let dir = tempfile::tempdir().unwrap();
        let mut e = EarlierOutputs::new(1, &held, dir.path()).unwrap();
        assert!(e.for_unit(&units[0]).unwrap().0.is_empty());
        assert!(e.for_unit(&units[2]).is_err(), "unit 0 has not run");
        for (u, t) in units.iter().zip([vec![1], vec![2], vec![3], vec![4]]) {
            e.push(u, &t);
        }
        let (texts, record) = e.for_unit(&units[3]).unwrap();
        assert_eq!(texts, vec![vec![3]], "the last one of the greedy stream, not the t1 unit");
        assert_eq!(record.unwrap().units, vec!["set/b"]);
        let off = EarlierOutputs::new(0, &held, dir.path()).unwrap();
        assert_eq!(off.for_unit(&units[3]).unwrap(), (Vec::new(), None));
    }
}
