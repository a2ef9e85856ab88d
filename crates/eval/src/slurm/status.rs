//! `specx slurm status`: where each part of a submitted run stands, read from the run
//! directory: the part's manifest (how much it has written), the state its job script
//! recorded (`OUT/slurm/state`), and, where squeue is on the PATH, whether its job is queued.

use super::job::{Job, JobRecord, Kind, quote};
use anyhow::{Context, Result};
use serde::Serialize;
use specx_decoder::report::markdown_table;
use specx_run::RunManifest;
use specx_run::part::part_dir;
use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::process::Command;

/// What a part directory holds.
#[derive(Clone, Debug)]
pub struct PartProgress {
    /// (index, count) of the part, None for a whole run.
    pub part: Option<(usize, usize)>,
    pub complete: bool,
    /// Shards (datagen) or units (eval) written, and how many the part has in all.
    pub done: usize,
    pub total: usize,
    /// Labelled rows (datagen) or result rows (eval) written.
    pub rows: u64,
    pub config_identity: serde_json::Value,
}

/// The progress of the part in `dir`; None before its run wrote a manifest.
pub fn read_part(kind: Kind, dir: &Path) -> Result<Option<PartProgress>> {
    if !dir.join("manifest.json").exists() {
        return Ok(None);
    }
    let owned = |total: usize, part: Option<(usize, usize)>| {
        part.map_or(total, |(i, n)| (0..total).filter(|k| k % n == i).count())
    };
    Ok(Some(match kind {
        Kind::Datagen => {
            let m = specx_datagen::manifest::Manifest::read(dir)?;
            let part = m.part.map(|p| (p.index, p.count));
            PartProgress {
                part,
                complete: m.complete,
                done: m.shards.len(),
                total: owned(m.shard_count, part),
                rows: m.summary.labelled_rows,
                config_identity: specx_datagen::manifest::config_identity(&m.config),
            }
        }
        Kind::Eval => {
            let m = crate::experiment::manifest::EvalManifest::read(dir)?;
            let part = m.part.map(|p| (p.index, p.count));
            let mut rows = 0;
            for f in crate::experiment::merge::unit_files(dir)? {
                rows += crate::common::results::UnitFile::read_path(&f)?.rows.len() as u64;
            }
            PartProgress {
                part,
                complete: m.complete,
                done: m.units_done,
                total: owned(m.units_total, part),
                rows,
                config_identity: crate::experiment::manifest::config_identity(&m.config),
            }
        }
    }))
}

/// The scheduler's view of `jobs` (array tasks one per line: `12_3 RUNNING`); None where
/// squeue is not on the PATH. Jobs the controller no longer knows are simply absent.
pub fn queued(jobs: &[String]) -> Result<Option<Vec<(String, String)>>> {
    if jobs.is_empty() {
        return Ok(Some(Vec::new()));
    }
    let out = match Command::new("squeue")
        .args(["--noheader", "--array", "--format=%i %T", "--jobs", &jobs.join(",")])
        .output()
    {
        Ok(o) => o,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(e).context("running squeue"),
    };
    // squeue fails on job ids it has forgotten (finished long ago): nothing of them is queued.
    let text = if out.status.success() { String::from_utf8_lossy(&out.stdout).into_owned() } else { String::new() };
    Ok(Some(
        text.lines()
            .filter_map(|l| l.split_once(' '))
            .map(|(id, st)| (id.trim().to_string(), st.trim().to_string()))
            .collect(),
    ))
}

/// What a job script last recorded: `running`, `done`, `stopped` or `exit-N`, with the job,
/// host and time.
#[derive(Clone, Debug, Default, Serialize)]
pub struct Recorded {
    pub state: String,
    pub job: String,
    pub host: String,
    pub time: String,
}

fn recorded(out: &Path, task: &str) -> Option<Recorded> {
    let text = std::fs::read_to_string(Job::state_file(out, task)).ok()?;
    let mut words = text.split_whitespace();
    let mut r = Recorded { state: words.next()?.to_string(), ..Default::default() };
    for w in words {
        match w.split_once('=') {
            Some(("job", v)) => r.job = v.into(),
            Some(("host", v)) => r.host = v.into(),
            Some(("time", v)) => r.time = v.into(),
            _ => {}
        }
    }
    Some(r)
}

#[derive(Clone, Debug, Serialize)]
pub struct TaskStatus {
    /// `part-I` or `merge`.
    pub task: String,
    /// done, queued, running, stopped, failed (exit N), lost, not started.
    pub state: String,
    /// Shards or units written of the part's, and rows (parts only).
    pub done: usize,
    pub total: usize,
    pub rows: u64,
    pub recorded: Option<Recorded>,
    pub log: PathBuf,
}

#[derive(Clone, Debug, Serialize)]
pub struct Status {
    pub dir: PathBuf,
    pub kind: Kind,
    pub shards: usize,
    /// Whether squeue answered (otherwise queued jobs show as `not started` or `running`).
    pub scheduler: bool,
    pub parts: Vec<TaskStatus>,
    pub merge: TaskStatus,
    /// The command that resubmits what is left, when nothing of the run is queued or running.
    pub resubmit: Option<String>,
}

/// The state of a task from its part's progress, the queue and what its script recorded.
fn state(complete: bool, in_queue: Option<&str>, scheduler: bool, rec: Option<&Recorded>) -> String {
    if complete {
        return "done".into();
    }
    if let Some(q) = in_queue {
        return match q {
            "PENDING" | "REQUEUED" | "REQUEUE_HOLD" | "REQUEUE_FED" => "queued".into(),
            other => other.to_lowercase(),
        };
    }
    match rec.map(|r| r.state.as_str()) {
        Some("running") if scheduler => {
            "lost (ended without a word: killed, out of memory or a node failure; see its log)".into()
        }
        Some("running") => "running".into(),
        Some("stopped") => "stopped (cancelled, preempted or out of time)".into(),
        Some("done") => "exited, unfinished".into(),
        Some(s) if s.starts_with("exit-") => format!("failed (exit {})", &s[5..]),
        Some(s) => s.to_string(),
        None => "not started".into(),
    }
}

/// Reads the status of the run `specx slurm` submitted into `dir`.
pub fn read(dir: &Path) -> Result<Status> {
    let record = JobRecord::read(dir)?.with_context(|| {
        format!("{} has no {} (was it submitted with specx slurm?)", dir.display(), JobRecord::path(dir).display())
    })?;
    let job = &record.job;
    let last = record.submissions.last();
    let ids: Vec<String> =
        last.into_iter().flat_map(|s| s.array_job.iter().chain(s.merge_job.iter())).cloned().collect();
    let queue = queued(&ids)?;
    let scheduler = queue.is_some();
    let queue: BTreeMap<String, String> = queue.unwrap_or_default().into_iter().collect();
    let logs = job.slurm_dir().join("logs");
    let mut parts = Vec::new();
    for i in 0..job.shards {
        let progress = read_part(job.kind, &part_dir(dir, i))?;
        let in_queue = last.and_then(|s| s.array_job.as_ref()).and_then(|a| queue.get(&format!("{a}_{i}")));
        let rec = recorded(dir, &format!("part-{i}"));
        let (complete, done, total, rows) =
            progress.map_or((false, 0, 0, 0), |p| (p.complete, p.done, p.total, p.rows));
        parts.push(TaskStatus {
            task: format!("part-{i}"),
            state: state(complete, in_queue.map(String::as_str), scheduler, rec.as_ref()),
            done,
            total,
            rows,
            recorded: rec,
            log: logs.join(format!("part-{i}.out")),
        });
    }
    let merged = merged(job.kind, dir);
    let rec = recorded(dir, "merge");
    let in_queue = last.and_then(|s| s.merge_job.as_ref()).and_then(|m| queue.get(m));
    let merge = TaskStatus {
        task: "merge".into(),
        state: state(merged, in_queue.map(String::as_str), scheduler, rec.as_ref()),
        done: 0,
        total: 0,
        rows: 0,
        recorded: rec,
        log: logs.join("merge.out"),
    };
    let active = |t: &TaskStatus| {
        t.state == "queued" || t.state == "running" || t.state == "configuring" || t.state == "completing"
    };
    let idle = !parts.iter().chain([&merge]).any(active);
    let resubmit =
        (merge.state != "done" && idle).then(|| record.command.iter().map(|w| quote(w)).collect::<Vec<_>>().join(" "));
    Ok(Status { dir: dir.to_path_buf(), kind: job.kind, shards: job.shards, scheduler, parts, merge, resubmit })
}

impl Status {
    /// A table of the parts, then the merge and what to do next.
    pub fn render(&self) -> String {
        let unit = match self.kind {
            Kind::Datagen => "shards",
            Kind::Eval => "units",
        };
        let rows: Vec<Vec<String>> = self
            .parts
            .iter()
            .map(|t| {
                let r = t.recorded.clone().unwrap_or_default();
                let progress =
                    if t.total == 0 && t.done == 0 { "-".into() } else { format!("{}/{} {unit}", t.done, t.total) };
                vec![t.task.clone(), t.state.clone(), progress, t.rows.to_string(), r.job, r.host, r.time]
            })
            .collect();
        let mut out = format!("{} ({} in {} parts)\n\n", self.dir.display(), self.kind.name(), self.shards);
        out += &markdown_table(&["task", "state", "written", "rows", "job", "host", "last change"], &rows);
        let done = self.parts.iter().filter(|t| t.state == "done").count();
        let rows: u64 = self.parts.iter().map(|t| t.rows).sum();
        let _ =
            writeln!(out, "\n{done} of {} parts done, {rows} rows written; merge: {}", self.shards, self.merge.state);
        if !self.scheduler {
            out += "(squeue is not on the PATH: queued jobs show as `not started`, and a job that died without a word as `running`)\n";
        }
        for t in self
            .parts
            .iter()
            .chain([&self.merge])
            .filter(|t| t.state.starts_with("failed") || t.state.starts_with("lost"))
        {
            let _ = writeln!(out, "{}: see {}", t.task, t.log.display());
        }
        if let Some(cmd) = &self.resubmit {
            let left: Vec<&str> = self.parts.iter().filter(|t| t.state != "done").map(|t| t.task.as_str()).collect();
            let what =
                if left.is_empty() { "the merge".to_string() } else { format!("{} and the merge", left.join(", ")) };
            let _ = writeln!(out, "to resubmit {what} (each part resumes from what it wrote):\n  {cmd}");
        }
        out
    }
}

/// Whether `dir` holds the finished run of `kind` merged from its parts (a whole run, not a part).
pub(super) fn merged(kind: Kind, dir: &Path) -> bool {
    match kind {
        Kind::Datagen => specx_datagen::manifest::Manifest::read(dir).is_ok_and(|m| m.complete && m.part.is_none()),
        Kind::Eval => {
            crate::experiment::manifest::EvalManifest::read(dir).is_ok_and(|m| m.complete && m.part.is_none())
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_part_that_is_finished_is_done_whatever_was_recorded_or_queued() {
        let rec = Recorded { state: "stopped".into(), ..Default::default() };
        assert_eq!(state(true, Some("RUNNING"), true, Some(&rec)), "done");
        assert_eq!(state(false, Some("PENDING"), true, Some(&rec)), "queued");
        assert_eq!(state(false, Some("RUNNING"), true, None), "running");
        assert!(state(false, None, true, Some(&rec)).starts_with("stopped"));
    }

    #[test]
    fn a_script_that_said_running_but_left_the_queue_is_lost() {
        let rec = Recorded { state: "running".into(), ..Default::default() };
        assert!(state(false, None, true, Some(&rec)).starts_with("lost"));
        assert_eq!(
            state(false, None, false, Some(&rec)),
            "running",
            "without squeue it cannot be told from a running one"
        );
        let failed = Recorded { state: "exit-101".into(), ..Default::default() };
        assert_eq!(state(false, None, true, Some(&failed)), "failed (exit 101)");
        assert_eq!(state(false, None, true, None), "not started");
    }
}
