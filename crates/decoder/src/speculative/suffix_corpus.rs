//! SuffixDecoding's global tree: earlier requests' outputs in one [`SuffixTree`], the oldest
//! evicted first once the corpus holds more than its bound of outputs or tokens (vLLM's
//! `suffix_decoding_max_cached_requests`, FIFO), and the outputs of requests still running,
//! added as they grow. Shared between drafters ([`SharedCorpus`]): a drafter adds its
//! request's output while it runs and takes it back when dropped; what a finished request
//! leaves is the caller's [`SuffixCorpus::push`].

use super::suffix_tree::{SuffixTree, TextId};
use std::collections::VecDeque;
use std::sync::{Arc, Mutex};

/// A corpus several drafters read and extend.
pub type SharedCorpus = Arc<Mutex<SuffixCorpus>>;

/// How much a corpus keeps.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct CorpusBound {
    /// Finished outputs kept (the most recent).
    pub outputs: usize,
    /// Tokens of finished outputs kept (`usize::MAX`: no bound).
    pub tokens: usize,
}

/// Earlier outputs, oldest first, in one suffix tree (see the module docs).
pub struct SuffixCorpus {
    tree: SuffixTree,
    bound: CorpusBound,
    /// Finished outputs, oldest first.
    finished: VecDeque<TextId>,
    finished_tokens: usize,
}

impl SuffixCorpus {
    /// An empty corpus of strings up to `max_depth` tokens.
    pub fn new(max_depth: usize, bound: CorpusBound) -> Self {
        Self { tree: SuffixTree::new(max_depth), bound, finished: VecDeque::new(), finished_tokens: 0 }
    }

    /// The corpus of `outputs` (oldest first) as pushed one by one.
    pub fn of(max_depth: usize, bound: CorpusBound, outputs: &[Vec<u32>]) -> Self {
        let mut corpus = Self::new(max_depth, bound);
        let skip = outputs.len().saturating_sub(bound.outputs);
        for o in &outputs[skip..] {
            corpus.push(o);
        }
        corpus
    }

    pub fn shared(self) -> SharedCorpus {
        Arc::new(Mutex::new(self))
    }

    pub fn tree(&self) -> &SuffixTree {
        &self.tree
    }

    pub fn bound(&self) -> CorpusBound {
        self.bound
    }

    /// Finished outputs held.
    pub fn outputs(&self) -> usize {
        self.finished.len()
    }

    /// Adds a finished output, then evicts the oldest while over the bound.
    pub fn push(&mut self, output: &[u32]) {
        if self.bound.outputs == 0 {
            return;
        }
        let id = self.tree.insert(output);
        self.finished.push_back(id);
        self.finished_tokens += output.len();
        while self.finished.len() > self.bound.outputs
            || (self.finished_tokens > self.bound.tokens && self.finished.len() > 1)
        {
            let old = self.finished.pop_front().expect("over the bound, so not empty");
            self.finished_tokens -= self.tree.text(old).len();
            self.tree.remove(old);
        }
    }

    /// A running request's output, empty so far.
    pub fn begin(&mut self) -> TextId {
        self.tree.start()
    }

    /// Tokens of a running request's output so far.
    pub fn active_len(&self, id: TextId) -> usize {
        self.tree.text(id).len()
    }

    pub fn extend(&mut self, id: TextId, tokens: &[u32]) {
        self.tree.extend(id, tokens);
    }

    /// Takes a running request's output back out.
    pub fn discard(&mut self, id: TextId) {
        self.tree.remove(id);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_oldest_outputs_go_first_by_count_and_by_tokens() {
        let bound = CorpusBound { outputs: 2, tokens: usize::MAX };
        let mut c = SuffixCorpus::of(4, bound, &[vec![1, 2], vec![3, 4], vec![5, 6]]);
        assert_eq!(c.outputs(), 2);
        assert!(c.tree().find(&[1]).is_none() && c.tree().find(&[3, 4]).is_some());
        c.push(&[7]);
        assert!(c.tree().find(&[3]).is_none() && c.tree().find(&[5, 6]).is_some());
        let mut c = SuffixCorpus::new(4, CorpusBound { outputs: 10, tokens: 5 });
        c.push(&[1, 2, 3]);
        c.push(&[4, 5, 6]);
        assert_eq!(c.outputs(), 1, "6 tokens over 5: the oldest goes");
        c.push(&[7, 8, 9, 10, 11, 12]);
        assert_eq!(c.outputs(), 1, "the newest stays even alone over the bound");
        assert_eq!(c.tree().tokens(), 6);
    }

    #[test]
    fn a_running_output_counts_until_discarded() {
        let mut c = SuffixCorpus::new(4, CorpusBound { outputs: 4, tokens: usize::MAX });
        c.push(&[1, 2, 3]);
        let a = c.begin();
        c.extend(a, &[1, 2, 9]);
        assert_eq!(c.tree().count(c.tree().find(&[1, 2]).unwrap()), 2);
        c.discard(a);
        assert_eq!(c.tree().count(c.tree().find(&[1, 2]).unwrap()), 1);
        assert!(c.tree().find(&[9]).is_none());
    }
}
