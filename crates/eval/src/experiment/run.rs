//! `specx eval`: selects the prompts, loads the pair and the heads, runs every unit (one
//! prompt x sampling setting x seed: AR first, then every method setting) that this process
//! is responsible for and has not finished, then writes the results, the summary and the plots.

use super::audit::{Audit, EvalOutcome, audit};
use super::config::{EvalConfig, PromptSetConfig};
use super::earlier::{self, EarlierOutputs};
use super::grid::{expand, head_name};
use super::manifest::{EvalManifest, FORMAT, HeadRecord, MANIFEST, Machine, PromptSetRecord};
use crate::common::results::{Divergence, ResultRow, TurnRow, UnitFile, UnitKey, tokens_sha256};
use crate::method::{ModelPlan, Models, RunModels, Setting, generate};
use anyhow::{Context, Result, bail, ensure};
use indicatif::{ProgressBar, ProgressStyle};
use specx_decoder::fsutil::sha256_file;
use specx_decoder::generate::{BatchItem, GenerateStats, generate_greedy_batched};
use specx_decoder::speculative::{DsiStats, RequestMetrics, SpecConfig};
use specx_decoder::{Placement, Transformer};
use specx_prompts::SelectedPrompt;
use specx_run::RunConfig;
use specx_run::config::write_run_config;
use specx_run::manifest::{ModelRecord, ensure_same_setup};
use specx_run::resume::remove_stale_temporaries;
use specx_run::seed::{SplitMix64, named_seed};
use specx_run::{Part, RunManifest};
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

/// The prompts a set selects: split, then `skip`, then a seeded sample, then `limit`.
pub struct SelectedSet {
    pub config: PromptSetConfig,
    /// The prompts in run order (a conversation's later turns with each).
    pub prompts: Vec<SelectedPrompt>,
    pub rows_in_file: usize,
}

pub fn select_sets(cfg: &EvalConfig, limit: Option<usize>) -> Result<Vec<SelectedSet>> {
    let mut out = Vec::new();
    for set in &cfg.prompts {
        let (mut prompts, rows_in_file) =
            set.as_prompts_config().select_conversations().with_context(|| format!("prompt set '{}'", set.name))?;
        ensure!(
            set.skip == 0 || set.skip < prompts.len(),
            "prompt set '{}': skip = {}, but split '{}' of {} has {} prompts",
            set.name,
            set.skip,
            set.split,
            set.path.display(),
            prompts.len()
        );
        prompts.drain(..set.skip);
        if let Some(n) = set.sample {
            ensure!(
                n <= prompts.len(),
                "prompt set '{}': sample = {n}, but split '{}' of {} has {} prompts",
                set.name,
                set.split,
                set.path.display(),
                prompts.len()
            );
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
        for (prompt_index, SelectedPrompt { id, .. }) in set.prompts.iter().enumerate() {
            for s in &cfg.sampling {
                let seeds = if s.config().is_greedy() { &cfg.seeds[..1] } else { &cfg.seeds[..] };
                for &seed in seeds {
                    out.push(UnitKey {
                        index: out.len(),
                        dataset: set.config.name.clone(),
                        prompt_index,
                        prompt_id: id.clone(),
                        sampling: s.name.clone(),
                        seed,
                    });
                }
            }
        }
    }
    out
}

/// The record of every head the grid names (read before any model loads, so that a wrong
/// path fails fast).
pub(super) fn head_records(cfg: &EvalConfig) -> Result<Vec<HeadRecord>> {
    cfg.methods
        .head_dirs()
        .into_iter()
        .map(|dir| {
            let spec = read_head_spec(dir)?;
            Ok(HeadRecord {
                name: head_name(dir),
                path: dir.clone(),
                sha256: sha256_file(&dir.join("head.safetensors"))?,
                depth: spec.depth,
                tied: spec.tied,
                draft_model_sha256: spec.draft_model_sha256,
                draft_transform: spec.draft_transform,
            })
        })
        .collect()
}

/// A head checkpoint's `head.json` (architecture and provenance) without its weights.
fn read_head_spec(dir: &Path) -> Result<specx_decoder::speculative::HeadSpec> {
    let p = dir.join("head.json");
    let text = std::fs::read_to_string(&p).with_context(|| format!("reading {}", p.display()))?;
    serde_json::from_str(&text).with_context(|| format!("{}: not a head spec", p.display()))
}

/// What the run loads: the pair on `device`, DSI's workers on `[methods.dsi] devices`, the
/// draft placed on `[methods.easyspec] devices` when the grid has EasySpec settings, the heads.
fn model_plan(cfg: &EvalConfig, device: Placement, settings: &[Setting]) -> Result<ModelPlan> {
    let worker_devices = match cfg.methods.dsi.as_ref().filter(|g| !g.devices.is_empty()) {
        Some(g) => specx_decoder::parse_placement_list(&g.devices)?,
        None => Vec::new(),
    };
    let easyspec = settings.iter().any(|s| s.easyspec().is_some());
    let draft_devices = match cfg.methods.easyspec.as_ref().filter(|g| easyspec && !g.devices.is_empty()) {
        Some(g) => specx_decoder::parse_device_list(&g.devices)?,
        None => Vec::new(),
    };
    Ok(ModelPlan {
        target: cfg.models.target.clone(),
        draft: Some(cfg.models.draft.clone()),
        target_tokenizer: cfg.models.target_tokenizer.clone(),
        draft_tokenizer: cfg.models.draft_tokenizer.clone(),
        device,
        weights: cfg.models.weights,
        worker_devices,
        draft_devices,
        heads: cfg.methods.head_dirs().into_iter().map(|d| (head_name(d), d.to_string_lossy().into_owned())).collect(),
        drafts: settings.iter().filter_map(|s| s.spec().map(|m| m.draft.clone())).collect(),
        feature_heads: settings
            .iter()
            .filter_map(|s| s.feature_head().map(str::to_string))
            .collect::<std::collections::BTreeSet<_>>()
            .into_iter()
            .collect(),
    })
}

/// Runs the experiment of `cfg` (paths resolved, `output.dir` the run directory) on this
/// process's one device: the whole run, or the part `opts.part` (of a `[models] devices` run,
/// the part's device).
pub fn run_on_one_device(cfg: &EvalConfig, opts: &EvalOptions) -> Result<EvalOutcome> {
    let started = Instant::now();
    cfg.validate()?;
    opts.part.as_ref().map(Part::check).transpose()?;
    let sets = select_sets(cfg, opts.limit)?;
    let settings = expand(&cfg.methods)?;
    settings.iter().try_for_each(Setting::check_runnable)?;
    let all_units = units(cfg, &sets);
    let head_records = head_records(cfg)?;
    let dir = &cfg.output.dir;
    let old = if dir.join(MANIFEST).exists() { Some(EvalManifest::read(dir)?) } else { None };

    let device: Placement = specx_run::devices::device_of_part(
        &cfg.models.device,
        &cfg.models.devices,
        opts.part,
        "experiment::run (specx eval)",
    )?
    .parse()?;
    let models = Models::load(&model_plan(cfg, device, &settings)?)?;
    let (draft, target) = (models.draft.as_ref().expect("eval loads the draft"), &models.target);
    for s in settings.iter().filter_map(Setting::spec) {
        s.check_models(&draft.model, &models.heads)?;
    }
    settings.iter().try_for_each(|s| models.check_setting(s))?;

    let mut manifest = EvalManifest {
        format: FORMAT.into(),
        specx_version: env!("CARGO_PKG_VERSION").into(),
        config: cfg.clone(),
        draft: ModelRecord::of(draft)?,
        target: ModelRecord::of(target)?,
        heads: head_records,
        draft_transforms: models.draft_identities(),
        feature_heads: settings
            .iter()
            .filter_map(Setting::feature_head)
            .collect::<std::collections::BTreeSet<_>>()
            .into_iter()
            .map(|h| Ok((head_name(Path::new(h)), sha256_file(&Path::new(h).join("feature-head.safetensors"))?)))
            .collect::<Result<_>>()?,
        eos_ids: target.eos_ids.clone(),
        prompt_sets: sets
            .iter()
            .map(|s| {
                Ok(PromptSetRecord {
                    name: s.config.name.clone(),
                    path: s.config.path.clone(),
                    sha256: sha256_file(&specx_decoder::hub::resolve(&s.config.path)?)?,
                    rows_in_file: s.rows_in_file,
                    selected: s.prompts.iter().map(|p| p.id.clone()).collect(),
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
    write_run_config(dir, &cfg.portable().to_toml())?;

    let prompts: BTreeMap<(&str, usize), &SelectedPrompt> =
        sets.iter().flat_map(|s| s.prompts.iter().enumerate().map(|(i, p)| ((s.config.name.as_str(), i), p))).collect();
    let mine: Vec<&UnitKey> = all_units.iter().filter(|u| opts.part.is_none_or(|p| p.holds(u.index))).collect();
    let mut todo = Vec::new();
    for u in &mine {
        if UnitFile::read(dir, u)?.is_none() {
            todo.push(*u);
        }
    }
    manifest.units_done = mine.len() - todo.len();
    if settings.iter().all(|s| s.spec().is_none()) {
        // A trace run (AR only) takes the sets' prompts in turn (first of each set, second of
        // each, ...): stopped early, it covers every set evenly, and the next run adds to each.
        // Outputs do not depend on the order (batched greedy decoding is bitwise single-stream;
        // a sampled unit's stream depends on its prompt alone).
        todo.sort_by_key(|u| (u.prompt_index, u.index));
    }
    if let Some(m) = opts.max_new_units {
        todo.truncate(m);
    }
    let bar = if opts.progress { ProgressBar::new(mine.len() as u64) } else { ProgressBar::hidden() };
    bar.set_style(ProgressStyle::with_template(
        "{bar:30} {pos}/{len} prompts x sampling x seed, {elapsed} elapsed, ETA {eta} {msg}",
    )?);
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
        if let Some(p) = prompts.values().find(|p| !p.follow_ups.is_empty()) {
            bail!(
                "[methods] ar_batch decodes single-turn prompts together; prompt {} has {} turns",
                p.id,
                p.follow_ups.len() + 1
            );
        }
        let prepared: Vec<(&UnitKey, Vec<u32>, usize)> = todo
            .iter()
            .map(|u| {
                let (prompt, max_new) =
                    encode_unit(u, &prompts[&(u.dataset.as_str(), u.prompt_index)].text, target, cfg)?;
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
        let mut earlier = EarlierOutputs::new(earlier::bound(&settings), &mine, dir)?;
        for u in todo {
            let prompt = prompts[&(u.dataset.as_str(), u.prompt_index)];
            let sampling = samplings[u.sampling.as_str()];
            bar.set_message(format!("{} {} {}", u.dataset, u.prompt_id, u.sampling));
            let file = run_unit(u, prompt, sampling, cfg, &settings, &models, &earlier)?;
            earlier.push(u, &file.ar_tokens);
            finish_unit(file, &mut manifest)?;
        }
    }
    bar.finish_and_clear();
    manifest.complete = manifest.units_done == mine.len();
    manifest.seconds = base_seconds + started.elapsed().as_secs_f64();
    manifest.write(dir)?;
    let rows = collect_rows(dir, &mine)?;
    super::report::write_reports(dir, &manifest, &rows)?;
    let Audit { failures: audit_failures, numerical: numerical_flips } = audit(&rows, &cfg.audit);
    Ok(EvalOutcome { manifest, rows, audit_failures, numerical_flips })
}

/// The unit file of a greedy AR output from a batched trace run.
fn batched_ar_unit(
    u: &UnitKey,
    sampling: &super::config::SamplingSetting,
    prompt: &[u32],
    max_new: usize,
    tokens: Vec<u32>,
    stats: &GenerateStats,
    batch: usize,
) -> UnitFile {
    let target_time = stats.prefill_time + stats.decode_time;
    let m = RequestMetrics {
        n_generated: tokens.len(),
        n_target_calls: usize::from(!tokens.is_empty()) + stats.decode_steps,
        target_time,
        total_time: target_time,
        ..RequestMetrics::default()
    };
    let row = ResultRow { batch, ..measured_row(u, sampling, Setting::ar(), prompt.len(), max_new, &m, &tokens) };
    UnitFile { unit: u.clone(), prompt: prompt.to_vec(), ar_tokens: tokens, rows: vec![row], earlier: None }
}

/// The prompt tokens of unit `u` (its `text` under the target's tokenizer) and the new tokens
/// the budget gives it; refused when the budget leaves no room for a response.
fn encode_unit(
    u: &UnitKey,
    text: &str,
    target: &specx_decoder::LoadedModel,
    cfg: &EvalConfig,
) -> Result<(Vec<u32>, usize)> {
    let prompt = target.tokenizer.encode(text)?;
    let max_new = new_tokens(u, "the prompt", prompt.len(), cfg)?;
    Ok((prompt, max_new))
}

/// The new tokens the budget gives a prompt (`what`: which) of `len` tokens; refused when it
/// leaves no room for a response.
fn new_tokens(u: &UnitKey, what: &str, len: usize, cfg: &EvalConfig) -> Result<usize> {
    let max_new = cfg.budget.new_tokens(len);
    ensure!(
        max_new > 0,
        "{} {}: {what} has {len} tokens, the budget leaves no room for a response",
        u.dataset,
        u.prompt_id
    );
    Ok(max_new)
}

/// The row of a request of unit `u` that ran `setting` with metrics `m` and output `tokens`:
/// as AR's own row (identical, speedup 1, a single stream, no DSI counters) until the caller
/// says otherwise.
fn measured_row(
    u: &UnitKey,
    sampling: &super::config::SamplingSetting,
    setting: Setting,
    prompt_tokens: usize,
    max_new_tokens: usize,
    m: &RequestMetrics,
    tokens: &[u32],
) -> ResultRow {
    ResultRow {
        dataset: u.dataset.clone(),
        prompt_index: u.prompt_index,
        prompt_id: u.prompt_id.clone(),
        sampling: u.sampling.clone(),
        temperature: sampling.temperature,
        top_k: sampling.top_k,
        top_p: sampling.top_p,
        draws: sampling.draws,
        seed: u.seed,
        setting,
        replayed: false,
        prompt_tokens,
        max_new_tokens,
        n_generated: m.n_generated,
        n_target_calls: m.n_target_calls,
        n_draft_calls: m.n_draft_calls,
        n_calibrations: m.n_calibrations,
        n_drafted: m.n_drafted,
        n_accepted: m.n_accepted,
        n_verified: m.n_verified,
        draft_time_s: m.draft_time.as_secs_f64(),
        target_time_s: m.target_time.as_secs_f64(),
        total_time_s: m.total_time.as_secs_f64(),
        accepted_per_round: m.accepted_per_round.clone(),
        drafted_per_round: m.drafted_per_round.clone(),
        output_sha256: tokens_sha256(tokens),
        identical_to_ar: true,
        speedup: 1.0,
        batch: 1,
        divergence: None,
        dsi: None,
        turns: Vec::new(),
    }
}

/// The seed of a unit's request: it depends only on the run seed, the sampling setting and
/// the prompt (a replay of a coupled sampled unit redraws the draft's proposals with it).
pub fn request_seed(u: &UnitKey) -> u64 {
    named_seed(u.seed, &format!("eval/{}", u.sampling), &u.prompt_id)
}

/// Runs AR and then every method on one unit (the suffix drafter matching the `earlier`
/// units' outputs where its setting asks). A conversation runs each setting through every
/// turn ([`run_turns`]).
fn run_unit(
    u: &UnitKey,
    prompt: &SelectedPrompt,
    sampling: &super::config::SamplingSetting,
    cfg: &EvalConfig,
    settings: &[Setting],
    models: &Models,
    earlier: &EarlierOutputs,
) -> Result<UnitFile> {
    let (earlier_outputs, earlier_record) = earlier.for_unit(u)?;
    let target = &models.target;
    let workers = models.workers();
    let (first, max_new) = encode_unit(u, &prompt.text, target, cfg)?;
    let follow_ups: Vec<Vec<u32>> =
        prompt.follow_ups.iter().map(|t| target.tokenizer.encode(t)).collect::<Result<_>>()?;
    let mut rows = Vec::with_capacity(settings.len());
    let mut ar: Option<(Vec<Vec<u32>>, f64)> = None;
    let mut outputs = Vec::with_capacity(settings.len());
    for setting in settings {
        let run_models = RunModels { earlier_outputs: &earlier_outputs, ..models.for_setting(setting, &workers) };
        let turns = run_turns(u, setting, run_models, (&first, max_new), &follow_ups, sampling, cfg, &target.eos_ids)?;
        let m = &turns.metrics;
        let total = m.total_time.as_secs_f64();
        let answers = turns.answers();
        let row = measured_row(u, sampling, setting.clone(), first.len(), turns.max_new(), m, &answers.concat());
        let (ar_answers, ar_time) = ar.get_or_insert_with(|| (answers.clone(), total));
        rows.push(ResultRow {
            identical_to_ar: answers == *ar_answers,
            speedup: *ar_time / total.max(1e-9),
            dsi: turns.dsi.clone(),
            turns: if follow_ups.is_empty() { Vec::new() } else { turns.rows.clone() },
            ..row
        });
        outputs.push(turns);
    }
    let ar_turns = ar.map(|(answers, _)| answers).unwrap_or_default();
    if sampling.config().is_greedy() {
        for (row, turns) in rows.iter_mut().zip(&outputs) {
            if !row.identical_to_ar {
                row.divergence = Some(turns.divergence_from(&target.model, &ar_turns)?);
            }
        }
    }
    Ok(UnitFile { unit: u.clone(), prompt: first, ar_tokens: ar_turns.concat(), rows, earlier: earlier_record })
}

/// One setting through every turn of a unit.
struct Turns {
    rows: Vec<TurnRow>,
    /// Each turn's prompt.
    prompts: Vec<Vec<u32>>,
    /// The turns' metrics summed, their per-round lists joined.
    metrics: RequestMetrics,
    /// DSI's counters summed over the turns.
    dsi: Option<DsiStats>,
}

impl Turns {
    fn answers(&self) -> Vec<Vec<u32>> {
        self.rows.iter().map(|t| t.tokens.clone()).collect()
    }
    fn max_new(&self) -> usize {
        self.rows.iter().map(|t| t.max_new_tokens).sum()
    }

    /// Where the first turn whose answer differs from AR's departs from it, as a position
    /// in the answers one after the other (that turn's prompt is AR's: every earlier answer
    /// agreed).
    fn divergence_from(&self, target: &Transformer, ar: &[Vec<u32>]) -> Result<Divergence> {
        let mut offset = 0;
        for (i, turn) in self.rows.iter().enumerate() {
            let ar_answer = ar.get(i).map_or(&[][..], Vec::as_slice);
            if turn.tokens != ar_answer {
                let d = divergence(target, &self.prompts[i], ar_answer, &turn.tokens)?;
                return Ok(Divergence { position: offset + d.position, ..d });
            }
            offset += turn.tokens.len();
        }
        // Fewer or more turns than AR's cannot happen (every setting runs every turn).
        anyhow::bail!("no turn differs from AR's")
    }
}

/// Runs `setting` on a unit's first turn (`first` with its budget) and then on each of
/// `follow_ups`: turn k's prompt is turn k-1's prompt, this setting's own answer without its
/// end-of-turn token, and the next user turn (the chat template's markers included), all
/// prefilled again, as Spec-Bench runs a conversation. Turn k > 1 draws its own seed.
#[allow(clippy::too_many_arguments)]
fn run_turns(
    u: &UnitKey,
    setting: &Setting,
    models: RunModels,
    (first, max_new): (&[u32], usize),
    follow_ups: &[Vec<u32>],
    sampling: &super::config::SamplingSetting,
    cfg: &EvalConfig,
    eos_ids: &[u32],
) -> Result<Turns> {
    let mut out = Turns { rows: Vec::new(), prompts: Vec::new(), metrics: RequestMetrics::default(), dsi: None };
    let mut prompt = first.to_vec();
    let mut budget = max_new;
    for turn in 0..=follow_ups.len() {
        if turn > 0 {
            let previous = out.rows.last().expect("a turn before this one");
            let answer = match previous.tokens.split_last() {
                Some((last, rest)) if eos_ids.contains(last) => rest,
                _ => &previous.tokens[..],
            };
            prompt.extend_from_slice(answer);
            prompt.extend_from_slice(&follow_ups[turn - 1]);
            budget = new_tokens(u, &format!("turn {}'s prompt", turn + 1), prompt.len(), cfg)?;
        }
        let seed = if turn == 0 { request_seed(u) } else { turn_seed(u, turn + 1) };
        let spec = SpecConfig { max_new_tokens: budget, sampling: sampling.config(), seed };
        let (g, dsi) = generate(setting, models, &prompt, &spec, sampling.draws, eos_ids)?;
        let m = g.metrics;
        out.rows.push(TurnRow {
            prompt_tokens: prompt.len(),
            max_new_tokens: budget,
            n_generated: m.n_generated,
            n_target_calls: m.n_target_calls,
            rounds: m.accepted_per_round.len(),
            total_time_s: m.total_time.as_secs_f64(),
            tokens: g.tokens,
        });
        out.prompts.push(prompt.clone());
        out.metrics.accumulate(&m);
        out.dsi = match (out.dsi.take(), dsi) {
            (Some(mut a), Some(b)) => {
                a.add(&b);
                Some(a)
            }
            (a, b) => a.or(b),
        };
    }
    Ok(out)
}

/// The seed of turn `turn` (from 2) of a unit's conversation; turn 1 takes [`request_seed`].
fn turn_seed(u: &UnitKey, turn: usize) -> u64 {
    named_seed(u.seed, &format!("eval/{}", u.sampling), &format!("{} turn {turn}", u.prompt_id))
}

/// Where `tokens` first departs from the greedy `ar` output of `prompt`, with the target's
/// logit margin between the two choices there (one forward of the common prefix). When one
/// output is a prefix of the other (one stopped early), the margin is infinite: no near-tie.
fn divergence(target: &Transformer, prompt: &[u32], ar: &[u32], tokens: &[u32]) -> Result<Divergence> {
    let position = ar.iter().zip(tokens).take_while(|(a, b)| a == b).count();
    let (Some(&ar_token), Some(&token)) = (ar.get(position), tokens.get(position)) else {
        // One output is a prefix of the other: a stop (EOS or budget) that the other did not
        // take. No single logit pair explains it; report an infinite margin (a failure).
        return Ok(Divergence {
            position,
            ar_token: ar.get(position).copied().unwrap_or(u32::MAX),
            token: tokens.get(position).copied().unwrap_or(u32::MAX),
            margin: f32::INFINITY,
        });
    };
    let mut prefix = prompt.to_vec();
    prefix.extend_from_slice(&ar[..position]);
    let logits = target.forward_last(&prefix, &mut target.new_cache(1))?.logits_tail(1).remove(0);
    Ok(Divergence { position, ar_token, token, margin: logits[ar_token as usize] - logits[token as usize] })
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

#[cfg(test)]
mod tests {
    use super::*;
    use specx_decoder::load_model_as;

    #[test]
    fn a_divergence_names_the_first_departure_and_the_targets_margin_there() {
        use specx_decoder::synthetic::{StDtype, random_weights, tiny_qwen2, word_tokenizer_json, write_hf_dir};
        let dir = tempfile::tempdir().unwrap();
        let cfg = tiny_qwen2(40);
        write_hf_dir(dir.path(), &cfg, &random_weights(&cfg, 2), StDtype::F32, 1, &word_tokenizer_json(40, "w"))
            .unwrap();
        let lm = load_model_as(dir.path(), None, &specx_decoder::default_device(), Default::default()).unwrap();
        let prompt = [3u32, 14, 15, 9];
        let spec = SpecConfig { max_new_tokens: 6, sampling: specx_decoder::SamplingConfig::greedy(), seed: 0 };
        let ar = specx_decoder::speculative::generate_autoregressive(&lm.model, &prompt, &spec, &[]).unwrap().tokens;
        // An output that follows AR for three tokens, then takes the target's runner-up.
        let mut prefix = prompt.to_vec();
        prefix.extend_from_slice(&ar[..3]);
        let logits = lm.model.forward_last(&prefix, &mut lm.model.new_cache(1)).unwrap().logits_tail(1).remove(0);
        let mut order: Vec<usize> = (0..logits.len()).collect();
        order.sort_by(|&a, &b| logits[b].total_cmp(&logits[a]));
        assert_eq!(order[0] as u32, ar[3]);
        let mut other = ar[..3].to_vec();
        other.push(order[1] as u32);
        let d = divergence(&lm.model, &prompt, &ar, &other).unwrap();
        assert_eq!((d.position, d.ar_token, d.token), (3, ar[3], order[1] as u32));
        assert_eq!(d.margin, logits[order[0]] - logits[order[1]]);
        assert!(d.margin > 0.0);
        // An output that stops early departs where it stops, with no margin to excuse it.
        let short = divergence(&lm.model, &prompt, &ar, &ar[..2]).unwrap();
        assert_eq!(short.position, 2);
        assert!(short.margin.is_infinite());
    }
}
