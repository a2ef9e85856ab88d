//! The two greedy trace runs a tune config reads: opened, checked against each other (the same
//! models and weights, drawn alike, no shared prompt) and split by prompt set.

use super::config::TuneConfig;
use crate::common::results::{UnitFile, tokens_sha256};
use crate::experiment::manifest::EvalManifest;
use crate::experiment::merge::replayable_units;
use crate::experiment::replay::TraceDraws;
use anyhow::{Context, Result, bail, ensure};
use specx_decoder::{device_from_name, load_model_as};
use specx_run::RunManifest;
use std::collections::HashMap;
use std::path::Path;

/// The traces' `role` model at `path`, loaded with the traces' weights, and its sha256, which
/// must be the one the traces were made with (`sha256`).
pub(super) fn load_checked(
    role: &str,
    path: &Path,
    tokenizer: Option<&Path>,
    sha256: &str,
    device: &specx_decoder::Device,
    weights: specx_decoder::WeightMode,
) -> Result<(specx_decoder::LoadedModel, String)> {
    ensure!(path.exists(), "the traces' {role} model {} is gone", path.display());
    let model = load_model_as(path, tokenizer, device, weights)?;
    let sha = model.weights_sha256()?;
    ensure!(
        sha == sha256,
        "{} changed since the traces were made (sha256 {} now, {} then)",
        path.display(),
        &sha[..12],
        &sha256[..12]
    );
    Ok((model, sha))
}

/// The two runs must trace the same models with the same weights, and share no prompt.
fn check_runs(tuning: (&EvalManifest, &[UnitFile], &Path), test: (&EvalManifest, &[UnitFile], &Path)) -> Result<()> {
    let (a, b) = (tuning.0, test.0);
    for (what, x, y) in [("draft", &a.draft.sha256, &b.draft.sha256), ("target", &a.target.sha256, &b.target.sha256)] {
        ensure!(
            x == y,
            "the tuning traces ({}) and the test traces ({}) come from different {what} models (sha256 {} vs {})",
            tuning.2.display(),
            test.2.display(),
            &x[..12],
            &y[..12]
        );
    }
    ensure!(
        a.config.models.weights == b.config.models.weights,
        "the tuning traces were decoded with {:?} weights, the test traces with {:?}: greedy outputs differ between them",
        a.config.models.weights,
        b.config.models.weights
    );
    ensure!(a.eos_ids == b.eos_ids, "the two runs stop at different end-of-sequence ids");
    // One way of drawing for every trace: a rule tuned on greedy outputs is not judged on
    // sampled ones.
    let drawn = |u: &UnitFile| TraceDraws::of(u).map(|d| (d.sampling, d.draws));
    let want = drawn(tuning.1.first().context("no tuning traces")?)?;
    for (u, dir) in tuning.1.iter().map(|u| (u, tuning.2)).chain(test.1.iter().map(|u| (u, test.2))) {
        let got = drawn(u)?;
        ensure!(
            got == want,
            "{} {} in {} was drawn with {:?}, the first tuning trace with {:?}: tuning and test traces must be drawn alike",
            u.unit.dataset,
            u.unit.prompt_id,
            dir.display(),
            got,
            want
        );
    }
    let seen: HashMap<String, &UnitFile> = tuning.1.iter().map(|u| (tokens_sha256(&u.prompt), u)).collect();
    if let Some((u, t)) = test.1.iter().find_map(|u| seen.get(&tokens_sha256(&u.prompt)).map(|t| (u, t))) {
        bail!(
            "test prompt {} {} is also a tuning prompt ({} {}): a parameter chosen on it would be judged on it",
            u.unit.dataset,
            u.unit.prompt_id,
            t.unit.dataset,
            t.unit.prompt_id
        );
    }
    Ok(())
}

/// The units of prompt set `d`.
pub(super) fn of<'a>(units: &'a [UnitFile], d: &str) -> Vec<&'a UnitFile> {
    units.iter().filter(|u| u.unit.dataset == d).collect()
}

/// The two trace runs of a config, checked against each other, and their prompt sets.
pub(super) struct Runs {
    /// The tuning run's manifest (both runs share its models).
    pub manifest: EvalManifest,
    pub tuning: Vec<UnitFile>,
    pub test: Vec<UnitFile>,
    /// The test run's prompt sets in order; each has tuning prompts.
    pub datasets: Vec<String>,
}

impl Runs {
    pub fn open(cfg: &TuneConfig) -> Result<Self> {
        let (mt, ms) = (EvalManifest::read(&cfg.tuning)?, EvalManifest::read(&cfg.test)?);
        let (tuning, test) = (replayable_units(&cfg.tuning)?, replayable_units(&cfg.test)?);
        check_runs((&mt, &tuning, &cfg.tuning), (&ms, &test, &cfg.test))?;
        let mut datasets: Vec<String> = test.iter().map(|u| u.unit.dataset.clone()).collect();
        datasets.dedup();
        for d in &datasets {
            ensure!(
                !of(&tuning, d).is_empty(),
                "the tuning traces ({}) have no '{d}' prompts: every test set needs tuning prompts of its own kind",
                cfg.tuning.display()
            );
        }
        Ok(Self { manifest: mt, tuning, test, datasets })
    }

    /// The draft the traces were made with, loaded with their weights.
    pub fn draft(&self) -> Result<specx_decoder::LoadedModel> {
        let m = &self.manifest.config.models;
        Ok(load_checked(
            "draft",
            &m.draft,
            m.draft_tokenizer.as_deref(),
            &self.manifest.draft.sha256,
            &device_from_name(&m.device)?,
            m.weights,
        )?
        .0)
    }
}
