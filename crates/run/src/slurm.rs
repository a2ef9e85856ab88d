//! `[slurm]` of a datagen or eval config: the resources of the job array that `specx slurm`
//! submits for it (each field is also a flag there, which wins). Not part of a run's identity:
//! the same data made with more memory or on another partition is the same run.

use serde::{Deserialize, Serialize};

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SlurmConfig {
    /// Parts of the run: one array task each (`--shard i/N`).
    pub shards: Option<usize>,
    /// `--partition`.
    pub partition: Option<String>,
    /// Wall-time limit of each task (`--time`: `MM`, `HH:MM:SS` or `D-HH:MM:SS`).
    pub time: Option<String>,
    /// Memory of each task (`--mem`, e.g. `16G`).
    pub mem: Option<String>,
    /// `--cpus-per-task`.
    pub cpus_per_task: Option<usize>,
    /// Generic resources of each shard task (`--gres`, e.g. `gpu:1`); the merge asks for none.
    pub gres: Option<String>,
    /// `--account`.
    pub account: Option<String>,
    /// `--qos`.
    pub qos: Option<String>,
    /// Further sbatch options for every job, one per entry (`--constraint=a100`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub sbatch: Vec<String>,
    /// Shell lines every job runs before specx (`module load cuda/12.4`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub setup: Vec<String>,
}
