//! EasySpec's FuzzyDrafter: LP size 1 is the plain drafter exactly; every strategy x
//! calibration policy x stop policy keeps greedy output equal to the target's, in sequential
//! and DSI scheduling; sampled output is distributed as the target's at T 0.7 and 1.5, and the
//! reference code's candidate choice (argmax of q tested with min(1, p/q)) is caught not to be.

mod common;
use common::lossless::*;
use common::*;
use specx_decoder::gguf::GgmlType;
use specx_decoder::layer_groups::LayerGroups;
use specx_decoder::sampling::SamplingConfig;
use specx_decoder::speculative::*;
use specx_decoder::synthetic::{StDtype, tiny_qwen2};
use specx_decoder::{LoadedModel, default_device};

const CALIBRATIONS: [Calibration; 4] =
    [Calibration::Never, Calibration::PrefillOnly, Calibration::EveryRound, Calibration::EveryMismatch];

/// A target and a draft of 5 layers each (so that strategies have groups to form).
fn pair_with_deep_draft(
    vocab: usize,
    target_seed: u64,
    draft_seed: u64,
) -> (tempfile::TempDir, LoadedModel, LoadedModel) {
    let dir = tempfile::tempdir().unwrap();
    let cfg = specx_decoder::ModelConfig { num_hidden_layers: 5, ..tiny_qwen2(vocab) };
    let (t, _) = write_both(&dir.path().join("t"), &cfg, target_seed, StDtype::F32, GgmlType::F32);
    let (d, _) = write_both(&dir.path().join("d"), &cfg, draft_seed, StDtype::F32, GgmlType::F32);
    let (t, d) = (load(&t), load(&d));
    (dir, t, d)
}

#[test]
fn lp_size_one_drafts_exactly_what_the_plain_drafter_drafts() {
    let (_d, _t, d) = pair_with_deep_draft(VOCAB, 1, 2);
    let s = SamplingConfig { temperature: 0.9, top_k: Some(20), top_p: None };
    for calibration in CALIBRATIONS {
        let mut plain = PlainDrafter::new(&d.model);
        let mut fuzzy = FuzzyDrafter::new(&d.model, LayerGroups::preset(1, 5).unwrap(), calibration).unwrap();
        let mut committed = tokens(6, 3);
        let mut fuzzy_metrics = RequestMetrics::default();
        for round in 0..3 {
            let draw = |drafter: &mut dyn Drafter, metrics: &mut RequestMetrics| {
                drafter
                    .draft(DraftRound {
                        committed: &committed,
                        prompt_len: 6,
                        max: 4,
                        keep_first: false,
                        policy: &mut FixedK(4),
                        sampling: &s,
                        streams: Streams::new(round),
                        eos: &[],
                        metrics,
                    })
                    .unwrap()
            };
            let (a, b) = (draw(&mut plain, &mut RequestMetrics::default()), draw(&mut fuzzy, &mut fuzzy_metrics));
            assert_eq!(
                a.iter().map(|c| (c.token, c.q.clone())).collect::<Vec<_>>(),
                b.iter().map(|c| (c.token, c.q.clone())).collect::<Vec<_>>(),
                "{calibration:?} round {round}"
            );
            // Accept the first two, then a token of our own (a rejection).
            committed.extend(a[..2].iter().map(|c| c.token));
            plain.rollback(committed.len());
            fuzzy.rollback(committed.len());
            committed.push((round as u32 * 7 + 1) % VOCAB as u32);
        }
        assert_eq!(fuzzy_metrics.n_calibrations, 0, "the exact strategy has nothing to calibrate");
    }
}

#[test]
fn greedy_output_equals_the_targets_for_every_strategy_calibration_and_policy() {
    let (_d, t, d) = pair_with_deep_draft(VOCAB, 1, 2);
    let close = noisy_draft_layers(&_d, 5, 0.2);
    let hidden = d.model.config().hidden_size;
    let mut calibrated = 0;
    for (name, draft) in [("random draft", &d), ("close draft", &close)] {
        for p in 0..3u32 {
            let prompt = tokens(4 + p as usize, p);
            let eos = [VOCAB as u32 - 1];
            let cfg = SpecConfig { max_new_tokens: 12, sampling: SamplingConfig::greedy(), seed: 0 };
            let want = generate_autoregressive(&t.model, &prompt, &cfg, &eos).unwrap().tokens;
            for strategy in ["0,1,2,3,4", "0,1-2,3-4", "0,1-3,4", "0-4"] {
                for calibration in CALIBRATIONS {
                    let groups = LayerGroups::parse(strategy, 5).unwrap();
                    let head = AcceptanceHead::init_seeded(hidden, 1, true, p as u64, &default_device());
                    let policies: Vec<(&str, Box<dyn StopPolicy>)> = vec![
                        ("K=3", Box::new(FixedK(3))),
                        ("head", Box::new(HeadPolicy::new(head, HeadRule::new(0.5, 1, 6)))),
                    ];
                    for (policy_name, mut policy) in policies {
                        let what = format!("{name}, prompt {p}, {strategy}, {calibration:?}, {policy_name}");
                        let mut drafter = FuzzyDrafter::new(&draft.model, groups.clone(), calibration).unwrap();
                        let got = run_sequential(&t.model, &mut drafter, policy.as_mut(), &prompt, &cfg, &eos);
                        assert_eq!(got.tokens, want, "{what}");
                        calibrated += got.metrics.n_calibrations;
                        let mut drafter = FuzzyDrafter::new(&draft.model, groups.clone(), calibration).unwrap();
                        let got = generate_dsi(
                            &[&t.model; 2],
                            &mut drafter,
                            policy.as_mut(),
                            &mut RejectionSampler,
                            &prompt,
                            &cfg,
                            &DsiConfig::new(2, 3),
                            &eos,
                        )
                        .unwrap();
                        assert_eq!(got.generation.tokens, want, "DSI, {what}");
                    }
                }
            }
        }
    }
    assert!(calibrated > 0, "no calibration ever ran");
}

/// A draft close to the target (seed 1, 5 layers; its weights plus noise): some rounds accept.
fn noisy_draft_layers(dir: &tempfile::TempDir, layers: usize, noise: f32) -> LoadedModel {
    let cfg = specx_decoder::ModelConfig { num_hidden_layers: layers, ..tiny_qwen2(VOCAB) };
    let mut w = specx_decoder::synthetic::random_weights(&cfg, 1);
    let n = specx_decoder::synthetic::random_weights(&cfg, 999);
    for (name, t) in w.iter_mut() {
        for (a, b) in t.data.iter_mut().zip(&n[name].data) {
            *a += noise * b;
        }
    }
    let path = dir.path().join("close");
    specx_decoder::synthetic::write_hf_dir(
        &path,
        &cfg,
        &w,
        StDtype::F32,
        1,
        &specx_decoder::synthetic::word_tokenizer_json(VOCAB, "w"),
    )
    .unwrap();
    load(&path)
}

#[test]
fn sampled_output_is_distributed_as_the_target_at_two_temperatures() {
    let (_d, t, d) = pair_with_deep_draft(SMALL_VOCAB, 11, 12);
    for temperature in [0.7, 1.5] {
        let short = Short::at(&t.model, SamplingConfig { temperature, top_k: None, top_p: None });
        for (compat, workers) in [(Compat::Lossless, 2), (Compat::Reference, 1)] {
            let p = short.p(|seed| {
                let groups = LayerGroups::parse("0,1-3,4", 5).unwrap();
                let mut drafter = FuzzyDrafter::new(&d.model, groups, Calibration::EveryMismatch)
                    .unwrap()
                    .with_workers(workers)
                    .with_compat(compat);
                generate_speculative(
                    &t.model,
                    &mut drafter,
                    &mut FixedK(2),
                    &mut RejectionSampler,
                    &short.prompt,
                    &short.cfg(seed),
                    &[],
                )
                .unwrap()
                .tokens
            });
            eprintln!("chi-square p-value, EasySpec 0,1-3,4 every_mismatch {compat:?}, T {temperature}: {p:.3e}");
            match compat {
                Compat::Lossless => assert!(p > ALPHA, "EasySpec sampling at T {temperature} rejected: p = {p:.2e}"),
                Compat::Reference => assert!(
                    p < ALPHA,
                    "the reference code's argmax drafts passed as lossless at T {temperature}: p = {p:.2e}"
                ),
            }
        }
    }
}

/// EasySpec's drafter under the other stop policies and DSI's scheduler: sampled output is
/// distributed as the target's (the confidence rule sequentially; the head under DSI).
#[test]
fn sampled_output_is_distributed_as_the_target_under_confidence_and_under_dsi_with_a_head() {
    let (_d, t, d) = pair_with_deep_draft(SMALL_VOCAB, 11, 12);
    let short = Short::at_t1(&t.model);
    let (prompt, cfg) = (&short.prompt, |seed| short.cfg(seed));
    let fuzzy =
        || FuzzyDrafter::new(&d.model, LayerGroups::parse("0,1-3,4", 5).unwrap(), Calibration::EveryRound).unwrap();
    let p_confidence = short.p(|seed| {
        let mut policy = ConfidencePolicy { threshold: 0.4, min_candidates: 1, max_candidates: 3 };
        generate_speculative(&t.model, &mut fuzzy(), &mut policy, &mut RejectionSampler, prompt, &cfg(seed), &[])
            .unwrap()
            .tokens
    });
    let head = AcceptanceHead::init_seeded(d.model.config().hidden_size, 2, true, 4, &default_device());
    let p_dsi_head = short.p(|seed| {
        let mut policy = HeadPolicy::new(head.clone(), HeadRule::new(0.5, 1, 3));
        generate_dsi(
            &[&t.model; 2],
            &mut fuzzy(),
            &mut policy,
            &mut RejectionSampler,
            prompt,
            &cfg(seed),
            &DsiConfig::new(2, 3),
            &[],
        )
        .unwrap()
        .generation
        .tokens
    });
    eprintln!("chi-square p-values: EasySpec + confidence {p_confidence:.3}, EasySpec + DSI + head {p_dsi_head:.3}");
    assert!(p_confidence > ALPHA, "EasySpec with the confidence rule rejected: p = {p_confidence:.2e}");
    assert!(p_dsi_head > ALPHA, "EasySpec under DSI with a head rejected: p = {p_dsi_head:.2e}");
}
