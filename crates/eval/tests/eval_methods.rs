//! `specx eval` end to end on a tiny synthetic pair: every drafter, stop policy and scheduler
//! run for real from a config, audited against AR, and replayed to the same counts.

use specx_decoder::speculative::{AcceptanceHead, FeatureHead, FeatureHeadSpec, HeadSpec};
use specx_decoder::{default_device, load_model};
use specx_eval::common::results::ResultRow;
use specx_eval::experiment::audit::audit;
use specx_eval::experiment::replay_run::{ReplayConfig, replay};
use specx_eval::experiment::run;
use specx_testkit::pair::untrained_head;

mod common;

use common::{load_config, opts, setup};

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

/// The small eval's config text with `methods` as its `[methods]` table.
fn methods_text(s: &common::Setup, methods: &str) -> String {
    let (at, outro) = (s.config.find("[methods]").unwrap(), s.config.find("[output]").unwrap());
    format!("{}[methods]\n{methods}\n{}", &s.config[..at], &s.config[outro..])
}

/// The small eval with `methods` as its `[methods]` table, written as the config `out`.
fn with_methods(s: &common::Setup, methods: &str, out: &str) -> specx_eval::experiment::config::EvalConfig {
    load_config(s, &methods_text(s, methods), out).unwrap()
}

/// A grid's schedulers: sequential, and DSI with two servers.
const BOTH_SCHEDULERS: &str = "schedulers.sequential = {}\nschedulers.dsi = { servers = [2] }";

#[test]
fn dsi_method_runs_for_real_and_is_audited() {
    let s = setup();
    std::fs::write(s.root.join("profile.json"), profile_json(0.01, 0.05)).unwrap();
    let dsi = "specdec = { k = [2] }\ndsi = { servers = [1, 3], lookaheads = [2], profile = \"profile.json\" }";
    let text = methods_text(&s, dsi);
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
    // The tiny draft has 2 layers: "0-1" is their one layer-parallel group, lp1 the exact forward.
    let grid = "easyspec = { strategies = [\"0-1\", \"lp1\"], calibrations = [\"every_round\", \"never\"], k = [2], heads = [\"head-a\"], thresholds = [0.5], bounds = [[1, 4]], servers = [2] }";
    let cfg = with_methods(&s, grid, "easyspec");
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
    let axes = "drafters.lookup = { ngrams = [[1, 3]] }\ndrafters.hybrid = { ngrams = [[2, 3]] }\npolicies.fixed = { k = [2, 6] }\npolicies.dynamic = { initial = [2], cap = 8 }\npolicies.matchrate = { thresholds = [0.45], max = [8] }";
    let cfg = with_methods(&s, &format!("[[methods.grid]]\n{axes}\n{BOTH_SCHEDULERS}"), "lookup");
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
fn suffix_trees_run_for_real_are_audited_and_replay_to_the_same_counts() {
    // Trees under the sequential scheduler (one tree call per round), their best branch as a
    // chain under DSI; the replay walks each tree along the AR output.
    let s = setup();
    let axes = "drafters.suffix = { alphas = [1.0, 4.0], min_token_probs = [0.0, 0.1] }\npolicies.fixed = { k = [24] }";
    let cfg = with_methods(&s, &format!("[[methods.grid]]\n{axes}\n{BOTH_SCHEDULERS}"), "suffix");
    let out = run(&cfg, &opts(None, None)).unwrap();
    assert!(out.audit_failures.is_empty(), "{:?}", out.audit_failures);
    let rows: Vec<&ResultRow> = out.rows.iter().filter(|r| r.setting.family() == "suffix").collect();
    assert_eq!(rows.len(), 9 * 8, "9 units x 4 drafters x 2 schedulers");
    for r in &rows {
        assert!(!r.greedy() || r.identical_to_ar, "{} {}", r.prompt_id, r.setting.key());
        assert_eq!(r.n_draft_calls, 0, "the suffix drafter runs no draft forward: {}", r.setting.key());
    }
    assert!(
        rows.iter().any(|r| r.n_accepted > 0) && rows.iter().any(|r| r.n_accepted < r.n_drafted),
        "suffix trees accepted and rejected"
    );
    let replay_grid = s.root.join("replay-suffix.toml");
    std::fs::write(&replay_grid, format!("[methods]\n[[methods.grid]]\n{axes}\n")).unwrap();
    let o = replay(&s.root.join("suffix"), &ReplayConfig::load(&replay_grid).unwrap(), "grid", false).unwrap();
    assert!(o.mismatches.is_empty(), "{:?}", o.mismatches);
    assert_eq!(o.compared, 3 * 4, "every greedy unit's 4 sequential suffix settings compared");
}

/// Every unit file under a run directory.
fn unit_files(dir: &std::path::Path) -> Vec<specx_eval::common::results::UnitFile> {
    let mut files = Vec::new();
    let mut todo = vec![dir.to_path_buf()];
    while let Some(d) = todo.pop() {
        for e in std::fs::read_dir(&d).unwrap() {
            let p = e.unwrap().path();
            if p.is_dir() {
                todo.push(p);
            } else if let Ok(f) = specx_eval::common::results::UnitFile::read_path(&p) {
                files.push(f);
            }
        }
    }
    files
}

#[test]
fn suffix_trees_over_earlier_outputs_resume_to_the_same_rows_and_replay_to_them() {
    // The cross-request corpus: each unit also matches the outputs of the units before it in
    // its stream. An interrupted run rebuilds it from the unit files it finds.
    let s = setup();
    let axes = "drafters.suffix = { alphas = [4.0], min_token_probs = [0.0], cached_requests = [0, 8] }\npolicies.fixed = { k = [24] }";
    let whole = run(&with_methods(&s, &format!("[[methods.grid]]\n{axes}"), "earlier"), &opts(None, None)).unwrap();
    assert!(whole.audit_failures.is_empty(), "{:?}", whole.audit_failures);
    let cfg = with_methods(&s, &format!("[[methods.grid]]\n{axes}"), "earlier-resumed");
    run(&cfg, &opts(None, Some(4))).unwrap();
    let resumed = run(&cfg, &opts(None, None)).unwrap();
    assert_eq!(common::untimed_all(&resumed.rows), common::untimed_all(&whole.rows), "a resumed run's trees differ");
    let suffix_rows = |cached: bool| -> Vec<&ResultRow> {
        let with = |r: &&ResultRow| r.setting.key().contains("cached=8") == cached;
        whole.rows.iter().filter(|r| r.setting.family() == "suffix").filter(with).collect()
    };
    let (with, without) = (suffix_rows(true), suffix_rows(false));
    assert_eq!((with.len(), without.len()), (9, 9), "9 units with and without earlier outputs");
    assert!(with.iter().zip(&without).any(|(a, b)| a.n_drafted != b.n_drafted), "earlier outputs never changed a tree");
    let records: Vec<_> = unit_files(&s.root.join("earlier")).into_iter().filter_map(|f| f.earlier).collect();
    assert_eq!(records.len(), 9, "every unit file records the earlier outputs it matched");
    assert!(records.iter().any(|r| !r.units.is_empty()) && records.iter().all(|r| r.units.len() <= 8), "{records:?}");
    let replay_grid = s.root.join("replay-earlier.toml");
    std::fs::write(&replay_grid, format!("[methods]\n[[methods.grid]]\n{axes}\n")).unwrap();
    let o = replay(&s.root.join("earlier"), &ReplayConfig::load(&replay_grid).unwrap(), "grid", false).unwrap();
    assert!(o.mismatches.is_empty(), "{:?}", o.mismatches);
    assert_eq!(o.compared, 3 * 2, "every greedy unit's 2 suffix settings compared");
}

#[test]
fn draft_trees_run_for_real_are_audited_and_replay_to_the_same_counts() {
    // EAGLE-2's dynamic trees from the draft model under the sequential scheduler; under DSI
    // the plain drafter's chains.
    let s = setup();
    let axes = "drafters.tree = { top_k = [1, 3], max_nodes = [8] }\npolicies.fixed = { k = [3] }";
    // The tree-price policy sizes both tree drafters' trees (sequential only).
    let priced = "[[methods.grid]]\ndrafters.tree = { top_k = [1, 3], max_nodes = [8] }\ndrafters.suffix = { alphas = [4.0], min_token_probs = [0.0] }\npolicies.tree_price = { depth = [3], row_costs = [0.3] }";
    let cfg = with_methods(&s, &format!("[[methods.grid]]\n{axes}\n{BOTH_SCHEDULERS}\n{priced}"), "tree");
    let out = run(&cfg, &opts(None, None)).unwrap();
    assert!(out.audit_failures.is_empty(), "{:?}", out.audit_failures);
    let rows: Vec<&ResultRow> = out.rows.iter().filter(|r| r.setting.family() == "tree").collect();
    assert_eq!(rows.len(), 9 * 6, "9 units x 2 drafters x (fixed K under 2 schedulers, tree-price)");
    for r in &rows {
        assert!(!r.greedy() || r.identical_to_ar, "{} {}", r.prompt_id, r.setting.key());
        assert!(r.n_draft_calls > 0, "the tree drafter runs the draft model: {}", r.setting.key());
    }
    assert!(
        rows.iter().any(|r| r.setting.key().contains("k=3") && r.drafted_per_round.iter().any(|&n| n > 3)),
        "no tree branched"
    );
    // Nodes verified by the 3-child trees under the sequential scheduler.
    let drafted = |policy: &str| -> usize {
        let of = |k: &str| k.contains(policy) && k.contains("tree k=3") && !k.contains("dsi");
        rows.iter().filter(|r| of(&r.setting.key())).map(|r| r.n_drafted).sum()
    };
    assert!(drafted("tree-price") < drafted("specdec"), "a price on rows verified as many nodes");
    let replay_grid = s.root.join("replay-tree.toml");
    std::fs::write(&replay_grid, format!("[methods]\n[[methods.grid]]\n{axes}\n{priced}\n")).unwrap();
    let o = replay(&s.root.join("tree"), &ReplayConfig::load(&replay_grid).unwrap(), "grid", false).unwrap();
    assert!(o.mismatches.is_empty(), "{:?}", o.mismatches);
    assert_eq!(o.compared, 3 * 5, "every greedy unit's 5 sequential tree settings compared");
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
    let axes = "drafters.feature = { heads = [\"fh\"] }\npolicies.fixed = { k = [2, 4] }\npolicies.confidence = { thresholds = [0.3], bounds = [[1, 6]] }";
    let cfg = with_methods(&s, &format!("[[methods.grid]]\n{axes}\n{BOTH_SCHEDULERS}"), "feature");
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
    specx_reproduce::adaptive::run(&specx_reproduce::adaptive::AdaptiveArgs { config: repro }).unwrap();
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
    use specx_decoder::cheap_draft::frequencies::TokenFrequencies;
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
        untrained_head(&s.root.join(name), hidden, Some(d.weights_sha256().unwrap()), transform, 3);
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
