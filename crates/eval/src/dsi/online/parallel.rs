//! DSI's run in the online simulator: a drafter thread and `servers` target threads sharing a
//! LIFO queue of verification tasks, with preemption when a rejection ends a segment (the
//! semantics are in the parent module's docs).

use super::{Acceptance, Compat, Latencies, SimRun, Span, SpanKind, run_from, secs};
use std::sync::{Condvar, Mutex, MutexGuard};
use std::time::Instant;

/// A verification task: `d` drafts after `p` committed tokens, in segment `segment`.
#[derive(Clone, Copy, Debug)]
struct Task {
    segment: usize,
    p: usize,
    d: usize,
}

/// What a finished verification means.
enum Outcome {
    /// All drafts accepted; the run goes on.
    Accepted,
    /// A rejection: the next segment starts after `next` committed tokens.
    Rejection { next: usize },
    /// The run has its tokens.
    Done { tokens: usize },
}

struct State {
    segment: usize,
    /// Committed tokens at the start of the current segment.
    p: usize,
    done: Option<(Instant, usize)>,
    /// The LIFO queue.
    queue: Vec<Task>,
    /// Tokens in each server's cache (row costs).
    cached: Vec<usize>,
    used: Vec<bool>,
    run: SimRun,
}

struct Shared<'a> {
    state: Mutex<State>,
    cv: Condvar,
    lat: &'a Latencies,
    t0: Instant,
    tokens: usize,
    acc: Acceptance<'a>,
    compat: Compat,
}

impl Shared<'_> {
    fn now(&self) -> f64 {
        self.t0.elapsed().as_secs_f64()
    }

    /// Sleeps until `deadline` unless the run finishes or segment `segment` (if given) ends
    /// first; returns the guard and whether the wait ran to its deadline.
    fn wait<'g>(
        &self,
        mut g: MutexGuard<'g, State>,
        deadline: Instant,
        segment: Option<usize>,
    ) -> (MutexGuard<'g, State>, bool) {
        loop {
            if g.done.is_some() || segment.is_some_and(|s| g.segment != s) {
                return (g, false);
            }
            let now = Instant::now();
            if now >= deadline {
                return (g, true);
            }
            g = self.cv.wait_timeout(g, deadline - now).expect("simulator lock").0;
        }
    }

    fn outcome(&self, t: Task) -> Outcome {
        match (self.compat, self.acc) {
            (Compat::Fixed, Acceptance::Bits(bits)) => {
                let n = run_from(bits, t.p, self.tokens);
                if n <= t.d {
                    let next = t.p + n + 1;
                    if next >= self.tokens {
                        Outcome::Done { tokens: self.tokens }
                    } else {
                        Outcome::Rejection { next }
                    }
                } else if t.p + t.d + 1 >= self.tokens {
                    Outcome::Done { tokens: self.tokens }
                } else {
                    Outcome::Accepted
                }
            }
            (Compat::Reference, Acceptance::Runs(runs)) => {
                let correct = runs[t.segment.min(runs.len() - 1)];
                if correct < t.d {
                    Outcome::Rejection { next: t.p + correct }
                } else if t.p + correct > self.tokens {
                    Outcome::Done { tokens: self.tokens }
                } else {
                    Outcome::Accepted
                }
            }
            _ => panic!("simulate_dsi: fixed semantics needs per-position bits, reference semantics per-segment runs"),
        }
    }

    fn server(&self, i: usize) {
        let mut g = self.state.lock().expect("simulator lock");
        if self.compat == Compat::Fixed {
            // Every server prefills the prompt as the run starts (it is idle and the prompt is
            // known); the prefill yields the target's first token, so it is segment 0's
            // 0-draft task. The reference instead charges TTFT to each server's first task.
            let start = self.now();
            let (g2, _) = self.wait(g, Instant::now() + secs(self.lat.target_ttft), None);
            g = g2;
            g.used[i] = true;
            let end = self.now();
            g.run.busy_s[i] += end - start;
            g.run.spans.push(Span { lane: 1 + i, start_s: start, end_s: end, kind: SpanKind::Prefill });
            if g.done.is_none() && g.segment == 0 && self.apply(&mut g, self.outcome(Task { segment: 0, p: 0, d: 0 })) {
                return;
            }
        }
        loop {
            if g.done.is_some() {
                return;
            }
            let Some(t) = g.queue.pop() else {
                g = self.cv.wait(g).expect("simulator lock");
                continue;
            };
            if t.segment != g.segment {
                continue; // cancelled while queued (counted when its segment ended)
            }
            // Row cost: the tokens this server's cache lacks, at least one.
            let need = t.p + t.d;
            let rows = need.saturating_sub(g.cached[i]).max(1);
            let s = if g.used[i] { self.lat.target(rows) } else { self.lat.target_ttft };
            g.used[i] = true;
            g.run.started += 1;
            let start = self.now();
            let (g2, finished) = self.wait(g, Instant::now() + secs(s), Some(t.segment));
            g = g2;
            let end = self.now();
            g.run.busy_s[i] += end - start;
            if !finished {
                if g.done.is_none() {
                    g.run.preempted += 1;
                }
                g.run.spans.push(Span { lane: 1 + i, start_s: start, end_s: end, kind: SpanKind::Preempted });
                continue;
            }
            g.cached[i] = need;
            let outcome = self.outcome(t);
            let kind =
                if matches!(outcome, Outcome::Rejection { .. }) { SpanKind::Rejection } else { SpanKind::Accepted };
            g.run.spans.push(Span { lane: 1 + i, start_s: start, end_s: end, kind });
            if self.apply(&mut g, outcome) {
                return;
            }
        }
    }

    /// Applies the outcome of a finished verification of the current segment; true when the
    /// run is done.
    fn apply(&self, g: &mut MutexGuard<State>, outcome: Outcome) -> bool {
        match outcome {
            Outcome::Accepted => false,
            Outcome::Rejection { next } => {
                let queued = g.queue.len();
                g.run.preempted += queued;
                g.queue.clear();
                g.segment += 1;
                g.p = next;
                g.run.segments += 1;
                // Caches keep the committed prefix: everything before the rejected token.
                let keep = next.saturating_sub(1);
                for c in g.cached.iter_mut() {
                    *c = (*c).min(keep);
                }
                self.cv.notify_all();
                false
            }
            Outcome::Done { tokens } => {
                g.done = Some((Instant::now(), tokens));
                self.cv.notify_all();
                true
            }
        }
    }

    fn submit(&self, g: &mut MutexGuard<State>, t: Task) {
        g.queue.push(t);
        g.run.tasks += 1;
        let q = g.queue.len();
        g.run.max_queue = g.run.max_queue.max(q);
        self.cv.notify_all();
    }

    fn drafter(&self, k: usize) {
        let k = k.max(1);
        let mut first = true;
        let mut g = self.state.lock().expect("simulator lock");
        while g.done.is_none() {
            let (segment, p) = (g.segment, g.p);
            // Each segment's target-only task (fixed semantics: segment 0's is the prefill).
            if !(segment == 0 && self.compat == Compat::Fixed) {
                self.submit(&mut g, Task { segment, p, d: 0 });
            }
            // Fixed: no drafts past the last position. Reference: drafts until preempted.
            let max_d = match self.compat {
                Compat::Fixed => self.tokens.saturating_sub(p + 1),
                Compat::Reference => usize::MAX,
            };
            let mut d = 0;
            while d < max_d {
                let s = if first { self.lat.draft_ttft } else { self.lat.draft_tpot };
                first = false;
                let start = self.now();
                g.run.draft_forwards += 1;
                let (g2, finished) = self.wait(g, Instant::now() + secs(s), Some(segment));
                g = g2;
                let kind = if finished { SpanKind::Draft } else { SpanKind::DraftPreempted };
                g.run.spans.push(Span { lane: 0, start_s: start, end_s: self.now(), kind });
                if !finished {
                    break;
                }
                d += 1;
                if d % k == 0 || (d == max_d && self.compat == Compat::Fixed) {
                    self.submit(&mut g, Task { segment, p, d });
                }
            }
            // Nothing left to draft in this segment: wait for its end.
            while g.done.is_none() && g.segment == segment {
                g = self.cv.wait(g).expect("simulator lock");
            }
        }
    }
}

/// DSI with lookahead `k` on `servers` target threads (LIFO queue).
pub fn simulate_dsi(
    lat: &Latencies,
    tokens: usize,
    k: usize,
    servers: usize,
    acc: Acceptance,
    compat: Compat,
) -> SimRun {
    assert!(servers >= 1, "DSI needs a target server");
    let shared = Shared {
        state: Mutex::new(State {
            segment: 0,
            p: 0,
            done: None,
            queue: Vec::new(),
            cached: vec![0; servers],
            used: vec![false; servers],
            run: SimRun { busy_s: vec![0.0; servers], ..Default::default() },
        }),
        cv: Condvar::new(),
        lat,
        t0: Instant::now(),
        tokens,
        acc,
        compat,
    };
    std::thread::scope(|s| {
        for i in 0..servers {
            let sh = &shared;
            s.spawn(move || sh.server(i));
        }
        shared.drafter(k);
        shared.cv.notify_all();
    });
    let st = shared.state.into_inner().expect("simulator lock");
    let (end, tokens) = st.done.expect("the run finished");
    let mut run = st.run;
    run.wall_s = (end - shared.t0).as_secs_f64();
    run.tokens = tokens;
    run.segments += 1;
    run
}
