//! Figure 3 (verification rate against discard rate) with every stop rule: one colour per
//! family, its settings as points and its non-dominated frontier as a line.

use super::family_order;
use anyhow::{Result, anyhow};
use plotters::prelude::*;
use specx_eval::common::plot::draw_legend;
use specx_eval::common::plot::{colour, frontier, rate_chart, render_png};
use specx_eval::common::run_rows::Group;
use std::collections::BTreeMap;
use std::path::Path;

pub fn frontier_all(path: &Path, title: &str, groups: &BTreeMap<String, Group>) -> Result<()> {
    let mut by_family: BTreeMap<(usize, String), Vec<(f64, f64)>> = BTreeMap::new();
    for g in groups.values().filter(|g| g.first.family != "ar") {
        by_family.entry((family_order(&g.first.family), g.first.family.clone())).or_default().push(g.rates());
    }
    render_png(path, |root| {
        let e = |e: DrawingAreaErrorKind<_>| anyhow!("{e}");
        let all: Vec<(f64, f64)> = by_family.values().flatten().copied().collect();
        let mut chart = rate_chart(root, title, &all)?;
        for ((_, family), pts) in &by_family {
            let c = colour(family);
            chart
                .draw_series(pts.iter().map(|&q| Circle::new(q, 4, c.filled())))
                .map_err(e)?
                .label(family.as_str())
                .legend(move |(x, y)| Circle::new((x, y), 5, c.filled()));
            if pts.len() > 1 {
                chart.draw_series(LineSeries::new(frontier(pts), c.stroke_width(2))).map_err(e)?;
            }
        }
        draw_legend(&mut chart, None, 0.85, 15)?;
        Ok(())
    })
}
