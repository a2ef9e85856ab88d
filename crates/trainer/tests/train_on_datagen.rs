//! `specx train` on real datagen output: tiny synthetic pair, train and dev runs made by
//! `specx datagen` from disjoint Alpaca splits, the head checkpoint records their draft.

use specx_datagen::config::FeatureStorage;
use specx_datagen::manifest::Manifest;
use specx_decoder::synthetic::write_tiny_char_pair;
use specx_testkit::datagen::TinyDatagen;
use specx_trainer::acceptance::config::TrainConfig;
use specx_trainer::acceptance::train::{TrainOptions, train};
use std::path::Path;

/// A datagen run of the tiny config on `split` into `out` (6 prompts).
fn datagen(out: &Path, draft: &Path, target: &Path, split: &str) -> Manifest {
    TinyDatagen::new(draft, target, split).run(out)
}

/// [`datagen`] with `per_shard` prompts per shard, stopping after `max_shards` shards.
fn datagen_with(
    out: &Path,
    draft: &Path,
    target: &Path,
    split: &str,
    per_shard: usize,
    max_shards: Option<usize>,
) -> Manifest {
    TinyDatagen { per_shard, max_shards, ..TinyDatagen::new(draft, target, split) }.run(out)
}

#[test]
fn trains_on_the_first_shards_of_a_growing_run() {
    use specx_trainer::acceptance::data::LabelledSet;
    let tmp = tempfile::tempdir().unwrap();
    let (draft, target) = write_tiny_char_pair(&tmp.path().join("pair"), 7, 0.35).unwrap();
    let dir = tmp.path().join("train");
    // 6 prompts in shards of 2; stop after 2 shards: a run still growing.
    let partial = datagen_with(&dir, &draft, &target, "train", 2, Some(2));
    assert!(!partial.complete);
    let e = format!("{:#}", LabelledSet::load_prompts(&dir, None).err().unwrap());
    assert!(e.contains("not a finished run") && e.contains("train_prompts"), "{e}");
    let first4 = LabelledSet::load_prompts(&dir, Some(4)).unwrap();
    assert_eq!(first4.len() as u64, partial.shards.iter().map(|s| s.labelled_rows).sum::<u64>());
    let first2 = LabelledSet::load_prompts(&dir, Some(2)).unwrap();
    assert_eq!(first2.len() as u64, partial.shards.iter().find(|s| s.index == 0).unwrap().labelled_rows);
    assert_eq!(&first4.labels[..first2.len()], &first2.labels[..], "subsets are nested");
    let e = format!("{:#}", LabelledSet::load_prompts(&dir, Some(3)).err().unwrap());
    assert!(e.contains("not a shard boundary"), "{e}");
    let e = format!("{:#}", LabelledSet::load_prompts(&dir, Some(6)).err().unwrap());
    assert!(e.contains("only 4 prompts are written"), "{e}");
    // Finishing the run makes all of it loadable, and its first 4 prompts did not change.
    let full = datagen_with(&dir, &draft, &target, "train", 2, None);
    assert!(full.complete);
    assert_eq!(LabelledSet::load_prompts(&dir, None).unwrap().len() as u64, full.summary.labelled_rows);
    assert_eq!(LabelledSet::load_prompts(&dir, Some(4)).unwrap().labels, first4.labels);
}

#[test]
fn trains_on_datagen_runs_and_refuses_mixed_drafts() {
    let tmp = tempfile::tempdir().unwrap();
    let (draft, target) = write_tiny_char_pair(&tmp.path().join("pair"), 7, 0.35).unwrap();
    let train_run = datagen(&tmp.path().join("train"), &draft, &target, "train");
    let dev_run = datagen(&tmp.path().join("dev"), &draft, &target, "dev");
    let text = format!(
        "[data]\ntrain = {:?}\ndev = {:?}\n[head]\ndepth = 1\n[optim]\nlr = 0.001\nepochs = 2\n[output]\ndir = {:?}\n",
        tmp.path().join("train").display().to_string(),
        tmp.path().join("dev").display().to_string(),
        tmp.path().join("head").display().to_string()
    );
    let cfg: TrainConfig = toml::from_str(&text).unwrap();
    let state = train(&cfg, &TrainOptions::default()).unwrap();
    assert_eq!(state.train_rows as u64, train_run.summary.labelled_rows);
    assert_eq!(state.dev_rows as u64, dev_run.summary.labelled_rows);
    let spec: serde_json::Value =
        serde_json::from_slice(&std::fs::read(tmp.path().join("head/head.json")).unwrap()).unwrap();
    assert_eq!(spec["draft_model_sha256"], train_run.draft.sha256.as_str());
    assert_eq!(spec["hidden_size"], 32);

    // A dev run made with another draft model is refused.
    let (other_draft, _) = write_tiny_char_pair(&tmp.path().join("other"), 7, 0.5).unwrap();
    datagen(&tmp.path().join("dev2"), &other_draft, &target, "dev");
    let mut mixed = cfg.clone();
    mixed.data.dev = tmp.path().join("dev2");
    mixed.output.dir = tmp.path().join("head2");
    let e = format!("{:#}", train(&mixed, &TrainOptions::default()).unwrap_err());
    assert!(e.contains("different draft models"), "{e}");
}

/// A head trained on recomputed features (no feature files; the draft recomputes and caches
/// them) matches one trained on the features generation stored: same rows and labels, dev
/// metrics within the f16 rounding of the cache.
#[test]
fn trains_the_same_head_on_recomputed_features() {
    let tmp = tempfile::tempdir().unwrap();
    // The only test of this binary that reads the feature cache.
    unsafe { std::env::set_var("SPECX_FEATURES", tmp.path().join("feature-cache")) };
    let (draft, target) = write_tiny_char_pair(&tmp.path().join("pair"), 7, 0.35).unwrap();
    let mut states = Vec::new();
    for (name, storage) in [("stored", FeatureStorage::Store), ("recomputed", FeatureStorage::Recompute)] {
        let train_dir = tmp.path().join(format!("{name}-train"));
        let dev_dir = tmp.path().join(format!("{name}-dev"));
        TinyDatagen { per_shard: 3, features: Some(storage), ..TinyDatagen::new(&draft, &target, "train") }
            .run(&train_dir);
        TinyDatagen { per_shard: 3, features: Some(storage), ..TinyDatagen::new(&draft, &target, "dev") }.run(&dev_dir);
        let text = format!(
            "[data]\ntrain = {:?}\ndev = {:?}\n[head]\ndepth = 1\n[optim]\nlr = 0.001\nepochs = 2\n[output]\ndir = {:?}\n",
            train_dir.display().to_string(),
            dev_dir.display().to_string(),
            tmp.path().join(format!("{name}-head")).display().to_string()
        );
        let cfg: TrainConfig = toml::from_str(&text).unwrap();
        states.push(train(&cfg, &TrainOptions::default()).unwrap());
    }
    assert!(std::fs::read_dir(tmp.path().join("feature-cache")).unwrap().count() == 4, "2 train + 2 dev shards cached");
    // Beyond the paper: a head that also reads the draft's statistics of each token.
    let text = format!(
        "[data]\ntrain = {:?}\ndev = {:?}\n[head]\ndepth = 1\ndraft_stats = true\n[optim]\nlr = 0.001\nepochs = 2\n[output]\ndir = {:?}\n",
        tmp.path().join("recomputed-train").display().to_string(),
        tmp.path().join("recomputed-dev").display().to_string(),
        tmp.path().join("stats-head").display().to_string()
    );
    let cfg: TrainConfig = toml::from_str(&text).unwrap();
    let stats_state = train(&cfg, &TrainOptions::default()).unwrap();
    assert_eq!(stats_state.train_rows, states[1].train_rows);
    assert_eq!(
        std::fs::read_dir(tmp.path().join("feature-cache")).unwrap().count(),
        8,
        "statistics cached beside the features"
    );
    let (head, spec) = specx_decoder::speculative::AcceptanceHead::load(
        &tmp.path().join("stats-head"),
        &specx_decoder::default_device(),
    )
    .unwrap();
    assert!(spec.draft_stats && head.input_size() == spec.hidden_size + 3 && head.hidden_width() == spec.hidden_size);
    let (a, b) = (states[0].best().unwrap(), states[1].best().unwrap());
    assert_eq!((states[0].train_rows, states[0].dev_rows), (states[1].train_rows, states[1].dev_rows));
    assert!(
        (a.dev.binary_kl - b.dev.binary_kl).abs() < 1e-3 * a.dev.binary_kl.max(1e-3),
        "dev KL {} vs {}",
        a.dev.binary_kl,
        b.dev.binary_kl
    );
    assert!(
        (a.dev.mean_predicted - b.dev.mean_predicted).abs() < 1e-3,
        "{} vs {}",
        a.dev.mean_predicted,
        b.dev.mean_predicted
    );
}
