//! DSI (Distributed Speculative Inference, `../shared/papers/dsi.txt`): the paper's offline
//! simulator with its heatmaps, behind `specx dsi offline`.

mod cell;
pub mod figures;
pub mod grid;
pub mod offline;
pub mod online;
pub mod online_run;

use anyhow::{Context, Result};
use clap::{Args, Subcommand};
use grid::{
    Estimator, Headline, OfflineConfig, SiMode, headline, monte_carlo_vs_exact, points, simulate_grid, write_cells_csv,
    write_points_csv,
};
use indicatif::{ProgressBar, ProgressStyle};
use specx_decoder::fsutil::write_atomic;
use specx_decoder::report::markdown_table;
use std::path::PathBuf;

#[derive(Args)]
pub struct DsiArgs {
    #[command(subcommand)]
    pub command: DsiCommand,
}

#[derive(Subcommand)]
pub enum DsiCommand {
    /// The offline simulator (paper App. F.3-F.4, the reference repository's semantics): SI,
    /// DSI and non-SI costed in target forwards over a (drafter latency, acceptance rate,
    /// lookahead) grid; writes cells.csv, points.csv, summary.md/json and the Figure 2 and
    /// Figure 7 heatmaps (PNG) for both SI modes (official: SI limited to DSI-feasible
    /// lookaheads as the reference; fair: SI may use any lookahead).
    Offline(OfflineArgs),
    /// The online simulator (paper §4 / Table 2, the reference's `dsi/online`): real threads
    /// that sleep for every forward, a LIFO queue on the target servers, preemption. Latencies
    /// from `specx profile`, acceptance as a rate or the measured matches of a greedy replay's
    /// oracle rows. Writes summary.md, cells.json, runs.csv, speedups.png and per-cell
    /// timelines (timeline-sp*-k*.png).
    Online(OnlineArgs),
}

#[derive(Args)]
pub struct OnlineArgs {
    /// Simulation config (TOML): tokens, repeats, servers, lookaheads, auto, time_scale,
    /// cost_model, compat, [latency], [acceptance], out. See configs/dsi/online.toml.
    #[arg(long)]
    pub config: PathBuf,
    /// `fixed` (default): the reference's three biases fixed (SI's extra target forward per
    /// segment, the uncounted correction token, non-SI at TTFT per token); `reference`: kept.
    #[arg(long, value_enum)]
    pub compat: Option<online::Compat>,
    /// `flat` (every target forward costs TPOT, the paper) or `rows` (TPOT times the
    /// profile's row curve: this CPU's verification cost); overrides the config's.
    #[arg(long, value_enum)]
    pub cost_model: Option<online_run::CostModel>,
    /// I.i.d. acceptance at this rate instead of the config's [acceptance] (for example the
    /// trace's per-position match rate, to compare i.i.d. with measured matches).
    #[arg(long, conflicts_with = "dataset")]
    pub rate: Option<f64>,
    /// The trace's prompt set to take matches from (overrides [acceptance] dataset).
    #[arg(long)]
    pub dataset: Option<String>,
    #[command(flatten)]
    pub run: SimulationArgs,
}

#[derive(Args)]
pub struct OfflineArgs {
    /// Simulation config (TOML): seed, tokens, repeats, servers, fixed_k, [grid], [[marks]],
    /// out. See configs/dsi/offline.toml. Without it, the paper's settings (ndim 20, 1,000
    /// tokens, 5 repeats, 7 target servers) into --out.
    #[arg(long)]
    pub config: Option<PathBuf>,
    #[command(flatten)]
    pub run: SimulationArgs,
}

/// What both simulators take besides their config.
#[derive(Args)]
pub struct SimulationArgs {
    /// Output directory (overrides the config's `out`).
    #[arg(long)]
    pub out: Option<PathBuf>,
    /// Simulated generations per grid cell (overrides the config's `repeats`).
    #[arg(long)]
    pub repeats: Option<usize>,
    /// Log a line at the end instead of drawing a progress bar.
    #[arg(long)]
    pub no_progress: bool,
}

impl SimulationArgs {
    /// Applies `--out` and `--repeats` to a config's fields.
    fn apply(&self, out: &mut PathBuf, repeats: &mut usize) {
        if let Some(o) = &self.out {
            *out = o.clone();
        }
        if let Some(r) = self.repeats {
            *repeats = r;
        }
    }
}

pub fn run_cli(a: DsiArgs) -> Result<()> {
    match a.command {
        DsiCommand::Offline(o) => run_offline_cli(o),
        DsiCommand::Online(o) => run_online_cli(o),
    }
}

fn run_online_cli(a: OnlineArgs) -> Result<()> {
    let mut cfg = online_run::OnlineConfig::load(&a.config)
        .with_context(|| format!("DSI online config {}", a.config.display()))?;
    if let Some(c) = a.compat {
        cfg.compat = c;
    }
    a.run.apply(&mut cfg.out, &mut cfg.repeats);
    if let Some(c) = a.cost_model {
        cfg.cost_model = c;
    }
    if let Some(d) = a.dataset {
        cfg.acceptance.dataset = Some(d);
    }
    if let Some(rate) = a.rate {
        cfg.acceptance = online_run::AcceptanceSource { a: Some(rate), trace: None, dataset: None };
    }
    let started = std::time::Instant::now();
    let outcome = online_run::run_online(&cfg, !a.run.no_progress)?;
    println!("{}", outcome.summary);
    eprintln!("wrote {} ({:.0} s)", cfg.out.display(), started.elapsed().as_secs_f64());
    Ok(())
}

fn run_offline_cli(a: OfflineArgs) -> Result<()> {
    let mut cfg = match &a.config {
        Some(p) => OfflineConfig::load(p).with_context(|| format!("DSI offline config {}", p.display()))?,
        None => OfflineConfig::paper(a.run.out.clone().context("give --config or --out")?),
    };
    a.run.apply(&mut cfg.out, &mut cfg.repeats);
    cfg.validate()?;
    let summary = run_offline(&cfg, !a.run.no_progress)?;
    println!("{summary}");
    eprintln!("wrote {}", cfg.out.display());
    Ok(())
}

/// Runs the offline heatmap of `cfg` and writes everything into `cfg.out`; returns summary.md.
pub fn run_offline(cfg: &OfflineConfig, progress: bool) -> Result<String> {
    std::fs::create_dir_all(&cfg.out).with_context(|| format!("creating {}", cfg.out.display()))?;
    let n = cfg.grid.cs().len() * cfg.grid.as_().len() * cfg.grid.ks().len();
    let bar = if progress { ProgressBar::new(n as u64) } else { ProgressBar::hidden() };
    bar.set_style(ProgressStyle::with_template("{bar:30} {pos}/{len} (c, a, k) cells, {elapsed} elapsed, ETA {eta}")?);
    let started = std::time::Instant::now();
    let rows = simulate_grid(cfg, || bar.inc(1));
    bar.finish_and_clear();
    let seconds = started.elapsed().as_secs_f64();
    let best = points(&rows, None, Estimator::MonteCarlo);
    let fixed = points(&rows, Some(cfg.fixed_k), Estimator::MonteCarlo);
    write_cells_csv(&cfg.out.join("cells.csv"), &rows)?;
    write_points_csv(&cfg.out.join("points.csv"), &best)?;
    write_points_csv(&cfg.out.join(format!("points-k{}.csv", cfg.fixed_k)), &fixed)?;
    let (cs, as_) = (cfg.grid.cs(), cfg.grid.as_());
    let title =
        |what: &str| format!("{what}: {} tokens, {} repeats, {} target servers", cfg.tokens, cfg.repeats, cfg.servers);
    for mode in [SiMode::Official, SiMode::Fair] {
        let t = title(&format!("DSI offline, best lookahead per cell, SI {}", mode.name()));
        figures::heatmap_figure(
            &cfg.out.join(format!("figure2-{}.png", mode.name())),
            &t,
            &figures::figure2_panels(&best, mode),
            2,
            &cs,
            &as_,
            &cfg.marks,
        )?;
    }
    figures::heatmap_figure(
        &cfg.out.join(format!("figure7-k{}.png", cfg.fixed_k)),
        &title(&format!("DSI offline, lookahead {}", cfg.fixed_k)),
        &figures::figure7_panels(&fixed, cfg.fixed_k),
        3,
        &cs,
        &as_,
        &cfg.marks,
    )?;
    figures::heatmap_figure(
        &cfg.out.join("si-modes.png"),
        &title("SI's handicap in the reference heatmap"),
        &[figures::si_mode_panel(&best)],
        1,
        &cs,
        &as_,
        &cfg.marks,
    )?;

    let mut heads = Vec::new();
    for est in [Estimator::MonteCarlo, Estimator::Exact] {
        let (b, f) = (points(&rows, None, est), points(&rows, Some(cfg.fixed_k), est));
        heads.push((format!("best k, SI official, {}", est.name()), headline(&b, SiMode::Official, est)));
        heads.push((format!("best k, SI fair, {}", est.name()), headline(&b, SiMode::Fair, est)));
        heads.push((format!("k = {}, {}", cfg.fixed_k, est.name()), headline(&f, SiMode::Official, est)));
    }
    let differ = best.iter().filter(|p| p.si_official.is_some_and(|o| o.cost > p.si_fair.cost)).count();
    let gaps = monte_carlo_vs_exact(&rows);
    let md = summary_markdown(cfg, &heads, gaps, differ, best.len(), seconds) + &marks_markdown(cfg);
    write_atomic(&cfg.out.join("summary.md"), md.as_bytes())?;
    let json = serde_json::json!({
        "config": cfg,
        "headlines": heads.iter().map(|(name, h)| serde_json::json!({ "name": name, "headline": h })).collect::<Vec<_>>(),
        "monte_carlo_vs_exact": { "si": { "max": gaps[0].0, "mean": gaps[0].1 }, "dsi": { "max": gaps[1].0, "mean": gaps[1].1 } },
        "points_where_si_modes_differ": differ,
        "seconds": seconds,
    });
    write_atomic(&cfg.out.join("summary.json"), serde_json::to_string_pretty(&json)?.as_bytes())?;
    Ok(md)
}

fn summary_markdown(
    cfg: &OfflineConfig,
    heads: &[(String, Headline)],
    gaps: [(f64, f64); 2],
    differ: usize,
    points: usize,
    seconds: f64,
) -> String {
    let f = |v: f64| format!("{v:.3}");
    let rows: Vec<Vec<String>> = heads
        .iter()
        .map(|(name, h)| {
            vec![
                name.clone(),
                h.points_with_dsi.to_string(),
                h.si_slower_than_nonsi.to_string(),
                f(h.min_dsi_vs_si),
                f(h.min_dsi_vs_nonsi),
                f(h.min_dsi_vs_baseline),
                f(h.max_dsi_vs_baseline),
                h.dsi_slower.to_string(),
            ]
        })
        .collect();
    format!(
        "# DSI offline simulation\n\n{} tokens per run, {} repeats per (c, a, k), {} target servers, grid ndim {} (c from {}, a in [{}, {}], k = 1..{} step {}), seed {}; {:.1} s.\n\n{}\n\
         Speedups are cost ratios at each algorithm's best lookahead per (c, a) (or at k = {}), from the Monte Carlo means (the reference's estimator) or the exact expectations. \
         \"points with DSI\": (c, a) with a lookahead DSI can run on the servers. \"DSI slower\": points where DSI is slower than min(SI, non-SI). \
         SI's best lookahead differs between the modes at {differ} of {points} points (si-modes.png).\n\n\
         Monte Carlo vs exact, |MC - exact| / exact over all cells: SI max {:.2}% (mean {:.2}%), DSI max {:.2}% (mean {:.2}%).\n\n\
         Figures (Monte Carlo): figure2-official.png, figure2-fair.png, figure7-k{}.png, si-modes.png.\n",
        cfg.tokens,
        cfg.repeats,
        cfg.servers,
        cfg.grid.ndim,
        cfg.grid.c_min,
        cfg.grid.a_min,
        cfg.grid.a_max,
        cfg.grid.ks().last().copied().unwrap_or(1),
        cfg.grid.k_step,
        cfg.seed,
        seconds,
        markdown_table(
            &[
                "lookahead, SI mode, estimator",
                "points with DSI",
                "SI slower than non-SI",
                "min DSI/SI",
                "min DSI/non-SI",
                "min DSI/min(SI, non-SI)",
                "max DSI/min(SI, non-SI)",
                "DSI slower"
            ],
            &rows
        ),
        cfg.fixed_k,
        100.0 * gaps[0].0,
        100.0 * gaps[0].1,
        100.0 * gaps[1].0,
        100.0 * gaps[1].1,
        cfg.fixed_k,
    )
}

/// The marked pairs (`[[marks]]`): exact expected costs at their own (c, a), whatever the grid.
fn marks_markdown(cfg: &OfflineConfig) -> String {
    if cfg.marks.is_empty() {
        return String::new();
    }
    let rows: Vec<Vec<String>> = cfg
        .marks
        .iter()
        .map(|m| {
            let cell = |k| offline::Cell { c: m.c, a: m.a, k };
            let ks = cfg.grid.ks();
            let si = ks
                .iter()
                .map(|&k| (k, offline::exact_si(cell(k), cfg.tokens)))
                .min_by(|x, y| x.1.total_cmp(&y.1))
                .expect("the grid has lookaheads");
            // DSI's costs at the lookaheads the servers can run, smallest (Eq. 1's) first.
            let dsi: Vec<(usize, f64)> = ks
                .iter()
                .filter(|&&k| offline::servers_required(m.c, k) <= cfg.servers)
                .map(|&k| (k, offline::exact_dsi(cell(k), cfg.tokens)))
                .collect();
            let best = dsi.iter().copied().min_by(|x, y| x.1.total_cmp(&y.1));
            let non_si = cfg.tokens as f64;
            let (dsi_k, dsi_cost) = best.map_or(("-".into(), f64::NAN), |(k, c)| (k.to_string(), c));
            let eq1_speedup = dsi.first().map_or("-".into(), |&(k, c)| format!("{:.3} (k = {k})", si.1 / c));
            vec![
                m.name.clone(),
                format!("{}", m.c),
                format!("{}", m.a),
                format!("{:.3} (k = {})", non_si / si.1, si.0),
                format!("{:.3} (k = {dsi_k})", si.1 / dsi_cost),
                eq1_speedup,
                format!("{:.3}", non_si / dsi_cost),
            ]
        })
        .collect();
    format!(
        "\n## Marked pairs (exact expectations)\n\n{}\nSI at its best lookahead of the grid; DSI at its best lookahead the {} servers can run, and at Eq. 1's (the smallest they can run).\n",
        markdown_table(&["pair", "c", "a", "SI/non-SI", "DSI/SI (best k)", "DSI/SI (Eq. 1 k)", "DSI/non-SI"], &rows),
        cfg.servers
    )
}
