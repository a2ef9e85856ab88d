//! Recomputed features on the real Qwen2.5-Coder pair (fetched by scripts/fetch-models.sh):
//! a run that stores its features (f32) and one that recomputes them write the same token and
//! prompt tables, and the draft's one-forward recomputation matches the hidden states the
//! single-token steps of generation saw. The numbers are printed for the adaptive-drafting
//! reproduction (docs/reproductions/adaptive-drafting.md). Measured on a Zen 4/5 CPU: relative L2
//! difference per row at most 3.8e-6 (largest absolute 2.2e-4 on features up to 87); the bound
//! is 1e-4.

use specx_datagen::config::{DatagenConfig, FeatureDtype, FeatureStorage};
use specx_datagen::features::recompute;
use specx_datagen::shard::read_features;
use specx_datagen::{RunOptions, run};
use specx_decoder::compare::{max_abs, max_abs_diff, nan_max, nan_max64};
use specx_decoder::{default_device, load_model};
use specx_testkit::paths::configs;

#[test]
fn recomputed_features_match_generation_on_the_real_pair() {
    let tmp = tempfile::tempdir().unwrap();
    let mut cfg = DatagenConfig::load(&configs().join("datagen-qwen-alpaca-dev-200.toml")).unwrap();
    assert!(
        cfg.models.draft.exists(),
        "real model missing at {}: run scripts/fetch-models.sh",
        cfg.models.draft.display()
    );
    cfg.prompts.limit = Some(4);
    cfg.generation.max_new_tokens = 48;
    cfg.generation.batch_size = 4;
    cfg.output.prompts_per_shard = 4;
    let mut stored = cfg.clone();
    stored.output.features = FeatureStorage::Store;
    stored.output.features_dtype = FeatureDtype::F32;
    stored.output.dir = tmp.path().join("stored");
    let mut recomputed = cfg.clone();
    recomputed.output.features = FeatureStorage::Recompute;
    recomputed.output.dir = tmp.path().join("recomputed");
    let a = run(&stored, &RunOptions::default()).unwrap();
    let b = run(&recomputed, &RunOptions::default()).unwrap();
    let (sa, sb) = (&a.shards[0], &b.shards[0]);
    assert_eq!(
        (&sa.tokens.sha256, &sa.prompts.sha256),
        (&sb.tokens.sha256, &sb.prompts.sha256),
        "the tables must not depend on whether features are stored"
    );
    let draft = load_model(&cfg.models.draft, None, &default_device()).unwrap();
    let (want, hidden) = read_features(&stored.output.dir, sa).unwrap();
    let got = recompute(&recomputed.output.dir, sb, &draft.model).unwrap();
    assert_eq!(got.len(), want.len());
    let (mut worst, mut worst_rel, mut scale) = (0f32, 0f64, 0f32);
    for (g, w) in got.chunks_exact(hidden).zip(want.chunks_exact(hidden)) {
        let diff: f64 = g.iter().zip(w).map(|(x, y)| ((x - y) as f64).powi(2)).sum::<f64>().sqrt();
        let norm: f64 = w.iter().map(|&y| (y as f64).powi(2)).sum::<f64>().sqrt();
        worst_rel = nan_max64(worst_rel, diff / norm);
        worst = nan_max(worst, max_abs_diff(g, w));
        scale = nan_max(scale, max_abs(w));
    }
    eprintln!(
        "{} labelled rows: largest |recomputed - generated| {worst:.2e} (largest |feature| {scale:.1}), largest relative L2 difference per row {worst_rel:.2e}",
        want.len() / hidden
    );
    assert!(worst_rel < 1e-4, "recomputed features differ from generation's by {worst_rel:.2e} (relative L2)");
}
