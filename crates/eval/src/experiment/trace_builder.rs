//! Draft traces of many greedy (or coupled) AR outputs at once, for [`super::replay`].
//!
//! [`TraceBuilder`] computes the looks of many prompts at once: every single-token forward of
//! a wave (trunk steps, then branch steps) goes into one ragged batch, whose rows are bitwise
//! what a forward of that row alone gives (the row-invariant kernel), so the counts are those
//! of one-at-a-time forwards, at a third of the cost. Branches are computed as deep as some
//! policy needs them: round starts depend on the trunk only, so one simulation of every
//! policy finds the branch looks a stateless policy is missing; a policy with state across
//! rounds may ask for more once earlier rounds are complete, so simulation and waves repeat
//! until no policy misses a look (then every count is exact).

use super::replay::{DraftTrace, Look, ReplayCosts, ReplayPolicy, TraceDraws};
use anyhow::{Result, ensure};
use specx_decoder::speculative::{AcceptanceHead, AcceptanceModel, DraftStats};
use specx_decoder::{KvCache, Transformer};
use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, Instant};

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
