//! Helpers shared by the CLI's end-to-end tests.
#![allow(dead_code)] // not every test binary uses each

use sha2::{Digest, Sha256};
use specx_run::RunManifest;
pub use specx_testkit::paths::{alpaca, repo};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

/// A path as a command-line argument.
pub fn s(p: &Path) -> String {
    p.display().to_string()
}

/// Every regular file under `dir` (relative path -> sha256), but the ones `skip` names and
/// those of a sharded run's parts and job files (`dir/parts`, `dir/slurm`).
pub fn files(dir: &Path, skip: &dyn Fn(&str) -> bool) -> BTreeMap<String, String> {
    let mut out = BTreeMap::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).unwrap() {
            let p = e.unwrap().path();
            if p.is_dir() {
                if d == dir && (p.ends_with("parts") || p.ends_with("slurm")) {
                    continue;
                }
                stack.push(p);
            } else {
                let rel = p.strip_prefix(dir).unwrap().display().to_string();
                if !skip(&rel) {
                    out.insert(rel, format!("{:x}", Sha256::digest(std::fs::read(&p).unwrap())));
                }
            }
        }
    }
    out
}

/// The tiny synthetic pair (character tokenizer), written into a temporary directory.
pub struct Tiny {
    _tmp: tempfile::TempDir,
    pub root: PathBuf,
    pub draft: PathBuf,
    pub target: PathBuf,
}

pub fn tiny() -> Tiny {
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path().to_path_buf();
    let (draft, target) = specx_decoder::synthetic::write_tiny_char_pair(&root, 7, 0.35).unwrap();
    Tiny { _tmp: tmp, root, draft, target }
}

/// A datagen run's files by sha256: the data (shards, prompts) as written; the shard records
/// and the manifest, which also say how long each part took, with those times zeroed; the run's
/// config without where it was written (two directories holding the same run compare equal).
pub fn datagen_files(dir: &Path) -> BTreeMap<String, String> {
    let mut out = files(dir, &|f| (f.ends_with(".json") && f != "prompts.json") || f == "config.toml");
    let config = specx_datagen::config::DatagenConfig::load(&dir.join("config.toml")).unwrap();
    out.insert("config.toml".into(), specx_datagen::manifest::config_identity(&config).to_string());
    for f in files(dir, &|f| !(f.starts_with("shard-") && f.ends_with(".json"))).keys() {
        let mut record: specx_datagen::shard::ShardRecord =
            serde_json::from_slice(&std::fs::read(dir.join(f)).unwrap()).unwrap();
        record.seconds = 0.0;
        out.insert(f.clone(), serde_json::to_string(&record).unwrap());
    }
    let m = specx_datagen::manifest::Manifest::read(dir).unwrap();
    out.insert(
        "manifest.json".into(),
        format!("complete {}, identity {:?}, summary {:?}", m.complete, m.identity(), m.summary),
    );
    out
}

/// An eval config over 3 Alpaca prompts, greedy and sampled, a few methods.
pub fn eval_config(t: &Tiny) -> PathBuf {
    let path = t.root.join("eval.toml");
    let text = specx_testkit::config::small_eval(
        &t.draft,
        &t.target,
        "specdec = { k = [1, 3] }\nconfidence = { thresholds = [0.3] }\n",
    );
    std::fs::write(&path, text).unwrap();
    path
}

/// The rows of a run's unit files without the measured times (and what is computed from them).
pub fn untimed_rows(dir: &Path) -> Vec<String> {
    let mut rows = Vec::new();
    for f in specx_eval::experiment::merge::unit_files(dir).unwrap() {
        for mut r in specx_eval::common::results::UnitFile::read_path(&f).unwrap().rows {
            (r.draft_time_s, r.target_time_s, r.total_time_s, r.speedup) = (0.0, 0.0, 0.0, 0.0);
            rows.push(serde_json::to_string(&r).unwrap());
        }
    }
    rows.sort();
    rows
}

/// The rows of a run's `results.parquet` without the measured times: what each row says of its
/// unit and counts, sorted.
pub fn untimed_results(dir: &Path) -> Vec<String> {
    let table = specx_eval::common::results::ResultsTable::read(dir).unwrap();
    let text = |name: &str| table.strs(name).unwrap();
    let count = |name: &str| table.u64s(name).unwrap();
    let (dataset, prompt, sampling, setting) = (text("dataset"), text("prompt_id"), text("sampling"), text("setting"));
    let counts: Vec<_> =
        ["n_generated", "n_target_calls", "n_draft_calls", "n_drafted", "n_accepted", "n_verified"].map(count).into();
    let mut rows: Vec<String> = (0..table.height())
        .map(|i| {
            format!(
                "{:?} {:?} {:?} {:?} {:?}",
                dataset[i],
                prompt[i],
                sampling[i],
                setting[i],
                counts.iter().map(|c| c[i]).collect::<Vec<_>>()
            )
        })
        .collect();
    rows.sort();
    rows
}

/// A run's `summary.md` without what measured times decide: the timing model's section (fitted
/// to the times) is cut, every decimal number is `#`, and runs of spaces and of table dashes
/// are one, so that column widths do not matter.
pub fn untimed_summary(dir: &Path) -> String {
    let text = std::fs::read_to_string(dir.join("summary.md")).unwrap();
    let text = text.split("\n## Timing model").next().unwrap();
    let mut out = String::new();
    let chars: Vec<char> = text.chars().collect();
    let mut i = 0;
    while i < chars.len() {
        let c = chars[i];
        let number_end = |from: usize| (from..chars.len()).find(|&j| !chars[j].is_ascii_digit()).unwrap_or(chars.len());
        if c.is_ascii_digit() {
            let int_end = number_end(i);
            if int_end + 1 < chars.len() && chars[int_end] == '.' && chars[int_end + 1].is_ascii_digit() {
                out.push('#');
                i = number_end(int_end + 1);
                continue;
            }
            out.extend(&chars[i..int_end]);
            i = int_end;
            continue;
        }
        if (c == ' ' || c == '-') && out.ends_with(c) {
            i += 1;
            continue;
        }
        out.push(c);
        i += 1;
    }
    out
}

/// A run's manifest without its wall time, the machine it ran on and where its output went.
pub fn untimed_manifest(dir: &Path) -> serde_json::Value {
    let mut m = serde_json::to_value(specx_eval::experiment::manifest::EvalManifest::read(dir).unwrap()).unwrap();
    let o = m.as_object_mut().unwrap();
    o.remove("seconds");
    o.remove("machine");
    o["config"].as_object_mut().unwrap().remove("output");
    m
}

/// The specx binary of this build, stdout discarded, stderr piped.
pub fn specx() -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_specx"));
    c.stdout(Stdio::null()).stderr(Stdio::piped()).env("RUST_BACKTRACE", "0");
    c
}

/// Runs `args` to the end; panics with its stderr if it fails.
pub fn finish(args: &[String]) {
    let out = specx().args(args).output().unwrap();
    assert!(out.status.success(), "specx {}: {}", args.join(" "), String::from_utf8_lossy(&out.stderr));
}

/// configs/datagen-tiny.toml for the tiny pair in `t`, on the first `limit` Alpaca train
/// prompts (5 a shard), with `extra` appended (a `[slurm]` section); written to `t.root/name`.
pub fn datagen_config(t: &Tiny, name: &str, limit: usize, extra: &str) -> PathBuf {
    let text = std::fs::read_to_string(repo().join("configs/datagen-tiny.toml")).unwrap();
    let text = text
        .replace("draft = \"tiny-models/draft\"", &format!("draft = \"{}\"", s(&t.draft)))
        .replace("target = \"tiny-models/target\"", &format!("target = \"{}\"", s(&t.target)))
        .replace("path = \"../../shared/datasets/alpaca/alpaca_5000.json\"", &format!("path = \"{}\"", s(&alpaca())))
        .replace("limit = 16", &format!("limit = {limit}"));
    assert!(text.contains(&s(&t.draft)) && text.contains(&s(&alpaca())), "configs/datagen-tiny.toml changed: {text}");
    let path = t.root.join(name);
    std::fs::write(&path, format!("{text}\n{extra}")).unwrap();
    path
}

/// Runs specx with `args`: whether it succeeded, its stdout and its stderr.
pub fn run_specx(args: &[&str]) -> (bool, String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_specx")).args(args).env("RUST_BACKTRACE", "0").output().unwrap();
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}
