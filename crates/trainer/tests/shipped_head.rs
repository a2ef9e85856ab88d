//! The acceptance head that ships in `checkpoints/specdecpp-default` (what `specx decode
//! --method specdecpp` uses without `--head`): it loads, and its `head.json` names the committed
//! data it was trained and selected on by their sha256, the draft they were made with, and the
//! config in `configs/` that retrains it.

use specx_datagen::manifest::Manifest;
use specx_decoder::speculative::AcceptanceHead;
use specx_trainer::config::TrainConfig;
use specx_trainer::data::{data_sha256, prompt_shards};
use std::path::{Path, PathBuf};

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

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
        assert_eq!(t[set]["sha256"].as_str().unwrap(), committed_data_sha256(&run, prompts), "{set}: the head was trained on other data than {}", run.display());
        assert_eq!(spec.draft_model_sha256.as_deref(), Some(Manifest::read(&run).unwrap().draft.sha256.as_str()), "{set}: another draft");
    }
    assert!(t["best_epoch"]["dev"]["auroc"].as_f64().is_some(), "head.json records the selected epoch's dev metrics: {t}");
    // The config that retrains it is the recorded one (paths aside: they name the machine's
    // checkout), and writes it where it ships.
    let shipped = TrainConfig::load(&repo().join("configs/train-specdecpp-default.toml")).unwrap();
    assert!(shipped.output.dir.ends_with("checkpoints/specdecpp-default"), "{}", shipped.output.dir.display());
    assert!(shipped.data.train.ends_with("datasets/qwen-alpaca-train-4000") && shipped.data.dev.ends_with("datasets/qwen-alpaca-dev-200"));
    let mut recorded: TrainConfig = serde_json::from_value(t["config"].clone()).unwrap();
    assert_eq!(recorded.data.train_prompts.unwrap_or(0), t["train"]["prompts"].as_u64().unwrap() as usize, "train_prompts pins the data");
    recorded.output.dir = shipped.output.dir.clone();
    (recorded.data.train, recorded.data.dev) = (shipped.data.train.clone(), shipped.data.dev.clone());
    assert_eq!(recorded, shipped, "configs/train-specdecpp-default.toml no longer reproduces the shipped head");
}
