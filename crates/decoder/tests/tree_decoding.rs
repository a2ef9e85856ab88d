//! Token-tree speculative decoding is lossless: with the suffix drafter ([`SuffixDrafter`],
//! SuffixDecoding's frequency trees) greedy output equals the target's own greedy output on
//! every CPU weight path, and sampled output is distributed as the target's (a chi-square over
//! whole sequences at T = 1 and with temperature, top-k and top-p all warping). Two broken
//! sibling rules are caught: a rejected child left in the residual, and a sibling tested
//! against the target's `p` instead of the residual (which accepts a twin after its twin was
//! rejected).

mod common;
use common::lossless::*;
use common::*;
use common::{cfg, greedy, t1};
use specx_decoder::gguf::GgmlType;
use specx_decoder::sampling::SamplingConfig;
use specx_decoder::speculative::*;
use specx_decoder::synthetic::{StDtype, tiny_qwen2};
use specx_decoder::{Transformer, WeightMode, default_device, load_model_as};

/// A prompt whose suffix "1 4" recurs with different continuations: suffix trees branch.
const PROMPT: [u32; 12] = [1, 4, 2, 3, 1, 4, 2, 5, 1, 4, 3, 1];
const N: usize = 3000;
const ALPHA: f64 = 1e-4;

/// SuffixDecoding with room for branches: 4 nodes per match token, no probability floor.
fn suffix() -> SuffixDrafter {
    SuffixDrafter::new(SuffixParams { alpha: 4.0, min_token_prob: 0.0, max_nodes: 12, ..Default::default() }).unwrap()
}

/// A drafter that counts the trees it proposed with siblings.
struct Counting<D> {
    inner: D,
    trees: usize,
    branching: usize,
}

impl<D: Drafter> Drafter for Counting<D> {
    fn draft(&mut self, round: DraftRound<'_>) -> anyhow::Result<Vec<Candidate>> {
        self.inner.draft(round)
    }

    fn draft_tree(&mut self, round: DraftRound<'_>) -> anyhow::Result<DraftTree> {
        let tree = self.inner.draft_tree(round)?;
        self.trees += 1;
        self.branching += usize::from(!tree.is_chain());
        Ok(tree)
    }

    fn rollback(&mut self, valid: usize) {
        self.inner.rollback(valid);
    }
}

fn generate(
    target: &Transformer,
    drafter: &mut dyn Drafter,
    verifier: &mut dyn Verifier,
    c: &SpecConfig,
) -> Generation {
    generate_speculative(target, drafter, &mut FixedK(8), verifier, &PROMPT, c, &[]).unwrap()
}

#[test]
fn greedy_suffix_trees_give_the_targets_own_greedy_output_on_every_weight_path() {
    let dir = tempfile::tempdir().unwrap();
    let (_, gguf) = write_both(dir.path(), &tiny_qwen2(SMALL_VOCAB), 11, StDtype::F32, GgmlType::Q8_0);
    for mode in [WeightMode::F32, WeightMode::Native, WeightMode::Q8] {
        let target = load_model_as(&gguf, None, &default_device(), mode).unwrap().model;
        let c = cfg(greedy(), 0, 40);
        let want = generate_autoregressive(&target, &PROMPT, &c, &[]).unwrap().tokens;
        for verifier in [&mut ExactMatch as &mut dyn Verifier, &mut RejectionSampler, &mut CoupledSampler] {
            let mut d = Counting { inner: suffix(), trees: 0, branching: 0 };
            let g = generate(&target, &mut d, verifier, &c);
            assert_eq!(g.tokens, want, "{mode:?}: tree decoding differs from greedy decoding");
            assert!(
                d.branching > 0 && g.metrics.n_accepted > 0,
                "{mode:?}: {} of {} trees branched",
                d.branching,
                d.trees
            );
            assert!(g.metrics.n_target_calls < 1 + want.len(), "{mode:?}: no round accepted more than one token");
        }
    }
}

/// Sampled output of `N` requests of `LONG` tokens with suffix trees under `verifier`; asserts
/// that trees branched and that candidates were accepted and rejected.
fn sampled(target: &Transformer, verifier: &mut dyn Verifier, s: &SamplingConfig) -> Vec<Vec<u32>> {
    let (mut branching, mut drafted, mut accepted) = (0, 0, 0);
    let samples = (0..N as u64)
        .map(|seed| {
            let mut d = Counting { inner: suffix(), trees: 0, branching: 0 };
            let g = generate(target, &mut d, verifier, &cfg(s.clone(), seed, LONG));
            (branching, drafted, accepted) =
                (branching + d.branching, drafted + g.metrics.n_drafted, accepted + g.metrics.n_accepted);
            g.tokens
        })
        .collect();
    assert!(
        branching >= N && accepted >= N / 4 && drafted - accepted >= N / 4,
        "{branching} branching trees, {drafted} drafted, {accepted} accepted"
    );
    samples
}

/// Temperature, top-k and top-p all active. (Qwen2.5's 0.7 / 20 / 0.8 leaves the tiny target
/// one token at most positions, too few for a chi-square; it is measured on the real pair.)
fn warped() -> SamplingConfig {
    SamplingConfig { temperature: 1.3, top_k: Some(4), top_p: Some(0.9) }
}

#[test]
fn sampled_suffix_trees_are_distributed_as_the_target() {
    let (_dir, t, _) = pair(SMALL_VOCAB, 11, 12);
    for (name, s) in [("T=1", t1()), ("T=1.3 top-k 4 top-p 0.9", warped())] {
        let samples = sampled(&t.model, &mut RejectionSampler, &s);
        let p = sequence_chi_square_p(&t.model, &PROMPT, &s, &samples);
        eprintln!("suffix trees, {name}: p = {p:.3}");
        assert!(p > ALPHA, "{name}: sampled tree output not distributed as the target's: p = {p:.2e}");
    }
}

/// Proposes the same tree every round: roots 2, 2 (twins) and 3, and 3, 2 under the first.
/// The tiny target puts nearly all its mass on tokens 2 and 3, so every sibling matters.
struct TwinTree;

impl Drafter for TwinTree {
    fn draft(&mut self, round: DraftRound<'_>) -> anyhow::Result<Vec<Candidate>> {
        let n = usize::from(round.max > 0);
        Ok(twin_tree().into_candidates().into_iter().take(n).collect())
    }

    fn draft_tree(&mut self, round: DraftRound<'_>) -> anyhow::Result<DraftTree> {
        Ok(if round.max >= 2 { twin_tree() } else { DraftTree::chain(self.draft(round)?) })
    }

    fn rollback(&mut self, _: usize) {}
}

fn twin_tree() -> DraftTree {
    let point = |token| Candidate { token, q: Vec::new(), q_token: 1.0, ngram: None };
    let mut t = DraftTree::default();
    let first = t.push(point(2), None);
    t.push(point(2), None);
    t.push(point(3), None);
    t.push(point(3), Some(first));
    t.push(point(2), Some(first));
    t
}

#[test]
fn twins_and_siblings_keep_the_target_distribution_and_broken_sibling_rules_are_caught() {
    let (_dir, t, _) = pair(SMALL_VOCAB, 11, 12);
    let s = t1();
    let run = |verifier: &mut dyn Verifier| -> Vec<Vec<u32>> {
        (0..N as u64)
            .map(|seed| generate(&t.model, &mut TwinTree, verifier, &cfg(s.clone(), seed, LONG)).tokens)
            .collect()
    };
    let p = sequence_chi_square_p(&t.model, &PROMPT, &s, &run(&mut RejectionSampler));
    eprintln!("twin tree, rejection sampler: p = {p:.3}");
    assert!(p > ALPHA, "the sibling rule changed the distribution: p = {p:.2e}");
    for keep_rejected in [true, false] {
        let p = sequence_chi_square_p(&t.model, &PROMPT, &s, &run(&mut BrokenSiblings { keep_rejected }));
        eprintln!("twin tree, broken rule (keep_rejected {keep_rejected}): p = {p:.2e}");
        assert!(p < ALPHA, "a broken sibling rule (keep_rejected {keep_rejected}) went unnoticed: p = {p:.2e}");
    }
}
