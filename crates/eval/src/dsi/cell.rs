//! The result of one (servers, lookahead) cell of the online simulator over its generations:
//! what the reports and the speedup figure read.

use crate::common::stats::mean_sd;
use serde::Serialize;

/// Results of one (servers, lookahead) cell over its generations.
#[derive(Clone, Debug, Serialize)]
pub struct CellResult {
    pub servers: usize,
    pub k: usize,
    /// Eq. 1's lookahead for these servers (the paper's choice).
    pub eq1: bool,
    pub nonsi_s: Vec<f64>,
    pub si_s: Vec<f64>,
    pub dsi_s: Vec<f64>,
    pub dsi_tasks: usize,
    pub dsi_started: usize,
    pub dsi_preempted: usize,
    pub dsi_max_queue: usize,
    /// Mean busy fraction of the target servers in DSI runs.
    pub dsi_busy: f64,
    /// Exact expectations of the offline simulator at c = draft TPOT / target TPOT and the
    /// rate a, in seconds (rate acceptance with flat costs only).
    pub offline_si_s: Option<f64>,
    pub offline_dsi_s: Option<f64>,
}

pub(super) fn mean(v: &[f64]) -> f64 {
    mean_sd(v).0
}

pub(super) fn sd(v: &[f64]) -> f64 {
    mean_sd(v).1
}

impl CellResult {
    /// Ratio of mean wall times (a / b).
    pub fn ratio(a: &[f64], b: &[f64]) -> f64 {
        mean(a) / mean(b)
    }
    /// Mean over generations of the per-generation ratio, and its standard deviation.
    pub fn per_run(a: &[f64], b: &[f64]) -> (f64, f64) {
        let r: Vec<f64> = a.iter().zip(b).map(|(x, y)| x / y).collect();
        (mean(&r), sd(&r))
    }
}
