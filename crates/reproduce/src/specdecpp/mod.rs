//! `specx reproduce specdecpp --config configs/reproductions/specdecpp.toml`: the SpecDec++
//! reproduction's tables (`results.md`, `claims.json`) and figures from finished runs: the
//! replay of the greedy trace run (every head x threshold x bounds, fixed K, the oracle), real
//! eval runs (measured speedups, the eq. 3.1 timing fit), and the head sweeps' `sweep.json`.
//! Inputs that do not exist yet are listed as missing (with the command that makes them), so
//! the report can be regenerated while the runs grow.

pub mod analysis;
pub mod figures;

use analysis::{
    BestThreshold, HeadPoint, Times, best_threshold_per_head, compare, frontier_check, paper_threshold, timing_fit,
};
use anyhow::{Context, Result, ensure};
use clap::Args;
use serde::{Deserialize, Serialize};
use specx_decoder::fsutil::write_atomic;
use specx_decoder::report::markdown_table;
use specx_eval::common::run_rows::{Row, groups, move_head_families, read_rows};
use specx_eval::common::timing::{Fit, PAPER_TIMES};
use specx_run::config::read_toml;
use specx_run::paths::resolve_path;
use specx_trainer::acceptance::train::TrainState;
use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};

#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ReproConfig {
    /// The replay directory of the greedy trace run (`specx eval replay`). Its heads (the
    /// grid in `replay.json`) are described from their own `metrics.json`.
    pub replay: PathBuf,
    /// Eval run directories with real speculative rows (measured speedups, timing fit).
    #[serde(default)]
    pub real: Vec<PathBuf>,
    /// Head names of the data-scaling curve: one head setting trained on growing subsets.
    #[serde(default)]
    pub scaling: Vec<String>,
    /// The head directory name of the paper's recommended setting (w_rej 6, depth 3).
    pub default_head: Option<String>,
    /// Heads that form a family of their own and so are not SpecDec++'s (family name -> head
    /// names): the heads that read more than the paper's.
    #[serde(default)]
    pub head_families: BTreeMap<String, Vec<String>>,
    /// Where the tables and figures go.
    pub out: PathBuf,
    /// Heads whose checkpoint directory is not in this checkout are described from this file
    /// (head name -> what it was trained with and its dev metrics, as `claims.json` records
    /// them under `heads`). The reproduction writes it as `heads.json` in `out`, so the heads
    /// of a sweep need not be committed for the tables to be rebuilt.
    pub head_metrics: Option<PathBuf>,
}

impl ReproConfig {
    pub fn load(path: &Path) -> Result<Self> {
        let (mut c, base): (Self, PathBuf) = read_toml(path)?;
        c.replay = resolve_path(&c.replay, &base);
        c.real = c.real.iter().map(|p| resolve_path(p, &base)).collect();
        c.out = resolve_path(&c.out, &base);
        c.head_metrics = c.head_metrics.map(|p| resolve_path(&p, &base));
        Ok(c)
    }
}

#[derive(Args, Debug)]
pub struct ReproArgs {
    /// Reproduction config (TOML): the replay directory, real eval runs, sweep files, output
    /// directory. See configs/reproductions/specdecpp.toml.
    #[arg(long)]
    pub config: PathBuf,
}

/// Head name -> what it was trained with and its dev metrics, from each head directory's
/// `metrics.json` (written by `specx train`), for the heads of the replay's grid; a head whose
/// `metrics.json` is not here is taken from `recorded` (a `heads.json`), if that has it.
fn read_heads(
    replay_json: &serde_json::Value,
    recorded: &BTreeMap<String, HeadPoint>,
) -> Result<BTreeMap<String, HeadPoint>> {
    let methods: specx_eval::experiment::methods::MethodsConfig =
        serde_json::from_value(replay_json["grid"]["methods"].clone())
            .context("replay.json: the replay's method grid")?;
    let mut out = BTreeMap::new();
    for dir in methods.head_dirs() {
        let dir = in_this_checkout(dir);
        let path = dir.join("metrics.json");
        let name = specx_eval::experiment::grid::head_name(&dir);
        if let (false, Some(p)) = (path.exists(), recorded.get(&name)) {
            out.insert(name, p.clone());
            continue;
        }
        let text = std::fs::read(&path).with_context(|| {
            format!("reading {} (a head of the replay's grid; `specx train` writes it)", path.display())
        })?;
        let state: TrainState = serde_json::from_slice(&text)
            .with_context(|| format!("{}: not a `specx train` metrics.json", path.display()))?;
        let best = state.best().with_context(|| format!("{}: the head has no finished epoch", path.display()))?;
        let c = &state.config;
        out.insert(
            name,
            HeadPoint {
                w_rej: c.loss.w_rej,
                depth: c.head.depth,
                tied: c.head.tied,
                train_data: specx_eval::experiment::grid::head_name(&c.data.train),
                train_prompts: c.data.train_prompts,
                train_rows: state.train_rows,
                dev_kl: best.dev.binary_kl,
                dev_auroc: best.dev.auroc,
                dev_ece: best.dev.ece,
            },
        );
    }
    Ok(out)
}

/// A head directory as a replay recorded it (absolute, on the machine that ran it), or, when
/// that path does not exist here (a replay committed elsewhere), the same path from its
/// `checkpoints/` component on, under the working directory.
fn in_this_checkout(dir: &Path) -> PathBuf {
    let parts: Vec<_> = dir.components().collect();
    match parts.iter().rposition(|c| c.as_os_str() == "checkpoints") {
        Some(i) if !dir.exists() => parts[i..].iter().collect(),
        _ => dir.to_path_buf(),
    }
}

fn f3(v: f64) -> String {
    if v.is_finite() { format!("{v:.3}") } else { "-".into() }
}
fn pct(v: Option<f64>) -> String {
    v.map_or("-".into(), |v| format!("{:+.1}%", 100.0 * v))
}

/// Per-prompt measured speedups of a real run's groups over the AR row of the same prompt.
fn measured_table(rows: &[Row]) -> String {
    let mut out = String::new();
    for ((dataset, sampling), gs) in groups(rows) {
        let ar: BTreeMap<&str, f64> = gs
            .values()
            .filter(|g| g.first.family == "ar")
            .flat_map(|g| g.rows.iter().map(|r| (r.prompt_id.as_str(), r.time_s)))
            .collect();
        let mut table = Vec::new();
        for g in gs.values() {
            let sp: Vec<f64> =
                g.rows.iter().filter_map(|r| ar.get(r.prompt_id.as_str()).map(|a| a / r.time_s)).collect();
            let (m, sd) = specx_eval::common::stats::mean_sd(&sp);
            let ar_sum: f64 = g.rows.iter().filter_map(|r| ar.get(r.prompt_id.as_str())).sum();
            let t_sum: f64 = g.rows.iter().map(|r| r.time_s).sum();
            table.push(vec![
                g.first.setting.clone(),
                g.rows.len().to_string(),
                g.measured().map_or("-".into(), f3),
                format!("{m:.3} ± {sd:.3}"),
                f3(ar_sum / t_sum),
                f3(g.eq51(PAPER_TIMES) * PAPER_TIMES.1),
            ]);
        }
        let _ = writeln!(out, "#### {dataset}, {sampling}\n");
        out.push_str(&markdown_table(
            &[
                "setting",
                "prompts",
                "measured tok/s (sum)",
                "measured speedup (mean ± sd)",
                "measured speedup (sum)",
                "eq. 5.1 speedup at paper times",
            ],
            &table,
        ));
        out.push('\n');
    }
    out
}

/// Table 3: every head's dev metrics and, per prompt set, its best threshold and eq. 5.1
/// throughput at the paper's times (within 99% of the set's best marked **), then how often
/// the best threshold is the paper's for the head's w_rej.
fn table3_markdown(
    heads: &BTreeMap<String, HeadPoint>,
    table3: &BTreeMap<String, BTreeMap<String, BestThreshold>>,
) -> String {
    let mut md = String::from(
        "\n## Heads (Table 3 analogue)\n\nDev metrics of each head's best epoch; per prompt set, the best threshold in the grid (bounds [2, 20]) and eq. 5.1 tokens/s at the paper's times; ** marks throughputs within 99% of the set's best SpecDec++ setting.\n\n",
    );
    let mut header = vec![
        "head".to_string(),
        "w_rej".into(),
        "depth".into(),
        "tied".into(),
        "train data".into(),
        "train prompts".into(),
        "train rows".into(),
        "dev KL".into(),
        "dev AUROC".into(),
        "dev ECE".into(),
    ];
    header.extend(table3.keys().cloned());
    let best: BTreeMap<&String, f64> =
        table3.iter().map(|(d, m)| (d, m.values().map(|b| b.tokens_per_s).fold(0.0, f64::max))).collect();
    let (mut agree, mut total) = (0, 0);
    let mut rows = Vec::new();
    for (n, p) in heads {
        let mut r = vec![
            n.clone(),
            format!("{}", p.w_rej),
            p.depth.to_string(),
            if p.tied { "tied" } else { "untied" }.into(),
            p.train_data.clone(),
            p.train_prompts.map_or("all".into(), |v| v.to_string()),
            p.train_rows.to_string(),
            f3(p.dev_kl),
            p.dev_auroc.map_or("-".into(), f3),
            f3(p.dev_ece),
        ];
        for (d, m) in table3 {
            r.push(m.get(n).map_or("-".into(), |b| {
                if let Some(pt) = paper_threshold(p.w_rej) {
                    total += 1;
                    agree += usize::from((b.threshold - pt).abs() < 1e-9);
                }
                let star = if b.tokens_per_s >= 0.99 * best[d] { "**" } else { "" };
                format!("{star}{:.2}{star} (h={})", b.tokens_per_s, b.threshold)
            }));
        }
        rows.push(r);
    }
    let header: Vec<&str> = header.iter().map(String::as_str).collect();
    md.push_str(&markdown_table(&header, &rows));
    let _ = writeln!(
        md,
        "\nBest threshold equal to the paper's for the head's w_rej (1: 0.3, 3: 0.5, 6: 0.7, 12: 0.9): {agree} of {total} (head, set) pairs."
    );
    md
}

/// The data-scaling heads in order: training rows, dev metrics, and per prompt set the best
/// threshold's eq. 5.1 speedup at the paper's times.
fn scaling_markdown(
    names: &[String],
    heads: &BTreeMap<String, HeadPoint>,
    table3: &BTreeMap<String, BTreeMap<String, BestThreshold>>,
) -> String {
    let mut md = String::from(
        "\n## Data scaling\n\nOne head setting trained on nested subsets of the train run; per prompt set, its best threshold's eq. 5.1 speedup over AR at the paper's times.\n\n",
    );
    let mut header = vec![
        "head".to_string(),
        "train prompts".into(),
        "train rows".into(),
        "dev KL".into(),
        "dev AUROC".into(),
        "dev ECE".into(),
    ];
    header.extend(table3.keys().map(|d| format!("{d} speedup")));
    let rows: Vec<Vec<String>> = names
        .iter()
        .map(|n| {
            let p = &heads[n];
            let mut r = vec![
                n.clone(),
                p.train_prompts.map_or("all".into(), |v| v.to_string()),
                p.train_rows.to_string(),
                f3(p.dev_kl),
                p.dev_auroc.map_or("-".into(), f3),
                f3(p.dev_ece),
            ];
            r.extend(
                table3
                    .values()
                    .map(|m| m.get(n).map_or("-".into(), |b| format!("{:.3}x (h={})", b.speedup, b.threshold))),
            );
            r
        })
        .collect();
    let header: Vec<&str> = header.iter().map(String::as_str).collect();
    md.push_str(&markdown_table(&header, &rows));
    md
}

pub fn run(a: ReproArgs) -> Result<()> {
    let cfg = ReproConfig::load(&a.config).with_context(|| format!("reproduction config {}", a.config.display()))?;
    let md = reproduce(&cfg)?;
    println!("{md}");
    eprintln!("wrote {}/results.md, claims.json and figures", cfg.out.display());
    Ok(())
}

/// Writes `results.md`, `claims.json` and the figures into `cfg.out`; returns `results.md`.
pub fn reproduce(cfg: &ReproConfig) -> Result<String> {
    let mut replay_rows = read_rows(&cfg.replay)?;
    move_head_families(&mut replay_rows, &cfg.head_families);
    ensure!(
        replay_rows.iter().any(|r| r.replayed),
        "{} has no replayed rows (is it a `specx eval replay` directory?)",
        cfg.replay.display()
    );
    let replay_json: serde_json::Value = serde_json::from_slice(
        &std::fs::read(cfg.replay.join("replay.json"))
            .with_context(|| format!("reading {}", cfg.replay.join("replay.json").display()))?,
    )?;
    let mut missing = Vec::new();
    let mut real_rows = Vec::new();
    for dir in &cfg.real {
        if dir.join("results.parquet").exists() {
            let mut rows = read_rows(dir)?;
            move_head_families(&mut rows, &cfg.head_families);
            real_rows.extend(rows);
        } else {
            missing
                .push(format!("real eval run {} (specx eval --config configs/eval/specdecpp-*.toml)", dir.display()));
        }
    }
    let recorded: BTreeMap<String, HeadPoint> = match &cfg.head_metrics {
        Some(p) => serde_json::from_slice(
            &std::fs::read(p).with_context(|| format!("reading {} (head_metrics)", p.display()))?,
        )
        .with_context(|| format!("{}: not a heads.json (head name -> metrics)", p.display()))?,
        None => BTreeMap::new(),
    };
    let heads = read_heads(&replay_json, &recorded)?;
    for n in cfg.scaling.iter().chain(&cfg.default_head) {
        ensure!(
            heads.contains_key(n),
            "head '{n}' (scaling or default_head) is not in the replay's grid (its heads: {})",
            heads.keys().cloned().collect::<Vec<_>>().join(", ")
        );
    }
    std::fs::create_dir_all(&cfg.out).with_context(|| format!("creating {}", cfg.out.display()))?;

    // Time models: the paper's A100 times; single-token forwards on this CPU (replay.json);
    // eq. 3.1 fitted on the real runs when there are any.
    let mut times = vec![Times {
        name: "paper A100 times (0.0234, 0.112) s".into(),
        t_draft: PAPER_TIMES.0,
        t_target: PAPER_TIMES.1,
    }];
    let (sd, st) =
        (replay_json["draft_single_forward_seconds"].as_f64(), replay_json["target_single_forward_seconds"].as_f64());
    if let (Some(d), Some(t)) = (sd, st) {
        times.push(Times { name: format!("CPU single-token forwards ({d:.4}, {t:.4}) s"), t_draft: d, t_target: t });
    }
    let real_refs: Vec<&Row> = real_rows.iter().collect();
    let fit = timing_fit(&real_refs);
    if let Some(f) = fit.as_ref().filter(|f| f.is_usable()) {
        times.push(Times {
            name: format!("CPU eq. 3.1 fit ({:.4}, {:.4}) s, R² {:.3}", f.coefficients[0], f.coefficients[1], f.r2),
            t_draft: f.coefficients[0],
            t_target: f.coefficients[1],
        });
    }

    let mut md = String::from(
        "# SpecDec++ reproduction: tables\n\nGenerated by `specx reproduce specdecpp`; do not edit (the write-up is docs/reproductions/specdecpp.md).\n\n",
    );
    let _ = writeln!(
        md,
        "Replay: `{}` ({} settings; draft rows {}, {:.0} s).",
        shown_path(&cfg.replay).display(),
        replay_json["settings"].as_array().map_or(0, Vec::len),
        replay_json["draft_rows"],
        replay_json["draft_seconds"].as_f64().unwrap_or(0.0)
    );
    if !missing.is_empty() {
        let _ = writeln!(md, "\nNot available yet:\n");
        for m in &missing {
            let _ = writeln!(md, "- {m}");
        }
    }
    let mut claims = serde_json::Map::new();
    let mut gap_bars = Vec::new();
    let mut table3: BTreeMap<String, BTreeMap<String, BestThreshold>> = BTreeMap::new();
    let replay_groups = groups(&replay_rows);
    for ((dataset, sampling), gs) in &replay_groups {
        let prompts = gs.values().find(|g| g.first.family == "ar").map_or(0, |g| g.rows.len());
        let _ = writeln!(md, "\n## {dataset}, {sampling} ({prompts} prompts, replayed counts)\n");
        let mut table = Vec::new();
        let mut per_times = Vec::new();
        for t in &times {
            let c = compare(gs, t, cfg.default_head.as_deref());
            let s = |x: &Option<analysis::Scored>| {
                x.as_ref().map_or("-".into(), |x| {
                    format!(
                        "{} ({:.2} tok/s, {:.3}x; mean/prompt {:.2})",
                        x.setting, x.tokens_per_s, x.speedup, x.tokens_per_s_mean
                    )
                })
            };
            table.push(vec![
                t.name.clone(),
                s(&c.best_fixed_k),
                s(&c.best_specdecpp),
                pct(c.improvement),
                s(&c.best_confidence),
                pct(c.confidence_improvement),
                s(&c.oracle),
                c.oracle_gap_closed.map_or("-".into(), |v| format!("{:.0}%", 100.0 * v)),
                c.default_share_of_best.map_or("-".into(), |v| format!("{:.1}%", 100.0 * v)),
            ]);
            per_times.push(serde_json::to_value(&c)?);
            if t.name.starts_with("paper") {
                let sp = |x: &Option<analysis::Scored>| x.as_ref().map_or(f64::NAN, |x| x.speedup);
                gap_bars.push((
                    dataset.clone(),
                    [sp(&c.best_fixed_k), sp(&c.best_specdecpp), sp(&c.best_confidence), sp(&c.oracle)],
                ));
            }
        }
        md.push_str(&markdown_table(
            &[
                "time model",
                "best fixed K",
                "best SpecDec++",
                "improvement",
                "best confidence baseline",
                "its improvement",
                "oracle",
                "oracle gap closed",
                "default (w6 d3 h0.7) / best",
            ],
            &table,
        ));
        let fc = frontier_check(gs, "specdecpp");
        // The baseline's check only where the grid has it (SpecDec++'s is always reported).
        let fc_confidence =
            gs.values().any(|g| g.first.family == "confidence").then(|| frontier_check(gs, "confidence"));
        for (f, name) in [(Some(&fc), "SpecDec++"), (fc_confidence.as_ref(), "the confidence baseline")] {
            let Some(f) = f else { continue };
            let _ = writeln!(
                md,
                "\nFigure 3 check, {name}: of {} fixed-K points, {} are matched (a setting of {name} has discard and verification rates no higher) and {} beaten (one strictly lower): the frontier is {}.",
                f.fixed_k_points,
                f.matched,
                f.beaten,
                if f.strictly_better {
                    "no worse at every K and strictly better somewhere"
                } else {
                    "NOT better everywhere"
                }
            );
        }
        md.push('\n');
        let bt = best_threshold_per_head(gs, &times[0]);
        table3.insert(dataset.clone(), bt.clone());
        let tag = specx_eval::common::plot::safe(&format!("{dataset}_{sampling}"));
        figures::frontier_figure(
            &cfg.out.join(format!("frontier_{tag}.png")),
            &format!("{dataset} ({sampling}): Figure 3 analogue"),
            gs,
        )?;
        let mut ranked: Vec<(String, f64)> = Vec::new();
        for g in gs.values().filter(|g| g.first.family == "specdecpp") {
            let h = g.first.head.clone().unwrap_or_default();
            let v = g.eq51(times[0].pair());
            match ranked.iter_mut().find(|r| r.0 == h) {
                Some(r) => r.1 = r.1.max(v),
                None => ranked.push((h, v)),
            }
        }
        ranked.sort_by(|a, b| b.1.total_cmp(&a.1));
        let top: Vec<String> = ranked.into_iter().take(4).map(|r| r.0).collect();
        figures::threshold_figure(
            &cfg.out.join(format!("threshold_{tag}.png")),
            &format!("{dataset} ({sampling}): speedup vs threshold, best heads"),
            gs,
            &top,
            &times[0],
        )?;
        claims.insert(format!("{dataset}/{sampling}"), serde_json::json!({ "prompts": prompts, "comparisons": per_times, "frontier": fc, "frontier_confidence": fc_confidence, "best_threshold_per_head": bt }));
    }
    if !gap_bars.is_empty() {
        figures::oracle_gap_figure(
            &cfg.out.join("oracle_gap.png"),
            "Best fixed K, best SpecDec++, best confidence rule and the oracle (eq. 5.1, paper times)",
            &gap_bars,
        )?;
    }

    md.push_str("\n## Timing model (eq. 3.1) on real runs\n\n");
    match &fit {
        Some(f) => {
            let _ = writeln!(md, "T = t_draft N_draft + t_target N_target over {} real speculative requests; t_draft, t_target (s): {}.\n", f.n, Fit::describe(Some(f)));
            for ((dataset, sampling), gs) in groups(&real_rows) {
                let rs: Vec<&Row> = gs.values().flat_map(|g| g.rows.iter()).collect();
                if let Some(f) = timing_fit(&rs) {
                    let _ = writeln!(md, "- {dataset}, {sampling}: {} ({} requests)", Fit::describe(Some(&f)), f.n);
                }
            }
            md.push_str("\n### Measured on this CPU\n\n");
            md.push_str(&measured_table(&real_rows));
        }
        None => md.push_str("No real runs given (the config's `real`): measured speedups and the eq. 3.1 fit need eval runs with speculative rows, e.g. of configs/eval/adaptive-real.toml.\n"),
    }
    claims.insert("timing_fit".into(), serde_json::to_value(&fit)?);

    if !heads.is_empty() {
        md.push_str(&table3_markdown(&heads, &table3));
        claims.insert("heads".into(), serde_json::to_value(&heads)?);
        write_atomic(&cfg.out.join("heads.json"), serde_json::to_string_pretty(&heads)?.as_bytes())?;
    }
    if !cfg.scaling.is_empty() {
        md.push_str(&scaling_markdown(&cfg.scaling, &heads, &table3));
        let pts: Vec<(HeadPoint, BTreeMap<String, f64>)> = cfg
            .scaling
            .iter()
            .map(|n| {
                (
                    heads[n].clone(),
                    table3.iter().filter_map(|(d, m)| m.get(n).map(|b| (d.clone(), b.speedup))).collect(),
                )
            })
            .collect();
        figures::scaling_figure(&cfg.out.join("scaling.png"), "Acceptance head vs training data", &pts)?;
    }
    write_atomic(&cfg.out.join("results.md"), md.as_bytes())?;
    write_atomic(&cfg.out.join("claims.json"), serde_json::to_string_pretty(&claims)?.as_bytes())?;
    Ok(md)
}

/// `path` relative to the working directory when it lies under it, so that committed tables do
/// not carry one machine's absolute paths.
pub(crate) fn shown_path(path: &Path) -> &Path {
    std::env::current_dir().ok().and_then(|cwd| path.strip_prefix(cwd).ok()).unwrap_or(path)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_head_recorded_on_another_machine_is_looked_up_in_this_checkout() {
        assert_eq!(
            in_this_checkout(Path::new("/elsewhere/repo/checkpoints/specdecpp-sweep/w6-d3")),
            PathBuf::from("checkpoints/specdecpp-sweep/w6-d3")
        );
        let here = std::env::temp_dir();
        assert_eq!(in_this_checkout(&here), here, "an existing directory is kept");
        assert_eq!(
            in_this_checkout(Path::new("/elsewhere/head")),
            PathBuf::from("/elsewhere/head"),
            "no checkpoints/ component: kept, and reported missing when read"
        );
    }
}
