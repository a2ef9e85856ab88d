//! DSI's scheduler is lossless as sequential speculative decoding is: greedy output equals the
//! target's greedy output for every SP degree, lookahead and stop policy; sampled output is
//! distributed as the target's, and a scheduler that does not preempt the tasks of a rejected
//! branch is caught; no result computed on a rejected prefix is ever committed.

mod common;
use common::lossless::*;
use common::*;
use specx_decoder::sampling::SamplingConfig;
use specx_decoder::speculative::*;
use specx_decoder::{Transformer, default_device};

fn dsi(
    target: &Transformer,
    draft: &Transformer,
    policy: &mut dyn StopPolicy,
    prompt: &[u32],
    cfg: &SpecConfig,
    d: &DsiConfig,
    eos: &[u32],
) -> DsiGeneration {
    let mut drafter = PlainDrafter::new(draft);
    generate_dsi(&vec![target; d.servers], &mut drafter, policy, &mut RejectionSampler, prompt, cfg, d, eos).unwrap()
}

#[test]
fn greedy_output_equals_target_greedy_for_every_sp_degree_lookahead_and_policy() {
    let drafts = ThreeDrafts::new();
    let t = &drafts.target;
    let hidden = drafts.random.model.config().hidden_size;
    let (mut preempted, mut stale, mut blocks_seen) = (0, 0, (false, false, false));
    for (draft_name, draft) in drafts.named() {
        for (p_i, prompt_seed) in (0..4u32).enumerate() {
            let prompt = tokens(3 + p_i, prompt_seed);
            let eos = [VOCAB as u32 - 1, 7];
            let cfg = SpecConfig { max_new_tokens: 10 + p_i % 3, sampling: SamplingConfig::greedy(), seed: 0 };
            let want = generate_autoregressive(&t.model, &prompt, &cfg, &eos).unwrap().tokens;
            for servers in [1, 2, 4] {
                for lookahead in [1, 3] {
                    let mut policies: Vec<(String, Box<dyn StopPolicy>)> =
                        vec![("fixed".into(), Box::new(FixedK(lookahead)))];
                    let head = AcceptanceHead::init_seeded(hidden, 2, true, p_i as u64, &default_device());
                    policies.push(("head h=0.5".into(), Box::new(HeadPolicy::new(head, HeadRule::new(0.5, 1, 20)))));
                    for (name, mut policy) in policies {
                        let g = dsi(
                            &t.model,
                            draft,
                            policy.as_mut(),
                            &prompt,
                            &cfg,
                            &DsiConfig::new(servers, lookahead),
                            &eos,
                        );
                        let what = format!("{draft_name}, prompt {p_i}, sp {servers}, lookahead {lookahead}, {name}");
                        assert_eq!(g.generation.tokens, want, "{what}");
                        let m = &g.generation.metrics;
                        assert_eq!(m.n_generated, want.len(), "{what}");
                        assert_eq!(g.stats.tasks, m.n_target_calls, "{what}");
                        assert!(m.drafted_per_round.iter().all(|&k| k <= lookahead), "{what}");
                        // Every task either reached a decision, was preempted, or came back stale.
                        assert_eq!(
                            m.accepted_per_round.len() + g.stats.preempted + g.stats.stale,
                            g.stats.tasks,
                            "{what}: {:?}",
                            g.stats
                        );
                        preempted += g.stats.preempted;
                        stale += g.stats.stale;
                        for (&a, &k) in m.accepted_per_round.iter().zip(&m.drafted_per_round) {
                            blocks_seen.0 |= a == 0;
                            blocks_seen.1 |= a > 0 && a < k;
                            blocks_seen.2 |= a == k && k > 1;
                        }
                    }
                }
            }
        }
    }
    assert!(blocks_seen.0 && blocks_seen.1 && blocks_seen.2, "block kinds seen: {blocks_seen:?}");
    assert!(preempted + stale > 0, "no task was ever preempted: the cancellation path went untested");
}

#[test]
fn budget_and_eos_inside_a_block_are_respected() {
    let (_d, t, _) = pair(VOCAB, 1, 1);
    // Budgets on 2 servers with blocks of 4, the end-of-sequence token on 3 with blocks of 3.
    assert_budget_and_eos_respected(&t.model, |prompt, cfg, eos| {
        let (sp, k) = if eos.is_empty() { (2, 4) } else { (3, 3) };
        dsi(&t.model, &t.model, &mut FixedK(k), prompt, cfg, &DsiConfig::new(sp, k), eos).generation.tokens
    });
}

#[test]
fn a_target_list_that_does_not_match_the_workers_is_refused() {
    let (_d, t, _) = pair(VOCAB, 1, 1);
    let cfg = SpecConfig { max_new_tokens: 4, sampling: SamplingConfig::greedy(), seed: 0 };
    let e = generate_dsi(
        &[&t.model],
        &mut PlainDrafter::new(&t.model),
        &mut FixedK(3),
        &mut RejectionSampler,
        &[1, 2],
        &cfg,
        &DsiConfig::new(2, 3),
        &[],
    )
    .unwrap_err();
    assert!(e.to_string().contains("one per worker"), "{e}");
}

#[test]
fn sampled_output_is_distributed_as_the_target_and_a_scheduler_without_preemption_is_caught() {
    let (_d, t, d) = pair(SMALL_VOCAB, 11, 12);
    let short = Short::at_t1(&t.model);
    let (prompt, cfg) = (&short.prompt, |seed| short.cfg(seed));

    let p_ok = short.p(|seed| {
        dsi(&t.model, &d.model, &mut FixedK(1), prompt, &cfg(seed), &DsiConfig::new(2, 1), &[]).generation.tokens
    });
    assert!(p_ok > ALPHA, "DSI sampling (sp 2, lookahead 1) rejected: p = {p_ok:.2e}");

    let p_ok2 = short.p(|seed| {
        dsi(&t.model, &d.model, &mut FixedK(2), prompt, &cfg(seed), &DsiConfig::new(4, 2), &[]).generation.tokens
    });
    assert!(p_ok2 > ALPHA, "DSI sampling (sp 4, lookahead 2) rejected: p = {p_ok2:.2e}");

    // DSI with SpecDec++'s stop rule: blocks end where the head says.
    let hidden = d.model.config().hidden_size;
    let head = AcceptanceHead::init_seeded(hidden, 2, true, 5, &default_device());
    let p_head = short.p(|seed| {
        let mut policy = HeadPolicy::new(head.clone(), HeadRule::new(0.5, 1, 3));
        dsi(&t.model, &d.model, &mut policy, prompt, &cfg(seed), &DsiConfig::new(2, 3), &[]).generation.tokens
    });
    assert!(p_head > ALPHA, "DSI sampling with the head policy rejected: p = {p_head:.2e}");

    let broken = DsiConfig { preempt: false, ..DsiConfig::new(2, 1) };
    let p_bad =
        short.p(|seed| dsi(&t.model, &d.model, &mut FixedK(1), prompt, &cfg(seed), &broken, &[]).generation.tokens);
    assert!(p_bad < ALPHA, "a scheduler that commits results of rejected branches went unnoticed: p = {p_bad:.2e}");
    eprintln!(
        "chi-square p-values: DSI sp2/l1 {p_ok:.3}, sp4/l2 {p_ok2:.3}, with a head {p_head:.3}, without preemption {p_bad:.2e}"
    );
}

#[test]
fn the_same_seed_gives_the_same_sampled_output_whatever_the_sp_degree() {
    // Randomness is keyed by position, not drawn in completion order.
    let (_d, t, d) = pair(SMALL_VOCAB, 11, 12);
    let prompt = vec![1u32, 4, 2];
    let s = SamplingConfig { temperature: 1.0, top_k: None, top_p: None };
    for seed in 0..20 {
        let cfg = SpecConfig { max_new_tokens: 12, sampling: s.clone(), seed };
        let one = dsi(&t.model, &d.model, &mut FixedK(2), &prompt, &cfg, &DsiConfig::new(1, 2), &[]).generation.tokens;
        for servers in [2, 4] {
            let many = dsi(&t.model, &d.model, &mut FixedK(2), &prompt, &cfg, &DsiConfig::new(servers, 2), &[])
                .generation
                .tokens;
            assert_eq!(many, one, "seed {seed}, sp {servers}");
        }
    }
}

/// Randomness keyed by position, in both schedulers: the sequential scheduler and DSI commit
/// the same tokens at T = 0.7 for the same seed, whatever DSI's degree and block length and the
/// stop policy (the sequential scheduler decides its bonus positions as DSI decides every
/// position: a drafted proposal tested against the target).
#[test]
fn sequential_and_dsi_give_the_same_tokens_for_the_same_seed_at_temperature_07() {
    let (_d, t, _) = pair(VOCAB, 1, 2);
    let close = noisy_draft(_d.path(), VOCAB, 1, 0.3);
    let hidden = close.model.config().hidden_size;
    let s = SamplingConfig { temperature: 0.7, top_k: None, top_p: None };
    let mut full_rounds = 0;
    for seed in 0..12u64 {
        let prompt = tokens(3 + seed as usize % 3, seed as u32);
        let eos = [VOCAB as u32 - 1];
        let cfg = SpecConfig { max_new_tokens: 16, sampling: s.clone(), seed };
        let policies = |k: usize| -> Vec<(String, Box<dyn StopPolicy>)> {
            let head = AcceptanceHead::init_seeded(hidden, 2, true, seed, &default_device());
            vec![
                ("fixed".into(), Box::new(FixedK(k))),
                ("head".into(), Box::new(HeadPolicy::new(head, HeadRule::new(0.6, 1, k)))),
            ]
        };
        let mut drafter = PlainDrafter::new(&close.model);
        let sequential =
            generate_speculative(&t.model, &mut drafter, &mut FixedK(3), &mut RejectionSampler, &prompt, &cfg, &eos)
                .unwrap();
        full_rounds += sequential
            .metrics
            .accepted_per_round
            .iter()
            .zip(&sequential.metrics.drafted_per_round)
            .filter(|(a, k)| a == k)
            .count();
        for k in [2, 4] {
            for (name, mut policy) in policies(k) {
                let mut drafter = PlainDrafter::new(&close.model);
                let other = run_sequential(&t.model, &mut drafter, policy.as_mut(), &prompt, &cfg, &eos);
                assert_eq!(other.tokens, sequential.tokens, "seed {seed}: sequential, {name} k {k}");
            }
            for servers in [1, 3] {
                for (name, mut policy) in policies(k) {
                    let g =
                        dsi(&t.model, &close.model, policy.as_mut(), &prompt, &cfg, &DsiConfig::new(servers, k), &eos);
                    assert_eq!(g.generation.tokens, sequential.tokens, "seed {seed}: DSI sp {servers}, {name} k {k}");
                }
            }
        }
    }
    assert!(full_rounds > 0, "no round was fully accepted: the bonus path went untested");
}
