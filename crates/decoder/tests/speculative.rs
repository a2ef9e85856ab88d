//! Speculative decoding is lossless: greedy output equals the target's own greedy output for
//! every policy, sampled output is distributed as the target's (and the test catches two
//! classic bugs), and both caches are rolled back correctly in every kind of round.

mod common;
use common::lossless::*;
use common::*;
use rand::rngs::StdRng;
use specx_decoder::sampling::{SamplingConfig, sample_from};
use specx_decoder::speculative::*;
use specx_decoder::{Transformer, default_device};

fn spec(
    target: &Transformer,
    draft: &Transformer,
    policy: &mut dyn StopPolicy,
    prompt: &[u32],
    cfg: &SpecConfig,
    eos: &[u32],
) -> Generation {
    let mut drafter = PlainDrafter::new(draft);
    generate_speculative(target, &mut drafter, policy, &mut RejectionSampler, prompt, cfg, eos).unwrap()
}

fn policies(hidden: usize) -> Vec<(String, Box<dyn StopPolicy>)> {
    let mut v: Vec<(String, Box<dyn StopPolicy>)> = Vec::new();
    for k in [1, 2, 3, 5, 8] {
        v.push((format!("fixed {k}"), Box::new(FixedK(k))));
    }
    v.push((
        "confidence 0.5".into(),
        Box::new(ConfidencePolicy { threshold: 0.5, min_candidates: 1, max_candidates: 6 }),
    ));
    for (i, h) in [0.2, 0.7].into_iter().enumerate() {
        let head = AcceptanceHead::init_seeded(hidden, 2, i == 0, i as u64, &default_device());
        v.push((format!("head h={h}"), Box::new(HeadPolicy::new(head, HeadRule::new(h, 1, 20)))));
    }
    // The training-free rules, at settings where they act on these small models: llama.cpp's
    // and AdaEDL's drop the low-confidence candidate (p_min 0.6 drops even first candidates,
    // so some rounds verify nothing), the others adapt across rounds.
    v.push((
        "roc 0.4".into(),
        Box::new(RocThreshold::new(ConfidencePolicy { threshold: 0.4, min_candidates: 1, max_candidates: 6 })),
    ));
    v.push(("pmin 0.6".into(), Box::new(PMinPolicy { p_min: 0.6, n_max: 6 })));
    v.push(("dynamic K0=2".into(), Box::new(DynamicK::new(2, 8))));
    v.push(("svip 0.5".into(), Box::new(SvipPolicy { threshold: 0.5, max_candidates: 8 })));
    v.push((
        "adaedl 0.3".into(),
        Box::new(AdaEdlPolicy::new(AdaEdlParams { lambda: 0.3, max_candidates: 6, ..AdaEdlParams::DEFAULT })),
    ));
    v.push(("bandit 1,2,4".into(), Box::new(BanditK::new(vec![1, 2, 4], BanditK::EXPLORATION))));
    v
}

#[test]
fn a_policy_that_drops_every_candidate_decodes_like_the_target_alone() {
    // p_min above every probability: each round drops its first candidate and verifies
    // nothing, one target forward per token, as plain decoding does.
    let (_d, t, d) = pair(VOCAB, 1, 2);
    let prompt = tokens(5, 1);
    for sampling in [SamplingConfig::greedy(), SamplingConfig { temperature: 1.0, top_k: None, top_p: None }] {
        let cfg = SpecConfig { max_new_tokens: 12, sampling, seed: 3 };
        let got = spec(&t.model, &d.model, &mut PMinPolicy { p_min: 1.01, n_max: 4 }, &prompt, &cfg, &[]);
        let m = &got.metrics;
        assert_eq!(m.n_generated, 12);
        assert_eq!((m.n_drafted, m.n_accepted, m.n_target_calls), (0, 0, 12));
        assert!(m.drafted_per_round.iter().all(|&k| k == 0) && m.drafted_per_round.len() == 11);
        if cfg.sampling.is_greedy() {
            assert_eq!(got.tokens, generate_autoregressive(&t.model, &prompt, &cfg, &[]).unwrap().tokens);
        }
    }
}

#[test]
fn greedy_output_equals_target_greedy_for_every_policy() {
    let drafts = ThreeDrafts::new(); // the identical draft gets everything accepted
    let t = &drafts.target;
    let hidden = drafts.random.model.config().hidden_size;
    let mut rounds_seen = (false, false, false); // zero accepted, some, all
    for (draft_name, draft) in drafts.named() {
        for (p_i, prompt_seed) in (0..8u32).enumerate() {
            let prompt = tokens(3 + p_i, prompt_seed);
            // EOS tokens make generation stop inside candidate lists in some prompts.
            let eos = [VOCAB as u32 - 1, 7];
            let cfg = SpecConfig { max_new_tokens: 9 + p_i % 4, sampling: SamplingConfig::greedy(), seed: 0 };
            let want = generate_autoregressive(&t.model, &prompt, &cfg, &eos).unwrap().tokens;
            for (name, mut policy) in policies(hidden) {
                let got = spec(&t.model, draft, policy.as_mut(), &prompt, &cfg, &eos);
                assert_eq!(got.tokens, want, "{draft_name}, {name}, prompt {p_i}");
                let m = &got.metrics;
                assert_eq!(m.n_generated, want.len());
                assert_eq!(m.n_target_calls, 1 + m.accepted_per_round.len());
                assert_eq!(m.n_drafted, m.drafted_per_round.iter().sum::<usize>());
                for (&a, &k) in m.accepted_per_round.iter().zip(&m.drafted_per_round) {
                    rounds_seen.0 |= a == 0;
                    rounds_seen.1 |= a > 0 && a < k;
                    rounds_seen.2 |= a == k && k > 1;
                }
            }
        }
    }
    assert!(rounds_seen.0 && rounds_seen.1 && rounds_seen.2, "round kinds seen: {rounds_seen:?}");
}

/// Greedy verification from the target's rows: a verifier that does not declare
/// `decides_by_argmax`, so the scheduler reads every row, as it does when something else reads
/// the scores.
struct FromRows;

impl Verifier for FromRows {
    fn decide(&mut self, c: &Candidate, logits: &[f32], s: &SamplingConfig, rng: &mut StdRng) -> Verdict {
        ExactMatch.decide(c, logits, s, rng)
    }

    fn decides_siblings(&self) -> bool {
        true
    }

    fn decide_among(
        &mut self,
        children: &[&Candidate],
        logits: &[f32],
        s: &SamplingConfig,
        rng: &mut StdRng,
    ) -> Choice {
        ExactMatch.decide_among(children, logits, s, rng)
    }
}

/// A greedy verification decided from each row's argmax alone (the target's calls return
/// token ids; on a GPU the argmax runs there) commits what the same verification decided from
/// the rows commits, round by round: chains from three drafts (rejections at every depth, all
/// accepted) and suffix trees that branch, on prompts whose greedy output varies.
#[test]
fn greedy_rounds_decided_from_argmaxes_commit_what_the_rows_decide() {
    let drafts = ThreeDrafts::new();
    let t = &drafts.target.model;
    let cfg = SpecConfig { max_new_tokens: 12, sampling: SamplingConfig::greedy(), seed: 0 };
    let (mut varied, mut branched) = (0, 0);
    for p in 0..6u32 {
        let prompt = tokens(4 + p as usize, 30 + p);
        for (name, draft) in drafts.named() {
            let run = |v: &mut dyn Verifier| {
                generate_speculative(t, &mut PlainDrafter::new(draft), &mut FixedK(4), v, &prompt, &cfg, &[]).unwrap()
            };
            let (rows, best) = (run(&mut FromRows), run(&mut RejectionSampler));
            assert_eq!(
                (&best.tokens, &best.metrics.accepted_per_round),
                (&rows.tokens, &rows.metrics.accepted_per_round),
                "{name}, prompt {p}"
            );
            // FixedK reads nothing of the draft, so its candidates are the draft's argmaxes
            // alone; a rule that reads the draft's rows (a confidence product that never
            // stops early) drafts the same.
            let mut reading = ConfidenceProductPolicy::new(1.0, 1, 4);
            let drafted_from_rows =
                generate_speculative(t, &mut PlainDrafter::new(draft), &mut reading, &mut FromRows, &prompt, &cfg, &[])
                    .unwrap();
            assert_eq!(
                (&drafted_from_rows.tokens, &drafted_from_rows.metrics.accepted_per_round),
                (&best.tokens, &best.metrics.accepted_per_round),
                "drafted from rows, {name}, prompt {p}"
            );
            // DSI's workers return argmaxes under RejectionSampler, rows under FromRows.
            let dsi = |v: &mut dyn Verifier| {
                let mut drafter = PlainDrafter::new(draft);
                let d = DsiConfig::new(2, 4);
                generate_dsi(&[t, t], &mut drafter, &mut FixedK(4), v, &prompt, &cfg, &d, &[])
                    .unwrap()
                    .generation
                    .tokens
            };
            assert_eq!(dsi(&mut RejectionSampler), best.tokens, "DSI from argmaxes, {name}, prompt {p}");
            assert_eq!(dsi(&mut FromRows), best.tokens, "DSI from rows, {name}, prompt {p}");
            let mut distinct = best.tokens.clone();
            distinct.sort_unstable();
            distinct.dedup();
            varied += usize::from(distinct.len() >= 3);
        }
        // A prompt that repeats itself, so that suffix trees match and branch.
        let repeated: Vec<u32> = prompt.iter().chain(&prompt).chain(&prompt[..2]).copied().collect();
        let suffix = || {
            SuffixDrafter::new(SuffixParams { alpha: 4.0, min_token_prob: 0.0, max_nodes: 12, ..Default::default() })
                .unwrap()
        };
        let run = |v: &mut dyn Verifier| {
            generate_speculative(t, &mut suffix(), &mut FixedK(8), v, &repeated, &cfg, &[]).unwrap()
        };
        let (rows, best) = (run(&mut FromRows), run(&mut ExactMatch));
        assert_eq!(
            (&best.tokens, &best.metrics.accepted_per_round, &best.metrics.drafted_per_round),
            (&rows.tokens, &rows.metrics.accepted_per_round, &rows.metrics.drafted_per_round),
            "suffix trees, prompt {p}"
        );
        branched += usize::from(best.metrics.drafted_per_round.iter().any(|&d| d > 1));
    }
    assert!(varied >= 6, "only {varied} runs with a varied greedy output");
    assert!(branched > 0, "no suffix tree drafted more than one node");
}

#[test]
fn budget_and_eos_inside_the_candidates_are_respected() {
    let (_d, t, _) = pair(VOCAB, 1, 1);
    // The identical draft proposes 8 accepted candidates per round; a budget of 5 ends inside.
    assert_budget_and_eos_respected(&t.model, |prompt, cfg, eos| {
        spec(&t.model, &t.model, &mut FixedK(8), prompt, cfg, eos).tokens
    });
}

#[test]
fn both_caches_hold_exactly_the_committed_prefix_after_every_round() {
    // Re-run generation round by round through a drafter that checks the cache invariant
    // before each round: the draft cache never holds a token that was not committed.
    struct Checked<'m> {
        inner: PlainDrafter<'m>,
    }
    impl Drafter for Checked<'_> {
        fn draft(&mut self, round: DraftRound<'_>) -> anyhow::Result<Vec<Candidate>> {
            assert!(
                self.inner.cache_len() < round.committed.len(),
                "draft cache {} not behind committed {}",
                self.inner.cache_len(),
                round.committed.len()
            );
            self.inner.draft(round)
        }
        fn rollback(&mut self, valid: usize) {
            self.inner.rollback(valid);
            assert!(self.inner.cache_len() <= valid);
        }
    }
    let (_d, t, d) = pair(VOCAB, 1, 2);
    let prompt = tokens(5, 1);
    let cfg = SpecConfig { max_new_tokens: 20, sampling: SamplingConfig::greedy(), seed: 0 };
    let want = generate_autoregressive(&t.model, &prompt, &cfg, &[]).unwrap().tokens;
    let mut drafter = Checked { inner: PlainDrafter::new(&d.model) };
    let got = generate_speculative(&t.model, &mut drafter, &mut FixedK(4), &mut RejectionSampler, &prompt, &cfg, &[])
        .unwrap();
    assert_eq!(got.tokens, want);
}

// ---------- the sampling test ----------

/// On rejection samples from p instead of norm(max(p - q, 0)): biased towards draft tokens.
struct ResidualFromP;
impl Verifier for ResidualFromP {
    fn decide(&mut self, c: &Candidate, logits: &[f32], s: &SamplingConfig, rng: &mut StdRng) -> Verdict {
        use rand::RngExt;
        let p = s.probabilities(logits);
        if rng.random::<f64>() * c.q_token as f64 >= p[c.token as usize] as f64 {
            Verdict::Reject(sample_from(&p, rng))
        } else {
            Verdict::Accept
        }
    }
}

/// Drafts greedily but reports the sampled distribution q: the bug of reference code that
/// drafts with argmax while testing against a sampled q.
struct GreedyDraftSampledQ<'m> {
    model: &'m Transformer,
}
impl Drafter for GreedyDraftSampledQ<'_> {
    fn draft(&mut self, round: DraftRound<'_>) -> anyhow::Result<Vec<Candidate>> {
        let DraftRound { committed, max, sampling: s, metrics: m, .. } = round;
        let mut seq = committed.to_vec();
        let mut out = Vec::new();
        for _ in 0..max.min(2) {
            let mut c = self.model.new_cache(1);
            let logits = specx_decoder::generate::last_logits(&self.model.forward(&seq, &mut c)?);
            m.n_draft_calls += 1;
            let q = s.probabilities(&logits);
            let token = specx_decoder::sampling::argmax(&q);
            seq.push(token);
            out.push(Candidate { token, q_token: q[token as usize], q, ngram: None });
        }
        Ok(out)
    }
    fn rollback(&mut self, _: usize) {}
}

#[test]
fn sampled_output_is_distributed_as_the_target_and_broken_variants_are_caught() {
    // At level ALPHA over SAMPLES samples (see `Short`).
    let (_d, t, d) = pair(SMALL_VOCAB, 11, 12);
    let short = Short::at_t1(&t.model);
    let (prompt, cfg) = (&short.prompt, |seed| short.cfg(seed));

    let p_ok = short.p(|seed| spec(&t.model, &d.model, &mut FixedK(2), prompt, &cfg(seed), &[]).tokens);
    assert!(p_ok > ALPHA, "correct speculative sampling rejected: p = {p_ok:.2e}");

    let warped = Short::at(&t.model, SamplingConfig { temperature: 1.5, top_k: Some(5), top_p: Some(0.95) });
    let p_w = warped.p(|seed| spec(&t.model, &d.model, &mut FixedK(2), prompt, &warped.cfg(seed), &[]).tokens);
    assert!(p_w > ALPHA, "speculative sampling with top-k/top-p warping rejected: p = {p_w:.2e}");

    // Rules that drop candidates (some rounds verify none) and adapt across rounds.
    let p_drop = short
        .p(|seed| spec(&t.model, &d.model, &mut PMinPolicy { p_min: 0.5, n_max: 3 }, prompt, &cfg(seed), &[]).tokens);
    assert!(p_drop > ALPHA, "speculative sampling under p_min rejected: p = {p_drop:.2e}");
    let p_ada = short.p(|seed| {
        let mut p = AdaEdlPolicy::new(AdaEdlParams { lambda: 0.2, max_candidates: 3, ..AdaEdlParams::DEFAULT });
        spec(&t.model, &d.model, &mut p, prompt, &cfg(seed), &[]).tokens
    });
    assert!(p_ada > ALPHA, "speculative sampling under AdaEDL rejected: p = {p_ada:.2e}");

    let p_bad = short.p(|seed| {
        let mut dr = PlainDrafter::new(&d.model);
        generate_speculative(&t.model, &mut dr, &mut FixedK(2), &mut ResidualFromP, prompt, &cfg(seed), &[])
            .unwrap()
            .tokens
    });
    assert!(p_bad < ALPHA, "a wrong residual distribution went unnoticed: p = {p_bad:.2e}");

    let p_bad_q = short.p(|seed| {
        let mut dr = GreedyDraftSampledQ { model: &d.model };
        generate_speculative(&t.model, &mut dr, &mut FixedK(2), &mut RejectionSampler, prompt, &cfg(seed), &[])
            .unwrap()
            .tokens
    });
    assert!(p_bad_q < ALPHA, "greedy drafting against a sampled q went unnoticed: p = {p_bad_q:.2e}");
    eprintln!(
        "chi-square p-values: correct {p_ok:.3}, warped {p_w:.3}, p_min {p_drop:.3}, AdaEDL {p_ada:.3}, residual-from-p {p_bad:.2e}, greedy-draft {p_bad_q:.2e}"
    );
}

#[test]
fn head_checkpoints_round_trip() {
    let dir = tempfile::tempdir().unwrap();
    let device = default_device();
    for (depth, tied) in [(0, false), (3, true), (2, false)] {
        let head = AcceptanceHead::init_seeded(16, depth, tied, depth as u64, &device);
        let spec = HeadSpec {
            hidden_size: 16,
            depth,
            tied,
            draft_model_sha256: Some("abc".into()),
            draft_transform: None,
            training: serde_json::json!({"w_rej": 6}),
            draft_stats: false,
        };
        let path = dir.path().join(format!("h{depth}{tied}"));
        head.save(&path, &spec).unwrap();
        let (back, spec2) = AcceptanceHead::load(&path, &device).unwrap();
        assert_eq!(spec, spec2);
        let x: Vec<f32> = (0..16).map(|i| (i as f32 - 8.0) / 5.0).collect();
        let (a, b) = (head.accept_probability(&x).unwrap(), back.accept_probability(&x).unwrap());
        assert!((a - b).abs() < 1e-7 && a > 0.0 && a < 1.0, "depth {depth}: {a} vs {b}");
    }
}

#[test]
fn head_policy_follows_the_threshold_rule() {
    let device = default_device();
    let head = AcceptanceHead::init_seeded(4, 1, false, 9, &device);
    let h = [0.3f32, -0.2, 0.5, 0.1];
    let p = head.accept_probability(&h).unwrap();
    // After candidate i the product covers candidates 1..i-1 (step 1 contributes 1): stop at
    // the first i with 1 - p^(i-1) > threshold (and within [min, max]).
    let threshold = 1.0 - p.powi(3) + 1e-9; // exceeded first at i - 1 = 4
    let mut pol = HeadPolicy::new(head, HeadRule::new(threshold, 2, 20));
    pol.begin_round();
    let step = |i| DraftStep {
        index: i,
        token: 0,
        q_token: 0.5,
        confidence: 0.5,
        ngram: None,
        stats: LazyStats::known(DraftStats::default()),
        hidden: HiddenState::Vector(&h),
    };
    let stops: Vec<bool> = (1..=6).map(|i| pol.decide(&step(i)).unwrap() == Decision::Stop).collect();
    assert_eq!(stops, vec![false, false, false, false, true, true]);
}

/// Every round drafted `k` candidates, or what was left of the budget when less (no EOS).
fn assert_rounds_draft(g: &Generation, max_new: usize, k: usize, what: &str) {
    let m = &g.metrics;
    let mut generated = 1; // the prefill's token
    for (&drafted, &accepted) in m.drafted_per_round.iter().zip(&m.accepted_per_round) {
        assert_eq!(drafted, k.min(max_new - generated), "{what}: {:?}", m.drafted_per_round);
        generated = (generated + accepted + 1).min(max_new);
    }
    assert!(m.drafted_per_round.len() >= 2, "{what}: {:?}", m.drafted_per_round);
}

/// A head that predicts the same acceptance probability for every hidden state.
struct ConstantHead(f64);

impl AcceptanceModel for ConstantHead {
    fn accept_probability(&self, _: HiddenState, _: Option<&DraftStats>) -> anyhow::Result<f64> {
        Ok(self.0)
    }
}

#[test]
fn head_policy_never_stops_before_candidate_two_and_drafts_max_when_sure() {
    // The paper's rule: the first step's probability (of the committed token) counts as 1.
    // A head predicting 0 everywhere therefore drafts exactly 2 candidates per round, a head
    // predicting 1 everywhere drafts max; both with min 1 (which acts as 2) and min 2.
    let (_d, t, _) = pair(VOCAB, 1, 1);
    let prompt = tokens(4, 3);
    let cfg = SpecConfig { max_new_tokens: 60, sampling: SamplingConfig::greedy(), seed: 0 };
    for min in [1, 2] {
        for (p, want_k, max) in [(0.0, 2, 20), (0.0, 2, 5), (1.0, 5, 5), (1.0, 20, 20)] {
            let mut pol = HeadPolicy::new(ConstantHead(p), HeadRule::new(0.5, min, max));
            let g = spec(&t.model, &t.model, &mut pol, &prompt, &cfg, &[]);
            assert_rounds_draft(&g, cfg.max_new_tokens, want_k, &format!("p={p} min={min} max={max}"));
        }
    }
    // max = 1 is the only way to stop after one candidate.
    let mut pol = HeadPolicy::new(ConstantHead(0.0), HeadRule::new(0.5, 1, 1));
    let g = spec(&t.model, &t.model, &mut pol, &prompt, &cfg, &[]);
    assert!(g.metrics.drafted_per_round.iter().all(|&k| k == 1));
}

#[test]
fn confidence_policy_reads_the_draft_softmax_when_greedy() {
    // Greedy drafting has a one-hot q; the confidence rule must still see the draft's softmax
    // probability of its token. Each round's length is predicted from that probability along
    // the draft's greedy continuation of the round's committed prefix, with a threshold at the
    // median of those probabilities, so that some rounds stop early and some run to max. A
    // policy that read the one-hot q (confidence 1) would draft max every round.
    let (_d, t, d) = pair(VOCAB, 1, 2);
    let prompt = tokens(4, 3);
    let cfg = SpecConfig { max_new_tokens: 40, sampling: SamplingConfig::greedy(), seed: 0 };
    let (min, max) = (1, 4);
    // The draft's greedy candidates after `prefix` and its softmax probability of each.
    let draft_confidences = |prefix: &[u32], n: usize| -> Vec<f32> {
        let mut seq = prefix.to_vec();
        (0..n)
            .map(|_| {
                let logits =
                    specx_decoder::generate::last_logits(&d.model.forward(&seq, &mut d.model.new_cache(1)).unwrap());
                let token = specx_decoder::sampling::argmax(&logits);
                seq.push(token);
                specx_decoder::sampling::top_probability(&logits, token)
            })
            .collect()
    };
    let mut all: Vec<f32> = draft_confidences(&prompt, 30);
    all.sort_by(f32::total_cmp);
    let threshold = all[all.len() / 2];
    let mut pol = ConfidencePolicy { threshold, min_candidates: min, max_candidates: max };
    let g = spec(&t.model, &d.model, &mut pol, &prompt, &cfg, &[]);
    let m = &g.metrics;
    let mut committed = prompt.clone();
    committed.push(g.tokens[0]); // the prefill's token
    let mut generated = 1;
    for (r, (&drafted, &accepted)) in m.drafted_per_round.iter().zip(&m.accepted_per_round).enumerate() {
        let budget = max.min(cfg.max_new_tokens - generated);
        let conf = draft_confidences(&committed, budget);
        let want = (1..=budget).find(|&i| pol.stop(i, conf[i - 1])).unwrap_or(budget);
        assert_eq!(drafted, want, "round {r}: confidences {conf:?}, threshold {threshold}");
        let n = (accepted + 1).min(cfg.max_new_tokens - generated);
        committed.extend_from_slice(&g.tokens[generated..generated + n]);
        generated += n;
    }
    let lengths = &m.drafted_per_round;
    assert!(
        lengths.iter().any(|&k| k < max) && lengths.contains(&max),
        "threshold {threshold} did not separate the rounds: {lengths:?}"
    );
}

#[test]
fn an_eos_inside_a_suffix_tree_ends_the_output_there() {
    let (_d, t, _) = pair(VOCAB, 1, 1);
    let prompt = tokens(4, 3);
    let c = cfg(greedy(), 0, 12);
    let free = generate_autoregressive(&t.model, &prompt, &c, &[]).unwrap().tokens;
    let eos = [free[3]];
    let want = generate_autoregressive(&t.model, &prompt, &c, &eos).unwrap().tokens;
    // Earlier outputs hold the whole free text (past the EOS) and a branch off it, so the
    // trees hold the EOS with nodes after it.
    let mut branch = free[..2].to_vec();
    branch.extend([free[5], free[6]]);
    let earlier = vec![free.clone(), branch];
    let params = SuffixParams { alpha: 8.0, min_token_prob: 0.0, cached_requests: 2, ..Default::default() };
    let suffix = || SuffixDrafter::new(params.clone()).unwrap().with_earlier(&earlier);
    let greedy_run =
        generate_speculative(&t.model, &mut suffix(), &mut FixedK(8), &mut RejectionSampler, &prompt, &c, &eos)
            .unwrap();
    assert_eq!(greedy_run.tokens, want);
    assert!(
        greedy_run.metrics.drafted_per_round.iter().any(|&d| d > 4),
        "a tree reaching past the EOS: {:?}",
        greedy_run.metrics.drafted_per_round
    );
    // Sampled: the output stops at its first EOS whatever the tree holds after it.
    let hot = SamplingConfig { temperature: 0.8, top_k: None, top_p: None };
    for seed in 0..8 {
        let c = cfg(hot.clone(), seed, 12);
        let g = generate_speculative(&t.model, &mut suffix(), &mut FixedK(8), &mut RejectionSampler, &prompt, &c, &eos)
            .unwrap();
        let first_eos = g.tokens.iter().position(|x| eos.contains(x));
        if let Some(i) = first_eos {
            assert_eq!(i + 1, g.tokens.len(), "seed {seed}: nothing after the EOS");
        } else {
            assert_eq!(g.tokens.len(), 12, "seed {seed}");
        }
    }
}

#[test]
fn sampled_siblings_from_a_draft_distribution_are_refused_before_the_target_runs() {
    /// Two siblings at the first position, each drawn from a uniform q (a chain: one).
    struct SampledSiblings;
    impl Drafter for SampledSiblings {
        fn draft(&mut self, _: DraftRound<'_>) -> anyhow::Result<Vec<Candidate>> {
            let q = vec![1.0 / VOCAB as f32; VOCAB];
            Ok(vec![Candidate { token: 1, q_token: q[1], q, ngram: None }])
        }
        fn draft_tree(&mut self, _: DraftRound<'_>) -> anyhow::Result<DraftTree> {
            let q = vec![1.0 / VOCAB as f32; VOCAB];
            let mut tree = DraftTree::default();
            for token in [1, 2] {
                tree.push(Candidate { token, q: q.clone(), q_token: q[0], ngram: None }, None);
            }
            Ok(tree)
        }
        fn rollback(&mut self, _: usize) {}
    }
    let (_d, t, _) = pair(VOCAB, 1, 1);
    let run = |s: SamplingConfig| {
        let c = cfg(s, 0, 4);
        generate_speculative(
            &t.model,
            &mut SampledSiblings,
            &mut FixedK(2),
            &mut RejectionSampler,
            &tokens(4, 3),
            &c,
            &[],
        )
    };
    let hot = SamplingConfig { temperature: 0.8, top_k: None, top_p: None };
    let err = run(hot).unwrap_err();
    assert!(err.to_string().contains("siblings drawn from its distribution"), "{err}");
    // Greedy decisions take the argmax among any siblings.
    assert!(run(greedy()).is_ok());
}
