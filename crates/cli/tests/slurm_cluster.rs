//! Datagen and eval as Slurm job arrays on a real scheduler: scripts/test-slurm.sh starts a
//! one-node cluster on this machine (munged, slurmctld, slurmd) and runs this file with
//! `--ignored`. The merged outputs of 4-part arrays must equal a one-process run's, byte for
//! byte for datagen and row for row (measured times aside) for eval; a part cancelled mid-run
//! (scancel) and resubmitted, and a part requeued mid-run (scontrol requeue), resume from
//! their part directories and the merge is still the same.

mod common;
use common::*;
use specx_run::RunManifest;
use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

fn status(out: &Path) -> serde_json::Value {
    let (ok, json, err) = run_specx(&["slurm", "status", "--json", &s(out)]);
    assert!(ok, "specx slurm status: {err}");
    serde_json::from_str(&json).unwrap()
}

fn states(st: &serde_json::Value) -> Vec<String> {
    st["parts"]
        .as_array()
        .unwrap()
        .iter()
        .chain([&st["merge"]])
        .map(|t| t["state"].as_str().unwrap().to_string())
        .collect()
}

/// Waits until no task of the run in `out` is queued or running; returns its last status.
fn settle(out: &Path) -> serde_json::Value {
    let start = Instant::now();
    loop {
        let st = status(out);
        let now = states(&st);
        if !now.iter().any(|x| ["queued", "running", "configuring", "completing"].contains(&x.as_str())) {
            let (_, table, _) = run_specx(&["slurm", "status", &s(out)]);
            eprintln!("{table}");
            return st;
        }
        assert!(
            start.elapsed() < Duration::from_secs(600),
            "the run in {} did not settle in 10 min: {now:?}\n{}",
            out.display(),
            logs(out)
        );
        std::thread::sleep(Duration::from_millis(500));
    }
}

/// Every job log of the run, for failure messages.
fn logs(out: &Path) -> String {
    let mut text = String::new();
    if let Ok(entries) = std::fs::read_dir(out.join("slurm/logs")) {
        for e in entries.flatten() {
            text += &format!("--- {}\n{}\n", e.path().display(), std::fs::read_to_string(e.path()).unwrap_or_default());
        }
    }
    text
}

/// Submits `args` (a `specx slurm datagen|eval` command); returns its stderr.
fn submit(args: &[&str]) -> String {
    let (ok, _, err) = run_specx(args);
    assert!(ok, "specx {}: {err}", args.join(" "));
    eprintln!("{}", err.trim());
    err
}

fn all_done(st: &serde_json::Value, out: &Path) {
    assert!(states(st).iter().all(|s| s == "done"), "{:?}\n{}", states(st), logs(out));
}

/// The job id of array task `task` of the last submission.
fn array_task(out: &Path, task: usize) -> String {
    let record: serde_json::Value =
        serde_json::from_slice(&std::fs::read(out.join("slurm/jobs.json")).unwrap()).unwrap();
    let last = record["submissions"].as_array().unwrap().last().unwrap();
    format!("{}_{task}", last["array_job"].as_str().unwrap())
}

/// Waits until part `task` of the run in `out` is running and has written some but not all of
/// its shards, then runs `command` with its job id; panics if the part finishes first.
fn interrupt_mid_run(out: &Path, task: usize, command: &[&str]) {
    let start = Instant::now();
    let part = out.join(format!("parts/{task}"));
    loop {
        let m = specx_datagen::manifest::Manifest::read(&part).ok();
        assert!(
            !m.as_ref().is_some_and(|m| m.complete),
            "part {task} finished before it could be interrupted: give it more work"
        );
        if m.is_some_and(|m| !m.shards.is_empty()) {
            break;
        }
        assert!(start.elapsed() < Duration::from_secs(300), "part {task} wrote nothing in 5 min\n{}", logs(out));
        std::thread::sleep(Duration::from_millis(20));
    }
    let job = array_task(out, task);
    let o = Command::new(command[0]).args(&command[1..]).arg(&job).output().unwrap();
    assert!(o.status.success(), "{} {job}: {}", command.join(" "), String::from_utf8_lossy(&o.stderr));
    eprintln!("{} {job}: part {task} interrupted mid-run", command.join(" "));
}

#[test]
#[ignore = "needs a Slurm cluster: scripts/test-slurm.sh starts one and runs this"]
fn four_part_arrays_merge_to_a_one_process_run() {
    let t = tiny();
    let cfg = datagen_config(&t, "datagen.toml", 16, "");
    let whole = t.root.join("datagen-whole");
    finish(&["datagen", "--config", &s(&cfg), "--out", &s(&whole), "--no-progress"].map(String::from));
    let out = t.root.join("datagen-slurm");
    submit(&["slurm", "datagen", "--config", &s(&cfg), "--out", &s(&out), "--shards", "4"]);
    all_done(&settle(&out), &out);
    assert_eq!(datagen_files(&out), datagen_files(&whole), "datagen: 4 array tasks + merge vs one process");

    let ecfg = eval_config(&t);
    let whole = t.root.join("eval-whole");
    finish(&["eval", "--config", &s(&ecfg), "--out", &s(&whole), "--no-progress"].map(String::from));
    let out = t.root.join("eval-slurm");
    submit(&["slurm", "eval", "--config", &s(&ecfg), "--out", &s(&out), "--shards", "4"]);
    all_done(&settle(&out), &out);
    assert_eq!(untimed_rows(&out), untimed_rows(&whole), "eval: 4 array tasks + merge vs one process");
    assert!(out.join("results.parquet").is_file() && out.join("summary.md").is_file());
}

#[test]
#[ignore = "needs a Slurm cluster: scripts/test-slurm.sh starts one and runs this"]
fn a_cancelled_part_is_resubmitted_and_a_requeued_part_resumes_to_the_same_data() {
    // 4 parts of 10 shards each: long enough to be caught between two shards.
    let t = tiny();
    let cfg = datagen_config(&t, "datagen.toml", 200, "[slurm]\nshards = 4\n");
    let whole = t.root.join("whole");
    finish(&["datagen", "--config", &s(&cfg), "--out", &s(&whole), "--no-progress"].map(String::from));
    let want = datagen_files(&whole);

    let out = t.root.join("cancelled");
    let args = ["slurm", "datagen", "--config", &s(&cfg), "--out", &s(&out)];
    submit(&args);
    interrupt_mid_run(&out, 1, &["scancel"]);
    let st = settle(&out);
    let s1 = st["parts"][1]["state"].as_str().unwrap();
    assert!(s1.starts_with("stopped"), "part 1 after scancel: {s1}\n{}", logs(&out));
    assert_ne!(st["merge"]["state"], "done", "the merge ran without part 1");
    assert!(st["resubmit"].as_str().is_some_and(|c| c.contains("slurm datagen")), "{st}");
    // A merge before its part is finished names it.
    let parts: Vec<String> = (0..4).map(|i| s(&out.join(format!("parts/{i}")))).collect();
    let (ok, _, err) = run_specx(&["datagen", "merge", "--out", &s(&out), &parts[0], &parts[1], &parts[2], &parts[3]]);
    assert!(!ok && err.contains(&parts[1]) && err.contains("unfinished"), "{err}");
    // The same command again submits part 1 alone, and the merge.
    let err = submit(&args);
    assert!(err.contains("parts 1 of 4"), "{err}");
    all_done(&settle(&out), &out);
    assert_eq!(datagen_files(&out), want, "datagen after a cancelled part was resubmitted");

    let out = t.root.join("requeued");
    let args = ["slurm", "datagen", "--config", &s(&cfg), "--out", &s(&out)];
    submit(&args);
    interrupt_mid_run(&out, 2, &["scontrol", "requeue"]);
    all_done(&settle(&out), &out);
    let log = std::fs::read_to_string(out.join("slurm/logs/part-2.out")).unwrap();
    assert!(log.contains("attempt 1"), "part 2 did not run again after its requeue:\n{log}");
    assert_eq!(datagen_files(&out), want, "datagen after a part was requeued mid-run");
}
