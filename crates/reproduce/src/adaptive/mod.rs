//! `specx reproduce adaptive --config configs/reproductions/adaptive.toml`: the comparison of
//! every stop rule (docs/reproductions/adaptive-drafting.md) from replays of the greedy traces:
//! per prompt set, each policy family's published default and its best setting, with discard
//! and verification rates, tokens per target call (Spec-Bench's mean accepted length, the bonus
//! token included) and throughput priced two ways, and Figure 3 with every family.
//!
//! Throughput is eq. 5.1 with the draft forwards counted as they happened: `N / (t_draft
//! N_draft_calls + t_target N_target + t_row rows_verified)`. For the rules that keep their
//! trigger token the draft calls are the paper's `N + N_discarded - N_target`; a rule that
//! drops it (llama.cpp's p_min, AdaEDL) also spends the forward of every dropped token, which
//! eq. 5.1 as printed would not charge. The paper's A100 times have no row term; a CPU's
//! verification cost grows with the rows it checks, so its costs carry one.

mod figures;

use anyhow::{Context, Result};
use clap::Args;
use serde::{Deserialize, Serialize};
use specx_decoder::fsutil::write_atomic;
use specx_decoder::report::markdown_table;
use specx_eval::common::costs::Costs;
use specx_eval::common::run_rows::{Group, Row, groups, move_head_families, read_rows};
use specx_run::config::read_toml;
use specx_run::paths::resolve_path;
use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};

#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AdaptiveConfig {
    /// Replay directories of the greedy traces (`specx eval replay`), read together.
    pub replays: Vec<PathBuf>,
    /// Cost models; the first one picks each family's best setting in the tables' first block.
    pub costs: Vec<Costs>,
    /// Each family's published default setting(s), by setting key.
    #[serde(default)]
    pub defaults: BTreeMap<String, Vec<String>>,
    /// Heads that form a family of their own (family name -> head names), e.g. the heads that
    /// read more than the paper's, so that the paper's rule is judged on the paper's heads.
    #[serde(default)]
    pub head_families: BTreeMap<String, Vec<String>>,
    /// Only these families in the tables and figures (empty: every family the replays hold),
    /// so one comparison can read a replay that also holds others.
    #[serde(default)]
    pub families: Vec<String>,
    /// The page's title [default: the adaptive-drafting comparison's].
    #[serde(default)]
    pub title: Option<String>,
    pub out: PathBuf,
}

impl AdaptiveConfig {
    pub fn load(path: &Path) -> Result<Self> {
        let (mut c, base): (Self, PathBuf) = read_toml(path)?;
        c.replays = c.replays.iter().map(|p| resolve_path(p, &base)).collect();
        c.out = resolve_path(&c.out, &base);
        anyhow::ensure!(!c.costs.is_empty(), "{}: give at least one [[costs]] model", path.display());
        for costs in &mut c.costs {
            costs.resolve(&base).with_context(|| format!("{}", path.display()))?;
        }
        Ok(c)
    }
}

#[derive(Args, Debug)]
pub struct AdaptiveArgs {
    /// Reproduction config (TOML): replay directories, cost models, each family's defaults, the
    /// output directory. See configs/reproductions/adaptive.toml.
    #[arg(long)]
    pub config: PathBuf,
}

/// One row of a set's table.
#[derive(Clone, Debug, Serialize)]
pub struct Entry {
    pub family: String,
    pub setting: String,
    /// `default`, or `best at <costs>`.
    pub role: String,
    pub prompts: usize,
    pub discard_rate: f64,
    pub verification_rate: f64,
    /// Spec-Bench's mean accepted length: tokens per target call, the bonus token included.
    pub tokens_per_target_call: f64,
    pub draft_calls_per_token: f64,
    /// Tokens/s under each cost model, and the ratio to the best fixed K under it.
    pub tokens_per_s: Vec<f64>,
    pub vs_best_fixed_k: Vec<f64>,
}

fn entry(g: &Group, role: &str, costs: &[Costs], best_k: &[f64]) -> Entry {
    let (discard, verification) = g.rates();
    let tp: Vec<f64> = costs.iter().map(|c| c.throughput(g)).collect();
    Entry {
        family: g.first.family.clone(),
        setting: g.first.setting.clone(),
        role: role.into(),
        prompts: g.rows.len(),
        discard_rate: discard,
        verification_rate: verification,
        tokens_per_target_call: g.n() / g.target_calls(),
        draft_calls_per_token: g.draft_calls() / g.n(),
        vs_best_fixed_k: tp.iter().zip(best_k).map(|(t, k)| t / k).collect(),
        tokens_per_s: tp,
    }
}

/// A set's table: per family its defaults and its best setting under each cost model.
pub fn set_table(gs: &BTreeMap<String, Group>, cfg: &AdaptiveConfig) -> Vec<Entry> {
    let best_of = |family: &str, c: &Costs| {
        gs.values().filter(|g| g.first.family == family).max_by(|a, b| c.throughput(a).total_cmp(&c.throughput(b)))
    };
    let best_k: Vec<f64> =
        cfg.costs.iter().map(|c| best_of("specdec", c).map_or(f64::NAN, |g| c.throughput(g))).collect();
    let mut families: Vec<String> = gs.values().map(|g| g.first.family.clone()).filter(|f| f != "ar").collect();
    families.sort_by_key(|f| (family_order(f), f.clone()));
    families.dedup();
    let mut out = Vec::new();
    for f in families {
        for key in cfg.defaults.get(&f).into_iter().flatten() {
            if let Some(g) = gs.get(key) {
                out.push(entry(g, "default", &cfg.costs, &best_k));
            }
        }
        for c in &cfg.costs {
            if let Some(g) = best_of(&f, c) {
                out.push(entry(g, &format!("best at {}", c.name), &cfg.costs, &best_k));
            }
        }
    }
    out
}

/// Families in the order the tables list them: the baseline, the learned rule, the
/// training-free rules, the bound.
fn family_order(f: &str) -> usize {
    if f.starts_with("specdecpp") {
        return 1;
    }
    [
        "specdec",
        "specdecpp",
        "confidence",
        "roc",
        "pmin",
        "dynamic",
        "svip",
        "adaedl",
        "bandit",
        "matchrate",
        "lookup",
        "hybrid",
        "oracle",
    ]
    .iter()
    .position(|x| *x == f)
    .unwrap_or(12)
}

fn table_markdown(entries: &[Entry], costs: &[Costs]) -> String {
    let mut header = vec![
        "policy".to_string(),
        "setting".into(),
        "".into(),
        "prompts".into(),
        "discard rate".into(),
        "verification rate".into(),
        "tokens / target call".into(),
        "draft calls / token".into(),
    ];
    for c in costs {
        header.push(format!("tok/s at {}", c.name));
        header.push(format!("vs best fixed K at {}", c.name));
    }
    let rows: Vec<Vec<String>> = entries
        .iter()
        .map(|e| {
            let mut r = vec![
                e.family.clone(),
                e.setting.clone(),
                e.role.clone(),
                e.prompts.to_string(),
                f3(e.discard_rate),
                f3(e.verification_rate),
                f3(e.tokens_per_target_call),
                f3(e.draft_calls_per_token),
            ];
            for (t, v) in e.tokens_per_s.iter().zip(&e.vs_best_fixed_k) {
                r.push(if t.is_finite() { format!("{t:.2}") } else { "-".into() });
                // No fixed K in the replays: nothing to compare with.
                r.push(if v.is_finite() { format!("{:+.1}%", 100.0 * (v - 1.0)) } else { "-".into() });
            }
            r
        })
        .collect();
    let header: Vec<&str> = header.iter().map(String::as_str).collect();
    markdown_table(&header, &rows)
}

fn f3(v: f64) -> String {
    if v.is_finite() { format!("{v:.3}") } else { "-".into() }
}

/// Rows of every replay, greedy only (the replays' real rows, if any, are dropped: the tables
/// compare replayed counts), with the heads of `head_families` moved to their family.
fn read_all(cfg: &AdaptiveConfig) -> Result<Vec<Row>> {
    let mut rows = Vec::new();
    for d in &cfg.replays {
        let r = read_rows(d)
            .with_context(|| format!("reading the replay {} (`specx eval replay` writes it)", d.display()))?;
        rows.extend(r.into_iter().filter(|r| r.replayed));
    }
    move_head_families(&mut rows, &cfg.head_families);
    if !cfg.families.is_empty() {
        rows.retain(|r| cfg.families.contains(&r.family));
    }
    Ok(rows)
}

pub fn run(a: &AdaptiveArgs) -> Result<()> {
    let cfg = AdaptiveConfig::load(&a.config)?;
    let rows = read_all(&cfg)?;
    std::fs::create_dir_all(&cfg.out).with_context(|| format!("creating {}", cfg.out.display()))?;
    let title = cfg.title.as_deref().unwrap_or("Adaptive drafting: every stop rule on the greedy traces");
    let mut md = format!("# {title} (generated by `specx reproduce adaptive`)\n\n");
    let _ = writeln!(
        md,
        "Replays: {}.",
        cfg.replays
            .iter()
            .map(|p| format!("`{}`", crate::specdecpp::shown_path(p).display()))
            .collect::<Vec<_>>()
            .join(", ")
    );
    let _ = writeln!(
        md,
        "Costs: {}.\n",
        cfg.costs
            .iter()
            .map(|c| format!("{}: t_draft {} s, t_target {} s, t_row {} s", c.name, c.t_draft, c.t_target, c.t_row))
            .collect::<Vec<_>>()
            .join("; ")
    );
    let mut claims = BTreeMap::new();
    for ((dataset, sampling), gs) in groups(&rows) {
        let entries = set_table(&gs, &cfg);
        let _ = writeln!(md, "## {dataset} ({sampling})\n");
        md.push_str(&table_markdown(&entries, &cfg.costs));
        let png = format!("frontier_{}.png", specx_eval::common::plot::safe(&dataset));
        figures::frontier_all(&cfg.out.join(&png), &format!("{dataset}: every stop rule (greedy replay)"), &gs)?;
        let _ = writeln!(md, "\n![Figure 3 with every rule]({png})\n");
        claims.insert(dataset, entries);
    }
    write_atomic(&cfg.out.join("results.md"), md.as_bytes())?;
    write_atomic(&cfg.out.join("claims.json"), serde_json::to_string_pretty(&claims)?.as_bytes())?;
    eprintln!("wrote {} and claims.json", cfg.out.join("results.md").display());
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(
        family: &str,
        setting: &str,
        n: f64,
        drafted: f64,
        accepted: f64,
        target_calls: f64,
        draft_calls: f64,
    ) -> Row {
        Row {
            dataset: "set".into(),
            sampling: "greedy".into(),
            prompt_id: "p".into(),
            family: family.into(),
            setting: setting.into(),
            head: None,
            threshold: None,
            k: None,
            min: None,
            replayed: true,
            n,
            discarded: drafted - accepted,
            target_calls,
            draft_calls,
            drafted,
            time_s: 0.0,
            batch: 1,
        }
    }

    #[test]
    fn throughput_charges_every_draft_forward_and_the_tables_pick_defaults_and_bests() {
        // 100 tokens, 20 rounds + the prefill call; fixed K = 4 drafts 80 and accepts 79.
        let k4 = row("specdec", "specdec K=4", 100.0, 80.0, 79.0, 21.0, 80.0);
        let a100 =
            Costs { name: "A100".into(), t_draft: 0.0234, t_target: 0.112, t_row: 0.0, profile: None, context: None };
        let g = |r: &Row| Group { first: r.clone(), rows: vec![r.clone()] };
        // Eq. 5.1: N + N_discarded - N_target = 100 + 1 - 21 = 80 draft forwards.
        let want = specx_eval::common::timing::predicted_throughput(100.0, 1.0, 21.0, 0.0234, 0.112);
        assert!((a100.throughput(&g(&k4)) - want).abs() < 1e-9);
        // A rule that dropped 10 tokens pays their forwards though eq. 5.1's counts ignore them.
        let drop = row("pmin", "pmin 0.75 n_max=16", 100.0, 80.0, 79.0, 21.0, 90.0);
        assert!(a100.throughput(&g(&drop)) < want);
        let cpu =
            Costs { name: "cpu".into(), t_draft: 0.01, t_target: 0.05, t_row: 0.01, profile: None, context: None };
        assert!((cpu.throughput(&g(&k4)) - 100.0 / (0.01 * 80.0 + 0.05 * 21.0 + 0.01 * (80.0 + 20.0))).abs() < 1e-9);
        let k2 = row("specdec", "specdec K=2", 100.0, 60.0, 59.0, 41.0, 60.0);
        let gs: BTreeMap<String, Group> = [&k4, &k2, &drop].into_iter().map(|r| (r.setting.clone(), g(r))).collect();
        let cfg = AdaptiveConfig {
            replays: vec![],
            costs: vec![a100, cpu],
            defaults: [("pmin".to_string(), vec!["pmin 0.75 n_max=16".to_string()])].into(),
            head_families: BTreeMap::new(),
            families: Vec::new(),
            title: None,
            out: PathBuf::new(),
        };
        let t = set_table(&gs, &cfg);
        let roles: Vec<(&str, &str, &str)> =
            t.iter().map(|e| (e.family.as_str(), e.setting.as_str(), e.role.as_str())).collect();
        assert_eq!(
            roles,
            [
                ("specdec", "specdec K=4", "best at A100"),
                ("specdec", "specdec K=4", "best at cpu"),
                ("pmin", "pmin 0.75 n_max=16", "default"),
                ("pmin", "pmin 0.75 n_max=16", "best at A100"),
                ("pmin", "pmin 0.75 n_max=16", "best at cpu")
            ]
        );
        assert!((t[0].vs_best_fixed_k[0] - 1.0).abs() < 1e-12 && t[2].vs_best_fixed_k[0] < 1.0);
        assert!((t[0].tokens_per_target_call - 100.0 / 21.0).abs() < 1e-12);
    }

    #[test]
    fn heads_named_in_head_families_form_their_own_family_listed_after_the_papers() {
        let mut rows = vec![
            row("specdecpp", "specdecpp w6-d3 h=0.7 [2,20]", 1.0, 1.0, 1.0, 1.0, 1.0),
            row("specdecpp", "specdecpp stats h=0.7 [2,20]", 1.0, 1.0, 1.0, 1.0, 1.0),
        ];
        rows[0].head = Some("w6-d3".into());
        rows[1].head = Some("stats".into());
        let families: BTreeMap<String, Vec<String>> =
            [("specdecpp+stats".to_string(), vec!["stats".to_string()])].into();
        move_head_families(&mut rows, &families);
        assert_eq!((rows[0].family.as_str(), rows[1].family.as_str()), ("specdecpp", "specdecpp+stats"));
        assert!(family_order("specdecpp+stats") < family_order("confidence"));
    }
}
