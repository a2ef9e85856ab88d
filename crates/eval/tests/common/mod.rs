//! What the eval crate's end-to-end tests share: the tiny pair with its untrained head, the
//! config over 3 Alpaca prompts, and the helpers that load and run it.
#![allow(dead_code)] // not every test binary uses each

use specx_eval::common::results::ResultRow;
use specx_eval::experiment::EvalOptions;
use specx_eval::experiment::config::EvalConfig;
use specx_run::Part;
use specx_testkit::config;
use specx_testkit::pair::TinyPair;
use std::path::PathBuf;

/// Tiny pair, a head trained on nothing (random, but stamped with the draft's sha256), and
/// a config over 3 Alpaca test prompts, greedy + sampled with two seeds.
pub struct Setup {
    _pair: TinyPair,
    pub root: PathBuf,
    pub draft: PathBuf,
    pub target: PathBuf,
    pub head: PathBuf,
    pub config: String,
}

pub fn setup() -> Setup {
    let pair = TinyPair::new();
    let head = pair.random_head("head-a", 3);
    let methods = "specdec = { k = [1, 3] }\nspecdecpp = { heads = [\"head-a\"], thresholds = [0.3, 0.8], bounds = [[2, 8], [1, 4]] }\nconfidence = { thresholds = [0.3] }\n";
    let config = config::small_eval(&pair.draft, &pair.target, methods);
    let (root, draft, target) = (pair.root.clone(), pair.draft.clone(), pair.target.clone());
    Setup { _pair: pair, root, draft, target, head, config }
}

pub fn load_config(s: &Setup, text: &str, out: &str) -> anyhow::Result<EvalConfig> {
    let path = s.root.join(format!("{out}.toml"));
    std::fs::write(&path, text.replace("dir = \"out\"", &format!("dir = \"{out}\""))).unwrap();
    EvalConfig::load(&path)
}

pub fn opts(part: Option<Part>, max_new_units: Option<usize>) -> EvalOptions {
    EvalOptions { part, limit: None, max_new_units, progress: false }
}

/// A row without its timing columns (what a resumed or sharded run must reproduce; DSI's
/// scheduler counters depend on its threads' timing).
pub fn untimed(r: &ResultRow) -> ResultRow {
    ResultRow { draft_time_s: 0.0, target_time_s: 0.0, total_time_s: 0.0, speedup: 0.0, dsi: None, ..r.clone() }
}

pub fn untimed_all(rows: &[ResultRow]) -> Vec<ResultRow> {
    rows.iter().map(untimed).collect()
}
