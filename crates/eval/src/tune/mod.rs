//! `specx eval tune --config configs/eval/tune-stop-rules.toml`: stop rules judged out of
//! sample. Every free parameter (each family's setting among its candidates, the heads'
//! thresholds and bounds, fixed K's K, threshold-plus's fitted weights) is chosen on greedy
//! traces of tuning prompts, per prompt set and per cost model; the test traces are then
//! replayed once, with the chosen settings only, and every speedup is reported with a
//! per-prompt bootstrap interval. Replays are exact (the same policy objects live decoding
//! uses, fed the draft's recorded looks: [`crate::experiment::replay`]).
//!
//! Each prompt set's result is written as soon as it is done (`OUT/sets/<set>.json`, with the
//! config it was computed under), so a stopped run resumes at the next set.

pub mod acceptance_model;
pub mod bootstrap;
pub mod calibrate;
pub mod config;
pub mod curve;
pub mod in_sample;
mod joined;
mod live;
mod report;
mod runs;
pub mod search;

use crate::common::costs::Costs;
use crate::common::results::UnitFile;
use crate::experiment::drafter_replay::replays_live;
use crate::experiment::earlier::{self, EarlierOutputs};
use crate::experiment::grid::expand;
use crate::experiment::replay::{ReplayCosts, ReplayPolicy};
use crate::experiment::target_stats::cached_target_stats;
use crate::experiment::trace_builder::{TraceBuilder, TraceInput, TraceSet};
use crate::method::models::load_heads_for_draft_as_loaded;
use crate::method::policy::Heads;
use crate::method::{MethodSpec, PolicySpec, Setting};
use anyhow::{Context, Result, bail, ensure};
use bootstrap::{UnitCounts, throughput};
use config::TuneConfig;
use indicatif::{ProgressBar, ProgressStyle};
use live::LiveCounts;
use runs::{Runs, load_checked, of};
use serde::{Deserialize, Serialize};
use specx_decoder::speculative::{AcceptanceHead, ThresholdPlusParams, ThresholdPlusPolicy};
use specx_decoder::{Transformer, device_from_name};
use std::collections::{BTreeMap, HashMap};
use std::path::Path;
use std::time::Instant;

/// The family whose tuned setting is every speedup's reference.
pub const REFERENCE: &str = "specdec";
/// The family fitted here.
pub const THRESHOLD_PLUS: &str = "threshold-plus";
/// The family threshold-plus starts from (and must beat).
pub const CONFIDENCE: &str = "confidence";
pub const ORACLE: &str = "oracle";

/// One family's chosen setting at one cost model: its tuning throughput and its test counts.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct RuleResult {
    pub family: String,
    pub setting: String,
    /// Candidates the family had on the tuning traces.
    pub candidates: usize,
    pub tuning_throughput: f64,
    /// Per test prompt, in unit order.
    pub test: Vec<UnitCounts>,
}

/// Threshold-plus's fit at one cost model.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct FitRecord {
    pub params: ThresholdPlusParams,
    /// Tuning throughput at the start (the tuned confidence threshold) and after the fit.
    pub start_throughput: f64,
    pub fitted_throughput: f64,
    pub moves: usize,
    pub evaluations: usize,
}

#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct CostResult {
    pub costs: Costs,
    pub rules: Vec<RuleResult>,
    pub threshold_plus: Option<FitRecord>,
    /// The calibrated model's rules as chosen on the tuning traces.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub calibrated: Vec<acceptance_model::Choice>,
}

/// One prompt set's results, with what they were computed from.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct SetResult {
    pub dataset: String,
    pub config: TuneConfig,
    pub tuning_prompts: Vec<String>,
    pub test_prompts: Vec<String>,
    pub results: Vec<CostResult>,
    /// The calibrated acceptance model fitted on the tuning traces.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub acceptance_model: Option<calibrate::ModelFit>,
    /// Draft rows forwarded for this set (trunks and branches, both splits) and their seconds.
    pub draft_rows: usize,
    pub draft_seconds: f64,
    /// The target's forwards over every trace (both splits), for a model that reads the target.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub target_pass: Option<TargetPass>,
}

/// Target rows forwarded over the traces and their seconds.
#[derive(Clone, Copy, Debug, Default, Serialize, Deserialize)]
pub struct TargetPass {
    pub rows: usize,
    pub seconds: f64,
}

/// The candidate settings and the family each belongs to.
struct Candidates {
    settings: Vec<MethodSpec>,
    families: Vec<String>,
}

impl Candidates {
    fn of(cfg: &TuneConfig) -> Result<Self> {
        let settings: Vec<MethodSpec> = expand(&cfg.methods)?.iter().filter_map(|s| s.spec().cloned()).collect();
        ensure!(!settings.is_empty(), "the config lists no speculative setting to tune");
        let families: Vec<String> = settings.iter().map(|m| family(m, &cfg.head_families)).collect();
        ensure!(
            families.iter().any(|f| f == REFERENCE) || cfg.rules_from.is_some(),
            "the candidates need fixed K (policies.fixed), the reference of every speedup, unless rules_from names a tune output that has it"
        );
        ensure!(
            cfg.threshold_plus.is_none() || families.iter().any(|f| f == CONFIDENCE),
            "threshold-plus starts from the tuned confidence threshold: list policies.confidence among the candidates"
        );
        Ok(Self { settings, families })
    }
}

/// A setting's family: its method's, or the head family its head is listed in.
fn family(m: &MethodSpec, head_families: &BTreeMap<String, Vec<String>>) -> String {
    if let Some(head) = m.policy.head()
        && let Some((f, _)) = head_families.iter().find(|(_, heads)| heads.iter().any(|h| h == head))
    {
        return crate::common::run_rows::head_family(m.family(), f);
    }
    m.family().to_string()
}

fn replay_costs(c: &Costs) -> ReplayCosts {
    ReplayCosts { t_draft: c.t_draft, t_target: c.t_target, t_row: c.t_row }
}

/// Every trace of `set` replayed under each policy: counts per policy, per trace.
fn counts(
    builder: &mut TraceBuilder,
    set: &mut TraceSet,
    policies: &mut [ReplayPolicy],
    rc: &ReplayCosts,
) -> Result<Vec<Vec<UnitCounts>>> {
    builder.complete(set, policies, rc)?;
    policies.iter_mut().map(|p| set.traces().map(|t| t.replay(p, rc).map(|m| UnitCounts::of(&m))).collect()).collect()
}

/// The target's side of the replays.
struct TargetSide<'a> {
    model: &'a Transformer,
    sha256: String,
    weights: String,
    cache: std::path::PathBuf,
}

/// The loaded models and what replays need from them.
struct Replayer<'a> {
    draft: &'a Transformer,
    /// The target, when a rule reads its statistics at the last committed token: the model,
    /// its sha256, its weight mode, and where its statistics along each trace are cached.
    target: Option<TargetSide<'a>>,
    heads: &'a [AcceptanceHead],
    head_index: &'a HashMap<String, usize>,
    /// The same heads by name, for the live candidates' policies.
    head_map: &'a Heads,
    eos: &'a [u32],
    /// The earlier outputs of the tuning run and of the test run (the suffix drafter's corpus).
    earlier: [EarlierOutputs<'a>; 2],
    /// Whether any candidate or fit replays from the draft's traces.
    traced: bool,
}

impl Replayer<'_> {
    /// Refuses, before hours of forwards start, a candidate that cannot be replayed.
    fn check(&self, settings: &[MethodSpec]) -> Result<()> {
        for m in settings {
            if replays_live(m) {
                live::check(m, self.draft, self.head_map)?;
            } else {
                let _ = ReplayPolicy::of(m, self.head_index)?;
            }
        }
        Ok(())
    }

    /// Live counts on `units`, the traces of one prompt set of the tuning run (`split` 0) or
    /// of the test run (1).
    fn live<'b>(&'b self, units: &'b [&'b UnitFile], split: usize, bar: &ProgressBar) -> LiveCounts<'b> {
        LiveCounts::new(self.draft, self.head_map, self.eos, units, &self.earlier[split], bar.clone())
    }

    /// Per unit of `set`, the counts of each of `specs` at `c` (plain drafters' from the
    /// traces, the others' live), then those of the trace policies `extra`.
    fn counts(
        &self,
        builder: &mut TraceBuilder,
        set: &mut TraceSet,
        live: &mut LiveCounts,
        specs: &[&MethodSpec],
        extra: Vec<ReplayPolicy>,
        c: &Costs,
    ) -> Result<Vec<Vec<UnitCounts>>> {
        let mut policies = Vec::new();
        let mut traced_at = Vec::with_capacity(specs.len());
        for m in specs {
            traced_at.push(if replays_live(m) {
                None
            } else {
                policies.push(ReplayPolicy::of(m, self.head_index)?);
                Some(policies.len() - 1)
            });
        }
        let n_traced = policies.len();
        policies.extend(extra);
        let mut traced =
            if policies.is_empty() { Vec::new() } else { counts(builder, set, &mut policies, &replay_costs(c))? };
        let extra_counts = traced.split_off(n_traced);
        let mut out = Vec::with_capacity(specs.len() + extra_counts.len());
        for (m, at) in specs.iter().zip(traced_at) {
            out.push(match at {
                Some(i) => std::mem::take(&mut traced[i]),
                None => live.counts(m, c)?,
            });
        }
        out.extend(extra_counts);
        Ok(out)
    }

    /// The trunks of `units`, with the target's statistics along them when a rule reads the
    /// target (their forwards are counted in `pass`).
    fn start(
        &self,
        builder: &mut TraceBuilder,
        units: &[&UnitFile],
        split: &str,
        pass: &mut TargetPass,
    ) -> Result<TraceSet> {
        // With every candidate live, the draft's trunks along the traces are never read.
        let units = if self.traced { units } else { &[] };
        let inputs: Vec<TraceInput> = units.iter().map(|u| TraceInput::of(u)).collect::<Result<_>>()?;
        let mut set = builder.start(&inputs, true)?;
        if let Some(target) = &self.target {
            let t = Instant::now();
            let bar = ProgressBar::new(inputs.len() as u64);
            bar.set_style(ProgressStyle::with_template(
                "{bar:30} {pos}/{len} traces through the target ({elapsed}, eta {eta})",
            )?);
            for (i, (input, u)) in inputs.iter().zip(units).enumerate() {
                let cache = u.unit.path(&target.cache.join(split));
                let (stats, rows) = cached_target_stats(target.model, &target.sha256, &target.weights, input, &cache)
                    .with_context(|| format!("{} {}", u.unit.dataset, u.unit.prompt_id))?;
                set.set_target(i, stats)?;
                pass.rows += rows;
                bar.inc(1);
            }
            bar.finish_and_clear();
            pass.seconds += t.elapsed().as_secs_f64();
        }
        Ok(set)
    }
}

/// Tuning throughput on `set` at `c` of each policy.
fn throughputs(
    builder: &mut TraceBuilder,
    set: &mut TraceSet,
    mut policies: Vec<ReplayPolicy>,
    c: &Costs,
) -> Result<Vec<f64>> {
    let all = counts(builder, set, &mut policies, &replay_costs(c))?;
    Ok(all.iter().map(|u| throughput(u, c)).collect())
}

/// Threshold-plus's throughput on `set` at `c` for each parameter vector.
fn threshold_plus_objective(
    builder: &mut TraceBuilder,
    set: &mut TraceSet,
    params: &[ThresholdPlusParams],
    c: &Costs,
) -> Result<Vec<f64>> {
    let policies = params
        .iter()
        .map(|p| Ok(ReplayPolicy::Live(Box::new(ThresholdPlusPolicy::new(p.clone())?))))
        .collect::<Result<Vec<_>>>()?;
    throughputs(builder, set, policies, c)
}

/// Each chosen family's result, with its test counts from `test` in order: the families',
/// then threshold-plus's, then the calibrated rules'.
fn rules_of(
    cands: &Candidates,
    families: Vec<(String, usize, usize, f64)>,
    fit: &Option<FitRecord>,
    calibrated: &[acceptance_model::Choice],
    mut test: impl Iterator<Item = Vec<UnitCounts>>,
) -> Result<Vec<RuleResult>> {
    let mut rules: Vec<RuleResult> = families
        .into_iter()
        .zip(test.by_ref())
        .map(|((family, i, n, tps), test)| RuleResult {
            family,
            setting: cands.settings[i].key(),
            candidates: n,
            tuning_throughput: tps,
            test,
        })
        .collect();
    if let Some(f) = fit {
        let test = test.next().context("threshold-plus's test counts")?;
        rules.push(RuleResult {
            family: THRESHOLD_PLUS.into(),
            setting: "threshold-plus (fitted)".into(),
            candidates: f.evaluations,
            tuning_throughput: f.fitted_throughput,
            test,
        });
    }
    for ch in calibrated {
        let test = test.next().with_context(|| format!("{}'s test counts", ch.family))?;
        rules.push(RuleResult {
            family: ch.family.clone(),
            setting: ch.setting(),
            candidates: ch.candidates,
            tuning_throughput: ch.tuning_throughput,
            test,
        });
    }
    Ok(rules)
}

/// Tunes every family on one prompt set's tuning traces and replays the chosen settings on its
/// test traces (with `tuning_only`, not: the result holds no test counts).
fn tune_set(
    cfg: &TuneConfig,
    cands: &Candidates,
    r: &Replayer,
    dataset: &str,
    tuning: &[&UnitFile],
    test: &[&UnitFile],
    tuning_only: bool,
) -> Result<SetResult> {
    let mut builder = TraceBuilder::new(r.draft, r.heads, r.eos);
    let bar = ProgressBar::new_spinner();
    bar.set_style(ProgressStyle::with_template("{spinner} {pos} draft looks ({per_sec}), {elapsed}: {msg}")?);
    bar.set_message(format!("{dataset}: the tuning traces' trunks"));
    builder.progress = Some(bar.clone());
    let t0 = Instant::now();
    let mut pass = TargetPass::default();
    let mut set = r.start(&mut builder, tuning, "tuning", &mut pass)?;
    let trunk = (builder.rows, t0.elapsed().as_secs_f64());
    bar.suspend(|| eprintln!("{dataset}: {} tuning traces, {} trunk looks in {:.0} s", tuning.len(), trunk.0, trunk.1));
    let model = cfg.calibrated.as_ref().map(|f| acceptance_model::fit_on(&set, f)).transpose()?;
    if let Some(m) = &model {
        bar.suspend(|| {
            eprintln!(
                "{dataset}: acceptance model on {} positions, held-out log loss {:.4} (draft probability {:.4})",
                m.fit_samples, m.calibrated.log_loss, m.draft_probability.log_loss
            )
        });
    }
    let all: Vec<&MethodSpec> = cands.settings.iter().collect();
    let mut live_tuning = r.live(tuning, 0, &bar);
    let mut chosen: Vec<Chosen> = Vec::new();
    for c in &cfg.costs {
        bar.set_message(format!("{dataset}, {}: {} candidates on the tuning traces", c.name, all.len()));
        let tuned = r.counts(&mut builder, &mut set, &mut live_tuning, &all, Vec::new(), c)?;
        // Each family's best candidate by tuning throughput (the first on ties).
        let mut best: BTreeMap<&str, (usize, usize, f64)> = BTreeMap::new();
        for (i, u) in tuned.iter().enumerate() {
            let tps = throughput(u, c);
            let e = best.entry(&cands.families[i]).or_insert((i, 0, f64::NEG_INFINITY));
            e.1 += 1;
            if tps > e.2 {
                (e.0, e.2) = (i, tps);
            }
        }
        let fit = match &cfg.threshold_plus {
            None => None,
            Some(f) => {
                let PolicySpec::Confidence(conf) = &cands.settings[best[CONFIDENCE].0].policy else {
                    bail!("the confidence family holds a non-confidence setting")
                };
                let start = ThresholdPlusParams::confidence(conf.threshold, f.max_candidates);
                let steps = [0.5, 0.5, 0.5, 0.5, 0.5, 0.5, 0.5, 1.0, 1.0];
                let t = Instant::now();
                bar.set_message(format!("{dataset}, {}: threshold-plus's search", c.name));
                let s = search::coordinate_search(&start.coordinates(), &steps, f.passes, |xs| {
                    threshold_plus_objective(
                        &mut builder,
                        &mut set,
                        &xs.iter().map(|x| start.with_coordinates(x)).collect::<Vec<_>>(),
                        c,
                    )
                })?;
                bar.suspend(|| eprintln!("{dataset}, {}: threshold-plus {:.3} -> {:.3} tok/s on the tuning traces ({} moves, {} evaluations, {:.0} s)", c.name, s.start_objective, s.objective, s.moves.len(), s.evaluations, t.elapsed().as_secs_f64()));
                Some(FitRecord {
                    params: start.with_coordinates(&s.x),
                    start_throughput: s.start_objective,
                    fitted_throughput: s.objective,
                    moves: s.moves.len(),
                    evaluations: s.evaluations,
                })
            }
        };
        let calibrated = match (&model, &cfg.calibrated) {
            (Some(m), Some(f)) => {
                bar.set_message(format!("{dataset}, {}: the calibrated model's rules", c.name));
                acceptance_model::choose(&mut builder, &mut set, m, f, c)?
            }
            _ => Vec::new(),
        };
        chosen.push((best.into_iter().map(|(f, (i, n, tps))| (f.to_string(), i, n, tps)).collect(), fit, calibrated));
    }
    drop(set);
    let mut result = SetResult {
        dataset: dataset.into(),
        config: cfg.clone(),
        tuning_prompts: tuning.iter().map(|u| u.unit.prompt_id.clone()).collect(),
        test_prompts: Vec::new(),
        results: Vec::new(),
        acceptance_model: model,
        draft_rows: 0,
        draft_seconds: 0.0,
        target_pass: None,
    };
    if tuning_only {
        result.results = cfg
            .costs
            .iter()
            .zip(chosen)
            .map(|(c, (families, fit, calibrated))| {
                Ok(CostResult {
                    costs: c.clone(),
                    rules: rules_of(cands, families, &fit, &calibrated, std::iter::repeat_with(Vec::new))?,
                    threshold_plus: fit,
                    calibrated,
                })
            })
            .collect::<Result<_>>()?;
    } else {
        result.results = replay_chosen(cfg, cands, r, &mut builder, &mut pass, dataset, test, chosen)?;
        result.test_prompts = test.iter().map(|u| u.unit.prompt_id.clone()).collect();
    }
    bar.finish_and_clear();
    (result.draft_rows, result.draft_seconds) = (builder.rows, builder.time.as_secs_f64());
    result.target_pass = r.target.as_ref().map(|_| pass);
    Ok(result)
}

/// What each cost model chose on the tuning traces: every family's best (family, candidate
/// index, candidates, tuning throughput), threshold-plus's fit, the calibrated rules.
type Chosen = (Vec<(String, usize, usize, f64)>, Option<FitRecord>, Vec<acceptance_model::Choice>);

/// Replays the settings `chosen` per cost model on the test traces, once: only the chosen
/// settings (and the oracle) run.
#[allow(clippy::too_many_arguments)]
fn replay_chosen(
    cfg: &TuneConfig,
    cands: &Candidates,
    r: &Replayer,
    builder: &mut TraceBuilder,
    pass: &mut TargetPass,
    dataset: &str,
    test: &[&UnitFile],
    chosen: Vec<Chosen>,
) -> Result<Vec<CostResult>> {
    let t1 = Instant::now();
    if let Some(bar) = &builder.progress {
        bar.set_message(format!("{dataset}: the test traces, chosen settings only"));
    }
    let mut set = r.start(builder, test, "test", pass)?;
    let bar = builder.progress.clone().unwrap_or_else(ProgressBar::hidden);
    let mut live_test = r.live(test, 1, &bar);
    let mut results = Vec::new();
    for (c, (families, fit, calibrated)) in cfg.costs.iter().zip(chosen) {
        let specs: Vec<&MethodSpec> = families.iter().map(|(_, i, _, _)| &cands.settings[*i]).collect();
        let mut extra = Vec::new();
        if let Some(f) = &fit {
            extra.push(ReplayPolicy::Live(Box::new(ThresholdPlusPolicy::new(f.params.clone())?)));
        }
        for ch in &calibrated {
            extra.push(ch.policy()?);
        }
        let test_counts = r.counts(builder, &mut set, &mut live_test, &specs, extra, c)?;
        let rules = rules_of(cands, families, &fit, &calibrated, test_counts.into_iter())?;
        results.push(CostResult { costs: c.clone(), rules, threshold_plus: fit, calibrated });
    }
    if let Some(bar) = &builder.progress {
        bar.suspend(|| {
            eprintln!(
                "{dataset}: {} test traces replayed in {:.0} s ({} draft rows in all)",
                test.len(),
                t1.elapsed().as_secs_f64(),
                builder.rows
            )
        });
    }
    Ok(results)
}

/// A set's result as written in `path`, its paths resolved (the file keeps them relative to
/// its directory).
fn finished_file(path: &Path) -> Result<SetResult> {
    let bytes = std::fs::read(path).with_context(|| format!("reading {}", path.display()))?;
    let mut r: SetResult = serde_json::from_slice(&bytes).with_context(|| format!("parsing {}", path.display()))?;
    let dir = path.parent().unwrap_or(Path::new("."));
    r.config = r.config.resolved_against(dir);
    for p in r.results.iter_mut().filter_map(|c| c.costs.profile.as_mut()) {
        *p = specx_run::paths::resolve_path(p, dir);
    }
    Ok(r)
}

/// A set's earlier result, if it was computed under this config from these prompts.
fn finished(path: &Path, cfg: &TuneConfig, tuning: &[&UnitFile], test: &[&UnitFile]) -> Option<SetResult> {
    let r = finished_file(path).ok()?;
    let ids = |u: &[&UnitFile]| u.iter().map(|u| u.unit.prompt_id.clone()).collect::<Vec<_>>();
    (r.config.same_computation(cfg) && r.tuning_prompts == ids(tuning) && r.test_prompts == ids(test)).then_some(r)
}

/// Runs the protocol of `cfg` and writes its report; returns the per-set results. With
/// `tuning_only` every setting is chosen on the tuning traces and only `OUT/tuning.md` is
/// written (the test traces stay unused, for a later run).
pub fn tune(cfg: &TuneConfig, tuning_only: bool) -> Result<Vec<SetResult>> {
    let cands = Candidates::of(cfg)?;
    let runs = Runs::open(cfg)?;
    let draft = runs.draft()?;
    let Runs { manifest: mt, tuning, test, datasets } = runs;
    let m = &mt.config.models;
    let device = device_from_name(&m.device)?;
    let head_map = load_heads_for_draft_as_loaded(cfg.methods.head_dirs(), &draft, &device)?;
    let heads: Vec<AcceptanceHead> = head_map.values().cloned().collect();
    let head_index: HashMap<String, usize> = head_map.keys().enumerate().map(|(i, n)| (n.clone(), i)).collect();
    let target = match cfg.calibrated.as_ref().is_some_and(|f| f.target) {
        true => Some(load_checked(
            "target",
            &m.target,
            m.target_tokenizer.as_deref(),
            &mt.target.sha256,
            &device,
            m.weights,
        )?),
        false => None,
    };
    let target_side = target.as_ref().map(|(t, sha)| TargetSide {
        model: &t.model,
        sha256: sha.clone(),
        weights: format!("{:?}", m.weights),
        cache: cfg.out.join("target-stats"),
    });
    let bound = earlier::bound(&cands.settings.iter().cloned().map(Setting::Speculative).collect::<Vec<_>>());
    let r = Replayer {
        draft: &draft.model,
        target: target_side,
        heads: &heads,
        head_index: &head_index,
        head_map: &head_map,
        eos: &mt.eos_ids,
        earlier: [EarlierOutputs::of_files(bound, &tuning), EarlierOutputs::of_files(bound, &test)],
        traced: cands.settings.iter().any(|m| !replays_live(m))
            || cfg.threshold_plus.is_some()
            || cfg.calibrated.is_some(),
    };
    r.check(&cands.settings)?;

    let sets_dir = cfg.out.join("sets");
    if !tuning_only {
        std::fs::create_dir_all(&sets_dir).with_context(|| format!("creating {}", sets_dir.display()))?;
    }
    let mut out = Vec::new();
    for d in &datasets {
        let (tu, te) = (of(&tuning, d), of(&test, d));
        if tuning_only {
            // The page grows with each set (a long run shows what it has).
            out.push(tune_set(cfg, &cands, &r, d, &tu, &te, true)?);
            report::write_tuning(cfg, &out)?;
            continue;
        }
        let path = sets_dir.join(format!("{d}.json"));
        let result = match finished(&path, cfg, &tu, &te) {
            Some(r) => {
                eprintln!("{d}: done earlier under this config ({}), kept", path.display());
                r
            }
            None => tune_set(cfg, &cands, &r, d, &tu, &te, false)?,
        };
        let mut written = SetResult { config: result.config.relative_to(&sets_dir), ..result.clone() };
        for p in written.results.iter_mut().filter_map(|c| c.costs.profile.as_mut()) {
            *p = config::relative(p, &sets_dir);
        }
        specx_decoder::fsutil::write_atomic(&path, serde_json::to_string(&written)?.as_bytes())?;
        out.push(result);
    }
    if tuning_only {
        return Ok(out);
    }
    let mut keys: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for (m, f) in cands.settings.iter().zip(&cands.families) {
        keys.entry(f.clone()).or_default().push(m.key());
    }
    if let Some(dir) = &cfg.rules_from {
        joined::join(dir, &mut out)?;
    }
    report::write(cfg, &out, &keys)?;
    Ok(out)
}
