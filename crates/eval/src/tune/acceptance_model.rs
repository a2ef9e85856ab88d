//! The calibrated acceptance model in the tune: fitted once per prompt set on the tuning
//! traces' trunks ([`super::calibrate`]; with `target`, on the target's statistics at the last
//! committed token too), then per cost model each rule's threshold chosen by
//! replayed tuning throughput, and (with `passes`) the product rule's weights moved by
//! coordinate search on that throughput, the way LTD fits a stop rule to measured throughput
//! rather than to acceptance labels.

use super::calibrate::{ModelFit, Sample, fit, inputs};
use super::config::CalibratedFit;
use super::search;
use crate::common::costs::Costs;
use crate::experiment::replay::ReplayPolicy;
use crate::experiment::trace_builder::{TraceBuilder, TraceSet};
use anyhow::{Context, Result};
use serde::{Deserialize, Serialize};
use specx_decoder::speculative::{CalibratedParams, CalibratedPolicy, CalibratedRule};

/// The per-token rule on the model's probability.
pub const TOKEN: &str = "calibrated";
/// SpecDec++'s product rule on the model's probability.
pub const PRODUCT: &str = "calibrated-product";
/// The product rule with its weights fitted to replayed throughput.
pub const FITTED: &str = "calibrated-fit";
/// Appended to the families' names when the model reads the target.
pub const TARGET_SUFFIX: &str = "+target";

/// The name of family `base` under fit `f`.
fn family(base: &str, f: &CalibratedFit) -> String {
    if f.target { format!("{base}{TARGET_SUFFIX}") } else { base.to_string() }
}

/// One family's chosen parameters at one cost model.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Choice {
    pub family: String,
    pub params: CalibratedParams,
    pub tuning_throughput: f64,
    /// Settings tried on the tuning traces.
    pub candidates: usize,
}

impl Choice {
    pub fn setting(&self) -> String {
        let p = &self.params;
        let rule = match p.rule {
            CalibratedRule::Token => "token",
            CalibratedRule::Product => "product",
        };
        let fitted = if self.family.starts_with(FITTED) { " (weights fitted)" } else { "" };
        let target = if p.reads_target() { ", reads the target" } else { "" };
        format!("{rule} {} [1,{}]{fitted}{target}", p.threshold, p.max_candidates)
    }

    pub fn policy(&self) -> Result<ReplayPolicy> {
        live(&self.params)
    }
}

fn live(p: &CalibratedParams) -> Result<ReplayPolicy> {
    Ok(ReplayPolicy::Live(Box::new(CalibratedPolicy::new(p.clone())?)))
}

/// The labelled trunk positions of each trace of `set`, with the target's statistics at the
/// last committed token when `f` reads them.
pub fn trace_samples(set: &TraceSet, f: &CalibratedFit) -> Result<Vec<Vec<Sample>>> {
    let mut out = Vec::new();
    for t in set.traces() {
        let mut samples = Vec::new();
        for s in t.acceptance_samples(f.max_candidates)? {
            let target = match f.target {
                true => Some(
                    s.target.context("the model reads the target, and the tuning traces hold no target statistics")?,
                ),
                false => None,
            };
            samples.push(Sample::of(&s.stats, s.depth, s.accepted, target.as_ref()));
        }
        out.push(samples);
    }
    Ok(out)
}

/// The model fitted on the labelled positions of `traces` (one list per trace): every
/// `holdout_every`-th trace held out for the temperatures.
pub fn fit_traces(traces: &[Vec<Sample>], f: &CalibratedFit) -> Result<ModelFit> {
    let (mut train, mut held) = (Vec::new(), Vec::new());
    for (i, t) in traces.iter().enumerate() {
        if (i + 1) % f.holdout_every == 0 { held.extend_from_slice(t) } else { train.extend_from_slice(t) }
    }
    fit(&train, &held, f.l2, inputs(f.target))
}

/// The model fitted on the trunks of `set` ([`fit_traces`]).
pub fn fit_on(set: &TraceSet, f: &CalibratedFit) -> Result<ModelFit> {
    fit_traces(&trace_samples(set, f)?, f)
}

fn throughputs(
    builder: &mut TraceBuilder,
    set: &mut TraceSet,
    params: &[CalibratedParams],
    c: &Costs,
) -> Result<Vec<f64>> {
    super::throughputs(builder, set, params.iter().map(live).collect::<Result<_>>()?, c)
}

/// Each rule's best threshold on the tuning traces at `c`, then the fitted product rule.
pub fn choose(
    builder: &mut TraceBuilder,
    set: &mut TraceSet,
    model: &ModelFit,
    f: &CalibratedFit,
    c: &Costs,
) -> Result<Vec<Choice>> {
    let mut out = Vec::new();
    for (base, rule) in [(TOKEN, CalibratedRule::Token), (PRODUCT, CalibratedRule::Product)] {
        let params: Vec<CalibratedParams> = f
            .thresholds
            .iter()
            .map(|&threshold| CalibratedParams {
                weights: model.weights.clone(),
                temperatures: model.temperatures.clone(),
                rule,
                threshold,
                max_candidates: f.max_candidates,
            })
            .collect();
        let tps = throughputs(builder, set, &params, c)?;
        // The first on ties.
        let best = (0..tps.len()).fold(0, |b, i| if tps[i] > tps[b] { i } else { b });
        out.push(Choice {
            family: family(base, f),
            params: params[best].clone(),
            tuning_throughput: tps[best],
            candidates: params.len(),
        });
    }
    if f.passes > 0 {
        let start = out[1].params.clone();
        let steps = vec![0.25; start.weights.len()];
        let with = |x: &[f64]| CalibratedParams { weights: x.to_vec(), ..start.clone() };
        let s = search::coordinate_search(&start.weights, &steps, f.passes, |xs| {
            throughputs(builder, set, &xs.iter().map(|x| with(x)).collect::<Vec<_>>(), c)
        })?;
        out.push(Choice {
            family: family(FITTED, f),
            params: with(&s.x),
            tuning_throughput: s.objective,
            candidates: s.evaluations,
        });
    }
    Ok(out)
}
