//! `specx datagen`: loads the pair and the prompts, produces the shards this process is
//! responsible for (skipping finished ones), and keeps `manifest.json` current after each.

use crate::config::DatagenConfig;
use crate::generation::{PassSettings, PassTimes, PromptInput, run_passes};
use crate::manifest::{FORMAT, Manifest, PROMPT_LIST, PromptSetRecord};
use crate::shard::{finished_shard, write_shard};
use anyhow::{Context, Result};
use indicatif::{ProgressBar, ProgressStyle};
use specx_decoder::fsutil::{sha256_file, sha256_hex, write_atomic};
use specx_decoder::{Placement, load_model_as, load_model_split, pair_up};
use specx_run::RunConfig;
use specx_run::config::write_run_config;
use specx_run::manifest::{ModelRecord, ensure_same_setup};
use specx_run::resume::remove_stale_temporaries;
use specx_run::{Part, RunManifest};
use std::time::Instant;

/// Run options that do not change the data.
#[derive(Clone, Debug, Default)]
pub struct RunOptions {
    /// Produce only part `index` of `count` (shards `k` with `k % count == index`).
    pub part: Option<Part>,
    /// Stop after this many newly written shards (to test interruption; None: all).
    pub max_new_shards: Option<usize>,
    /// Show progress bars (else a log line per shard).
    pub progress: bool,
}

/// Prompts of the run in order: (id, model input text), and the rows in the file.
pub fn select_prompts(cfg: &DatagenConfig) -> Result<(Vec<(String, String)>, usize)> {
    cfg.prompts.select()
}

/// Runs datagen for `cfg` (paths already resolved) on this process's one device: the whole
/// run, or the part `opts.part` (of a `[models] devices` run, the part's device). Returns the
/// manifest it leaves.
pub fn run_on_one_device(cfg: &DatagenConfig, opts: &RunOptions) -> Result<Manifest> {
    cfg.validate()?;
    let started = Instant::now();
    opts.part.as_ref().map(Part::check).transpose()?;
    // The target split over a placement's devices (`a+b`), the draft on its first.
    let placement: Placement = specx_run::devices::device_of_part(
        &cfg.models.device,
        &cfg.models.devices,
        opts.part,
        "specx_datagen::run (specx datagen)",
    )?
    .parse()?;
    let devices = placement.open()?;
    let device = devices[0].clone();
    let (prompts, rows_in_file) = select_prompts(cfg)?;
    eprintln!("loading draft {} and target {}", cfg.models.draft.display(), cfg.models.target.display());
    let m = &cfg.models;
    let mut draft = load_model_as(&m.draft, m.draft_tokenizer.as_deref(), &device, m.weights)?;
    let target = load_model_split(&m.target, m.target_tokenizer.as_deref(), &devices, m.weights)?;
    pair_up(&mut draft, &target)?;
    let transform = &cfg.models.draft_transform;
    let mut draft_record = ModelRecord::of(&draft)?;
    if !transform.is_identity() {
        eprintln!("making the draft {}", transform.label());
        draft.model = transform.apply(draft.model.clone(), &draft.tokenizer)?;
        draft_record.transform = transform.identity()?;
    }

    let inputs = prompts
        .iter()
        .enumerate()
        .map(|(index, (id, text))| Ok(PromptInput { index, id: id.clone(), tokens: target.tokenizer.encode(text)? }))
        .collect::<Result<Vec<_>>>()?;
    let prompt_list = serde_json::to_string_pretty(&prompts.iter().map(|(id, _)| id).collect::<Vec<_>>())?;
    let per_shard = cfg.output.prompts_per_shard;
    let shard_count = inputs.len().div_ceil(per_shard);
    let p = &cfg.prompts;
    let mut manifest = Manifest {
        format: FORMAT.into(),
        specx_version: env!("CARGO_PKG_VERSION").into(),
        config: cfg.clone(),
        draft: draft_record,
        target: ModelRecord::of(&target)?,
        prompts: PromptSetRecord {
            path: specx_run::paths::portable_path(&p.path),
            sha256: sha256_file(&specx_decoder::hub::resolve(&p.path)?)?,
            rows_in_file,
            split: p.split.clone(),
            split_sizes: p.split_sizes.clone(),
            split_seed: p.split_seed,
            selected: inputs.len(),
            prompt_list_sha256: sha256_hex(prompt_list.as_bytes()),
            template: p.template().to_string(),
        },
        part: opts.part,
        shard_count,
        shards: Vec::new(),
        hidden_size: draft.model.config().hidden_size,
        complete: false,
        summary: Default::default(),
        seconds: 0.0,
    };
    let dir = &cfg.output.dir;
    if dir.join(specx_run::manifest::MANIFEST).exists() {
        let old = Manifest::read(dir)?;
        ensure_same_setup(dir, "a run", &old.identity(), &manifest.identity(), old.part, manifest.part)?;
        manifest.seconds = old.seconds;
    }
    let base_seconds = manifest.seconds;
    std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    remove_stale_temporaries(dir)?;
    write_atomic(&dir.join(PROMPT_LIST), prompt_list.as_bytes())?;
    write_run_config(dir, &cfg.portable().to_toml())?;

    let shard_range = |k: usize| k * per_shard..((k + 1) * per_shard).min(inputs.len());
    let mine: Vec<usize> = (0..shard_count).filter(|k| opts.part.is_none_or(|p| p.holds(*k))).collect();
    let my_prompts: usize = mine.iter().map(|&k| shard_range(k).len()).sum();
    let bar = if opts.progress { ProgressBar::new(my_prompts as u64) } else { ProgressBar::hidden() };
    bar.set_style(ProgressStyle::with_template("{bar:30} {pos}/{len} prompts, {elapsed} elapsed, ETA {eta} {msg}")?);
    let settings = PassSettings {
        generation: cfg.generation.sampling(),
        max_new_tokens: cfg.generation.max_new_tokens,
        labels: cfg.labels.sampling(),
        mixing: cfg.mixing.clone(),
        batch_size: cfg.generation.batch_size,
        seed: cfg.seed,
        eos: target.eos_ids.clone(),
        keep_features: cfg.output.features == crate::config::FeatureStorage::Store,
    };
    let mut times = PassTimes::default();
    let mut tokens_done = 0usize;
    let gen_start = Instant::now();
    // Finished shards are kept; the prompts of the others form one queue, so the batch stays
    // full across shard boundaries (the data do not depend on batching: see run_passes).
    let mut todo = Vec::new();
    for &k in &mine {
        if let Some(rec) = finished_shard(dir, k)? {
            bar.inc(rec.prompt_count as u64);
            manifest.shards.push(rec);
        } else {
            todo.push(k);
        }
    }
    if let Some(m) = opts.max_new_shards {
        todo.truncate(m);
    }
    let queue: Vec<PromptInput> = todo.iter().flat_map(|&k| inputs[shard_range(k)].iter().cloned()).collect();
    let mut pending: std::collections::BTreeMap<usize, Vec<crate::generation::PromptData>> =
        todo.iter().map(|&k| (k, Vec::new())).collect();
    let mut written = 0;
    let mut last_write = Instant::now();
    let mut on_step = |tokens: usize, finished: usize| {
        tokens_done += tokens;
        bar.inc(finished as u64);
        let rate = format!("{:.1} response tok/s", tokens_done as f64 / gen_start.elapsed().as_secs_f64());
        // Without a terminal (logs, CI) the bar is hidden: a line per 10 finished prompts.
        if bar.is_hidden() && finished > 0 && bar.position() / 10 != (bar.position() - finished as u64) / 10 {
            eprintln!(
                "{}/{} prompts, {tokens_done} response tokens, {rate}, {:.0} s",
                bar.position(),
                my_prompts,
                gen_start.elapsed().as_secs_f64()
            );
        }
        bar.set_message(rate);
    };
    let mut on_done = |data: crate::generation::PromptData| -> Result<bool> {
        let k = data.index / per_shard;
        let buffer = pending.get_mut(&k).expect("prompts come from pending shards");
        buffer.push(data);
        if buffer.len() < shard_range(k).len() {
            return Ok(true);
        }
        let mut data = pending.remove(&k).expect("just used");
        data.sort_by_key(|d| d.index);
        let rec = write_shard(
            dir,
            k,
            k * per_shard,
            &data,
            manifest.hidden_size,
            cfg.output.features,
            cfg.output.features_dtype,
            last_write.elapsed().as_secs_f64(),
        )?;
        last_write = Instant::now();
        if bar.is_hidden() {
            eprintln!(
                "shard {k}: {} prompts, {} response tokens, {} labelled rows",
                rec.prompt_count, rec.stats.response_tokens, rec.labelled_rows
            );
        }
        written += 1;
        manifest.shards.push(rec);
        manifest.refresh_summary();
        manifest.seconds = base_seconds + started.elapsed().as_secs_f64();
        manifest.write(dir)?;
        Ok(!pending.is_empty())
    };
    run_passes(&target.model, &draft.model, &queue, &settings, &mut times, &mut on_step, &mut on_done)?;
    bar.finish_and_clear();
    manifest.refresh_summary();
    manifest.complete = mine.iter().all(|k| manifest.shards.iter().any(|s| s.index == *k));
    manifest.seconds = base_seconds + started.elapsed().as_secs_f64();
    manifest.write(dir)?;
    if written > 0 {
        let s = |d: std::time::Duration| d.as_secs_f64();
        eprintln!(
            "time in this process: prefill target {:.1} s + draft {:.1} s | {} batched steps (mean {:.1} prompts): target {:.1} s, draft {:.1} s | sampling {:.1} s | total {:.1} s",
            s(times.target_prefill),
            s(times.draft_prefill),
            times.steps,
            times.step_rows as f64 / times.steps.max(1) as f64,
            s(times.target_steps),
            s(times.draft_steps),
            s(times.sampling),
            s(started.elapsed())
        );
    }
    Ok(manifest)
}
