//! The sequential scheduler: draft a round, verify it in one target forward, commit, repeat.

use crate::model::Transformer;
use crate::speculative::drafter::Drafter;
use crate::speculative::metrics::RequestMetrics;
use crate::speculative::policy::{DraftStats, FixedK, RoundOutcome, StopPolicy};
use crate::speculative::round::{Committed, Generation, SpecConfig};
use crate::speculative::scorer::TargetScorer;
use crate::speculative::verifier::Verifier;
use anyhow::{Result, ensure};
use std::time::Instant;

/// Sequential speculative decoding: draft with `drafter` until `policy` stops (or EOS, or the
/// token budget), verify all candidates in one target forward with `verifier`, commit the
/// accepted prefix and the correction, roll the drafter back, repeat. When every candidate is
/// accepted, the target's scores at the next position are already known, and that position's
/// token (the "bonus") is decided without another target call; so is the first token, from
/// the prefill.
pub fn generate_speculative(
    target: &Transformer,
    drafter: &mut dyn Drafter,
    policy: &mut dyn StopPolicy,
    verifier: &mut dyn Verifier,
    prompt: &[u32],
    cfg: &SpecConfig,
    eos: &[u32],
) -> Result<Generation> {
    ensure!(!prompt.is_empty(), "the prompt is empty");
    let t0 = Instant::now();
    let mut m = RequestMetrics::default();
    let mut c = Committed::new(prompt, cfg, eos, &*verifier);
    let tap = drafter.feature_tap();
    // Where every decision is the target's greedy token and nothing else reads the target's
    // scores, the calls return each row's argmax (computed on a GPU), not the rows.
    let best_only = verifier.decides_by_argmax(&cfg.sampling) && !policy.reads_target() && tap.is_none();
    let mut scorer = TargetScorer::new(target).with_tap(tap);
    policy.begin_request();
    // The target's scores (or greedy token) at the next position, when known without a
    // verification.
    let mut known = match (c.finished, best_only) {
        (true, _) => None,
        (false, true) => Some(Known::Best(best(&mut scorer, &c.seq, 1, &mut m)?[0])),
        (false, false) => Some(Known::Row(score(&mut scorer, &c.seq, 1, &mut m)?.remove(0))),
    };
    while !c.finished {
        match known.take() {
            Some(Known::Row(p)) => {
                decide_known(drafter, verifier, &mut c, &p, &mut m)?;
                observe_target(policy, &p, &c.seq);
                continue;
            }
            Some(Known::Best(token)) => {
                c.push(token);
                continue;
            }
            None => {}
        }
        let round_start = Instant::now();
        let max = c.remaining().min(policy.max_candidates());
        let tree = drafter.draft_tree(c.draft_round(&c.seq, max, false, policy, &mut m))?;
        ensure!(tree.depth() <= max, "drafter returned {} levels of candidates (at most {max} allowed)", tree.depth());
        let (k, base, before) = (tree.len(), c.seq.len(), c.generated());
        let ngram = tree.ngram();
        // One target forward over the committed tokens its cache lacks plus the candidates
        // (none when the policy dropped the first: a plain target step); a tree's in one tree
        // call, of which the cache keeps the accepted path.
        verifier.check_tree(&tree, c.sampling())?;
        let mut scores = if tree.is_chain() {
            let mut input = c.seq.clone();
            input.extend(tree.tokens());
            if best_only {
                Scores::Best(best(&mut scorer, &input, k + 1, &mut m)?)
            } else {
                Scores::Rows(score(&mut scorer, &input, k + 1, &mut m)?)
            }
        } else if best_only {
            Scores::Best(target_call(&mut m, || scorer.score_tree_best(&c.seq, &tree))?)
        } else {
            Scores::Rows(target_call(&mut m, || scorer.score_tree(&c.seq, &tree))?)
        };
        let (decided, path) = match &scores {
            Scores::Rows(rows) => c.decide_tree(verifier, &tree, rows),
            Scores::Best(best) => c.decide_tree_best(&tree, best),
        };
        if !tree.is_chain() {
            scorer.keep_path(base, &tree, &path);
        }
        m.n_drafted += k;
        m.record_round(k, decided);
        // The scores after the last accepted node: where the correction was drawn, or the
        // bonus position's.
        let last = path.last().map_or(0, |n| n + 1);
        if let (true, Scores::Rows(rows)) = (decided.corrected, &scores) {
            observe_target(policy, &rows[last], &c.seq);
        }
        // The drafter keeps the positions of committed tokens only.
        drafter.rollback(base + decided.accepted);
        if !decided.corrected && !c.finished {
            known = Some(match &mut scores {
                Scores::Rows(rows) => Known::Row(rows.swap_remove(last)),
                Scores::Best(best) => Known::Best(best[last]),
            });
        }
        // Committed by the round: the accepted candidates and the correction, or the bonus
        // decided next from `known`.
        let committed = c.generated() - before + usize::from(known.is_some());
        policy.end_round(&RoundOutcome {
            drafted: k,
            accepted: decided.accepted,
            committed,
            seconds: round_start.elapsed().as_secs_f64(),
            ngram,
        });
    }
    m.n_generated = c.generated();
    m.total_time = t0.elapsed();
    Ok(Generation { tokens: c.tokens().to_vec(), metrics: m })
}

/// What a verification call read back: every row's scores, or only each row's greedy token
/// (where every decision is the argmax and nothing else reads the scores).
enum Scores {
    Rows(Vec<Vec<f32>>),
    Best(Vec<u32>),
}

/// The next position's target scores, or its greedy token, known without a verification.
enum Known {
    Row(Vec<f32>),
    Best(u32),
}

/// Tells a rule that reads them the statistics of the target's scores `row` that gave the
/// last token of `seq` (a correction, a bonus token, or the first token).
fn observe_target(policy: &mut dyn StopPolicy, row: &[f32], seq: &[u32]) {
    if let (true, Some(&token)) = (policy.reads_target(), seq.last()) {
        policy.observe_target(&DraftStats::of(row, token));
    }
}

/// One target forward through the scorer, counted.
fn score(scorer: &mut TargetScorer, tokens: &[u32], rows: usize, m: &mut RequestMetrics) -> Result<Vec<Vec<f32>>> {
    target_call(m, || Ok(scorer.score(tokens, rows, None)?.expect("no cancel flag, never cancelled")))
}

/// [`score`]'s greedy tokens, decided where the logits are ([`TargetScorer::score_best`]).
fn best(scorer: &mut TargetScorer, tokens: &[u32], rows: usize, m: &mut RequestMetrics) -> Result<Vec<u32>> {
    target_call(m, || Ok(scorer.score_best(tokens, rows, None)?.expect("no cancel flag, never cancelled")))
}

/// One target call, counted and timed.
fn target_call<T>(m: &mut RequestMetrics, call: impl FnOnce() -> Result<T>) -> Result<T> {
    let t = Instant::now();
    let out = call()?;
    m.target_time += t.elapsed();
    m.n_target_calls += 1;
    Ok(out)
}

/// Commits the token at a position whose target scores `p` are known (the prefill's last row,
/// or the extra row of a fully accepted round). Greedy: the target's argmax, what any proposal
/// would be decided to; coupled draws: the target's own draw, likewise. Independent sampling:
/// the drafter proposes a token there from the position's draft stream and the verifier
/// decides it against `p`, exactly as DSI decides that position (for DSI it is always a
/// drafted and verified candidate). Rejection sampling makes the token distributed as `p` for
/// any proposal, so this is as lossless as drawing from `p` directly, and it gives the same
/// token as DSI for the same seed; it costs one single-token draft forward per fully accepted
/// round (not counted as drafted: no target call verifies it).
fn decide_known(
    drafter: &mut dyn Drafter,
    verifier: &mut dyn Verifier,
    c: &mut Committed,
    p: &[f32],
    m: &mut RequestMetrics,
) -> Result<()> {
    if let Some(token) = c.known_token(p) {
        c.push(token);
        return Ok(());
    }
    let proposal = drafter.draft(c.draft_round(&c.seq, 1, true, &mut FixedK(1), m))?;
    ensure!(proposal.len() == 1, "drafter returned {} candidates (1 asked)", proposal.len());
    c.decide(verifier, &proposal, &[p]);
    Ok(())
}
