//! The training loop: AdamW with warmup + cosine, per-epoch evaluation on train and dev, the
//! best-dev checkpoint (lowest dev weighted loss: the objective being minimised; with w_rej > 1
//! its minimiser is deliberately not the calibrated one, so the binary KL would prefer
//! under-trained heads), and resumption.
//!
//! Checkpoint directory:
//! - `head.json` + `head.safetensors`: the best head so far (what `specx decode --head` loads);
//! - `metrics.json`: the config, every epoch's train/dev metrics, the best epoch;
//! - `last/epoch-N/` (head, `optimizer.bpk`) and `last/state.json` pointing at it, written
//!   after each epoch; an interrupted run resumes from the last finished epoch.

use crate::acceptance::config::TrainConfig;
use crate::acceptance::data::{LabelledSet, load_sets};
use crate::acceptance::loss::weighted_bce;
use crate::acceptance::metrics::{Metrics, evaluate};
use crate::schedule::warmup_cosine;
use anyhow::{Context, Result, bail};
use burn::module::Module;
use burn::optim::{AdamWConfig, GradientsParams};
use burn::tensor::{Tensor, TensorData};
use indicatif::{ProgressBar, ProgressStyle};
use serde::{Deserialize, Serialize};
use specx_decoder::Device;
use specx_decoder::fsutil::write_atomic;
use specx_decoder::speculative::{AcceptanceHead, HeadSpec};
use std::path::{Path, PathBuf};
use std::time::Instant;

/// Options that do not change the result.
#[derive(Clone, Debug, Default)]
pub struct TrainOptions {
    /// Stop after this many epochs in this process (resumable; for tests and time limits).
    pub max_epochs_this_run: Option<usize>,
    pub progress: bool,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct EpochRecord {
    pub epoch: usize,
    pub steps: usize,
    pub seconds: f64,
    pub train: Metrics,
    pub dev: Metrics,
}

/// What `last/state.json` and `metrics.json` hold.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct TrainState {
    pub config: TrainConfig,
    pub epochs_done: usize,
    pub steps_done: usize,
    pub history: Vec<EpochRecord>,
    pub best_epoch: Option<usize>,
    /// The head's parameter ids (the optimiser state is keyed by them).
    pub param_ids: Vec<u64>,
    pub train_rows: usize,
    pub dev_rows: usize,
}

impl TrainState {
    pub fn best(&self) -> Option<&EpochRecord> {
        self.best_epoch.and_then(|e| self.history.iter().find(|r| r.epoch == e))
    }
}

/// Logits of every row of `set` (inference mode, in chunks).
pub fn predict(head: &AcceptanceHead, set: &LabelledSet, device: &Device) -> Result<Vec<f32>> {
    let mut out = Vec::with_capacity(set.len());
    let rows: Vec<usize> = (0..set.len()).collect();
    for chunk in rows.chunks(4096) {
        let (x, _) = set.gather(chunk);
        let x = Tensor::<2>::from_data(TensorData::new(x, [chunk.len(), set.hidden]), device);
        out.extend(head.forward(x).into_data().try_to_vec::<f32>().map_err(|e| anyhow::anyhow!("{e:?}"))?);
    }
    Ok(out)
}

/// The head's architecture and provenance: the draft, the config, and the data (directory,
/// prompts and sha256 of the train and dev rows); the best epoch's metrics are added on save.
fn head_spec(cfg: &TrainConfig, set: &LabelledSet, dev: &LabelledSet) -> HeadSpec {
    let data = |s: &LabelledSet| serde_json::json!({ "dir": s.dir, "split": s.split, "prompts": s.prompts, "rows": s.len(), "sha256": s.data_sha256 });
    HeadSpec {
        hidden_size: set.hidden - if set.draft_stats { specx_decoder::speculative::HEAD_STAT_INPUTS } else { 0 },
        draft_stats: set.draft_stats,
        depth: cfg.head.depth,
        tied: cfg.head.tied,
        draft_model_sha256: Some(set.draft_sha256.clone()),
        draft_transform: (set.draft_transform != "none").then(|| set.draft_transform.clone()),
        training: serde_json::json!({
            "config": cfg,
            "train": data(set),
            "dev": data(dev),
        }),
    }
}

/// Trains one head as `cfg` says (resuming from `cfg.output.dir` if it holds an unfinished run
/// of the same config). Returns the final state.
pub fn train(cfg: &TrainConfig, opts: &TrainOptions) -> Result<TrainState> {
    cfg.validate()?;
    let (train_set, dev_set) = load_sets(cfg)?;
    train_on(cfg, &train_set, &dev_set, opts)
}

/// [`train`] on sets already in memory.
pub fn train_on(
    cfg: &TrainConfig,
    train_set: &LabelledSet,
    dev_set: &LabelledSet,
    opts: &TrainOptions,
) -> Result<TrainState> {
    cfg.validate()?;
    let dir = &cfg.output.dir;
    let plain = specx_decoder::open_device(cfg.device.parse()?)?;
    let device = plain.clone().autodiff();
    let spec = head_spec(cfg, train_set, dev_set);
    let last = dir.join("last");
    let state_path = last.join("state.json");
    let optim_config = AdamWConfig::new().with_weight_decay(cfg.optim.weight_decay as f32);
    let (mut head, mut optim, mut state) = if state_path.exists() {
        let state: TrainState = serde_json::from_slice(&std::fs::read(&state_path)?)
            .with_context(|| format!("{}: malformed", state_path.display()))?;
        if !same_setup(&state.config, cfg) {
            bail!("{} holds a training run with another config; use another output dir or delete it", dir.display());
        }
        let epoch_dir = last.join(format!("epoch-{}", state.epochs_done));
        let (head, _) = AcceptanceHead::load(&epoch_dir, &device)?;
        let head = head.with_param_ids(&state.param_ids)?;
        let optim = optim_config
            .init()
            .load(epoch_dir.join("optimizer.bpk"))
            .map_err(|e| anyhow::anyhow!("{}: {e:?}", epoch_dir.display()))?;
        eprintln!("resuming {} after epoch {}", dir.display(), state.epochs_done);
        (head, optim, state)
    } else {
        let extra = if train_set.draft_stats { specx_decoder::speculative::HEAD_STAT_INPUTS } else { 0 };
        let head = AcceptanceHead::init_seeded_with_inputs(
            train_set.hidden - extra,
            extra,
            cfg.head.depth,
            cfg.head.tied,
            cfg.seed,
            &device,
        );
        let state = TrainState {
            config: cfg.clone(),
            epochs_done: 0,
            steps_done: 0,
            history: Vec::new(),
            best_epoch: None,
            param_ids: head.param_ids(),
            train_rows: train_set.len(),
            dev_rows: dev_set.len(),
        };
        (head, optim_config.init(), state)
    };
    let steps_per_epoch = train_set.len().div_ceil(cfg.optim.batch_size);
    let total = steps_per_epoch * cfg.optim.epochs;
    let warmup = (cfg.optim.warmup_ratio * total as f64).round() as usize;
    let w = cfg.loss.weights();
    let mut epochs_this_run = 0;
    while state.epochs_done < cfg.optim.epochs && opts.max_epochs_this_run.is_none_or(|m| epochs_this_run < m) {
        let epoch = state.epochs_done + 1;
        let t0 = Instant::now();
        let bar = if opts.progress { ProgressBar::new(steps_per_epoch as u64) } else { ProgressBar::hidden() };
        bar.set_style(ProgressStyle::with_template(&format!(
            "epoch {epoch}/{} {{bar:30}} {{pos}}/{{len}} steps, ETA {{eta}} {{msg}}",
            cfg.optim.epochs
        ))?);
        for batch in train_set
            .batches(cfg.optim.batch_size, specx_run::seed::named_seed(cfg.seed, "batches", &epoch.to_string()))
        {
            let (x, y) = train_set.gather(&batch);
            let x = Tensor::<2>::from_data(TensorData::new(x, [batch.len(), train_set.hidden]), &device);
            let y = Tensor::<1>::from_data(TensorData::new(y, [batch.len()]), &device);
            let loss = weighted_bce(head.forward(x), y, w);
            let grads = GradientsParams::from_grads(loss.backward(), &head);
            let lr = warmup_cosine(cfg.optim.lr, state.steps_done, warmup, total);
            head = optim.step(lr, head, grads);
            state.steps_done += 1;
            bar.inc(1);
            if state.steps_done % 50 == 0 {
                bar.set_message(format!(
                    "loss {:.4} lr {lr:.2e}",
                    loss.into_data().try_to_vec::<f32>().map(|v| v[0]).unwrap_or(f32::NAN)
                ));
            }
        }
        bar.finish_and_clear();
        let eval_head = head.valid();
        let train_m = evaluate(&predict(&eval_head, train_set, &plain)?, &train_set.labels, w);
        let dev_m = evaluate(&predict(&eval_head, dev_set, &plain)?, &dev_set.labels, w);
        let is_best = state.best().is_none_or(|b| dev_m.weighted_loss < b.dev.weighted_loss);
        state.history.push(EpochRecord {
            epoch,
            steps: state.steps_done,
            seconds: t0.elapsed().as_secs_f64(),
            train: train_m,
            dev: dev_m,
        });
        state.epochs_done = epoch;
        if is_best {
            state.best_epoch = Some(epoch);
            let mut best = spec.clone();
            best.training["best_epoch"] = serde_json::json!(state.history.last().expect("pushed above"));
            eval_head.save(dir, &best)?;
        }
        let state_json = serde_json::to_string_pretty(&state)?;
        save_last(&last, state.epochs_done, &eval_head, &optim, &spec, &state_json)?;
        write_atomic(&dir.join("metrics.json"), state_json.as_bytes())?;
        let r = state.history.last().unwrap();
        eprintln!(
            "epoch {epoch}: train KL {:.4} | dev KL {:.4}, weighted loss {:.4}, AUROC {}, ECE {:.4}{} ({:.1} s)",
            r.train.binary_kl,
            r.dev.binary_kl,
            r.dev.weighted_loss,
            r.dev.auroc.map_or("-".into(), |a| format!("{a:.4}")),
            r.dev.ece,
            if is_best { " (best so far)" } else { "" },
            r.seconds
        );
        epochs_this_run += 1;
    }
    Ok(state)
}

/// Whether two configs describe the same training run (where the checkpoints go does not
/// matter: a checkpoint directory may be moved or given with `--out`).
fn same_setup(a: &TrainConfig, b: &TrainConfig) -> bool {
    let mut a = a.clone();
    a.output.dir = b.output.dir.clone();
    a == *b
}

/// Writes `last/epoch-N/` in full, then points `last/state.json` (the serialised
/// [`TrainState`]) at it, then removes older epoch directories: an interruption at any point
/// leaves a consistent resumable state.
fn save_last(
    last: &Path,
    epoch: usize,
    head: &AcceptanceHead,
    optim: &burn::optim::ModuleOptimizer,
    spec: &HeadSpec,
    state_json: &str,
) -> Result<()> {
    let epoch_dir = last.join(format!("epoch-{epoch}"));
    if epoch_dir.exists() {
        std::fs::remove_dir_all(&epoch_dir)?;
    }
    head.save(&epoch_dir, spec)?;
    optim.save(epoch_dir.join("optimizer.bpk")).map_err(|e| anyhow::anyhow!("saving optimizer state: {e:?}"))?;
    write_atomic(&last.join("state.json"), state_json.as_bytes())?;
    for entry in std::fs::read_dir(last)? {
        let p: PathBuf = entry?.path();
        let name = p.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
        if name.starts_with("epoch-") && p != epoch_dir {
            std::fs::remove_dir_all(&p)?;
        }
    }
    Ok(())
}
