//! Prompt lookup drafting ([`PromptLookupDrafter`], and [`HybridDrafter`]: lookup else the
//! draft model) is lossless: greedy output equals the target's greedy output under every
//! policy that applies to it and both schedulers, and sampled output is distributed as the
//! target's (a chi-square over whole sequences, at T = 1 and warped by top-k/top-p; under DSI
//! the same tokens as the sequential scheduler's, request by request; for the hybrid also under
//! [`MatchRatePolicy`], whose dropped matches are drafted by the draft model); a
//! verifier that treats the looked-up token as if it had no proposal distribution (resampling
//! from `p` after a rejection, the token itself included) is caught.

mod common;
use common::lossless::*;
use common::*;
use common::{cfg, greedy, t1};
use rand::rngs::StdRng;
use specx_decoder::Transformer;
use specx_decoder::sampling::{SamplingConfig, sample_from};
use specx_decoder::speculative::*;

/// A prompt that repeats itself, so that its n-grams recur in what follows.
const PROMPT: [u32; 10] = [1, 4, 2, 3, 1, 4, 2, 5, 1, 4];
const N: usize = 3000;
const ALPHA: f64 = 1e-4;

/// Temperature 1.3 warped by top-k 4 and top-p 0.9: the residual after a rejected lookup is
/// taken from the warped distribution.
fn warped() -> SamplingConfig {
    SamplingConfig { temperature: 1.3, top_k: Some(4), top_p: Some(0.9) }
}

/// Who verifies: the sequential loop, or DSI with this many target instances.
#[derive(Clone, Copy, Debug)]
enum Scheduler {
    Sequential,
    Dsi(usize),
}

/// One request with `drafter` under `scheduler`.
fn run(
    target: &Transformer,
    drafter: &mut dyn Drafter,
    policy: &mut dyn StopPolicy,
    verifier: &mut dyn Verifier,
    c: &SpecConfig,
    scheduler: Scheduler,
) -> Generation {
    match scheduler {
        Scheduler::Sequential => generate_speculative(target, drafter, policy, verifier, &PROMPT, c, &[]).unwrap(),
        Scheduler::Dsi(workers) => {
            let lookahead = policy.max_candidates();
            generate_dsi(
                &vec![target; workers],
                drafter,
                policy,
                verifier,
                &PROMPT,
                c,
                &DsiConfig::new(workers, lookahead),
                &[],
            )
            .unwrap()
            .generation
        }
    }
}

fn lookup(
    target: &Transformer,
    policy: &mut dyn StopPolicy,
    verifier: &mut dyn Verifier,
    c: &SpecConfig,
) -> Generation {
    run(target, &mut PromptLookupDrafter::new(1, 3).unwrap(), policy, verifier, c, Scheduler::Sequential)
}

#[test]
fn greedy_lookup_equals_greedy_decoding_under_every_policy_and_both_schedulers() {
    let (_dir, t, _) = pair(SMALL_VOCAB, 11, 12);
    let target = &t.model;
    let c = cfg(greedy(), 0, 40);
    let want = generate_autoregressive(target, &PROMPT, &c, &[]).unwrap().tokens;
    let policies: Vec<(&str, Box<dyn StopPolicy>)> = vec![
        ("fixed 3", Box::new(FixedK(3))),
        ("dynamic", Box::new(DynamicK::new(2, 6))),
        ("bandit", Box::new(BanditK::new(vec![1, 3, 5], 1.0))),
        ("matchrate 0.3", Box::new(MatchRatePolicy::new(0.3, 6))),
    ];
    for (name, mut policy) in policies {
        let g = lookup(target, policy.as_mut(), &mut RejectionSampler, &c);
        assert_eq!(g.tokens, want, "sequential, {name}");
        assert!(
            g.metrics.n_accepted > 0 && g.metrics.n_drafted > g.metrics.n_accepted,
            "{name}: lookups accepted and rejected: {:?}",
            g.metrics
        );
        let dsi = run_dsi(target, &mut PromptLookupDrafter::new(1, 3).unwrap(), policy.as_mut(), &PROMPT, &c);
        assert_eq!(dsi.tokens, want, "DSI, {name}");
    }
}

/// Sampled output under lookup with fixed K = 3 at `s` under `scheduler`, and what the
/// requests went through: lookups accepted and rejected in many of them.
fn sampled(
    target: &Transformer,
    verifier: &mut dyn Verifier,
    s: &SamplingConfig,
    scheduler: Scheduler,
) -> Vec<Vec<u32>> {
    let (mut drafted, mut accepted) = (0, 0);
    let samples: Vec<Vec<u32>> = (0..N as u64)
        .map(|seed| {
            let g = run(
                target,
                &mut PromptLookupDrafter::new(1, 3).unwrap(),
                &mut FixedK(3),
                verifier,
                &cfg(s.clone(), seed, LONG),
                scheduler,
            );
            drafted += g.metrics.n_drafted;
            accepted += g.metrics.n_accepted;
            g.tokens
        })
        .collect();
    assert!(
        accepted >= N / 4 && drafted - accepted >= N / 4,
        "lookups in {N} requests under {scheduler:?}: {drafted} drafted, {accepted} accepted"
    );
    samples
}

/// The sampling settings of the sampled lookup and hybrid tests, each with the DSI
/// configuration that must commit the sequential scheduler's tokens request by request
/// (randomness is keyed by position, and a round's proposals depend on its prefix alone).
fn sampled_cases() -> [(&'static str, SamplingConfig, Scheduler); 2] {
    [("T=1", t1(), Scheduler::Dsi(3)), ("T=1.3 top-k 4 top-p 0.9", warped(), Scheduler::Dsi(2))]
}

#[test]
fn sampled_lookup_is_distributed_as_the_target() {
    let (_dir, t, _) = pair(SMALL_VOCAB, 11, 12);
    let mut report = Vec::new();
    for (name, s, dsi) in sampled_cases() {
        let samples = sampled(&t.model, &mut RejectionSampler, &s, Scheduler::Sequential);
        let p = sequence_chi_square_p(&t.model, &PROMPT, &s, &samples);
        report.push(format!("lookup, {name}: p = {p:.3}"));
        assert!(p > ALPHA, "{name}: sampled lookup output not distributed as the target's: p = {p:.2e}");
        let under_dsi = sampled(&t.model, &mut RejectionSampler, &s, dsi);
        assert_same_requests(&format!("lookup, {name}, {dsi:?}"), &under_dsi, &samples);
    }
    eprintln!("{}", report.join("\n"));
}

/// `got` (requests under DSI) commits `want`'s tokens (the sequential scheduler's), seed by seed.
fn assert_same_requests(what: &str, got: &[Vec<u32>], want: &[Vec<u32>]) {
    assert_eq!(got.len(), want.len());
    for (seed, (g, w)) in got.iter().zip(want).enumerate() {
        assert_eq!(g, w, "{what}, seed {seed}: tokens differ from the sequential scheduler's");
    }
}

/// After rejecting a looked-up token, resamples from `p` itself: the residual of a proposal
/// with no `q`, as if the point mass were not there.
struct ResampleFromP;

impl Verifier for ResampleFromP {
    fn decide(&mut self, c: &Candidate, logits: &[f32], s: &SamplingConfig, rng: &mut StdRng) -> Verdict {
        match RejectionSampler.decide(c, logits, s, rng) {
            Verdict::Accept => Verdict::Accept,
            Verdict::Reject(_) => Verdict::Reject(sample_from(&s.probabilities(logits), rng)),
        }
    }
}

#[test]
fn a_residual_that_keeps_the_rejected_lookup_is_caught() {
    let (_dir, t, _) = pair(SMALL_VOCAB, 11, 12);
    for (name, s, scheduler) in
        [("T=1", t1(), Scheduler::Sequential), ("T=1.3 top-k 4 top-p 0.9, DSI sp 2", warped(), Scheduler::Dsi(2))]
    {
        let samples = sampled(&t.model, &mut ResampleFromP, &s, scheduler);
        let p = sequence_chi_square_p(&t.model, &PROMPT, &s, &samples);
        eprintln!("lookup with p as its residual, {name}: p = {p:.2e}");
        assert!(p < ALPHA, "{name}: a residual that keeps the rejected token went unnoticed: p = {p:.2e}");
    }
}

/// The hybrid drafter of these tests: lookup of 2..3-grams, else `draft`.
fn hybrid(draft: &Transformer) -> HybridDrafter<'_> {
    HybridDrafter::new(PromptLookupDrafter::new(2, 3).unwrap(), draft)
}

/// Sampled hybrid output of `N` requests under `policy` at `s` under `scheduler`, and the
/// rounds drafted by lookup, by the draft model, and the matches dropped for the draft model,
/// summed.
fn sampled_hybrid(
    target: &Transformer,
    draft: &Transformer,
    policy: &mut dyn StopPolicy,
    s: &SamplingConfig,
    scheduler: Scheduler,
) -> (Vec<Vec<u32>>, [usize; 3]) {
    let mut rounds = [0; 3];
    let samples = (0..N as u64)
        .map(|seed| {
            let mut h = hybrid(draft);
            let g = run(target, &mut h, policy, &mut RejectionSampler, &cfg(s.clone(), seed, LONG), scheduler);
            rounds = [rounds[0] + h.rounds[0], rounds[1] + h.rounds[1], rounds[2] + h.dropped_matches];
            g.tokens
        })
        .collect();
    (samples, rounds)
}

/// The hybrid under the matchrate rule: a match whose first candidate the rule drops (this
/// request's matches were rejected) is drafted by the draft model instead, so proposals come
/// from both parts within one request.
#[test]
fn sampled_hybrid_under_the_matchrate_rule_is_distributed_as_the_target() {
    let (dir, t, _) = pair(SMALL_VOCAB, 11, 12);
    let draft = noisy_draft(dir.path(), SMALL_VOCAB, 11, 0.3);
    let (target, draft) = (&t.model, &draft.model);
    let (samples, [by_lookup, _, dropped]) =
        sampled_hybrid(target, draft, &mut MatchRatePolicy::new(0.45, 6), &t1(), Scheduler::Sequential);
    assert!(
        by_lookup >= N / 2 && dropped >= N / 4,
        "rounds by lookup {by_lookup}, matches dropped for the draft model {dropped}"
    );
    let p = sequence_chi_square_p(target, &PROMPT, &t1(), &samples);
    eprintln!("hybrid under matchrate 0.45, T=1: p = {p:.3}");
    assert!(p > ALPHA, "sampled hybrid output under matchrate not distributed as the target's: p = {p:.2e}");
}

#[test]
fn hybrid_drafting_is_greedy_exact_and_sampled_as_the_target() {
    let (dir, t, _) = pair(SMALL_VOCAB, 11, 12);
    let draft = noisy_draft(dir.path(), SMALL_VOCAB, 11, 0.3);
    let (target, draft) = (&t.model, &draft.model);
    let hybrid = || hybrid(draft);
    let c = cfg(greedy(), 0, 40);
    let want = generate_autoregressive(target, &PROMPT, &c, &[]).unwrap().tokens;
    let mut h = hybrid();
    assert_eq!(run_sequential(target, &mut h, &mut FixedK(3), &PROMPT, &c, &[]).tokens, want, "sequential");
    assert!(h.rounds[0] > 0 && h.rounds[1] > 0, "rounds by lookup and by the draft model: {:?}", h.rounds);
    let dsi = run_dsi(target, &mut hybrid(), &mut DynamicK::new(2, 6), &PROMPT, &c);
    assert_eq!(dsi.tokens, want, "DSI");
    for (threshold, model_k) in [(0.3, None), (0.45, None), (0.45, Some(3))] {
        let rule = || MatchRatePolicy::with_model_k(threshold, 6, model_k);
        let mut h = hybrid();
        let g = run_sequential(target, &mut h, &mut rule(), &PROMPT, &c, &[]);
        assert_eq!(g.tokens, want, "sequential, matchrate {threshold} {model_k:?}");
        if threshold > 0.4 {
            assert!(
                h.dropped_matches > 0 && h.rounds[0] > 0,
                "weak matches dropped, others kept: {} dropped, rounds {:?}",
                h.dropped_matches,
                h.rounds
            );
        }
        let dsi = run_dsi(target, &mut hybrid(), &mut rule(), &PROMPT, &c);
        assert_eq!(dsi.tokens, want, "DSI, matchrate {threshold} {model_k:?}");
    }
    let mut report = Vec::new();
    for (name, s, dsi) in sampled_cases() {
        let (samples, [by_lookup, by_model, _]) =
            sampled_hybrid(target, draft, &mut FixedK(3), &s, Scheduler::Sequential);
        assert!(
            by_lookup >= N / 2 && by_model >= N / 2,
            "{name}: rounds by lookup {by_lookup}, by the draft model {by_model}"
        );
        let p = sequence_chi_square_p(target, &PROMPT, &s, &samples);
        report.push(format!("hybrid, {name}: p = {p:.3}"));
        assert!(p > ALPHA, "{name}: sampled hybrid output not distributed as the target's: p = {p:.2e}");
        let (under_dsi, [by_lookup, by_model, _]) = sampled_hybrid(target, draft, &mut FixedK(3), &s, dsi);
        assert!(
            by_lookup >= N / 2 && by_model >= N / 2,
            "{name}, {dsi:?}: rounds by lookup {by_lookup}, by the draft model {by_model}"
        );
        assert_same_requests(&format!("hybrid, {name}, {dsi:?}"), &under_dsi, &samples);
    }
    eprintln!("{}", report.join("\n"));
}
