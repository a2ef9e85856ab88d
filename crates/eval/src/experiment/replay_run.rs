//! `specx eval replay RUN_DIR --config GRID.toml`: every greedy unit of a finished eval run
//! replayed under another method grid, in the results schema with `replayed = true`, next to
//! the run's real rows; settings that were also run for real are checked count for count.

use super::config::OutputConfig;
use super::drafter_replay::{check_live, replay_unit, replay_with_drafter, replays_live};
use super::grid::expand;
use super::manifest::EvalManifest;
use super::methods::MethodsConfig;
use super::replay::{ReplayCosts, ReplayPolicy};
use super::trace_builder::{TraceBuilder, TraceInput};
use crate::common::results::{ResultRow, UnitFile, tokens_sha256};
use crate::common::timing::{least_squares, standalone_target};
use crate::method::drafter::Feature;
use crate::method::drafter::FeatureHeads;
use crate::method::family::DEFAULT_HEAD;
use crate::method::models::default_feature_head_dir;
use crate::method::models::load_heads_for_draft_as_loaded;
use crate::method::policy::head::check_head_dirs;
use crate::method::{DrafterSpec, MethodSpec, Setting};
use anyhow::{Context, Result, bail, ensure};
use indicatif::{ProgressBar, ProgressStyle};
use serde::{Deserialize, Serialize};
use specx_decoder::speculative::{FeatureDraft, FeatureHeadDrafter};
use specx_decoder::{device_from_name, load_model_as};
use specx_run::RunManifest;
use specx_run::config::read_toml;
use specx_run::paths::resolve_path;
use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};

/// The grid file of a replay: a `[methods]` table as in eval configs, optionally where to
/// write (default `RUN_DIR/replay-<grid file stem>`) and the forward times that price a
/// replayed round for the policies rewarded with throughput (`[costs] t_draft, t_target`;
/// default the SpecDec++ paper's A100 times).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ReplayConfig {
    pub methods: MethodsConfig,
    pub output: Option<OutputConfig>,
    #[serde(default)]
    pub costs: ReplayCosts,
}

impl ReplayConfig {
    pub fn load(path: &Path) -> Result<Self> {
        let (mut cfg, base): (Self, PathBuf) = read_toml(path)?;
        resolve_method_paths(&mut cfg.methods, &base, path)?;
        if let Some(o) = &mut cfg.output {
            o.dir = resolve_path(&o.dir, &base);
        }
        Ok(cfg)
    }
}

/// Resolves the head directories of `methods` against `base` (the directory of the config
/// file `path`) and checks that each acceptance head is a checkpoint.
pub fn resolve_method_paths(methods: &mut MethodsConfig, base: &Path, path: &Path) -> Result<()> {
    for p in methods.paths_mut() {
        *p = resolve_path(p, base);
    }
    check_head_dirs(methods.head_dirs().into_iter().map(PathBuf::as_path), &format!("config {}:", path.display()))
}

/// Greedy units traced together (their draft forwards share ragged batches): enough rows per
/// wave to use the kernel's batching, few enough trunk caches (~25 KB per token each).
const UNITS_PER_GROUP: usize = 16;

/// Forward times that turn replayed counts into predicted wall times, and where they came from.
#[derive(Clone, Debug, Serialize)]
pub struct TimeModel {
    pub t_draft: f64,
    pub t_target: f64,
    pub source: String,
}

/// Per dataset: eq. 3.1 fitted on the run's real speculative rows when there are enough and
/// the fit is physical; else single-token forward times measured at replay start: the draft's
/// always, the target's when the AR rows were batched (their times are not single-stream
/// times) or when their standalone fit is not physical either (one prompt, or noisy rows).
fn time_models(
    rows: &[ResultRow],
    single_draft: f64,
    single_target: f64,
    batched: bool,
) -> BTreeMap<String, TimeModel> {
    let mut by: BTreeMap<String, Vec<&ResultRow>> = BTreeMap::new();
    for r in rows.iter().filter(|r| !r.replayed) {
        by.entry(r.dataset.clone()).or_default().push(r);
    }
    let measured = |why: &str| TimeModel {
        t_draft: single_draft,
        t_target: single_target,
        source: format!("single-token draft and target forwards measured at replay start (medians of 24; {why})"),
    };
    by.into_iter()
        .map(|(d, rs)| {
            let spec: Vec<&&ResultRow> = rs.iter().filter(|r| r.setting.family() != "ar").collect();
            let fit = least_squares(&spec.iter().map(|r| vec![r.n_draft_calls as f64, r.n_target_calls as f64]).collect::<Vec<_>>(), &spec.iter().map(|r| r.total_time_s).collect::<Vec<_>>());
            let standalone = standalone_target(&rs).filter(|f| f.has_positive_times());
            let model = match (fit, batched, standalone) {
                (Some(f), _, _) if spec.len() >= 3 && f.has_positive_times() => {
                    TimeModel { t_draft: f.coefficients[0], t_target: f.coefficients[1], source: format!("eq. 3.1 fitted on {} real speculative rows (R² {:.3})", spec.len(), f.r2) }
                }
                (_, true, _) => measured("the AR rows were batched"),
                (_, false, Some(f)) => TimeModel { t_draft: single_draft, t_target: f.coefficients[0], source: "standalone target time of the AR rows; draft time of a single-token forward measured at replay start (median of 24)".into() },
                (_, false, None) => measured("no fit of the run's rows came out physical"),
            };
            (d, model)
        })
        .collect()
}

/// Median time of a single-token draft forward (as a live drafter runs it) after the first
/// unit's prompt: replay batches its forwards, so its own times say nothing about that.
fn single_forward_seconds(draft: &specx_decoder::Transformer, unit: &UnitFile) -> Result<f64> {
    let mut cache = draft.new_cache(1);
    draft.forward(&unit.prompt, &mut cache)?;
    let mut times: Vec<f64> = (0..24)
        .map(|i| {
            let token = unit.ar_tokens.get(i).copied().unwrap_or(unit.prompt[0]);
            let t = std::time::Instant::now();
            draft.forward(&[token], &mut cache).map(|_| t.elapsed().as_secs_f64())
        })
        .collect::<Result<_>>()?;
    times.sort_by(f64::total_cmp);
    Ok(times[times.len() / 2])
}

/// The counters in which a real row and its replay differ, as `name real vs replayed`.
fn count_differences(
    real: &specx_decoder::speculative::RequestMetrics,
    replayed: &specx_decoder::speculative::RequestMetrics,
) -> String {
    let (a, b) = (serde_json::to_value(real).unwrap_or_default(), serde_json::to_value(replayed).unwrap_or_default());
    let fields = a.as_object().into_iter().flatten().filter(|(k, v)| b.get(k.as_str()) != Some(v));
    fields
        .map(|(k, v)| format!("{k} {v} vs {}", b.get(k.as_str()).unwrap_or(&serde_json::Value::Null)))
        .collect::<Vec<_>>()
        .join(", ")
}

/// How a setting is replayed.
enum Replayer {
    /// From the batched draft traces, with the trace policy of this index.
    Trace(usize),
    /// By running the method's drafter along the AR output.
    Live(MethodSpec),
}

/// What a replay produced.
pub struct ReplayOutcome {
    pub dir: PathBuf,
    pub replayed: Vec<ResultRow>,
    /// (real rows compared, rows whose counts differ, with a description of each difference).
    pub compared: usize,
    pub mismatches: Vec<String>,
}

/// Replays every finished greedy unit of the run in `run_dir` under `grid`.
pub fn replay(run_dir: &Path, grid: &ReplayConfig, grid_name: &str, progress: bool) -> Result<ReplayOutcome> {
    let manifest = EvalManifest::read(run_dir)?;
    let settings: Vec<Setting> = expand(&grid.methods)?.into_iter().filter(|s| s.family() != "ar").collect();
    ensure!(!settings.is_empty(), "the grid has no speculative method to replay");
    let out = grid.output.as_ref().map_or_else(|| run_dir.join(format!("replay-{grid_name}")), |o| o.dir.clone());
    let files = super::merge::greedy_units(run_dir)?;
    if out.is_dir() {
        specx_run::resume::remove_stale_temporaries(&out)?;
    }

    let c = &manifest.config.models;
    let device = device_from_name(&c.device)?;
    ensure!(c.draft.exists(), "the run's draft model {} is gone", c.draft.display());
    let draft = load_model_as(&c.draft, c.draft_tokenizer.as_deref(), &device, c.weights)?;
    let sha = draft.weights_sha256()?;
    if sha != manifest.draft.sha256 {
        bail!(
            "{} changed since the run (sha256 {} now, {} then)",
            c.draft.display(),
            &sha[..12],
            &manifest.draft.sha256[..12]
        );
    }
    // Traces are the draft's as loaded: a cheaper draft proposes other tokens, and a head made
    // for one reads other hidden states.
    if let Some(s) = settings.iter().filter_map(Setting::spec).find(|s| !s.draft.is_identity()) {
        bail!(
            "{}: replays trace the draft as loaded; a cheaper draft ({}) runs for real (specx eval)",
            s.key(),
            s.draft.label()
        );
    }
    let head_map = load_heads_for_draft_as_loaded(grid.methods.head_dirs(), &draft, &device)?;
    // The trace's head list and each name's index in it.
    let heads: Vec<specx_decoder::speculative::AcceptanceHead> = head_map.values().cloned().collect();
    let head_index: HashMap<String, usize> = head_map.keys().enumerate().map(|(i, name)| (name.clone(), i)).collect();
    // The target: its single-token time prices every report; a feature head reads its states.
    let target = load_model_as(&c.target, c.target_tokenizer.as_deref(), &device, c.weights)?;
    let target_sha = target.weights_sha256()?;
    ensure!(
        target_sha == manifest.target.sha256,
        "{} changed since the run (sha256 {} now, {} then)",
        c.target.display(),
        &target_sha[..12],
        &manifest.target.sha256[..12]
    );
    let mut feature_heads = FeatureHeads::new();
    for head in settings.iter().filter_map(Setting::feature_head) {
        if !feature_heads.contains_key(head) {
            let dir = if head == DEFAULT_HEAD { default_feature_head_dir() } else { PathBuf::from(head) };
            feature_heads.insert(head.to_string(), FeatureDraft::load(&dir, &target.model, Some(&target_sha))?);
        }
    }
    // Plain drafters replay from traces; EasySpec's, prompt lookup's, the hybrid, the
    // feature head and the suffix drafter's trees run live along the AR output.
    let mut policies = Vec::new();
    let mut how = Vec::with_capacity(settings.len());
    for s in settings.iter().filter_map(Setting::spec) {
        if replays_live(s) {
            check_live(s, &draft.model, &head_map)?;
            how.push(Replayer::Live(s.clone()));
        } else {
            how.push(Replayer::Trace(policies.len()));
            policies.push(ReplayPolicy::of(s, &head_index)?);
        }
    }

    let bar = if progress { ProgressBar::new(files.len() as u64) } else { ProgressBar::hidden() };
    bar.set_style(ProgressStyle::with_template(
        "{bar:30} {pos}/{len} greedy units replayed, {elapsed} elapsed, ETA {eta} {msg}",
    )?);
    let mut replayed_counts = Vec::new();
    let mut builder = TraceBuilder::new(&draft.model, &heads, &manifest.eos_ids);
    let earlier = super::earlier::EarlierOutputs::of_files(super::earlier::bound(&settings), &files);
    // Units in groups, their draft forwards batched together (see TraceBuilder).
    for group in files.chunks(UNITS_PER_GROUP) {
        let inputs: Vec<TraceInput> = group.iter().map(TraceInput::of).collect::<Result<_>>()?;
        let before = builder.rows;
        let traces =
            if policies.is_empty() { Vec::new() } else { builder.build(&inputs, &mut policies, &grid.costs)? };
        for (i, u) in group.iter().enumerate() {
            let (earlier_outputs, _) = earlier.for_unit(&u.unit)?;
            let counts = how.iter().map(|h| match h {
                Replayer::Trace(p) => traces[i].replay(&mut policies[*p], &grid.costs),
                Replayer::Live(method) => match &method.drafter {
                    DrafterSpec::Feature(Feature { head }) => {
                        // The target reads the whole trace once: every prefix the replay
                        // commits is a prefix of it.
                        let mut d = FeatureHeadDrafter::new(&target.model, &feature_heads[head]);
                        d.read_text(&[u.prompt.as_slice(), u.ar_tokens.as_slice()].concat())?;
                        replay_with_drafter(
                            &mut d,
                            method.build_policy(&head_map)?.as_mut(),
                            &u.prompt,
                            &u.ar_tokens,
                            u.rows[0].max_new_tokens,
                            &manifest.eos_ids,
                            &grid.costs,
                        )
                    }
                    _ => replay_unit(
                        method,
                        &draft.model,
                        &head_map,
                        &earlier_outputs,
                        u,
                        &manifest.eos_ids,
                        &grid.costs,
                    ),
                },
            });
            replayed_counts.push(
                counts
                    .collect::<Result<Vec<_>>>()
                    .with_context(|| format!("replaying {} {}", u.unit.dataset, u.unit.prompt_id))?,
            );
        }
        bar.inc(group.len() as u64);
        if bar.is_hidden() {
            eprintln!(
                "replayed {} units ({} draft rows, {} forwards so far, {:.0} s)",
                replayed_counts.len(),
                builder.rows - before,
                builder.calls,
                builder.time.as_secs_f64()
            );
        }
    }
    bar.finish_and_clear();
    let (forwards, draft_time) = (builder.rows, builder.time.as_secs_f64());
    let single = single_forward_seconds(&draft.model, &files[0])?;
    // Always measured: reports price counts with this pair of single-token times whatever the
    // run's wall times allow (a fit on a few noisy rows may come out negative).
    let single_target = single_forward_seconds(&target.model, &files[0])?;
    let batched = files.iter().any(|u| u.rows[0].batch > 1);

    let real: Vec<ResultRow> = files.iter().flat_map(|u| u.rows.clone()).collect();
    let times = time_models(&real, single, single_target, batched);
    let mut replayed = Vec::new();
    let (mut compared, mut mismatches) = (0, Vec::new());
    for (u, counts) in files.iter().zip(&replayed_counts) {
        let ar = &u.rows[0];
        let tm = &times[&ar.dataset];
        for (s, c) in settings.iter().zip(counts) {
            if let Some(r) = u.rows.iter().find(|r| r.setting == *s) {
                compared += 1;
                let real = r.metrics().counts_only();
                if real != c.counts_only() {
                    mismatches.push(format!(
                        "{} {} {}: {}",
                        r.dataset,
                        r.prompt_id,
                        s.key(),
                        count_differences(&real, &c.counts_only())
                    ));
                }
            }
            // A live replay measured its drafting (calibrations are multi-token forwards, which
            // the per-call time does not price); trace replays batch theirs, so predict it.
            let draft_s =
                if c.draft_time.is_zero() { tm.t_draft * c.n_draft_calls as f64 } else { c.draft_time.as_secs_f64() };
            let target_s = tm.t_target * c.n_target_calls as f64;
            replayed.push(ResultRow {
                setting: s.clone(),
                replayed: true,
                n_generated: c.n_generated,
                n_target_calls: c.n_target_calls,
                n_draft_calls: c.n_draft_calls,
                n_calibrations: c.n_calibrations,
                n_drafted: c.n_drafted,
                n_accepted: c.n_accepted,
                n_verified: c.n_verified,
                draft_time_s: draft_s,
                target_time_s: target_s,
                total_time_s: draft_s + target_s,
                accepted_per_round: c.accepted_per_round.clone(),
                drafted_per_round: c.drafted_per_round.clone(),
                output_sha256: tokens_sha256(&u.ar_tokens),
                identical_to_ar: true,
                // A batched AR row's time is not a single-stream time: the AR reference is then
                // eq. 5.1's too (one target forward per token).
                speedup: if ar.batch > 1 { tm.t_target * ar.n_target_calls as f64 } else { ar.total_time_s }
                    / (draft_s + target_s).max(1e-9),
                batch: 1,
                divergence: None,
                dsi: None,
                turns: Vec::new(),
                ..ar.clone()
            });
        }
    }
    let mut all = real;
    all.extend(replayed.iter().cloned());
    std::fs::create_dir_all(&out).with_context(|| format!("creating {}", out.display()))?;
    let record = serde_json::json!({
        "run": run_dir, "grid": grid, "settings": settings.iter().map(Setting::key).collect::<Vec<_>>(),
        "time_models": times, "draft_rows": forwards, "draft_calls": builder.calls, "draft_seconds": draft_time, "draft_single_forward_seconds": single, "target_single_forward_seconds": single_target,
        "compared_with_real": compared, "mismatches": mismatches,
    });
    specx_decoder::fsutil::write_atomic(&out.join("replay.json"), serde_json::to_string_pretty(&record)?.as_bytes())?;
    super::report::write_reports(&out, &manifest, &all)?;
    Ok(ReplayOutcome { dir: out, replayed, compared, mismatches })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::method::{MethodSpec, Setting};

    #[test]
    fn without_a_physical_fit_the_measured_forwards_price_the_counts() {
        let spec = |k, calls, total| ResultRow {
            n_draft_calls: k * calls,
            n_target_calls: calls,
            total_time_s: total,
            ..ResultRow::example(Setting::Speculative(MethodSpec::plain(crate::method::policy::Fixed { k })))
        };
        // Noisy rows: more calls took less time, so the fit's draft time comes out negative,
        // and one AR row is too few for a standalone fit.
        let noisy = vec![
            ResultRow { total_time_s: 1.0, ..ResultRow::example(Setting::Ar) },
            spec(2, 4, 0.9),
            spec(4, 3, 0.5),
            spec(6, 3, 0.2),
        ];
        let m = &time_models(&noisy, 0.01, 0.1, false)["d"];
        assert_eq!((m.t_draft, m.t_target), (0.01, 0.1), "{}", m.source);
        assert!(m.source.contains("measured at replay start"), "{}", m.source);
        // Consistent rows: eq. 3.1's fit, whatever was measured.
        let clean: Vec<ResultRow> = [(2, 4), (4, 3), (6, 3), (1, 8)]
            .into_iter()
            .map(|(k, c)| spec(k, c, 0.02 * (k * c) as f64 + 0.2 * c as f64))
            .collect();
        let m = &time_models(&clean, 0.01, 0.1, false)["d"];
        assert!((m.t_draft - 0.02).abs() < 1e-9 && (m.t_target - 0.2).abs() < 1e-9, "{m:?}");
        assert!(time_models(&noisy, 0.01, 0.1, true)["d"].source.contains("batched"));
    }
}
