//! Sampled output is distributed as the target's over whole requests of many rounds, every
//! stop policy under both schedulers commits exactly those tokens, at two temperatures and
//! with top-k/top-p warping; and a broken variant of each mechanism a round relies on is caught.
//!
//! Each request generates [`LONG`] tokens, so rounds follow one another: rejections, fully
//! accepted rounds and the bonus token after them, and the state the adaptive policies carry
//! from round to round all occur, and the tests assert that they did. The test of whole
//! sequences is `sequence_chi_square_p` (a martingale chi-square per position, see
//! `common/lossless.rs`); seeds are fixed, so each outcome is deterministic.
//!
//! Why one chi-square per sampling setting covers every policy: randomness is keyed by position
//! (`Streams`), so the token committed at a position is a function of the prefix, the two
//! models and the seed alone. A stop policy, or the scheduler, changes what a request costs,
//! never its tokens. The test asserts exactly that, request by request, for every policy and
//! both schedulers against one reference run, and tests that run's distribution; a policy or
//! scheduler bug that changed a token would fail the equality, one shared by all would fail the
//! chi-square.

mod common;
use common::lossless::*;
use common::*;
use rand::rngs::StdRng;
use specx_decoder::sampling::SamplingConfig;
use specx_decoder::speculative::*;
use specx_decoder::{LoadedModel, Transformer, default_device};
use std::cell::{Cell, RefCell};
use std::collections::HashMap;
use std::rc::Rc;

/// Requests per chi-square test.
const N: usize = 3000;
/// Requests per policy and scheduler in the equality test.
const N_POLICY: usize = 150;
/// Significance level of each chi-square test (fixed seeds: a run passes or fails the same way
/// every time).
const ALPHA: f64 = 1e-4;

fn settings() -> Vec<(&'static str, SamplingConfig)> {
    vec![
        ("T=1", SamplingConfig { temperature: 1.0, top_k: None, top_p: None }),
        ("T=0.6", SamplingConfig { temperature: 0.6, top_k: None, top_p: None }),
        ("T=1.3 top-k 4 top-p 0.9", SamplingConfig { temperature: 1.3, top_k: Some(4), top_p: Some(0.9) }),
    ]
}

/// Every policy of `speculative::policy`, at settings where it acts on these models.
fn policies(hidden: usize) -> Vec<(&'static str, Box<dyn StopPolicy>)> {
    let head = AcceptanceHead::init_seeded(hidden, 2, true, 5, &default_device());
    vec![
        ("fixed 3", Box::new(FixedK(3))),
        ("confidence 0.5", Box::new(ConfidencePolicy { threshold: 0.5, min_candidates: 1, max_candidates: 4 })),
        (
            "roc 0.4",
            Box::new(RocThreshold::new(ConfidencePolicy { threshold: 0.4, min_candidates: 1, max_candidates: 4 })),
        ),
        ("p_min 0.4", Box::new(PMinPolicy { p_min: 0.4, n_max: 4 })),
        ("dynamic K0=2", Box::new(DynamicK::new(2, 5))),
        ("svip 0.6", Box::new(SvipPolicy { threshold: 0.6, max_candidates: 5 })),
        (
            "adaedl 0.3",
            Box::new(AdaEdlPolicy::new(AdaEdlParams { lambda: 0.3, max_candidates: 4, ..AdaEdlParams::DEFAULT })),
        ),
        ("bandit 1,2,4", Box::new(BanditK::new(vec![1, 2, 4], BanditK::EXPLORATION))),
        ("confidence-product 0.5", Box::new(ConfidenceProductPolicy::new(0.5, 1, 4))),
        (
            "threshold-plus",
            Box::new(
                ThresholdPlusPolicy::new(ThresholdPlusParams {
                    theta0: 0.4f64.ln(),
                    depth: [0.1, -0.1, 0.2, 0.0, 0.0, 0.0],
                    last_round: 0.5,
                    ema: -0.3,
                    ..ThresholdPlusParams::confidence(0.4, 4)
                })
                .unwrap(),
            ),
        ),
        ("calibrated product 0.5", Box::new(calibrated(CalibratedRule::Product, false))),
        ("calibrated token, target", Box::new(calibrated(CalibratedRule::Token, true))),
        ("matchrate 0.5", Box::new(MatchRatePolicy::new(0.5, 4))),
        ("head 0.5", Box::new(HeadPolicy::new(head, HeadRule::new(0.5, 1, 4)))),
    ]
}

/// A calibrated acceptance model whose logit is the draft's own (ln p - ln(1 - p)) plus a
/// depth term and, with `target`, the target's top-1 probability at the last committed token
/// (the model that reads the target, fed after every verification).
fn calibrated(rule: CalibratedRule, target: bool) -> CalibratedPolicy {
    let mut weights = vec![0.0; if target { calibrated::FEATURES } else { calibrated::DRAFT_FEATURES }];
    (weights[1], weights[2], weights[5]) = (1.0, -1.0, -0.3);
    if target {
        weights[calibrated::DRAFT_FEATURES] = 1.5;
    }
    let temperatures = vec![1.2; calibrated::TEMPERATURES];
    CalibratedPolicy::new(CalibratedParams { weights, temperatures, rule, threshold: 0.5, max_candidates: 4 }).unwrap()
}

/// The target and a draft: `noise` > 0 adds noise to the target's weights (rounds accept some
/// candidates, not all), `None` gives an independent random draft (most candidates rejected,
/// and `q` far from `p`, which is what makes a bug that confuses them visible).
fn models(noise: Option<f32>) -> (tempfile::TempDir, LoadedModel, LoadedModel) {
    let (dir, target, draft) = pair(SMALL_VOCAB, 11, 12);
    let draft = noise.map_or(draft, |x| noisy_draft(dir.path(), SMALL_VOCAB, 11, x));
    (dir, target, draft)
}

const CLOSE: Option<f32> = Some(0.3);
const PROMPT: [u32; 3] = [1, 4, 2];

fn cfg(s: &SamplingConfig, seed: u64) -> SpecConfig {
    SpecConfig { max_new_tokens: LONG, sampling: s.clone(), seed }
}

fn sequential(target: &Transformer, draft: &Transformer, policy: &mut dyn StopPolicy, cfg: &SpecConfig) -> Generation {
    generate_speculative(target, &mut PlainDrafter::new(draft), policy, &mut RejectionSampler, &PROMPT, cfg, &[])
        .unwrap()
}

/// DSI with `WORKERS` target instances (speculation parallelism).
fn dsi<const WORKERS: usize>(
    target: &Transformer,
    draft: &Transformer,
    policy: &mut dyn StopPolicy,
    cfg: &SpecConfig,
) -> Generation {
    let lookahead = policy.max_candidates();
    generate_dsi(
        &[target; WORKERS],
        &mut PlainDrafter::new(draft),
        policy,
        &mut RejectionSampler,
        &PROMPT,
        cfg,
        &DsiConfig::new(WORKERS, lookahead),
        &[],
    )
    .unwrap()
    .generation
}

#[test]
fn sampled_requests_of_many_rounds_are_distributed_as_the_target() {
    let (_dir, t, d) = models(CLOSE);
    let mut report = Vec::new();
    for (name, s) in settings() {
        let run = Run::of(N, |seed| sequential(&t.model, &d.model, &mut FixedK(3), &cfg(&s, seed)));
        run.assert_exercised(name, 10, true);
        let p = sequence_chi_square_p(&t.model, &PROMPT, &s, &run.samples);
        report.push(format!("{name}: p = {p:.3}; {}", run.summary()));
        assert!(p > ALPHA, "{name}: sampled output not distributed as the target's: p = {p:.2e}");
    }
    eprintln!("{}", report.join("\n"));
}

#[test]
fn every_policy_under_both_schedulers_commits_the_same_tokens() {
    let (_dir, t, d) = models(CLOSE);
    let (t, d) = (&t.model, &d.model);
    for (sname, s) in settings() {
        let reference = Run::of(N_POLICY, |seed| sequential(t, d, &mut FixedK(3), &cfg(&s, seed)));
        type Scheduler = fn(&Transformer, &Transformer, &mut dyn StopPolicy, &SpecConfig) -> Generation;
        for (scheduler, run_one) in
            [("sequential", sequential as Scheduler), ("DSI sp 2", dsi::<2>), ("DSI sp 3", dsi::<3>)]
        {
            // One policy object serves every request: state carried across requests too.
            for (pname, mut policy) in policies(d.config().hidden_size) {
                if scheduler != "sequential" && policy.reads_target() {
                    // DSI drafts ahead of verification: it has no target statistics at the
                    // last committed token to give, and such a policy says so.
                    let err = generate_dsi(
                        &[t, t],
                        &mut PlainDrafter::new(d),
                        policy.as_mut(),
                        &mut RejectionSampler,
                        &PROMPT,
                        &cfg(&s, 0),
                        &DsiConfig::new(2, 4),
                        &[],
                    )
                    .expect_err("DSI refuses a policy that reads the target");
                    assert!(format!("{err:#}").contains("reads the target"), "{err:#}");
                    continue;
                }
                let what = format!("{scheduler}, {pname}, {sname}");
                let run = Run::of(N_POLICY, |seed| run_one(t, d, policy.as_mut(), &cfg(&s, seed)));
                for (seed, (got, want)) in run.samples.iter().zip(&reference.samples).enumerate() {
                    assert_eq!(got, want, "{what}, seed {seed}: tokens differ from the reference run's");
                }
                // DSI decides every position as a drafted and verified candidate: no bonus.
                run.assert_exercised(&what, 50, scheduler == "sequential");
            }
        }
    }
}

// ---------- broken variants ----------

/// Marks the proposal the sequential scheduler asks for at the bonus position after a fully
/// accepted round (a one-candidate round that keeps its candidate whatever the policy says;
/// the first token, decided the same way from the prefill, is left alone). With
/// [`AcceptUntested`] taking the marked one, this is the bug of a bonus token drawn from the draft's `q` instead of
/// the target's `p`.
struct MarkBonus<'m> {
    inner: PlainDrafter<'m>,
    marked: Rc<Cell<bool>>,
}

impl Drafter for MarkBonus<'_> {
    fn draft(&mut self, round: DraftRound<'_>) -> anyhow::Result<Vec<Candidate>> {
        self.marked.set(round.keep_first && round.max == 1 && round.committed.len() > PROMPT.len());
        self.inner.draft(round)
    }
    fn rollback(&mut self, valid: usize) {
        self.inner.rollback(valid);
    }
}

/// Accepts the candidates `untested` picks without testing them; decides the others as
/// [`RejectionSampler`]. The broken variants' commit step.
struct AcceptUntested<F: FnMut(&Candidate) -> bool>(F);

impl<F: FnMut(&Candidate) -> bool> Verifier for AcceptUntested<F> {
    fn decide(&mut self, c: &Candidate, logits: &[f32], s: &SamplingConfig, rng: &mut StdRng) -> Verdict {
        if (self.0)(c) { Verdict::Accept } else { RejectionSampler.decide(c, logits, s, rng) }
    }
}

/// Remembers the candidate a policy dropped (its token and `q`).
struct RecordDrops {
    inner: Box<dyn StopPolicy>,
    dropped: Rc<RefCell<Option<(u32, f32)>>>,
}

impl StopPolicy for RecordDrops {
    fn begin_request(&mut self) {
        self.inner.begin_request();
    }
    fn begin_round(&mut self) {
        self.dropped.replace(None);
        self.inner.begin_round();
    }
    fn decide(&mut self, step: &DraftStep) -> anyhow::Result<Decision> {
        let d = self.inner.decide(step)?;
        if d == Decision::Drop {
            self.dropped.replace(Some((step.token, step.q_token)));
        }
        Ok(d)
    }
    fn end_round(&mut self, outcome: &RoundOutcome) {
        self.inner.end_round(outcome);
    }
    fn max_candidates(&self) -> usize {
        self.inner.max_candidates()
    }
}

/// Appends the dropped candidate to the round, with an empty `q` as its mark; with
/// [`AcceptUntested`] taking candidates with an empty `q`, it is committed untested: the bug of a dropped token still committed.
struct KeepDropped<'m> {
    inner: PlainDrafter<'m>,
    dropped: Rc<RefCell<Option<(u32, f32)>>>,
}

impl Drafter for KeepDropped<'_> {
    fn draft(&mut self, round: DraftRound<'_>) -> anyhow::Result<Vec<Candidate>> {
        let mut out = self.inner.draft(round)?;
        if let Some((token, q_token)) = self.dropped.take() {
            out.push(Candidate { token, q_token, q: Vec::new(), ngram: None });
        }
        Ok(out)
    }
    fn rollback(&mut self, valid: usize) {
        self.inner.rollback(valid);
    }
}

/// A drafter that keeps, across requests, the `q` it reported at each position and reports
/// that one again later (a cache keyed by position, never reset between requests), while its
/// tokens are drawn from the current `q`.
struct StaleQ<'m> {
    model: &'m Transformer,
    by_position: HashMap<usize, Vec<f32>>,
}

impl Drafter for StaleQ<'_> {
    fn draft(&mut self, round: DraftRound<'_>) -> anyhow::Result<Vec<Candidate>> {
        let base = round.committed.len();
        let mut out = PlainDrafter::new(self.model).draft(round)?;
        for (i, c) in out.iter_mut().enumerate() {
            let q = self.by_position.entry(base + i).or_insert_with(|| c.q.clone());
            c.q_token = q[c.token as usize];
            c.q = q.clone();
        }
        Ok(out)
    }
    fn rollback(&mut self, _: usize) {}
}

#[test]
fn broken_round_mechanisms_are_caught_over_many_rounds() {
    for (name, s) in settings() {
        broken_round_mechanisms_are_caught(name, &s);
    }
}

/// Each broken variant, under the sampling setting `s`, fails the chi-square.
fn broken_round_mechanisms_are_caught(setting: &str, s: &SamplingConfig) {
    let (_dir, t, far) = models(None);
    let (target, draft) = (&t.model, &far.model);
    let s = s.clone();
    let mut report = Vec::new();
    let mut check = |what: &str, run: Run| {
        let p = sequence_chi_square_p(target, &PROMPT, &s, &run.samples);
        report.push(format!("{setting}, {what}: p = {p:.2e}"));
        assert!(p < ALPHA, "{setting}: {what} went unnoticed: p = {p:.2e}");
    };

    let marked = Rc::new(Cell::new(false));
    let run = Run::of(N, |seed| {
        let mut d = MarkBonus { inner: PlainDrafter::new(draft), marked: marked.clone() };
        generate_speculative(
            target,
            &mut d,
            &mut FixedK(1),
            &mut AcceptUntested(|_: &Candidate| marked.replace(false)),
            &PROMPT,
            &cfg(&s, seed),
            &[],
        )
        .unwrap()
    });
    run.assert_exercised(&format!("{setting}, bonus from q"), 10, true);
    check("bonus tokens drawn from the draft's q", run);

    let dropped = Rc::new(RefCell::new(None));
    let mut policy = RecordDrops { inner: Box::new(PMinPolicy { p_min: 0.4, n_max: 4 }), dropped: dropped.clone() };
    let run = Run::of(N, |seed| {
        let mut d = KeepDropped { inner: PlainDrafter::new(draft), dropped: dropped.clone() };
        generate_speculative(
            target,
            &mut d,
            &mut policy,
            &mut AcceptUntested(|c: &Candidate| c.q.is_empty()),
            &PROMPT,
            &cfg(&s, seed),
            &[],
        )
        .unwrap()
    });
    check("a dropped candidate committed", run);

    let mut stale = StaleQ { model: draft, by_position: HashMap::new() };
    let run = Run::of(N, |seed| {
        generate_speculative(target, &mut stale, &mut FixedK(3), &mut RejectionSampler, &PROMPT, &cfg(&s, seed), &[])
            .unwrap()
    });
    check("the draft's q kept across requests", run);
    eprintln!("{}", report.join("\n"));
}
