//! Greedy replay with a live drafter: the counts of a greedy speculative run from the AR output
//! and the draft alone, for drafters whose proposals depend on their own history (EasySpec's
//! fuzzy cache and calibrations), which the trace replay ([`super::replay`]) cannot precompute.
//!
//! A greedy run commits exactly the AR output, so verification needs no target: a round
//! accepts the candidates while they equal the AR tokens and then commits the next AR token
//! (the target's argmax there). A token tree is walked the same way: at each level the child
//! that is the next AR token, if any, as greedy tree verification follows the argmax. Everything else is [`generate_speculative`]'s round as it is:
//! the same budget per round, EOS handling and rollback. `tests/eval_tiny.rs` checks the counts
//! against real runs.
//!
//! [`generate_speculative`]: specx_decoder::speculative::generate_speculative

use super::replay::ReplayCosts;
use crate::common::results::UnitFile;
use crate::method::policy::Heads;
use crate::method::{DrafterSpec, MethodSpec, SchedulerSpec};
use anyhow::{Result, ensure};
use specx_decoder::speculative::{DraftRound, DraftTree, Drafter, RequestMetrics, RoundOutcome, StopPolicy, Streams};
use specx_decoder::{SamplingConfig, Transformer};

/// How greedy verification walks down `tree` when the target's greedy tokens are `ar`: the
/// depth of the path whose tokens are a prefix of `ar` (ending at an accepted EOS), and whether
/// the walk ended on a rejection (the node reached has children and none is the next token).
fn greedy_walk(tree: &DraftTree, ar: &[u32], eos: &[u32]) -> (usize, bool) {
    let mut node = None;
    let mut depth = 0;
    loop {
        let children = tree.children(node);
        let Some(&next) = ar.get(depth) else { return (depth, false) };
        if children.is_empty() {
            return (depth, false);
        }
        let Some(&child) = children.iter().find(|&&c| tree.node(c).candidate.token == next) else {
            return (depth, true);
        };
        node = Some(child);
        depth += 1;
        if eos.contains(&next) {
            return (depth, false);
        }
    }
}

/// Whether `method` is replayed by running its drafter along the AR output: every drafter but
/// the plain chain, whose proposals the draft's traces hold.
pub fn replays_live(method: &MethodSpec) -> bool {
    !matches!(method.drafter, DrafterSpec::Plain(_))
}

/// Refuses, before any replay runs, a live setting no replay can count (DSI, whose timing is
/// no sum of forwards), and builds its parts once over `draft` and `heads`.
pub fn check_live(method: &MethodSpec, draft: &Transformer, heads: &Heads) -> Result<()> {
    ensure!(
        method.scheduler == SchedulerSpec::Sequential,
        "{}: DSI runs only for real (its timing is no sum of forwards)",
        method.key()
    );
    method.check_models(draft, heads)
}

/// Replays greedy unit `u` under `method`, its drafter over `draft` (and `earlier_outputs`, the
/// suffix drafter's corpus) and its policy's head from `heads`. The feature head, which reads
/// the target's states, is built by its caller.
pub fn replay_unit(
    method: &MethodSpec,
    draft: &Transformer,
    heads: &Heads,
    earlier_outputs: &[Vec<u32>],
    u: &UnitFile,
    eos: &[u32],
    costs: &ReplayCosts,
) -> Result<RequestMetrics> {
    let mut policy = method.build_policy(heads)?;
    let mut drafter = method.build_drafter(draft, earlier_outputs)?;
    replay_with_drafter(
        drafter.as_mut(),
        policy.as_mut(),
        &u.prompt,
        &u.ar_tokens,
        u.rows[0].max_new_tokens,
        eos,
        costs,
    )
}

/// Replays a greedy run of `drafter` under `policy` along `ar`, the target's greedy output for
/// `prompt` with a budget of `max_new` tokens (EOS included when it ended on one). The counts
/// are the real run's; `draft_time` is this replay's measured drafting time. Policies that
/// learn from round outcomes hear each round priced with `costs`.
pub fn replay_with_drafter(
    drafter: &mut dyn Drafter,
    policy: &mut dyn StopPolicy,
    prompt: &[u32],
    ar: &[u32],
    max_new: usize,
    eos: &[u32],
    costs: &ReplayCosts,
) -> Result<RequestMetrics> {
    let mut m = RequestMetrics::default();
    let Some(&first) = ar.first() else { return Ok(m) };
    let greedy = SamplingConfig::greedy();
    m.n_target_calls = 1;
    let mut committed: Vec<u32> = prompt.to_vec();
    committed.push(first);
    let mut out = 1;
    policy.begin_request();
    while out < max_new && !eos.contains(&ar[out - 1]) {
        let remaining = max_new - out;
        let max = remaining.min(policy.max_candidates());
        let calls_before = m.n_draft_calls;
        let tree = drafter.draft_tree(DraftRound {
            committed: &committed,
            prompt_len: prompt.len(),
            max,
            keep_first: false,
            policy: &mut *policy,
            sampling: &greedy,
            streams: Streams::new(0),
            eos,
            metrics: &mut m,
        })?;
        let k = tree.len();
        ensure!(tree.depth() <= max, "drafter returned {} levels of candidates (at most {max} allowed)", tree.depth());
        m.n_target_calls += 1;
        let (a, rejected) = greedy_walk(&tree, &ar[out..], eos);
        m.n_drafted += k;
        m.n_accepted += a;
        m.n_verified += a + usize::from(rejected);
        m.accepted_per_round.push(a);
        m.drafted_per_round.push(k);
        drafter.rollback(committed.len() + a);
        // The accepted candidates are AR tokens; the round then commits the next AR token,
        // unless an accepted EOS ended the output or the budget cuts it.
        let new = match ar[out..out + a].iter().position(|t| eos.contains(t)) {
            Some(i) => i + 1,
            None => (a + 1).min(remaining),
        };
        let end = out + new;
        ensure!(
            end <= ar.len(),
            "the AR output ends at {} tokens, the replay needs {end}: was it decoded with another budget?",
            ar.len()
        );
        committed.extend_from_slice(&ar[out..end]);
        out = end;
        let seconds = costs.round_seconds(m.n_draft_calls - calls_before, k);
        policy.end_round(&RoundOutcome { drafted: k, accepted: a, committed: new, seconds, ngram: tree.ngram() });
    }
    ensure!(out == ar.len(), "the replay committed {out} tokens, the AR output has {}", ar.len());
    m.n_generated = out;
    Ok(m)
}

#[cfg(test)]
mod tests {
    use super::*;
    use specx_decoder::speculative::Candidate;

    #[test]
    fn the_greedy_walk_follows_the_ar_token_down_the_tree() {
        let point = |token| Candidate { token, q: Vec::new(), q_token: 1.0, ngram: None };
        // Roots 5 and 7; under 7: 8 (with 2 under it) and 9.
        let mut t = DraftTree::default();
        t.push(point(5), None);
        let seven = t.push(point(7), None);
        let eight = t.push(point(8), Some(seven));
        t.push(point(9), Some(seven));
        t.push(point(2), Some(eight));
        assert_eq!(greedy_walk(&t, &[7, 9, 1], &[]), (2, false), "a leaf ends the walk");
        assert_eq!(greedy_walk(&t, &[7, 8, 2, 4], &[]), (3, false), "the deeper branch");
        assert_eq!(greedy_walk(&t, &[7, 3], &[]), (1, true), "no child is the AR token");
        assert_eq!(greedy_walk(&t, &[4], &[]), (0, true));
        assert_eq!(greedy_walk(&t, &[7, 8], &[7]), (1, false), "an accepted EOS ends it");
        assert_eq!(greedy_walk(&t, &[7], &[]), (1, false), "the AR output ends");
    }
}
