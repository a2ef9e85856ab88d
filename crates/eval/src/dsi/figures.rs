//! Heatmaps of the offline simulator (the paper's Figures 2 and 7): speedups over
//! (drafter latency c, acceptance rate a), pink where the ratio is below 1, blue above, each
//! cell labelled with its value, measured model pairs marked.

use super::grid::{Mark, Point, SiMode, Speedups};
use crate::experiment::plots::render_png_sized;
use anyhow::{anyhow, Result};
use plotters::prelude::*;
use std::path::Path;

/// One panel: a title and the value at each (c, a) (None: not defined there, drawn grey).
pub struct Panel {
    pub title: String,
    pub values: Vec<(f64, f64, Option<f64>)>,
}

/// Cell edges of sorted grid values: midpoints, the outer edges half a step out (not below 0).
fn edges(v: &[f64]) -> Vec<f64> {
    let n = v.len();
    let mut e = Vec::with_capacity(n + 1);
    e.push((v[0] - (v[1] - v[0]) / 2.0).max(0.0));
    for i in 0..n - 1 {
        e.push((v[i] + v[i + 1]) / 2.0);
    }
    e.push(v[n - 1] + (v[n - 1] - v[n - 2]) / 2.0);
    e
}

/// Diverging colour on a log scale around 1: white at 1, pink at 1/4 and below, blue at 4.
pub fn speedup_colour(v: f64) -> RGBColor {
    let t = v.ln() / 4f64.ln();
    let (target, s) = if t < 0.0 { ((197.0, 27.0, 125.0), (-t).min(1.0)) } else { ((33.0, 102.0, 172.0), t.min(1.0)) };
    let mix = |w: f64, c: f64| (w + (c - w) * s).round() as u8;
    RGBColor(mix(255.0, target.0), mix(255.0, target.1), mix(255.0, target.2))
}

/// Draws `panels` side by side in `cols` columns into one PNG.
pub fn heatmap_figure(path: &Path, title: &str, panels: &[Panel], cols: usize, cs: &[f64], as_: &[f64], marks: &[Mark]) -> Result<()> {
    let rows = panels.len().div_ceil(cols);
    let size = (720 * cols as u32, 660 * rows as u32 + 50);
    let e = |e: DrawingAreaErrorKind<_>| anyhow!("{e}");
    let (xe, ye) = (edges(cs), edges(as_));
    let label_cells = cs.len() <= 21 && as_.len() <= 21;
    render_png_sized(path, size, |root| {
        let root = root.titled(title, ("sans-serif", 26)).map_err(e)?;
        for (area, panel) in root.split_evenly((rows, cols)).iter().zip(panels) {
            let mut chart = ChartBuilder::on(area)
                .caption(&panel.title, ("sans-serif", 20))
                .margin(12)
                .x_label_area_size(44)
                .y_label_area_size(54)
                .build_cartesian_2d(xe[0]..xe[xe.len() - 1], ye[0]..ye[ye.len() - 1])
                .map_err(e)?;
            chart.configure_mesh().disable_mesh().x_desc("drafter latency c (draft / target forward)").y_desc("acceptance rate a").label_style(("sans-serif", 14)).draw().map_err(e)?;
            for &(c, a, v) in &panel.values {
                let (Some(i), Some(j)) = (cs.iter().position(|&x| x == c), as_.iter().position(|&x| x == a)) else { continue };
                let fill = v.map_or(RGBColor(215, 215, 215), speedup_colour);
                chart.draw_series(std::iter::once(Rectangle::new([(xe[i], ye[j]), (xe[i + 1], ye[j + 1])], fill.filled()))).map_err(e)?;
                if let (true, Some(v)) = (label_cells, v) {
                    let style = TextStyle::from(("sans-serif", 10).into_font()).pos(plotters::style::text_anchor::Pos::new(plotters::style::text_anchor::HPos::Center, plotters::style::text_anchor::VPos::Center));
                    chart.draw_series(std::iter::once(Text::new(format!("{v:.2}"), ((xe[i] + xe[i + 1]) / 2.0, (ye[j] + ye[j + 1]) / 2.0), style))).map_err(e)?;
                }
            }
            for m in marks {
                chart.draw_series(std::iter::once(Circle::new((m.c, m.a), 6, BLACK.filled()))).map_err(e)?;
                chart.draw_series(std::iter::once(Text::new(m.name.clone(), (m.c, m.a), ("sans-serif", 15).into_font().color(&BLACK)))).map_err(e)?;
            }
        }
        Ok(())
    })
}

/// One speedup of every point under `mode` as a panel.
fn speedup_panel(title: String, points: &[Point], mode: SiMode, f: fn(&Speedups) -> Option<f64>) -> Panel {
    Panel { title, values: points.iter().map(|p| (p.c, p.a, p.speedups(mode).and_then(|s| f(&s)))).collect() }
}

/// The four panels of Figure 2 for one SI mode: SI / non-SI, DSI / SI, DSI / non-SI and DSI /
/// min(SI, non-SI), each algorithm at its best lookahead.
pub fn figure2_panels(points: &[Point], mode: SiMode) -> Vec<Panel> {
    vec![
        speedup_panel("(a) SI speedup over non-SI".into(), points, mode, |s| Some(s.si_vs_nonsi)),
        speedup_panel("(b) DSI speedup over SI".into(), points, mode, |s| s.dsi_vs_si),
        speedup_panel("(c) DSI speedup over non-SI".into(), points, mode, |s| s.dsi_vs_nonsi),
        speedup_panel("(d) DSI speedup over min(SI, non-SI)".into(), points, mode, |s| s.dsi_vs_baseline),
    ]
}

/// Figure 7: the same lookahead for all algorithms (only where DSI can run with it).
pub fn figure7_panels(points: &[Point], k: usize) -> Vec<Panel> {
    let mode = SiMode::Official;
    vec![
        speedup_panel(format!("(a) SI over non-SI, k = {k}"), points, mode, |s| Some(s.si_vs_nonsi)),
        speedup_panel(format!("(b) DSI over SI, k = {k}"), points, mode, |s| s.dsi_vs_si),
        speedup_panel(format!("(c) DSI over non-SI, k = {k}"), points, mode, |s| s.dsi_vs_nonsi),
    ]
}

/// Where the two SI modes differ: official SI cost / fair SI cost (1 where SI's best lookahead
/// is DSI-feasible anyway; above 1 where the reference handicaps SI).
pub fn si_mode_panel(points: &[Point]) -> Panel {
    Panel { title: "SI cost, official / fair (DSI-feasible k only vs any k)".into(), values: points.iter().map(|p| (p.c, p.a, p.si_official.map(|o| o.cost / p.si_fair.cost))).collect() }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn colours_are_white_at_one_and_saturate_at_four() {
        assert_eq!(speedup_colour(1.0), RGBColor(255, 255, 255));
        assert_eq!(speedup_colour(4.0), RGBColor(33, 102, 172));
        assert_eq!(speedup_colour(0.1), RGBColor(197, 27, 125));
        let e = edges(&[0.01, 0.05, 0.1]);
        for (x, want) in e.iter().zip([0.0, 0.03, 0.075, 0.125]) {
            assert!((x - want).abs() < 1e-12, "{e:?}");
        }
    }
}
