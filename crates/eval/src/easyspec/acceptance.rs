//! The analogue of EasySpec's Figure 4 (acceptance vs layer-parallel size, with and without
//! calibration) from finished runs: the plain drafter's `specdec` rows are LP size 1, the
//! `easyspec` rows (real or greedy replays; DSI rows left out) the others. Acceptance is the
//! paper's alpha, sum accepted / sum drafted over a group's prompts (specx's acceptance rate,
//! accepted / verified up to and including each first rejection, is given beside it); the drop
//! is relative to LP 1 with the same K.

use crate::common::plot;
use crate::common::plot::draw_legend;
use crate::common::plot::render_png_sized;
use crate::common::results::ResultsTable;
use anyhow::{Context, Result, anyhow, ensure};
use plotters::prelude::*;
use serde::Serialize;
use specx_decoder::fsutil::write_atomic;
use specx_decoder::report::markdown_table;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

#[derive(clap::Args)]
pub struct AcceptanceArgs {
    /// Run or replay directories with results.parquet (comma-separated).
    #[arg(long, value_delimiter = ',', required = true)]
    pub runs: Vec<PathBuf>,
    /// Output directory (acceptance.json, summary.md, figure4_<dataset>_<sampling>.png).
    #[arg(long, default_value = "runs/easyspec-acceptance")]
    pub out: PathBuf,
}

/// Summed counts of one (dataset, sampling, K, LP size, calibration) group.
#[derive(Clone, Debug, Default, Serialize)]
pub struct Point {
    pub dataset: String,
    pub sampling: String,
    pub k: u64,
    pub strategy: String,
    pub lp: usize,
    /// `-` for the plain drafter.
    pub calibration: String,
    pub prompts: usize,
    pub accepted: f64,
    pub drafted: f64,
    pub verified: f64,
    /// Target forwards, prefills included (rounds = target calls - prompts).
    pub target_calls: f64,
    pub generated: f64,
    pub calibrations: f64,
    pub draft_calls: f64,
}

impl Point {
    /// The paper's alpha: accepted / drafted.
    pub fn alpha(&self) -> f64 {
        self.accepted / self.drafted.max(1.0)
    }
    /// specx's acceptance rate: accepted / verified.
    pub fn acceptance_rate(&self) -> f64 {
        self.accepted / self.verified.max(1.0)
    }
    /// Accepted candidates per verification round.
    pub fn accepted_length(&self) -> f64 {
        self.accepted / (self.target_calls - self.prompts as f64).max(1.0)
    }
}

/// The LP size of a strategy string: `lpN` -> N, else its largest group in the paper's notation.
pub fn lp_size(strategy: &str) -> Option<usize> {
    if let Some(n) = strategy.strip_prefix("lp") {
        return n.parse().ok();
    }
    strategy
        .split(',')
        .map(|p| match p.trim().split_once('-') {
            Some((a, b)) => Some(b.trim().parse::<usize>().ok()? + 1 - a.trim().parse::<usize>().ok()?),
            None => p.trim().parse::<usize>().ok().map(|_| 1),
        })
        .try_fold(0, |m, s| s.map(|s| m.max(s)))
}

/// Every (non-DSI) specdec and easyspec row of the runs' `results.parquet`, summed per
/// (dataset, sampling, K, strategy, calibration). A setting run for real and replayed appears
/// twice in a replay's table: each (prompt, seed) counts once.
pub fn read_points(runs: &[PathBuf]) -> Result<Vec<Point>> {
    let mut groups: BTreeMap<(String, String, u64, usize, String, String), Point> = BTreeMap::new();
    let mut seen = std::collections::BTreeSet::new();
    for dir in runs {
        let t = ResultsTable::read(dir)?;
        let (dataset, sampling, family, strategy, calibration, prompt) = (
            t.strs("dataset")?,
            t.strs("sampling")?,
            t.strs("method")?,
            t.strs("strategy")?,
            t.strs("calibration")?,
            t.strs("prompt_id")?,
        );
        let (seed, k, servers, drafted) = (t.u64s("seed")?, t.u64s("k")?, t.u64s("servers")?, t.u64s("n_drafted")?);
        let (acc, ver, tgt, n, cal, drf) = (
            t.u64s("n_accepted")?,
            t.u64s("n_verified")?,
            t.u64s("n_target_calls")?,
            t.u64s("n_generated")?,
            t.u64s("n_calibrations")?,
            t.u64s("n_draft_calls")?,
        );
        for i in 0..t.height() {
            let (Some(f), Some(k)) = (family[i].as_deref(), k[i]) else { continue };
            if servers[i].is_some() || !(f == "specdec" || f == "easyspec") {
                continue;
            }
            let (st, ca) = if f == "specdec" {
                ("lp1".to_string(), "-".to_string())
            } else {
                (strategy[i].clone().unwrap_or_default(), calibration[i].clone().unwrap_or_default())
            };
            let lp = lp_size(&st).with_context(|| format!("{}: strategy '{st}'", dir.display()))?;
            let key = (
                dataset[i].clone().unwrap_or_default(),
                sampling[i].clone().unwrap_or_default(),
                k,
                lp,
                ca.clone(),
                st.clone(),
            );
            if !seen.insert((key.clone(), prompt[i].clone(), seed[i])) {
                continue;
            }
            let p = groups.entry(key.clone()).or_insert_with(|| Point {
                dataset: key.0.clone(),
                sampling: key.1.clone(),
                k,
                strategy: st,
                lp,
                calibration: ca,
                ..Default::default()
            });
            let num = |v: Option<u64>| v.unwrap_or(0) as f64;
            p.prompts += 1;
            p.accepted += num(acc[i]);
            p.verified += num(ver[i]);
            p.drafted += num(drafted[i]);
            p.target_calls += num(tgt[i]);
            p.generated += num(n[i]);
            p.calibrations += num(cal[i]);
            p.draft_calls += num(drf[i]);
        }
    }
    ensure!(groups.values().any(|p| p.lp > 1), "no easyspec rows in {runs:?}");
    Ok(groups.into_values().collect())
}

/// The Figure 4 analogue of one (dataset, sampling): alpha vs LP size, one panel per K, one
/// line per calibration policy (all starting from the plain drafter at LP 1).
fn figure(path: &Path, title: &str, points: &[&Point]) -> Result<()> {
    let ks: Vec<u64> = points.iter().map(|p| p.k).collect::<std::collections::BTreeSet<_>>().into_iter().collect();
    let lp_max = points.iter().map(|p| p.lp).max().unwrap_or(1);
    let lo = points.iter().map(|p| p.alpha()).fold(1.0, f64::min);
    let y = (lo - 0.05).max(0.0)..1.0;
    // Wide enough for the title when there is one panel.
    let width = (380 * ks.len() as u32 + 40).max(560);
    render_png_sized(path, (width, 520), |root| {
        let e = |e: DrawingAreaErrorKind<_>| anyhow!("{e}");
        let root = root.titled(title, ("sans-serif", 22)).map_err(e)?;
        let panels = root.split_evenly((1, ks.len()));
        let palette = plot::tab10(&[3, 0, 2, 4]);
        for (panel, &k) in panels.iter().zip(&ks) {
            let mut chart = ChartBuilder::on(panel)
                .caption(format!("K = {k}"), ("sans-serif", 18))
                .margin(12)
                .x_label_area_size(40)
                .y_label_area_size(56)
                .build_cartesian_2d(0.5..lp_max as f64 + 0.5, y.clone())
                .map_err(e)?;
            chart
                .configure_mesh()
                .x_desc("layer-parallel size")
                .y_desc("acceptance α")
                .x_labels(lp_max)
                .x_label_formatter(&|v| format!("{v:.0}"))
                .label_style(("sans-serif", 14))
                .draw()
                .map_err(e)?;
            let base = points.iter().find(|p| p.k == k && p.lp == 1);
            let calibrations: std::collections::BTreeSet<&str> =
                points.iter().filter(|p| p.lp > 1).map(|p| p.calibration.as_str()).collect();
            for (i, c) in calibrations.iter().enumerate() {
                let colour = palette[i % palette.len()];
                let mut line: Vec<(f64, f64)> = base.iter().map(|b| (1.0, b.alpha())).collect();
                let mut rest: Vec<&&Point> =
                    points.iter().filter(|p| p.k == k && p.lp > 1 && p.calibration == *c).collect();
                rest.sort_by_key(|p| p.lp);
                line.extend(rest.iter().map(|p| (p.lp as f64, p.alpha())));
                chart
                    .draw_series(LineSeries::new(line.clone(), colour.stroke_width(2)))
                    .map_err(e)?
                    .label(c.to_string())
                    .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 16, y)], colour.stroke_width(2)));
                chart.draw_series(line.iter().map(|&(x, y)| Circle::new((x, y), 4, colour.filled()))).map_err(e)?;
            }
            draw_legend(&mut chart, Some(SeriesLabelPosition::LowerLeft), 0.85, 14)?;
        }
        Ok(())
    })
}

pub fn run(a: &AcceptanceArgs) -> Result<()> {
    let points = read_points(&a.runs)?;
    std::fs::create_dir_all(&a.out).with_context(|| format!("creating {}", a.out.display()))?;
    let mut by_set: BTreeMap<(String, String), Vec<&Point>> = BTreeMap::new();
    for p in &points {
        by_set.entry((p.dataset.clone(), p.sampling.clone())).or_default().push(p);
    }
    let mut md = String::from(
        "# EasySpec acceptance (Figure 4 analogue)\n\nα = sum accepted / sum drafted over the prompts (the paper's); acceptance rate = accepted / verified up to and including each first rejection (specx's); accepted length = accepted candidates per verification round; drop = 1 - α / α(LP 1, same K). LP 1 is the plain drafter.\n",
    );
    for ((dataset, sampling), ps) in &by_set {
        let base = |k: u64| ps.iter().find(|p| p.k == k && p.lp == 1).map(|p| p.alpha());
        let rows: Vec<Vec<String>> = ps
            .iter()
            .map(|p| {
                let drop = base(p.k).map_or("-".into(), |b| format!("{:+.1}%", -100.0 * (1.0 - p.alpha() / b)));
                vec![
                    p.k.to_string(),
                    p.strategy.clone(),
                    p.calibration.clone(),
                    p.prompts.to_string(),
                    format!("{:.3}", p.alpha()),
                    drop,
                    format!("{:.3}", p.acceptance_rate()),
                    format!("{:.2}", p.accepted_length()),
                    format!("{:.2}", p.calibrations / p.generated.max(1.0) * 100.0),
                ]
            })
            .collect();
        md.push_str(&format!("\n## {dataset}, {sampling}\n\n"));
        md.push_str(&markdown_table(
            &[
                "K",
                "strategy",
                "calibration",
                "prompts",
                "α",
                "α vs LP 1",
                "acceptance rate",
                "accepted length",
                "calibrations per 100 tokens",
            ],
            &rows,
        ));
        let name =
            format!("figure4_{}_{}.png", crate::common::plot::safe(dataset), crate::common::plot::safe(sampling));
        figure(&a.out.join(&name), &format!("EasySpec acceptance vs LP size: {dataset}, {sampling}"), ps)?;
        md.push_str(&format!("\n![{dataset} {sampling}]({name})\n"));
    }
    write_atomic(&a.out.join("acceptance.json"), serde_json::to_string_pretty(&points)?.as_bytes())?;
    write_atomic(&a.out.join("summary.md"), md.as_bytes())?;
    print!("{md}");
    Ok(())
}

#[cfg(test)]
mod tests {
    #[test]
    fn lp_size_reads_presets_and_notation() {
        assert_eq!(super::lp_size("lp4"), Some(4));
        assert_eq!(super::lp_size("0,1-3,4-7,8-11,12-15,16-19,20-22,23"), Some(4));
        assert_eq!(super::lp_size("0,1,2"), Some(1));
        assert_eq!(super::lp_size("0,x"), None);
    }
}
