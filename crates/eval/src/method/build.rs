//! From a method's description to the decoder's parts, and one generation with them: the one
//! place where `specx eval`, `specx decode` and replay turn a [`Setting`] into running code.

use super::spec::{DrafterSpec, MethodSpec, PolicySpec, SchedulerSpec, Setting};
use anyhow::{Context, Result, bail};
use specx_decoder::Transformer;
use specx_decoder::coupling::Draws;
use specx_decoder::layer_groups::LayerGroups;
use specx_decoder::speculative::{
    AcceptanceHead, AcceptanceModel, AdaEdlParams, AdaEdlPolicy, BanditK, CalibratedPolicy, ConfidencePolicy,
    ConfidenceProductPolicy, CoupledSampler, Drafter, DsiConfig, DsiStats, DynamicK, FeatureDraft, FeatureHeadDrafter,
    FixedK, FuzzyDrafter, Generation, HeadPolicy, HeadRule, HybridDrafter, MatchRatePolicy, PMinPolicy, PlainDrafter,
    PrecomputedHead, PromptLookupDrafter, RejectionSampler, RocThreshold, SpecConfig, StopPolicy, SvipPolicy,
    ThresholdPlusPolicy, Verifier, generate_autoregressive_drawn, generate_dsi, generate_speculative,
};
use std::collections::{BTreeMap, HashMap};

/// Loaded acceptance heads by name (a checkpoint directory's name).
pub type Heads = BTreeMap<String, AcceptanceHead>;

/// Loaded feature heads by the spec settings name them with (a directory, or `default`).
pub type FeatureHeads = BTreeMap<String, FeatureDraft>;

/// Where a head policy's acceptance probabilities come from: a loaded head applied to the
/// draft's hidden states (decoding), or a replay's precomputed scores (the head's index in the
/// replay's head list).
#[derive(Clone, Copy)]
pub enum HeadBinding<'a> {
    Loaded(&'a Heads),
    Precomputed(&'a HashMap<String, usize>),
}

impl MethodSpec {
    /// A fresh drafter for a generation with `models`.
    pub fn drafter_for<'m>(&self, models: &RunModels<'m>) -> Result<Box<dyn Drafter + 'm>> {
        match &self.drafter {
            DrafterSpec::Feature { head } => {
                let draft = models
                    .feature_heads
                    .get(head)
                    .with_context(|| format!("{}: feature head '{head}' is not loaded", self.key()))?;
                Ok(Box::new(FeatureHeadDrafter::new(models.target, draft)))
            }
            DrafterSpec::Lookup { .. } => self.build_drafter(models.target),
            _ => self.build_drafter(models.draft.context("speculative methods need a draft model")?),
        }
    }

    /// A fresh drafter over `draft` (prompt lookup does not use it). The feature head drafts
    /// from the target's hidden states, so it is built with the target ([`MethodSpec::drafter_for`]).
    pub fn build_drafter<'m>(&self, draft: &'m Transformer) -> Result<Box<dyn Drafter + 'm>> {
        Ok(match &self.drafter {
            DrafterSpec::Plain => Box::new(PlainDrafter::new(draft)),
            DrafterSpec::EasySpec { strategy, calibration, workers, compat } => {
                let groups = LayerGroups::parse(strategy, draft.config().num_hidden_layers)
                    .with_context(|| format!("{}: strategy '{strategy}'", self.key()))?;
                Box::new(FuzzyDrafter::new(draft, groups, *calibration)?.with_workers(*workers).with_compat(*compat))
            }
            DrafterSpec::Lookup { ngram_min, ngram_max } => Box::new(PromptLookupDrafter::new(*ngram_min, *ngram_max)?),
            DrafterSpec::Hybrid { ngram_min, ngram_max } => {
                Box::new(HybridDrafter::new(PromptLookupDrafter::new(*ngram_min, *ngram_max)?, draft))
            }
            DrafterSpec::Feature { .. } => bail!(
                "{}: the feature head drafts from the target's hidden states: it is built with the target (drafter_for), not from the draft model",
                self.key()
            ),
        })
    }

    /// A fresh stop policy (its own state per request); a head policy takes its head from
    /// `heads`.
    pub fn build_policy(&self, heads: &Heads) -> Result<Box<dyn StopPolicy>> {
        self.build_policy_with(HeadBinding::Loaded(heads))
    }

    /// The one place a [`PolicySpec`] becomes a policy, for decoding and replay alike.
    pub fn build_policy_with(&self, heads: HeadBinding) -> Result<Box<dyn StopPolicy>> {
        Ok(match &self.policy {
            PolicySpec::Fixed { k } => Box::new(FixedK(*k)),
            PolicySpec::Head { head, threshold, min, max } | PolicySpec::HeadToken { head, threshold, min, max } => {
                let rule = HeadRule::new(*threshold, *min, *max);
                let per_token = matches!(self.policy, PolicySpec::HeadToken { .. });
                let missing = || format!("{}: head '{head}' is not loaded", self.key());
                match heads {
                    HeadBinding::Loaded(h) => head_policy(h.get(head).with_context(missing)?.clone(), rule, per_token),
                    HeadBinding::Precomputed(index) => {
                        head_policy(PrecomputedHead(*index.get(head).with_context(missing)?), rule, per_token)
                    }
                }
            }
            PolicySpec::Confidence { threshold, min, max } => {
                Box::new(ConfidencePolicy { threshold: *threshold as f32, min_candidates: *min, max_candidates: *max })
            }
            PolicySpec::ConfidenceProduct { threshold, min, max } => {
                Box::new(ConfidenceProductPolicy::new(*threshold as f32, *min, *max))
            }
            PolicySpec::Roc { threshold, max } => Box::new(RocThreshold::new(ConfidencePolicy {
                threshold: *threshold as f32,
                min_candidates: 1,
                max_candidates: *max,
            })),
            PolicySpec::PMin { p_min, n_max } => Box::new(PMinPolicy { p_min: *p_min as f32, n_max: *n_max }),
            PolicySpec::Dynamic { initial, cap } => Box::new(DynamicK::new(*initial, *cap)),
            PolicySpec::Svip { threshold, max } => {
                Box::new(SvipPolicy { threshold: *threshold as f32, max_candidates: *max })
            }
            PolicySpec::AdaEdl { lambda, gamma, max } => Box::new(AdaEdlPolicy::new(AdaEdlParams {
                lambda: *lambda,
                gamma: *gamma,
                max_candidates: *max,
                ..AdaEdlParams::DEFAULT
            })),
            PolicySpec::Bandit { arms } => Box::new(BanditK::new(arms.clone(), BanditK::EXPLORATION)),
            PolicySpec::ThresholdPlus { params, .. } => Box::new(ThresholdPlusPolicy::new(params.clone())?),
            PolicySpec::Calibrated { params, .. } => Box::new(CalibratedPolicy::new(params.clone())?),
            PolicySpec::MatchRate { threshold, max, model_k } => {
                Box::new(MatchRatePolicy::with_model_k(*threshold, *max, *model_k))
            }
            PolicySpec::Oracle => {
                bail!("the oracle needs the AR output in advance: it can only be replayed (specx eval replay)")
            }
        })
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
        if !matches!(self.drafter, DrafterSpec::Feature { .. }) {
            self.build_drafter(draft)?;
        }
        self.build_policy(heads)?;
        Ok(())
    }
}

/// SpecDec++'s rule over `head`, on the running product or (`per_token`) the newest prediction.
fn head_policy<H: AcceptanceModel + 'static>(head: H, rule: HeadRule, per_token: bool) -> Box<dyn StopPolicy> {
    Box::new(if per_token { HeadPolicy::per_token(head, rule) } else { HeadPolicy::new(head, rule) })
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
