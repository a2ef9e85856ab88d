//! The cost of a cheaper draft against what it buys: c measured by `specx draft-cost`, joined
//! with an eval run of the same drafts (`[methods] drafts`) for tokens per target call and
//! acceptance per prompt set, and how much of the target's own greedy output each vocabulary
//! subset covers. Drawn as the frontier of c against tokens per target call.

use super::DraftCostReport;
use anyhow::{Result, anyhow, ensure};
use plotters::prelude::*;
use specx_decoder::DraftTransform;
use specx_decoder::cheap_draft::frequencies::TokenFrequencies;
use specx_eval::common::plot;
use specx_eval::common::plot::draw_legend;
use specx_eval::common::plot::{colour, range, render_png};
use specx_eval::common::results::UnitFile;
use specx_eval::common::stats::GroupStats;
use specx_eval::experiment::merge::unit_files;
use specx_eval::method::MethodSpec;
use specx_eval::report::markdown_table;
use std::collections::BTreeMap;
use std::path::Path;

/// (prompt set, sampling, method without its draft, draft label) -> the rows.
type Groups = BTreeMap<(String, String, String, String), Vec<specx_eval::common::results::ResultRow>>;

/// Tokens per target call, acceptance and the share of the target's greedy tokens inside each
/// vocabulary subset, from the eval run in `dir`; with `report`, c for each draft, and the
/// frontier plot at `plot`.
pub fn join(dir: &Path, report: Option<&DraftCostReport>, plot: Option<&Path>) -> Result<String> {
    let mut groups = Groups::new();
    let mut ar_tokens: BTreeMap<String, Vec<Vec<u32>>> = BTreeMap::new();
    for f in unit_files(dir)? {
        let u = UnitFile::read_path(&f)?;
        if u.rows.first().is_some_and(|r| r.greedy()) {
            ar_tokens.entry(u.unit.dataset.clone()).or_default().push(u.ar_tokens.clone());
        }
        for r in u.rows {
            let Some(m) = r.setting.spec() else { continue };
            let method = MethodSpec { draft: DraftTransform::default(), ..m.clone() }.key();
            groups.entry((r.dataset.clone(), r.sampling.clone(), method, m.draft.label())).or_default().push(r);
        }
    }
    ensure!(
        !groups.is_empty(),
        "{}: no speculative rows (is it an eval run directory of `specx eval`?)",
        dir.display()
    );
    let c_of = |label: &str| report.and_then(|r| r.drafts.iter().find(|d| d.label == label)).map(|d| d.c[0]);
    let mut rows = Vec::new();
    for ((set, sampling, method, label), rs) in &groups {
        let refs: Vec<&specx_eval::common::results::ResultRow> = rs.iter().collect();
        let g = GroupStats::of(&refs);
        let full = groups
            .get(&(set.clone(), sampling.clone(), method.clone(), "full".into()))
            .map(|f| GroupStats::of(&f.iter().collect::<Vec<_>>()).tokens_per_call_sum());
        rows.push(vec![
            set.clone(),
            sampling.clone(),
            method.clone(),
            label.clone(),
            c_of(label).map_or("-".into(), |c| format!("{c:.3}")),
            format!("{:.3}", g.acceptance_sum()),
            format!("{:.2}", g.tokens_per_call_sum()),
            full.map_or("-".into(), |f| format!("{:+.1}%", 100.0 * (g.tokens_per_call_sum() / f - 1.0))),
            format!("{}/{}", g.identical, g.prompts),
        ]);
    }
    let mut out = markdown_table(
        &[
            "prompt set",
            "sampling",
            "method",
            "draft",
            "c",
            "acceptance",
            "tokens / target call",
            "vs full draft",
            "greedy = AR",
        ],
        &rows,
    );
    out.push_str(&coverage(&ar_tokens, &groups)?);
    if let (Some(report), Some(path)) = (report, plot) {
        draw(&groups, report, path)?;
        out.push_str(&format!("\nplot: {}\n", path.display()));
    }
    Ok(out)
}

/// The share of the target's greedy output tokens inside each vocabulary subset the run used.
fn coverage(ar: &BTreeMap<String, Vec<Vec<u32>>>, groups: &Groups) -> Result<String> {
    let labels: std::collections::BTreeSet<&String> = groups.keys().map(|k| &k.3).collect();
    let mut drafts: Vec<(String, DraftTransform)> = Vec::new();
    for l in labels {
        if let Ok(t) = l.parse::<DraftTransform>()
            && t.vocab.is_some()
            && !drafts.iter().any(|(_, d)| d.vocab == t.vocab)
        {
            drafts.push((format!("v{}", t.vocab.unwrap_or(0)), t));
        }
    }
    if drafts.is_empty() || ar.is_empty() {
        return Ok(String::new());
    }
    let table = TokenFrequencies::read(&specx_decoder::cheap_draft::default_table_path())?;
    let mut rows = Vec::new();
    for (label, t) in &drafts {
        let n = t.vocab.expect("a subset");
        let ids = table.top(n, table.header.vocab_size)?;
        let mut inside = vec![false; ids.iter().max().map_or(0, |&m| m as usize + 1)];
        ids.iter().for_each(|&i| inside[i as usize] = true);
        let mut row = vec![label.clone()];
        for toks in ar.values() {
            let all: Vec<u32> = toks.iter().flatten().copied().collect();
            let hit = all.iter().filter(|&&t| inside.get(t as usize).copied().unwrap_or(false)).count();
            row.push(format!("{:.4}", hit as f64 / all.len().max(1) as f64));
        }
        rows.push(row);
    }
    let mut header = vec!["draft vocabulary".to_string()];
    header.extend(ar.keys().map(|s| format!("{s}: share of the target's greedy tokens inside")));
    let header: Vec<&str> = header.iter().map(String::as_str).collect();
    Ok(format!("\n{}", markdown_table(&header, &rows)))
}

/// c (x) against tokens per target call (y) of every draft, per prompt set, greedy fixed-K rows.
fn draw(groups: &Groups, report: &DraftCostReport, path: &Path) -> Result<()> {
    let mut series: BTreeMap<String, Vec<(f64, f64, String)>> = BTreeMap::new();
    for ((set, sampling, method, label), rs) in groups {
        let Some(c) = report.drafts.iter().find(|d| &d.label == label).map(|d| d.c[0]) else { continue };
        if sampling == "greedy" && method.starts_with("specdec K=") {
            let g = GroupStats::of(&rs.iter().collect::<Vec<_>>());
            series.entry(format!("{set} {method}")).or_default().push((c, g.tokens_per_call_sum(), label.clone()));
        }
    }
    ensure!(!series.is_empty(), "no greedy fixed-K rows whose draft draft-cost measured");
    let xs: Vec<f64> = series.values().flatten().map(|p| p.0).collect();
    let ys: Vec<f64> = series.values().flatten().map(|p| p.1).collect();
    render_png(path, |root| {
        let e = |e: DrawingAreaErrorKind<_>| anyhow!("{e}");
        let mut chart = ChartBuilder::on(root)
            .caption("cheaper drafts: cost c against tokens per target call (greedy)", ("sans-serif", 22))
            .margin(16)
            .x_label_area_size(48)
            .y_label_area_size(64)
            .build_cartesian_2d(range(xs.iter().copied()), range(ys.iter().copied()))
            .map_err(e)?;
        plot::draw_mesh(&mut chart, "c = draft step / target step", "tokens per target call")?;
        for (i, (name, pts)) in series.iter().enumerate() {
            let col = colour(["specdec", "specdecpp", "confidence", "dsi", "oracle", "roc"][i % 6]);
            // Points, not lines: the drafts are settings, not a curve.
            chart
                .draw_series(pts.iter().map(|p| Circle::new((p.0, p.1), 5, col.filled())))
                .map_err(e)?
                .label(name.clone())
                .legend(move |(x, y)| Circle::new((x + 8, y), 5, col.filled()));
            chart
                .draw_series(pts.iter().map(|p| Text::new(format!(" {}", p.2), (p.0, p.1), ("sans-serif", 13))))
                .map_err(e)?;
        }
        draw_legend(&mut chart, None, 0.8, 14)?;
        Ok(())
    })
}
