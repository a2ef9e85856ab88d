//! `specx eval merge`: joins the part directories of a `--shard I/N` run.

use super::audit::{Audit, EvalOutcome, audit};
use super::manifest::EvalManifest;
use crate::common::results::{ResultRow, UnitFile};
use anyhow::{Context, Result, ensure};
use specx_run::RunConfig;
use specx_run::RunManifest;
use specx_run::config::write_run_config;
use std::path::{Path, PathBuf};

/// Every unit file below `dir/units`, in path order.
pub fn unit_files(dir: &Path) -> Result<Vec<PathBuf>> {
    let mut out = Vec::new();
    let mut stack = vec![dir.join("units")];
    while let Some(d) = stack.pop() {
        if !d.exists() {
            continue;
        }
        for e in std::fs::read_dir(&d).with_context(|| format!("listing {}", d.display()))? {
            let p = e?.path();
            if p.is_dir() {
                stack.push(p);
            } else if p.extension().is_some_and(|x| x == "json") {
                out.push(p);
            }
        }
    }
    out.sort();
    Ok(out)
}

/// The finished greedy units of the run in `dir` (their prompts and AR outputs), in unit
/// order; an error naming the run when there are none.
pub fn greedy_units(dir: &Path) -> Result<Vec<UnitFile>> {
    units_where(dir, ResultRow::greedy, "greedy units (run `specx eval` with a greedy sampling setting first)")
}

/// Every finished unit of the run in `dir` whose output a replay can take (greedy, or sampled
/// with coupled draws), in unit order.
pub fn replayable_units(dir: &Path) -> Result<Vec<UnitFile>> {
    let replayable = |r: &ResultRow| r.greedy() || r.draws == specx_decoder::coupling::Draws::Coupled;
    units_where(
        dir,
        replayable,
        "greedy or coupled sampled units (run `specx eval` with a greedy sampling setting, or one with `draws = \"coupled\"`, first)",
    )
}

/// Every finished unit of the run in `dir` whose first row passes `keep`, in unit order; an
/// error naming `what` when there is none, and for a conversation (its later turns' prompts
/// hold tokens the target did not generate, so it is no trace of one request).
fn units_where(dir: &Path, keep: impl Fn(&ResultRow) -> bool, what: &str) -> Result<Vec<UnitFile>> {
    let mut units = Vec::new();
    for f in unit_files(dir)? {
        let u = UnitFile::read_path(&f)?;
        u.single_turn("a replay, a trace or a margin census")?;
        if u.rows.first().is_some_and(&keep) {
            units.push(u);
        }
    }
    ensure!(!units.is_empty(), "{} has no finished {what}", dir.display());
    units.sort_by_key(|u| u.unit.index);
    Ok(units)
}

/// Copies every part's units into `out` and writes the merged manifest and reports.
pub fn merge(parts: &[PathBuf], out: &Path) -> Result<EvalOutcome> {
    let manifests: Vec<EvalManifest> = specx_run::merge::read_parts(parts)?;
    let first = &manifests[0];
    let count = first.part.map_or(1, |p| p.count);
    for (m, p) in manifests.iter().zip(parts) {
        ensure!(
            m.part.map_or(1, |p| p.count) == count,
            "{}: part of a {}-way split, not {count}",
            p.display(),
            m.part.map_or(1, |p| p.count)
        );
    }
    let mut indices: Vec<usize> = manifests.iter().filter_map(|m| m.part.map(|p| p.index)).collect();
    indices.sort();
    indices.dedup();
    ensure!(
        indices.len() == count && indices.len() == parts.len(),
        "need each of the {count} parts exactly once, got parts {indices:?}"
    );
    let mut units = Vec::new();
    for p in parts {
        for f in unit_files(p)? {
            units.push(UnitFile::read_path(&f)?);
        }
    }
    units.sort_by_key(|u| u.unit.index);
    ensure!(
        units.len() == first.units_total,
        "the parts hold {} units, the run has {}",
        units.len(),
        first.units_total
    );
    for u in &units {
        u.write(out)?;
    }
    let mut manifest = first.clone();
    manifest.part = None;
    manifest.units_done = units.len();
    manifest.complete = true;
    manifest.seconds = manifests.iter().map(|m| m.seconds).sum();
    manifest.config.output.dir = out.to_path_buf();
    write_run_config(out, &manifest.config.portable().to_toml())?;
    manifest.write(out)?;
    let rows: Vec<_> = units.into_iter().flat_map(|u| u.rows).collect();
    super::report::write_reports(out, &manifest, &rows)?;
    let Audit { failures: audit_failures, numerical: numerical_flips } = audit(&rows, &manifest.config.audit);
    Ok(EvalOutcome { manifest, rows, audit_failures, numerical_flips })
}
