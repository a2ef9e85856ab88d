//! `specx train-feature-head` on real datagen output of a tiny synthetic pair: the head learns
//! the target's next hidden state (its dev regression falls and its depth-1 acceptance rises
//! over the curve), an interrupted run resumes to the same head byte for byte, and text made
//! with another target is refused.

use specx_decoder::cheap_draft::frequencies::TokenFrequencies;
use specx_decoder::synthetic::write_tiny_char_pair;
use specx_testkit::datagen::TinyDatagen;
use specx_trainer::feature::config::FeatureHeadConfig;
use specx_trainer::feature::train::{FeatureTrainOptions, train_feature_head};
use std::path::Path;

/// A datagen run of the tiny config on `split` into `out` (6 prompts, 24 new tokens each).
fn datagen(out: &Path, draft: &Path, target: &Path, split: &str) {
    TinyDatagen { max_new_tokens: 24, per_shard: 3, ..TinyDatagen::new(draft, target, split) }.run(out);
}

fn config(tmp: &Path, target: &Path, out: &str) -> FeatureHeadConfig {
    let text = format!(
        "seed = 1\n[data]\ntrain = {:?}\ndev = {:?}\n[model]\ntarget = {:?}\nweights = \"f32\"\n\
         [head]\nwidth = 64\nintermediate = 64\nvocab = {}\nvocab_table = {:?}\n\
         [optim]\nlr = 0.003\nwarmup_ratio = 0.05\nepochs = 30\nbatch_tokens = 256\ncls_weight = 0.1\nnoise = 0.1\neval_every = 20\n\
         [output]\ndir = {:?}\n",
        tmp.join("train").display().to_string(),
        tmp.join("dev").display().to_string(),
        target.display().to_string(),
        specx_decoder::synthetic::CHAR_VOCAB,
        tmp.join("table.tsv").display().to_string(),
        tmp.join(out).display().to_string()
    );
    let cfg: FeatureHeadConfig = toml::from_str(&text).unwrap();
    cfg.validate().unwrap();
    cfg
}

#[test]
fn a_feature_head_learns_resumes_to_the_same_head_and_refuses_another_targets_text() {
    let tmp = tempfile::tempdir().unwrap();
    // The only test of this binary that reads the feature cache.
    unsafe { std::env::set_var("SPECX_FEATURES", tmp.path().join("feature-cache")) };
    let (draft, target) = write_tiny_char_pair(&tmp.path().join("pair"), 7, 0.35).unwrap();
    datagen(&tmp.path().join("train"), &draft, &target, "train");
    datagen(&tmp.path().join("dev"), &draft, &target, "dev");
    let v = specx_decoder::synthetic::CHAR_VOCAB;
    TokenFrequencies::from_counts(&vec![1; v], Vec::new(), "synthetic".into(), v, Vec::new())
        .write(&tmp.path().join("table.tsv"))
        .unwrap();

    let cfg = config(tmp.path(), &target, "head");
    let state = train_feature_head(&cfg, &FeatureTrainOptions::default()).unwrap();
    let (first, last) = (&state.curve[0], state.curve.last().unwrap());
    assert_eq!(last.step, state.steps_done);
    assert!(
        last.dev_regression < 0.5 * first.dev_regression,
        "dev regression {} -> {}",
        first.dev_regression,
        last.dev_regression
    );
    assert!(
        last.dev_acceptance > first.dev_acceptance + 0.1,
        "dev acceptance {} -> {}",
        first.dev_acceptance,
        last.dev_acceptance
    );
    for f in ["feature-head.json", "feature-head.safetensors", "curve.json", "curve.md"] {
        assert!(cfg.output.dir.join(f).is_file(), "{f} written");
    }

    // Interrupted after 7 steps (the last curve point at step 0), then resumed to the end.
    let resumed = config(tmp.path(), &target, "resumed");
    let part =
        train_feature_head(&resumed, &FeatureTrainOptions { max_steps_this_run: Some(7), progress: false }).unwrap();
    assert_eq!(part.steps_done, 7);
    let done = train_feature_head(&resumed, &FeatureTrainOptions::default()).unwrap();
    assert_eq!(done.steps_done, state.steps_done);
    let weights = |c: &FeatureHeadConfig| std::fs::read(c.output.dir.join("feature-head.safetensors")).unwrap();
    assert!(weights(&cfg) == weights(&resumed), "a resumed run ends with the same head");
    // (The resumed curve's first point went through state.json: equal up to float printing.)
    assert_eq!(done.curve.len(), state.curve.len());
    assert!(
        done.curve
            .iter()
            .zip(&state.curve)
            .all(|(a, b)| (a.dev_acceptance - b.dev_acceptance).abs() < 1e-12 && a.rows_seen == b.rows_seen),
        "the same curve"
    );

    // Text generated with another target is refused, naming the run.
    let (_, other) = write_tiny_char_pair(&tmp.path().join("other"), 8, 0.35).unwrap();
    let e = format!(
        "{:#}",
        train_feature_head(&config(tmp.path(), &other, "other-head"), &FeatureTrainOptions::default()).unwrap_err()
    );
    assert!(e.contains("was generated with the target sha256") && e.contains("train"), "{e}");
}
