//! `specx eval` end to end on a tiny synthetic pair over real Alpaca prompts: rows, audit,
//! reports, resume, sharding + merge, and the errors a user meets.

use specx_decoder::speculative::{AcceptanceHead, FeatureHead, FeatureHeadSpec, HeadSpec};
use specx_decoder::{default_device, load_model};
use specx_eval::common::results::{ResultRow, UnitFile};
use specx_eval::experiment::audit::audit;
use specx_eval::experiment::config::EvalConfig;
use specx_eval::experiment::merge::merge;
use specx_eval::experiment::replay_run::{ReplayConfig, replay};
use specx_eval::experiment::{EvalOptions, run};
use specx_run::Part;
use std::path::PathBuf;

fn alpaca() -> PathBuf {
    let dir = std::env::var_os("CARGO_MANIFEST_DIR").map_or_else(|| env!("CARGO_MANIFEST_DIR").into(), PathBuf::from);
    dir.join("../../../shared/datasets/alpaca/alpaca_5000.json")
}

/// Tiny pair, a head trained on nothing (random, but stamped with the draft's sha256), and
/// a config over 3 Alpaca test prompts, greedy + sampled with two seeds.
struct Setup {
    _tmp: tempfile::TempDir,
    root: PathBuf,
    draft: PathBuf,
    target: PathBuf,
    head: PathBuf,
    config: String,
}

fn setup() -> Setup {
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path().to_path_buf();
    let (draft, target) = specx_decoder::synthetic::write_tiny_char_pair(&root, 7, 0.35).unwrap();
    let d = load_model(&draft, None, &default_device()).unwrap();
    let hidden = d.model.config().hidden_size;
    let head = root.join("head-a");
    let spec = HeadSpec {
        hidden_size: hidden,
        depth: 1,
        tied: false,
        draft_model_sha256: Some(d.weights_sha256().unwrap()),
        draft_transform: None,
        training: serde_json::json!({}),
        draft_stats: false,
    };
    AcceptanceHead::init_seeded(hidden, 1, false, 3, &default_device()).save(&head, &spec).unwrap();
    let config = format!(
        r#"
seeds = [0, 1]
[models]
draft = "{draft}"
target = "{target}"
[[prompts]]
name = "alpaca"
format = "alpaca"
path = "{alpaca}"
split = "test"
split_sizes = [4000, 800, 200]
sample = 3
sample_seed = 5
chat_template = "none"
[[sampling]]
name = "greedy"
[[sampling]]
name = "t1"
temperature = 1.0
[budget]
max_new_tokens = 12
[methods]
specdec = {{ k = [1, 3] }}
specdecpp = {{ heads = ["head-a"], thresholds = [0.3, 0.8], bounds = [[2, 8], [1, 4]] }}
confidence = {{ thresholds = [0.3] }}
[output]
dir = "out"
"#,
        draft = draft.display(),
        target = target.display(),
        alpaca = alpaca().display()
    );
    Setup { _tmp: tmp, root, draft, target, head, config }
}

fn load_config(s: &Setup, text: &str, out: &str) -> anyhow::Result<EvalConfig> {
    let path = s.root.join(format!("{out}.toml"));
    std::fs::write(&path, text.replace("dir = \"out\"", &format!("dir = \"{out}\""))).unwrap();
    EvalConfig::load(&path)
}

fn opts(part: Option<Part>, max_new_units: Option<usize>) -> EvalOptions {
    EvalOptions { part, limit: None, max_new_units, progress: false }
}

/// A row without its timing columns (what a resumed or sharded run must reproduce; DSI's
/// scheduler counters depend on its threads' timing).
fn untimed(r: &ResultRow) -> ResultRow {
    ResultRow { draft_time_s: 0.0, target_time_s: 0.0, total_time_s: 0.0, speedup: 0.0, dsi: None, ..r.clone() }
}

fn untimed_all(rows: &[ResultRow]) -> Vec<ResultRow> {
    rows.iter().map(untimed).collect()
}

#[test]
fn eval_on_a_tiny_pair() {
    let s = setup();
    let cfg = load_config(&s, &s.config, "full").unwrap();
    let full = run(&cfg, &opts(None, None)).unwrap();
    let settings = 1 + 2 + 2 * 2 + 1;
    // 3 prompts x (greedy once + t1 with seeds 0 and 1).
    assert_eq!(full.manifest.units_total, 9);
    assert!(full.manifest.complete);
    assert_eq!(full.rows.len(), 9 * settings);
    assert!(full.audit_failures.is_empty(), "{:?}", full.audit_failures);
    for r in &full.rows {
        if r.greedy() {
            assert!(r.identical_to_ar, "{} {}", r.prompt_id, r.setting.key());
        }
        assert!(r.n_generated >= 1 && r.n_generated <= 12);
        assert_eq!(r.n_drafted, r.drafted_per_round.iter().sum::<usize>());
        assert_eq!(r.n_accepted, r.accepted_per_round.iter().sum::<usize>());
        if r.setting.family() != "ar" {
            assert_eq!(r.n_target_calls, 1 + r.drafted_per_round.len());
        }
    }
    // Sampled units differ between seeds (a seed changes the stream).
    let sampled: Vec<&ResultRow> = full.rows.iter().filter(|r| !r.greedy() && r.setting.family() == "ar").collect();
    assert_eq!(sampled.len(), 6);
    assert!(sampled.iter().any(|a| {
        sampled.iter().any(|b| a.prompt_id == b.prompt_id && a.seed != b.seed && a.output_sha256 != b.output_sha256)
    }));

    let dir = s.root.join("full");
    for f in [
        "results.parquet",
        "summary.md",
        "manifest.json",
        "config.toml",
        "plots/frontier_alpaca_greedy.png",
        "plots/speedup_alpaca_t1.png",
        "plots/accepted_alpaca_greedy.png",
    ] {
        assert!(dir.join(f).is_file(), "{f} missing");
    }
    assert_eq!(&std::fs::read(dir.join("plots/frontier_alpaca_greedy.png")).unwrap()[..4], b"\x89PNG");
    let summary = std::fs::read_to_string(dir.join("summary.md")).unwrap();
    assert!(
        summary.contains("Losslessness audit: passed")
            && summary.contains("specdecpp head-a h=0.8 [2,8]")
            && summary.contains("Timing model"),
        "{summary}"
    );
    let df = {
        use polars_io::SerReader;
        polars_io::parquet::read::ParquetReader::new(std::fs::File::open(dir.join("results.parquet")).unwrap())
            .finish()
            .unwrap()
    };
    assert_eq!(df.height(), full.rows.len());
    for c in [
        "dataset",
        "prompt_id",
        "setting",
        "n_generated",
        "accepted_per_round",
        "identical_to_ar",
        "speedup",
        "output_sha256",
    ] {
        assert!(df.column(c).is_ok(), "results.parquet lacks {c}");
    }

    // Resume: a run stopped after 4 units, then continued, gives the same rows (timing aside).
    let cfg2 = load_config(&s, &s.config, "resumed").unwrap();
    let partial = run(&cfg2, &opts(None, Some(4))).unwrap();
    assert!(!partial.manifest.complete);
    assert_eq!(partial.manifest.units_done, 4);
    let resumed = run(&cfg2, &opts(None, None)).unwrap();
    assert!(resumed.manifest.complete);
    assert_eq!(untimed_all(&resumed.rows), untimed_all(&full.rows));

    // Shards + merge give the same rows.
    let parts: Vec<PathBuf> = (0..2)
        .map(|i| {
            let name = format!("part{i}");
            let c = load_config(&s, &s.config, &name).unwrap();
            let o = run(&c, &opts(Some(Part { index: i, count: 2 }), None)).unwrap();
            assert!(o.manifest.complete);
            s.root.join(name)
        })
        .collect();
    let err = merge(&parts[..1], &s.root.join("merged-bad")).unwrap_err().to_string();
    assert!(err.contains("exactly once"), "{err}");
    let merged = merge(&parts, &s.root.join("merged")).unwrap();
    assert_eq!(untimed_all(&merged.rows), untimed_all(&full.rows));

    // The audit flags a greedy output that differs from AR's.
    let mut broken = full.rows.clone();
    let i = broken.iter().position(|r| r.greedy() && r.setting.family() == "specdec").unwrap();
    broken[i].identical_to_ar = false;
    assert_eq!(audit(&broken, &Default::default()).failures.len(), 1);
    // Every row agreed with AR, so none carries a divergence.
    assert!(full.rows.iter().all(|r| r.divergence.is_none()));

    // Replay: every greedy unit under a larger grid; the settings that ran for real agree
    // count for count, and a tampered real row is caught.
    let grid = s.root.join("grid.toml");
    std::fs::write(&grid, "[methods]\nspecdec = { k = [1, 2, 3, 5] }\nspecdecpp = { heads = [\"head-a\"], thresholds = [0.3, 0.5, 0.8], bounds = [[2, 8], [1, 4]] }\nconfidence = { thresholds = [0.3, 0.6] }\noracle = true\n").unwrap();
    let g = ReplayConfig::load(&grid).unwrap();
    let o = replay(&dir, &g, "grid", false).unwrap();
    assert!(o.mismatches.is_empty(), "{:#?}", o.mismatches);
    assert_eq!(o.compared, 3 * (settings - 1));
    assert_eq!(o.replayed.len(), 3 * (4 + 6 + 2 + 1));
    assert!(o.replayed.iter().all(|r| r.replayed && r.greedy() && r.total_time_s > 0.0));
    let summary = std::fs::read_to_string(o.dir.join("summary.md")).unwrap();
    assert!(summary.contains("specdec K=5 (replayed)") && summary.contains("oracle (replayed)"), "{summary}");
    // The oracle (Theorem 4.1) discards nothing and needs the fewest target calls of all.
    for oracle in o.replayed.iter().filter(|r| r.setting.family() == "oracle") {
        assert_eq!(oracle.n_discarded(), 0);
        let same_unit = o.replayed.iter().filter(|r| r.prompt_id == oracle.prompt_id);
        assert!(same_unit.clone().all(|r| oracle.n_target_calls <= r.n_target_calls), "{oracle:?}");
        assert!(same_unit.filter(|r| r.setting.family() != "oracle").any(|r| r.n_discarded() > 0));
    }

    // A greedy trace run (AR only, batched) gives the same AR outputs, and replaying it gives
    // the same counts as replaying the run above.
    let head_part = &s.config[..s.config.find("[methods]").unwrap()];
    let trace_cfg = format!(
        "{}[methods]\nar_batch = 2\n[output]\ndir = \"out\"\n",
        head_part.replace("[[sampling]]\nname = \"t1\"\ntemperature = 1.0\n", "")
    );
    let traced = run(&load_config(&s, &trace_cfg, "trace").unwrap(), &opts(None, None)).unwrap();
    assert_eq!(traced.rows.len(), 3);
    assert!(traced.rows.iter().all(|r| r.batch == 2 && r.setting.family() == "ar"));
    let ar_of = |rows: &[ResultRow]| {
        rows.iter()
            .filter(|r| r.greedy() && r.setting.family() == "ar")
            .map(|r| (r.prompt_id.clone(), r.output_sha256.clone()))
            .collect::<Vec<_>>()
    };
    assert_eq!(ar_of(&traced.rows), ar_of(&full.rows));
    let o2 = replay(&s.root.join("trace"), &g, "grid", false).unwrap();
    let counts = |rows: &[ResultRow]| {
        rows.iter().map(|r| (r.prompt_id.clone(), r.setting.key(), r.metrics().counts_only())).collect::<Vec<_>>()
    };
    assert_eq!(counts(&o2.replayed), counts(&o.replayed));
    let unit = std::fs::read_dir(dir.join("units/alpaca/greedy/s0")).unwrap().next().unwrap().unwrap().path();
    let mut f: UnitFile = serde_json::from_str(&std::fs::read_to_string(&unit).unwrap()).unwrap();
    f.rows[1].n_drafted += 1;
    std::fs::write(&unit, serde_json::to_string(&f).unwrap()).unwrap();
    let o = replay(&dir, &g, "grid", false).unwrap();
    assert_eq!(o.mismatches.len(), 1, "{:?}", o.mismatches);

    // A directory holding another setup is refused.
    let other = s.config.replace("max_new_tokens = 12", "max_new_tokens = 10");
    let err = format!("{:#}", run(&load_config(&s, &other, "full").unwrap(), &opts(None, None)).unwrap_err());
    assert!(err.contains("different setup") && err.contains("max_new_tokens"), "{err}");
}

#[test]
fn bad_configs_are_named_before_models_load() {
    let s = setup();
    let err = |text: &str| {
        format!("{:#}", load_config(&s, text, "bad").and_then(|c| run(&c, &opts(None, None)).map(|_| ())).unwrap_err())
    };
    // Unknown key, naming the file and the key.
    let e = err(&s.config.replace("sample_seed = 5", "sample_seed = 5\nsampel = 2"));
    assert!(e.contains("bad.toml") && e.contains("sampel"), "{e}");
    // Unknown method.
    let e = err(&s.config.replace("[methods]", "[methods]\nmedusa = { k = [1] }"));
    assert!(e.contains("medusa"), "{e}");
    // An EasySpec strategy with a gap (before loading), and one for another depth (after).
    let e = err(&s
        .config
        .replace("[methods]", "[methods]\neasyspec = { strategies = [\"0,2\"], calibrations = [\"never\"], k = [1] }"));
    assert!(e.contains("strategy '0,2'") && e.contains("starting at layer 1"), "{e}");
    let e = err(&s
        .config
        .replace("[methods]", "[methods]\neasyspec = { strategies = [\"0-2\"], calibrations = [\"never\"], k = [1] }"));
    assert!(e.contains("covers layers 0..3") && e.contains("has 2"), "{e}");
    // Missing head.
    let e = err(&s.config.replace("\"head-a\"", "\"no-such-head\""));
    assert!(e.contains("no-such-head") && e.contains("not a head checkpoint"), "{e}");
    // A head trained on another draft model.
    let other = s.root.join("head-b");
    let d = load_model(&s.draft, None, &default_device()).unwrap();
    let hidden = d.model.config().hidden_size;
    let spec = HeadSpec {
        hidden_size: hidden,
        depth: 1,
        tied: false,
        draft_model_sha256: Some("0".repeat(64)),
        draft_transform: None,
        training: serde_json::json!({}),
        draft_stats: false,
    };
    AcceptanceHead::init_seeded(hidden, 1, false, 3, &default_device()).save(&other, &spec).unwrap();
    let e = err(&s.config.replace("\"head-a\"", "\"head-b\""));
    assert!(e.contains("another draft model"), "{e}");
    // A prompt set with no prompts.
    let empty = s.root.join("empty.jsonl");
    std::fs::write(&empty, "\n").unwrap();
    let e = err(&s
        .config
        .replace("format = \"alpaca\"", "format = \"jsonl\"")
        .replace(&alpaca().display().to_string(), &empty.display().to_string())
        .replace("split = \"test\"", "split = \"all\""));
    assert!(e.contains("no prompts"), "{e}");
    // A sample larger than the split.
    let e = err(&s.config.replace("sample = 3", "sample = 300"));
    assert!(e.contains("sample = 300") && e.contains("200 prompts"), "{e}");
    assert!(s.head.is_dir());
}

/// A `specx profile` JSON with the given TPOTs (the rest is filler the grid does not read).
fn profile_json(draft_tpot: f64, target_tpot: f64) -> String {
    let model = |role: &str, tpot: f64| {
        serde_json::json!({"role": role, "path": "m", "sha256": "0", "layers": 1, "forward": [{"context": 128, "seconds": [tpot, 1.5 * tpot]}],
            "layer_context": 128, "attention_s": [0.0], "mlp_s": [0.0], "lm_head_s": 0.0, "ttft_s": [[128, 10.0 * tpot]], "tpot_s": tpot})
    };
    serde_json::json!({"weights": "native", "machine": {"cpu": "test", "cores": 2, "bandwidth_gb_s": 1.0}, "reps": 1,
        "models": [model("draft", draft_tpot), model("target", target_tpot)]})
    .to_string()
}

#[test]
fn dsi_method_runs_for_real_and_is_audited() {
    let s = setup();
    std::fs::write(s.root.join("profile.json"), profile_json(0.01, 0.05)).unwrap();
    let methods = s.config.find("[methods]").unwrap();
    let outro = s.config.find("[output]").unwrap();
    let text = format!(
        "{}[methods]\nspecdec = {{ k = [2] }}\ndsi = {{ servers = [1, 3], lookaheads = [2], profile = \"profile.json\" }}\n{}",
        &s.config[..methods],
        &s.config[outro..]
    );
    let cfg = load_config(&s, &text, "dsi").unwrap();
    // Eq. 1: ceil(0.05 / (k 0.01)) <= servers gives k = 5 for one server and 2 for three.
    let keys: Vec<String> =
        specx_eval::experiment::grid::expand(&cfg.methods).unwrap().iter().map(|x| x.key()).collect();
    assert_eq!(keys, ["ar", "specdec K=2", "dsi SP=1 k=2", "dsi SP=1 k=5", "dsi SP=3 k=2"]);
    let out = run(&cfg, &opts(None, None)).unwrap();
    assert!(out.audit_failures.is_empty(), "{:?}", out.audit_failures);
    let dsi: Vec<&ResultRow> = out.rows.iter().filter(|r| r.setting.family() == "dsi").collect();
    assert_eq!(dsi.len(), 9 * 3);
    for r in &dsi {
        if r.greedy() {
            assert!(r.identical_to_ar, "{} {}", r.prompt_id, r.setting.key());
        }
        assert!(r.drafted_per_round.iter().all(|&k| k <= r.setting.k().unwrap()));
        assert_eq!(r.n_accepted, r.accepted_per_round.iter().sum::<usize>());
        // The scheduler's counters: one task per target call, each preempted or stale at most once.
        let d = r.dsi.as_ref().expect("a DSI row has its scheduler counters");
        assert_eq!((d.tasks, d.worker_busy_s.len()), (r.n_target_calls, r.setting.servers().unwrap()));
        assert!(d.preempted + d.stale <= d.tasks, "{d:?}");
    }
    assert!(out.rows.iter().filter(|r| r.setting.family() != "dsi").all(|r| r.dsi.is_none()));
    // They survive the unit files (a resumed run reads them back) and reach the Parquet table.
    let again = run(&cfg, &opts(None, None)).unwrap();
    assert_eq!(
        again.rows.iter().map(|r| r.dsi.clone()).collect::<Vec<_>>(),
        out.rows.iter().map(|r| r.dsi.clone()).collect::<Vec<_>>()
    );
    let tasks =
        specx_eval::common::results::ResultsTable::read(&s.root.join("dsi")).unwrap().u64s("dsi_tasks").unwrap();
    assert_eq!(tasks, out.rows.iter().map(|r| r.dsi.as_ref().map(|d| d.tasks as u64)).collect::<Vec<_>>());
    let summary = std::fs::read_to_string(s.root.join("dsi/summary.md")).unwrap();
    assert!(summary.contains("dsi SP=3 k=2") && summary.contains("Losslessness audit: passed"), "{summary}");
    assert!(summary.contains("DSI scheduler"), "{summary}");
    let batched = text.replace("[methods]\n", "[methods]\nar_batch = 2\n");
    assert!(format!("{:#}", load_config(&s, &batched, "batched").unwrap_err()).contains("ar_batch"));
    let missing = text.replace("profile.json", "nope.json");
    let err = format!("{:#}", load_config(&s, &missing, "missing").unwrap_err());
    assert!(err.contains("nope.json") && err.contains("specx profile"), "{err}");
}

#[test]
fn easyspec_method_runs_for_real_with_every_stop_policy_and_is_audited() {
    let s = setup();
    let methods = s.config.find("[methods]").unwrap();
    let outro = s.config.find("[output]").unwrap();
    // The tiny draft has 2 layers: "0-1" is their one layer-parallel group, lp1 the exact forward.
    let grid = "easyspec = { strategies = [\"0-1\", \"lp1\"], calibrations = [\"every_round\", \"never\"], k = [2], heads = [\"head-a\"], thresholds = [0.5], bounds = [[1, 4]], servers = [2] }";
    let text = format!("{}[methods]\n{grid}\n{}", &s.config[..methods], &s.config[outro..]);
    let cfg = load_config(&s, &text, "easyspec").unwrap();
    let keys: Vec<String> =
        specx_eval::experiment::grid::expand(&cfg.methods).unwrap().iter().map(|x| x.key()).collect();
    assert_eq!(keys.len(), 1 + 2 * 2 * 3);
    assert_eq!(
        keys[1..4],
        [
            "easyspec 0-1 every_round | specdec K=2",
            "easyspec 0-1 every_round | specdecpp head-a h=0.5 [1,4]",
            "easyspec 0-1 every_round | dsi SP=2 k=2"
        ]
    );
    let out = run(&cfg, &opts(None, None)).unwrap();
    assert!(out.audit_failures.is_empty(), "{:?}", out.audit_failures);
    let rows: Vec<&ResultRow> = out.rows.iter().filter(|r| r.setting.family() == "easyspec").collect();
    assert_eq!(rows.len(), 9 * 12);
    for r in &rows {
        assert!(!r.greedy() || r.identical_to_ar, "{} {}", r.prompt_id, r.setting.key());
        let (strategy, calibration, _) = r.setting.easyspec().unwrap();
        let fuzzy = strategy == "0-1";
        let calibrating = calibration == specx_decoder::speculative::Calibration::EveryRound;
        if !(fuzzy && calibrating) {
            assert_eq!(r.n_calibrations, 0, "{}", r.setting.key());
        }
    }
    assert!(rows.iter().any(|r| r.n_calibrations > 0), "no calibration was recorded");
    let summary = std::fs::read_to_string(s.root.join("easyspec/summary.md")).unwrap();
    assert!(
        summary.contains(r"easyspec 0-1 never \| specdec K=2") && summary.contains("Losslessness audit: passed"),
        "{summary}"
    );
    // Greedy replay runs the fuzzy drafter along the AR output: the same counts as the real
    // runs, calibrations included (DSI's timing is no sum of forwards: it is refused).
    let replay_grid = s.root.join("replay-easyspec.toml");
    std::fs::write(&replay_grid, format!("[methods]\n{}\n", grid.replace(", servers = [2]", ""))).unwrap();
    let o = replay(&s.root.join("easyspec"), &ReplayConfig::load(&replay_grid).unwrap(), "grid", false).unwrap();
    assert!(o.mismatches.is_empty(), "{:?}", o.mismatches);
    assert_eq!(o.compared, 3 * 8, "every greedy unit's 8 sequential EasySpec settings compared");
    assert!(o.replayed.iter().any(|r| r.n_calibrations > 0));
    std::fs::write(&replay_grid, format!("[methods]\n{grid}\n")).unwrap();
    let err = replay(&s.root.join("easyspec"), &ReplayConfig::load(&replay_grid).unwrap(), "grid", false)
        .map(|_| ())
        .unwrap_err();
    assert!(format!("{err:#}").contains("DSI runs only for real"), "{err:#}");
}

#[test]
fn lookup_and_hybrid_drafters_run_for_real_are_audited_and_replay_to_the_same_counts() {
    // Policies: fixed K, the dynamic schedule and matchrate (which learns from each round and
    // drops weak matches: the replay must hear the same outcomes to make the same choices).
    let s = setup();
    let methods = s.config.find("[methods]").unwrap();
    let outro = s.config.find("[output]").unwrap();
    let axes = "drafters.lookup = { ngrams = [[1, 3]] }\ndrafters.hybrid = { ngrams = [[2, 3]] }\npolicies.fixed = { k = [2, 6] }\npolicies.dynamic = { initial = [2], cap = 8 }\npolicies.matchrate = { thresholds = [0.45], max = [8] }";
    let text = format!(
        "{}[methods]\n[[methods.grid]]\n{axes}\nschedulers.sequential = {{}}\nschedulers.dsi = {{ servers = [2] }}\n{}",
        &s.config[..methods],
        &s.config[outro..]
    );
    let cfg = load_config(&s, &text, "lookup").unwrap();
    let out = run(&cfg, &opts(None, None)).unwrap();
    assert!(out.audit_failures.is_empty(), "{:?}", out.audit_failures);
    let rows: Vec<&ResultRow> = out.rows.iter().filter(|r| matches!(r.setting.family(), "lookup" | "hybrid")).collect();
    assert_eq!(rows.len(), 9 * 16, "9 units x 2 drafters x 4 policies x 2 schedulers");
    for r in &rows {
        assert!(!r.greedy() || r.identical_to_ar, "{} {}", r.prompt_id, r.setting.key());
        if r.setting.drafter() == Some("lookup") {
            assert_eq!(r.n_draft_calls, 0, "prompt lookup runs no draft forward: {}", r.setting.key());
        }
    }
    assert!(
        rows.iter().any(|r| r.setting.drafter() == Some("hybrid") && r.n_draft_calls > 0),
        "the hybrid drafter never ran its draft model"
    );
    assert!(
        rows.iter().any(|r| r.n_accepted > 0) && rows.iter().any(|r| r.n_accepted < r.n_drafted),
        "lookups accepted and rejected"
    );
    // Greedy replay runs the lookup along the AR output: the real runs' counts.
    let replay_grid = s.root.join("replay-lookup.toml");
    std::fs::write(&replay_grid, format!("[methods]\n[[methods.grid]]\n{axes}\n")).unwrap();
    let o = replay(&s.root.join("lookup"), &ReplayConfig::load(&replay_grid).unwrap(), "grid", false).unwrap();
    assert!(o.mismatches.is_empty(), "{:?}", o.mismatches);
    assert_eq!(o.compared, 3 * 8, "every greedy unit's 8 sequential lookup and hybrid settings compared");
}

#[test]
fn the_feature_head_runs_for_real_is_audited_and_replays_to_the_same_counts() {
    let s = setup();
    let target = load_model(&s.root.join("target"), None, &default_device()).unwrap();
    let c = target.model.config();
    let spec = FeatureHeadSpec {
        hidden_size: c.hidden_size,
        width: 64,
        intermediate: 64,
        rope_theta: c.rope_theta,
        rms_eps: c.rms_norm_eps,
        target_model_sha256: target.weights_sha256().unwrap(),
        vocab_size: c.vocab_size,
        vocab_table_sha256: "synthetic".into(),
        training: serde_json::json!({}),
    };
    let ids: Vec<u32> = (0..c.vocab_size as u32).collect();
    FeatureHead::init_seeded(&spec, 4, &default_device()).unwrap().save(&s.root.join("fh"), &spec, &ids).unwrap();
    let methods = s.config.find("[methods]").unwrap();
    let outro = s.config.find("[output]").unwrap();
    let axes = "drafters.feature = { heads = [\"fh\"] }\npolicies.fixed = { k = [2, 4] }\npolicies.confidence = { thresholds = [0.3], bounds = [[1, 6]] }";
    let text = format!(
        "{}[methods]\n[[methods.grid]]\n{axes}\nschedulers.sequential = {{}}\nschedulers.dsi = {{ servers = [2] }}\n{}",
        &s.config[..methods],
        &s.config[outro..]
    );
    let cfg = load_config(&s, &text, "feature").unwrap();
    let out = run(&cfg, &opts(None, None)).unwrap();
    assert!(out.audit_failures.is_empty(), "{:?}", out.audit_failures);
    let rows: Vec<&ResultRow> = out.rows.iter().filter(|r| r.setting.family() == "feature").collect();
    assert_eq!(rows.len(), 9 * 6, "9 units x 3 policies x 2 schedulers");
    assert!(
        rows.iter().all(|r| (!r.greedy() || r.identical_to_ar) && r.n_draft_calls > 0),
        "every feature-head row drafted, greedy ones equal to AR"
    );
    let manifest = std::fs::read_to_string(s.root.join("feature/manifest.json")).unwrap();
    assert!(manifest.contains("feature_heads"), "the run records its feature head");
    // Greedy replay: the target reads each trace once, the head drafts along the AR output.
    let replay_grid = s.root.join("replay-feature.toml");
    std::fs::write(&replay_grid, format!("[methods]\n[[methods.grid]]\n{axes}\n")).unwrap();
    let o = replay(&s.root.join("feature"), &ReplayConfig::load(&replay_grid).unwrap(), "grid", false).unwrap();
    assert!(o.mismatches.is_empty(), "{:?}", o.mismatches);
    assert_eq!(o.compared, 3 * 3, "every greedy unit's 3 sequential feature-head settings compared");
}

#[test]
fn a_device_list_runs_one_part_per_device_and_merges_them() {
    let s = setup();
    let small = s
        .config
        .replace("[[sampling]]\nname = \"t1\"\ntemperature = 1.0\n", "")
        .replace("seeds = [0, 1]", "seeds = [0]");
    let plain = run(&load_config(&s, &small, "plain").unwrap(), &opts(None, None)).unwrap();
    let listed = small.replace("[models]\n", "[models]\ndevices = [\"cpu\"]\n");
    let cfg = load_config(&s, &listed, "listed").unwrap();
    // Stopped early: the part keeps its units, nothing is merged yet.
    let partial = run(&cfg, &opts(None, Some(1))).unwrap();
    assert!(!partial.manifest.complete && partial.manifest.units_done == 1);
    let dir = s.root.join("listed");
    assert!(dir.join("parts/0/manifest.json").is_file() && !dir.join("manifest.json").exists());
    // Resumed and merged: the plain run's rows, with results and reports in the run directory.
    let merged = run(&cfg, &opts(None, None)).unwrap();
    assert!(merged.manifest.complete && merged.manifest.part.is_none());
    assert_eq!(untimed_all(&merged.rows), untimed_all(&plain.rows));
    assert!(dir.join("results.parquet").is_file() && dir.join("summary.md").is_file());
    // Its config.toml repeats the listed run, as a one-process run's does.
    assert_eq!(EvalConfig::load(&dir.join("config.toml")).unwrap().to_toml(), cfg.to_toml());
    // Again: every part is finished, the same rows come back.
    assert_eq!(untimed_all(&run(&cfg, &opts(None, None)).unwrap().rows), untimed_all(&plain.rows));
    // A part of a listed run needs the list's part count.
    let e = format!("{:#}", run(&cfg, &opts(Some(Part { index: 0, count: 2 }), None)).unwrap_err());
    assert!(e.contains("one part per device"), "{e}");
    // A directory holding a one-device run is not merged over.
    let e = format!("{:#}", run(&load_config(&s, &listed, "plain").unwrap(), &opts(None, None)).unwrap_err());
    assert!(e.contains("holds a run made on devices"), "{e}");
    // Devices of the parts and of DSI's workers would collide: refused before models load.
    let both =
        listed.replace("[methods]\n", "[methods]\ndsi = { servers = [1], lookaheads = [2], devices = [\"cpu\"] }\n");
    let e = format!("{:#}", load_config(&s, &both, "both").and_then(|c| c.validate()).unwrap_err());
    assert!(e.contains("[models] devices") && e.contains("[methods.dsi] devices"), "{e}");
}

#[test]
fn margins_census_covers_every_greedy_position() {
    let s = setup();
    let greedy = s
        .config
        .replace("[[sampling]]\nname = \"t1\"\ntemperature = 1.0\n", "")
        .replace("seeds = [0, 1]", "seeds = [0]");
    let o = run(&load_config(&s, &greedy, "g").unwrap(), &opts(None, None)).unwrap();
    let dir = s.root.join("g");
    let c = specx_eval::experiment::margins::margins(&dir, false).unwrap();
    let generated: usize = o.rows.iter().filter(|r| r.setting.family() == "ar").map(|r| r.n_generated).sum();
    assert_eq!((c.units, c.positions), (3, generated));
    assert!(c.below.windows(2).all(|w| w[0].1 <= w[1].1), "{:?}", c.below);
    // The census against margins computed here, from the same teacher-forced forward (the
    // f32 path's many-row gemm is not bitwise a one-row step) with a full sort for the top two.
    let target = load_model(&s.target, None, &default_device()).unwrap();
    let mut margins = Vec::new();
    for u in specx_eval::experiment::merge::greedy_units(&dir).unwrap() {
        let mut seq = u.prompt.clone();
        seq.extend_from_slice(&u.ar_tokens);
        let rows =
            target.model.forward(&seq, &mut target.model.new_cache(1)).unwrap().logits_tail(u.ar_tokens.len() + 1);
        for mut row in rows.into_iter().take(u.ar_tokens.len()) {
            row.sort_by(|a, b| b.total_cmp(a));
            margins.push(row[0] - row[1]);
        }
    }
    margins.sort_by(f32::total_cmp);
    assert_eq!((c.min_margin, c.median_margin), (margins[0], margins[margins.len() / 2]));
    for &(t, n) in &c.below {
        assert_eq!(n, margins.iter().filter(|&&m| m < t).count(), "margins below {t}");
    }
    // The tiny models' greedy choices are not near-ties: a one-forward replay agrees with AR.
    assert!(c.argmax_departures.is_empty(), "{:?}", c.argmax_departures);
    assert!(dir.join("margins.json").is_file());
    let table = specx_eval::experiment::margins::census_table(&c);
    assert!(table.contains("< 1e-2") && table.contains(&format!("{generated} generated positions")), "{table}");
    // A directory that is not a run is named.
    let e = format!("{:#}", specx_eval::experiment::margins::margins(&s.root, false).unwrap_err());
    assert!(e.contains("manifest.json"), "{e}");
}

/// `[[methods.grid]]`: every drafter x policy x scheduler the core composes runs from a config
/// (DSI with a head included, which no paper section offers), greedy outputs identical to AR,
/// and the three parts are columns of the results table.
#[test]
fn every_combination_of_the_three_axes_runs_from_a_config_and_is_lossless() {
    let s = setup();
    let methods = s.config.find("[methods]").unwrap();
    let outro = s.config.find("[output]").unwrap();
    let grid = r#"[[methods.grid]]
drafters.plain = {}
drafters.easyspec = { strategies = ["0-1"], calibrations = ["every_round"] }
policies.fixed = { k = [2] }
policies.head = { heads = ["head-a"], thresholds = [0.5], bounds = [[1, 4]] }
policies.confidence = { thresholds = [0.3], bounds = [[1, 4]] }
schedulers.sequential = {}
schedulers.dsi = { servers = [2] }
"#;
    let text = format!("{}{grid}{}", &s.config[..methods], &s.config[outro..]);
    let cfg = load_config(&s, &text, "axes").unwrap();
    let settings = specx_eval::experiment::grid::expand(&cfg.methods).unwrap();
    assert_eq!(settings.len(), 1 + 2 * 3 * 2);
    assert!(settings.iter().any(|x| x.key() == "dsi SP=2 specdecpp head-a h=0.5 [1,4]"));
    assert!(settings.iter().any(|x| x.key() == "easyspec 0-1 every_round | dsi SP=2 confidence 0.3 [1,4]"));
    let out = run(&cfg, &opts(None, None)).unwrap();
    assert!(out.audit_failures.is_empty(), "{:?}", out.audit_failures);
    let greedy: Vec<&ResultRow> = out.rows.iter().filter(|r| r.greedy()).collect();
    assert_eq!(greedy.len(), 3 * settings.len());
    for r in &greedy {
        assert!(r.identical_to_ar, "{} {}", r.prompt_id, r.setting.key());
        assert_eq!(r.dsi.is_some(), r.setting.scheduler() == Some("dsi"), "{}", r.setting.key());
    }
    let t = specx_eval::common::results::ResultsTable::read(&s.root.join("axes")).unwrap();
    let parts = |name: &str| t.strs(name).unwrap().into_iter().collect::<std::collections::BTreeSet<_>>();
    assert_eq!(parts("drafter"), [None, Some("easyspec".into()), Some("plain".into())].into());
    assert_eq!(parts("policy"), [None, Some("confidence".into()), Some("fixed".into()), Some("head".into())].into());
    assert_eq!(parts("scheduler"), [None, Some("dsi".into()), Some("sequential".into())].into());
    // A setting named twice (here by a section and by the grid) is refused before any model loads.
    let twice = text.replace("[[methods.grid]]", "[methods]\nspecdec = { k = [2] }\n[[methods.grid]]");
    let err = format!("{:#}", run(&load_config(&s, &twice, "twice").unwrap(), &opts(None, None)).unwrap_err());
    assert!(err.contains("'specdec K=2' twice"), "{err}");
}

/// Every published stop rule runs for real from one `[[methods.grid]]` (greedy output equal
/// to AR's, sampled runs too), and the greedy replay, which feeds the same policy objects the
/// recorded looks, reproduces every real greedy row count for count, the rules that drop
/// their trigger token and the ones that adapt across rounds included. The bandit learns
/// from measured wall time when live and from the replay's cost model when replayed, so it
/// is replayed but not compared.
#[test]
fn every_stop_rule_runs_live_and_replays_count_for_count() {
    let s = setup();
    // A head that also reads the draft's statistics of the token it scores, and only them: a
    // linear head sigmoid(12 q - 6) of the token's draft probability q, so that scoring a look
    // with another look's statistics changes the stop decisions.
    let d = load_model(&s.draft, None, &default_device()).unwrap();
    let hidden = d.model.config().hidden_size;
    let spec = HeadSpec {
        hidden_size: hidden,
        depth: 0,
        tied: false,
        draft_model_sha256: Some(d.weights_sha256().unwrap()),
        draft_transform: None,
        training: serde_json::json!({}),
        draft_stats: true,
    };
    let dir = s.root.join("head-stats");
    AcceptanceHead::init_seeded_with_inputs(hidden, 3, 0, false, 11, &default_device()).save(&dir, &spec).unwrap();
    let mut weight = vec![0f32; hidden + 3];
    weight[hidden] = 12.0;
    write_linear_head(&dir.join("head.safetensors"), &weight, -6.0);
    let rules = r#"[[methods.grid]]
policies.head = { heads = ["head-stats"], thresholds = [0.3, 0.6], bounds = [[1, 8]] }
policies.head_token = { heads = ["head-stats"], thresholds = [0.4], bounds = [[1, 8]] }
policies.confidence_product = { thresholds = [0.5], bounds = [[1, 8]] }
policies.roc = { thresholds = [0.3], max = [6] }
policies.pmin = { p_min = [0.5, 0.9], n_max = [6] }
policies.dynamic = { initial = [2], cap = 8 }
policies.svip = { thresholds = [0.4], max = [8] }
policies.adaedl = { lambda = [0.3, 0.7], max = [6] }
"#;
    let head_part = &s.config[..s.config.find("[methods]").unwrap()];
    let cfg = format!("{head_part}[methods]\n{rules}[output]\ndir = \"out\"\n");
    let live = run(&load_config(&s, &cfg, "rules").unwrap(), &opts(None, None)).unwrap();
    assert!(audit(&live.rows, &Default::default()).failures.is_empty());
    let greedy_rows = live.rows.iter().filter(|r| r.greedy() && r.setting.family() != "ar");
    assert_eq!(greedy_rows.clone().count(), 3 * 11);
    assert!(greedy_rows.clone().all(|r| r.identical_to_ar));
    // p_min 0.9 drops first candidates on this pair: some rounds verify nothing.
    assert!(greedy_rows.clone().any(|r| r.drafted_per_round.contains(&0)), "no round verified zero candidates");
    let grid = s.root.join("rules-grid.toml");
    std::fs::write(
        &grid,
        format!("[methods]\n{rules}policies.bandit = {{ arms = [[1, 2, 4]] }}\npolicies.oracle = {{}}\n"),
    )
    .unwrap();
    let o = replay(&s.root.join("rules"), &ReplayConfig::load(&grid).unwrap(), "grid", false).unwrap();
    assert!(o.mismatches.is_empty(), "{:#?}", o.mismatches);
    assert_eq!(o.compared, 3 * 11);
    assert_eq!(o.replayed.len(), 3 * 13);
    // The comparison tables and Figure 3 with every rule, from this replay.
    let repro = s.root.join("adaptive.toml");
    std::fs::write(
        &repro,
        format!("replays = [{:?}]\nout = \"adaptive\"\n[[costs]]\nname = \"A100\"\nt_draft = 0.0234\nt_target = 0.112\n[defaults]\npmin = [\"pmin 0.5 n_max=6\"]\n", o.dir.display().to_string()),
    )
    .unwrap();
    specx_eval::reproduce::adaptive::run(&specx_eval::reproduce::adaptive::AdaptiveArgs { config: repro }).unwrap();
    let md = std::fs::read_to_string(s.root.join("adaptive/results.md")).unwrap();
    assert!(md.lines().any(|l| l.contains("pmin 0.5 n_max=6") && l.contains("default")), "{md}");
    assert!(!md.contains("NaN"), "{md}");
    for needle in ["## alpaca (greedy)", "best at A100", "oracle", "adaedl", "bandit"] {
        assert!(md.contains(needle), "{needle} missing from\n{md}");
    }
    assert_eq!(&std::fs::read(s.root.join("adaptive/frontier_alpaca.png")).unwrap()[..4], b"\x89PNG");
    let bandit: Vec<&ResultRow> = o.replayed.iter().filter(|r| r.setting.family() == "bandit").collect();
    // Every round drafts one of the bandit's arms, unless the token budget left is shorter or
    // the draft's greedy continuation reached EOS first (checked by drafting it here).
    let draft = load_model(&s.draft, None, &default_device()).unwrap();
    let eos = &draft.model.config().eos_token_ids;
    let units = specx_eval::experiment::merge::greedy_units(&s.root.join("rules")).unwrap();
    let mut eos_cut = 0;
    for r in &bandit {
        let u =
            units.iter().find(|u| u.rows[0].dataset == r.dataset && u.rows[0].prompt_index == r.prompt_index).unwrap();
        let mut generated = 1; // the prefill's token
        for (i, (&k, &a)) in r.drafted_per_round.iter().zip(&r.accepted_per_round).enumerate() {
            let left = r.max_new_tokens - generated;
            if !([1, 2, 4].contains(&k) || k == left) {
                let mut seq = u.prompt.clone();
                seq.extend_from_slice(&u.ar_tokens[..generated]);
                for _ in 0..k {
                    let logits = specx_decoder::generate::last_logits(
                        &draft.model.forward(&seq, &mut draft.model.new_cache(1)).unwrap(),
                    );
                    seq.push(specx_decoder::sampling::argmax(&logits));
                }
                assert!(
                    k < 4 && eos.contains(seq.last().unwrap()),
                    "round {i} drafted {k} ({left} tokens left) without reaching EOS: {r:?}"
                );
                eos_cut += 1;
            }
            generated = (generated + a + 1).min(r.max_new_tokens);
        }
    }
    eprintln!("bandit rounds cut short by a drafted EOS: {eos_cut}");
}

/// A depth-0 head's `head.safetensors` with the given output weight row and bias (the
/// safetensors format by hand: 8-byte header length, JSON header, little-endian f32 data).
fn write_linear_head(path: &std::path::Path, weight: &[f32], bias: f32) {
    let n = weight.len();
    let header = format!(
        r#"{{"out.bias":{{"dtype":"F32","shape":[1],"data_offsets":[0,4]}},"out.weight":{{"dtype":"F32","shape":[1,{n}],"data_offsets":[4,{}]}}}}"#,
        4 + 4 * n
    );
    let mut bytes = (header.len() as u64).to_le_bytes().to_vec();
    bytes.extend_from_slice(header.as_bytes());
    bytes.extend_from_slice(&bias.to_le_bytes());
    weight.iter().for_each(|w| bytes.extend_from_slice(&w.to_le_bytes()));
    std::fs::write(path, bytes).unwrap();
}

/// Cheaper drafts from a config: every method runs once per draft of
/// `[methods] drafts`, losslessly; the run records each draft's identity (its table by sha256);
/// a head trained with one draft transform is refused with another, naming both, before any
/// prompt runs; a replay refuses a cheaper draft (its traces are the draft's as loaded).
#[test]
fn cheaper_drafts_run_from_a_config_and_heads_of_another_transform_are_refused() {
    use specx_decoder::draft::frequencies::TokenFrequencies;
    let s = setup();
    let (draft, target) = specx_decoder::synthetic::write_tiny_char_pair_gguf(
        &s.root.join("gguf"),
        7,
        0.35,
        specx_decoder::gguf::GgmlType::Q8_0,
    )
    .unwrap();
    let d = load_model(&draft, None, &default_device()).unwrap();
    let vocab = d.model.config().vocab_size;
    let counts: Vec<u64> = (0..vocab as u64).map(|i| (i * 37) % 11).collect();
    TokenFrequencies::from_counts(&counts, Vec::new(), d.tokenizer.vocab_sha256(), vocab, Vec::new())
        .write(&s.root.join("freq.tsv"))
        .unwrap();
    let methods = s.config.find("[methods]").unwrap();
    let outro = s.config.find("[output]").unwrap();
    let with_methods = |m: &str| {
        let head = &s.config[..methods];
        let head = head
            .replace(&s.draft.display().to_string(), &draft.display().to_string())
            .replace(&s.draft.with_file_name("target").display().to_string(), &target.display().to_string());
        format!("{head}{m}\n{}", &s.config[outro..])
    };
    let text = with_methods(
        "[methods]\nspecdec = { k = [3] }\ndrafts = [{}, { vocab = 40, vocab_table = \"freq.tsv\" }, { weights = \"q4_0\" }]",
    );
    let cfg = load_config(&s, &text, "cheap").unwrap();
    let out = run(&cfg, &opts(None, None)).unwrap();
    assert!(out.audit_failures.is_empty(), "{:?}", out.audit_failures);
    let keys: std::collections::BTreeSet<String> = out.rows.iter().map(|r| r.setting.key()).collect();
    assert_eq!(
        keys,
        ["ar", "specdec K=3", "specdec K=3 [draft v40:freq]", "specdec K=3 [draft q4_0]"].map(String::from).into()
    );
    for r in out.rows.iter().filter(|r| r.greedy()) {
        assert!(r.identical_to_ar, "{} {}", r.prompt_id, r.setting.key());
    }
    let ids = &out.manifest.draft_transforms;
    assert_eq!(ids.len(), 2, "{ids:?}");
    assert!(ids.iter().any(|(l, id)| l == "v40:freq" && id.starts_with("vocab=40 table=")), "{ids:?}");
    assert!(ids.iter().any(|(l, id)| l == "q4_0" && id == "weights=q4_0"), "{ids:?}");

    // A head made with the draft as loaded: refused for the subset draft, naming both.
    let hidden = d.model.config().hidden_size;
    let head_for = |name: &str, transform: Option<&str>| {
        let spec = HeadSpec {
            hidden_size: hidden,
            depth: 1,
            tied: false,
            draft_model_sha256: Some(d.weights_sha256().unwrap()),
            draft_transform: transform.map(String::from),
            training: serde_json::json!({}),
            draft_stats: false,
        };
        AcceptanceHead::init_seeded(hidden, 1, false, 3, &default_device()).save(&s.root.join(name), &spec).unwrap();
    };
    head_for("head-g", None);
    let mixed = with_methods(
        "[methods]\nspecdecpp = { heads = [\"head-g\"], thresholds = [0.5] }\ndrafts = [{ vocab = 40, vocab_table = \"freq.tsv\" }]",
    );
    let e = format!("{:#}", run(&load_config(&s, &mixed, "mixed").unwrap(), &opts(None, None)).unwrap_err());
    assert!(e.contains("head 'head-g'") && e.contains("'none'") && e.contains("'vocab=40 table="), "{e}");
    // A head made for the subset draft: refused with the draft as loaded.
    head_for("head-c", Some("vocab=40 table=0123456789ab"));
    let plain = with_methods("[methods]\nspecdecpp = { heads = [\"head-c\"], thresholds = [0.5] }");
    let e = format!("{:#}", run(&load_config(&s, &plain, "plain").unwrap(), &opts(None, None)).unwrap_err());
    assert!(e.contains("'vocab=40 table=0123456789ab'") && e.contains("runs with 'none'"), "{e}");
    // Replays trace the draft as loaded.
    let grid = s.root.join("cheap-replay.toml");
    std::fs::write(&grid, "[methods]\nspecdec = { k = [2] }\ndrafts = [{ weights = \"q4_0\" }]\n").unwrap();
    let e = format!(
        "{:#}",
        replay(&s.root.join("cheap"), &ReplayConfig::load(&grid).unwrap(), "cheap-replay", false)
            .err()
            .expect("refused")
    );
    assert!(e.contains("replays trace the draft as loaded"), "{e}");
}

/// An optional prompt set whose file is missing is left out (by `--check` and by the run, which
/// then writes only the other sets' rows); the same set made required fails before any model
/// loads, naming the set and the file; a config whose every set is optional and missing fails.
#[test]
fn a_missing_optional_prompt_set_is_skipped_and_a_missing_required_one_is_named() {
    use specx_eval::experiment::check::check;
    let s = setup();
    let extra = "[[prompts]]\nname = \"gsm8k\"\nformat = \"gsm8k\"\npath = \"no-such/test.jsonl\"\nsample = 2\nchat_template = \"none\"\noptional = true\n";
    let text = s.config.replace("[[sampling]]\nname = \"greedy\"", &format!("{extra}[[sampling]]\nname = \"greedy\""));
    assert_ne!(text, s.config, "the extra set was not inserted");
    let cfg = load_config(&s, &text, "optional").unwrap();

    let plan = check(&cfg, Some(1)).unwrap();
    assert_eq!(plan.sets.iter().map(|(n, _, k)| (n.as_str(), *k)).collect::<Vec<_>>(), [("alpaca", 1)]);
    assert_eq!(plan.skipped.len(), 1);
    assert_eq!(plan.skipped[0].name, "gsm8k");
    let shown = plan.render();
    assert!(
        shown.contains("| gsm8k") && shown.contains("skipped: optional") && shown.contains("no-such/test.jsonl"),
        "{shown}"
    );
    assert!(!s.root.join("optional").exists(), "--check wrote the run directory");

    let outcome = run(&cfg, &EvalOptions { part: None, limit: Some(1), max_new_units: None, progress: false }).unwrap();
    assert!(!outcome.rows.is_empty());
    assert!(outcome.rows.iter().all(|r| r.dataset == "alpaca"), "rows of a skipped set");
    let units: std::collections::BTreeSet<_> =
        outcome.rows.iter().map(|r| (r.prompt_id.clone(), r.sampling.clone(), r.seed)).collect();
    assert_eq!(units.len(), plan.units, "--check's unit count is the run's");

    let required = text.replace("optional = true\n", "");
    let e = format!("{:#}", load_config(&s, &required, "required").unwrap_err());
    assert!(e.contains("prompt set 'gsm8k'") && e.contains("no-such/test.jsonl"), "{e}");

    let all_missing = text
        .replace("name = \"alpaca\"\n", "name = \"alpaca\"\noptional = true\n")
        .replace(&alpaca().display().to_string(), "/no-such/alpaca.json");
    let cfg = load_config(&s, &all_missing, "all-missing").unwrap();
    let e = format!("{:#}", check(&cfg, None).unwrap_err());
    assert!(
        e.contains("every prompt set is optional and missing") && e.contains("alpaca") && e.contains("gsm8k"),
        "{e}"
    );
}
