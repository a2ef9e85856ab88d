//! Command-line arguments of `specx train` and the sweep over the paper's grid.

use crate::config::TrainConfig;
use crate::data::load_sets;
use crate::train::{train_on, TrainOptions, TrainState};
use anyhow::{Context, Result};
use clap::Args;
use specx_decoder::fsutil::write_atomic;
use specx_decoder::report::markdown_table;
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
    /// Table 3) into <out>/w<W>-d<D>/, and write a summary table <out>/sweep.md.
    #[arg(long)]
    pub sweep: bool,
    /// Stop after this many epochs in this run (re-run the same command to continue).
    #[arg(long)]
    pub max_epochs: Option<usize>,
    /// Log a line per epoch without progress bars.
    #[arg(long)]
    pub no_progress: bool,
}

/// The row of a summary table for one trained head.
fn row(w_rej: f64, depth: usize, s: &TrainState, seconds: f64) -> Vec<String> {
    let Some(b) = s.best() else { return vec![format!("{w_rej}"), depth.to_string(), "-".into(), "-".into(), "-".into(), "-".into(), "-".into(), "-".into(), "-".into()] };
    vec![
        format!("{w_rej}"),
        depth.to_string(),
        format!("{:.4}", b.train.binary_kl),
        format!("{:.4}", b.dev.binary_kl),
        format!("{:.4}", b.dev.weighted_loss),
        b.dev.auroc.map_or("-".into(), |a| format!("{a:.4}")),
        format!("{:.4}", b.dev.ece),
        format!("{}/{}", b.epoch, s.config.optim.epochs),
        format!("{seconds:.1}"),
    ]
}

/// The reliability bins of `m` as a table.
pub fn reliability_table(m: &crate::metrics::Metrics) -> String {
    let rows: Vec<Vec<String>> = m
        .reliability
        .iter()
        .map(|b| {
            let f = |v: f64| if v.is_nan() { "-".to_string() } else { format!("{v:.3}") };
            vec![format!("[{:.1}, {:.1})", b.lo, b.hi), b.count.to_string(), f(b.mean_predicted), f(b.mean_label)]
        })
        .collect();
    markdown_table(&["predicted", "rows", "mean predicted", "mean label"], &rows)
}

const HEADER: [&str; 9] = ["w_rej", "depth", "train KL", "dev KL", "dev weighted loss", "dev AUROC", "dev ECE", "best epoch", "seconds"];

pub fn run_cli(a: TrainArgs) -> Result<()> {
    let mut cfg = TrainConfig::load(&a.config)?;
    if let Some(o) = &a.out {
        cfg.output.dir = specx_datagen::config::resolve_path(o, &std::env::current_dir()?);
    }
    cfg.validate()?;
    let (train_set, dev_set) = load_sets(&cfg)?;
    eprintln!(
        "train: {} rows ({}, {}), dev: {} rows ({}), hidden {}",
        train_set.len(),
        train_set.split,
        cfg.data.train.display(),
        dev_set.len(),
        dev_set.split,
        train_set.hidden
    );
    let opts = TrainOptions { max_epochs_this_run: a.max_epochs, progress: !a.no_progress };
    let points: Vec<(f64, usize)> = if a.sweep {
        cfg.sweep.w_rej.iter().flat_map(|&w| cfg.sweep.depth.iter().map(move |&d| (w, d))).collect()
    } else {
        vec![(cfg.loss.w_rej, cfg.head.depth)]
    };
    let mut rows = Vec::new();
    let mut last_state = None;
    for (w_rej, depth) in points {
        let mut c = cfg.clone();
        c.loss.w_rej = w_rej;
        c.head.depth = depth;
        if a.sweep {
            c.output.dir = cfg.output.dir.join(format!("w{w_rej}-d{depth}"));
            eprintln!("--- w_rej {w_rej}, depth {depth} -> {}", c.output.dir.display());
        }
        let state = train_on(&c, &train_set, &dev_set, &opts).with_context(|| format!("training w_rej {w_rej}, depth {depth}"))?;
        rows.push(row(w_rej, depth, &state, state.history.iter().map(|r| r.seconds).sum()));
        last_state = Some(state);
    }
    let table = markdown_table(&HEADER, &rows);
    print!("{table}");
    if let (false, Some(state)) = (a.sweep, &last_state) {
        if let Some(best) = state.best() {
            println!("\ndev reliability at epoch {} (predicted acceptance vs mean label per bin):\n", best.epoch);
            print!("{}", reliability_table(&best.dev));
        }
    }
    if a.sweep {
        let text = format!(
            "# specx train --sweep\n\ntrain {} ({} rows), dev {} ({} rows); metrics of each point's best dev epoch (lowest dev weighted loss).\n\n{table}",
            cfg.data.train.display(),
            train_set.len(),
            cfg.data.dev.display(),
            dev_set.len()
        );
        write_atomic(&cfg.output.dir.join("sweep.md"), text.as_bytes())?;
        eprintln!("wrote {}", cfg.output.dir.join("sweep.md").display());
    }
    Ok(())
}
