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
//! Where this deviates from ArcticInference: the occurrences are found by scanning the text
//! (O(text) per round; the same matches and counts a suffix tree's node holds), the text is
//! this request's prompt and output only (no cross-request tree yet), and the tree is capped
//! at `max_nodes` rows so that one verification is one tree call.
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
}

impl Default for SuffixParams {
    fn default() -> Self {
        Self { max_depth: 24, alpha: 1.0, min_token_prob: 0.1, max_nodes: 16 }
    }
}

/// Drafts SuffixDecoding's speculation trees from the request's own text.
#[derive(Clone, Debug)]
pub struct SuffixDrafter {
    params: SuffixParams,
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
    pub fn new(params: SuffixParams) -> Result<Self> {
        ensure!(params.max_depth >= 2, "suffix decoding needs max_depth >= 2 (got {})", params.max_depth);
        ensure!(params.alpha > 0.0, "suffix decoding needs alpha > 0 (got {})", params.alpha);
        ensure!(
            (0.0..=1.0).contains(&params.min_token_prob),
            "suffix decoding's min_token_prob must lie in [0, 1] (got {})",
            params.min_token_prob
        );
        ensure!(params.max_nodes >= 1, "suffix decoding needs max_nodes >= 1");
        Ok(Self { params })
    }

    pub fn params(&self) -> &SuffixParams {
        &self.params
    }

    /// The speculation tree after `seq` of at most `max_depth` levels: of the trees of every
    /// suffix of `seq` that occurred before (at most `params.max_depth - 1` tokens), the one
    /// with the highest score (ties: the longer match), as ArcticInference's `speculate` picks.
    pub fn speculate(&self, seq: &[u32], max_depth: usize) -> Speculation {
        let Some(&last) = seq.last() else { return Speculation::default() };
        let limit = self.params.max_depth - 1;
        // Every earlier end `j` of an occurrence of the last token, with the length of the
        // suffix match ending there (at most `limit`).
        let ends: Vec<(usize, usize)> = (1..seq.len())
            .filter(|&j| seq[j - 1] == last)
            .map(|j| (j, (1..=limit.min(j)).take_while(|&l| seq[j - l] == seq[seq.len() - l]).count()))
            .collect();
        let longest = ends.iter().map(|&(_, l)| l).max().unwrap_or(0);
        let mut best = Speculation::default();
        for p in (1..=longest).rev() {
            let occurrences: Vec<usize> = ends.iter().filter(|&&(_, l)| l >= p).map(|&(j, _)| j).collect();
            let depth = (self.params.max_depth - p).min(max_depth);
            let budget = ((self.params.alpha * p as f64 + 1e-6).floor() as usize).min(self.params.max_nodes);
            let spec = self.grow(seq, &occurrences, p, depth, budget);
            if spec.score() > best.score() {
                best = spec;
            }
        }
        best
    }

    /// The tree of the continuations after `occurrences` (ends of earlier matches of length
    /// `p`), best score first. A node's score is the share of the match's occurrences that
    /// continue so, the text's own (final) occurrence among them, as a suffix tree's counts
    /// give it.
    fn grow(&self, seq: &[u32], occurrences: &[usize], p: usize, depth: usize, budget: usize) -> Speculation {
        let total = (occurrences.len() + 1) as f64;
        let mut spec = Speculation { match_len: p, ..Default::default() };
        // Frontier entries: (score, parent node, depth, token, the occurrences continuing so).
        let mut frontier: Vec<(f64, Option<usize>, usize, u32, Vec<usize>)> = Vec::new();
        let expand = |parent: Option<usize>, level: usize, from: &[usize], frontier: &mut Vec<_>| {
            if level >= depth {
                return;
            }
            let mut by_token: Vec<(u32, Vec<usize>)> = Vec::new();
            for &j in from {
                let Some(&t) = seq.get(j + level) else { continue };
                match by_token.iter_mut().find(|(tok, _)| *tok == t) {
                    Some((_, v)) => v.push(j),
                    None => by_token.push((t, vec![j])),
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

impl Drafter for SuffixDrafter {
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
        let spec = self.speculate(round.committed, round.max);
        round.metrics.draft_time += started.elapsed();
        Ok(spec.tree)
    }

    /// Nothing to forget: the text is read anew each round.
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
}
