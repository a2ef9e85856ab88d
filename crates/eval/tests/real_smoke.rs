//! `configs/eval/smoke.toml` on the real Qwen pair (fetched by scripts/fetch-models.sh, prompt
//! sets by scripts/fetch-datasets.sh), as a new user runs it, with 1 prompt per set (`--limit 1`)
//! and 16 new tokens to stay within CI time (the full config takes about 15 minutes on a 2-core
//! machine), with the acceptance head that ships in `checkpoints/specdecpp-default`. Checks the
//! summary (rows of every set, sampling setting and method; audit passed; plots written) and
//! that replaying the greedy units gives exactly the counts of the real runs.

use specx_eval::experiment::config::EvalConfig;
use specx_eval::experiment::replay_run::{replay, ReplayConfig};
use specx_eval::experiment::{run, EvalOptions};
use std::path::PathBuf;

fn repo() -> PathBuf {
    std::env::var_os("CARGO_MANIFEST_DIR").map_or_else(|| env!("CARGO_MANIFEST_DIR").into(), PathBuf::from).join("../..")
}

#[test]
fn smoke_config_on_the_real_pair() {
    let models = specx_decoder::loader::model_cache_dir();
    assert!(models.join("qwen2.5-coder-1.5b-instruct/model.gguf").is_file(), "the real pair is missing: run scripts/fetch-models.sh");
    let tmp = tempfile::tempdir().unwrap();

    // The smoke config as shipped, with the head that ships in checkpoints/specdecpp-default
    // (what a new user gets without running datagen), and a temporary run directory.
    let mut cfg = EvalConfig::load(&repo().join("configs/eval/smoke.toml").canonicalize().unwrap()).unwrap();
    let head = repo().join("checkpoints/specdecpp-default").canonicalize().unwrap();
    let heads: Vec<PathBuf> = cfg.methods.specdecpp.as_ref().unwrap().heads.iter().map(|h| h.canonicalize().unwrap()).collect();
    assert_eq!(heads, [head.clone()]);
    cfg.output.dir = tmp.path().join("eval");
    // Half the config's 32 new tokens: the same paths, at half the CI time.
    cfg.budget.max_new_tokens = Some(16);
    cfg.validate().unwrap();
    let out = run(&cfg, &EvalOptions { limit: Some(1), ..Default::default() }).unwrap();
    assert!(out.audit_failures.is_empty(), "{:?}", out.audit_failures);
    assert!(out.manifest.complete);
    // 3 sets x 1 prompt x 2 sampling settings x 5 methods.
    assert_eq!(out.rows.len(), 3 * 2 * 5);
    let summary = std::fs::read_to_string(tmp.path().join("eval/summary.md")).unwrap();
    for needle in ["Losslessness audit: passed", "## alpaca, greedy", "## gsm8k, qwen-t0.7", "## humaneval, greedy", "specdecpp specdecpp-default h=0.7 [2,20]", "confidence 0.5 [2,20]", "Timing model"] {
        assert!(summary.contains(needle), "summary.md lacks '{needle}':\n{summary}");
    }
    for set in ["alpaca", "gsm8k", "humaneval"] {
        for s in ["greedy", "qwen-t0.7"] {
            assert!(tmp.path().join(format!("eval/plots/frontier_{set}_{s}.png")).is_file());
        }
    }
    eprintln!("{summary}");

    // Replayed counts equal real counts for every setting that ran for real, on the real pair.
    let grid = tmp.path().join("grid.toml");
    std::fs::write(&grid, format!("[methods]\nspecdec = {{ k = [1, 2, 3, 4, 6] }}\nspecdecpp = {{ heads = [{:?}], thresholds = [0.3, 0.7], bounds = [[2, 20]] }}\nconfidence = {{ thresholds = [0.5] }}\n", head.display().to_string())).unwrap();
    let r = replay(&tmp.path().join("eval"), &ReplayConfig::load(&grid).unwrap(), "grid", false).unwrap();
    assert!(r.mismatches.is_empty(), "{:#?}", r.mismatches);
    assert_eq!(r.compared, 3 * 4);
}
