//! Heatmaps of the offline simulator (the paper's Figures 2 and 7): speedups over
//! (drafter latency c, acceptance rate a), pink where the ratio is below 1, blue above, each
//! cell labelled with its value, measured model pairs marked.

use super::grid::{Mark, Point, SiMode, Speedups};
use crate::common::plot;
use crate::common::plot::draw_legend;
use crate::common::plot::render_png_sized;
use anyhow::{Result, anyhow};
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
pub fn heatmap_figure(
    path: &Path,
    title: &str,
    panels: &[Panel],
    cols: usize,
    cs: &[f64],
    as_: &[f64],
    marks: &[Mark],
) -> Result<()> {
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
            chart
                .configure_mesh()
                .disable_mesh()
                .x_desc("drafter latency c (draft / target forward)")
                .y_desc("acceptance rate a")
                .label_style(("sans-serif", 14))
                .draw()
                .map_err(e)?;
            for &(c, a, v) in &panel.values {
                let (Some(i), Some(j)) = (cs.iter().position(|&x| x == c), as_.iter().position(|&x| x == a)) else {
                    continue;
                };
                let fill = v.map_or(RGBColor(215, 215, 215), speedup_colour);
                chart
                    .draw_series(std::iter::once(Rectangle::new(
                        [(xe[i], ye[j]), (xe[i + 1], ye[j + 1])],
                        fill.filled(),
                    )))
                    .map_err(e)?;
                if let (true, Some(v)) = (label_cells, v) {
                    let style =
                        TextStyle::from(("sans-serif", 10).into_font()).pos(plotters::style::text_anchor::Pos::new(
                            plotters::style::text_anchor::HPos::Center,
                            plotters::style::text_anchor::VPos::Center,
                        ));
                    chart
                        .draw_series(std::iter::once(Text::new(
                            format!("{v:.2}"),
                            ((xe[i] + xe[i + 1]) / 2.0, (ye[j] + ye[j + 1]) / 2.0),
                            style,
                        )))
                        .map_err(e)?;
                }
            }
            for m in marks {
                chart.draw_series(std::iter::once(Circle::new((m.c, m.a), 6, BLACK.filled()))).map_err(e)?;
                chart
                    .draw_series(std::iter::once(Text::new(
                        m.name.clone(),
                        (m.c, m.a),
                        ("sans-serif", 15).into_font().color(&BLACK),
                    )))
                    .map_err(e)?;
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
    Panel {
        title: "SI cost, official / fair (DSI-feasible k only vs any k)".into(),
        values: points.iter().map(|p| (p.c, p.a, p.si_official.map(|o| o.cost / p.si_fair.cost))).collect(),
    }
}

/// Timeline of one online run: the drafter's forwards and each target server's
/// verifications, coloured by what became of them.
pub fn timeline_figure(path: &Path, title: &str, run: &super::online::SimRun) -> Result<()> {
    use super::online::SpanKind;
    let e = |e: DrawingAreaErrorKind<_>| anyhow!("{e}");
    let lanes = run.busy_s.len() + 1;
    let end = run.spans.iter().map(|s| s.end_s).fold(run.wall_s, f64::max).max(1e-9) * 1e3;
    let colour = |k: SpanKind| match k {
        SpanKind::Prefill => RGBColor(166, 219, 160),
        SpanKind::Draft => RGBColor(120, 120, 120),
        SpanKind::DraftPreempted => RGBColor(200, 200, 200),
        SpanKind::Accepted => RGBColor(33, 102, 172),
        SpanKind::Rejection => RGBColor(214, 96, 77),
        SpanKind::Preempted => RGBColor(244, 165, 130),
    };
    render_png_sized(path, (1400, 140 + 46 * lanes as u32), |root| {
        let mut chart = ChartBuilder::on(root)
            .caption(title, ("sans-serif", 18))
            .margin(12)
            .x_label_area_size(40)
            .y_label_area_size(90)
            .build_cartesian_2d(0.0..end, 0.0..lanes as f64)
            .map_err(e)?;
        chart
            .configure_mesh()
            .disable_y_mesh()
            .y_labels(lanes)
            .y_label_formatter(&|y| {
                let l = y.round() as usize;
                if (*y - l as f64).abs() > 0.01 || l >= lanes {
                    String::new()
                } else if l == 0 {
                    "drafter".into()
                } else {
                    format!("server {l}")
                }
            })
            .x_desc("ms (scaled)")
            .label_style(("sans-serif", 13))
            .draw()
            .map_err(e)?;
        for s in &run.spans {
            let y = s.lane as f64;
            let (x0, x1) = (s.start_s * 1e3, (s.end_s * 1e3).max(s.start_s * 1e3 + end * 1e-4));
            chart
                .draw_series(std::iter::once(Rectangle::new([(x0, y - 0.35), (x1, y + 0.35)], colour(s.kind).filled())))
                .map_err(e)?;
            chart
                .draw_series(std::iter::once(Rectangle::new([(x0, y - 0.35), (x1, y + 0.35)], WHITE.stroke_width(1))))
                .map_err(e)?;
        }
        for (name, k) in [
            ("prefill", SpanKind::Prefill),
            ("draft forward", SpanKind::Draft),
            ("draft cut by rejection", SpanKind::DraftPreempted),
            ("verified, all accepted", SpanKind::Accepted),
            ("revealed a rejection", SpanKind::Rejection),
            ("preempted", SpanKind::Preempted),
        ] {
            let c = colour(k);
            chart
                .draw_series(std::iter::empty::<Rectangle<(f64, f64)>>())
                .map_err(e)?
                .label(name)
                .legend(move |(x, y)| Rectangle::new([(x, y - 5), (x + 14, y + 5)], c.filled()));
        }
        draw_legend(&mut chart, Some(SeriesLabelPosition::UpperLeft), 0.9, 13)?;
        Ok(())
    })
}

/// DSI's speedup over SI and over non-SI per lookahead, one line per server count.
pub fn online_speedup_figure(path: &Path, title: &str, cells: &[super::cell::CellResult]) -> Result<()> {
    use super::cell::CellResult;
    let e = |e: DrawingAreaErrorKind<_>| anyhow!("{e}");
    let kmax = cells.iter().map(|c| c.k).max().unwrap_or(1) as f64;
    let ys: Vec<f64> = cells
        .iter()
        .flat_map(|c| {
            [
                1.0 / CellResult::ratio(&c.dsi_s, &c.si_s),
                1.0 / CellResult::ratio(&c.dsi_s, &c.nonsi_s),
                1.0 / CellResult::ratio(&c.si_s, &c.nonsi_s),
            ]
        })
        .collect();
    let ymax = ys.iter().copied().fold(1.0, f64::max) * 1.15;
    let ymin = ys.iter().copied().fold(1.0, f64::min).min(0.9) * 0.95;
    let mut servers: Vec<usize> = cells.iter().map(|c| c.servers).collect();
    servers.sort_unstable();
    servers.dedup();
    render_png_sized(path, (1300, 560), |root| {
        let root = root.titled(title, ("sans-serif", 20)).map_err(e)?;
        let panels = root.split_evenly((1, 2));
        let what: [(&str, fn(&CellResult) -> f64); 2] = [
            ("DSI speedup over SI", |c| 1.0 / CellResult::ratio(&c.dsi_s, &c.si_s)),
            ("DSI and SI (dashed) speedup over non-SI", |c| 1.0 / CellResult::ratio(&c.dsi_s, &c.nonsi_s)),
        ];
        let palette = plot::tab10(&[0, 3, 2, 4, 1]);
        for (pi, (area, (name, f))) in panels.iter().zip(what).enumerate() {
            let mut chart = ChartBuilder::on(area)
                .caption(name, ("sans-serif", 16))
                .margin(12)
                .x_label_area_size(40)
                .y_label_area_size(50)
                .build_cartesian_2d(0.5..kmax + 0.5, ymin..ymax)
                .map_err(e)?;
            chart
                .configure_mesh()
                .x_desc("lookahead k")
                .y_desc("speedup")
                .label_style(("sans-serif", 13))
                .draw()
                .map_err(e)?;
            chart.draw_series(LineSeries::new([(0.5, 1.0), (kmax + 0.5, 1.0)], BLACK.stroke_width(1))).map_err(e)?;
            for (i, &sp) in servers.iter().enumerate() {
                let col = palette[i % palette.len()];
                let mut pts: Vec<(f64, f64)> =
                    cells.iter().filter(|c| c.servers == sp).map(|c| (c.k as f64, f(c))).collect();
                pts.sort_by(|a, b| a.0.total_cmp(&b.0));
                chart
                    .draw_series(LineSeries::new(pts.clone(), col.stroke_width(2)))
                    .map_err(e)?
                    .label(format!("DSI, {sp} servers"))
                    .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 16, y)], col.stroke_width(2)));
                chart.draw_series(pts.iter().map(|&p| Circle::new(p, 4, col.filled()))).map_err(e)?;
            }
            if pi == 1 {
                let mut si: Vec<(f64, f64)> =
                    cells.iter().map(|c| (c.k as f64, 1.0 / CellResult::ratio(&c.si_s, &c.nonsi_s))).collect();
                si.sort_by(|a, b| a.0.total_cmp(&b.0));
                si.dedup_by(|a, b| a.0 == b.0);
                chart
                    .draw_series(DashedLineSeries::new(si, 6, 4, BLACK.stroke_width(2)))
                    .map_err(e)?
                    .label("SI")
                    .legend(|(x, y)| PathElement::new(vec![(x, y), (x + 16, y)], BLACK.stroke_width(2)));
            }
            draw_legend(&mut chart, None, 0.85, 13)?;
        }
        Ok(())
    })
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
