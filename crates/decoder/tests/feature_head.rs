//! The feature-level drafter ([`FeatureHeadDrafter`], an EAGLE-style head on the target's
//! hidden states) is lossless: greedy output equals the target's under every policy it takes
//! (those that read neither a draft model's hidden state nor n-gram matches) and both schedulers, sampled output is distributed as the target's (a chi-square over whole
//! sequences, the head scoring a vocabulary subset); a drafter that reports another `q` than
//! the one it sampled from is caught. Its first candidate of every round is the one the head
//! gives from the target's own states of the committed text, so the scheduler hands it the
//! right states; and a saved head loads to the same numbers.

mod common;
use common::lossless::*;
use common::*;
use common::{cfg, greedy, t1};
use specx_decoder::Transformer;
use specx_decoder::speculative::feature_draft::tap::FeatureTap;
use specx_decoder::speculative::*;

const PROMPT: [u32; 6] = [1, 4, 2, 3, 5, 0];
const N: usize = 3000;
const ALPHA: f64 = 1e-4;
/// The head's vocabulary subset: two of the six tokens left out.
const SUBSET: [u32; 4] = [0, 2, 3, 5];

fn spec(target: &Transformer, vocab: usize) -> FeatureHeadSpec {
    let c = target.config();
    FeatureHeadSpec {
        hidden_size: c.hidden_size,
        width: 64,
        intermediate: 96,
        rope_theta: c.rope_theta,
        rms_eps: c.rms_norm_eps,
        target_model_sha256: "synthetic".into(),
        vocab_size: vocab,
        vocab_table_sha256: "synthetic".into(),
        training: serde_json::Value::Null,
    }
}

/// A randomly initialised head over `target`, scoring `ids`.
fn head(target: &Transformer, ids: &[u32], seed: u64) -> FeatureDraft {
    let spec = spec(target, ids.len());
    FeatureDraft::from_parts(FeatureHead::init_seeded(&spec, seed, target.device()).unwrap(), spec, ids, target)
        .unwrap()
}

#[test]
fn greedy_feature_drafting_equals_greedy_decoding_under_every_policy_it_takes_and_both_schedulers() {
    let (_dir, t, _) = pair(SMALL_VOCAB, 11, 12);
    let target = &t.model;
    let draft = head(target, &[0, 1, 2, 3, 4, 5], 3);
    let c = cfg(greedy(), 0, 40);
    let want = generate_autoregressive(target, &PROMPT, &c, &[]).unwrap().tokens;
    let mut accepted = 0;
    let policies: Vec<(&str, Box<dyn StopPolicy>)> = vec![
        ("fixed 3", Box::new(FixedK(3))),
        ("confidence 0.3", Box::new(ConfidencePolicy { threshold: 0.3, min_candidates: 1, max_candidates: 5 })),
        ("dynamic", Box::new(DynamicK::new(2, 6))),
        (
            "roc 0.4",
            Box::new(RocThreshold::new(ConfidencePolicy { threshold: 0.4, min_candidates: 1, max_candidates: 4 })),
        ),
        ("p_min 0.4", Box::new(PMinPolicy { p_min: 0.4, n_max: 4 })),
        ("svip 0.6", Box::new(SvipPolicy { threshold: 0.6, max_candidates: 5 })),
        (
            "adaedl 0.3",
            Box::new(AdaEdlPolicy::new(AdaEdlParams { lambda: 0.3, max_candidates: 4, ..AdaEdlParams::DEFAULT })),
        ),
        ("bandit 1,2,4", Box::new(BanditK::new(vec![1, 2, 4], BanditK::EXPLORATION))),
    ];
    for (name, mut policy) in policies {
        let g = run_sequential(target, &mut FeatureHeadDrafter::new(target, &draft), policy.as_mut(), &PROMPT, &c, &[]);
        assert_eq!(g.tokens, want, "sequential, {name}");
        assert!(g.metrics.n_drafted > g.metrics.n_accepted, "{name}: candidates rejected: {:?}", g.metrics);
        accepted += g.metrics.n_accepted;
        let dsi = run_dsi(target, &mut FeatureHeadDrafter::new(target, &draft), policy.as_mut(), &PROMPT, &c);
        assert_eq!(dsi.tokens, want, "DSI, {name}");
    }
    assert!(accepted > 0, "no candidate accepted under any policy");
}

/// Records the context and the candidates of every round of the drafter it wraps; with
/// `uniform_q`, reports each sampled candidate as drawn from the uniform distribution over the
/// subset (not the `q` it was drawn from).
struct Wrapped<'m> {
    inner: FeatureHeadDrafter<'m>,
    rounds: Vec<(Vec<u32>, Vec<u32>)>,
    uniform_q: bool,
}

impl Drafter for Wrapped<'_> {
    fn draft(&mut self, round: DraftRound<'_>) -> anyhow::Result<Vec<Candidate>> {
        let context = round.committed.to_vec();
        let mut out = self.inner.draft(round)?;
        self.rounds.push((context, out.iter().map(|c| c.token).collect()));
        if self.uniform_q {
            for c in out.iter_mut().filter(|c| !c.q.is_empty()) {
                c.q = (0..c.q.len())
                    .map(|t| if SUBSET.contains(&(t as u32)) { 1.0 / SUBSET.len() as f32 } else { 0.0 })
                    .collect();
                c.q_token = 1.0 / SUBSET.len() as f32;
            }
        }
        Ok(out)
    }

    fn rollback(&mut self, valid: usize) {
        self.inner.rollback(valid);
    }

    fn feature_tap(&self) -> Option<FeatureTap> {
        self.inner.feature_tap()
    }
}

/// The head's greedy first candidate after `context`, computed from scratch: the target's
/// hidden states of the whole context in one forward, the head over every position at once.
fn first_candidate_from_scratch(target: &Transformer, draft: &FeatureDraft, context: &[u32]) -> u32 {
    let h = target.config().hidden_size;
    let n = context.len() - 1;
    let mut cache = target.new_cache(1);
    let states = target.forward(context, &mut cache).unwrap().hidden.slice([0..1, 0..n, 0..h]).reshape([n, h]);
    let embeds = target.embedding_rows(&context[1..]).unwrap();
    let positions: Vec<usize> = (0..n).collect();
    let mask = causal_mask_after(0, n, target.device());
    let out = draft.head.forward(states, embeds, &positions, Some(mask), None).slice([n - 1..n, 0..h]);
    let scores = draft.scores(&out.into_data().try_to_vec::<f32>().unwrap()).unwrap();
    specx_decoder::sampling::argmax(&scores)
}

#[test]
fn every_round_drafts_from_the_targets_own_states_of_the_committed_text() {
    let (_dir, t, _) = pair(SMALL_VOCAB, 11, 12);
    let target = &t.model;
    let draft = head(target, &SUBSET, 5);
    let mut w = Wrapped { inner: FeatureHeadDrafter::new(target, &draft), rounds: Vec::new(), uniform_q: false };
    run_sequential(target, &mut w, &mut FixedK(3), &PROMPT, &cfg(greedy(), 0, 30), &[]);
    assert!(w.rounds.len() >= 5, "{} rounds", w.rounds.len());
    for (context, candidates) in &w.rounds {
        assert_eq!(
            candidates[0],
            first_candidate_from_scratch(target, &draft, context),
            "first candidate after {context:?}"
        );
        assert!(
            candidates.iter().all(|c| SUBSET.contains(c)),
            "candidates {candidates:?} outside the subset {SUBSET:?}"
        );
    }
}

/// Sampled output of `N` requests with fixed K = 3.
fn sampled(target: &Transformer, draft: &FeatureDraft, uniform_q: bool) -> Vec<Vec<u32>> {
    let (mut accepted, mut rejected) = (0, 0);
    let samples = (0..N as u64)
        .map(|seed| {
            let mut w = Wrapped { inner: FeatureHeadDrafter::new(target, draft), rounds: Vec::new(), uniform_q };
            let g = run_sequential(target, &mut w, &mut FixedK(3), &PROMPT, &cfg(t1(), seed, LONG), &[]);
            let m = &g.metrics;
            accepted += m.n_accepted;
            rejected += m.drafted_per_round.iter().zip(&m.accepted_per_round).filter(|(k, a)| a < k).count();
            g.tokens
        })
        .collect();
    assert!(
        accepted >= N && rejected >= N,
        "{N} requests: {accepted} candidates accepted, {rejected} rounds with a rejection"
    );
    samples
}

#[test]
fn sampled_feature_drafting_is_distributed_as_the_target() {
    let (_dir, t, _) = pair(SMALL_VOCAB, 11, 12);
    let draft = head(&t.model, &SUBSET, 7);
    let samples = sampled(&t.model, &draft, false);
    let p = sequence_chi_square_p(&t.model, &PROMPT, &t1(), &samples);
    eprintln!("feature head, T=1: p = {p:.3}");
    assert!(p > ALPHA, "sampled feature-head output not distributed as the target's: p = {p:.2e}");
}

#[test]
fn a_reported_q_other_than_the_sampled_one_is_caught() {
    let (_dir, t, _) = pair(SMALL_VOCAB, 11, 12);
    let draft = head(&t.model, &SUBSET, 7);
    let samples = sampled(&t.model, &draft, true);
    let p = sequence_chi_square_p(&t.model, &PROMPT, &t1(), &samples);
    eprintln!("feature head reporting a uniform q, T=1: p = {p:.2e}");
    assert!(p < ALPHA, "a wrong q went unnoticed: p = {p:.2e}");
}

/// Largest difference allowed between a head's outputs and its f16 copy's, relative to the
/// largest output: three times the largest rounding of one f16 weight (2^-11 = 4.9e-4), below
/// what weights kept to bf16's 8 bits (2^-8) would give.
const F16_TOLERANCE: f32 = 1.5e-3;

#[test]
fn a_saved_head_loads_to_the_same_numbers_and_refuses_another_target() {
    let (_dir, t, _) = pair(SMALL_VOCAB, 11, 12);
    let target = &t.model;
    let spec = spec(target, SUBSET.len());
    let head = FeatureHead::init_seeded(&spec, 9, target.device()).unwrap();
    let dir = tempfile::tempdir().unwrap();
    head.save_f32(dir.path(), &spec, &SUBSET).unwrap();
    let loaded = FeatureDraft::load(dir.path(), target, Some("synthetic")).unwrap();
    let h = spec.hidden_size;
    let x = || {
        burn::tensor::Tensor::<2>::from_data(
            burn::tensor::TensorData::new((0..2 * h).map(|i| (i as f32 * 0.37).sin()).collect::<Vec<f32>>(), [2, h]),
            target.device(),
        )
    };
    let mask = causal_mask_after(0, 2, target.device());
    let a = head.forward(x(), x(), &[0, 1], Some(mask.clone()), None).into_data().try_to_vec::<f32>().unwrap();
    let b = loaded.head.forward(x(), x(), &[0, 1], Some(mask), None).into_data().try_to_vec::<f32>().unwrap();
    assert_eq!(a, b, "f32 round trip");
    head.save(dir.path(), &spec, &SUBSET).unwrap();
    let f16 = FeatureDraft::load(dir.path(), target, None).unwrap();
    let mask = causal_mask_after(0, 2, target.device());
    let c = f16.head.forward(x(), x(), &[0, 1], Some(mask), None).into_data().try_to_vec::<f32>().unwrap();
    assert_eq!(c.len(), a.len());
    // NaN-aware: a NaN in either output makes `worst` NaN, which the check below refuses.
    let worst = specx_decoder::compare::max_abs_diff(&a, &c) / specx_decoder::compare::max_abs(&a);
    eprintln!("f16 round trip: largest difference {worst:.2e} of the largest output");
    assert!(
        worst > 0.0 && worst < F16_TOLERANCE,
        "f16 round trip: largest difference {worst:.2e} of the largest output (allowed {F16_TOLERANCE:.1e}, and not 0: the weights must have been rounded)"
    );
    let e = FeatureDraft::load(dir.path(), target, Some("another")).err().expect("another target's sha256 is refused");
    assert!(format!("{e:#}").contains("trained on the target with sha256"), "{e:#}");
}
