//! Per-prompt counts, their price under a cost model, and percentile bootstrap intervals of
//! throughput ratios that resample prompts (paired: both rules see the same resampled prompts).

use crate::common::costs::Costs;
use serde::{Deserialize, Serialize};
use specx_decoder::speculative::RequestMetrics;
use specx_run::seed::SplitMix64;

/// The counts of one prompt's replayed run that a cost model prices.
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct UnitCounts {
    pub n: f64,
    pub draft_calls: f64,
    pub target_calls: f64,
    /// Rows the target checked in verifications (each round's candidates and one more).
    pub rows: f64,
}

impl UnitCounts {
    pub fn of(m: &RequestMetrics) -> Self {
        let rounds = m.n_target_calls.saturating_sub(1);
        Self {
            n: m.n_generated as f64,
            draft_calls: m.n_draft_calls as f64,
            target_calls: m.n_target_calls as f64,
            rows: (m.n_drafted + rounds) as f64,
        }
    }

    /// Seconds of the run at `costs` (eq. 5.1 with the draft forwards as counted, plus the
    /// row term).
    pub fn seconds(&self, c: &Costs) -> f64 {
        c.seconds(self.draft_calls, self.target_calls, self.rows)
    }

    /// Seconds of plain decoding of the same tokens: one single-row target call per token.
    pub fn ar_seconds(&self, c: &Costs) -> f64 {
        self.n * (c.t_target + c.t_row)
    }
}

/// Tokens per second of `units` together (ratio of sums).
pub fn throughput(units: &[UnitCounts], c: &Costs) -> f64 {
    let n: f64 = units.iter().map(|u| u.n).sum();
    n / units.iter().map(|u| u.seconds(c)).sum::<f64>()
}

/// A point estimate and its percentile interval.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct Interval {
    pub point: f64,
    pub lo: f64,
    pub hi: f64,
}

impl Interval {
    /// `+4.2% [+1.0, +7.5]`: a ratio as a change in percent.
    pub fn percent(&self) -> String {
        let p = |x: f64| format!("{:+.1}", 100.0 * (x - 1.0));
        format!("{}% [{}, {}]", p(self.point), p(self.lo), p(self.hi))
    }

    /// `1.23x [1.15, 1.31]`.
    pub fn times(&self) -> String {
        format!("{:.2}x [{:.2}, {:.2}]", self.point, self.lo, self.hi)
    }
}

/// The ratio `sum(den_i) / sum(num_i)` of per-prompt seconds (the throughput of `num` over that
/// of `den`: both produce the same tokens), and its 95% percentile interval over `resamples`
/// resamples of the prompts with replacement.
pub fn seconds_ratio(num: &[f64], den: &[f64], resamples: usize, seed: u64) -> Interval {
    assert_eq!(num.len(), den.len(), "paired per prompt");
    let ratio = |idx: &mut dyn Iterator<Item = usize>| {
        let (a, b) = idx.fold((0.0, 0.0), |(a, b), i| (a + num[i], b + den[i]));
        b / a
    };
    let point = ratio(&mut (0..num.len()));
    if num.is_empty() || resamples == 0 {
        return Interval { point, lo: point, hi: point };
    }
    let mut rng = SplitMix64::new(seed);
    let n = num.len() as u64;
    let mut draws: Vec<f64> =
        (0..resamples).map(|_| ratio(&mut (0..num.len()).map(|_| (rng.next_u64() % n) as usize))).collect();
    draws.sort_by(f64::total_cmp);
    let at = |q: f64| draws[((q * resamples as f64) as usize).min(resamples - 1)];
    Interval { point, lo: at(0.025), hi: at(0.975) }
}

/// Throughput of `rule` over that of `reference` on the same prompts at `c`, with its interval.
pub fn speedup(rule: &[UnitCounts], reference: &[UnitCounts], c: &Costs, resamples: usize, seed: u64) -> Interval {
    let s = |u: &[UnitCounts]| u.iter().map(|u| u.seconds(c)).collect::<Vec<f64>>();
    seconds_ratio(&s(rule), &s(reference), resamples, seed)
}

/// Throughput of `rule` over plain decoding of the same tokens at `c`, with its interval.
pub fn speedup_over_ar(rule: &[UnitCounts], c: &Costs, resamples: usize, seed: u64) -> Interval {
    let ar: Vec<f64> = rule.iter().map(|u| u.ar_seconds(c)).collect();
    seconds_ratio(&rule.iter().map(|u| u.seconds(c)).collect::<Vec<_>>(), &ar, resamples, seed)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_interval_covers_the_point_and_narrows_with_more_prompts() {
        // Prompt i takes 1 + (i mod 3) seconds under the rule and twice that under the reference.
        let num: Vec<f64> = (0..60).map(|i| 1.0 + (i % 3) as f64).collect();
        let den: Vec<f64> = num.iter().map(|x| 2.0 * x).collect();
        let exact = seconds_ratio(&num, &den, 500, 1);
        assert_eq!((exact.point, exact.lo, exact.hi), (2.0, 2.0, 2.0), "a constant per-prompt ratio has no spread");
        // Noisy ratios: the interval contains the point and is narrower with 4x the prompts.
        let noisy = |n: usize| {
            let num: Vec<f64> = (0..n).map(|i| 1.0 + (i % 7) as f64).collect();
            let den: Vec<f64> = (0..n).map(|i| 1.0 + ((i * 3) % 5) as f64).collect();
            seconds_ratio(&num, &den, 2000, 7)
        };
        let (small, big) = (noisy(40), noisy(160));
        assert!(small.lo < small.point && small.point < small.hi, "{small:?}");
        assert!(big.hi - big.lo < 0.7 * (small.hi - small.lo), "{small:?} vs {big:?}");
    }

    #[test]
    fn counts_are_priced_as_eq_5_1_with_rows() {
        let c = Costs { name: "t".into(), t_draft: 0.1, t_target: 1.0, t_row: 0.5, profile: None, context: None };
        let u = UnitCounts { n: 10.0, draft_calls: 8.0, target_calls: 4.0, rows: 11.0 };
        assert!((u.seconds(&c) - (0.8 + 4.0 + 5.5)).abs() < 1e-12);
        assert!((u.ar_seconds(&c) - 15.0).abs() < 1e-12);
        let m =
            RequestMetrics { n_generated: 10, n_target_calls: 4, n_draft_calls: 8, n_drafted: 8, ..Default::default() };
        assert_eq!(UnitCounts::of(&m).rows, 11.0);
    }
}
