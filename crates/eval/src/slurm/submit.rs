//! `specx slurm datagen|eval`: checks the config and the parts already in the run directory
//! (before anything is queued), writes the job scripts and submits the unfinished parts as one
//! array and the merge as a job that waits for all of them (`afterok`; Slurm cancels it if a
//! part fails, and `specx slurm status` says what to resubmit).

use super::SubmitArgs;
use super::job::{Job, JobRecord, Kind, MERGE_SCRIPT, PARTS_SCRIPT, Submission, quote};
use super::status::{PartProgress, queued, read_part};
use crate::experiment::config::EvalConfig;
use anyhow::{Context, Result, bail, ensure};
use specx_datagen::config::DatagenConfig;
use specx_decoder::fsutil::write_atomic;
use specx_run::RunConfig;
use specx_run::config::read_toml;
use specx_run::manifest::identity_difference;
use specx_run::part::part_dir;
use specx_run::paths::resolve_path;
use specx_run::slurm::SlurmConfig;
use std::path::{Path, PathBuf};
use std::process::Command;

/// The config as the parts will read it: its run directory, its `[slurm]` section, and the
/// part of the run identity it decides (what every part already there must share).
struct Checked {
    out: PathBuf,
    slurm: SlurmConfig,
    identity: serde_json::Value,
    /// The most parts the run can have (eval: its units), where known before loading models.
    max_parts: Option<usize>,
    /// What the run will not find (a dry run only warns).
    missing: Option<String>,
}

/// Checks a datagen or eval config the way its run will, on any device: the run's device is
/// checked where it runs (a login node may have no GPU).
fn check_config(kind: Kind, config: &Path, out: Option<&PathBuf>) -> Result<Checked> {
    let cwd = std::env::current_dir()?;
    let why = || format!("config {}", config.display());
    let one_process = "[models] devices runs several parts in one process; a job array runs one part per task: remove it (a task's device is [models] device, or for eval `-- --device cuda:0`)";
    match kind {
        Kind::Datagen => {
            let mut cfg = DatagenConfig::load(config)?;
            if let Some(o) = out {
                cfg.output.dir = resolve_path(o, &cwd);
            }
            ensure!(cfg.models.devices.is_empty(), "{}: {one_process}", why());
            let mut here = cfg.clone();
            here.models.device = "cpu".into();
            here.validate().with_context(why)?;
            let prompts = &cfg.prompts.path;
            let missing = (!prompts.to_string_lossy().starts_with("hf:") && !prompts.is_file())
                .then(|| format!("{}: prompt file {} not found", why(), prompts.display()));
            Ok(Checked {
                out: cfg.output.dir.clone(),
                slurm: cfg.slurm.clone().unwrap_or_default(),
                identity: specx_datagen::manifest::config_identity(&cfg),
                max_parts: None,
                missing,
            })
        }
        Kind::Eval => {
            let (mut cfg, base): (EvalConfig, PathBuf) = read_toml(config)?;
            cfg.resolve(&base);
            if let Some(o) = out {
                cfg.output.dir = resolve_path(o, &cwd);
            }
            ensure!(cfg.models.devices.is_empty(), "{}: {one_process}", why());
            let mut here = cfg.clone();
            here.models.device = "cpu".into();
            let plan = crate::experiment::check::check(&here, None).with_context(why)?;
            Ok(Checked {
                out: cfg.output.dir.clone(),
                slurm: cfg.slurm.clone().unwrap_or_default(),
                identity: crate::experiment::manifest::config_identity(&cfg),
                max_parts: Some(plan.units),
                missing: None,
            })
        }
    }
}

/// Flags over the config's `[slurm]`.
fn resources(a: &SubmitArgs, cfg: SlurmConfig) -> SlurmConfig {
    let pick = |flag: &Option<String>, c: Option<String>| flag.clone().or(c);
    let mut sbatch = cfg.sbatch;
    sbatch.extend(a.sbatch.iter().cloned());
    SlurmConfig {
        shards: a.shards.or(cfg.shards),
        partition: pick(&a.partition, cfg.partition),
        time: pick(&a.time, cfg.time),
        mem: pick(&a.mem, cfg.mem),
        cpus_per_task: a.cpus_per_task.or(cfg.cpus_per_task),
        gres: pick(&a.gres, cfg.gres),
        account: pick(&a.account, cfg.account),
        qos: pick(&a.qos, cfg.qos),
        sbatch,
        setup: cfg.setup,
    }
}

/// The parts already in `out`: each must be part i of `shards` of the same config; none may
/// lie beyond them.
fn existing_parts(
    kind: Kind,
    out: &Path,
    shards: usize,
    identity: &serde_json::Value,
) -> Result<Vec<Option<PartProgress>>> {
    let mut parts = Vec::new();
    for i in 0..shards {
        let dir = part_dir(out, i);
        let Some(p) = read_part(kind, &dir)? else {
            parts.push(None);
            continue;
        };
        if p.part != Some((i, shards)) {
            let was = p.part.map_or("a whole run".to_string(), |(i, n)| format!("part {i} of {n}"));
            bail!(
                "{} holds {was}, not part {i} of {shards}: the run was split another way; use that many --shards or another --out",
                dir.display()
            );
        }
        if p.config_identity != *identity {
            bail!(
                "{} was made from another config ({} differs); delete it or use another --out",
                dir.display(),
                identity_difference(&p.config_identity, identity)
            );
        }
        parts.push(Some(p));
    }
    let beyond = part_dir(out, shards);
    ensure!(
        !beyond.exists(),
        "{} exists: the run was split into more than {shards} parts before; use that many --shards or another --out",
        beyond.display()
    );
    Ok(parts)
}

/// Runs sbatch with `args`; returns the job id it prints (`--parsable`: `ID` or `ID;CLUSTER`).
fn sbatch(args: &[String]) -> Result<String> {
    let out = Command::new("sbatch")
        .arg("--parsable")
        .args(args)
        .output()
        .context("running sbatch (is Slurm's client on the PATH?)")?;
    ensure!(out.status.success(), "sbatch {} failed: {}", args.join(" "), String::from_utf8_lossy(&out.stderr).trim());
    let text = String::from_utf8_lossy(&out.stdout);
    let id = text.trim().split(';').next().unwrap_or_default().to_string();
    ensure!(!id.is_empty() && id.chars().all(|c| c.is_ascii_digit()), "sbatch printed no job id: {text:?}");
    Ok(id)
}

fn utc_now() -> String {
    let out = Command::new("date").args(["-u", "+%Y-%m-%dT%H:%M:%SZ"]).output();
    out.ok().map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string()).unwrap_or_default()
}

pub fn submit(kind: Kind, a: &SubmitArgs, argv: &[String]) -> Result<()> {
    let cwd = std::env::current_dir()?;
    let config = resolve_path(&a.config, &cwd);
    let checked = check_config(kind, &config, a.out.as_ref())?;
    if let Some(m) = &checked.missing {
        ensure!(a.dry_run, "{m}");
        eprintln!("warning: {m}");
    }
    let resources = resources(a, checked.slurm);
    let shards = resources.shards.context("how many parts? --shards N, or shards in the config's [slurm] section")?;
    ensure!(shards >= 1, "--shards must be at least 1");
    if let Some(max) = checked.max_parts {
        ensure!(shards <= max, "{shards} parts for {max} units: at most {max} (a part is one or more units)");
    }
    let out = checked.out;
    let specx = match &a.specx {
        Some(p) => resolve_path(p, &cwd),
        None => std::env::current_exe().context("finding this specx binary (pass --specx)")?,
    };
    let env = ["SPECX_MODELS", "SPECX_DATASETS"]
        .into_iter()
        .filter_map(|k| std::env::var(k).ok().map(|v| (k.to_string(), v)))
        .collect();
    let job = Job { kind, out: out.clone(), config, shards, specx, workdir: cwd, env, pass: a.pass.clone(), resources };

    let record = JobRecord::read(&out)?;
    if let Some(r) = &record {
        ensure!(
            r.job.kind == kind,
            "{} holds a {} run submitted by specx slurm, not {}",
            out.display(),
            r.job.kind.name(),
            kind.name()
        );
        if let Some(last) = r.submissions.last() {
            let ids: Vec<String> = last.array_job.iter().chain(last.merge_job.iter()).cloned().collect();
            if let Some(q) = queued(&ids)? {
                ensure!(
                    q.is_empty(),
                    "jobs of the last submission to {} are still queued or running ({}); wait for them or scancel {}",
                    out.display(),
                    q.iter().map(|(id, st)| format!("{id} {st}")).collect::<Vec<_>>().join(", "),
                    ids.join(" ")
                );
            }
        }
    }
    if super::status::merged(kind, &out) {
        eprintln!("{} already holds the finished, merged run: nothing to submit", out.display());
        return Ok(());
    }
    let parts = existing_parts(kind, &out, shards, &checked.identity)?;
    let tasks: Vec<usize> = (0..shards).filter(|&i| !parts[i].as_ref().is_some_and(|p| p.complete)).collect();

    let parts_script = job.parts_script(&tasks);
    let merge_script = job.merge_script();
    let dir = job.slurm_dir();
    let (parts_path, merge_path) = (dir.join(PARTS_SCRIPT), dir.join(MERGE_SCRIPT));
    let mut merge_args: Vec<String> = Vec::new();
    if !tasks.is_empty() {
        merge_args.extend(["--dependency=afterok:$ARRAY_JOB".into(), "--kill-on-invalid-dep=yes".into()]);
    }
    if a.dry_run {
        if !tasks.is_empty() {
            println!("# sbatch --parsable {}\n{parts_script}", parts_path.display());
        }
        println!("# sbatch --parsable {} {}\n{merge_script}", merge_args.join(" "), merge_path.display());
        eprintln!(
            "dry run: {} of {shards} parts to run ({}), then the merge; nothing was written or submitted",
            tasks.len(),
            super::job::array_spec(&tasks)
        );
        return Ok(());
    }

    for sub in ["logs", "state"] {
        std::fs::create_dir_all(dir.join(sub)).with_context(|| format!("creating {}", dir.join(sub).display()))?;
    }
    // A resubmitted task starts without its last attempt's state (status then reads the queue).
    for name in tasks.iter().map(|i| format!("part-{i}")).chain(["merge".to_string()]) {
        let _ = std::fs::remove_file(Job::state_file(&out, &name));
    }
    write_atomic(&parts_path, parts_script.as_bytes())?;
    write_atomic(&merge_path, merge_script.as_bytes())?;
    let mut record = record.unwrap_or(JobRecord { job: job.clone(), command: argv.to_vec(), submissions: Vec::new() });
    record.job = job;
    record.command = argv.to_vec();
    let array_job = if tasks.is_empty() { None } else { Some(sbatch(&[parts_path.display().to_string()])?) };
    let merge_args: Vec<String> = merge_args
        .iter()
        .map(|s| s.replace("$ARRAY_JOB", array_job.as_deref().unwrap_or_default()))
        .chain([merge_path.display().to_string()])
        .collect();
    let merge_job = match sbatch(&merge_args) {
        Ok(id) => Some(id),
        Err(e) => {
            record.submissions.push(Submission {
                time: utc_now(),
                tasks: tasks.clone(),
                array_job: array_job.clone(),
                merge_job: None,
            });
            record.write()?;
            return Err(e.context(format!("the parts were submitted (job {}), the merge was not: run the same command again once they have finished", array_job.unwrap_or_default())));
        }
    };
    record.submissions.push(Submission {
        time: utc_now(),
        tasks: tasks.clone(),
        array_job: array_job.clone(),
        merge_job: merge_job.clone(),
    });
    record.write()?;
    match &array_job {
        Some(id) => eprintln!(
            "submitted job {id}: parts {} of {shards} (array), and job {} to merge them once all have succeeded",
            super::job::array_spec(&tasks),
            merge_job.unwrap_or_default()
        ),
        None => eprintln!("every part is finished: submitted job {} to merge them", merge_job.unwrap_or_default()),
    }
    eprintln!("follow it with: specx slurm status {}", quote(&out.display().to_string()));
    Ok(())
}
