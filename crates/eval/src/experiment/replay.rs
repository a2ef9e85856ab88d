//! Replay of greedy runs: exact counts for any stop policy from a greedy AR output and the
//! draft alone (the target is never run).
//!
//! A greedy speculative run commits exactly the AR output, so a round that starts after `L`
//! committed tokens accepts the draft's candidates while they equal the AR tokens and then
//! commits one more AR token: where rounds start depends only on the draft's greedy tokens
//! along the AR output (the *trunk*). What the draft proposes after a mismatch (its *branch*)
//! only changes how many candidates a round drafts (the stop policy and draft EOS act there).
//!
//! The draft runs as [`specx_decoder::speculative::PlainDrafter`] does: the first forward takes the
//! prompt and the first AR token together, then one token per forward; a branch continues
//! from the trunk's cache cut back to its position. Stop decisions are taken by the very
//! policy objects live runs use ([`MethodSpec::build_policy_with`]), fed the recorded looks:
//! the draft's token and softmax statistics at each position, and each head's acceptance
//! probability for its hidden state ([`HeadBinding::Precomputed`]). Policies that learn from
//! round outcomes (HF's ROC threshold and dynamic schedule, AdaEDL, the bandit) hear the
//! replayed rounds; the bandit's reward prices them with [`ReplayCosts`].
//! [`super::trace_builder::TraceBuilder`] computes the looks the replay reads.

use crate::method::{DrafterSpec, HeadBinding, MethodSpec, PolicySpec, SchedulerSpec};
use anyhow::{Context, Result, bail, ensure};
use serde::{Deserialize, Serialize};
use specx_decoder::coupling::{Draws, coupled_pick, coupled_stream};
use specx_decoder::sampling::{SamplingConfig, argmax};
use specx_decoder::speculative::{
    Decision, DraftStats, DraftStep, HiddenState, LazyStats, RequestMetrics, RoundOutcome, StopPolicy,
};
use std::collections::{BTreeMap, HashMap};

/// What the draft proposes at one position: its token (greedy, or the coupled draw), the
/// warped probability it was drawn with and the confidence a live drafter reports for it
/// (both as [`specx_decoder::speculative::PlainDrafter`] reports them), the statistics of its
/// softmax there, and each head's acceptance probability for the hidden state of the input
/// token (the token before the proposal).
#[derive(Clone, Debug)]
pub(super) struct Look {
    pub(super) token: u32,
    pub(super) q_token: f32,
    pub(super) confidence: f32,
    pub(super) stats: DraftStats,
    pub(super) head_probs: Vec<f64>,
}

/// How a traced output was drawn, and so how the draft proposes at each of its positions:
/// greedy traces take the argmax; coupled sampled traces ([`specx_decoder::coupling`]) the
/// coupled draw with the request's seed, which a live coupled run makes with the same noise.
/// Either way speculative decoding commits the traced output whatever the stop rule, which is
/// what makes a replay exact. Independent sampled outputs cannot be replayed.
#[derive(Clone, Debug, PartialEq)]
pub struct TraceDraws {
    pub sampling: SamplingConfig,
    pub draws: Draws,
    /// The request's seed (greedy traces: unused).
    pub seed: u64,
}

impl TraceDraws {
    pub fn greedy() -> Self {
        Self { sampling: SamplingConfig::greedy(), draws: Draws::Independent, seed: 0 }
    }

    /// The draws of an eval run's unit; an error for an independent sampled unit.
    pub fn of(u: &crate::common::results::UnitFile) -> Result<Self> {
        let r = u.rows.first().context("a unit without rows")?;
        if r.greedy() {
            return Ok(Self::greedy());
        }
        ensure!(
            r.draws == Draws::Coupled,
            "{} {} ({}): a sampled output drawn independently cannot be replayed (its tokens depend on the draft); run the trace with `draws = \"coupled\"`",
            u.unit.dataset,
            u.unit.prompt_id,
            u.unit.sampling
        );
        Ok(Self {
            sampling: SamplingConfig { temperature: r.temperature, top_k: r.top_k, top_p: r.top_p },
            draws: Draws::Coupled,
            seed: super::run::request_seed(&u.unit),
        })
    }

    /// The token a model with scores `logits` draws at absolute `position`, its warped
    /// probability (1 when greedy) and the confidence a live drafter reports with it.
    pub fn pick(&self, logits: &[f32], position: usize) -> (u32, f32, f32) {
        if self.sampling.is_greedy() || self.draws == Draws::Independent {
            let token = argmax(logits);
            return (token, 1.0, specx_decoder::sampling::top_probability(logits, token));
        }
        let q = self.sampling.probabilities(logits);
        let token = coupled_pick(&q, &mut coupled_stream(self.seed, position));
        (token, q[token as usize], q[token as usize])
    }
}

/// Forward times that price a replayed round for the policies rewarded with throughput (the
/// bandit): `t_draft` per draft forward plus `t_target` per verification plus `t_row` per row
/// it checks (the candidates and the row before them; a CPU's verification cost grows with
/// them, a GPU's barely). The SpecDec++ paper's A100 times (no row term) unless the replay
/// grid says otherwise (`[costs]`).
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ReplayCosts {
    pub t_draft: f64,
    pub t_target: f64,
    #[serde(default)]
    pub t_row: f64,
}

impl Default for ReplayCosts {
    fn default() -> Self {
        let (t_draft, t_target) = crate::common::timing::PAPER_TIMES;
        Self { t_draft, t_target, t_row: 0.0 }
    }
}

impl ReplayCosts {
    /// Seconds of a round of `forwards` draft forwards that verifies `drafted` candidates.
    pub fn round_seconds(&self, forwards: usize, drafted: usize) -> f64 {
        self.t_draft * forwards as f64 + self.t_target + self.t_row * (drafted + 1) as f64
    }
}

/// A stop policy as replayed: a live policy, or SpecDec++'s oracle (Theorem 4.1: stop right
/// before every mismatch, so nothing is discarded; a round whose first proposal would
/// mismatch drafts nothing; no cap on the candidates), which needs the AR output and so
/// exists only here.
pub enum ReplayPolicy {
    Live(Box<dyn StopPolicy>),
    Oracle,
}

impl ReplayPolicy {
    /// The replay policy of a plain-drafter, sequential method; `head_index` maps head names
    /// to trace head indices.
    pub fn of(m: &MethodSpec, head_index: &HashMap<String, usize>) -> Result<Self> {
        ensure!(
            m.scheduler == SchedulerSpec::Sequential,
            "{}: DSI runs only for real: a greedy replay would give fixed K's counts and no DSI timing (the online simulator `specx dsi online` reads traces instead)",
            m.key()
        );
        ensure!(
            matches!(m.drafter, DrafterSpec::Plain(_)),
            "{}: the greedy traces hold the exact draft's proposals, and a fuzzy draft proposes other tokens",
            m.key()
        );
        Ok(match m.policy {
            PolicySpec::Oracle(_) => Self::Oracle,
            _ => Self::Live(m.build_policy_with(HeadBinding::Precomputed(head_index))?),
        })
    }

    fn begin_request(&mut self) {
        if let Self::Live(p) = self {
            p.begin_request();
        }
    }

    fn max_candidates(&self) -> usize {
        match self {
            Self::Live(p) => p.max_candidates(),
            Self::Oracle => usize::MAX,
        }
    }
}

/// The draft's looks along one greedy AR output: the trunk at every position, and the
/// branches after mismatches as deep as they were computed.
#[derive(Clone, Debug)]
pub struct DraftTrace {
    pub(super) ar: Vec<u32>,
    pub(super) eos: Vec<u32>,
    pub(super) max_new_tokens: usize,
    /// `path[j]` (1 <= j < ar.len()): the draft's look after the prompt and `ar[..j]`.
    pub(super) path: Vec<Option<Look>>,
    /// Branch looks after the mismatch at AR index `p`: `branches[p][d - 1]` is the `d`-th
    /// token the draft proposes after its mismatching proposal `path[p]`.
    pub(super) branches: BTreeMap<usize, Vec<Look>>,
    /// `target[j]`: the statistics of the target's softmax where it chose `ar[j]`, for rules
    /// that read the target at the last committed token ([`super::target_stats`]); `None`
    /// when not computed.
    pub(super) target: Option<Vec<DraftStats>>,
}

/// A labelled trunk position for an acceptance model.
#[derive(Clone, Copy, Debug)]
pub struct AcceptanceSample {
    /// The draft's statistics at the position.
    pub stats: DraftStats,
    /// Depth in its round (1-based).
    pub depth: usize,
    /// The draft's token is the target's.
    pub accepted: bool,
    /// The target's statistics at the last token committed before the round, when the trace
    /// holds them.
    pub target: Option<DraftStats>,
}

impl DraftTrace {
    /// Counts of a greedy speculative run with `policy` (timings zero), and the branch looks
    /// it would need that are not computed yet, as (mismatch index, depth). A round that
    /// needs a missing look is cut there; for a stateless policy that does not move later
    /// rounds (their starts depend on the trunk only), so one call finds every missing look.
    pub(super) fn simulate(
        &self,
        policy: &mut ReplayPolicy,
        costs: &ReplayCosts,
    ) -> Result<(RequestMetrics, Vec<(usize, usize)>)> {
        let n = self.ar.len();
        let mut c = RequestMetrics { n_generated: n, n_target_calls: usize::from(n > 0), ..Default::default() };
        let mut needs = Vec::new();
        policy.begin_request();
        let mut l = 1; // committed response tokens (the first comes from the target's prefill)
        while l < n {
            let max = (self.max_new_tokens - l).min(policy.max_candidates());
            if let ReplayPolicy::Live(p) = policy {
                if let Some(t) = &self.target {
                    p.observe_target(&t[l - 1]);
                }
                p.begin_round();
            }
            let mut mismatch: Option<usize> = None; // AR index of the first mismatch
            let (mut k, mut forwards) = (0, 0);
            loop {
                let i = k + 1;
                let look = match mismatch {
                    None => self
                        .path
                        .get(l + k)
                        .and_then(Option::as_ref)
                        .context("the AR output ends without EOS before its budget")?,
                    Some(p) => match self.branches.get(&p).and_then(|b| b.get(l + k - p - 1)) {
                        Some(look) => look,
                        None => {
                            needs.push((p, l + k - p));
                            break;
                        }
                    },
                };
                forwards += 1;
                let decision = match policy {
                    ReplayPolicy::Oracle if look.token != self.ar[l + k] => Decision::Drop,
                    ReplayPolicy::Oracle => Decision::Continue,
                    ReplayPolicy::Live(p) => p.decide(&DraftStep {
                        index: i,
                        token: look.token,
                        q_token: look.q_token,
                        confidence: look.confidence,
                        ngram: None,
                        stats: LazyStats::known(look.stats),
                        hidden: HiddenState::HeadScores(&look.head_probs),
                    })?,
                };
                if decision == Decision::Drop {
                    // The oracle looks ahead for free; a live rule spent the forward.
                    forwards -= usize::from(matches!(policy, ReplayPolicy::Oracle));
                    break;
                }
                if mismatch.is_none() && look.token != self.ar[l + k] {
                    mismatch = Some(l + k);
                }
                k = i;
                if decision == Decision::Stop || self.eos.contains(&look.token) || i >= max {
                    break;
                }
            }
            let a = mismatch.map_or(k, |p| p - l);
            c.n_target_calls += 1;
            c.n_draft_calls += forwards;
            c.n_drafted += k;
            c.n_accepted += a;
            c.n_verified += if a < k { a + 1 } else { k };
            c.accepted_per_round.push(a);
            c.drafted_per_round.push(k);
            let next = (l + a + 1).min(n);
            if let ReplayPolicy::Live(p) = policy {
                let seconds = costs.round_seconds(forwards, k);
                p.end_round(&RoundOutcome { drafted: k, accepted: a, committed: next - l, seconds, ngram: None });
            }
            l = next;
        }
        Ok((c, needs))
    }

    /// Labelled trunk positions for an acceptance model: the trunk cut into the oracle's
    /// rounds (each drafts until its first mismatch, at most `max_depth` candidates, and the
    /// next starts after the token the target commits), each position with the draft's
    /// statistics, its depth in its round, whether the draft's token is the target's and the
    /// target's statistics at the round's last committed token. A position's label is its
    /// acceptance given that the candidates before it in the round were accepted, as the
    /// product rule reads it.
    pub fn acceptance_samples(&self, max_depth: usize) -> Result<Vec<AcceptanceSample>> {
        let n = self.ar.len();
        let mut out = Vec::new();
        let mut l = 1;
        while l < n {
            let mut depth = 0;
            let target = self.target.as_ref().map(|t| t[l - 1]);
            let next = loop {
                let j = l + depth;
                if j >= n {
                    break n;
                }
                let look = self.path[j].as_ref().context("a trunk look is missing")?;
                depth += 1;
                let accepted = look.token == self.ar[j];
                out.push(AcceptanceSample { stats: look.stats, depth, accepted, target });
                if !accepted {
                    break j + 1;
                }
                if depth >= max_depth {
                    break j + 2;
                }
            };
            l = next;
        }
        Ok(out)
    }

    /// Counts of a greedy speculative run with `policy` (timings zero). Every branch look the
    /// policy needs must have been computed ([`TraceBuilder::build`] with this policy).
    pub fn replay(&self, policy: &mut ReplayPolicy, costs: &ReplayCosts) -> Result<RequestMetrics> {
        let (c, needs) = self.simulate(policy, costs)?;
        if let Some((p, d)) = needs.first() {
            bail!("the replay needs branch look {d} after the mismatch at AR index {p}, which was not computed");
        }
        Ok(c)
    }
}
