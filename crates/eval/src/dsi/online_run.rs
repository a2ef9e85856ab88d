//! `specx dsi online`: the online simulator ([`super::online`]) over lookaheads and server
//! counts, with latencies from `specx profile` and acceptance either a rate or the measured
//! matches of a greedy replay (the oracle rows of `specx eval replay`: its rounds are the
//! runs of draft/target matches along the target's output).

pub use super::cell::CellResult;
use super::cell::{mean, sd};
use super::offline::{AcceptSampler, Cell, exact_dsi, exact_si, repeat_seed};
use super::online::{Acceptance, Compat, Latencies, SimRun, simulate_dsi, simulate_nonsi, simulate_si};
use crate::common::profile_data::latencies_from_profile;
use anyhow::{Context, Result, bail, ensure};
use indicatif::{ProgressBar, ProgressStyle};
use rand::{RngExt, SeedableRng};
use serde::{Deserialize, Serialize};
use specx_decoder::fsutil::write_atomic;
use specx_decoder::report::markdown_table;
use std::path::{Path, PathBuf};

/// The online simulation's settings (configs/dsi/online.toml).
#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct OnlineConfig {
    #[serde(default)]
    pub seed: u64,
    /// New tokens per generation (the paper: 50).
    pub tokens: usize,
    /// Generations per cell: repeats with an acceptance rate, the first N prompts of a trace.
    pub repeats: usize,
    /// Target server counts (speculation-parallelism degrees).
    pub servers: Vec<usize>,
    /// Lookaheads; `auto = true` adds Eq. 1's lookahead for each server count.
    pub lookaheads: Vec<usize>,
    #[serde(default)]
    pub auto: bool,
    /// Every latency is multiplied by this before sleeping (ratios are what the simulation
    /// measures; thread overheads do not scale, so keep forwards well above a millisecond).
    #[serde(default = "one")]
    pub time_scale: f64,
    /// `flat`: every target forward costs TPOT (the paper); `rows`: TPOT times the profile's
    /// row curve at the forward's new rows (this CPU's verification cost).
    #[serde(default)]
    pub cost_model: CostModel,
    #[serde(default = "fixed")]
    pub compat: Compat,
    pub latency: LatencySource,
    pub acceptance: AcceptanceSource,
    pub out: PathBuf,
}

fn one() -> f64 {
    1.0
}

fn fixed() -> Compat {
    Compat::Fixed
}

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize, clap::ValueEnum)]
#[serde(rename_all = "lowercase")]
pub enum CostModel {
    #[default]
    Flat,
    Rows,
}

/// Forward latencies: a `specx profile` JSON, or milliseconds given directly.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LatencySource {
    pub profile: Option<PathBuf>,
    /// Prompt length whose TTFT is used (the profile's nearest context), and the context of
    /// the row curve.
    #[serde(default = "default_context")]
    pub context: usize,
    pub draft_ttft_ms: Option<f64>,
    pub draft_tpot_ms: Option<f64>,
    pub target_ttft_ms: Option<f64>,
    pub target_tpot_ms: Option<f64>,
}

fn default_context() -> usize {
    128
}

/// Acceptance: a geometric rate `a`, or the matches of a replay's oracle rows in `trace`.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AcceptanceSource {
    pub a: Option<f64>,
    /// A directory with results.parquet holding oracle rows (`specx eval replay` with
    /// `[methods] oracle = true`).
    pub trace: Option<PathBuf>,
    /// Only this prompt set of the trace.
    pub dataset: Option<String>,
}

impl OnlineConfig {
    pub fn load(path: &Path) -> Result<Self> {
        let text = std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
        let mut c: Self =
            toml::from_str(&text).with_context(|| format!("{}: not a DSI online config", path.display()))?;
        let base = path.parent().unwrap_or(Path::new("."));
        let rel = |p: &mut PathBuf| {
            if p.is_relative() {
                *p = base.join(&*p);
            }
        };
        rel(&mut c.out);
        if let Some(p) = c.latency.profile.as_mut() {
            rel(p);
        }
        if let Some(p) = c.acceptance.trace.as_mut() {
            rel(p);
        }
        Ok(c)
    }

    pub fn validate(&self) -> Result<()> {
        ensure!(self.tokens >= 1 && self.repeats >= 1, "tokens and repeats must be >= 1");
        ensure!(
            !self.servers.is_empty() && self.servers.iter().all(|&s| (1..=64).contains(&s)),
            "servers must list counts in 1..=64"
        );
        ensure!(self.auto || !self.lookaheads.is_empty(), "give lookaheads, or auto = true");
        ensure!(self.lookaheads.iter().all(|&k| k >= 1), "lookaheads must be >= 1");
        ensure!(self.time_scale > 0.0, "time_scale must be positive");
        let a = &self.acceptance;
        ensure!(a.a.is_some() != a.trace.is_some(), "[acceptance] needs exactly one of a = RATE or trace = REPLAY_DIR");
        if let Some(r) = a.a {
            ensure!((0.0..=1.0).contains(&r), "[acceptance] a = {r} is not in [0, 1]");
        }
        if let Some(t) = &a.trace {
            ensure!(
                t.join("results.parquet").exists(),
                "{}: no results.parquet (run `specx eval replay RUN --config GRID` with `[methods] oracle = true` first)",
                t.display()
            );
        }
        let l = &self.latency;
        let direct = [l.draft_ttft_ms, l.draft_tpot_ms, l.target_ttft_ms, l.target_tpot_ms];
        match &l.profile {
            Some(p) => {
                ensure!(
                    p.exists(),
                    "{}: no such profile (write it with `specx profile --out {}`)",
                    p.display(),
                    p.display()
                );
                ensure!(direct.iter().all(Option::is_none), "[latency] takes a profile or four *_ms values, not both");
            }
            None => {
                ensure!(
                    direct.iter().all(|v| v.is_some_and(|v| v > 0.0)),
                    "[latency] needs profile = PATH or all of draft_ttft_ms, draft_tpot_ms, target_ttft_ms, target_tpot_ms (> 0)"
                );
                ensure!(self.cost_model == CostModel::Flat, "cost_model = \"rows\" needs a profile (its row curve)");
            }
        }
        Ok(())
    }
}

/// Measured acceptance of a greedy pair: per prompt, whether each proposal matched.
#[derive(Clone, Debug, Serialize)]
pub struct TraceMatches {
    pub prompts: Vec<PromptMatches>,
}

#[derive(Clone, Debug, Serialize)]
pub struct PromptMatches {
    pub dataset: String,
    pub prompt_id: String,
    /// Matches along the output: each oracle round is a run of matches then a mismatch.
    #[serde(skip)]
    pub bits: Vec<bool>,
    pub runs: Vec<usize>,
}

/// Acceptance estimates from traces.
#[derive(Clone, Copy, Debug, Serialize)]
pub struct AcceptanceEstimates {
    /// The paper's App. F.2: 1 - 1 / (1 + mean first match run per prompt).
    pub a_first_run: f64,
    /// The same estimator over every match run.
    pub a_all_runs: f64,
    /// Matches / proposals along the outputs.
    pub match_rate: f64,
    pub prompts: usize,
    pub runs: usize,
}

impl TraceMatches {
    /// The oracle rows of `dir/results.parquet` (optionally of one prompt set).
    pub fn read(dir: &Path, dataset: Option<&str>) -> Result<Self> {
        let t = crate::common::results::ResultsTable::read(dir)?;
        let (family, ds, id) = (t.strs("method")?, t.strs("dataset")?, t.strs("prompt_id")?);
        let mut prompts = Vec::new();
        for i in 0..t.height() {
            if family[i].as_deref() != Some("oracle") || dataset.is_some_and(|d| ds[i].as_deref() != Some(d)) {
                continue;
            }
            let runs = t.u32_list("accepted_per_round", i)?;
            let bits = runs.iter().flat_map(|&n| std::iter::repeat_n(true, n).chain([false])).collect();
            prompts.push(PromptMatches {
                dataset: ds[i].clone().unwrap_or_default(),
                prompt_id: id[i].clone().unwrap_or_default(),
                bits,
                runs,
            });
        }
        if prompts.is_empty() {
            bail!(
                "{}: no oracle rows{} (replay the greedy run with `[methods] oracle = true`)",
                dir.join("results.parquet").display(),
                dataset.map_or(String::new(), |d| format!(" of prompt set '{d}'"))
            );
        }
        Ok(Self { prompts })
    }

    pub fn estimates(&self) -> AcceptanceEstimates {
        let firsts: Vec<usize> = self.prompts.iter().filter_map(|p| p.runs.first().copied()).collect();
        let all: Vec<usize> = self.prompts.iter().flat_map(|p| p.runs.iter().copied()).collect();
        let est = |v: &[usize]| 1.0 - 1.0 / (1.0 + v.iter().sum::<usize>() as f64 / v.len().max(1) as f64);
        let (m, n) = self
            .prompts
            .iter()
            .fold((0usize, 0usize), |(m, n), p| (m + p.bits.iter().filter(|&&b| b).count(), n + p.bits.len()));
        AcceptanceEstimates {
            a_first_run: est(&firsts),
            a_all_runs: est(&all),
            match_rate: m as f64 / n.max(1) as f64,
            prompts: self.prompts.len(),
            runs: all.len(),
        }
    }
}

/// One generation's acceptance, in both forms.
struct Draw {
    bits: Vec<bool>,
    runs: Vec<usize>,
    tokens: usize,
}

/// The generations a cell simulates: repeats with a rate (same draws for every cell), or the
/// first prompts of a trace.
fn draws(cfg: &OnlineConfig, trace: Option<&TraceMatches>) -> Vec<Draw> {
    match (cfg.acceptance.a, trace) {
        (Some(a), _) => (0..cfg.repeats)
            .map(|r| {
                let seed = repeat_seed(cfg.seed, 0, r as u64);
                let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
                let bits = (0..cfg.tokens).map(|_| rng.random::<f64>() < a).collect();
                // The reference's list: capped geometric (20) draws until their sum exceeds tokens.
                let mut s = AcceptSampler::new(a, 20, seed ^ 0x5eed);
                let mut runs = Vec::new();
                while runs.iter().sum::<usize>() <= cfg.tokens {
                    runs.push(s.draw());
                }
                Draw { bits, runs, tokens: cfg.tokens }
            })
            .collect(),
        (None, Some(t)) => t
            .prompts
            .iter()
            .filter(|p| !p.bits.is_empty())
            .take(cfg.repeats)
            .map(|p| Draw { bits: p.bits.clone(), runs: p.runs.clone(), tokens: cfg.tokens.min(p.bits.len()) })
            .collect(),
        (None, None) => unreachable!("validated"),
    }
}

/// What `run_online` produced.
pub struct OnlineOutcome {
    pub cells: Vec<CellResult>,
    pub latencies: Latencies,
    pub estimates: Option<AcceptanceEstimates>,
    pub summary: String,
}

/// Runs every cell of `cfg` and writes cells.json, runs.csv, summary.md and timelines into `cfg.out`.
pub fn run_online(cfg: &OnlineConfig, progress: bool) -> Result<OnlineOutcome> {
    cfg.validate()?;
    let l = &cfg.latency;
    let lat = match &l.profile {
        Some(p) => latencies_from_profile(p, l.context)?,
        None => {
            let ms = |v: Option<f64>| v.unwrap_or_default() * 1e-3;
            Latencies {
                draft_ttft: ms(l.draft_ttft_ms),
                draft_tpot: ms(l.draft_tpot_ms),
                target_ttft: ms(l.target_ttft_ms),
                target_tpot: ms(l.target_tpot_ms),
                target_rows: Vec::new(),
            }
        }
    };
    let lat =
        Latencies { target_rows: if cfg.cost_model == CostModel::Rows { lat.target_rows } else { Vec::new() }, ..lat };
    let scaled = lat.scaled(cfg.time_scale);
    let trace = cfg
        .acceptance
        .trace
        .as_deref()
        .map(|t| TraceMatches::read(t, cfg.acceptance.dataset.as_deref()))
        .transpose()?;
    let estimates = trace.as_ref().map(TraceMatches::estimates);
    let draws = draws(cfg, trace.as_ref());
    ensure!(!draws.is_empty(), "no generation to simulate");
    let mut cells: Vec<(usize, usize, bool)> = Vec::new();
    for &sp in &cfg.servers {
        for &k in &cfg.lookaheads {
            cells.push((sp, k, false));
        }
        if cfg.auto {
            let k = specx_decoder::speculative::lookahead_for(sp, lat.target_tpot, lat.draft_tpot);
            match cells.iter_mut().find(|c| c.0 == sp && c.1 == k) {
                Some(c) => c.2 = true,
                None => cells.push((sp, k, true)),
            }
        }
    }
    let lookaheads: std::collections::BTreeSet<usize> = cells.iter().map(|c| c.1).collect();
    let total = draws.len() * (1 + lookaheads.len() + cells.len());
    let bar = if progress { ProgressBar::new(total as u64) } else { ProgressBar::hidden() };
    bar.set_style(ProgressStyle::with_template(
        "{bar:30} {pos}/{len} simulated generations, {elapsed} elapsed, ETA {eta}",
    )?);
    std::fs::create_dir_all(&cfg.out).with_context(|| format!("creating {}", cfg.out.display()))?;

    fn acc(d: &Draw, compat: Compat) -> Acceptance<'_> {
        match compat {
            Compat::Fixed => Acceptance::Bits(&d.bits),
            Compat::Reference => Acceptance::Runs(&d.runs),
        }
    }
    let nonsi: Vec<f64> = draws
        .iter()
        .map(|d| {
            bar.inc(1);
            simulate_nonsi(&scaled, d.tokens, cfg.compat).wall_s
        })
        .collect();
    let mut si_by_k = std::collections::BTreeMap::new();
    for &k in &lookaheads {
        let v: Vec<f64> = draws
            .iter()
            .map(|d| {
                bar.inc(1);
                simulate_si(&scaled, d.tokens, k, acc(d, cfg.compat), cfg.compat).wall_s
            })
            .collect();
        si_by_k.insert(k, v);
    }
    let mut results = Vec::new();
    let mut csv = String::from(
        "servers,k,generation,tokens,nonsi_s,si_s,dsi_s,dsi_tasks,dsi_started,dsi_preempted,dsi_max_queue\n",
    );
    for &(sp, k, eq1) in &cells {
        let mut runs: Vec<SimRun> = Vec::new();
        for (i, d) in draws.iter().enumerate() {
            let r = simulate_dsi(&scaled, d.tokens, k, sp, acc(d, cfg.compat), cfg.compat);
            csv.push_str(&format!(
                "{sp},{k},{i},{},{:.6},{:.6},{:.6},{},{},{},{}\n",
                d.tokens, nonsi[i], si_by_k[&k][i], r.wall_s, r.tasks, r.started, r.preempted, r.max_queue
            ));
            if i == 0 {
                let title = format!(
                    "DSI online ({} semantics), {} servers, lookahead {k}: generation 0, {} tokens in {:.0} ms (time scale {})",
                    cfg.compat.name(),
                    sp,
                    d.tokens,
                    r.wall_s * 1e3,
                    cfg.time_scale
                );
                super::figures::timeline_figure(&cfg.out.join(format!("timeline-sp{sp}-k{k}.png")), &title, &r)?;
            }
            runs.push(r);
            bar.inc(1);
        }
        let offline = match (cfg.acceptance.a, cfg.cost_model) {
            (Some(a), CostModel::Flat) => {
                let cell = Cell { c: lat.draft_tpot / lat.target_tpot, a, k };
                let unit = scaled.target_tpot;
                Some((exact_si(cell, cfg.tokens) * unit, exact_dsi(cell, cfg.tokens) * unit))
            }
            _ => None,
        };
        let busy: Vec<f64> = runs.iter().map(|r| mean(&r.busy_s) / r.wall_s).collect();
        results.push(CellResult {
            servers: sp,
            k,
            eq1,
            nonsi_s: nonsi.clone(),
            si_s: si_by_k[&k].clone(),
            dsi_s: runs.iter().map(|r| r.wall_s).collect(),
            dsi_tasks: runs.iter().map(|r| r.tasks).sum(),
            dsi_started: runs.iter().map(|r| r.started).sum(),
            dsi_preempted: runs.iter().map(|r| r.preempted).sum(),
            dsi_max_queue: runs.iter().map(|r| r.max_queue).max().unwrap_or(0),
            dsi_busy: mean(&busy),
            offline_si_s: offline.map(|o| o.0),
            offline_dsi_s: offline.map(|o| o.1),
        });
    }
    bar.finish_and_clear();
    write_atomic(&cfg.out.join("runs.csv"), csv.as_bytes())?;
    let summary = summary_markdown(cfg, &lat, estimates.as_ref(), draws.len(), &results);
    write_atomic(&cfg.out.join("summary.md"), summary.as_bytes())?;
    let json =
        serde_json::json!({ "config": cfg, "latencies_s": lat, "acceptance_estimates": estimates, "cells": results });
    write_atomic(&cfg.out.join("cells.json"), serde_json::to_string_pretty(&json)?.as_bytes())?;
    super::figures::online_speedup_figure(
        &cfg.out.join("speedups.png"),
        &format!("DSI online ({} semantics), {} generations of {} tokens", cfg.compat.name(), draws.len(), cfg.tokens),
        &results,
    )?;
    Ok(OnlineOutcome { cells: results, latencies: lat, estimates, summary })
}

fn summary_markdown(
    cfg: &OnlineConfig,
    lat: &Latencies,
    est: Option<&AcceptanceEstimates>,
    n: usize,
    cells: &[CellResult],
) -> String {
    let ms = |s: f64| format!("{:.1}", s * 1e3);
    let mut s = format!(
        "# DSI online simulation ({} semantics)\n\n{} generations of up to {} tokens per cell; latencies (unscaled, ms): draft TTFT {} / TPOT {}, target TTFT {} / TPOT {} (c = {:.3}); cost model {}; time scale {} (sleeps are the latencies x the scale).\n\n",
        cfg.compat.name(),
        n,
        cfg.tokens,
        ms(lat.draft_ttft),
        ms(lat.draft_tpot),
        ms(lat.target_ttft),
        ms(lat.target_tpot),
        lat.draft_tpot / lat.target_tpot,
        match cfg.cost_model {
            CostModel::Flat => "flat (every target forward TPOT)".to_string(),
            CostModel::Rows => format!(
                "rows (target forward of r rows = TPOT x the profile's curve; 5 rows = {:.2} x 1 row)",
                lat.target(5) / lat.target_tpot
            ),
        },
        cfg.time_scale,
    );
    match (cfg.acceptance.a, est) {
        (Some(a), _) => s.push_str(&format!("Acceptance: rate a = {a} (i.i.d. per position; the reference semantics draws per-segment correct counts, capped geometric at 20).\n\n")),
        (None, Some(e)) => s.push_str(&format!(
            "Acceptance: the measured matches of {} prompts ({} match runs) from {}{}; App. F.2 estimator a = 1 - 1/(1 + mean first run) = {:.3}; over all runs {:.3}; per-position match rate {:.3}.\n\n",
            e.prompts,
            e.runs,
            cfg.acceptance.trace.as_ref().map_or(String::new(), |p| p.display().to_string()),
            cfg.acceptance.dataset.as_ref().map_or(String::new(), |d| format!(" (prompt set {d})")),
            e.a_first_run,
            e.a_all_runs,
            e.match_rate
        )),
        _ => {}
    }
    let rows: Vec<Vec<String>> = cells
        .iter()
        .map(|c| {
            let (r, r_sd) = CellResult::per_run(&c.dsi_s, &c.si_s);
            vec![
                c.servers.to_string(),
                format!("{}{}", c.k, if c.eq1 { " (Eq. 1)" } else { "" }),
                ms(mean(&c.nonsi_s)),
                format!("{} ± {}", ms(mean(&c.si_s)), ms(sd(&c.si_s))),
                format!("{} ± {}", ms(mean(&c.dsi_s)), ms(sd(&c.dsi_s))),
                format!("{:.2}", 1.0 / CellResult::ratio(&c.dsi_s, &c.si_s)),
                format!("{:.2} ± {:.2}", 1.0 / r, r_sd),
                format!("{:.2}", 1.0 / CellResult::ratio(&c.dsi_s, &c.nonsi_s)),
                format!("{:.2}", 1.0 / CellResult::ratio(&c.si_s, &c.nonsi_s)),
                c.offline_si_s.zip(c.offline_dsi_s).map_or("-".into(), |(si, dsi)| format!("{:.2}", si / dsi)),
                format!("{}/{}/{}", c.dsi_tasks, c.dsi_started, c.dsi_preempted),
                c.dsi_max_queue.to_string(),
                format!("{:.2}", c.dsi_busy),
            ]
        })
        .collect();
    s.push_str(&markdown_table(
        &[
            "servers",
            "lookahead",
            "non-SI ms",
            "SI ms",
            "DSI ms",
            "SI/DSI (of means)",
            "SI/DSI (per run)",
            "non-SI/DSI",
            "non-SI/SI",
            "offline SI/DSI",
            "DSI tasks/started/preempted",
            "max queue",
            "server busy",
        ],
        &rows,
    ));
    s.push_str("\nWall times are of the scaled sleeps (mean ± sd over generations). SI/DSI is DSI's speedup over SI (the paper's Table 2 metric); \"offline\" is the offline simulator's exact expectation at the same c, a and k (rate acceptance, flat costs). Timelines of generation 0: timeline-sp*-k*.png; speedups.png.\n");
    s
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::common::results::{ResultRow, write_parquet};
    use crate::method::{MethodSpec, Setting};

    fn row(setting: Setting, id: &str, runs: Vec<usize>) -> ResultRow {
        ResultRow {
            dataset: "humaneval".into(),
            prompt_id: id.into(),
            replayed: true,
            prompt_tokens: 10,
            max_new_tokens: 64,
            n_generated: runs.iter().map(|r| r + 1).sum::<usize>() + 1,
            n_target_calls: runs.len() + 1,
            n_draft_calls: 0,
            n_drafted: 0,
            n_accepted: runs.iter().sum(),
            n_verified: 0,
            total_time_s: 1.0,
            accepted_per_round: runs,
            drafted_per_round: vec![],
            ..ResultRow::example(setting)
        }
    }

    #[test]
    fn oracle_rows_become_match_bits_and_the_papers_estimator() {
        let dir = tempfile::tempdir().unwrap();
        let oracle = || Setting::Speculative(MethodSpec::plain(crate::method::policy::Oracle {}));
        let rows =
            vec![row(Setting::Ar, "a", vec![]), row(oracle(), "a", vec![3, 0, 2]), row(oracle(), "b", vec![1, 4])];
        write_parquet(&dir.path().join("results.parquet"), &rows).unwrap();
        let t = TraceMatches::read(dir.path(), None).unwrap();
        assert_eq!(t.prompts.len(), 2, "the AR row is not a trace");
        let (y, n) = (true, false);
        assert_eq!(t.prompts[0].bits, vec![y, y, y, n, n, y, y, n]);
        assert_eq!(t.prompts[1].runs, vec![1, 4]);
        let e = t.estimates();
        // First runs 3 and 1: mean 2, a = 1 - 1/3. All runs: mean 2 as well. Matches 10 of 15.
        assert!((e.a_first_run - 2.0 / 3.0).abs() < 1e-12 && (e.a_all_runs - 2.0 / 3.0).abs() < 1e-12);
        assert!((e.match_rate - 10.0 / 15.0).abs() < 1e-12, "{e:?}");
        let err = TraceMatches::read(dir.path(), Some("gsm8k")).unwrap_err().to_string();
        assert!(err.contains("no oracle rows of prompt set 'gsm8k'"), "{err}");
    }

    #[test]
    fn configs_name_their_problem() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("online.toml");
        std::fs::write(&path, "tokens = 50\nrepeats = 2\nservers = [2]\nlookaheads = [1]\nout = \"o\"\n[latency]\ndraft_tpot_ms = 1.0\n[acceptance]\na = 0.5\n").unwrap();
        let err = OnlineConfig::load(&path).unwrap().validate().unwrap_err().to_string();
        assert!(err.contains("[latency] needs profile = PATH or all of"), "{err}");
        std::fs::write(&path, "tokens = 50\nrepeats = 2\nservers = [2]\nlookaheads = [1]\nout = \"o\"\n[latency]\nprofile = \"missing.json\"\n[acceptance]\na = 0.5\n").unwrap();
        let err = OnlineConfig::load(&path).unwrap().validate().unwrap_err().to_string();
        assert!(err.contains("missing.json: no such profile"), "{err}");
        std::fs::write(&path, "tokens = 50\nrepeats = 2\nservers = [2]\nlookaheads = [1]\nout = \"o\"\n[latency]\ndraft_ttft_ms = 1.0\ndraft_tpot_ms = 1.0\ntarget_ttft_ms = 1.0\ntarget_tpot_ms = 1.0\n[acceptance]\na = 0.5\ntrace = \"t\"\n").unwrap();
        let err = OnlineConfig::load(&path).unwrap().validate().unwrap_err().to_string();
        assert!(err.contains("exactly one of a = RATE or trace"), "{err}");
    }

    #[test]
    fn a_small_rate_run_writes_its_tables_and_figures() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("online.toml");
        std::fs::write(
            &path,
            "tokens = 12\nrepeats = 2\nservers = [2, 3]\nlookaheads = [1, 3]\nauto = true\nout = \"o\"\n[latency]\ndraft_ttft_ms = 2.0\ndraft_tpot_ms = 1.0\ntarget_ttft_ms = 6.0\ntarget_tpot_ms = 4.0\n[acceptance]\na = 0.7\n",
        )
        .unwrap();
        let cfg = OnlineConfig::load(&path).unwrap();
        let out = run_online(&cfg, false).unwrap();
        // Eq. 1 with c = 1/4: 2 servers need k >= 2, 3 servers k >= 2 (ceil(4/2) = 2 <= 3).
        let ks: Vec<(usize, usize, bool)> = out.cells.iter().map(|c| (c.servers, c.k, c.eq1)).collect();
        assert_eq!(ks, vec![(2, 1, false), (2, 3, false), (2, 2, true), (3, 1, false), (3, 3, false), (3, 2, true)]);
        for f in ["summary.md", "cells.json", "runs.csv", "speedups.png", "timeline-sp2-k1.png", "timeline-sp3-k2.png"]
        {
            assert!(dir.path().join("o").join(f).exists(), "{f} missing");
        }
        assert!(out.cells.iter().all(|c| c.offline_si_s.is_some() && c.dsi_s.len() == 2));
        assert!(out.summary.contains("| servers | lookahead |"));
    }
}
