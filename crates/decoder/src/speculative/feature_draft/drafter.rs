//! The feature-level drafter: an EAGLE-style [`FeatureHead`] drafts a chain from the target's
//! own hidden states, which the target scorer records ([`FeatureTap`]) during prefill and
//! verification.
//!
//! The head keeps a KV cache of positions; position `j` was fed the pair `(f_j, e(s_{j+1}))`.
//! A round first feeds the committed positions the cache lacks, each with the target's state
//! `f_j` when a forward recorded it (always, under the sequential scheduler: the last
//! verification covered them), else the head's own prediction of it (DSI's speculative chain
//! ahead of verification). Positions fed a predicted state are fed again once the target's is
//! known: the head's cache ends up computed from the target's states, as EAGLE recomputes
//! accepted tokens. When no forward of the target has read the prompt yet (DSI drafts before
//! its first verification), the drafter runs the target over it once. Then the chain: the last output's scores give a candidate, which is fed
//! with that output as its state, and so on.
//!
//! The draft distribution `q` is the softmax of the shared output head over the head's subset
//! (zero elsewhere), warped as the target's, and each candidate is drawn from it: lossless by
//! rejection sampling, like every drafter.

use super::network::{FEATURE_HEAD_DIM, FeatureHead, FeatureHeadCache, FeatureHeadSpec, causal_mask_after};
use super::tap::{FeatureTap, prefix_hashes};
use crate::fsutil::short_hash;
use crate::model::Transformer;
use crate::speculative::candidate::Candidate;
use crate::speculative::drafter::{Drafter, Pick, ask_policy, draw_candidate};
use crate::speculative::round::DraftRound;
use crate::speculative::scorer::common_prefix_len;
use anyhow::{Context, Result, ensure};
use burn::tensor::{Tensor, TensorData};
use std::path::Path;
use std::time::Instant;

/// A loaded feature head with the target's output head restricted to the head's subset
/// (loaded once, shared by every request's drafter).
pub struct FeatureDraft {
    pub head: FeatureHead,
    pub spec: FeatureHeadSpec,
    /// The target with its output head cut to the subset (weights shared, rows copied).
    scores: Transformer,
}

impl FeatureDraft {
    /// Loads the head in `dir` for `target`; `target_sha256` (the target file's, when known)
    /// must be the one the head was trained on.
    pub fn load(dir: &Path, target: &Transformer, target_sha256: Option<&str>) -> Result<Self> {
        let (head, spec, ids) = FeatureHead::load(dir, target.device())?;
        let h = target.config().hidden_size;
        ensure!(
            spec.hidden_size == h,
            "{}: the feature head reads hidden states of width {}, the target's are {h}",
            dir.display(),
            spec.hidden_size
        );
        if let Some(sha) = target_sha256 {
            ensure!(
                sha == spec.target_model_sha256,
                "{}: the feature head was trained on the target with sha256 {}, not this one ({})",
                dir.display(),
                short_hash(&spec.target_model_sha256),
                short_hash(sha)
            );
        }
        let scores = target
            .clone()
            .restrict_vocab(&ids)
            .with_context(|| format!("{}: the head's vocabulary subset", dir.display()))?;
        Ok(Self { head, spec, scores })
    }

    /// The shared output head's scores of a predicted state: full vocabulary, -inf outside
    /// the subset.
    pub fn scores(&self, state: &[f32]) -> Result<Vec<f32>> {
        let x = Tensor::<3>::from_data(TensorData::new(state.to_vec(), [1, 1, state.len()]), self.scores.device());
        self.scores.logits(x).into_data().try_to_vec::<f32>().map_err(|e| anyhow::anyhow!("{e:?}"))
    }

    /// A head over `target` from parts (tests).
    pub fn from_parts(head: FeatureHead, spec: FeatureHeadSpec, ids: &[u32], target: &Transformer) -> Result<Self> {
        Ok(Self { head, spec, scores: target.clone().restrict_vocab(ids)? })
    }
}

/// Drafts with a [`FeatureDraft`] from the target's hidden states.
pub struct FeatureHeadDrafter<'m> {
    target: &'m Transformer,
    draft: &'m FeatureDraft,
    cache: FeatureHeadCache,
    /// The tokens the cache's positions were fed: `s_0..=s_n` for `n` positions (empty for none).
    seq: Vec<u32>,
    /// Per position: fed the target's state (true) or a predicted one.
    exact: Vec<bool>,
    /// Per position: the head's output (the predicted state of the next position).
    outputs: Vec<Vec<f32>>,
    tap: FeatureTap,
}

impl<'m> FeatureHeadDrafter<'m> {
    pub fn new(target: &'m Transformer, draft: &'m FeatureDraft) -> Self {
        let device = target.device();
        let heads = draft.spec.width / FEATURE_HEAD_DIM;
        let empty = || Tensor::<3>::zeros([heads, 0, FEATURE_HEAD_DIM], device);
        Self {
            target,
            draft,
            cache: FeatureHeadCache { keys: empty(), values: empty() },
            seq: Vec::new(),
            exact: Vec::new(),
            outputs: Vec::new(),
            tap: FeatureTap::new(),
        }
    }

    /// Records the target's states of every prefix of `text` (one target forward over it):
    /// what a replay does, which knows the whole committed text in advance, so that each round
    /// finds the states a verification would have recorded.
    pub fn read_text(&mut self, text: &[u32]) -> Result<()> {
        let mut cache = self.target.new_cache(1);
        let (_, states) = self
            .target
            .forward_scores_hidden(text, &mut cache, 1, None, true)?
            .expect("no cancel flag, never cancelled");
        self.tap.record(&prefix_hashes(text, 0), &states);
        Ok(())
    }

    fn positions(&self) -> usize {
        self.exact.len()
    }

    /// Keeps the first `n` positions.
    fn truncate(&mut self, n: usize) {
        self.cache.truncate(n);
        self.exact.truncate(n);
        self.outputs.truncate(n);
        self.seq.truncate(if n == 0 { 0 } else { n + 1 });
    }

    /// Feeds positions `start..start + m` with `states` (`[m, hidden]`) and the embeddings of
    /// `next` (their next tokens); records their outputs.
    fn feed(&mut self, states: Vec<f32>, next: &[u32], exact: bool) -> Result<()> {
        let (start, m, h) = (self.positions(), next.len(), self.draft.spec.hidden_size);
        let device = self.target.device();
        let x = Tensor::<2>::from_data(TensorData::new(states, [m, h]), device);
        let e = self.target.embedding_rows(next)?;
        let positions: Vec<usize> = (start..start + m).collect();
        let mask = (m > 1).then(|| causal_mask_after(start, m, device));
        let out = self.draft.head.forward(x, e, &positions, mask, Some(&mut self.cache));
        let out = out.into_data().try_to_vec::<f32>().map_err(|e| anyhow::anyhow!("{e:?}"))?;
        self.outputs.extend(out.chunks_exact(h).map(<[f32]>::to_vec));
        self.exact.extend(std::iter::repeat_n(exact, m));
        Ok(())
    }

    /// Feeds the committed positions the cache lacks (up to the one before the last token):
    /// runs of positions with the target's states in one forward each, a position without one
    /// with the previous position's output.
    fn catch_up(&mut self, committed: &[u32]) -> Result<()> {
        let hashes = prefix_hashes(committed, 0);
        let usable = committed.len() - 1;
        let mut keep = common_prefix_len(&self.seq, committed).saturating_sub(1).min(self.positions()).min(usable);
        if let Some(j) = (0..keep).find(|&j| !self.exact[j] && self.tap.get(hashes[j]).is_some()) {
            keep = j;
        }
        self.truncate(keep);
        let mut j = keep;
        while j < usable {
            let mut states = Vec::new();
            let mut end = j;
            while end < usable {
                match self.tap.get(hashes[end]) {
                    Some(f) => states.extend_from_slice(&f),
                    None => break,
                }
                end += 1;
            }
            if end > j {
                self.feed(states, &committed[j + 1..end + 1], true)?;
            } else if let Some(previous) = self.outputs.last().cloned() {
                self.feed(previous, &committed[j + 1..j + 2], false)?;
                end = j + 1;
            } else {
                // Nothing to continue from: no forward of the target has read the prompt yet
                // (DSI drafts before its first verification). The head needs the target's
                // states of the prompt, so the target reads it here, once per request.
                self.read_text(&committed[..usable])?;
                continue;
            }
            j = end;
        }
        self.seq = committed.to_vec();
        Ok(())
    }
}

impl Drafter for FeatureHeadDrafter<'_> {
    fn draft(&mut self, round: DraftRound<'_>) -> Result<Vec<Candidate>> {
        if round.max == 0 {
            return Ok(Vec::new());
        }
        let DraftRound { committed, max, keep_first, policy, sampling, streams, eos, metrics, .. } = round;
        let t = Instant::now();
        self.catch_up(committed)?;
        metrics.draft_time += t.elapsed();
        policy.begin_round();
        let mut candidates = Vec::new();
        let mut state = self.outputs.last().cloned().context("the feature head has no position to draft from")?;
        loop {
            let t = Instant::now();
            let logits = self.draft.scores(&state)?;
            metrics.n_draft_calls += 1;
            let (c, confidence) =
                draw_candidate(&logits, sampling, streams, committed.len() + candidates.len(), Pick::Sample);
            metrics.draft_time += t.elapsed();
            let Some(stop) =
                ask_policy(policy, &c, confidence, &logits, &state, candidates.len(), keep_first, eos, max)?
            else {
                return Ok(candidates);
            };
            let token = c.token;
            candidates.push(c);
            if stop {
                return Ok(candidates);
            }
            let t = Instant::now();
            self.feed(state, &[token], false)?;
            self.seq.push(token);
            metrics.draft_time += t.elapsed();
            state = self.outputs.last().cloned().expect("fed above");
        }
    }

    fn rollback(&mut self, valid: usize) {
        let n = self.positions().min(valid.saturating_sub(1));
        self.truncate(n);
    }

    fn feature_tap(&self) -> Option<FeatureTap> {
        Some(self.tap.clone())
    }
}
