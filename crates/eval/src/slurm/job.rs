//! One submission of a run as a job array: what it runs and with what resources, the two job
//! scripts it writes (`OUT/slurm/parts.sh`, `OUT/slurm/merge.sh`), and the record of every
//! submission of the run (`OUT/slurm/jobs.json`), which `specx slurm status` reads.

use anyhow::{Context, Result};
use serde::{Deserialize, Serialize};
use specx_decoder::fsutil::write_atomic;
use specx_run::slurm::SlurmConfig;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};

pub const SLURM_DIR: &str = "slurm";
pub const JOBS: &str = "jobs.json";
pub const PARTS_SCRIPT: &str = "parts.sh";
pub const MERGE_SCRIPT: &str = "merge.sh";

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Kind {
    Datagen,
    Eval,
}

impl Kind {
    pub fn name(self) -> &'static str {
        match self {
            Kind::Datagen => "datagen",
            Kind::Eval => "eval",
        }
    }
}

/// What runs: the same for every submission of a run directory.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Job {
    pub kind: Kind,
    /// The run directory (absolute).
    pub out: PathBuf,
    /// The config (absolute).
    pub config: PathBuf,
    pub shards: usize,
    /// The specx binary the jobs run (absolute).
    pub specx: PathBuf,
    /// Where the jobs start (the submitting shell's directory).
    pub workdir: PathBuf,
    /// The model and prompt caches the jobs use (`SPECX_MODELS`, `SPECX_DATASETS`), as set
    /// where the run was submitted.
    pub env: Vec<(String, String)>,
    /// Arguments added to every part's command.
    pub pass: Vec<String>,
    pub resources: SlurmConfig,
}

/// `--array` of a set of tasks: `0-3`, `1,3`, `0-2,5`.
pub fn array_spec(tasks: &[usize]) -> String {
    let mut runs: Vec<(usize, usize)> = Vec::new();
    for &t in tasks {
        match runs.last_mut() {
            Some((_, hi)) if *hi + 1 == t => *hi = t,
            _ => runs.push((t, t)),
        }
    }
    runs.iter()
        .map(|&(lo, hi)| if lo == hi { lo.to_string() } else { format!("{lo}-{hi}") })
        .collect::<Vec<_>>()
        .join(",")
}

/// A word for a shell: single-quoted unless it is plain.
pub fn quote(word: &str) -> String {
    let plain = !word.is_empty() && word.chars().all(|c| c.is_ascii_alphanumeric() || "-_./=:,+@%".contains(c));
    if plain { word.to_string() } else { format!("'{}'", word.replace('\'', "'\\''")) }
}

fn q(p: &Path) -> String {
    quote(&p.display().to_string())
}

impl Job {
    pub fn slurm_dir(&self) -> PathBuf {
        self.out.join(SLURM_DIR)
    }

    /// The file a task writes its state to (`running`, `done`, `stopped`, `exit-N`).
    pub fn state_file(out: &Path, task: &str) -> PathBuf {
        out.join(SLURM_DIR).join("state").join(task)
    }

    fn name(&self) -> String {
        let run = self.out.file_name().map_or("run".into(), |n| n.to_string_lossy().into_owned());
        format!("specx-{}-{run}", self.kind.name())
    }

    /// `#SBATCH` lines shared by both jobs.
    fn common_options(&self, s: &mut String, log: &str) {
        let r = &self.resources;
        let _ = writeln!(s, "#SBATCH --output={}", q(&self.slurm_dir().join("logs").join(log)));
        let _ = writeln!(s, "#SBATCH --open-mode=append");
        for (flag, v) in
            [("partition", &r.partition), ("time", &r.time), ("mem", &r.mem), ("account", &r.account), ("qos", &r.qos)]
        {
            if let Some(v) = v {
                let _ = writeln!(s, "#SBATCH --{flag}={}", quote(v));
            }
        }
        for o in &r.sbatch {
            let _ = writeln!(s, "#SBATCH {o}");
        }
    }

    /// What every job runs first: its directory, the caches, the config's setup lines, and
    /// `mark`, which records the task's state atomically (`OUT/slurm/state/TASK`).
    fn prologue(&self, s: &mut String, task: &str) {
        s.push_str("set -uo pipefail\n");
        let _ = writeln!(s, "cd {}", q(&self.workdir));
        for (k, v) in &self.env {
            let _ = writeln!(s, "export {k}={}", quote(v));
        }
        for line in &self.resources.setup {
            let _ = writeln!(s, "{line}");
        }
        let _ = writeln!(s, "state={}/{task}", q(&self.slurm_dir().join("state")));
        s.push_str("mark() { printf '%s job=%s host=%s time=%s\\n' \"$1\" \"$job\" \"$(hostname)\" \"$(date -u +%Y-%m-%dT%H:%M:%SZ)\" > \"$state.tmp\" && mv -f \"$state.tmp\" \"$state\"; }\n");
    }

    /// Runs `command` in the background so that a TERM (preemption, scancel, the time limit)
    /// is recorded as `stopped` before the job ends; records `done` or `exit-N` otherwise.
    fn run_and_mark(s: &mut String, command: &str) {
        s.push_str("mark running\npid=\ntrap 'mark stopped; [ -n \"$pid\" ] && kill -TERM \"$pid\" 2>/dev/null; wait; exit 143' TERM INT\n");
        let _ = writeln!(s, "{command} &");
        s.push_str("pid=$!\nwait \"$pid\"\nrc=$?\nif [ \"$rc\" -eq 0 ]; then mark done; else mark \"exit-$rc\"; fi\nexit \"$rc\"\n");
    }

    /// The array job's script: task i runs part i.
    pub fn parts_script(&self, tasks: &[usize]) -> String {
        let mut s = String::from("#!/bin/bash\n");
        let _ = writeln!(
            s,
            "# specx {} of {}, part $SLURM_ARRAY_TASK_ID of {} (written by specx slurm).",
            self.kind.name(),
            self.out.display(),
            self.shards
        );
        s.push_str("# A task that is requeued (preemption, scontrol requeue) or resubmitted resumes from its part directory.\n");
        let _ = writeln!(s, "#SBATCH --job-name={}", quote(&self.name()));
        let _ = writeln!(s, "#SBATCH --array={}", array_spec(tasks));
        s.push_str("#SBATCH --requeue\n");
        self.common_options(&mut s, "part-%a.out");
        let r = &self.resources;
        if let Some(c) = r.cpus_per_task {
            let _ = writeln!(s, "#SBATCH --cpus-per-task={c}");
        }
        if let Some(g) = &r.gres {
            let _ = writeln!(s, "#SBATCH --gres={}", quote(g));
        }
        s.push_str("part=$SLURM_ARRAY_TASK_ID\njob=${SLURM_ARRAY_JOB_ID}_$part\n");
        self.prologue(&mut s, "part-$part");
        s.push_str("echo \"specx slurm: part $part, job $job, attempt ${SLURM_RESTART_COUNT:-0}, host $(hostname), $(date -u +%Y-%m-%dT%H:%M:%SZ)\"\n");
        let mut cmd = vec![q(&self.specx), self.kind.name().into(), "--config".into(), q(&self.config)];
        cmd.extend(["--out".into(), format!("{}/\"$part\"", q(&self.out.join("parts")))]);
        cmd.extend(["--shard".into(), format!("\"$part/{}\"", self.shards), "--no-progress".into()]);
        cmd.extend(self.pass.iter().map(|a| quote(a)));
        Self::run_and_mark(&mut s, &cmd.join(" "));
        s
    }

    /// The merge job's script.
    pub fn merge_script(&self) -> String {
        let mut s = String::from("#!/bin/bash\n");
        let _ = writeln!(
            s,
            "# specx {} of {}: merge its {} parts (written by specx slurm).",
            self.kind.name(),
            self.out.display(),
            self.shards
        );
        let _ = writeln!(s, "#SBATCH --job-name={}", quote(&format!("{}-merge", self.name())));
        self.common_options(&mut s, "merge.out");
        s.push_str("job=$SLURM_JOB_ID\n");
        self.prologue(&mut s, "merge");
        let parts: Vec<String> = (0..self.shards).map(|i| q(&specx_run::part::part_dir(&self.out, i))).collect();
        let cmd = format!("{} {} merge --out {} {}", q(&self.specx), self.kind.name(), q(&self.out), parts.join(" "));
        Self::run_and_mark(&mut s, &cmd);
        s
    }
}

/// One sbatch call pair: the array's tasks and the two job ids.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Submission {
    /// UTC, when it was submitted.
    pub time: String,
    pub tasks: Vec<usize>,
    /// The array job's id (None when every part was already finished).
    pub array_job: Option<String>,
    /// The merge job's id (None when its sbatch failed).
    pub merge_job: Option<String>,
}

/// `OUT/slurm/jobs.json`: the run's job and every submission, oldest first.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct JobRecord {
    pub job: Job,
    /// The command that submitted it, as typed: what resubmits the unfinished parts.
    pub command: Vec<String>,
    pub submissions: Vec<Submission>,
}

impl JobRecord {
    pub fn path(out: &Path) -> PathBuf {
        out.join(SLURM_DIR).join(JOBS)
    }

    /// The record of `out`, if `specx slurm` submitted it.
    pub fn read(out: &Path) -> Result<Option<Self>> {
        let p = Self::path(out);
        if !p.exists() {
            return Ok(None);
        }
        let bytes = std::fs::read(&p).with_context(|| format!("reading {}", p.display()))?;
        Ok(Some(serde_json::from_slice(&bytes).with_context(|| format!("{}: malformed job record", p.display()))?))
    }

    pub fn write(&self) -> Result<()> {
        write_atomic(&Self::path(&self.job.out), serde_json::to_string_pretty(self)?.as_bytes())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn job() -> Job {
        Job {
            kind: Kind::Datagen,
            out: "/runs/my run".into(),
            config: "/cfg/d.toml".into(),
            shards: 4,
            specx: "/bin/specx".into(),
            workdir: "/w".into(),
            env: vec![("SPECX_MODELS".into(), "/m".into())],
            pass: vec!["--device".into(), "cuda:0".into()],
            resources: SlurmConfig {
                partition: Some("gpu".into()),
                gres: Some("gpu:1".into()),
                sbatch: vec!["--constraint=a100".into()],
                setup: vec!["module load cuda".into()],
                ..Default::default()
            },
        }
    }

    #[test]
    fn array_specs_group_runs() {
        assert_eq!(array_spec(&[0, 1, 2, 3]), "0-3");
        assert_eq!(array_spec(&[1, 3]), "1,3");
        assert_eq!(array_spec(&[0, 1, 2, 5, 7, 8]), "0-2,5,7-8");
    }

    #[test]
    fn quoting_keeps_a_word_one_word() {
        assert_eq!(quote("/a/b-c_1.toml"), "/a/b-c_1.toml");
        assert_eq!(quote("my run"), "'my run'");
        assert_eq!(quote("it's"), "'it'\\''s'");
        assert_eq!(quote(""), "''");
    }

    #[test]
    fn the_parts_script_runs_part_i_into_its_directory_with_the_resources() {
        let s = job().parts_script(&[1, 3]);
        assert!(s.starts_with("#!/bin/bash\n"));
        for want in [
            "#SBATCH --array=1,3\n",
            "#SBATCH --requeue\n",
            "#SBATCH --partition=gpu\n",
            "#SBATCH --gres=gpu:1\n",
            "#SBATCH --constraint=a100\n",
            "#SBATCH --output='/runs/my run/slurm/logs/part-%a.out'\n",
            "export SPECX_MODELS=/m\n",
            "module load cuda\n",
            "/bin/specx datagen --config /cfg/d.toml --out '/runs/my run/parts'/\"$part\" --shard \"$part/4\" --no-progress --device cuda:0 &\n",
        ] {
            assert!(s.contains(want), "missing {want:?} in\n{s}");
        }
        // Every #SBATCH line comes before the first command, or sbatch ignores it.
        let first_command = s.lines().position(|l| !l.starts_with('#')).unwrap();
        assert!(s.lines().skip(first_command).all(|l| !l.starts_with("#SBATCH")), "{s}");
    }

    #[test]
    fn the_merge_script_names_every_part_and_asks_for_no_gpu() {
        let s = job().merge_script();
        assert!(s.contains("/bin/specx datagen merge --out '/runs/my run' '/runs/my run/parts/0' '/runs/my run/parts/1' '/runs/my run/parts/2' '/runs/my run/parts/3' &\n"), "{s}");
        assert!(!s.contains("--gres") && !s.contains("--array"), "{s}");
    }
}
