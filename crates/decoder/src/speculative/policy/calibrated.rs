//! A calibrated acceptance model: a logistic regression on the draft's own statistics at each
//! candidate (its log-probability of the token, the entropy and top-2 margin of its softmax)
//! and the candidate's depth, optionally with what the target said at the last committed
//! token (its top-1 probability and entropy there, free after each verification), with one
//! temperature per depth bucket fitted on held-out data,
//! so that its output is a probability of acceptance. It stops a round by the per-token rule
//! (stop when the candidate's chance falls below the threshold, as HF's confidence rule) or by
//! SpecDec++'s product rule (stop when the chance that some candidate so far is rejected
//! passes the threshold). `specx eval tune` fits the weights and temperatures on tuning
//! traces and chooses the threshold by replayed throughput.

use super::threshold_plus::DEPTH_BUCKETS;
use super::{Decision, DraftStats, DraftStep, StopPolicy, stop_if};
use anyhow::{Context, Result, ensure};
use serde::{Deserialize, Serialize};

/// Inputs of the model that reads the draft only: a constant, ln p and ln(1 - p) of the
/// draft's probability p of the token (so that the draft's own probability, logit p = ln p -
/// ln(1 - p), is one of the models), entropy (nats), top-2 margin, and one indicator per depth
/// bucket of [`DEPTH_BUCKETS`] (depth 1 is the base).
pub const DRAFT_FEATURES: usize = 5 + DEPTH_BUCKETS.len();
/// All inputs: the draft's, then the target's top-1 probability and entropy (nats) at the
/// last committed token. A model of [`DRAFT_FEATURES`] weights ignores the last two.
pub const FEATURES: usize = DRAFT_FEATURES + 2;
/// 1 - p is floored here (a float probability can round to 1).
const MIN_COMPLEMENT: f64 = 1e-7;
/// Temperatures: depth 1, then one per depth bucket.
pub const TEMPERATURES: usize = 1 + DEPTH_BUCKETS.len();

/// How the model's probabilities stop a round.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum CalibratedRule {
    /// Stop after the candidate whose chance of acceptance is below the threshold (kept).
    Token,
    /// Stop when 1 - (product of the round's chances) exceeds the threshold (SpecDec++).
    Product,
}

/// The model and its rule.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CalibratedParams {
    /// Weights of the first [`DRAFT_FEATURES`] or of all [`FEATURES`] inputs, in
    /// [`CalibratedParams::feature_names`] order.
    pub weights: Vec<f64>,
    /// The logit is divided by the temperature of the candidate's depth bucket.
    pub temperatures: Vec<f64>,
    pub rule: CalibratedRule,
    pub threshold: f64,
    pub max_candidates: usize,
}

/// The depth bucket of candidate `index` (1-based): 0 for depth 1, then 1 + the index in
/// [`DEPTH_BUCKETS`].
pub fn depth_bucket(index: usize) -> usize {
    DEPTH_BUCKETS.iter().rposition(|&d| index >= d).map_or(0, |b| b + 1)
}

/// The model's inputs for a candidate at depth `index` with the draft's statistics `s` and the
/// target's at the last committed token (zeros without them).
pub fn features(s: &DraftStats, index: usize, target: Option<&DraftStats>) -> [f64; FEATURES] {
    let mut x = [0.0; FEATURES];
    x[0] = 1.0;
    let p = f64::from(s.token_prob);
    x[1] = p.max(1e-30).ln();
    x[2] = ln_complement(p);
    x[3] = f64::from(s.entropy);
    x[4] = f64::from(s.margin);
    let b = depth_bucket(index);
    if b > 0 {
        x[4 + b] = 1.0;
    }
    if let Some(t) = target {
        x[DRAFT_FEATURES] = f64::from(t.top1);
        x[DRAFT_FEATURES + 1] = f64::from(t.entropy);
    }
    x
}

/// ln(1 - p), with 1 - p floored at [`MIN_COMPLEMENT`].
pub fn ln_complement(p: f64) -> f64 {
    (1.0 - p).max(MIN_COMPLEMENT).ln()
}

/// The logit `weights . x` over the inputs the weights cover (the fit and the policy share it).
pub fn logit(weights: &[f64], x: &[f64; FEATURES]) -> f64 {
    weights.iter().zip(x).map(|(w, x)| w * x).sum()
}

pub fn sigmoid(z: f64) -> f64 {
    1.0 / (1.0 + (-z).exp())
}

impl CalibratedParams {
    /// The names of the first `n` inputs.
    pub fn feature_names(n: usize) -> Vec<String> {
        let depth = ["2", "3", "4", "5-6", "7-9", "10+"].iter().map(|d| format!("depth {d}"));
        let target = ["target top-1", "target entropy"].iter().map(|s| s.to_string());
        ["bias", "ln p", "ln(1-p)", "entropy", "margin"]
            .iter()
            .map(|s| s.to_string())
            .chain(depth)
            .chain(target)
            .take(n)
            .collect()
    }

    /// Whether the model reads the target's statistics at the last committed token.
    pub fn reads_target(&self) -> bool {
        self.weights.len() == FEATURES
    }

    pub fn check(&self) -> Result<()> {
        ensure!(
            [DRAFT_FEATURES, FEATURES].contains(&self.weights.len()),
            "calibrated model: {} weights, expected {DRAFT_FEATURES} (draft only) or {FEATURES} (draft and target)",
            self.weights.len()
        );
        ensure!(
            self.temperatures.len() == TEMPERATURES,
            "calibrated model: {} temperatures, expected {TEMPERATURES}",
            self.temperatures.len()
        );
        ensure!(self.weights.iter().all(|w| w.is_finite()), "calibrated model: every weight must be a finite number");
        ensure!(
            self.temperatures.iter().all(|t| t.is_finite() && *t > 0.0),
            "calibrated model: every temperature must be positive"
        );
        ensure!(
            (0.0..=1.0).contains(&self.threshold),
            "calibrated model: threshold {} is not in [0, 1]",
            self.threshold
        );
        ensure!(
            self.max_candidates >= 1,
            "calibrated model: at most {} candidates: need at least 1",
            self.max_candidates
        );
        Ok(())
    }

    /// The uncalibrated logit of a candidate's acceptance.
    pub fn logit(&self, x: &[f64; FEATURES]) -> f64 {
        logit(&self.weights, x)
    }

    /// The calibrated chance that candidate `index` with statistics `s` is accepted, given the
    /// target's statistics at the last committed token (read only by a model of all
    /// [`FEATURES`]).
    pub fn probability(&self, s: &DraftStats, index: usize, target: Option<&DraftStats>) -> f64 {
        sigmoid(self.logit(&features(s, index, target)) / self.temperatures[depth_bucket(index)])
    }
}

/// The live policy: the parameters, the round's running product, and the target's statistics
/// at the last committed token (for a model that reads them).
#[derive(Clone, Debug)]
pub struct CalibratedPolicy {
    pub params: CalibratedParams,
    product: f64,
    target: Option<DraftStats>,
}

impl CalibratedPolicy {
    pub fn new(params: CalibratedParams) -> Result<Self> {
        params.check()?;
        Ok(Self { params, product: 1.0, target: None })
    }
}

impl StopPolicy for CalibratedPolicy {
    fn begin_request(&mut self) {
        self.target = None;
    }
    fn begin_round(&mut self) {
        self.product = 1.0;
    }
    fn reads_target(&self) -> bool {
        self.params.reads_target()
    }
    fn observe_target(&mut self, last: &DraftStats) {
        self.target = Some(*last);
    }
    fn decide(&mut self, step: &DraftStep) -> Result<Decision> {
        let target = match self.params.reads_target() {
            true => Some(self.target.as_ref().context("this calibrated model reads the target's statistics at the last committed token, which only the sequential scheduler and the greedy replay pass (DSI drafts ahead of verification)")?),
            false => None,
        };
        let p = self.params.probability(step.stats.get(), step.index, target);
        self.product *= p;
        let t = self.params.threshold;
        let stop = match self.params.rule {
            CalibratedRule::Token => p < t,
            CalibratedRule::Product => 1.0 - self.product > t,
        };
        Ok(stop_if(step.index >= self.params.max_candidates || stop))
    }
    fn max_candidates(&self) -> usize {
        self.params.max_candidates
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::speculative::LazyStats;

    fn step(index: usize, p: f32) -> DraftStep<'static> {
        let stats = DraftStats { token_prob: p, top1: p, margin: p / 2.0, entropy: 1.0, top10_top1: p };
        DraftStep { stats: LazyStats::known(stats), ..DraftStep::at(index, p) }
    }

    /// The model that says "the draft's probability" exactly: sigmoid(logit(p)) = p is not
    /// linear in ln p, so use a weight on ln p alone and check the rules against it.
    fn params(rule: CalibratedRule, threshold: f64) -> CalibratedParams {
        let mut weights = vec![0.0; DRAFT_FEATURES];
        weights[0] = 2.0;
        weights[1] = 4.0; // logit = 2 + 4 ln p
        CalibratedParams { weights, temperatures: vec![1.0; TEMPERATURES], rule, threshold, max_candidates: 20 }
    }

    #[test]
    fn depth_buckets_and_features() {
        assert_eq!([1, 2, 3, 4, 5, 6, 7, 9, 10, 30].map(depth_bucket), [0, 1, 2, 3, 4, 4, 5, 5, 6, 6]);
        let s = DraftStats { token_prob: 0.5, top1: 0.5, margin: 0.25, entropy: 1.5, top10_top1: 0.6 };
        let x = features(&s, 7, None);
        assert_eq!(x[..5], [1.0, 0.5f64.ln(), 0.5f64.ln(), 1.5, 0.25]);
        assert_eq!(x[5..], [0.0, 0.0, 0.0, 0.0, 1.0, 0.0, 0.0, 0.0]);
        assert_eq!(features(&s, 1, None)[5..], [0.0; 8]);
        // Weights (0, 1, -1) give logit p: the draft's own probability.
        let mut w = vec![0.0; DRAFT_FEATURES];
        (w[1], w[2]) = (1.0, -1.0);
        let own = CalibratedParams {
            weights: w,
            temperatures: vec![1.0; TEMPERATURES],
            rule: CalibratedRule::Token,
            threshold: 0.5,
            max_candidates: 20,
        };
        assert!((own.probability(&s, 3, None) - 0.5).abs() < 1e-12);
        let s9 = DraftStats { token_prob: 0.9, ..s };
        assert!((own.probability(&s9, 1, None) - f64::from(0.9f32)).abs() < 1e-12);
    }

    #[test]
    fn token_rule_stops_below_the_threshold_and_product_rule_on_the_running_product() {
        let p = params(CalibratedRule::Token, 0.5);
        // logit(0.9) = 2 + 4 ln 0.9 = 1.58 -> 0.83; logit(0.5) = -0.77 -> 0.32
        assert!(
            (p.probability(step(1, 0.9).stats.get(), 1, None) - sigmoid(2.0 + 4.0 * f64::from(0.9f32).ln())).abs()
                < 1e-12
        );
        let mut token = CalibratedPolicy::new(p).unwrap();
        assert_eq!(token.decide(&step(1, 0.9)).unwrap(), Decision::Continue);
        assert_eq!(token.decide(&step(2, 0.9)).unwrap(), Decision::Continue);
        assert_eq!(token.decide(&step(3, 0.5)).unwrap(), Decision::Stop);
        // Product: 0.83, 0.69, 0.57 -> 1 - product passes 0.4 at the third candidate.
        let mut product = CalibratedPolicy::new(params(CalibratedRule::Product, 0.4)).unwrap();
        product.begin_round();
        let d: Vec<Decision> = (1..=3).map(|i| product.decide(&step(i, 0.9)).unwrap()).collect();
        assert_eq!(d, [Decision::Continue, Decision::Continue, Decision::Stop]);
        product.begin_round();
        assert_eq!(product.decide(&step(1, 0.9)).unwrap(), Decision::Continue);
    }

    #[test]
    fn temperature_of_the_depth_bucket_divides_the_logit() {
        let mut p = params(CalibratedRule::Token, 0.5);
        p.temperatures[2] = 2.0; // depth 3
        let s = *step(3, 0.9).stats.get();
        assert!((p.probability(&s, 3, None) - sigmoid((2.0 + 4.0 * f64::from(0.9f32).ln()) / 2.0)).abs() < 1e-12);
        assert!((p.probability(&s, 2, None) - sigmoid(2.0 + 4.0 * f64::from(0.9f32).ln())).abs() < 1e-12);
    }

    #[test]
    fn bad_parameters_are_refused() {
        let mut p = params(CalibratedRule::Product, 0.5);
        p.temperatures[0] = 0.0;
        assert!(CalibratedPolicy::new(p.clone()).unwrap_err().to_string().contains("temperature"));
        p.temperatures[0] = 1.0;
        p.weights.pop();
        assert!(CalibratedPolicy::new(p).unwrap_err().to_string().contains("weights"));
    }

    /// A model with target weights reads what the scheduler observed, refuses to guess
    /// without it, and forgets it at the next request.
    #[test]
    fn a_model_of_the_target_reads_the_observed_statistics() {
        let mut p = params(CalibratedRule::Token, 0.5);
        p.weights.extend([0.0, -3.0]); // target entropy lowers the chance
        assert!(p.reads_target() && !params(CalibratedRule::Token, 0.5).reads_target());
        let s = *step(2, 0.9).stats.get();
        let calm = DraftStats { token_prob: 0.99, top1: 0.99, margin: 0.98, entropy: 0.05, top10_top1: 0.99 };
        let unsure = DraftStats { entropy: 2.0, ..calm };
        assert!(
            (p.probability(&s, 2, Some(&calm))
                - sigmoid(2.0 + 4.0 * f64::from(0.9f32).ln() - 3.0 * f64::from(0.05f32)))
            .abs()
                < 1e-12
        );
        let mut policy = CalibratedPolicy::new(p).unwrap();
        assert!(policy.reads_target());
        assert!(policy.decide(&step(1, 0.9)).unwrap_err().to_string().contains("target's statistics"));
        policy.observe_target(&calm);
        policy.begin_round();
        assert_eq!(policy.decide(&step(1, 0.9)).unwrap(), Decision::Continue);
        policy.observe_target(&unsure);
        policy.begin_round();
        assert_eq!(policy.decide(&step(1, 0.9)).unwrap(), Decision::Stop);
        policy.begin_request();
        assert!(policy.decide(&step(1, 0.9)).is_err());
        let mut wrong = params(CalibratedRule::Token, 0.5);
        wrong.weights.push(1.0);
        assert!(CalibratedPolicy::new(wrong).unwrap_err().to_string().contains("12 weights"));
    }
}
