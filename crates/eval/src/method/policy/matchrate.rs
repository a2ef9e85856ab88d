//! For prompt lookup: draft while the estimated chance that every candidate so far is accepted
//! stays at least `threshold` (a looked-up candidate: this request's acceptance rate of matches
//! of its n-gram size; a draft model's: its confidence); a weak first match is dropped. At most
//! `max`; the hybrid's draft-model rounds draft `model_k` when given.

use super::{Flag, HeadBinding, Partners, PolicyFamily, PolicyFlags, Reads, check_max, check_unit_threshold, product};
use anyhow::{Result, ensure};
use serde::{Deserialize, Serialize};
use specx_decoder::speculative::{MatchRatePolicy, StopPolicy};

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct MatchRate {
    pub threshold: f64,
    pub max: usize,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub model_k: Option<usize>,
}

/// `policies.matchrate = { thresholds = [0.3], max = [16], model_k = [4] }`: every threshold x
/// max (x model K).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct MatchRatePolicies {
    pub thresholds: Vec<f64>,
    pub max: Vec<usize>,
    /// The hybrid's draft-model rounds at fixed K, for every K listed; none: by the draft's
    /// confidence under the same threshold.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub model_k: Vec<usize>,
}

impl PolicyFamily for MatchRate {
    const NAME: &'static str = "matchrate";
    const HELP: &'static str = "For prompt lookup: draft while the estimated chance that every candidate so far is accepted (a match: this request's acceptance of its n-gram size; a draft model's token: its confidence) is at least --threshold [0.3]; --max [16]; with the hybrid drafter, --k makes its draft-model rounds draft K";
    const READS: Reads = Reads::Matches;
    const FLAGS: &'static [Flag] = &[Flag::Threshold, Flag::Max, Flag::K];
    type Grid = MatchRatePolicies;

    fn key(&self) -> String {
        match self.model_k {
            None => format!("matchrate {} [1,{}]", self.threshold, self.max),
            Some(k) => format!("matchrate {} [1,{}] model K={k}", self.threshold, self.max),
        }
    }
    fn max_candidates(&self) -> usize {
        self.max.max(self.model_k.unwrap_or(0))
    }
    fn check(&self, partners: Partners) -> Result<()> {
        check_unit_threshold(self.threshold)?;
        check_max(self.max)?;
        ensure!(self.model_k.is_none_or(|k| k >= 1), "model K needs k >= 1");
        ensure!(
            self.model_k.is_none() || partners.drafter == "hybrid",
            "model K sets the draft model's rounds, which only the hybrid drafter has"
        );
        Ok(())
    }
    fn build(&self, _: HeadBinding) -> Result<Box<dyn StopPolicy>> {
        Ok(Box::new(MatchRatePolicy::with_model_k(self.threshold, self.max, self.model_k)))
    }
    fn from_flags(f: &PolicyFlags) -> Result<Self> {
        Ok(Self { threshold: f.threshold().unwrap_or(0.3), max: f.max().unwrap_or(16), model_k: f.k() })
    }
    fn settings(g: &MatchRatePolicies) -> Result<Vec<Self>> {
        let model_k: Vec<Option<usize>> =
            if g.model_k.is_empty() { vec![None] } else { g.model_k.iter().map(|&k| Some(k)).collect() };
        let mut out = Vec::new();
        for &threshold in &g.thresholds {
            out.extend(product(&g.max, &model_k, |max, model_k| Self { threshold, max, model_k }));
        }
        Ok(out)
    }
    fn grid_lists(g: &MatchRatePolicies) -> Vec<(&'static str, usize)> {
        vec![("thresholds", g.thresholds.len()), ("max", g.max.len())]
    }
}
