//! SuffixDecoding (Oliaro et al., arXiv 2411.04975; Snowflake's ArcticInference, in vLLM as
//! `method = "suffix"`): speculation trees from earlier text, no draft model.
//!
//! Each suffix of the text that occurred before (at most `max_depth - 1` tokens: vLLM's
//! `suffix_decoding_max_tree_depth` bounds the match plus the speculation) is matched in a
//! [`SuffixTree`], and the continuations of its occurrences form a tree whose node counts give
//! frequency probabilities: a node's score is its count over the match's (the share of the
//! match's occurrences, the text's own final one included, that continue so). Nodes are added
//! best score first while their score is at least `min_token_prob` and the tree has fewer than
//! `alpha * p + offset` nodes for a match of length `p` (the paper's adaptive size:
//! `max_spec_tokens = max_spec_factor * prefix_match_length + max_spec_offset`), and never more
//! than `max_nodes`. Of the trees of every match length, the one with the highest score (the
//! expected number of accepted tokens under the frequency model) is proposed. With
//! `paths_only`, each match proposes one path instead, its likeliest continuation token by
//! token (ArcticInference's default, `use_tree_spec = false`).
//!
//! Two trees are matched, as ArcticInference's: the request's own (prompt and output, grown as
//! tokens are committed) and the global [`SuffixCorpus`] of earlier requests' outputs, to which
//! this request's output is added as it grows ([`SuffixDrafter::with_corpus`]). Each gives its
//! best speculation; the higher score wins (ties: the request's own). A round's cost depends on
//! `max_depth` and `max_nodes`, not on the corpus: matching walks at most `max_depth` nodes per
//! match length, and a node's continuations are kept sorted by count, so growing a tree of `n`
//! nodes reads at most `n` continuations of each node it adds.
//!
//! Where this deviates from ArcticInference: the tree is capped at `max_nodes` rows so that one
//! verification is one tree call, and a drafter takes its request's output back out of the
//! global tree when dropped (the caller adds finished outputs), so an eval's methods all see
//! the same corpus.
//!
//! Every node is a point mass (`q` empty), so the rejection sampler's sibling rule keeps the
//! output distributed as the target's ([`super::RejectionSampler`]).

use super::candidate::Candidate;
use super::drafter::Drafter;
use super::lookup::PromptLookupDrafter;
use super::round::DraftRound;
use super::suffix_corpus::{CorpusBound, SharedCorpus, SuffixCorpus};
use super::suffix_tree::{Continuation, Cursor, SuffixTree, TextId};
use super::tree::{DraftTree, check_max_nodes};
use anyhow::{Result, ensure};
use std::time::Instant;

/// SuffixDecoding's parameters (defaults: vLLM's and ArcticInference's).
#[derive(Clone, Debug, PartialEq)]
pub struct SuffixParams {
    /// Match plus speculation length bound (`max_tree_depth`, 24).
    pub max_depth: usize,
    /// Nodes per match token (`max_spec_factor`, 1.0).
    pub alpha: f64,
    /// Nodes added to `alpha` times the match (`max_spec_offset`, 0).
    pub offset: f64,
    /// The lowest frequency probability a speculated node may have (`min_token_prob`, 0.1).
    pub min_token_prob: f64,
    /// The most nodes one tree may have (rows of one tree call, besides the committed token).
    pub max_nodes: usize,
    /// How many of the earlier requests' outputs a corpus built by
    /// [`SuffixDrafter::with_earlier`] keeps (the most recent; vLLM's
    /// `suffix_decoding_max_cached_requests`, FIFO). 0: the request's own text only.
    pub cached_requests: usize,
    /// One path per match instead of a tree (`use_tree_spec = false`).
    pub paths_only: bool,
}

impl Default for SuffixParams {
    fn default() -> Self {
        Self {
            max_depth: 24,
            alpha: 1.0,
            offset: 0.0,
            min_token_prob: 0.1,
            max_nodes: 16,
            cached_requests: 0,
            paths_only: false,
        }
    }
}

impl SuffixParams {
    /// Refuses parameters no speculation can follow.
    pub fn check(&self) -> Result<()> {
        ensure!(self.max_depth >= 2, "suffix decoding needs max_depth >= 2 (got {})", self.max_depth);
        ensure!(self.alpha > 0.0 && self.alpha.is_finite(), "suffix decoding needs alpha > 0 (got {})", self.alpha);
        ensure!(self.offset.is_finite(), "suffix decoding's offset must be a number (got {})", self.offset);
        ensure!(
            (0.0..=1.0).contains(&self.min_token_prob),
            "suffix decoding's min_token_prob must lie in [0, 1] (got {})",
            self.min_token_prob
        );
        check_max_nodes("suffix decoding", self.max_nodes)
    }

    /// The most nodes a match of `p` tokens may speculate.
    pub fn budget(&self, p: usize) -> usize {
        let n = (self.alpha * p as f64 + self.offset + 1e-6).floor();
        if n <= 0.0 { 0 } else { (n as usize).min(self.max_nodes) }
    }
}

/// Drafts SuffixDecoding's speculation trees from the request's own text and earlier outputs.
pub struct SuffixDrafter {
    params: SuffixParams,
    /// The request's prompt and committed output.
    own: SuffixTree,
    own_text: Option<TextId>,
    /// The prompt length of the request `own` holds.
    prompt_len: usize,
    /// Earlier requests' outputs, and this request's output in it while it runs.
    corpus: Option<SharedCorpus>,
    active: Option<TextId>,
    scratch: Vec<Continuation>,
}

/// A speculation: the matched length and the tree, with each node's score.
#[derive(Clone, Debug, Default)]
pub struct Speculation {
    pub match_len: usize,
    pub tree: DraftTree,
    pub scores: Vec<f64>,
}

impl Speculation {
    /// The expected number of accepted tokens under the frequency model (SuffixDecoding's
    /// score for choosing between trees).
    pub fn score(&self) -> f64 {
        self.scores.iter().sum()
    }

    /// The highest-scored branch, root first (the chain a chain scheduler verifies).
    pub fn best_path(&self) -> Vec<u32> {
        let mut path = Vec::new();
        let mut node = None;
        loop {
            let best = self
                .tree
                .children(node)
                .into_iter()
                .max_by(|&a, &b| self.scores[a].total_cmp(&self.scores[b]).then(b.cmp(&a)));
            let Some(b) = best else { return path };
            path.push(self.tree.node(b).candidate.token);
            node = Some(b);
        }
    }
}

impl SuffixDrafter {
    /// A drafter over the request's own text.
    pub fn new(params: SuffixParams) -> Result<Self> {
        params.check()?;
        let own = SuffixTree::new(params.max_depth);
        Ok(Self { params, own, own_text: None, prompt_len: 0, corpus: None, active: None, scratch: Vec::new() })
    }

    /// The same drafter matching also the last `cached_requests` of `earlier` (earlier
    /// requests' outputs, oldest first), in a corpus of its own.
    pub fn with_earlier(self, earlier: &[Vec<u32>]) -> Self {
        if self.params.cached_requests == 0 {
            return self;
        }
        let bound = CorpusBound { outputs: self.params.cached_requests, tokens: usize::MAX };
        let corpus = SuffixCorpus::of(self.params.max_depth, bound, earlier).shared();
        self.with_corpus(corpus)
    }

    /// The same drafter matching also `corpus` (whose strings must be `max_depth` long), to
    /// which it adds its request's output while the request runs.
    pub fn with_corpus(mut self, corpus: SharedCorpus) -> Self {
        let depth = corpus.lock().expect("a suffix corpus is never left mid-update").tree().max_depth();
        assert_eq!(depth, self.params.max_depth, "a suffix corpus's strings must be the drafter's max_depth long");
        self.discard_active();
        self.corpus = Some(corpus);
        self
    }

    pub fn params(&self) -> &SuffixParams {
        &self.params
    }

    /// The speculation tree after `seq` (a prompt of `prompt_len` tokens and its output so
    /// far) of at most `max_depth` levels: the better-scored of the request's own tree's and
    /// the corpus's (ties: the own). A `seq` that does not extend the last one starts a new
    /// request.
    pub fn speculate(&mut self, seq: &[u32], prompt_len: usize, max_depth: usize) -> Speculation {
        self.follow(seq, prompt_len);
        let own = best_in(&self.own, &self.params, seq, max_depth, &mut self.scratch);
        let Some(corpus) = &self.corpus else { return own };
        let corpus = corpus.lock().expect("a suffix corpus is never left mid-update");
        let earlier = best_in(corpus.tree(), &self.params, seq, max_depth, &mut self.scratch);
        if earlier.score() > own.score() { earlier } else { own }
    }

    /// Brings the own tree (and this request's output in the corpus) up to `seq`.
    fn follow(&mut self, seq: &[u32], prompt_len: usize) {
        let same = self.own_text.is_some_and(|id| {
            let have = self.own.text(id);
            prompt_len == self.prompt_len && seq.len() >= have.len() && seq[..have.len()] == *have
        });
        if !same {
            self.own = SuffixTree::new(self.params.max_depth);
            self.own_text = Some(self.own.start());
            self.prompt_len = prompt_len;
            self.discard_active();
        }
        let id = self.own_text.expect("set above");
        let have = self.own.text(id).len();
        self.own.extend(id, &seq[have..]);
        if let Some(corpus) = &self.corpus {
            let mut corpus = corpus.lock().expect("a suffix corpus is never left mid-update");
            let active = *self.active.get_or_insert_with(|| corpus.begin());
            let output = &seq[prompt_len.min(seq.len())..];
            let have = corpus.active_len(active);
            corpus.extend(active, &output[have..]);
        }
    }

    fn discard_active(&mut self) {
        if let (Some(corpus), Some(id)) = (&self.corpus, self.active.take()) {
            corpus.lock().expect("a suffix corpus is never left mid-update").discard(id);
        }
    }
}

impl Drop for SuffixDrafter {
    fn drop(&mut self) {
        self.discard_active();
    }
}

/// SuffixDecoding's speculation after `pattern` in one suffix tree (what a drafter does with
/// each of its trees), at most `max_depth` levels.
pub fn speculate_in(tree: &SuffixTree, params: &SuffixParams, pattern: &[u32], max_depth: usize) -> Speculation {
    best_in(tree, params, pattern, max_depth, &mut Vec::new())
}

/// The best speculation after `pattern` in `tree`: of the trees of every suffix of `pattern`
/// that occurs there (at most `max_depth - 1` tokens), the one with the highest score (ties:
/// the longer match), as ArcticInference's `speculate` picks.
fn best_in(
    tree: &SuffixTree,
    params: &SuffixParams,
    pattern: &[u32],
    max_depth: usize,
    scratch: &mut Vec<Continuation>,
) -> Speculation {
    let limit = (tree.max_depth() - 1).min(pattern.len());
    // A suffix that does not occur has no longer suffix that does.
    let matches: Vec<Cursor> = (1..=limit).map_while(|p| tree.find(&pattern[pattern.len() - p..])).collect();
    let mut best = Speculation::default();
    for (i, &at) in matches.iter().enumerate().rev() {
        let p = i + 1;
        // A tree of n nodes scores at most n, and shorter matches get no more nodes: none of
        // them can beat the best so far.
        if params.budget(p) as f64 <= best.score() {
            break;
        }
        let spec = grow(tree, params, at, p, max_depth, scratch);
        if spec.score() > best.score() {
            best = spec;
        }
    }
    best
}

/// The tree of the continuations after the match `at` of `p` tokens, best score first, of at
/// most `max_depth` levels (the corpus's strings bound the match plus the speculation).
fn grow(
    tree: &SuffixTree,
    params: &SuffixParams,
    at: Cursor,
    p: usize,
    max_depth: usize,
    scratch: &mut Vec<Continuation>,
) -> Speculation {
    let budget = params.budget(p);
    let total = tree.count(at) as f64;
    let mut spec = Speculation { match_len: p, ..Default::default() };
    // Only the best `budget` continuations of a node can enter a tree of `budget` nodes; a
    // path follows the best one.
    let width = if params.paths_only { 1 } else { budget };
    // Frontier entries: (score, parent node, level, continuation).
    let mut frontier: Vec<(f64, Option<usize>, usize, Continuation)> = Vec::new();
    let mut expand = |from: Cursor, parent: Option<usize>, level: usize, frontier: &mut Vec<_>| {
        if level >= max_depth {
            return;
        }
        tree.continuations(from, width, scratch);
        frontier.extend(scratch.iter().map(|&c| (c.count as f64 / total, parent, level, c)));
    };
    expand(at, None, 0, &mut frontier);
    while spec.tree.len() < budget {
        // The best-scored entry (ties: the earliest pushed).
        let Some(best) = (0..frontier.len()).reduce(|a, b| if frontier[b].0 > frontier[a].0 { b } else { a }) else {
            break;
        };
        if frontier[best].0 < params.min_token_prob {
            break;
        }
        let (score, parent, level, c) = frontier.remove(best);
        let node = spec.tree.push(Candidate { token: c.token, q: Vec::new(), q_token: 1.0, ngram: Some(p) }, parent);
        spec.scores.push(score);
        expand(c.cursor, Some(node), level + 1, &mut frontier);
    }
    spec
}

impl Drafter for SuffixDrafter {
    /// The best branch as a chain, asked to the policy token by token (what a chain scheduler
    /// verifies: DSI, and the proposal at a sampled bonus position).
    fn draft(&mut self, round: DraftRound<'_>) -> Result<Vec<Candidate>> {
        if round.max == 0 {
            return Ok(Vec::new());
        }
        let started = Instant::now();
        let spec = self.speculate(round.committed, round.prompt_len, round.max);
        PromptLookupDrafter::propose(round, spec.match_len, &spec.best_path(), started)
    }

    fn draft_tree(&mut self, round: DraftRound<'_>) -> Result<DraftTree> {
        if round.max == 0 {
            return Ok(DraftTree::default());
        }
        let started = Instant::now();
        let mut spec = self.speculate(round.committed, round.prompt_len, round.max);
        // Nodes are grown best score first, so the policy's count keeps the likeliest.
        round.policy.begin_round();
        let keep = round.policy.tree_nodes(&spec.scores).min(spec.tree.len());
        spec.tree.truncate(keep);
        round.metrics.draft_time += started.elapsed();
        Ok(spec.tree)
    }

    /// Nothing to forget: only committed tokens enter the trees.
    fn rollback(&mut self, _valid: usize) {}
}

#[cfg(test)]
mod tests {
    use super::*;

    fn drafter(alpha: f64, min_token_prob: f64) -> SuffixDrafter {
        SuffixDrafter::new(SuffixParams { alpha, min_token_prob, ..Default::default() }).unwrap()
    }

    #[test]
    fn continuations_of_the_longest_match_branch_by_frequency() {
        // "1 2 3" occurs three times before the end (each after a different token): followed by
        // 4 5, 4 6 and 7; with the text's own occurrence, 4 of 4 occurrences continue with 4.
        let seq = [1, 2, 3, 4, 5, 8, 1, 2, 3, 4, 6, 9, 1, 2, 3, 7, 10, 1, 2, 3];
        let s = drafter(4.0, 0.1).speculate(&seq, seq.len(), 10);
        assert_eq!(s.match_len, 3);
        let tokens = s.tree.tokens();
        assert_eq!(tokens[0], 4, "the most frequent child first");
        assert!((s.scores[0] - 2.0 / 4.0).abs() < 1e-12);
        let roots: Vec<u32> = s.tree.children(None).iter().map(|&i| tokens[i]).collect();
        assert_eq!(roots, vec![4, 7]);
        let under_4: Vec<u32> = s.tree.children(Some(0)).iter().map(|&i| tokens[i]).collect();
        assert_eq!(under_4, vec![5, 6]);
        assert_eq!(s.best_path()[..2], [4, 5]);
    }

    #[test]
    fn the_tree_holds_at_most_alpha_times_the_match_and_no_rare_branch() {
        let seq = [1, 2, 3, 4, 5, 8, 1, 2, 3, 4, 6, 9, 1, 2, 3, 7, 10, 1, 2, 3];
        assert_eq!(drafter(1.0, 0.1).speculate(&seq, seq.len(), 10).tree.len(), 3, "alpha 1, match of 3");
        // Every node below 0.5: only the branch of 4 (2 of 4) survives, not its children (1 of 4).
        let s = drafter(4.0, 0.5).speculate(&seq, seq.len(), 10);
        assert_eq!(s.tree.tokens(), vec![4]);
    }

    #[test]
    fn nodes_are_added_best_score_first_not_level_by_level() {
        // "1" occurs 4 times before the end: followed by 2 3 three times and by 9 once. With
        // the own occurrence 5 in all: 2 (3/5), 2 3 (3/5), 9 (1/5). Two nodes: 2 then 3 (a
        // frontier taken in push order would take 9 second).
        let seq = [1, 2, 3, 1, 2, 3, 1, 2, 3, 1, 9, 1];
        let params = SuffixParams { alpha: 2.0, min_token_prob: 0.0, ..Default::default() };
        let s = SuffixDrafter::new(params).unwrap().speculate(&seq, seq.len(), 8);
        assert_eq!(s.match_len, 1);
        assert_eq!(s.tree.tokens(), vec![2, 3]);
        assert!(s.tree.is_chain());
        let paths = SuffixParams { alpha: 8.0, min_token_prob: 0.0, paths_only: true, ..Default::default() };
        let s = SuffixDrafter::new(paths).unwrap().speculate(&seq, seq.len(), 8);
        assert!(s.tree.is_chain(), "paths only: the likeliest continuation, token by token");
        assert_eq!(s.tree.tokens()[..3], [2, 3, 1]);
    }

    #[test]
    fn the_offset_adds_to_alpha_times_the_match_and_max_nodes_is_bounded() {
        let seq = [1, 2, 3, 4, 5, 6, 1, 2];
        let with = |offset: f64| {
            let params = SuffixParams { alpha: 1.0, offset, min_token_prob: 0.0, ..Default::default() };
            SuffixDrafter::new(params).unwrap().speculate(&seq, seq.len(), 10).tree.len()
        };
        assert_eq!(with(0.0), 2, "a match of 2, alpha 1");
        assert_eq!(with(2.0), 4);
        assert_eq!(with(-2.0), 0, "nothing at a budget of 0");
        let too_many = SuffixParams { max_nodes: 32, ..Default::default() };
        let err = SuffixDrafter::new(too_many).err().unwrap();
        assert!(err.to_string().contains("1..=31"), "{err}");
    }

    #[test]
    fn the_own_tree_follows_the_committed_text_and_a_new_request_starts_afresh() {
        let mut d = drafter(4.0, 0.0);
        assert!(d.speculate(&[5, 6, 7], 3, 8).tree.is_empty());
        assert_eq!(d.speculate(&[5, 6, 7, 5], 3, 8).best_path()[..2], [6, 7], "grown by the committed token");
        assert!(d.speculate(&[8, 5], 2, 8).tree.is_empty(), "another request: the old text is gone");
    }

    #[test]
    fn the_running_output_enters_the_corpus_and_leaves_with_the_drafter() {
        let corpus = SuffixCorpus::of(24, CorpusBound { outputs: 4, tokens: usize::MAX }, &[vec![1, 2, 3]]).shared();
        let params = SuffixParams { alpha: 4.0, min_token_prob: 0.0, ..Default::default() };
        let mut d = SuffixDrafter::new(params).unwrap().with_corpus(corpus.clone());
        // Prompt [9, 9]; output so far [1, 2, 4].
        d.speculate(&[9, 9, 1, 2, 4], 2, 8);
        let tokens = |c: &SharedCorpus| c.lock().unwrap().tree().tokens();
        assert_eq!(tokens(&corpus), 3 + 3, "the output, not the prompt");
        d.speculate(&[9, 9, 1, 2, 4, 1], 2, 8);
        assert_eq!(tokens(&corpus), 3 + 4);
        drop(d);
        assert_eq!(tokens(&corpus), 3, "taken back out");
    }

    #[test]
    fn no_earlier_occurrence_drafts_nothing() {
        let s = drafter(1.0, 0.1).speculate(&[1, 2, 3, 4], 4, 8);
        assert!(s.tree.is_empty() && s.match_len == 0);
    }

    #[test]
    fn the_match_plus_the_speculation_stays_within_max_depth() {
        let seq: Vec<u32> = [10, 11, 12, 13, 14, 15, 16, 17].iter().chain(&[10, 11, 12, 13]).copied().collect();
        let mut d = SuffixDrafter::new(SuffixParams { max_depth: 6, alpha: 8.0, ..Default::default() }).unwrap();
        // The match of 4 leaves 2 levels (score 1); the match of 1 leaves 5 (score 2.5).
        let s = d.speculate(&seq, seq.len(), 10);
        assert_eq!((s.match_len, s.tree.depth()), (1, 5), "the best-scored match length");
        assert_eq!(s.tree.tokens(), vec![14, 15, 16, 17, 10]);
        assert_eq!(d.speculate(&seq, seq.len(), 3).tree.depth(), 3, "the round's depth cap");
    }

    #[test]
    fn a_shorter_match_with_more_occurrences_can_win() {
        // "5 1" occurred once (then 9); "1" occurred three more times, each followed by 2 2.
        let seq = [1, 2, 2, 1, 2, 2, 1, 2, 2, 5, 1, 9, 5, 1];
        let s = drafter(4.0, 0.1).speculate(&seq, seq.len(), 8);
        assert_eq!(s.match_len, 1);
        assert_eq!(s.best_path()[..2], [2, 2]);
    }

    #[test]
    fn earlier_outputs_speculate_where_the_own_text_has_no_match() {
        let seq = [7, 8, 1, 2];
        let earlier = vec![vec![1, 2, 3, 4], vec![9, 9], vec![1, 2, 3, 5]];
        let params = SuffixParams { alpha: 4.0, cached_requests: 8, ..Default::default() };
        let mut d = SuffixDrafter::new(params.clone()).unwrap();
        assert!(d.speculate(&seq, seq.len(), 8).tree.is_empty(), "nothing in the own text");
        let s = SuffixDrafter::new(params.clone()).unwrap().with_earlier(&earlier).speculate(&seq, seq.len(), 8);
        assert_eq!(s.match_len, 2);
        // Two occurrences of "1 2", both followed by 3 (no own occurrence among them).
        assert_eq!(s.best_path()[0], 3);
        assert!((s.scores[0] - 1.0).abs() < 1e-12);
        let only_last = SuffixDrafter::new(SuffixParams { cached_requests: 1, ..params.clone() }).unwrap();
        let s = only_last.with_earlier(&earlier).speculate(&seq, seq.len(), 8);
        assert_eq!(s.tree.tokens(), vec![3, 5], "the most recent output alone");
        let off = SuffixDrafter::new(SuffixParams { cached_requests: 0, ..params }).unwrap();
        assert!(
            off.with_earlier(&earlier).speculate(&seq, seq.len(), 8).tree.is_empty(),
            "cached_requests 0 matches none"
        );
    }

    #[test]
    fn the_better_scored_corpus_wins_and_the_own_text_wins_ties() {
        // Own text: "1 2" once before, then 6 0: with the own occurrence, 1/2 each (score 1).
        let seq = [1, 2, 6, 0, 1, 2];
        let params = SuffixParams { alpha: 1.0, cached_requests: 4, ..Default::default() };
        let d = || SuffixDrafter::new(params.clone()).unwrap();
        assert_eq!(d().speculate(&seq, seq.len(), 8).tree.tokens(), vec![6, 0]);
        let strong = vec![vec![1, 2, 3, 4]; 3];
        assert_eq!(
            d().with_earlier(&strong).speculate(&seq, seq.len(), 8).tree.tokens(),
            vec![3, 4],
            "score 2 beats 1"
        );
        // "1 2" twice, once at a text's end: 3 4 at 1/2 each, score 1, a tie.
        let weak = vec![vec![1, 2, 3, 4], vec![0, 0, 1, 2]];
        assert_eq!(
            d().with_earlier(&weak).speculate(&seq, seq.len(), 8).tree.tokens(),
            vec![6, 0],
            "a tie: the own text's"
        );
    }
}
