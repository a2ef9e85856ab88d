//! `specx slurm`: a datagen or eval config as a Slurm job array. Each array task runs one part
//! (`--shard i/N` into OUT/parts/i) and a merge job that depends on the whole array
//! (`afterok`) joins them into OUT. The parts are the same ones `--shard` and `--devices` make,
//! so a task that is preempted, requeued or resubmitted resumes from what its part directory
//! holds, and the merge checks that the parts belong to one run. `status` reads the run
//! directory (no scheduler database) and says what to resubmit.
//!
//! [`job`] describes a submission and writes its scripts, [`submit`] checks the config and the
//! parts already there and calls sbatch, [`status`] reports.

pub mod job;
pub mod status;
pub mod submit;

use anyhow::Result;
use clap::{Args, Subcommand};
use job::Kind;
use std::path::PathBuf;

#[derive(Args, Debug)]
pub struct SlurmArgs {
    #[command(subcommand)]
    pub command: SlurmCommand,
}

#[derive(Subcommand, Debug)]
pub enum SlurmCommand {
    /// Submit a datagen config as a job array (`specx datagen --shard i/N` into OUT/parts/i)
    /// and a merge job that starts when every task has succeeded. Running the same command
    /// again submits only the parts that are not finished, and the merge.
    Datagen(SubmitArgs),
    /// Submit an eval config as a job array (`specx eval --shard i/N` into OUT/parts/i) and a
    /// merge job (`specx eval merge`: results, summary and plots in OUT). Running the same
    /// command again submits only the parts that are not finished, and the merge.
    Eval(SubmitArgs),
    /// Parts done, running, stopped or failed, and rows written, read from a run directory that
    /// `specx slurm` submitted (the scheduler is asked only whether its jobs are still queued,
    /// where squeue is on the PATH); says what to resubmit.
    Status(StatusArgs),
}

#[derive(Args, Debug, Clone, Default)]
pub struct SubmitArgs {
    /// Datagen or eval config (TOML). Its [slurm] section gives the defaults of the options
    /// below (shards, partition, time, mem, cpus_per_task, gres, account, qos, sbatch, setup).
    #[arg(long)]
    pub config: PathBuf,
    /// Run directory, instead of the config's [output] dir. Parts go to OUT/parts/I, the job
    /// scripts, logs and task states to OUT/slurm.
    #[arg(long)]
    pub out: Option<PathBuf>,
    /// Parts of the run, one array task each [default: [slurm] shards].
    #[arg(long)]
    pub shards: Option<usize>,
    /// Slurm partition (`--partition`) [default: [slurm] partition, else the cluster's].
    #[arg(long)]
    pub partition: Option<String>,
    /// Wall-time limit of each job (`--time`: MM, HH:MM:SS or D-HH:MM:SS).
    #[arg(long)]
    pub time: Option<String>,
    /// Memory of each job (`--mem`, e.g. 16G).
    #[arg(long)]
    pub mem: Option<String>,
    /// CPUs of each part's task (`--cpus-per-task`).
    #[arg(long)]
    pub cpus_per_task: Option<usize>,
    /// Generic resources of each part's task (`--gres`, e.g. gpu:1; the merge asks for none).
    #[arg(long)]
    pub gres: Option<String>,
    /// Account to charge (`--account`).
    #[arg(long)]
    pub account: Option<String>,
    /// Quality of service (`--qos`).
    #[arg(long)]
    pub qos: Option<String>,
    /// A further sbatch option for every job, repeatable (`--sbatch=--constraint=a100`).
    #[arg(long = "sbatch", value_name = "OPTION", allow_hyphen_values = true)]
    pub sbatch: Vec<String>,
    /// The specx binary the jobs run [default: this one]; the compute nodes must reach it.
    #[arg(long)]
    pub specx: Option<PathBuf>,
    /// Print the job scripts and the sbatch commands instead of submitting; writes nothing.
    #[arg(long)]
    pub dry_run: bool,
    /// Arguments added to every part's specx command, after `--` (`-- --limit 100`; for eval,
    /// `-- --device cuda:0`).
    #[arg(last = true, value_name = "ARGS")]
    pub pass: Vec<String>,
}

#[derive(Args, Debug)]
pub struct StatusArgs {
    /// The run directory (OUT of `specx slurm datagen|eval`).
    pub dir: PathBuf,
    /// Print the status as JSON instead of a table.
    #[arg(long)]
    pub json: bool,
}

pub fn run_cli(a: SlurmArgs) -> Result<()> {
    match a.command {
        SlurmCommand::Datagen(s) => submit::submit(Kind::Datagen, &s, &std::env::args().collect::<Vec<_>>()),
        SlurmCommand::Eval(s) => submit::submit(Kind::Eval, &s, &std::env::args().collect::<Vec<_>>()),
        SlurmCommand::Status(s) => {
            let st = status::read(&s.dir)?;
            if s.json {
                println!("{}", serde_json::to_string_pretty(&st)?);
            } else {
                print!("{}", st.render());
            }
            Ok(())
        }
    }
}
