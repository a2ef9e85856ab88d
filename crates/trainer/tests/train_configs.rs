//! The shipped SpecDec++ training configs load and validate, and the stored-against-recomputed
//! features pair compares what it says: the same head and prompts, features from generation
//! against features recomputed from the committed run.

use specx_datagen::config::DatagenConfig;
use specx_testkit::paths::configs;
use specx_trainer::acceptance::config::TrainConfig;

#[test]
fn specdecpp_train_configs_load_and_validate() {
    let mut n = 0;
    for e in std::fs::read_dir(configs()).unwrap() {
        let path = e.unwrap().path();
        let name = path.file_name().unwrap().to_string_lossy().into_owned();
        if name.starts_with("train-specdecpp-") && name.ends_with(".toml") {
            let c = TrainConfig::load(&path).unwrap_or_else(|e| panic!("{name}: {e:#}"));
            c.validate().unwrap_or_else(|e| panic!("{name}: {e:#}"));
            n += 1;
        }
    }
    assert!(n >= 8, "{n} configs");
}

#[test]
fn the_stored_features_pair_differs_only_in_where_its_features_come_from() {
    let stored = TrainConfig::load(&configs().join("train-specdecpp-stored-25.toml")).unwrap();
    let mut recomputed = TrainConfig::load(&configs().join("train-specdecpp-recomputed-25.toml")).unwrap();
    assert_eq!(stored.data.train_prompts, Some(25));
    assert!(recomputed.data.train.ends_with("datasets/qwen-alpaca-train-4000"));
    (recomputed.data.train, recomputed.output.dir) = (stored.data.train.clone(), stored.output.dir.clone());
    assert_eq!(stored, recomputed);
    // The stored run is the committed run's config with the features kept (and fewer prompts).
    let gen_stored = DatagenConfig::load(&configs().join("datagen-qwen-alpaca-train-stored-100.toml")).unwrap();
    let mut committed = DatagenConfig::load(&configs().join("datagen-qwen-alpaca-4000.toml")).unwrap();
    assert!(stored.data.train.ends_with(gen_stored.output.dir.file_name().unwrap()));
    assert_eq!(gen_stored.output.features, specx_datagen::config::FeatureStorage::Store);
    committed.output = gen_stored.output.clone();
    committed.prompts.limit = gen_stored.prompts.limit;
    assert_eq!(gen_stored, committed);
}
