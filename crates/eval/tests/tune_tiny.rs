//! `specx eval tune` on a tiny synthetic pair: settings chosen on tuning traces only, the test
//! traces' counts exact (equal to live decoding with the chosen settings, threshold-plus's and
//! the calibrated model's fitted parameters included), resume, and a test prompt among the
//! tuning prompts refused.

use specx_decoder::sampling::SamplingConfig;
use specx_decoder::speculative::{
    CalibratedPolicy, PlainDrafter, RejectionSampler, SpecConfig, StopPolicy, ThresholdPlusPolicy, generate_speculative,
};
use specx_decoder::{default_device, load_model};
use specx_eval::common::results::UnitFile;
use specx_eval::experiment::config::EvalConfig;
use specx_eval::experiment::grid::expand;
use specx_eval::experiment::merge::greedy_units;
use specx_eval::experiment::replay::ReplayPolicy;
use specx_eval::experiment::trace_builder::{TraceBuilder, TraceInput};
use specx_eval::experiment::{EvalOptions, run};
use specx_eval::tune::bootstrap::{UnitCounts, throughput};
use specx_eval::tune::config::TuneConfig;
use specx_eval::tune::{THRESHOLD_PLUS, tune};
use specx_run::RunManifest;
use specx_testkit::config;
use std::path::{Path, PathBuf};

/// A greedy trace run of the tiny pair over `sample` prompts of an Alpaca split.
fn trace_run(root: &Path, draft: &Path, target: &Path, name: &str, split: &str, sample: usize) -> PathBuf {
    trace_run_with(root, draft, target, name, split, sample, GREEDY)
}

/// A trace run of the tiny pair over `sample` prompts of an Alpaca split, its sampling and
/// methods given as TOML.
fn trace_run_with(
    root: &Path,
    draft: &Path,
    target: &Path,
    name: &str,
    split: &str,
    sample: usize,
    sampling_and_methods: &str,
) -> PathBuf {
    let text = format!(
        r#"
seeds = [0]
{models}{prompts}[budget]
max_new_tokens = 24
[output]
dir = "{name}"
{sampling_and_methods}
"#,
        models = config::models(draft, target),
        prompts = config::alpaca_prompts(split, sample, 3),
    );
    let path = root.join(format!("{name}.toml"));
    std::fs::write(&path, text).unwrap();
    run(
        &EvalConfig::load(&path).unwrap(),
        &EvalOptions { part: None, limit: None, max_new_units: None, progress: false },
    )
    .unwrap();
    root.join(name)
}

/// Greedy AR, batched: the trace runs of the greedy tests.
const GREEDY: &str = "[[sampling]]\nname = \"greedy\"\n[methods]\nar_batch = 4\n";

/// The tiny pair, loaded, with its tuning (6 train prompts) and test (4 test prompts) trace
/// runs, drawn and run as `sampling_and_methods` says.
struct Fixture {
    _tmp: tempfile::TempDir,
    root: PathBuf,
    draft_path: PathBuf,
    target_path: PathBuf,
    tuning: PathBuf,
    test: PathBuf,
    draft: specx_decoder::LoadedModel,
    target: specx_decoder::LoadedModel,
    eos: Vec<u32>,
}

fn fixture(sampling_and_methods: &str) -> Fixture {
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path().to_path_buf();
    let (draft_path, target_path) = specx_decoder::synthetic::write_tiny_char_pair(&root, 7, 0.35).unwrap();
    let tuning = trace_run_with(&root, &draft_path, &target_path, "tuning", "train", 6, sampling_and_methods);
    let test = trace_run_with(&root, &draft_path, &target_path, "test", "test", 4, sampling_and_methods);
    let device = default_device();
    let draft = load_model(&draft_path, None, &device).unwrap();
    let target = load_model(&target_path, None, &device).unwrap();
    let eos = specx_eval::experiment::manifest::EvalManifest::read(&test).unwrap().eos_ids;
    Fixture { _tmp: tmp, root, draft_path, target_path, tuning, test, draft, target, eos }
}

/// Asserts that `r`, its family's setting chosen at `c`, made the best tuning throughput of
/// the candidates `family`, each one's counts on the tuning prompts given by `counts`.
fn assert_chosen_best(
    r: &specx_eval::tune::RuleResult,
    c: &specx_eval::common::costs::Costs,
    family: &[&specx_eval::method::MethodSpec],
    counts: impl Fn(&specx_eval::method::MethodSpec) -> Vec<UnitCounts>,
) {
    let best = family.iter().map(|m| throughput(&counts(m), c)).fold(f64::NEG_INFINITY, f64::max);
    assert!(
        (r.tuning_throughput - best).abs() < 1e-9,
        "{} at {}: chose {} ({}), the best candidate on the tuning prompts made {best}",
        r.family,
        c.name,
        r.setting,
        r.tuning_throughput
    );
}

const CANDIDATES: &str = r#"
[[methods.grid]]
policies.fixed = { k = [1, 2, 4, 6] }
policies.confidence = { thresholds = [0.2, 0.5, 0.8], bounds = [[1, 12]] }
policies.svip = { thresholds = [0.3, 0.6], max = [12] }
policies.oracle = {}

[[costs]]
name = "A100 (paper)"
t_draft = 0.0234
t_target = 0.112

[[costs]]
name = "CPU"
t_draft = 0.05
t_target = 0.12
t_row = 0.03

[threshold_plus]
max_candidates = 12
passes = 2

[calibrated]
thresholds = [0.3, 0.6]
max_candidates = 12
holdout_every = 2
passes = 1
"#;

fn tune_config(root: &Path, tuning: &Path, test: &Path, out: &str) -> TuneConfig {
    let path = root.join(format!("{out}.toml"));
    std::fs::write(
        &path,
        format!(
            "tuning = \"{}\"\ntest = \"{}\"\nout = \"{out}\"\nbootstrap = 200\n{CANDIDATES}",
            tuning.display(),
            test.display()
        ),
    )
    .unwrap();
    TuneConfig::load(&path).unwrap()
}

#[test]
fn settings_are_chosen_on_tuning_traces_and_test_counts_are_exact() {
    let f = fixture(GREEDY);
    let (root, draft_path, target_path, tuning, test) =
        (f.root.as_path(), &f.draft_path, &f.target_path, &f.tuning, &f.test);
    let (draft, target, eos) = (&f.draft, &f.target, &f.eos);
    let cfg = tune_config(root, tuning, test, "tuned");
    let sets = tune(&cfg, false).unwrap();
    assert_eq!(sets.len(), 1);
    let set = &sets[0];
    assert_eq!((set.tuning_prompts.len(), set.test_prompts.len()), (6, 4));

    let tuning_units = greedy_units(tuning).unwrap();
    let test_units = greedy_units(test).unwrap();
    let settings: Vec<_> = expand(&cfg.methods).unwrap().into_iter().filter_map(|s| s.spec().cloned()).collect();

    // Counts of a setting replayed from scratch (one build per policy) on a run's units.
    let fresh =
        |units: &[UnitFile], policy: ReplayPolicy, costs: &specx_eval::common::costs::Costs| -> Vec<UnitCounts> {
            let rc = specx_eval::experiment::replay::ReplayCosts {
                t_draft: costs.t_draft,
                t_target: costs.t_target,
                t_row: costs.t_row,
            };
            let inputs: Vec<TraceInput> = units.iter().map(|u| TraceInput::of(u).unwrap()).collect();
            let mut policies = vec![policy];
            let traces = TraceBuilder::new(&draft.model, &[], eos).build(&inputs, &mut policies, &rc).unwrap();
            traces.iter().map(|t| UnitCounts::of(&t.replay(&mut policies[0], &rc).unwrap())).collect()
        };
    let no_heads: std::collections::HashMap<String, usize> = Default::default();
    for c in &set.results {
        for r in c.rules.iter().filter(|r| r.family != THRESHOLD_PLUS && !r.family.starts_with("calibrated")) {
            // The chosen setting is its family's best on the tuning traces.
            let family: Vec<_> = settings
                .iter()
                .filter(|m| m.key() == r.setting || (m.family() == r.family && r.family != "oracle"))
                .collect();
            assert_eq!(family.len(), r.candidates, "{}: {}", r.family, r.setting);
            assert_chosen_best(r, &c.costs, &family, |m| {
                fresh(&tuning_units, ReplayPolicy::of(m, &no_heads).unwrap(), &c.costs)
            });
            // Its test counts are those of a replay from scratch.
            let m = settings.iter().find(|m| m.key() == r.setting).unwrap();
            assert_eq!(r.test, fresh(&test_units, ReplayPolicy::of(m, &no_heads).unwrap(), &c.costs), "{}", r.setting);
        }
        // Threshold-plus: fitted on tuning (never worse than its start), and its test counts
        // are those of live decoding with the fitted parameters.
        let fit = c.threshold_plus.as_ref().expect("fitted");
        assert!(fit.fitted_throughput >= fit.start_throughput);
        let live = |policy: &mut dyn StopPolicy, test: &[UnitCounts], what: &str| {
            for (u, counts) in test_units.iter().zip(test) {
                let cfg = SpecConfig {
                    max_new_tokens: u.rows[0].max_new_tokens,
                    sampling: SamplingConfig::greedy(),
                    seed: 0,
                };
                let g = generate_speculative(
                    &target.model,
                    &mut PlainDrafter::new(&draft.model),
                    policy,
                    &mut RejectionSampler,
                    &u.prompt,
                    &cfg,
                    eos,
                )
                .unwrap();
                assert_eq!(g.tokens, u.ar_tokens);
                assert_eq!(UnitCounts::of(&g.metrics), *counts, "{what}: {} at {}", u.unit.prompt_id, c.costs.name);
            }
        };
        let tp = c.rules.iter().find(|r| r.family == THRESHOLD_PLUS).unwrap();
        live(&mut ThresholdPlusPolicy::new(fit.params.clone()).unwrap(), &tp.test, THRESHOLD_PLUS);
        // The calibrated model's three rules, the same way; the search on throughput never
        // ends below the product rule it starts from.
        assert_eq!(
            c.calibrated.iter().map(|ch| ch.family.as_str()).collect::<Vec<_>>(),
            ["calibrated", "calibrated-product", "calibrated-fit"]
        );
        assert!(c.calibrated[2].tuning_throughput >= c.calibrated[1].tuning_throughput);
        for ch in &c.calibrated {
            let r = c.rules.iter().find(|r| r.family == ch.family).unwrap();
            live(&mut CalibratedPolicy::new(ch.params.clone()).unwrap(), &r.test, &ch.family);
        }
    }
    let model = set.acceptance_model.as_ref().expect("the acceptance model is fitted");
    assert!(model.fit_samples > 0 && model.holdout_samples > 0 && model.calibrated.log_loss.is_finite());
    // The fitted parameters as written run as a grid setting (`policies.threshold_plus`): a replay
    // of the test traces gives the counts the tune reported.
    let grid = root.join("fitted.toml");
    std::fs::write(&grid, "[methods]\n[[methods.grid]]\npolicies.threshold_plus = { params = [\"tuned/threshold-plus/alpaca-cpu.json\"] }\n").unwrap();
    let o = specx_eval::experiment::replay_run::replay(
        test,
        &specx_eval::experiment::replay_run::ReplayConfig::load(&grid).unwrap(),
        "fitted",
        false,
    )
    .unwrap();
    assert!(o.replayed.iter().all(|r| r.setting.key() == "threshold-plus alpaca-cpu"));
    let cpu = set.results.iter().find(|c| c.costs.name == "CPU").unwrap();
    let reported = &cpu.rules.iter().find(|r| r.family == THRESHOLD_PLUS).unwrap().test;
    assert_eq!(&o.replayed.iter().map(|r| UnitCounts::of(&r.metrics())).collect::<Vec<_>>(), reported);
    let md = std::fs::read_to_string(cfg.out.join("tune.md")).unwrap();
    assert!(md.contains("## A100 (paper)") && md.contains("## CPU") && md.contains("threshold-plus"), "{md}");
    assert!(cfg.out.join("threshold-plus/alpaca-cpu.json").is_file());
    // The calibrated model's file runs as a grid setting too.
    std::fs::write(&grid, "[methods]\n[[methods.grid]]\npolicies.calibrated = { params = [\"tuned/calibrated/alpaca-cpu-calibrated-product.json\"] }\n").unwrap();
    let o = specx_eval::experiment::replay_run::replay(
        test,
        &specx_eval::experiment::replay_run::ReplayConfig::load(&grid).unwrap(),
        "fitted-model",
        false,
    )
    .unwrap();
    let reported = &cpu.rules.iter().find(|r| r.family == "calibrated-product").unwrap().test;
    assert_eq!(&o.replayed.iter().map(|r| UnitCounts::of(&r.metrics())).collect::<Vec<_>>(), reported);
    assert!(md.contains("The calibrated acceptance model"), "{md}");

    // A second run keeps the finished set; with an earlier replay of every candidate on the
    // test traces it also reports the in-sample choice, which no out-of-sample choice beats on
    // the test prompts.
    // (A set replayed again would record other draft seconds; its config is rewritten.)
    let kept = || {
        let mut v: serde_json::Value =
            serde_json::from_slice(&std::fs::read(cfg.out.join("sets/alpaca.json")).unwrap()).unwrap();
        v.as_object_mut().unwrap().remove("config");
        v
    };
    let before = kept();
    let grid = root.join("candidates.toml");
    std::fs::write(&grid, format!("[methods]\n{}", &CANDIDATES[..CANDIDATES.find("[[costs]]").unwrap()])).unwrap();
    let replayed = specx_eval::experiment::replay_run::replay(
        test,
        &specx_eval::experiment::replay_run::ReplayConfig::load(&grid).unwrap(),
        "candidates",
        false,
    )
    .unwrap();
    let mut with_inside = cfg.clone();
    with_inside.in_sample = Some(replayed.dir.clone());
    let again = tune(&with_inside, false).unwrap();
    assert!(kept() == before, "the finished set was replayed again");
    let inside = specx_eval::tune::in_sample::InSample::read(&replayed.dir).unwrap();
    let mut keys = std::collections::BTreeMap::<String, Vec<String>>::new();
    for m in &settings {
        keys.entry(m.family().to_string()).or_default().push(m.key());
    }
    for c in &again[0].results {
        let best = inside.best(&again[0], c, &keys);
        for r in c.rules.iter().filter(|r| r.family != THRESHOLD_PLUS && !r.family.starts_with("calibrated")) {
            let (_, tps, n) = &best[&r.family];
            assert_eq!(*n, r.candidates, "{}: the replay holds every candidate", r.family);
            assert!(
                *tps >= throughput(&r.test, &c.costs) - 1e-9,
                "{}: chosen on the test prompts it cannot do worse there",
                r.family
            );
        }
    }
    assert!(std::fs::read_to_string(cfg.out.join("tune.md")).unwrap().contains("in sample"));

    // A test prompt among the tuning prompts is refused, naming it.
    let overlap = trace_run(root, draft_path, target_path, "overlap", "test", 5);
    let e = format!("{:#}", tune(&tune_config(root, &overlap, test, "leaky"), false).unwrap_err());
    assert!(e.contains("is also a tuning prompt"), "{e}");
}

/// Candidates whose drafter is not the plain chain: prompt lookup, suffix trees over earlier
/// outputs, and draft trees under fixed K and under the tree-price policy.
const LIVE_CANDIDATES: &str = r#"
[[methods.grid]]
policies.fixed = { k = [2, 4] }

[[methods.grid]]
drafters.lookup = { ngrams = [[1, 3]] }
policies.fixed = { k = [2, 4] }

[[methods.grid]]
drafters.suffix = { alphas = [1.0, 2.0], cached_requests = [2] }
policies.fixed = { k = [24] }

[[methods.grid]]
drafters.tree = { top_k = [2], max_nodes = [8] }
policies.fixed = { k = [3] }
policies.tree_price = { depth = [3], row_costs = [0.2], draft_costs = [0.3] }
"#;

/// Tree and lookup drafters are tuned as the stop rules are. Both runs decode every candidate
/// for real beside AR, so each family's choice must be its best on the tuning prompts' real
/// counts, and its test counts must be the real runs' on the test prompts.
#[test]
fn live_drafters_are_chosen_on_tuning_traces_and_judged_by_their_real_counts() {
    let f = fixture(&format!("[[sampling]]\nname = \"greedy\"\n[methods]\n{LIVE_CANDIDATES}"));
    let costs = &CANDIDATES[CANDIDATES.find("[[costs]]").unwrap()..CANDIDATES.find("[threshold_plus]").unwrap()];
    // A tune of the two runs into `name`, its candidates and costs given as TOML.
    let tune_with = |name: &str, body: &str| {
        let path = f.root.join(format!("{name}.toml"));
        let (tuning, test) = (f.tuning.display(), f.test.display());
        let text = format!("tuning = \"{tuning}\"\ntest = \"{test}\"\nout = \"{name}\"\nbootstrap = 200\n{body}");
        std::fs::write(&path, text).unwrap();
        let cfg = TuneConfig::load(&path).unwrap();
        tune(&cfg, false).map(|sets| (cfg, sets))
    };
    let (cfg, sets) = tune_with("live", &format!("{LIVE_CANDIDATES}{costs}")).unwrap();
    let set = &sets[0];
    // The real rows of a setting, per unit, in run order.
    let real = |run: &Path, key: &str| -> Vec<UnitCounts> {
        greedy_units(run)
            .unwrap()
            .iter()
            .map(|u| UnitCounts::of(&u.rows.iter().find(|r| r.setting.key() == key).unwrap().metrics()))
            .collect()
    };
    let settings: Vec<_> = expand(&cfg.methods).unwrap().into_iter().filter_map(|s| s.spec().cloned()).collect();
    for c in &set.results {
        let families: Vec<&str> = c.rules.iter().map(|r| r.family.as_str()).collect();
        assert_eq!(families, ["lookup", "specdec", "suffix", "tree"], "at {}", c.costs.name);
        for r in &c.rules {
            let family: Vec<_> = settings.iter().filter(|m| m.family() == r.family).collect();
            assert_eq!(family.len(), r.candidates, "{}", r.family);
            assert_chosen_best(r, &c.costs, &family, |m| real(&f.tuning, &m.key()));
            assert_eq!(r.test, real(&f.test, &r.setting), "{} at {}: test counts", r.setting, c.costs.name);
        }
    }

    // A second tune of the suffix drafter alone, joined to the first one's choices: the same
    // rules, read rather than replayed; a cost model priced otherwise is refused.
    let suffix_alone = "rules_from = \"live\"\n[[methods.grid]]\ndrafters.suffix = { alphas = [1.0, 2.0], cached_requests = [2] }\npolicies.fixed = { k = [24] }\n";
    let (_, again) = tune_with("joined", &format!("{suffix_alone}{costs}")).unwrap();
    for (a, b) in again[0].results.iter().zip(&set.results) {
        let summary = |c: &specx_eval::tune::CostResult| {
            c.rules.iter().map(|r| (r.family.clone(), r.setting.clone(), r.test.clone())).collect::<Vec<_>>()
        };
        assert_eq!(summary(a), summary(b), "at {}", a.costs.name);
    }
    let mispriced = costs.replace("t_row = 0.03", "t_row = 0.04");
    let e = format!("{:#}", tune_with("mispriced", &format!("{suffix_alone}{mispriced}")).unwrap_err());
    assert!(e.contains("prices differently"), "{e}");

    let md = std::fs::read_to_string(cfg.out.join("tune.md")).unwrap();
    // The drafters are judged against the chain's best stop rule; here the only chain rule is
    // fixed K, the reference, so there is none to name.
    assert!(md.contains("Every other drafter") && md.contains("| tree "), "{md}");
}

/// A trace set kept across completions (a parameter search) grows a branch whose cache was
/// dropped when a later policy needs it deeper: the same counts as a build from scratch.
#[test]
fn branches_grow_on_across_completions() {
    use specx_decoder::speculative::FixedK;
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path();
    let (draft_path, target_path) = specx_decoder::synthetic::write_tiny_char_pair(root, 7, 0.35).unwrap();
    let run_dir = trace_run(root, &draft_path, &target_path, "test", "test", 4);
    let units = greedy_units(&run_dir).unwrap();
    let eos = specx_eval::experiment::manifest::EvalManifest::read(&run_dir).unwrap().eos_ids;
    let draft = load_model(&draft_path, None, &default_device()).unwrap();
    let rc = specx_eval::experiment::replay::ReplayCosts::default();
    let inputs: Vec<TraceInput> = units.iter().map(|u| TraceInput::of(u).unwrap()).collect();
    let fixed = |k: usize| vec![ReplayPolicy::Live(Box::new(FixedK(k)))];
    let mut builder = TraceBuilder::new(&draft.model, &[], &eos);
    let mut set = builder.start(&inputs, true).unwrap();
    builder.complete(&mut set, &mut fixed(2), &rc).unwrap();
    let shallow = builder.rows;
    let mut deep = fixed(9);
    builder.complete(&mut set, &mut deep, &rc).unwrap();
    assert!(builder.rows > shallow, "K = 9 needed no deeper branch: the test does not reach regrowth");
    let kept: Vec<_> = set.traces().map(|t| t.replay(&mut deep[0], &rc).unwrap()).collect();
    let mut scratch = fixed(9);
    let fresh = TraceBuilder::new(&draft.model, &[], &eos).build(&inputs, &mut scratch, &rc).unwrap();
    let from_scratch: Vec<_> = fresh.iter().map(|t| t.replay(&mut scratch[0], &rc).unwrap()).collect();
    assert_eq!(kept, from_scratch);
}

/// The calibrated model that reads the target at the last committed token: fitted with the
/// target's statistics from one forward per trace (cached: a second run forwards nothing),
/// and its test counts are those of live decoding, where the sequential scheduler hands the
/// rule the target's row of the last committed token. A tuning-only run writes its page and
/// replays no test trace.
#[test]
fn a_model_of_the_target_replays_as_it_decodes() {
    let f = fixture(GREEDY);
    let (root, tuning, test) = (f.root.as_path(), &f.tuning, &f.test);
    let (draft, target, eos) = (&f.draft, &f.target, &f.eos);
    let path = root.join("target.toml");
    let candidates = CANDIDATES
        .replace("[threshold_plus]\nmax_candidates = 12\npasses = 2\n", "")
        .replace("passes = 1\n", "passes = 1\ntarget = true\n");
    std::fs::write(
        &path,
        format!(
            "tuning = \"{}\"\ntest = \"{}\"\nout = \"target\"\nbootstrap = 200\n{candidates}",
            tuning.display(),
            test.display()
        ),
    )
    .unwrap();
    let cfg = TuneConfig::load(&path).unwrap();

    let only = tune(&cfg, true).unwrap();
    assert!(cfg.out.join("tuning.md").is_file() && !cfg.out.join("sets").join("alpaca.json").exists());
    assert!(
        only[0].test_prompts.is_empty() && only[0].results.iter().all(|c| c.rules.iter().all(|r| r.test.is_empty()))
    );
    // One forward of the prompt and of every output token but the last, per trace.
    let rows =
        |dir: &Path| greedy_units(dir).unwrap().iter().map(|u| u.prompt.len() + u.ar_tokens.len() - 1).sum::<usize>();
    assert_eq!(only[0].target_pass.expect("the target was forwarded").rows, rows(tuning));

    let sets = tune(&cfg, false).unwrap();
    let set = &sets[0];
    // The tuning traces' statistics come from the cache; only the test traces are forwarded.
    assert_eq!(set.target_pass.unwrap().rows, rows(test));
    let model = set.acceptance_model.as_ref().unwrap();
    assert_eq!(model.weights.len(), specx_decoder::speculative::calibrated::FEATURES);
    assert_eq!(
        &model.weights,
        &only[0].acceptance_model.as_ref().unwrap().weights,
        "the cached statistics fit the same model"
    );

    let test_units = greedy_units(test).unwrap();
    let live = |params: &specx_decoder::speculative::CalibratedParams| -> Vec<UnitCounts> {
        test_units
            .iter()
            .map(|u| {
                let spec = SpecConfig {
                    max_new_tokens: u.rows[0].max_new_tokens,
                    sampling: SamplingConfig::greedy(),
                    seed: 0,
                };
                let mut policy = CalibratedPolicy::new(params.clone()).unwrap();
                let g = generate_speculative(
                    &target.model,
                    &mut PlainDrafter::new(&draft.model),
                    &mut policy,
                    &mut RejectionSampler,
                    &u.prompt,
                    &spec,
                    eos,
                )
                .unwrap();
                assert_eq!(g.tokens, u.ar_tokens);
                UnitCounts::of(&g.metrics)
            })
            .collect()
    };
    // Rules that lean hard on the target's statistics, replayed with them and decoded live:
    // the same counts, and other counts than without the target's inputs (so the rule's
    // decisions do turn on them, and on the right row of the target's scores).
    let inputs: Vec<TraceInput> = test_units.iter().map(|u| TraceInput::of(u).unwrap()).collect();
    let rc = specx_eval::experiment::replay::ReplayCosts::default();
    let mut builder = TraceBuilder::new(&draft.model, &[], eos);
    let mut traces = builder.start(&inputs, true).unwrap();
    for (i, input) in inputs.iter().enumerate() {
        traces
            .set_target(i, specx_eval::experiment::target_stats::target_stats(&target.model, input).unwrap().0)
            .unwrap();
    }
    let base = model.weights.clone();
    let mut changed = 0;
    for (w_top1, w_entropy) in [(6.0, 0.0), (0.0, -4.0), (-6.0, 3.0)] {
        for (rule, threshold) in [
            (specx_decoder::speculative::CalibratedRule::Token, 0.5),
            (specx_decoder::speculative::CalibratedRule::Product, 0.4),
        ] {
            let mut weights = base.clone();
            let n = weights.len();
            (weights[n - 2], weights[n - 1]) = (w_top1, w_entropy);
            let params = specx_decoder::speculative::CalibratedParams {
                weights,
                temperatures: model.temperatures.clone(),
                rule,
                threshold,
                max_candidates: 12,
            };
            let mut policies = vec![ReplayPolicy::Live(Box::new(CalibratedPolicy::new(params.clone()).unwrap()))];
            builder.complete(&mut traces, &mut policies, &rc).unwrap();
            let replayed: Vec<UnitCounts> =
                traces.traces().map(|t| UnitCounts::of(&t.replay(&mut policies[0], &rc).unwrap())).collect();
            assert_eq!(replayed, live(&params), "target weights ({w_top1}, {w_entropy}), {rule:?}");
            let blind = specx_decoder::speculative::CalibratedParams {
                weights: params.weights[..params.weights.len() - 2].to_vec(),
                ..params.clone()
            };
            changed += usize::from(live(&blind) != replayed);
        }
    }
    assert!(changed >= 3, "the target's inputs changed the decisions of {changed} of 6 rules");
    for c in &set.results {
        assert_eq!(
            c.calibrated.iter().map(|ch| ch.family.as_str()).collect::<Vec<_>>(),
            ["calibrated+target", "calibrated-product+target", "calibrated-fit+target"]
        );
        for ch in &c.calibrated {
            assert!(ch.params.reads_target());
            let r = c.rules.iter().find(|r| r.family == ch.family).unwrap();
            assert_eq!(live(&ch.params), r.test, "{} at {}", ch.family, c.costs.name);
        }
    }
}

/// Sampled traces with coupled draws replay exactly: every method of a coupled run commits
/// the AR output (drafter-invariant), a replay gives the counts of the run's own live rows,
/// and `specx eval tune` chooses and reports on them as on greedy traces (its test counts are
/// those of live coupled decoding); tuning traces drawn otherwise than the test traces are
/// refused.
#[test]
fn coupled_sampled_traces_replay_as_they_decode() {
    use specx_decoder::coupling::Draws;
    use specx_decoder::speculative::CoupledSampler;
    use specx_eval::experiment::merge::replayable_units;
    let sampled = "[[sampling]]\nname = \"t1\"\ntemperature = 1.0\ndraws = \"coupled\"\n[methods]\n[[methods.grid]]\npolicies.fixed = { k = [2, 5] }\npolicies.confidence = { thresholds = [0.5], bounds = [[1, 12]] }\npolicies.svip = { thresholds = [0.6], max = [12] }\n";
    let f = fixture(sampled);
    let (root, draft_path, target_path, tuning, test) =
        (f.root.as_path(), &f.draft_path, &f.target_path, &f.tuning, &f.test);
    let (draft, target, eos) = (&f.draft, &f.target, &f.eos);
    let units = replayable_units(test).unwrap();
    let no_heads: std::collections::HashMap<String, usize> = Default::default();
    let rc = specx_eval::experiment::replay::ReplayCosts::default();
    let inputs: Vec<TraceInput> = units.iter().map(|u| TraceInput::of(u).unwrap()).collect();
    let mut rejected = 0;
    for (i, live) in units[0].rows.iter().enumerate().skip(1) {
        let spec = live.setting.spec().unwrap();
        let mut policies = vec![ReplayPolicy::of(spec, &no_heads).unwrap()];
        let traces = TraceBuilder::new(&draft.model, &[], eos).build(&inputs, &mut policies, &rc).unwrap();
        for (u, t) in units.iter().zip(&traces) {
            let row = &u.rows[i];
            assert_eq!((row.draws, row.identical_to_ar), (Draws::Coupled, true), "{} {}", u.unit.prompt_id, spec.key());
            assert_eq!(
                UnitCounts::of(&t.replay(&mut policies[0], &rc).unwrap()),
                UnitCounts::of(&row.metrics()),
                "{} {}",
                u.unit.prompt_id,
                spec.key()
            );
            rejected += row.n_drafted - row.n_accepted;
        }
    }
    assert!(rejected > 0, "no candidate was rejected: the test cannot tell a replay that accepts everything");
    // The learning curve names the event sampled traces label.
    assert_eq!(specx_eval::tune::curve::label(&units[0]).unwrap(), "coupled acceptance at temperature 1");

    let cfg = tune_config(root, tuning, test, "tuned-t1");
    let set = &tune(&cfg, false).unwrap()[0];
    for c in &set.results {
        for ch in &c.calibrated {
            let r = c.rules.iter().find(|r| r.family == ch.family).unwrap();
            for (u, counts) in units.iter().zip(&r.test) {
                let spec = SpecConfig {
                    max_new_tokens: u.rows[0].max_new_tokens,
                    sampling: SamplingConfig { temperature: 1.0, top_k: None, top_p: None },
                    seed: specx_eval::experiment::run::request_seed(&u.unit),
                };
                let mut policy = CalibratedPolicy::new(ch.params.clone()).unwrap();
                let g = generate_speculative(
                    &target.model,
                    &mut PlainDrafter::new(&draft.model),
                    &mut policy,
                    &mut CoupledSampler,
                    &u.prompt,
                    &spec,
                    eos,
                )
                .unwrap();
                assert_eq!(g.tokens, u.ar_tokens);
                assert_eq!(
                    UnitCounts::of(&g.metrics),
                    *counts,
                    "{} at {}: {}",
                    ch.family,
                    c.costs.name,
                    u.unit.prompt_id
                );
            }
        }
    }
    let greedy = trace_run(root, draft_path, target_path, "greedy", "train", 6);
    let e = format!("{:#}", tune(&tune_config(root, &greedy, test, "mixed"), false).unwrap_err());
    assert!(e.contains("drawn alike"), "{e}");
}

/// The learning curve fits the calibrated model on the first n test traces and scores it on
/// every tuning trace: each point equals a fit made by hand on exactly those traces, the draft's
/// probability is scored on the same positions, and sizes it cannot honour are refused.
#[test]
fn the_learning_curve_fits_on_the_first_test_traces_and_scores_on_the_tuning_traces() {
    use specx_eval::tune::calibrate::{Sample, calibration, draft_probability, fit};
    use specx_eval::tune::curve::learning_curve;
    let f = fixture(GREEDY);
    let cfg = tune_config(&f.root, &f.tuning, &f.test, "curve");
    let c = cfg.calibrated.clone().unwrap();
    let samples = |run: &Path| -> Vec<Vec<Sample>> {
        let units = greedy_units(run).unwrap();
        let inputs: Vec<TraceInput> = units.iter().map(|u| TraceInput::of(u).unwrap()).collect();
        let set = TraceBuilder::new(&f.draft.model, &[], &f.eos).start(&inputs, false).unwrap();
        set.traces()
            .map(|t| {
                t.acceptance_samples(c.max_candidates)
                    .unwrap()
                    .iter()
                    .map(|s| Sample::of(&s.stats, s.depth, s.accepted, None))
                    .collect()
            })
            .collect()
    };
    let (scoring, pool) = (samples(&f.tuning).concat(), samples(&f.test));
    let labels: Vec<bool> = scoring.iter().map(|s| s.label).collect();

    let curve = learning_curve(&cfg, &[4, 2]).unwrap();
    assert_eq!(curve.sizes, [2, 4]);
    let set = &curve.sets[0];
    assert_eq!((set.scoring_prompts, set.scoring_positions), (6, scoring.len()));
    assert_eq!(set.draft_probability, calibration(&scoring.iter().map(draft_probability).collect::<Vec<_>>(), &labels));
    for p in &set.points {
        // Every holdout_every-th of the first n test traces holds the temperatures.
        let (mut train, mut held) = (Vec::new(), Vec::new());
        for (i, t) in pool[..p.prompts].iter().enumerate() {
            if (i + 1) % c.holdout_every == 0 { held.extend_from_slice(t) } else { train.extend_from_slice(t) }
        }
        let m = fit(&train, &held, c.l2, specx_eval::tune::calibrate::inputs(false)).unwrap();
        assert_eq!((p.fit_positions, p.temperature_positions), (train.len(), held.len()));
        assert_eq!(
            p.scored,
            calibration(&scoring.iter().map(|s| m.probability(s)).collect::<Vec<_>>(), &labels),
            "{} traces",
            p.prompts
        );
    }
    let md = std::fs::read_to_string(cfg.out.join("learning-curve/curve.md")).unwrap();
    assert!(
        md.contains("| the draft's probability |")
            && md.contains("| calibrated model | 4 |")
            && md.contains("(greedy acceptance of the draft's token"),
        "{md}"
    );
    assert!(cfg.out.join("learning-curve/curve.png").exists());

    let err = learning_curve(&cfg, &[2, 5]).unwrap_err().to_string();
    assert!(err.contains("has 4 test traces to fit on; the largest size is 5"), "{err}");
    let err = learning_curve(&cfg, &[1, 4]).unwrap_err().to_string();
    assert!(err.contains("at least holdout_every (2)"), "{err}");
}
