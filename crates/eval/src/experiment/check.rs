//! `specx eval --check`: what a run of a config would do, checked the way the run checks it
//! (config, prompt files, splits and samples, the method grid, heads, model files), without
//! loading a model or writing a file. A quick way to see, on a new machine, that a config is
//! ready to run and which optional prompt sets it will leave out.

use super::config::{EvalConfig, SkippedSet};
use super::grid::expand;
use super::run::{head_records, select_sets, units};
use crate::method::Setting;
use anyhow::Result;
use specx_decoder::report::markdown_table;
use std::fmt::Write as _;

/// What a run would do: the prompt sets it reads (and the optional ones it leaves out), its
/// settings and its units.
#[derive(Clone, Debug)]
pub struct Plan {
    /// (set name, file, prompts selected).
    pub sets: Vec<(String, String, usize)>,
    pub skipped: Vec<SkippedSet>,
    pub sampling: Vec<String>,
    pub settings: Vec<String>,
    pub heads: usize,
    pub units: usize,
    pub out: String,
}

/// Checks `cfg` as a run would, up to loading the models, and returns its plan.
pub fn check(cfg: &EvalConfig, limit: Option<usize>) -> Result<Plan> {
    let (cfg, skipped) = cfg.without_missing_optional_sets()?;
    cfg.validate()?;
    let sets = select_sets(&cfg, limit)?;
    let settings = expand(&cfg.methods)?;
    settings.iter().try_for_each(Setting::check_runnable)?;
    let heads = head_records(&cfg)?.len();
    Ok(Plan {
        sets: sets
            .iter()
            .map(|s| (s.config.name.clone(), s.config.path.display().to_string(), s.prompts.len()))
            .collect(),
        skipped,
        sampling: cfg.sampling.iter().map(|s| s.name.clone()).collect(),
        settings: settings.iter().map(Setting::key).collect(),
        heads,
        units: units(&cfg, &sets).len(),
        out: cfg.output.dir.display().to_string(),
    })
}

impl Plan {
    /// The plan as a user reads it: a table of prompt sets, then one line each for the rest.
    pub fn render(&self) -> String {
        let mut rows: Vec<Vec<String>> =
            self.sets.iter().map(|(n, p, k)| vec![n.clone(), p.clone(), k.to_string(), "ready".into()]).collect();
        rows.extend(self.skipped.iter().map(|s| {
            vec![s.name.clone(), s.path.display().to_string(), "-".into(), "skipped: optional, file missing".into()]
        }));
        let mut out = markdown_table(&["prompt set", "file", "prompts", "status"], &rows);
        let _ = writeln!(out, "\nsampling settings: {}", self.sampling.join(", "));
        let _ = writeln!(out, "method settings ({}): {}", self.settings.len(), self.settings.join(" | "));
        let _ = writeln!(
            out,
            "heads: {}; units (prompt x sampling x seed): {}; run directory: {}",
            self.heads, self.units, self.out
        );
        for s in &self.skipped {
            let _ = writeln!(out, "{s}");
        }
        out
    }
}
