//! Damaged and mismatched inputs get a clear error that names the file, through the CLI a user
//! runs: one table of cases, each a copy of a good input with one thing wrong. The good inputs
//! are checked to work first, so every error below comes from the damage.

mod common;
use common::*;
use specx_decoder::gguf::GgmlType;
use specx_decoder::speculative::{AcceptanceHead, HeadSpec};
use specx_testkit::files::copy;
use std::path::{Path, PathBuf};
use std::process::Command;

fn specx(args: &[String]) -> (bool, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_specx")).args(args).env("RUST_BACKTRACE", "0").output().unwrap();
    (out.status.success(), String::from_utf8_lossy(&out.stderr).into_owned())
}

fn args(list: &[&str]) -> Vec<String> {
    list.iter().map(|a| a.to_string()).collect()
}

fn truncate(p: &Path, keep: f64) {
    let bytes = std::fs::read(p).unwrap();
    std::fs::write(p, &bytes[..(bytes.len() as f64 * keep) as usize]).unwrap();
}

fn flip_byte(p: &Path, at: f64) {
    let mut bytes = std::fs::read(p).unwrap();
    let i = (bytes.len() as f64 * at) as usize;
    bytes[i] ^= 0x5a;
    std::fs::write(p, bytes).unwrap();
}

fn overwrite(p: &Path, at: usize, with: &[u8]) {
    let mut bytes = std::fs::read(p).unwrap();
    bytes[at..at + with.len()].copy_from_slice(with);
    std::fs::write(p, bytes).unwrap();
}

/// The good inputs: a tiny pair as HF directories and as GGUF files, a datagen run of it, heads
/// for its draft and an eval config.
struct Inputs {
    _tmp: tempfile::TempDir,
    root: PathBuf,
    draft: PathBuf,
    target: PathBuf,
    gguf: PathBuf,
    data: PathBuf,
    head: PathBuf,
}

fn inputs() -> Inputs {
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path().to_path_buf();
    let (draft, target) = specx_decoder::synthetic::write_tiny_char_pair(&root.join("hf"), 7, 0.35).unwrap();
    let (_, gguf) =
        specx_decoder::synthetic::write_tiny_char_pair_gguf(&root.join("gguf"), 7, 0.35, GgmlType::Q8_0).unwrap();
    let data = root.join("data");
    let (ok, err) = specx(&args(&[
        "datagen",
        "--config",
        &s(&repo().join("configs/datagen-tiny.toml")),
        "--out",
        &s(&data),
        "--draft",
        &s(&draft),
        "--target",
        &s(&target),
        "--no-progress",
    ]));
    assert!(ok, "{err}");
    let device = specx_decoder::default_device();
    let d = specx_decoder::load_model(&draft, None, &device).unwrap();
    let hidden = d.model.config().hidden_size;
    let spec = HeadSpec {
        hidden_size: hidden,
        depth: 1,
        tied: false,
        draft_model_sha256: Some(d.weights_sha256().unwrap()),
        draft_transform: None,
        training: serde_json::json!({}),
        draft_stats: false,
    };
    let head = root.join("head");
    AcceptanceHead::init_seeded(hidden, 1, false, 3, &device).save(&head, &spec).unwrap();
    Inputs { _tmp: tmp, root, draft, target, gguf, data, head }
}

fn generate(model: &Path) -> Vec<String> {
    args(&["generate", "--model", &s(model), "--prompt", "ab", "--max-new-tokens", "2"])
}

fn decode(draft: &Path, target: &Path, head: &Path) -> Vec<String> {
    args(&[
        "decode",
        "--draft",
        &s(draft),
        "--target",
        &s(target),
        "--method",
        "specdecpp",
        "--head",
        &s(head),
        "--prompt",
        "ab",
        "--max-new-tokens",
        "4",
    ])
}

/// A training config over `data` (train and dev), two epochs.
fn train(i: &Inputs, data: &Path, name: &str) -> Vec<String> {
    let path = i.root.join(format!("train-{name}.toml"));
    std::fs::write(&path, format!("[data]\ntrain = {:?}\ndev = {:?}\n[head]\ndepth = 1\n[optim]\nlr = 0.001\nepochs = 1\n[output]\ndir = {:?}\n", s(data), s(data), s(&i.root.join(format!("train-{name}-head"))))).unwrap();
    args(&["train", "--config", &s(&path), "--no-progress"])
}

/// An eval config over three Alpaca prompts of `prompts` (Alpaca JSON) with the head policy
/// of `head_dir`, run into `eval-<name>-run`.
fn eval(i: &Inputs, prompts: &Path, head_dir: &Path, name: &str) -> Vec<String> {
    let path = i.root.join(format!("eval-{name}.toml"));
    std::fs::write(
        &path,
        format!(
            "[models]\ndraft = {:?}\ntarget = {:?}\n[[prompts]]\nname = \"alpaca\"\nformat = \"alpaca\"\npath = {:?}\nsplit = \"test\"\nsplit_sizes = [4000, 800, 200]\nsample = 3\nchat_template = \"none\"\n[[sampling]]\nname = \"greedy\"\n[budget]\nmax_new_tokens = 4\n[methods]\nspecdecpp = {{ heads = [{:?}], thresholds = [0.5], bounds = [[1, 4]] }}\n[output]\ndir = {:?}\n",
            s(&i.draft),
            s(&i.target),
            s(prompts),
            s(head_dir),
            s(&i.root.join(format!("eval-{name}-run")))
        ),
    )
    .unwrap();
    args(&["eval", "--config", &s(&path), "--no-progress"])
}

/// One damaged input: what it is, the command that reads it, the paths the error must name
/// and the words that must give the reason. The reason is looked for in the error with the
/// temporary directory's path cut out, so that words of a case's own file names (a directory
/// called `head-other-draft`) cannot stand in for it.
struct Case {
    what: &'static str,
    command: Vec<String>,
    paths: Vec<String>,
    reason: Vec<String>,
}

/// The number of cases below: every one of docs/dev/testing.md's table, none lost silently.
const CASES: usize = 23;

#[test]
fn every_damaged_or_mismatched_input_gets_an_error_naming_the_file() {
    let i = inputs();
    // The good inputs work.
    for (what, command) in [
        ("gguf", generate(&i.gguf)),
        ("hf", generate(&i.target)),
        ("decode", decode(&i.draft, &i.target, &i.head)),
        ("train", train(&i, &i.data, "good")),
        ("eval", eval(&i, &alpaca(), &i.head, "good")),
    ] {
        let (ok, err) = specx(&command);
        assert!(ok, "the good {what} input failed: {err}");
    }
    let case_dir = |name: &str| -> PathBuf { i.root.join("cases").join(name) };
    let mut cases: Vec<Case> = Vec::new();
    let strings = |v: &[&str]| v.iter().map(|e| e.to_string()).collect();
    let mut add = |what: &'static str, command: Vec<String>, paths: &[&str], reason: &[&str]| {
        cases.push(Case { what, command, paths: strings(paths), reason: strings(reason) })
    };

    // Model files.
    let gguf = |name: &str| {
        let p = case_dir(name).join("model.gguf");
        copy(i.gguf.parent().unwrap(), &case_dir(name));
        p
    };
    let p = gguf("gguf-truncated");
    truncate(&p, 0.5);
    add("a GGUF file cut in half", generate(&p), &[&s(&p)], &["needs bytes up to", "but the file has"]);
    let p = gguf("gguf-tail");
    let len = std::fs::metadata(&p).unwrap().len();
    std::fs::File::options().write(true).open(&p).unwrap().set_len(len - 100).unwrap();
    add("a GGUF file missing its last 100 bytes", generate(&p), &[&s(&p)], &["needs bytes up to", "but the file has"]);
    let p = gguf("gguf-magic");
    overwrite(&p, 0, b"GGML");
    add("a GGUF file with another magic", generate(&p), &[&s(&p)], &["not a GGUF file"]);
    let p = gguf("gguf-version");
    overwrite(&p, 4, &99u32.to_le_bytes());
    add("a GGUF file of an unknown version", generate(&p), &[&s(&p)], &["version 99 is not supported"]);
    let hf = |name: &str| {
        copy(&i.target, &case_dir(name));
        case_dir(name)
    };
    let d = hf("safetensors-truncated");
    let st = std::fs::read_dir(&d)
        .unwrap()
        .map(|e| e.unwrap().path())
        .find(|p| p.extension().is_some_and(|e| e == "safetensors"))
        .unwrap();
    truncate(&st, 0.7);
    add("a safetensors file cut short", generate(&d), &[&s(&st)], &["malformed or truncated safetensors"]);
    let d = hf("safetensors-header");
    let st = std::fs::read_dir(&d)
        .unwrap()
        .map(|e| e.unwrap().path())
        .find(|p| p.extension().is_some_and(|e| e == "safetensors"))
        .unwrap();
    overwrite(&st, 0, &u64::MAX.to_le_bytes());
    add("a safetensors file whose header length is garbage", generate(&d), &[&s(&st)], &["header too large"]);
    let d = hf("config-malformed");
    std::fs::write(d.join("config.json"), "{\"hidden_size\": 32,").unwrap();
    add(
        "a model config.json that is not JSON",
        generate(&d),
        &[&s(&d.join("config.json"))],
        &["parsing", "line 1 column"],
    );
    let d = hf("config-missing");
    std::fs::remove_file(d.join("config.json")).unwrap();
    add("a model directory without config.json", generate(&d), &[&s(&d.join("config.json"))], &["No such file"]);
    let d = hf("tokenizer-missing");
    std::fs::remove_file(d.join("tokenizer.json")).unwrap();
    add("a model directory without tokenizer.json", generate(&d), &[&s(&d)], &["no tokenizer at", "--tokenizer"]);

    // Datasets.
    let data = |name: &str| {
        copy(&i.data, &case_dir(name));
        case_dir(name)
    };
    let d = data("shard-flipped-byte");
    flip_byte(&d.join("tokens-00001.parquet"), 0.5);
    add(
        "a byte flipped inside a shard's token table",
        train(&i, &d, "flipped"),
        &[&s(&d.join("tokens-00001.parquet"))],
        &["shard record says", "damaged or changed"],
    );
    let d = data("features-truncated");
    truncate(&d.join("features-00002.safetensors"), 0.9);
    add(
        "a shard's feature file cut short",
        train(&i, &d, "features"),
        &[&s(&d.join("features-00002.safetensors"))],
        &["shard record says", "damaged or changed"],
    );
    let d = data("shard-missing");
    std::fs::remove_file(d.join("tokens-00000.parquet")).unwrap();
    add(
        "a shard's token table deleted",
        train(&i, &d, "missing"),
        &[&s(&d.join("tokens-00000.parquet"))],
        &["No such file"],
    );
    let d = data("manifest-malformed");
    truncate(&d.join("manifest.json"), 0.5);
    add(
        "a dataset manifest cut in half",
        train(&i, &d, "manifest"),
        &[&s(&d.join("manifest.json"))],
        &["malformed manifest"],
    );
    let d = data("record-malformed");
    std::fs::write(d.join("shard-00001.json"), "{").unwrap();
    let resume = args(&[
        "datagen",
        "--config",
        &s(&repo().join("configs/datagen-tiny.toml")),
        "--out",
        &s(&d),
        "--draft",
        &s(&i.draft),
        "--target",
        &s(&i.target),
        "--no-progress",
    ]);
    add(
        "a shard record that is not JSON (datagen resuming)",
        resume,
        &[&s(&d.join("shard-00001.json"))],
        &["malformed shard record"],
    );

    // Heads.
    let head = |name: &str| {
        copy(&i.head, &case_dir(name).join("head"));
        case_dir(name).join("head")
    };
    let h = head("head-other-draft");
    let mut spec: serde_json::Value = serde_json::from_slice(&std::fs::read(h.join("head.json")).unwrap()).unwrap();
    spec["draft_model_sha256"] = "0".repeat(64).into();
    std::fs::write(h.join("head.json"), spec.to_string()).unwrap();
    add(
        "a head trained on another draft (decode)",
        decode(&i.draft, &i.target, &h),
        &[&s(&h)],
        &["another draft model", &format!("sha256 {}", "0".repeat(12))],
    );
    add(
        "a head trained on another draft (eval)",
        eval(&i, &alpaca(), &h, "other-draft"),
        &[&s(&h)],
        &["another draft model", &format!("sha256 {}", "0".repeat(12))],
    );
    let h = head("head-truncated");
    truncate(&h.join("head.safetensors"), 0.5);
    add("a head's weights cut in half", decode(&i.draft, &i.target, &h), &[&s(&h)], &["malformed safetensors"]);
    let h = head("head-spec-missing");
    std::fs::remove_file(h.join("head.json")).unwrap();
    add(
        "a head directory without head.json",
        decode(&i.draft, &i.target, &h),
        &[&s(&h.join("head.json"))],
        &["No such file"],
    );

    // Eval inputs.
    let p = case_dir("prompts").join("alpaca.json");
    std::fs::create_dir_all(p.parent().unwrap()).unwrap();
    std::fs::write(&p, &std::fs::read(alpaca()).unwrap()[..4000]).unwrap();
    add(
        "a prompt file cut short",
        eval(&i, &p, &i.head, "prompts"),
        &[&s(&p)],
        &["prompt set 'alpaca'", "malformed Alpaca JSON"],
    );
    let run = case_dir("unit-malformed");
    copy(&i.root.join("eval-good-run"), &run);
    let unit = specx_eval::experiment::merge::unit_files(&run).unwrap().remove(0);
    truncate(&unit, 0.5);
    add(
        "a run's unit file cut in half (resume)",
        args(&["eval", "--config", &s(&i.root.join("eval-good.toml")), "--out", &s(&run), "--no-progress"]),
        &[&s(&unit)],
        &["delete it to rerun the unit"],
    );
    let e = case_dir("config-syntax").join("eval.toml");
    std::fs::create_dir_all(e.parent().unwrap()).unwrap();
    std::fs::write(&e, "[models\ndraft = 1\n").unwrap();
    add("an eval config with a syntax error", args(&["eval", "--config", &s(&e)]), &[&s(&e)], &["line 1, column"]);
    let run = case_dir("replay-no-manifest");
    copy(&i.root.join("eval-good-run"), &run);
    std::fs::remove_file(run.join("manifest.json")).unwrap();
    let grid = i.root.join("grid.toml");
    std::fs::write(&grid, "[methods]\nspecdec = { k = [2] }\n").unwrap();
    add(
        "a replay of a run directory without its manifest",
        args(&["eval", "replay", "--config", &s(&grid), &s(&run)]),
        &[&s(&run.join("manifest.json"))],
        &["an eval run directory?"],
    );
    // A wrong pair: a target of another vocabulary.
    let other = case_dir("other-vocab");
    let cfg = specx_decoder::synthetic::tiny_qwen2(40);
    let w = specx_decoder::synthetic::random_weights(&cfg, 3);
    specx_decoder::synthetic::write_hf_dir(
        &other,
        &cfg,
        &w,
        specx_decoder::synthetic::StDtype::F32,
        1,
        &specx_decoder::synthetic::word_tokenizer_json(40, "w"),
    )
    .unwrap();
    add(
        "a draft and a target with different vocabularies",
        decode(&i.draft, &other, &i.head),
        &[&s(&other)],
        &["do not share a tokenizer", "id 0 is \"<unk>\" in one and id 0 is \"w0\" in the other"],
    );

    let mut table = vec!["| damaged input | command | error (first line) |".to_string(), "|---|---|---|".to_string()];
    let mut failures = Vec::new();
    for c in &cases {
        let (ok, err) = specx(&c.command);
        let without_root = err.replace(&s(&i.root), "");
        let first = err
            .lines()
            .filter(|l| !l.trim().is_empty() && !l.starts_with("loading") && !l.starts_with('['))
            .map(str::trim)
            .collect::<Vec<_>>()
            .join(" / ");
        table.push(format!("| {} | specx {} | {} |", c.what, c.command[0], first.replace(&s(&i.root), "…")));
        if ok {
            failures.push(format!("{}: the command succeeded", c.what));
        } else if let Some(missing) = c.paths.iter().find(|p| !err.contains(p.as_str())) {
            failures.push(format!("{}: the error does not name {missing}:\n{err}", c.what));
        } else if let Some(missing) = c.reason.iter().find(|r| !without_root.contains(r.as_str())) {
            failures.push(format!("{}: the error does not say '{missing}' (the reason):\n{err}", c.what));
        } else if err.contains("panicked") {
            failures.push(format!("{}: a panic instead of an error:\n{err}", c.what));
        }
    }
    eprintln!("{}", table.join("\n"));
    assert_eq!(cases.len(), CASES, "cases run");
    assert!(failures.is_empty(), "{} of {} cases:\n{}", failures.len(), cases.len(), failures.join("\n\n"));
}
