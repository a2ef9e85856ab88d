//! Every shipped eval config parses (unknown keys would be errors), names its prompt sets in
//! the dataset cache, and expands to the grid its comment promises.

use specx_eval::experiment::config::EvalConfig;
use specx_eval::experiment::grid::expand;
use specx_eval::experiment::replay_run::ReplayConfig;
use std::path::{Path, PathBuf};

fn dir() -> PathBuf {
    std::env::var_os("CARGO_MANIFEST_DIR").map_or_else(|| env!("CARGO_MANIFEST_DIR").into(), PathBuf::from).join("../../configs/eval")
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
    assert_eq!(smoke.prompts.iter().map(|p| (p.name.as_str(), p.sample)).collect::<Vec<_>>(), [("alpaca", Some(3)), ("gsm8k", Some(3)), ("humaneval", Some(3))]);
    assert_eq!(smoke.budget.new_tokens(1000), 32);
    let keys: Vec<String> = expand(&smoke.methods).unwrap().iter().map(|s| s.key()).collect();
    assert_eq!(keys, ["ar", "specdec K=2", "specdec K=4", "specdecpp qwen-alpaca-w6-d3 h=0.7 [2,20]", "confidence 0.5 [2,20]"]);
    let cache = specx_datagen::config::dataset_cache_dir();
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
    assert_eq!(keys, ["ar", "specdec K=1", "specdec K=2", "specdec K=3", "specdec K=5", "dsi SP=1 k=5", "dsi SP=2 k=5", "dsi SP=4 k=5"]);
    let grid: ReplayConfig = toml::from_str(&std::fs::read_to_string(dir().join("replay-grid.toml")).unwrap()).unwrap();
    assert_eq!(expand(&grid.methods).unwrap().len(), 1 + 10 + 9 * 2 + 5);
}
