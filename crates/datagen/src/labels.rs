//! The acceptance label of one response position (SpecDec++ §4.4) and the statistics a run
//! reports about its labels.

use rand::rngs::StdRng;
use serde::{Deserialize, Serialize};
use specx_decoder::SamplingConfig;
use specx_decoder::sampling::{argmax, sample_from};

/// One labelled response position: the target wrote `x`; the draft, teacher-forced on the
/// same prefix, drew `y` from its warped distribution q; `label = min(1, p(y) / q(y))` with p
/// the target's warped distribution, i.e. the probability that the verifier accepts `y`.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct PositionLabel {
    pub x: u32,
    pub y: u32,
    /// ln p(y) and ln q(y) under the label warping (`-inf` where a cut removed y from p).
    pub log_p: f64,
    pub log_q: f64,
    pub label: f64,
    /// Whether the draft's greedy choice equals the target's token (the DSI estimate's match).
    pub greedy_match: bool,
}

/// Computes the label at one position from the target's and the draft's logits there.
/// `y` is drawn from the warped q with `rng` (the argmax when `warping` is greedy).
pub fn label_position(
    x: u32,
    target_logits: &[f32],
    draft_logits: &[f32],
    warping: &SamplingConfig,
    rng: &mut StdRng,
) -> PositionLabel {
    let p = warping.warp(target_logits);
    let q = warping.warp(draft_logits);
    let y = if warping.is_greedy() { argmax(draft_logits) } else { sample_from(&q.probs, rng) };
    let log_p = p.log_prob(target_logits, y);
    let log_q = q.log_prob(draft_logits, y);
    let label = (log_p - log_q).exp().min(1.0);
    PositionLabel { x, y, log_p, log_q, label, greedy_match: argmax(draft_logits) == x }
}

/// Number of histogram bins in [0, 1); a label of exactly 1 has its own bin after them.
pub const HIST_BINS: usize = 10;

/// Running statistics of labels, mergeable across shards.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct LabelStats {
    pub prompts: u64,
    pub response_tokens: u64,
    /// Rows that carry a training signal (Z came from Y), over all mixing draws.
    pub labelled_rows: u64,
    pub label_sum: f64,
    /// Counts of labels in [i/10, (i+1)/10) for i < 10, and of labels == 1 at index 10.
    pub label_hist: Vec<u64>,
    /// Positions where the draft's greedy token matched the target's, and where it did not.
    pub greedy_matches: u64,
    pub greedy_mismatches: u64,
    /// Sum over prompts of the length of the initial run of greedy matches.
    pub prefix_match_sum: u64,
}

impl Default for LabelStats {
    fn default() -> Self {
        Self {
            prompts: 0,
            response_tokens: 0,
            labelled_rows: 0,
            label_sum: 0.0,
            label_hist: vec![0; HIST_BINS + 1],
            greedy_matches: 0,
            greedy_mismatches: 0,
            prefix_match_sum: 0,
        }
    }
}

impl LabelStats {
    /// Adds one prompt's response positions and its number of labelled rows.
    pub fn add_prompt(&mut self, positions: &[PositionLabel], labelled_rows: u64) {
        self.prompts += 1;
        self.response_tokens += positions.len() as u64;
        self.labelled_rows += labelled_rows;
        for p in positions {
            self.label_sum += p.label;
            let bin =
                if p.label >= 1.0 { HIST_BINS } else { ((p.label * HIST_BINS as f64) as usize).min(HIST_BINS - 1) };
            self.label_hist[bin] += 1;
            if p.greedy_match {
                self.greedy_matches += 1;
            } else {
                self.greedy_mismatches += 1;
            }
        }
        self.prefix_match_sum += positions.iter().take_while(|p| p.greedy_match).count() as u64;
    }

    pub fn merge(&mut self, other: &LabelStats) {
        self.prompts += other.prompts;
        self.response_tokens += other.response_tokens;
        self.labelled_rows += other.labelled_rows;
        self.label_sum += other.label_sum;
        for (a, b) in self.label_hist.iter_mut().zip(&other.label_hist) {
            *a += b;
        }
        self.greedy_matches += other.greedy_matches;
        self.greedy_mismatches += other.greedy_mismatches;
        self.prefix_match_sum += other.prefix_match_sum;
    }

    /// Mean acceptance label over response positions.
    pub fn mean_label(&self) -> f64 {
        self.label_sum / self.response_tokens.max(1) as f64
    }

    /// Mean length of a run of greedy matches ended by a mismatch (matches / mismatches).
    pub fn mean_match_run(&self) -> f64 {
        self.greedy_matches as f64 / self.greedy_mismatches.max(1) as f64
    }

    /// The DSI paper's acceptance-rate estimate `a = 1 - 1/(1 + n)` (App. F.2) with `n` the
    /// mean exact-match run length: the geometric fit to the runs of greedy matches. Over every
    /// run this equals the match rate; [`LabelStats::dsi_prefix_acceptance`] uses only each
    /// prompt's first run, as the paper's independent generations do.
    pub fn dsi_acceptance(&self) -> f64 {
        1.0 - 1.0 / (1.0 + self.mean_match_run())
    }

    /// `1 - 1/(1 + n)` with `n` the mean initial exact-match length per prompt.
    pub fn dsi_prefix_acceptance(&self) -> f64 {
        let n = self.prefix_match_sum as f64 / self.prompts.max(1) as f64;
        1.0 - 1.0 / (1.0 + n)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::SeedableRng;

    fn softmax(l: &[f32]) -> Vec<f64> {
        let z: f64 = l.iter().map(|&x| (x as f64).exp()).sum();
        l.iter().map(|&x| (x as f64).exp() / z).collect()
    }

    #[test]
    fn label_is_min_one_of_the_ratio_and_y_follows_q() {
        let p_logits = [2.0f32, 0.5, -1.0, 0.0];
        let q_logits = [0.0f32, 1.5, 0.2, -0.5];
        let (p, q) = (softmax(&p_logits), softmax(&q_logits));
        let warping = SamplingConfig { temperature: 1.0, top_k: None, top_p: None };
        let mut rng = StdRng::seed_from_u64(1);
        let mut counts = [0usize; 4];
        for _ in 0..20_000 {
            let l = label_position(0, &p_logits, &q_logits, &warping, &mut rng);
            let y = l.y as usize;
            counts[y] += 1;
            assert!((l.label - (p[y] / q[y]).min(1.0)).abs() < 1e-6);
            assert!((l.log_p - p[y].ln()).abs() < 1e-6 && (l.log_q - q[y].ln()).abs() < 1e-6);
            assert!(!l.greedy_match); // draft argmax 1, target token 0
        }
        for (c, qy) in counts.iter().zip(&q) {
            // 20k draws: standard error <= 0.0036; 5 sigma.
            assert!((*c as f64 / 20_000.0 - qy).abs() < 0.018, "{counts:?} vs {q:?}");
        }
    }

    #[test]
    fn greedy_labels_are_exact_match() {
        let mut rng = StdRng::seed_from_u64(1);
        let g = SamplingConfig::greedy();
        let same = label_position(1, &[0.0, 3.0, 1.0], &[0.0, 2.0, 1.0], &g, &mut rng);
        assert_eq!((same.y, same.label, same.greedy_match), (1, 1.0, true));
        let differ = label_position(1, &[0.0, 3.0, 1.0], &[0.0, 1.0, 2.0], &g, &mut rng);
        assert_eq!((differ.y, differ.label), (2, 0.0));
    }

    #[test]
    fn stats_histogram_and_dsi_estimate() {
        let pos = |label: f64, m: bool| PositionLabel { x: 0, y: 0, log_p: 0.0, log_q: 0.0, label, greedy_match: m };
        let mut s = LabelStats::default();
        // matches: T T F T T T F T -> 6 matches, 2 mismatches, first run 2.
        let flags = [true, true, false, true, true, true, false, true];
        let labels = [1.0, 0.95, 0.05, 1.0, 0.5, 0.999, 0.0, 1.0];
        s.add_prompt(&flags.iter().zip(labels).map(|(&m, l)| pos(l, m)).collect::<Vec<_>>(), 7);
        assert_eq!(s.label_hist, vec![2, 0, 0, 0, 0, 1, 0, 0, 0, 2, 3]);
        assert_eq!((s.mean_match_run(), s.dsi_acceptance()), (3.0, 0.75));
        assert!((s.dsi_prefix_acceptance() - 2.0 / 3.0).abs() < 1e-12);
        let mut t = LabelStats::default();
        t.merge(&s);
        t.merge(&s);
        assert_eq!((t.prompts, t.labelled_rows, t.label_hist[10]), (2, 14, 6));
        assert!((t.mean_label() - s.mean_label()).abs() < 1e-12);
    }
}
