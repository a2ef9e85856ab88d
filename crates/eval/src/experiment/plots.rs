//! PNG plots of an eval run: the SpecDec++ paper's Figure 3 (verification rate vs discard
//! rate, one point per setting, each family's non-dominated frontier drawn; replayed points
//! hollow), speedup against K and against the threshold, and the distribution of accepted
//! lengths per method family.

use crate::common::plot;
use crate::common::plot::draw_legend;
use crate::common::plot::{SIZE, colour, frontier, range, render_png, safe};
use crate::common::results::ResultRow;
use crate::common::stats::{GroupStats, grouped, mean_sd};
use anyhow::{Result, anyhow};
use plotters::prelude::*;
use std::collections::BTreeMap;
use std::path::Path;

/// Writes every plot into `dir`; returns the files written.
pub fn write_plots(dir: &Path, rows: &[ResultRow]) -> Result<Vec<std::path::PathBuf>> {
    let mut written = Vec::new();
    for ((dataset, sampling), groups) in grouped(rows) {
        let stats: Vec<(String, &'static str, &ResultRow, GroupStats)> =
            groups.iter().map(|(key, rs)| (key.clone(), rs[0].setting.family(), rs[0], GroupStats::of(rs))).collect();
        let tag = format!("{}_{}", safe(&dataset), safe(&sampling));
        let spec: Vec<_> = stats.iter().filter(|s| s.1 != "ar").collect();
        if spec.is_empty() {
            continue;
        }
        let path = dir.join(format!("frontier_{tag}.png"));
        render_png(&path, |root| {
            frontier_plot(root, &format!("{dataset}, {sampling}: verification vs discard rate"), &spec)
        })?;
        written.push(path);
        let path = dir.join(format!("speedup_{tag}.png"));
        render_png(&path, |root| speedup_plot(root, &format!("{dataset}, {sampling}: speedup over AR"), &spec))?;
        written.push(path);
        let path = dir.join(format!("accepted_{tag}.png"));
        render_png(&path, |root| {
            accepted_plot(root, &format!("{dataset}, {sampling}: accepted candidates per round"), &groups)
        })?;
        written.push(path);
    }
    Ok(written)
}

type Stat<'a> = (String, &'static str, &'a ResultRow, GroupStats);

fn frontier_plot(root: &DrawingArea<BitMapBackend, plotters::coord::Shift>, title: &str, spec: &[&Stat]) -> Result<()> {
    let e = |e: DrawingAreaErrorKind<_>| anyhow!("{e}");
    let pts = |s: &Stat| (s.3.discard_rate_sum(), s.3.verification_rate_sum());
    let mut families: BTreeMap<&str, Vec<(f64, f64, String, bool)>> = BTreeMap::new();
    for s in spec {
        let (x, y) = pts(s);
        families.entry(s.1).or_default().push((x, y, s.0.clone(), s.3.replayed));
    }
    let xr = range(spec.iter().map(|s| pts(s).0));
    let yr = range(spec.iter().map(|s| pts(s).1));
    let mut chart = ChartBuilder::on(root)
        .caption(title, ("sans-serif", 22))
        .margin(16)
        .x_label_area_size(48)
        .y_label_area_size(64)
        .build_cartesian_2d(xr, yr)
        .map_err(e)?;
    plot::draw_mesh(&mut chart, "discard rate N_discarded / N (sum)", "verification rate N_target / N (sum)")?;
    for (family, points) in &families {
        let c = colour(family);
        let xy: Vec<(f64, f64)> = points.iter().map(|p| (p.0, p.1)).collect();
        // Real runs filled, replayed settings hollow.
        chart
            .draw_series(
                points.iter().map(|p| Circle::new((p.0, p.1), 5, if p.3 { c.stroke_width(2) } else { c.filled() })),
            )
            .map_err(e)?
            .label(*family)
            .legend(move |(x, y)| Circle::new((x, y), 5, c.filled()));
        chart.draw_series(LineSeries::new(frontier(&xy), c.stroke_width(2))).map_err(e)?;
        if *family == "specdec" {
            // Label fixed-K points with their K.
            chart
                .draw_series(points.iter().map(|(x, y, key, _)| {
                    Text::new(key.trim_start_matches("specdec ").to_string(), (*x, *y), ("sans-serif", 13).into_font())
                }))
                .map_err(e)?;
        }
    }
    draw_legend(&mut chart, None, 0.85, 15)?;
    Ok(())
}

fn speedup_plot(root: &DrawingArea<BitMapBackend, plotters::coord::Shift>, title: &str, spec: &[&Stat]) -> Result<()> {
    let e = |e: DrawingAreaErrorKind<_>| anyhow!("{e}");
    let (left, right) = root.split_horizontally(SIZE.0 / 2);
    let mean = |s: &Stat| mean_sd(&s.3.speedup).0;
    // Left: speedup against K: fixed K, and DSI's lookahead per server count.
    let mut k_lines: BTreeMap<String, (&str, Vec<(f64, f64)>)> = BTreeMap::new();
    for s in spec.iter().filter(|s| s.1 == "specdec" || s.1 == "dsi") {
        let Some(k) = s.2.setting.k() else { continue };
        let name = match s.2.setting.servers() {
            Some(sp) => format!("dsi SP={sp}"),
            None => "fixed K".into(),
        };
        k_lines.entry(name).or_insert((s.1, Vec::new())).1.push((k as f64, mean(s)));
    }
    let thr: Vec<(&str, String, f64, f64)> =
        spec.iter().filter_map(|s| Some((s.1, line_name(s.2), s.2.setting.threshold()?, mean(s)))).collect();
    let mut lines: BTreeMap<String, (&str, Vec<(f64, f64)>)> = BTreeMap::new();
    for (family, name, t, s) in &thr {
        lines.entry(name.clone()).or_insert((family, Vec::new())).1.push((*t, *s));
    }
    let k_points = || k_lines.values().flat_map(|l| l.1.iter().copied());
    let yr = range(k_points().map(|p| p.1).chain(thr.iter().map(|p| p.3)).chain([1.0]));
    let mut c1 = ChartBuilder::on(&left)
        .caption(title, ("sans-serif", 18))
        .margin(14)
        .x_label_area_size(44)
        .y_label_area_size(56)
        .build_cartesian_2d(range(k_points().map(|p| p.0).chain([1.0])), yr.clone())
        .map_err(e)?;
    c1.configure_mesh()
        .x_desc("K (fixed) / DSI lookahead")
        .y_desc("speedup (mean over prompts)")
        .label_style(("sans-serif", 14))
        .draw()
        .map_err(e)?;
    for (i, (name, (family, mut pts))) in k_lines.into_iter().enumerate() {
        pts.sort_by(|a, b| a.0.total_cmp(&b.0));
        // DSI's server counts in shades of its colour.
        let c = if family == "dsi" {
            colour(family).mix(1.0 - 0.2 * (i % 4) as f64).to_rgba()
        } else {
            colour(family).to_rgba()
        };
        c1.draw_series(LineSeries::new(pts.clone(), c.stroke_width(2)))
            .map_err(e)?
            .label(name)
            .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 16, y)], c.stroke_width(2)));
        c1.draw_series(pts.iter().map(|&p| Circle::new(p, 4, c.filled()))).map_err(e)?;
    }
    draw_legend(&mut c1, None, 0.85, 13)?;
    let mut c2 = ChartBuilder::on(&right)
        .margin(14)
        .x_label_area_size(44)
        .y_label_area_size(56)
        .build_cartesian_2d(0.0..1.0, yr)
        .map_err(e)?;
    c2.configure_mesh().x_desc("threshold").label_style(("sans-serif", 14)).draw().map_err(e)?;
    let any_threshold = !lines.is_empty();
    for (name, (family, mut pts)) in lines {
        pts.sort_by(|a, b| a.0.total_cmp(&b.0));
        let c = colour(family);
        c2.draw_series(LineSeries::new(pts.clone(), c.stroke_width(2)))
            .map_err(e)?
            .label(name)
            .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 16, y)], c.stroke_width(2)));
        c2.draw_series(pts.iter().map(|&p| Circle::new(p, 4, c.filled()))).map_err(e)?;
    }
    if any_threshold {
        draw_legend(&mut c2, None, 0.85, 13)?;
    }
    Ok(())
}

/// A threshold line's name: the setting without its threshold.
fn line_name(r: &ResultRow) -> String {
    let s = &r.setting;
    let [min, max] = s.bounds().unwrap_or_default();
    let servers = s.servers().map_or(String::new(), |sp| format!(" SP={sp}"));
    match s.head() {
        Some(h) => format!("{}{servers} {h} [{min},{max}]", s.family()),
        None => format!("{}{servers} [{min},{max}]", s.family()),
    }
}

fn accepted_plot(
    root: &DrawingArea<BitMapBackend, plotters::coord::Shift>,
    title: &str,
    groups: &[(String, Vec<&ResultRow>)],
) -> Result<()> {
    let e = |e: DrawingAreaErrorKind<_>| anyhow!("{e}");
    let mut by_family: BTreeMap<&str, Vec<usize>> = BTreeMap::new();
    for (_, rs) in groups {
        for r in rs.iter().filter(|r| r.setting.family() != "ar") {
            by_family.entry(r.setting.family()).or_default().extend(&r.accepted_per_round);
        }
    }
    let max_len = by_family.values().flatten().copied().max().unwrap_or(1);
    let mut series = Vec::new();
    for (family, lens) in &by_family {
        let mut counts = vec![0f64; max_len + 1];
        for &l in lens {
            counts[l] += 1.0;
        }
        let total = lens.len().max(1) as f64;
        series.push((*family, counts.into_iter().map(|c| c / total).collect::<Vec<f64>>()));
    }
    let ymax = series.iter().flat_map(|s| s.1.iter().copied()).fold(0.0, f64::max).max(0.05) * 1.1;
    let mut chart = ChartBuilder::on(root)
        .caption(title, ("sans-serif", 22))
        .margin(16)
        .x_label_area_size(48)
        .y_label_area_size(64)
        .build_cartesian_2d(-0.5..max_len as f64 + 0.5, 0.0..ymax)
        .map_err(e)?;
    plot::draw_mesh(&mut chart, "accepted candidates in a round", "fraction of rounds (all settings of the family)")?;
    let width = 0.8 / series.len().max(1) as f64;
    for (i, (family, fr)) in series.iter().enumerate() {
        let c = colour(family);
        let off = -0.4 + width * i as f64;
        chart
            .draw_series(
                fr.iter()
                    .enumerate()
                    .map(|(l, &f)| Rectangle::new([(l as f64 + off, 0.0), (l as f64 + off + width, f)], c.filled())),
            )
            .map_err(e)?
            .label(*family)
            .legend(move |(x, y)| Rectangle::new([(x, y - 5), (x + 12, y + 5)], c.filled()));
    }
    draw_legend(&mut chart, None, 0.85, 15)?;
    Ok(())
}
