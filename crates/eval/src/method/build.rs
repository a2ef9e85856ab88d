//! From a method's description to the decoder's parts, and one generation with them: the one
//! place where `specx eval`, `specx decode` and replay turn a [`Setting`] into running code.

use super::drafter::{DraftModels, FeatureHeads};
use super::policy::{HeadBinding, Heads};
use super::spec::{MethodSpec, SchedulerSpec, Setting};
use anyhow::Result;
use specx_decoder::Transformer;
use specx_decoder::coupling::Draws;
use specx_decoder::speculative::{
    CoupledSampler, Drafter, DsiConfig, DsiStats, Generation, RejectionSampler, SpecConfig, StopPolicy, Verifier,
    generate_autoregressive_drawn, generate_dsi, generate_speculative,
};

impl MethodSpec {
    /// A fresh drafter for a generation with `models`.
    pub fn drafter_for<'m>(&self, models: &RunModels<'m>) -> Result<Box<dyn Drafter + 'm>> {
        self.build_drafter_from(DraftModels {
            draft: models.draft,
            target: Some(models.target),
            feature_heads: Some(models.feature_heads),
            earlier_outputs: models.earlier_outputs,
        })
    }

    /// A fresh drafter over `draft` and `earlier_outputs` (the feature head, which drafts from
    /// the target's hidden states, is built with the target by [`MethodSpec::drafter_for`]).
    pub fn build_drafter<'m>(
        &self,
        draft: &'m Transformer,
        earlier_outputs: &'m [Vec<u32>],
    ) -> Result<Box<dyn Drafter + 'm>> {
        self.build_drafter_from(DraftModels { draft: Some(draft), target: None, feature_heads: None, earlier_outputs })
    }

    fn build_drafter_from<'m>(&self, models: DraftModels<'m>) -> Result<Box<dyn Drafter + 'm>> {
        self.drafter.build(models).map_err(|e| anyhow::anyhow!("{}: {e:#}", self.key()))
    }

    /// A fresh stop policy (its own state per request); a head policy takes its head from
    /// `heads`.
    pub fn build_policy(&self, heads: &Heads) -> Result<Box<dyn StopPolicy>> {
        self.build_policy_with(HeadBinding::Loaded(heads))
    }

    /// The one place a [`PolicySpec`] becomes a policy, for decoding and replay alike.
    pub fn build_policy_with(&self, heads: HeadBinding) -> Result<Box<dyn StopPolicy>> {
        self.policy.build(heads).map_err(|e| anyhow::anyhow!("{}: {e:#}", self.key()))
    }

    /// DSI's settings: its servers, blocks as long as the policy allows.
    pub fn dsi(&self) -> Option<DsiConfig> {
        match self.scheduler {
            SchedulerSpec::Dsi { servers } => Some(DsiConfig::new(servers, self.policy.max_candidates())),
            SchedulerSpec::Sequential => None,
        }
    }

    /// What needs the models: the strategy covers the draft's layers and the head is loaded.
    /// Building the parts once says it before the first prompt runs.
    pub fn check_models(&self, draft: &Transformer, heads: &Heads) -> Result<()> {
        if self.drafter.runs_draft_model() {
            self.build_drafter(draft, &[])?;
        }
        self.build_policy(heads)?;
        Ok(())
    }
}

/// The models a generation runs on: the target, DSI's target workers (one per worker, on their
/// devices; empty when the workers share `target`) and the draft (`None` for AR).
#[derive(Clone, Copy)]
pub struct RunModels<'a> {
    pub target: &'a Transformer,
    pub workers: &'a [&'a Transformer],
    pub draft: Option<&'a Transformer>,
    pub heads: &'a Heads,
    pub feature_heads: &'a FeatureHeads,
    /// Earlier requests' outputs, oldest first (the suffix drafter's cross-request corpus).
    pub earlier_outputs: &'a [Vec<u32>],
}

/// One generation of `prompt` with `setting`: AR with the target alone, or the method's
/// drafter and a fresh stop policy under its scheduler with a lossless verifier (rejection
/// sampling, or the coupled sampler under coupled `draws`). DSI's runs also return the
/// scheduler's counters. DSI's workers verify on `models.workers` when there is one per
/// server, else all of them share `models.target`.
pub fn generate(
    setting: &Setting,
    models: RunModels<'_>,
    prompt: &[u32],
    cfg: &SpecConfig,
    draws: Draws,
    eos: &[u32],
) -> Result<(Generation, Option<DsiStats>)> {
    let Some(spec) = setting.spec() else {
        return Ok((generate_autoregressive_drawn(models.target, prompt, cfg, eos, draws)?, None));
    };
    let mut drafter = spec.drafter_for(&models)?;
    let mut policy = spec.build_policy(models.heads)?;
    let mut verifier: Box<dyn Verifier> = match draws {
        Draws::Independent => Box::new(RejectionSampler),
        Draws::Coupled => Box::new(CoupledSampler),
    };
    match spec.dsi() {
        None => Ok((
            generate_speculative(
                models.target,
                drafter.as_mut(),
                policy.as_mut(),
                verifier.as_mut(),
                prompt,
                cfg,
                eos,
            )?,
            None,
        )),
        Some(dsi) => {
            let shared = vec![models.target; dsi.servers];
            let targets = if models.workers.len() == dsi.servers { models.workers } else { &shared[..] };
            let g =
                generate_dsi(targets, drafter.as_mut(), policy.as_mut(), verifier.as_mut(), prompt, cfg, &dsi, eos)?;
            Ok((g.generation, Some(g.stats)))
        }
    }
}
