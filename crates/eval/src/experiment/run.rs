//! `specx eval`: selects the prompts, loads the pair and the heads, runs every unit (one
//! prompt x sampling setting x seed: AR first, then every method setting) that this process
//! is responsible for and has not finished, then writes the results, the summary and the plots.

use super::config::{EvalConfig, PromptSetConfig};
use super::grid::{expand, head_name, Setting};
use super::manifest::{EvalManifest, HeadRecord, Machine, PromptSetRecord, FORMAT, MANIFEST};
use super::results::{tokens_sha256, ResultRow, UnitFile, UnitKey};
use crate::methods::{load_head, Method};
use anyhow::{ensure, Context, Result};
use indicatif::{ProgressBar, ProgressStyle};
use specx_datagen::manifest::{ensure_same_setup, Part};
use specx_datagen::run::{model_record, remove_stale_temporaries, select_from};
use specx_datagen::split::{stream_seed, SplitMix64};
use specx_decoder::fsutil::{sha256_file, write_atomic};
use specx_decoder::generate::{generate_greedy_batched, BatchItem, GenerateStats};
use specx_decoder::spec::{AcceptanceHead, SpecConfig};
use specx_decoder::{check_pair, device_from_name, load_model_as, LoadedModel};
use std::collections::BTreeMap;
use std::path::Path;
use std::time::Instant;

/// Run options that do not change the results.
#[derive(Clone, Debug, Default)]
pub struct EvalOptions {
    /// Run only part `index` of `count`: units `u` with `u % count == index`.
    pub part: Option<Part>,
    /// Use only the first N prompts of each set (after sampling). This changes the selection,
    /// so it is part of the run's identity.
    pub limit: Option<usize>,
    /// Stop after this many newly finished units (a resumable partial run, for tests).
    pub max_new_units: Option<usize>,
    /// Draw a progress bar (else a log line per unit).
    pub progress: bool,
}

/// The prompts a set selects: split, then a seeded sample, then `limit`.
pub struct SelectedSet {
    pub config: PromptSetConfig,
    /// (id, model input text) in run order.
    pub prompts: Vec<(String, String)>,
    pub rows_in_file: usize,
}

pub fn select_sets(cfg: &EvalConfig, limit: Option<usize>) -> Result<Vec<SelectedSet>> {
    let mut out = Vec::new();
    for set in &cfg.prompts {
        let (mut prompts, rows_in_file) = select_from(&set.as_prompts_config()).with_context(|| format!("prompt set '{}'", set.name))?;
        if let Some(n) = set.sample {
            ensure!(n <= prompts.len(), "prompt set '{}': sample = {n}, but split '{}' of {} has {} prompts", set.name, set.split, set.path.display(), prompts.len());
            SplitMix64::new(set.sample_seed).shuffle(&mut prompts);
            prompts.truncate(n);
        }
        if let Some(n) = limit {
            ensure!(n > 0, "--limit 0 selects no prompts");
            prompts.truncate(n);
        }
        out.push(SelectedSet { config: set.clone(), prompts, rows_in_file });
    }
    Ok(out)
}

/// Every unit of the run in order: set, prompt, sampling setting, seed (greedy settings once,
/// with the first seed: a seed cannot change a greedy run).
pub fn units(cfg: &EvalConfig, sets: &[SelectedSet]) -> Vec<UnitKey> {
    let mut out = Vec::new();
    for set in sets {
        for (prompt_index, (id, _)) in set.prompts.iter().enumerate() {
            for s in &cfg.sampling {
                let seeds = if s.config().is_greedy() { &cfg.seeds[..1] } else { &cfg.seeds[..] };
                for &seed in seeds {
                    out.push(UnitKey { index: out.len(), dataset: set.config.name.clone(), prompt_index, prompt_id: id.clone(), sampling: s.name.clone(), seed });
                }
            }
        }
    }
    out
}

/// What a finished (or partial) run produced.
#[derive(Debug)]
pub struct EvalOutcome {
    pub manifest: EvalManifest,
    pub rows: Vec<ResultRow>,
    /// Greedy rows whose output differs from AR's: (dataset, prompt id, sampling, setting).
    pub audit_failures: Vec<String>,
}

/// Loads every head of the grid (checked against the draft model) with its record.
fn load_heads(cfg: &EvalConfig, draft: &LoadedModel, device: &specx_decoder::Device) -> Result<(BTreeMap<String, AcceptanceHead>, Vec<HeadRecord>)> {
    let mut heads = BTreeMap::new();
    let mut records = Vec::new();
    for dir in cfg.methods.head_dirs() {
        let head = load_head(&dir.to_string_lossy(), draft, device)?;
        let spec = read_head_spec(dir)?;
        records.push(HeadRecord {
            name: head_name(dir),
            path: dir.clone(),
            sha256: sha256_file(&dir.join("head.safetensors"))?,
            depth: spec.depth,
            tied: spec.tied,
            draft_model_sha256: spec.draft_model_sha256,
        });
        heads.insert(head_name(dir), head);
    }
    Ok((heads, records))
}

/// A head checkpoint's `head.json` (architecture and provenance) without its weights.
fn read_head_spec(dir: &Path) -> Result<specx_decoder::spec::HeadSpec> {
    let p = dir.join("head.json");
    let text = std::fs::read_to_string(&p).with_context(|| format!("reading {}", p.display()))?;
    serde_json::from_str(&text).with_context(|| format!("{}: not a head spec", p.display()))
}

/// Reads each head's `head.json` before any model loads, so a wrong path fails fast.
fn check_heads_readable(cfg: &EvalConfig) -> Result<()> {
    for dir in cfg.methods.head_dirs() {
        read_head_spec(dir)?;
    }
    Ok(())
}

/// Runs the experiment of `cfg` (paths resolved, `output.dir` the run directory).
pub fn run(cfg: &EvalConfig, opts: &EvalOptions) -> Result<EvalOutcome> {
    let started = Instant::now();
    cfg.validate()?;
    if let Some(p) = opts.part {
        ensure!(p.count > 0 && p.index < p.count, "--shard {}/{}: expected I/N with 0 <= I < N", p.index, p.count);
    }
    let sets = select_sets(cfg, opts.limit)?;
    let settings = expand(&cfg.methods)?;
    let all_units = units(cfg, &sets);
    check_heads_readable(cfg)?;
    let dir = &cfg.output.dir;
    let old = if dir.join(MANIFEST).exists() { Some(EvalManifest::read(dir)?) } else { None };

    let device = device_from_name(&cfg.models.device)?;
    eprintln!("loading draft {} and target {}", cfg.models.draft.display(), cfg.models.target.display());
    let draft = load_model_as(&cfg.models.draft, None, &device, cfg.models.weights)?;
    let target = load_model_as(&cfg.models.target, None, &device, cfg.models.weights)?;
    check_pair(&draft, &target)?;
    let (heads, head_records) = load_heads(cfg, &draft, &device)?;
    let methods: Vec<Method> = settings.iter().map(|s| s.method(&heads, draft.model.config().num_hidden_layers)).collect::<Result<_>>()?;

    let mut manifest = EvalManifest {
        format: FORMAT.into(),
        specx_version: env!("CARGO_PKG_VERSION").into(),
        config: cfg.clone(),
        draft: model_record(&draft)?,
        target: model_record(&target)?,
        heads: head_records,
        eos_ids: target.eos_ids.clone(),
        prompt_sets: sets
            .iter()
            .map(|s| {
                Ok(PromptSetRecord {
                    name: s.config.name.clone(),
                    path: s.config.path.clone(),
                    sha256: sha256_file(&s.config.path)?,
                    rows_in_file: s.rows_in_file,
                    selected: s.prompts.iter().map(|(id, _)| id.clone()).collect(),
                })
            })
            .collect::<Result<_>>()?,
        settings: settings.iter().map(Setting::key).collect(),
        machine: Machine::measure(),
        part: opts.part,
        units_total: all_units.len(),
        units_done: 0,
        complete: false,
        seconds: 0.0,
    };
    if let Some(old) = &old {
        ensure_same_setup(dir, "an eval run", &old.identity(), &manifest.identity(), old.part, manifest.part)?;
        manifest.seconds = old.seconds;
    }
    let base_seconds = manifest.seconds;
    std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    remove_stale_temporaries(dir)?;
    write_atomic(&dir.join("config.toml"), cfg.to_toml().as_bytes())?;

    let texts: BTreeMap<(&str, usize), &str> =
        sets.iter().flat_map(|s| s.prompts.iter().enumerate().map(|(i, (_, t))| ((s.config.name.as_str(), i), t.as_str()))).collect();
    let mine: Vec<&UnitKey> = all_units.iter().filter(|u| opts.part.is_none_or(|p| u.index % p.count == p.index)).collect();
    let mut todo = Vec::new();
    for u in &mine {
        if UnitFile::read(dir, u)?.is_none() {
            todo.push(*u);
        }
    }
    manifest.units_done = mine.len() - todo.len();
    if let Some(m) = opts.max_new_units {
        todo.truncate(m);
    }
    let bar = if opts.progress { ProgressBar::new(mine.len() as u64) } else { ProgressBar::hidden() };
    bar.set_style(ProgressStyle::with_template("{bar:30} {pos}/{len} prompts x sampling x seed, {elapsed} elapsed, ETA {eta} {msg}")?);
    bar.set_position(manifest.units_done as u64);
    bar.reset_eta();
    let samplings: BTreeMap<&str, _> = cfg.sampling.iter().map(|s| (s.name.as_str(), s)).collect();
    let finish_unit = |file: UnitFile, manifest: &mut EvalManifest| -> Result<()> {
        file.write(dir)?;
        manifest.units_done += 1;
        manifest.seconds = base_seconds + started.elapsed().as_secs_f64();
        manifest.write(dir)?;
        bar.inc(1);
        if bar.is_hidden() {
            let (u, ar) = (&file.unit, &file.rows[0]);
            let best = file.rows.iter().skip(1).max_by(|a, b| a.speedup.total_cmp(&b.speedup));
            eprintln!(
                "[{}/{}] {} {} {} s{}: AR {} tokens in {:.1} s{}{}{}",
                manifest.units_done,
                mine.len(),
                u.dataset,
                u.prompt_id,
                u.sampling,
                u.seed,
                ar.n_generated,
                ar.total_time_s,
                if ar.batch > 1 { " (share of batched steps)" } else { "" },
                best.map(|b| format!(", best {} {:.2}x", b.setting.key(), b.speedup)).unwrap_or_default(),
                if file.rows.iter().any(|r| r.greedy() && !r.identical_to_ar) { ", AUDIT FAILED" } else { "" }
            );
        }
        Ok(())
    };
    if let Some(batch) = cfg.methods.ar_batch {
        let prepared: Vec<(&UnitKey, Vec<u32>, usize)> = todo
            .iter()
            .map(|u| {
                let prompt = target.tokenizer.encode(texts[&(u.dataset.as_str(), u.prompt_index)])?;
                let max_new = cfg.budget.new_tokens(prompt.len());
                ensure!(max_new > 0, "{} {}: the prompt has {} tokens, the budget leaves no room for a response", u.dataset, u.prompt_id, prompt.len());
                Ok((*u, prompt, max_new))
            })
            .collect::<Result<_>>()?;
        let items: Vec<BatchItem> = prepared.iter().map(|(_, p, m)| BatchItem { prompt: p, max_new: *m }).collect();
        generate_greedy_batched(&target.model, &items, batch, &target.eos_ids, |o| {
            let (u, prompt, max_new) = &prepared[o.index];
            let file = batched_ar_unit(u, samplings[u.sampling.as_str()], prompt, *max_new, o.tokens, &o.stats, batch);
            finish_unit(file, &mut manifest)
        })?;
    } else {
        for u in todo {
            let text = texts[&(u.dataset.as_str(), u.prompt_index)];
            let sampling = samplings[u.sampling.as_str()];
            bar.set_message(format!("{} {} {}", u.dataset, u.prompt_id, u.sampling));
            let file = run_unit(u, text, sampling, cfg, &settings, &methods, &target, &draft)?;
            finish_unit(file, &mut manifest)?;
        }
    }
    bar.finish_and_clear();
    manifest.complete = manifest.units_done == mine.len();
    manifest.seconds = base_seconds + started.elapsed().as_secs_f64();
    manifest.write(dir)?;
    let rows = collect_rows(dir, &mine)?;
    super::report::write_reports(dir, &manifest, &rows)?;
    let audit_failures = audit(&rows);
    Ok(EvalOutcome { manifest, rows, audit_failures })
}

/// The unit file of a greedy AR output from a batched trace run.
fn batched_ar_unit(u: &UnitKey, sampling: &super::config::SamplingSetting, prompt: &[u32], max_new: usize, tokens: Vec<u32>, stats: &GenerateStats, batch: usize) -> UnitFile {
    let target_s = (stats.prefill_time + stats.decode_time).as_secs_f64();
    let row = ResultRow {
        dataset: u.dataset.clone(),
        prompt_index: u.prompt_index,
        prompt_id: u.prompt_id.clone(),
        sampling: u.sampling.clone(),
        temperature: sampling.temperature,
        top_k: sampling.top_k,
        top_p: sampling.top_p,
        seed: u.seed,
        setting: Setting::ar(),
        replayed: false,
        prompt_tokens: prompt.len(),
        max_new_tokens: max_new,
        n_generated: tokens.len(),
        n_target_calls: usize::from(!tokens.is_empty()) + stats.decode_steps,
        n_draft_calls: 0,
        n_calibrations: 0,
        n_drafted: 0,
        n_accepted: 0,
        n_verified: 0,
        draft_time_s: 0.0,
        target_time_s: target_s,
        total_time_s: target_s,
        accepted_per_round: Vec::new(),
        drafted_per_round: Vec::new(),
        output_sha256: tokens_sha256(&tokens),
        identical_to_ar: true,
        speedup: 1.0,
        batch,
    };
    UnitFile { unit: u.clone(), prompt: prompt.to_vec(), ar_tokens: tokens, rows: vec![row] }
}

/// Runs AR and then every method on one unit.
#[allow(clippy::too_many_arguments)]
fn run_unit(
    u: &UnitKey,
    text: &str,
    sampling: &super::config::SamplingSetting,
    cfg: &EvalConfig,
    settings: &[Setting],
    methods: &[Method],
    target: &LoadedModel,
    draft: &LoadedModel,
) -> Result<UnitFile> {
    let prompt = target.tokenizer.encode(text)?;
    let max_new = cfg.budget.new_tokens(prompt.len());
    ensure!(max_new > 0, "{} {}: the prompt has {} tokens, the budget leaves no room for a response", u.dataset, u.prompt_id, prompt.len());
    // Each prompt's stream depends only on the run seed, the sampling setting and the prompt.
    let seed = stream_seed(u.seed, &format!("eval/{}", u.sampling), &u.prompt_id);
    let spec = SpecConfig { max_new_tokens: max_new, sampling: sampling.config(), seed };
    let mut rows = Vec::with_capacity(methods.len());
    let mut ar: Option<(Vec<u32>, f64)> = None;
    for (setting, method) in settings.iter().zip(methods) {
        let g = method.run(&target.model, Some(&draft.model), &prompt, &spec, &target.eos_ids)?;
        let m = &g.metrics;
        let total = m.total_time.as_secs_f64();
        let (ar_tokens, ar_time) = ar.get_or_insert_with(|| (g.tokens.clone(), total));
        rows.push(ResultRow {
            dataset: u.dataset.clone(),
            prompt_index: u.prompt_index,
            prompt_id: u.prompt_id.clone(),
            sampling: u.sampling.clone(),
            temperature: sampling.temperature,
            top_k: sampling.top_k,
            top_p: sampling.top_p,
            seed: u.seed,
            setting: setting.clone(),
            replayed: false,
            prompt_tokens: prompt.len(),
            max_new_tokens: max_new,
            n_generated: m.n_generated,
            n_target_calls: m.n_target_calls,
            n_draft_calls: m.n_draft_calls,
            n_calibrations: m.n_calibrations,
            n_drafted: m.n_drafted,
            n_accepted: m.n_accepted,
            n_verified: m.n_verified,
            draft_time_s: m.draft_time.as_secs_f64(),
            target_time_s: m.target_time.as_secs_f64(),
            total_time_s: total,
            accepted_per_round: m.accepted_per_round.clone(),
            drafted_per_round: m.drafted_per_round.clone(),
            output_sha256: tokens_sha256(&g.tokens),
            identical_to_ar: g.tokens == *ar_tokens,
            speedup: *ar_time / total.max(1e-9),
            batch: 1,
        });
    }
    let ar_tokens = ar.map(|(t, _)| t).unwrap_or_default();
    Ok(UnitFile { unit: u.clone(), prompt, ar_tokens, rows })
}

/// Rows of every finished unit among `units`, in unit order.
pub fn collect_rows(dir: &Path, units: &[&UnitKey]) -> Result<Vec<ResultRow>> {
    let mut rows = Vec::new();
    for u in units {
        if let Some(f) = UnitFile::read(dir, u)? {
            rows.extend(f.rows);
        }
    }
    Ok(rows)
}

/// The losslessness audit: every greedy speculative output must equal AR's.
pub fn audit(rows: &[ResultRow]) -> Vec<String> {
    rows.iter()
        .filter(|r| r.greedy() && !r.identical_to_ar && !r.replayed)
        .map(|r| format!("{} {} ({}, seed {}): {} differs from AR", r.dataset, r.prompt_id, r.sampling, r.seed, r.setting.key()))
        .collect()
}
