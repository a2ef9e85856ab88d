//! Command-line arguments of `specx eval` (the binary only parses and dispatches).

use super::config::EvalConfig;
use super::{EvalOptions, run};
use anyhow::{Result, bail};
use clap::{Args, Subcommand};
use std::path::PathBuf;

#[derive(Args, Debug, Default)]
#[command(args_conflicts_with_subcommands = true)]
// The shared `--config` says which config this command reads.
#[command(mut_arg("config", |a| a.help("Experiment config (TOML): models, prompt sets, sampling settings, budget, seeds and the method grid. See configs/eval/*.toml and docs/reference/config.md")))]
pub struct EvalArgs {
    #[command(subcommand)]
    pub command: Option<EvalCommand>,
    #[command(flatten)]
    pub run: specx_run::RunArgs,
    /// Stop after this many newly finished units (a resumable partial run).
    #[arg(long)]
    pub max_units: Option<usize>,
    /// Compute device, instead of the config's [models] device: `cpu`, `wgpu[:N]` (the N-th
    /// Vulkan adapter; `specx devices` lists them; needs a build with `--features wgpu`) or
    /// `cuda[:N]` (`--features cuda`). Results on another device go into their own run
    /// directory (a run resumes only on the device it started on).
    #[arg(long)]
    pub device: Option<String>,
    /// How the losslessness audit judges greedy outputs that differ from AR's, instead of the
    /// config's [audit] mode: `exact` fails on any difference; `numerical` reports a difference
    /// whose first departure is a near-tie of the target (|logit margin| <= [audit] near_tie)
    /// as a numerical flip, for devices whose matmuls are not row-invariant (GPUs).
    #[arg(long, value_enum)]
    pub audit: Option<super::config::AuditMode>,
    /// Check the config as a run would (prompt files, splits and samples, the method grid,
    /// heads, model files) and print what it would run, without loading a model or writing
    /// anything. Optional prompt sets whose files are missing are listed as skipped.
    #[arg(long)]
    pub check: bool,
}

#[derive(Subcommand, Debug)]
pub enum EvalCommand {
    /// Join the part directories of a `--shard I/N` run into one run directory and write its
    /// results, summary and plots.
    Merge {
        /// Output run directory.
        #[arg(long)]
        out: PathBuf,
        /// Part directories (all N of them).
        #[arg(required = true)]
        parts: Vec<PathBuf>,
    },
    /// The target's top-2 logit margin at every position of a run's greedy AR outputs (one
    /// teacher-forced forward per unit): how many positions are near-ties that a GPU's
    /// rounding could flip, and where a many-row forward already picks another argmax on this
    /// machine. Prints a table and writes RUN_DIR/margins.json.
    Margins {
        /// The eval run directory.
        run_dir: PathBuf,
        /// Log nothing per unit instead of drawing a progress bar.
        #[arg(long)]
        no_progress: bool,
    },
    /// Stop rules judged out of sample: every family's setting (and threshold-plus's fitted
    /// parameters) chosen on tuning traces, per prompt set and cost model, then the test
    /// traces replayed once with the chosen settings; speedups with per-prompt bootstrap
    /// intervals in OUT/tune.md and tune.json. Resumes at the first unfinished prompt set.
    Tune {
        /// Tune config (TOML): tuning and test trace runs, candidate settings, cost models,
        /// [threshold_plus]. See configs/eval/tune-stop-rules.toml.
        #[arg(long)]
        config: PathBuf,
        /// Choose every setting on the tuning traces and write OUT/tuning.md (each rule's
        /// tuning throughput over the tuned fixed K's) without replaying the test traces: for
        /// looking at candidate rules before the test traces are used, once.
        #[arg(long)]
        tuning_only: bool,
    },
    /// The calibrated acceptance model's learning curve: the model of a tune config's
    /// [calibrated] table fitted on the first n test traces of each prompt set, for each n,
    /// and scored (log loss, AUROC) on all of the tuning traces against the draft's own
    /// probability; chooses no setting. Writes OUT/learning-curve/curve.{md,json,png}.
    LearningCurve {
        /// Tune config (TOML) with a [calibrated] table, e.g. configs/eval/tune-stop-rules.toml.
        #[arg(long)]
        config: PathBuf,
        /// Numbers of traces per prompt set to fit on (each at least [calibrated]
        /// holdout_every, at most the set's test traces).
        #[arg(long, value_delimiter = ',', default_values_t = [6, 12, 24, 48, 96])]
        sizes: Vec<usize>,
    },
    /// Write a run's rows in another tool's format: `spec-bench` writes OUT/SAMPLING-SETTING.jsonl
    /// per sampling and method setting in Spec-Bench's answer format (a question per prompt,
    /// its seeds as choices, every turn's text, decoding steps, new tokens, wall time and
    /// accept lengths), which Spec-Bench's evaluation/speed.py reads with the AR file as
    /// --base-path.
    Export {
        /// The eval run directory.
        run_dir: PathBuf,
        /// The format to write.
        #[arg(long, value_enum, default_value = "spec-bench")]
        format: super::export::ExportFormat,
        /// Directory for the files (created if absent).
        #[arg(long)]
        out: PathBuf,
    },
    /// Replay the greedy units of a finished run under another method grid: exact counts
    /// from the AR outputs and the draft alone (never the target), times predicted by the
    /// run's timing model, written with the run's real rows (marked) into
    /// RUN_DIR/replay-<grid name>. Settings also run for real must agree count for count.
    Replay {
        /// The eval run directory.
        run_dir: PathBuf,
        /// Grid file: a [methods] table as in eval configs, optionally [output] dir.
        #[arg(long)]
        config: PathBuf,
        /// Log a line per unit instead of drawing a progress bar.
        #[arg(long)]
        no_progress: bool,
    },
}

/// The config of an invocation with `--out` applied.
pub fn effective_config(a: &EvalArgs) -> Result<EvalConfig> {
    let mut cfg = EvalConfig::load(a.run.config_path("eval")?)?;
    if let Some(o) = a.run.out_dir()? {
        cfg.output.dir = o;
    }
    if let Some(d) = &a.device {
        cfg.models.device = d.clone();
    }
    if !a.run.devices.is_empty() {
        cfg.models.devices = a.run.devices.clone();
    }
    if let Some(m) = a.audit {
        cfg.audit.mode = m;
    }
    Ok(cfg)
}

pub fn run_cli(a: EvalArgs) -> Result<()> {
    match &a.command {
        Some(EvalCommand::Merge { out, parts }) => {
            let outcome = super::merge::merge(parts, out)?;
            eprintln!("merged {} parts into {}: {} rows", parts.len(), out.display(), outcome.rows.len());
            finish(&outcome, out)
        }
        Some(EvalCommand::Margins { run_dir, no_progress }) => {
            let census = super::margins::margins(run_dir, !no_progress)?;
            print!("{}", super::margins::census_table(&census));
            eprintln!("written {}", run_dir.join("margins.json").display());
            Ok(())
        }
        Some(EvalCommand::Tune { config, tuning_only }) => {
            let cfg = crate::tune::config::TuneConfig::load(config)?;
            crate::tune::tune(&cfg, *tuning_only)?;
            if *tuning_only {
                print!("{}", std::fs::read_to_string(cfg.out.join("tuning.md"))?);
            }
            eprintln!("written {}", cfg.out.join(if *tuning_only { "tuning.md" } else { "tune.md" }).display());
            Ok(())
        }
        Some(EvalCommand::LearningCurve { config, sizes }) => {
            let cfg = crate::tune::config::TuneConfig::load(config)?;
            crate::tune::curve::learning_curve(&cfg, sizes)?;
            print!("{}", std::fs::read_to_string(cfg.out.join("learning-curve/curve.md"))?);
            eprintln!("written {}", cfg.out.join("learning-curve").display());
            Ok(())
        }
        Some(EvalCommand::Export { run_dir, format, out }) => {
            let done = super::export::export(run_dir, *format, out)?;
            for (path, answers, rows) in &done.files {
                eprintln!("written {} ({answers} questions, {rows} answers)", path.display());
            }
            if done.texts_missing > 0 {
                eprintln!(
                    "{} answers have an empty turn text: a sampled single-turn output that differs from AR's is stored as its sha256 only (counts and times are complete)",
                    done.texts_missing
                );
            }
            Ok(())
        }
        Some(EvalCommand::Replay { run_dir, config, no_progress }) => {
            let grid = super::replay_run::ReplayConfig::load(config)?;
            let name = config.file_stem().map_or("grid".into(), |s| s.to_string_lossy().into_owned());
            let o = super::replay_run::replay(run_dir, &grid, &name, !no_progress)?;
            print!("{}", std::fs::read_to_string(o.dir.join("summary.md")).unwrap_or_default());
            eprintln!(
                "{} replayed rows in {}; {} rows of settings also run for real compared, {} differ",
                o.replayed.len(),
                o.dir.display(),
                o.compared,
                o.mismatches.len()
            );
            if !o.mismatches.is_empty() {
                for m in &o.mismatches {
                    eprintln!("REPLAY MISMATCH: {m}");
                }
                bail!("{} replayed rows differ from the real runs of the same setting", o.mismatches.len());
            }
            Ok(())
        }
        None if a.check => {
            let plan = super::check::check(&effective_config(&a)?, a.run.limit)?;
            print!("{}", plan.render());
            eprintln!("config ok: {} units would run (nothing was loaded or written)", plan.units);
            Ok(())
        }
        None => {
            let cfg = effective_config(&a)?;
            let opts = EvalOptions {
                part: a.run.part()?,
                limit: a.run.limit,
                max_new_units: a.max_units,
                progress: !a.run.no_progress,
            };
            let outcome = run(&cfg, &opts)?;
            finish(&outcome, &cfg.output.dir)
        }
    }
}

/// Prints where the results are and fails if the losslessness audit did.
fn finish(outcome: &super::EvalOutcome, dir: &std::path::Path) -> Result<()> {
    let summary = std::fs::read_to_string(dir.join("summary.md")).unwrap_or_default();
    print!("{summary}");
    eprintln!(
        "run directory: {} ({} rows){}",
        dir.display(),
        outcome.rows.len(),
        if outcome.manifest.complete { "" } else { "; incomplete: run the same command again to continue" }
    );
    for f in &outcome.numerical_flips {
        eprintln!("AUDIT (numerical near-tie, not a failure): {f}");
    }
    if !outcome.audit_failures.is_empty() {
        for f in &outcome.audit_failures {
            eprintln!("AUDIT: {f}");
        }
        bail!(
            "losslessness audit failed: {} greedy speculative outputs differ from AR (listed above and in summary.md)",
            outcome.audit_failures.len()
        );
    }
    Ok(())
}
