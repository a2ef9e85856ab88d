//! The learning curve of a feature head (`specx train-feature-head`) as a PNG: dev depth-1
//! acceptance against the training rows seen, from the run's `curve.json`.

use super::plot;
use super::plot::{range, render_png};
use anyhow::{Context, Result, anyhow};
use plotters::prelude::*;
use specx_trainer::feature::train::FeatureTrainState;
use std::path::{Path, PathBuf};

/// Draws `dir/curve.png` from `dir/curve.json`; returns its path.
pub fn plot_feature_curve(dir: &Path) -> Result<PathBuf> {
    let json = dir.join("curve.json");
    let state: FeatureTrainState =
        serde_json::from_slice(&std::fs::read(&json).with_context(|| format!("reading {}", json.display()))?)
            .with_context(|| format!("{}: not a feature-head learning curve", json.display()))?;
    let points: Vec<(f64, f64)> = state.curve.iter().map(|p| (p.rows_seen as f64, p.dev_acceptance)).collect();
    let out = dir.join("curve.png");
    render_png(&out, |root| {
        let e = |e: DrawingAreaErrorKind<_>| anyhow!("{e}");
        let mut chart = ChartBuilder::on(root)
            .caption(
                format!("feature head: dev acceptance at depth 1 ({} parameters)", state.parameters),
                ("sans-serif", 22),
            )
            .margin(16)
            .x_label_area_size(48)
            .y_label_area_size(64)
            .build_cartesian_2d(
                range(points.iter().map(|p| p.0).chain([0.0])),
                range(points.iter().map(|p| p.1).chain([0.0])),
            )
            .map_err(e)?;
        plot::draw_mesh(
            &mut chart,
            "training rows seen (response positions, epochs repeat them)",
            "dev acceptance (head's argmax = target's greedy token)",
        )?;
        chart.draw_series(LineSeries::new(points.iter().copied(), BLUE.stroke_width(2))).map_err(e)?;
        chart.draw_series(points.iter().map(|&p| Circle::new(p, 4, BLUE.filled()))).map_err(e)?;
        Ok(())
    })?;
    Ok(out)
}
