//! Training on synthetic features with a known rule: the head learns it, resuming continues
//! the same run, and the decoder's loaded head predicts what the trainer computed.

use specx_decoder::default_device;
use specx_decoder::speculative::AcceptanceHead;
use specx_run::seed::SplitMix64;
use specx_trainer::acceptance::config::TrainConfig;
use specx_trainer::acceptance::data::LabelledSet;
use specx_trainer::acceptance::train::{TrainOptions, predict, train_on};
use std::path::Path;

const HIDDEN: usize = 16;

/// Rows x ~ N(0, 1)^16 (Box-Muller on SplitMix64) with soft labels P = sigmoid(2 (w . x) + 1)
/// for a fixed direction w: a linear (separable-in-probability) rule a depth-0 head can fit.
fn synthetic(n: usize, seed: u64) -> LabelledSet {
    let mut rng = SplitMix64::new(seed);
    let mut uniform = || (rng.next_u64() >> 11) as f64 / (1u64 << 53) as f64;
    let w: Vec<f64> = (0..HIDDEN).map(|i| if i % 3 == 0 { 0.5 } else { -0.25 }).collect();
    let mut features = Vec::with_capacity(n * HIDDEN);
    let mut labels = Vec::with_capacity(n);
    for _ in 0..n {
        let x: Vec<f64> = (0..HIDDEN)
            .map(|_| (-2.0 * uniform().max(1e-300).ln()).sqrt() * (std::f64::consts::TAU * uniform()).cos())
            .collect();
        let z: f64 = 2.0 * x.iter().zip(&w).map(|(a, b)| a * b).sum::<f64>() + 1.0;
        labels.push((1.0 / (1.0 + (-z).exp())) as f32);
        features.extend(x.iter().map(|&v| v as f32));
    }
    LabelledSet::from_rows(features, labels, HIDDEN, "synthetic-draft")
}

fn config(dir: &Path, depth: usize, epochs: usize, w_rej: f64) -> TrainConfig {
    let text = format!(
        "seed = 5\n[data]\ntrain = \"unused\"\ndev = \"unused\"\n[head]\ndepth = {depth}\n[loss]\nw_rej = {w_rej:?}\n[optim]\nlr = 0.01\nepochs = {epochs}\nbatch_size = 32\n[output]\ndir = {:?}\n",
        dir.display().to_string()
    );
    toml::from_str(&text).unwrap()
}

#[test]
fn learns_a_known_rule_resumes_and_matches_the_decoder() {
    let (train, dev) = (synthetic(4000, 1), synthetic(1000, 2));
    let tmp = tempfile::tempdir().unwrap();
    let opts = TrainOptions { max_epochs_this_run: None, progress: false };

    // Unweighted (w_rej = 1), the loss is minimised by P_hat = P: a linear head learns the
    // rule and the dev KL drops far below an uninformed predictor's.
    let full_dir = tmp.path().join("full");
    let state = train_on(&config(&full_dir, 0, 6, 1.0), &train, &dev, &opts).unwrap();
    let best = state.best().unwrap();
    let first = &state.history[0];
    let mean = dev.labels.iter().map(|&p| p as f64).sum::<f64>() / dev.len() as f64;
    let constant_kl = dev
        .labels
        .iter()
        .map(|&p| {
            let p = p as f64;
            let t = |a: f64, b: f64| if a > 0.0 { a * (a / b).ln() } else { 0.0 };
            t(p, mean) + t(1.0 - p, 1.0 - mean)
        })
        .sum::<f64>()
        / dev.len() as f64;
    assert!(
        best.dev.binary_kl < 0.02 && best.dev.binary_kl < constant_kl / 10.0,
        "dev KL {} (constant predictor {constant_kl})",
        best.dev.binary_kl
    );
    assert!(best.dev.auroc.unwrap() > 0.97, "{:?}", best.dev.auroc);
    assert!(best.dev.ece < 0.05, "{}", best.dev.ece);
    assert!(state.history.last().unwrap().train.weighted_loss < first.train.weighted_loss);
    let metrics: serde_json::Value =
        serde_json::from_slice(&std::fs::read(full_dir.join("metrics.json")).unwrap()).unwrap();
    assert_eq!(metrics["history"].as_array().unwrap().len(), 6);

    // Interrupted after 2 epochs and resumed: the same run, to the last bit.
    let resumed_dir = tmp.path().join("resumed");
    let cfg = config(&resumed_dir, 0, 6, 1.0);
    let partial = train_on(&cfg, &train, &dev, &TrainOptions { max_epochs_this_run: Some(2), ..opts.clone() }).unwrap();
    assert_eq!(partial.epochs_done, 2);
    let resumed = train_on(&cfg, &train, &dev, &opts).unwrap();
    let kls = |s: &specx_trainer::acceptance::train::TrainState| {
        s.history.iter().map(|r| (r.train.binary_kl, r.dev.binary_kl, r.steps)).collect::<Vec<_>>()
    };
    assert_eq!(kls(&resumed), kls(&state));
    assert_eq!(resumed.best_epoch, state.best_epoch);
    let bytes = |d: &Path| std::fs::read(d.join("head.safetensors")).unwrap();
    assert_eq!(bytes(&resumed_dir), bytes(&full_dir));
    // Another config in the same directory is refused.
    assert!(train_on(&config(&resumed_dir, 1, 6, 1.0), &train, &dev, &opts).is_err());

    // The decoder loads the best checkpoint and predicts exactly what the trainer computed.
    let device = default_device();
    let (head, spec) = AcceptanceHead::load(&full_dir, &device).unwrap();
    assert_eq!(
        (spec.hidden_size, spec.depth, spec.draft_model_sha256.as_deref()),
        (HIDDEN, 0, Some("synthetic-draft"))
    );
    let logits = predict(&head, &dev, &device).unwrap();
    for r in 0..50 {
        let (x, _) = dev.gather(&[r]);
        let p = head.accept_probability(&x).unwrap();
        let want = 1.0 / (1.0 + (-(logits[r] as f64)).exp());
        assert!((p - want).abs() < 1e-6, "row {r}: decoder {p} vs trainer {want}");
    }
}

#[test]
fn weighted_heads_learn_the_weighted_optimum() {
    // With w_rej = 6 the loss is minimised by P_hat = P / (P + 6 (1 - P)) (derivative of
    // -P ln q - 6 (1 - P) ln(1 - q) in q), deliberately below P: the paper trades calibration
    // for catching rejections. Deeper, tied and untied heads must find that function.
    let (train, dev) = (synthetic(4000, 3), synthetic(1000, 4));
    let tmp = tempfile::tempdir().unwrap();
    for (depth, tied) in [(0, false), (2, false), (3, true)] {
        let mut cfg = config(&tmp.path().join(format!("d{depth}")), depth, 6, 6.0);
        cfg.head.tied = tied;
        let state = train_on(&cfg, &train, &dev, &TrainOptions::default()).unwrap();
        let (head, _) = AcceptanceHead::load(&cfg.output.dir, &default_device()).unwrap();
        assert_eq!((head.depth(), head.tied()), (depth, tied));
        let logits = predict(&head, &dev, &default_device()).unwrap();
        let gap = logits
            .iter()
            .zip(&dev.labels)
            .map(|(&z, &p)| {
                let (hat, p) = (1.0 / (1.0 + (-(z as f64)).exp()), p as f64);
                (hat - p / (p + 6.0 * (1.0 - p))).abs()
            })
            .sum::<f64>()
            / dev.len() as f64;
        let best = state.best().unwrap();
        assert!(
            gap < 0.03 && best.dev.auroc.unwrap() > 0.97,
            "depth {depth}: mean gap to the weighted optimum {gap}, {:?}",
            best.dev.auroc
        );
        assert!(best.dev.mean_predicted < best.dev.mean_label);
    }
}

/// The same training run on a Vulkan device (`--features wgpu`; Mesa's lavapipe in CI) as on
/// the CPU: every epoch's dev metrics within 1e-3 (burn's device matmuls and reductions sum
/// in another order than the CPU's, and Adam carries the differences from step to step; a
/// wrong gradient or a lost update moves the KL by tenths), and the saved head predicts on
/// the CPU what it predicted on the device.
#[cfg(feature = "wgpu")]
#[test]
fn training_on_the_device_follows_the_cpu_run() {
    let (train, dev) = (synthetic(2000, 3), synthetic(500, 4));
    let tmp = tempfile::tempdir().unwrap();
    let opts = TrainOptions { max_epochs_this_run: None, progress: false };
    let cpu = train_on(&config(&tmp.path().join("cpu"), 2, 3, 3.0), &train, &dev, &opts).unwrap();
    let mut on_device = config(&tmp.path().join("wgpu"), 2, 3, 3.0);
    on_device.device = "wgpu".into();
    let gpu = train_on(&on_device, &train, &dev, &opts).unwrap();
    assert!(
        !cpu.history.is_empty() && cpu.history.len() == gpu.history.len(),
        "epochs: cpu {}, device {}",
        cpu.history.len(),
        gpu.history.len()
    );
    for (a, b) in cpu.history.iter().zip(&gpu.history) {
        let auroc = |m: &specx_trainer::acceptance::metrics::Metrics| m.auroc.unwrap_or(f64::NAN);
        for (what, x, y) in [
            ("dev KL", a.dev.binary_kl, b.dev.binary_kl),
            ("dev AUROC", auroc(&a.dev), auroc(&b.dev)),
            ("train KL", a.train.binary_kl, b.train.binary_kl),
        ] {
            assert!((x - y).abs() <= 1e-3, "epoch {}: {what} cpu {x} vs device {y}", a.epoch);
        }
    }
    let (head, _) = AcceptanceHead::load(&tmp.path().join("wgpu"), &default_device()).unwrap();
    let p_host = predict(&head, &dev, &default_device()).unwrap();
    let device = specx_decoder::device_from_name("wgpu").unwrap();
    let (head_dev, _) = AcceptanceHead::load(&tmp.path().join("wgpu"), &device).unwrap();
    let p_dev = predict(&head_dev, &dev, &device).unwrap();
    let worst = specx_decoder::compare::max_abs_diff(&p_host, &p_dev);
    assert!(worst <= 1e-5, "predictions of the saved head: cpu vs device differ by {worst}");
}
