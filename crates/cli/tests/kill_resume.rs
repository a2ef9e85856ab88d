//! Interrupted runs lose nothing. `specx datagen`, `specx eval` and `specx eval replay` are
//! killed with SIGKILL at seeded random moments and run again with the same command; each
//! chain of kills ends with a run that finishes, whose outputs must equal an uninterrupted
//! run's: the same bytes for every data file (datagen's shards, replay's rows), the same rows
//! but for the measured times for eval. At least [`KILLS`] kills per command land on a running
//! process, spread over its phases (startup, model loading, the work, the writes).

mod common;
use common::*;
use specx_testkit::files::copy;
use std::collections::BTreeMap;
use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

/// Kills per command that must land on a running process.
const KILLS: usize = 20;

/// A moment of an uninterrupted run and the number of files under its directory from then on.
#[derive(Clone, Copy, Debug)]
struct Phase {
    start: Duration,
    files: usize,
}

/// An uninterrupted run's phases, and how many files its directory held before the first
/// file of its work (`startup`: what it writes before any result).
struct Watched {
    phases: Vec<Phase>,
    startup: usize,
}

/// Runs `args` to the end while watching `out`, the directory it writes: the run's phases,
/// a new one wherever the number of files under `out` changed (startup and model loading, then
/// each write), and its end. Kills aimed phase by phase land on every phase whatever their
/// lengths (on some machines startup is nine tenths of a run, on others the writes are).
/// `work` tells the files of the run's results (relative paths) from those of its startup.
fn finish_watching(args: &[String], out: &Path, work: &dyn Fn(&str) -> bool) -> Watched {
    let mut child = specx().args(args).spawn().unwrap();
    let start = Instant::now();
    let mut phases = vec![Phase { start: Duration::ZERO, files: 0 }];
    let mut startup = None;
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break status;
        }
        let now = file_count(out);
        if now != phases.last().unwrap().files {
            phases.push(Phase { start: start.elapsed(), files: now });
            if startup.is_none() && file_names(out).iter().any(|f| work(f)) {
                startup = Some(phases[phases.len() - 2].files);
            }
        }
        std::thread::sleep(Duration::from_millis(1));
    };
    let mut err = String::new();
    std::io::Read::read_to_string(child.stderr.as_mut().unwrap(), &mut err).unwrap();
    assert!(status.success(), "specx {}: {err}", args.join(" "));
    phases.push(Phase { start: start.elapsed(), files: file_count(out) });
    let startup = startup.unwrap_or(0);
    eprintln!(
        "specx {}: phases (ms, files) {:?}, {startup} files before the first result",
        args[0],
        phases.iter().map(|p| (p.start.as_millis(), p.files)).collect::<Vec<_>>()
    );
    Watched { phases, startup }
}

/// The files under `dir` (relative paths; none if it does not exist) while a process writes
/// there: entries that vanish between listing and reading (renamed temporaries) are skipped.
fn file_names(dir: &Path) -> Vec<String> {
    let mut out = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        let Ok(entries) = std::fs::read_dir(&d) else { continue };
        for e in entries.flatten() {
            if e.path().is_dir() {
                stack.push(e.path());
            } else if let Ok(rel) = e.path().strip_prefix(dir) {
                out.push(rel.display().to_string());
            }
        }
    }
    out
}

/// The number of files under `dir` (see [`file_names`]).
fn file_count(dir: &Path) -> usize {
    file_names(dir).len()
}

/// What the kills did: how many landed on a running process, and the number of files the run
/// directory held after each (its progress when killed).
#[derive(Default, Debug)]
struct Kills {
    landed: usize,
    chains: usize,
    progress: Vec<usize>,
}

/// Runs `args` into `out` again and again, killing each process in a seeded random phase
/// while it runs, until [`KILLS`] kills have landed. A kill aims at a phase of the
/// uninterrupted run ahead of the directory's progress (its file count) and a fraction u
/// of the phase's length: it waits until the directory holds the phase's number of files (so a
/// slower or faster machine shifts the moment, not the phase), then u of the phase's length,
/// and kills at once if the process got further meanwhile. A resumed run skips done work, so
/// each chain of kills walks forward through the run; when no phase is ahead, or a resumed run
/// finishes first, `check` compares the directory with the uninterrupted run's and the next
/// chain starts from an empty directory.
fn kill_repeatedly(args: &[String], out: &Path, phases: &[Phase], seed: u64, check: &dyn Fn(&Path)) -> Kills {
    use rand::{RngExt, SeedableRng};
    let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
    let mut k = Kills::default();
    let _ = std::fs::remove_dir_all(out);
    let end_chain = |k: &mut Kills| {
        check(out);
        k.chains += 1;
        std::fs::remove_dir_all(out).unwrap();
    };
    while k.landed < KILLS {
        let done = file_count(out);
        // Phases beyond this progress (and startup, for an empty directory): a kill where the
        // run already is would only ever hit the startup of a resumed run.
        let ahead: Vec<usize> =
            (0..phases.len() - 1).filter(|&i| phases[i].files > done || (done == 0 && i == 0)).collect();
        if ahead.is_empty() {
            finish(args);
            end_chain(&mut k);
            continue;
        }
        let phase = ahead[rng.random_range(0..ahead.len())];
        let wait = (phases[phase + 1].start - phases[phase].start).mul_f64(rng.random::<f64>());
        let level = phases[phase].files;
        let mut child = specx().args(args).spawn().unwrap();
        let mut reached: Option<Instant> = None;
        let finished = loop {
            if let Some(status) = child.try_wait().unwrap() {
                break Some(status);
            }
            let now = file_count(out);
            if now > level {
                break None;
            }
            if now == level && reached.get_or_insert_with(Instant::now).elapsed() >= wait {
                break None;
            }
            std::thread::sleep(Duration::from_millis(1));
        };
        match finished {
            None => {
                child.kill().unwrap(); // SIGKILL
                child.wait().unwrap();
                k.landed += 1;
                k.progress.push(file_count(out));
            }
            Some(status) => {
                let mut err = String::new();
                std::io::Read::read_to_string(child.stderr.as_mut().unwrap(), &mut err).unwrap();
                assert!(status.success(), "a resumed run failed: specx {}: {err}", args.join(" "));
                end_chain(&mut k);
            }
        }
    }
    // The last chain, run to its end.
    finish(args);
    check(out);
    k.chains += 1;
    k
}

/// The kills landed at three or more levels of progress, and three or more of them after the
/// run had written results (beyond its `startup` files).
fn assert_spread(what: &str, k: &Kills, startup: usize) {
    let levels: std::collections::BTreeSet<_> = k.progress.iter().collect();
    let after_startup = k.progress.iter().filter(|&&p| p > startup).count();
    eprintln!(
        "{what}: {} kills in {} chains, files on disk after each kill: {:?}; {after_startup} after the {startup} startup files",
        k.landed, k.chains, k.progress
    );
    assert!(levels.len() >= 3, "{what}: every kill landed at the same progress {:?}", k.progress);
    assert!(
        after_startup >= 3,
        "{what}: {after_startup} kills landed after the {startup} startup files: {:?}",
        k.progress
    );
}

fn datagen_args(t: &Tiny, out: &Path) -> Vec<String> {
    [
        "datagen",
        "--config",
        &s(&repo().join("configs/datagen-tiny.toml")),
        "--out",
        &s(out),
        "--draft",
        &s(&t.draft),
        "--target",
        &s(&t.target),
        "--no-progress",
    ]
    .map(String::from)
    .to_vec()
}

#[test]
fn killed_datagen_resumes_to_the_same_bytes() {
    let t = tiny();
    let out = t.root.join("out");
    let args = datagen_args(&t, &out);
    // The uninterrupted run, in the same directory (the config it records names it).
    let watched = finish_watching(&args, &out, &|f| f.starts_with("tokens-"));
    let want = datagen_files(&out);
    assert!(want.len() >= 16 && want["manifest.json"].starts_with("complete true"), "{want:?}");
    let k = kill_repeatedly(&args, &out, &watched.phases, 1, &|dir| {
        assert_eq!(datagen_files(dir), want, "datagen files after kills")
    });
    assert_spread("datagen", &k, watched.startup);
}

/// A replay's files by sha256; `replay.json` without the run's path and the draft's measured
/// seconds (the rows are priced by the run's timing model, not by those).
fn replay_files(dir: &Path) -> BTreeMap<String, String> {
    let mut out = files(dir, &|f| f == "replay.json");
    let mut record: serde_json::Value =
        serde_json::from_slice(&std::fs::read(dir.join("replay.json")).unwrap()).unwrap();
    record.as_object_mut().unwrap().retain(|k, _| k != "run" && !k.ends_with("seconds"));
    out.insert("replay.json".into(), record.to_string());
    out
}

#[test]
fn killed_eval_and_replay_resume_to_the_same_rows() {
    let t = tiny();
    let config = eval_config(&t);
    let args = |dir: &Path| -> Vec<String> {
        ["eval", "--config", &s(&config), "--out", &s(dir), "--no-progress"].map(String::from).to_vec()
    };
    let full = t.root.join("full");
    let watched = finish_watching(&args(&full), &full, &|f| f.starts_with("units"));
    let want = untimed_rows(&full);
    assert_eq!(want.len(), 9 * 4, "3 prompts x 3 sampling units x (AR + 3 methods)");
    let (want_results, want_summary, want_manifest) =
        (untimed_results(&full), untimed_summary(&full), untimed_manifest(&full));
    assert_eq!(want_results.len(), want.len());
    let killed = t.root.join("killed");
    let k = kill_repeatedly(&args(&killed), &killed, &watched.phases, 2, &|dir| {
        assert_eq!(untimed_rows(dir), want, "eval rows after kills");
        assert_eq!(untimed_results(dir), want_results, "results.parquet after kills");
        assert_eq!(untimed_summary(dir), want_summary, "summary.md after kills");
        assert_eq!(untimed_manifest(dir), want_manifest, "manifest.json after kills");
        let temporaries: Vec<String> = files(dir, &|_| false).into_keys().filter(|f| f.contains(".tmp-")).collect();
        assert!(temporaries.is_empty(), "a killed write's temporaries outlived the run: {temporaries:?}");
    });
    assert_spread("eval", &k, watched.startup);

    // Replay of the finished run under another grid: its rows are exact counts and modelled
    // times, so every file it writes must be the same bytes.
    let grid = t.root.join("grid.toml");
    std::fs::write(&grid, "[methods]\nspecdec = { k = [2, 4] }\nconfidence = { thresholds = [0.5] }\n").unwrap();
    let replay_args = |run: &Path| -> Vec<String> {
        ["eval", "replay", "--config", &s(&grid), &s(run), "--no-progress"].map(String::from).to_vec()
    };
    let replay_dir = |run: &Path| run.join("replay-grid");
    let watched = finish_watching(&replay_args(&full), &replay_dir(&full), &|_| true);
    let want = replay_files(&replay_dir(&full));
    assert!(want.len() >= 4, "{want:?}");
    // A copy of the run without its replay; the kill loop empties the replay directory
    // between chains.
    let copied = t.root.join("copy");
    copy(&full, &copied);
    std::fs::remove_dir_all(replay_dir(&copied)).unwrap();
    let k = kill_repeatedly(&replay_args(&copied), &replay_dir(&copied), &watched.phases, 3, &|dir| {
        assert_eq!(replay_files(dir), want, "replay files after kills");
    });
    assert_spread("replay", &k, watched.startup);
}

/// Runs `args` with the file size limit at `kib` KiB (`ulimit -f`, SIGXFSZ ignored): a write
/// past it fails with EFBIG, as on a full disk. Returns whether it succeeded, and its stderr.
fn with_file_limit(args: &[String], kib: u64) -> (bool, String) {
    let script = format!("trap '' XFSZ; ulimit -f {kib}; exec \"$0\" \"$@\"");
    let out = Command::new("bash")
        .arg("-c")
        .arg(script)
        .arg(env!("CARGO_BIN_EXE_specx"))
        .args(args)
        .env("RUST_BACKTRACE", "0")
        .output()
        .unwrap();
    (out.status.success(), String::from_utf8_lossy(&out.stderr).into_owned())
}

/// Runs `args` (which write into `out`) once uninterrupted, then with the file size limit at
/// 1, 4, 16 and 64 KiB: each failure must name a file under `out` and leave no temporary, and
/// the same command run again must complete the same run (`snapshot` of `out` as the first).
fn fail_writes_then_rerun<T: PartialEq + std::fmt::Debug>(
    what: &str,
    args: &[String],
    out: &Path,
    snapshot: &dyn Fn(&Path) -> T,
) {
    let _ = std::fs::remove_dir_all(out);
    finish(args);
    let want = snapshot(out);
    let mut failed = Vec::new();
    for kib in [1, 4, 16, 64] {
        std::fs::remove_dir_all(out).unwrap();
        let (ok, err) = with_file_limit(args, kib);
        if !ok {
            failed.push(kib);
        }
        eprintln!(
            "{what}, files limited to {kib} KiB: {}",
            if ok { "finished".to_string() } else { err.trim().replace('\n', " | ") }
        );
        assert!(ok || err.contains(&s(out)), "the error does not name the file: {err}");
        let temporaries: Vec<String> = files(out, &|_| false).into_keys().filter(|f| f.contains(".tmp-")).collect();
        assert!(temporaries.is_empty(), "a failed write left {temporaries:?}");
        finish(args);
        assert_eq!(snapshot(out), want, "{what} after a failed write ({kib} KiB)");
    }
    // Otherwise no write ever failed, and nothing above was tested.
    assert!(!failed.is_empty(), "{what}: no file size limit made a write fail");
}

#[test]
fn a_failed_write_is_reported_and_a_rerun_completes_the_same_run() {
    let t = tiny();
    let out = t.root.join("out");
    fail_writes_then_rerun("datagen", &datagen_args(&t, &out), &out, &datagen_files);
    let eval =
        ["eval", "--config", &s(&eval_config(&t)), "--out", &s(&out), "--no-progress"].map(String::from).to_vec();
    fail_writes_then_rerun("eval", &eval, &out, &untimed_rows);
}
