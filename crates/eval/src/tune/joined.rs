//! Rules chosen by an earlier `specx eval tune` over the same traces, joined to this one's
//! tables (`rules_from` in the config): a config that tunes only new candidates (the drafters
//! other than the draft model's chain) is then judged against fixed K and the chain's
//! training-free rules without replaying them again. Their test counts are read from the
//! earlier run's per-set results, so every interval stays paired over the same test prompts.

use super::report::learned;
use super::{SetResult, finished_file};
use anyhow::{Context, Result, ensure};
use std::path::Path;

/// Adds to each of `sets` the rules of the earlier tune output in `dir` that it lacks (every
/// family but the learned ones, which stay on their own page), at each cost model of this run. Refused when the earlier run tuned other traces or prompts,
/// or lacks a set or a cost model of this run.
pub fn join(dir: &Path, sets: &mut [SetResult]) -> Result<()> {
    for s in sets {
        let path = dir.join("sets").join(format!("{}.json", s.dataset));
        let earlier = finished_file(&path)
            .with_context(|| format!("rules_from: the earlier tune output has no result for '{}'", s.dataset))?;
        ensure!(
            (&earlier.config.tuning, &earlier.config.test) == (&s.config.tuning, &s.config.test)
                && (&earlier.tuning_prompts, &earlier.test_prompts) == (&s.tuning_prompts, &s.test_prompts),
            "rules_from: {} was tuned on other traces or prompts ({} and {}) than this run ({} and {})",
            path.display(),
            earlier.config.tuning.display(),
            earlier.config.test.display(),
            s.config.tuning.display(),
            s.config.test.display()
        );
        for c in &mut s.results {
            let theirs = earlier.results.iter().find(|e| e.costs.name == c.costs.name).with_context(|| {
                format!("rules_from: {} has no cost model named '{}'", path.display(), c.costs.name)
            })?;
            ensure!(
                (theirs.costs.t_draft, theirs.costs.t_target, theirs.costs.t_row)
                    == (c.costs.t_draft, c.costs.t_target, c.costs.t_row),
                "rules_from: cost model '{}' prices differently in {} ({:?}) than here ({:?})",
                c.costs.name,
                path.display(),
                (theirs.costs.t_draft, theirs.costs.t_target, theirs.costs.t_row),
                (c.costs.t_draft, c.costs.t_target, c.costs.t_row)
            );
            for r in &theirs.rules {
                if !learned(&r.family) && !c.rules.iter().any(|mine| mine.family == r.family) {
                    c.rules.push(r.clone());
                }
            }
            c.rules.sort_by(|a, b| a.family.cmp(&b.family));
        }
    }
    Ok(())
}
