//! The reproduction's PNG figures: Figure 3 per prompt set (with the oracle), speedup against
//! the threshold, the oracle gap, and the data-scaling curve of the head.

use super::analysis::{HeadPoint, Times};
use anyhow::{Result, anyhow};
use plotters::prelude::*;
use specx_eval::common::plot;
use specx_eval::common::plot::draw_legend;
use specx_eval::common::plot::{colour, frontier, range, rate_chart, render_png};
use specx_eval::common::run_rows::Group;
use std::collections::BTreeMap;
use std::path::Path;

/// Figure 3: verification rate against discard rate (ratios of sums), fixed K labelled,
/// every SpecDec++ setting, the confidence baseline (the same stop rule on the draft's own
/// probability, when the grid has it), each family's frontier, and the oracle.
pub fn frontier_figure(path: &Path, title: &str, groups: &BTreeMap<String, Group>) -> Result<()> {
    render_png(path, |root| {
        let e = |e: DrawingAreaErrorKind<_>| anyhow!("{e}");
        let pts = |f: &str| {
            groups.values().filter(|g| g.first.family == f).map(|g| (g.rates(), g.first.k)).collect::<Vec<_>>()
        };
        let all: Vec<(f64, f64)> =
            ["specdec", "specdecpp", "confidence", "oracle"].iter().flat_map(|f| pts(f)).map(|p| p.0).collect();
        let mut chart = rate_chart(root, title, &all)?;
        for (family, label) in [
            ("specdecpp", "SpecDec++ (every head x threshold x bounds)"),
            ("confidence", "confidence baseline (draft's own probability)"),
            ("specdec", "fixed K"),
            ("oracle", "oracle (Theorem 4.1)"),
        ] {
            let c = colour(family);
            let p = pts(family);
            if p.is_empty() {
                continue;
            }
            let xy: Vec<(f64, f64)> = p.iter().map(|q| q.0).collect();
            let size = match family {
                "specdecpp" => 3,
                "confidence" => 4,
                _ => 6,
            };
            chart
                .draw_series(xy.iter().map(|&q| Circle::new(q, size, c.filled())))
                .map_err(e)?
                .label(label)
                .legend(move |(x, y)| Circle::new((x, y), 5, c.filled()));
            if family != "oracle" {
                chart.draw_series(LineSeries::new(frontier(&xy), c.stroke_width(2))).map_err(e)?;
            }
            if family == "specdec" {
                chart
                    .draw_series(p.iter().map(|(q, k)| {
                        Text::new(format!("K={}", k.unwrap_or(0)), (q.0, q.1), ("sans-serif", 13).into_font())
                    }))
                    .map_err(e)?;
            }
        }
        draw_legend(&mut chart, None, 0.85, 15)?;
        Ok(())
    })
}

/// Eq. 5.1 speedup over AR at `t` against the threshold for `heads`, with the best fixed K
/// and the oracle as horizontal lines.
pub fn threshold_figure(
    path: &Path,
    title: &str,
    groups: &BTreeMap<String, Group>,
    heads: &[String],
    t: &Times,
) -> Result<()> {
    render_png(path, |root| {
        let e = |e: DrawingAreaErrorKind<_>| anyhow!("{e}");
        let sp = |g: &Group| g.eq51(t.pair()) / t.ar();
        let best_k = groups.values().filter(|g| g.first.family == "specdec").map(sp).fold(f64::NAN, f64::max);
        let oracle = groups.values().find(|g| g.first.family == "oracle").map(sp);
        let mut lines: BTreeMap<String, Vec<(f64, f64)>> = BTreeMap::new();
        for g in groups.values().filter(|g| g.first.family == "specdecpp" && g.first.min == Some(2)) {
            if let (Some(h), Some(th)) = (&g.first.head, g.first.threshold)
                && heads.contains(h)
            {
                lines.entry(h.clone()).or_default().push((th, sp(g)));
            }
        }
        let ys = lines.values().flatten().map(|p| p.1).chain([best_k, 1.0]).chain(oracle).filter(|v| v.is_finite());
        let mut chart = ChartBuilder::on(root)
            .caption(title, ("sans-serif", 20))
            .margin(16)
            .x_label_area_size(48)
            .y_label_area_size(64)
            .build_cartesian_2d(0.0..1.0, range(ys))
            .map_err(e)?;
        plot::draw_mesh(&mut chart, "threshold h (bounds [2, 20])", &format!("eq. 5.1 speedup over AR, {}", t.name))?;
        let palette = plot::tab10(&[3, 1, 5, 6, 8]);
        for (i, (h, mut p)) in lines.into_iter().enumerate() {
            p.sort_by(|a, b| a.0.total_cmp(&b.0));
            let c = palette[i % palette.len()];
            chart
                .draw_series(LineSeries::new(p.clone(), c.stroke_width(2)))
                .map_err(e)?
                .label(format!("SpecDec++ {h}"))
                .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 16, y)], c.stroke_width(2)));
            chart.draw_series(p.iter().map(|&q| Circle::new(q, 4, c.filled()))).map_err(e)?;
        }
        for (v, name, c) in [(Some(best_k), "best fixed K", colour("specdec")), (oracle, "oracle", colour("oracle"))] {
            if let Some(v) = v.filter(|v| v.is_finite()) {
                chart
                    .draw_series(LineSeries::new(vec![(0.0, v), (1.0, v)], c.stroke_width(2)))
                    .map_err(e)?
                    .label(name)
                    .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 16, y)], c.stroke_width(2)));
            }
        }
        draw_legend(&mut chart, None, 0.85, 14)?;
        Ok(())
    })
}

/// Grouped bars per prompt set: eq. 5.1 speedup of the best fixed K, the best SpecDec++, the
/// best confidence setting and the oracle (NaN: no bar).
pub fn oracle_gap_figure(path: &Path, title: &str, bars: &[(String, [f64; 4])]) -> Result<()> {
    render_png(path, |root| {
        let e = |e: DrawingAreaErrorKind<_>| anyhow!("{e}");
        let ymax = bars.iter().flat_map(|b| b.1).filter(|v| v.is_finite()).fold(1.0, f64::max) * 1.15;
        let mut chart = ChartBuilder::on(root)
            .caption(title, ("sans-serif", 20))
            .margin(16)
            .x_label_area_size(48)
            .y_label_area_size(64)
            .build_cartesian_2d(-0.5..bars.len() as f64 - 0.5, 0.0..ymax)
            .map_err(e)?;
        chart
            .configure_mesh()
            .x_labels(bars.len())
            .x_label_formatter(&|x| {
                bars.get(x.round() as usize)
                    .filter(|_| (x - x.round()).abs() < 1e-6)
                    .map_or(String::new(), |b| b.0.clone())
            })
            .y_desc("eq. 5.1 speedup over AR")
            .label_style(("sans-serif", 15))
            .draw()
            .map_err(e)?;
        for (j, (family, label)) in [
            ("specdec", "best fixed K"),
            ("specdecpp", "best SpecDec++"),
            ("confidence", "best confidence baseline"),
            ("oracle", "oracle"),
        ]
        .into_iter()
        .enumerate()
        {
            let c = colour(family);
            chart
                .draw_series(bars.iter().enumerate().filter(|(_, b)| b.1[j].is_finite()).map(|(i, b)| {
                    let x = i as f64 - 0.38 + 0.19 * j as f64;
                    Rectangle::new([(x, 0.0), (x + 0.17, b.1[j])], c.filled())
                }))
                .map_err(e)?
                .label(label)
                .legend(move |(x, y)| Rectangle::new([(x, y - 5), (x + 12, y + 5)], c.filled()));
        }
        draw_legend(&mut chart, Some(SeriesLabelPosition::UpperLeft), 0.85, 15)?;
        Ok(())
    })
}

/// One colour per prompt set where several share a chart.
const SET_COLOURS: [RGBColor; 4] =
    [RGBColor(31, 119, 180), RGBColor(255, 127, 14), RGBColor(44, 160, 44), RGBColor(214, 39, 40)];

/// Dev binary KL, AUROC and ECE of the head, and each prompt set's best eq. 5.1 speedup at the
/// paper's times, against the training rows (log scale).
pub fn scaling_figure(path: &Path, title: &str, points: &[(HeadPoint, BTreeMap<String, f64>)]) -> Result<()> {
    render_png(path, |root| {
        let e = |e: DrawingAreaErrorKind<_>| anyhow!("{e}");
        let root = root.titled(title, ("sans-serif", 20)).map_err(e)?;
        let panels = root.split_evenly((2, 2));
        let mut pts: Vec<&(HeadPoint, BTreeMap<String, f64>)> = points.iter().collect();
        pts.sort_by_key(|p| p.0.train_rows);
        let xs = pts.iter().map(|p| p.0.train_rows as f64);
        let (lo, hi) = (xs.clone().fold(f64::INFINITY, f64::min) * 0.8, xs.fold(0.0, f64::max) * 1.25);
        let x = |p: &HeadPoint| p.train_rows as f64;
        // One series per panel for the dev metrics; one per prompt set for the speedups.
        let sets: Vec<String> = pts
            .iter()
            .flat_map(|p| p.1.keys().cloned())
            .collect::<std::collections::BTreeSet<_>>()
            .into_iter()
            .collect();
        let mut series: Vec<(&str, Vec<(String, Vec<(f64, f64)>)>)> = vec![
            ("dev binary KL", vec![("".into(), pts.iter().map(|p| (x(&p.0), p.0.dev_kl)).collect())]),
            (
                "dev AUROC",
                vec![("".into(), pts.iter().map(|p| (x(&p.0), p.0.dev_auroc.unwrap_or(f64::NAN))).collect())],
            ),
            ("dev ECE", vec![("".into(), pts.iter().map(|p| (x(&p.0), p.0.dev_ece)).collect())]),
        ];
        series.push((
            "best speedup, paper times",
            sets.iter()
                .map(|d| (d.clone(), pts.iter().filter_map(|p| p.1.get(d).map(|&v| (x(&p.0), v))).collect()))
                .collect(),
        ));
        for (panel, (name, lines)) in panels.iter().zip(series) {
            let lines: Vec<(String, Vec<(f64, f64)>)> =
                lines.into_iter().map(|(n, v)| (n, v.into_iter().filter(|q| q.1.is_finite()).collect())).collect();
            let mut chart = ChartBuilder::on(panel)
                .margin(12)
                .x_label_area_size(44)
                .y_label_area_size(60)
                .build_cartesian_2d(
                    (lo.max(1.0)..hi.max(2.0)).log_scale(),
                    range(lines.iter().flat_map(|l| l.1.iter().map(|q| q.1))),
                )
                .map_err(e)?;
            chart
                .configure_mesh()
                .x_desc("training rows")
                .y_desc(name)
                .x_labels(4)
                .label_style(("sans-serif", 13))
                .draw()
                .map_err(e)?;
            for (i, (label, v)) in lines.iter().enumerate() {
                let c = if label.is_empty() { colour("specdecpp") } else { SET_COLOURS[i % SET_COLOURS.len()] };
                let drawn = chart.draw_series(LineSeries::new(v.clone(), c.stroke_width(2))).map_err(e)?;
                if !label.is_empty() {
                    drawn
                        .label(label.as_str())
                        .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 16, y)], c.stroke_width(2)));
                }
                chart.draw_series(v.iter().map(|&q| Circle::new(q, 4, c.filled()))).map_err(e)?;
                // A log axis shows no tick inside a range like 1,800-4,400 rows: name each point.
                if label.is_empty() {
                    chart
                        .draw_series(
                            v.iter().map(|&q| {
                                Text::new(format!("{} rows", q.0 as usize), q, ("sans-serif", 12).into_font())
                            }),
                        )
                        .map_err(e)?;
                }
            }
            if lines.iter().any(|l| !l.0.is_empty()) {
                draw_legend(&mut chart, Some(SeriesLabelPosition::LowerRight), 0.85, 13)?;
            }
        }
        Ok(())
    })
}
