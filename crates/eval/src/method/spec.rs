//! A method as data: what a results row was run with, what a config's grid expands to and what
//! `specx decode`'s flags parse to. A speculative method is a triple of the decoder's parts,
//! drafter x stop policy x scheduler; AR is the target alone.

use anyhow::{Context, Result, bail, ensure};
use serde::{Deserialize, Serialize};
use specx_decoder::DraftTransform;
use specx_decoder::layer_groups::LayerGroups;
use specx_decoder::speculative::{Calibration, Compat, HeadRule};

/// The head name of a checkpoint directory: its last path component (what settings name).
pub fn head_name(dir: &std::path::Path) -> String {
    dir.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_else(|| dir.display().to_string())
}

/// What one results row was run with.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "method", rename_all = "lowercase")]
pub enum Setting {
    /// Autoregressive decoding with the target alone: every unit's reference.
    Ar,
    /// A speculative method.
    Speculative(MethodSpec),
}

/// A speculative method: who proposes (with which draft), when drafting stops, how
/// verification is scheduled.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct MethodSpec {
    pub drafter: DrafterSpec,
    /// The draft model the drafter runs, as loaded or made cheaper (a vocabulary subset, a
    /// requantization): a drafter option, composable with every policy and scheduler.
    #[serde(default, skip_serializing_if = "DraftTransform::is_identity")]
    pub draft: DraftTransform,
    pub policy: PolicySpec,
    pub scheduler: SchedulerSpec,
}

/// Who proposes the candidates.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "lowercase")]
pub enum DrafterSpec {
    /// The draft model decoding autoregressively with its own KV cache.
    Plain,
    /// EasySpec's layer-parallel ("fuzzy") draft with bonus calibration.
    EasySpec {
        /// Layer groups: `lp1`..`lp5` (the paper's Table 6) or its notation `0,1-3,4-7,...`.
        strategy: String,
        calibration: Calibration,
        /// Threads running a group's attentions (timing only: the tokens never depend on it).
        workers: usize,
        /// `reference` picks the argmax of q as EasySpec's code does (not lossless at T > 0).
        #[serde(default, skip_serializing_if = "is_lossless")]
        compat: Compat,
    },
    /// Prompt lookup: the continuation of the most recent earlier occurrence of the text's last
    /// n tokens, n from `ngram_max` down to `ngram_min`; no draft model (a point-mass proposal).
    Lookup { ngram_min: usize, ngram_max: usize },
    /// Prompt lookup when the text's last n tokens occurred before, else the draft model.
    Hybrid { ngram_min: usize, ngram_max: usize },
    /// An EAGLE-style feature head (`head`: a directory, or `default` for the shipped one)
    /// drafting from the target's hidden states; no draft model.
    Feature { head: String },
}

fn is_lossless(c: &Compat) -> bool {
    *c == Compat::Lossless
}

/// When drafting stops.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "lowercase")]
pub enum PolicySpec {
    /// Always `k` candidates (SpecDec).
    Fixed { k: usize },
    /// SpecDec++: stop when the acceptance head `head` (a head's name) predicts a rejection
    /// with probability above `threshold`, within `[min, max]` candidates.
    Head { head: String, threshold: f64, min: usize, max: usize },
    /// SpecDec++'s rule on the newest head prediction alone: stop when the latest scored
    /// candidate's predicted chance of a rejection passes `threshold`.
    #[serde(rename = "head_token")]
    HeadToken { head: String, threshold: f64, min: usize, max: usize },
    /// HF transformers' confidence criterion: stop when the draft's probability of its token
    /// falls below `threshold` (the token is kept).
    Confidence { threshold: f64, min: usize, max: usize },
    /// SpecDec++'s product rule on the draft's confidence: stop when 1 - the product of the
    /// round's confidences passes `threshold` (the token is kept).
    #[serde(rename = "confidence_product")]
    ConfidenceProduct { threshold: f64, min: usize, max: usize },
    /// HF's confidence criterion with its online ROC threshold update (from `threshold`).
    Roc { threshold: f64, max: usize },
    /// llama.cpp's `p_min`: stop and drop the token when the draft's top-10-renormalised top
    /// probability is below `p_min`; at most `n_max`.
    PMin { p_min: f64, n_max: usize },
    /// HF's dynamic schedule: K from `initial`, +2 after a fully accepted round, -1 otherwise,
    /// at most `cap`.
    Dynamic { initial: usize, cap: usize },
    /// SVIP: stop when sqrt(0.15 H) exceeds `threshold` (the token is kept); at most `max`.
    Svip { threshold: f64, max: usize },
    /// AdaEDL: drop the token when 1 - sqrt(gamma H) < lambda (adapted per round, from
    /// `lambda`); at most `max`.
    AdaEdl { lambda: f64, gamma: f64, max: usize },
    /// A UCB bandit over the round length K in `arms`, rewarded with each round's throughput.
    Bandit { arms: Vec<usize> },
    /// Threshold-plus: the confidence threshold moved by depth and this request's recent
    /// acceptance, with fitted parameters (`specx eval tune` writes them) named `name`.
    #[serde(rename = "threshold_plus")]
    ThresholdPlus { name: String, params: specx_decoder::speculative::ThresholdPlusParams },
    /// A calibrated acceptance model (logistic regression on the draft's statistics and depth,
    /// temperatures per depth) under the per-token or the product rule, with fitted
    /// parameters (`specx eval tune` writes them) named `name`.
    Calibrated { name: String, params: specx_decoder::speculative::CalibratedParams },
    /// For prompt lookup: draft while the estimated chance that every candidate so far is
    /// accepted stays at least `threshold` (a looked-up candidate: this request's acceptance
    /// rate of matches of its n-gram size; a draft model's: its confidence); a weak first match
    /// is dropped. At most `max`; the hybrid's draft-model rounds draft `model_k` when given.
    #[serde(rename = "matchrate")]
    MatchRate {
        threshold: f64,
        max: usize,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        model_k: Option<usize>,
    },
    /// SpecDec++ Theorem 4.1's oracle (stop right before each mismatch): it needs the AR
    /// output in advance, so it exists only in replays of greedy runs.
    Oracle,
}

/// How drafting and verification are interleaved.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "lowercase")]
pub enum SchedulerSpec {
    /// Draft a round, verify it in one target forward, commit, repeat.
    Sequential,
    /// DSI: blocks verified by `servers` target workers while drafting goes on; a block ends
    /// where the policy stops it (at most its `max`, `k` for fixed K).
    Dsi { servers: usize },
}

impl DrafterSpec {
    pub fn name(&self) -> &'static str {
        match self {
            Self::Plain => "plain",
            Self::EasySpec { .. } => "easyspec",
            Self::Lookup { .. } => "lookup",
            Self::Hybrid { .. } => "hybrid",
            Self::Feature { .. } => "feature",
        }
    }
}

impl PolicySpec {
    pub fn name(&self) -> &'static str {
        match self {
            Self::Fixed { .. } => "fixed",
            Self::Head { .. } => "head",
            Self::HeadToken { .. } => "head-token",
            Self::Confidence { .. } => "confidence",
            Self::ConfidenceProduct { .. } => "confidence-product",
            Self::Roc { .. } => "roc",
            Self::PMin { .. } => "pmin",
            Self::Dynamic { .. } => "dynamic",
            Self::Svip { .. } => "svip",
            Self::AdaEdl { .. } => "adaedl",
            Self::Bandit { .. } => "bandit",
            Self::ThresholdPlus { .. } => "threshold-plus",
            Self::Calibrated { .. } => "calibrated",
            Self::MatchRate { .. } => "matchrate",
            Self::Oracle => "oracle",
        }
    }

    /// The most candidates a round may hold (DSI's block length).
    pub fn max_candidates(&self) -> usize {
        match self {
            Self::Fixed { k } => *k,
            Self::Head { max, .. }
            | Self::HeadToken { max, .. }
            | Self::Confidence { max, .. }
            | Self::ConfidenceProduct { max, .. }
            | Self::Roc { max, .. }
            | Self::Svip { max, .. }
            | Self::AdaEdl { max, .. } => *max,
            Self::MatchRate { max, model_k, .. } => (*max).max(model_k.unwrap_or(0)),
            Self::PMin { n_max, .. } => *n_max,
            Self::Dynamic { cap, .. } => *cap,
            Self::Bandit { arms } => arms.iter().copied().max().unwrap_or(1),
            Self::ThresholdPlus { params, .. } => params.max_candidates,
            Self::Calibrated { params, .. } => params.max_candidates,
            Self::Oracle => usize::MAX,
        }
    }

    /// The name each policy had as a method of its own (fixed K is SpecDec's).
    fn key(&self) -> String {
        match self {
            Self::Fixed { k } => format!("specdec K={k}"),
            Self::Head { head, threshold, min, max } => format!("specdecpp {head} h={threshold} [{min},{max}]"),
            Self::HeadToken { head, threshold, min, max } => format!("head-token {head} h={threshold} [{min},{max}]"),
            Self::Confidence { threshold, min, max } => format!("confidence {threshold} [{min},{max}]"),
            Self::ConfidenceProduct { threshold, min, max } => format!("confidence-product {threshold} [{min},{max}]"),
            Self::Roc { threshold, max } => format!("roc {threshold} [1,{max}]"),
            Self::PMin { p_min, n_max } => format!("pmin {p_min} n_max={n_max}"),
            Self::Dynamic { initial, cap } => format!("dynamic K0={initial} cap={cap}"),
            Self::Svip { threshold, max } => format!("svip {threshold} [1,{max}]"),
            Self::AdaEdl { lambda, gamma, max } => format!("adaedl lambda={lambda} gamma={gamma} [1,{max}]"),
            Self::Bandit { arms } => {
                format!("bandit K={}", arms.iter().map(usize::to_string).collect::<Vec<_>>().join(","))
            }
            Self::ThresholdPlus { name, .. } => format!("threshold-plus {name}"),
            Self::Calibrated { name, .. } => format!("calibrated {name}"),
            Self::MatchRate { threshold, max, model_k: None } => format!("matchrate {threshold} [1,{max}]"),
            Self::MatchRate { threshold, max, model_k: Some(k) } => {
                format!("matchrate {threshold} [1,{max}] model K={k}")
            }
            Self::Oracle => "oracle".into(),
        }
    }
}

impl SchedulerSpec {
    pub fn name(&self) -> &'static str {
        match self {
            Self::Sequential => "sequential",
            Self::Dsi { .. } => "dsi",
        }
    }
}

impl MethodSpec {
    /// A plain drafter under `policy`, scheduled sequentially.
    pub fn plain(policy: PolicySpec) -> Self {
        Self {
            drafter: DrafterSpec::Plain,
            draft: DraftTransform::default(),
            policy,
            scheduler: SchedulerSpec::Sequential,
        }
    }

    /// A short unique name. The papers' methods keep the names they have always had
    /// (`specdec K=4`, `specdecpp w6d3 h=0.7 [2,20]`, `confidence 0.5 [2,20]`, `dsi SP=2 k=4`,
    /// `easyspec lp4 every_round | specdec K=4`); other combinations compose them:
    /// `dsi SP=2 specdecpp w6d3 h=0.7 [2,20]`; a cheaper draft adds its label:
    /// `specdec K=4 [draft v32768+q4_0]`.
    pub fn key(&self) -> String {
        let key = self.parts_key();
        if self.draft.is_identity() { key } else { format!("{key} [draft {}]", self.draft.label()) }
    }

    fn parts_key(&self) -> String {
        let body = match (&self.scheduler, &self.policy) {
            (SchedulerSpec::Sequential, p) => p.key(),
            (SchedulerSpec::Dsi { servers }, PolicySpec::Fixed { k }) => format!("dsi SP={servers} k={k}"),
            (SchedulerSpec::Dsi { servers }, p) => format!("dsi SP={servers} {}", p.key()),
        };
        match &self.drafter {
            DrafterSpec::Plain => body,
            DrafterSpec::EasySpec { strategy, calibration, workers, compat } => {
                let workers = if *workers > 1 { format!(" x{workers}") } else { String::new() };
                let compat = if *compat == Compat::Reference { " (reference compat)" } else { "" };
                format!("easyspec {strategy} {}{workers}{compat} | {body}", calibration.name())
            }
            DrafterSpec::Lookup { ngram_min, ngram_max } => format!("lookup n={ngram_min}..{ngram_max} | {body}"),
            DrafterSpec::Hybrid { ngram_min, ngram_max } => format!("lookup+draft n={ngram_min}..{ngram_max} | {body}"),
            DrafterSpec::Feature { head } => format!("feature {} | {body}", head_name(std::path::Path::new(head))),
        }
    }

    /// The paper a combination is grouped under: EasySpec, prompt lookup or the hybrid for their
    /// drafters, DSI for its scheduler, else the stop policy's (`specdec`, `specdecpp`,
    /// `confidence`, `roc`, `pmin`, `dynamic`, `svip`, `adaedl`, `bandit`, `matchrate`,
    /// `oracle`).
    pub fn family(&self) -> &'static str {
        match (&self.drafter, &self.scheduler, &self.policy) {
            (DrafterSpec::EasySpec { .. }, _, _) => "easyspec",
            (DrafterSpec::Lookup { .. }, _, _) => "lookup",
            (DrafterSpec::Hybrid { .. }, _, _) => "hybrid",
            (DrafterSpec::Feature { .. }, _, _) => "feature",
            (_, SchedulerSpec::Dsi { .. }, _) => "dsi",
            (_, _, PolicySpec::Fixed { .. }) => "specdec",
            (_, _, PolicySpec::Head { .. }) => "specdecpp",
            (_, _, p) => p.name(),
        }
    }

    /// The parts' own ranges, and the combinations no scheduler can run: said before any model
    /// loads. Model-dependent checks (the strategy against the draft's depth, the head's
    /// presence) come with the models (`MethodSpec::check_models`).
    pub fn check(&self) -> Result<()> {
        let key = self.key();
        self.draft.check().with_context(|| format!("{key}: the draft"))?;
        match &self.drafter {
            DrafterSpec::Plain => {}
            DrafterSpec::EasySpec { strategy, workers, .. } => {
                LayerGroups::check_syntax(strategy)
                    .map_err(|e| anyhow::anyhow!("{key}: strategy '{strategy}': {e:#}"))?;
                ensure!(*workers >= 1, "{key}: EasySpec needs at least 1 worker");
            }
            DrafterSpec::Lookup { ngram_min, ngram_max } | DrafterSpec::Hybrid { ngram_min, ngram_max } => {
                ensure!(
                    *ngram_min >= 1 && ngram_min <= ngram_max,
                    "{key}: prompt lookup needs 1 <= ngram_min <= ngram_max"
                );
                let lookup_only = matches!(self.drafter, DrafterSpec::Lookup { .. });
                ensure!(
                    !lookup_only || self.draft.is_identity(),
                    "{key}: prompt lookup runs no draft model, so a cheaper draft changes nothing"
                );
                // A lookup's proposal is a point mass (probability 1, entropy 0, no hidden
                // state): the rules that read the draft's distribution would never stop it.
                ensure!(
                    matches!(
                        self.policy,
                        PolicySpec::Fixed { .. }
                            | PolicySpec::Dynamic { .. }
                            | PolicySpec::Bandit { .. }
                            | PolicySpec::MatchRate { .. }
                    ),
                    "{key}: the {} policy reads the draft model's probabilities or hidden state, which prompt lookup does not have; use fixed, dynamic, bandit or matchrate",
                    self.policy.name()
                );
            }
            DrafterSpec::Feature { .. } => {
                ensure!(
                    self.draft.is_identity(),
                    "{key}: the feature head runs no draft model, so a cheaper draft changes nothing"
                );
                // An acceptance head reads the draft model's hidden states; matchrate reads
                // n-gram matches: neither exists here.
                ensure!(
                    !matches!(
                        self.policy,
                        PolicySpec::Head { .. }
                            | PolicySpec::HeadToken { .. }
                            | PolicySpec::MatchRate { .. }
                            | PolicySpec::Oracle
                    ),
                    "{key}: the {} policy needs a draft model's hidden states or n-gram matches, which the feature head does not have",
                    self.policy.name()
                );
            }
        }
        match &self.policy {
            PolicySpec::Fixed { k } => ensure!(*k >= 1, "{key}: fixed K needs k >= 1"),
            PolicySpec::Head { threshold, min, max, .. }
            | PolicySpec::HeadToken { threshold, min, max, .. }
            | PolicySpec::Confidence { threshold, min, max }
            | PolicySpec::ConfidenceProduct { threshold, min, max } => {
                ensure!((0.0..=1.0).contains(threshold), "{key}: the threshold must be in [0, 1]");
                ensure!(*min >= 1 && min <= max, "{key}: bounds [{min}, {max}]: need 1 <= min <= max");
            }
            PolicySpec::Roc { threshold, max } | PolicySpec::Svip { threshold, max } => {
                ensure!(
                    *threshold >= 0.0 && threshold.is_finite(),
                    "{key}: the threshold must be a non-negative number"
                );
                ensure!(*max >= 1, "{key}: at most {max} candidates: need at least 1");
            }
            PolicySpec::PMin { p_min, n_max } => {
                ensure!((0.0..=1.0).contains(p_min), "{key}: p_min must be in [0, 1]");
                ensure!(*n_max >= 1, "{key}: n_max must be at least 1");
            }
            PolicySpec::Dynamic { initial, cap } => {
                ensure!(*initial >= 1 && initial <= cap, "{key}: need 1 <= K0 <= cap")
            }
            PolicySpec::AdaEdl { lambda, gamma, max } => {
                ensure!((0.0..=1.0).contains(lambda) && *gamma > 0.0, "{key}: need lambda in [0, 1] and gamma > 0");
                ensure!(*max >= 1, "{key}: at most {max} candidates: need at least 1");
            }
            PolicySpec::MatchRate { threshold, max, model_k } => {
                ensure!((0.0..=1.0).contains(threshold), "{key}: the threshold must be in [0, 1]");
                ensure!(*max >= 1, "{key}: at most {max} candidates: need at least 1");
                ensure!(model_k.is_none_or(|k| k >= 1), "{key}: model K needs k >= 1");
                ensure!(
                    model_k.is_none() || matches!(self.drafter, DrafterSpec::Hybrid { .. }),
                    "{key}: model K sets the draft model's rounds, which only the hybrid drafter has"
                );
            }
            PolicySpec::ThresholdPlus { params, .. } => params.check().with_context(|| key.clone())?,
            PolicySpec::Calibrated { params, .. } => params.check().with_context(|| key.clone())?,
            PolicySpec::Bandit { arms } => ensure!(
                !arms.is_empty() && arms.iter().all(|&k| k >= 1),
                "{key}: a bandit needs arms of at least 1 candidate"
            ),
            PolicySpec::Oracle => {
                ensure!(
                    self.drafter == DrafterSpec::Plain && self.scheduler == SchedulerSpec::Sequential,
                    "{key}: the oracle replays the plain drafter's traces under the sequential scheduler only"
                )
            }
        }
        if let SchedulerSpec::Dsi { servers } = self.scheduler {
            ensure!(servers >= 1, "{key}: DSI needs at least 1 target server");
        }
        Ok(())
    }
}

impl Setting {
    pub fn ar() -> Self {
        Self::Ar
    }

    /// The speculative method, `None` for AR.
    pub fn spec(&self) -> Option<&MethodSpec> {
        match self {
            Self::Ar => None,
            Self::Speculative(m) => Some(m),
        }
    }

    /// A short unique name (`ar`, or the method's [`MethodSpec::key`]).
    pub fn key(&self) -> String {
        self.spec().map_or_else(|| "ar".into(), MethodSpec::key)
    }

    /// The group a row is summarised under (`ar`, or [`MethodSpec::family`]).
    pub fn family(&self) -> &'static str {
        self.spec().map_or("ar", MethodSpec::family)
    }

    /// [`MethodSpec::check`], and the oracle refused: a real run cannot know the AR output.
    pub fn check_runnable(&self) -> Result<()> {
        let Some(m) = self.spec() else { return Ok(()) };
        m.check()?;
        if m.policy == PolicySpec::Oracle {
            bail!("the oracle needs the AR output in advance: it can only be replayed (specx eval replay)");
        }
        Ok(())
    }

    pub fn drafter(&self) -> Option<&'static str> {
        self.spec().map(|m| m.drafter.name())
    }
    pub fn policy(&self) -> Option<&'static str> {
        self.spec().map(|m| m.policy.name())
    }
    pub fn scheduler(&self) -> Option<&'static str> {
        self.spec().map(|m| m.scheduler.name())
    }

    /// Fixed K's `k` (DSI's lookahead with fixed blocks).
    pub fn k(&self) -> Option<usize> {
        match self.spec()?.policy {
            PolicySpec::Fixed { k } => Some(k),
            _ => None,
        }
    }
    /// The acceptance head's name.
    pub fn head(&self) -> Option<&str> {
        match &self.spec()?.policy {
            PolicySpec::Head { head, .. } | PolicySpec::HeadToken { head, .. } => Some(head),
            _ => None,
        }
    }

    /// The feature head a feature-drafter setting drafts with.
    pub fn feature_head(&self) -> Option<&str> {
        match &self.spec()?.drafter {
            DrafterSpec::Feature { head } => Some(head),
            _ => None,
        }
    }

    /// Whether the setting runs a draft model (AR, prompt lookup and the feature head do not).
    pub fn needs_draft_model(&self) -> bool {
        self.spec().is_some_and(|m| !matches!(m.drafter, DrafterSpec::Lookup { .. } | DrafterSpec::Feature { .. }))
    }
    /// The head's or the confidence rule's threshold.
    pub fn threshold(&self) -> Option<f64> {
        match self.spec()?.policy {
            PolicySpec::Head { threshold, .. }
            | PolicySpec::HeadToken { threshold, .. }
            | PolicySpec::Confidence { threshold, .. }
            | PolicySpec::ConfidenceProduct { threshold, .. } => Some(threshold),
            _ => None,
        }
    }
    /// `[min, max]` candidates of an adaptive policy.
    pub fn bounds(&self) -> Option<[usize; 2]> {
        match self.spec()?.policy {
            PolicySpec::Head { min, max, .. }
            | PolicySpec::HeadToken { min, max, .. }
            | PolicySpec::Confidence { min, max, .. }
            | PolicySpec::ConfidenceProduct { min, max, .. } => Some([min, max]),
            _ => None,
        }
    }
    /// DSI's target workers.
    pub fn servers(&self) -> Option<usize> {
        match self.spec()?.scheduler {
            SchedulerSpec::Dsi { servers } => Some(servers),
            SchedulerSpec::Sequential => None,
        }
    }
    /// EasySpec's strategy, calibration and workers.
    pub fn easyspec(&self) -> Option<(&str, Calibration, usize)> {
        match &self.spec()?.drafter {
            DrafterSpec::EasySpec { strategy, calibration, workers, .. } => Some((strategy, *calibration, *workers)),
            DrafterSpec::Plain
            | DrafterSpec::Lookup { .. }
            | DrafterSpec::Hybrid { .. }
            | DrafterSpec::Feature { .. } => None,
        }
    }
}

/// `HeadRule`'s paper bounds, the default of every adaptive policy.
pub const PAPER_BOUNDS: [usize; 2] = [HeadRule::PAPER_MIN, HeadRule::PAPER_MAX];

/// A fitted policy's parameters from a JSON file, and the setting's name (the file's stem).
fn fitted<T: serde::de::DeserializeOwned>(path: &std::path::Path, what: &str) -> Result<(String, T)> {
    let text =
        std::fs::read_to_string(path).with_context(|| format!("reading {what} parameters {}", path.display()))?;
    let params = serde_json::from_str(&text).with_context(|| format!("{}: not {what} parameters", path.display()))?;
    let name = path.file_stem().map_or_else(|| path.display().to_string(), |s| s.to_string_lossy().into_owned());
    Ok((name, params))
}

impl PolicySpec {
    /// Threshold-plus's setting from a fitted-parameter file, named by the file's stem.
    pub fn fitted_threshold_plus(path: &std::path::Path) -> Result<Self> {
        let (name, params) = fitted(path, "threshold-plus")?;
        Ok(Self::ThresholdPlus { name, params })
    }

    /// The calibrated model's setting from a fitted-parameter file, named by the file's stem.
    pub fn fitted_calibrated(path: &std::path::Path) -> Result<Self> {
        let (name, params) = fitted(path, "calibrated-model")?;
        Ok(Self::Calibrated { name, params })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fuzzy() -> DrafterSpec {
        DrafterSpec::EasySpec {
            strategy: "lp4".into(),
            calibration: Calibration::EveryRound,
            workers: 1,
            compat: Compat::Lossless,
        }
    }

    #[test]
    fn the_papers_methods_keep_their_names_and_other_combinations_compose_them() {
        let head = PolicySpec::Head { head: "w6d3".into(), threshold: 0.7, min: 2, max: 20 };
        let dsi = SchedulerSpec::Dsi { servers: 2 };
        assert_eq!(MethodSpec::plain(PolicySpec::Fixed { k: 4 }).key(), "specdec K=4");
        assert_eq!(MethodSpec::plain(head.clone()).key(), "specdecpp w6d3 h=0.7 [2,20]");
        assert_eq!(
            MethodSpec { scheduler: dsi.clone(), ..MethodSpec::plain(PolicySpec::Fixed { k: 5 }) }.key(),
            "dsi SP=2 k=5"
        );
        let dsi_head = MethodSpec { scheduler: dsi.clone(), ..MethodSpec::plain(head.clone()) };
        assert_eq!((dsi_head.key().as_str(), dsi_head.family()), ("dsi SP=2 specdecpp w6d3 h=0.7 [2,20]", "dsi"));
        let all = MethodSpec { drafter: fuzzy(), draft: DraftTransform::default(), policy: head, scheduler: dsi };
        assert_eq!(
            (all.key().as_str(), all.family()),
            ("easyspec lp4 every_round | dsi SP=2 specdecpp w6d3 h=0.7 [2,20]", "easyspec")
        );
        let s = Setting::Speculative(all);
        assert_eq!((s.drafter(), s.policy(), s.scheduler()), (Some("easyspec"), Some("head"), Some("dsi")));
        assert_eq!((s.servers(), s.threshold(), s.bounds(), s.k()), (Some(2), Some(0.7), Some([2, 20]), None));
        // A row's setting survives its unit file.
        let back: Setting = serde_json::from_str(&serde_json::to_string(&s).unwrap()).unwrap();
        assert_eq!(back, s);
        assert_eq!(serde_json::to_string(&Setting::Ar).unwrap(), r#"{"method":"ar"}"#);
    }

    #[test]
    fn out_of_range_parts_and_the_oracle_in_a_real_run_are_refused_with_a_reason() {
        let e = |s: Setting| format!("{:#}", s.check_runnable().unwrap_err());
        assert!(e(Setting::Speculative(MethodSpec::plain(PolicySpec::Fixed { k: 0 }))).contains("k >= 1"));
        assert!(
            e(Setting::Speculative(MethodSpec::plain(PolicySpec::Confidence { threshold: 0.5, min: 3, max: 2 })))
                .contains("bounds [3, 2]")
        );
        assert!(e(Setting::Speculative(MethodSpec::plain(PolicySpec::Oracle))).contains("can only be replayed"));
        let dsi_oracle =
            MethodSpec { scheduler: SchedulerSpec::Dsi { servers: 2 }, ..MethodSpec::plain(PolicySpec::Oracle) };
        assert!(e(Setting::Speculative(dsi_oracle)).contains("sequential scheduler only"));
        let bad_strategy = MethodSpec {
            drafter: DrafterSpec::EasySpec {
                strategy: "0-x".into(),
                calibration: Calibration::Never,
                workers: 1,
                compat: Compat::Lossless,
            },
            ..MethodSpec::plain(PolicySpec::Fixed { k: 2 })
        };
        assert!(e(Setting::Speculative(bad_strategy)).contains("strategy '0-x'"));
        let lookup = |policy| {
            Setting::Speculative(MethodSpec {
                drafter: DrafterSpec::Lookup { ngram_min: 1, ngram_max: 3 },
                ..MethodSpec::plain(policy)
            })
        };
        assert_eq!(lookup(PolicySpec::Fixed { k: 6 }).key(), "lookup n=1..3 | specdec K=6");
        let hybrid = MethodSpec {
            drafter: DrafterSpec::Hybrid { ngram_min: 2, ngram_max: 3 },
            ..MethodSpec::plain(PolicySpec::Fixed { k: 4 })
        };
        assert_eq!((hybrid.key().as_str(), hybrid.family()), ("lookup+draft n=2..3 | specdec K=4", "hybrid"));
        assert!(lookup(PolicySpec::Dynamic { initial: 5, cap: 64 }).check_runnable().is_ok());
        assert!(
            e(lookup(PolicySpec::Confidence { threshold: 0.5, min: 1, max: 20 }))
                .contains("use fixed, dynamic, bandit or matchrate")
        );
        let wide = MethodSpec {
            drafter: DrafterSpec::Lookup { ngram_min: 3, ngram_max: 2 },
            ..MethodSpec::plain(PolicySpec::Fixed { k: 2 })
        };
        assert!(e(Setting::Speculative(wide)).contains("1 <= ngram_min <= ngram_max"));
        assert!(Setting::Ar.check_runnable().is_ok());
    }
}
