//! The decoding methods a user can pick, as combinations of the decoder's parts.

use anyhow::{bail, Context, Result};
use specx_decoder::layer_groups::LayerGroups;
use specx_decoder::speculative::{
    generate_autoregressive, generate_dsi, generate_dsi_on, generate_speculative, AcceptanceHead, Calibration, Compat, ConfidencePolicy, Drafter, DsiConfig, DsiStats,
    FixedK, FuzzyDrafter, Generation, HeadPolicy, HeadRule, PlainDrafter, RejectionSampler, SpecConfig, StopPolicy,
};
use specx_decoder::fsutil::short_hash;
use specx_decoder::{Device, LoadedModel, Transformer};
use std::path::Path;

/// Method names on the command line.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum MethodKind {
    /// Autoregressive decoding with the target alone (the reference).
    Ar,
    /// Speculative decoding with a fixed number of candidates K (SpecDec).
    Specdec,
    /// SpecDec++: stop drafting when the acceptance head predicts a rejection.
    Specdecpp,
    /// Stop drafting when the draft's confidence in its token falls below a threshold.
    Confidence,
    /// DSI: speculation parallelism, blocks of `lookahead` drafts verified by several target
    /// workers (threads) while drafting goes on.
    Dsi,
    /// EasySpec: the draft runs layer-parallel ("fuzzy") with bonus calibration, under fixed
    /// K, the SpecDec++ head (with a head) or the confidence rule (a threshold, no head), and
    /// DSI's scheduler when target workers are given.
    Easyspec,
    /// The oracle of SpecDec++ Theorem 4.1 (stop right before each mismatch): it needs the
    /// AR output in advance, so it exists only in replays of greedy runs.
    #[value(skip)]
    Oracle,
}

/// A fully specified method.
#[derive(Clone, Debug)]
pub enum Method {
    Autoregressive,
    SpecDec { k: usize },
    SpecDecPP { head: AcceptanceHead, rule: HeadRule },
    Confidence(ConfidencePolicy),
    /// DSI with `servers` target workers and fixed blocks of `lookahead` drafts.
    Dsi { servers: usize, lookahead: usize },
    /// EasySpec's drafter under `base`'s stop policy and scheduler (`base` is a speculative
    /// method with the plain drafter).
    EasySpec { fuzzy: FuzzySpec, base: Box<Method> },
}

/// EasySpec's drafter settings.
#[derive(Clone, Debug)]
pub struct FuzzySpec {
    pub groups: LayerGroups,
    pub calibration: Calibration,
    /// Threads running a group's attentions (timing only; the numerics never depend on it).
    pub workers: usize,
    pub compat: Compat,
}

impl FuzzySpec {
    pub fn name(&self) -> String {
        let workers = if self.workers > 1 { format!(" x{}", self.workers) } else { String::new() };
        let compat = if self.compat == Compat::Reference { " (reference compat)" } else { "" };
        format!("easyspec {} {}{workers}{compat}", self.groups, self.calibration.name())
    }
}

/// Loads an acceptance head: a checkpoint directory, or `random[:SEED]` for a randomly
/// initialised head (for testing the pipeline before a head is trained).
pub fn load_head(spec: &str, draft: &LoadedModel, device: &Device) -> Result<AcceptanceHead> {
    let hidden_size = draft.model.config().hidden_size;
    if let Some(rest) = spec.strip_prefix("random") {
        let seed: u64 = rest.strip_prefix(':').map_or(Ok(0), str::parse).context("--head random:SEED needs an integer seed")?;
        return Ok(AcceptanceHead::init_seeded(hidden_size, 3, false, seed, device));
    }
    let (head, hs) = AcceptanceHead::load(Path::new(spec), device)?;
    if hs.hidden_size != hidden_size {
        bail!("head {spec} reads hidden states of size {}, the draft model has {hidden_size}", hs.hidden_size);
    }
    // A head only means something on the hidden states of the draft it was trained on.
    if let Some(trained_on) = &hs.draft_model_sha256 {
        let this = draft.weights_sha256()?;
        if *trained_on != this {
            bail!("head {spec} was trained on the hidden states of another draft model (sha256 {}), not {} (sha256 {})", short_hash(trained_on), draft.path.display(), short_hash(&this));
        }
    }
    Ok(head)
}

impl Method {
    pub fn name(&self) -> String {
        match self {
            Self::Autoregressive => "ar".into(),
            Self::SpecDec { k } => format!("specdec K={k}"),
            Self::SpecDecPP { rule, .. } => format!("specdec++ h={} [{}, {}]", rule.threshold, rule.min_candidates, rule.max_candidates),
            Self::Confidence(c) => format!("confidence {} [{}, {}]", c.threshold, c.min_candidates, c.max_candidates),
            Self::Dsi { servers, lookahead } => format!("dsi SP={servers} k={lookahead}"),
            Self::EasySpec { fuzzy, base } => format!("{} + {}", fuzzy.name(), base.name()),
        }
    }

    /// A fresh stop policy of this method (`None` for AR).
    pub fn policy(&self) -> Option<Box<dyn StopPolicy>> {
        match self {
            Self::Autoregressive => None,
            Self::SpecDec { k: lookahead } | Self::Dsi { lookahead, .. } => Some(Box::new(FixedK(*lookahead))),
            Self::SpecDecPP { head, rule } => Some(Box::new(HeadPolicy::new(head.clone(), *rule))),
            Self::Confidence(c) => Some(Box::new(*c)),
            Self::EasySpec { base, .. } => base.policy(),
        }
    }

    /// A fresh drafter of this method over `draft`.
    pub fn drafter<'m>(&self, draft: &'m Transformer) -> Result<Box<dyn Drafter + 'm>> {
        Ok(match self {
            Self::EasySpec { fuzzy, .. } => Box::new(FuzzyDrafter::new(draft, fuzzy.groups.clone(), fuzzy.calibration)?.with_workers(fuzzy.workers).with_compat(fuzzy.compat)),
            _ => Box::new(PlainDrafter::new(draft)),
        })
    }

    /// The scheduler's DSI settings, if it is DSI's.
    pub fn dsi(&self) -> Option<DsiConfig> {
        match self {
            Self::Dsi { servers, lookahead } => Some(DsiConfig::new(*servers, *lookahead)),
            Self::EasySpec { base, .. } => base.dsi(),
            _ => None,
        }
    }

    /// Generates from `prompt` with this method.
    pub fn run(&self, target: &Transformer, draft: Option<&Transformer>, prompt: &[u32], cfg: &SpecConfig, eos: &[u32]) -> Result<Generation> {
        Ok(self.run_with_workers(target, &[], draft, prompt, cfg, eos)?.0)
    }

    /// [`Method::run`] where DSI's worker `w` verifies on `workers[w]` (the target loaded on
    /// one device per worker) when there is one per worker; otherwise the DSI workers share
    /// `target`, which every other method uses. DSI's runs also return its scheduler's
    /// counters (tasks, preemptions, stale results, waits, worker busy times).
    pub fn run_with_workers(&self, target: &Transformer, workers: &[&Transformer], draft: Option<&Transformer>, prompt: &[u32], cfg: &SpecConfig, eos: &[u32]) -> Result<(Generation, Option<DsiStats>)> {
        match self.policy() {
            None => Ok((generate_autoregressive(target, prompt, cfg, eos)?, None)),
            Some(mut policy) => {
                let draft = draft.context("speculative methods need a draft model")?;
                let mut drafter = self.drafter(draft)?;
                if let Some(dsi) = self.dsi() {
                    let g = if workers.len() != dsi.servers {
                        generate_dsi(target, drafter.as_mut(), policy.as_mut(), &mut RejectionSampler, prompt, cfg, &dsi, eos)?
                    } else {
                        generate_dsi_on(workers, drafter.as_mut(), policy.as_mut(), &mut RejectionSampler, prompt, cfg, &dsi, eos)?
                    };
                    return Ok((g.generation, Some(g.stats)));
                }
                Ok((generate_speculative(target, drafter.as_mut(), policy.as_mut(), &mut RejectionSampler, prompt, cfg, eos)?, None))
            }
        }
    }
}
