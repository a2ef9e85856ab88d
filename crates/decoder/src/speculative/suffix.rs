//! SuffixDecoding (Oliaro et al., arXiv 2411.04975; Snowflake's ArcticInference, in vLLM as
//! `method = "suffix"`): speculation trees from earlier text, no draft model.
//!
//! Each suffix of the text that occurred before (at most `max_depth - 1` tokens: vLLM's
//! `suffix_decoding_max_tree_depth` bounds the match plus the speculation) is matched, and
//! the continuations of its occurrences form a trie whose node counts give frequency
//! probabilities: a child's probability is its count over its parent's, and a node's score is
//! the product along its path (the share of the match's occurrences, the text's own final one
//! included, that continue so). Nodes are added best score first while their score is at least
//! `min_token_prob` and the tree has fewer than `alpha * p` nodes for a match of length `p` (the
//! paper's adaptive size: `max_spec_tokens = max_spec_factor * prefix_match_length`), and never
//! more than `max_nodes`. Of the trees of every match length, the one with the highest score
//! (the expected number of accepted tokens under the frequency model) is proposed.
//!
//! Two corpora are matched, as ArcticInference's two suffix trees: the request's own prompt
//! and output, and (optionally) earlier requests' outputs, the last `cached_requests` of those
//! the caller offers ([`SuffixDrafter::with_earlier`]; an eval run offers its earlier units').
//! Each gives its best tree; the higher score wins (ties: the request's own).
//!
//! Where this deviates from ArcticInference: the occurrences are found by scanning the texts
//! (O(text) per round; the same matches and counts a suffix tree's node holds), the active
//! request's output is matched in its own text only (ArcticInference also adds it to the
//! cross-request tree, where its counts would merge with the earlier outputs'), and the tree is
//! capped at `max_nodes` rows so that one verification is one tree call.
//!
//! Every node is a point mass (`q` empty), so the rejection sampler's sibling rule keeps the
//! output distributed as the target's ([`super::RejectionSampler`]).

use super::candidate::Candidate;
use super::drafter::Drafter;
use super::lookup::PromptLookupDrafter;
use super::round::DraftRound;
use super::tree::DraftTree;
use anyhow::{Result, ensure};
use std::time::Instant;

/// SuffixDecoding's parameters (defaults: vLLM's and ArcticInference's).
#[derive(Clone, Debug, PartialEq)]
pub struct SuffixParams {
    /// Match plus speculation length bound (`max_tree_depth`, 24).
    pub max_depth: usize,
    /// Nodes per match token (`max_spec_factor`, 1.0).
    pub alpha: f64,
    /// The lowest frequency probability a speculated node may have (`min_token_prob`, 0.1).
    pub min_token_prob: f64,
    /// The most nodes one tree may have (rows of one tree call, besides the committed token).
    pub max_nodes: usize,
    /// How many of the earlier requests' outputs offered are matched (the most recent; vLLM's
    /// `suffix_decoding_max_cached_requests`, FIFO). 0: the request's own text only.
    pub cached_requests: usize,
}

impl Default for SuffixParams {
    fn default() -> Self {
        Self { max_depth: 24, alpha: 1.0, min_token_prob: 0.1, max_nodes: 16, cached_requests: 0 }
    }
}

/// Drafts SuffixDecoding's speculation trees from the request's own text and earlier outputs.
#[derive(Clone, Debug)]
pub struct SuffixDrafter<'a> {
    params: SuffixParams,
    /// The earlier outputs matched (at most `params.cached_requests`, oldest first).
    earlier: &'a [Vec<u32>],
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

impl SuffixDrafter<'static> {
    /// A drafter over the request's own text (`cached_requests` matters once
    /// [`SuffixDrafter::with_earlier`] offers outputs).
    pub fn new(params: SuffixParams) -> Result<Self> {
        ensure!(params.max_depth >= 2, "suffix decoding needs max_depth >= 2 (got {})", params.max_depth);
        ensure!(params.alpha > 0.0, "suffix decoding needs alpha > 0 (got {})", params.alpha);
        ensure!(
            (0.0..=1.0).contains(&params.min_token_prob),
            "suffix decoding's min_token_prob must lie in [0, 1] (got {})",
            params.min_token_prob
        );
        ensure!(params.max_nodes >= 1, "suffix decoding needs max_nodes >= 1");
        Ok(Self { params, earlier: &[] })
    }
}

impl<'a> SuffixDrafter<'a> {
    /// The same drafter matching also the last `cached_requests` of `earlier` (earlier
    /// requests' outputs, oldest first).
    pub fn with_earlier<'b>(self, earlier: &'b [Vec<u32>]) -> SuffixDrafter<'b> {
        let keep = earlier.len().min(self.params.cached_requests);
        SuffixDrafter { params: self.params, earlier: &earlier[earlier.len() - keep..] }
    }

    pub fn params(&self) -> &SuffixParams {
        &self.params
    }

    /// The speculation tree after `seq` of at most `max_depth` levels: the better-scored of
    /// the request's own text's tree and the earlier outputs' (ties: the own).
    pub fn speculate(&self, seq: &[u32], max_depth: usize) -> Speculation {
        let own = self.speculate_in(&[seq], seq, max_depth);
        if self.earlier.is_empty() {
            return own;
        }
        let texts: Vec<&[u32]> = self.earlier.iter().map(Vec::as_slice).collect();
        let earlier = self.speculate_in(&texts, seq, max_depth);
        if earlier.score() > own.score() { earlier } else { own }
    }

    /// The best tree after `pattern` from the continuations in `texts`: of the trees of every
    /// suffix of `pattern` that occurs there (at most `params.max_depth - 1` tokens), the one
    /// with the highest score (ties: the longer match), as ArcticInference's `speculate` picks.
    /// An occurrence at a text's end (the pattern's own, when `pattern` is a text) counts
    /// towards its match's frequencies without continuing, as in a suffix tree.
    fn speculate_in(&self, texts: &[&[u32]], pattern: &[u32], max_depth: usize) -> Speculation {
        let Some(&last) = pattern.last() else { return Speculation::default() };
        let limit = (self.params.max_depth - 1).min(pattern.len());
        // Every occurrence of the last token, as (text, end), with the length of the suffix
        // match ending there (at most `limit`, within its text).
        let ends: Vec<(usize, usize, usize)> = texts
            .iter()
            .enumerate()
            .flat_map(|(t, text)| {
                (1..=text.len()).filter(move |&j| text[j - 1] == last).map(move |j| {
                    let l = (1..=limit.min(j)).take_while(|&l| text[j - l] == pattern[pattern.len() - l]).count();
                    (t, j, l)
                })
            })
            .collect();
        // Only a match that something follows can speculate.
        let longest = ends.iter().filter(|&&(t, j, _)| j < texts[t].len()).map(|&(_, _, l)| l).max().unwrap_or(0);
        let mut best = Speculation::default();
        for p in (1..=longest).rev() {
            let occurrences: Vec<(usize, usize)> =
                ends.iter().filter(|&&(_, _, l)| l >= p).map(|&(t, j, _)| (t, j)).collect();
            let depth = (self.params.max_depth - p).min(max_depth);
            let budget = ((self.params.alpha * p as f64 + 1e-6).floor() as usize).min(self.params.max_nodes);
            let spec = self.grow(texts, &occurrences, p, depth, budget);
            if spec.score() > best.score() {
                best = spec;
            }
        }
        best
    }

    /// The tree of the continuations after `occurrences` ((text, end) of the matches of length
    /// `p`), best score first. A node's score is the share of the match's occurrences that
    /// continue so, as a suffix tree's counts give it.
    fn grow(
        &self,
        texts: &[&[u32]],
        occurrences: &[(usize, usize)],
        p: usize,
        depth: usize,
        budget: usize,
    ) -> Speculation {
        let total = occurrences.len() as f64;
        let mut spec = Speculation { match_len: p, ..Default::default() };
        // Frontier entries: (score, parent node, depth, token, the occurrences continuing so).
        let mut frontier: Vec<(f64, Option<usize>, usize, u32, Vec<(usize, usize)>)> = Vec::new();
        let expand = |parent: Option<usize>, level: usize, from: &[(usize, usize)], frontier: &mut Vec<_>| {
            if level >= depth {
                return;
            }
            let mut by_token: Vec<(u32, Vec<(usize, usize)>)> = Vec::new();
            for &(text, j) in from {
                let Some(&t) = texts[text].get(j + level) else { continue };
                match by_token.iter_mut().find(|(tok, _)| *tok == t) {
                    Some((_, v)) => v.push((text, j)),
                    None => by_token.push((t, vec![(text, j)])),
                }
            }
            for (t, v) in by_token {
                frontier.push((v.len() as f64 / total, parent, level, t, v));
            }
        };
        expand(None, 0, occurrences, &mut frontier);
        while spec.tree.len() < budget {
            // The best-scored entry (ties: the earliest pushed).
            let Some(best) = (0..frontier.len()).reduce(|a, b| if frontier[b].0 > frontier[a].0 { b } else { a })
            else {
                break;
            };
            if frontier[best].0 < self.params.min_token_prob {
                break;
            }
            let (score, parent, level, token, from) = frontier.remove(best);
            let node = spec.tree.push(Candidate { token, q: Vec::new(), q_token: 1.0, ngram: Some(p) }, parent);
            spec.scores.push(score);
            expand(Some(node), level + 1, &from, &mut frontier);
        }
        spec
    }
}

impl Drafter for SuffixDrafter<'_> {
    /// The best branch as a chain, asked to the policy token by token (what a chain scheduler
    /// verifies: DSI, and the proposal at a sampled bonus position).
    fn draft(&mut self, round: DraftRound<'_>) -> Result<Vec<Candidate>> {
        if round.max == 0 {
            return Ok(Vec::new());
        }
        let started = Instant::now();
        let spec = self.speculate(round.committed, round.max);
        PromptLookupDrafter::propose(round, spec.match_len, &spec.best_path(), started)
    }

    fn draft_tree(&mut self, round: DraftRound<'_>) -> Result<DraftTree> {
        if round.max == 0 {
            return Ok(DraftTree::default());
        }
        let started = Instant::now();
        let mut spec = self.speculate(round.committed, round.max);
        // Nodes are grown best score first, so the policy's count keeps the likeliest.
        round.policy.begin_round();
        let keep = round.policy.tree_nodes(&spec.scores).min(spec.tree.len());
        spec.tree.truncate(keep);
        round.metrics.draft_time += started.elapsed();
        Ok(spec.tree)
    }

    /// Nothing to forget: the text is read anew each round.
    fn rollback(&mut self, _valid: usize) {}
}

#[cfg(test)]
mod tests {
    use super::*;

    fn drafter(alpha: f64, min_token_prob: f64) -> SuffixDrafter<'static> {
        SuffixDrafter::new(SuffixParams { alpha, min_token_prob, ..Default::default() }).unwrap()
    }

    #[test]
    fn continuations_of_the_longest_match_branch_by_frequency() {
        // "1 2 3" occurs three times before the end (each after a different token): followed by
        // 4 5, 4 6 and 7; with the text's own occurrence, 4 of 4 occurrences continue with 4.
        let seq = [1, 2, 3, 4, 5, 8, 1, 2, 3, 4, 6, 9, 1, 2, 3, 7, 10, 1, 2, 3];
        let s = drafter(4.0, 0.1).speculate(&seq, 10);
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
        assert_eq!(drafter(1.0, 0.1).speculate(&seq, 10).tree.len(), 3, "alpha 1, match of 3");
        // Every node below 0.5: only the branch of 4 (2 of 4) survives, not its children (1 of 4).
        let s = drafter(4.0, 0.5).speculate(&seq, 10);
        assert_eq!(s.tree.tokens(), vec![4]);
    }

    #[test]
    fn no_earlier_occurrence_drafts_nothing() {
        let s = drafter(1.0, 0.1).speculate(&[1, 2, 3, 4], 8);
        assert!(s.tree.is_empty() && s.match_len == 0);
    }

    #[test]
    fn the_match_plus_the_speculation_stays_within_max_depth() {
        let seq: Vec<u32> = [10, 11, 12, 13, 14, 15, 16, 17].iter().chain(&[10, 11, 12, 13]).copied().collect();
        let d = SuffixDrafter::new(SuffixParams { max_depth: 6, alpha: 8.0, ..Default::default() }).unwrap();
        // The match of 4 leaves 2 levels (score 1); the match of 1 leaves 5 (score 2.5).
        let s = d.speculate(&seq, 10);
        assert_eq!((s.match_len, s.tree.depth()), (1, 5), "the best-scored match length");
        assert_eq!(s.tree.tokens(), vec![14, 15, 16, 17, 10]);
        assert_eq!(d.speculate(&seq, 3).tree.depth(), 3, "the round's depth cap");
    }

    #[test]
    fn a_shorter_match_with_more_occurrences_can_win() {
        // "5 1" occurred once (then 9); "1" occurred three more times, each followed by 2 2.
        let seq = [1, 2, 2, 1, 2, 2, 1, 2, 2, 5, 1, 9, 5, 1];
        let s = drafter(4.0, 0.1).speculate(&seq, 8);
        assert_eq!(s.match_len, 1);
        assert_eq!(s.best_path()[..2], [2, 2]);
    }

    #[test]
    fn earlier_outputs_speculate_where_the_own_text_has_no_match() {
        let seq = [7, 8, 1, 2];
        let earlier = vec![vec![1, 2, 3, 4], vec![9, 9], vec![1, 2, 3, 5]];
        let params = SuffixParams { alpha: 4.0, cached_requests: 8, ..Default::default() };
        let d = SuffixDrafter::new(params.clone()).unwrap();
        assert!(d.speculate(&seq, 8).tree.is_empty(), "nothing in the own text");
        let s = d.clone().with_earlier(&earlier).speculate(&seq, 8);
        assert_eq!(s.match_len, 2);
        // Two occurrences of "1 2", both followed by 3 (no own occurrence among them).
        assert_eq!(s.best_path()[0], 3);
        assert!((s.scores[0] - 1.0).abs() < 1e-12);
        let only_last = SuffixDrafter::new(SuffixParams { cached_requests: 1, ..params.clone() }).unwrap();
        let s = only_last.with_earlier(&earlier).speculate(&seq, 8);
        assert_eq!(s.tree.tokens(), vec![3, 5], "the most recent output alone");
        let off = SuffixDrafter::new(SuffixParams { cached_requests: 0, ..params }).unwrap();
        assert!(off.with_earlier(&earlier).speculate(&seq, 8).tree.is_empty(), "cached_requests 0 matches none");
    }

    #[test]
    fn the_better_scored_corpus_wins_and_the_own_text_wins_ties() {
        // Own text: "1 2" once before, then 6 0: with the own occurrence, 1/2 each (score 1).
        let seq = [1, 2, 6, 0, 1, 2];
        let params = SuffixParams { alpha: 1.0, cached_requests: 4, ..Default::default() };
        let d = SuffixDrafter::new(params).unwrap();
        assert_eq!(d.speculate(&seq, 8).tree.tokens(), vec![6, 0]);
        let strong = vec![vec![1, 2, 3, 4]; 3];
        assert_eq!(d.clone().with_earlier(&strong).speculate(&seq, 8).tree.tokens(), vec![3, 4], "score 2 beats 1");
        // "1 2" twice, once at a text's end: 3 4 at 1/2 each, score 1, a tie.
        let weak = vec![vec![1, 2, 3, 4], vec![0, 0, 1, 2]];
        assert_eq!(d.with_earlier(&weak).speculate(&seq, 8).tree.tokens(), vec![6, 0], "a tie: the own text's");
    }
}
