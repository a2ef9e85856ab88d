//! Command-line arguments of `specx train` and the sweep over the paper's grid.

use crate::acceptance::config::TrainConfig;
use crate::acceptance::data::{LabelledSet, check_compatible, draft_probability_rows};
use crate::acceptance::metrics::evaluate;
use crate::acceptance::train::{TrainOptions, TrainState, train_on};
use anyhow::{Context, Result};
use clap::Args;
use specx_decoder::fsutil::write_atomic;
use specx_decoder::report::markdown_table;
use std::collections::BTreeMap;
use std::path::PathBuf;

#[derive(Args, Debug)]
pub struct TrainArgs {
    /// Training config (TOML): datagen run directories for train and dev, head depth/tying,
    /// loss weights, optimiser and schedule, seed, output. See configs/train-*.toml.
    #[arg(long)]
    pub config: PathBuf,
    /// Checkpoint directory instead of the config's [output] dir.
    #[arg(long)]
    pub out: Option<PathBuf>,
    /// Train one head per point of the config's [sweep] grid (w_rej x depth, the paper's
    /// Table 3; x tied/untied and x training-set size when [sweep] lists them) into
    /// <out>/w<W>-d<D>[-tied][-p<N>]/, and write <out>/sweep.md and sweep.json.
    #[arg(long)]
    pub sweep: bool,
    /// Overrides [data] train_prompts: train on the train run's first N prompts (whole
    /// shards; the run may still be growing).
    #[arg(long)]
    pub train_prompts: Option<usize>,
    /// Overrides [head] tied: one block's weights shared by all blocks (true) or not.
    #[arg(long)]
    pub tied: Option<bool>,
    /// Stop after this many epochs in this run (re-run the same command to continue).
    #[arg(long)]
    pub max_epochs: Option<usize>,
    /// Log a line per epoch without progress bars.
    #[arg(long)]
    pub no_progress: bool,
    /// Print the dev metrics of the draft's own probability of its token, read as the
    /// predicted label (from the dev run's token tables: no features, no training), and exit.
    /// Every training run reports them beside its heads too.
    #[arg(long)]
    pub reference: bool,
    /// Training device instead of the config's `device`: `cpu`, `wgpu[:N]` (a Vulkan
    /// adapter; needs a build with `--features wgpu`) or `cuda[:N]`.
    #[arg(long)]
    pub device: Option<String>,
}

/// One point of a sweep: what differs from the config.
#[derive(Clone, Copy, Debug, serde::Serialize)]
struct Point {
    w_rej: f64,
    depth: usize,
    tied: bool,
    train_prompts: Option<usize>,
}

impl Point {
    /// `w6-d3`, with `-tied` and `-p<N>` when the sweep varies or sets them.
    fn dir_name(&self, cfg: &TrainConfig) -> String {
        let mut name = format!("w{}-d{}", self.w_rej, self.depth);
        if !cfg.sweep.tied.is_empty() && self.tied {
            name.push_str("-tied");
        }
        if let (false, Some(p)) = (cfg.sweep.train_prompts.is_empty(), self.train_prompts) {
            name.push_str(&format!("-p{p}"));
        }
        name
    }
}

/// The row of a summary table for one trained head.
fn row(p: &Point, train_rows: usize, s: &TrainState, seconds: f64) -> Vec<String> {
    let mut r = vec![
        format!("{}", p.w_rej),
        p.depth.to_string(),
        if p.tied { "tied" } else { "untied" }.into(),
        p.train_prompts.map_or("all".into(), |n| n.to_string()),
        train_rows.to_string(),
    ];
    let Some(b) = s.best() else {
        r.extend(std::iter::repeat_n("-".to_string(), 7));
        return r;
    };
    r.extend([
        format!("{:.4}", b.train.binary_kl),
        format!("{:.4}", b.dev.binary_kl),
        format!("{:.4}", b.dev.weighted_loss),
        b.dev.auroc.map_or("-".into(), |a| format!("{a:.4}")),
        format!("{:.4}", b.dev.ece),
        format!("{}/{}", b.epoch, s.config.optim.epochs),
        format!("{seconds:.1}"),
    ]);
    r
}

/// The reliability bins of `m` as a table.
pub fn reliability_table(m: &crate::acceptance::metrics::Metrics) -> String {
    let rows: Vec<Vec<String>> = m
        .reliability
        .iter()
        .map(|b| {
            let f = |v: Option<f64>| v.map_or_else(|| "-".to_string(), |v| format!("{v:.3}"));
            vec![format!("[{:.1}, {:.1})", b.lo, b.hi), b.count.to_string(), f(b.mean_predicted), f(b.mean_label)]
        })
        .collect();
    markdown_table(&["predicted", "rows", "mean predicted", "mean label"], &rows)
}

/// The dev metrics of the draft's own probability of its token, as one sentence.
fn reference_line(cfg: &TrainConfig) -> Result<String> {
    let (logits, labels) = draft_probability_rows(&cfg.data.dev, None)?;
    let m = evaluate(&logits, &labels, cfg.loss.weights());
    Ok(format!(
        "The draft's own probability of its token, read as the predicted label, on the {} dev rows: dev KL {:.4}, dev weighted loss {:.4}, dev AUROC {}, dev ECE {:.4}.",
        m.rows,
        m.binary_kl,
        m.weighted_loss,
        m.auroc.map_or("-".into(), |a| format!("{a:.4}")),
        m.ece
    ))
}

const HEADER: [&str; 12] = [
    "w_rej",
    "depth",
    "tied",
    "train prompts",
    "train rows",
    "train KL",
    "dev KL",
    "dev weighted loss",
    "dev AUROC",
    "dev ECE",
    "best epoch",
    "seconds",
];

pub fn run_cli(a: TrainArgs) -> Result<()> {
    let mut cfg = TrainConfig::load(&a.config)?;
    if let Some(o) = &a.out {
        cfg.output.dir = specx_run::paths::resolve_from_cwd(o)?;
    }
    if a.train_prompts.is_some() {
        cfg.data.train_prompts = a.train_prompts;
    }
    if let Some(d) = &a.device {
        cfg.device = d.clone();
    }
    if let Some(t) = a.tied {
        cfg.head.tied = t;
    }
    cfg.validate()?;
    let reference = reference_line(&cfg)?;
    if a.reference {
        println!("{reference}");
        return Ok(());
    }
    eprintln!("{reference}");
    let opts = TrainOptions { max_epochs_this_run: a.max_epochs, progress: !a.no_progress };
    let sw = &cfg.sweep;
    let points: Vec<Point> = if a.sweep {
        let tied = if sw.tied.is_empty() { vec![cfg.head.tied] } else { sw.tied.clone() };
        let sizes: Vec<Option<usize>> = if sw.train_prompts.is_empty() {
            vec![cfg.data.train_prompts]
        } else {
            sw.train_prompts.iter().map(|&n| Some(n)).collect()
        };
        let mut v = Vec::new();
        for &train_prompts in &sizes {
            for &w_rej in &sw.w_rej {
                for &depth in &sw.depth {
                    for &tied in &tied {
                        v.push(Point { w_rej, depth, tied, train_prompts });
                    }
                }
            }
        }
        v
    } else {
        vec![Point {
            w_rej: cfg.loss.w_rej,
            depth: cfg.head.depth,
            tied: cfg.head.tied,
            train_prompts: cfg.data.train_prompts,
        }]
    };
    // Check every training-set size before training anything.
    let stats = cfg.head.draft_stats;
    let dev_set = LabelledSet::load_prompts_with(&cfg.data.dev, None, stats)?;
    let mut sets: BTreeMap<Option<usize>, LabelledSet> = BTreeMap::new();
    for p in &points {
        if let std::collections::btree_map::Entry::Vacant(e) = sets.entry(p.train_prompts) {
            let set = LabelledSet::load_prompts_with(&cfg.data.train, p.train_prompts, stats)?;
            check_compatible(&set, &dev_set)?;
            eprintln!(
                "train: {} rows ({}, {}{}), dev: {} rows ({}), hidden {}",
                set.len(),
                set.split,
                cfg.data.train.display(),
                p.train_prompts.map_or(String::new(), |n| format!(", first {n} prompts")),
                dev_set.len(),
                dev_set.split,
                set.hidden
            );
            e.insert(set);
        }
    }
    let mut rows = Vec::new();
    let mut records = Vec::new();
    let mut last_state = None;
    for p in &points {
        let mut c = cfg.clone();
        c.loss.w_rej = p.w_rej;
        c.head.depth = p.depth;
        c.head.tied = p.tied;
        c.data.train_prompts = p.train_prompts;
        if a.sweep {
            c.output.dir = cfg.output.dir.join(p.dir_name(&cfg));
            eprintln!(
                "--- w_rej {}, depth {}, {}{} -> {}",
                p.w_rej,
                p.depth,
                if p.tied { "tied" } else { "untied" },
                p.train_prompts.map_or(String::new(), |n| format!(", {n} prompts")),
                c.output.dir.display()
            );
        }
        let set = &sets[&p.train_prompts];
        let state = train_on(&c, set, &dev_set, &opts)
            .with_context(|| format!("training w_rej {}, depth {}", p.w_rej, p.depth))?;
        let seconds = state.history.iter().map(|r| r.seconds).sum();
        rows.push(row(p, set.len(), &state, seconds));
        records.push(serde_json::json!({ "point": p, "dir": c.output.dir, "train_rows": set.len(), "dev_rows": dev_set.len(), "best": state.best(), "seconds": seconds }));
        last_state = Some(state);
    }
    let table = markdown_table(&HEADER, &rows);
    print!("{table}");
    if let (false, Some(state)) = (a.sweep, &last_state)
        && let Some(best) = state.best()
    {
        println!("\ndev reliability at epoch {} (predicted acceptance vs mean label per bin):\n", best.epoch);
        print!("{}", reliability_table(&best.dev));
    }
    if a.sweep {
        let text = format!(
            "# specx train --sweep\n\ntrain {}, dev {} ({} rows); metrics of each point's best dev epoch (lowest dev weighted loss).\n\n{table}\n{reference}\n",
            cfg.data.train.display(),
            cfg.data.dev.display(),
            dev_set.len()
        );
        write_atomic(&cfg.output.dir.join("sweep.md"), text.as_bytes())?;
        // Every point's metrics, machine-readable (data-scaling plots, the reproduction write-up).
        write_atomic(
            &cfg.output.dir.join("sweep.json"),
            serde_json::to_string_pretty(&serde_json::json!({ "config": cfg, "points": records }))?.as_bytes(),
        )?;
        eprintln!("wrote {} and sweep.json", cfg.output.dir.join("sweep.md").display());
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sweep_directories_name_what_the_sweep_varies() {
        let text = "[data]\ntrain = \"t\"\ndev = \"d\"\n[output]\ndir = \"o\"\n";
        let mut cfg: TrainConfig = toml::from_str(text).unwrap();
        let p = Point { w_rej: 6.0, depth: 3, tied: true, train_prompts: Some(250) };
        assert_eq!(p.dir_name(&cfg), "w6-d3", "a plain sweep keeps the paper's names");
        cfg.sweep.tied = vec![false, true];
        cfg.sweep.train_prompts = vec![100, 250];
        assert_eq!(p.dir_name(&cfg), "w6-d3-tied-p250");
        assert_eq!(Point { tied: false, ..p }.dir_name(&cfg), "w6-d3-p250");
    }
}
