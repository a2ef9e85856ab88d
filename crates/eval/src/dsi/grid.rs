//! The offline heatmap: every (drafter latency c, acceptance rate a, lookahead k) of a grid
//! simulated, each algorithm then given its best lookahead per (c, a), as the reference's
//! heatmap (`dsi/configs/heatmap.py`, `dsi/heatmap/enrich.py`).
//!
//! The reference drops every (c, a, k) that DSI cannot run on the servers (ceil(1/(k c)) >
//! servers) before taking minima, so SI's best lookahead is also limited to DSI-feasible ones
//! (`official`). `fair` lets SI use any lookahead of the grid. Both are kept.

use super::offline::{Cell, exact_dsi, exact_si, servers_required, simulate};
use anyhow::{Context, Result, ensure};
use rayon::prelude::*;
use serde::{Deserialize, Serialize};
use std::path::{Path, PathBuf};

/// The grid, in the reference's terms: c and a on linspace(0, 1, ndim + 1) clamped to their
/// ranges, lookaheads 1, 1 + k_step, ... (ndim of them). The paper's figures use ndim = 20.
#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct GridSpec {
    #[serde(default = "default_ndim")]
    pub ndim: usize,
    #[serde(default = "default_c_min")]
    pub c_min: f64,
    #[serde(default = "default_a_min")]
    pub a_min: f64,
    #[serde(default = "default_a_max")]
    pub a_max: f64,
    #[serde(default = "default_k_step")]
    pub k_step: usize,
}

fn default_ndim() -> usize {
    20
}
fn default_c_min() -> f64 {
    0.01
}
fn default_a_min() -> f64 {
    0.01
}
fn default_a_max() -> f64 {
    0.99
}
fn default_k_step() -> usize {
    1
}

impl Default for GridSpec {
    fn default() -> Self {
        Self {
            ndim: default_ndim(),
            c_min: default_c_min(),
            a_min: default_a_min(),
            a_max: default_a_max(),
            k_step: default_k_step(),
        }
    }
}

impl GridSpec {
    fn linspace(&self) -> Vec<f64> {
        let step = 1.0 / self.ndim as f64;
        (0..=self.ndim).map(|i| i as f64 * step).collect()
    }

    /// Drafter latencies (distinct, ascending).
    pub fn cs(&self) -> Vec<f64> {
        dedup(self.linspace().into_iter().map(|c| if c <= self.c_min { self.c_min } else { c }).collect())
    }

    /// Acceptance rates (distinct, ascending).
    pub fn as_(&self) -> Vec<f64> {
        dedup(
            self.linspace()
                .into_iter()
                .map(|a| {
                    if a <= self.a_min {
                        self.a_min
                    } else if a >= self.a_max {
                        self.a_max
                    } else {
                        a
                    }
                })
                .collect(),
        )
    }

    pub fn ks(&self) -> Vec<usize> {
        (0..self.ndim).map(|i| 1 + i * self.k_step).collect()
    }
}

fn dedup(mut v: Vec<f64>) -> Vec<f64> {
    v.dedup_by(|a, b| a == b);
    v
}

/// A point drawn on the heatmaps (a measured model pair).
#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Mark {
    pub name: String,
    pub c: f64,
    pub a: f64,
}

/// `specx dsi offline`'s config (configs/dsi/offline.toml).
#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct OfflineConfig {
    #[serde(default = "default_seed")]
    pub seed: u64,
    /// Tokens generated per run (the reference's S).
    #[serde(default = "default_tokens")]
    pub tokens: usize,
    /// Runs averaged per (c, a, k).
    #[serde(default = "default_repeats")]
    pub repeats: usize,
    /// Target servers available to DSI (7 on an 8-GPU node with one for the drafter).
    #[serde(default = "default_servers")]
    pub servers: usize,
    /// Lookahead of the fixed-k figure (the paper's Figure 7 uses 5).
    #[serde(default = "default_fixed_k")]
    pub fixed_k: usize,
    #[serde(default)]
    pub grid: GridSpec,
    #[serde(default)]
    pub marks: Vec<Mark>,
    /// Output directory (relative paths are relative to the config file).
    pub out: PathBuf,
}

fn default_seed() -> u64 {
    42
}
fn default_tokens() -> usize {
    1000
}
fn default_repeats() -> usize {
    5
}
fn default_servers() -> usize {
    7
}
fn default_fixed_k() -> usize {
    5
}

impl OfflineConfig {
    /// The paper's settings (every field at its default) writing into `out`.
    pub fn paper(out: PathBuf) -> Self {
        Self {
            seed: default_seed(),
            tokens: default_tokens(),
            repeats: default_repeats(),
            servers: default_servers(),
            fixed_k: default_fixed_k(),
            grid: GridSpec::default(),
            marks: Vec::new(),
            out,
        }
    }

    pub fn load(path: &Path) -> Result<Self> {
        let text = std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
        let mut cfg: Self = toml::from_str(&text).with_context(|| format!("parsing {}", path.display()))?;
        if cfg.out.is_relative() {
            cfg.out = path.parent().unwrap_or(Path::new(".")).join(&cfg.out);
        }
        cfg.validate()?;
        Ok(cfg)
    }

    pub fn validate(&self) -> Result<()> {
        ensure!(
            self.tokens >= 1 && self.repeats >= 1 && self.servers >= 1,
            "tokens, repeats and servers must be at least 1"
        );
        ensure!(
            self.grid.ndim >= 2 && self.grid.k_step >= 1,
            "grid.ndim must be at least 2 and grid.k_step at least 1"
        );
        ensure!(
            self.grid.c_min > 0.0 && self.grid.c_min <= 1.0,
            "grid.c_min must be in (0, 1] (c = 0 needs infinitely many target servers)"
        );
        ensure!(
            0.0 <= self.grid.a_min && self.grid.a_min <= self.grid.a_max && self.grid.a_max <= 1.0,
            "need 0 <= grid.a_min <= grid.a_max <= 1"
        );
        for m in &self.marks {
            ensure!(
                m.c > 0.0 && m.c <= 1.0 && (0.0..=1.0).contains(&m.a),
                "mark {}: c must be in (0, 1] and a in [0, 1]",
                m.name
            );
        }
        Ok(())
    }
}

/// One simulated (c, a, k): SI always; DSI only where the servers suffice.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct CellRow {
    pub c: f64,
    pub a: f64,
    pub k: usize,
    pub servers_required: usize,
    /// Monte Carlo means (the reference's estimator).
    pub si: f64,
    pub dsi: Option<f64>,
    pub nonsi: f64,
    /// Exact expectations (offline::exact_si / exact_dsi).
    pub exact_si: f64,
    pub exact_dsi: Option<f64>,
}

/// Which cost estimate the heatmap is built from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Estimator {
    MonteCarlo,
    Exact,
}

impl Estimator {
    pub fn name(self) -> &'static str {
        match self {
            Estimator::MonteCarlo => "monte-carlo",
            Estimator::Exact => "exact",
        }
    }

    fn costs(self, r: &CellRow) -> (f64, Option<f64>) {
        match self {
            Estimator::MonteCarlo => (r.si, r.dsi),
            Estimator::Exact => (r.exact_si, r.exact_dsi),
        }
    }
}

/// Best lookahead and its cost.
#[derive(Clone, Copy, Debug, Serialize, Deserialize, PartialEq)]
pub struct Best {
    pub k: usize,
    pub cost: f64,
}

/// One (c, a) of the heatmap: each algorithm at its best lookahead.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct Point {
    pub c: f64,
    pub a: f64,
    pub nonsi: f64,
    /// SI over DSI-feasible lookaheads only (the reference's heatmap).
    pub si_official: Option<Best>,
    /// SI over every lookahead of the grid.
    pub si_fair: Best,
    pub dsi: Option<Best>,
}

/// Which SI the speedups compare against.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SiMode {
    Official,
    Fair,
}

impl SiMode {
    pub fn name(self) -> &'static str {
        match self {
            SiMode::Official => "official",
            SiMode::Fair => "fair",
        }
    }
}

/// The four speedups of Figure 2 at one point (None where DSI cannot run).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Speedups {
    pub si_vs_nonsi: f64,
    pub dsi_vs_si: Option<f64>,
    pub dsi_vs_nonsi: Option<f64>,
    pub dsi_vs_baseline: Option<f64>,
}

impl Point {
    pub fn si(&self, mode: SiMode) -> Option<Best> {
        match mode {
            SiMode::Official => self.si_official,
            SiMode::Fair => Some(self.si_fair),
        }
    }

    pub fn speedups(&self, mode: SiMode) -> Option<Speedups> {
        let si = self.si(mode)?.cost;
        let dsi = self.dsi.map(|d| d.cost);
        Some(Speedups {
            si_vs_nonsi: self.nonsi / si,
            dsi_vs_si: dsi.map(|d| si / d),
            dsi_vs_nonsi: dsi.map(|d| self.nonsi / d),
            dsi_vs_baseline: dsi.map(|d| si.min(self.nonsi) / d),
        })
    }
}

/// Simulates every (c, a, k) of the grid (in parallel; each cell has its own random stream, so
/// the result does not depend on the thread count). `progress` is called once per cell.
pub fn simulate_grid(cfg: &OfflineConfig, progress: impl Fn() + Sync) -> Vec<CellRow> {
    let (cs, as_, ks) = (cfg.grid.cs(), cfg.grid.as_(), cfg.grid.ks());
    let mut cells = Vec::with_capacity(cs.len() * as_.len() * ks.len());
    for &c in &cs {
        for &a in &as_ {
            cells.extend(ks.iter().map(|&k| Cell { c, a, k }));
        }
    }
    cells
        .par_iter()
        .enumerate()
        .map(|(i, &cell)| {
            let costs = simulate(cell, cfg.tokens, cfg.repeats, cfg.seed, i as u64);
            let need = servers_required(cell.c, cell.k);
            let feasible = need <= cfg.servers;
            let row = CellRow {
                c: cell.c,
                a: cell.a,
                k: cell.k,
                servers_required: need,
                si: costs.si,
                dsi: feasible.then_some(costs.dsi),
                nonsi: costs.nonsi,
                exact_si: exact_si(cell, cfg.tokens),
                exact_dsi: feasible.then(|| exact_dsi(cell, cfg.tokens)),
            };
            progress();
            row
        })
        .collect()
}

fn best(rows: impl Iterator<Item = (usize, f64)>) -> Option<Best> {
    rows.fold(None, |b: Option<Best>, (k, cost)| match b {
        Some(b) if b.cost <= cost => Some(b),
        _ => Some(Best { k, cost }),
    })
}

/// Best lookahead per (c, a) for each algorithm, from `est`'s costs. `fixed_k`: only that
/// lookahead (Figure 7).
pub fn points(rows: &[CellRow], fixed_k: Option<usize>, est: Estimator) -> Vec<Point> {
    let mut keys: Vec<(f64, f64)> = Vec::new();
    for r in rows {
        if !keys.contains(&(r.c, r.a)) {
            keys.push((r.c, r.a));
        }
    }
    keys.into_iter()
        .map(|(c, a)| {
            let here: Vec<&CellRow> =
                rows.iter().filter(|r| r.c == c && r.a == a && fixed_k.is_none_or(|k| r.k == k)).collect();
            Point {
                c,
                a,
                nonsi: here[0].nonsi,
                si_official: best(here.iter().filter_map(|r| {
                    let (si, dsi) = est.costs(r);
                    dsi.map(|_| (r.k, si))
                })),
                si_fair: best(here.iter().map(|r| (r.k, est.costs(r).0))).expect("every (c, a) has a row"),
                dsi: best(here.iter().filter_map(|r| est.costs(r).1.map(|d| (r.k, d)))),
            }
        })
        .collect()
}

/// Largest and mean relative gap |Monte Carlo - exact| / exact over the rows, for SI and DSI.
pub fn monte_carlo_vs_exact(rows: &[CellRow]) -> [(f64, f64); 2] {
    let gap = |pairs: Vec<(f64, f64)>| {
        let g: Vec<f64> = pairs.iter().map(|(mc, ex)| (mc - ex).abs() / ex).collect();
        (g.iter().copied().fold(0.0, f64::max), g.iter().sum::<f64>() / g.len().max(1) as f64)
    };
    [
        gap(rows.iter().map(|r| (r.si, r.exact_si)).collect()),
        gap(rows.iter().filter_map(|r| Some((r.dsi?, r.exact_dsi?))).collect()),
    ]
}

/// The headline numbers of a heatmap under one SI mode.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct Headline {
    pub estimator: String,
    pub si_mode: String,
    pub points: usize,
    pub points_with_dsi: usize,
    /// Points where SI is slower than non-SI.
    pub si_slower_than_nonsi: usize,
    pub min_dsi_vs_si: f64,
    pub min_dsi_vs_nonsi: f64,
    pub max_dsi_vs_baseline: f64,
    pub min_dsi_vs_baseline: f64,
    /// Points where DSI is slower than SI or non-SI (the paper: none).
    pub dsi_slower: usize,
}

pub fn headline(points: &[Point], mode: SiMode, est: Estimator) -> Headline {
    let s: Vec<Speedups> = points.iter().filter_map(|p| p.speedups(mode)).collect();
    let with_dsi: Vec<&Speedups> = s.iter().filter(|s| s.dsi_vs_si.is_some()).collect();
    let fold = |f: &dyn Fn(&Speedups) -> f64, init: f64, pick: fn(f64, f64) -> f64| {
        with_dsi.iter().map(|s| f(s)).fold(init, pick)
    };
    Headline {
        estimator: est.name().into(),
        si_mode: mode.name().into(),
        points: s.len(),
        points_with_dsi: with_dsi.len(),
        si_slower_than_nonsi: s.iter().filter(|s| s.si_vs_nonsi < 1.0).count(),
        min_dsi_vs_si: fold(&|s| s.dsi_vs_si.unwrap(), f64::INFINITY, f64::min),
        min_dsi_vs_nonsi: fold(&|s| s.dsi_vs_nonsi.unwrap(), f64::INFINITY, f64::min),
        max_dsi_vs_baseline: fold(&|s| s.dsi_vs_baseline.unwrap(), 0.0, f64::max),
        min_dsi_vs_baseline: fold(&|s| s.dsi_vs_baseline.unwrap(), f64::INFINITY, f64::min),
        // Below 1 by more than rounding (the exact programme sums ~1e3 terms).
        dsi_slower: with_dsi.iter().filter(|s| s.dsi_vs_baseline.unwrap() < 1.0 - 1e-9).count(),
    }
}

/// Writes `cells.csv` (every simulated (c, a, k)).
pub fn write_cells_csv(path: &Path, rows: &[CellRow]) -> Result<()> {
    let opt = |v: Option<f64>| v.map_or(String::new(), |d| d.to_string());
    let mut s = String::from("c,a,k,servers_required,cost_si,cost_dsi,cost_nonsi,exact_cost_si,exact_cost_dsi\n");
    for r in rows {
        s += &format!(
            "{},{},{},{},{},{},{},{},{}\n",
            r.c,
            r.a,
            r.k,
            r.servers_required,
            r.si,
            opt(r.dsi),
            r.nonsi,
            r.exact_si,
            opt(r.exact_dsi)
        );
    }
    specx_decoder::fsutil::write_atomic(path, s.as_bytes())
}

/// Writes `points.csv` (each (c, a) with both SI modes' best lookaheads and the speedups).
pub fn write_points_csv(path: &Path, points: &[Point]) -> Result<()> {
    let opt = |v: Option<f64>| v.map_or(String::new(), |v| format!("{v:.6}"));
    let mut s = String::from(
        "c,a,cost_nonsi,k_si_official,cost_si_official,k_si_fair,cost_si_fair,k_dsi,cost_dsi,si_vs_nonsi_official,dsi_vs_si_official,dsi_vs_baseline_official,si_vs_nonsi_fair,dsi_vs_si_fair,dsi_vs_baseline_fair,dsi_vs_nonsi\n",
    );
    for p in points {
        let (o, f) = (p.speedups(SiMode::Official), p.speedups(SiMode::Fair).expect("fair SI always exists"));
        s += &format!(
            "{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{}\n",
            p.c,
            p.a,
            p.nonsi,
            p.si_official.map_or(String::new(), |b| b.k.to_string()),
            opt(p.si_official.map(|b| b.cost)),
            p.si_fair.k,
            p.si_fair.cost,
            p.dsi.map_or(String::new(), |b| b.k.to_string()),
            opt(p.dsi.map(|b| b.cost)),
            opt(o.map(|o| o.si_vs_nonsi)),
            opt(o.and_then(|o| o.dsi_vs_si)),
            opt(o.and_then(|o| o.dsi_vs_baseline)),
            opt(Some(f.si_vs_nonsi)),
            opt(f.dsi_vs_si),
            opt(f.dsi_vs_baseline),
            opt(f.dsi_vs_nonsi),
        );
    }
    specx_decoder::fsutil::write_atomic(path, s.as_bytes())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_paper_grid_has_the_reference_values() {
        let g = GridSpec::default();
        let cs = g.cs();
        assert_eq!(cs.len(), 21);
        assert_eq!(cs[0], 0.01);
        assert!((cs[1] - 0.05).abs() < 1e-12 && cs[20] == 1.0);
        let as_ = g.as_();
        assert_eq!((as_[0], as_[20], as_.len()), (0.01, 0.99, 21));
        assert_eq!(g.ks(), (1..=20).collect::<Vec<_>>());
    }

    #[test]
    fn official_si_is_limited_to_feasible_lookaheads_and_fair_si_is_not() {
        let row = |k, si, dsi| CellRow {
            c: 0.05,
            a: 0.5,
            k,
            servers_required: 0,
            si,
            dsi,
            nonsi: 100.0,
            exact_si: si,
            exact_dsi: dsi,
        };
        let rows = vec![row(1, 50.0, None), row(2, 60.0, None), row(3, 70.0, Some(40.0)), row(4, 80.0, Some(45.0))];
        let p = &points(&rows, None, Estimator::MonteCarlo)[0];
        assert_eq!(p.si_official, Some(Best { k: 3, cost: 70.0 }));
        assert_eq!(p.si_fair, Best { k: 1, cost: 50.0 });
        assert_eq!(p.dsi, Some(Best { k: 3, cost: 40.0 }));
        let s = p.speedups(SiMode::Fair).unwrap();
        assert!((s.dsi_vs_si.unwrap() - 1.25).abs() < 1e-12 && (s.dsi_vs_baseline.unwrap() - 1.25).abs() < 1e-12);
        let fixed = &points(&rows, Some(4), Estimator::Exact)[0];
        assert_eq!((fixed.si_fair.k, fixed.dsi.unwrap().k), (4, 4));
    }
}
