//! Every shipped eval config parses (unknown keys would be errors), names its prompt sets in
//! the dataset cache, and expands to the grid its comment promises.

use specx_eval::experiment::config::EvalConfig;
use specx_eval::experiment::grid::expand;
use specx_eval::experiment::replay_run::ReplayConfig;
use specx_reproduce::adaptive::AdaptiveConfig;
use specx_run::RunConfig;
use std::path::{Path, PathBuf};

fn dir() -> PathBuf {
    std::env::var_os("CARGO_MANIFEST_DIR")
        .map_or_else(|| env!("CARGO_MANIFEST_DIR").into(), PathBuf::from)
        .join("../../configs/eval")
}

fn parse(name: &str) -> EvalConfig {
    let path = dir().join(name);
    let mut c = EvalConfig::parse(&std::fs::read_to_string(&path).unwrap(), Path::new(name)).unwrap();
    c.resolve(&dir());
    c
}

#[test]
fn shipped_eval_configs_parse_and_expand() {
    let smoke = parse("smoke.toml");
    assert_eq!(
        smoke.prompts.iter().map(|p| (p.name.as_str(), p.sample)).collect::<Vec<_>>(),
        [("alpaca", Some(3)), ("gsm8k", Some(3)), ("humaneval", Some(3))]
    );
    assert_eq!(smoke.budget.new_tokens(1000), 128);
    let keys: Vec<String> = expand(&smoke.methods).unwrap().iter().map(|s| s.key()).collect();
    assert_eq!(
        keys,
        [
            "ar",
            "specdec K=4",
            "specdecpp specdecpp-default h=0.7 [2,20]",
            "confidence 0.5 [2,20]",
            "lookup n=2..4 | matchrate 0.2 [1,16]",
            "suffix a=2 p>=0.1 cached=16 | specdec K=24"
        ]
    );
    let cache = specx_run::paths::dataset_cache_dir();
    for name in ["specdecpp-alpaca.toml", "specdecpp-gsm8k.toml", "specdecpp-humaneval.toml"] {
        let c = parse(name);
        assert!(c.prompts[0].path.starts_with(&cache), "{name}: {}", c.prompts[0].path.display());
        assert_eq!(c.budget.max_total_tokens, Some(512));
        assert_eq!(expand(&c.methods).unwrap().len(), 1 + 8 + 5, "{name}");
        assert!(c.prompts[0].template.is_some() && c.prompts[0].chat_template == "qwen");
    }
    let dsi = parse("dsi-real.toml");
    let mut no_profile = dsi.methods.clone();
    no_profile.dsi.as_mut().unwrap().profile = None;
    let keys: Vec<String> = expand(&no_profile).unwrap().iter().map(|s| s.key()).collect();
    assert_eq!(
        keys,
        [
            "ar",
            "specdec K=1",
            "specdec K=2",
            "specdec K=3",
            "specdec K=5",
            "dsi SP=1 k=5",
            "dsi SP=2 k=5",
            "dsi SP=4 k=5"
        ]
    );
    let grid: ReplayConfig = toml::from_str(&std::fs::read_to_string(dir().join("replay-grid.toml")).unwrap()).unwrap();
    assert_eq!(expand(&grid.methods).unwrap().len(), 1 + 10 + 9 * 2 + 5);
    // Cheaper drafts: every draft of [methods] drafts once per method.
    let cheap: Vec<String> = expand(&parse("cheap-drafts.toml").methods).unwrap().iter().map(|s| s.key()).collect();
    assert_eq!(
        cheap,
        [
            "ar",
            "specdec K=4",
            "specdec K=4 [draft v32768]",
            "specdec K=4 [draft v16384]",
            "specdec K=4 [draft v8192]",
            "specdec K=4 [draft q4_0]",
            "specdec K=4 [draft v32768+q4_0]"
        ]
    );
    let speed: Vec<String> =
        expand(&parse("cheap-drafts-speed.toml").methods).unwrap().iter().map(|s| s.key()).collect();
    assert_eq!(speed, ["ar", "specdec K=4", "specdec K=4 [draft q4_0]"]);
}

/// The GPU audit config: a numerical audit on the wgpu device; a build without the `wgpu`
/// feature refuses it before loading anything, naming the feature.
#[test]
fn the_wgpu_audit_config_asks_for_a_numerical_audit_on_the_device() {
    use specx_eval::experiment::config::AuditMode;
    let c = parse("wgpu-audit.toml");
    assert_eq!((c.models.device.as_str(), c.audit.mode, c.audit.near_tie), ("wgpu", AuditMode::Numerical, 0.01));
    assert!(c.sampling.iter().all(|s| s.temperature == 0.0), "the audit is about greedy runs");
    if !cfg!(feature = "wgpu") {
        let e = format!("{:#}", c.validate().unwrap_err());
        assert!(e.contains("[models] device") && e.contains("--features wgpu"), "{e}");
    }
    let mut bad = c.clone();
    bad.models.device = "wgpu:x".into();
    assert!(format!("{:#}", bad.validate().unwrap_err()).contains("not a device index"));
    let mut dup = parse("dsi-real.toml");
    dup.methods.dsi.as_mut().unwrap().devices = vec!["cpu".into(), "cpu".into()];
    dup.methods.dsi.as_mut().unwrap().profile = None;
    let e = format!("{:#}", dup.validate().unwrap_err());
    assert!(e.contains("listed twice"), "{e}");
    // EasySpec's attention devices and the parts' devices are checked the same way.
    let mut es = parse("easyspec-alpaca-t07.toml");
    es.methods.easyspec.as_mut().unwrap().devices = vec!["cpu".into(), "cpu".into()];
    let e = format!("{:#}", es.validate().unwrap_err());
    assert!(e.contains("[methods.easyspec] devices") && e.contains("listed twice"), "{e}");
    let mut parts = parse("smoke.toml");
    parts.models.devices = vec!["cpu".into(), "cuda:x".into()];
    assert!(format!("{:#}", parts.validate().unwrap_err()).contains("[models] devices"));
    if !cfg!(feature = "wgpu") {
        es.methods.easyspec.as_mut().unwrap().devices = vec!["cpu".into(), "wgpu:0".into()];
        let e = format!("{:#}", es.validate().unwrap_err());
        assert!(e.contains("[methods.easyspec] devices") && e.contains("--features wgpu"), "{e}");
    }
}

fn replay_grid(name: &str) -> Vec<String> {
    let grid: ReplayConfig = toml::from_str(&std::fs::read_to_string(dir().join(name)).unwrap()).unwrap();
    expand(&grid.methods).unwrap().iter().map(|s| s.key()).collect()
}

/// The SpecDec++ reproduction's configs: the greedy trace, its grid, and the real runs whose
/// settings the real-run replay re-derives count for count.
#[test]
fn specdecpp_reproduction_configs_agree() {
    let trace = parse("specdecpp-trace.toml");
    let names = |c: &EvalConfig| c.prompts.iter().map(|p| p.name.clone()).collect::<Vec<_>>();
    assert_eq!(names(&trace), ["alpaca", "gsm8k", "humaneval"]);
    assert_eq!(trace.budget.max_total_tokens, Some(512));
    // The reproduction replays the adaptive-drafting grid (the paper's 20 heads among others).
    let grid = replay_grid("adaptive-replay.toml");
    assert!(grid.iter().any(|k| k == "confidence 0.7 [1,20]"), "f32 thresholds keyed as written: {grid:?}");
    for real in ["specdecpp-real.toml", "specdecpp-sampled.toml"] {
        let c = parse(real);
        assert_eq!(names(&c), names(&trace), "{real}: the trace's prompt sets");
        for (p, t) in c.prompts.iter().zip(&trace.prompts) {
            assert_eq!(
                (&p.path, &p.template, p.sample, &p.split),
                (&t.path, &t.template, t.sample, &t.split),
                "{real}: {}",
                p.name
            );
        }
    }
    let real_keys: Vec<String> =
        expand(&parse("specdecpp-real.toml").methods).unwrap().iter().map(|s| s.key()).collect();
    assert_eq!(
        real_keys,
        replay_grid("specdecpp-real-replay.toml"),
        "the real-run replay covers exactly the real settings"
    );
    let sampled = parse("specdecpp-sampled.toml");
    assert_eq!(sampled.sampling.iter().map(|s| s.name.as_str()).collect::<Vec<_>>(), ["t1-topk50", "t0.7"]);
}

/// The adaptive-drafting replay grid holds every training-free rule at its published default
/// and a sweep of its free parameter, priced for the bandit at the paper's A100 times, and the
/// learned heads (the data-scaling heads and the shipped one) at thresholds 0.1-0.9, two bounds,
/// and the paper's 20 Table 3 heads at thresholds 0.1-0.9 under its bounds [2, 20].
#[test]
fn the_adaptive_drafting_grid_has_every_rule_at_its_default() {
    let grid: ReplayConfig =
        toml::from_str(&std::fs::read_to_string(dir().join("adaptive-replay.toml")).unwrap()).unwrap();
    assert_eq!((grid.costs.t_draft, grid.costs.t_target), (0.0234, 0.112));
    let keys = replay_grid("adaptive-replay.toml");
    assert_eq!(keys.len(), 1 + 11 + 1 + 9 + 3 + 18 + 5 + 8 + 7 + 3 + 4 * 9 * 2 + 20 * 9);
    assert!(keys.iter().any(|k| k == "specdecpp w6-d3 h=0.7 [2,20]"), "the paper's default head of the Table 3 grid");
    assert!(
        keys.iter().any(|k| k == "specdecpp specdecpp-default h=0.7 [2,20]"),
        "the shipped head at the paper's default: {keys:?}"
    );
    for default in [
        "confidence 0.4 [1,20]",
        "roc 0.4 [1,20]",
        "pmin 0.75 n_max=16",
        "pmin 0 n_max=3",
        "dynamic K0=5 cap=64",
        "svip 0.3 [1,40]",
        "adaedl lambda=0.7 gamma=0.2 [1,16]",
        "bandit K=1,2,3,4",
        "oracle",
    ] {
        assert!(keys.iter().any(|k| k == default), "{default} missing from {keys:?}");
    }
}

/// The adaptive-drafting real runs: the trace's prompt sets, greedy and the paper's sampling,
/// and every rule's published default that the reproduction's `[defaults]` names (SpecDec++'s
/// through the shipped head, the paper's default architecture being retrained, not committed),
/// besides AR and fixed K.
#[test]
fn the_adaptive_real_runs_cover_every_rules_default() {
    let (real, trace) = (parse("adaptive-real.toml"), parse("specdecpp-trace.toml"));
    for (p, t) in real.prompts.iter().zip(&trace.prompts) {
        assert_eq!(
            (&p.name, &p.path, &p.template, p.sample, &p.split),
            (&t.name, &t.path, &t.template, t.sample, &t.split)
        );
    }
    assert_eq!(real.prompts.len(), trace.prompts.len());
    let sampling: Vec<_> = real.sampling.iter().map(|s| (s.temperature, s.top_k)).collect();
    assert_eq!(sampling, [(0.0, None), (1.0, Some(50))]);
    let keys: Vec<String> = expand(&real.methods).unwrap().iter().map(|s| s.key()).collect();
    let reproduction = AdaptiveConfig::load(&dir().join("../reproductions/adaptive.toml")).unwrap();
    let mut wanted: Vec<String> = reproduction
        .defaults
        .into_iter()
        .filter(|(family, _)| family != "specdecpp")
        .flat_map(|(_, keys)| keys)
        .collect();
    assert!(
        wanted.iter().any(|k| k == "specdecpp specdecpp-default h=0.7 [2,20]"),
        "the shipped head's default: {wanted:?}"
    );
    wanted.push("ar".into());
    for w in &wanted {
        assert!(keys.contains(w), "{w} missing from {keys:?}");
    }
    assert_eq!(keys.len(), wanted.len() + 2, "AR, two fixed K and one setting per default: {keys:?}");
}

/// The config trio that docs/guide/models.md gives for a new model pair parses as datagen,
/// train and eval configs (every key known, values in range), so the page cannot drift from
/// the config formats.
#[test]
fn the_documented_config_trio_for_a_new_pair_parses() {
    let page = dir().join("../../docs/guide/models.md");
    let text = std::fs::read_to_string(&page).unwrap();
    let blocks: Vec<&str> = text.split("```toml\n").skip(1).map(|b| b.split("```").next().unwrap()).collect();
    assert_eq!(blocks.len(), 3, "models.md should hold the datagen, train and eval configs");
    let tmp = tempfile::tempdir().unwrap();
    let write = |name: &str, body: &str| {
        let p = tmp.path().join(name);
        std::fs::write(&p, body).unwrap();
        p
    };
    let datagen = specx_datagen::config::DatagenConfig::load(&write("datagen.toml", blocks[0])).unwrap();
    datagen.validate().unwrap();
    assert_eq!(datagen.prompts.chat_template, "chatml");
    let train = specx_trainer::acceptance::config::TrainConfig::load(&write("train.toml", blocks[1])).unwrap();
    train.validate().unwrap();
    assert_eq!((train.head.depth, train.loss.w_rej), (3, 6.0));
    let eval = EvalConfig::parse(blocks[2], Path::new("mine.toml")).unwrap();
    let keys: Vec<String> = expand(&eval.methods).unwrap().iter().map(|s| s.key()).collect();
    assert_eq!(
        keys,
        ["ar", "specdec K=2", "specdec K=4", "specdecpp mine-w6-d3 h=0.7 [2,20]", "confidence 0.4 [1,20]"]
    );
}

/// The tuning traces differ from the test traces in their prompts only, and hold none of them:
/// Alpaca's train split past the prompts the heads and the acceptance dataset use, GSM8K's train
/// file, HumanEval past the problems the committed test traces hold.
#[test]
fn the_tuning_traces_differ_from_the_test_traces_in_their_prompts_only() {
    let (tune, test) = (parse("tuning-trace.toml"), parse("specdecpp-trace.toml"));
    assert_eq!(
        (&tune.models, &tune.budget, &tune.sampling, &tune.seeds),
        (&test.models, &test.budget, &test.sampling, &test.seeds)
    );
    for (a, b) in tune.prompts.iter().zip(&test.prompts) {
        assert_eq!(
            (&a.name, &a.format, &a.template, &a.chat_template),
            (&b.name, &b.format, &b.template, &b.chat_template)
        );
    }
    let [alpaca, gsm8k, humaneval] = &tune.prompts[..] else { panic!("three sets") };
    assert!(alpaca.split == "train" && alpaca.skip >= 1325, "Alpaca tuning prompts overlap the training data");
    assert!(gsm8k.path.ends_with("train.jsonl"));
    let units = dir().join("../../traces/specdecpp-trace/units/humaneval/greedy/s0");
    let held = std::fs::read_dir(&units).unwrap().count();
    assert!(
        humaneval.skip >= held && humaneval.split == "all",
        "HumanEval tuning problems from {} overlap the {held} test problems",
        humaneval.skip
    );
    // The tune config reads both runs and prices with the committed q8 profile.
    let t = specx_eval::tune::config::TuneConfig::load(&dir().join("tune-stop-rules.toml")).unwrap();
    assert!(t.tuning.ends_with("traces/tuning-trace") && t.test.ends_with("traces/specdecpp-trace"));
    assert!(t.costs.iter().all(|c| c.t_draft > 0.0 && c.t_target > 0.0) && t.costs[1].t_row > 0.0);
    assert!(t.threshold_plus.is_some());
}

/// The sampled comparisons (temperature 1; Qwen's 0.7 / top-k 20 / top-p 0.8): each pair of
/// trace configs draws alike (coupled, the same warping, weights and budget), its tuning side
/// takes the greedy tuning prompts, and each tune config reads its own pair.
#[test]
fn the_sampled_trace_pairs_draw_alike_and_their_tune_configs_read_them() {
    use specx_decoder::coupling::Draws;
    let greedy = parse("tuning-trace.toml");
    for (tag, temperature, top_k, top_p) in [("t1", 1.0, None, None), ("t07", 0.7, Some(20), Some(0.8))] {
        let (tune, test) =
            (parse(&format!("{tag}-coupled-tuning-trace.toml")), parse(&format!("{tag}-coupled-trace.toml")));
        assert_eq!(
            (&tune.models, &tune.budget, &tune.sampling, &tune.seeds),
            (&test.models, &test.budget, &test.sampling, &test.seeds),
            "{tag}"
        );
        let [s] = &test.sampling[..] else { panic!("{tag}: one sampling setting") };
        assert_eq!((s.temperature, s.top_k, s.top_p, s.draws), (temperature, top_k, top_p, Draws::Coupled), "{tag}");
        assert_eq!(
            test.models.weights,
            specx_decoder::model::WeightMode::Q8,
            "{tag}: the CPU prices are profiled in q8"
        );
        for (a, b) in tune.prompts.iter().zip(&greedy.prompts) {
            assert_eq!(
                (&a.name, &a.path, a.skip, &a.template),
                (&b.name, &b.path, b.skip, &b.template),
                "{tag}: the greedy tuning prompts"
            );
        }
        let t = specx_eval::tune::config::TuneConfig::load(&dir().join(format!("tune-{tag}-coupled.toml"))).unwrap();
        assert!(
            t.tuning.ends_with(format!("traces/{tag}-coupled-tuning-trace"))
                && t.test.ends_with(format!("traces/{tag}-coupled-trace")),
            "{tag}"
        );
        assert!(t.out.ends_with(format!("adaptive-drafting/{tag}-coupled")), "{tag}");
        // The candidates, prices and fits are the greedy comparison's, copied: kept in step.
        let mut greedy_tune = specx_eval::tune::config::TuneConfig::load(&dir().join("tune-stop-rules.toml")).unwrap();
        (greedy_tune.tuning, greedy_tune.test, greedy_tune.out, greedy_tune.in_sample) =
            (t.tuning.clone(), t.test.clone(), t.out.clone(), t.in_sample.clone());
        assert_eq!(t, greedy_tune, "{tag}: the candidates of tune-stop-rules.toml");
    }
}
