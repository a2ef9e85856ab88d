//! EasySpec's drafter (`../shared/papers/easyspec.txt`): the draft model runs with a
//! layer-parallel ("fuzzy") strategy, and its cache entries written that way are recomputed
//! exactly ("bonus calibration") when the calibration policy says so. Candidates are sampled
//! from the very q (fuzzy or exact) the verifier tests, so speculative decoding with this
//! drafter stays lossless at any temperature; only the acceptance rate depends on the fuzz.

use super::candidate::Candidate;
use super::drafter::{DraftCache, Drafter, LastPosition, Pick};
use super::round::DraftRound;
use crate::cache::KvCache;
use crate::layer_groups::LayerGroups;
use crate::model::Transformer;
use anyhow::{Result, ensure};

/// When the drafter recomputes its inexact cache entries.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Calibration {
    /// Never: even the prompt is prefilled fuzzily; errors accumulate in the cache.
    Never,
    /// The prompt is prefilled exactly, every later forward is fuzzy.
    PrefillOnly,
    /// Every round starts with one exact forward over every token since the cache's exact
    /// watermark (the accepted drafts and the bonus token): the paper's description. The first
    /// candidate of each round is then exact.
    EveryRound,
    /// As `every_round`, but only after a round with a rejected draft (and at the prefill):
    /// the reference code's default.
    EveryMismatch,
}

impl Calibration {
    pub fn name(self) -> &'static str {
        match self {
            Self::Never => "never",
            Self::PrefillOnly => "prefill_only",
            Self::EveryRound => "every_round",
            Self::EveryMismatch => "every_mismatch",
        }
    }
}

impl std::str::FromStr for Calibration {
    type Err = anyhow::Error;
    fn from_str(s: &str) -> Result<Self> {
        Ok(match s {
            "never" => Self::Never,
            "prefill_only" => Self::PrefillOnly,
            "every_round" => Self::EveryRound,
            "every_mismatch" => Self::EveryMismatch,
            _ => anyhow::bail!("calibration '{s}': expected never, prefill_only, every_round or every_mismatch"),
        })
    }
}

/// How candidates are picked when sampling.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Compat {
    /// Candidates are draws from the q the verifier tests: lossless.
    #[default]
    Lossless,
    /// As EasySpec's reference code: the argmax of q, tested with min(1, p/q) as if it were a
    /// draw. Not lossless at temperature > 0; only for showing that.
    Reference,
}

impl std::str::FromStr for Compat {
    type Err = anyhow::Error;
    fn from_str(s: &str) -> Result<Self> {
        Ok(match s {
            "lossless" => Self::Lossless,
            "reference" => Self::Reference,
            _ => anyhow::bail!("compat '{s}': expected lossless or reference"),
        })
    }
}

/// The layer-parallel drafter.
pub struct FuzzyDrafter<'m> {
    model: &'m Transformer,
    groups: LayerGroups,
    calibration: Calibration,
    /// Threads that run a group's attentions (never changes the numerics).
    workers: usize,
    compat: Compat,
    state: DraftCache,
    /// The last round's proposals: position of the first and the tokens.
    proposed: (usize, Vec<u32>),
}

impl<'m> FuzzyDrafter<'m> {
    pub fn new(model: &'m Transformer, groups: LayerGroups, calibration: Calibration) -> Result<Self> {
        let layers = model.config().num_hidden_layers;
        ensure!(
            groups.layers() == layers,
            "layer strategy '{groups}' is for {} layers, the draft model has {layers}",
            groups.layers()
        );
        Ok(Self {
            model,
            groups,
            calibration,
            workers: 1,
            compat: Compat::Lossless,
            state: DraftCache::new(model),
            proposed: (0, Vec::new()),
        })
    }

    /// Runs each group's attentions on up to `workers` threads.
    pub fn with_workers(mut self, workers: usize) -> Self {
        self.workers = workers.max(1);
        self
    }

    /// Picks candidates as `compat` says (see [`Compat::Reference`]).
    pub fn with_compat(mut self, compat: Compat) -> Self {
        self.compat = compat;
        self
    }

    /// The draft cache (its exact watermark shows what calibration would recompute).
    pub fn cache(&self) -> &KvCache {
        &self.state.cache
    }

    /// Whether a proposal of the last round is not in `committed` (a rejection).
    fn mismatch(&self, committed: &[u32]) -> bool {
        let (at, tokens) = &self.proposed;
        tokens.iter().enumerate().any(|(i, t)| committed.get(at + i).is_some_and(|c| c != t))
    }
}

impl Drafter for FuzzyDrafter<'_> {
    fn draft(&mut self, round: DraftRound<'_>) -> Result<Vec<Candidate>> {
        if round.max == 0 {
            return Ok(Vec::new());
        }
        let committed = round.committed;
        let prefill = self.state.fed.is_empty();
        let exact_first = match self.calibration {
            Calibration::Never => false,
            Calibration::PrefillOnly => prefill,
            Calibration::EveryRound => true,
            Calibration::EveryMismatch => prefill || self.mismatch(committed),
        };
        // Feed what the cache lacks (at least the last committed token); a calibration starts
        // at the exact watermark, recomputing every inexact entry.
        let mut start = self.state.resume_at(committed);
        if exact_first {
            start = start.min(self.state.cache.precise_len());
            // Counted in the request's metrics (the exact strategy has nothing to calibrate).
            round.metrics.n_calibrations += usize::from(!self.groups.is_sequential());
        }
        let (model, groups, workers) = (self.model, &self.groups, self.workers);
        let pick = match self.compat {
            Compat::Lossless => Pick::Sample,
            Compat::Reference => Pick::Argmax,
        };
        let candidates = self.state.draft(round, start, pick, |tokens, index, _, cache| {
            let out = if index == 0 && exact_first {
                model.forward(tokens, cache)
            } else {
                model.forward_fuzzy(tokens, cache, groups, workers)
            };
            out.map(LastPosition::of)
        })?;
        self.proposed = (committed.len(), candidates.iter().map(|c| c.token).collect());
        Ok(candidates)
    }

    fn rollback(&mut self, valid: usize) {
        self.state.rollback(valid);
    }
}
