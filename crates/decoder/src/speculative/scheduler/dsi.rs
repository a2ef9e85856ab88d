//! DSI's scheduler (speculation parallelism, `../shared/papers/dsi.txt`): drafting never waits
//! for verification. The drafter drafts block after block; each block goes to one of
//! `servers` target workers as a verification task (a target forward over the block and the
//! uncommitted prefix before it) while drafting goes on. Decisions are taken in position
//! order by this coordinator with the same [`Verifier`] as sequential decoding, so the
//! output is distributed exactly as the target's; a rejection commits the correction and
//! preempts every task and draft that depended on the rejected token (workers check a
//! cancel flag between layers), and drafting restarts from the corrected prefix.
//!
//! - Workers are threads, each owning its own KV cache over the shared weights; a worker keeps
//!   the longest common prefix of its cache with a task's tokens and forwards only the rest.
//! - Randomness per position ([`crate::speculative::Streams`]): the proposal at position `i` and the decision
//!   there draw from streams keyed by (seed, i, role), so a run's output depends neither on
//!   thread timing nor on where blocks end, and equals the sequential scheduler's.
//! - The first token is a verified draft too (the first task is the prompt's prefill plus the
//!   first block), as in the paper's Algorithm 1.
//! - Where every decision is the target's greedy token (greedy sampling under an exact
//!   verifier, no feature tap), a worker returns each row's argmax instead of the row
//!   ([`TargetScorer::score_best`]: on a GPU the token ids come back, not vocabulary rows).

use crate::model::Transformer;
use crate::speculative::candidate::Candidate;
use crate::speculative::drafter::Drafter;
use crate::speculative::feature_draft::tap::FeatureTap;
use crate::speculative::metrics::RequestMetrics;
use crate::speculative::policy::{RoundOutcome, StopPolicy};
use crate::speculative::round::{Committed, Generation, SpecConfig};
use crate::speculative::scorer::{TargetScorer, common_prefix_len};
use crate::speculative::verifier::Verifier;
use anyhow::{Result, anyhow, bail, ensure};
use serde::{Deserialize, Serialize};
use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, mpsc};
use std::time::{Duration, Instant};

/// How DSI runs.
#[derive(Clone, Debug)]
pub struct DsiConfig {
    /// Target workers (the speculation-parallelism degree, SP).
    pub servers: usize,
    /// Draft tokens per verification task; the stop policy may end a block earlier.
    pub lookahead: usize,
    /// Whether a rejection preempts the tasks that depend on it. Only the test that shows the
    /// scheduler is not lossless without preemption turns it off.
    #[doc(hidden)]
    pub preempt: bool,
}

impl DsiConfig {
    pub fn new(servers: usize, lookahead: usize) -> Self {
        Self { servers, lookahead, preempt: true }
    }
}

/// The paper's Eq. 1: the smallest lookahead k with servers >= ceil(t_target / (k t_draft)),
/// so that a verification task never waits for a free target worker.
pub fn lookahead_for(servers: usize, t_target: f64, t_draft: f64) -> usize {
    assert!(servers >= 1 && t_target > 0.0 && t_draft > 0.0, "lookahead_for needs servers >= 1 and positive times");
    (1..).find(|&k| servers as f64 >= (t_target / (k as f64 * t_draft)).ceil()).expect("a large enough k exists")
}

/// What the scheduler did besides the request's metrics.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct DsiStats {
    /// Verification tasks submitted (each one target forward, started or not).
    pub tasks: usize,
    /// Tasks preempted (before or during their forward).
    pub preempted: usize,
    /// Tasks that finished but whose result was never decided on (their prefix had been
    /// rejected, or the generation had ended).
    pub stale: usize,
    /// Times a drafted block waited for a free worker.
    pub waits: usize,
    /// Busy time of each worker, seconds.
    pub worker_busy_s: Vec<f64>,
    /// Seconds during which two or more workers were verifying at once: DSI's parallelism,
    /// measured (0 when the workers took turns).
    #[serde(default)]
    pub concurrent_s: f64,
}

impl DsiStats {
    /// Adds another request's counters, worker by worker (the turns of one conversation).
    pub fn add(&mut self, o: &DsiStats) {
        self.tasks += o.tasks;
        self.preempted += o.preempted;
        self.stale += o.stale;
        self.waits += o.waits;
        self.concurrent_s += o.concurrent_s;
        if self.worker_busy_s.len() < o.worker_busy_s.len() {
            self.worker_busy_s.resize(o.worker_busy_s.len(), 0.0);
        }
        for (a, b) in self.worker_busy_s.iter_mut().zip(&o.worker_busy_s) {
            *a += b;
        }
    }
}

/// A DSI generation: tokens and metrics as for every method (`target_time` is the workers'
/// busy time summed, which can exceed the wall time), plus the scheduler's own counters.
#[derive(Clone, Debug)]
pub struct DsiGeneration {
    pub generation: Generation,
    pub stats: DsiStats,
}

struct Task {
    id: u64,
    tokens: Arc<Vec<u32>>,
    rows: usize,
    cancel: Arc<AtomicBool>,
}

/// What a verification task returns: every row's logits, or every row's greedy token where
/// the decisions need nothing else.
enum Verified {
    Rows(Vec<Vec<f32>>),
    Best(Vec<u32>),
}

enum Reply {
    Done { worker: usize, id: u64, rows: Verified, span: Span },
    Preempted { worker: usize, span: Span },
    Failed { worker: usize, error: String },
}

/// When a worker started and finished one task.
type Span = (Instant, Instant);

/// Seconds covered by two or more of `spans` at once (each worker's own spans never overlap,
/// so this is the time at least two workers were busy together).
fn concurrent_seconds(spans: &[Span]) -> f64 {
    let mut events: Vec<(Instant, i32)> = spans.iter().flat_map(|&(a, b)| [(a, 1), (b, -1)]).collect();
    // Ends before starts at the same instant: touching spans do not overlap.
    events.sort_by_key(|&(t, delta)| (t, delta));
    let (mut active, mut total, mut since) = (0, Duration::ZERO, None);
    for (t, delta) in events {
        if active >= 2 {
            total += t - since.unwrap_or(t);
        }
        active += delta;
        since = Some(t);
    }
    total.as_secs_f64()
}

/// A target worker: its own scorer (cache), tasks in arrival order, each verified for its rows
/// or (`best_only`) their greedy tokens.
fn worker_loop(
    target: &Transformer,
    worker: usize,
    tap: Option<FeatureTap>,
    best_only: bool,
    tasks: mpsc::Receiver<Task>,
    replies: mpsc::Sender<Reply>,
) {
    let mut scorer = TargetScorer::new(target).with_tap(tap);
    for task in tasks {
        let t = Instant::now();
        if task.cancel.load(Ordering::Relaxed) {
            let _ = replies.send(Reply::Preempted { worker, span: (t, Instant::now()) });
            continue;
        }
        let cancel = Some(&*task.cancel);
        let verified = if best_only {
            scorer.score_best(&task.tokens, task.rows, cancel).map(|b| b.map(Verified::Best))
        } else {
            scorer.score(&task.tokens, task.rows, cancel).map(|r| r.map(Verified::Rows))
        };
        let reply = match verified {
            Ok(Some(rows)) => Reply::Done { worker, id: task.id, rows, span: (t, Instant::now()) },
            Ok(None) => Reply::Preempted { worker, span: (t, Instant::now()) },
            Err(e) => Reply::Failed { worker, error: format!("{e:#}") },
        };
        if replies.send(reply).is_err() {
            return;
        }
    }
}

/// A drafted block: candidates `start..start + len` (absolute positions) of the chain.
struct Block {
    start: usize,
    len: usize,
    /// The task's input (prompt, committed and speculative tokens up to the block's end).
    tokens: Arc<Vec<u32>>,
    task: Option<u64>,
    rows: Option<Verified>,
    cancel: Arc<AtomicBool>,
}

struct Coordinator<'a> {
    drafter: &'a mut dyn Drafter,
    policy: &'a mut dyn StopPolicy,
    verifier: &'a mut dyn Verifier,
    dsi: &'a DsiConfig,
    /// Prompt and committed tokens.
    committed: Committed<'a>,
    /// Speculative candidates after the committed tokens, block after block.
    chain: Vec<Candidate>,
    blocks: VecDeque<Block>,
    task_txs: Vec<mpsc::Sender<Task>>,
    free: Vec<bool>,
    /// Tokens of each worker's last finished task (its cache holds them).
    worker_tokens: Vec<Arc<Vec<u32>>>,
    next_id: u64,
    last_decision: Instant,
    m: RequestMetrics,
    stats: DsiStats,
    /// Every task's span, for [`DsiStats::concurrent_s`].
    spans: Vec<Span>,
}

impl Coordinator<'_> {
    fn chain_ended(&self) -> bool {
        self.chain.last().is_some_and(|c| self.committed.eos().contains(&c.token))
            || self.chain.len() >= self.committed.remaining()
    }

    fn unsubmitted(&self) -> bool {
        self.blocks.back().is_some_and(|b| b.task.is_none())
    }

    fn on_reply(&mut self, r: Reply) -> Result<()> {
        match r {
            Reply::Done { worker, id, rows, span } => {
                self.release(worker, span);
                match self.blocks.iter_mut().find(|b| b.task == Some(id)) {
                    Some(b) => {
                        self.worker_tokens[worker] = b.tokens.clone();
                        b.rows = Some(rows);
                    }
                    None => self.stats.stale += 1,
                }
            }
            Reply::Preempted { worker, span } => {
                self.release(worker, span);
                self.stats.preempted += 1;
            }
            Reply::Failed { worker, error } => bail!("target worker {worker}: {error}"),
        }
        Ok(())
    }

    fn release(&mut self, worker: usize, span: Span) {
        let busy = span.1 - span.0;
        self.spans.push(span);
        self.free[worker] = true;
        self.stats.worker_busy_s[worker] += busy.as_secs_f64();
        self.m.target_time += busy;
    }

    /// Sends the drafted, unsubmitted block to the free worker whose cache shares the longest
    /// prefix with it.
    fn submit_pending(&mut self) -> Result<()> {
        let Some(block) = self.blocks.back_mut().filter(|b| b.task.is_none()) else { return Ok(()) };
        let Some(worker) = (0..self.free.len())
            .filter(|&w| self.free[w])
            .max_by_key(|&w| (common_prefix_len(&self.worker_tokens[w], &block.tokens), usize::MAX - w))
        else {
            return Ok(());
        };
        let id = self.next_id;
        self.next_id += 1;
        let task = Task { id, tokens: block.tokens.clone(), rows: block.len + 1, cancel: block.cancel.clone() };
        self.task_txs[worker].send(task).map_err(|_| anyhow!("target worker {worker} is gone"))?;
        block.task = Some(id);
        self.free[worker] = false;
        self.stats.tasks += 1;
        self.m.n_target_calls += 1;
        Ok(())
    }

    fn draft_block(&mut self) -> Result<()> {
        let remaining = self.committed.remaining() - self.chain.len();
        let max = remaining.min(self.dsi.lookahead).min(self.policy.max_candidates());
        let start = self.committed.seq.len() + self.chain.len();
        let mut context = self.committed.seq.clone();
        context.extend(self.chain.iter().map(|c| c.token));
        let candidates =
            self.drafter.draft(self.committed.draft_round(&context, max, true, self.policy, &mut self.m))?;
        ensure!(
            !candidates.is_empty() && candidates.len() <= max,
            "drafter returned {} candidates (1..={max} allowed)",
            candidates.len()
        );
        self.m.n_drafted += candidates.len();
        context.extend(candidates.iter().map(|c| c.token));
        self.blocks.push_back(Block {
            start,
            len: candidates.len(),
            tokens: Arc::new(context),
            task: None,
            rows: None,
            cancel: Arc::new(AtomicBool::new(false)),
        });
        self.chain.extend(candidates);
        if self.free.iter().all(|f| !f) {
            self.stats.waits += 1;
        }
        Ok(())
    }

    /// Cancels every outstanding block; a result already in but never decided counts as stale.
    fn preempt_all(&mut self) {
        for b in self.blocks.drain(..) {
            b.cancel.store(true, Ordering::Relaxed);
            if b.rows.is_some() {
                self.stats.stale += 1;
            }
        }
        self.chain.clear();
    }

    /// Decides the oldest blocks whose results are in, in position order.
    fn decide(&mut self) -> Result<()> {
        while !self.committed.finished {
            let Some(rows) = self.blocks.front_mut().and_then(|b| b.rows.take()) else { return Ok(()) };
            let block = self.blocks.pop_front().expect("front exists");
            let seq = &self.committed.seq;
            if self.dsi.preempt {
                // Every block decided here was verified on exactly the committed prefix: a task
                // from a rejected branch can never reach this point.
                ensure!(
                    block.start == seq.len() && block.tokens[..seq.len()] == seq[..],
                    "DSI invariant broken: a block verified on another prefix reached a decision"
                );
            }
            let before = self.committed.generated();
            let candidates = &self.chain[..block.len];
            let decided = match &rows {
                Verified::Rows(rows) => self.committed.decide(self.verifier, candidates, &rows[..block.len]),
                Verified::Best(best) => self.committed.decide_best(candidates, &best[..block.len]),
            };
            self.m.record_round(block.len, decided);
            // A block's time: since the previous decision (drafting ran ahead meanwhile).
            let seconds = self.last_decision.elapsed().as_secs_f64();
            self.last_decision = Instant::now();
            self.policy.end_round(&RoundOutcome {
                drafted: block.len,
                accepted: decided.accepted,
                committed: self.committed.generated() - before,
                seconds,
                ngram: self.chain[0].ngram,
            });
            self.chain.drain(..block.len);
            if decided.corrected {
                if self.dsi.preempt {
                    self.preempt_all();
                } else {
                    // The broken variant: later blocks (drafted after the rejected token) stay
                    // and are decided on as if their prefix were right.
                    let mut at = self.committed.seq.len();
                    for b in self.blocks.iter_mut() {
                        b.start = at;
                        at += b.len;
                    }
                }
                // The drafter's cache is valid up to the token before the correction.
                self.drafter.rollback(self.committed.seq.len() - 1);
            }
        }
        Ok(())
    }

    fn run(&mut self, replies: &mpsc::Receiver<Reply>) -> Result<()> {
        loop {
            while let Ok(r) = replies.try_recv() {
                self.on_reply(r)?;
            }
            self.decide()?;
            if self.committed.finished {
                self.preempt_all();
                return Ok(());
            }
            self.submit_pending()?;
            if !self.chain_ended() && !self.unsubmitted() {
                self.draft_block()?;
                self.submit_pending()?;
                continue;
            }
            let r = replies.recv().map_err(|_| anyhow!("every target worker is gone"))?;
            self.on_reply(r)?;
        }
    }
}

/// DSI decoding of `prompt` with `dsi.servers` target workers: worker `w` verifies on
/// `targets[w]` (the same target, shared or loaded on one device per worker: `specx decode
/// --method dsi --devices cpu,wgpu:0`; the decisions use the logits each worker returns, on
/// the host, or each row's greedy token where nothing else is read). Lossless as [`super::generate_speculative`], and token for token the same
/// output for the same seed: greedy output equals the target's greedy output, sampled output
/// is distributed as the target's.
#[allow(clippy::too_many_arguments)]
pub fn generate_dsi(
    targets: &[&Transformer],
    drafter: &mut dyn Drafter,
    policy: &mut dyn StopPolicy,
    verifier: &mut dyn Verifier,
    prompt: &[u32],
    cfg: &SpecConfig,
    dsi: &DsiConfig,
    eos: &[u32],
) -> Result<DsiGeneration> {
    ensure!(!prompt.is_empty(), "the prompt is empty");
    ensure!(
        dsi.servers >= 1 && dsi.lookahead >= 1,
        "DSI needs at least one target server and a lookahead of at least 1"
    );
    ensure!(
        targets.len() == dsi.servers,
        "DSI with {} target workers got {} targets (one per worker)",
        dsi.servers,
        targets.len()
    );
    let t0 = Instant::now();
    let mut stats = DsiStats { worker_busy_s: vec![0.0; dsi.servers], ..Default::default() };
    if cfg.max_new_tokens == 0 {
        return Ok(DsiGeneration {
            generation: Generation { tokens: Vec::new(), metrics: RequestMetrics::default() },
            stats,
        });
    }
    let (m, tokens) = std::thread::scope(|scope| -> Result<(RequestMetrics, Vec<u32>)> {
        let (reply_tx, reply_rx) = mpsc::channel();
        let mut task_txs = Vec::with_capacity(dsi.servers);
        // As in the sequential scheduler: the workers return greedy tokens, not rows, where
        // nothing reads the target's scores.
        let best_only =
            verifier.decides_by_argmax(&cfg.sampling) && !policy.reads_target() && drafter.feature_tap().is_none();
        for (w, &target) in targets.iter().enumerate() {
            let (tx, rx) = mpsc::channel();
            let replies = reply_tx.clone();
            let tap = drafter.feature_tap();
            std::thread::Builder::new()
                .name(format!("dsi-target-{w}"))
                .spawn_scoped(scope, move || worker_loop(target, w, tap, best_only, rx, replies))?;
            task_txs.push(tx);
        }
        drop(reply_tx);
        policy.begin_request();
        let committed = Committed::new(prompt, cfg, eos, &*verifier);
        let mut c = Coordinator {
            drafter,
            policy,
            verifier,
            dsi,
            committed,
            chain: Vec::new(),
            blocks: VecDeque::new(),
            task_txs,
            free: vec![true; dsi.servers],
            worker_tokens: (0..dsi.servers).map(|_| Arc::default()).collect(),
            next_id: 0,
            last_decision: Instant::now(),
            m: RequestMetrics::default(),
            stats: std::mem::take(&mut stats),
            spans: Vec::new(),
        };
        let outcome = c.run(&reply_rx);
        // Closing the task channels lets the workers finish (preempted tasks stop between
        // layers); the scope joins them.
        c.task_txs.clear();
        // Late replies: with every block gone a result counts as stale, a preemption as
        // preempted; a worker failing after the generation ended changes nothing.
        for r in reply_rx.iter() {
            let _ = c.on_reply(r);
        }
        outcome?;
        c.stats.concurrent_s = concurrent_seconds(&c.spans);
        stats = c.stats;
        Ok((c.m, c.committed.tokens().to_vec()))
    })?;
    let mut m = m;
    m.n_generated = tokens.len();
    m.total_time = t0.elapsed();
    Ok(DsiGeneration { generation: Generation { tokens, metrics: m }, stats })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lookahead_follows_equation_1() {
        // Drafter 5% of the target, SP 4: k = 5 (ceil(1 / (5 x 0.05)) = 4), the paper's example.
        assert_eq!(lookahead_for(4, 1.0, 0.05), 5);
        assert_eq!(lookahead_for(7, 1.0, 0.1), 2);
        assert_eq!(lookahead_for(1, 30.0, 6.0), 5);
        assert_eq!(lookahead_for(100, 1.0, 0.5), 1);
    }

    /// The turns of a conversation add their counters, worker by worker, whichever turn saw
    /// more workers.
    #[test]
    fn stats_add_worker_by_worker() {
        let mut a =
            DsiStats { tasks: 3, preempted: 1, stale: 0, waits: 2, worker_busy_s: vec![1.0], concurrent_s: 0.25 };
        a.add(&DsiStats {
            tasks: 4,
            preempted: 0,
            stale: 1,
            waits: 1,
            worker_busy_s: vec![0.5, 2.0],
            concurrent_s: 0.5,
        });
        assert_eq!(
            a,
            DsiStats { tasks: 7, preempted: 1, stale: 1, waits: 3, worker_busy_s: vec![1.5, 2.0], concurrent_s: 0.75 }
        );
    }

    /// Time covered by two spans at once: overlaps counted once, touching spans not at all.
    #[test]
    fn concurrent_time_is_where_spans_overlap() {
        let t0 = Instant::now();
        let at = |ms: u64| t0 + Duration::from_millis(ms);
        assert_eq!(concurrent_seconds(&[]), 0.0);
        // Worker 0: 0-10, 20-30; worker 1: 5-25 (overlaps 5 + 5 ms); worker 2: 30-40 (touches).
        let spans = [(at(0), at(10)), (at(20), at(30)), (at(5), at(25)), (at(30), at(40))];
        assert!((concurrent_seconds(&spans) - 0.010).abs() < 1e-9);
        // Three at once count once.
        let three = [(at(0), at(10)), (at(0), at(10)), (at(0), at(10))];
        assert!((concurrent_seconds(&three) - 0.010).abs() < 1e-9);
        assert_eq!(concurrent_seconds(&[(at(0), at(10)), (at(10), at(20))]), 0.0);
    }
}
