//! EAGLE-2's dynamic draft trees ([`DynamicTreeDrafter`]) are lossless: greedy output equals the
//! target's own greedy output on every CPU weight path with each verifier, and sampled output
//! is distributed as the target's (a chi-square over whole sequences at T = 1 and with
//! temperature, top-k and top-p all warping). A tree of one child per node is the plain
//! drafter's greedy chain, round for round, and a price on rows verifies fewer nodes. A broken
//! variant is caught: siblings each tried against the target's p instead of the residual left
//! by the ones rejected before them. Point masses marked as
//! draws (`q_token` below 1) are refused by the rejection sampler's assertion.

mod common;
use common::lossless::*;
use common::*;
use common::{cfg, greedy, t1};
use specx_decoder::SamplingConfig;
use specx_decoder::gguf::GgmlType;
use specx_decoder::speculative::*;
use specx_decoder::synthetic::{StDtype, tiny_qwen2};
use specx_decoder::{Transformer, WeightMode, default_device, load_model_as};

const PROMPT: [u32; 6] = [1, 4, 2, 3, 1, 4];
const N: usize = 3000;
const ALPHA: f64 = 1e-4;

fn tree(draft: &Transformer, top_k: usize, max_nodes: usize) -> DynamicTreeDrafter<'_> {
    DynamicTreeDrafter::new(draft, DynamicTreeParams { top_k, max_nodes }).unwrap()
}

fn generate(
    target: &Transformer,
    drafter: &mut dyn Drafter,
    verifier: &mut dyn Verifier,
    k: usize,
    c: &SpecConfig,
) -> Generation {
    generate_speculative(target, drafter, &mut FixedK(k), verifier, &PROMPT, c, &[]).unwrap()
}

/// Rounds whose tree had siblings, of the request's rounds (a tree's depth is at most its
/// accepted count plus the rest; a branching tree has more nodes than levels).
fn branching_rounds(m: &RequestMetrics, k: usize) -> usize {
    m.drafted_per_round.iter().filter(|&&n| n > k).count()
}

#[test]
fn greedy_draft_trees_give_the_targets_own_greedy_output_on_every_weight_path() {
    let dir = tempfile::tempdir().unwrap();
    let cfg_model = tiny_qwen2(SMALL_VOCAB);
    let (_, target_gguf) = write_both(&dir.path().join("t"), &cfg_model, 11, StDtype::F32, GgmlType::Q8_0);
    // A draft near the target (its weights with noise), so that trees are accepted in part.
    let draft = noisy_draft(&dir.path().join("d"), SMALL_VOCAB, 11, 0.3).model;
    for mode in [WeightMode::F32, WeightMode::Native, WeightMode::Q8] {
        let target = load_model_as(&target_gguf, None, &default_device(), mode).unwrap().model;
        let c = cfg(greedy(), 0, 40);
        let want = generate_autoregressive(&target, &PROMPT, &c, &[]).unwrap().tokens;
        for verifier in [&mut ExactMatch as &mut dyn Verifier, &mut RejectionSampler, &mut CoupledSampler] {
            let g = generate(&target, &mut tree(&draft, 3, 10), verifier, 4, &c);
            assert_eq!(g.tokens, want, "{mode:?}: draft-tree decoding differs from greedy decoding");
            assert!(g.metrics.n_accepted > 0, "{mode:?}: nothing accepted");
            assert!(branching_rounds(&g.metrics, 4) > 0, "{mode:?}: no tree branched");
        }
    }
}

#[test]
fn a_tree_of_one_child_per_node_is_the_plain_drafters_greedy_chain() {
    // Each level a one-row call continuing the cached ones: by row invariance the plain
    // chain's tokens, so the same rounds and counts.
    let (_dir, t, d) = pair(SMALL_VOCAB, 21, 22);
    let c = cfg(greedy(), 0, 40);
    for k in [1, 3, 5] {
        let plain = generate(&t.model, &mut PlainDrafter::new(&d.model), &mut ExactMatch, k, &c);
        let chain = generate(&t.model, &mut tree(&d.model, 1, 16), &mut ExactMatch, k, &c);
        assert_eq!(chain.tokens, plain.tokens);
        assert_eq!(chain.metrics.counts_only(), plain.metrics.counts_only(), "K = {k}");
    }
}

#[test]
fn a_row_price_verifies_fewer_nodes_and_keeps_the_greedy_output() {
    let (dir, t, _) = pair(SMALL_VOCAB, 11, 12);
    let d = noisy_draft(dir.path(), SMALL_VOCAB, 11, 0.3);
    let c = cfg(greedy(), 0, 40);
    let want = generate_autoregressive(&t.model, &PROMPT, &c, &[]).unwrap().tokens;
    let priced = |row_cost| {
        let mut policy = TreePricePolicy::new(4, row_cost, 0.0);
        generate_speculative(&t.model, &mut tree(&d.model, 3, 12), &mut policy, &mut ExactMatch, &PROMPT, &c, &[])
            .unwrap()
    };
    let (free, dear) = (priced(0.0), priced(0.3));
    assert_eq!((&free.tokens, &dear.tokens), (&want, &want));
    assert!(
        dear.metrics.n_drafted < free.metrics.n_drafted,
        "{} nodes at 0.3, {} free",
        dear.metrics.n_drafted,
        free.metrics.n_drafted
    );
    // Free rows keep every node: fixed K's trees.
    let fixed = generate(&t.model, &mut tree(&d.model, 3, 12), &mut ExactMatch, 4, &c);
    assert_eq!(free.metrics.counts_only(), fixed.metrics.counts_only());
}

/// Checks every tree against the tree a fresh drafter (nothing cached) grows after the same
/// committed text: the rows a round keeps of the last tree must be the accepted path's.
struct Fresh<'m> {
    inner: DynamicTreeDrafter<'m>,
    draft: &'m Transformer,
    rounds: usize,
}

impl Drafter for Fresh<'_> {
    fn draft(&mut self, round: DraftRound<'_>) -> anyhow::Result<Vec<Candidate>> {
        self.inner.draft(round)
    }

    fn draft_tree(&mut self, round: DraftRound<'_>) -> anyhow::Result<DraftTree> {
        let (committed, prompt_len, max) = (round.committed.to_vec(), round.prompt_len, round.max);
        let got = self.inner.draft_tree(round)?;
        let mut m = RequestMetrics::default();
        let want = tree(self.draft, 3, 10).draft_tree(DraftRound {
            committed: &committed,
            prompt_len,
            max,
            keep_first: false,
            policy: &mut FixedK(max),
            sampling: &greedy(),
            streams: Streams::new(0),
            eos: &[],
            metrics: &mut m,
        })?;
        let shape =
            |t: &DraftTree| (0..t.len()).map(|i| (t.node(i).candidate.token, t.node(i).parent)).collect::<Vec<_>>();
        assert_eq!(shape(&got), shape(&want), "round {}: the tree differs from a fresh drafter's", self.rounds);
        self.rounds += 1;
        Ok(got)
    }

    fn rollback(&mut self, valid: usize) {
        self.inner.rollback(valid);
    }
}

#[test]
fn the_rows_kept_from_the_last_tree_grow_the_tree_a_fresh_draft_would() {
    let (dir, t, _) = pair(SMALL_VOCAB, 11, 12);
    let d = noisy_draft(dir.path(), SMALL_VOCAB, 11, 0.3);
    let c = cfg(greedy(), 0, 40);
    let mut drafter = Fresh { inner: tree(&d.model, 3, 10), draft: &d.model, rounds: 0 };
    let g = generate(&t.model, &mut drafter, &mut ExactMatch, 4, &c);
    assert!(
        drafter.rounds >= 5 && g.metrics.n_accepted > drafter.rounds,
        "{} rounds, {} accepted",
        drafter.rounds,
        g.metrics.n_accepted
    );
}

/// `N` sampled requests of `LONG` tokens with draft trees under the rejection sampler, or
/// (`broken`) under [`BrokenSiblings`] testing each sibling against `p`.
fn sampled(t: &Transformer, d: &Transformer, s: &SamplingConfig, broken: bool) -> Vec<Vec<u32>> {
    let (mut branching, mut drafted, mut accepted) = (0, 0, 0);
    let samples = (0..N as u64)
        .map(|seed| {
            let mut drafter = tree(d, 3, 8);
            let verifier: &mut dyn Verifier =
                if broken { &mut BrokenSiblings { keep_rejected: false } } else { &mut RejectionSampler };
            let g = generate(t, &mut drafter, verifier, 4, &cfg(s.clone(), seed, LONG));
            branching += branching_rounds(&g.metrics, 4);
            (drafted, accepted) = (drafted + g.metrics.n_drafted, accepted + g.metrics.n_accepted);
            g.tokens
        })
        .collect();
    assert!(
        branching >= N && accepted >= N && drafted - accepted >= N,
        "{branching} branching trees, {drafted} drafted, {accepted} accepted"
    );
    samples
}

/// The drafter's trees with every node's `q_token` set: below 1, a single child would be tested
/// with min(1, p / q_token) as if it had been drawn from a draft distribution, which it was not.
struct Marked<'m> {
    inner: DynamicTreeDrafter<'m>,
    q_token: f32,
}

impl Drafter for Marked<'_> {
    fn draft(&mut self, round: DraftRound<'_>) -> anyhow::Result<Vec<Candidate>> {
        self.inner.draft(round)
    }

    fn draft_tree(&mut self, round: DraftRound<'_>) -> anyhow::Result<DraftTree> {
        let tree = self.inner.draft_tree(round)?;
        let mut marked = DraftTree::default();
        for i in 0..tree.len() {
            let n = tree.node(i);
            marked.push(Candidate { q_token: self.q_token, ..n.candidate.clone() }, n.parent);
        }
        Ok(marked)
    }

    fn rollback(&mut self, valid: usize) {
        self.inner.rollback(valid);
    }
}

/// Temperature, top-k and top-p all active.
fn warped() -> SamplingConfig {
    SamplingConfig { temperature: 1.3, top_k: Some(4), top_p: Some(0.9) }
}

#[test]
fn sampled_draft_trees_are_distributed_as_the_target_and_a_broken_test_is_caught() {
    let (dir, t, _) = pair(SMALL_VOCAB, 11, 12);
    let d = noisy_draft(dir.path(), SMALL_VOCAB, 11, 0.3);
    for (name, s) in [("T=1", t1()), ("T=1.3 top-k 4 top-p 0.9", warped())] {
        let p = sequence_chi_square_p(&t.model, &PROMPT, &s, &sampled(&t.model, &d.model, &s, false));
        eprintln!("draft trees, {name}: p = {p:.3}");
        assert!(p > ALPHA, "{name}: sampled draft-tree output not distributed as the target's: p = {p:.2e}");
    }
    let s = t1();
    let p = sequence_chi_square_p(&t.model, &PROMPT, &s, &sampled(&t.model, &d.model, &s, true));
    eprintln!("siblings tried against p instead of the residual: p = {p:.2e}");
    assert!(p < ALPHA, "siblings tried against p instead of the residual went unnoticed: p = {p:.2e}");
    // Point masses marked as draws from a distribution are refused, not tested with p / q.
    let marked = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        let mut drafter = Marked { inner: tree(&d.model, 3, 8), q_token: 0.5 };
        generate(&t.model, &mut drafter, &mut RejectionSampler, 4, &cfg(s.clone(), 0, LONG))
    }));
    assert!(marked.is_err(), "a point mass with q_token 0.5 was tested as a draw");
}
