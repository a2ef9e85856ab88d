//! AdaEDL: drop the token when 1 - sqrt(gamma H) < lambda (lambda adapted per round, from
//! `lambda`); at most `max` candidates.

use super::{Flag, HeadBinding, Partners, PolicyFamily, PolicyFlags, Reads, check_max, product};
use anyhow::{Result, ensure};
use serde::{Deserialize, Serialize};
use specx_decoder::speculative::{AdaEdlParams, AdaEdlPolicy, StopPolicy};

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct AdaEdl {
    pub lambda: f64,
    pub gamma: f64,
    pub max: usize,
}

/// `policies.adaedl = { lambda = [0.7], gamma = [0.2], max = [16] }`: every lambda x gamma x max.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AdaEdlPolicies {
    pub lambda: Vec<f64>,
    #[serde(default = "default_gamma")]
    pub gamma: Vec<f64>,
    #[serde(default = "default_max")]
    pub max: Vec<usize>,
}

fn default_gamma() -> Vec<f64> {
    vec![0.2]
}
fn default_max() -> Vec<usize> {
    vec![16]
}

impl PolicyFamily for AdaEdl {
    const NAME: &'static str = "adaedl";
    const HELP: &'static str = "AdaEDL's entropy bound (--threshold: the initial lambda [0.7], --max [16])";
    const READS: Reads = Reads::DraftDistribution;
    const FLAGS: &'static [Flag] = &[Flag::Threshold, Flag::Max];
    type Grid = AdaEdlPolicies;

    fn key(&self) -> String {
        format!("adaedl lambda={} gamma={} [1,{}]", self.lambda, self.gamma, self.max)
    }
    fn max_candidates(&self) -> usize {
        self.max
    }
    fn check(&self, _: Partners) -> Result<()> {
        ensure!((0.0..=1.0).contains(&self.lambda) && self.gamma > 0.0, "need lambda in [0, 1] and gamma > 0");
        check_max(self.max)
    }
    fn build(&self, _: HeadBinding) -> Result<Box<dyn StopPolicy>> {
        Ok(Box::new(AdaEdlPolicy::new(AdaEdlParams {
            lambda: self.lambda,
            gamma: self.gamma,
            max_candidates: self.max,
            ..AdaEdlParams::DEFAULT
        })))
    }
    fn from_flags(f: &PolicyFlags) -> Result<Self> {
        Ok(Self { lambda: f.threshold().unwrap_or(0.7), gamma: default_gamma()[0], max: f.max().unwrap_or(16) })
    }
    fn settings(g: &AdaEdlPolicies) -> Result<Vec<Self>> {
        let mut out = Vec::new();
        for &lambda in &g.lambda {
            out.extend(product(&g.gamma, &g.max, |gamma, max| Self { lambda, gamma, max }));
        }
        Ok(out)
    }
    fn grid_lists(g: &AdaEdlPolicies) -> Vec<(&'static str, usize)> {
        vec![("lambda", g.lambda.len()), ("gamma", g.gamma.len()), ("max", g.max.len())]
    }
}
