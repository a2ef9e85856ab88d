//! Rendering PNG plots: DejaVu Sans shipped in `assets/fonts` (no system font needed), images
//! rendered into memory and written atomically, one colour per method family, and the small
//! helpers every figure uses (axis ranges, Pareto frontiers, file-name-safe tags).

use anyhow::{Context, Result, anyhow};
use plotters::prelude::*;
use specx_decoder::fsutil::write_atomic;
use std::path::Path;

static FONT: &[u8] = include_bytes!("../../../../assets/fonts/DejaVuSans.ttf");
pub const SIZE: (u32, u32) = (900, 640);

fn register_font() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        // Registration fails only for a malformed font, which include_bytes! rules out.
        let _ = plotters::style::register_font("sans-serif", FontStyle::Normal, FONT);
    });
}

/// A chart's legend as every figure draws it: a black border around a white box `opacity`
/// opaque, labels in `font`-point sans-serif, at `position` (plotters' default place when
/// `None`).
pub fn draw_legend<'a, DB: DrawingBackend + 'a, CT: plotters::coord::CoordTranslate>(
    chart: &mut ChartContext<'a, DB, CT>,
    position: Option<SeriesLabelPosition>,
    opacity: f64,
    font: u32,
) -> Result<()> {
    let mut legend = chart.configure_series_labels();
    if let Some(p) = position {
        legend.position(p);
    }
    legend
        .border_style(BLACK)
        .background_style(WHITE.mix(opacity))
        .label_font(("sans-serif", font))
        .draw()
        .map_err(|e| anyhow!("{e}"))
}

/// The axes' descriptions and labels as every figure draws them: `x` and `y` described, tick
/// labels in 15-point sans-serif.
pub fn draw_mesh<'a, DB: DrawingBackend + 'a>(
    chart: &mut ChartContext<
        'a,
        DB,
        Cartesian2d<plotters::coord::types::RangedCoordf64, plotters::coord::types::RangedCoordf64>,
    >,
    x: &str,
    y: &str,
) -> Result<()> {
    chart.configure_mesh().x_desc(x).y_desc(y).label_style(("sans-serif", 15)).draw().map_err(|e| anyhow!("{e}"))
}

/// matplotlib's `tab10` cycle, for figures whose lines are not method families: blue,
/// orange, green, red, purple, brown, pink, grey, olive, cyan.
pub const TAB10: [RGBColor; 10] = [
    RGBColor(31, 119, 180),
    RGBColor(255, 127, 14),
    RGBColor(44, 160, 44),
    RGBColor(214, 39, 40),
    RGBColor(148, 103, 189),
    RGBColor(140, 86, 75),
    RGBColor(227, 119, 194),
    RGBColor(127, 127, 127),
    RGBColor(188, 189, 34),
    RGBColor(23, 190, 207),
];

/// The [`TAB10`] colours at `picks`, in that order (a figure's own cycle).
pub fn tab10(picks: &[usize]) -> Vec<RGBColor> {
    picks.iter().map(|&i| TAB10[i]).collect()
}

/// Colour of a method family (the same in every plot).
pub fn colour(family: &str) -> RGBColor {
    match family {
        "specdec" => RGBColor(31, 119, 180),
        "specdecpp" => RGBColor(214, 39, 40),
        "confidence" => RGBColor(44, 160, 44),
        "oracle" => RGBColor(148, 103, 189),
        "dsi" => RGBColor(255, 127, 14),
        "roc" => RGBColor(23, 190, 207),
        "pmin" => RGBColor(140, 86, 75),
        "dynamic" => RGBColor(227, 119, 194),
        "svip" => RGBColor(188, 189, 34),
        "adaedl" => RGBColor(31, 60, 100),
        "bandit" => RGBColor(255, 187, 120),
        "lookup" => RGBColor(0, 0, 0),
        "hybrid" => RGBColor(120, 60, 0),
        "matchrate" => RGBColor(199, 199, 199),
        _ => RGBColor(90, 90, 90),
    }
}

/// Renders `draw` into a PNG at `path` (900 x 640).
pub fn render_png(
    path: &Path,
    draw: impl FnOnce(&DrawingArea<BitMapBackend, plotters::coord::Shift>) -> Result<()>,
) -> Result<()> {
    render_png_sized(path, SIZE, draw)
}

/// Renders `draw` into a PNG of `size` pixels at `path`.
pub fn render_png_sized(
    path: &Path,
    size: (u32, u32),
    draw: impl FnOnce(&DrawingArea<BitMapBackend, plotters::coord::Shift>) -> Result<()>,
) -> Result<()> {
    register_font();
    let mut rgb = vec![0u8; (size.0 * size.1 * 3) as usize];
    {
        let root = BitMapBackend::with_buffer(&mut rgb, size).into_drawing_area();
        root.fill(&WHITE).map_err(|e| anyhow!("{e}"))?;
        draw(&root)?;
        root.present().map_err(|e| anyhow!("{e}"))?;
    }
    let mut bytes = Vec::new();
    {
        let mut enc = png::Encoder::new(&mut bytes, size.0, size.1);
        enc.set_color(png::ColorType::Rgb);
        enc.set_depth(png::BitDepth::Eight);
        enc.write_header()?.write_image_data(&rgb)?;
    }
    write_atomic(path, &bytes).with_context(|| format!("writing {}", path.display()))
}

/// The axes of Figure 3 (verification rate against discard rate) over `points`, captioned
/// `title`, mesh drawn: the chart every frontier figure draws its families into.
pub fn rate_chart<'a, 'b>(
    root: &'a DrawingArea<BitMapBackend<'b>, plotters::coord::Shift>,
    title: &str,
    points: &[(f64, f64)],
) -> Result<
    ChartContext<
        'a,
        BitMapBackend<'b>,
        Cartesian2d<plotters::coord::types::RangedCoordf64, plotters::coord::types::RangedCoordf64>,
    >,
> {
    let e = |e: DrawingAreaErrorKind<_>| anyhow!("{e}");
    let mut chart = ChartBuilder::on(root)
        .caption(title, ("sans-serif", 22))
        .margin(16)
        .x_label_area_size(48)
        .y_label_area_size(64)
        .build_cartesian_2d(range(points.iter().map(|p| p.0).chain([0.0])), range(points.iter().map(|p| p.1)))
        .map_err(e)?;
    draw_mesh(&mut chart, "discard rate N_discarded / N", "verification rate N_target / N")?;
    Ok(chart)
}

/// Points not dominated by another (lower is better in both coordinates), sorted by x.
pub fn frontier(points: &[(f64, f64)]) -> Vec<(f64, f64)> {
    let mut f: Vec<(f64, f64)> = points
        .iter()
        .copied()
        .filter(|&(x, y)| !points.iter().any(|&(a, b)| a <= x && b <= y && (a < x || b < y)))
        .collect();
    f.sort_by(|a, b| a.0.total_cmp(&b.0));
    f.dedup();
    f
}

pub fn range(vals: impl Iterator<Item = f64> + Clone) -> std::ops::Range<f64> {
    let lo = vals.clone().fold(f64::INFINITY, f64::min);
    let hi = vals.fold(f64::NEG_INFINITY, f64::max);
    if !lo.is_finite() || !hi.is_finite() {
        return 0.0..1.0;
    }
    let pad = ((hi - lo) * 0.08).max(0.02);
    (lo - pad).max(0.0)..hi + pad
}

pub fn safe(s: &str) -> String {
    s.chars().map(|c| if c.is_ascii_alphanumeric() || "-_.".contains(c) { c } else { '_' }).collect()
}

#[cfg(test)]
mod tests {
    #[test]
    fn frontier_keeps_only_non_dominated_points() {
        let f = super::frontier(&[(0.1, 0.5), (0.2, 0.4), (0.3, 0.45), (0.05, 0.9), (0.2, 0.4)]);
        assert_eq!(f, vec![(0.05, 0.9), (0.1, 0.5), (0.2, 0.4)]);
    }
}
