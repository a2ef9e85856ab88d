//! `specx eval replay RUN_DIR --config GRID.toml`: every greedy unit of a finished eval run
//! replayed under another method grid, in the results schema with `replayed = true`, next to
//! the run's real rows; settings that were also run for real are checked count for count.

use super::config::{MethodsConfig, OutputConfig};
use super::grid::{expand, head_name, Setting};
use super::manifest::EvalManifest;
use super::replay::{DraftTrace, ReplayPolicy};
use super::results::{tokens_sha256, ResultRow, UnitFile};
use super::timing::{least_squares, standalone_target};
use crate::methods::load_head;
use anyhow::{bail, ensure, Context, Result};
use indicatif::{ProgressBar, ProgressStyle};
use serde::{Deserialize, Serialize};
use specx_datagen::config::{read_toml, resolve_path};
use specx_decoder::{device_from_name, load_model_as};
use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};

/// The grid file of a replay: a `[methods]` table as in eval configs, and optionally where
/// to write (default `RUN_DIR/replay-<grid file stem>`).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ReplayConfig {
    pub methods: MethodsConfig,
    pub output: Option<OutputConfig>,
}

impl ReplayConfig {
    pub fn load(path: &Path) -> Result<Self> {
        let (mut cfg, base): (Self, PathBuf) = read_toml(path)?;
        if let Some(g) = &mut cfg.methods.specdecpp {
            for h in &mut g.heads {
                *h = resolve_path(h, &base);
            }
            for h in &g.heads {
                ensure!(h.join("head.json").is_file(), "config {}: head {} is not a head checkpoint (no head.json)", path.display(), h.display());
            }
        }
        if let Some(o) = &mut cfg.output {
            o.dir = resolve_path(&o.dir, &base);
        }
        Ok(cfg)
    }
}

/// Forward times that turn replayed counts into predicted wall times, and where they came from.
#[derive(Clone, Debug, Serialize)]
pub struct TimeModel {
    pub t_draft: f64,
    pub t_target: f64,
    pub source: String,
}

/// Per dataset: eq. 3.1 fitted on the run's real speculative rows when there are enough;
/// else the standalone target time of its AR rows and the draft time measured during replay.
fn time_models(rows: &[ResultRow], replay_draft_time: f64) -> BTreeMap<String, TimeModel> {
    let mut by: BTreeMap<String, Vec<&ResultRow>> = BTreeMap::new();
    for r in rows.iter().filter(|r| !r.replayed) {
        by.entry(r.dataset.clone()).or_default().push(r);
    }
    by.into_iter()
        .map(|(d, rs)| {
            let spec: Vec<&&ResultRow> = rs.iter().filter(|r| r.setting.family() != "ar").collect();
            let fit = least_squares(&spec.iter().map(|r| vec![r.n_draft_calls as f64, r.n_target_calls as f64]).collect::<Vec<_>>(), &spec.iter().map(|r| r.total_time_s).collect::<Vec<_>>());
            let model = match fit {
                Some(f) if spec.len() >= 3 && f.coefficients.iter().all(|c| *c > 0.0) => {
                    TimeModel { t_draft: f.coefficients[0], t_target: f.coefficients[1], source: format!("eq. 3.1 fitted on {} real speculative rows (R² {:.3})", spec.len(), f.r2) }
                }
                _ => {
                    let t = standalone_target(&rs).map_or(f64::NAN, |f| f.coefficients[0]);
                    TimeModel { t_draft: replay_draft_time, t_target: t, source: "standalone target time of the AR rows; draft time per forward measured during replay".into() }
                }
            };
            (d, model)
        })
        .collect()
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
    let units = super::merge::unit_files(run_dir)?;
    let mut files = Vec::new();
    for f in &units {
        let u = UnitFile::read_path(f)?;
        if u.rows.first().is_some_and(|r| r.greedy()) {
            files.push(u);
        }
    }
    ensure!(!files.is_empty(), "{} has no finished greedy units to replay", run_dir.display());
    files.sort_by_key(|u| u.unit.index);

    let c = &manifest.config.models;
    let device = device_from_name(&c.device)?;
    ensure!(c.draft.exists(), "the run's draft model {} is gone", c.draft.display());
    let draft = load_model_as(&c.draft, None, &device, c.weights)?;
    let sha = draft.weights_sha256()?;
    if sha != manifest.draft.sha256 {
        bail!("{} changed since the run (sha256 {} now, {} then)", c.draft.display(), &sha[..12], &manifest.draft.sha256[..12]);
    }
    let mut heads = Vec::new();
    let mut head_index = HashMap::new();
    for dir in grid.methods.specdecpp.iter().flat_map(|g| &g.heads) {
        head_index.insert(head_name(dir), heads.len());
        heads.push(load_head(&dir.to_string_lossy(), &draft, &device)?);
    }
    let policies: Vec<ReplayPolicy> = settings.iter().map(|s| ReplayPolicy::of(s, &head_index).map(|p| p.expect("no AR here"))).collect::<Result<_>>()?;

    let bar = if progress { ProgressBar::new(files.len() as u64) } else { ProgressBar::hidden() };
    bar.set_style(ProgressStyle::with_template("{bar:30} {pos}/{len} greedy units replayed, {elapsed} elapsed, ETA {eta} {msg}")?);
    let mut replayed_counts = Vec::new();
    let (mut forwards, mut draft_time) = (0usize, 0f64);
    for u in &files {
        let max_new = u.rows[0].max_new_tokens;
        let mut trace = DraftTrace::new(&draft.model, &heads, &manifest.eos_ids, &u.prompt, u.ar_tokens.clone(), max_new)?;
        let counts: Vec<specx_decoder::spec::RequestMetrics> = policies.iter().map(|p| trace.replay(p)).collect::<Result<_>>()?;
        forwards += trace.forwards;
        draft_time += trace.draft_time.as_secs_f64();
        replayed_counts.push(counts);
        bar.inc(1);
        if bar.is_hidden() {
            eprintln!("replayed {} {} ({} draft forwards)", u.unit.dataset, u.unit.prompt_id, trace.forwards);
        }
    }
    bar.finish_and_clear();

    let real: Vec<ResultRow> = files.iter().flat_map(|u| u.rows.clone()).collect();
    let times = time_models(&real, draft_time / forwards.max(1) as f64);
    let mut replayed = Vec::new();
    let (mut compared, mut mismatches) = (0, Vec::new());
    for (u, counts) in files.iter().zip(&replayed_counts) {
        let ar = &u.rows[0];
        let tm = &times[&ar.dataset];
        for (s, c) in settings.iter().zip(counts) {
            if let Some(r) = u.rows.iter().find(|r| r.setting == *s) {
                compared += 1;
                if r.metrics().counts_only() != *c {
                    mismatches.push(format!("{} {} {}: real {:?} vs replayed {:?}", r.dataset, r.prompt_id, s.key(), r.drafted_per_round, c.drafted_per_round));
                }
            }
            let (draft_s, target_s) = (tm.t_draft * c.n_draft_calls as f64, tm.t_target * c.n_target_calls as f64);
            replayed.push(ResultRow {
                setting: s.clone(),
                replayed: true,
                n_generated: c.n_generated,
                n_target_calls: c.n_target_calls,
                n_draft_calls: c.n_draft_calls,
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
                speedup: ar.total_time_s / (draft_s + target_s).max(1e-9),
                ..ar.clone()
            });
        }
    }
    let mut all = real;
    all.extend(replayed.iter().cloned());
    std::fs::create_dir_all(&out).with_context(|| format!("creating {}", out.display()))?;
    let record = serde_json::json!({
        "run": run_dir, "grid": grid, "settings": settings.iter().map(Setting::key).collect::<Vec<_>>(),
        "time_models": times, "draft_forwards": forwards, "draft_seconds": draft_time,
        "compared_with_real": compared, "mismatches": mismatches,
    });
    specx_decoder::fsutil::write_atomic(&out.join("replay.json"), serde_json::to_string_pretty(&record)?.as_bytes())?;
    super::report::write_reports(&out, &manifest, &all)?;
    Ok(ReplayOutcome { dir: out, replayed, compared, mismatches })
}
