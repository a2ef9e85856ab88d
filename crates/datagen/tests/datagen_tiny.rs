//! `specx datagen` end to end on a tiny synthetic pair (configs/datagen-tiny.toml) over real
//! Alpaca prompts: labels against independent teacher-forced passes, token mixing, resume,
//! sharding + merge, and the errors a user meets.

use polars::prelude::*;
use specx_datagen::cli::{DatagenArgs, effective_config};
use specx_datagen::config::DatagenConfig;
use specx_datagen::manifest::Manifest;
use specx_datagen::run::select_prompts;
use specx_datagen::shard::{read_features, read_tokens};
use specx_datagen::{RunOptions, run};
use specx_decoder::synthetic::{CHAR_VOCAB, StDtype, random_weights, tiny_qwen2, word_tokenizer_json, write_hf_dir};
use specx_decoder::{LoadedModel, default_device, load_model};
use specx_run::{Part, RunManifest};
use std::path::{Path, PathBuf};

fn manifest_dir() -> PathBuf {
    std::env::var_os("CARGO_MANIFEST_DIR").map_or_else(|| env!("CARGO_MANIFEST_DIR").into(), Into::into)
}

fn tiny_config() -> PathBuf {
    manifest_dir().join("../../configs/datagen-tiny.toml")
}

/// The tiny pair: target + (draft = target + noise), character-level tokenizer.
fn write_pair(root: &Path) -> (PathBuf, PathBuf) {
    specx_decoder::synthetic::write_tiny_char_pair(root, 7, 0.35).unwrap()
}

fn args(out: &Path, draft: &Path, target: &Path) -> DatagenArgs {
    DatagenArgs {
        run: specx_run::RunArgs {
            config: Some(tiny_config()),
            out: Some(out.to_path_buf()),
            no_progress: true,
            ..Default::default()
        },
        draft: Some(draft.to_path_buf()),
        target: Some(target.to_path_buf()),
        ..Default::default()
    }
}

fn opts(part: Option<Part>, max_new_shards: Option<usize>) -> RunOptions {
    RunOptions { part, max_new_shards, progress: false }
}

/// (file name, sha256) of every data file of a run, in shard order.
fn data_files(m: &Manifest) -> Vec<(String, String)> {
    m.shards.iter().flat_map(|s| s.files().into_iter().map(|f| (f.name.clone(), f.sha256.clone()))).collect()
}

#[cfg(feature = "wgpu")]
fn data_files_of(s: &specx_datagen::shard::ShardRecord) -> Vec<String> {
    s.files().into_iter().map(|f| f.sha256.clone()).collect()
}

fn load(p: &Path) -> LoadedModel {
    load_model(p, None, &default_device()).unwrap()
}

fn col_u32(df: &DataFrame, name: &str) -> Vec<u32> {
    df.column(name).unwrap().u32().unwrap().into_no_null_iter().collect()
}
fn col_f32(df: &DataFrame, name: &str) -> Vec<f32> {
    df.column(name).unwrap().f32().unwrap().into_no_null_iter().collect()
}
fn col_bool(df: &DataFrame, name: &str) -> Vec<bool> {
    df.column(name).unwrap().bool().unwrap().no_null_iter().collect()
}

fn softmax64(l: &[f32]) -> Vec<f64> {
    let m = l.iter().cloned().fold(f32::NEG_INFINITY, f32::max) as f64;
    let e: Vec<f64> = l.iter().map(|&x| (x as f64 - m).exp()).collect();
    let z: f64 = e.iter().sum();
    e.into_iter().map(|x| x / z).collect()
}

#[test]
fn datagen_on_a_tiny_pair() {
    let tmp = tempfile::tempdir().unwrap();
    let (draft_path, target_path) = write_pair(tmp.path());
    let full_dir = tmp.path().join("full");
    let cfg = effective_config(&args(&full_dir, &draft_path, &target_path)).unwrap();
    let full = run(&cfg, &opts(None, None)).unwrap();
    assert!(full.complete);
    assert_eq!((full.shard_count, full.shards.len(), full.summary.prompts), (4, 4, 16));
    assert_eq!(full.prompts.selected, 16);
    assert_eq!(full.draft.sha256.len(), 64);
    // The run directory's config.toml repeats the run.
    assert_eq!(DatagenConfig::load(&full_dir.join("config.toml")).unwrap(), cfg);

    // --- labels, against teacher-forced passes computed here from the models alone ---------
    let (prompts, _) = select_prompts(&cfg).unwrap();
    let (draft, target) = (load(&draft_path), load(&target_path));
    let rec = &full.shards[0];
    let df = read_tokens(&full_dir, rec).unwrap();
    let (features, hidden) = read_features(&full_dir, rec).unwrap();
    assert_eq!(hidden, 32);
    let pidx = col_u32(&df, "prompt_index");
    let draw = col_u32(&df, "draw");
    let (xs, ys) = (col_u32(&df, "x"), col_u32(&df, "y"));
    let (labels, log_p, log_q) = (col_f32(&df, "label"), col_f32(&df, "log_p"), col_f32(&df, "log_q"));
    let from_y = col_bool(&df, "from_y");
    let feature_row: Vec<i64> = df.column("feature_row").unwrap().i64().unwrap().into_no_null_iter().collect();
    let mut checked_labels = 0;
    let mut checked_features = 0;
    let mut spread = [0usize; 3]; // labels < 0.3, in between, > 0.7
    for pi in 0..rec.prompt_count as u32 {
        let prompt = target.tokenizer.encode(&prompts[pi as usize].1).unwrap();
        for d in 0..2u32 {
            let rows: Vec<usize> = (0..df.height()).filter(|&r| pidx[r] == pi && draw[r] == d).collect();
            let x: Vec<u32> = rows.iter().map(|&r| xs[r]).collect();
            let mut seq = prompt.clone();
            seq.extend_from_slice(&x);
            // p(. | X_<i) is read at the position whose input is X_{i-1} (the prompt's last
            // token for i = 0).
            let tp = target.model.forward(&seq, &mut target.model.new_cache(1)).unwrap().logits_tail(x.len() + 1);
            let dq = draft.model.forward(&seq, &mut draft.model.new_cache(1)).unwrap().logits_tail(x.len() + 1);
            for (i, &r) in rows.iter().enumerate() {
                let (p, q) = (softmax64(&tp[i]), softmax64(&dq[i]));
                let y = ys[r] as usize;
                let want = (p[y] / q[y]).min(1.0);
                assert!(
                    (labels[r] as f64 - want).abs() < 1e-4,
                    "prompt {pi} position {i}: label {} vs {want}",
                    labels[r]
                );
                assert!((log_p[r] as f64 - p[y].ln()).abs() < 1e-3 && (log_q[r] as f64 - q[y].ln()).abs() < 1e-3);
                spread[if want < 0.3 {
                    0
                } else if want > 0.7 {
                    2
                } else {
                    1
                }] += 1;
                checked_labels += 1;
            }
            // Features: the draft's final hidden states over prompt + Z at the labelled rows.
            let mut zseq = prompt.clone();
            zseq.extend(rows.iter().map(|&r| if from_y[r] { ys[r] } else { xs[r] }));
            let h = draft.model.forward(&zseq, &mut draft.model.new_cache(1)).unwrap().hidden_tail(x.len());
            for (i, &r) in rows.iter().enumerate() {
                assert_eq!(from_y[r], feature_row[r] >= 0);
                if from_y[r] {
                    let f = &features[feature_row[r] as usize * hidden..][..hidden];
                    let d = specx_decoder::compare::max_abs_diff(f, &h[i]);
                    assert!(d < 1e-4, "prompt {pi} position {i}: feature differs by {d}");
                    checked_features += 1;
                }
            }
        }
    }
    let labelled = specx_datagen::shard::read_labelled(&full_dir, rec).unwrap();
    assert_eq!((labelled.features, labelled.hidden), (features.clone(), hidden));
    let want: Vec<f32> = (0..df.height()).filter(|&r| from_y[r]).map(|r| labels[r]).collect();
    assert_eq!(labelled.labels, want);
    assert!(checked_labels > 200 && checked_features > 150, "{checked_labels} labels, {checked_features} features");
    assert!(spread.iter().all(|&c| c > 5), "labels should spread over [0, 1]: {spread:?}");

    // --- batching changes nothing: one prompt at a time, or 16 at a time across shard
    // boundaries (16 + 2 x 16 = 48 draft rows per step, past one kernel chunk), same bytes ----
    for batch in [1, 16] {
        let mut other = cfg.clone();
        other.generation.batch_size = batch;
        other.output.dir = tmp.path().join(format!("batch{batch}"));
        assert_eq!(data_files(&run(&other, &opts(None, None)).unwrap()), data_files(&full), "batch size {batch}");
    }

    // --- token mixing ratio over the whole run -----------------------------------------------
    let rows: u64 = full.shards.iter().map(|s| s.rows).sum();
    let share_from_x = 1.0 - full.summary.labelled_rows as f64 / rows as f64;
    let sigma = (0.15f64 * 0.85 / rows as f64).sqrt();
    assert!((share_from_x - 0.15).abs() < 5.0 * sigma, "{share_from_x} of {rows} rows took X (r = 0.15)");

    // --- interrupted + resumed == uninterrupted ----------------------------------------------
    let resumed_dir = tmp.path().join("resumed");
    let cfg_r = effective_config(&args(&resumed_dir, &draft_path, &target_path)).unwrap();
    let partial = run(&cfg_r, &opts(None, Some(1))).unwrap();
    assert!(!partial.complete && partial.shards.len() == 1);
    // A shard whose file was damaged is produced again.
    std::fs::write(resumed_dir.join(&partial.shards[0].features.as_ref().unwrap().name), b"garbage").unwrap();
    let partial = run(&cfg_r, &opts(None, Some(2))).unwrap();
    assert_eq!(partial.shards.len(), 2);
    // What a kill during an atomic write leaves behind is cleaned up.
    let stale = resumed_dir.join(".tokens-00002.parquet.tmp-4242");
    std::fs::write(&stale, b"half a file").unwrap();
    let resumed = run(&cfg_r, &opts(None, None)).unwrap();
    assert!(resumed.complete && !stale.exists());
    assert_eq!(data_files(&resumed), data_files(&full));
    assert_eq!(resumed.summary, full.summary);

    // --- --shard i/n parts merge into the same dataset ---------------------------------------
    let parts: Vec<PathBuf> = (0..2).map(|i| tmp.path().join(format!("part{i}"))).collect();
    for (i, dir) in parts.iter().enumerate() {
        let c = effective_config(&args(dir, &draft_path, &target_path)).unwrap();
        let m = run(&c, &opts(Some(Part { index: i, count: 2 }), None)).unwrap();
        assert!(m.complete && m.shards.len() == 2);
    }
    let merged_dir = tmp.path().join("merged");
    let merged = specx_datagen::merge::merge(&parts, &merged_dir).unwrap();
    assert_eq!(data_files(&merged), data_files(&full));
    assert_eq!(merged.summary, full.summary);
    assert_eq!(Manifest::read(&merged_dir).unwrap().identity(), full.identity());
    let e = format!("{:#}", specx_datagen::merge::merge(&parts[..1], &tmp.path().join("m2")).unwrap_err());
    assert!(e.contains("lack shards [1, 3]"), "{e}");

    // --- resuming into a directory made with another setup is refused -------------------------
    let mut other = cfg.clone();
    other.mixing.target_ratio = 0.3;
    let e = format!("{:#}", run(&other, &opts(None, None)).unwrap_err());
    assert!(e.contains("different setup") && e.contains("target_ratio"), "{e}");
}

/// `[output] features = "recompute"`: the same token and prompt tables as a run that stores
/// its features (the draft's Z streams are skipped, nothing else changes), no feature files,
/// and features recomputed by one draft forward per mixed sequence that match the stored
/// ones to rounding; they are cached (f16) keyed by the draft and the token table, and a draft
/// with other weights is refused.
#[test]
fn recomputed_features_match_the_stored_ones() {
    use specx_datagen::config::FeatureStorage;
    use specx_datagen::features::{cache_path, recompute, shard_features};
    let tmp = tempfile::tempdir().unwrap();
    // The only test of this binary that reads the feature cache.
    unsafe { std::env::set_var("SPECX_FEATURES", tmp.path().join("feature-cache")) };
    let (draft_path, target_path) = write_pair(tmp.path());
    let stored_dir = tmp.path().join("stored");
    let cfg = effective_config(&args(&stored_dir, &draft_path, &target_path)).unwrap();
    let stored = run(&cfg, &opts(None, None)).unwrap();
    let mut rc = cfg.clone();
    rc.output.features = FeatureStorage::Recompute;
    rc.output.dir = tmp.path().join("recompute");
    let recomputed = run(&rc, &opts(None, None)).unwrap();
    assert_eq!(recomputed.summary, stored.summary);
    let draft = load(&draft_path);
    let sha = draft.weights_sha256().unwrap();
    let mut worst = 0f32;
    for (r, s) in recomputed.shards.iter().zip(&stored.shards) {
        assert!(r.features.is_none() && !rc.output.dir.join(specx_datagen::shard::features_name(r.index)).exists());
        assert_eq!((&r.tokens.sha256, &r.prompts.sha256), (&s.tokens.sha256, &s.prompts.sha256), "shard {}", r.index);
        let (want, hidden) = read_features(&stored_dir, s).unwrap();
        let got = recompute(&rc.output.dir, r, &draft.model).unwrap();
        assert_eq!(got.len(), want.len());
        worst = specx_decoder::compare::nan_max(worst, specx_decoder::compare::max_abs_diff(&got, &want));
        // Through the cache: f16, the same on the second read, without a model.
        assert!(!cache_path(&sha, r).exists());
        let (first, h) = shard_features(&rc.output.dir, &recomputed, r, Some((&draft.model, &sha)), false).unwrap();
        assert_eq!(h, hidden);
        assert!(first.iter().zip(&got).all(|(a, b)| (a - b).abs() <= 2e-3 * b.abs().max(1.0)));
        assert_eq!(shard_features(&rc.output.dir, &recomputed, r, None, false).unwrap().0, first);
        let rows = specx_datagen::shard::labelled_rows(&rc.output.dir, r, first, h).unwrap();
        assert_eq!(rows.labels, specx_datagen::shard::read_labelled(&stored_dir, s).unwrap().labels);
    }
    assert!(worst < 1e-4, "recomputed features differ from the generated ones by {worst:.2e}");
    // The draft statistics of a labelled token: at position 0 the Z prefix is the X prefix, so
    // the token's probability is exp(log q) (labels at temperature 1, no cuts).
    let r = &recomputed.shards[0];
    let (_, stats) = specx_datagen::features::recompute_with(&rc.output.dir, r, &draft.model, true).unwrap();
    let stats = stats.unwrap();
    let df = read_tokens(&rc.output.dir, r).unwrap();
    let (pos, from_y, row, log_q) = (
        col_u32(&df, "position"),
        col_bool(&df, "from_y"),
        df.column("feature_row").unwrap().i64().unwrap().into_no_null_iter().collect::<Vec<_>>(),
        col_f32(&df, "log_q"),
    );
    let mut checked = 0;
    for i in (0..df.height()).filter(|&i| from_y[i]) {
        let s = &stats[row[i] as usize * 3..][..3];
        assert!(s[0] > 0.0 && s[0] <= 1.0 && s[1] >= 0.0 && (0.0..=1.0).contains(&s[2]), "row {i}: {s:?}");
        if pos[i] == 0 {
            assert!(
                (s[0] - log_q[i].exp()).abs() < 1e-4,
                "row {i}: token probability {} vs exp(log q) {}",
                s[0],
                log_q[i].exp()
            );
            checked += 1;
        }
    }
    assert!(checked >= 3, "{checked} first positions checked");
    eprintln!("largest |recomputed - generated| feature difference: {worst:.2e}");
    // Without a cache and without the draft: a clear error. With another draft: refused.
    let r = &recomputed.shards[0];
    std::fs::remove_file(cache_path(&sha, r)).unwrap();
    let e = format!("{:#}", shard_features(&rc.output.dir, &recomputed, r, None, false).unwrap_err());
    assert!(e.contains("stores no features") && e.contains("draft model is needed"), "{e}");
    let target = load(&target_path);
    let e = format!(
        "{:#}",
        shard_features(&rc.output.dir, &recomputed, r, Some((&target.model, &target.weights_sha256().unwrap())), false)
            .unwrap_err()
    );
    assert!(e.contains("made with the draft of weights sha256"), "{e}");
}

#[test]
fn native_gguf_weights_write_the_same_bytes_for_any_batch_size_and_as_f32() {
    // The tiny pair as GGUF with Q8_0 matrices: the native path decodes the blocks
    // inside the kernel. Batch sizes 1, 4 and 16 write byte-identical data files, and so does
    // the same pair dequantized to f32 on load (`--weights f32`).
    let tmp = tempfile::tempdir().unwrap();
    let (draft, target) =
        specx_decoder::synthetic::write_tiny_char_pair_gguf(tmp.path(), 7, 0.35, specx_decoder::gguf::GgmlType::Q8_0)
            .unwrap();
    let mut base = effective_config(&args(&tmp.path().join("batch4"), &draft, &target)).unwrap();
    assert_eq!(base.models.weights, specx_decoder::WeightMode::Q8, "q8 is the default");
    base.models.weights = specx_decoder::WeightMode::Native;
    let reference = run(&base, &opts(None, None)).unwrap();
    assert!(reference.complete && reference.summary.labelled_rows > 0);
    for (batch, weights) in [
        (1, specx_decoder::WeightMode::Native),
        (16, specx_decoder::WeightMode::Native),
        (4, specx_decoder::WeightMode::F32),
    ] {
        let mut other = base.clone();
        other.generation.batch_size = batch;
        other.models.weights = weights;
        other.output.dir = tmp.path().join(format!("batch{batch}-{weights}"));
        assert_eq!(
            data_files(&run(&other, &opts(None, None)).unwrap()),
            data_files(&reference),
            "batch size {batch}, {weights} weights"
        );
    }
}

#[test]
fn q8_weights_write_the_same_bytes_for_any_batch_size() {
    // Integer dot products on 8-bit activations (`--weights q8`) give other numbers than the
    // native path, but a row's result still depends on that row alone: batch sizes 1, 4 and 16
    // write byte-identical data files.
    let tmp = tempfile::tempdir().unwrap();
    let (draft, target) =
        specx_decoder::synthetic::write_tiny_char_pair_gguf(tmp.path(), 7, 0.35, specx_decoder::gguf::GgmlType::Q8_0)
            .unwrap();
    let mut base = effective_config(&args(&tmp.path().join("q8-batch4"), &draft, &target)).unwrap();
    base.models.weights = specx_decoder::WeightMode::Q8;
    let reference = run(&base, &opts(None, None)).unwrap();
    assert!(reference.complete && reference.summary.labelled_rows > 0);
    for batch in [1, 16] {
        let mut other = base.clone();
        other.generation.batch_size = batch;
        other.output.dir = tmp.path().join(format!("q8-batch{batch}"));
        assert_eq!(
            data_files(&run(&other, &opts(None, None)).unwrap()),
            data_files(&reference),
            "batch size {batch}, q8 weights"
        );
    }
}

#[test]
fn bad_inputs_are_explained() {
    let tmp = tempfile::tempdir().unwrap();
    let (draft_path, target_path) = write_pair(tmp.path());
    let out = tmp.path().join("out");
    // A draft with another vocabulary.
    let cfg = tiny_qwen2(CHAR_VOCAB);
    let other = tmp.path().join("other");
    write_hf_dir(&other, &cfg, &random_weights(&cfg, 1), StDtype::F32, 1, &word_tokenizer_json(CHAR_VOCAB, "w"))
        .unwrap();
    let c = effective_config(&args(&out, &other, &target_path)).unwrap();
    let e = format!("{:#}", run(&c, &opts(None, None)).unwrap_err());
    assert!(e.contains("do not share a tokenizer"), "{e}");
    // A malformed JSON line in a generic prompt file, and an empty one.
    let mut c = effective_config(&args(&out, &draft_path, &target_path)).unwrap();
    c.prompts.format = specx_prompts::PromptFormat::Jsonl;
    c.prompts.split = "all".into();
    c.prompts.path = tmp.path().join("p.jsonl");
    std::fs::write(&c.prompts.path, "{\"id\": \"a\", \"prompt\": \"hi\"}\n{\"id\": \"b\", \"prompt\": \n").unwrap();
    let e = format!("{:#}", run(&c, &opts(None, None)).unwrap_err());
    assert!(e.contains("p.jsonl: line 2: malformed JSON"), "{e}");
    std::fs::write(&c.prompts.path, "\n").unwrap();
    assert!(format!("{:#}", run(&c, &opts(None, None)).unwrap_err()).contains("no prompts"));
    // A config key that does not exist.
    let text = std::fs::read_to_string(tiny_config()).unwrap().replace("draws = 2", "draws = 2\nmix_seed = 3");
    let e = format!("{:#}", DatagenConfig::parse(&text, Path::new("datagen-tiny.toml")).unwrap_err());
    assert!(e.contains("mix_seed") && e.contains("datagen-tiny.toml"), "{e}");
    // A missing model file.
    let c = effective_config(&args(&out, &tmp.path().join("nope"), &target_path)).unwrap();
    assert!(format!("{:#}", run(&c, &opts(None, None)).unwrap_err()).contains("does not exist"));
}

#[test]
fn the_real_pair_configs_parse_and_their_splits_are_disjoint() {
    let load = |name: &str| DatagenConfig::load(&manifest_dir().join("../../configs").join(name)).unwrap();
    let (train, dev) = (load("datagen-qwen-alpaca.toml"), load("datagen-qwen-alpaca-dev.toml"));
    for c in [&train, &dev] {
        c.validate().unwrap();
        assert_eq!((c.prompts.split_sizes.clone(), c.generation.max_new_tokens), (vec![4000, 800, 200], 256));
    }
    let (train_prompts, rows) = select_prompts(&train).unwrap();
    let (dev_prompts, _) = select_prompts(&dev).unwrap();
    assert_eq!((train_prompts.len(), dev_prompts.len(), rows), (100, 50, 5000));
    assert!(train_prompts[0].1.starts_with("<|im_start|>system"));
    assert!(train_prompts.iter().all(|(id, _)| !dev_prompts.iter().any(|(d, _)| d == id)));
}

#[test]
fn a_device_list_runs_one_part_per_device_and_merges_them() {
    let tmp = tempfile::tempdir().unwrap();
    let (draft_path, target_path) = write_pair(tmp.path());
    let plain_dir = tmp.path().join("plain");
    let plain =
        run(&effective_config(&args(&plain_dir, &draft_path, &target_path)).unwrap(), &opts(None, None)).unwrap();
    let dir = tmp.path().join("listed");
    let mut a = args(&dir, &draft_path, &target_path);
    a.run.devices = vec!["cpu".into()];
    let cfg = effective_config(&a).unwrap();
    // Stopped early: the part keeps what it wrote, nothing is merged yet.
    let partial = run(&cfg, &opts(None, Some(1))).unwrap();
    assert!(!partial.complete && partial.part == Some(Part { index: 0, count: 1 }));
    assert!(dir.join("parts/0/manifest.json").exists() && !dir.join("manifest.json").exists());
    // Resumed to the end and merged: the same data as the plain run on the same device.
    let m = run(&cfg, &opts(None, None)).unwrap();
    assert!(m.complete && m.part.is_none());
    assert_eq!(m.config.models.devices, ["cpu"]);
    assert_eq!(data_files(&m), data_files(&plain));
    assert_eq!(Manifest::read(&dir).unwrap().shards.len(), plain.shards.len());
    // Its config.toml repeats the listed run, as a one-process run's does.
    assert_eq!(DatagenConfig::load(&dir.join("config.toml")).unwrap().to_toml(), cfg.to_toml());
    // Running it again finds every part finished and merges the same data.
    assert_eq!(data_files(&run(&cfg, &opts(None, None)).unwrap()), data_files(&plain));
    // A part of a listed run is the part of its device; the count must match the list.
    let e = format!("{:#}", run(&cfg, &opts(Some(Part { index: 0, count: 2 }), None)).unwrap_err());
    assert!(e.contains("one part per device"), "{e}");
    // Duplicates are refused before any model loads.
    let mut dup = cfg.clone();
    dup.models.devices = vec!["cpu".into(), "cpu".into()];
    let e = format!("{:#}", run(&dup, &opts(None, None)).unwrap_err());
    assert!(e.contains("[models] devices") && e.contains("listed twice"), "{e}");
    // A directory that holds a one-device run is not merged over.
    let mut over = cfg.clone();
    over.output.dir = plain_dir.clone();
    let e = format!("{:#}", run(&over, &opts(None, None)).unwrap_err());
    assert!(e.contains("holds a run made on devices"), "{e}");
}

/// `devices = ["cpu", "wgpu"]`: part 0 on the CPU writes exactly the plain run's shards 0 and
/// 2; part 1 on the device writes shards 1 and 3 with the same rows and tokens and labels
/// within 1e-4 (the device's matmuls round differently; a sampled token could flip only at a
/// near-tie of the sampler, which these seeds do not meet).
#[cfg(feature = "wgpu")]
#[test]
fn a_device_list_splits_the_run_between_the_cpu_and_the_device() {
    let tmp = tempfile::tempdir().unwrap();
    let (draft_path, target_path) = write_pair(tmp.path());
    let plain_dir = tmp.path().join("plain");
    let plain =
        run(&effective_config(&args(&plain_dir, &draft_path, &target_path)).unwrap(), &opts(None, None)).unwrap();
    let dir = tmp.path().join("two");
    let mut a = args(&dir, &draft_path, &target_path);
    a.run.devices = vec!["cpu".into(), "wgpu".into()];
    let m = run(&effective_config(&a).unwrap(), &opts(None, None)).unwrap();
    assert!(m.complete && m.shards.len() == plain.shards.len());
    let mut worst = 0f32;
    for (got, want) in m.shards.iter().zip(&plain.shards) {
        assert_eq!((got.index, got.rows, got.labelled_rows), (want.index, want.rows, want.labelled_rows));
        if got.index % 2 == 0 {
            assert_eq!(data_files_of(got), data_files_of(want), "shard {} (CPU part)", got.index);
            continue;
        }
        let (a, b) = (read_tokens(&dir, got).unwrap(), read_tokens(&plain_dir, want).unwrap());
        for c in ["prompt_index", "draw", "position", "x", "y"] {
            assert_eq!(col_u32(&a, c), col_u32(&b, c), "shard {}: column {c}", got.index);
        }
        for (x, y) in col_f32(&a, "label").iter().zip(col_f32(&b, "label")) {
            worst = specx_decoder::compare::nan_max(worst, (x - y).abs());
        }
    }
    assert!(worst <= 1e-4, "labels on the device differ by {worst:.2e}");
    eprintln!("largest |device - cpu| label difference: {worst:.2e}");
}
