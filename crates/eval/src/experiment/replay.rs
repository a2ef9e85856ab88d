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
//!
//! [`TraceBuilder`] computes the looks of many prompts at once: every single-token forward of
//! a wave (trunk steps, then branch steps) goes into one ragged batch, whose rows are bitwise
//! what a forward of that row alone gives (the row-invariant kernel), so the counts are those
//! of one-at-a-time forwards, at a third of the cost. Branches are computed as deep as some
//! policy needs them: round starts depend on the trunk only, so one simulation of every
//! policy finds the branch looks a stateless policy is missing; a policy with state across
//! rounds may ask for more once earlier rounds are complete, so simulation and waves repeat
//! until no policy misses a look (then every count is exact).

use crate::method::{DrafterSpec, HeadBinding, MethodSpec, PolicySpec, SchedulerSpec};
use anyhow::{Context, Result, bail, ensure};
use serde::{Deserialize, Serialize};
use specx_decoder::coupling::{Draws, coupled_pick, coupled_stream};
use specx_decoder::sampling::{SamplingConfig, argmax};
use specx_decoder::speculative::{
    AcceptanceHead, AcceptanceModel, Decision, DraftStats, DraftStep, HiddenState, LazyStats, RequestMetrics,
    RoundOutcome, StopPolicy,
};
use specx_decoder::{KvCache, Transformer};
use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::time::{Duration, Instant};

/// What the draft proposes at one position: its token (greedy, or the coupled draw), the
/// warped probability it was drawn with and the confidence a live drafter reports for it
/// (both as [`specx_decoder::speculative::PlainDrafter`] reports them), the statistics of its
/// softmax there, and each head's acceptance probability for the hidden state of the input
/// token (the token before the proposal).
#[derive(Clone, Debug)]
struct Look {
    token: u32,
    q_token: f32,
    confidence: f32,
    stats: DraftStats,
    head_probs: Vec<f64>,
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
    ar: Vec<u32>,
    eos: Vec<u32>,
    max_new_tokens: usize,
    /// `path[j]` (1 <= j < ar.len()): the draft's look after the prompt and `ar[..j]`.
    path: Vec<Option<Look>>,
    /// Branch looks after the mismatch at AR index `p`: `branches[p][d - 1]` is the `d`-th
    /// token the draft proposes after its mismatching proposal `path[p]`.
    branches: BTreeMap<usize, Vec<Look>>,
    /// `target[j]`: the statistics of the target's softmax where it chose `ar[j]`, for rules
    /// that read the target at the last committed token ([`super::target_stats`]); `None`
    /// when not computed.
    target: Option<Vec<DraftStats>>,
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
    fn simulate(
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

/// One AR output to trace: the prompt, the output, its new-token budget and how it was drawn.
pub struct TraceInput<'a> {
    pub prompt: &'a [u32],
    pub ar: &'a [u32],
    pub max_new_tokens: usize,
    pub draws: TraceDraws,
}

impl<'a> TraceInput<'a> {
    /// The AR output of an eval run's unit (greedy, or sampled with coupled draws), with the
    /// unit's budget.
    pub fn of(u: &'a crate::common::results::UnitFile) -> Result<Self> {
        Ok(Self {
            prompt: &u.prompt,
            ar: &u.ar_tokens,
            max_new_tokens: u.rows[0].max_new_tokens,
            draws: TraceDraws::of(u)?,
        })
    }
}

/// Computes draft traces with batched forwards.
pub struct TraceBuilder<'a> {
    draft: &'a Transformer,
    heads: &'a [AcceptanceHead],
    eos: &'a [u32],
    /// Most rows in one wave (bounds the branch caches alive at once).
    pub max_rows: usize,
    /// Draft rows forwarded (one per look) and forward calls, and their time.
    pub rows: usize,
    pub calls: usize,
    pub time: Duration,
    /// Advanced by every row forwarded (long replays show their pace).
    pub progress: Option<indicatif::ProgressBar>,
}

/// A trace being built: its caches (the trunk's, and one per growing branch).
struct Building {
    trace: DraftTrace,
    prompt_len: usize,
    draws: TraceDraws,
    trunk: Option<KvCache>,
    /// Next trunk index to feed (`ar[j]` gives `path[j + 1]`).
    next: usize,
    /// Growing branches: mismatch index -> (cache, token to feed next, the statistics of the
    /// look that proposed it).
    open: BTreeMap<usize, (KvCache, u32, DraftStats)>,
}

impl<'a> TraceBuilder<'a> {
    pub fn new(draft: &'a Transformer, heads: &'a [AcceptanceHead], eos: &'a [u32]) -> Self {
        Self { draft, heads, eos, max_rows: 64, rows: 0, calls: 0, time: Duration::ZERO, progress: None }
    }

    /// One forward call of `rows` rows done.
    fn counted(&mut self, rows: usize) {
        self.rows += rows;
        self.calls += 1;
        if let Some(p) = &self.progress {
            p.inc(rows as u64);
        }
    }

    /// A look from a row's logits and hidden state; `input` are the statistics of the look
    /// that proposed this row's input token (what a head reading them scores it with: the
    /// replay consults a look's scores only at a round's second candidate or later, whose
    /// input was proposed by the round's previous look, this one).
    fn look(
        &self,
        logits: &[f32],
        hidden: &[f32],
        input: Option<&DraftStats>,
        draws: &TraceDraws,
        position: usize,
    ) -> Result<Look> {
        let score = |h: &AcceptanceHead| match (h.reads_draft_stats(), input) {
            (false, _) => h.accept_probability(hidden),
            (true, Some(s)) => {
                h.accept_probability(&hidden.iter().copied().chain(s.head_inputs()).collect::<Vec<f32>>())
            }
            // The round's first look (after the prefill) is never scored.
            (true, None) => Ok(f64::NAN),
        };
        let head_probs = self.heads.iter().map(score).collect::<Result<Vec<f64>>>()?;
        let (token, q_token, confidence) = draws.pick(logits, position);
        Ok(Look { token, q_token, confidence, stats: DraftStats::of(logits, token), head_probs })
    }

    /// One ragged forward of single tokens, each with its own cache (`inputs`: the statistics
    /// of the look that proposed each row's token; `at`: how its trace was drawn and the
    /// absolute position of the proposal); a look per row.
    fn wave(
        &mut self,
        rows: &mut [(&[u32], &mut KvCache)],
        inputs: &[DraftStats],
        at: &[(TraceDraws, usize)],
    ) -> Result<Vec<Look>> {
        let t = Instant::now();
        let hidden = self.draft.forward_ragged(rows)?;
        let h = hidden.dims()[1];
        let logits = self.draft.logits_ragged(hidden.clone());
        let hidden: Vec<f32> =
            hidden.into_data().try_to_vec::<f32>().map_err(|e| anyhow::anyhow!("draft hidden states: {e:?}"))?;
        let looks = logits
            .iter()
            .enumerate()
            .map(|(i, l)| self.look(l, &hidden[i * h..(i + 1) * h], Some(&inputs[i]), &at[i].0, at[i].1))
            .collect::<Result<Vec<_>>>()?;
        self.counted(rows.len());
        self.time += t.elapsed();
        Ok(looks)
    }

    /// Traces of `inputs`, with every branch look that `policies` need.
    pub fn build(
        &mut self,
        inputs: &[TraceInput],
        policies: &mut [ReplayPolicy],
        costs: &ReplayCosts,
    ) -> Result<Vec<DraftTrace>> {
        let mut set = self.start(inputs, false)?;
        self.complete(&mut set, policies, costs)?;
        Ok(set.b.into_iter().map(|x| x.trace).collect())
    }

    /// The trunks of `inputs` (every look along the AR outputs), no branch yet. With
    /// `keep_trunks` the trunks' caches stay alive so that later [`Self::complete`] calls can grow
    /// branches for other policies (a search over parameters); else a trace's caches are
    /// dropped once the policies of its first completion need nothing more.
    pub fn start(&mut self, inputs: &[TraceInput], keep_trunks: bool) -> Result<TraceSet> {
        let mut b: Vec<Building> = inputs
            .iter()
            .map(|i| {
                ensure!(!i.prompt.is_empty(), "empty prompt");
                ensure!(
                    i.ar.len() <= i.max_new_tokens,
                    "AR output of {} tokens exceeds its budget of {}",
                    i.ar.len(),
                    i.max_new_tokens
                );
                Ok(Building {
                    trace: DraftTrace {
                        ar: i.ar.to_vec(),
                        eos: self.eos.to_vec(),
                        max_new_tokens: i.max_new_tokens,
                        path: vec![None; i.ar.len()],
                        branches: BTreeMap::new(),
                        target: None,
                    },
                    prompt_len: i.prompt.len(),
                    draws: i.draws.clone(),
                    trunk: None,
                    next: 1,
                    open: BTreeMap::new(),
                })
            })
            .collect::<Result<_>>()?;
        // The trunk: the first forward takes the prompt and ar[0] (alone, as the live drafter
        // does), then one token per forward, batched over prompts.
        for (x, input) in b.iter_mut().zip(inputs) {
            if input.ar.len() < 2 {
                continue;
            }
            let t = Instant::now();
            let mut cache = self.draft.new_cache(1);
            let first: Vec<u32> = input.prompt.iter().copied().chain([input.ar[0]]).collect();
            let out = self.draft.forward(&first, &mut cache)?;
            let look = self.look(
                &out.logits_tail(1).remove(0),
                &out.hidden_tail(1).remove(0),
                None,
                &input.draws,
                input.prompt.len() + 1,
            )?;
            self.counted(1);
            self.time += t.elapsed();
            x.trace.path[1] = Some(look);
            x.trunk = Some(cache);
        }
        loop {
            let mut live: Vec<&mut Building> = b.iter_mut().filter(|x| x.next + 1 < x.trace.ar.len()).collect();
            if live.is_empty() {
                break;
            }
            for chunk in live.chunks_mut(self.max_rows) {
                let tokens: Vec<[u32; 1]> = chunk.iter().map(|x| [x.trace.ar[x.next]]).collect();
                let inputs: Vec<DraftStats> = chunk
                    .iter()
                    .map(|x| x.trace.path[x.next].as_ref().expect("the previous trunk look").stats)
                    .collect();
                let at: Vec<(TraceDraws, usize)> =
                    chunk.iter().map(|x| (x.draws.clone(), x.prompt_len + x.next + 1)).collect();
                let mut rows: Vec<(&[u32], &mut KvCache)> = chunk
                    .iter_mut()
                    .zip(&tokens)
                    .map(|(x, t)| (&t[..], x.trunk.as_mut().expect("trunk started")))
                    .collect();
                let looks = self.wave(&mut rows, &inputs, &at)?;
                for (x, look) in chunk.iter_mut().zip(looks) {
                    x.next += 1;
                    x.trace.path[x.next] = Some(look);
                }
            }
        }
        Ok(TraceSet { b, keep_trunks })
    }

    /// Grows the branches of `set` until every look `policies` need is computed.
    pub fn complete(&mut self, set: &mut TraceSet, policies: &mut [ReplayPolicy], costs: &ReplayCosts) -> Result<()> {
        let (b, keep_trunks) = (&mut set.b, set.keep_trunks);
        // Branches: each wave extends every needed branch by one token (the lowest mismatch
        // indices first when more than `max_rows` are needed); caches of finished branches
        // and of finished traces are dropped.
        loop {
            let mut wanted: Vec<(usize, usize)> = Vec::new(); // (trace, mismatch index)
            for (ti, x) in b.iter_mut().enumerate() {
                let mut need: BTreeSet<usize> = BTreeSet::new();
                for p in policies.iter_mut() {
                    need.extend(x.trace.simulate(p, costs)?.1.into_iter().map(|(p, _)| p));
                }
                x.open.retain(|p, _| need.contains(p));
                if need.is_empty() && !keep_trunks {
                    x.trunk = None;
                }
                wanted.extend(need.into_iter().map(|p| (ti, p)));
            }
            if wanted.is_empty() {
                break;
            }
            wanted.truncate(self.max_rows);
            for &(ti, p) in &wanted {
                let x = &mut b[ti];
                if !x.open.contains_key(&p) {
                    let mut cache = x.trunk.as_ref().expect("a trace with needs keeps its trunk").clone();
                    cache.truncate(x.prompt_len + p);
                    let first = x.trace.path[p].as_ref().expect("mismatches are on the trunk");
                    // A branch whose cache was dropped earlier grows on: its proposals are fed
                    // again one token per forward, as they were when it grew.
                    let mut next = (first.token, first.stats);
                    for look in x.trace.branches.get(&p).into_iter().flatten() {
                        let t = Instant::now();
                        self.draft.forward(&[next.0], &mut cache)?;
                        self.counted(1);
                        self.time += t.elapsed();
                        next = (look.token, look.stats);
                    }
                    x.open.insert(p, (cache, next.0, next.1));
                }
            }
            // Borrow each wanted branch's cache mutably (distinct (trace, p) pairs).
            let mut slots: Vec<(usize, usize, [u32; 1], KvCache)> = Vec::with_capacity(wanted.len());
            let mut inputs = Vec::with_capacity(wanted.len());
            let mut at = Vec::with_capacity(wanted.len());
            for &(ti, p) in &wanted {
                let (cache, next, stats) = b[ti].open.remove(&p).expect("just opened");
                slots.push((ti, p, [next], cache));
                inputs.push(stats);
                // The branch's next look is its (len + 1)-th proposal after the mismatch at p.
                let depth = b[ti].trace.branches.get(&p).map_or(0, Vec::len) + 1;
                at.push((b[ti].draws.clone(), b[ti].prompt_len + p + depth));
            }
            let looks = {
                let mut rows: Vec<(&[u32], &mut KvCache)> = slots.iter_mut().map(|(_, _, t, c)| (&t[..], c)).collect();
                self.wave(&mut rows, &inputs, &at)?
            };
            for ((ti, p, _, cache), look) in slots.into_iter().zip(looks) {
                let x = &mut b[ti];
                x.open.insert(p, (cache, look.token, look.stats));
                x.trace.branches.entry(p).or_default().push(look);
            }
        }
        Ok(())
    }
}

/// Draft traces being built ([`TraceBuilder::start`]), with the caches that grow their branches.
pub struct TraceSet {
    b: Vec<Building>,
    keep_trunks: bool,
}

impl TraceSet {
    /// The traces as computed so far, in input order.
    pub fn traces(&self) -> impl Iterator<Item = &DraftTrace> {
        self.b.iter().map(|x| &x.trace)
    }

    /// The trace of input `i`.
    pub fn trace(&self, i: usize) -> &DraftTrace {
        &self.b[i].trace
    }

    pub fn len(&self) -> usize {
        self.b.len()
    }

    pub fn is_empty(&self) -> bool {
        self.b.is_empty()
    }

    /// Gives trace `i` the target's statistics at each of its AR tokens.
    pub fn set_target(&mut self, i: usize, stats: Vec<DraftStats>) -> Result<()> {
        let t = &mut self.b[i].trace;
        ensure!(
            stats.len() == t.ar.len(),
            "target statistics for {} tokens, the trace has {}",
            stats.len(),
            t.ar.len()
        );
        t.target = Some(stats);
        Ok(())
    }
}
