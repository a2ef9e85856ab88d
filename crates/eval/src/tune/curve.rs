//! `specx eval learning-curve`: would more data make the calibrated acceptance model a better
//! stop rule? The model of a tune config's `[calibrated]` table is fitted, as the tune fits it
//! (every `holdout_every`-th trace held out for the per-depth temperatures), on the first n
//! traces of the test run for each n, and every fit is scored on all of the tuning traces,
//! which no fit sees. A threshold rule only uses the order of its signal, so the score that
//! decides is the AUROC against the draft's own probability's on the same positions; the log
//! loss says whether the probabilities themselves get better.
//!
//! The roles of the two runs are swapped on purpose: the test run is the larger pool, and no
//! setting of any reported rule is chosen here, so the curve spends no test prompt.

use super::acceptance_model::{fit_traces, trace_samples};
use super::calibrate::{Calibration, Sample, calibration, draft_probability};
use super::config::{CalibratedFit, TuneConfig};
use super::{Runs, of};
use crate::common::plot::{colour, render_png};
use crate::common::results::UnitFile;
use crate::experiment::replay::TraceDraws;
use crate::experiment::trace_builder::{TraceBuilder, TraceInput};
use anyhow::{Context, Result, anyhow, ensure};
use indicatif::{ProgressBar, ProgressStyle};
use plotters::prelude::*;
use serde::{Deserialize, Serialize};
use specx_decoder::Transformer;
use specx_decoder::fsutil::write_atomic;
use specx_trainer::acceptance::metrics::auroc;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::time::Instant;

/// The model fitted on one number of traces, scored on the scoring positions.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct CurvePoint {
    pub prompts: usize,
    /// Positions the regression and the temperatures were fitted on.
    pub fit_positions: usize,
    pub temperature_positions: usize,
    pub scored: Calibration,
    pub auroc: f64,
}

/// One prompt set's curve, with the draft's probability scored on the same positions.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct SetCurve {
    pub dataset: String,
    pub scoring_prompts: usize,
    pub scoring_positions: usize,
    pub scoring_acceptance: f64,
    pub draft_probability: Calibration,
    pub draft_auroc: f64,
    pub points: Vec<CurvePoint>,
    /// Draft rows forwarded for the trunks (both runs) and their seconds.
    pub draft_rows: usize,
    pub draft_seconds: f64,
}

/// The curve of every prompt set, with the fit it was computed under.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Curve {
    pub fit: CalibratedFit,
    pub sizes: Vec<usize>,
    pub sets: Vec<SetCurve>,
}

/// The labelled trunk positions of each trace of `units`.
fn samples(builder: &mut TraceBuilder, units: &[&UnitFile], f: &CalibratedFit) -> Result<Vec<Vec<Sample>>> {
    let inputs: Vec<TraceInput> = units.iter().map(|u| TraceInput::of(u)).collect::<Result<_>>()?;
    trace_samples(&builder.start(&inputs, false)?, f)
}

/// AUROC of `scores` for `labels` (both labels are present on every scoring set used here).
fn auroc_of(scores: &[f64], labels: &[bool]) -> Result<f64> {
    let s: Vec<f32> = scores.iter().map(|&x| x as f32).collect();
    let l: Vec<f32> = labels.iter().map(|&y| f32::from(u8::from(y))).collect();
    auroc(&s, &l).context("the scoring positions hold only accepted or only rejected tokens")
}

/// The curve of one prompt set: fits on the first n `pool` traces, scores on `scoring`.
fn set_curve(
    draft: &Transformer,
    eos: &[u32],
    f: &CalibratedFit,
    sizes: &[usize],
    dataset: &str,
    scoring: &[&UnitFile],
    pool: &[&UnitFile],
) -> Result<SetCurve> {
    let mut builder = TraceBuilder::new(draft, &[], eos);
    let bar = ProgressBar::new_spinner();
    bar.set_style(ProgressStyle::with_template("{spinner} {pos} draft looks ({per_sec}), {elapsed}: {msg}")?);
    bar.set_message(format!("{dataset}: the trunks of the scoring and the fitting traces"));
    builder.progress = Some(bar.clone());
    let t = Instant::now();
    let scored: Vec<Sample> = samples(&mut builder, scoring, f)?.concat();
    let pool = samples(&mut builder, &pool[..sizes.iter().copied().max().unwrap_or(0)], f)?;
    bar.finish_and_clear();
    eprintln!(
        "{dataset}: trunks of {} scoring and {} fitting traces, {} draft rows in {:.0} s",
        scoring.len(),
        pool.len(),
        builder.rows,
        t.elapsed().as_secs_f64()
    );
    let labels: Vec<bool> = scored.iter().map(|s| s.label).collect();
    let p: Vec<f64> = scored.iter().map(draft_probability).collect();
    let mut points = Vec::new();
    for &n in sizes {
        let m = fit_traces(&pool[..n], f).with_context(|| format!("{dataset}: the fit on {n} traces"))?;
        let probs: Vec<f64> = scored.iter().map(|s| m.probability(s)).collect();
        points.push(CurvePoint {
            prompts: n,
            fit_positions: m.fit_samples,
            temperature_positions: m.holdout_samples,
            scored: calibration(&probs, &labels),
            auroc: auroc_of(&probs, &labels)?,
        });
    }
    Ok(SetCurve {
        dataset: dataset.into(),
        scoring_prompts: scoring.len(),
        scoring_positions: scored.len(),
        scoring_acceptance: labels.iter().filter(|&&y| y).count() as f64 / labels.len().max(1) as f64,
        draft_probability: calibration(&p, &labels),
        draft_auroc: auroc_of(&p, &labels)?,
        points,
        draft_rows: builder.rows,
        draft_seconds: builder.time.as_secs_f64(),
    })
}

/// Fits and scores the calibrated model of `cfg` at every size in `sizes` (traces per prompt
/// set); writes `OUT/learning-curve/curve.{json,md,png}` and returns the curve.
pub fn learning_curve(cfg: &TuneConfig, sizes: &[usize]) -> Result<Curve> {
    let f = cfg
        .calibrated
        .clone()
        .context("the config has no [calibrated] table: the learning curve is the calibrated model's")?;
    ensure!(!f.target, "the learning curve fits the draft-only model: set target = false in [calibrated]");
    let mut sizes = sizes.to_vec();
    sizes.sort_unstable();
    sizes.dedup();
    ensure!(
        sizes.first().is_some_and(|&n| n >= f.holdout_every),
        "every size must be at least holdout_every ({}) traces, so that one holds the temperatures",
        f.holdout_every
    );
    let runs = Runs::open(cfg)?;
    for d in &runs.datasets {
        let have = of(&runs.test, d).len();
        ensure!(
            sizes.iter().all(|&n| n <= have),
            "set '{d}' has {have} test traces to fit on; the largest size is {}",
            sizes[sizes.len() - 1]
        );
    }
    let draft = runs.draft()?;
    let mut sets = Vec::new();
    for d in &runs.datasets {
        sets.push(set_curve(
            &draft.model,
            &runs.manifest.eos_ids,
            &f,
            &sizes,
            d,
            &of(&runs.tuning, d),
            &of(&runs.test, d),
        )?);
    }
    let curve = Curve { fit: f, sizes, sets };
    let label = label(&runs.tuning[0])?;
    write(&curve, &label, &cfg.out.join("learning-curve"))?;
    Ok(curve)
}

/// The event the traces label: greedy agreement, or a coupled draw's acceptance at the traces'
/// sampling (the runs are checked to be drawn alike).
pub fn label(u: &UnitFile) -> Result<String> {
    let s = TraceDraws::of(u)?.sampling;
    if s.is_greedy() {
        return Ok("greedy acceptance".into());
    }
    let mut l = format!("coupled acceptance at temperature {}", s.temperature);
    if let Some(k) = s.top_k {
        let _ = write!(l, ", top-k {k}");
    }
    if let Some(p) = s.top_p {
        let _ = write!(l, ", top-p {p}");
    }
    Ok(l)
}

/// The page: one table per set, then the figure; `label` names the event the traces label.
pub fn page(c: &Curve, label: &str) -> String {
    let mut s = String::from("# The calibrated acceptance model's learning curve\n\n");
    let _ = writeln!(
        s,
        "The draft-only model (L2 {}, every {}th fitting trace held out for the per-depth temperatures), fitted on the first n test traces of each set and scored on all of its tuning traces ({label} of the draft's token, given the round's earlier candidates were accepted, up to depth {}). AUROC: the chance that an accepted position scores above a rejected one, all a threshold rule reads.\n",
        c.fit.l2, c.fit.holdout_every, c.fit.max_candidates
    );
    for set in &c.sets {
        let _ = writeln!(
            s,
            "## {}\n\n{} scoring prompts, {} positions, acceptance {:.3}; draft rows {} in {:.0} s.\n",
            set.dataset,
            set.scoring_prompts,
            set.scoring_positions,
            set.scoring_acceptance,
            set.draft_rows,
            set.draft_seconds
        );
        s.push_str("| signal | fit prompts | fit / temperature positions | log loss | Brier | ECE | AUROC |\n| --- | --- | --- | --- | --- | --- | --- |\n");
        let d = &set.draft_probability;
        let _ = writeln!(
            s,
            "| the draft's probability | - | - | {:.4} | {:.4} | {:.3} | {:.4} |",
            d.log_loss, d.brier, d.ece, set.draft_auroc
        );
        for p in &set.points {
            let m = &p.scored;
            let _ = writeln!(
                s,
                "| calibrated model | {} | {} / {} | {:.4} | {:.4} | {:.3} | {:.4} |",
                p.prompts, p.fit_positions, p.temperature_positions, m.log_loss, m.brier, m.ece, p.auroc
            );
        }
        s.push('\n');
    }
    s.push_str("![AUROC against fit prompts](curve.png)\n");
    s
}

/// AUROC of the model (points and line) and of the draft's probability (flat line) per set.
fn plot(c: &Curve, label: &str, path: &Path) -> Result<()> {
    let xs = (c.sizes[0] as f64 * 0.8)..(c.sizes[c.sizes.len() - 1] as f64 * 1.25);
    let ys = c.sets.iter().flat_map(|s| s.points.iter().map(|p| p.auroc).chain([s.draft_auroc]));
    let (lo, hi) = (ys.clone().fold(1.0, f64::min), ys.fold(0.0, f64::max));
    render_png(path, |root| {
        let e = |e: DrawingAreaErrorKind<_>| anyhow!("{e}");
        let mut chart = ChartBuilder::on(root)
            .caption(
                "calibrated model: AUROC on the tuning traces (lines: the draft's probability)",
                ("sans-serif", 18),
            )
            .margin(16)
            .x_label_area_size(48)
            .y_label_area_size(64)
            .build_cartesian_2d(xs.clone().log_scale(), (lo - 0.01)..(hi + 0.01))
            .map_err(e)?;
        chart
            .configure_mesh()
            .x_desc("fit prompts (traces)")
            .y_desc(format!("AUROC of {}", label.split(" at ").next().unwrap_or(label)))
            .label_style(("sans-serif", 15))
            .draw()
            .map_err(e)?;
        let families = ["specdec", "confidence", "specdecpp"];
        for (set, fam) in c.sets.iter().zip(families.iter().cycle()) {
            let col = colour(fam);
            let pts: Vec<(f64, f64)> = set.points.iter().map(|p| (p.prompts as f64, p.auroc)).collect();
            chart
                .draw_series(LineSeries::new(pts.iter().copied(), col.stroke_width(2)))
                .map_err(e)?
                .label(set.dataset.clone())
                .legend(move |(x, y)| PathElement::new([(x, y), (x + 18, y)], col.stroke_width(2)));
            chart.draw_series(pts.iter().map(|&p| Circle::new(p, 4, col.filled()))).map_err(e)?;
            chart
                .draw_series(LineSeries::new(
                    [(xs.start, set.draft_auroc), (xs.end, set.draft_auroc)],
                    col.stroke_width(1),
                ))
                .map_err(e)?;
        }
        chart
            .configure_series_labels()
            .background_style(WHITE)
            .border_style(BLACK)
            .label_font(("sans-serif", 15))
            .draw()
            .map_err(e)?;
        Ok(())
    })
}

fn write(c: &Curve, label: &str, dir: &Path) -> Result<PathBuf> {
    std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    write_atomic(&dir.join("curve.json"), serde_json::to_string_pretty(c)?.as_bytes())?;
    write_atomic(&dir.join("curve.md"), page(c, label).as_bytes())?;
    plot(c, label, &dir.join("curve.png"))?;
    Ok(dir.to_path_buf())
}
