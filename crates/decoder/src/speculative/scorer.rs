//! The target's side of verification, one for both schedulers (the sequential scheduler owns
//! one; each DSI worker owns one): a KV cache over the tokens it has scored, of which the
//! longest common prefix with the next request is kept, and one forward over the rest. On a
//! GPU that can record its calls, a verification of a few rows after the cache, a chain or a
//! tree, is a replay of the call recorded for that many rows (`generate::RecordedSteps`: the
//! plain forward's scores bit for bit, without the host launching each kernel).

use super::feature_draft::tap::{FeatureTap, prefix_hashes};
use super::tree::DraftTree;
use crate::cache::KvCache;
use crate::generate::RecordedSteps;
use crate::model::Transformer;
use crate::model::TreeRows;
use anyhow::{Result, ensure};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

/// Target logit rows read back to the host by every scorer of this process
/// ([`target_rows_read`]).
static ROWS_READ: AtomicU64 = AtomicU64::new(0);

/// Target logit rows the verifications of this process have read back to the host: none for
/// a verification decided on the device ([`TargetScorer::score_best`]). A count for tests and
/// profiles, which read it before and after a generation on one thread.
pub fn target_rows_read() -> u64 {
    ROWS_READ.load(Ordering::Relaxed)
}

pub(crate) struct TargetScorer<'m> {
    target: &'m Transformer,
    cache: KvCache,
    /// The tokens whose keys the cache holds, in order.
    fed: Vec<u32>,
    /// Where the hidden states of forwarded positions go (a feature-level drafter's), with
    /// the prefix hash of every fed token.
    tap: Option<(FeatureTap, Vec<u64>)>,
    /// The target's recorded calls, where it can record them.
    recorded: Option<RecordedSteps>,
}

/// Length of the longest common prefix of two token sequences.
pub(crate) fn common_prefix_len(a: &[u32], b: &[u32]) -> usize {
    a.iter().zip(b).take_while(|(x, y)| x == y).count()
}

impl<'m> TargetScorer<'m> {
    pub fn new(target: &'m Transformer) -> Self {
        let recorded = RecordedSteps::when_possible(target);
        Self { target, cache: target.new_cache(1), fed: Vec::new(), tap: None, recorded }
    }

    /// Records the hidden states of every forwarded position into `tap` (none: nothing).
    pub fn with_tap(mut self, tap: Option<FeatureTap>) -> Self {
        self.tap = tap.map(|t| (t, Vec::new()));
        self
    }

    /// The target's scores at the last `rows` positions of `tokens` (row `i` scores the token
    /// after position `len - rows + i - 1`): the cache keeps its longest common prefix with
    /// `tokens`, cut back so that the forward covers at least the `rows` positions, and the rest
    /// is forwarded. `None` if `cancel` was set during the forward (the cache then holds the
    /// kept prefix only). A forward of just the `rows` positions with no tap is a recorded
    /// call's replay where the target records them. A replay cannot stop between layers: a
    /// cancel set before it starts returns `None`, one set during it is too late, and the
    /// caller gets the scores (DSI then counts them stale, as a preempted task's).
    pub fn score(&mut self, tokens: &[u32], rows: usize, cancel: Option<&AtomicBool>) -> Result<Option<Vec<Vec<f32>>>> {
        let keep = self.keep_for(tokens, rows)?;
        if let Some(recorded) =
            self.recorded.as_mut().filter(|r| tokens.len() - keep == rows && rows <= r.max_rows() && self.tap.is_none())
        {
            if cancel.is_some_and(|c| c.load(Ordering::Relaxed)) {
                return Ok(None);
            }
            let scores = recorded.scores(self.target, &tokens[keep..], &mut self.cache)?;
            self.fed.extend_from_slice(&tokens[keep..]);
            ROWS_READ.fetch_add(rows as u64, Ordering::Relaxed);
            return Ok(Some(scores));
        }
        let Some((scores, states)) =
            self.target.forward_scores_hidden(&tokens[keep..], &mut self.cache, rows, cancel, self.tap.is_some())?
        else {
            return Ok(None);
        };
        self.fed.extend_from_slice(&tokens[keep..]);
        ROWS_READ.fetch_add(rows as u64, Ordering::Relaxed);
        if let Some((tap, hashes)) = &mut self.tap {
            hashes.truncate(keep);
            let new = prefix_hashes(&tokens[keep..], hashes.last().copied().unwrap_or(0));
            tap.record(&new, &states);
            hashes.extend(new);
        }
        Ok(Some(scores))
    }

    /// Cuts the cache back to its longest common prefix with `tokens`, leaving at least the
    /// last `rows` positions to forward; the kept length.
    fn keep_for(&mut self, tokens: &[u32], rows: usize) -> Result<usize> {
        ensure!((1..=tokens.len()).contains(&rows), "scores of {rows} rows of {} tokens", tokens.len());
        let keep = common_prefix_len(&self.fed, tokens).min(tokens.len() - rows);
        self.cache.truncate(keep);
        self.fed.truncate(keep);
        Ok(keep)
    }

    /// The target's greedy token after each of the last `rows` positions of `tokens`: the
    /// argmax of each row [`Self::score`] would return, computed where the logits are (on a
    /// GPU, token ids come back instead of rows); a recorded call's replay where the target
    /// records them. For a verification decided by argmax alone, with no feature tap. `cancel`
    /// as for [`Self::score`].
    pub fn score_best(&mut self, tokens: &[u32], rows: usize, cancel: Option<&AtomicBool>) -> Result<Option<Vec<u32>>> {
        ensure!(self.tap.is_none(), "a feature tap reads hidden states: score the rows instead");
        let keep = self.keep_for(tokens, rows)?;
        let best = match self.recorded.as_mut().filter(|r| tokens.len() - keep == rows && rows <= r.max_rows()) {
            Some(_) if cancel.is_some_and(|c| c.load(Ordering::Relaxed)) => None,
            Some(recorded) => Some(recorded.best(self.target, &tokens[keep..], &mut self.cache)?),
            None => self.target.forward_best(&tokens[keep..], &mut self.cache, rows, cancel)?,
        };
        if best.is_some() {
            self.fed.extend_from_slice(&tokens[keep..]);
        }
        Ok(best)
    }

    /// The target's scores after `committed` and after each node of `tree` (row 0, then row
    /// i + 1 for node i), from one tree call rooted at the last committed token (after a
    /// forward of any other committed tokens the cache lacks). The cache then holds every
    /// node; [`Self::keep_path`] keeps the accepted ones.
    pub fn score_tree(&mut self, committed: &[u32], tree: &DraftTree) -> Result<Vec<Vec<f32>>> {
        match self.tree_call(committed, tree, false)? {
            TreeRows::Scores(scores) => {
                ROWS_READ.fetch_add(scores.len() as u64, Ordering::Relaxed);
                Ok(scores)
            }
            TreeRows::Best(_) => unreachable!("a tree call for scores reads scores"),
        }
    }

    /// The target's greedy token after `committed` and after each node of `tree`, in
    /// [`Self::score_tree`]'s order: the argmax of each of its rows, computed where the logits
    /// are.
    pub fn score_tree_best(&mut self, committed: &[u32], tree: &DraftTree) -> Result<Vec<u32>> {
        match self.tree_call(committed, tree, true)? {
            TreeRows::Best(best) => Ok(best),
            TreeRows::Scores(_) => unreachable!("a greedy tree call reads tokens"),
        }
    }

    /// [`Self::score_tree`]'s forward, for every row's logits or (`greedy`) argmax: a recorded
    /// call's replay where the target records them and the tree has at most its rows.
    fn tree_call(&mut self, committed: &[u32], tree: &DraftTree, greedy: bool) -> Result<TreeRows> {
        ensure!(
            !committed.is_empty() && self.tap.is_none(),
            "a tree verification needs a committed token and no feature tap"
        );
        let keep = common_prefix_len(&self.fed, committed).min(committed.len() - 1);
        self.cache.truncate(keep);
        self.fed.truncate(keep);
        let root = committed.len() - 1;
        if keep < root {
            self.target.forward_scores(&committed[keep..root], &mut self.cache, 1, None)?;
        }
        let tokens: Vec<u32> = std::iter::once(committed[root]).chain(tree.tokens()).collect();
        let mask = tree.verification_mask();
        let rows = match self.recorded.as_mut().filter(|r| tokens.len() <= r.max_rows()) {
            Some(recorded) => recorded.tree(self.target, &tokens, &mask, &mut self.cache, greedy)?,
            None => {
                let out = self.target.forward_tree(&tokens, &mask, &mut self.cache)?;
                if greedy {
                    TreeRows::Best(out.best_tokens(tokens.len()))
                } else {
                    TreeRows::Scores(out.logits_tail(tokens.len()))
                }
            }
        };
        self.fed.extend_from_slice(&committed[keep..]);
        self.fed.extend(tree.tokens());
        Ok(rows)
    }

    /// After [`Self::score_tree`] after `committed`: keeps the cache of the nodes `path`
    /// (root first) and drops the other nodes'.
    pub fn keep_path(&mut self, committed: usize, tree: &DraftTree, path: &[usize]) {
        self.cache.retain_rows(committed, path);
        self.fed.truncate(committed);
        self.fed.extend(path.iter().map(|&i| tree.node(i).candidate.token));
    }
}
