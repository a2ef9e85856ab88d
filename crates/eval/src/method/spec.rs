//! A method as data: what a results row was run with, what a config's grid expands to and what
//! `specx decode`'s flags parse to. A speculative method is a triple of the decoder's parts,
//! drafter x stop policy x scheduler; AR is the target alone.

use anyhow::{Context, Result, bail, ensure};
use serde::{Deserialize, Serialize};
use specx_decoder::DraftTransform;
use specx_decoder::speculative::Calibration;

pub use super::drafter::DrafterSpec;
use super::drafter::{EasySpec, Feature, Plain};
use super::policy::Partners;
pub use super::policy::PolicySpec;

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
    pub fn plain(policy: impl Into<PolicySpec>) -> Self {
        Self {
            drafter: Plain {}.into(),
            draft: DraftTransform::default(),
            policy: policy.into(),
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
            (SchedulerSpec::Dsi { servers }, PolicySpec::Fixed(f)) => format!("dsi SP={servers} k={}", f.k),
            (SchedulerSpec::Dsi { servers }, p) => format!("dsi SP={servers} {}", p.key()),
        };
        self.drafter.key(body)
    }

    /// The paper a combination is grouped under: EasySpec, prompt lookup or the hybrid for their
    /// drafters, DSI for its scheduler, else the stop policy's (`specdec`, `specdecpp`,
    /// `confidence`, `roc`, `pmin`, `dynamic`, `svip`, `adaedl`, `bandit`, `matchrate`,
    /// `oracle`).
    pub fn family(&self) -> &'static str {
        match (self.drafter.family(), &self.scheduler) {
            (Some(drafter), _) => drafter,
            (None, SchedulerSpec::Dsi { .. }) => "dsi",
            (None, SchedulerSpec::Sequential) => self.policy.family(),
        }
    }

    /// The parts' own ranges, and the combinations no scheduler can run: said before any model
    /// loads. Model-dependent checks (the strategy against the draft's depth, the head's
    /// presence) come with the models (`MethodSpec::check_models`).
    pub fn check(&self) -> Result<()> {
        let key = self.key();
        self.draft.check().with_context(|| format!("{key}: the draft"))?;
        self.drafter.check(&self.policy, &self.draft).map_err(|e| anyhow::anyhow!("{key}: {e:#}"))?;
        let partners = Partners { drafter: self.drafter.name(), scheduler: self.scheduler.name() };
        self.policy.check(partners).map_err(|e| anyhow::anyhow!("{key}: {e:#}"))?;
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
        if !m.policy.runnable() {
            bail!(
                "the {} policy needs the AR output in advance: it can only be replayed (specx eval replay)",
                m.policy.name()
            );
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
        match &self.spec()?.policy {
            PolicySpec::Fixed(f) => Some(f.k),
            _ => None,
        }
    }
    /// The acceptance head's name.
    pub fn head(&self) -> Option<&str> {
        self.spec()?.policy.head()
    }

    /// The feature head a feature-drafter setting drafts with.
    pub fn feature_head(&self) -> Option<&str> {
        match &self.spec()?.drafter {
            DrafterSpec::Feature(Feature { head }) => Some(head),
            _ => None,
        }
    }

    /// Whether the setting runs a draft model (AR, prompt lookup and the feature head do not).
    pub fn needs_draft_model(&self) -> bool {
        self.spec().is_some_and(|m| m.drafter.runs_draft_model())
    }
    /// The head's or the confidence rule's threshold.
    pub fn threshold(&self) -> Option<f64> {
        self.spec()?.policy.threshold()
    }
    /// `[min, max]` candidates of an adaptive policy.
    pub fn bounds(&self) -> Option<[usize; 2]> {
        self.spec()?.policy.bounds()
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
            DrafterSpec::EasySpec(EasySpec { strategy, calibration, workers, .. }) => {
                Some((strategy, *calibration, *workers))
            }
            _ => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::method::drafter::{Hybrid, Lookup};
    use crate::method::policy::{Confidence, Dynamic, Fixed, Head, Oracle};
    use specx_decoder::speculative::Compat;

    fn fuzzy() -> DrafterSpec {
        EasySpec { strategy: "lp4".into(), calibration: Calibration::EveryRound, workers: 1, compat: Compat::Lossless }
            .into()
    }

    #[test]
    fn the_papers_methods_keep_their_names_and_other_combinations_compose_them() {
        let head = Head { head: "w6d3".into(), threshold: 0.7, min: 2, max: 20 };
        let dsi = SchedulerSpec::Dsi { servers: 2 };
        assert_eq!(MethodSpec::plain(Fixed { k: 4 }).key(), "specdec K=4");
        assert_eq!(MethodSpec::plain(head.clone()).key(), "specdecpp w6d3 h=0.7 [2,20]");
        assert_eq!(MethodSpec { scheduler: dsi.clone(), ..MethodSpec::plain(Fixed { k: 5 }) }.key(), "dsi SP=2 k=5");
        let dsi_head = MethodSpec { scheduler: dsi.clone(), ..MethodSpec::plain(head.clone()) };
        assert_eq!((dsi_head.key().as_str(), dsi_head.family()), ("dsi SP=2 specdecpp w6d3 h=0.7 [2,20]", "dsi"));
        let all =
            MethodSpec { drafter: fuzzy(), draft: DraftTransform::default(), policy: head.into(), scheduler: dsi };
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
        assert!(e(Setting::Speculative(MethodSpec::plain(Fixed { k: 0 }))).contains("k >= 1"));
        assert!(
            e(Setting::Speculative(MethodSpec::plain(Confidence { threshold: 0.5, min: 3, max: 2 })))
                .contains("bounds [3, 2]")
        );
        assert!(e(Setting::Speculative(MethodSpec::plain(Oracle {}))).contains("can only be replayed"));
        let dsi_oracle = MethodSpec { scheduler: SchedulerSpec::Dsi { servers: 2 }, ..MethodSpec::plain(Oracle {}) };
        assert!(e(Setting::Speculative(dsi_oracle)).contains("sequential scheduler only"));
        let bad_strategy = MethodSpec {
            drafter: EasySpec {
                strategy: "0-x".into(),
                calibration: Calibration::Never,
                workers: 1,
                compat: Compat::Lossless,
            }
            .into(),
            ..MethodSpec::plain(Fixed { k: 2 })
        };
        assert!(e(Setting::Speculative(bad_strategy)).contains("strategy '0-x'"));
        let lookup = |policy: PolicySpec| {
            Setting::Speculative(MethodSpec {
                drafter: Lookup { ngram_min: 1, ngram_max: 3 }.into(),
                ..MethodSpec::plain(policy)
            })
        };
        assert_eq!(lookup(Fixed { k: 6 }.into()).key(), "lookup n=1..3 | specdec K=6");
        let hybrid = MethodSpec {
            drafter: Hybrid(Lookup { ngram_min: 2, ngram_max: 3 }).into(),
            ..MethodSpec::plain(Fixed { k: 4 })
        };
        assert_eq!((hybrid.key().as_str(), hybrid.family()), ("lookup+draft n=2..3 | specdec K=4", "hybrid"));
        assert!(lookup(Dynamic { initial: 5, cap: 64 }.into()).check_runnable().is_ok());
        assert!(
            e(lookup(Confidence { threshold: 0.5, min: 1, max: 20 }.into()))
                .contains("use fixed, dynamic, bandit or matchrate")
        );
        let wide =
            MethodSpec { drafter: Lookup { ngram_min: 3, ngram_max: 2 }.into(), ..MethodSpec::plain(Fixed { k: 2 }) };
        assert!(e(Setting::Speculative(wide)).contains("1 <= ngram_min <= ngram_max"));
        assert!(Setting::Ar.check_runnable().is_ok());
    }
}
