//! Coupled draws ([`specx_decoder::coupling`]): speculative decoding with [`CoupledSampler`]
//! commits exactly the tokens plain coupled sampling with the same seed commits, for every
//! stop rule, both schedulers and any draft; those tokens are distributed as the target's; and
//! the broken variants of the two things this rests on (one shared noise per position, the
//! correction being the target's own draw) are caught.

mod common;
use common::lossless::*;
use common::*;
use rand::rngs::StdRng;
use specx_decoder::coupling::Draws;
use specx_decoder::sampling::{SamplingConfig, sample_from};
use specx_decoder::speculative::*;
use specx_decoder::{LoadedModel, Transformer};

/// Requests per chi-square test.
const N: usize = 1500;
/// Requests per rule and scheduler in the equality test.
const N_RULE: usize = 50;
const ALPHA: f64 = 1e-4;
const PROMPT: [u32; 3] = [1, 4, 2];

fn settings() -> Vec<(&'static str, SamplingConfig)> {
    vec![
        ("T=1", SamplingConfig { temperature: 1.0, top_k: None, top_p: None }),
        ("T=0.6", SamplingConfig { temperature: 0.6, top_k: None, top_p: None }),
        ("T=1.3 top-k 4 top-p 0.9", SamplingConfig { temperature: 1.3, top_k: Some(4), top_p: Some(0.9) }),
    ]
}

/// The target, a close draft (noisy copy: long accepted runs) and a far one (independent
/// weights: mostly rejections).
fn models() -> (tempfile::TempDir, LoadedModel, LoadedModel, LoadedModel) {
    let (dir, target, far) = pair(SMALL_VOCAB, 11, 12);
    let close = noisy_draft(dir.path(), SMALL_VOCAB, 11, 0.3);
    (dir, target, close, far)
}

fn cfg(s: &SamplingConfig, seed: u64) -> SpecConfig {
    SpecConfig { max_new_tokens: LONG, sampling: s.clone(), seed }
}

fn rules() -> Vec<(&'static str, Box<dyn StopPolicy>)> {
    vec![
        ("fixed 3", Box::new(FixedK(3))),
        ("confidence 0.5", Box::new(ConfidencePolicy { threshold: 0.5, min_candidates: 1, max_candidates: 4 })),
        ("p_min 0.4 (drops)", Box::new(PMinPolicy { p_min: 0.4, n_max: 4 })),
        ("dynamic K0=2", Box::new(DynamicK::new(2, 5))),
        ("svip 0.6", Box::new(SvipPolicy { threshold: 0.6, max_candidates: 5 })),
    ]
}

/// The two schedulers every rule runs under here.
#[derive(Clone, Copy, PartialEq)]
enum Scheduler {
    Sequential,
    /// DSI on two target instances, lookahead the rule's bound (at most 5).
    Dsi,
}

fn speculate(
    scheduler: Scheduler,
    t: &Transformer,
    d: &Transformer,
    policy: &mut dyn StopPolicy,
    verifier: &mut dyn Verifier,
    c: &SpecConfig,
) -> Generation {
    let mut drafter = PlainDrafter::new(d);
    match scheduler {
        Scheduler::Sequential => generate_speculative(t, &mut drafter, policy, verifier, &PROMPT, c, &[]).unwrap(),
        Scheduler::Dsi => {
            let lookahead = policy.max_candidates().min(5);
            generate_dsi(&[t, t], &mut drafter, policy, verifier, &PROMPT, c, &DsiConfig::new(2, lookahead), &[])
                .unwrap()
                .generation
        }
    }
}

fn plain(t: &Transformer, c: &SpecConfig) -> Vec<u32> {
    generate_autoregressive_drawn(t, &PROMPT, c, &[], Draws::Coupled).unwrap().tokens
}

#[test]
fn coupled_speculative_decoding_commits_the_tokens_of_plain_coupled_sampling() {
    let (_dir, t, close, far) = models();
    for (sname, s) in settings() {
        let want: Vec<Vec<u32>> = (0..N_RULE as u64).map(|seed| plain(&t.model, &cfg(&s, seed))).collect();
        for (scheduler, which) in [("sequential", Scheduler::Sequential), ("DSI sp 2", Scheduler::Dsi)] {
            for (dname, d) in [("close draft", &close), ("far draft", &far)] {
                for (rname, mut rule) in rules() {
                    let what = format!("{scheduler}, {dname}, {rname}, {sname}");
                    let run = Run::of(N_RULE, |seed| {
                        speculate(which, &t.model, &d.model, rule.as_mut(), &mut CoupledSampler, &cfg(&s, seed))
                    });
                    for (seed, (got, want)) in run.samples.iter().zip(&want).enumerate() {
                        assert_eq!(got, want, "{what}, seed {seed}: tokens differ from plain coupled sampling's");
                    }
                    if dname == "close draft" && rname == "fixed 3" {
                        run.assert_exercised(&what, 20, scheduler == "sequential");
                    }
                }
            }
        }
        // The noise must be shared: a verifier that draws the target's token from its own
        // stream (the draft from another) commits other tokens.
        let run = Run::of(N_RULE, |seed| {
            speculate(Scheduler::Sequential, &t.model, &close.model, &mut FixedK(3), &mut OwnNoise, &cfg(&s, seed))
        });
        let differ = run.samples.iter().zip(&want).filter(|(a, b)| a != b).count();
        assert!(differ > N_RULE / 4, "{sname}: unshared noise changed only {differ} of {N_RULE} requests");
    }
}

#[test]
fn coupled_output_is_distributed_as_the_target_and_a_fresh_correction_is_caught() {
    let (_dir, t, _close, far) = models();
    let mut report = Vec::new();
    for (name, s) in settings() {
        let run = Run::of(N, |seed| {
            speculate(Scheduler::Sequential, &t.model, &far.model, &mut FixedK(3), &mut CoupledSampler, &cfg(&s, seed))
        });
        let p = sequence_chi_square_p(&t.model, &PROMPT, &s, &run.samples);
        report.push(format!("{name}: p = {p:.3}; {}", run.summary()));
        assert!(p > ALPHA, "{name}: coupled output not distributed as the target's: p = {p:.2e}");
        let broken = Run::of(N, |seed| {
            speculate(Scheduler::Sequential, &t.model, &far.model, &mut FixedK(3), &mut FreshCorrection, &cfg(&s, seed))
        });
        let p = sequence_chi_square_p(&t.model, &PROMPT, &s, &broken.samples);
        report.push(format!("{name}, fresh correction: p = {p:.2e}"));
        assert!(p < ALPHA, "{name}: a correction drawn afresh from p went unnoticed: p = {p:.3}");
    }
    eprintln!("{}", report.join("\n"));
}

/// Broken: the target's draw uses a stream of its own, not the position's shared noise.
struct OwnNoise;

impl Verifier for OwnNoise {
    fn decide(&mut self, c: &Candidate, logits: &[f32], s: &SamplingConfig, rng: &mut StdRng) -> Verdict {
        let mut own: StdRng = rand::SeedableRng::seed_from_u64(rand::RngExt::random::<u64>(rng) ^ 0x5eed);
        CoupledSampler.decide(c, logits, s, &mut own)
    }

    fn draws(&self) -> Draws {
        Draws::Coupled
    }
}

/// Broken: accepts as [`CoupledSampler`] does, but replaces a rejected candidate by a fresh
/// draw from `p` (given a mismatch, the target's own draw is not distributed as `p`).
struct FreshCorrection;

impl Verifier for FreshCorrection {
    fn decide(&mut self, c: &Candidate, logits: &[f32], s: &SamplingConfig, rng: &mut StdRng) -> Verdict {
        match CoupledSampler.decide(c, logits, s, rng) {
            Verdict::Accept => Verdict::Accept,
            Verdict::Reject(_) => Verdict::Reject(sample_from(&s.probabilities(logits), rng)),
        }
    }

    fn draws(&self) -> Draws {
        Draws::Coupled
    }
}
