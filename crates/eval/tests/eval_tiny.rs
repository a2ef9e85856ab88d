//! `specx eval` end to end on a tiny synthetic pair over real Alpaca prompts: rows, audit,
//! reports, resume, sharding + merge, devices, the margin census, and the errors a user meets
//! (each drafter and stop policy run for real: eval_methods.rs).

use specx_decoder::{default_device, load_model};
use specx_eval::common::results::{ResultRow, UnitFile};
use specx_eval::experiment::audit::audit;
use specx_eval::experiment::config::EvalConfig;
use specx_eval::experiment::merge::merge;
use specx_eval::experiment::replay_run::{ReplayConfig, replay};
use specx_eval::experiment::{EvalOptions, run};
use specx_run::Part;
use specx_testkit::pair::untrained_head;
use specx_testkit::paths::alpaca;
use std::path::PathBuf;

mod common;

use common::{load_config, opts, setup, untimed_all};

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
    let d = load_model(&s.draft, None, &default_device()).unwrap();
    untrained_head(&s.root.join("head-b"), d.model.config().hidden_size, Some("0".repeat(64)), None, 3);
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
