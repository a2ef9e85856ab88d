//! Threshold-plus: HF's confidence criterion with a threshold that moves with the candidate's
//! depth and the request's recent acceptance, its parameters fitted to replayed throughput
//! (`specx eval tune`). With every added parameter at zero it is the confidence rule at
//! `exp(theta0)`, so a fit shows whether depth and history add anything to the threshold.

use super::{Decision, DraftStep, RoundOutcome, StopPolicy, stop_if};
use anyhow::{Result, ensure};
use serde::{Deserialize, Serialize};

/// Depth buckets of the per-depth offsets: candidates 2, 3, 4, 5-6, 7-9 and 10 on (the first
/// candidate is the reference, offset 0), coarser where fewer rounds get that deep.
pub const DEPTH_BUCKETS: [usize; 6] = [2, 3, 4, 5, 7, 10];

/// The rule's parameters. After candidate `i` with draft confidence `c` (its probability of
/// the token, as [`DraftStep::confidence`]), stop when
/// `ln c < theta0 + depth[bucket(i)] + last_round * r_last + ema * r_ema`, `r_last` the
/// acceptance rate (accepted / verified candidates) of the request's previous round and `r_ema`
/// an exponential moving average of those rates (weight `ema_weight` on the newest); both start
/// at `prior_rate`. The candidate is kept (verified); at most `max_candidates`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ThresholdPlusParams {
    pub theta0: f64,
    /// Offsets for the depth buckets of [`DEPTH_BUCKETS`].
    pub depth: [f64; 6],
    pub last_round: f64,
    pub ema: f64,
    pub ema_weight: f64,
    pub prior_rate: f64,
    pub max_candidates: usize,
}

impl ThresholdPlusParams {
    /// Weight of the newest round in the moving average (not fitted).
    pub const EMA_WEIGHT: f64 = 0.3;
    /// The rates before a request's first round (about the reference pair's greedy agreement;
    /// a constant, absorbed by `theta0` for the first round).
    pub const PRIOR_RATE: f64 = 0.75;

    /// The plain confidence rule at `threshold` (a probability): every added parameter zero.
    pub fn confidence(threshold: f64, max_candidates: usize) -> Self {
        Self {
            theta0: threshold.max(1e-12).ln(),
            depth: [0.0; 6],
            last_round: 0.0,
            ema: 0.0,
            ema_weight: Self::EMA_WEIGHT,
            prior_rate: Self::PRIOR_RATE,
            max_candidates,
        }
    }

    pub fn check(&self) -> Result<()> {
        let all =
            [self.theta0, self.last_round, self.ema, self.ema_weight, self.prior_rate].into_iter().chain(self.depth);
        ensure!(all.clone().all(f64::is_finite), "threshold-plus: every parameter must be a finite number");
        ensure!(
            (0.0..=1.0).contains(&self.ema_weight) && (0.0..=1.0).contains(&self.prior_rate),
            "threshold-plus: ema_weight and prior_rate must be in [0, 1]"
        );
        ensure!(
            self.max_candidates >= 1,
            "threshold-plus: at most {} candidates: need at least 1",
            self.max_candidates
        );
        Ok(())
    }

    /// The offset of candidate `index` (1-based).
    pub fn depth_offset(&self, index: usize) -> f64 {
        DEPTH_BUCKETS.iter().rposition(|&d| index >= d).map_or(0.0, |b| self.depth[b])
    }

    /// The names of the fitted coordinates, in [`Self::coordinates`] order.
    pub fn coordinate_names() -> Vec<String> {
        let depth = ["2", "3", "4", "5-6", "7-9", "10+"].iter().map(|d| format!("depth {d}"));
        ["theta0".to_string()].into_iter().chain(depth).chain(["last round".into(), "ema".into()]).collect()
    }

    /// The fitted parameters as one vector: theta0, the depth offsets, last_round, ema.
    pub fn coordinates(&self) -> Vec<f64> {
        [self.theta0].into_iter().chain(self.depth).chain([self.last_round, self.ema]).collect()
    }

    /// These parameters with the fitted coordinates replaced by `x` ([`Self::coordinates`] order).
    pub fn with_coordinates(&self, x: &[f64]) -> Self {
        assert_eq!(x.len(), 9, "threshold-plus has 9 fitted coordinates");
        let mut depth = [0.0; 6];
        depth.copy_from_slice(&x[1..7]);
        Self { theta0: x[0], depth, last_round: x[7], ema: x[8], ..self.clone() }
    }
}

/// The live policy: the parameters and the request's acceptance history.
#[derive(Clone, Debug)]
pub struct ThresholdPlusPolicy {
    pub params: ThresholdPlusParams,
    last: f64,
    ema: f64,
}

impl ThresholdPlusPolicy {
    pub fn new(params: ThresholdPlusParams) -> Result<Self> {
        params.check()?;
        let prior = params.prior_rate;
        Ok(Self { params, last: prior, ema: prior })
    }

    /// The log-confidence below which candidate `index` stops the round now.
    pub fn threshold(&self, index: usize) -> f64 {
        let p = &self.params;
        p.theta0 + p.depth_offset(index) + p.last_round * self.last + p.ema * self.ema
    }
}

impl StopPolicy for ThresholdPlusPolicy {
    fn begin_request(&mut self) {
        self.last = self.params.prior_rate;
        self.ema = self.params.prior_rate;
    }
    fn decide(&mut self, step: &DraftStep) -> Result<Decision> {
        let log_c = f64::from(step.confidence).max(f64::MIN_POSITIVE).ln();
        Ok(stop_if(step.index >= self.params.max_candidates || log_c < self.threshold(step.index)))
    }
    fn end_round(&mut self, o: &RoundOutcome) {
        // A round that verified nothing says nothing about the draft's agreement.
        if o.drafted > 0 {
            self.last = o.accepted as f64 / o.drafted as f64;
            self.ema += self.params.ema_weight * (self.last - self.ema);
        }
    }
    fn max_candidates(&self) -> usize {
        self.params.max_candidates
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn step(index: usize, confidence: f32) -> DraftStep<'static> {
        DraftStep::at(index, confidence)
    }

    #[test]
    fn zero_offsets_are_the_confidence_rule() {
        let mut p = ThresholdPlusPolicy::new(ThresholdPlusParams::confidence(0.5, 20)).unwrap();
        assert_eq!(p.decide(&step(1, 0.6)).unwrap(), Decision::Continue);
        assert_eq!(p.decide(&step(7, 0.49)).unwrap(), Decision::Stop);
        assert_eq!(p.decide(&step(20, 0.99)).unwrap(), Decision::Stop);
    }

    #[test]
    fn depth_and_history_move_the_threshold() {
        let params = ThresholdPlusParams::confidence(0.5, 20);
        let mut x = params.coordinates();
        x[3] = 3.0; // depth 4: ln 0.5 + 3 - 2 x 0.75 > 0, so candidate 4 always stops
        x[7] = -2.0; // a fully accepted last round lowers the threshold by 2 nats
        let mut p = ThresholdPlusPolicy::new(params.with_coordinates(&x)).unwrap();
        assert_eq!(p.params.depth_offset(1), 0.0);
        assert_eq!(p.params.depth_offset(4), 3.0);
        assert_eq!(p.params.depth_offset(6), 0.0);
        assert_eq!(p.decide(&step(4, 0.99)).unwrap(), Decision::Stop);
        let before = p.threshold(2);
        p.end_round(&RoundOutcome { drafted: 4, accepted: 4, committed: 5, seconds: 0.0, ngram: None });
        assert!((before - p.threshold(2) - 2.0 * (1.0 - ThresholdPlusParams::PRIOR_RATE)).abs() < 1e-12);
        // A new request forgets the history.
        p.begin_request();
        assert_eq!(p.threshold(2), before);
    }

    #[test]
    fn bad_parameters_are_refused() {
        let mut p = ThresholdPlusParams::confidence(0.5, 20);
        p.ema_weight = 2.0;
        assert!(ThresholdPlusPolicy::new(p).is_err());
        assert!(
            ThresholdPlusPolicy::new(ThresholdPlusParams {
                max_candidates: 0,
                ..ThresholdPlusParams::confidence(0.5, 20)
            })
            .is_err()
        );
    }
}
