//! Averages over prompts: mean and sample standard deviation, and the aggregates of a group of
//! results rows (one setting on one prompt set and sampling setting).

use super::results::ResultRow;
use std::collections::BTreeMap;

/// Mean and sample standard deviation.
pub fn mean_sd(xs: &[f64]) -> (f64, f64) {
    let n = xs.len() as f64;
    if xs.is_empty() {
        return (f64::NAN, f64::NAN);
    }
    let mean = xs.iter().sum::<f64>() / n;
    let sd = if xs.len() > 1 { (xs.iter().map(|x| (x - mean).powi(2)).sum::<f64>() / (n - 1.0)).sqrt() } else { 0.0 };
    (mean, sd)
}

pub fn pm(xs: &[f64], digits: usize) -> String {
    let (m, s) = mean_sd(xs);
    format!("{m:.digits$} ± {s:.digits$}")
}

/// Aggregates of one (dataset, sampling, setting) group.
pub struct GroupStats {
    pub prompts: usize,
    pub tokens_per_s: Vec<f64>,
    pub speedup: Vec<f64>,
    pub discard_rate: Vec<f64>,
    pub verification_rate: Vec<f64>,
    pub acceptance: Vec<f64>,
    pub sum_generated: usize,
    pub sum_discarded: usize,
    pub sum_target_calls: usize,
    pub sum_accepted: usize,
    pub sum_verified: usize,
    pub sum_time: f64,
    pub identical: usize,
    pub replayed: bool,
}

impl GroupStats {
    pub fn of(rows: &[&ResultRow]) -> Self {
        let m: Vec<_> = rows.iter().map(|r| r.metrics()).collect();
        let sum = |f: &dyn Fn(&ResultRow) -> usize| rows.iter().map(|r| f(r)).sum::<usize>();
        Self {
            prompts: rows.len(),
            tokens_per_s: m.iter().map(|m| m.tokens_per_sec()).collect(),
            speedup: rows.iter().map(|r| r.speedup).collect(),
            discard_rate: m.iter().map(|m| m.discard_rate()).collect(),
            verification_rate: m.iter().map(|m| m.verification_rate()).collect(),
            acceptance: m.iter().filter(|m| m.n_verified > 0).map(|m| m.acceptance_rate()).collect(),
            sum_generated: sum(&|r| r.n_generated),
            sum_discarded: sum(&|r| r.n_discarded()),
            sum_target_calls: sum(&|r| r.n_target_calls),
            sum_accepted: sum(&|r| r.n_accepted),
            sum_verified: sum(&|r| r.n_verified),
            sum_time: rows.iter().map(|r| r.total_time_s).sum(),
            identical: rows.iter().filter(|r| r.identical_to_ar).count(),
            replayed: rows.iter().any(|r| r.replayed),
        }
    }

    fn ratio(a: usize, b: usize) -> f64 {
        if b == 0 { 0.0 } else { a as f64 / b as f64 }
    }
    pub fn discard_rate_sum(&self) -> f64 {
        Self::ratio(self.sum_discarded, self.sum_generated)
    }
    pub fn verification_rate_sum(&self) -> f64 {
        Self::ratio(self.sum_target_calls, self.sum_generated)
    }
    pub fn acceptance_sum(&self) -> f64 {
        Self::ratio(self.sum_accepted, self.sum_verified)
    }
    pub fn tokens_per_call_sum(&self) -> f64 {
        Self::ratio(self.sum_generated, self.sum_target_calls)
    }
}

/// Rows grouped by (dataset, sampling) and, inside, by setting key in first-seen order.
pub fn grouped(rows: &[ResultRow]) -> BTreeMap<(String, String), Vec<(String, Vec<&ResultRow>)>> {
    let mut out: BTreeMap<(String, String), Vec<(String, Vec<&ResultRow>)>> = BTreeMap::new();
    for r in rows {
        let groups = out.entry((r.dataset.clone(), r.sampling.clone())).or_default();
        let key = format!("{}{}", r.setting.key(), if r.replayed { " (replayed)" } else { "" });
        match groups.iter_mut().find(|(k, _)| *k == key) {
            Some((_, v)) => v.push(r),
            None => groups.push((key, vec![r])),
        }
    }
    out
}
