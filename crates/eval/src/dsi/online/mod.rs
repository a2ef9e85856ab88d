//! DSI's online simulator (paper §4 / Table 2 and the reference repository's
//! `dsi/online/simul`): real threads, a sleep for every forward, preemption, a LIFO task queue
//! on `servers` target threads. What it measures that the offline simulator cannot: thread
//! wake-up, queueing and preemption latency, and first-call prefill costs.
//!
//! Latencies (seconds, already scaled): the first draft forward costs the draft's TTFT, later
//! ones its TPOT; a target server's prefill costs the target's TTFT (fixed semantics: every
//! server prefills the prompt as the run starts; reference: a server's first task costs TTFT),
//! other forwards its TPOT, or, with a row curve (`target_rows`), TPOT times the curve at the
//! forward's new rows (the tokens its cache lacks: the CPU cost model, where a verification of
//! r rows costs more than one row).
//!
//! Two semantics:
//! - [`Compat::Fixed`] (default): acceptance is per position (`bits[j]`: the draft's proposal
//!   for output position j equals the target's token), the same bits for SI and DSI (common
//!   random numbers, or a real greedy trace's matches). A verification of `d` drafts after `p`
//!   committed tokens also yields the target's token at `p + d`, so it reveals the first
//!   mismatch at `p + n` whenever `n <= d`; the segment restarts at `p + n + 1` (the
//!   correction counts). Every segment starts with a 0-draft task (the target-only path that
//!   makes DSI never slower than non-SI; the first segment's is the servers' prefill, which
//!   all of them start at once), then one task per `lookahead` drafts. SI drafts
//!   `min(k, left - 1)` tokens, verifies synchronously and gains the accepted drafts plus one.
//!   Non-SI runs one target forward per token (TTFT, then TPOT).
//! - [`Compat::Reference`]: the reference code with its three biases kept. Acceptance is a
//!   number of correct drafts per segment; SI also runs a synchronous 0-draft target call at
//!   the start of every segment (one extra target forward per segment); a rejection commits the
//!   correct drafts only (the correction token is not counted); non-SI is costed as TTFT for
//!   every token (arithmetic, not simulated).

mod parallel;

pub use crate::common::profile_data::Latencies;
pub use parallel::simulate_dsi;
use serde::{Deserialize, Serialize};
use std::time::{Duration, Instant};

/// Which semantics the simulator follows (module docs).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, clap::ValueEnum)]
#[serde(rename_all = "lowercase")]
pub enum Compat {
    Fixed,
    Reference,
}

impl Compat {
    pub fn name(self) -> &'static str {
        match self {
            Self::Fixed => "fixed",
            Self::Reference => "reference",
        }
    }
}

/// What the target accepts, in the form each semantics needs.
#[derive(Clone, Copy, Debug)]
pub enum Acceptance<'a> {
    /// Fixed semantics: per output position, whether the draft's proposal is the target's.
    Bits(&'a [bool]),
    /// Reference semantics: correct drafts of each segment (the reference draws capped
    /// geometric numbers); the last one is reused if a run needs more segments.
    Runs(&'a [usize]),
}

/// One bar of a timeline: lane 0 is the drafter, lane `1 + i` target server `i`.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Span {
    pub lane: usize,
    pub start_s: f64,
    pub end_s: f64,
    pub kind: SpanKind,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum SpanKind {
    /// A target server's prefill of the prompt (fixed semantics: all servers at the start).
    Prefill,
    /// A draft forward.
    Draft,
    /// A draft forward cut short by a rejection.
    DraftPreempted,
    /// A verification whose drafts were all accepted.
    Accepted,
    /// A verification that revealed a rejection (its segment ends).
    Rejection,
    /// A verification preempted (or finished too late) because an earlier rejection made it moot.
    Preempted,
}

/// One simulated generation.
#[derive(Clone, Debug, Default, Serialize)]
pub struct SimRun {
    pub wall_s: f64,
    /// Tokens the run committed (the target's output length it simulated).
    pub tokens: usize,
    /// Rejections + 1.
    pub segments: usize,
    /// Verification tasks submitted, started, preempted (while running or queued), and the
    /// most tasks waiting in the queue at once.
    pub tasks: usize,
    pub started: usize,
    pub preempted: usize,
    pub max_queue: usize,
    /// Busy seconds of each target server.
    pub busy_s: Vec<f64>,
    pub draft_forwards: usize,
    #[serde(skip)]
    pub spans: Vec<Span>,
}

/// Leading matches from position `p` (at most up to `end`).
fn run_from(bits: &[bool], p: usize, end: usize) -> usize {
    bits[p.min(bits.len())..end.min(bits.len())].iter().take_while(|&&b| b).count()
}

fn secs(s: f64) -> Duration {
    Duration::from_secs_f64(s.max(0.0))
}

/// Non-SI: one target forward per token. Fixed semantics sleeps TTFT then TPOT per token;
/// the reference's TTFT x tokens is arithmetic.
pub fn simulate_nonsi(lat: &Latencies, tokens: usize, compat: Compat) -> SimRun {
    let wall_s = match compat {
        Compat::Reference => lat.target_ttft * tokens as f64,
        Compat::Fixed => {
            let t0 = Instant::now();
            for i in 0..tokens {
                std::thread::sleep(secs(if i == 0 { lat.target_ttft } else { lat.target_tpot }));
            }
            t0.elapsed().as_secs_f64()
        }
    };
    SimRun {
        wall_s,
        tokens,
        segments: tokens,
        tasks: tokens,
        started: tokens,
        busy_s: vec![wall_s],
        ..Default::default()
    }
}

/// SI with lookahead `k`: draft, then verify on one target, in turn.
pub fn simulate_si(lat: &Latencies, tokens: usize, k: usize, acc: Acceptance, compat: Compat) -> SimRun {
    let t0 = Instant::now();
    let now = |t0: Instant| t0.elapsed().as_secs_f64();
    let mut r = SimRun { busy_s: vec![0.0], ..Default::default() };
    let (mut first_draft, mut first_target) = (true, true);
    let sleep_as = |lane: usize, s: f64, kind: SpanKind, r: &mut SimRun| {
        let start = now(t0);
        std::thread::sleep(secs(s));
        let end = now(t0);
        if lane == 1 {
            r.busy_s[0] += end - start;
        }
        r.spans.push(Span { lane, start_s: start, end_s: end, kind });
    };
    let mut draft = |r: &mut SimRun| {
        let s = if first_draft { lat.draft_ttft } else { lat.draft_tpot };
        first_draft = false;
        r.draft_forwards += 1;
        sleep_as(0, s, SpanKind::Draft, r);
    };
    let mut target_s = |rows: usize| {
        let s = if first_target { lat.target_ttft } else { lat.target(rows) };
        first_target = false;
        s
    };
    match (compat, acc) {
        (Compat::Fixed, Acceptance::Bits(bits)) => {
            let mut p = 0;
            while p < tokens {
                let kk = k.min(tokens - 1 - p);
                for _ in 0..kk {
                    draft(&mut r);
                }
                let n = run_from(bits, p, p + kk);
                let kind = if n < kk { SpanKind::Rejection } else { SpanKind::Accepted };
                let s = target_s(kk + 1);
                r.tasks += 1;
                r.started += 1;
                sleep_as(1, s, kind, &mut r);
                if n < kk {
                    r.segments += 1;
                }
                p += n.min(kk) + 1;
            }
            r.tokens = p.min(tokens);
            r.segments += 1;
        }
        (Compat::Reference, Acceptance::Runs(runs)) => {
            // Segments: a synchronous 0-draft call, then a synchronous call every k drafts; a
            // call with more drafts than `correct` ends the segment with `correct` tokens.
            let mut total = 0;
            'segments: for seg in 0.. {
                let correct = runs[seg.min(runs.len() - 1)];
                r.segments += 1;
                let s = target_s(1);
                r.tasks += 1;
                r.started += 1;
                sleep_as(1, s, SpanKind::Accepted, &mut r);
                if total + correct > tokens {
                    break 'segments;
                }
                let mut d = 0;
                loop {
                    draft(&mut r);
                    d += 1;
                    if d % k.max(1) == 0 {
                        let s = target_s(1);
                        r.tasks += 1;
                        r.started += 1;
                        if correct < d {
                            sleep_as(1, s, SpanKind::Rejection, &mut r);
                            total += correct;
                            continue 'segments;
                        }
                        sleep_as(1, s, SpanKind::Accepted, &mut r);
                        if total + correct > tokens {
                            break 'segments;
                        }
                    }
                }
            }
            r.tokens = tokens;
        }
        _ => panic!("simulate_si: fixed semantics needs per-position bits, reference semantics per-segment runs"),
    }
    r.wall_s = now(t0);
    r
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The simulator measures real sleeps on real threads, so its wall times are asserted with
    /// stated slack: a lower bound is exact (a sleep never ends early), an upper bound allows
    /// the thread wake-ups a loaded 2-core machine adds (a few ms each). The tests that time
    /// runs hold this lock, so they never compete with each other for the cores.
    static TIMING: std::sync::Mutex<()> = std::sync::Mutex::new(());

    fn timing() -> std::sync::MutexGuard<'static, ()> {
        TIMING.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Latencies in milliseconds: large against thread wake-up (~0.1 ms idle, a few ms on a
    /// loaded machine), small enough for a fast test.
    fn lat(draft_ms: f64, target_ms: f64) -> Latencies {
        Latencies {
            draft_ttft: draft_ms * 1e-3,
            draft_tpot: draft_ms * 1e-3,
            target_ttft: target_ms * 1e-3,
            target_tpot: target_ms * 1e-3,
            target_rows: vec![],
        }
    }

    #[test]
    fn row_curve_interpolates_and_extrapolates() {
        let l = Latencies { target_rows: vec![1.0, 1.5, 2.0], ..lat(1.0, 10.0) };
        assert_eq!(l.target(1), 10e-3);
        assert!((l.target(2) - 15e-3).abs() < 1e-12);
        assert!((l.target(5) - 30e-3).abs() < 1e-12);
        assert_eq!(lat(1.0, 10.0).target(7), 10e-3);
    }

    #[test]
    fn si_fixed_costs_follow_the_position_bits() {
        let _t = timing();
        // 6 tokens, k = 2, bits: T T F T T T. Rounds: drafts 2 (both accepted) -> p 3;
        // drafts 2 at p = 3 (accepted) -> p 6. Two target forwards, four draft forwards.
        let bits = [true, true, false, true, true, true];
        let l = lat(2.0, 20.0);
        let r = simulate_si(&l, 6, 2, Acceptance::Bits(&bits), Compat::Fixed);
        assert_eq!((r.tasks, r.draft_forwards, r.tokens), (2, 4, 6));
        let expect = 4.0 * 2e-3 + 2.0 * 20e-3;
        // Slack: 2 target and 4 draft wake-ups on top of 48 ms of sleeps.
        assert!(r.wall_s >= expect && r.wall_s < expect + 0.05, "{} vs {expect}", r.wall_s);
        // A rejection on the first draft: each round gains one token.
        let bits = [false; 4];
        let r = simulate_si(&l, 4, 3, Acceptance::Bits(&bits), Compat::Fixed);
        assert_eq!((r.tasks, r.segments, r.tokens), (4, 4, 4));
    }

    #[test]
    fn dsi_fixed_hides_verification_behind_drafting() {
        let _t = timing();
        // Everything accepted, draft 2 ms, target 10 ms, k = 2, 4 servers: the drafter never
        // waits, so 20 tokens cost about 19 drafts plus one final verification.
        let bits = [true; 20];
        let l = lat(2.0, 10.0);
        let r = simulate_dsi(&l, 20, 2, 4, Acceptance::Bits(&bits), Compat::Fixed);
        let expect = 18.0 * 2e-3 + 10e-3;
        assert_eq!(r.tokens, 20);
        // The drafter's sleeps follow one another on its thread: an exact lower bound. Slack
        // above the expected critical path (18 drafts and the last verification): ~20 wake-ups.
        assert!(
            r.draft_forwards >= 18 && r.wall_s >= r.draft_forwards as f64 * 2e-3,
            "{} s for {} drafts",
            r.wall_s,
            r.draft_forwards
        );
        assert!(r.wall_s < expect + 0.05, "{} vs {expect}", r.wall_s);
        // SI sleeps through every draft and verification in turn (13 and 7 here, 96 ms), against
        // DSI's ~46 ms; DSI must keep most of that gap.
        let si = simulate_si(&l, 20, 2, Acceptance::Bits(&bits), Compat::Fixed);
        assert!(
            si.wall_s >= si.draft_forwards as f64 * 2e-3 + si.tasks as f64 * 10e-3,
            "SI {} s for {} drafts and {} verifications",
            si.wall_s,
            si.draft_forwards,
            si.tasks
        );
        assert!(r.wall_s < 0.75 * si.wall_s, "DSI {} vs SI {}", r.wall_s, si.wall_s);
    }

    #[test]
    fn dsi_fixed_is_not_slower_than_non_si_when_every_draft_is_wrong() {
        let _t = timing();
        // Every proposal wrong: the 0-draft task of each segment yields one token per target
        // forward, as non-SI; drafting is wasted but never waited for.
        let bits = [false; 12];
        let l = lat(4.0, 20.0);
        let dsi = simulate_dsi(&l, 12, 4, 3, Acceptance::Bits(&bits), Compat::Fixed);
        let nonsi = simulate_nonsi(&l, 12, Compat::Fixed);
        assert_eq!(dsi.segments, 12);
        assert!(dsi.wall_s < nonsi.wall_s * 1.3, "DSI {} vs non-SI {}", dsi.wall_s, nonsi.wall_s);
        assert!(dsi.preempted > 0, "draft-carrying tasks of rejected segments are preempted");
    }

    #[test]
    fn reference_mode_keeps_the_references_biases() {
        let l = lat(1.0, 10.0);
        // Non-SI: TTFT for every token, arithmetic.
        let l2 = Latencies { target_ttft: 50e-3, ..l.clone() };
        assert_eq!(simulate_nonsi(&l2, 10, Compat::Reference).wall_s, 0.5);
        // SI: with correct = 100 the first segment's 0-draft call already ends the run (the
        // reference stops when total + correct > tokens): one target forward.
        let r = simulate_si(&l, 20, 5, Acceptance::Runs(&[100]), Compat::Reference);
        assert_eq!((r.tasks, r.draft_forwards), (1, 0));
        // SI: correct = 2, k = 2, 6 tokens: each segment costs the extra 0-draft call, two
        // verifications (2 and 4 drafts) and four drafts, and gains 2 tokens (no correction);
        // segment 4 stops at its 0-draft call (6 + 2 > 6): 3 x 3 + 1 = 10 target calls.
        let r = simulate_si(&l, 6, 2, Acceptance::Runs(&[2]), Compat::Reference);
        assert_eq!((r.tasks, r.draft_forwards, r.segments), (10, 12, 4));
        // DSI under the reference semantics ends too, with the same segment structure.
        let r = simulate_dsi(&l, 6, 2, 4, Acceptance::Runs(&[2]), Compat::Reference);
        assert_eq!(r.segments, 4);
    }

    #[test]
    fn a_lifo_queue_serves_the_newest_task_first_when_servers_are_short() {
        let _t = timing();
        // One server, fast drafts: tasks pile up; the server takes the newest (most drafts).
        let bits = [true; 30];
        let l = lat(1.0, 8.0);
        let r = simulate_dsi(&l, 30, 1, 1, Acceptance::Bits(&bits), Compat::Fixed);
        assert!(r.max_queue >= 3, "queue {}", r.max_queue);
        assert_eq!(r.tokens, 30);
        // Far fewer forwards than tasks: the newest task covers the queued ones' drafts.
        assert!(r.started < r.tasks / 2, "{} started of {}", r.started, r.tasks);
    }
}
