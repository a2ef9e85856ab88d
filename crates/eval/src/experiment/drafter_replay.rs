//! Greedy replay with a live drafter: the counts of a greedy speculative run from the AR output
//! and the draft alone, for drafters whose proposals depend on their own history (EasySpec's
//! fuzzy cache and calibrations), which the trace replay ([`super::replay`]) cannot precompute.
//!
//! A greedy run commits exactly the AR output, so verification needs no target: a round
//! accepts the candidates while they equal the AR tokens and then commits the next AR token
//! (the target's argmax there). Everything else is [`generate_speculative`]'s round as it is:
//! the same budget per round, EOS handling and rollback. `tests/eval_tiny.rs` checks the counts
//! against real runs.
//!
//! [`generate_speculative`]: specx_decoder::speculative::generate_speculative

use super::replay::ReplayCosts;
use anyhow::{Result, ensure};
use specx_decoder::SamplingConfig;
use specx_decoder::speculative::{DraftRound, Drafter, RequestMetrics, RoundOutcome, StopPolicy, Streams};

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
        let candidates = drafter.draft(DraftRound {
            committed: &committed,
            max,
            keep_first: false,
            policy: &mut *policy,
            sampling: &greedy,
            streams: Streams::new(0),
            eos,
            metrics: &mut m,
        })?;
        let k = candidates.len();
        ensure!(k <= max, "drafter returned {k} candidates (at most {max} allowed)");
        m.n_target_calls += 1;
        let a = candidates.iter().zip(&ar[out..]).take_while(|(c, t)| c.token == **t).count();
        m.n_drafted += k;
        m.n_accepted += a;
        m.n_verified += if a < k { a + 1 } else { k };
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
        policy.end_round(&RoundOutcome {
            drafted: k,
            accepted: a,
            committed: new,
            seconds,
            ngram: candidates.first().and_then(|c| c.ngram),
        });
    }
    ensure!(out == ar.len(), "the replay committed {out} tokens, the AR output has {}", ar.len());
    m.n_generated = out;
    Ok(m)
}
