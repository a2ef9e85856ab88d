//! `specx reproduce specdecpp` end to end on a tiny synthetic pair: datagen runs, a head sweep
//! and a data-scaling sweep by `specx train`, a real eval run, its replay with the oracle, then
//! the reproduction's tables and figures from what those commands wrote.

use specx_decoder::synthetic::write_tiny_char_pair;
use specx_eval::experiment::config::EvalConfig;
use specx_eval::experiment::replay_run::{ReplayConfig, replay};
use specx_eval::experiment::{EvalOptions, run as eval};
use specx_reproduce::specdecpp::{ReproConfig, reproduce};
use specx_testkit::datagen::TinyDatagen;
use specx_testkit::paths::alpaca;
use specx_trainer::acceptance::cli::{TrainArgs, run_cli as train};
use std::path::Path;

/// The tiny datagen config on `split`, `prompts` prompts in shards of 2.
fn make_dataset(out: &Path, draft: &Path, target: &Path, split: &str, prompts: usize) {
    let run = TinyDatagen { limit: prompts, per_shard: 2, ..TinyDatagen::new(draft, target, split) };
    assert!(run.run(out).complete);
}

fn train_sweep(config: &Path) {
    train(TrainArgs {
        config: config.into(),
        out: None,
        sweep: true,
        train_prompts: None,
        tied: None,
        max_epochs: None,
        no_progress: true,
        reference: false,
        device: None,
    })
    .unwrap();
}

#[test]
fn reproduces_specdecpp_tables_and_figures_from_real_runs() {
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path();
    let (draft, target) = write_tiny_char_pair(&root.join("pair"), 7, 0.35).unwrap();
    make_dataset(&root.join("train"), &draft, &target, "train", 6);
    make_dataset(&root.join("dev"), &draft, &target, "dev", 4);

    // Heads: w_rej {1, 6} x depth {0, 1} on all 6 prompts, and w6 d1 on the first 2 and 4.
    let train_cfg = |sweep: &str, out: &str| {
        format!(
            "seed = 0\n[data]\ntrain = \"train\"\ndev = \"dev\"\n[head]\ndepth = 1\ntied = true\n[optim]\nepochs = 1\nbatch_size = 16\n[output]\ndir = \"{out}\"\n[sweep]\n{sweep}\n"
        )
    };
    std::fs::write(root.join("sweep.toml"), train_cfg("w_rej = [1.0, 6.0]\ndepth = [0, 1]", "sweep")).unwrap();
    std::fs::write(
        root.join("scaling.toml"),
        train_cfg("w_rej = [6.0]\ndepth = [1]\ntrain_prompts = [2, 4]", "scaling"),
    )
    .unwrap();
    train_sweep(&root.join("sweep.toml"));
    train_sweep(&root.join("scaling.toml"));

    // A real greedy run (AR, two fixed K, one head setting) on 3 Alpaca test prompts.
    let eval_cfg = format!(
        "seeds = [0]\n[models]\ndraft = \"{}\"\ntarget = \"{}\"\n[[prompts]]\nname = \"alpaca\"\nformat = \"alpaca\"\npath = \"{}\"\nsplit = \"test\"\nsplit_sizes = [4000, 800, 200]\nsample = 3\nchat_template = \"none\"\n[[sampling]]\nname = \"greedy\"\n[budget]\nmax_new_tokens = 16\n[methods]\nspecdec = {{ k = [1, 2] }}\nspecdecpp = {{ heads = [\"sweep/w6-d1\"], thresholds = [0.7], bounds = [[2, 8]] }}\n[output]\ndir = \"run\"\n",
        draft.display(),
        target.display(),
        alpaca().display()
    );
    std::fs::write(root.join("eval.toml"), eval_cfg).unwrap();
    let cfg = EvalConfig::load(&root.join("eval.toml")).unwrap();
    assert!(
        eval(&cfg, &EvalOptions { part: None, limit: None, max_new_units: None, progress: false })
            .unwrap()
            .manifest
            .complete
    );

    // Its replay under the reproduction's kind of grid: fixed K, every head x threshold x
    // bounds, the confidence baseline and the oracle.
    let heads = ["sweep/w1-d0", "sweep/w1-d1", "sweep/w6-d0", "sweep/w6-d1", "scaling/w6-d1-p2", "scaling/w6-d1-p4"];
    let grid = format!(
        "[methods]\nspecdec = {{ k = [1, 2, 3, 4] }}\noracle = true\nconfidence = {{ thresholds = [0.5], bounds = [[1, 8]] }}\n[methods.specdecpp]\nthresholds = [0.3, 0.7]\nbounds = [[2, 8], [1, 8]]\nheads = [{}]\n",
        heads.iter().map(|h| format!("\"{h}\"")).collect::<Vec<_>>().join(", ")
    );
    std::fs::write(root.join("grid.toml"), grid).unwrap();
    let o = replay(&root.join("run"), &ReplayConfig::load(&root.join("grid.toml")).unwrap(), "grid", false).unwrap();
    assert!(o.mismatches.is_empty(), "{:?}", o.mismatches);

    let repro = |scaling: &str| {
        std::fs::write(root.join("repro.toml"), format!("replay = \"run/replay-grid\"\nreal = [\"run\", \"not-yet\"]\nscaling = [{scaling}]\ndefault_head = \"w6-d1\"\nout = \"report\"\n")).unwrap();
        ReproConfig::load(&root.join("repro.toml")).unwrap()
    };
    let md = reproduce(&repro("\"w6-d1-p2\", \"w6-d1-p4\", \"w6-d1\"")).unwrap();
    let out = root.join("report");
    for needle in [
        "## alpaca, greedy (3 prompts",
        "best fixed K",
        "oracle gap closed",
        "Figure 3 check",
        "Heads (Table 3 analogue)",
        "## Data scaling",
        "Not available yet",
        "not-yet",
        "T = t_draft N_draft + t_target N_target over",
    ] {
        assert!(md.contains(needle), "results.md lacks {needle:?}:\n{md}");
    }
    // Every head of the grid has a Table 3 row with its training setup and dev metrics.
    for h in heads {
        let name = Path::new(h).file_name().unwrap().to_str().unwrap();
        let row = md
            .lines()
            .find(|l| l.starts_with(&format!("| {name} ")))
            .unwrap_or_else(|| panic!("no row for {name}:\n{md}"));
        assert!(row.contains("train") && !row.contains("| NaN"), "{row}");
    }
    assert_eq!(std::fs::read_to_string(out.join("results.md")).unwrap(), md);
    for f in ["frontier_alpaca_greedy.png", "threshold_alpaca_greedy.png", "oracle_gap.png", "scaling.png"] {
        assert_eq!(&std::fs::read(out.join(f)).unwrap_or_else(|_| panic!("{f} missing"))[..4], b"\x89PNG", "{f}");
    }

    // claims.json: under every time model the oracle (Theorem 4.1) is at least as fast as the
    // best fixed K, the best SpecDec++ setting and the best confidence setting, and the scaling
    // heads saw growing data.
    let claims: serde_json::Value = serde_json::from_slice(&std::fs::read(out.join("claims.json")).unwrap()).unwrap();
    let comparisons = claims["alpaca/greedy"]["comparisons"].as_array().unwrap();
    assert!(comparisons.len() >= 2, "paper times, CPU single-forward times (and the fit)");
    for c in comparisons {
        let tp = |k: &str| c[k]["tokens_per_s"].as_f64().unwrap();
        assert!(tp("oracle") >= tp("best_fixed_k") - 1e-9 && tp("oracle") >= tp("best_specdecpp") - 1e-9, "{c}");
        assert!(tp("oracle") >= tp("best_confidence") - 1e-9, "the grid's confidence baseline: {c}");
    }
    let rows = |h: &str| claims["heads"][h]["train_rows"].as_u64().unwrap();
    assert!(rows("w6-d1-p2") < rows("w6-d1-p4") && rows("w6-d1-p4") < rows("w6-d1"));
    assert_eq!(claims["heads"]["w6-d1-p2"]["train_prompts"], 2);

    // A scaling head that is not in the replay's grid is named.
    let e = format!("{:#}", reproduce(&repro("\"w6-d1-p9\"")).unwrap_err());
    assert!(e.contains("w6-d1-p9") && e.contains("not in the replay's grid"), "{e}");
}
