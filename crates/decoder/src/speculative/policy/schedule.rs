//! Rules that choose a round's length from how earlier rounds went: HF transformers' dynamic
//! schedule and a bandit over K.

use super::{Decision, DraftStep, RoundOutcome, StopPolicy, stop_if};
use anyhow::Result;

/// HF transformers' `"heuristic"` schedule (`num_assistant_tokens_schedule`, the default before
/// Sep 2024 with `num_assistant_tokens` 5): draft K candidates; after a round whose every
/// candidate was accepted K += 2, else K = max(1, K - 1) (current code: "every" means the
/// round's actual length). K restarts at `initial` with each request (HF's
/// `"heuristic_transient"`; the persistent `"heuristic"` would make a replay depend on the
/// order of its units); `cap` bounds it (HF: only the length limit).
#[derive(Clone, Debug)]
pub struct DynamicK {
    pub initial: usize,
    pub cap: usize,
    k: usize,
}

impl DynamicK {
    pub fn new(initial: usize, cap: usize) -> Self {
        let initial = initial.clamp(1, cap.max(1));
        Self { initial, cap: cap.max(1), k: initial }
    }
}

impl StopPolicy for DynamicK {
    fn begin_request(&mut self) {
        self.k = self.initial;
    }
    fn decide(&mut self, step: &DraftStep) -> Result<Decision> {
        Ok(stop_if(step.index >= self.k))
    }
    fn reads_draft(&self) -> bool {
        false
    }
    fn end_round(&mut self, o: &RoundOutcome) {
        self.k = if o.drafted > 0 && o.accepted == o.drafted {
            (self.k + 2).min(self.cap)
        } else {
            self.k.saturating_sub(1).max(1)
        };
    }
    fn max_candidates(&self) -> usize {
        self.k
    }
}

/// A bandit over the round length (BanditSpec, arXiv 2505.15141; sail-sg/BanditSpec
/// `ucb_length_spec_generate`): each round drafts exactly the chosen arm's K; its reward is the
/// round's throughput (tokens committed per second). The first `2 n - 1` rounds visit the arms
/// in turn; then the arm maximising `mean + sqrt(w ln t / N)` is chosen, with `w = 6` and, as in
/// the reference code, `N` the total number of rounds (not the arm's own count, as textbook
/// UCB1 has it: the bonus is then the same for every arm and the choice greedy on the means).
/// State lives for one request.
#[derive(Clone, Debug)]
pub struct BanditK {
    pub arms: Vec<usize>,
    pub exploration: f64,
    counts: Vec<u64>,
    means: Vec<f64>,
    rounds: u64,
    current: usize,
}

impl BanditK {
    /// The reference code's arms and exploration weight.
    pub const ARMS: [usize; 4] = [1, 2, 3, 4];
    pub const EXPLORATION: f64 = 6.0;

    pub fn new(arms: Vec<usize>, exploration: f64) -> Self {
        assert!(!arms.is_empty() && arms.iter().all(|&k| k >= 1), "a bandit needs arms of at least one candidate");
        let n = arms.len();
        Self { arms, exploration, counts: vec![0; n], means: vec![0.0; n], rounds: 0, current: 0 }
    }

    fn choose(&self) -> usize {
        let n = self.arms.len() as u64;
        // Round t = rounds + 1 (1-based); the warm-up covers t < 2n.
        let t = self.rounds + 1;
        if t < 2 * n {
            return ((t - 1) % n) as usize;
        }
        let total: u64 = self.counts.iter().sum();
        let bonus = (self.exploration * (t as f64).ln() / total.max(1) as f64).sqrt();
        (0..self.arms.len())
            .max_by(|&a, &b| (self.means[a] + bonus).total_cmp(&(self.means[b] + bonus)).then(b.cmp(&a)))
            .expect("arms")
    }
}

impl StopPolicy for BanditK {
    fn begin_request(&mut self) {
        self.counts.iter_mut().for_each(|c| *c = 0);
        self.means.iter_mut().for_each(|m| *m = 0.0);
        self.rounds = 0;
        self.current = self.choose();
    }
    fn decide(&mut self, step: &DraftStep) -> Result<Decision> {
        Ok(stop_if(step.index >= self.arms[self.current]))
    }
    fn reads_draft(&self) -> bool {
        false
    }
    fn end_round(&mut self, o: &RoundOutcome) {
        let reward = if o.seconds > 0.0 { o.committed as f64 / o.seconds } else { 0.0 };
        let a = self.current;
        self.counts[a] += 1;
        self.means[a] += (reward - self.means[a]) / self.counts[a] as f64;
        self.rounds += 1;
        self.current = self.choose();
    }
    fn max_candidates(&self) -> usize {
        self.arms[self.current]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn outcome(drafted: usize, accepted: usize, seconds: f64) -> RoundOutcome {
        RoundOutcome { drafted, accepted, committed: accepted + 1, seconds, ngram: None }
    }

    #[test]
    fn dynamic_k_grows_by_two_and_shrinks_by_one() {
        let mut p = DynamicK::new(5, 9);
        p.begin_request();
        p.end_round(&outcome(5, 5, 1.0));
        assert_eq!(p.max_candidates(), 7);
        p.end_round(&outcome(7, 7, 1.0));
        assert_eq!(p.max_candidates(), 9, "capped");
        p.end_round(&outcome(9, 3, 1.0));
        assert_eq!(p.max_candidates(), 8);
        for _ in 0..20 {
            p.end_round(&outcome(1, 0, 1.0));
        }
        assert_eq!(p.max_candidates(), 1);
        p.begin_request();
        assert_eq!(p.max_candidates(), 5);
    }

    #[test]
    fn bandit_warms_up_in_turn_then_follows_the_best_mean() {
        let mut b = BanditK::new(vec![1, 2, 3, 4], 6.0);
        b.begin_request();
        let mut chosen = Vec::new();
        for _ in 0..12 {
            let k = b.max_candidates();
            chosen.push(k);
            // Arm 3 is the fastest: 10 tokens/s, the others 5.
            let secs = if k == 3 { 0.4 } else { 0.8 };
            b.end_round(&outcome(k, 3, secs));
        }
        assert_eq!(&chosen[..7], &[1, 2, 3, 4, 1, 2, 3]);
        assert!(chosen[7..].iter().all(|&k| k == 3), "{chosen:?}");
    }
}
