//! The acceptance head that ships in `checkpoints/specdecpp-default` (what `specx decode
//! --method specdecpp` uses without `--head`): it loads, and its `head.json` names the committed
//! data it was trained and selected on by their sha256, the draft they were made with, and the
//! config in `configs/` that retrains it.

use specx_datagen::manifest::Manifest;
use specx_decoder::speculative::AcceptanceHead;
use specx_run::RunManifest;
use specx_testkit::paths::repo;
use specx_trainer::acceptance::config::TrainConfig;
use specx_trainer::acceptance::data::{data_sha256, prompt_shards};
use std::path::Path;

/// The sha256 a head records for the first `prompts` prompts of the committed run `dir`.
fn committed_data_sha256(dir: &Path, prompts: usize) -> String {
    let m = Manifest::read(dir).unwrap();
    data_sha256(&prompt_shards(dir, &m, Some(prompts)).unwrap())
}

#[test]
fn the_shipped_head_loads_and_names_its_data() {
    let dir = repo().join("checkpoints/specdecpp-default");
    let device = specx_decoder::open_device("cpu".parse().unwrap()).unwrap();
    let (head, spec) = AcceptanceHead::load(&dir, &device).unwrap();
    assert_eq!(head.hidden_width(), spec.hidden_size);
    let t = &spec.training;
    for (set, run) in [("train", "qwen-alpaca-train-4000"), ("dev", "qwen-alpaca-dev-200")] {
        let run = repo().join("datasets").join(run);
        let prompts = t[set]["prompts"].as_u64().unwrap() as usize;
        assert!(prompts > 0, "{set}: {t}");
        assert_eq!(
            t[set]["sha256"].as_str().unwrap(),
            committed_data_sha256(&run, prompts),
            "{set}: the head was trained on other data than {}",
            run.display()
        );
        assert_eq!(
            spec.draft_model_sha256.as_deref(),
            Some(Manifest::read(&run).unwrap().draft.sha256.as_str()),
            "{set}: another draft"
        );
    }
    assert!(
        t["best_epoch"]["dev"]["auroc"].as_f64().is_some(),
        "head.json records the selected epoch's dev metrics: {t}"
    );
    // The config that retrains it is the recorded one (paths aside: they name the machine's
    // checkout), and writes it where it ships.
    let shipped = TrainConfig::load(&repo().join("configs/train-specdecpp-default.toml")).unwrap();
    assert!(shipped.output.dir.ends_with("checkpoints/specdecpp-default"), "{}", shipped.output.dir.display());
    assert!(
        shipped.data.train.ends_with("datasets/qwen-alpaca-train-4000")
            && shipped.data.dev.ends_with("datasets/qwen-alpaca-dev-200")
    );
    let mut recorded: TrainConfig = serde_json::from_value(t["config"].clone()).unwrap();
    assert_eq!(
        recorded.data.train_prompts.unwrap_or(0),
        t["train"]["prompts"].as_u64().unwrap() as usize,
        "train_prompts pins the data"
    );
    recorded.output.dir = shipped.output.dir.clone();
    (recorded.data.train, recorded.data.dev) = (shipped.data.train.clone(), shipped.data.dev.clone());
    assert_eq!(recorded, shipped, "configs/train-specdecpp-default.toml no longer reproduces the shipped head");
}

/// The feature head that ships in `checkpoints/feature-head` (what `specx decode --drafter
/// feature` uses without `--feature-head`): it loads, its `feature-head.json` names the
/// committed text it was trained and judged on by sha256, the target the datasets were made
/// with, and the config in `configs/` that retrains it; its learning curve is in the directory.
#[test]
fn the_shipped_feature_head_loads_and_names_its_data() {
    use specx_decoder::speculative::FeatureHead;
    use specx_trainer::feature::config::FeatureHeadConfig;
    let dir = repo().join("checkpoints/feature-head");
    let device = specx_decoder::open_device("cpu".parse().unwrap()).unwrap();
    let (head, spec, ids) = FeatureHead::load(&dir, &device).unwrap();
    assert_eq!(ids.len(), spec.vocab_size);
    assert!(head.parameter_count() > 0);
    let t = &spec.training;
    for (set, run) in [("train", "qwen-alpaca-train-4000"), ("dev", "qwen-alpaca-dev-200")] {
        let run = repo().join("datasets").join(run);
        let prompts = t["data"][set]["prompts"].as_u64().unwrap() as usize;
        assert_eq!(
            t["data"][set]["sha256"].as_str().unwrap(),
            committed_data_sha256(&run, prompts),
            "{set}: the head was trained on other data than {}",
            run.display()
        );
        assert_eq!(spec.target_model_sha256, Manifest::read(&run).unwrap().target.sha256, "{set}: another target");
    }
    let curve: serde_json::Value = serde_json::from_slice(&std::fs::read(dir.join("curve.json")).unwrap()).unwrap();
    assert_eq!(curve["steps_done"], t["steps"], "the curve is the shipped head's");
    let shipped = FeatureHeadConfig::read(&repo().join("configs/train-feature-head.toml")).unwrap();
    assert!(shipped.output.dir.ends_with("checkpoints/feature-head"), "{}", shipped.output.dir.display());
    let mut recorded: FeatureHeadConfig = serde_json::from_value(t["config"].clone()).unwrap();
    (recorded.output.dir, recorded.data.train, recorded.data.dev) =
        (shipped.output.dir.clone(), shipped.data.train.clone(), shipped.data.dev.clone());
    (recorded.model.target, recorded.head.vocab_table) =
        (shipped.model.target.clone(), shipped.head.vocab_table.clone());
    assert_eq!(recorded, shipped, "configs/train-feature-head.toml no longer reproduces the shipped head");
}
